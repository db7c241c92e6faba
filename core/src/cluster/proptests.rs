//! Random operations on a two-node cluster (submissions of shared,
//! isolated, several-instance, `--exclusive` and two-node jobs; ends;
//! drains, downs and resumes; suspensions), with the invariants checked
//! after every step: no instance held by two jobs or by a job not running,
//! a node's books keep the CPUs of its jobs less the suspended ones', every
//! running isolated job holds exactly what it asked for on each of its
//! nodes (or, started early, waits for it from the one job there), a job
//! alone on its node is alone, a job is on the books of exactly its nodes
//! (one, or each of a two-node job's), a final state never changes, and in
//! the end every job reaches exactly one final state.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::testkit::{ended, registration, spec};
use super::{Cluster, Effect, NodeStateChange};
use crate::job::{GpuRequest, JobId, JobSpec, JobState};

#[derive(Debug, Clone)]
enum Op {
    Submit {
        kind: u8,
        uid: u32,
    },
    Schedule,
    End(usize),
    Drain(usize),
    Down(usize),
    Resume(usize),
    /// A running shared job of node `.0` places a task on an instance
    /// open to it.
    Task(usize, usize),
    /// The node's shared tasks are all gone.
    TasksGone(usize),
    /// An administrator suspends the `.0`-th running job.
    Suspend(usize),
    /// An administrator resumes the `.0`-th suspended job.
    ResumeJob(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..8, 1u32..3).prop_map(|(kind, uid)| Op::Submit { kind, uid }),
        4 => Just(Op::Schedule),
        4 => any::<usize>().prop_map(Op::End),
        1 => (0usize..2).prop_map(Op::Drain),
        1 => (0usize..2).prop_map(Op::Down),
        2 => (0usize..2).prop_map(Op::Resume),
        2 => (0usize..2, any::<usize>()).prop_map(|(n, k)| Op::Task(n, k)),
        1 => (0usize..2).prop_map(Op::TasksGone),
        1 => any::<usize>().prop_map(Op::Suspend),
        1 => any::<usize>().prop_map(Op::ResumeJob),
    ]
}

fn job_spec(kind: u8, uid: u32) -> JobSpec {
    let mut s = JobSpec {
        uid,
        requeue: Some(kind.is_multiple_of(2)),
        // With a limit, the isolated job after it may start early.
        time_limit: (uid == 2).then_some(4),
        slurm: crate::job::SlurmOptions {
            cpus_per_task: Some(1 + u32::from(kind)),
            other: [(
                "mem".to_string(),
                format!("{}M", 100 * (u32::from(kind) + 1)),
            )]
            .into(),
            ..Default::default()
        },
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
        6 => {
            s.slurm.other.insert("nodes".into(), "2".into());
        }
        7 => {
            s.slurm.other.insert("nodes".into(), "2".into());
            s.isolated = true;
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

/// A running shared job of `node` (the `k`-th) places a task on the first
/// instance open to shared tasks, as the node reports it.
fn place_task(c: &mut Cluster, node: &str, k: usize) {
    let Some(n) = c.node(node) else { return };
    let shared: Vec<JobId> = n
        .running
        .iter()
        .copied()
        .filter(|id| c.job(*id).is_some_and(|j| !j.spec.isolated))
        .collect();
    let Some(open) = n
        .instances
        .iter()
        .find(|s| s.isolated_owner.is_none() && s.draining_for.is_none())
    else {
        return;
    };
    if shared.is_empty() {
        return;
    }
    let job = shared[k % shared.len()];
    let mut uses: BTreeMap<String, crate::wire::InstanceUse> = n
        .instances
        .iter()
        .filter(|s| s.active_tasks > 0)
        .map(|s| {
            let u = crate::wire::InstanceUse {
                tasks: s.active_tasks,
                reserved_bytes: s.reserved_bytes,
                jobs: s.job_bytes.clone(),
                ..Default::default()
            };
            (s.instance.uuid.clone(), u)
        })
        .collect();
    let u = uses.entry(open.instance.uuid.clone()).or_default();
    u.tasks += 1;
    u.reserved_bytes += 1 << 20;
    *u.jobs.entry(job).or_default() += 1 << 20;
    c.update_instance_use(node, &uses);
}

fn check(c: &Cluster, finals: &mut BTreeMap<JobId, JobState>) -> Result<(), TestCaseError> {
    let mut holder: BTreeMap<&str, JobId> = BTreeMap::new();
    let mut waiter: BTreeMap<&str, JobId> = BTreeMap::new();
    for j in c.jobs() {
        if let Some(f) = finals.get(&j.id) {
            prop_assert_eq!(*f, j.state, "job {} left its final state", j.id);
        } else if j.state.is_final() {
            finals.insert(j.id, j.state);
        }
        if j.state != JobState::Running {
            continue;
        }
        let mut on: Vec<&str> = c
            .nodes()
            .filter(|n| n.running.contains(&j.id))
            .map(|n| n.name.as_str())
            .collect();
        on.sort();
        let mut mine = j.nodes();
        mine.sort();
        prop_assert_eq!(&on, &mine, "job {} on the books of {:?}", j.id, on);
        prop_assert_eq!(
            mine.len() as u32,
            crate::allocation::width_of(&j.spec.slurm),
            "job {}",
            j.id
        );
        if j.spec.isolated {
            for name in &mine {
                let held = j.instances_on(name);
                prop_assert_eq!(
                    held.len(),
                    j.spec.gpu.instances(),
                    "job {} on {}",
                    j.id,
                    name
                );
            }
        }
        for name in mine.iter().filter(|_| j.spec.isolated) {
            let node = c.node(name).unwrap();
            for u in j.instances_on(name) {
                let slot = node
                    .instances
                    .iter()
                    .find(|s| &s.instance.uuid == u)
                    .unwrap();
                if slot.isolated_owner == Some(j.id) {
                    prop_assert!(holder.insert(u.as_str(), j.id).is_none(), "{} twice", u);
                } else {
                    // Started early: it waits for the one job holding it.
                    prop_assert_eq!(slot.draining_for, Some(j.id), "job {} on {}", j.id, u);
                    prop_assert!(slot.isolated_owner.is_some(), "{} waits for nobody", j.id);
                    prop_assert!(
                        waiter.insert(u.as_str(), j.id).is_none(),
                        "{} waited for twice",
                        u
                    );
                }
            }
        }
    }
    // The index of each user's jobs holds exactly the jobs in memory.
    let indexed: usize = c
        .jobs()
        .map(|j| j.spec.user_name.clone())
        .collect::<BTreeSet<_>>()
        .iter()
        .map(|u| c.jobs_by_user.of(u).count())
        .sum();
    prop_assert_eq!(indexed, c.jobs().count());
    for j in c.jobs() {
        prop_assert!(c.jobs_by_user.of(&j.spec.user_name).any(|id| id == j.id));
    }
    for n in c.nodes() {
        // What the node keeps of its jobs' CPUs and memory is their sum,
        // less the CPUs of the suspended ones.
        let total = n.total();
        let mut free = total;
        for j in n.running.iter().filter_map(|id| c.job(*id)) {
            let mut res = super::resources_of(j);
            if n.suspended.contains(&j.id) {
                res.cpus = 0;
            }
            free.take(&res, &total);
            if j.state == JobState::Running && j.runs_on(&n.name) {
                prop_assert_eq!(
                    j.is_suspended(),
                    n.suspended.contains(&j.id),
                    "job {} and {}'s books disagree",
                    j.id,
                    &n.name
                );
            }
        }
        prop_assert_eq!(n.free(), free, "{} keeps {:?}", n.name, n.taken);
        prop_assert!(n.taken.0 <= u64::from(n.cpus), "{} over its CPUs", n.name);
        prop_assert!(n.suspended.is_subset(&n.running), "{}", n.name);
        let shared: BTreeSet<JobId> = n
            .running
            .iter()
            .copied()
            .filter(|id| c.job(*id).is_some_and(|j| !j.spec.isolated))
            .collect();
        prop_assert_eq!(&n.shared, &shared, "{}'s shared jobs", n.name);
        for s in &n.instances {
            if let Some(owner) = s.isolated_owner {
                // Its job holds it, or its job's requeued run has not
                // reported its end yet (the node keeps the instance).
                let j = c.job(owner).unwrap();
                prop_assert!(
                    j.instances_on(&n.name).contains(&s.instance.uuid)
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

/// Carries out `ops` on `c` (nodes `nodes` registered), checking the
/// invariants after each, then lets every job run to its end.
fn run(mut c: Cluster, nodes: &[&str], ops: &[Op]) -> Result<(), TestCaseError> {
    let mut finals = BTreeMap::new();
    let mut ending: Vec<(JobId, String, u32)> = Vec::new();
    let mut submitted = BTreeSet::new();
    for (t, o) in ops.iter().enumerate() {
        let now = t as i64 + 1;
        // The runs that were signalled end now.
        for (job, node, run) in std::mem::take(&mut ending) {
            let fx = c
                .job_ended(&node, &killed(job, run, now))
                .unwrap_or_default();
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
                let running: Vec<JobId> = c
                    .jobs()
                    .filter(|j| j.state == JobState::Running)
                    .map(|j| j.id)
                    .collect();
                if !running.is_empty() {
                    let id = running[k % running.len()];
                    let j = c.job(id).unwrap();
                    let (node, run) = (j.node.clone().unwrap(), j.run);
                    let fx = c
                        .job_ended(&node, &ended(id, run, 0, now))
                        .unwrap_or_default();
                    apply(&mut c, fx, &mut ending);
                }
            }
            Op::Suspend(k) | Op::ResumeJob(k) => {
                let suspend = matches!(o, Op::Suspend(_));
                let them: Vec<JobId> = c
                    .jobs()
                    .filter(|j| j.state == JobState::Running && j.is_suspended() != suspend)
                    .map(|j| j.id)
                    .collect();
                if !them.is_empty() {
                    let id = them[k % them.len()];
                    let fx = if suspend {
                        c.suspend(id, now)
                    } else {
                        c.resume(id, now)
                    };
                    apply(&mut c, fx.unwrap_or_default(), &mut ending);
                }
            }
            Op::Task(n, k) => place_task(&mut c, nodes[*n % nodes.len()], *k),
            Op::TasksGone(n) => {
                c.update_instance_use(nodes[*n % nodes.len()], &BTreeMap::new());
            }
            Op::Drain(n) | Op::Down(n) | Op::Resume(n) => {
                let change = match o {
                    Op::Drain(_) => NodeStateChange::Drain { reason: "t".into() },
                    Op::Down(_) => NodeStateChange::Down { reason: "t".into() },
                    _ => NodeStateChange::Resume,
                };
                let fx = c
                    .set_node_state(nodes[*n % nodes.len()], &change, "root", now)
                    .unwrap();
                apply(&mut c, fx, &mut ending);
            }
        }
        check(&c, &mut finals)?;
    }
    // Everything resumes and runs to its end; the shared tasks go.
    let mut now = ops.len() as i64 + 10;
    for &n in nodes {
        c.update_instance_use(n, &BTreeMap::new());
        let fx = c
            .set_node_state(n, &NodeStateChange::Resume, "root", now)
            .unwrap();
        apply(&mut c, fx, &mut ending);
    }
    for _ in 0..500 {
        now += 1;
        for (job, node, run) in std::mem::take(&mut ending) {
            let fx = c
                .job_ended(&node, &killed(job, run, now))
                .unwrap_or_default();
            apply(&mut c, fx, &mut ending);
        }
        let fx = c.schedule(now);
        apply(&mut c, fx, &mut ending);
        let running: Vec<(JobId, String, u32)> = c
            .jobs()
            .filter(|j| j.state == JobState::Running)
            .map(|j| (j.id, j.node.clone().unwrap(), j.run))
            .collect();
        for (id, node, run) in running {
            let fx = c
                .job_ended(&node, &ended(id, run, 0, now))
                .unwrap_or_default();
            apply(&mut c, fx, &mut ending);
        }
        check(&c, &mut finals)?;
        if submitted
            .iter()
            .all(|id| c.job(*id).is_some_and(|j| j.state.is_final()))
        {
            break;
        }
    }
    for id in &submitted {
        let j = c.job(*id).unwrap();
        prop_assert!(
            j.state.is_final(),
            "job {} ended {:?} ({:?})",
            id,
            j.state,
            j.reason
        );
    }
    Ok(())
}

/// Shared and isolated jobs, one at a time, on one whole GPU.
fn one_gpu_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..2, 1u32..3).prop_map(|(kind, uid)| Op::Submit { kind, uid }),
        4 => Just(Op::Schedule),
        3 => any::<usize>().prop_map(Op::End),
        3 => any::<usize>().prop_map(|k| Op::Task(0, k)),
        1 => Just(Op::TasksGone(0)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]
    #[test]
    fn jobs_end_once_and_nothing_is_held_twice(
        ops in proptest::collection::vec(op(), 1..80),
        early in proptest::option::of(1u64..6),
    ) {
        let mut c = Cluster::new(Box::new(crate::launch::CaseLaunch));
        c.set_early_start(early);
        for n in NODES {
            c.register_node(&registration(n, &[], vec![]), 0);
        }
        run(c, &NODES, &ops)?;
    }

    /// Isolated jobs started early behind isolated jobs and shared tasks
    /// on one GPU: still no instance held twice, each early job waits for
    /// the one job there, and every job ends once.
    #[test]
    fn jobs_started_early_wait_their_turn(
        ops in proptest::collection::vec(one_gpu_op(), 1..80),
        early in 1u64..8,
    ) {
        let mut c = Cluster::new(Box::new(crate::launch::CaseLaunch));
        c.set_early_start(Some(early));
        let mut reg = registration("n1", &[], vec![]);
        reg.instances = crate::gpu::sim_instances("n1", &crate::gpu::parse_sim_spec("1xH100-80GB").unwrap());
        c.register_node(&reg, 0);
        run(c, &["n1"], &ops)?;
    }
}
