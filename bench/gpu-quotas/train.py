"""A training job for the GPU time quota benchmark (bench/gpu-quotas/run.sh):
a 6-layer transformer encoder (d=1024, batch 32 x 256 tokens, bf16 autocast,
AdamW), one optimizer step per iteration and the loss read back each time.
Warms up, writes --ready, waits for --barrier, then trains for --secs and
writes each iteration's end (unix time) to --log."""

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
a = ap.parse_args()

torch.manual_seed(0)
layer = nn.TransformerEncoderLayer(1024, 16, 4096, batch_first=True)
model = nn.TransformerEncoder(layer, 6, enable_nested_tensor=False).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
x = torch.randn(32, 256, 1024, device="cuda")


def step():
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(x).float().pow(2).mean()
    loss.backward()
    opt.step()
    return loss.item()


for _ in range(10):
    step()
open(a.ready, "w").close()
while not os.path.exists(a.barrier):
    time.sleep(0.01)
t0 = time.time()
ends = []
while time.time() - t0 < a.secs:
    step()
    ends.append(time.time())
with open(a.log, "w") as f:
    f.write(f"START {t0}\n")
    f.writelines(f"{t}\n" for t in ends)
print("iterations", len(ends), "per_s", round(len(ends) / a.secs, 2))
