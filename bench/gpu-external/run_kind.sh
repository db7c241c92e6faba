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
case $kind in
  nw) "$BIN/nw" 16384 10 >out.txt 2>err.txt; rc=$?; result=result.txt ;;
  pathfinder) "$BIN/pathfinder" 100000 5000 20 >out.txt 2>err.txt; rc=$?; result=out.txt ;;
  srad) "$BIN/srad" 2048 2048 0 127 0 127 0.5 1000 >out.txt 2>err.txt; rc=$?; result=out.txt ;;
  streamcluster) "$BIN/streamcluster" 10 20 256 65536 65536 1000 none centers.txt 1 >out.txt 2>err.txt
    rc=$?; result=centers.txt ;;
  lavaMD) "$BIN/lavaMD" -boxes1d 24 >out.txt 2>err.txt; rc=$?; result=result.txt ;;
  *) echo "unknown kind $kind" >&2; exit 2 ;;
esac
t1=$(date +%s.%N)
# What the program said on stderr (CUDA errors, out of memory) goes to the
# job's output, where summarize.py looks for them.
tail -n 20 err.txt
digest=null
[ "$rc" = 0 ] && [ -s "$result" ] && digest="\"$(sha256sum "$result" | cut -c1-16)\""
wall=$(python3 -c "print(round($t1 - $t0, 3))")
echo "GPUJOB {\"kind\": \"$kind\", \"digest\": $digest, \"wall_secs\": $wall, \"gpu_secs\": $wall, \"ballast_ok\": true, \"exit\": $rc}"
exit "$rc"
