"""One DDP training step with NCCL, launched by torchrun (RANK, LOCAL_RANK)
or by srun (SLURM_PROCID, one GPU per task). Prints what each rank saw and
whether the ranks ended with equal parameters on distinct GPUs."""
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

rank = int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0")))
world = int(os.environ.get("WORLD_SIZE", os.environ.get("SLURM_NTASKS", "1")))
local = int(os.environ.get("LOCAL_RANK", "0"))
os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29511")
torch.cuda.set_device(local)
dist.init_process_group("nccl", rank=rank, world_size=world)
dev = torch.device("cuda", local)
uuid = str(getattr(torch.cuda.get_device_properties(dev), "uuid", "?"))

torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10)
).to(dev)
ddp = DDP(model, device_ids=[local])
opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
torch.manual_seed(1 + rank)  # each rank its own batch
x = torch.randn(64, 1024, device=dev)
y = torch.randint(0, 10, (64,), device=dev)
loss = torch.nn.functional.cross_entropy(ddp(x), y)
loss.backward()
opt.step()

flat = torch.cat([p.detach().flatten() for p in model.parameters()])
every = [torch.empty_like(flat) for _ in range(world)]
dist.all_gather(every, flat)
equal = all(torch.equal(every[0], t) for t in every)
uuids = [None] * world
dist.all_gather_object(uuids, uuid)
print(
    f"rank {rank}/{world} local {local} "
    f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')} "
    f"visible={torch.cuda.device_count()} uuid=GPU-{uuid} "
    f"loss={loss.item():.4f} params_equal={equal} "
    f"distinct_gpus={len(set(uuids)) == world} nccl={torch.cuda.nccl.version()}",
    flush=True,
)
dist.destroy_process_group()
