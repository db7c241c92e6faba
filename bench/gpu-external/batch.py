"""Builds a batch of the external suite (bench/gpu-external: Rodinia's
CUDA programs) for bench/gpu-packing.sh, as bench/gpu-jobs/batch.py does
for the project's own suite: job scripts for `gsub`, one per line of the
printed table. Each kind appears jobs/3 times, in an order the seed
shuffles; one job in six (chosen by the seed) is isolated. Under `case`
shared jobs state their kind's footprint plus 1 GB of headroom
(`#GSCHED --gpu-mem`), as a user would."""

import argparse
import os
import random

# GPU memory each kind holds at the sizes run_kind.sh runs it, GB.
KINDS = {
    "gaussian": 0.5,
    "srad": 0.5,
    "srad_big": 1.0,
}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--jobs", type=int, default=30)
    p.add_argument("--policy", required=True)
    p.add_argument("--dir", required=True)
    p.add_argument("--suite", required=True, help="bench/gpu-external")
    p.add_argument("--tight", action="store_true")
    a = p.parse_args()
    if a.tight:
        raise SystemExit("the external suite has no memory-tight batch (bench/gpu-jobs has)")
    rng = random.Random(a.seed)
    kinds = [k for _ in range(a.jobs // len(KINDS) + 1) for k in KINDS][: a.jobs]
    rng.shuffle(kinds)
    isolated = set(rng.sample(range(a.jobs), a.jobs // 6))
    os.makedirs(a.dir, exist_ok=True)
    print("index\tkind\tmem_gb\tisolated\tscript")
    for i, kind in enumerate(kinds):
        mem = KINDS[kind]
        iso = i in isolated
        lines = ["#!/bin/bash", f"#SBATCH -J {kind}-{i} -o {a.dir}/job-{i}.out"]
        if iso:
            lines.append("#GSCHED --isolated")
        elif a.policy.startswith("case"):
            lines.append(f"#GSCHED --gpu-mem {int((mem + 1) * 1024)}M")
        lines.append(f"exec bash {a.suite}/run_kind.sh {kind}")
        path = os.path.join(a.dir, f"job-{i}.sh")
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        print(f"{i}\t{kind}\t{mem}\t{int(iso)}\t{path}")


if __name__ == "__main__":
    main()
