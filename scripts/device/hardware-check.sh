#!/bin/bash
# The real-GPU checks of docs/hardware.md, run on a machine with an NVIDIA GPU
# from a tree holding release binaries in dist/ (see docs/hardware.md).
# Read-only on the GPU: no MIG mode change, no instance created or destroyed,
# no compute-mode change, no reset. Results go to $OUT (default ./hw-out).
set -u
OUT=${OUT:-$PWD/hw-out}
BIN=${BIN:-$PWD/dist}
mkdir -p "$OUT"
export PATH="$BIN:$PATH"
log() { echo "+ $*"; }

{
log nvidia-smi --query-gpu=index,name,uuid,memory.total,mig.mode.current,compute_mode --format=csv
nvidia-smi --query-gpu=index,name,uuid,memory.total,mig.mode.current,compute_mode --format=csv
log "nvidia-smi -q | grep -E 'Product Name|GPU UUID|Total|MIG Mode|Current|Pending' | head -20"
nvidia-smi -q | grep -E '^\s*(Product Name|GPU UUID|MIG Mode|Current|Pending|Driver Version)|FB Memory Usage' -A1 | head -24
} >"$OUT/nvidia-smi.txt" 2>&1

gsched hw >"$OUT/gsched-hw.txt" 2>&1; echo "rc=$?" >>"$OUT/gsched-hw.txt"
gsched hw --json >"$OUT/gsched-hw.json" 2>&1

cat >"$OUT/cuda_probe.py" <<'PY'
import os, subprocess, torch
vis = os.environ.get("CUDA_VISIBLE_DEVICES")
print("CUDA_VISIBLE_DEVICES", vis)
print("CUDA_MPS_PIPE_DIRECTORY", os.environ.get("CUDA_MPS_PIPE_DIRECTORY"))
print("SLURM_JOB_GPUS", os.environ.get("SLURM_JOB_GPUS"), "SLURM_GPUS_ON_NODE", os.environ.get("SLURM_GPUS_ON_NODE"))
n = torch.cuda.device_count()
print("device_count", n)
p = torch.cuda.get_device_properties(0)
uuid = "GPU-" + str(p.uuid)
print("device0", p.name, uuid, p.total_memory // 2**20, "MiB", p.multi_processor_count, "SMs")
print("matches_given", n == 1 and vis in (uuid, str(p.uuid)))
x = torch.randn(2048, 2048, device="cuda")
print("matmul_ok", float((x @ x).sum()) == float((x @ x).sum()))
pipe = os.environ.get("CUDA_MPS_PIPE_DIRECTORY")
if pipe:
    r = subprocess.run(["nvidia-cuda-mps-control"], input="get_server_list\n", capture_output=True, text=True)
    print("mps_server_list", r.stdout.strip().split())
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader"], capture_output=True, text=True).stdout
    print("nvidia-smi compute apps:", out.strip().replace("\n", " | "))
PY

run_up() {  # $1 name, $2 extra gsched up args
  local name=$1; shift
  local st=/tmp/gsched-hw-$name
  rm -rf "$st"; mkdir -p "$st"
  gsched up --state-dir "$st" --listen 127.0.0.1:7817 --node-name gpu1 --kill-wait 2 --heartbeat-interval 1 "$@" >"$OUT/up-$name.log" 2>&1 &
  UP=$!
  trap 'kill -TERM $UP 2>/dev/null' EXIT
  export GSCHED_URL=http://127.0.0.1:7817
  for _ in $(seq 100); do ginfo >/dev/null 2>&1 && break; sleep 0.2; done
  sleep 2
  { log ginfo; ginfo; } >"$OUT/ginfo-$name.txt" 2>&1
  cd "$st"
  printf '#!/bin/sh\n#SBATCH -J cuda-probe -o probe.out\nexec python3 %s\n' "$OUT/cuda_probe.py" >probe.sh
  id=$(gsub --parsable --gres=gpu:1 probe.sh) || id=
  for _ in $(seq 300); do
    [ -n "$id" ] || break
    s=$(gacct -j "$id" --json 2>/dev/null | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["jobs"][0]["job_state"])' 2>/dev/null)
    case "$s" in COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL) break;; esac
    sleep 0.5
  done
  { log gacct -j "$id"; gacct -j "$id"; log cat probe.out; cat probe.out; } >"$OUT/job-$name.txt" 2>&1
  cd - >/dev/null
  kill -TERM $UP; wait $UP
  echo "gsched up exited: $?" >>"$OUT/up-$name.log"
  { log "ps -eo pid,args | grep nvidia-cuda-mps (after shutdown)"; ps -eo pid,args | grep '[n]vidia-cuda-mps' || echo "(none)"; } >>"$OUT/job-$name.txt"
}

run_up plain
cat >/tmp/gsched-gpus.toml <<'T'
[[gpu]]
index = 0
mps = true
T
cp /tmp/gsched-gpus.toml "$OUT/gpus.toml"
run_up mps --gpu-config /tmp/gsched-gpus.toml
cp /tmp/gsched-hw-mps/mps/gpu1/*/log/control.log "$OUT/mps-control.log" 2>/dev/null
# Whatever happened above, no MPS daemon of ours may be left behind.
for d in /tmp/gsched-hw-mps/mps/gpu1/*/pipe; do
  [ -d "$d" ] && echo quit | CUDA_MPS_PIPE_DIRECTORY=$d nvidia-cuda-mps-control 2>/dev/null
done
exit 0
