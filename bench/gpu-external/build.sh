#!/bin/bash
# Builds the external suite (fetch.sh) with nvcc on the GPU machine, into
# bench/gpu-external/rodinia/bin. The programs are built as their own
# makefiles build them, with their output switched on (so a run can be
# checked against a run alone) and for this GPU's architecture.
# cudaThreadSynchronize, gone from recent CUDA, is defined as its
# successor on the command line; no source is changed.
#   bench/gpu-external/build.sh
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
R=$HERE/rodinia/cuda
BIN=$HERE/rodinia/bin
mkdir -p "$BIN"
cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)
ARCH=(-arch "sm_${cap:-90}")
SHIM=(-DcudaThreadSynchronize=cudaDeviceSynchronize)
ok=0
build() {
  local name=$1; shift
  if (set -e; "$@") >"$BIN/$name.build.log" 2>&1; then
    ok=$((ok + 1)); echo "built $name"
  else
    echo "FAILED $name:"; tail -15 "$BIN/$name.build.log"
  fi
}
lava() {
  local o; o=$(mktemp -d)
  gcc -O3 -DOUTPUT -c "$R/lavaMD/main.c" -o "$o/main.o"
  gcc -O3 -c "$R/lavaMD/util/num/num.c" -o "$o/num.o"
  gcc -O3 -c "$R/lavaMD/util/timer/timer.c" -o "$o/timer.o"
  nvcc -O3 "${ARCH[@]}" "${SHIM[@]}" -c "$R/lavaMD/kernel/kernel_gpu_cuda_wrapper.cu" -o "$o/wrapper.o"
  nvcc -O3 "${ARCH[@]}" "${SHIM[@]}" -c "$R/lavaMD/util/device/device.cu" -o "$o/device.o"
  nvcc "${ARCH[@]}" "$o"/*.o -lm -o "$BIN/lavaMD"
}
build nw nvcc -O2 "${ARCH[@]}" "${SHIM[@]}" -DTRACEBACK "$R/nw/needle.cu" -o "$BIN/nw" &
build pathfinder nvcc -O2 "${ARCH[@]}" "${SHIM[@]}" -DBENCH_PRINT "$R/pathfinder/pathfinder.cu" -o "$BIN/pathfinder" &
build srad nvcc -O2 "${ARCH[@]}" "${SHIM[@]}" -DOUTPUT "$R/srad/srad_v2/srad.cu" -o "$BIN/srad" &
build streamcluster nvcc -O2 "${ARCH[@]}" "${SHIM[@]}" \
  "$R/streamcluster/streamcluster_cuda_cpu.cpp" "$R/streamcluster/streamcluster_cuda.cu" -o "$BIN/streamcluster" &
build lavaMD lava &
wait
n=$(ls "$BIN" | grep -vc '\.build\.log$')
echo "$n of 5 built"
