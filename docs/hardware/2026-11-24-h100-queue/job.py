# A shared job: takes GB of GPU memory (placed by gsched at its first CUDA
# call; it waits there until its reservation fits), then keeps the GPU busy
# for SECS seconds. Prints when it started, was placed and ended.
import sys, time
t0 = time.time()
import torch
name, gb, secs = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
x = torch.empty(int(gb * 0.9 * 2**30) // 4, dtype=torch.float32, device="cuda")
t1 = time.time()
a = torch.randn(2048, 2048, device="cuda")
while time.time() < t1 + secs:
    b = a @ a
    torch.cuda.synchronize()
print(f"JOB {name} start {t0:.3f} placed {t1:.3f} end {time.time():.3f}", flush=True)
