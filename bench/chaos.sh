#!/usr/bin/env bash
# Random faults on a small cluster under a steady stream of jobs (issue 15).
#
# gctld and 4 gnoded, each on a host of its own (network namespaces joined
# by a bridge, built and removed by the test), node timeout 6 s (nodes fence
# after 4 s). For SECONDS, every 3-12 s one of: kill -9 of a gnoded (back
# within 5 s), a partition of a node for 2-30 s (its link down), kill -9 of
# gctld (back within 3 s); jobs of 0.2-20 s, 60% requeueable, some arrays,
# keep coming. Every job appends run markers to a shared file, so the count
# of what really ran does not depend on what the controller recorded.
#
# Prints one line: acknowledged, ran, ran twice (two runs of one job alive
# at once), lost (never final, or missing), misrecorded (COMPLETED without a
# finished run, NODE_FAIL with one or without a start); target zero in the
# last three. "Completed again" counts requeueable jobs that finished during
# a partition and were run again because the controller could not know.
#
# With --pair (issue 40): a leader and a standby gctld on a private
# PostgreSQL (on a host of its own, over verified TLS) and 4 gnoded, node
# timeout 30 s; the faults also kill -9 the leader or the standby, SIGSTOP
# the leader past the takeover, cut the leader off from the database and
# restart the database (tests/chaos/pair_chaos.rs has the list). Needs
# PostgreSQL's server programs (scripts/test installs them).
#
# Usage (as root: it creates network namespaces):
#   bench/chaos.sh [--pair] [SECONDS=600] [SEED=1]
set -euo pipefail
cd "$(dirname "$0")/.."
test_name=chaos
if [ "${1:-}" = --pair ]; then
    test_name=chaos_over_two_controllers
    shift
fi
secs=${1:-600}
seed=${2:-1}
cargo build --workspace --quiet
report=$(mktemp)
trap 'rm -f "$report"' EXIT
GSCHED_CHAOS_SECS=$secs GSCHED_CHAOS_SEED=$seed GSCHED_CHAOS_REPORT=$report \
    cargo test --quiet --test chaos -- --ignored --nocapture --exact "$test_name"
echo
head -1 "$report"
