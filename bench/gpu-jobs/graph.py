"""Graph traversal: breadth-first searches on a random graph (2M vertices,
32M edges, CSR), one level at a time, with a host sync per level to read
the frontier size. Many small kernels; the GPU is mostly idle between them."""

import torch

from common import Job, args

a = args(__doc__, iters=200)
job = Job("graph", a.mem_gb, working_gb=1.0)
nv, ne = 2_000_000, 32_000_000
g = torch.Generator(device=job.dev)
g.manual_seed(7)
src = torch.randint(0, nv, (ne,), device=job.dev, generator=g)
dst = torch.randint(0, nv, (ne,), device=job.dev, generator=g)
order = torch.argsort(src)
src, dst = src[order], dst[order]
rowptr = torch.zeros(nv + 1, dtype=torch.long, device=job.dev)
rowptr[1:] = torch.cumsum(torch.bincount(src, minlength=nv), 0)


def bfs(root):
    visited = torch.zeros(nv, dtype=torch.bool, device=job.dev)
    frontier = torch.tensor([root], device=job.dev)
    visited[root] = True
    levels = 0
    while frontier.numel() > 0 and levels < 64:
        starts, ends = rowptr[frontier], rowptr[frontier + 1]
        counts = ends - starts
        total = int(counts.sum().item())  # host sync, as real traversals do
        if total == 0:
            break
        base = torch.repeat_interleave(starts - torch.cumsum(counts, 0) + counts, counts)
        idx = base + torch.arange(total, device=job.dev)
        nbr = dst[idx]
        nbr = nbr[~visited[nbr]]
        nbr = torch.unique(nbr)
        visited[nbr] = True
        frontier = nbr
        levels += 1
    return levels


for i in range(a.iters):
    job.gpu(lambda: bfs(i * 9973 % nv))
job.report()
