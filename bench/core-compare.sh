#!/usr/bin/env bash
# Compares two builds of gsched on the pure-core benchmarks (no daemon):
# the launch pass at scale and submissions with many jobs queued, run
# interleaved A, B, B, A, A, B (three of each). Prints each run's p50 and
# the medians. Usage: bench/core-compare.sh GSCHED_A GSCHED_B
set -euo pipefail
a=${1:?first gsched binary}
b=${2:?second gsched binary}
p50() { grep -o 'p50 [0-9.]* [mu]s' | head -1 | awk '{print $2, $3}'; }
run() {
    local bin=$1 what=$2
    case $what in
    launch-big) "$bin" bench launch --nodes 1000 --gpus 8 --queued 100000 --rounds 50 ;;
    launch-small) "$bin" bench launch --nodes 1 --gpus 10 --queued 1000 ;;
    submissions) "$bin" bench submissions --queued 20000 --users 20 --max-submit 1000000 --rounds 1000 ;;
    esac
}
for what in launch-big launch-small submissions; do
    for bin in "$a" "$b" "$b" "$a" "$a" "$b"; do
        printf '%s %s %s\n' "$what" "$(basename "$bin")" "$(run "$bin" "$what" 2>&1 | p50)"
    done
done
