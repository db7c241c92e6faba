#!/bin/bash
# GPU time quota benchmark (issue 20 item 7, docs/benchmarks.md). Runs on a
# machine with one NVIDIA GPU (MIG off: the whole GPU is one instance, with
# an MPS server of gsched's own), from a tree holding the release binaries
# and libgprobe.so in dist/ (or BIN=...). Leaves the GPU as found: no MIG or
# compute-mode change; gsched tells its MPS daemon to quit at the end.
#   ROUNDS="fwd rev fwd" bench/gpu-quotas/run.sh
# Each round runs every configuration once, in CONFIGS order (fwd) or
# reversed (rev): interleaved repeats. Writes $OUT/CONFIG-TRIAL/ (each job's
# log and output) and $OUT/summary.json (bench/gpu-quotas/summarize.py).
# Configurations (A, B: training jobs; I: an inference job):
#   train_alone     A alone, no quota             15 s
#   train_alone_q   A alone, --gpu-share 0.3      15 s
#   pair_q          A 0.3 (18 s) with B 0.7 (9 s), started together
#   pair_nq         the same without quotas (MPS alone shares the GPU)
#   infer_alone     I alone, no QOS               10 s
#   infer_alone_lc  I alone, latency-critical QOS 10 s
#   infer_nq        I with A and B, no quota, no QOS
#   infer_lc        I latency-critical with A and B at 0.5 each
#   infer_outside   I started directly, not by gsched (plain CUDA, no MPS),
#                   while gsched runs idle
# INFER_SECS (default 10) sets how long I serves; TRIAL0 numbers this call's
# trials after earlier ones; PLAIN=1 first runs I
# directly before gsched starts (plain CUDA, nothing else on the machine).
set -u
INFER_SECS=${INFER_SECS:-10}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
HERE=$ROOT/bench/gpu-quotas
OUT=${OUT:-$ROOT/quota-out}
BIN=${BIN:-$ROOT/dist}
ROUNDS=${ROUNDS:-fwd}
CONFIGS=${CONFIGS:-"train_alone train_alone_q pair_q pair_nq infer_alone infer_alone_lc infer_nq infer_lc"}
mkdir -p "$OUT"
export PATH="$BIN:$PATH"
st=/tmp/gq
rm -rf "$st"
mkdir -p "$st/jobs"
nvidia-smi --query-gpu=name,driver_version,memory.total,mig.mode.current,compute_mode --format=csv,noheader >"$OUT/machine.txt"
# direct DIR: I served by python3 itself (not a gsched job).
direct() {
  mkdir -p "$1" && touch "$1/go"
  python3 "$HERE/infer.py" --secs "$INFER_SECS" --barrier "$1/go" --ready "$1/I.ready" --log "$1/I.log" >"$1/I.out" 2>&1
}
if [ "${PLAIN:-0}" = 1 ]; then
  direct "$OUT/infer_plain-0"
  echo "infer_plain-0: $(cat "$OUT/infer_plain-0/I.out" | grep requests)"
fi
printf '[[gpu]]\nindex = 0\nmps = true\n' >"$st/gpus.toml"
gsched up --state-dir "$st/state" --listen 127.0.0.1:7820 --node-name gpu1 --kill-wait 5 \
  --heartbeat-interval 1 --gpu-config "$st/gpus.toml" >"$st/up.log" 2>&1 &
UP=$!
trap 'kill -TERM $UP 2>/dev/null; wait $UP 2>/dev/null; cp $st/up.log $OUT/up.log' EXIT
export GSCHED_URL=http://127.0.0.1:7820
for _ in $(seq 150); do ginfo >/dev/null 2>&1 && break; sleep 0.2; done
gsched slurm-shims "$st/shims" >/dev/null
"$st/shims/sacctmgr" -i add qos normal
"$st/shims/sacctmgr" -i add qos lc GpuShare=0.2 Flags=LatencyCritical
"$st/shims/sacctmgr" -P show qos >"$OUT/qos.txt"

# job DIR LABEL KIND SECS [gsub options...]: submits one job; prints its id.
job() {
  local dir=$1 label=$2 kind=$3 secs=$4
  shift 4
  local mem=10G
  [ "$kind" = infer ] && mem=4G
  printf '#!/bin/sh\nexec python3 %s/%s.py --secs %s --barrier %s/go --ready %s/%s.ready --log %s/%s.log\n' \
    "$HERE" "$kind" "$secs" "$dir" "$dir" "$label" "$dir" "$label" >"$dir/$label.sh"
  gsub --parsable --gpu-mem "$mem" -J "$label" -o "$dir/$label.out" "$@" "$dir/$label.sh"
}

run() {
  local name=$1 trial=$2 dir=$st/jobs/$1-$2
  mkdir -p "$dir"
  local ids=() labels=()
  case $name in
    train_alone) ids+=("$(job "$dir" A train 15)") ;;
    train_alone_q) ids+=("$(job "$dir" A train 15 --gpu-share 0.3)") ;;
    pair_q) ids+=("$(job "$dir" A train 18 --gpu-share 0.3)" "$(job "$dir" B train 9 --gpu-share 0.7)") ;;
    pair_nq) ids+=("$(job "$dir" A train 18)" "$(job "$dir" B train 9)") ;;
    infer_alone) ids+=("$(job "$dir" I infer "$INFER_SECS")") ;;
    infer_alone_lc) ids+=("$(job "$dir" I infer "$INFER_SECS" --qos lc)") ;;
    infer_nq) ids+=("$(job "$dir" I infer "$INFER_SECS")" "$(job "$dir" A train $((INFER_SECS + 2)))" "$(job "$dir" B train $((INFER_SECS + 2)))") ;;
    infer_lc) ids+=("$(job "$dir" I infer "$INFER_SECS" --qos lc)" "$(job "$dir" A train $((INFER_SECS + 2)) --gpu-share 0.5)" "$(job "$dir" B train $((INFER_SECS + 2)) --gpu-share 0.5)") ;;
    infer_outside)
      direct "$dir"
      mkdir -p "$OUT/$name-$trial" && cp "$dir"/I.* "$OUT/$name-$trial/"
      echo "$name-$trial: $(grep requests "$dir/I.out")"
      return ;;
    *) echo "unknown configuration $name" >&2; return ;;
  esac
  local n=${#ids[@]}
  for _ in $(seq 1200); do
    [ "$(ls "$dir"/*.ready 2>/dev/null | wc -l)" -ge "$n" ] && break
    sleep 0.1
  done
  touch "$dir/go"
  local list
  list=$(IFS=,; echo "${ids[*]}")
  for _ in $(seq 900); do
    [ "$(gqueue -h -j "$list" 2>/dev/null | wc -l)" -eq 0 ] && break
    sleep 0.2
  done
  mkdir -p "$OUT/$name-$trial"
  cp "$dir"/*.log "$dir"/*.out "$OUT/$name-$trial/" 2>/dev/null
  gacct -j "$list" >"$OUT/$name-$trial/gacct.txt" 2>&1
  echo "$name-$trial: $(cat "$dir"/*.out | grep -E '^(iterations|requests)' | tr '\n' ' ')"
}

t=${TRIAL0:-0}  # trials are numbered from TRIAL0 + 1
for order in $ROUNDS; do
  t=$((t + 1))
  list=$CONFIGS
  [ "$order" = rev ] && list=$(echo "$CONFIGS" | tr ' ' '\n' | tac | tr '\n' ' ')
  # DEADLINE (seconds since the start): no configuration starts after it.
  for c in $list; do
    [ "$SECONDS" -gt "${DEADLINE:-1000000}" ] && break
    run "$c" "$t"
  done
done
grep -E 'token client left' "$st/up.log" | sed 's/\x1b\[[0-9;]*m//g' >"$OUT/tokens.log"
python3 "$HERE/summarize.py" "$OUT" >"$OUT/summary.json"
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(json.dumps(d['summary'], indent=0))" "$OUT/summary.json"
# Few files travel back: every run's logs in one archive.
tar -C "$OUT" -czf "$OUT/runs.tgz" $(cd "$OUT" && ls -d *-[0-9]*) && rm -rf "$OUT"/*-[0-9]*
