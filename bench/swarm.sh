#!/usr/bin/env bash
# The controller under a node swarm (issue 42, item 6; docs/benchmarks.md,
# "A node swarm"): for each size, a fresh release gctld on loopback and
# `gsched bench swarm` with that many node agents speaking gnoded's
# protocol, jobs flowing at RATE per second, each running JOB_SECS.
#   bench/swarm.sh [SIZES...]      default: 1000 10000 10000 1000 1000 10000
# Environment: RATE (20), JOB_SECS (10), SECS (60, the measured window),
# HEARTBEAT (5, gnoded's default); CTLD: a gctld binary to measure instead
# of this tree's (an older build, for a before/after). Prints each run's
# JSON report.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked --bins -p gsched -p gsched-ctld >/dev/null 2>&1
BIN=$PWD/target/release
SIZES=("$@")
[ ${#SIZES[@]} -gt 0 ] || SIZES=(1000 10000 10000 1000 1000 10000)
# 10,000 nodes keep thousands of connections open on both sides: as many
# descriptors as this shell may have.
ulimit -n "$(ulimit -Hn)"
tmp=$(mktemp -d)
pid=""
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(nproc) CPUs: $(lscpu | sed -n 's/^Model name: *//p'), $(git rev-parse --short HEAD)"
for n in "${SIZES[@]}"; do
  rm -rf "$tmp/ctl" && mkdir -m 700 "$tmp/ctl"
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  "${CTLD:-$BIN/gctld}" --state-dir "$tmp/ctl" --listen "127.0.0.1:$port" --allow-plain-http \
    2>"$tmp/ctld.log" &
  pid=$!
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.1; done
  echo "## $n nodes, ${CTLD:-$BIN/gctld}"
  GSCHED_URL="http://127.0.0.1:$port" "$BIN/gsched" bench swarm --nodes "$n" \
    --heartbeat-secs "${HEARTBEAT:-5}" --cluster-key-file "$tmp/ctl/cluster.key" \
    --duration-secs "${SECS:-60}" --submit-rate "${RATE:-20}" --job-secs "${JOB_SECS:-10}" \
    --ctld-pid "$pid" --json
  kill "$pid"; wait "$pid" 2>/dev/null || true; pid=""
done
