#!/usr/bin/env bash
# Runs Slurm's own python regression suite (testsuite/python of
# SchedMD/slurm) against gsched's Slurm commands, unmodified, in the
# suite's local-config mode, and prints each case's result and the pass
# rate on the applicable cases (docs/slurm.md, "Slurm's test suite").
#
# The suite is Slurm's code (GPL): it is read from beside the project,
# ../shared/slurm-testsuite/slurm-testsuite-python.tgz (or
# $SLURM_TESTSUITE_TGZ), extracted into a temporary directory, never
# copied into the repository. Nothing is fetched while tests run; the
# Python packages the suite needs are installed from PyPI once, into
# target/slurm-suite-venv.
#
# Usage: scripts/slurm-suite/run.sh [--fast] [--gsched PATH] [TEST_FILE...]
#   --fast      only the files in scripts/slurm-suite/fast.txt (CI's subset;
#               exits 1 unless every applicable case of them passes)
#   TEST_FILE   e.g. tests/test_102_1.py (default: every file of the suite)
# Environment: SLURM_SUITE_FILE_TIMEOUT (seconds per test file, default
# 600), SLURM_SUITE_CASE_TIMEOUT (seconds per case, default 120),
# SLURM_SUITE_REPORTS (keep the JUnit reports there).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
here=$root/scripts/slurm-suite
gsched=$root/target/debug/gsched
fast=0
files=()
while [ $# -gt 0 ]; do
    case $1 in
    --fast) fast=1 ;;
    --gsched) gsched=$2; shift ;;
    -h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) files+=("$1") ;;
    esac
    shift
done
[ -x "$gsched" ] || { echo "slurm-suite: $gsched is not built (cargo build --workspace)" >&2; exit 2; }
tgz=${SLURM_TESTSUITE_TGZ:-$root/../shared/slurm-testsuite/slurm-testsuite-python.tgz}
if [ ! -f "$tgz" ]; then
    cat >&2 <<MSG
slurm-suite: Slurm's test suite is not at $tgz.
It is testsuite/python of SchedMD/slurm (commit 284c3b95f08a, with lib/atf.py
and conftest.py) as a tar.gz; put it there or name it in SLURM_TESTSUITE_TGZ.
MSG
    exit 2
fi
# Python 3.12 or later: on PATH, or one pyenv installed but did not select.
python=""
for p in python3.13 python3.12 "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.1[2-9]*/bin/python3; do
    if "$p" -c 'import sys; sys.exit(sys.version_info < (3, 12))' > /dev/null 2>&1; then
        python=$p; break
    fi
done
[ -n "$python" ] || { echo "slurm-suite: the suite needs Python 3.12 or later (python3.12 or python3.13 on PATH)" >&2; exit 2; }
venv=$root/target/slurm-suite-venv
if ! "$venv/bin/python" -c 'import pytest, xmltodict' 2> /dev/null; then
    [ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check \
        "pytest>=8,<9" "pytest-timeout>=2,<3" "jsondiff>=2,<3" "jsonpatch>=1.33,<2" \
        "pexpect>=4.9,<5" "requests>=2.31,<3" "pyyaml>=6,<7" "xmltodict>=0.13,<1"
fi

. "$root/scripts/lib/gsched-up.sh"
# A copy of the binary under test: a rebuild meanwhile does not change it.
copy=$(mktemp -d)
cp "$gsched" "$copy/gsched"
gsched=$copy/gsched
gsched_up "$gsched" --sim-gpus 1xA100-40GB:3g.20gb,2g.10gb,1g.5gb*2 --kill-wait 2
trap 'kill "$up_pid" 2>/dev/null || true; wait "$up_pid" 2>/dev/null || true; rm -rf "$work" "$copy"' EXIT
suite=$work/suite
mkdir -p "$suite" "$work/prefix/bin" "$work/prefix/sbin" "$work/prefix/etc" "$work/reports"
tar xzf "$tgz" -C "$suite"
"$gsched" slurm-shims "$work/prefix/bin" > /dev/null
# Slurm's daemons: the suite asks their versions (gsched answers only that).
for d in slurmctld slurmd slurmdbd slurmrestd; do ln -s "$gsched" "$work/prefix/sbin/$d"; done
# The suite runs commands as users through sudo (scripts/slurm-suite/sudo).
ln -s "$here/sudo" "$work/prefix/bin/sudo"
export PATH="$work/prefix/bin:$PATH"
port=${GSCHED_URL##*:}
node=$(sinfo -h -N -o %N | head -1)
cat > "$work/prefix/etc/slurm.conf" <<CONF
# The running gsched, described for Slurm's test suite.
ClusterName=gsched
SlurmctldHost=$(hostname -s)
SlurmctldPort=$port
SlurmUser=root
NodeName=$node CPUs=64 State=UNKNOWN
PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
cat > "$work/testsuite.conf" <<CONF
SlurmSourceDir=$suite
SlurmBuildDir=$suite
SlurmInstallDir=$work/prefix
SlurmConfigDir=$work/prefix/etc
CONF
export SLURM_TESTSUITE_CONF=$work/testsuite.conf SLURM_CONF=$work/prefix/etc/slurm.conf
export PYTHONUNBUFFERED=1

cd "$suite/testsuite/python"
if [ ${#files[@]} -eq 0 ]; then
    if [ $fast -eq 1 ]; then
        mapfile -t files < <(grep -v '^\s*\(#\|$\)' "$here/fast.txt")
    else
        mapfile -t files < <(ls tests/test_*.py | sort -V)
    fi
fi
file_timeout=${SLURM_SUITE_FILE_TIMEOUT:-600}
case_timeout=${SLURM_SUITE_CASE_TIMEOUT:-120}
for f in "${files[@]}"; do
    name=$(basename "$f" .py)
    printf '%s ... ' "$name" >&2
    start=$SECONDS
    timeout -k 10 "$file_timeout" "$venv/bin/pytest" -p no:cacheprovider --disable-warnings \
        --show-capture=no -q --timeout="$case_timeout" --junitxml="$work/reports/$name.xml" \
        -o junit_family=xunit1 "$f" > "$work/reports/$name.log" 2>&1 || true
    echo "$((SECONDS - start)) s" >&2
    # A job a test left behind must not hold the next one up.
    scancel -u "$(id -un)" > /dev/null 2>&1 || true
done
if [ -n "${SLURM_SUITE_REPORTS:-}" ]; then
    mkdir -p "$SLURM_SUITE_REPORTS"
    cp "$work"/reports/* "$SLURM_SUITE_REPORTS"/
fi
strict=()
[ $fast -eq 1 ] && strict=(--strict)
"$venv/bin/python" "$here/report.py" "${strict[@]}" "$work/reports" "$here/not-applicable.txt"
