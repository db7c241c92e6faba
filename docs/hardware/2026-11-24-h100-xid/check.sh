#!/bin/bash
# Issue 17, item 5 on a real GPU, through gsched: two shared jobs under
# MPS on the whole GPU, a victim busy in a loop and one that writes out of
# bounds. Expected: both end FAILED with a reason naming the fault and the
# driver's Xid (NVML critical Xid event). From a tree with release binaries
# in dist/. gsched tells its MPS daemon to quit when it stops.
set -u
exec > >(tee "$OUT/check.log") 2>&1
export PATH=$PWD/dist:$PATH
st=/tmp/gx; rm -rf $st; mkdir -p $st
nvidia-smi --query-gpu=name,mig.mode.current,compute_mode,driver_version --format=csv,noheader
printf '[[gpu]]\nindex = 0\nmps = true\n' >$st/gpus.toml
gsched up --state-dir $st/state --listen 127.0.0.1:7820 --node-name gpu1 --heartbeat-interval 1 \
  --kill-wait 5 --gpu-config $st/gpus.toml >$st/up.log 2>&1 &
UP=$!
export GSCHED_URL=http://127.0.0.1:7820
for _ in $(seq 150); do ginfo >/dev/null 2>&1 && break; sleep 0.2; done
sleep 2
cat >$st/victim.sh <<'EOF'
#!/bin/bash
#SBATCH -J victim
python3 -c "
import time, torch
x = torch.randn(4096, 4096, device='cuda'); t0 = time.time(); n = 0
while time.time() - t0 < 25:
    x = torch.tanh(x @ x * 1e-3); torch.cuda.synchronize(); n += 1
print('victim finished', n, 'rounds')
"
EOF
cat >$st/faulter.sh <<'EOF'
#!/bin/bash
#SBATCH -J faulter
sleep 10
python3 -c "
import cupy as cp
k = cp.RawKernel(r'''extern \"C\" __global__ void bad(float* p) { p[threadIdx.x + (1ull << 36)] = 1.0f; }''', 'bad')
a = cp.zeros(16, dtype=cp.float32)
k((1,), (32,), (a,)); cp.cuda.runtime.deviceSynchronize(); print('faulter: no error')
"
EOF
v=$(gsub --parsable --gpu-mem 2G -o $st/victim.out $st/victim.sh)
f=$(gsub --parsable --gpu-mem 1G -o $st/faulter.out $st/faulter.sh)
for _ in $(seq 120); do
  [ "$(gqueue -h -j $v,$f 2>/dev/null | wc -l)" -eq 0 ] && break; sleep 1
done
echo "== gacct"; gacct -j $v,$f
echo "== reasons"; gacct -j $v,$f --json | python3 -c "
import json, sys
d = json.load(sys.stdin)
for j in (d if isinstance(d, list) else d.get('jobs', [])):
    print(j.get('job_id'), j.get('name'), j.get('job_state', j.get('state')), j.get('state_reason', j.get('reason')))
"
echo "== job outputs"; tail -n 3 $st/victim.out $st/faulter.out
echo "== gnoded on Xid and the fault"; grep -E "Xid|fatal GPU error|tore down" $st/up.log | cut -c1-400
kill -TERM $UP; wait $UP
{ ps -eo pid,stat,args | grep '[n]vidia-cuda-mps' | grep -v ' Z' && echo "MPS still running"; } || true
