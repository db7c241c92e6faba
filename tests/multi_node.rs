//! Jobs on several nodes (issue 18): a real gctld and two gnoded, each on a
//! host of its own (network namespaces, see `net`), each node with two
//! simulated GPUs, driven through the Slurm shims as users do. Needs root
//! (CI runs as root).

mod common;
mod net;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use common::{stderr, stdout};
use net::Cluster;

fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

const T: Duration = Duration::from_secs(60);

/// Two nodes, n1 and n2, with two whole simulated A100s each, and the
/// Slurm shims.
struct Two {
    c: Cluster,
    shims: PathBuf,
}

impl Two {
    fn up() -> Two {
        let c = Cluster::up_with_node_args(2, 2, 10, &["--sim-gpus", "2xA100-40GB"]);
        let shims = c.dir.path().join("shims");
        common::slurm::install_shims(&shims);
        Two { c, shims }
    }

    fn work(&self) -> &Path {
        self.c.dir.path()
    }

    /// Runs a shim from the controller's host as the test's user.
    fn run(&self, name: &str, args: &[&str]) -> Output {
        let path = format!(
            "{}:{}",
            self.shims.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        Command::new(self.shims.join(name))
            .args(args)
            .current_dir(self.work())
            .env("PATH", path)
            .env("GSCHED_URL", self.c.url())
            .env("GSCHED_TOKEN", self.c.token())
            .env_remove("SLURM_JOB_ID")
            .output()
            .unwrap()
    }

    fn sbatch(&self, script: &str, body: &str) -> u64 {
        let path = self.work().join(script);
        std::fs::write(&path, body).unwrap();
        let o = self.run("sbatch", &["--parsable", path.to_str().unwrap()]);
        assert!(o.status.success(), "sbatch: {}", stderr(&o));
        stdout(&o).trim().parse().unwrap()
    }

    fn state(&self, id: u64) -> String {
        let j = self.c.get(&format!("/api/v1/jobs/{id}"));
        j["job_state"].as_str().unwrap_or("?").to_string()
    }

    fn wait_state(&self, id: u64, want: &str) {
        self.c.wait(&format!("job {id} is {want}"), T, || {
            // One read: the state and whether it is final, of one moment.
            let j = self.c.get(&format!("/api/v1/jobs/{id}"));
            let s = j["job_state"].as_str().unwrap_or("?").to_string();
            assert!(
                s == want || !net::is_final(&j),
                "job {id} ended {s}, not {want}\n{}\n{}",
                self.file(&format!("{id}.out")),
                self.c.logs()
            );
            s == want
        });
    }

    fn file(&self, name: &str) -> String {
        std::fs::read_to_string(self.work().join(name)).unwrap_or_default()
    }
}

/// `sbatch -N 2 --ntasks-per-node=2`: the script runs on the first node
/// with the whole allocation in its environment; `srun` starts 4 tasks, 2
/// on each node, with their ranks; `-w`/`-N` pick nodes of the
/// allocation; `-K` ends the step at the first bad exit on either node;
/// each node's GPUs are its tasks'.
#[test]
fn a_job_on_two_nodes_runs_its_steps_on_both() {
    let _s = serial();
    let t = Two::up();
    let id = t.sbatch(
        "wide.sh",
        "#!/bin/sh\n#SBATCH -N 2 --ntasks-per-node=2 --gres=gpu:2 -o %j.out\n\
         echo batch $SLURMD_NODENAME $SLURM_JOB_NODELIST $SLURM_JOB_NUM_NODES $SLURM_NNODES $SLURM_TASKS_PER_NODE $SLURM_NTASKS\n\
         srun -l sh -c 'echo $SLURM_PROCID $SLURM_LOCALID $SLURM_NODEID $SLURMD_NODENAME $SLURM_STEP_NUM_TASKS $SLURM_STEP_NODELIST' | sort\n\
         srun -w n2 -n 1 sh -c 'echo only $SLURMD_NODENAME $SLURM_NODEID'\n\
         srun -N 2 -n 2 --gpus-per-task=1 sh -c 'echo gpu $SLURM_PROCID $SLURMD_NODENAME $CUDA_VISIBLE_DEVICES' | sort > gpus.txt\n\
         srun -K sh -c 'if [ $SLURM_PROCID = 3 ]; then exit 7; fi; sleep 301'\n\
         echo bad=$?\n\
         srun -w n3 true || echo refused\n\
         srun sh -c '[ \"$SLURM_TASK_PID\" = $$ ] && echo pid $SLURM_PROCID' | sort\n\
         squeue -h -j $SLURM_JOB_ID -o '%D %N'\n\
         scontrol show job $SLURM_JOB_ID | grep -o 'NumNodes=[0-9]*'\n",
    );
    t.wait_state(id, "COMPLETED");
    let out = t.file(&format!("{id}.out"));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "batch n1 n[1-2] 2 2 2(x2) 4", "{out}");
    assert_eq!(
        &lines[1..5],
        [
            "0: 0 0 0 n1 4 n[1-2]",
            "1: 1 1 0 n1 4 n[1-2]",
            "2: 2 0 1 n2 4 n[1-2]",
            "3: 3 1 1 n2 4 n[1-2]"
        ],
        "{out}"
    );
    // SLURM_NODEID is the node's place in the step, as Slurm's.
    assert_eq!(lines[5], "only n2 0", "{out}");
    assert_eq!(lines[6], "bad=7", "{out}");
    assert!(
        out.contains("n3 is not in the job's allocation (n[1-2])")
            && out.ends_with("refused\npid 0\npid 1\npid 2\npid 3\n2 n[1-2]\nNumNodes=2\n"),
        "{out}"
    );
    // One GPU per task, each node's own (simulated UUIDs name the node).
    let gpus = t.file("gpus.txt");
    let g: Vec<&str> = gpus.lines().collect();
    assert_eq!(g.len(), 2, "{gpus}");
    assert!(
        g[0].starts_with("gpu 0 n1 ") && g[1].starts_with("gpu 1 n2 "),
        "{gpus}"
    );
    let dev = |l: &str| l.split(' ').nth(3).unwrap_or("").to_string();
    assert!(!dev(g[0]).contains(',') && !dev(g[0]).is_empty(), "{gpus}");
    assert_ne!(dev(g[0]), dev(g[1]), "{gpus}");
    // --gpus-per-node=2: each node's two GPUs for its task there.
    let per_node = t.sbatch(
        "pernode.sh",
        "#!/bin/sh\n#SBATCH -N 2 --gpus-per-node=2 -o pernode.out\n\
         srun sh -c 'echo $SLURMD_NODENAME $CUDA_VISIBLE_DEVICES' | sort\n",
    );
    t.wait_state(per_node, "COMPLETED");
    let pn = t.file("pernode.out");
    let lines: Vec<&str> = pn.lines().collect();
    assert_eq!(lines.len(), 2, "{pn}");
    for (line, node) in lines.iter().zip(["n1", "n2"]) {
        let (name, devices) = line.split_once(' ').unwrap_or_default();
        assert_eq!(name, node, "{pn}");
        assert_eq!(devices.split(',').count(), 2, "{pn}");
    }
    // Nothing of the job is left on either node: the task -K left running
    // on n2 was killed when srun went away, the sister's share at the end.
    // (301: no other test's job sleeps that long.)
    for left in ["sleep 301", "sleep 2147483647"] {
        t.c.wait(&format!("no `{left}` is left"), T, || {
            let o = Command::new("pgrep").args(["-f", left]).output().unwrap();
            let none = stdout(&o).trim().is_empty();
            if !none {
                let ps = Command::new("ps")
                    .args(["-eo", "pid,pgid,ppid,args"])
                    .output()
                    .unwrap();
                eprintln!(
                    "{}",
                    stdout(&ps)
                        .lines()
                        .filter(|l| l.contains("sleep"))
                        .collect::<Vec<_>>()
                        .join("\n")
                );
            }
            none
        });
    }
    // A node starts step tasks only for a request sealed for that node
    // and step under the cluster key, with a credential the controller
    // signed for them.
    let forged = serde_json::json!({
        "job": id, "run": 1, "step": 99, "credential": "forged",
        "argv": ["touch", "/tmp/gsched-forged"], "env": {}, "node_id": 0, "tasks": [0],
    });
    let key = std::fs::read_to_string(t.c.dir.path().join("ctl/cluster.key")).unwrap();
    for (sealing_key, refusal) in [
        ("a guessed key", "not sealed for this step"),
        (key.as_str(), "step credential does not verify"),
    ] {
        let seal = gsched_seal::StepSeal::for_step(sealing_key, id, 1, 99, "n2");
        let body = serde_json::json!({
            "job": id, "run": 1, "step": 99,
            "sealed": seal.seal_request(forged.to_string().as_bytes()).0,
        });
        let r = ureq::post(&format!("http://{}:6818/v1/steps", t.c.net.addr(2))).send_json(body);
        match r {
            Err(ureq::Error::Status(code, resp)) => {
                assert_eq!(code, 403);
                let body = resp.into_string().unwrap_or_default();
                assert!(body.contains(refusal), "{body}");
            }
            other => panic!("a forged step was not refused: {other:?}"),
        }
    }
    assert!(!Path::new("/tmp/gsched-forged").exists());
    // sacct names both nodes; squeue did while it ran (below).
    let acct = t.run(
        "sacct",
        &[
            "-j",
            &id.to_string(),
            "-P",
            "-n",
            "-X",
            "-o",
            "NodeList,NNodes",
        ],
    );
    assert_eq!(stdout(&acct).trim(), "n[1-2]|2", "{}", stderr(&acct));
}

/// A job wider than the cluster is refused at submission; one that
/// cannot start now waits (Resources) and starts once a node is back from
/// a drain; a narrow job submitted after it does not take the held node.
#[test]
fn wide_jobs_wait_for_their_nodes_and_are_refused_beyond_the_cluster() {
    let _s = serial();
    let t = Two::up();
    let o = t.run("sbatch", &["-N", "3", "--wrap", "true"]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("asks for 3 nodes and 2 known could run it"),
        "{}",
        stderr(&o)
    );
    let o = t.run(
        "scontrol",
        &["update", "NodeName=n2", "State=DRAIN", "Reason=fan"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let wide = t.sbatch(
        "w.sh",
        "#!/bin/sh\n#SBATCH -N 2 -o w.out\nsrun hostname >/dev/null; echo wide done\n",
    );
    let c = &t.c;
    // A drained node is not available: as with a job on one node.
    c.wait("the wide job waits for its nodes", T, || {
        let j = c.get(&format!("/api/v1/jobs/{wide}"));
        j["job_state"] == "PENDING" && j["state_reason"] == "ReqNodeNotAvail"
    });
    // A narrow job still runs on the node left (nothing to wait for there:
    // the wide job cannot start before n2 is back).
    let narrow = t.sbatch(
        "n.sh",
        "#!/bin/sh
#SBATCH -o n.out
echo narrow $SLURMD_NODENAME
",
    );
    t.wait_state(narrow, "COMPLETED");
    assert_eq!(t.file("n.out"), "narrow n1\n");
    assert_eq!(t.state(wide), "PENDING");
    let o = t.run("scontrol", &["update", "NodeName=n2", "State=RESUME"]);
    assert!(o.status.success(), "{}", stderr(&o));
    t.wait_state(wide, "COMPLETED");
    assert_eq!(t.file("w.out"), "wide done\n");
}

/// Open MPI's `mpirun`, unmodified, inside a job on two nodes: it starts
/// its daemons through `srun` (its Slurm support) and runs 4 ranks, 2 on
/// each node, which reduce across the nodes over TCP.
#[test]
fn mpirun_runs_ranks_on_both_nodes() {
    let _s = serial();
    if Command::new("mpicc").arg("--version").output().is_err() {
        panic!("Open MPI is missing: install openmpi-bin and libopenmpi-dev (./scripts/test does)");
    }
    let t = Two::up();
    std::fs::write(
        t.work().join("hello.c"),
        "#include <mpi.h>\n#include <stdio.h>\n#include <stdlib.h>\n#include <unistd.h>\n\
         int main(int argc, char **argv) {\n\
           int rank, size, sum = 0; char host[64];\n\
           MPI_Init(&argc, &argv);\n\
           MPI_Comm_rank(MPI_COMM_WORLD, &rank); MPI_Comm_size(MPI_COMM_WORLD, &size);\n\
           MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);\n\
           gethostname(host, sizeof host);\n\
           printf(\"rank %d of %d on %s sum %d\\n\", rank, size, host, sum);\n\
           MPI_Finalize(); return 0;\n\
         }\n",
    )
    .unwrap();
    let o = Command::new("mpicc")
        .args(["-o", "hello", "hello.c"])
        .current_dir(t.work())
        .output()
        .unwrap();
    assert!(o.status.success(), "mpicc: {}", stderr(&o));
    // Root runs the test's jobs: Open MPI wants that said.
    let id = t.sbatch(
        "mpi.sh",
        "#!/bin/sh\n#SBATCH -N 2 --ntasks-per-node=2 -o mpi.out\n\
         export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1\n\
         mpirun ./hello | sort\n",
    );
    t.wait_state(id, "COMPLETED");
    assert_eq!(
        t.file("mpi.out"),
        "rank 0 of 4 on n1 sum 6\nrank 1 of 4 on n1 sum 6\nrank 2 of 4 on n2 sum 6\nrank 3 of 4 on n2 sum 6\n"
    );
}

/// A job on two nodes behind a running one holds both nodes and shows when
/// it will start (`squeue --start`, from the running job's time limit); a
/// narrow job that will have ended by then starts on the held node
/// (backfill), one that would not waits; the wide job starts when the
/// running one ends, before the narrow one that waited.
#[test]
fn a_waiting_wide_job_is_not_starved_and_short_jobs_backfill_around_it() {
    let _s = serial();
    let t = Two::up();
    let busy = t.sbatch(
        "busy.sh",
        "#!/bin/sh\n#SBATCH -w n1 --exclusive --time=1 -o /dev/null\nsleep 6\n",
    );
    t.wait_state(busy, "RUNNING");
    let wide = t.sbatch(
        "w.sh",
        "#!/bin/sh\n#SBATCH -N 2 --time=1 -o w.out\nsrun hostname | sort\n",
    );
    let c = &t.c;
    c.wait("the wide job shows its expected start", T, || {
        let o = t.run(
            "squeue",
            &["--start", "-h", "-j", &wide.to_string(), "-o", "%S %R"],
        );
        let line = stdout(&o);
        line.starts_with("20") && line.trim().ends_with("(Resources)")
    });
    // Two minutes would outlast the busy job's limit: it waits.
    let long = t.sbatch(
        "long.sh",
        "#!/bin/sh\n#SBATCH --time=2 -o /dev/null\ntrue\n",
    );
    // Ten seconds end before the wide job can start: backfilled onto n2.
    let short = t.sbatch(
        "short.sh",
        "#!/bin/sh\n#SBATCH --time=0:10 -o short.out\necho backfilled $SLURMD_NODENAME\n",
    );
    t.wait_state(short, "COMPLETED");
    assert_eq!(t.file("short.out"), "backfilled n2\n");
    assert_eq!(t.state(long), "PENDING");
    assert_eq!(t.state(wide), "PENDING");
    t.wait_state(wide, "COMPLETED");
    t.wait_state(long, "COMPLETED");
    assert_eq!(t.file("w.out"), "n1\nn2\n");
    let started = |id: u64| {
        c.get(&format!("/api/v1/jobs/{id}"))["start_time"]
            .as_i64()
            .unwrap()
    };
    assert!(started(wide) <= started(long), "the wide job went first");
}

/// A job on two nodes is suspended on both: its step's tasks stop on each
/// node (their cgroups frozen), and go on when it is resumed.
#[test]
fn a_job_on_two_nodes_is_suspended_and_resumed_on_both() {
    let _s = serial();
    let t = Two::up();
    let id = t.sbatch(
        "ticks.sh",
        "#!/bin/sh\n#SBATCH -N 2 -o %j.out\n\
         srun sh -c 'while :; do echo t >> ticks.$SLURMD_NODENAME; sleep 0.1; done'\n",
    );
    t.wait_state(id, "RUNNING");
    let ticks = |n: &str| t.file(&format!("ticks.{n}")).lines().count();
    t.c.wait("both nodes tick", T, || ticks("n1") > 0 && ticks("n2") > 0);
    let sid = id.to_string();
    let o = t.run("scontrol", &["suspend", &sid]);
    assert!(o.status.success(), "{}", stderr(&o));
    // Stopped on both nodes: nothing more in a second, once the
    // requests have arrived.
    std::thread::sleep(Duration::from_millis(700));
    let before = (ticks("n1"), ticks("n2"));
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(
        (ticks("n1"), ticks("n2")),
        before,
        "still ticking while suspended"
    );
    let o = t.run("squeue", &["-h", "-j", &sid, "-o", "%T %N"]);
    assert_eq!(stdout(&o), "SUSPENDED n[1-2]\n", "{}", stderr(&o));
    let o = t.run("scontrol", &["resume", &sid]);
    assert!(o.status.success(), "{}", stderr(&o));
    t.c.wait("both nodes tick again", T, || {
        ticks("n1") > before.0 && ticks("n2") > before.1
    });
    let o = t.run("scancel", &[&sid]);
    assert!(o.status.success(), "{}", stderr(&o));
    t.wait_state(id, "CANCELLED");
}
