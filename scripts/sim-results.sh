#!/usr/bin/env bash
# Regenerates the simulator results in docs/sim/ (docs/simulator.md).
# Usage: scripts/sim-results.sh [path/to/gsched]   (default: a release build)
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in jq bc; do
    command -v "$tool" > /dev/null || { echo "sim-results: needs $tool (apt-get install $tool)" >&2; exit 1; }
done
G=${1:-}
if [ -z "$G" ]; then
    cargo build --release --locked --bin gsched
    G=target/release/gsched
fi
A30="4xA30:1g.6gb*4"
A100="1xA100-40GB:2g.10gb*2,1g.5gb*3"
out=docs/sim
mkdir -p "$out"
# The papers' algorithms have no compute ceiling: the comparisons with them
# run without one. The ceiling (gsched's default since issue 17) has its
# own results below ("The compute ceiling").
PAPER="--compute-ceiling off"
# The results here were made before a job's room was kept between its GPU
# tasks (`--hold-between-processes`, default 3 s since issue 41): they are
# reproduced with it off (docs/simulator.md).
HOLD="--hold-between-processes 0"
sweep() { local f=$1; shift; "$G" sim $HOLD $PAPER --sweep "$@" > "$out/$f"; echo "$out/$f: $(tail -1 "$out/$f")"; }

# The default job model (docs/simulator.md, "Workloads").
sweep sweep-a30-1-6.txt --cluster "$A30" --jobs 128 --seed 1 --footprints 1-6
sweep sweep-a30-0.3-6.txt --cluster "$A30" --jobs 128 --seed 1 --footprints 0.3-6
sweep sweep-a100.txt --cluster "$A100" --jobs 32 --seed 1
sweep sweep-a100-1-10.txt --cluster "$A100" --jobs 32 --seed 1 --footprints 1-10
sweep sweep-a30-cg4.txt --cluster "$A30" --jobs 128 --seed 1 --policy cg:4
sweep sweep-a30-mgb-sm.txt --cluster "$A30" --jobs 128 --seed 1 --policy mgb-sm
sweep sweep-a30-case-vs-mgb-sm.txt --cluster "$A30" --jobs 128 --seed 1 --policy case --baseline mgb-sm
"$G" sim $HOLD $PAPER --cluster "$A30" --mix 1:4 --jobs 128 --seed 1 --plot "$out/memory-a30-1to4.svg" > "$out/a30-1to4.txt"
"$G" sim $HOLD $PAPER --cluster "$A30" --mix 1:4 --jobs 128 --seed 1 --json > "$out/a30-1to4.json"

# Sensitivity to the job model: the GPU share of a non-isolated job's time,
# and memory held per task or per process.
{
    echo "case vs exclusive on $A30, 128 jobs, seed 1: mean over the mixed ratios"
    printf '%-9s %-8s %-10s %s\n' gpu-share hold footprint result
    for share in 0.74 0.6 0.5 0.45 0.4 0.3 0.2; do
        for hold in task process; do
            for fp in 1-6 0.3-6; do
                r=$("$G" sim $HOLD $PAPER --sweep --cluster "$A30" --jobs 128 --seed 1 --gpu-share "$share" \
                    --memory-hold "$hold" --footprints "$fp" | tail -1 | sed 's/.*1:4): //')
                printf '%-9s %-8s %-10s %s\n' "$share" "$hold" "$fp" "$r"
            done
        done
    done
} > "$out/sensitivity-a30.txt"
echo "$out/sensitivity-a30.txt"

# At the share that matches the paper's throughput: the tables, cg:4 and the
# worker-limit experiment.
sweep calibrated-a30-1-6.txt --cluster "$A30" --jobs 128 --seed 1 --gpu-share 0.45
sweep calibrated-a30-0.3-6.txt --cluster "$A30" --jobs 128 --seed 1 --gpu-share 0.45 --footprints 0.3-6
sweep calibrated-a30-cg4.txt --cluster "$A30" --jobs 128 --seed 1 --gpu-share 0.45 --policy cg:4
sweep calibrated-a30-mgb-sm.txt --cluster "$A30" --jobs 128 --seed 1 --gpu-share 0.45 --policy mgb-sm
sweep calibrated-a100.txt --cluster "$A100" --jobs 32 --seed 1 --gpu-share 0.45
sweep calibrated-a100-1-10.txt --cluster "$A100" --jobs 32 --seed 1 --gpu-share 0.45 --footprints 1-10
{
    echo "case with N workers per compute slice vs exclusive on $A30, 128 jobs, seed 1, gpu-share 0.45"
    for w in 1 2 3 4 6 8 12; do
        printf 'workers %-3s %s\n' "$w" "$("$G" sim $HOLD $PAPER --sweep --cluster "$A30" --jobs 128 --seed 1 \
            --gpu-share 0.45 --workers-per-slice "$w" | tail -1 | sed 's/.*1:4): //')"
    done
} > "$out/workers-a30.txt"
echo "$out/workers-a30.txt"

# The jobs measured on the H100 (issue 7) replayed: the simulator against
# the real GPU (docs/simulator.md, "Checked against a real GPU").
python3 bench/gpu-jobs/to_trace.py docs/results/gpu-packing/gpu-packing-exclusive.json > "$out/h100-measured-trace.json"
# Those runs had no compute ceiling (it came with issue 17): replayed without.
for p in case cg:4; do
    "$G" sim $HOLD $PAPER --cluster 1xH100-80GB --trace "$out/h100-measured-trace.json" --policy "$p" \
        --baseline exclusive --memory-hold process > "$out/h100-measured-${p/:/}.txt"
done
"$G" sim $HOLD $PAPER --cluster 1xH100-80GB --trace "$out/h100-measured-trace.json" --policy case \
    --baseline exclusive --memory-hold process --json > "$out/h100-measured-case.json"
echo "$out/h100-measured-*: $(tail -1 "$out/h100-measured-case.txt")"
# Issue 17's interleaved runs (docs/benchmarks.md): each exclusive trial as a
# trace, replayed as gsched ran then (every task at the default demand,
# eight to an instance: then an eighth under ceiling 1, now three eighths
# under ceiling 3, the same), and with each task's parallelism as its
# learned share, and without a ceiling.
for t in 1 2 3; do
    python3 bench/gpu-jobs/to_trace.py docs/results/gpu-packing-issue17/regular/gpu-packing-exclusive-$t.json \
        > "$out/h100-issue17-trace-$t.json"
    for v in "default 3" "parallelism 1" "parallelism off"; do
        set -- $v
        printf 'trial %s, task shares %-11s ceiling %-3s: %s\n' "$t" "$1" "$2" "$("$G" sim $HOLD --cluster 1xH100-80GB \
            --trace "$out/h100-issue17-trace-$t.json" --policy case --baseline exclusive --memory-hold process \
            --task-shares "$1" --compute-ceiling "$2" | head -1)"
    done
done > "$out/h100-issue17-replay.txt"
echo "$out/h100-issue17-replay.txt"

# Demand-driven MIG re-partitioning (docs/simulator.md, "Re-partitioning"):
# case with --repartition demand against the same exclusive baseline (which
# keeps the layout), as drawn and at the calibrated share; then the
# assumed reconfiguration time and the pool size.
sweep repartition-a30-1-6.txt --cluster "$A30" --jobs 128 --seed 1 --repartition demand
sweep repartition-a30-0.3-6.txt --cluster "$A30" --jobs 128 --seed 1 --footprints 0.3-6 --repartition demand
sweep repartition-a100.txt --cluster "$A100" --jobs 32 --seed 1 --repartition demand
sweep repartition-a100-1-10.txt --cluster "$A100" --jobs 32 --seed 1 --footprints 1-10 --repartition demand
sweep repartition-calibrated-a30-1-6.txt --cluster "$A30" --jobs 128 --seed 1 --gpu-share 0.45 --repartition demand
sweep repartition-calibrated-a100-1-10.txt --cluster "$A100" --jobs 32 --seed 1 --gpu-share 0.45 --footprints 1-10 --repartition demand
{
    echo "case --repartition P vs exclusive, seed 1: mean over the mixed ratios, and the all-shared (0:1) row"
    for setup in "$A30|128|1-6" "$A100|32|1-10"; do
        IFS='|' read -r cluster jobs fp <<< "$setup"
        for p in none demand demand:4 demand:7; do
            for secs in 0 5 30; do
                out_=$("$G" sim $HOLD $PAPER --sweep --cluster "$cluster" --jobs "$jobs" --seed 1 --footprints "$fp" \
                    --repartition "$p" --reconfig-secs "$secs")
                printf '%-34s %-9s %3ss  %s | 0:1 %s\n' "$cluster" "$p" "$secs" \
                    "$(echo "$out_" | tail -1 | sed 's/.*1:4): //')" \
                    "$(echo "$out_" | grep '^0:1' | awk '{print $2, $3}')"
            done
        done
    done
} > "$out/repartition-knobs.txt"
echo "$out/repartition-knobs.txt"

# The compute ceiling (docs/simulator.md, "The compute ceiling"): case with
# gsched's default ceiling, each task stating its parallelism (as learned
# shares would), against the same exclusive baseline; and a sweep of ceilings
# on the A30 1-6 GB batch at the calibrated share.
PAPER=
sweep ceiling-a30-1-6.txt --cluster "$A30" --jobs 128 --seed 1 --footprints 1-6
sweep ceiling-calibrated-a30-1-6.txt --cluster "$A30" --jobs 128 --seed 1 --footprints 1-6 --gpu-share 0.45
sweep ceiling-a100.txt --cluster "$A100" --jobs 32 --seed 1
{
    for c in off 3 2 1.5 1 0.75 0.5; do
        printf 'ceiling %-4s %s\n' "$c" "$("$G" sim $HOLD --sweep --cluster "$A30" --jobs 128 --seed 1 \
            --gpu-share 0.45 --compute-ceiling "$c" | tail -1 | sed 's/.*1:4): //')"
    done
} > "$out/ceiling-sweep-a30.txt"
echo "$out/ceiling-sweep-a30.txt"

# Who gets the GPU (docs/simulator.md, "Queue policies"): the queue workload
# (isolated jobs of one GPU, a node or several nodes, with time limits, four
# users in two accounts, QOS normal and high) on 8 nodes of 2 GPUs, seeds 1-5.
# Each comparison is one setting changed; the sites are in docs/sim/sites/.
Q="--workload queue --cluster 2xA100-80GB --nodes 8 --jobs 400 --load 1.0 --policy exclusive --baseline exclusive"
SEEDS="1 2 3 4 5"
# The median and range of the numbers on stdin.
stats() { sort -g | awk '{v[NR]=$1} END {m=(NR%2)?v[(NR+1)/2]:(v[NR/2]+v[NR/2+1])/2; printf "median %.3g, range %.3g-%.3g", m, v[1], v[NR]}'; }
# A group's mean wait in the policy (p) or baseline (b) of a JSON comparison.
wait_of() { jq -r --arg k "$2" --arg n "$3" ".$1.groups[] | select(.kind==\$k and .name==\$n) | .mean_wait"; }
queue() {
    local name=$1; shift
    local dir; dir=$(mktemp -d)
    for s in $SEEDS; do "$G" sim $HOLD $Q --seed "$s" --json "$@" > "$dir/$s.json"; done
    echo "$dir"
}
{
    echo "backfill (policy) vs builtin, strict priority order (baseline); basic priority; $Q"
    d=$(queue backfill --baseline-scheduler-type builtin)
    printf '%-5s %-10s %-10s %-10s %-22s %s\n' seed throughput wait-ratio "" "multi-node wait (s)" "one-gpu wait (s)"
    for s in $SEEDS; do
        f=$d/$s.json
        printf '%-5s %-10.3f %-10.2f %-10s %-22s %s\n' "$s" "$(jq .throughput_ratio "$f")" \
            "$(jq '.baseline.mean_wait / .policy.mean_wait' "$f")" "" \
            "$(wait_of policy size multi-node < "$f" | xargs printf '%.0f') / $(wait_of baseline size multi-node < "$f" | xargs printf '%.0f')" \
            "$(wait_of policy size one-gpu < "$f" | xargs printf '%.0f') / $(wait_of baseline size one-gpu < "$f" | xargs printf '%.0f')"
    done
    echo "throughput (backfill / builtin): $(for s in $SEEDS; do jq .throughput_ratio "$d/$s.json"; done | stats)"
    echo "mean wait (builtin / backfill): $(for s in $SEEDS; do jq '.baseline.mean_wait / .policy.mean_wait' "$d/$s.json"; done | stats)"
    echo "multi-node jobs' mean wait (backfill / builtin): $(for s in $SEEDS; do f=$d/$s.json; echo "$(wait_of policy size multi-node < "$f") / $(wait_of baseline size multi-node < "$f")" | bc -l; done | stats)"
    rm -r "$d"
} > "$out/queue-backfill.txt"
echo "$out/queue-backfill.txt"
# Fair share (classic, or Fair Tree with sites/accounts-fair-tree.json).
fairshare() {
    local site=$1 file=$2
    echo "multifactor with fair share (policy) vs basic, first come first served (baseline); $site; $Q"
    d=$(queue fairshare --site "docs/sim/$site" --priority-type multifactor --baseline-priority-type basic)
    printf '%-5s %-28s %-28s %s\n' seed "physics wait (s) fs / basic" "bio wait (s) fs / basic" "dia (10% of jobs) fs / basic"
    for s in $SEEDS; do
        f=$d/$s.json
        printf '%-5s %-28s %-28s %s\n' "$s" \
            "$(wait_of policy account physics < "$f" | xargs printf '%.0f') / $(wait_of baseline account physics < "$f" | xargs printf '%.0f')" \
            "$(wait_of policy account bio < "$f" | xargs printf '%.0f') / $(wait_of baseline account bio < "$f" | xargs printf '%.0f')" \
            "$(wait_of policy user dia < "$f" | xargs printf '%.0f') / $(wait_of baseline user dia < "$f" | xargs printf '%.0f')"
    done
    echo "bio's mean wait (fair share / basic): $(for s in $SEEDS; do f=$d/$s.json; echo "$(wait_of policy account bio < "$f") / $(wait_of baseline account bio < "$f")" | bc -l; done | stats)"
    echo "physics's mean wait (fair share / basic): $(for s in $SEEDS; do f=$d/$s.json; echo "$(wait_of policy account physics < "$f") / $(wait_of baseline account physics < "$f")" | bc -l; done | stats)"
    echo "throughput (fair share / basic): $(for s in $SEEDS; do jq .throughput_ratio "$d/$s.json"; done | stats)"
    rm -r "$d"
}
fairshare sites/accounts.json queue-fairshare.txt > "$out/queue-fairshare.txt"
echo "$out/queue-fairshare.txt"
fairshare sites/accounts-fair-tree.json queue-fairtree.txt > "$out/queue-fairtree.txt"
echo "$out/queue-fairtree.txt"
# Preemption by QOS in MODE (requeue, or suspend: which frees no GPU).
preemption() {
    local mode=$1 site=$2
    echo "preemption by QOS, $mode (policy) vs none (baseline); multifactor; $site, sites/qos-no-preempt.json; $Q"
    d=$(queue preempt --site "docs/sim/$site" --baseline-site docs/sim/sites/qos-no-preempt.json --priority-type multifactor)
    printf '%-5s %-26s %-26s %-18s %s\n' seed "high wait (s) on / off" "normal wait (s) on / off" "preempted runs" throughput
    for s in $SEEDS; do
        f=$d/$s.json
        printf '%-5s %-26s %-26s %-18s %.3f\n' "$s" \
            "$(wait_of policy qos high < "$f" | xargs printf '%.0f') / $(wait_of baseline qos high < "$f" | xargs printf '%.0f')" \
            "$(wait_of policy qos normal < "$f" | xargs printf '%.0f') / $(wait_of baseline qos normal < "$f" | xargs printf '%.0f')" \
            "$(jq .policy.preemptions "$f")" "$(jq .throughput_ratio "$f")"
    done
    echo "high QOS's mean wait, s, with preemption: $(for s in $SEEDS; do wait_of policy qos high < "$d/$s.json"; done | stats); without: $(for s in $SEEDS; do wait_of baseline qos high < "$d/$s.json"; done | stats)"
    echo "normal QOS's mean wait (on / off): $(for s in $SEEDS; do f=$d/$s.json; echo "$(wait_of policy qos normal < "$f") / $(wait_of baseline qos normal < "$f")" | bc -l; done | stats)"
    echo "throughput (on / off): $(for s in $SEEDS; do jq .throughput_ratio "$d/$s.json"; done | stats)"
    rm -r "$d"
}
preemption requeue sites/qos-preempt.json > "$out/queue-preempt.txt"
echo "$out/queue-preempt.txt"
preemption suspend sites/qos-preempt-suspend.json > "$out/queue-preempt-suspend.txt"
echo "$out/queue-preempt-suspend.txt"
{
    echo "QOS normal with MaxJobsPerUser=4 (policy) vs no QOS (baseline); sites/qos-limits.json; $Q --seed 1"
    "$G" sim $HOLD $Q --seed 1 --site docs/sim/sites/qos-limits.json --baseline-site none | grep -v '^exclusive '
} > "$out/queue-limits.txt"
echo "$out/queue-limits.txt"

# GPU time quotas (docs/simulator.md, "Queue policies"): two training jobs
# filling an A100 with shares 0.3 and 0.7 and an inference job of 50 bursts
# (1 s alone each, 5 s of CPU between), latency-critical through its QOS;
# against the same without the latency-critical QOS, and with no quota at all.
{
    echo "quotas 0.3/0.7, inference latency-critical (policy) vs quotas, inference without a QOS (baseline); 1xA100-80GB; docs/sim/quota/"
    "$G" sim $HOLD --trace docs/sim/quota/trace.json --cluster 1xA100-80GB --policy case --baseline case \
        --site docs/sim/quota/site-lc.json --baseline-site none | grep -v '^case '
    echo
    echo "no quota at all (trace-plain.json): the three share the GPU by demand"
    "$G" sim $HOLD --trace docs/sim/quota/trace-plain.json --cluster 1xA100-80GB --policy case --baseline case \
        | grep -v '^case ' | sed -n '1,4p'
} > "$out/quota-a100.txt"
echo "$out/quota-a100.txt"
