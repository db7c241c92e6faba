#!/usr/bin/env bash
# Connection floods against `gsched up` (docs/benchmarks.md): rounds
# interleaved A B B A A B (A: no flood; B: 1,100 idle TCP connections to the
# API from loopback and 3,000 idle connections to the probe socket, opened
# and held by this script). Each round prints the threads, open descriptors
# and resident memory of `gsched up`, and the latency of 20 `GET /healthz`
# over fresh TCP connections (a refused connection is retried after 50 ms,
# counted in the latency), then closes what it opened and waits for the
# daemon to settle. Loopback only.
#   usage: bench/flood.sh   (BIN=target/debug by default; run as root)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-$PWD/target/debug}
D=$(mktemp -d); chmod 711 "$D"
pid=""
cleanup() { [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$D"; }
trap cleanup EXIT
ulimit -n 16384
P=$((20000 + RANDOM % 20000))
"$BIN/gsched" up --state-dir "$D" --listen 127.0.0.1:$P --sim-gpus 1xA100-40GB \
  --node-name node1 >>"$D/log" 2>&1 &
pid=$!
for _ in $(seq 600); do curl -sf "http://127.0.0.1:$P/healthz" >/dev/null && break; sleep 0.2; done
python3 - "$pid" "$P" "$D/run/node1.probe.sock" <<'PY'
import os, socket, statistics, sys, time
pid, port, probe = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]

def usage():
    threads = len(os.listdir(f"/proc/{pid}/task"))
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    rss = next(int(l.split()[1]) for l in open(f"/proc/{pid}/status") if l.startswith("VmRSS"))
    return threads, fds, rss // 1024

def healthz():
    t = time.monotonic()
    while True:
        try:
            c = socket.create_connection(("127.0.0.1", port), timeout=10)
            c.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            data = b""
            while True:
                b = c.recv(65536)
                if not b:
                    break
                data += b
            c.close()
            if data.startswith(b"HTTP/1.1 200"):
                return (time.monotonic() - t) * 1000
        except OSError:
            pass
        time.sleep(0.05)

def flood():
    held = []
    for _ in range(1100):
        try:
            held.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        except OSError:
            pass
    for _ in range(3000):
        try:
            c = socket.socket(socket.AF_UNIX)
            c.connect(probe)
            held.append(c)
        except OSError:
            pass
    return held

rows = []
for kind in "ABBAAB":
    held = flood() if kind == "B" else []
    time.sleep(0.5)
    threads, fds, rss = usage()
    lat = [healthz() for _ in range(20)]
    rows.append((kind, threads, fds, rss, statistics.median(lat), max(lat)))
    print(f"round {len(rows)} {kind}: threads {threads}, fds {fds}, RSS {rss} MB, "
          f"/healthz median {statistics.median(lat):.1f} ms, max {max(lat):.1f} ms", flush=True)
    for c in held:
        c.close()
    time.sleep(12)  # idle connections and probe threads wind down

for kind, name in (("A", "no flood"), ("B", "flood")):
    r = [x for x in rows if x[0] == kind]
    med = lambda i: statistics.median(x[i] for x in r)
    rng = lambda i: f"{min(x[i] for x in r):.1f}-{max(x[i] for x in r):.1f}"
    print(f"{name}: threads {med(1)} ({rng(1)}), fds {med(2)} ({rng(2)}), RSS {med(3)} MB ({rng(3)}), "
          f"/healthz median of medians {med(4):.1f} ms ({rng(4)}), worst {max(x[5] for x in r):.1f} ms")
PY
