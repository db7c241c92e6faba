"""Builds a batch of the external suite (bench/gpu-external: NVIDIA's
CUDA samples) for bench/gpu-packing.sh, as bench/gpu-jobs/batch.py does
for the project's own suite: job scripts for `gsub`, one per line of the
printed table. Each kind appears jobs/len(KINDS) times, in an order the seed
shuffles; one job in six (chosen by the seed) is isolated. Under `case`
shared jobs state their kind's footprint plus 1 GB of headroom
(`#GSCHED --gpu-mem`), as a user would."""

import argparse
import os
import random
import sys

# The job scripts are written as the project's own suite writes them.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "gpu-jobs"))
from batch import write_job  # noqa: E402

# GPU memory each kind holds at the sizes run_kind.sh runs it, GB.
KINDS = {
    "matmul": 1.0,
    "fdtd": 0.5,
    "cg": 0.5,
    "blackscholes": 0.5,
    "jacobi": 0.5,
    "montecarlo": 0.5,
    "sort": 0.5,
    "binomial": 0.5,
}
# EXTERNAL_KINDS=a,b,... runs only those kinds (alone times included).
if os.environ.get("EXTERNAL_KINDS"):
    _chosen = os.environ["EXTERNAL_KINDS"].split(",")
    _unknown = [k for k in _chosen if k not in KINDS]
    if _unknown:
        raise SystemExit(f"EXTERNAL_KINDS names unknown kinds {_unknown}; known: {list(KINDS)}")
    KINDS = {k: KINDS[k] for k in _chosen}


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
        cmd = f"bash {a.suite}/run_kind.sh {kind}"
        write_job(a.dir, i, kind, KINDS[kind], i in isolated, a.policy, cmd)


if __name__ == "__main__":
    main()
