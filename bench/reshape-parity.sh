#!/usr/bin/env bash
# Issue 19, item 5: the live daemons on the simulated backend against the
# simulator, on one trace with MIG re-partitioning and the same
# reconfiguration time. The trace: an A100 laid out as 3g.20gb + 4x 1g.5gb
# and, submitted one a second, four isolated jobs of 9000 MiB (the policy
# makes a 1g.10gb for each, 6 s) and four of 3000 MiB (a 1g.5gb each, 4 s),
# alternating (one a
# second, so that both see each arrival in its own scheduling pass: live
# submissions cannot be simultaneous). Live, each job is `sleep`: an
# isolated job runs alone on its instance, as the simulator's isolated GPU
# phase does at full speed.
#
#   bench/reshape-parity.sh [GSCHED] [REPEATS]     (default: target/release/gsched, 3)
#
# Prints the simulator's makespan (deterministic), each live run's (from
# just before the first submission to the moment the last job is seen
# ended, polled every 0.1 s), and the ratio of the live median to it.
set -euo pipefail
G=$(realpath "${1:-target/release/gsched}")
REPEATS=${2:-3}
D=${RECONFIG_SECS:-2}
SPEC="1xA100-40GB:3g.20gb,1g.5gb*4"
work=$(mktemp -d)
chmod 755 "$work"
trap '[ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
bin=$(dirname "$G")
# The simulated node has CPUs to spare: so must the live one (each job
# takes a CPU; this machine may have two).
echo 'constrain_cores = false' > "$work/cgroup.toml"

trace="$work/trace.csv"
echo 'job,isolated,submit,kind,secs,mem_mib,slices' > "$trace"
for i in 1 2 3 4; do
    echo "m$i,true,$((2 * i - 2)),gpu,6,9000,2" >> "$trace"
    echo "s$i,true,$((2 * i - 1)),gpu,4,3000,1" >> "$trace"
done
sim=$("$G" sim --cluster "$SPEC" --trace "$trace" --repartition demand \
    --reconfig-secs "$D" --json | python3 -c 'import json,sys; d=json.load(sys.stdin)["policy"]; print(d["makespan"], d["reshapes"])')
read -r sim_makespan sim_reshapes <<< "$sim"
echo "simulator: makespan ${sim_makespan} s, ${sim_reshapes} reshapes (reconfiguration ${D} s)"

live_once() {
    local state="$work/state-$1" port
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    "$G" up --state-dir "$state" --listen "127.0.0.1:$port" --node-name n1 \
        --sim-gpus "$SPEC" --repartition demand --mig-reconfig-secs "$D" \
        --heartbeat-interval 1 --kill-wait 1 --cpus 64 --cgroup-config "$work/cgroup.toml" > "$work/up-$1.log" 2>&1 &
    local up=$!
    export GSCHED_URL="http://127.0.0.1:$port"
    for _ in $(seq 100); do
        curl -sf "$GSCHED_URL/healthz" | grep -q '"nodes_up":1' && break
        sleep 0.1
    done
    local t0 ids=()
    t0=$(date +%s.%N)
    at() { python3 -c "import time; time.sleep(max(0, $t0 + $1 - time.time()))"; }
    for i in 1 2 3 4; do
        at $((2 * i - 2))
        ids+=("$("$bin/gsub" --parsable --isolated --gpu-mem 9000M -J "m$i" -o /dev/null --wrap 'sleep 6')")
        at $((2 * i - 1))
        ids+=("$("$bin/gsub" --parsable --isolated --gpu-mem 3000M -J "s$i" -o /dev/null --wrap 'sleep 4')")
    done
    local left=8
    while [ "$left" -gt 0 ]; do
        sleep 0.1
        left=$("$bin/gqueue" -h 2>/dev/null | wc -l)
    done
    local t1 reshapes
    t1=$(date +%s.%N)
    reshapes=$(grep -c "reshape done" "$work/up-$1.log" || true)
    bad=$("$bin/gacct" 2>/dev/null | grep -vcE "COMPLETED|^JobID" || true)
    kill "$up"; wait "$up" 2>/dev/null || true
    python3 -c "print(f'{$t1 - $t0:.2f}')"
    echo "$reshapes $bad" > "$work/extra-$1"
}

runs=()
for r in $(seq "$REPEATS"); do
    m=$(live_once "$r")
    read -r reshapes bad < "$work/extra-$r"
    echo "live run $r: makespan ${m} s, ${reshapes} reshapes, ${bad} jobs not COMPLETED"
    runs+=("$m")
done
python3 - "$sim_makespan" "${runs[@]}" <<'EOF'
import statistics, sys
sim = float(sys.argv[1]); live = [float(x) for x in sys.argv[2:]]
med = statistics.median(live)
print(f"live median {med:.2f} s (range {min(live):.2f}-{max(live):.2f}); live/simulator {med/sim:.3f} "
      f"(range {min(live)/sim:.3f}-{max(live)/sim:.3f})")
EOF
