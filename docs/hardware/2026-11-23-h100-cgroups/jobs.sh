#!/bin/bash
# Issue 16 check on a real GPU node: confinement and device rules.
# Carries target/gpucheck: stripped gsched, gsched-shepherd, libgprobe.so.
B=$PWD/target/gpucheck
exec > >(tee $OUT/check.log) 2>&1
id -u; uname -r
grep cgroup /proc/self/mountinfo | awk '{print $5, $(NF-2), $NF}'
grep -i nvidia /proc/devices
nvidia-smi -L
st=$(mktemp -d /tmp/gs.XXXX); chmod 755 $st
$B/gsched up --state-dir $st/state --listen 127.0.0.1:7817 --node-name gpu1 --kill-wait 2 --heartbeat-interval 1 > $OUT/up.log 2>&1 &
up=$!
for i in $(seq 60); do curl -sf 127.0.0.1:7817/healthz | grep -q '"nodes_up":1' && break; sleep 0.5; done
export GSCHED_URL=http://127.0.0.1:7817
for c in sbatch sacct squeue; do ln -sf $B/gsched $st/$c; done
cd $st
cat > cuda.sh <<'J'
#!/bin/bash
grep -E "devices|memory|cpuset" /proc/self/cgroup
d=$(grep :devices: /proc/self/cgroup | cut -d: -f3)
echo "devices.list:"; cat /sys/fs/cgroup/devices${d%/step_batch}/devices.list 2>&1 | tr '\n' ' '; echo
echo "CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"
python3 -c "import torch; x=torch.ones(1<<20, device='cuda'); print('cuda ok', x.sum().item())" 2>&1 | tail -2
J
cat > oom.sh <<'J'
#!/bin/bash
python3 -c "b = bytearray(b'x' * (1 << 30)); print('survived')"
J
./sbatch -J shared -o shared.out cuda.sh
./sbatch -J isolated --gres=gpu:1 -o isolated.out cuda.sh
./sbatch -J oom --mem=200M -o oom.out oom.sh
for i in $(seq 90); do n=$(./squeue -h | wc -l); [ "$n" = 0 ] && break; sleep 1; done
./squeue
./sacct -j 1,2,3 --format JobID,JobName,State,ExitCode,AllocCPUS,ReqMem,MaxRSS,TotalCPU,Reason%70
for f in shared isolated oom; do echo "== $f"; cat $f.out; done
kill $up; wait $up
cp $st/*.out $OUT/ 2>/dev/null
