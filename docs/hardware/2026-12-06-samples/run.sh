#!/bin/bash
# Issue 41, item 5: interleaved trials of the packing benchmark on a lent GPU
# with the external suite (NVIDIA's CUDA samples, bench/gpu-external) or the
# project's own (bench/gpu-jobs, JOBSET=own). Carries dist.tar.xz (release
# gsched, gsched-shepherd, gsub, gqueue, gacct, ginfo, gcancel,
# libgprobe.so, stripped) and bench/gpu-external/cuda-samples (fetch.sh's
# copy); builds the suite with nvcc first. Everything the trials wrote comes
# back as one archive, $OUT/TAG.tar.gz.
#   OUT=DIR TAG=NAME bash docs/hardware/2026-12-06-samples/run.sh BATCH JOBS SEED POLICY...
set -u
OUT=${OUT:?OUT}
TAG=${TAG:-run}
[ -x dist/gsched ] || { mkdir -p dist && tar -C dist -xJf dist.tar.xz; }
export BIN=$PWD/dist JOBSET=${JOBSET:-external}
nvidia-smi --query-gpu=name,mig.mode.current,compute_mode,memory.total,driver_version --format=csv,noheader
if [ "$JOBSET" = external ] && [ ! -x bench/gpu-external/cuda-samples/bin/binomialOptions ]; then
  bash bench/gpu-external/build.sh | tail -1
fi
R=/tmp/trials-$TAG
mkdir -p "$R/$1"
# ALONE_FROM=FILE takes the alone times (and digests) of an earlier call.
[ -n "${ALONE_FROM:-}" ] && cp "$ALONE_FROM" "$R/$1/alone-first.txt"
# Whatever ran within the budget comes back.
OUT=$R timeout "${BUDGET:-540}" bash bench/gpu-interleaved.sh "$@"
tar -C "$R" -czf "$OUT/$TAG.tar.gz" .
{ ps -eo pid,stat,args | grep '[n]vidia-cuda-mps' | grep -v ' Z' && echo "MPS still running"; } || true
