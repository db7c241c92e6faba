#!/usr/bin/env bash
# Slurm compatibility acceptance with a real client (issue 6): installs
# submitit from PyPI into a virtual environment, starts `gsched up` on a
# loopback port with the Slurm shims first on PATH, and runs
# scripts/compat/submitit_check.py. Exit 0 only if every check passes.
# Usage: scripts/compat/submitit.sh [path/to/gsched]  (default: target/debug/gsched)
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
gsched=${1:-$root/target/debug/gsched}
[ -x "$gsched" ] || { echo "submitit.sh: $gsched not built (cargo build --workspace)" >&2; exit 1; }
venv=$root/target/compat-venv
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
"$venv/bin/pip" install --quiet --disable-pip-version-check "submitit>=1.5,<2"
work=$(mktemp -d)
trap 'kill "$up_pid" 2>/dev/null || true; wait "$up_pid" 2>/dev/null || true; rm -rf "$work"' EXIT
# A free loopback port.
port=$("$venv/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$gsched" up --state-dir "$work/state" --listen "127.0.0.1:$port" --sim-gpus 1xA100-40GB \
    --kill-wait 2 --heartbeat-interval 1 > "$work/up.log" 2>&1 &
up_pid=$!
"$gsched" slurm-shims "$work/bin" > /dev/null
export PATH="$work/bin:$PATH" GSCHED_URL="http://127.0.0.1:$port"
for _ in $(seq 100); do
    if sinfo -h -o %P > /dev/null 2>&1; then break; fi
    sleep 0.1
done
if ! timeout 300 "$venv/bin/python" "$root/scripts/compat/submitit_check.py" "$work/jobs"; then
    echo "--- gsched up log ---" >&2; tail -50 "$work/up.log" >&2
    for f in "$work"/jobs/*.err; do [ -f "$f" ] && { echo "--- $f ---" >&2; tail -20 "$f" >&2; }; done
    exit 1
fi
