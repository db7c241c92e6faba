#!/bin/bash
# Issue 17 on a real GPU: an isolated job does not start next to a shared
# job that bypassed the interception (GSCHED_INTERCEPT=0, no LD_PRELOAD): the
# drain waits for every job process NVML reports on the GPU, not only for
# placed tasks. With MPS on (gsched's own server), so the MPS server itself
# must not hold the drain. Carries target/gpucheck.
B=$PWD/target/gpucheck
H=$PWD/docs/hardware/2026-11-24-h100-steps-gputime
exec > >(tee $OUT/check.log) 2>&1
nvidia-smi -L; nvidia-smi --query-gpu=mig.mode.current,compute_mode --format=csv,noheader
st=$(mktemp -d /tmp/gs.XXXX); chmod 755 $st
printf '[[gpu]]\nindex = 0\nmps = true\n' > $st/gpus.toml
$B/gsched up --state-dir $st/s --listen 127.0.0.1:7817 --node-name gpu1 --kill-wait 2 --heartbeat-interval 1 --gpu-config $st/gpus.toml > $OUT/up.log 2>&1 &
up=$!
for i in $(seq 60); do curl -sf 127.0.0.1:7817/healthz | grep -q '"nodes_up":1' && break; sleep 0.5; done
export GSCHED_URL=http://127.0.0.1:7817
for c in sbatch sacct squeue; do ln -sf $B/gsched $st/$c; done
cp $H/busy.py $st/; cd $st
wait_all() { for i in $(seq 120); do [ "$(./squeue -h | wc -l)" = 0 ] && return; sleep 1; done; }
stamp() { python3 -c 'import time; print(f"{time.time():.2f}")'; }
# 1. An isolated job alone, with MPS running: starts at once.
./sbatch -J iso-alone --gres=gpu:1 -o iso-alone.out --wrap "python3 busy.py 2"; wait_all
# 2. A shared job that bypasses the interception, then an isolated job.
./sbatch -J bypass -o bypass.out --wrap "echo start \$(date +%s.%N); env -u LD_PRELOAD GSCHED_INTERCEPT=0 python3 busy.py 12; echo end \$(date +%s.%N)"
sleep 8
./sbatch -J iso-after --gres=gpu:1 -o iso-after.out --wrap "echo start \$(date +%s.%N); nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader; python3 busy.py 2"
wait_all
./sacct -j 1,2,3 --format JobID,JobName,State,ExitCode,Start,End,Elapsed
for f in iso-alone bypass iso-after; do echo "== $f"; cat $f.out; done
kill $up; wait $up
sleep 1; ps -eo pid,stat,args | grep '[n]vidia-cuda-mps' | grep -v ' Z' && echo "MPS still running"
grep -E "processes without a placement|waiting for shared|MPS" $OUT/up.log | head -10
