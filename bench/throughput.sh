#!/usr/bin/env bash
# Throughput of one gsched node, as a client sees it (docs/benchmarks.md).
#   1. REST submissions with the queue held (--workers 0), 1 and 8 clients
#   2. the same with --durability full
#   3. gsub submissions (one process per job), 1 and 4 at a time
#   4. trivial jobs (`true`) submitted and run to completion, 3 rounds
# Each part uses a fresh gsched up on a free loopback port and state dir.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked --bins >/dev/null
BIN=$PWD/target/release
JOBS=${JOBS:-10000}
EXEC_JOBS=${EXEC_JOBS:-2000}
tmp=$(mktemp -d)
pid=""
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT

start() { # args for gsched up
  local port
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  rm -rf "$tmp/state"
  "$BIN/gsched" up --state-dir "$tmp/state" --listen "127.0.0.1:$port" "$@" 2>"$tmp/up.log" &
  pid=$!
  export GSCHED_URL="http://127.0.0.1:$port"
  for _ in $(seq 100); do
    curl -sf "$GSCHED_URL/healthz" 2>/dev/null | grep -q '"nodes_up":1' && return 0
    sleep 0.1
  done
  echo "gsched up did not start:"; cat "$tmp/up.log"; exit 1
}
stop() { kill "$pid"; wait "$pid" 2>/dev/null || true; pid=""; }

echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(nproc) CPUs: $(lscpu | sed -n 's/^Model name: *//p')"
start --workers 0
"$BIN/gsched" bench submit --jobs "$JOBS" --concurrency 1
"$BIN/gsched" bench submit --jobs "$JOBS" --concurrency 8
stop
start --workers 0 --durability full
"$BIN/gsched" bench submit --jobs "$JOBS" --concurrency 1
"$BIN/gsched" bench submit --jobs "$JOBS" --concurrency 8
stop
start --workers 0
"$BIN/gsched" bench gsub --jobs 1000 --concurrency 1
"$BIN/gsched" bench gsub --jobs 1000 --concurrency 4
stop
start
for _ in 1 2 3; do "$BIN/gsched" bench exec --jobs "$EXEC_JOBS" --concurrency 4; done
stop
