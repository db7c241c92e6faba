use crate::cluster::testkit::{add_qos, cluster, ended, launch, launch_unconfirmed, spec};
use crate::cluster::{Cluster, ClusterError, Effect, JobState};
use crate::job::{JobId, JobSpec};
use crate::preempt::PreemptMode;
use crate::qos::{Qos, QosChange};

/// A job of QOS `qos` taking `cpus` of n1's 64 CPUs.
fn cpu_job(qos: &str, cpus: u32) -> JobSpec {
    let mut s = spec(qos, true);
    s.slurm.cpus_per_task = Some(cpus);
    s.slurm.qos = Some(qos.into());
    s
}

fn suspends(fx: &[Effect], id: JobId) -> Option<bool> {
    fx.iter().find_map(|e| match e {
        Effect::Suspend { job, suspend, .. } if *job == id => Some(*suspend),
        _ => None,
    })
}

/// QOS low and high (high may preempt low) under `mode`; a low job on 48
/// of n1's 64 CPUs; a high job asking 32 waits. Returns (low, high).
fn low_then_high(mode: PreemptMode) -> (Cluster, JobId, JobId) {
    let mut c = cluster();
    c.set_preempt_mode(mode);
    add_qos(&mut c, "low", &[]);
    add_qos(&mut c, "high", &["low"]);
    let (low, _) = c.submit(cpu_job("low", 48), 0).unwrap();
    assert_eq!(launch(&mut c, 1), [low]);
    let (high, _) = c.submit(cpu_job("high", 32), 2).unwrap();
    (c, low, high)
}

#[test]
fn an_administrator_suspends_and_resumes_a_job_and_its_cpus_follow() {
    let mut c = cluster();
    let (a, _) = c.submit(cpu_job("normal", 48), 0).unwrap();
    assert_eq!(launch(&mut c, 1), [a]);
    assert_eq!(c.node("n1").unwrap().free().cpus, 16);
    let fx = c.suspend(a, 10).unwrap();
    assert_eq!(suspends(&fx, a), Some(true));
    let j = c.job(a).unwrap();
    assert!(j.is_suspended());
    assert_eq!((j.state, j.state_name()), (JobState::Running, "SUSPENDED"));
    assert_eq!(c.node("n1").unwrap().free().cpus, 64);
    assert!(
        c.node("n1").unwrap().running.contains(&a),
        "still on its node"
    );
    assert_eq!(c.suspend(a, 11), Err(ClusterError::AlreadySuspended(a)));
    // Not resumed by a pass: an administrator suspended it.
    assert!(suspends(&c.schedule(20), a).is_none());
    let fx = c.resume(a, 40).unwrap();
    assert_eq!(suspends(&fx, a), Some(false));
    assert_eq!(c.node("n1").unwrap().free().cpus, 16);
    assert_eq!(c.resume(a, 41), Err(ClusterError::NotSuspended(a)));
    // Its elapsed time leaves out the 30 s it was stopped.
    assert_eq!(c.job(a).unwrap().elapsed(50), 49 - 30);
    c.job_ended("n1", &ended(a, 1, 0, 60)).unwrap();
    let j = c.job(a).unwrap();
    assert_eq!(
        (j.state, j.elapsed(999), j.suspended_secs(999)),
        (JobState::Completed, 29, 30)
    );
}

#[test]
fn only_a_running_confirmed_job_is_suspended() {
    let mut c = cluster();
    let (a, _) = c.submit(cpu_job("normal", 1), 0).unwrap();
    assert_eq!(c.suspend(a, 1), Err(ClusterError::NotRunning(a)));
    assert_eq!(c.resume(a, 1), Err(ClusterError::NotRunning(a)));
    assert_eq!(launch_unconfirmed(&mut c, 1), [a]);
    assert_eq!(c.suspend(a, 2), Err(ClusterError::Launching(a)));
    assert_eq!(c.suspend(99, 2), Err(ClusterError::UnknownJob(99)));
}

#[test]
fn a_job_whose_cpus_were_taken_meanwhile_is_not_resumed() {
    let mut c = cluster();
    let (a, _) = c.submit(cpu_job("normal", 48), 0).unwrap();
    assert_eq!(launch(&mut c, 1), [a]);
    c.suspend(a, 2).unwrap();
    let (b, _) = c.submit(cpu_job("normal", 32), 3).unwrap();
    assert_eq!(launch(&mut c, 4), [b]);
    assert_eq!(
        c.resume(a, 5),
        Err(ClusterError::NoRoomToResume(a, "n1".into()))
    );
    c.job_ended("n1", &ended(b, 1, 0, 6)).unwrap();
    assert!(c.resume(a, 7).is_ok());
}

#[test]
fn a_higher_qos_suspends_a_job_for_its_cpus_and_it_resumes_when_that_one_ends() {
    let (mut c, low, high) = low_then_high(PreemptMode::Suspend);
    let fx = c.schedule(3);
    assert_eq!(suspends(&fx, low), Some(true), "{fx:?}");
    assert!(c.job(low).unwrap().is_suspended());
    // Its CPUs are free: the high job starts in the next pass.
    assert_eq!(launch(&mut c, 4), [high]);
    // A low job queued meanwhile does not take the suspended job's CPUs
    // back from it: 64 - 32 = 32 free, and it asks 40.
    let (other, _) = c.submit(cpu_job("low", 40), 5).unwrap();
    assert!(launch(&mut c, 6).is_empty());
    assert!(c.job(low).unwrap().is_suspended(), "while high runs");
    let fx = c.job_ended("n1", &ended(high, 1, 0, 100)).unwrap();
    let mut fx2 = c.schedule(100);
    fx2.extend(fx);
    assert_eq!(suspends(&fx2, low), Some(false), "{fx2:?}");
    assert!(!c.job(low).unwrap().is_suspended());
    assert!(
        launch(&mut c, 101).is_empty(),
        "{other} waits for low's CPUs"
    );
    assert_eq!(c.job(low).unwrap().elapsed(110), 109 - 97);
}

#[test]
fn suspending_makes_no_room_for_a_job_that_needs_a_gpu_instance() {
    let mut c = cluster();
    c.set_preempt_mode(PreemptMode::Suspend);
    add_qos(&mut c, "low", &[]);
    add_qos(&mut c, "high", &["low"]);
    let gpu = |qos: &str| {
        let mut s = cpu_job(qos, 1);
        s.isolated = true;
        s.gpu.mig_profile = Some("1g.5gb".into());
        s
    };
    let (a, _) = c.submit(gpu("low"), 0).unwrap();
    let (b, _) = c.submit(gpu("low"), 0).unwrap();
    assert_eq!(launch(&mut c, 1), [a, b]);
    c.submit(gpu("high"), 2).unwrap();
    let fx = c.schedule(3);
    assert!(
        fx.iter().all(|e| !matches!(e, Effect::Suspend { .. })),
        "{fx:?}"
    );
    assert!(!c.job(a).unwrap().is_suspended() && !c.job(b).unwrap().is_suspended());
}

#[test]
fn a_qos_preempt_mode_overrides_gctlds() {
    let (mut c, low, _) = low_then_high(PreemptMode::Requeue);
    c.change_qos(&QosChange::Modify {
        qos: Qos {
            name: "low".into(),
            preempt_mode: Some(PreemptMode::Suspend),
            ..Default::default()
        },
    })
    .unwrap();
    let fx = c.schedule(3);
    assert_eq!(suspends(&fx, low), Some(true), "{fx:?}");
    assert_eq!(c.job(low).unwrap().state, JobState::Running);
    // And `off` on the QOS spares its jobs.
    let (mut c, low, _) = low_then_high(PreemptMode::Requeue);
    c.change_qos(&QosChange::Modify {
        qos: Qos {
            name: "low".into(),
            preempt_mode: Some(PreemptMode::Off),
            ..Default::default()
        },
    })
    .unwrap();
    c.schedule(3);
    let j = c.job(low).unwrap();
    assert!(j.state == JobState::Running && !j.is_suspended());
}

#[test]
fn a_preemptor_that_never_starts_lets_the_suspended_job_go_on_after_its_keep() {
    let (mut c, low, high) = low_then_high(PreemptMode::Suspend);
    c.schedule(3);
    assert!(c.job(low).unwrap().is_suspended());
    c.cancel(high, None, 4).unwrap();
    assert_eq!(suspends(&c.schedule(5), low), Some(false));
}

#[test]
fn a_node_that_says_otherwise_is_asked_again() {
    let mut c = cluster();
    let (a, _) = c.submit(cpu_job("normal", 1), 0).unwrap();
    let (b, _) = c.submit(cpu_job("normal", 1), 0).unwrap();
    assert_eq!(launch(&mut c, 1), [a, b]);
    c.suspend(a, 2).unwrap();
    assert!(c.reconcile_suspensions("n1", &[a, b], &[a]).is_empty());
    let fx = c.reconcile_suspensions("n1", &[a, b], &[b]);
    assert_eq!(
        fx,
        vec![
            Effect::Suspend {
                job: a,
                node: "n1".into(),
                run: 1,
                suspend: true
            },
            Effect::Suspend {
                job: b,
                node: "n1".into(),
                run: 1,
                suspend: false
            },
        ]
    );
}

#[test]
fn a_restarted_controller_keeps_a_suspended_jobs_cpus_free() {
    let mut c = cluster();
    let (a, _) = c.submit(cpu_job("normal", 48), 0).unwrap();
    assert_eq!(launch(&mut c, 1), [a]);
    c.suspend(a, 2).unwrap();
    let jobs: Vec<_> = c.jobs().cloned().collect();
    let nodes: Vec<_> = c.nodes().cloned().collect();
    let mut c = Cluster::restore(Box::new(crate::launch::CaseLaunch), jobs, nodes);
    assert_eq!(c.node("n1").unwrap().free().cpus, 64);
    assert!(c.resume(a, 3).is_ok());
    assert_eq!(c.node("n1").unwrap().free().cpus, 16);
}

#[test]
fn a_suspended_job_that_is_cancelled_or_lost_leaves_its_nodes_books_right() {
    let mut c = cluster();
    let (a, _) = c.submit(cpu_job("normal", 48), 0).unwrap();
    assert_eq!(launch(&mut c, 1), [a]);
    c.suspend(a, 2).unwrap();
    c.cancel(a, Some(0), 3).unwrap();
    let mut e = ended(a, 1, 0, 4);
    e.outcome.cause = crate::outcome::EndCause::Cancelled;
    c.job_ended("n1", &e).unwrap();
    let j = c.job(a).unwrap();
    assert_eq!(
        (j.state, j.state_name()),
        (JobState::Cancelled, "CANCELLED")
    );
    let n = c.node("n1").unwrap();
    assert!(n.suspended.is_empty() && n.running.is_empty());
    assert_eq!(n.free().cpus, 64);
}

#[test]
fn small_jobs_do_not_keep_a_suspended_job_from_going_on() {
    let (mut c, low, high) = low_then_high(PreemptMode::Suspend);
    c.schedule(3);
    assert_eq!(launch(&mut c, 4), [high]);
    // While high runs, a small job takes 24 of the 32 CPUs left.
    let (small1, _) = c.submit(cpu_job("low", 24), 5).unwrap();
    assert_eq!(launch(&mut c, 6), [small1]);
    // high ends: 40 free, low needs 48; it waits, and a second small job
    // does not take the CPUs it waits for.
    c.job_ended("n1", &ended(high, 1, 0, 10)).unwrap();
    let (small2, _) = c.submit(cpu_job("low", 24), 11).unwrap();
    let fx = c.schedule(12);
    assert!(suspends(&fx, low).is_none(), "{fx:?}");
    assert!(
        !fx.iter()
            .any(|e| matches!(e, Effect::Launch { job, .. } if *job == small2)),
        "{fx:?}"
    );
    // small1 ends: low goes on first.
    c.job_ended("n1", &ended(small1, 1, 0, 20)).unwrap();
    let fx = c.schedule(21);
    assert_eq!(suspends(&fx, low), Some(false), "{fx:?}");
    assert!(!c.job(low).unwrap().is_suspended());
}
