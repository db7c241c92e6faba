//! Suspension end to end (issue 20): a job of a higher QOS suspends one
//! for its CPUs (`PreemptMode=SUSPEND`), and an administrator suspends and
//! resumes one (`scontrol suspend|resume`). The job's processes really
//! stop (its output stops growing), its time limit stands still, and it
//! goes on where it was.

mod common;

use std::time::Duration;

use common::slurm::Slurm;

const T: Duration = Duration::from_secs(30);

/// Lines in the work directory's file `name`.
fn lines(s: &Slurm, name: &str) -> usize {
    s.file(name).lines().count()
}

fn suspended(s: &Slurm, id: u64) -> bool {
    s.g.job(id)["suspended"].as_bool() == Some(true)
}

/// Submits a job running `script` (which ticks into `ticks`) with its
/// output in job.out, and waits for its first tick.
fn ticking_job(s: &Slurm, script: &str) -> u64 {
    let id = s.sbatch(&["-o", "job.out", "--wrap", script]);
    s.g.wait_until("the job ticks", T, || lines(s, "ticks") > 0);
    id
}

/// The job's ticks stop while it is suspended: none in a second.
fn ticks_stand_still(s: &Slurm, file: &str) {
    let before = lines(s, file);
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(lines(s, file), before, "{file} grew while suspended");
}

#[test]
fn a_higher_qos_suspends_a_job_for_its_cpus_and_it_goes_on_within_its_limit() {
    // The node's 64 CPUs: all to the low job; the high one wants 8.
    let s = Slurm::start_with(&["--sim-gpus", "1xA100-40GB", "--preempt-mode", "suspend"]);
    let g = &s.g;
    s.ok("sacctmgr", &["-i", "add", "qos", "low"]);
    s.ok(
        "sacctmgr",
        &["-i", "add", "qos", "high", "Priority=100", "Preempt=low"],
    );
    // About 3 s of work in 30 ticks, under an 8 s limit; the high job
    // takes 8 s: had the limit run on while it was stopped, it would
    // end TIMEOUT.
    let low = s.sbatch(&[
        "--qos=low",
        "-c",
        "64",
        "-t",
        "0:08",
        "-o",
        "low.out",
        "--wrap",
        "for i in $(seq 1 30); do echo tick >> ticks; sleep 0.1; done; echo low done",
    ]);
    g.wait_until("the low job ticks", T, || lines(&s, "ticks") > 0);
    let high = s.sbatch(&[
        "--qos=high",
        "-c",
        "8",
        "-o",
        "high.out",
        "--wrap",
        "sleep 8; echo high ran",
    ]);
    g.wait_until("the low job is suspended", T, || suspended(&s, low));
    // squeue shows it SUSPENDED (S), and -t S finds it.
    let id = low.to_string();
    assert_eq!(
        s.ok("squeue", &["-h", "-j", &id, "-o", "%t %T"]),
        "S SUSPENDED\n"
    );
    assert_eq!(
        s.ok("squeue", &["-h", "-t", "S", "-o", "%i"]),
        format!("{low}\n")
    );
    assert!(!s.ok("squeue", &["-h", "-t", "R", "-o", "%i"]).contains(&id));
    g.wait_state(high, "RUNNING", T);
    ticks_stand_still(&s, "ticks");
    g.wait_state(high, "COMPLETED", T);
    // It goes on once the high job has ended, and ends within its limit.
    g.wait_state(low, "COMPLETED", T);
    assert_eq!(s.file("low.out"), "low done\n");
    assert_eq!(lines(&s, "ticks"), 30);
    let row = s.ok(
        "sacct",
        &["-n", "-X", "-P", "-j", &id, "-o", "State,Suspended,Elapsed"],
    );
    let f: Vec<&str> = row.trim().split('|').collect();
    assert_eq!(f[0], "COMPLETED", "{row}");
    assert!(
        f[1] >= "00:00:05",
        "suspended at least while high ran: {row}"
    );
    assert!(f[2] < "00:00:08", "its elapsed time leaves it out: {row}");
}

#[test]
fn an_administrator_suspends_and_resumes_a_job_across_a_restart() {
    let mut s = Slurm::start();
    let id = ticking_job(
        &s,
        "for i in $(seq 1 30); do echo tick >> ticks; sleep 0.1; done; echo done",
    );
    let sid = id.to_string();
    s.ok("scontrol", &["suspend", &sid]);
    assert!(suspended(&s, id));
    s.refused("scontrol", &["suspend", &sid], "already suspended");
    // Stopped on its node too (the controller's word is not enough).
    std::thread::sleep(Duration::from_millis(500));
    ticks_stand_still(&s, "ticks");
    assert!(s
        .ok("scontrol", &["show", "job", &sid])
        .contains("JobState=SUSPENDED"));
    assert_eq!(
        s.ok("sacct", &["-n", "-X", "-P", "-j", &sid, "-o", "State"]),
        "SUSPENDED\n"
    );
    // Not resumed by anything but an administrator, nor by a restart:
    // the controller keeps it in its database, gnoded in the job's spool.
    s.g.restart();
    std::thread::sleep(Duration::from_secs(2));
    assert!(suspended(&s, id), "{}\n{}", s.g.job(id), s.g.log());
    ticks_stand_still(&s, "ticks");
    s.ok("scontrol", &["resume", &sid]);
    s.refused("scontrol", &["resume", &sid], "not suspended");
    s.g.wait_state(id, "COMPLETED", T);
    assert_eq!(s.file("job.out"), "done\n");
    assert_eq!(lines(&s, "ticks"), 30);
    s.refused("scontrol", &["suspend", &sid], "not running");
}

#[test]
fn a_suspended_job_that_is_cancelled_sees_its_sigterm() {
    // Frozen processes take no signal: the job is thawed first, so its
    // trap runs before it ends.
    let s = Slurm::start();
    let id = ticking_job(
        &s,
        "trap 'echo got TERM; exit 3' TERM; while :; do echo tick >> ticks; sleep 0.1; done",
    );
    let sid = id.to_string();
    s.ok("scontrol", &["suspend", &sid]);
    std::thread::sleep(Duration::from_millis(500));
    ticks_stand_still(&s, "ticks");
    s.ok("scancel", &[&sid]);
    s.g.wait_state(id, "CANCELLED", T);
    // (The shell may also say its `sleep` was terminated.)
    assert!(
        s.file("job.out").contains("got TERM"),
        "{}",
        s.file("job.out")
    );
}
