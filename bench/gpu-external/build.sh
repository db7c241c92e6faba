#!/bin/bash
# Builds the external suite (fetch.sh: NVIDIA's CUDA samples) with nvcc on
# the GPU machine, into bench/gpu-external/cuda-samples/bin: each program
# from the files and libraries its own CMakeLists.txt names, for this GPU's
# architecture. No source is changed.
#   bench/gpu-external/build.sh
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
S=$HERE/cuda-samples/Samples
BIN=$HERE/cuda-samples/bin
mkdir -p "$BIN"
cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)
FLAGS=(-O2 -std=c++17 -arch "sm_${cap:-90}" -I"$HERE/cuda-samples/Common")
build() {
  local name=$1 dir=$2; shift 2
  rm -f "$BIN/$name"
  if (cd "$S/$dir" && nvcc "${FLAGS[@]}" "$@" -o "$BIN/$name") >"$BIN/$name.build.log" 2>&1; then
    echo "built $name"
  else
    echo "FAILED $name:"; tail -15 "$BIN/$name.build.log"; return 1
  fi
}
pids=()
build matrixMul 0_Introduction/matrixMul matrixMul.cu & pids+=($!)
build conjugateGradient 4_CUDA_Libraries/conjugateGradient main.cpp -lcublas -lcusparse & pids+=($!)
build FDTD3d 5_Domain_Specific/FDTD3d -Iinc src/FDTD3d.cpp src/FDTD3dGPU.cu src/FDTD3dReference.cpp & pids+=($!)
build BlackScholes 5_Domain_Specific/BlackScholes BlackScholes.cu BlackScholes_gold.cpp & pids+=($!)
build jacobiCudaGraphs 3_CUDA_Features/jacobiCudaGraphs jacobi.cu main.cpp & pids+=($!)
build MonteCarloMultiGPU 5_Domain_Specific/MonteCarloMultiGPU MonteCarlo_gold.cpp MonteCarlo_kernel.cu \
  multithreading.cpp MonteCarloMultiGPU.cpp -lcurand & pids+=($!)
build sortingNetworks 2_Concepts_and_Techniques/sortingNetworks main.cpp bitonicSort.cu \
  sortingNetworks_validate.cpp & pids+=($!)
build binomialOptions 5_Domain_Specific/binomialOptions binomialOptions.cpp binomialOptions_gold.cpp \
  binomialOptions_kernel.cu & pids+=($!)
failed=0
for p in "${pids[@]}"; do wait "$p" || failed=$((failed + 1)); done
echo "$((${#pids[@]} - failed)) of ${#pids[@]} built"
[ "$failed" -eq 0 ]
