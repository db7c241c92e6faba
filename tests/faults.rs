//! Faults a cluster sees (issue 15), injected into a real gctld and real
//! gnoded daemons, each on a host of its own (network namespaces, see
//! `net`). Jobs mark what really ran; every scenario then checks that no job
//! ran twice at once, none was lost, and none was recorded COMPLETED that
//! did not complete or NODE_FAIL that did (or never started).
//!
//! Needs root (CI runs as root). The scenarios run one at a time: they
//! depend on heartbeat and fence timing, which a loaded 2-core machine
//! would stretch.

mod common;
mod net;

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use net::{Cluster, Markers, Verdict};
use serde_json::Value;

fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// Waits for every job to end, then judges what ran against what was
/// recorded.
fn judged(c: &Cluster, within: Duration) -> (std::collections::BTreeMap<u64, Value>, Verdict) {
    let jobs = c.settle(within);
    let v = Verdict::judge(&jobs, &Markers::read(&c.markers()));
    v.assert_clean(c);
    (jobs, v)
}

fn states(jobs: &std::collections::BTreeMap<u64, Value>) -> Vec<(u64, String)> {
    jobs.iter()
        .map(|(id, j)| (*id, j["job_state"].as_str().unwrap_or("?").to_string()))
        .collect()
}

fn all_completed(c: &Cluster, jobs: &std::collections::BTreeMap<u64, Value>) {
    let bad: Vec<_> = states(jobs)
        .into_iter()
        .filter(|(_, s)| s != "COMPLETED")
        .collect();
    assert!(bad.is_empty(), "not COMPLETED: {bad:?}\n{}", c.logs());
}

/// kill -9 of a gnoded while launches are in flight, back within 5 s: its
/// running jobs are adopted, launches that hit the closed port are
/// requeued, nothing fails.
#[test]
fn a_gnoded_killed_with_launches_in_flight_and_back_within_5s_loses_nothing() {
    let _s = serial();
    let mut c = Cluster::up(2, 10);
    for i in 0..30 {
        c.submit(5 + i % 10, i % 2 == 0, None);
    }
    std::thread::sleep(Duration::from_millis(300));
    c.kill_node(1);
    for _ in 0..10 {
        c.submit(3, true, None);
    }
    std::thread::sleep(Duration::from_secs(3));
    c.start_node(1);
    let (jobs, v) = judged(&c, Duration::from_secs(120));
    assert_eq!(v.acknowledged, 40);
    all_completed(&c, &jobs);
    assert!(v.completed_again.is_empty(), "{v:?}");
}

/// A node cut off for 60 s: it fences itself (kills its jobs) before the
/// controller declares it down and requeues them, so no job runs on two
/// nodes at once; a job that finished during the partition is recorded as
/// it finished once the node is back.
#[test]
fn a_partitioned_node_fences_itself_before_its_jobs_run_elsewhere() {
    let _s = serial();
    // Node timeout 6 s: the nodes fence after 4 s.
    let mut c = Cluster::up_with(2, 1, 6);
    let short_requeue = c.submit(10, true, None);
    let short_once = c.submit(10, false, None);
    let long_requeue = c.submit(100, true, None);
    let long_once = c.submit(100, false, None);
    c.wait_started(4);
    c.start_node(2);
    c.wait_nodes_up(2);
    c.net.cut(1);
    std::thread::sleep(Duration::from_secs(60));
    c.net.heal(1);
    // Back: it registers, with how its runs ended.
    c.wait_nodes_up(2);
    let (jobs, v) = judged(&c, Duration::from_secs(120));
    let state = |id: u64| jobs[&id]["job_state"].as_str().unwrap().to_string();
    assert!(
        c.node_log(1).contains("within the fence timeout"),
        "node 1 fenced itself\n{}",
        c.logs()
    );
    // Killed by the fence on n1, requeued, and run to the end on n2.
    assert_eq!(state(long_requeue), "COMPLETED");
    let runs = Markers::read(&c.markers());
    let on: Vec<&str> = runs
        .of(long_requeue)
        .iter()
        .map(|r| r.node.as_str())
        .collect();
    assert_eq!(on, ["n1", "n2"], "{v:?}");
    // Not requeueable: a node failure, and it never finished.
    assert_eq!(state(long_once), "NODE_FAIL");
    // Finished during the partition, before the fence: recorded as it
    // ended once the node reported it.
    assert_eq!(state(short_once), "COMPLETED");
    assert_eq!(runs.of(short_once).len(), 1, "it ran once");
    // Requeueable: it may have run again on n2 before n1 could say it had
    // finished; it never ran on both at once (checked above).
    assert_eq!(state(short_requeue), "COMPLETED");
}

/// kill -9 of gctld right after it accepted a 200-task array: tasks it had
/// persisted as launching but never sent go back to PENDING (not
/// NODE_FAIL), and every task runs once.
#[test]
fn a_controller_killed_after_accepting_an_array_fails_no_task() {
    let _s = serial();
    let mut c = Cluster::up(2, 10);
    c.submit(1, false, Some(200));
    c.kill_ctld();
    std::thread::sleep(Duration::from_secs(1));
    c.start_ctld();
    let (jobs, v) = judged(&c, Duration::from_secs(240));
    assert_eq!(v.acknowledged, 200);
    all_completed(&c, &jobs);
    assert!(v.completed_again.is_empty(), "{v:?}");
}

/// A second gnoded that claims a live node's name is refused, says so, and
/// changes nothing for the node or its jobs.
#[test]
fn a_duplicate_node_name_is_refused_and_changes_nothing() {
    let _s = serial();
    let mut c = Cluster::up_with(2, 1, 10);
    let id = c.submit(25, false, None);
    c.wait_started(1);
    let listen = format!("{}:6818", c.net.addr(2));
    c.start_node_as(2, "n1", &listen);
    c.wait(
        "the impostor says it was refused",
        Duration::from_secs(20),
        || c.node_log(2).contains("held by another gnoded"),
    );
    let nodes = c.get("/api/v1/nodes");
    assert_eq!(
        nodes["nodes"][0]["url"],
        format!("http://{}:6818", c.net.addr(1))
    );
    let (jobs, _) = judged(&c, Duration::from_secs(60));
    assert_eq!(jobs[&id]["job_state"], "COMPLETED");
    assert_eq!(jobs[&id]["nodes"], "n1");
}

/// A node told to listen on 0.0.0.0 advertises its address toward the
/// controller, and jobs run there.
#[test]
fn a_node_listening_on_all_addresses_is_reached() {
    let _s = serial();
    let mut c = Cluster::up_with(1, 0, 10);
    c.start_node_as(1, "n1", "0.0.0.0:6818");
    c.wait_nodes_up(1);
    let nodes = c.get("/api/v1/nodes");
    assert_eq!(
        nodes["nodes"][0]["url"],
        format!("http://{}:6818", c.net.addr(1))
    );
    c.submit(1, false, None);
    let (jobs, _) = judged(&c, Duration::from_secs(60));
    all_completed(&c, &jobs);
}

/// Every gnoded restarted in turn (kill -9, back after a second) while jobs
/// keep coming: nothing fails, nothing runs twice.
#[test]
fn a_rolling_restart_of_every_gnoded_under_submissions_loses_nothing() {
    let _s = serial();
    let mut c = Cluster::up(3, 10);
    for i in 1..=3 {
        for k in 0..8 {
            c.submit(2 + k, k % 2 == 0, None);
        }
        c.kill_node(i);
        for k in 0..8 {
            c.submit(2 + k, k % 2 == 1, None);
            std::thread::sleep(Duration::from_millis(100));
        }
        c.start_node(i);
        c.wait_nodes_up(3);
    }
    let (jobs, v) = judged(&c, Duration::from_secs(180));
    assert_eq!(v.acknowledged, 48);
    all_completed(&c, &jobs);
    assert!(v.completed_again.is_empty(), "{v:?}");
}
