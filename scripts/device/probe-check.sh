#!/bin/bash
# The real-GPU checks of issue 4 (docs/hardware.md, docs/benchmarks.md): run
# on a GPU machine from a tree holding release binaries and libgprobe.so in
# dist/. Read-only on the GPU (MIG left as found); one MPS daemon of
# gsched's own, told to quit at the end. Results go to $OUT.
set -u
OUT=${OUT:-$PWD/probe-out}
BIN=${BIN:-$PWD/dist}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
export PATH="$BIN:$PATH"
st=/tmp/gsched-probe
rm -rf "$st"; mkdir -p "$st"
printf '[[gpu]]\nindex = 0\nmps = true\n' >"$st/gpus.toml"
nvcc -O2 -o "$st/alloc_bench" "$HERE/alloc_bench.cu" >"$OUT/nvcc.log" 2>&1
gsched up --state-dir "$st" --listen 127.0.0.1:7818 --node-name gpu1 --kill-wait 2 \
  --heartbeat-interval 1 --gpu-config "$st/gpus.toml" >"$OUT/up.log" 2>&1 &
UP=$!
trap 'kill -TERM $UP 2>/dev/null; wait $UP 2>/dev/null' EXIT
export GSCHED_URL=http://127.0.0.1:7818
for _ in $(seq 100); do ginfo >/dev/null 2>&1 && break; sleep 0.2; done
sleep 2
cd "$st"
state() { gacct -j "$1" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["jobs"][0]["job_state"])'; }
waitjob() {
  for _ in $(seq 600); do
    case "$(state "$1")" in COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY) return;; esac
    sleep 0.5
  done
}
job() {  # name, gsub options..., then -- command
  local name=$1; shift
  local opts=()
  while [ "$1" != "--" ]; do opts+=("$1"); shift; done; shift
  printf '#!/bin/sh\nexec %s\n' "$*" >"$name.sh"
  gsub --parsable -J "$name" -o "$name.out" "${opts[@]}" "$name.sh"
}
total_mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
big=$(( total_mib * 6 / 10 / 1024 ))
echo "GPU memory ${total_mib} MiB; each big job reserves ${big} GiB" >"$OUT/summary.txt"

# 1. An unmodified PyTorch job under the interception library.
j=$(job torch-peak --gpu-mem 8G -- python3 "$HERE/torch_job.py" 4 0); waitjob "$j"
# 2. Two jobs whose peaks together exceed the GPU: one waits for the other.
a=$(job big-a --gpu-mem "${big}G" -- python3 "$HERE/torch_job.py" $((big - 2)) 8)
b=$(job big-b --gpu-mem "${big}G" -- python3 "$HERE/torch_job.py" $((big - 2)) 8)
waitjob "$a"; waitjob "$b"
# 3. Overhead on a training step and per allocation: with and without.
for round in 1 2; do
  for mode in on off; do
    env=""; [ $mode = off ] && env="-u LD_PRELOAD GSCHED_INTERCEPT=0"
    t=$(job "train-$mode-$round" -- env $env python3 "$HERE/torch_train.py" 300); waitjob "$t"
    t=$(job "alloc-$mode-$round" -- env $env "$st/alloc_bench" 20000); waitjob "$t"
  done
done
# 4. Probe round trips over the unix socket.
p=$(job probe-bench -- gprobe bench --count 20000); waitjob "$p"
gsched bench placement >"$OUT/placement-bench.txt" 2>&1

for f in *.out; do echo "== $f"; cat "$f"; done >"$OUT/jobs.txt" 2>&1
gacct >"$OUT/gacct.txt" 2>&1
curl -s -H "Authorization: Bearer $(gsched token --quiet)" "$GSCHED_URL/api/v1/tasks" >"$OUT/tasks.json"
kill -TERM $UP; wait $UP; trap - EXIT
{ echo "after shutdown:"; ps -eo pid,args | grep '[n]vidia-cuda-mps' || echo "(no MPS process)"; } >>"$OUT/summary.txt"
cp "$st"/mps/gpu1/*/log/control.log "$OUT/mps-control.log" 2>/dev/null
exit 0
