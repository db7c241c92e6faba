#!/bin/bash
# Device rules on cgroup v2 (eBPF) on a real GPU node: what a job may open.
# Carries target/gpucheck: stripped gsched, gsched-shepherd, libgprobe.so.
B=$PWD/target/gpucheck
exec > >(tee $OUT/check2.log) 2>&1
ls -la /dev/nvidia* /dev/nvidia-caps 2>&1 | head -20
probe() { for d in /dev/nvidia0 /dev/nvidiactl /dev/nvidia-uvm /dev/nvidia-caps/nvidia-cap1 /dev/nvidia-caps/nvidia-cap2 /dev/nvidia-nvswitchctl /dev/null; do
  [ -e $d ] || continue; if ( exec 3<$d ) 2>/tmp/err.$$; then echo "open $d: ok"; else echo "open $d: $(sed 's/.*: //' /tmp/err.$$)"; fi; done; }
echo "== outside any job (root)"; probe
st=$(mktemp -d /tmp/gs.XXXX); chmod 755 $st
$B/gsched up --state-dir $st/state --listen 127.0.0.1:7817 --node-name gpu1 --kill-wait 2 --heartbeat-interval 1 > $OUT/up2.log 2>&1 &
up=$!
for i in $(seq 60); do curl -sf 127.0.0.1:7817/healthz | grep -q '"nodes_up":1' && break; sleep 0.5; done
export GSCHED_URL=http://127.0.0.1:7817
for c in sbatch sacct squeue; do ln -sf $B/gsched $st/$c; done
cd $st
{ echo '#!/bin/bash'; echo 'cat /proc/self/cgroup; grep Cpus_allowed_list /proc/self/status'; declare -f probe; echo probe; } > dev.sh
./sbatch -J iso --gres=gpu:1 -c 2 -o iso.out dev.sh
./sbatch -J shared -o shared.out dev.sh
for i in $(seq 60); do n=$(./squeue -h | wc -l); [ "$n" = 0 ] && break; sleep 1; done
for f in iso shared; do echo "== job $f"; cat $f.out; done
kill $up; wait $up
