#!/bin/bash
# What suspending a GPU job frees (issue 20 item 5, docs/benchmarks.md).
# Runs on a machine with one NVIDIA GPU (MIG off: the whole GPU is one
# instance with gsched's own MPS server), from a tree holding the release
# binaries and libgprobe.so in dist/ (or BIN=...). Leaves the GPU as found:
# no MIG or compute-mode change; gsched tells its MPS daemon to quit.
#   ROUNDS=3 bench/gpu-suspend/run.sh
# Each round runs, in alternating order:
#   alone  B (bench/gpu-quotas/train.py) alone for ALONE_SECS
#   pair   A and B together for PAIR_SECS; at SUSPEND_AT s an administrator
#          suspends A (scontrol suspend), at RESUME_AT s resumes it
# nvidia-smi samples the GPU's memory in use and utilization every 0.25 s.
# Writes $OUT/ROUND-CONFIG/ (logs, events, samples) and $OUT/summary.json.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
HERE=$ROOT/bench/gpu-suspend
TRAIN=$ROOT/bench/gpu-quotas/train.py
OUT=${OUT:-$ROOT/suspend-out}
BIN=${BIN:-$ROOT/dist}
ROUNDS=${ROUNDS:-3}
ALONE_SECS=${ALONE_SECS:-8}
PAIR_SECS=${PAIR_SECS:-26}
SUSPEND_AT=${SUSPEND_AT:-7}
RESUME_AT=${RESUME_AT:-17}
mkdir -p "$OUT"
export PATH="$BIN:$PATH"
st=/tmp/gs
rm -rf "$st"
mkdir -p "$st/jobs"
nvidia-smi --query-gpu=name,driver_version,memory.total,mig.mode.current,compute_mode --format=csv,noheader >"$OUT/machine.txt"
printf '[[gpu]]\nindex = 0\nmps = true\n' >"$st/gpus.toml"
gsched up --state-dir "$st/state" --listen 127.0.0.1:7821 --node-name gpu1 --kill-wait 5 \
  --heartbeat-interval 1 --gpu-config "$st/gpus.toml" >"$st/up.log" 2>&1 &
UP=$!
trap 'kill -TERM $UP 2>/dev/null; wait $UP 2>/dev/null; cp $st/up.log $OUT/up.log' EXIT
export GSCHED_URL=http://127.0.0.1:7821
for _ in $(seq 150); do ginfo >/dev/null 2>&1 && break; sleep 0.2; done
gsched slurm-shims "$st/shims" >/dev/null
S=$st/shims

# job DIR LABEL SECS: submits one shared training job; prints its id.
job() {
  local dir=$1 label=$2 secs=$3
  printf '#!/bin/sh\nexec python3 %s --secs %s --barrier %s/go --ready %s/%s.ready --log %s/%s.log\n' \
    "$TRAIN" "$secs" "$dir" "$dir" "$label" "$dir" "$label" >"$dir/$label.sh"
  gsub --parsable --gpu-mem 10G -J "$label" -o "$dir/$label.out" "$dir/$label.sh"
}

now() { date +%s.%N; }

run() {
  local name=$1 round=$2 dir=$st/jobs/$2-$1
  mkdir -p "$dir"
  local ids=()
  case $name in
    alone) ids+=("$(job "$dir" B "$ALONE_SECS")") ;;
    pair) ids+=("$(job "$dir" A "$PAIR_SECS")" "$(job "$dir" B "$PAIR_SECS")") ;;
  esac
  local n=${#ids[@]}
  for _ in $(seq 1200); do
    [ "$(ls "$dir"/*.ready 2>/dev/null | wc -l)" -ge "$n" ] && break
    sleep 0.1
  done
  nvidia-smi --query-gpu=timestamp,memory.used,utilization.gpu --format=csv,noheader,nounits -lms 250 >"$dir/smi.csv" &
  local smi=$!
  sleep 1
  touch "$dir/go"
  echo "go $(now)" >"$dir/events.txt"
  if [ "$name" = pair ]; then
    sleep "$SUSPEND_AT"
    echo "suspend $(now)" >>"$dir/events.txt"
    "$S/scontrol" suspend "${ids[0]}" >>"$dir/events.txt" 2>&1
    echo "suspended $(now)" >>"$dir/events.txt"
    sleep 3
    "$S/squeue" -h -j "${ids[0]}" -o '%t %T' >>"$dir/events.txt" 2>&1
    nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader >"$dir/apps-suspended.csv" 2>&1
    sleep $((RESUME_AT - SUSPEND_AT - 3))
    echo "resume $(now)" >>"$dir/events.txt"
    "$S/scontrol" resume "${ids[0]}" >>"$dir/events.txt" 2>&1
    echo "resumed $(now)" >>"$dir/events.txt"
  fi
  local list
  list=$(IFS=,; echo "${ids[*]}")
  for _ in $(seq 900); do
    [ "$(gqueue -h -j "$list" 2>/dev/null | wc -l)" -eq 0 ] && break
    sleep 0.2
  done
  echo "ended $(now)" >>"$dir/events.txt"
  sleep 2
  kill $smi 2>/dev/null
  "$S/sacct" -j "$list" -X -P -o JobID,JobName,State,Elapsed,Suspended >"$dir/sacct.txt" 2>&1
  mkdir -p "$OUT/$round-$name"
  cp "$dir"/*.log "$dir"/*.out "$dir"/*.txt "$dir"/*.csv "$OUT/$round-$name/" 2>/dev/null
  echo "$round-$name: $(cat "$dir"/*.out | grep -E '^iterations' | tr '\n' ' ')"
}

for r in $(seq "$ROUNDS"); do
  if [ $((r % 2)) = 1 ]; then order="alone pair"; else order="pair alone"; fi
  for c in $order; do
    [ "$SECONDS" -gt "${DEADLINE:-1000000}" ] && break
    run "$c" "$r"
  done
done
grep -E 'suspended|resumed' "$st/up.log" | sed 's/\x1b\[[0-9;]*m//g' >"$OUT/suspend.log"
python3 "$HERE/summarize.py" "$OUT" >"$OUT/summary.json"
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(json.dumps(d['summary']))" "$OUT/summary.json"
cat "$OUT"/*-pair/sacct.txt "$OUT"/*-pair/apps-suspended.csv
# Few files travel back: every run's logs in one archive.
tar -C "$OUT" -czf "$OUT/runs.tgz" $(cd "$OUT" && ls -d *-alone *-pair) && rm -rf "$OUT"/*-alone "$OUT"/*-pair
