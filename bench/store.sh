#!/usr/bin/env bash
# The controller's store, SQLite against PostgreSQL (issue 40;
# docs/benchmarks.md). For each engine, interleaved A B B A ... over
# ROUNDS rounds, each on a fresh `gsched up` and a fresh database:
#   1. REST submissions, JOBS jobs, queue held (--workers 0), 8 clients
#   2. trivial jobs submitted and run to completion (each a launch pass's
#      writes, the launch, the end report and its writes), EXEC_JOBS jobs
#   3. sacct over FINISHED finished jobs (rows copied in bulk from real
#      finished jobs, 100 users): one user's jobs (1%), one job, and a
#      time window of 1%
# PostgreSQL is a private server (initdb in a temporary directory, socket
# only, fsync on: synchronous_commit as shipped), SQLite the default
# (durability normal). Needs root (the server runs as nobody).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked --bins >/dev/null
BIN=$PWD/target/release
JOBS=${JOBS:-10000}
EXEC_JOBS=${EXEC_JOBS:-2000}
FINISHED=${FINISHED:-1000000}
ROUNDS=${ROUNDS:-2}
PG_BIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
tmp=$(mktemp -d)
chmod 755 "$tmp"
pid=""
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null
  wait 2>/dev/null || true
  [ -d "$tmp/pg/data" ] && runuser -u nobody -- "$PG_BIN/pg_ctl" -D "$tmp/pg/data" -m immediate -w stop >/dev/null 2>&1
  rm -rf "$tmp"
}
trap cleanup EXIT

"$BIN/gsched" slurm-shims "$tmp/shims" >/dev/null
SACCT=$tmp/shims/sacct
mkdir -p "$tmp/pg"
chown nobody "$tmp/pg"
chmod 700 "$tmp/pg"
runuser -u nobody -- "$PG_BIN/initdb" -D "$tmp/pg/data" -U gsched -A trust -E UTF8 >/dev/null
runuser -u nobody -- "$PG_BIN/pg_ctl" -D "$tmp/pg/data" -l "$tmp/pg/log" -w \
  -o "-k $tmp/pg -c listen_addresses=''" start >/dev/null
psql() { runuser -u nobody -- "$PG_BIN/psql" -h "$tmp/pg" -U gsched -q -v ON_ERROR_STOP=1 "$@"; }
db=0

start() { # engine, then args for gsched up
  local engine=$1 port url=""
  shift
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  rm -rf "$tmp/state"
  if [ "$engine" = postgres ]; then
    db=$((db + 1))
    psql -d postgres -c "CREATE DATABASE b$db"
    url="postgres:///b$db?user=gsched&host=$tmp/pg"
    set -- --database "$url" "$@"
  fi
  "$BIN/gsched" up --state-dir "$tmp/state" --listen "127.0.0.1:$port" --min-job-age 0 "$@" 2>"$tmp/up.log" &
  pid=$!
  export GSCHED_URL="http://127.0.0.1:$port"
  for _ in $(seq 300); do
    curl -sf "$GSCHED_URL/healthz" 2>/dev/null | grep -q '"nodes_up":1' && return 0
    sleep 0.1
  done
  echo "gsched up did not start:"; cat "$tmp/up.log"; exit 1
}
stop() { kill "$pid"; wait "$pid" 2>/dev/null || true; pid=""; }

# Copies the finished jobs there are until there are $FINISHED, for 100
# users, ending one a second (gctld stopped: straight into the database).
fill() {
  local engine=$1
  local sql="WITH RECURSIVE k(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM k WHERE n < $FINISHED)
    INSERT INTO jobs (id, name, user_name, uid, gid, working_dir, script, environment, isolated,
      gpu_request, time_limit, partition, spec, state, reason, exit_code, exit_signal, submit_time,
      start_time, end_time, node, gpu_instance, gpu_mem_peak, restarts, held, steps, run, launching)
    SELECT 1000000 + n, name, 'u' || (n % 100), uid, gid, working_dir, script, environment, isolated,
      gpu_request, time_limit, partition, spec, state, reason, exit_code, exit_signal,
      1700000000 + n, 1700000000 + n, 1700000001 + n, node, gpu_instance, gpu_mem_peak, restarts,
      held, steps, 1, launching
    FROM k, (SELECT * FROM jobs WHERE state = 'COMPLETED' ORDER BY id LIMIT 1) AS one"
  if [ "$engine" = postgres ]; then
    psql -d "b$db" -c "$sql"
    psql -d "b$db" -c "ANALYZE jobs"
  else
    python3 - "$tmp/state/ctld.db" "$sql" <<'EOF'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
c.execute(sys.argv[2])
c.commit()
c.execute("ANALYZE")
EOF
  fi
}

timed() { # label, command...
  local label=$1 t0 t1
  shift
  t0=$(date +%s.%N)
  "$@" >"$tmp/out" 2>&1 || { echo "$label failed:"; cat "$tmp/out"; exit 1; }
  t1=$(date +%s.%N)
  printf '%s %s %.3f s (%s lines)\n' "$engine" "$label" "$(echo "$t1 - $t0" | bc)" "$(wc -l <"$tmp/out")"
}

echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(nproc) CPUs: $(lscpu | sed -n 's/^Model name: *//p'); PostgreSQL $("$PG_BIN/postgres" --version | awk '{print $3}')"
order=()
for _ in $(seq "$ROUNDS"); do order+=(sqlite postgres postgres sqlite); done
for engine in "${order[@]}"; do
  start "$engine" --workers 0
  echo -n "$engine submit: "
  "$BIN/gsched" bench submit --jobs "$JOBS" --concurrency 8 | tail -1
  stop
  start "$engine"
  echo -n "$engine exec: "
  "$BIN/gsched" bench exec --jobs "$EXEC_JOBS" --concurrency 4 | tail -1
  stop
done
for engine in sqlite postgres postgres sqlite; do
  start "$engine"
  "$BIN/gsched" bench exec --jobs 10 --concurrency 1 >/dev/null
  stop
  fill "$engine"
  if [ "$engine" = postgres ]; then set -- --database "postgres:///b$db?user=gsched&host=$tmp/pg"; else set --; fi
  # Started again on the filled database (not a fresh one); --min-job-age 1
  # holds none of the finished jobs in memory (0 would hold all of them).
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  "$BIN/gsched" up --state-dir "$tmp/state" --listen "127.0.0.1:$port" --min-job-age 1 "$@" 2>"$tmp/up.log" &
  pid=$!
  export GSCHED_URL="http://127.0.0.1:$port"
  for _ in $(seq 600); do curl -sf "$GSCHED_URL/healthz" >/dev/null 2>&1 && break; sleep 0.1; done
  timed "sacct -u u7 (10,000 of $FINISHED)" "$SACCT" -X -n -u u7 -S 2023-01-01 -o JobID,State
  timed "sacct -j 1500000 (1 of $FINISHED)" "$SACCT" -X -n -j 1500000 -o JobID,State
  timed "sacct -a window (10,000 of $FINISHED)" "$SACCT" -X -n -a -S 2023-11-15T00:00:00 -E 2023-11-15T02:46:39 -o JobID,State
  # The same sacct -j without the index on the array id (migration 0021),
  # in the same run: what the index is worth.
  if [ "$engine" = postgres ]; then
    psql -d "b$db" -c 'DROP INDEX jobs_by_array'
  else
    python3 -c 'import sqlite3, sys; sqlite3.connect(sys.argv[1]).execute("DROP INDEX jobs_by_array_task")' "$tmp/state/ctld.db"
  fi
  timed "sacct -j 1500000 without the array index" "$SACCT" -X -n -j 1500000 -o JobID,State
  stop
done
