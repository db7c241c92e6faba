# Keeps the GPU busy for SECS seconds, a DUTY share of each 0.2 s period
# (matrix products, then sleep); prints the time it was busy by its own clock.
import sys, time, torch
secs = float(sys.argv[1]); duty = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
a = torch.randn(4096, 4096, device="cuda")
torch.cuda.synchronize()
t0 = time.time(); busy = 0.0
while time.time() - t0 < secs:
    s = time.time()
    while time.time() - s < 0.2 * duty:
        for _ in range(4):
            b = a @ a
        torch.cuda.synchronize()
    busy += time.time() - s
    if duty < 1:
        time.sleep(0.2 * (1 - duty))
print(f"busy {busy:.2f} s of {time.time() - t0:.2f} s wall (duty {duty})", flush=True)
