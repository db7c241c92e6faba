#!/usr/bin/env bash
# sbatch --array=0-999 --hold against two controllers side by side (A: BASE,
# B: BIN), each a fresh gsched up, rounds interleaved A B B A (issue 42;
# docs/benchmarks.md). usage: BASE=target/base BIN=target/release ROUNDS=6 bench/array-submit.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BASE=$(realpath "${BASE:-target/base}"); BIN=$(realpath "${BIN:-target/release}"); ROUNDS=${ROUNDS:-6}
tmp=$(mktemp -d); chmod 711 "$tmp"; pids=()
trap 'for p in "${pids[@]}"; do kill $p 2>/dev/null || true; done; wait 2>/dev/null; rm -rf "$tmp"' EXIT
declare -A port bin
bin[A]=$BASE; bin[B]=$BIN
for s in A B; do
  port[$s]=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  "${bin[$s]}/gsched" up --state-dir "$tmp/$s" --listen "127.0.0.1:${port[$s]}" --sim-gpus 1xA100-40GB --max-job-count 100000 --max-jobs-per-user 0 >"$tmp/$s.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 300); do curl -sf "http://127.0.0.1:${port[$s]}/healthz" >/dev/null && break; sleep 0.1; done
  mkdir -p "$tmp/sh$s"; client="${bin[$s]}/gslurm"; [ -x "$client" ] || client="${bin[$s]}/gsched"
  ln -s "$client" "$tmp/sh$s/sbatch"
done
echo "# $(date -u +%Y-%m-%dT%H:%MZ) sbatch --array=0-999 --hold, A $BASE, B $BIN; release; $(nproc) CPUs"
for r in $(seq "$ROUNDS"); do
  if [ $((r % 2)) -eq 1 ]; then order="A B"; else order="B A"; fi
  for s in $order; do
    export GSCHED_URL="http://127.0.0.1:${port[$s]}"
    t0=$(date +%s.%N); "$tmp/sh$s/sbatch" --array=0-999 --hold --wrap true >/dev/null; t1=$(date +%s.%N)
    echo "round $r $s $(python3 -c "print('%.4f' % ($t1 - $t0))") s"
  done
done
