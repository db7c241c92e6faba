#!/bin/bash
# Issue 17: compute demands learned on a real GPU. gsched up on the whole
# GPU, with its MPS server (MPS=1, the default) or without (MPS=0); two
# kinds of the bench suite, each run twice under the same name: `dense`
# (keeps the GPU busy) and `cpu_burst` (host work, short GPU bursts). The
# first run of each is placed with the default demand; the second with what
# the first measured. Carries dist/. Writes check.log.
# Ran with MPS=1 at commit 3a346ed (check.log: its timing of
# synchronizations, withdrawn after this run, reverted in 8492559) and with
# MPS=0 at commit 41cbd24 (nomps.log); again with both at commit 0bbee46,
# where the interception samples its streams' pending work (busy-mps.log,
# busy-nomps.log: usage's gpu_busy_usec against the driver's
# gpu_time_usec). See docs/hardware.md.
exec > >(tee "$OUT/check.log") 2>&1
export PATH=$PWD/dist:$PATH GPUJOB_SCALE=0.5
S=bench/gpu-jobs
st=$(mktemp -d /tmp/gl.XXXX); chmod 755 $st
if [ "${MPS:-1}" = 1 ]; then mps=true; else mps=false; fi
printf '[[gpu]]\nindex = 0\nmps = %s\n' $mps > $st/gpus.toml
gsched up --state-dir $st/s --listen 127.0.0.1:7821 --node-name gpu1 --kill-wait 2 \
  --heartbeat-interval 1 --gpu-config $st/gpus.toml > $st/up.log 2>&1 &
UP=$!
export GSCHED_URL=http://127.0.0.1:7821
for _ in $(seq 100); do ginfo >/dev/null 2>&1 && break; sleep 0.2; done
sleep 1
nvidia-smi --query-gpu=name,mig.mode.current,compute_mode,driver_version --format=csv,noheader
for k in dense cpu_burst; do
  for run in 1 2; do
    printf '#!/bin/sh\nexec python3 %s/%s.py --mem-gb 2\n' "$PWD/$S" $k > $st/$k.sh
    id=$(gsub --parsable -J $k -o $st/$k-$run.out --gpu-mem 3G $st/$k.sh)
    for _ in $(seq 240); do [ -z "$(gqueue -h -j $id)" ] && break; sleep 0.5; done
    echo "== $k run $run: job $id"
    grep GPUJOB $st/$k-$run.out
  done
done
gacct
echo "== jobs (usage)"
gacct --json | python3 -c "import json,sys; [print(j['job_id'], j['name'], j.get('start_time'), j.get('end_time'), json.dumps(j.get('usage'))) for j in json.load(sys.stdin)['jobs']]"
echo "== task records (share: thousandths of the GPU it was placed with)"
curl -s --unix-socket $st/s/ctld.sock http://localhost/api/v1/tasks | python3 -c "import json,sys; [print(t['job'], t['share'], t['bytes'], t['warps']) for t in json.load(sys.stdin)['tasks']]"
kill -TERM $UP; wait $UP
grep -E 'MPS|share' $st/up.log | tail -5
{ ps -eo pid,stat,args | grep '[n]vidia-cuda-mps' | grep -v ' Z' && echo "MPS still running"; } || true
