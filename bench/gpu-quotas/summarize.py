"""Summarizes bench/gpu-quotas/run.sh's output directory: training rates in
fixed windows, GPU time shares, the quota machinery's cost, inference
latencies; per trial, then median and range over trials. Usage:
summarize.py OUT"""

import json
import os
import statistics
import sys

out = sys.argv[1]


def train(path, lo, hi):
    """Iterations per second ended in [START+lo, START+hi]."""
    with open(path) as f:
        lines = f.read().split()
    t0 = float(lines[1])
    ends = [float(v) for v in lines[2:]]
    n = sum(1 for t in ends if t0 + lo <= t <= t0 + hi)
    return n / (hi - lo)


def infer(path):
    with open(path) as f:
        lat = sorted(float(v) for v in f.read().split()[5:])
    return {
        "p50_ms": round(lat[len(lat) // 2], 3),
        "p99_ms": round(lat[min(len(lat) - 1, int(len(lat) * 0.99))], 3),
        "requests": len(lat),
    }


trials = {}
for d in sorted(os.listdir(out)):
    p = os.path.join(out, d)
    if not os.path.isdir(p) or "-" not in d:
        continue
    name, trial = d.rsplit("-", 1)
    f = lambda label: os.path.join(p, f"{label}.log")  # noqa: E731
    try:
        if name in ("train_alone", "train_alone_q"):
            r = {"A_per_s": train(f("A"), 2, 14.5)}
        elif name in ("pair_q", "pair_nq"):
            r = {
                "A_per_s_both": train(f("A"), 2, 8.5),
                "B_per_s_both": train(f("B"), 2, 8.5),
                "A_per_s_after_B": train(f("A"), 10.5, 17.5),
            }
        else:
            r = infer(f("I"))
            if os.path.exists(f("A")):
                n = len(open(f("I")).read().split()) * 0.02
                r["A_per_s"] = train(f("A"), 2, n - 0.5)
                r["B_per_s"] = train(f("B"), 2, n - 0.5)
    except (OSError, ValueError, IndexError) as e:
        r = {"error": str(e)}
    trials.setdefault(trial, {})[name] = r

derived = []
for trial, c in sorted(trials.items()):
    d = {"trial": trial}
    for k in ("infer_plain", "infer_outside", "infer_alone", "infer_alone_lc", "infer_nq", "infer_lc"):
        if k in c and "p99_ms" in c[k]:
            d[f"{k}_p50_ms"] = c[k]["p50_ms"]
            d[f"{k}_p99_ms"] = c[k]["p99_ms"]
    try:
        alone = c["train_alone"]["A_per_s"]
        alone_q = c["train_alone_q"]["A_per_s"]
        d["alone_cost_of_quota"] = round(1 - alone_q / alone, 4)
        for k in ("pair_q", "pair_nq"):
            r = c[k]
            both = r["A_per_s_both"] + r["B_per_s_both"]
            d[f"{k}_A_fraction_of_time"] = round(r["A_per_s_both"] / both, 4)
            d[f"{k}_A_share_of_alone"] = round(r["A_per_s_both"] / alone_q, 4)
            d[f"{k}_B_share_of_alone"] = round(r["B_per_s_both"] / alone_q, 4)
            d[f"{k}_together_over_alone"] = round(both / alone, 4)
            d[f"{k}_A_after_B_over_alone"] = round(r["A_per_s_after_B"] / alone, 4)
    except (KeyError, ZeroDivisionError) as e:
        d["missing"] = str(e)
    try:
        alone = c["train_alone"]["A_per_s"] if "train_alone" in c else None
        d["p99_lc_over_alone_lc"] = round(c["infer_lc"]["p99_ms"] / c["infer_alone_lc"]["p99_ms"], 3)
        d["p99_lc_over_alone"] = round(c["infer_lc"]["p99_ms"] / c["infer_alone"]["p99_ms"], 3)
        d["p99_nq_over_alone"] = round(c["infer_nq"]["p99_ms"] / c["infer_alone"]["p99_ms"], 3)
        if alone:
            d["train_with_lc_over_alone"] = round(
                (c["infer_lc"]["A_per_s"] + c["infer_lc"]["B_per_s"]) / alone, 4)
            d["train_with_nq_over_alone"] = round(
                (c["infer_nq"]["A_per_s"] + c["infer_nq"]["B_per_s"]) / alone, 4)
        d["train_lc_over_nq"] = round(
            (c["infer_lc"]["A_per_s"] + c["infer_lc"]["B_per_s"])
            / (c["infer_nq"]["A_per_s"] + c["infer_nq"]["B_per_s"]), 4)
    except (KeyError, ZeroDivisionError) as e:
        d["missing_infer"] = str(e)
    derived.append(d)

summary = {}
keys = sorted({k for d in derived for k in d if k not in ("trial", "missing", "missing_infer")})
for k in keys:
    vals = [d[k] for d in derived if k in d]
    summary[k] = {"median": round(statistics.median(vals), 4), "min": min(vals), "max": max(vals), "n": len(vals)}
machine = open(os.path.join(out, "machine.txt")).read().strip() if os.path.exists(os.path.join(out, "machine.txt")) else ""
print(json.dumps({"machine": machine, "summary": summary, "trials": derived, "raw": trials}, indent=1))
