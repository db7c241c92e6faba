#!/usr/bin/env bash
# sacct over many finished jobs on SQLite (issue 42, listings that scale;
# docs/benchmarks.md). One database: a few real jobs run, then the first
# finished one is copied until there are FINISHED finished jobs (100 users,
# one ending a second), straight into the database with gctld stopped, and
# analyzed (as a site's may be; gctld itself never analyzes). Two gctlds
# serve copies of it side by side: A from BASE's binaries, B from BIN's
# (each migrates its copy as it starts). Both run with --min-job-age 1:
# finished jobs that ended over a second ago are not held in memory, so
# every answer comes from the store (0, as in Slurm, would hold all).
# Each query is timed ROUNDS times, interleaved A B B A, as the sacct shim
# (what a user waits for) and as the first page of its REST call (curl).
#   usage: bench/sacct-scale.sh
#   FINISHED=1000000 ROUNDS=4 BIN=target/release BASE=target/base
set -euo pipefail
cd "$(dirname "$0")/.."
FINISHED=${FINISHED:-1000000}
ROUNDS=${ROUNDS:-4}
BIN=$(realpath "${BIN:-target/release}")
BASE=$(realpath "${BASE:-target/base}")
tmp=$(mktemp -d)
chmod 755 "$tmp"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
export TZ=UTC
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
declare -A port dir bin
up() { # side
  local s=$1
  "${bin[$s]}/gsched" up --state-dir "${dir[$s]}" --listen "127.0.0.1:${port[$s]}" --min-job-age 1 2>>"$tmp/up-$s.log" &
  pids+=($!)
  for _ in $(seq 1200); do curl -sf "http://127.0.0.1:${port[$s]}/healthz" >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "gsched up ($s) did not start:"; cat "$tmp/up-$s.log"; exit 1
}
bin[A]=$BASE; bin[B]=$BIN
dir[A]=$tmp/a; dir[B]=$tmp/b
port[A]=$(free_port); port[B]=$(free_port)
# The real jobs, run by the base controller.
up A
GSCHED_URL="http://127.0.0.1:${port[A]}" "$BASE/gsched" bench exec --jobs 10 --concurrency 1 >/dev/null
kill "${pids[0]}"; wait "${pids[0]}" 2>/dev/null || true; pids=()
me=$(id -un)
python3 - "${dir[A]}/ctld.db" "$FINISHED" "$me" <<'EOF'
import sqlite3, sys
db, n, me = sys.argv[1], int(sys.argv[2]), sys.argv[3]
c = sqlite3.connect(db)
# The copies' user, in its column and in the spec: u0..u99, u7 being
# this machine's user (so that sacct -u names a real one).
c.execute(f"""WITH RECURSIVE k(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM k WHERE n < {n})
  INSERT INTO jobs (id, name, user_name, uid, gid, working_dir, script, environment, isolated,
    gpu_request, time_limit, partition, spec, state, reason, exit_code, exit_signal, submit_time,
    start_time, end_time, node, gpu_instance, gpu_mem_peak, restarts, held, steps, run, launching)
  SELECT 1000000 + n, name, u, uid, gid, working_dir, script, environment, isolated,
    gpu_request, time_limit, partition, json_set(spec, '$.user_name', u), state,
    reason, exit_code, exit_signal,
    1700000000 + n, 1700000000 + n, 1700000001 + n, node, gpu_instance, gpu_mem_peak, restarts,
    held, steps, 1, launching
  FROM (SELECT n, CASE n % 100 WHEN 7 THEN ? ELSE 'u' || (n % 100) END AS u FROM k),
    (SELECT * FROM jobs WHERE state = 'COMPLETED' ORDER BY id LIMIT 1) AS one""", (me,))
c.commit()
c.execute("ANALYZE")
c.commit()
EOF
cp -a "${dir[A]}" "${dir[B]}"
up A
up B
declare -A tok
for s in A B; do tok[$s]=$(GSCHED_URL="http://127.0.0.1:${port[$s]}" "${bin[$s]}/gsched" token --quiet); done
"$BIN/gsched" slurm-shims "$tmp/shims" >/dev/null
at() { date -d "@$1" +%Y-%m-%dT%H:%M:%S; }
secs() { python3 -c 'import sys; print("%.4f" % (float(sys.argv[2]) - float(sys.argv[1])))' "$1" "$2"; }
declare -A label shim rest
add() { label[$1]=$2; shim[$1]=$3; rest[$1]=$4; }
one=$((1000000 + FINISHED / 2))
add one "one job (-j)" "-X -n -j $one -o JobID,State" "id=$one&array=$one"
add user "one user's jobs since 2023, 1% (-u -S)" "-X -n -u $me -S 2023-01-01 -o JobID,State" \
  "user=$me&since=1672531200"
add window "a window of 10,000 (-a -S -E)" "-X -n -a -S $(at 1700990000) -E $(at 1700999999) -o JobID,State" \
  "since=1700990000&until=1700999999"
add late "the last 1,000 (-a -S)" "-X -n -a -S $(at $((1700000001 + FINISHED - 1000))) -o JobID,State" \
  "since=$((1700000001 + FINISHED - 1000))"
add early "the first 1,000 (-a -S -E)" "-X -n -a -S 2023-01-01 -E $(at 1700001000) -o JobID,State" \
  "since=1672531200&until=1700001000"
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(nproc) CPUs: $(lscpu | sed -n 's/^Model name: *//p'); $FINISHED finished jobs; A $("$BASE/gsched" --version 2>/dev/null | head -1), B $("$BIN/gsched" --version 2>/dev/null | head -1); commit $(git rev-parse --short HEAD)"
for k in one user window late early; do
  for r in $(seq "$ROUNDS"); do
    if [ $((r % 2)) -eq 1 ]; then order="A B"; else order="B A"; fi
    for s in $order; do
      export GSCHED_URL="http://127.0.0.1:${port[$s]}"
      t0=$(date +%s.%N)
      # shellcheck disable=SC2086 # the arguments are meant to split
      "$tmp/shims/sacct" ${shim[$k]} >"$tmp/out" 2>&1 || { echo "sacct failed:"; cat "$tmp/out"; exit 1; }
      t1=$(date +%s.%N)
      curl -sf -H "Authorization: Bearer ${tok[$s]}" \
        "$GSCHED_URL/api/v1/jobs?state=all&history=true&${rest[$k]}" >"$tmp/page"
      t2=$(date +%s.%N)
      echo "$k $s sacct $(secs "$t0" "$t1") s ($(wc -l <"$tmp/out") lines), first page $(secs "$t1" "$t2") s ($(grep -o '"job_id"' "$tmp/page" | wc -l) jobs): ${label[$k]}"
    done
  done
done
