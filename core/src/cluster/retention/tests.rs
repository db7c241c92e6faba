use super::*;
use crate::array::ArrayRequest;
use crate::cluster::testkit::{self, cluster, launch};
use crate::dependency::Dependency;
use crate::job::{JobSpec, JobState};
use crate::launch::CaseLaunch;
use proptest::prelude::*;

fn spec(name: &str) -> JobSpec {
    testkit::spec(name, false)
}

fn end(c: &mut Cluster, id: JobId, code: i32, at: i64) {
    let run = c.job(id).unwrap().run;
    c.job_ended("n1", &testkit::ended(id, run, code, at))
        .unwrap();
}

#[test]
fn finished_jobs_leave_after_the_minimum_age_and_their_footprint_stays() {
    let mut c = cluster();
    let (a, _) = c.submit(spec("train"), 1).unwrap();
    assert_eq!(launch(&mut c, 2), vec![a]);
    c.record_peak(a, 3 << 30);
    end(&mut c, a, 0, 50);
    assert!(c.purge_finished(349, 300).is_empty(), "too young");
    assert!(
        c.job(a).unwrap().spec.environment.is_empty(),
        "a finished job's environment is shed"
    );
    assert_eq!(c.purge_finished(350, 300), vec![a]);
    assert!(c.job(a).is_none());
    assert_eq!(
        c.jobs_by_user.of("u").count(),
        0,
        "its user's index forgets it"
    );
    assert_eq!(c.retired_peak_count(), 1);
    assert_eq!(c.purged_count(JobState::Completed), 1);
    let (b, _) = c.submit(spec("train"), 400).unwrap();
    assert!(b > a);
    assert_eq!(c.learned_footprint(b), Some(3072));
}

#[test]
fn a_job_whose_text_is_in_the_store_learns_counts_and_leaves_as_before() {
    let mut c = cluster();
    let (a, _) = c.submit(spec("train"), 1).unwrap();
    let counted = c.jobs_by_user.held("u");
    assert!(c.take_text(a).is_some(), "the text leaves memory");
    assert!(c.take_text(a).is_none(), "once");
    assert!(c.job(a).unwrap().spec.script.is_empty());
    assert_eq!(c.jobs_by_user.held("u"), counted, "counted as it came");
    assert_eq!(launch(&mut c, 2), vec![a]);
    c.record_peak(a, 3 << 30);
    end(&mut c, a, 0, 50);
    // Another name, the same script: learned through the script's hash.
    let mut renamed = spec("train");
    renamed.name = "other name".into();
    let (b, _) = c.submit(renamed, 60).unwrap();
    assert_eq!(c.learned_footprint(b), Some(3072));
    c.take_text(b);
    assert_eq!(c.learned_footprint(b), Some(3072));
    let mut changed = spec("train");
    changed.name = "third".into();
    changed.script.push_str("echo changed\n");
    let (d, _) = c.submit(changed, 61).unwrap();
    c.take_text(d);
    assert_eq!(c.learned_footprint(d), None, "another script, another job");
    assert_eq!(c.purge_finished(1000, 0), vec![a]);
    c.cancel(b, None, 1001).unwrap();
    c.cancel(d, None, 1001).unwrap();
    c.purge_finished(2000, 0);
    assert_eq!(c.jobs_by_user.held("u"), (0, 0), "nothing left counted");
}

#[test]
fn pending_and_running_jobs_never_leave() {
    let mut c = cluster();
    let (a, _) = c.submit(spec("a"), 1).unwrap();
    let (b, _) = c.submit(spec("b"), 1).unwrap();
    c.set_held(b, true).unwrap();
    assert_eq!(launch(&mut c, 2), vec![a]);
    assert!(c.purge_finished(1_000_000, 0).is_empty());
    assert_eq!(c.job(a).unwrap().state, JobState::Running);
    assert_eq!(c.job(b).unwrap().state, JobState::Pending);
}

#[test]
fn a_job_named_by_a_waiting_dependency_stays_until_the_dependent_ends() {
    let mut c = cluster();
    let (a, _) = c.submit(spec("a"), 1).unwrap();
    launch(&mut c, 2);
    let mut dependent = spec("b");
    dependent.dependency = Some(Dependency::parse(&format!("afterok:{a}")).unwrap());
    let (b, _) = c.submit(dependent, 3).unwrap();
    end(&mut c, a, 0, 10);
    assert!(c.purge_finished(1000, 0).is_empty(), "b still needs a");
    // b's verdict comes from a's real end, not from its absence.
    assert_eq!(launch(&mut c, 1001), vec![b]);
    end(&mut c, b, 0, 1002);
    assert_eq!(c.purge_finished(1002, 0), vec![a, b]);
}

#[test]
fn an_array_leaves_only_when_every_task_may() {
    let mut c = cluster();
    let mut s = spec("arr");
    s.array = Some(ArrayRequest::parse("0-2").unwrap());
    let (first, _) = c.submit(s, 1).unwrap();
    let tasks = launch(&mut c, 2);
    assert_eq!(tasks.len(), 3);
    end(&mut c, tasks[0], 0, 10);
    end(&mut c, tasks[1], 0, 10);
    assert!(c.purge_finished(500, 300).is_empty(), "one task still runs");
    end(&mut c, tasks[2], 0, 400);
    assert!(
        c.purge_finished(500, 300).is_empty(),
        "the last is too young"
    );
    assert_eq!(c.purge_finished(700, 300), tasks);
    assert!(c.job_or_array(first).next().is_none());
}

#[test]
fn an_idempotency_key_is_freed_with_its_job() {
    let mut c = cluster();
    let mut s = spec("k");
    s.idempotency_key = Some("key-1".into());
    let (a, _) = c.submit(s.clone(), 1).unwrap();
    assert_eq!(c.submit(s.clone(), 2).unwrap().0, a, "a retry");
    c.cancel(a, Some(1), 5).unwrap();
    assert_eq!(c.purge_finished(1000, 300), vec![a]);
    let (again, _) = c.submit(s, 1001).unwrap();
    assert!(again > a, "a purged job's id is never given again");
}

#[test]
fn a_restarted_controller_numbers_after_purged_jobs_and_keeps_their_peaks() {
    let mut c = Cluster::restore(Box::new(CaseLaunch), vec![], vec![]);
    c.restore_history(
        41,
        vec![PastRun {
            id: 41,
            user_name: "u".into(),
            name: "train".into(),
            script: "#!/bin/sh\nother\n".into(),
            gpu_mem_peak: Some(2048),
            gpu_share: Some(400),
            elapsed_secs: Some(90),
        }],
    );
    let (id, _) = c.submit(spec("train"), 1).unwrap();
    assert_eq!(id, 42);
    assert_eq!(c.learned_footprint(id), Some(2048));
    assert_eq!(c.learned(id).share, Some(400), "the share is kept too");
    assert_eq!(c.learned(id).runtime_secs, Some(90), "and the run time");
    let mut other = spec("train");
    other.user_name = "v".into();
    let (v, _) = c.submit(other, 1).unwrap();
    assert_eq!(c.learned_footprint(v), None, "another user's peak");
}

#[test]
fn retired_peaks_are_bounded_by_the_history_per_key() {
    let mut c = cluster();
    let mut t = 1;
    for _ in 0..3 * crate::cluster::footprints::PEAK_HISTORY {
        let (a, _) = c.submit(spec("same"), t).unwrap();
        launch(&mut c, t + 1);
        c.record_peak(a, 1 << 30);
        end(&mut c, a, 0, t + 2);
        t += 3;
        c.purge_finished(t, 0);
    }
    assert!(c.jobs().next().is_none());
    assert!(c.retired_peak_count() <= crate::cluster::footprints::PEAK_HISTORY);
}

/// One step of a random history.
#[derive(Debug, Clone)]
enum Op {
    Submit { after: Option<usize> },
    Schedule,
    End { which: usize, code: i32 },
    Cancel { which: usize },
    Purge { min_age: u64 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        prop::option::of(0usize..20).prop_map(|after| Op::Submit { after }),
        Just(Op::Schedule),
        (0usize..20, 0i32..2).prop_map(|(which, code)| Op::End { which, code }),
        (0usize..20).prop_map(|which| Op::Cancel { which }),
        (0u64..30).prop_map(|min_age| Op::Purge { min_age }),
    ]
}

proptest! {
    /// Purging removes only finished jobs old enough that no waiting
    /// dependency names; ids are never given twice; a job that left keeps
    /// the final state it had.
    #[test]
    fn purge_keeps_what_is_needed(ops in prop::collection::vec(op(), 1..80)) {
        let mut c = cluster();
        let mut ids: Vec<JobId> = Vec::new();
        let mut finals: BTreeMap<JobId, JobState> = BTreeMap::new();
        for (now, op) in ops.into_iter().enumerate() {
            let now = now as i64 * 10;
            match op {
                Op::Submit { after } => {
                    let mut s = spec("p");
                    if let Some(&dep) = after.and_then(|i| ids.get(i)) {
                        s.dependency = Some(Dependency::parse(&format!("afterany:{dep}")).unwrap());
                    }
                    if let Ok((id, _)) = c.submit(s, now) {
                        prop_assert!(ids.last().is_none_or(|&l| id > l), "id {id} reused");
                        ids.push(id);
                    }
                }
                Op::Schedule => { c.schedule(now); }
                Op::End { which, code } => {
                    if let Some(&id) = ids.get(which) {
                        if c.job(id).is_some_and(|j| j.state == JobState::Running) {
                            end(&mut c, id, code, now);
                        }
                    }
                }
                Op::Cancel { which } => {
                    if let Some(&id) = ids.get(which) {
                        let _ = c.cancel(id, Some(1), now);
                    }
                }
                Op::Purge { min_age } => {
                    let before: BTreeMap<JobId, Job> =
                        c.jobs().map(|j| (j.id, j.clone())).collect();
                    for id in c.purge_finished(now, min_age) {
                        let j = &before[&id];
                        prop_assert!(j.state.is_final());
                        prop_assert!(j.end_time.unwrap_or(j.submit_time) + min_age as i64 <= now);
                        let needed = c.jobs().any(|o| !o.state.is_final()
                            && o.spec.dependency.as_ref().is_some_and(|d| d.job_ids().any(|x| x == id)));
                        prop_assert!(!needed, "job {id} purged while a dependent waits");
                        prop_assert!(finals.insert(id, j.state).is_none(), "job {id} purged twice");
                    }
                }
            }
        }
        for (id, _) in finals {
            prop_assert!(c.job(id).is_none());
        }
    }
}

#[test]
fn a_restart_loads_what_purging_would_keep() {
    assert_eq!(kept_finished_since(1000, 300), Some(700));
    assert_eq!(kept_finished_since(1000, 0), None, "0 keeps every job");
    assert_eq!(
        kept_finished_since(0, u64::MAX),
        Some(-i64::MAX),
        "no overflow"
    );
    // A job that ended at the bound is loaded, and the next pass purges it.
    let mut c = cluster();
    let (a, _) = c.submit(spec("b"), 1).unwrap();
    launch(&mut c, 2);
    end(&mut c, a, 0, 700);
    assert_eq!(c.purge_finished(1000, 300), vec![a]);
}
