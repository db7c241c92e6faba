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
. "$root/scripts/lib/gsched-up.sh"
compat_venv "submitit>=1.5,<2"
gsched_up "$gsched" --sim-gpus 1xA100-40GB --kill-wait 10
"$gsched" slurm-shims "$work/bin" > /dev/null
export PATH="$work/bin:$PATH"
if ! timeout 300 "$venv/bin/python" "$root/scripts/compat/submitit_check.py" "$work/jobs"; then
    echo "--- gsched up log ---" >&2; tail -50 "$work/up.log" >&2
    for f in "$work"/jobs/*.err; do [ -f "$f" ] && { echo "--- $f ---" >&2; tail -20 "$f" >&2; }; done
    exit 1
fi
