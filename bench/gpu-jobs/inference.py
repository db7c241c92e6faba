"""Inference with small batches: an MLP (4 layers of 2048) answering
batches of 8 requests, one at a time with a sync each (a serving loop).
Low occupancy and latency-bound."""

import torch
import torch.nn as nn

from common import Job, args

a = args(__doc__, iters=35000)
job = Job("inference", a.mem_gb, working_gb=0.5)
torch.manual_seed(0)
model = nn.Sequential(
    nn.Linear(1024, 2048), nn.GELU(), nn.Linear(2048, 2048), nn.GELU(),
    nn.Linear(2048, 2048), nn.GELU(), nn.Linear(2048, 10),
).to(job.dev).eval()
x = torch.randn(8, 1024, device=job.dev)


def serve(k):
    with torch.no_grad():
        for _ in range(k):
            out = model(x)
            out.argmax(1).cpu()  # the answer goes back to the host
    return out


for _ in range(max(1, a.iters // 500)):
    job.gpu(lambda: serve(500))
job.report()
