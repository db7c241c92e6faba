//! CASE's launch policy (Algorithm 1 of the CASE paper, with gsched's
//! drain-before-isolate correction): isolated jobs get their best instance,
//! drained first while shared tasks use it; shared jobs go to the node with
//! the most free workers whose GPUs can take them soon (`admission`).

use std::collections::HashSet;

use super::admission::Admission;
use super::{
    instance_set, most_free, unfit_reason, uuids, Decision, EarlyStart, LaunchInput, LaunchPlan,
    LaunchPolicy, NodeView, Occupancies, PendingReason, QueuedJob, SchedulerType, WidePass,
};
use crate::resources::NodeResources;

/// CASE Algorithm 1 with gsched's drain-before-isolate correction.
#[derive(Debug, Clone, Copy, Default)]
pub struct CaseLaunch;

impl LaunchPolicy for CaseLaunch {
    fn name(&self) -> &'static str {
        "case"
    }

    fn plan(&self, input: &LaunchInput<'_>) -> LaunchPlan {
        let mut plan = LaunchPlan::default();
        if !input.nodes.iter().any(|n| n.up) {
            plan.rest = Some(PendingReason::NodeDown);
            return plan;
        }
        let free: Vec<u32> = input
            .nodes
            .iter()
            .map(|n| {
                if n.up {
                    n.worker_limit.saturating_sub(n.workers_used)
                } else {
                    0
                }
            })
            .collect();
        let mut handed = Handed {
            free,
            room: input.nodes.iter().map(|n| n.free).collect(),
            claimed: HashSet::new(),
            occupancy: Occupancies::of(input.nodes, input.now, input.reserved),
            wide_held: false,
        };
        if plan_isolated(input, &mut handed, &mut plan) {
            plan_shared(input, &mut handed, &mut plan);
        }
        plan
    }
}

/// What a CASE pass has handed out so far.
struct Handed {
    /// Free workers per node.
    free: Vec<u32>,
    /// CPUs and memory left per node.
    room: Vec<NodeResources>,
    /// Instances claimed (launched on or drained) during this pass.
    claimed: HashSet<(usize, usize)>,
    occupancy: Occupancies,
    /// A job on several nodes is being held nodes for.
    wide_held: bool,
}

impl Handed {
    /// The pass over jobs on several nodes, on what is left.
    fn wide(&mut self, input: &LaunchInput<'_>) -> WidePass<'_> {
        WidePass {
            free: &mut self.free,
            room: &mut self.room,
            claimed: &mut self.claimed,
            occupancy: &mut self.occupancy,
            held: &mut self.wide_held,
            strict: input.scheduler == SchedulerType::Builtin,
        }
    }
}

/// Isolated jobs, by rank: each gets its best instance (set), drained
/// first where shared tasks (or an isolated job) still use it. Returns
/// `false` when no worker is left for anything after.
fn plan_isolated(input: &LaunchInput<'_>, h: &mut Handed, plan: &mut LaunchPlan) -> bool {
    // Free workers left on all nodes (not counted again for each job).
    let mut workers_left: u64 = h.free.iter().map(|&f| u64::from(f)).sum();
    for job in input.isolated {
        if workers_left == 0 {
            plan.rest = Some(PendingReason::Resources);
            return false;
        }
        if job.width > 1 {
            workers_left -= h
                .wide(input)
                .place(input.nodes, job, job.gpu.instances(), plan);
            continue;
        }
        let pass = Pass {
            free: &h.free,
            room: &h.room,
            claimed: &h.claimed,
            occupancy: &h.occupancy,
            early: input.early.as_ref(),
        };
        let choice = if job.gpu.instances() > 1 {
            best_instance_set(input.nodes, &pass, job)
        } else {
            best_instance(input.nodes, &pass, job).map(|(ni, ii)| (ni, vec![ii]))
        };
        match choice {
            Some((ni, set)) => {
                if start_or_drain(input, h, job, ni, &set, plan) {
                    workers_left -= 1;
                }
            }
            None => {
                if let Some(t) = h.occupancy.hold_for(job, input.nodes) {
                    plan.expected_starts.push((job.id, t));
                }
                input.after_waiting(&mut h.occupancy);
                plan.waiting
                    .push((job.id, isolated_wait_reason(input.nodes, job)));
            }
        }
    }
    true
}

/// Starts an isolated job on instances `set` of node `ni` (early, where
/// that is allowed), or drains them for it while they are in use;
/// returns whether it started.
fn start_or_drain(
    input: &LaunchInput<'_>,
    h: &mut Handed,
    job: &QueuedJob<'_>,
    ni: usize,
    set: &[usize],
    plan: &mut LaunchPlan,
) -> bool {
    h.claimed.extend(set.iter().map(|ii| (ni, *ii)));
    let node = &input.nodes[ni];
    let busy = set.iter().any(|ii| {
        let v = &node.instances[*ii];
        v.active_tasks > 0 || v.isolated_owner.is_some()
    });
    let early = busy
        && input
            .early
            .as_ref()
            .is_some_and(|e| e.allows(job.id, node, set));
    if busy && !early {
        // Closed to new non-isolated tasks from now on; the job starts
        // when the tasks (or the isolated job running there) have left all
        // of them.
        plan.decisions.push(Decision::Drain {
            job: job.id,
            node: node.name.into(),
            instances: uuids(node, set),
        });
        plan.waiting.push((job.id, PendingReason::Draining));
        return false;
    }
    h.free[ni] -= 1;
    h.room[ni].take(&job.resources, &node.total);
    h.occupancy.note_start(ni, job);
    let (job, node, instances) = (job.id, node.name.into(), uuids(node, set));
    plan.decisions.push(if early {
        Decision::EarlyStart {
            job,
            node,
            instances,
        }
    } else {
        Decision::Launch {
            job,
            node,
            instances,
        }
    });
    true
}

/// Why an isolated job found no instance: busy ones (Resources), or none
/// on any node up that could ever hold it (ReqNodeNotAvail).
fn isolated_wait_reason(nodes: &[NodeView<'_>], job: &QueuedJob<'_>) -> PendingReason {
    let count = job.gpu.instances();
    let possible = nodes.iter().filter(|n| n.up).any(|n| {
        n.could_run(job)
            && n.instances
                .iter()
                .filter(|v| v.instance.satisfies(job.gpu))
                .count()
                >= count
    });
    if possible {
        PendingReason::Resources
    } else {
        PendingReason::ReqNodeNotAvail
    }
}

/// Shared jobs, by rank: each goes to the node with the most free
/// workers that admits it.
fn plan_shared(input: &LaunchInput<'_>, h: &mut Handed, plan: &mut LaunchPlan) {
    let mut most_free = most_free::MostFree::new(&h.free);
    // What each node's GPUs can take now (admission.rs).
    let mut admission: Vec<Admission> = input
        .nodes
        .iter()
        .map(|n| Admission::of(n, input.start_ahead))
        .collect();
    for job in input.shared {
        if !most_free.any(&h.free) {
            plan.rest = Some(PendingReason::Resources);
            return;
        }
        if job.width > 1 {
            h.wide(input).place(input.nodes, job, 0, plan);
            for (ni, f) in h.free.iter().enumerate() {
                most_free.set(ni, *f);
            }
            continue;
        }
        let anywhere = job.nodes.is_none() && h.occupancy.admits_anywhere(job);
        let Some(ni) = most_free.pick(&h.free, |i| {
            (anywhere || job.may_join(&input.nodes[i], &h.occupancy, i))
                && job.resources.fits(&h.room[i], &input.nodes[i].total)
                && admission[i].admits(&job.resources, job.share)
        }) else {
            if let Some(t) = h.occupancy.hold_for(job, input.nodes) {
                plan.expected_starts.push((job.id, t));
            }
            input.after_waiting(&mut h.occupancy);
            plan.waiting.push((job.id, unfit_reason(input.nodes, job)));
            continue;
        };
        h.free[ni] -= 1;
        most_free.set(ni, h.free[ni]);
        admission[ni].started(job.share);
        h.room[ni].take(&job.resources, &input.nodes[ni].total);
        h.occupancy.note_start(ni, job);
        plan.decisions.push(Decision::Launch {
            job: job.id,
            node: input.nodes[ni].name.into(),
            instances: Vec::new(),
        });
    }
}

/// The best instance for an isolated job: one already draining for it, else
/// the smallest that satisfies the request, preferring one free now (no
/// non-isolated tasks, no isolated job), then the one expected to be free
/// first, on a node with a worker free. An instance another isolated job
/// holds may be taken next (drained for this one), so that when that job
/// ends the instance goes straight to this one instead of filling with
/// non-isolated tasks it would then have to wait for: where non-isolated
/// jobs run on the node, and when that job's end is known (a time limit)
/// or no other instance could ever serve this job (otherwise committing
/// to one of several held instances could wait for the wrong one).
fn best_instance(
    nodes: &[NodeView<'_>],
    pass: &Pass<'_>,
    job: &QueuedJob<'_>,
) -> Option<(usize, usize)> {
    let Pass {
        free,
        room,
        claimed,
        occupancy,
        early,
    } = *pass;
    // Preference key: not already draining for this job, memory, must
    // wait, expected to be free (unknown last), tasks to drain, then
    // position (for a stable choice).
    type Key = (bool, u64, bool, i64, u32, usize, usize);
    let mut best: Option<(Key, (usize, usize))> = None;
    let only_held_serve = nodes
        .iter()
        .filter(|n| n.up && job.may_use(n))
        .flat_map(|n| &n.instances)
        .filter(|v| v.instance.satisfies(job.gpu))
        .all(|v| v.isolated_owner.is_some());
    // Taking a held instance next only pays where shared tasks would fill
    // it in between.
    for (ni, node) in nodes.iter().enumerate() {
        if !node.up
            || free[ni] == 0
            || !job.may_join(node, occupancy, ni)
            || !job.resources.fits(&room[ni], &node.total)
        {
            continue;
        }
        for (ii, v) in node.instances.iter().enumerate() {
            let mine = v.draining_for == Some(job.id);
            // Or where the job may start there early.
            let held_next = v.isolated_owner.is_some()
                && ((node.shared_running > 0
                    && (mine || v.expected_free.is_some() || only_held_serve))
                    || early.is_some_and(|e| e.allows(job.id, node, &[ii])));
            if (v.isolated_owner.is_some() && !held_next)
                || v.isolated_owner == Some(job.id)
                || v.retiring
                || (v.draining_for.is_some() && !mine)
                || claimed.contains(&(ni, ii))
                || !v.instance.satisfies(job.gpu)
            {
                continue;
            }
            let must_wait = v.active_tasks > 0 || v.isolated_owner.is_some();
            // A drain for this job sticks; taking a held instance next is
            // weighed again on each pass (one free now goes first).
            let key = (
                !(mine && v.isolated_owner.is_none()),
                v.instance.memory_mib,
                must_wait,
                v.expected_free.filter(|_| must_wait).unwrap_or(i64::MAX),
                v.active_tasks,
                ni,
                ii,
            );
            if best.as_ref().is_none_or(|(k, _)| key < *k) {
                best = Some((key, (ni, ii)));
            }
        }
    }
    best.map(|(_, at)| at)
}

/// The best set of instances for an isolated job asking for several, on a
/// node with a worker free ([`instance_set::best_set`]): instances no
/// isolated job holds or waits for, free now or once their shared tasks
/// are drained.
fn best_instance_set(
    nodes: &[NodeView<'_>],
    pass: &Pass<'_>,
    job: &QueuedJob<'_>,
) -> Option<(usize, Vec<usize>)> {
    instance_set::best_on_nodes(
        nodes,
        job,
        |ni, n| {
            n.up && pass.free[ni] > 0
                && job.may_join(n, pass.occupancy, ni)
                && job.resources.fits(&pass.room[ni], &n.total)
        },
        |ni, ii, v| !pass.claimed.contains(&(ni, ii)) && instance_set::could_take(job, v),
    )
}

/// What a launch pass has used of each node so far (by node index): free
/// workers, free CPUs and memory, the instances claimed, who runs there.
#[derive(Clone, Copy)]
struct Pass<'p> {
    free: &'p [u32],
    room: &'p [NodeResources],
    claimed: &'p HashSet<(usize, usize)>,
    occupancy: &'p Occupancies,
    early: Option<&'p EarlyStart<'p>>,
}
