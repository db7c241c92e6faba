use std::collections::BTreeMap;

use super::*;
use crate::cluster::testkit::{self, ended, registration as reg};

fn spec(requeue: bool) -> crate::job::JobSpec {
    testkit::spec("j", requeue)
}

/// A cluster with node n1 up and `job` running on it.
fn running_on_n1(requeue: bool) -> (Cluster, JobId) {
    let mut c = testkit::cluster();
    let (id, _) = c.submit(spec(requeue), 1).unwrap();
    assert_eq!(testkit::launch(&mut c, 2), vec![id]);
    assert_eq!(c.job(id).unwrap().state, JobState::Running);
    assert_eq!(c.job(id).unwrap().run, 1);
    (c, id)
}

fn stops(fx: &[Effect]) -> Vec<(JobId, Option<u32>)> {
    fx.iter()
        .filter_map(|e| match e {
            Effect::StopRun { job, run, .. } => Some((*job, *run)),
            _ => None,
        })
        .collect()
}

#[test]
fn a_job_that_finished_while_its_node_was_out_of_reach_is_recorded_as_it_ended() {
    let (mut c, id) = running_on_n1(false);
    c.node_down("n1", 30);
    assert_eq!(c.job(id).unwrap().state, JobState::NodeFail);
    // The node comes back: the run exited 0 at 22, during the outage.
    c.register_node(&reg("n1", &[], vec![ended(id, 1, 0, 22)]), 40);
    let j = c.job(id).unwrap();
    assert_eq!(j.state, JobState::Completed);
    assert_eq!((j.start_time, j.end_time), (Some(2), Some(22)));
    assert_eq!(j.exit_code, Some(0));
}

#[test]
fn a_requeued_job_whose_lost_run_completed_does_not_run_again() {
    let (mut c, id) = running_on_n1(true);
    c.node_down("n1", 30);
    assert_eq!(c.job(id).unwrap().state, JobState::Pending);
    assert_eq!(c.job(id).unwrap().restarts, 1);
    c.register_node(&reg("n1", &[], vec![ended(id, 1, 0, 22)]), 40);
    let j = c.job(id).unwrap();
    assert_eq!(j.state, JobState::Completed);
    assert_eq!(j.restarts, 0, "the requeue did not happen after all");
    assert!(!c
        .schedule(41)
        .iter()
        .any(|e| matches!(e, Effect::Launch { .. })));
}

#[test]
fn an_earlier_runs_end_changes_nothing() {
    let (mut c, id) = running_on_n1(true);
    // The launch timed out: requeued without failing the node.
    c.launch_unreachable(id, "n1", 3);
    assert!(
        c.node("n1").unwrap().up,
        "one failed launch is not a dead node"
    );
    assert!(
        !c.schedule(4)
            .iter()
            .any(|e| matches!(e, Effect::Launch { .. })),
        "nothing goes to the node before it is heard from"
    );
    assert!(c.node_heard("n1"));
    c.schedule(4);
    assert_eq!(c.job(id).unwrap().run, 2);
    let fx = c.job_ended("n1", &ended(id, 1, 0, 5)).unwrap();
    assert!(matches!(&fx[..], [Effect::Job { event, .. }] if event.contains("ignored")));
    assert_eq!(c.job(id).unwrap().state, JobState::Running);
    c.job_ended("n1", &ended(id, 2, 3, 6)).unwrap();
    assert_eq!(c.job(id).unwrap().state, JobState::Failed);
}

#[test]
fn a_run_the_controller_gave_up_on_is_stopped_and_the_job_waits_for_its_end() {
    let (mut c, id) = running_on_n1(true);
    c.node_down("n1", 30);
    // Back, with the lost run still alive: it is killed, and the job does
    // not start again before that run's end is reported.
    let fx = c.register_node(&reg("n1", &[(id, 1)], vec![]), 40);
    assert_eq!(stops(&fx), vec![(id, Some(1))]);
    assert!(!c
        .schedule(41)
        .iter()
        .any(|e| matches!(e, Effect::Launch { .. })));
    // The kill's end is the old run's: freed, and the job starts (run 2).
    c.job_ended("n1", &ended(id, 1, 137, 42)).unwrap();
    assert_eq!(c.job(id).unwrap().state, JobState::Pending);
    assert!(c
        .schedule(43)
        .iter()
        .any(|e| matches!(e, Effect::Launch { .. })));
    assert_eq!(c.job(id).unwrap().run, 2);
}

#[test]
fn a_node_fail_job_whose_run_is_stopped_stays_node_fail() {
    let (mut c, id) = running_on_n1(false);
    c.node_down("n1", 30);
    let fx = c.register_node(&reg("n1", &[(id, 1)], vec![]), 40);
    assert_eq!(stops(&fx), vec![(id, Some(1))]);
    // The end of the run the controller killed is not the job's end.
    let mut killed = ended(id, 1, 137, 41);
    killed.outcome.cause = crate::outcome::EndCause::Cancelled;
    let _ = c.job_ended("n1", &killed);
    assert_eq!(c.job(id).unwrap().state, JobState::NodeFail);
    // Nor is anything reported about it later.
    let _ = c.job_ended("n1", &ended(id, 1, 0, 42));
    assert_eq!(c.job(id).unwrap().state, JobState::NodeFail);
}

#[test]
fn a_run_that_ended_before_its_stop_arrived_is_recorded_as_it_ended() {
    let (mut c, id) = running_on_n1(false);
    c.node_down("n1", 30);
    // The node comes back still listing the run (its end not reported
    // yet): it is stopped, but the end it had already had is the job's.
    let fx = c.register_node(&reg("n1", &[(id, 1)], vec![]), 40);
    assert_eq!(stops(&fx), vec![(id, Some(1))]);
    c.job_ended("n1", &ended(id, 1, 0, 35)).unwrap();
    let job = c.job(id).unwrap();
    assert_eq!(job.state, JobState::Completed);
    assert_eq!(job.end_time, Some(35));
}

#[test]
fn heartbeats_stop_stale_runs_and_leave_current_ones() {
    let (mut c, id) = running_on_n1(true);
    c.register_node(&reg("n2", &[], vec![]), 0);
    let current: BTreeMap<JobId, u32> = [(id, 1)].into();
    assert!(c.reconcile_runs("n1", &[id], &current).is_empty());
    // A run the node has that the controller never gave it, and a job the
    // controller does not know at all.
    let stale: BTreeMap<JobId, u32> = [(id, 7), (99, 1)].into();
    let fx = c.reconcile_runs("n2", &[id, 99], &stale);
    assert_eq!(stops(&fx), vec![(id, Some(7)), (99, Some(1))]);
    assert_eq!(
        c.job(id).unwrap().state,
        JobState::Running,
        "the real run is untouched"
    );
    // A node that predates generations (no runs): its jobs are taken as
    // current.
    assert!(c.reconcile_runs("n1", &[id], &BTreeMap::new()).is_empty());
}

#[test]
fn a_cancelled_job_still_stopping_is_left_to_its_grace_period() {
    let (mut c, id) = running_on_n1(false);
    c.cancel(id, Some(1), 5).unwrap();
    let runs: BTreeMap<JobId, u32> = [(id, 1)].into();
    assert!(c.reconcile_runs("n1", &[id], &runs).is_empty());
}

#[test]
fn a_restarted_controller_still_records_how_a_lost_run_ended() {
    let (mut c, id) = running_on_n1(false);
    c.node_down("n1", 30);
    // gctld restarts while the node is away.
    let jobs: Vec<_> = c.jobs().cloned().collect();
    let nodes: Vec<_> = c.nodes().cloned().collect();
    let mut c = Cluster::restore(Box::new(crate::launch::CaseLaunch), jobs, nodes);
    c.register_node(&reg("n1", &[], vec![ended(id, 1, 0, 22)]), 40);
    let j = c.job(id).unwrap();
    assert_eq!((j.state, j.end_time), (JobState::Completed, Some(22)));
}

#[test]
fn a_requeued_runs_worker_and_instance_are_freed_when_it_ends_or_is_lost() {
    // (Found by cluster::proptests: the job no longer names its old node
    // once it is pending again, so its old node kept the worker and the
    // instance.)
    let isolated = crate::job::JobSpec {
        isolated: true,
        ..spec(true)
    };
    for lost in [false, true] {
        let mut c = testkit::cluster();
        let (id, _) = c.submit(isolated.clone(), 1).unwrap();
        testkit::launch(&mut c, 2);
        c.requeue(id, 3).unwrap();
        let held = |c: &Cluster| {
            let n = c.node("n1").unwrap();
            (
                n.running.contains(&id),
                n.instances.iter().any(|s| s.isolated_owner == Some(id)),
            )
        };
        assert_eq!(held(&c), (true, true), "held until the old run ends");
        if lost {
            c.node_down("n1", 4);
        } else {
            c.job_ended("n1", &ended(id, 1, 143, 4)).unwrap();
        }
        assert_eq!(held(&c), (false, false), "lost={lost}");
    }
}
