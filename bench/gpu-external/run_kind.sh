#!/bin/bash
# Runs one kind of the external suite (fetch.sh, build.sh: NVIDIA's CUDA
# samples) in a private directory and prints the report line summarize.py
# reads:
#   GPUJOB {"kind": K, "digest": D, "wall_secs": S, ...}
# A kind is one program at a fixed size, run REPS times in a row (the short
# programs are repeated so that every kind runs for seconds). Every program
# checks its own result and exits non-zero on a wrong one; D is the start of
# the SHA-256 of the lines where it reports that check (norms, errors,
# PASS/FAIL), timings left out: a run is correct when it exited 0 and D
# equals the same kind's run alone. Exits with the first failing status.
#   bench/gpu-external/run_kind.sh KIND
set -u
kind=${1:?kind}
BIN=${SAMPLES_BIN:-$(cd "$(dirname "$0")" && pwd)/cuda-samples/bin}
case $kind in
  # Sizes: each kind takes 2-7 s alone on an H100 (binomial about 26 s).
  matmul) prog=matrixMul; args=(-wA=4096 -hA=4096 -wB=4096 -hB=4096); reps=1 ;;
  fdtd) prog=FDTD3d; args=(--dimx=376 --dimy=376 --dimz=376 --timesteps=5); reps=1 ;;
  cg) prog=conjugateGradient; args=(); reps=3 ;;
  blackscholes) prog=BlackScholes; args=(); reps=3 ;;
  jacobi) prog=jacobiCudaGraphs; args=(); reps=2 ;;
  montecarlo) prog=MonteCarloMultiGPU; args=(); reps=6 ;;
  sort) prog=sortingNetworks; args=(); reps=2 ;;
  binomial) prog=binomialOptions; args=(); reps=1 ;;
  *) echo "unknown kind $kind" >&2; exit 2 ;;
esac
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
cd "$w" || exit 1
t0=$(date +%s.%N)
rc=0
for _ in $(seq "$reps"); do
  "$BIN/$prog" "${args[@]}" >>out.txt 2>>err.txt || { rc=$?; break; }
done
t1=$(date +%s.%N)
grep -E 'CompareData|inspecting|stability|\*\*\*|PASS|FAIL|[Pp]assed|[Ff]ailed|[Ee]rror|L1 norm|Result|Summary|[Dd]iff|delta|&&&&' out.txt |
  grep -viE 'time|/s\b|per sec|throughput|bandwidth' >out.result
# What the program said on stderr (CUDA errors, out of memory) goes to the
# job's output, where summarize.py looks for them.
tail -n 20 err.txt
digest=null
[ "$rc" = 0 ] && [ -s out.result ] && digest="\"$(sha256sum out.result | cut -c1-16)\""
wall=$(python3 -c "print(round($t1 - $t0, 3))")
echo "GPUJOB {\"kind\": \"$kind\", \"digest\": $digest, \"wall_secs\": $wall, \"gpu_secs\": $wall, \"ballast_ok\": true, \"exit\": $rc}"
exit "$rc"
