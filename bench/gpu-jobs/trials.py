"""Summarizes interleaved trials of the GPU packing benchmark
(bench/gpu-interleaved.sh): per policy the median and range of each
measure over its counted trials (learning runs left out), and the ratios
of medians against each other policy. Prints Markdown; with --json, JSON.

    python3 bench/gpu-jobs/trials.py DIR [--json]"""

import glob
import json
import os
import re
import statistics
import sys

MEASURES = [
    ("correct", "correct jobs"),
    ("wrong_results", "wrong results"),
    ("oom_failures", "OOM failures"),
    ("makespan_secs", "makespan (s)"),
    ("throughput_jobs_per_hour", "correct jobs/h"),
    ("mean_turnaround_secs", "mean turnaround (s)"),
    ("mean_job_slowdown", "mean job slowdown (elapsed / alone)"),
    ("antt", "ANTT (run time once placed / alone)"),
    ("memory_utilization", "memory used (time avg)"),
]


def load(d):
    runs = {}
    for path in sorted(glob.glob(os.path.join(d, "gpu-packing-*.json"))):
        m = re.match(r"gpu-packing-(.+)-(\d+)\.json$", os.path.basename(path))
        if not m:
            continue
        with open(path) as f:
            r = json.load(f)
        runs.setdefault(r["policy"], []).append((int(m.group(2)), r))
    return {p: [r for _, r in sorted(v, key=lambda t: t[0])] for p, v in runs.items()}


def stats(values):
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "trials": values}


def main():
    d = sys.argv[1]
    runs = load(d)
    table = {p: {k: stats([r.get(k) for r in rs]) for k, _ in MEASURES} for p, rs in runs.items()}
    if "--json" in sys.argv:
        print(json.dumps(table, indent=1))
        return
    policies = sorted(table)
    print("| measure | " + " | ".join(f"{p} (n={len(runs[p])})" for p in policies) + " |")
    print("|---|" + "---|" * len(policies))
    for k, label in MEASURES:
        cells = []
        for p in policies:
            s = table[p][k]
            cells.append("-" if s is None else f"{s['median']:g} ({s['min']:g}-{s['max']:g})")
        print(f"| {label} | " + " | ".join(cells) + " |")
    print()
    for k in ("throughput_jobs_per_hour", "makespan_secs", "antt"):
        for a in policies:
            for b in policies:
                if a >= b:
                    continue
                x, y = table[a][k], table[b][k]
                if x and y and y["median"]:
                    print(f"- {k}: {a} / {b} = {x['median'] / y['median']:.2f}")


if __name__ == "__main__":
    main()
