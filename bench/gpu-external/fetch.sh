#!/bin/bash
# Fetches the external CUDA suite of the packing benchmark (issue 41):
# programs of NVIDIA's CUDA samples (github.com/NVIDIA/cuda-samples, BSD
# 3-clause), at a pinned commit, into bench/gpu-external/cuda-samples/
# (ignored by git: the project never carries their code). Each program
# checks its own result against a host reference or a known value, checks
# every CUDA call (helper_cuda.h's checkCudaErrors), seeds its inputs with
# a constant and exits non-zero on a wrong result. (Rodinia, the suite
# tried first, faulted or disagreed with itself under MPS:
# docs/benchmarks.md; its scripts are at commit 3cd86b4.)
#   bench/gpu-external/fetch.sh [GIT_DIR_OR_URL]
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=${1:-https://github.com/NVIDIA/cuda-samples}
COMMIT=c94ff366aed18c797b8a85dfaac7817b0228b420
DEST=$HERE/cuda-samples
# The programs taken, as Samples/<group>/<name>.
PROGRAMS="0_Introduction/matrixMul 4_CUDA_Libraries/conjugateGradient 5_Domain_Specific/FDTD3d
5_Domain_Specific/BlackScholes 3_CUDA_Features/jacobiCudaGraphs 5_Domain_Specific/MonteCarloMultiGPU
2_Concepts_and_Techniques/sortingNetworks 5_Domain_Specific/binomialOptions"
rm -rf "$DEST"
mkdir -p "$DEST"
take() {
  local git=$1 f p
  git -C "$git" cat-file -e "$COMMIT^{commit}" || { echo "fetch: $git lacks commit $COMMIT" >&2; return 1; }
  # The helper headers (top level of Common only) and the licence.
  for f in $(git -C "$git" ls-tree --name-only "$COMMIT" Common/ | grep '\.h$') LICENSE; do
    mkdir -p "$DEST/$(dirname "$f")"
    git -C "$git" show "$COMMIT:$f" >"$DEST/$f"
  done
  for p in $PROGRAMS; do
    git -C "$git" ls-tree -r --name-only "$COMMIT" "Samples/$p" | grep -E '\.(cu|cuh|cpp|h)$' |
      while read -r f; do
        mkdir -p "$DEST/$(dirname "$f")"
        git -C "$git" show "$COMMIT:$f" >"$DEST/$f"
      done
  done
}
if [ -d "$SRC" ]; then
  take "$SRC"
else
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  git clone --quiet "$SRC" "$tmp/repo"
  take "$tmp/repo"
fi
for p in $PROGRAMS; do
  [ -d "$DEST/Samples/$p" ] || { echo "fetch: Samples/$p is missing from $SRC at $COMMIT" >&2; exit 1; }
done
echo "CUDA samples at $COMMIT in $DEST"
