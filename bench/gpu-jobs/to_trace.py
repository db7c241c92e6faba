"""Turns the measured `exclusive` run of the GPU packing benchmark into a
simulator trace (docs/simulator.md), so that `gsched sim` can be checked
against what the real GPU did: to_trace.py RESULT.json > TRACE.json

Each job becomes: a CPU phase for interpreter and CUDA start-up (its
elapsed time minus the body it reported), then ROUNDS rounds of host work
and a GPU task (the GPU time it reported, split evenly), holding its
footprint plus the 1 GB headroom and 512 MiB context gsched reserves.
The parallelism of each kind (compute slices of the 7 an H100 has that it
keeps busy alone) is our estimate, not a measurement: dense, stencil and
cpu_burst (large matrix products) 7; cnn_train 4; graph 2; inference 1."""

import json
import sys

SLICES = {"dense": 7, "stencil": 7, "cpu_burst": 7, "cnn_train": 4, "graph": 2, "inference": 1}
ROUNDS = 10


def main():
    res = json.load(open(sys.argv[1]))
    jobs = []
    rows = sorted(res["rows"], key=lambda r: int(r["name"].rsplit("-", 1)[1]))
    for r in rows:
        rep = r["report"]
        elapsed = r["end"] - r["start"]
        body, gpu = rep["wall_secs"], rep["gpu_secs"]
        startup = max(elapsed - body, 0.5)
        mem = int((r["mem_gb"] + 1) * 1024 + 512)
        phases = [{"kind": "cpu", "secs": round(startup, 3)}]
        host = max(body - gpu, 0.0) / ROUNDS
        for _ in range(ROUNDS):
            if host > 0:
                phases.append({"kind": "cpu", "secs": round(host, 3)})
            # The simulator's GPU time is alone on one compute slice; a task
            # of parallelism s ran min(s, 7) / min(s, 1) times faster on
            # the whole GPU, where it was measured.
            s = SLICES[r["kind"]]
            phases.append({"kind": "gpu", "mem_mib": mem, "slices": s,
                           "secs": round(gpu / ROUNDS * min(s, 7) / min(s, 1), 3)})
        jobs.append({"name": r["name"], "isolated": r["isolated"], "footprint_mib": mem,
                     "submit": 0, "phases": phases})
    json.dump(jobs, sys.stdout, indent=1)


if __name__ == "__main__":
    main()
