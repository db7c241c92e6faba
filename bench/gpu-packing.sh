#!/bin/bash
# GPU packing benchmark (issue 7, docs/benchmarks.md): one policy per call.
#   bench/gpu-packing.sh POLICY [SEED] [JOBS]   POLICY: exclusive | case | case-no-ceiling | case-ceiling:C | case-no-early | cg:R
# Runs on a machine with one NVIDIA GPU (MIG disabled: the whole GPU is one
# instance, with an MPS server of gsched's own), from a tree holding the
# release binaries and libgprobe.so in dist/ (or BIN=...). Leaves the GPU as
# found: no MIG or compute-mode change; MPS is told to quit at the end.
# Writes $OUT/gpu-packing-POLICY[-TRIAL].json (POLICY with ':' as '-').
# Environment: BATCH=tight for the memory-tight batch (footprints 8-16 GB);
# ALONE=FILE reuses alone times measured by an earlier call (else measured
# here, before gsched starts); KEEP_STATE=1 keeps gsched's state (its
# database: what earlier trials taught it) from the last call of the same
# policy and batch; TRIAL names this run in the output files.
# JOBSET=external runs the external suite (bench/gpu-external: NVIDIA's
# CUDA samples, fetched and built with its fetch.sh and build.sh) in
# place of the project's own (bench/gpu-jobs). Host memory in use (MemTotal
# less MemAvailable) is sampled every half second.
# bench/gpu-interleaved.sh runs trials in an interleaved order.
set -u
POLICY=${1:?usage: bench/gpu-packing.sh exclusive|case|cg:R [SEED] [JOBS]}
SEED=${2:-1}
JOBS=${3:-24}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
JOBSET=${JOBSET:-own}
case $JOBSET in
  own) SUITE=$ROOT/bench/gpu-jobs; KINDS="dense stencil graph cnn_train inference cpu_burst" ;;
  external) SUITE=$ROOT/bench/gpu-external
    KINDS=$(python3 -c 'import runpy, sys; print(" ".join(runpy.run_path(sys.argv[1])["KINDS"]))' "$SUITE/batch.py") ;;
  *) echo "JOBSET must be own or external" >&2; exit 2 ;;
esac
OUT=${OUT:-$ROOT/gpu-out}
BIN=${BIN:-$ROOT/dist}
BATCH=${BATCH:-regular}
TAG=${POLICY/:/-}
OTAG=$TAG${TRIAL:+-$TRIAL}
mkdir -p "$OUT"
export PATH="$BIN:$PATH"
st=/tmp/gsched-pack-$BATCH-$TAG
if [ "${KEEP_STATE:-0}" = 1 ] && [ -d "$st/state" ]; then
  rm -rf "$st/jobs" "$st/alone.txt"; mkdir -p "$st/jobs"
else
  rm -rf "$st"; mkdir -p "$st/jobs"
fi
BATCH_FLAGS=()
[ "$BATCH" = tight ] && BATCH_FLAGS=(--tight)
# Only case starts isolated jobs early (their GPU work held until the GPU is
# theirs): Slurm, which exclusive and cg:R stand for, cannot.
case $POLICY in
  exclusive) FLAGS=(--launch-policy exclusive --early-start-secs 0) ;;
  case) FLAGS=() ;;
  case-no-early) FLAGS=(--early-start-secs 0) ;;  # case as before early starts
  case-no-ceiling) FLAGS=(--compute-ceiling off) ;;  # case as before issue 17's ceiling
  case-ceiling:*) FLAGS=(--compute-ceiling "${POLICY#case-ceiling:}") ;;  # case with another ceiling
  # Memory-blind sharing (Slurm's gres/shard): at most R jobs at once, each
  # process placed whatever its memory; intercepted, so that isolated jobs
  # run alone as they do under Slurm.
  cg:*) FLAGS=(--workers "${POLICY#cg:}" --placement-policy blind --early-start-secs 0) ;;
  *) echo "unknown policy $POLICY" >&2; exit 2 ;;
esac
machine="$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)"
# 1. Alone times: each kind by itself on the idle GPU (before gsched starts).
# The whole process is timed (interpreter and CUDA start-up included), as a
# job's elapsed time in gsched is.
if [ -n "${ALONE:-}" ]; then cp "$ALONE" "$st/alone.txt"; fi
for k in $KINDS; do
  [ -n "${ALONE:-}" ] && break
  t0=$(date +%s.%N)
  if [ "$JOBSET" = own ]; then run=(python3 "$SUITE/$k.py" --mem-gb 2); else run=(bash "$SUITE/run_kind.sh" "$k"); fi
  "${run[@]}" >"$st/alone-$k.out" 2>"$st/alone-$k.err" ||
    { echo "alone run of $k failed:" >&2; tail -5 "$st/alone-$k.err" >&2; }
  t1=$(date +%s.%N)
  grep '^GPUJOB' "$st/alone-$k.out" >>"$st/alone.txt"
  echo "ALONE $k $(python3 -c "print(round($t1 - $t0, 3))")" >>"$st/alone.txt"
done
# 2. gsched with the policy, the whole GPU as one instance with MPS.
printf '[[gpu]]\nindex = 0\nmps = true\n' >"$st/gpus.toml"
# gnoded's placement decisions are logged (debug) for placements-*.log.
RUST_LOG=${RUST_LOG:-info,gsched_noded::probe=debug} gsched up --state-dir "$st/state" --listen 127.0.0.1:7819 --node-name gpu1 --kill-wait 5 \
  --heartbeat-interval 1 --gpu-config "$st/gpus.toml" "${FLAGS[@]}" >"$st/up.log" 2>&1 &
UP=$!
SMI=; HOSTMEM=
trap 'kill $SMI $HOSTMEM 2>/dev/null; kill -TERM $UP 2>/dev/null; wait $UP 2>/dev/null' EXIT
export GSCHED_URL=http://127.0.0.1:7819
for _ in $(seq 150); do ginfo >/dev/null 2>&1 && break; sleep 0.2; done
sleep 2
python3 "$SUITE/batch.py" --seed "$SEED" --jobs "$JOBS" --policy "$POLICY" --dir "$st/jobs" \
  --suite "$SUITE" "${BATCH_FLAGS[@]}" >"$st/batch.tsv"
nvidia-smi --query-gpu=timestamp,memory.used,memory.total,utilization.gpu --format=csv,noheader,nounits \
  -lms 1000 >"$st/smi.csv" &
SMI=$!
# Host memory in use, MiB, every half second (the batch's own processes
# and gsched's, over what the machine used before).
awk '/^MemTotal:/ {t=$2} /^MemAvailable:/ {a=$2} END {print int((t - a) / 1024)}' /proc/meminfo >"$st/host-idle.txt"
( while :; do awk '/^MemTotal:/ {t=$2} /^MemAvailable:/ {a=$2} END {print int((t - a) / 1024)}' /proc/meminfo; sleep 0.5; done ) >"$st/host.txt" &
HOSTMEM=$!
ids=()
while IFS=$'\t' read -r idx kind mem iso script; do
  [ "$idx" = index ] && continue
  ids+=("$(gsub --parsable "$script")")
done <"$st/batch.tsv"
list=$(IFS=,; echo "${ids[*]}")
# 3. Wait for every job to end (at most 9 minutes).
for _ in $(seq 1080); do
  left=$(gqueue -h -j "$list" 2>/dev/null | wc -l)
  [ "$left" -eq 0 ] && break
  sleep 0.5
done
kill $SMI $HOSTMEM 2>/dev/null
gacct -j "$list" --json >"$st/jobs.json"
python3 "$ROOT/bench/gpu-jobs/summarize.py" --policy "$POLICY" --batch "$st/batch.tsv" --jobs "$st/jobs.json" \
  --alone "$st/alone.txt" --smi "$st/smi.csv" --host "$st/host.txt" --host-idle "$st/host-idle.txt" \
  --machine "$machine" >"$OUT/gpu-packing-$OTAG.json"
cp "$st/alone.txt" "$OUT/alone.txt"
gacct -j "$list" >"$OUT/gacct-$OTAG.txt" 2>&1
cp "$st/jobs.json" "$OUT/jobs-$OTAG.json"
grep -E 'task (placed|waits)|kept room|room kept|measured compute' "$st/up.log" | tail -n 5000 >"$OUT/placements-$OTAG.log" 2>/dev/null
grep -E 'started early|instances are free|waiting for shared tasks' "$st/up.log" >"$OUT/early-$OTAG.log" 2>/dev/null
tail -n 3 "$st"/jobs/*.out >"$OUT/jobs-$OTAG.txt" 2>&1
kill -TERM $UP; wait $UP; trap - EXIT
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); [d.pop(k) for k in ('rows','memory_mib_samples')]; print(json.dumps(d, indent=1))" \
  "$OUT/gpu-packing-$OTAG.json"
{ ps -eo pid,stat,args | grep '[n]vidia-cuda-mps' | grep -v ' Z' && echo "MPS still running"; } || true
