# Summarizes check.log: per trial, makespan (first submission to last end),
# mean turnaround (submission to end) and the small jobs' mean wait for a
# placement; then median and range per setting.
import re, statistics, sys
trials, cur = [], None
for line in open(sys.argv[1]):
    m = re.match(r"== trial (\d+) max-overtakes (\d+)", line)
    if m:
        cur = {"trial": int(m[1]), "n": int(m[2]), "sub": {}, "jobs": {}}
        trials.append(cur)
    elif line.startswith("SUBMIT") and cur:
        _, name, t = line.split()
        cur["sub"][name] = float(t)
    elif line.startswith("JOB") and cur:
        f = line.split()
        cur["jobs"][f[1]] = (float(f[3]), float(f[5]), float(f[7]))
rows = []
for t in trials:
    first = min(t["sub"].values())
    makespan = max(e for _, _, e in t["jobs"].values()) - first
    turn = statistics.mean(t["jobs"][n][2] - t["sub"][n] for n in t["jobs"])
    wait = statistics.mean(p - s for n, (s, p, _) in t["jobs"].items() if n.startswith("small"))
    rows.append((t["n"], t["trial"], makespan, turn, wait))
    print(f"trial {t['trial']} max-overtakes {t['n']}: makespan {makespan:.1f} s, mean turnaround {turn:.1f} s, small jobs' mean wait {wait:.1f} s")
for n in sorted({r[0] for r in rows}):
    for k, label in ((2, "makespan"), (3, "mean turnaround"), (4, "small jobs' wait")):
        v = [r[k] for r in rows if r[0] == n]
        print(f"max-overtakes {n}: {label} median {statistics.median(v):.1f} s (range {min(v):.1f}-{max(v):.1f})")
