//! Random operations on a two-node cluster (submissions of shared,
//! isolated, several-instance and `--exclusive` jobs; ends; drains, downs
//! and resumes), with the invariants checked after every step: no instance
//! held by two jobs or by a job not running, every running isolated job
//! holds exactly what it asked for on its node, a job alone on its node is
//! alone, no job on two nodes, a final state never changes, and in the end
//! every job reaches exactly one final state.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::testkit::{ended, registration, spec};
use super::{Cluster, Effect, NodeStateChange};
use crate::job::{GpuRequest, JobId, JobSpec, JobState};

#[derive(Debug, Clone)]
enum Op {
    Submit { kind: u8, uid: u32 },
    Schedule,
    End(usize),
    Drain(usize),
    Down(usize),
    Resume(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..6, 1u32..3).prop_map(|(kind, uid)| Op::Submit { kind, uid }),
        4 => Just(Op::Schedule),
        4 => any::<usize>().prop_map(Op::End),
        1 => (0usize..2).prop_map(Op::Drain),
        1 => (0usize..2).prop_map(Op::Down),
        2 => (0usize..2).prop_map(Op::Resume),
    ]
}

fn job_spec(kind: u8, uid: u32) -> JobSpec {
    let mut s = JobSpec {
        uid,
        requeue: Some(kind.is_multiple_of(2)),
        ..spec("p", false)
    };
    match kind {
        0 => {}
        1 | 2 => {
            s.isolated = true;
            s.gpu = GpuRequest {
                count: Some(u32::from(kind)),
                ..GpuRequest::default()
            };
        }
        3 => {
            s.slurm.other.insert("exclusive".into(), "exclusive".into());
        }
        4 => {
            s.slurm.other.insert("exclusive".into(), "user".into());
        }
        _ => {
            s.isolated = true;
            s.slurm.other.insert("exclusive".into(), "exclusive".into());
        }
    }
    s
}

const NODES: [&str; 2] = ["n1", "n2"];

/// The end a node reports for a run it killed on the controller's order
/// (a cancel, or a stop of a run the controller gave up).
fn killed(job: JobId, run: u32, at: i64) -> crate::wire::JobEnded {
    let mut e = ended(job, run, 0, at);
    e.outcome = crate::outcome::ProcessOutcome {
        exit_code: None,
        signal: Some(9),
        cause: crate::outcome::EndCause::Cancelled,
    };
    e
}

/// Applies effects as the nodes would: launches confirmed, runs that are
/// signalled or stopped end (reported at the next step).
fn apply(c: &mut Cluster, fx: Vec<Effect>, ending: &mut Vec<(JobId, String, u32)>) {
    for e in fx {
        match e {
            Effect::Launch { job, .. } => {
                let run = c.job(job).map_or(0, |j| j.run);
                c.launch_confirmed(job, run);
            }
            Effect::Signal {
                job,
                node,
                cancel: true,
                ..
            } => {
                let run = c.job(job).map_or(0, |j| j.run);
                ending.push((job, node, run));
            }
            Effect::StopRun {
                job,
                node,
                run: Some(run),
            } => ending.push((job, node, run)),
            _ => {}
        }
    }
}

fn check(c: &Cluster, finals: &mut BTreeMap<JobId, JobState>) -> Result<(), TestCaseError> {
    let mut holder: BTreeMap<&str, JobId> = BTreeMap::new();
    for j in c.jobs() {
        if let Some(f) = finals.get(&j.id) {
            prop_assert_eq!(*f, j.state, "job {} left its final state", j.id);
        } else if j.state.is_final() {
            finals.insert(j.id, j.state);
        }
        if j.state != JobState::Running {
            continue;
        }
        let on: Vec<&str> = c
            .nodes()
            .filter(|n| n.running.contains(&j.id))
            .map(|n| n.name.as_str())
            .collect();
        prop_assert!(on.len() <= 1, "job {} on {:?}", j.id, on);
        if j.spec.isolated {
            prop_assert_eq!(
                j.gpu_instances.len(),
                j.spec.gpu.instances(),
                "job {}",
                j.id
            );
            let node = c.node(j.node.as_deref().unwrap_or("")).unwrap();
            for u in &j.gpu_instances {
                prop_assert!(holder.insert(u.as_str(), j.id).is_none(), "{} twice", u);
                let slot = node.instances.iter().find(|s| &s.instance.uuid == u);
                prop_assert!(slot.is_some_and(|s| s.isolated_owner == Some(j.id)));
            }
        }
    }
    for n in c.nodes() {
        for s in &n.instances {
            if let Some(owner) = s.isolated_owner {
                // Its job holds it, or its job's requeued run has not
                // reported its end yet (the node keeps the instance).
                let j = c.job(owner).unwrap();
                prop_assert!(
                    j.gpu_instances.contains(&s.instance.uuid)
                        || c.requeued_runs
                            .get(&owner)
                            .is_some_and(|node| *node == n.name),
                    "stale owner {} of {}",
                    owner,
                    s.instance.uuid
                );
            }
        }
        let alone = n.running.iter().any(|id| {
            c.job(*id).is_some_and(|j| {
                j.state == JobState::Running
                    && j.spec.slurm.other.get("exclusive").map(String::as_str) == Some("exclusive")
            })
        });
        if alone {
            prop_assert_eq!(n.running.len(), 1, "{} shared by {:?}", n.name, n.running);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]
    #[test]
    fn jobs_end_once_and_nothing_is_held_twice(ops in proptest::collection::vec(op(), 1..80)) {
        let mut c = Cluster::new(Box::new(crate::launch::CaseLaunch));
        for n in NODES {
            c.register_node(&registration(n, &[], vec![]), 0);
        }
        let mut finals = BTreeMap::new();
        let mut ending: Vec<(JobId, String, u32)> = Vec::new();
        let mut submitted = BTreeSet::new();
        for (t, o) in ops.iter().enumerate() {
            let now = t as i64 + 1;
            // The runs that were signalled end now.
            for (job, node, run) in std::mem::take(&mut ending) {
                let fx = c.job_ended(&node, &killed(job, run, now)).unwrap_or_default();
                apply(&mut c, fx, &mut ending);
            }
            match o {
                Op::Submit { kind, uid } => {
                    if let Ok((id, _)) = c.submit(job_spec(*kind, *uid), now) {
                        submitted.insert(id);
                    }
                }
                Op::Schedule => {
                    let fx = c.schedule(now);
                    apply(&mut c, fx, &mut ending);
                }
                Op::End(k) => {
                    let running: Vec<JobId> = c.jobs()
                        .filter(|j| j.state == JobState::Running)
                        .map(|j| j.id)
                        .collect();
                    if !running.is_empty() {
                        let id = running[k % running.len()];
                        let j = c.job(id).unwrap();
                        let (node, run) = (j.node.clone().unwrap(), j.run);
                        let fx = c.job_ended(&node, &ended(id, run, 0, now)).unwrap_or_default();
                        apply(&mut c, fx, &mut ending);
                    }
                }
                Op::Drain(n) | Op::Down(n) | Op::Resume(n) => {
                    let change = match o {
                        Op::Drain(_) => NodeStateChange::Drain { reason: "t".into() },
                        Op::Down(_) => NodeStateChange::Down { reason: "t".into() },
                        _ => NodeStateChange::Resume,
                    };
                    let fx = c.set_node_state(NODES[*n], &change, "root", now).unwrap();
                    apply(&mut c, fx, &mut ending);
                }
            }
            check(&c, &mut finals)?;
        }
        // Everything resumes and runs to its end.
        let mut now = ops.len() as i64 + 10;
        for n in NODES {
            let fx = c.set_node_state(n, &NodeStateChange::Resume, "root", now).unwrap();
            apply(&mut c, fx, &mut ending);
        }
        for _ in 0..500 {
            now += 1;
            for (job, node, run) in std::mem::take(&mut ending) {
                let fx = c.job_ended(&node, &killed(job, run, now)).unwrap_or_default();
                apply(&mut c, fx, &mut ending);
            }
            let fx = c.schedule(now);
            apply(&mut c, fx, &mut ending);
            let running: Vec<(JobId, String, u32)> = c.jobs()
                .filter(|j| j.state == JobState::Running)
                .map(|j| (j.id, j.node.clone().unwrap(), j.run))
                .collect();
            for (id, node, run) in running {
                let fx = c.job_ended(&node, &ended(id, run, 0, now)).unwrap_or_default();
                apply(&mut c, fx, &mut ending);
            }
            check(&c, &mut finals)?;
            if submitted.iter().all(|id| c.job(*id).is_some_and(|j| j.state.is_final())) {
                break;
            }
        }
        for id in &submitted {
            let j = c.job(*id).unwrap();
            prop_assert!(j.state.is_final(), "job {} ended {:?} ({:?})", id, j.state, j.reason);
        }
    }
}
