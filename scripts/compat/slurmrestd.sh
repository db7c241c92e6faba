#!/usr/bin/env bash
# slurmrestd compatibility with a real client (issue 8): installs the
# OpenAPI-generated Slurm REST client `slurmrestapi` (Slurm 25.11: data
# parsers v0.0.41 to v0.0.44) from PyPI into a virtual environment, starts
# `gsched up` on a loopback port with simulated MIG GPUs, gets a token with
# `gsched token`, and runs scripts/compat/slurmrestd_check.py: every
# slurmrestd endpoint gsched serves, in every version, read through the
# client's own models (field names and types checked by pydantic), plus
# submit, cancel and the auth failures. Exit 0 only if every check passes.
# Usage: scripts/compat/slurmrestd.sh [path/to/gsched]  (default: target/debug/gsched)
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
gsched=${1:-$root/target/debug/gsched}
[ -x "$gsched" ] || { echo "slurmrestd.sh: $gsched not built (cargo build --workspace)" >&2; exit 1; }
. "$root/scripts/lib/gsched-up.sh"
compat_venv "slurmrestapi==25.11.4.0" "openapi-spec-validator>=0.7,<0.9"
gsched_up "$gsched" --sim-gpus '1xA100-40GB:2g.10gb*2,1g.5gb*3' --kill-wait 2
token=$("$gsched" token --quiet --lifetime 3600)
mkdir -p "$work/jobs"
if ! timeout 300 "$venv/bin/python" "$root/scripts/compat/slurmrestd_check.py" \
        "$GSCHED_URL" "$token" "$(id -un)" "$work/jobs"; then
    echo "--- gsched up log ---" >&2; tail -50 "$work/up.log" >&2
    exit 1
fi
# The OpenAPI document served at /openapi.json is a valid OpenAPI 3 document.
curl -sf "$GSCHED_URL/openapi.json" > "$work/openapi.json"
"$venv/bin/python" -m openapi_spec_validator "$work/openapi.json"
