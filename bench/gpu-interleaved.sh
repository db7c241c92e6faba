#!/bin/bash
# Interleaved trials of the GPU packing benchmark (issue 17, docs/benchmarks.md):
#   bench/gpu-interleaved.sh BATCH JOBS SEED POLICY...
# BATCH: regular | tight. Each POLICY runs once, in the order given (write
# the order interleaved: exclusive case cg:8 cg:8 case exclusive ...); a
# POLICY written learn:P runs P once first without counting (gsched learns
# the jobs' footprints and GPU shares from it; its state is kept for the
# counted trials of P). Alone times are measured once, in the first call.
# Results: $OUT/BATCH/gpu-packing-P-N.json, summarized by
# bench/gpu-jobs/trials.py.
set -u
BATCH=${1:?usage: bench/gpu-interleaved.sh regular|tight JOBS SEED POLICY...}
JOBS=${2:?jobs}
SEED=${3:?seed}
shift 3
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$ROOT/gpu-out}/$BATCH
mkdir -p "$OUT"
declare -A n
alone=
# A second call into the same OUT reuses the alone times of the first.
[ -s "$OUT/alone-first.txt" ] && alone=$OUT/alone-first.txt
for p in "$@"; do
  learn=0
  case $p in learn:*) learn=1; p=${p#learn:} ;; esac
  tag=${p/:/-}
  # Trials go on from those of an earlier call into the same OUT.
  [ -z "${n[$tag]:-}" ] && n[$tag]=$(ls "$OUT"/gpu-packing-"$tag"-[0-9]*.json 2>/dev/null | wc -l)
  if [ $learn = 1 ]; then trial=learn; else n[$tag]=$(( ${n[$tag]:-0} + 1 )); trial=${n[$tag]}; fi
  keep=0
  [ $learn = 1 ] || [ -e "$OUT/.learned-$tag" ] && keep=1
  echo "== $(date +%T) $BATCH $p trial $trial"
  BATCH=$BATCH TRIAL=$trial KEEP_STATE=$keep ALONE=$alone OUT=$OUT \
    bash "$ROOT/bench/gpu-packing.sh" "$p" "$SEED" "$JOBS" >"$OUT/run-$tag-$trial.txt" 2>&1
  [ $learn = 1 ] && touch "$OUT/.learned-$tag"
  [ -z "$alone" ] && [ -s "$OUT/alone.txt" ] && { cp "$OUT/alone.txt" "$OUT/alone-first.txt"; alone=$OUT/alone-first.txt; }
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print({k: d.get(k) for k in ('policy','jobs','correct','wrong_results','oom_failures','other_failures','makespan_secs','throughput_jobs_per_hour','mean_turnaround_secs','mean_job_slowdown','antt','memory_utilization','mean_gpu_utilization_pct','host_mem_peak_gib')})" \
    "$OUT/gpu-packing-$tag-$trial.json" 2>&1 | tail -1
done
