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
# Each build in the background; its status is its job's exit status (a
# counter in a background subshell would count nothing here).
build() {
  local name=$1; shift
  rm -f "$BIN/$name"
  if "$@" >"$BIN/$name.build.log" 2>&1; then
    echo "built $name"
  else
    echo "FAILED $name:"; tail -15 "$BIN/$name.build.log"; return 1
  fi
}
build gaussian nvcc -O2 "${ARCH[@]}" "${SHIM[@]}" -I"$R/util" "$R/gaussian/gaussian.cu" -o "$BIN/gaussian" &
g=$!
build srad nvcc -O2 "${ARCH[@]}" "${SHIM[@]}" -DOUTPUT "$R/srad/srad_v2/srad.cu" -o "$BIN/srad" &
s=$!
failed=0
wait "$g" || failed=$((failed + 1))
wait "$s" || failed=$((failed + 1))
echo "$((2 - failed)) of 2 built"
[ "$failed" -eq 0 ]
