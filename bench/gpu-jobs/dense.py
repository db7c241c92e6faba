"""Dense matrix work that saturates the GPU: chains of bf16 matrix products
(8192 x 8192). Alone it keeps every SM busy, so packing gains nothing here."""

import torch

from common import Job, args

a = args(__doc__, iters=3500)
job = Job("dense", a.mem_gb, working_gb=0.5)
n = 8192
x = torch.randn(n, n, device=job.dev, dtype=torch.bfloat16)
w = torch.randn(n, n, device=job.dev, dtype=torch.bfloat16) / n**0.5


def phase(k):
    y = x
    for _ in range(k):
        y = y @ w
    return y


for _ in range(max(1, a.iters // 100)):
    job.gpu(lambda: phase(100))
job.report()
