#!/bin/bash
# Issue 17, item 6 on a real GPU: the probe queue with strict arrival order
# (--max-overtakes 0) against overtaking (8, the default), three trials each
# in the order 0, 8, 8, 0, 0, 8. A trial: a 50 GB job runs 20 s; a 40 GB job
# comes at 1 s (does not fit until the first ends); four 10 GB jobs of 6 s
# come at 2-5 s (two fit beside the first at once). Whole GPU, no MPS.
# Carries target/gpucheck (gsched, gsched-shepherd, libgprobe.so, gsub).
B=$PWD/target/gpucheck
H=$PWD/docs/hardware/2026-11-24-h100-queue
exec > >(tee $OUT/check.log) 2>&1
nvidia-smi -L; nvidia-smi --query-gpu=mig.mode.current,compute_mode,memory.total --format=csv,noheader
trial() {  # $1 max-overtakes, $2 trial number
  st=$(mktemp -d /tmp/gq.XXXX); chmod 755 $st; cp $H/job.py $st/
  for c in squeue sacct; do ln -sf $B/gsched $st/$c; done
  $B/gsched up --state-dir $st/s --listen 127.0.0.1:7817 --node-name gpu1 --kill-wait 2 \
    --heartbeat-interval 1 --max-overtakes $1 > $OUT/up-$1-$2.log 2>&1 &
  up=$!
  for i in $(seq 60); do curl -sf 127.0.0.1:7817/healthz | grep -q '"nodes_up":1' && break; sleep 0.5; done
  export GSCHED_URL=http://127.0.0.1:7817
  sub() { # name gb secs
    printf '#!/bin/sh\nexec python3 %s/job.py %s %s %s\n' $st $1 $2 $3 > $st/$1.sh
    echo "SUBMIT $1 $(date +%s.%N)" >> $st/times
    $B/gsub --gpu-mem ${2}G -o $st/$1.out $st/$1.sh > /dev/null
  }
  sub big 50 20; sleep 1; sub mid 40 8; sleep 1
  for k in 1 2 3 4; do sub small$k 10 6; sleep 1; done
  for i in $(seq 180); do [ "$($st/squeue -h 2>/dev/null | wc -l)" = 0 ] && break; sleep 1; done
  echo "== trial $2 max-overtakes $1"; cat $st/times; cat $st/*.out | grep '^JOB'
  $st/sacct -X -n -P -o JobID,JobName,State
  kill $up; wait $up; rm -rf $st
}
for spec in "0 1" "8 1" "8 2" "0 2" "0 3" "8 3"; do trial $spec; done
