//! Jobs are confined by cgroups: memory (OUT_OF_MEMORY), cores, devices,
//! process tracking, and CPUs as a consumable resource; their use is
//! accounted. End to end on `gsched up` as root, jobs run as `nobody`.
//! These tests need root (CI runs as root) and say so when skipped.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use common::Gsched;
use serde_json::{json, Value};

const T: Duration = Duration::from_secs(30);
const NOBODY: u32 = 65534;

fn is_root() -> bool {
    // SAFETY: getuid cannot fail.
    unsafe { libc::getuid() == 0 }
}

/// A gsched whose jobs (as nobody) may write into its work directory.
fn start() -> Option<Gsched> {
    if !is_root() {
        eprintln!("skipped: needs root for cgroups and to run jobs as another user");
        return None;
    }
    let g = Gsched::start(&[]);
    std::fs::set_permissions(g.work.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    assert!(
        g.log().contains("jobs are confined with cgroups"),
        "this machine has cgroups; gsched must use them:\n{}",
        g.log()
    );
    Some(g)
}

/// Submits `script` as nobody with Slurm options `slurm`.
fn submit(g: &Gsched, script: &str, slurm: Value) -> u64 {
    let body = json!({
        "name": "confined", "script": script,
        "working_dir": g.work.path().display().to_string(),
        "user_name": "nobody", "uid": NOBODY, "gid": NOBODY,
        "environment": {"PATH": "/usr/bin:/bin"},
        "slurm": slurm,
    });
    let r: Value = common::api(
        "POST",
        &format!("{}/api/v1/jobs", g.url),
        &common::token(&g.url),
    )
    .send_json(body)
    .unwrap()
    .into_json()
    .unwrap();
    r["job_id"]
        .as_u64()
        .unwrap_or_else(|| panic!("not submitted: {r}"))
}

fn output(g: &Gsched, id: u64) -> String {
    std::fs::read_to_string(g.work.path().join(format!("slurm-{id}.out"))).unwrap_or_default()
}

/// Runs a Slurm command (`gsched` called by that name, as its shims are).
fn slurm(g: &Gsched, name: &str, args: &[&str]) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    let shim = dir.path().join(name);
    std::os::unix::fs::symlink(common::bin("gsched"), &shim).unwrap();
    g.run_program(&shim, args, g.work.path(), None, &[])
}

/// sacct's parsable rows (no header) of job `id` with `fields`.
fn sacct(g: &Gsched, id: u64, fields: &str) -> String {
    let out = slurm(
        g,
        "sacct",
        &["-j", &id.to_string(), "-P", "-n", "-o", fields],
    );
    assert!(out.status.success(), "{}", common::stderr(&out));
    common::stdout(&out)
}

fn node_cpus(g: &Gsched) -> u64 {
    let nodes = g.get("/api/v1/nodes").unwrap();
    nodes["nodes"][0]["cpus"].as_u64().unwrap()
}

#[test]
fn a_job_over_its_memory_limit_ends_out_of_memory() {
    let Some(g) = start() else { return };
    // 1 GiB through a pipe into tail, which holds it all.
    let id = submit(
        &g,
        "#!/bin/sh\nhead -c 1073741824 /dev/zero | tail -c 1073741824 >/dev/null\necho survived\n",
        json!({"other": {"mem": "100M"}}),
    );
    let job = g.wait_state(id, "OUT_OF_MEMORY", T);
    let reason = job["state_reason"].as_str().unwrap();
    assert!(reason.contains("--mem=100M"), "{reason}");
    assert_eq!(
        (job["exit_code"].clone(), job["exit_signal"].clone()),
        (json!(0), json!(125))
    );
    let max_rss = job["usage"]["max_rss"].as_u64().unwrap();
    assert!(max_rss <= 101 << 20, "peak {max_rss} over the 100M limit");
}

#[test]
fn a_job_runs_on_its_cores_only() {
    let Some(g) = start() else { return };
    // Two busy loops under -c 1 for 5 s: their CPU time (from /proc, not
    // from gsched) is at most 1.1 cores' worth.
    let script = r#"#!/bin/sh
grep Cpus_allowed_list /proc/self/status
spin() { while :; do :; done; }
spin & a=$!
spin & b=$!
sleep 5
ticks() { awk '{print $14 + $15}' /proc/$1/stat; }
echo "ticks $(ticks $a) $(ticks $b) $(getconf CLK_TCK)"
kill $a $b
"#;
    let id = submit(&g, script, json!({"cpus_per_task": 1}));
    g.wait_state(id, "COMPLETED", T);
    let out = output(&g, id);
    let allowed = out.lines().next().unwrap();
    let list = allowed.split(':').nth(1).unwrap().trim();
    assert!(!list.contains(['-', ',']), "one core allowed: {allowed}");
    let t: Vec<f64> = out
        .lines()
        .find_map(|l| l.strip_prefix("ticks "))
        .unwrap()
        .split_whitespace()
        .map(|v| v.parse().unwrap())
        .collect();
    let cores = (t[0] + t[1]) / t[2] / 5.0;
    assert!(
        cores <= 1.1,
        "two spinners under -c 1 used {cores:.2} cores"
    );
    assert!(
        cores >= 0.5,
        "the spinners hardly ran ({cores:.2} cores): {out}"
    );
}

#[test]
fn jobs_that_each_need_every_cpu_never_overlap() {
    let Some(g) = start() else { return };
    let n = node_cpus(&g);
    let script = "#!/bin/sh\ndate +%s.%N\nsleep 2\ndate +%s.%N\n";
    let ids: Vec<u64> = (0..2)
        .map(|_| submit(&g, script, json!({"cpus_per_task": n})))
        .collect();
    // While the first runs, the second waits for resources.
    g.wait_state(ids[0], "RUNNING", T);
    // (Its reason comes with the pass after its submission.)
    g.wait_until("the second job waits for resources", T, || {
        g.job(ids[1])["state_reason"] == "Resources"
    });
    let second = g.job(ids[1]);
    assert_eq!(second["job_state"], "PENDING", "{second}");
    let spans: Vec<(f64, f64)> = ids
        .iter()
        .map(|&id| {
            g.wait_state(id, "COMPLETED", T);
            let o = output(&g, id);
            let v: Vec<f64> = o.lines().map(|l| l.parse().unwrap()).collect();
            (v[0], v[1])
        })
        .collect();
    assert!(
        spans[1].0 >= spans[0].1 || spans[0].0 >= spans[1].1,
        "jobs overlapped: {spans:?}"
    );
    // More CPUs than any node has: refused at submission, as Slurm does.
    let body = json!({
        "name": "too big", "script": script,
        "working_dir": g.work.path().display().to_string(),
        "user_name": "nobody", "uid": NOBODY, "gid": NOBODY,
        "slurm": {"cpus_per_task": n + 1},
    });
    match common::api(
        "POST",
        &format!("{}/api/v1/jobs", g.url),
        &common::token(&g.url),
    )
    .send_json(body)
    {
        Err(ureq::Error::Status(400, r)) => {
            let text = r.into_string().unwrap();
            assert!(
                text.contains("Requested node configuration is not available"),
                "{text}"
            );
        }
        other => panic!("an oversized job was accepted: {other:?}"),
    }
}

#[test]
fn cancel_kills_processes_that_left_the_process_group() {
    let Some(g) = start() else { return };
    let script =
        "#!/bin/sh\nsetsid nohup sleep 1000 >/dev/null 2>&1 &\necho $! > escaped.pid\nsleep 1000\n";
    let id = submit(&g, script, json!({}));
    let pid_file = g.work.path().join("escaped.pid");
    g.wait_until("the escaped process's pid", T, || {
        std::fs::read_to_string(&pid_file).is_ok_and(|s| s.ends_with('\n'))
    });
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let is_sleep = || {
        std::fs::read_to_string(format!("/proc/{pid}/cmdline"))
            .is_ok_and(|c| c.starts_with("sleep\0"))
    };
    // setsid and nohup exec on to sleep after the shell wrote the pid.
    g.wait_until("the setsid sleep runs", T, is_sleep);
    let out = g.cli("gcancel", &[&id.to_string()]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    g.wait_state(id, "CANCELLED", T);
    assert!(!is_sleep(), "the setsid sleep outlived its cancelled job");
}

#[test]
fn usage_is_accounted_and_the_cgroup_is_the_jobs_own() {
    let Some(g) = start() else { return };
    // 300 MB held at once by tail; then the job shows its cgroup and
    // waits so its device rules can be read while it runs.
    let script = "#!/bin/sh\nhead -c 314572800 /dev/zero | tail -c 314572800 >/dev/null\ncat /proc/self/cgroup\necho listed\nsleep 1000\n";
    let id = submit(&g, script, json!({"other": {"mem": "1G"}}));
    g.wait_until("the job's cgroups", T, || output(&g, id).contains("listed"));
    let out = output(&g, id);
    let own = format!("/job_{id}/step_batch");
    let lines: Vec<&str> = out.lines().filter(|l| l.contains(':')).collect();
    let memory = lines
        .iter()
        .find(|l| l.contains(":memory:") || l.starts_with("0::"))
        .unwrap();
    assert!(
        memory.ends_with(&own),
        "{memory} is not the job's own cgroup"
    );
    // The devices rules (v1) of a job without GPUs: no GPU, and not
    // everything allowed.
    if let Some(dev) = lines.iter().find(|l| l.contains(":devices:")) {
        let path = dev.splitn(3, ':').nth(2).unwrap();
        let list = std::fs::read_to_string(format!(
            "/sys/fs/cgroup/devices{}/devices.list",
            path.trim_end_matches("/step_batch")
        ))
        .unwrap();
        assert!(!list.contains("a *:*"), "everything allowed: {list}");
        assert!(!list.contains("c 195:"), "a GPU device allowed: {list}");
        assert!(
            list.contains("c 1:* rwm"),
            "memory devices (/dev/null) allowed: {list}"
        );
    }
    // sstat shows the running job's use once its node has sampled it.
    g.wait_until("a usage sample", T, || {
        g.job(id)["usage"]["max_rss"].as_u64().is_some()
    });
    let sstat = slurm(
        &g,
        "sstat",
        &["-j", &id.to_string(), "-P", "-o", "JobID,MaxRSS"],
    );
    assert!(sstat.status.success(), "{}", common::stderr(&sstat));
    let text = common::stdout(&sstat);
    assert!(text.contains(&format!("{id}.batch|")), "{text}");
    g.cli("gcancel", &[&id.to_string()]);
    let job = g.wait_state(id, "CANCELLED", T);
    let max_rss = job["usage"]["max_rss"].as_u64().unwrap();
    assert!(
        max_rss >= 250 << 20,
        "MaxRSS {max_rss} of a job that held 300 MB"
    );
    let text = sacct(&g, id, "JobID,MaxRSS,TotalCPU");
    let batch = text
        .lines()
        .find(|l| l.starts_with(&format!("{id}.batch|")))
        .unwrap_or_else(|| panic!("no batch row: {text}"));
    let kib: u64 = batch
        .split('|')
        .nth(1)
        .unwrap()
        .trim_end_matches('K')
        .parse()
        .unwrap();
    assert!(kib >= 250 * 1024, "{batch}");
}

/// A directory with Slurm's `srun` (the gsched shim) that nobody can use.
fn shim_dir(g: &Gsched) -> std::path::PathBuf {
    let dir = g.work.path().join("shims");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink(common::bin("gsched"), dir.join("srun")).unwrap();
    dir
}

fn kib_of(cell: &str) -> u64 {
    cell.trim_end_matches('K')
        .parse()
        .unwrap_or_else(|_| panic!("not a size in K: {cell:?}"))
}

#[test]
fn srun_steps_have_cgroups_of_their_own_and_are_accounted_apart() {
    let Some(g) = start() else { return };
    let shims = shim_dir(&g);
    // Step 0: two tasks show their cgroup; one holds 200 MB. Step 1 leaves
    // a setsid sleep behind, which the step's end kills while the job goes
    // on. The batch script itself stays small.
    let script = format!(
        r#"#!/bin/sh
export PATH={}:$PATH
srun -n 2 sh -c 'grep -E ":(memory|freezer):|^0::" /proc/self/cgroup | head -1 | sed "s/^/task $SLURM_PROCID /"; if [ $SLURM_PROCID = 0 ]; then head -c 209715200 /dev/zero | tail -c 209715200 >/dev/null; fi'
echo "srun=$?"
grep -E ":(memory|freezer):|^0::" /proc/self/cgroup | head -1 | sed "s/^/batch /"
srun sh -c 'setsid sleep 1000 >/dev/null 2>&1 & echo $! > left.pid'
sleep 1
# Gone, or a zombie waiting to be reaped (no longer running).
state=$(sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' /proc/$(cat left.pid)/status 2>/dev/null)
case "$state" in ""|Z|X) echo left-gone ;; *) echo "left-alive $state" ;; esac
srun /nonexistent/program 2>/dev/null
echo "missing=$?"
"#,
        shims.display()
    );
    let id = submit(&g, &script, json!({"other": {"mem": "1G"}, "ntasks": 2}));
    g.wait_state(id, "COMPLETED", T);
    let out = output(&g, id);
    for task in 0..2 {
        let line = out
            .lines()
            .find(|l| l.starts_with(&format!("task {task} ")))
            .unwrap_or_else(|| panic!("no cgroup line of task {task}: {out}"));
        assert!(
            line.ends_with(&format!("/job_{id}/step_0")),
            "task {task} is not in step 0's cgroup: {line}"
        );
    }
    let batch = out.lines().find(|l| l.starts_with("batch ")).unwrap();
    assert!(
        batch.ends_with(&format!("/job_{id}/step_batch")),
        "srun did not go back to the batch step: {batch}"
    );
    assert!(out.contains("srun=0"), "{out}");
    assert!(
        out.contains("left-gone"),
        "a process left behind by step 1 outlived the step: {out}"
    );
    // sacct: the step that held 200 MB shows it; the batch step does not.
    let text = sacct(&g, id, "JobID,MaxRSS,TotalCPU,State");
    let row = |suffix: &str| -> Vec<String> {
        text.lines()
            .find(|l| l.starts_with(&format!("{id}.{suffix}|")))
            .unwrap_or_else(|| panic!("no {id}.{suffix} row: {text}"))
            .split('|')
            .map(String::from)
            .collect()
    };
    let step0 = row("0");
    assert!(kib_of(&step0[1]) >= 180 * 1024, "step 0: {step0:?}");
    assert_eq!(step0[3], "COMPLETED");
    let batch = row("batch");
    assert!(
        kib_of(&batch[1]) < 100 * 1024,
        "the batch step is charged for its steps: {batch:?} ({text})"
    );
    assert!(!row("1")[1].is_empty(), "step 1 has no usage: {text}");
    // A step whose task could not start ended FAILED at once (not with
    // the job), and srun said so.
    assert_eq!(row("2")[3], "FAILED", "{text}");
    assert!(out.contains("missing=1"), "{out}");
    // The job's total holds the step's peak.
    let job = g.job(id);
    assert!(
        job["usage"]["max_rss"].as_u64().unwrap() >= 180 << 20,
        "{job}"
    );
}

#[test]
fn a_process_cannot_join_a_step_of_another_job() {
    let Some(g) = start() else { return };
    let shims = shim_dir(&g);
    // Job A publishes its probe socket and key, then waits.
    let a = submit(
        &g,
        "#!/bin/sh\necho \"$GSCHED_PROBE_SOCK $GSCHED_JOB_KEY $SLURM_JOB_ID\" > a.env\nsleep 1000\n",
        json!({}),
    );
    let env_file = g.work.path().join("a.env");
    g.wait_until("job A's environment", T, || {
        std::fs::read_to_string(&env_file).is_ok_and(|s| s.ends_with('\n'))
    });
    // Job B, of the same user, runs srun with A's key and id: its process
    // is not one of A's, so gnoded refuses to move it into A's step, and
    // the tasks run in B's own cgroup.
    let script = format!(
        "#!/bin/sh\nexport PATH={}:$PATH\nread sock key job < a.env\n\
         GSCHED_PROBE_SOCK=$sock GSCHED_JOB_KEY=$key SLURM_JOB_ID=$job srun sh -c 'grep -E \":(memory|freezer):|^0::\" /proc/self/cgroup | head -1'\n",
        shims.display()
    );
    let b = submit(&g, &script, json!({}));
    g.wait_state(b, "COMPLETED", T);
    let out = output(&g, b);
    assert!(
        out.contains(&format!("job_{b}/step_batch")),
        "job B's task left its own cgroup: {out}"
    );
    assert!(
        out.contains("is not a process of job"),
        "the refusal is said: {out}"
    );
    g.cli("gcancel", &[&a.to_string()]);
    g.wait_state(a, "CANCELLED", T);
}
