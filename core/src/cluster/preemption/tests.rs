use crate::cluster::testkit::{
    add_qos, cluster, ended, grant_every_qos, launch, registration, spec,
};
use crate::cluster::{Effect, JobState};
use crate::job::GpuRequest;
use crate::preempt::PreemptMode;
use crate::qos::{Qos, QosChange};

fn gpu_job(qos: &str) -> crate::job::JobSpec {
    let mut s = spec(qos, true);
    s.isolated = true;
    s.gpu = GpuRequest {
        mig_profile: Some("1g.5gb".into()),
        ..GpuRequest::default()
    };
    s.slurm.qos = Some(qos.into());
    s
}

#[test]
fn a_high_job_requeues_the_youngest_low_job_and_takes_its_instance() {
    let (mut c, a, b, h) = two_low_jobs_then_high(PreemptMode::Requeue, None);
    let fx = c.schedule(5);
    // The younger low job is requeued; the high one waits for it.
    assert!(
        fx.iter()
            .any(|e| matches!(e, Effect::Signal { job, cancel: true, .. } if *job == b)),
        "{fx:?}"
    );
    assert_eq!(c.job(b).unwrap().state, JobState::Pending);
    assert_eq!(c.job(a).unwrap().state, JobState::Running);
    assert_eq!(c.job(h).unwrap().state, JobState::Pending);
    // Nothing more is preempted while b's run has not ended.
    assert!(launch(&mut c, 6).is_empty());
    assert_eq!(c.job(a).unwrap().state, JobState::Running);
    // b's run ends: the instance goes to h, not back to b.
    let fx = c.job_ended("n1", &ended(b, 1, 0, 7)).unwrap();
    drop(fx);
    assert_eq!(launch(&mut c, 8), [h]);
    assert_eq!(c.job(b).unwrap().state, JobState::Pending);
    assert_eq!(c.job(b).unwrap().restarts, 1);
}

#[test]
fn a_job_on_several_nodes_is_preempted_whole_when_nothing_else_makes_room() {
    // Two nodes; a low job on both nodes' two instances each.
    let mut c = cluster();
    c.register_node(&crate::cluster::testkit::registration("n2", &[], vec![]), 0);
    c.set_preempt_mode(PreemptMode::Requeue);
    add_qos(&mut c, "low", &[]);
    add_qos(&mut c, "high", &["low"]);
    let mut wide = gpu_job("low");
    wide.gpu.count = Some(2);
    wide.slurm.other.insert("nodes".into(), "2".into());
    let (w, _) = c.submit(wide, 0).unwrap();
    // Launched on each of its nodes.
    assert_eq!(launch(&mut c, 1), [w, w]);
    let (h, _) = c.submit(gpu_job("high"), 2).unwrap();
    let fx = c.schedule(3);
    assert!(
        fx.iter()
            .any(|e| matches!(e, Effect::Signal { job, cancel: true, .. } if *job == w)),
        "{fx:?}"
    );
    assert_eq!(c.job(w).unwrap().state, JobState::Pending);
    // Its batch node reports the run's end: h starts on the kept node.
    let batch = c
        .job(w)
        .unwrap()
        .node
        .clone()
        .unwrap_or_else(|| "n1".into());
    c.job_ended(&batch, &ended(w, 1, 143, 4)).unwrap();
    // (The requeued job, first in the queue, waits for both nodes:
    // its hold does not keep h from the node kept for it.)
    assert_eq!(launch(&mut c, 5), [h]);
    assert_eq!(c.job(w).unwrap().restarts, 1);
}

#[test]
fn a_job_cancelled_for_another_ends_preempted() {
    let (mut c, a, b, h) = two_low_jobs_then_high(PreemptMode::Cancel, None);
    let fx = c.schedule(5);
    assert!(
        fx.iter()
            .any(|e| matches!(e, Effect::Signal { job, cancel: true, .. } if *job == b)),
        "{fx:?}"
    );
    // Its node kills it: PREEMPTED, not CANCELLED.
    let mut killed = ended(b, 1, 0, 6);
    killed.outcome.cause = crate::outcome::EndCause::Cancelled;
    killed.outcome.exit_code = None;
    killed.outcome.signal = Some(15);
    c.job_ended("n1", &killed).unwrap();
    assert_eq!(c.job(b).unwrap().state, JobState::Preempted);
    assert_eq!(launch(&mut c, 7), [h]);
    // A job a user cancels still ends CANCELLED.
    c.cancel(a, Some(1), 8).unwrap();
    let mut cancelled = ended(a, 1, 0, 9);
    cancelled.outcome.cause = crate::outcome::EndCause::Cancelled;
    c.job_ended("n1", &cancelled).unwrap();
    assert_eq!(c.job(a).unwrap().state, JobState::Cancelled);
}

#[test]
fn a_job_on_several_nodes_preempts_where_it_does_not_fit_and_keeps_them_all() {
    // Two nodes of two instances; n1's both run low jobs, n2 is free.
    let mut c = cluster();
    c.register_node(&crate::cluster::testkit::registration("n2", &[], vec![]), 0);
    c.set_preempt_mode(PreemptMode::Requeue);
    add_qos(&mut c, "low", &[]);
    add_qos(&mut c, "high", &["low"]);
    let mut lows = Vec::new();
    for k in 0..2 {
        let mut low = gpu_job("low");
        low.slurm.other.insert("nodelist".into(), "n1".into());
        let (id, _) = c.submit(low, k).unwrap();
        assert_eq!(launch(&mut c, k), [id]);
        lows.push(id);
    }
    // A high job on both nodes, both instances of each.
    let mut wide = gpu_job("high");
    wide.gpu.count = Some(2);
    wide.slurm.other.insert("nodes".into(), "2".into());
    let (h, _) = c.submit(wide, 5).unwrap();
    let fx = c.schedule(6);
    let mut hit: Vec<u64> = fx
        .iter()
        .filter_map(|e| match e {
            Effect::Signal {
                job, cancel: true, ..
            } => Some(*job),
            _ => None,
        })
        .collect();
    hit.sort();
    assert_eq!(hit, lows, "{fx:?}");
    // Both low runs end: the job starts on both nodes, kept for it.
    for (k, id) in lows.iter().enumerate() {
        c.job_ended("n1", &ended(*id, 1, 143, 7 + k as i64))
            .unwrap();
    }
    assert_eq!(launch(&mut c, 10), [h, h]);
    let mut nodes = c
        .job(h)
        .unwrap()
        .nodes()
        .iter()
        .map(|n| n.to_string())
        .collect::<Vec<_>>();
    nodes.sort();
    assert_eq!(nodes, ["n1", "n2"]);
}

#[test]
fn nothing_is_preempted_when_preemption_is_off_or_the_qos_may_not() {
    let mut c = cluster();
    c.change_qos(&QosChange::Add {
        qos: Qos {
            name: "low".into(),
            ..Default::default()
        },
    })
    .unwrap();
    grant_every_qos(&mut c);
    let (a, _) = c.submit(gpu_job("low"), 0).unwrap();
    let (b, _) = c.submit(gpu_job("low"), 0).unwrap();
    assert_eq!(launch(&mut c, 1), [a, b]);
    let (_, _) = c.submit(gpu_job("low"), 2).unwrap();
    c.set_preempt_mode(PreemptMode::Requeue);
    assert!(launch(&mut c, 3).is_empty());
    assert_eq!(c.job(a).unwrap().state, JobState::Running);
    assert_eq!(c.job(b).unwrap().state, JobState::Running);
}

/// n1's two instances to two low jobs (with `grace`), then a high job
/// that may preempt them; returns (older low, younger low, high).
fn two_low_jobs_then_high(
    mode: PreemptMode,
    grace: Option<u32>,
) -> (crate::cluster::Cluster, u64, u64, u64) {
    let mut c = cluster();
    c.set_preempt_mode(mode);
    c.change_qos(&QosChange::Add {
        qos: Qos {
            name: "low".into(),
            grace_time_secs: grace,
            ..Default::default()
        },
    })
    .unwrap();
    c.change_qos(&QosChange::Add {
        qos: Qos {
            name: "high".into(),
            preempt: vec!["low".into()],
            ..Default::default()
        },
    })
    .unwrap();
    grant_every_qos(&mut c);
    let (a, _) = c.submit(gpu_job("low"), 0).unwrap();
    assert_eq!(launch(&mut c, 1), [a]);
    let (b, _) = c.submit(gpu_job("low"), 2).unwrap();
    assert_eq!(launch(&mut c, 3), [b]);
    let (h, _) = c.submit(gpu_job("high"), 4).unwrap();
    (c, a, b, h)
}

#[test]
fn with_a_grace_time_the_preempted_job_gets_sigterm_first_and_is_requeued_after_it() {
    let (mut c, a, b, h) = two_low_jobs_then_high(PreemptMode::Requeue, Some(30));
    let fx = c.schedule(5);
    assert!(
        fx.iter().any(|e| matches!(e,
            Effect::Signal { job, signal: 15, cancel: false, .. } if *job == b)),
        "{fx:?}"
    );
    assert_eq!(
        c.job(b).unwrap().state,
        JobState::Running,
        "in its grace time"
    );
    // Nothing more while the grace runs: no other job is preempted.
    let fx = c.schedule(20);
    assert!(
        !fx.iter().any(|e| matches!(e, Effect::Signal { .. })),
        "{fx:?}"
    );
    assert_eq!(c.job(a).unwrap().state, JobState::Running);
    // Its grace is over: requeued, and its instance goes to h.
    let fx = c.schedule(35);
    assert!(
        fx.iter()
            .any(|e| matches!(e, Effect::Signal { job, cancel: true, .. } if *job == b)),
        "{fx:?}"
    );
    assert_eq!(c.job(b).unwrap().state, JobState::Pending);
    c.job_ended("n1", &ended(b, 1, 143, 36)).unwrap();
    assert_eq!(launch(&mut c, 37), [h]);
    assert_eq!(c.job(b).unwrap().restarts, 1);
}

#[test]
fn a_job_that_ends_in_its_grace_time_is_requeued_or_cancelled_not_completed() {
    let (mut c, _, b, h) = two_low_jobs_then_high(PreemptMode::Requeue, Some(30));
    c.schedule(5);
    // It saves its work and exits 0 at the SIGTERM.
    c.job_ended("n1", &ended(b, 1, 0, 10)).unwrap();
    assert_eq!(c.job(b).unwrap().state, JobState::Pending);
    assert_eq!(c.job(b).unwrap().restarts, 1);
    assert_eq!(launch(&mut c, 11), [h]);
    // Under --preempt-mode cancel it counts as cancelled.
    let (mut c, _, b, h) = two_low_jobs_then_high(PreemptMode::Cancel, Some(30));
    c.schedule(5);
    c.job_ended("n1", &ended(b, 1, 0, 10)).unwrap();
    assert_eq!(c.job(b).unwrap().state, JobState::Preempted);
    assert_eq!(c.job(b).unwrap().reason.as_deref(), Some("Preempted"));
    assert_eq!(launch(&mut c, 11), [h]);
}

#[test]
fn a_restarted_controller_keeps_a_grace_time_going_and_preempts_no_one_else() {
    let (mut c, a, b, h) = two_low_jobs_then_high(PreemptMode::Requeue, Some(30));
    c.schedule(5);
    assert_eq!(c.job(b).unwrap().grace.map(|g| g.until), Some(35));
    // gctld restarts in b's grace time; the node comes back with both jobs.
    let jobs: Vec<_> = c.jobs().cloned().collect();
    let nodes: Vec<_> = c.nodes().cloned().collect();
    let mut c = crate::cluster::Cluster::restore(Box::new(crate::launch::CaseLaunch), jobs, nodes);
    c.set_preempt_mode(PreemptMode::Requeue);
    c.register_node(&registration("n1", &[(a, 1), (b, 1)], vec![]), 10);
    let fx = c.schedule(11);
    assert!(
        !fx.iter().any(|e| matches!(e, Effect::Signal { .. })),
        "no second preemption or SIGTERM: {fx:?}"
    );
    // b ends by itself in its grace: requeued, as its preemption would
    // have done, not COMPLETED; its instance goes to h.
    c.job_ended("n1", &ended(b, 1, 0, 20)).unwrap();
    let j = c.job(b).unwrap();
    assert_eq!((j.state, j.restarts, j.grace), (JobState::Pending, 1, None));
    assert_eq!(launch(&mut c, 21), [h]);
    assert_eq!(c.job(a).unwrap().state, JobState::Running);
}
