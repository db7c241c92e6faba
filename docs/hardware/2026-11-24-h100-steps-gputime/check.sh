#!/bin/bash
# Issue 16 on a real GPU node: srun steps in cgroups of their own, and GPU
# time from NVML's per-process utilization. Jobs run one after another so
# each one's GPU time can be compared with how long it kept the GPU busy.
# Carries target/gpucheck: stripped gsched, gsched-shepherd, libgprobe.so.
B=$PWD/target/gpucheck
H=$PWD/docs/hardware/2026-11-24-h100-steps-gputime
exec > >(tee $OUT/check.log) 2>&1
id -u; uname -r; nvidia-smi -L; nvidia-smi --query-gpu=mig.mode.current,compute_mode --format=csv
st=$(mktemp -d /tmp/gs.XXXX); chmod 755 $st
RUST_LOG=info,gsched_noded::gpu::meter=debug $B/gsched up --state-dir $st/state --listen 127.0.0.1:7817 --node-name gpu1 --kill-wait 2 --heartbeat-interval 1 > $OUT/up.log 2>&1 &
up=$!
for i in $(seq 60); do curl -sf 127.0.0.1:7817/healthz | grep -q '"nodes_up":1' && break; sleep 0.5; done
export GSCHED_URL=http://127.0.0.1:7817
for c in sbatch sacct squeue sstat srun; do ln -sf $B/gsched $st/$c; done
cp $H/busy.py $st/; cd $st
wait_all() { for i in $(seq 120); do [ "$(./squeue -h | wc -l)" = 0 ] && return; sleep 1; done; }
cat > steps.sh <<J
#!/bin/bash
export PATH=$st:\$PATH
python3 busy.py 8
srun -n 1 python3 busy.py 4
srun -n 2 sh -c 'grep -E "^0::" /proc/self/cgroup | sed "s/^/task \$SLURM_PROCID /"'
grep -E "^0::" /proc/self/cgroup | sed "s/^/batch /"
J
./sbatch -J steps --gres=gpu:1 -o steps.out steps.sh; wait_all
./sbatch -J shared -o shared.out --wrap "python3 busy.py 6"; wait_all
./sbatch -J half --gres=gpu:1 -o half.out --wrap "python3 busy.py 10 0.5"
sleep 7; ./sstat -j 3 -o JobID,MaxRSS,TotalCPU,GPUTime,NTasks; wait_all
./sbatch -J cpuonly -o cpu.out --wrap "python3 -c 'sum(range(30000000))'"; wait_all
./sacct -j 1,2,3,4 --format JobID,JobName,State,ExitCode,Elapsed,MaxRSS,TotalCPU,GPUTime
for f in steps shared half cpu; do echo "== $f"; cat $f.out; done
kill $up; wait $up
grep -c "process utilization samples" $OUT/up.log
grep -m 5 "process utilization samples" $OUT/up.log
grep -E "GPU time|step (began|ended)" $OUT/up.log | head -20
