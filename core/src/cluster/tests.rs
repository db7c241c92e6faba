use super::*;
use crate::job::GpuRequest;
use crate::job::JobSpec;
use crate::launch::CaseLaunch;
use crate::outcome::{EndCause, GpuFault, ProcessOutcome};
use crate::wire::{JobEnded, NodeRegistration};

fn spec(isolated: bool, requeue: bool) -> JobSpec {
    JobSpec {
        name: "j".into(),
        script: "#!/bin/sh\ntrue\n".into(),
        working_dir: "/tmp".into(),
        user_name: "u".into(),
        uid: 1,
        gid: 1,
        submit_host: "h".into(),
        isolated,
        gpu: if isolated {
            GpuRequest {
                model: None,
                mig_profile: Some("1g.5gb".into()),
                mem_mib: None,
                share: None,
                share_limit: None,
                count: None,
            }
        } else {
            GpuRequest::default()
        },
        requeue: Some(requeue),
        ..JobSpec::default()
    }
}

fn reg(running: Vec<JobId>, ended: Vec<JobEnded>) -> NodeRegistration {
    NodeRegistration {
        worker_limit: Some(3),
        running,
        ..testkit::registration("n1", &[], ended)
    }
}

fn ended(id: JobId, code: i32, cause: EndCause) -> JobEnded {
    JobEnded {
        job_id: id,
        run: 0,
        outcome: ProcessOutcome {
            exit_code: Some(code),
            signal: None,
            cause,
        },
        end_time: 50,
        usage: None,
        steps: Default::default(),
    }
}

#[test]
fn requeue_is_pending_at_once_but_starts_after_the_old_run_ends() {
    let mut c = Cluster::new(Box::new(CaseLaunch));
    c.register_node(&reg(vec![], vec![]), 0);
    let (a, _) = c.submit(spec(true, false), 1).unwrap();
    c.schedule(2);
    let inst = c.job(a).unwrap().gpu_instances.first().cloned();
    assert!(inst.is_some());
    let fx = c.requeue(a, 3).unwrap();
    assert!(fx
        .iter()
        .any(|e| matches!(e, Effect::Signal { cancel: true, .. })));
    assert_eq!(c.job(a).unwrap().state, JobState::Pending);
    assert_eq!(c.job(a).unwrap().restarts, 1);
    // The old run still holds its worker and instance: no relaunch yet.
    assert!(c.node("n1").unwrap().running.contains(&a));
    assert!(!c
        .schedule(4)
        .iter()
        .any(|e| matches!(e, Effect::Launch { .. })));
    assert_eq!(c.job(a).unwrap().reason.as_deref(), Some("BeginTime"));
    assert!(c.requeue(a, 4).is_err(), "only running jobs are requeued");
    c.job_ended("n1", &ended(a, 143, EndCause::Exited)).unwrap();
    assert_eq!(c.job(a).unwrap().state, JobState::Pending);
    assert!(c.schedule(5).contains(&Effect::Launch {
        job: a,
        node: "n1".into(),
        early: false
    }));
    assert_eq!(c.job(a).unwrap().state, JobState::Running);
}

#[test]
fn a_requeued_run_found_after_a_restart_blocks_the_relaunch() {
    let mut c = Cluster::new(Box::new(CaseLaunch));
    c.register_node(&reg(vec![], vec![]), 0);
    let (a, _) = c.submit(spec(false, false), 1).unwrap();
    c.schedule(2);
    c.requeue(a, 3).unwrap();
    // The controller restarts: the requeue bookkeeping is gone, the
    // job is pending, and the node still runs the old process.
    let jobs: Vec<Job> = c.jobs().cloned().collect();
    let nodes: Vec<Node> = c.nodes().cloned().collect();
    let mut c = Cluster::restore(Box::new(CaseLaunch), jobs, nodes);
    let fx = c.register_node(&reg(vec![a], vec![]), 4);
    assert!(fx.contains(&Effect::StopRun {
        job: a,
        node: "n1".into(),
        run: None,
    }));
    assert!(!c
        .schedule(5)
        .iter()
        .any(|e| matches!(e, Effect::Launch { .. })));
    c.job_ended("n1", &ended(a, 137, EndCause::Exited)).unwrap();
    assert!(c.schedule(6).contains(&Effect::Launch {
        job: a,
        node: "n1".into(),
        early: false
    }));
}

#[test]
fn a_retried_submission_is_the_same_job_across_a_restart() {
    let mut c = Cluster::new(Box::new(CaseLaunch));
    let keyed = |uid: u32, key: &str| JobSpec {
        uid,
        idempotency_key: Some(key.into()),
        ..spec(false, false)
    };
    let (a, fx) = c.submit(keyed(1, "k1"), 1).unwrap();
    assert_eq!(fx.len(), 1);
    // The retry: same user, same key, no new job and nothing to store.
    assert_eq!(c.submit(keyed(1, "k1"), 2).unwrap(), (a, vec![]));
    // Another user's key, or another key, is another job.
    assert_ne!(c.submit(keyed(2, "k1"), 3).unwrap().0, a);
    assert_ne!(c.submit(keyed(1, "k2"), 3).unwrap().0, a);
    let jobs: Vec<Job> = c.jobs().cloned().collect();
    let mut c = Cluster::restore(Box::new(CaseLaunch), jobs, vec![]);
    assert_eq!(c.submit(keyed(1, "k1"), 4).unwrap(), (a, vec![]));
    // A submission withdrawn because it could not be stored frees its key.
    let (b, _) = c.submit(keyed(1, "k3"), 5).unwrap();
    c.withdraw(b);
    let (b2, fx) = c.submit(keyed(1, "k3"), 6).unwrap();
    assert_eq!((b2 > b, fx.len()), (true, 1));
    assert!(c.submit(keyed(1, ""), 7).is_err());
}

#[test]
fn submit_schedule_end() {
    let mut c = Cluster::new(Box::new(CaseLaunch));
    c.register_node(&reg(vec![], vec![]), 0);
    let (a, _) = c.submit(spec(true, false), 1).unwrap();
    let (b, _) = c.submit(spec(false, false), 1).unwrap();
    let fx = c.schedule(2);
    assert!(fx.contains(&Effect::Launch {
        job: a,
        node: "n1".into(),
        early: false
    }));
    assert!(fx.contains(&Effect::Launch {
        job: b,
        node: "n1".into(),
        early: false
    }));
    assert_eq!(c.job(a).unwrap().gpu_instances.len(), 1);
    assert!(c.job(b).unwrap().gpu_instances.is_empty());
    c.job_ended("n1", &ended(a, 0, EndCause::Exited)).unwrap();
    c.job_ended("n1", &ended(b, 2, EndCause::Exited)).unwrap();
    assert_eq!(c.job(a).unwrap().state, JobState::Completed);
    assert_eq!(c.job(b).unwrap().state, JobState::Failed);
    assert_eq!(c.job(b).unwrap().exit_code, Some(2));
    assert!(c.node("n1").unwrap().running.is_empty());
    assert!(c
        .node("n1")
        .unwrap()
        .instances
        .iter()
        .all(|s| s.isolated_owner.is_none()));
    // A second report of the same end is refused and changes nothing.
    assert!(matches!(
        c.job_ended("n1", &ended(a, 1, EndCause::Exited)),
        Err(ClusterError::NotRunning(_))
    ));
    assert_eq!(c.job(a).unwrap().state, JobState::Completed);
}

#[test]
fn peaks_are_kept_and_learned_by_later_runs() {
    let mut c = Cluster::new(Box::new(CaseLaunch));
    c.register_node(&reg(vec![], vec![]), 0);
    let (a, _) = c.submit(spec(false, false), 1).unwrap();
    c.schedule(2);
    assert_eq!(c.record_peak(a, 3 << 30).len(), 1);
    assert!(
        c.record_peak(a, 1 << 30).is_empty(),
        "a lower peak changes nothing"
    );
    assert_eq!(c.job(a).unwrap().gpu_mem_peak, Some(3072));
    let (b, _) = c.submit(spec(false, false), 3).unwrap();
    assert_eq!(
        c.learned_footprint(b),
        None,
        "the earlier run has not finished"
    );
    c.job_ended("n1", &ended(a, 0, EndCause::Exited)).unwrap();
    assert_eq!(c.learned_footprint(b), Some(3072));
    // A restarted controller learns the same from the stored jobs.
    let r = Cluster::restore(Box::new(CaseLaunch), c.jobs().cloned().collect(), vec![]);
    assert_eq!(r.learned_footprint(b), Some(3072));
    // Same script under another name: still the same job.
    let mut renamed = spec(false, false);
    renamed.name = "other".into();
    let (d, _) = c.submit(renamed.clone(), 4).unwrap();
    assert_eq!(c.learned_footprint(d), Some(3072));
    // Another user's job learns nothing from it.
    renamed.user_name = "v".into();
    let (e, _) = c.submit(renamed, 5).unwrap();
    assert_eq!(c.learned_footprint(e), None);
}

#[test]
fn a_learned_footprint_grows_at_once_and_shrinks_after_a_window_of_lighter_runs() {
    let mut c = Cluster::new(Box::new(CaseLaunch));
    c.register_node(&reg(vec![], vec![]), 0);
    let run = |c: &mut Cluster, at: i64, gib: u64| {
        let (id, _) = c.submit(spec(false, false), at).unwrap();
        c.schedule(at);
        c.record_peak(id, gib << 30);
        c.job_ended("n1", &ended(id, 0, EndCause::Exited)).unwrap();
        id
    };
    let next = |c: &mut Cluster, at: i64| {
        let (id, _) = c.submit(spec(false, false), at).unwrap();
        let mib = c.learned_footprint(id);
        c.cancel(id, None, at).unwrap();
        mib.map(|m| m >> 10)
    };
    run(&mut c, 1, 2);
    assert_eq!(next(&mut c, 2), Some(2));
    run(&mut c, 3, 8);
    assert_eq!(next(&mut c, 4), Some(8), "a heavier run counts at once");
    // Lighter runs: the heavy one still counts while it is among the
    // latest PEAK_WINDOW (3).
    run(&mut c, 5, 3);
    assert_eq!(next(&mut c, 6), Some(8));
    run(&mut c, 7, 3);
    assert_eq!(next(&mut c, 8), Some(8));
    run(&mut c, 9, 4);
    assert_eq!(next(&mut c, 10), Some(4), "three lighter runs in a row");
    // A restarted controller learns the same.
    let (id, _) = c.submit(spec(false, false), 11).unwrap();
    let r = Cluster::restore(Box::new(CaseLaunch), c.jobs().cloned().collect(), vec![]);
    assert_eq!(r.learned_footprint(id), Some(4 << 10));
}

#[test]
fn gpu_shares_are_learned_from_the_latest_run_that_measured_one() {
    let mut c = Cluster::new(Box::new(CaseLaunch));
    c.register_node(&reg(vec![], vec![]), 0);
    let run = |c: &mut Cluster, at: i64, gpu_time_usec: Option<u64>| {
        let (id, _) = c.submit(spec(false, false), at).unwrap();
        c.schedule(at);
        c.record_peak(id, 1 << 30);
        let mut e = ended(id, 0, EndCause::Exited);
        e.end_time = at + 10;
        e.usage = Some(crate::job::ResourceUsage {
            gpu_time_usec,
            ..Default::default()
        });
        c.job_ended("n1", &e).unwrap();
        id
    };
    let a = run(&mut c, 0, Some(4_000_000));
    assert_eq!(c.job(a).unwrap().gpu_share(), Some(400), "4 s busy in 10 s");
    // A later run that measured nothing (a MIG instance) keeps the share.
    run(&mut c, 20, None);
    let (b, _) = c.submit(spec(false, false), 40).unwrap();
    assert_eq!(c.learned(b).share, Some(400));
    assert_eq!(c.learned(b).mib, Some(1024));
    // A later measured run replaces it.
    run(&mut c, 50, Some(9_000_000));
    let (d, _) = c.submit(spec(false, false), 70).unwrap();
    assert_eq!(c.learned(d).share, Some(900));
    // A restarted controller learns the same.
    let r = Cluster::restore(Box::new(CaseLaunch), c.jobs().cloned().collect(), vec![]);
    assert_eq!(r.learned(d).share, Some(900));
}

#[test]
fn a_gpu_fault_fails_the_named_job_and_requeues_requeueable_neighbours() {
    let mut c = Cluster::new(Box::new(CaseLaunch));
    c.register_node(&reg(vec![], vec![]), 0);
    let (named, _) = c.submit(spec(false, true), 1).unwrap();
    let (plain, _) = c.submit(spec(false, false), 1).unwrap();
    let (requeueable, _) = c.submit(spec(false, true), 1).unwrap();
    c.schedule(2);
    let hit = [named, plain, requeueable];
    for id in hit {
        let mut e = ended(
            id,
            0,
            EndCause::GpuFault(GpuFault::of(
                id,
                "GPU-a",
                &hit,
                Some((474, Some(named))),
                &[],
            )),
        );
        e.end_time = 9;
        c.job_ended("n1", &e).unwrap();
    }
    let j = c.job(named).unwrap();
    assert_eq!(j.state, JobState::Failed, "named, requeueable or not");
    assert!(
        j.reason.as_deref().unwrap().contains("GPU fault"),
        "{:?}",
        j.reason
    );
    assert_eq!(
        c.job(plain).unwrap().state,
        JobState::Failed,
        "exit 0 or not"
    );
    let r = c.job(requeueable).unwrap();
    assert_eq!(r.state, JobState::Pending);
    assert_eq!(r.reason.as_deref(), Some("GpuFaultRequeued"));
    let j = c.job(plain).unwrap();
    assert_eq!((j.exit_code, j.exit_signal), (Some(1), None), "never 0:0");
}

#[test]
fn a_bystander_is_requeued_after_gpu_faults_only_so_many_times() {
    let mut c = Cluster::new(Box::new(CaseLaunch));
    c.set_max_gpu_fault_requeues(2);
    c.register_node(&reg(vec![], vec![]), 0);
    let (id, _) = c.submit(spec(false, true), 1).unwrap();
    for round in 0..3u32 {
        let now = 10 * i64::from(round + 1);
        c.schedule(now);
        let run = c.job(id).unwrap().run;
        assert_eq!(c.job(id).unwrap().state, JobState::Running, "round {round}");
        let fault = GpuFault::of(id, "GPU-a", &[id, 99], Some((474, Some(99))), &[]);
        let mut e = ended(id, 0, EndCause::GpuFault(fault));
        e.run = run;
        e.end_time = now + 5;
        c.job_ended("n1", &e).unwrap();
        let j = c.job(id).unwrap();
        if round < 2 {
            assert_eq!(
                (j.state, j.gpu_fault_requeues),
                (JobState::Pending, round + 1)
            );
        } else {
            assert_eq!(j.state, JobState::Failed, "the third fault fails it");
            assert!(j
                .reason
                .as_deref()
                .unwrap()
                .contains("requeued after GPU faults 2 times already"));
            assert_eq!((j.exit_code, j.exit_signal), (Some(1), None));
        }
    }
}

#[test]
fn bad_spec_is_refused_and_nothing_queued() {
    let mut c = Cluster::new(Box::new(CaseLaunch));
    let mut s = spec(false, false);
    s.script = "no shebang".into();
    assert!(matches!(
        c.submit(s, 0),
        Err(ClusterError::Spec(SpecError::NoShebang))
    ));
    assert_eq!(c.pending_count(), 0);
    assert_eq!(c.jobs().count(), 0);
}

#[test]
fn workers_limit_and_reasons() {
    let mut c = Cluster::new(Box::new(CaseLaunch));
    c.register_node(&reg(vec![], vec![]), 0);
    for _ in 0..5 {
        c.submit(spec(false, false), 0).unwrap();
    }
    c.schedule(1);
    assert_eq!(c.node("n1").unwrap().running.len(), 3);
    assert_eq!(c.job(4).unwrap().reason.as_deref(), Some("Resources"));
    // With every worker busy, a new job still gets its reason.
    let (late, _) = c.submit(spec(false, false), 2).unwrap();
    assert_eq!(c.job(late).unwrap().reason, None);
    assert!(c.schedule(3).is_empty());
    assert_eq!(c.job(late).unwrap().reason.as_deref(), Some("Resources"));
    c.node_down("n1", 4);
    let (down, _) = c.submit(spec(false, false), 5).unwrap();
    c.schedule(6);
    assert_eq!(c.job(down).unwrap().reason.as_deref(), Some("NodeDown"));
}

#[test]
fn begun_tasks_mark_an_idle_instance_busy_until_the_heartbeat() {
    let mut c = Cluster::new(Box::new(CaseLaunch));
    c.register_node(&reg(vec![], vec![]), 0);
    let uuid = c.node("n1").unwrap().instances[0].instance.uuid.clone();
    let rec = |job, end_ms| crate::probe::TaskRecord {
        job,
        task: 1,
        pid: 5,
        instance: uuid.clone(),
        bytes: 1 << 30,
        warps: 0,
        share: 0,
        begin_ms: 0,
        end_ms,
    };
    c.note_tasks_begun("n1", &[rec(3, Some(9))]);
    assert_eq!(
        c.node("n1").unwrap().instances[0].active_tasks,
        0,
        "ended: no change"
    );
    c.note_tasks_begun("n1", &[rec(3, None), rec(3, None)]);
    let s = &c.node("n1").unwrap().instances[0];
    assert_eq!((s.active_tasks, s.reserved_bytes), (1, 1 << 30));
    c.update_instance_use("n1", &std::collections::BTreeMap::new());
    assert_eq!(
        c.node("n1").unwrap().instances[0].active_tasks,
        0,
        "the heartbeat wins"
    );
}

#[test]
fn an_isolated_owner_holds_the_instance_once_shared_tasks_left() {
    let mut c = Cluster::new(Box::new(CaseLaunch));
    c.register_node(&reg(vec![], vec![]), 0);
    let n = c.nodes.get_mut("n1").unwrap();
    assert_eq!(n.state_name(), "IDLE");
    let s = &mut n.instances[0];
    let whole = s.instance.memory_mib * 1024 * 1024;
    s.isolated_owner = Some(4);
    s.job_bytes.insert(9, 1 << 30);
    s.reserved_bytes = 1 << 30;
    assert_eq!((s.holder(), s.held_bytes()), (None, 1 << 30), "owner waits");
    s.job_bytes.clear();
    s.reserved_bytes = 0;
    assert_eq!((s.holder(), s.held_bytes()), (Some(4), whole));
    n.add_running(4, &resources_of(&Job::new(4, JobSpec::default(), 0)), true);
    assert_eq!(n.state_name(), "MIXED");
    n.up = false;
    assert_eq!(n.state_name(), "DOWN");
}

#[test]
fn cancel_pending_and_running() {
    let mut c = Cluster::new(Box::new(CaseLaunch));
    let (a, _) = c.submit(spec(false, false), 0).unwrap();
    c.cancel(a, None, 1).unwrap();
    assert_eq!(c.job(a).unwrap().state, JobState::Cancelled);
    assert_eq!(c.pending_count(), 0);
    assert_eq!(c.cancel(a, None, 2).unwrap(), vec![]);
    c.register_node(&reg(vec![], vec![]), 0);
    let (b, _) = c.submit(spec(false, false), 0).unwrap();
    c.schedule(1);
    let fx = c.cancel(b, Some(7), 2).unwrap();
    assert_eq!(c.job(b).unwrap().cancelled_by, Some(7), "who asked is kept");
    assert!(fx.contains(&Effect::Signal {
        job: b,
        node: "n1".into(),
        signal: SIGTERM,
        cancel: true,
        scope: crate::outcome::SignalScope::Full,
    }));
    // CANCELLED to users at once, completing until the node reports.
    let jb = c.job(b).unwrap();
    assert_eq!(
        (jb.state, jb.shown_state()),
        (JobState::Running, JobState::Cancelled)
    );
    let info = crate::views::JobInfo::new(jb, "gpu", 3);
    assert_eq!(
        (info.job_state, info.state_compact()),
        (JobState::Cancelled, "CG")
    );
    assert!(
        c.requeue(b, 3).is_err(),
        "a job being cancelled is not requeued"
    );
    // Its processes ended on their own meanwhile: it stays CANCELLED.
    c.job_ended("n1", &ended(b, 0, EndCause::Exited)).unwrap();
    let jb = c.job(b).unwrap();
    assert_eq!((jb.state, jb.exit_code), (JobState::Cancelled, Some(0)));
    assert!(!crate::views::JobInfo::new(jb, "gpu", 4).completing);
    assert!(matches!(
        c.cancel(99, None, 0),
        Err(ClusterError::UnknownJob(99))
    ));
}

#[test]
fn a_job_being_cancelled_ends_cancelled_when_its_node_is_lost() {
    let mut c = Cluster::new(Box::new(CaseLaunch));
    c.register_node(&reg(vec![], vec![]), 0);
    // Requeueable: lost otherwise, it would go back to the queue.
    let (a, _) = c.submit(spec(true, true), 0).unwrap();
    testkit::launch(&mut c, 1);
    c.cancel(a, Some(5), 2).unwrap();
    c.node_down("n1", 5);
    let ja = c.job(a).unwrap();
    assert_eq!((ja.state, ja.restarts), (JobState::Cancelled, 0));
    assert_eq!(c.pending_count(), 0);
    // Set down by an administrator: the same, requeueable or not.
    for requeue in [true, false] {
        c.register_node(&reg(vec![], vec![]), 10);
        let (b, _) = c.submit(spec(true, requeue), 10).unwrap();
        testkit::launch(&mut c, 11);
        c.cancel(b, Some(5), 12).unwrap();
        let down = crate::cluster::NodeStateChange::Down {
            reason: "maintenance".into(),
        };
        c.set_node_state("n1", &down, "root", 13).unwrap();
        let jb = c.job(b).unwrap();
        assert_eq!(
            (jb.state, jb.restarts),
            (JobState::Cancelled, 0),
            "requeue {requeue}"
        );
        c.set_node_state("n1", &crate::cluster::NodeStateChange::Resume, "root", 14)
            .unwrap();
    }
}

#[test]
fn node_loss_fails_or_requeues() {
    let mut c = Cluster::new(Box::new(CaseLaunch));
    c.register_node(&reg(vec![], vec![]), 0);
    let (a, _) = c.submit(spec(false, false), 0).unwrap();
    let (b, _) = c.submit(spec(true, true), 0).unwrap();
    testkit::launch(&mut c, 1);
    c.node_down("n1", 5);
    assert_eq!(c.job(a).unwrap().state, JobState::NodeFail);
    let jb = c.job(b).unwrap();
    assert_eq!(
        (jb.state, jb.restarts, jb.node.clone()),
        (JobState::Pending, 1, None)
    );
    // Down node: nothing launches.
    assert!(c.schedule(6).is_empty());
    c.register_node(&reg(vec![], vec![]), 7);
    assert!(c.schedule(8).contains(&Effect::Launch {
        job: b,
        node: "n1".into(),
        early: false
    }));
}

#[test]
fn restore_and_reregister_reconciles() {
    let reg4 = |running, ended| NodeRegistration {
        worker_limit: Some(4),
        ..reg(running, ended)
    };
    let mut c = Cluster::new(Box::new(CaseLaunch));
    c.register_node(&reg4(vec![], vec![]), 0);
    for _ in 0..3 {
        c.submit(spec(false, false), 0).unwrap();
    }
    let (iso, _) = c.submit(spec(true, true), 0).unwrap();
    testkit::launch(&mut c, 1);
    // Controller restarts: rebuild from the "store".
    let jobs: Vec<Job> = c.jobs().cloned().collect();
    let nodes: Vec<Node> = c.nodes().cloned().collect();
    let mut c = Cluster::restore(Box::new(CaseLaunch), jobs, nodes);
    assert!(
        c.schedule(2).is_empty(),
        "nothing launches before the node is back"
    );
    // Job 1 finished meanwhile, 2 still runs, 3 and the isolated job are gone;
    // job 77 is unknown and must be killed.
    let fx = c.register_node(&reg4(vec![2, 77], vec![ended(1, 0, EndCause::Exited)]), 3);
    assert_eq!(c.job(1).unwrap().state, JobState::Completed);
    assert_eq!(c.job(2).unwrap().state, JobState::Running);
    assert_eq!(c.job(3).unwrap().state, JobState::NodeFail);
    assert_eq!(c.job(iso).unwrap().state, JobState::Pending);
    assert!(fx.contains(&Effect::StopRun {
        job: 77,
        node: "n1".into(),
        run: None,
    }));
    assert_eq!(
        c.node("n1")
            .unwrap()
            .running
            .iter()
            .copied()
            .collect::<Vec<_>>(),
        vec![2]
    );
    // The isolated job can have its instance again; ids continue.
    assert!(c
        .schedule(4)
        .iter()
        .any(|e| matches!(e, Effect::Launch { job, .. } if *job == iso)));
    assert_eq!(c.submit(spec(false, false), 5).unwrap().0, 5);
}

#[test]
fn unreachable_node_requeues_without_counting_a_restart() {
    let mut c = Cluster::new(Box::new(CaseLaunch));
    c.register_node(&reg(vec![], vec![]), 0);
    let (a, _) = c.submit(spec(false, false), 0).unwrap();
    c.schedule(1);
    c.launch_unreachable(a, "n1", 2);
    let j = c.job(a).unwrap();
    assert_eq!((j.state, j.restarts), (JobState::Pending, 0));
    assert!(
        c.node("n1").unwrap().up,
        "only the node's lease says it is down"
    );
    c.node_heard("n1");
    c.schedule(4);
    let fx = c.launch_refused(a, "user 1 is not the daemon's user".into(), 5);
    assert_eq!(fx.len(), 1);
    assert_eq!(c.job(a).unwrap().state, JobState::Failed);
}

#[test]
fn a_shared_job_shows_while_its_task_waits_for_a_gpu() {
    let mut c = Cluster::new(Box::new(CaseLaunch));
    c.register_node(&reg(vec![], vec![]), 0);
    let (a, _) = c.submit(spec(false, false), 1).unwrap();
    let (b, _) = c.submit(spec(false, false), 1).unwrap();
    c.schedule(2);
    for id in [a, b] {
        let run = c.job(id).unwrap().run;
        c.launch_confirmed(id, run);
    }
    let waits = |job| crate::wire::WaitingTask {
        job,
        bytes: 1 << 30,
        instance: None,
    };
    assert!(
        c.set_waiting_tasks("n1", vec![waits(b)], 3).is_empty(),
        "one report: not yet"
    );
    let fx = c.set_waiting_tasks("n1", vec![waits(b)], 4);
    assert_eq!(fx.len(), 1, "{fx:?}");
    assert_eq!(c.job(b).unwrap().reason.as_deref(), Some("WaitingForGpu"));
    assert_eq!(c.job(a).unwrap().reason, None);
    assert!(
        c.set_waiting_tasks("n1", vec![waits(b)], 5).is_empty(),
        "no change"
    );
    assert_eq!(c.set_waiting_tasks("n1", Vec::new(), 6).len(), 1);
    assert_eq!(c.job(b).unwrap().reason, None, "placed");
    // A job whose tasks keep coming and going: its reason changes a
    // bounded number of times, then stays clear.
    let mut changes = 2;
    for t in 0..100 {
        let waiting = if t % 3 == 2 { vec![] } else { vec![waits(b)] };
        changes += c.set_waiting_tasks("n1", waiting, 7 + t).len();
    }
    assert_eq!(changes, crate::cluster::MOST_WAITING_CHANGES as usize);
}

/// A node of 20 workers whose GPUs have room for `compute` (thousandths,
/// at a default demand of 375), two shared jobs started ahead, and eight
/// shared jobs queued at 1.
fn eight_queued_with_room(compute: u32) -> (Cluster, Vec<JobId>) {
    let mut c = Cluster::new(Box::new(CaseLaunch));
    c.register_node(
        &NodeRegistration {
            worker_limit: Some(20),
            ..reg(vec![], vec![])
        },
        0,
    );
    c.set_shared_start_ahead(Some(2));
    let room = crate::wire::SharedRoom {
        compute,
        default_demand: 375,
    };
    c.set_host_room("n1", Some(room), None);
    let ids: Vec<JobId> = (0..8)
        .map(|_| c.submit(spec(false, false), 1).unwrap().0)
        .collect();
    (c, ids)
}

/// How many jobs the effects launch.
fn started(fx: &[Effect]) -> usize {
    fx.iter()
        .filter(|e| matches!(e, Effect::Launch { .. }))
        .count()
}

#[test]
fn shared_jobs_start_by_the_room_the_node_reports_then_a_few_ahead() {
    // Room for two jobs nothing is known about.
    let (mut c, ids) = eight_queued_with_room(750);
    let room = crate::wire::SharedRoom {
        compute: 750,
        default_demand: 375,
    };
    assert_eq!(started(&c.schedule(2)), 2 + 2, "two by the room, two ahead");
    // Those four are on their way: nothing more until the node says so.
    assert_eq!(started(&c.schedule(3)), 0);
    // Later: the host is short of memory; a job that set memory aside
    // may still start, one that did not may not.
    c.set_shared_start_ahead(None);
    c.set_host_room("n1", Some(room), Some(50));
    assert_eq!(started(&c.schedule(30)), 0, "no --mem below the reserve");
    let mut with_mem = spec(false, false);
    with_mem.slurm.other.insert("mem".into(), "64M".into());
    let (m, _) = c.submit(with_mem, 31).unwrap();
    let fx = c.schedule(31);
    assert!(fx.contains(&Effect::Launch {
        job: m,
        node: "n1".into(),
        early: false
    }));
    assert_eq!(c.job(ids[7]).unwrap().state, JobState::Pending);
}

#[test]
fn shared_jobs_stuck_waiting_for_a_placement_hold_back_no_others_for_good() {
    // The GPU takes nothing more.
    let (mut c, ids) = eight_queued_with_room(0);
    assert_eq!(started(&c.schedule(2)), 2, "two ahead");
    let waits = |job| crate::wire::WaitingTask {
        job,
        bytes: 1 << 30,
        instance: None,
    };
    let both = || vec![waits(ids[0]), waits(ids[1])];
    c.set_waiting_tasks("n1", both(), 20);
    assert_eq!(started(&c.schedule(20)), 0, "two wait");
    c.set_waiting_tasks("n1", both(), 100);
    assert_eq!(started(&c.schedule(100)), 0, "still within the stretch");
    // Two minutes on they hold nobody back: two more, and no more.
    c.set_waiting_tasks("n1", both(), 20 + crate::launch::STUCK_WAITING_SECS);
    assert_eq!(started(&c.schedule(141)), 2);
    assert_eq!(started(&c.schedule(142)), 0);
    // Those two wait as well and get stuck too: four stuck count as two
    // waiting, and nothing more starts however long they wait.
    assert_eq!(c.job(ids[3]).unwrap().state, JobState::Running);
    let four = || (0..4).map(|k| waits(ids[k])).collect::<Vec<_>>();
    c.set_waiting_tasks("n1", four(), 150);
    c.set_waiting_tasks("n1", four(), 1_000);
    assert_eq!(started(&c.schedule(1_000)), 0);
}
