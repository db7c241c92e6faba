#!/usr/bin/env bash
# Controller memory with many finished jobs held (docs/benchmarks.md):
# a state directory with N finished jobs (one real job, copied N-1 times in
# the database) is loaded by `gsched up --min-job-age 0`, then
# GET /slurm/v0.0.44/jobs lists them all twice; VmRSS and VmHWM of the
# process are printed after loading and after each listing.
#   usage: bench/listing-memory.sh [N]   (default 50000; BIN=target/debug)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-50000}
BIN=${BIN:-$PWD/target/debug}
D=$(mktemp -d); chmod 711 "$D"
pid=""
cleanup() { [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$D"; }
trap cleanup EXIT
P=$((20000 + RANDOM % 20000)); U=http://127.0.0.1:$P
up() {
  "$BIN/gsched" up --state-dir "$D" --listen 127.0.0.1:$P --sim-gpus 1xA100-40GB \
    --min-job-age 0 --max-job-count 10000000 --node-name n1 >>"$D/log" 2>&1 &
  pid=$!
  for _ in $(seq 600); do curl -sf $U/healthz >/dev/null && return; sleep 0.2; done
  echo "gsched up did not start" >&2; exit 1
}
up
printf '#!/bin/sh\ntrue\n' >"$D/t.sh"
GSCHED_URL=$U "$BIN/gsub" "$D/t.sh" >/dev/null
sleep 3
kill -9 $pid; wait $pid 2>/dev/null || true; pid=""
python3 - "$D/ctld.db" "$N" <<'PY'
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1]); n = int(sys.argv[2]); now = int(time.time())
cols = [r[1] for r in db.execute("PRAGMA table_info(jobs)")]
first = dict(zip(cols, db.execute("SELECT * FROM jobs WHERE id = 1").fetchone()))
assert first["state"] == "COMPLETED", first["state"]
rows = [tuple({**first, "id": i, "end_time": now}[c] for c in cols) for i in range(2, n + 1)]
db.executemany("INSERT INTO jobs VALUES (%s)" % ",".join("?" * len(cols)), rows)
db.commit()
PY
up
TOK=$(GSCHED_URL=$U "$BIN/gsched" token --quiet)
rss() { grep -E "VmRSS|VmHWM" /proc/$pid/status | tr -s ' \t' ' ' | tr '\n' ' '; echo; }
echo "N=$N loaded: $(rss)"
for i in 1 2; do
  curl -s -o /dev/null -w "listing $i: %{size_download} bytes in %{time_total}s; " \
    -H "Authorization: Bearer $TOK" $U/slurm/v0.0.44/jobs
  echo "$(rss)"
done
