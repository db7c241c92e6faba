#!/bin/bash
# What an MPS client's fatal fault looks like from outside (issue 17, item 5):
# one MPS control daemon on the whole GPU, a victim client busy in a loop,
# a second client that reads out of bounds. Recorded: the MPS processes
# before and after, the control and server logs, the clients' errors, and
# NVML's Xid events. Plain MPS, no gsched. The daemon is told quit at the end.
exec > >(tee "$OUT/check.log") 2>&1
M=/tmp/mpsf; rm -rf $M; mkdir -p $M/p $M/l
export CUDA_MPS_PIPE_DIRECTORY=$M/p CUDA_MPS_LOG_DIRECTORY=$M/l
nvidia-smi --query-gpu=name,mig.mode.current,compute_mode,driver_version --format=csv,noheader
nvidia-cuda-mps-control -d; sleep 1
python3 - <<'PY' > $M/xid.txt 2>&1 &
import time
try:
    import pynvml as n
except ImportError:
    print("no pynvml"); raise SystemExit
n.nvmlInit(); h = n.nvmlDeviceGetHandleByIndex(0); s = n.nvmlEventSetCreate()
n.nvmlDeviceRegisterEvents(h, n.nvmlEventTypeXidCriticalError, s)
print("waiting for Xid events", flush=True)
end = time.time() + 40
while time.time() < end:
    try:
        e = n.nvmlEventSetWait(s, 1000)
        print("XID", e.eventData, "type", e.eventType, "gi", getattr(e, "gpuInstanceId", None), flush=True)
    except n.NVMLError as x:
        if "Timeout" not in str(x): print("wait:", x, flush=True)
PY
XP=$!
python3 - <<'PY' > $M/victim.txt 2>&1 &
import os, time, torch
print("victim pid", os.getpid(), flush=True)
x = torch.randn(4096, 4096, device="cuda")
t0 = time.time(); n = 0
try:
    while time.time() - t0 < 25:
        x = torch.tanh(x @ x * 1e-3); torch.cuda.synchronize(); n += 1
    print("victim finished", n, "rounds", flush=True)
except Exception as e:
    print("victim error after", n, "rounds:", repr(e), flush=True)
PY
VP=$!
sleep 6
echo "== before the fault"; ps -eo pid,ppid,stat,args | grep -E '[n]vidia-cuda-mps|[p]ython3'
python3 - <<'PY' > $M/faulter.txt 2>&1
import os, cupy as cp
print("faulter pid", os.getpid(), flush=True)
k = cp.RawKernel(r'''extern "C" __global__ void bad(float* p) { p[threadIdx.x + (1ull << 36)] = 1.0f; }''', "bad")
a = cp.zeros(16, dtype=cp.float32)
try:
    k((1,), (32,), (a,)); cp.cuda.runtime.deviceSynchronize(); print("faulter: no error")
except Exception as e:
    print("faulter error:", repr(e), flush=True)
PY
sleep 2
echo "== after the fault"; ps -eo pid,ppid,stat,args | grep -E '[n]vidia-cuda-mps|[p]ython3'
wait $VP
echo "== after the victim ended"; ps -eo pid,ppid,stat,args | grep -E '[n]vidia-cuda-mps'
python3 -c "import torch; x=torch.ones(4,device='cuda'); print('new client ok', float(x.sum()))" > $M/newclient.txt 2>&1
sleep 1; kill $XP 2>/dev/null; wait $XP 2>/dev/null
echo quit | nvidia-cuda-mps-control; sleep 2
for f in faulter victim newclient xid; do echo "== $f"; cat $M/$f.txt; done
echo "== control.log"; cat $M/l/control.log; echo "== server.log"; cat $M/l/server.log
echo "== processes at the end"; ps -eo pid,stat,args | grep '[n]vidia-cuda-mps' || true
dmesg 2>/dev/null | grep -i xid | tail -5 || true
