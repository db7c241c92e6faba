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
    let second = g.job(ids[1]);
    assert_eq!(second["job_state"], "PENDING", "{second}");
    assert_eq!(second["state_reason"], "Resources", "{second}");
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
    // More CPUs than any node has: never starts.
    let id = submit(&g, script, json!({"cpus_per_task": n + 1}));
    g.wait_until("a reason for the oversized job", T, || {
        g.job(id)["state_reason"] == "ReqNodeNotAvail"
    });
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
    assert!(is_sleep(), "the setsid sleep runs");
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
    let sacct = slurm(
        &g,
        "sacct",
        &[
            "-j",
            &id.to_string(),
            "-P",
            "-n",
            "-o",
            "JobID,MaxRSS,TotalCPU",
        ],
    );
    let text = common::stdout(&sacct);
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
