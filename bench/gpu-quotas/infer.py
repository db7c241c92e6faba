"""An inference job for the GPU time quota benchmark (bench/gpu-quotas/run.sh):
a 4-layer transformer encoder (d=1024) serving batches of 8 x 128 tokens
(bf16), one request every --interval seconds on a fixed schedule. Each
request's latency is from its launch to its result on the host. Warms up,
writes --ready, waits for --barrier, serves for --secs, writes the
latencies (ms) to --log."""

import argparse
import os
import time

import torch
import torch.nn as nn

ap = argparse.ArgumentParser(description=__doc__)
ap.add_argument("--secs", type=float, required=True)
ap.add_argument("--barrier", required=True)
ap.add_argument("--ready", required=True)
ap.add_argument("--log", required=True)
ap.add_argument("--interval", type=float, default=0.02)
a = ap.parse_args()

torch.manual_seed(0)
layer = nn.TransformerEncoderLayer(1024, 16, 4096, batch_first=True)
model = nn.TransformerEncoder(layer, 4, enable_nested_tensor=False).cuda().eval()
x = torch.randn(8, 128, 1024, device="cuda")


@torch.no_grad()
def serve():
    with torch.autocast("cuda", dtype=torch.bfloat16):
        y = model(x)
    return float(y[0, 0, 0])


for _ in range(30):
    serve()
open(a.ready, "w").close()
while not os.path.exists(a.barrier):
    time.sleep(0.01)
t0 = time.time()
lat = []
k = 0
while True:
    arrival = t0 + k * a.interval
    if arrival - t0 >= a.secs:
        break
    now = time.time()
    if arrival > now:
        time.sleep(arrival - now)
    s = time.perf_counter()
    serve()
    lat.append((time.perf_counter() - s) * 1e3)
    k += 1
with open(a.log, "w") as f:
    f.writelines(f"{v:.4f}\n" for v in lat)
lat.sort()
print("requests", len(lat), "p50_ms", round(lat[len(lat) // 2], 3), "p99_ms", round(lat[int(len(lat) * 0.99)], 3))
