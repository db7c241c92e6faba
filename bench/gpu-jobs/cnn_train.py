"""A small CNN training loop (4 conv layers, batch 128 of 3x64x64 random
images, SGD). Moderate occupancy: room for a neighbour."""

import os

# Deterministic kernels: the result is checked against the run alone, and
# cuDNN's default algorithms (picked by the memory free, with atomics) made
# the loss after 900 steps differ by more than 1% from run to run.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

from common import Job, args

a = args(__doc__, iters=900)
job = Job("cnn_train", a.mem_gb, working_gb=1.5)
torch.manual_seed(0)
torch.backends.cudnn.benchmark = False
torch.backends.cudnn.deterministic = True
torch.use_deterministic_algorithms(True, warn_only=True)
model = nn.Sequential(
    nn.Conv2d(3, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
    nn.Conv2d(64, 128, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
    nn.Conv2d(128, 128, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
    nn.Conv2d(128, 256, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
    nn.Flatten(), nn.Linear(256, 10),
).to(job.dev)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
x = torch.randn(128, 3, 64, 64, device=job.dev)
y = torch.randint(0, 10, (128,), device=job.dev)


def steps(k):
    for _ in range(k):
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    return loss


for _ in range(max(1, a.iters // 50)):
    job.gpu(lambda: steps(50))
job.report()
