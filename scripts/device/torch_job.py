"""A PyTorch job for the interception checks: allocates about SIZE_GB in
256 MiB tensors, runs some matrix products, holds for HOLD seconds, and
prints what PyTorch saw. Usage: torch_job.py SIZE_GB HOLD_S"""
import os
import sys
import time

import torch

size_gb, hold = float(sys.argv[1]), float(sys.argv[2])
t0 = time.time()
free, total = torch.cuda.mem_get_info()
print("CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES"))
print("GSCHED_TASK_MEM_MIB", int(os.environ.get("GSCHED_TASK_MEM", "0")) >> 20)
print("mem_get_info_mib free", free >> 20, "total", total >> 20)
xs = [torch.empty(256 << 20, dtype=torch.uint8, device="cuda") for _ in range(int(size_gb * 4))]
a = torch.randn(4096, 4096, device="cuda")
for _ in range(50):
    a = a @ a
    a = a / a.norm()
torch.cuda.synchronize()
time.sleep(hold)
print("max_memory_reserved_mib", torch.cuda.max_memory_reserved() >> 20)
print("max_memory_allocated_mib", torch.cuda.max_memory_allocated() >> 20)
print("started", round(t0, 3), "ended", round(time.time(), 3))
