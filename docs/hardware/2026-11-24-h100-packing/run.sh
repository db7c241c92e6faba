#!/bin/bash
# Issue 17, item 7 on a real GPU: interleaved trials of bench/gpu-packing.sh
# (compute-aware case against exclusive and memory-blind cg:8).
#   bash docs/hardware/2026-11-24-h100-packing/run.sh BATCH JOBS SEED POLICY...
# Carries dist/ (release gsched, gsched-shepherd, gsub, gqueue, gacct,
# ginfo, libgprobe.so). GPUJOB_SCALE=0.5 halves every job's work so that
# the trials fit the device time of a session; the alone times are
# measured at the same scale. Results: $OUT/BATCH-TAG.tar.gz.
export GPUJOB_SCALE=${GPUJOB_SCALE:-0.5}
export BIN=$PWD/dist
# R=DIR (on the device) lets a second call go on with the first's trials.
R=${R:-$(mktemp -d /tmp/gp.XXXX)}
mkdir -p "$R"
nvidia-smi -L
nvidia-smi --query-gpu=mig.mode.current,compute_mode,memory.total,driver_version --format=csv,noheader
OUT=$R bash bench/gpu-interleaved.sh "$@"
tar -C "$R" -czf "$OUT/$1-${TAG:-run}.tar.gz" .
{ ps -eo pid,stat,args | grep '[n]vidia-cuda-mps' | grep -v ' Z' && echo "MPS still running"; } || true
