"""Draws GPU memory in use over time for each policy's result JSON (the
1 s nvidia-smi samples) as one SVG: plot.py OUT.svg RESULT.json..."""

import json
import sys

COLORS = ["#d62728", "#1f77b4", "#2ca02c", "#9467bd"]


def main():
    out, paths = sys.argv[1], sys.argv[2:]
    runs = [json.load(open(p)) for p in paths]
    w, h, pad = 860.0, 340.0, 50.0
    tmax = max(len(r["memory_mib_samples"]) for r in runs) or 1
    top = 81559.0
    for r in runs:
        m = r.get("machine", "")
        if "MiB" in m:
            try:
                top = float(m.split(",")[-1].strip().split()[0])
            except ValueError:
                pass
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
        '<rect width="100%" height="100%" fill="white"/>',
        f'<text x="{pad}" y="20">GPU memory in use (nvidia-smi, 1 s samples): {runs[0].get("machine", "")}</text>',
        f'<line x1="{pad}" y1="{h - pad}" x2="{w - pad}" y2="{h - pad}" stroke="black"/>',
        f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{h - pad}" stroke="black"/>',
        f'<text x="{pad}" y="{h - pad + 16}">0 s</text>',
        f'<text x="{w - pad - 40}" y="{h - pad + 16}">{tmax} s</text>',
        f'<text x="4" y="{pad + 4}">{top / 1024:.0f} GiB</text>',
        f'<text x="20" y="{h - pad}">0</text>',
    ]
    for i, r in enumerate(runs):
        pts = " ".join(
            f"{pad + t / tmax * (w - 2 * pad):.1f},{h - pad - min(v / top, 1) * (h - 2 * pad):.1f}"
            for t, v in enumerate(r["memory_mib_samples"])
        )
        c = COLORS[i % len(COLORS)]
        parts.append(f'<polyline fill="none" stroke="{c}" stroke-width="1.5" points="{pts}"/>')
        mu = r.get("memory_utilization") or 0
        parts.append(
            f'<text x="{w - 330}" y="{pad + 16 * i}" fill="{c}">{r["policy"]}: makespan {r["makespan_secs"]} s, '
            f"memory {mu * 100:.1f}% mean</text>"
        )
    parts.append("</svg>")
    with open(out, "w") as f:
        f.write("\n".join(parts) + "\n")


if __name__ == "__main__":
    main()
