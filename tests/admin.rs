//! Node and job administration as Slurm sites do it (issue 18, item 6):
//! `scontrol update NodeName=... State=DRAIN|DOWN|RESUME Reason=...`,
//! `sinfo`'s states and `-R`, and `scontrol update JobId=...` on pending
//! jobs, kept across a controller restart.

mod common;

use std::time::Duration;

use common::slurm::Slurm;
use common::stderr;

const T: Duration = Duration::from_secs(30);

fn state(s: &Slurm) -> String {
    s.ok("sinfo", &["-h", "-o", "%t"]).trim().to_string()
}

#[test]
fn drained_nodes_finish_their_jobs_and_down_nodes_lose_them() {
    let mut s = Slurm::start();
    // A reason is required, as Slurm requires one.
    let o = s.run(
        "scontrol",
        &["update", "NodeName=node1", "State=DRAIN"],
        None,
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("specify a reason"), "{}", stderr(&o));
    let o = s.run(
        "scontrol",
        &["update", "NodeName=nosuch", "State=DRAIN", "Reason=x"],
        None,
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("Invalid node name"), "{}", stderr(&o));

    // Draining: the running job goes on, a new one waits.
    let long = s.sbatch(&["--wrap", "sleep 30"]);
    s.g.wait_state(long, "RUNNING", T);
    s.ok(
        "scontrol",
        &["update", "NodeName=node1", "State=DRAIN", "Reason=bad fan"],
    );
    assert_eq!(state(&s), "drng");
    let reasons = s.ok("sinfo", &["-R", "-h"]);
    assert!(
        reasons.starts_with("bad fan ") && reasons.trim_end().ends_with(" node1"),
        "{reasons}"
    );
    let next = s.sbatch(&["-o", "next.out", "--wrap", "echo ran"]);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(s.g.job(next)["job_state"], "PENDING");
    assert_eq!(s.g.job(long)["job_state"], "RUNNING");
    s.ok("scancel", &[&long.to_string()]);
    s.g.wait_until("the node is drained", T, || state(&s) == "drain");

    // A controller restart keeps the drain.
    s.g.restart();
    s.g.wait_until("the node is back, drained", T, || {
        s.run("sinfo", &["-h", "-o", "%t"], None).status.success() && state(&s) == "drain"
    });
    assert_eq!(s.g.job(next)["job_state"], "PENDING");
    s.ok("scontrol", &["update", "NodeName=node1", "State=RESUME"]);
    s.g.wait_state(next, "COMPLETED", T);
    assert_eq!(s.file("next.out"), "ran\n");
    assert_eq!(state(&s), "idle");

    // Down: its jobs are killed there and requeued (they allow it).
    let again = s.sbatch(&[
        "--requeue",
        "-o",
        "again.out",
        "--wrap",
        "echo start; sleep 3",
    ]);
    s.g.wait_state(again, "RUNNING", T);
    s.ok(
        "scontrol",
        &["update", "NodeName=node1", "State=DOWN", "Reason=reboot"],
    );
    s.g.wait_state(again, "PENDING", T);
    assert_eq!(state(&s), "down");
    s.ok("scontrol", &["update", "NodeName=node1", "State=RESUME"]);
    let j = s.g.wait_state(again, "COMPLETED", T);
    assert_eq!(j["restart_cnt"], 1, "{j}");

    // Only an administrator changes a node.
    let user = common::api("POST", &format!("{}/api/v1/tokens", s.g.url), &s.g.token)
        .send_json(serde_json::json!({"user": "nobody"}))
        .unwrap()
        .into_json::<serde_json::Value>()
        .unwrap()["token"]
        .as_str()
        .unwrap()
        .to_string();
    let r = common::api(
        "POST",
        &format!("{}/api/v1/nodes/node1/state", s.g.url),
        &user,
    )
    .send_json(serde_json::json!({"state": "drain", "reason": "mine"}));
    match r {
        Err(ureq::Error::Status(403, _)) => {}
        other => panic!("a user drained a node: {other:?}"),
    }
    assert_eq!(state(&s), "idle");
}

#[test]
fn pending_jobs_are_updated_and_running_ones_are_not() {
    let mut s = Slurm::start();
    let held = s.sbatch(&["-H", "-t", "10", "-J", "before", "--wrap", "true"]);
    s.ok(
        "scontrol",
        &[
            "update",
            &format!("JobId={held}"),
            "TimeLimit=5",
            "Name=after",
        ],
    );
    let q = |s: &Slurm| {
        s.ok("squeue", &["-j", &held.to_string(), "-h", "-o", "%j %l"])
            .trim()
            .to_string()
    };
    assert_eq!(q(&s), "after 5:00");
    // Kept across a restart.
    s.g.restart();
    s.g.wait_until("the controller answers", T, || {
        s.run("squeue", &["-h"], None).status.success()
    });
    assert_eq!(q(&s), "after 5:00");
    // Refused: an unknown partition, a dependency on no job, a priority
    // set by hand.
    for (args, needle) in [
        (vec!["Partition=nosuch"], "nosuch"),
        (vec!["Dependency=afterok:999999"], "999999"),
        (vec!["Priority=10"], "Nice="),
    ] {
        let mut all = vec!["update".to_string(), format!("JobId={held}")];
        all.extend(args.iter().map(|a| a.to_string()));
        let all: Vec<&str> = all.iter().map(String::as_str).collect();
        let o = s.run("scontrol", &all, None);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        assert!(stderr(&o).contains(needle), "{args:?}: {}", stderr(&o));
    }
    assert_eq!(q(&s), "after 5:00");
    // Running: no longer pending.
    s.ok("scontrol", &["release", &held.to_string()]);
    let long = s.sbatch(&["--wrap", "sleep 20"]);
    s.g.wait_state(long, "RUNNING", T);
    let o = s.run(
        "scontrol",
        &["update", &format!("JobId={long}"), "Name=late"],
        None,
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("no longer pending"), "{}", stderr(&o));
    s.ok("scancel", &[&long.to_string()]);
}
