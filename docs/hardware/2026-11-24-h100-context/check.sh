#!/bin/bash
# Issue 17, item 2: the GPU memory of a CUDA context, per kind of program,
# alone and four at once, without and with MPS. Leaves the GPU as found
# (MPS told to quit). Output: JSON lines.
set -u
D=$(dirname "$0")
nvidia-smi --query-gpu=name,driver_version,memory.total,mig.mode.current,compute_mode --format=csv,noheader
run() {  # MODE
  for k in driver torch torch-blas cupy; do
    python3 "$D/ctx.py" "$1" "$k" 0
  done
  # Four at once, each holding its context while the others start.
  for i in 1 2 3 4; do python3 "$D/ctx.py" "$1-4" driver 3 & sleep 0.7; done; wait
  for i in 1 2 3 4; do python3 "$D/ctx.py" "$1-4" torch 4 & sleep 1.5; done; wait
}
run plain
export CUDA_MPS_PIPE_DIRECTORY=/tmp/ctxm/p CUDA_MPS_LOG_DIRECTORY=/tmp/ctxm/l
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
nvidia-cuda-mps-control -d
sleep 1
python3 "$D/ctx.py" mps-warmup driver 0 >/dev/null
echo "device used with the MPS server up, no client: $(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits) MiB"
nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader
run mps
echo quit | nvidia-cuda-mps-control
sleep 1
{ ps -eo pid,stat,args | grep '[n]vidia-cuda-mps' | grep -v ' Z' && echo "MPS still running"; } || true
