#!/usr/bin/env bash
# Browser test of the web dashboard (issue 8) in headless Chromium
# (Debian's `chromium`, installed here when missing): starts `gsched up`
# with simulated MIG GPUs, runs isolated and shared jobs (shared ones hold
# GPU memory through `gprobe run --mem`), loads the dashboard with a token
# from `gsched token`, and checks the DOM the page built: one memory bar per
# instance, isolated owners and shared jobs drawn in them, a queue row per
# job, the job detail with its script and history. Saves the screenshot to
# docs/img/dashboard.png. Exit 0 only if every check passes.
# Usage: scripts/browser/dashboard.sh [path/to/gsched]  (default: target/debug/gsched)
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
gsched=$(realpath "${1:-$root/target/debug/gsched}")
bin=$(dirname "$gsched")
[ -x "$gsched" ] && [ -x "$bin/gprobe" ] || { echo "dashboard.sh: build first (cargo build --workspace)" >&2; exit 1; }
if ! command -v chromium > /dev/null; then
    echo "dashboard.sh: installing Debian's chromium" >&2
    sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium > /dev/null
fi
. "$root/scripts/lib/gsched-up.sh"
gsched_up "$gsched" --node-name gpu-node-1 --sim-gpus '2xA100-40GB:2g.10gb*2,1g.5gb*3' --kill-wait 1
cd "$work"
job() { # NAME OPTIONS... -- SCRIPT-BODY
    local name=$1; shift
    local opts=()
    while [ "$1" != "--" ]; do opts+=("$1"); shift; done; shift
    printf '#!/bin/sh\n%s\n' "$*" > "$name.sh"
    "$bin/gsub" --parsable -J "$name" -o /dev/null "${opts[@]}" "$name.sh"
}
# Isolated jobs first, so the shared ones pack into the other instances.
job train-resnet --isolated --mig 2g.10gb -- sleep 300 > /dev/null
job finetune-bert --isolated --mig 1g.5gb -- sleep 300 > /dev/null
sleep 2
for spec in "embed-a 3G" "embed-b 1500M" "infer-c 4G" "infer-d 2G" "eval-e 6G" "eval-f 1G" "sweep-g 2500M"; do
    set -- $spec
    job "$1" -- exec "$bin/gprobe" run --mem "$2" -- sleep 300 > /dev/null
done
done_id=$(job preprocess -- echo done)
job analysis --hold -- sleep 10 > /dev/null
sleep 3
token=$("$gsched" token --quiet --lifetime 600)
python3 "$root/scripts/browser/dashboard_check.py" "$GSCHED_URL" "$token" "$done_id" \
    "$root/docs/img/dashboard.png" "$work/chrome" || {
    echo "--- gsched up log ---" >&2; tail -40 "$work/up.log" >&2; exit 1; }
