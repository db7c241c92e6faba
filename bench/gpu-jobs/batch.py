"""Builds the batch of the GPU packing benchmark from a seed: job scripts
for `gsub`, one per line of the printed table (id order = submit order).

Kinds and footprint ranges (GB, uniform, rounded to 0.5): dense 2-12,
stencil 5-30, graph 2-8, cnn_train 2-6, inference 1-4, cpu_burst 1-10.
Each kind appears jobs/6 times; one job in six (chosen by the seed) is
isolated (it asks for the GPU to itself). Under `case`, shared jobs state
their footprint plus 1 GB of headroom (`#GSCHED --gpu-mem`), as a user
would; under `cg:R` they run without the interception library (memory-
blind sharing); under `exclusive` every job holds the GPU."""

import argparse
import os
import random

KINDS = {
    "dense": (2, 12),
    "stencil": (5, 30),
    "graph": (2, 8),
    "cnn_train": (2, 6),
    "inference": (1, 4),
    "cpu_burst": (1, 10),
}


def write_job(directory, i, kind, mem, iso, policy, command):
    """Writes job `i`'s script (footprint `mem` GB, isolated or not, under
    `policy`, running `command`) and prints its line of the table."""
    lines = ["#!/bin/bash", f"#SBATCH -J {kind}-{i} -o {directory}/job-{i}.out"]
    if iso:
        lines.append("#GSCHED --isolated")
    elif policy.startswith("case"):
        lines.append(f"#GSCHED --gpu-mem {int((mem + 1) * 1024)}M")
    lines.append(f"exec {command}")
    path = os.path.join(directory, f"job-{i}.sh")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"{i}\t{kind}\t{mem}\t{int(iso)}\t{path}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--jobs", type=int, default=24)
    p.add_argument("--policy", required=True)
    p.add_argument("--dir", required=True)
    p.add_argument("--suite", required=True, help="directory of the job programs")
    p.add_argument("--tight", action="store_true",
                   help="the memory-tight batch: every footprint 8-16 GB, so that "
                        "eight memory-blind jobs at once exceed an 80 GB GPU")
    a = p.parse_args()
    rng = random.Random(a.seed)
    kinds = [k for _ in range(a.jobs // len(KINDS) + 1) for k in KINDS][: a.jobs]
    rng.shuffle(kinds)
    isolated = set(rng.sample(range(a.jobs), a.jobs // 6))
    os.makedirs(a.dir, exist_ok=True)
    print("index\tkind\tmem_gb\tisolated\tscript")
    for i, kind in enumerate(kinds):
        lo, hi = (8, 16) if a.tight else KINDS[kind]
        mem = round(rng.uniform(lo, hi) * 2) / 2
        cmd = f"python3 {a.suite}/{kind}.py --mem-gb {mem}"
        write_job(a.dir, i, kind, mem, i in isolated, a.policy, cmd)


if __name__ == "__main__":
    main()
