#!/bin/bash
# Issue 41, item 5: vetting the external suite (bench/gpu-external: NVIDIA's
# CUDA samples) before it enters a batch. Carries bench/gpu-external/cuda-samples
# (fetch.sh's copy). Builds it, then for every program: two runs alone (time,
# output, peak GPU memory), two copies of every program at once under an MPS
# daemon of this script's own (outputs compared with the runs alone), and a
# run under compute-sanitizer's memcheck at a small size.
#   OUT=DIR bash docs/hardware/2026-12-06-samples/smoke.sh
set -u
OUT=${OUT:?OUT}
B=$PWD/bench/gpu-external/cuda-samples/bin
nvidia-smi -L; nvidia-smi --query-gpu=name,mig.mode.current,compute_mode,memory.total,driver_version --format=csv,noheader
nvcc --version | tail -2; nproc; free -g | head -2
bash bench/gpu-external/build.sh 2>&1 | tee "$OUT/build.txt" | tail -12
declare -A ARGS=(
  [matrixMul]="-wA=4096 -hA=4096 -wB=4096 -hB=4096"
  [conjugateGradient]=""
  [FDTD3d]="--dimx=376 --dimy=376 --dimz=376 --timesteps=5"
  [BlackScholes]=""
  [jacobiCudaGraphs]=""
  [MonteCarloMultiGPU]=""
  [sortingNetworks]=""
  [binomialOptions]=""
)
declare -A SMALL=(
  [matrixMul]=""
  [FDTD3d]="--dimx=96 --dimy=96 --dimz=96 --timesteps=1"
)
progs="matrixMul conjugateGradient FDTD3d BlackScholes jacobiCudaGraphs MonteCarloMultiGPU sortingNetworks binomialOptions"
mkdir -p "$OUT/alone" "$OUT/mps" "$OUT/sanitizer"
# 1. Alone, twice each, GPU memory of compute processes sampled.
nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader,nounits -lms 200 >"$OUT/alone/apps.csv" &
SMI=$!
for t in 1 2; do
  for p in $progs; do
    [ -x "$B/$p" ] || continue
    s=$(date +%s.%N)
    (cd /tmp && timeout 120 "$B/$p" ${ARGS[$p]} >"$OUT/alone/$p.$t.out" 2>"$OUT/alone/$p.$t.err"); rc=$?
    e=$(date +%s.%N)
    echo "ALONE $p run $t rc $rc secs $(python3 -c "print(round($e - $s, 2))")" | tee -a "$OUT/alone/summary.txt"
  done
done
kill $SMI
# 2. Two copies of every program at once under MPS.
export CUDA_MPS_PIPE_DIRECTORY=/tmp/smk-mps-p CUDA_MPS_LOG_DIRECTORY=/tmp/smk-mps-l
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
nvidia-cuda-mps-control -d
s=$(date +%s.%N)
pids=()
for i in 1 2; do
  for p in $progs; do
    [ -x "$B/$p" ] || continue
    (cd /tmp && timeout 180 "$B/$p" ${ARGS[$p]} >"$OUT/mps/$p.$i.out" 2>"$OUT/mps/$p.$i.err"; echo "MPS $p copy $i rc $?" >>"$OUT/mps/summary.txt") &
    pids+=($!)
  done
done
wait "${pids[@]}"
e=$(date +%s.%N)
echo "MPS mix of ${#pids[@]} took $(python3 -c "print(round($e - $s, 2))") s" | tee -a "$OUT/mps/summary.txt"
sort "$OUT/mps/summary.txt"
echo quit | nvidia-cuda-mps-control
sleep 2
cp -r /tmp/smk-mps-l "$OUT/mps/log" 2>/dev/null
unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
# 3. memcheck at a small size, four at a time.
run_san() {
  local p=$1
  (cd /tmp && timeout 300 compute-sanitizer --tool memcheck "$B/$p" ${SMALL[$p]-${ARGS[$p]}} >"$OUT/sanitizer/$p.out" 2>&1)
  echo "SANITIZER $p rc $? $(grep -h 'ERROR SUMMARY' "$OUT/sanitizer/$p.out" | tail -1)" >>"$OUT/sanitizer/summary.txt"
}
n=0
for p in $progs; do
  [ -x "$B/$p" ] || continue
  run_san "$p" &
  n=$((n + 1)); [ $((n % 4)) = 0 ] && wait
done
wait
sort "$OUT/sanitizer/summary.txt"
{ ps -eo pid,stat,args | grep '[n]vidia-cuda-mps' | grep -v ' Z' && echo "MPS still running"; } || true
