#!/bin/bash
# A record of the Rodinia calls: bench/gpu-external has since become NVIDIA's
# CUDA samples, so this script runs only with the tree of commit 3cd86b4
# (docs/hardware/2026-12-06-samples/run.sh runs the suite of today).
# Issue 41, item 5: the packing benchmark on a lent GPU with an external
# suite (Rodinia's CUDA programs, bench/gpu-external) next to the project's
# own (bench/gpu-jobs). Carries dist/ (release gsched, gsched-shepherd,
# gsub, gqueue, gacct, ginfo, libgprobe.so) and bench/gpu-external/rodinia
# (fetch.sh's copy). Builds the suite with nvcc first.
#   bash docs/hardware/2026-12-06-h200-external/run.sh MODE ARGS...
#   MODE smoke: build, run each kind alone twice (time, digest, repeatable?)
#   MODE trials BATCH JOBS SEED POLICY...: bench/gpu-interleaved.sh with
#        JOBSET (own or external, default external)
set -u
# dist/ travels as dist.tar.xz (the lent machine takes at most 64 MiB).
[ -x dist/gsched ] || { mkdir -p dist && tar -C dist -xJf dist.tar.xz; }
export BIN=$PWD/dist
export JOBSET=${JOBSET:-external}
nvidia-smi -L
nvidia-smi --query-gpu=name,mig.mode.current,compute_mode,memory.total,driver_version --format=csv,noheader
nproc; free -g | head -2
if [ "$JOBSET" = external ] && [ ! -x bench/gpu-external/rodinia/bin/gaussian ]; then
  bash bench/gpu-external/build.sh
fi
mode=${1:?usage: run.sh smoke | trials BATCH JOBS SEED POLICY...}; shift
case $mode in
  smoke)
    for k in gaussian srad srad_big; do
      for t in 1 2; do
        /usr/bin/time -f "$k run $t: %e s, max RSS %M KB" bash bench/gpu-external/run_kind.sh "$k" 2>&1 | grep -E "GPUJOB|run $t|rror" | tail -3
      done
    done
    ;;
  trials)
    R=${R:-$(mktemp -d /tmp/gp.XXXX)}
    mkdir -p "$R"
    OUT=$R bash bench/gpu-interleaved.sh "$@"
    # Beside the directory it archives, not inside it.
    tar -C "$R" -czf "$R-$1-${TAG:-run}.tar.gz" .
    ;;
esac
{ ps -eo pid,stat,args | grep '[n]vidia-cuda-mps' | grep -v ' Z' && echo "MPS still running"; } || true
