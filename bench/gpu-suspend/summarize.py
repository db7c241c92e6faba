"""Summarizes bench/gpu-suspend/run.sh's rounds (docs/benchmarks.md): B's
training rate alone, beside A, and beside A suspended; A's steps while
suspended; the GPU's memory in use in each window (nvidia-smi)."""

import datetime
import glob
import json
import os
import statistics
import sys

out = sys.argv[1]
ALONE = float(os.environ.get("ALONE_SECS", 8))
PAIR = float(os.environ.get("PAIR_SECS", 26))


def steps(path):
    with open(path) as f:
        return [float(l) for l in f if not l.startswith("START")]


def rate(ts, a, b):
    return sum(1 for t in ts if a <= t <= b) / (b - a)


def events(d):
    ev = {}
    with open(f"{d}/events.txt") as f:
        for line in f:
            w = line.split()
            if len(w) == 2 and w[0] in ("go", "suspend", "suspended", "resume", "resumed", "ended"):
                ev[w[0]] = float(w[1])
    return ev


def samples(d):
    rows = []
    with open(f"{d}/smi.csv") as f:
        for line in f:
            w = [x.strip() for x in line.split(",")]
            if len(w) != 3:
                continue
            t = datetime.datetime.strptime(w[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
            rows.append((t, float(w[1]), float(w[2])))
    return rows


def mean_in(rows, a, b, k):
    v = [r[k] for r in rows if a <= r[0] <= b]
    return statistics.mean(v) if v else None


def med(v):
    v = [x for x in v if x is not None]
    return [round(statistics.median(v), 3), round(min(v), 3), round(max(v), 3)] if v else None


trials = {}
for d in sorted(glob.glob(f"{out}/*-alone")):
    r = os.path.basename(d).split("-")[0]
    ev = events(d)
    trials.setdefault(r, {})["b_alone"] = rate(steps(f"{d}/B.log"), ev["go"] + 1, ev["go"] + ALONE - 0.5)
for d in sorted(glob.glob(f"{out}/*-pair")):
    r = os.path.basename(d).split("-")[0]
    ev = events(d)
    a, b = steps(f"{d}/A.log"), steps(f"{d}/B.log")
    smi = samples(d)
    w_both1 = (ev["go"] + 1.5, ev["suspend"] - 0.2)
    w_susp = (ev["suspended"] + 1, ev["resume"] - 0.2)
    w_both2 = (ev["resumed"] + 1.5, ev["go"] + PAIR - 0.5)
    t = trials.setdefault(r, {})
    t.update(
        {
            "b_both": rate(b, *w_both1),
            "b_beside_suspended": rate(b, *w_susp),
            "b_both_again": rate(b, *w_both2),
            "a_both": rate(a, *w_both1),
            "a_steps_while_suspended": sum(1 for x in a if ev["suspended"] + 0.5 <= x <= ev["resume"]),
            "a_both_again": rate(a, *w_both2),
            "suspend_secs": ev["suspended"] - ev["suspend"],
            "mem_both_mib": mean_in(smi, *w_both1, 1),
            "mem_suspended_mib": mean_in(smi, *w_susp, 1),
            "mem_after_end_mib": mean_in(smi, ev["ended"] + 0.5, ev["ended"] + 2, 1),
            "util_both": mean_in(smi, *w_both1, 2),
            "util_suspended": mean_in(smi, *w_susp, 2),
        }
    )
for t in trials.values():
    if "b_alone" in t and "b_both" in t:
        for k in ("b_both", "b_beside_suspended", "b_both_again"):
            t[k + "_of_alone"] = t[k] / t["b_alone"]
keys = sorted({k for t in trials.values() for k in t})
summary = {k: med([t.get(k) for t in trials.values()]) for k in keys}
json.dump({"trials": trials, "summary": summary}, sys.stdout, indent=1)
