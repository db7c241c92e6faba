"""Turns one policy's run of the GPU packing benchmark into its result JSON:
makespan, throughput, mean turnaround, time-averaged GPU memory use (from
the nvidia-smi samples), OOM failures, and per-kind slowdown against the
alone times the driver measured in the same run. A job counts as correct
only when it completed, printed its report, its ballast held, and its
checksum matches its kind's alone run (relative 1e-2: rounding order may
differ under sharing; skipped or faulted work does not come close), or,
for the external suite, the digest of its output equals the alone run's;
throughput counts correct jobs. Host memory: the peak and mean of the
machine's memory in use during the batch, over what it used before."""

import argparse
import json
import math
import statistics


def matches(got, want):
    """Whether a checksum is the alone run's, up to rounding order."""
    if got is None or want is None or not math.isfinite(got):
        return False
    return abs(got - want) <= 1e-2 * max(abs(got), abs(want)) + 1e-3


def reports(path):
    """The GPUJOB report lines a job printed, and whether it ran out of memory."""
    rec, oom = None, False
    try:
        with open(path, errors="replace") as f:
            for line in f:
                if line.startswith("GPUJOB "):
                    rec = json.loads(line[7:])
                low = line.lower()
                if "out of memory" in low or "outofmemoryerror" in low:
                    oom = True
    except OSError:
        pass
    return rec, oom


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--policy", required=True)
    p.add_argument("--batch", required=True)
    p.add_argument("--jobs", required=True, help="gacct --json output")
    p.add_argument("--alone", required=True, help="one GPUJOB line per kind, run alone")
    p.add_argument("--smi", required=True, help="nvidia-smi samples")
    p.add_argument("--host", help="host memory in use, MiB, one sample per line")
    p.add_argument("--host-idle", help="host memory in use before the batch, MiB")
    p.add_argument("--machine", default="")
    a = p.parse_args()
    batch = {}
    with open(a.batch) as f:
        next(f)
        for line in f:
            i, kind, mem, iso, script = line.rstrip("\n").split("\t")
            batch[f"{kind}-{i}"] = {"kind": kind, "mem_gb": float(mem), "isolated": iso == "1",
                                    "out": script[:-3] + ".out"}
    alone, alone_wall = {}, {}
    with open(a.alone) as f:
        for line in f:
            if line.startswith("GPUJOB "):
                r = json.loads(line[7:])
                alone[r["kind"]] = r
            elif line.startswith("ALONE "):
                _, kind, secs = line.split()
                alone_wall[kind] = float(secs)
    jobs = json.load(open(a.jobs))["jobs"]
    rows = []
    for j in jobs:
        b = batch.get(j["name"])
        if b is None:
            continue
        rec, oom = reports(b["out"])
        rows.append({
            "name": j["name"], "kind": b["kind"], "mem_gb": b["mem_gb"], "isolated": b["isolated"],
            "state": j["job_state"], "exit_code": j["exit_code"],
            "submit": j["submit_time"], "start": j["start_time"], "end": j["end_time"],
            "oom": oom, "report": rec,
        })
    t0 = min(r["submit"] for r in rows)
    t1 = max(r["end"] or t0 for r in rows)
    makespan = max(t1 - t0, 1)
    for r in rows:
        rep, al = r["report"], alone.get(r["kind"])
        if rep and al and "digest" in al:
            same = rep.get("digest") is not None and rep.get("digest") == al["digest"]
        else:
            same = bool(rep and al and matches(rep.get("checksum"), al.get("checksum")))
        r["correct"] = bool(r["state"] == "COMPLETED" and rep and al
                            and rep.get("ballast_ok", False) and same)
    done = [r for r in rows if r["correct"]]
    # Memory use and GPU utilization over the makespan, from the 1 s
    # samples (timestamp, memory.used, memory.total, utilization.gpu).
    used, util, total = [], [], 0
    with open(a.smi) as f:
        for line in f:
            parts = [x.strip() for x in line.split(",")]
            try:
                used.append(float(parts[1]))
                total = float(parts[2])
                util.append(float(parts[3]))
            except (ValueError, IndexError):
                continue
    host, idle = [], 0
    if a.host:
        with open(a.host) as f:
            host = [int(x) for x in f.read().split() if x.isdigit()]
    if a.host_idle:
        with open(a.host_idle) as f:
            idle = int(f.read().split()[0])
    slow = {}
    for r in done:
        al = alone.get(r["kind"])
        if not al or not r["report"]:
            continue
        s = slow.setdefault(r["kind"], {"job": [], "gpu": [], "run": []})
        wall = alone_wall.get(r["kind"], al["wall_secs"])
        s["job"].append((r["end"] - r["start"]) / max(wall, 1e-9))
        # Run time once placed (the multiprogramming papers' ANTT): from
        # the job's first GPU memory in place to its end, shared over alone.
        rep = r["report"]
        if "ready_secs" in rep and "ready_secs" in al:
            s["run"].append((rep["wall_secs"] - rep["ready_secs"])
                            / max(al["wall_secs"] - al["ready_secs"], 1e-9))
        s["gpu"].append(r["report"]["gpu_secs"] / max(al["gpu_secs"], 1e-9))
    per_kind = {
        k: {"alone_process_secs": alone_wall.get(k), "alone_gpu_secs": alone[k]["gpu_secs"],
            "mean_job_slowdown": round(statistics.mean(v["job"]), 3),
            "mean_gpu_phase_slowdown": round(statistics.mean(v["gpu"]), 3)}
        for k, v in sorted(slow.items())
    }
    gpu_slow = [x for v in slow.values() for x in v["gpu"]]
    result = {
        "policy": a.policy,
        "machine": a.machine,
        "jobs": len(rows),
        "completed": sum(1 for r in rows if r["state"] == "COMPLETED"),
        "correct": len(done),
        "wrong_results": sum(1 for r in rows if r["state"] == "COMPLETED" and not r["correct"]),
        "oom_failures": sum(1 for r in rows if r["oom"]),
        "other_failures": sum(1 for r in rows if r["state"] != "COMPLETED" and not r["oom"]),
        # Mean over jobs of elapsed (start to end, waits for placement
        # included) over the kind's alone process time.
        "mean_job_slowdown": round(statistics.mean(x for v in slow.values() for x in v["job"]), 3) if slow else None,
        "antt": round(statistics.mean(runs), 3) if (runs := [x for v in slow.values() for x in v["run"]]) else None,
        "makespan_secs": makespan,
        "throughput_jobs_per_hour": round(len(done) * 3600 / makespan, 2),
        "mean_turnaround_secs": round(statistics.mean(r["end"] - r["submit"] for r in done), 2) if done else None,
        "memory_utilization": round(statistics.mean(used) / total, 4) if used and total else None,
        "mean_gpu_utilization_pct": round(statistics.mean(util), 1) if util else None,
        "host_mem_peak_gib": round((max(host) - idle) / 1024, 2) if host else None,
        "host_mem_mean_gib": round((statistics.mean(host) - idle) / 1024, 2) if host else None,
        "mean_gpu_phase_slowdown": round(statistics.mean(gpu_slow), 3) if gpu_slow else None,
        "per_kind": per_kind,
        "memory_mib_samples": used,
        "rows": rows,
    }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
