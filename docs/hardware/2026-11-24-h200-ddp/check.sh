#!/bin/bash
# Issue 18, item 5 on a real multi-GPU machine: a --gres=gpu:N job (N: the
# machine's GPUs) runs a DDP training step with NCCL under torchrun, and a
# --gpus-per-task=1 -n N job runs it under srun, one GPU per task; a job
# asking for one GPU more than the machine has never runs. On a one-GPU
# machine the same checks run with N=1. gnoded uses real NVML (read-only:
# no MIG or compute-mode change). Carries dist/ (stripped gsched,
# gsched-shepherd, libgprobe.so). NVLink multicast stays off.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
B=$PWD/dist
H=$PWD/docs/hardware/2026-11-24-h200-ddp
exec > >(tee $OUT/check.log) 2>&1
set -x
uname -r; nvidia-smi -L
nvidia-smi --query-gpu=index,uuid,mig.mode.current,compute_mode,memory.total,driver_version --format=csv
nvidia-smi topo -m
python3 -c 'import torch; print(torch.__version__, torch.cuda.device_count(), torch.cuda.nccl.version())'
st=$(mktemp -d /tmp/gs.XXXX); chmod 755 $st
RUST_LOG=info $B/gsched up --state-dir $st/state --listen 127.0.0.1:7817 --node-name gpu1 --kill-wait 2 --heartbeat-interval 1 > $OUT/up.log 2>&1 &
up=$!
for i in $(seq 60); do curl -sf 127.0.0.1:7817/healthz | grep -q '"nodes_up":1' && break; sleep 0.5; done
export GSCHED_URL=http://127.0.0.1:7817
for c in sbatch sacct squeue srun scontrol; do ln -sf $B/gsched $st/$c; done
cp $H/ddp_step.py $st/; cd $st
curl -s $GSCHED_URL/api/v1/instances -H "Authorization: Bearer $($B/gsched token --quiet)" | python3 -m json.tool > $OUT/instances.json
cat $OUT/instances.json
wait_all() { for i in $(seq 240); do [ "$(./squeue -h | wc -l)" = 0 ] && return; sleep 1; done; echo "jobs still queued"; ./squeue; }
export PATH=$st:$PATH
N=$(nvidia-smi -L | grep -c '^GPU')
./sbatch -J ddp-torchrun --gres=gpu:$N -o torchrun.out --wrap "env | grep -E '^(CUDA_VISIBLE_DEVICES|SLURM_JOB_GPUS|SLURM_GPUS_ON_NODE|GPU_DEVICE_ORDINAL)=' | sort; NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT python3 -m torch.distributed.run --standalone --nproc_per_node=$N ddp_step.py 2>&1 | grep -E '^rank|NVLS|Channel 00/0 :|NCCL version' | head -40"
wait_all
./sbatch -J ddp-srun --gpus-per-task=1 -n $N -o srun.out --wrap "MASTER_PORT=29512 srun python3 ddp_step.py 2>&1 | sort"
wait_all
./sbatch -J one-gpu --gres=gpu:1 -o one.out --wrap "nvidia-smi -L; python3 -c 'import torch; print(torch.cuda.device_count())'"
wait_all
./sbatch -J too-many --gres=gpu:$((N+1)) --wrap true
sleep 3; ./squeue -h -o "%i %j %t %r"; ./scontrol show job 4 | grep -E "JobState|TresPerNode"
./sacct -j 1,2,3,4 --format JobID,JobName,State,ExitCode,Elapsed
./scontrol show job 1 | grep -E "TresPerNode|JobState|NumCPUs"
for f in torchrun srun one; do echo "== $f"; cat $f.out; done
kill $up; wait $up
grep -iE "error|panic" $OUT/up.log | head -20
