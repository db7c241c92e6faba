# What a CUDA context costs in GPU memory (issue 17, item 2): the process's
# own used memory as NVML reports it (nvidia-smi --query-compute-apps), and
# the device's used memory, before and after, for a bare driver context
# (ctypes: cuInit + cuDevicePrimaryCtxRetain), PyTorch and CuPy.
#   python3 ctx.py MODE KIND HOLD_SECS
import ctypes, json, os, subprocess, sys, time

mode, kind, hold = sys.argv[1], sys.argv[2], float(sys.argv[3])
pid = os.getpid()


def smi(q):
    return subprocess.run(["nvidia-smi", q, "--format=csv,noheader,nounits"],
                          capture_output=True, text=True).stdout


def own():
    for line in smi("--query-compute-apps=pid,used_memory").splitlines():
        p, m = [x.strip() for x in line.split(",")]
        if int(p) == pid:
            return m
    return None


def device():
    return int(smi("--query-gpu=memory.used").split()[0])


before = device()
t0 = time.time()
if kind == "driver":
    cu = ctypes.CDLL("libcuda.so.1")
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    assert cu.cuInit(0) == 0
    assert cu.cuDeviceGet(ctypes.byref(dev), 0) == 0
    assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0
    assert cu.cuCtxSetCurrent(ctx) == 0
elif kind == "torch":
    import torch
    x = torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
elif kind == "torch-blas":
    import torch
    a = torch.randn(1024, 1024, device="cuda")
    b = a @ a
    torch.cuda.synchronize()
elif kind == "cupy":
    import cupy
    x = cupy.zeros(1)
    cupy.cuda.Device(0).synchronize()
made = time.time() - t0
time.sleep(0.5)
print(json.dumps({"mode": mode, "kind": kind, "pid": pid, "own_mib": own(),
                  "device_before_mib": before, "device_after_mib": device(),
                  "secs_to_context": round(made, 3)}), flush=True)
time.sleep(hold)
