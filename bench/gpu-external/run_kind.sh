#!/bin/bash
# Runs one program of the external suite (fetch.sh, build.sh) in a
# private directory and prints the report line summarize.py reads:
#   GPUJOB {"kind": K, "digest": D, "wall_secs": S, ...}
# D is the start of the SHA-256 of the program's output (its result file,
# or its standard output where it prints its result): a run is correct when
# D equals the same kind's run alone. Exits with the program's status.
#   bench/gpu-external/run_kind.sh KIND
set -u
kind=${1:?kind}
BIN=${RODINIA_BIN:-$(cd "$(dirname "$0")" && pwd)/rodinia/bin}
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
cd "$w" || exit 1
t0=$(date +%s.%N)
# Sizes: a few seconds each alone on an H100. Left out of the suite (see
# docs/benchmarks.md): nw and streamcluster (out-of-bounds accesses that
# fault under MPS, "an illegal memory access", tearing down every client),
# pathfinder (its output under MPS differs from its output alone), lavaMD
# and lud (seeded from the clock: no two runs agree).
case $kind in
  gaussian) "$BIN/gaussian" -s 2048 >out.txt 2>err.txt; rc=$?; result=out.txt ;;
  srad) "$BIN/srad" 2048 2048 0 127 0 127 0.5 1000 >out.txt 2>err.txt; rc=$?; result=out.txt ;;
  srad_big) "$BIN/srad" 4096 4096 0 127 0 127 0.5 300 >out.txt 2>err.txt; rc=$?; result=out.txt ;;
  *) echo "unknown kind $kind" >&2; exit 2 ;;
esac
# Printed timings differ from run to run: not part of the result.
grep -vi 'time' out.txt >out.result && [ "$result" = out.txt ] && result=out.result
t1=$(date +%s.%N)
# What the program said on stderr (CUDA errors, out of memory) goes to the
# job's output, where summarize.py looks for them.
tail -n 20 err.txt
digest=null
[ "$rc" = 0 ] && [ -s "$result" ] && digest="\"$(sha256sum "$result" | cut -c1-16)\""
wall=$(python3 -c "print(round($t1 - $t0, 3))")
echo "GPUJOB {\"kind\": \"$kind\", \"digest\": $digest, \"wall_secs\": $wall, \"gpu_secs\": $wall, \"ballast_ok\": true, \"exit\": $rc}"
exit "$rc"
