"""Mostly CPU with short GPU bursts: a host phase (sorting and hashing on
one core, about 0.5 s) then a burst of GPU work (a few hundred ms), in
rounds. The GPU idles most of the time: the case packing is made for."""

import hashlib
import random

import torch

from common import Job, args

a = args(__doc__, iters=14)
job = Job("cpu_burst", a.mem_gb, working_gb=0.5)
n = 4096
w = torch.randn(n, n, device=job.dev)
rng = random.Random(1)


def host_phase():
    data = [rng.random() for _ in range(300_000)]
    data.sort()
    h = hashlib.sha256()
    for v in data[::10]:
        h.update(repr(v).encode())
    return h.hexdigest()


def burst():
    y = w
    for _ in range(40):
        y = torch.tanh(y @ w)
    return y


for _ in range(a.iters):
    host_phase()
    job.gpu(burst)
job.report()
