"""Memory-bound stencil: Jacobi iterations of a 5-point stencil on a
16384 x 16384 fp32 grid (1 GiB per array). Bandwidth-bound, few kernels."""

import torch

from common import Job, args

a = args(__doc__, iters=2000)
job = Job("stencil", a.mem_gb, working_gb=4.0)
n = 16384
u = torch.zeros(n, n, device=job.dev)
u[0, :] = 1.0
v = torch.empty_like(u)


def sweep(k):
    global u, v
    for _ in range(k):
        v[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])
        u, v = v, u
    return u


for _ in range(max(1, a.iters // 50)):
    job.gpu(lambda: sweep(50))
job.report()
