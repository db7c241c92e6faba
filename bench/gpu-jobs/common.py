"""Shared by the GPU job suite: argument parsing, the memory ballast that
sets a job's footprint, and the one-line JSON report each job prints, with
a checksum of the job's last GPU result and a check of its ballast, so a
run whose GPU work was skipped or faulted is told from a correct one
(summarize.py compares the checksum with the same kind's alone run).

Every job is an ordinary PyTorch program: nothing in it knows gsched. Under
gsched's `case` policy the driver interception library places it."""

import argparse
import json
import os
import sys
import time

import torch


def args(description, iters):
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--mem-gb", type=float, default=2.0,
                   help="GPU memory footprint to hold (GB, data plus ballast)")
    # GPUJOB_SCALE shrinks every job (a quick smoke test of the suite).
    scale = float(os.environ.get("GPUJOB_SCALE", "1"))
    p.add_argument("--iters", type=int, default=max(1, int(iters * scale)), help="amount of work")
    return p.parse_args()


class Job:
    """Holds the ballast, times the GPU phases, reports at the end."""

    def __init__(self, kind, mem_gb, working_gb):
        self.kind = kind
        self.t0 = time.time()
        self.gpu_secs = 0.0
        self.dev = torch.device("cuda")
        self.last = None
        # Same inputs every run: the checksum depends on the work alone.
        torch.manual_seed(0)
        # The ballast tops the working set up to the stated footprint (the
        # data a real job of this size would keep resident).
        extra = max(0.0, mem_gb - working_gb)
        self.ballast = torch.empty(int(extra * (1 << 30)), dtype=torch.uint8, device=self.dev)
        if extra > 0:
            self.ballast.fill_(1)
        torch.cuda.synchronize()
        # From here the job runs on its GPU: before, it waited for its
        # placement and created its CUDA context.
        self.ready_secs = time.time() - self.t0

    def gpu(self, fn):
        """Runs one GPU phase to completion and counts its time."""
        torch.cuda.synchronize()
        t = time.time()
        out = fn()
        torch.cuda.synchronize()
        self.gpu_secs += time.time() - t
        self.last = out
        return out

    def checksum(self):
        """The last GPU result folded to one number (sum of magnitudes for
        tensors, robust to rounding order), or None when there is none."""
        out = self.last
        if isinstance(out, torch.Tensor):
            # In 16 Mi-element pieces: a double copy of the whole result
            # would need GPU memory beyond the job's stated footprint (a
            # stencil's 1 GiB grid took 4 GiB more, over its --gpu-mem).
            flat = out.detach().reshape(-1)
            step = 1 << 24
            return float(sum(flat[i:i + step].double().abs().sum().item()
                             for i in range(0, flat.numel(), step)))
        if isinstance(out, (int, float)):
            return float(out)
        return None

    def ballast_ok(self):
        """The ballast was filled with ones: anything else means the memory
        did not hold what was written. Checked in 64 MiB pieces, so the
        check itself needs no memory the job did not ask for."""
        step = 1 << 26
        for i in range(0, self.ballast.numel(), step):
            if bool((self.ballast[i:i + step] != 1).any().item()):
                return False
        return True

    def report(self):
        torch.cuda.synchronize()
        rec = {
            "kind": self.kind,
            "wall_secs": round(time.time() - self.t0, 3),
            "ready_secs": round(self.ready_secs, 3),
            "gpu_secs": round(self.gpu_secs, 3),
            "peak_mib": round(torch.cuda.max_memory_allocated() / (1 << 20)),
            "checksum": self.checksum(),
            "ballast_ok": self.ballast_ok(),
        }
        print("GPUJOB " + json.dumps(rec), flush=True)
        sys.stdout.flush()
