//! Slurm's launch policy ("SA" in the papers): a whole instance per job.

use std::collections::HashSet;

use super::{
    instance_set, unfit_reason, uuids, wide, Decision, LaunchInput, LaunchPlan, LaunchPolicy,
    NodeView, Occupancies, PendingReason, QueuedJob,
};
use crate::resources::NodeResources;

/// Slurm's behaviour ("SA" in the papers): every job, isolated or not, gets
/// a whole instance for its lifetime, the smallest that satisfies its
/// request (a shared job's `--gpu-mem` hint counts as its request); one job
/// per instance; jobs start in submission order, a job that does not fit
/// now letting later ones start (backfill without reservations).
#[derive(Debug, Clone, Copy, Default)]
pub struct ExclusiveLaunch;

impl LaunchPolicy for ExclusiveLaunch {
    fn name(&self) -> &'static str {
        "exclusive"
    }

    fn plan(&self, input: &LaunchInput<'_>) -> LaunchPlan {
        let mut plan = LaunchPlan::default();
        if !input.nodes.iter().any(|n| n.up) {
            plan.rest = Some(PendingReason::NodeDown);
            return plan;
        }
        let mut jobs: Vec<&QueuedJob<'_>> =
            input.isolated.iter().chain(input.shared.iter()).collect();
        // One queue, as Slurm's: by priority, then submission.
        jobs.sort_by_key(|j| (std::cmp::Reverse(j.priority), j.id));
        let mut claimed: HashSet<(usize, usize)> = HashSet::new();
        let mut room: Vec<NodeResources> = input.nodes.iter().map(|n| n.free).collect();
        let mut occupancy = Occupancies::of(input.nodes, input.now, input.reserved);
        let mut wide_held = false;
        for job in jobs {
            if job.width > 1 {
                let count = job.gpu.instances();
                let picked = wide::choose(
                    input.nodes,
                    job,
                    count,
                    |ni, n| {
                        n.up && job.may_join(n, &occupancy, ni)
                            && job.resources.fits(&room[ni], &n.total)
                    },
                    |ni, ii, v| {
                        v.isolated_owner.is_none()
                            && v.draining_for.is_none()
                            && !claimed.contains(&(ni, ii))
                            && v.instance.satisfies(job.gpu)
                    },
                );
                match picked {
                    Some(picked) => {
                        let mut chosen = Vec::new();
                        for (ni, set) in picked {
                            let node = &input.nodes[ni];
                            claimed.extend(set.iter().map(|ii| (ni, *ii)));
                            room[ni].take(&job.resources, &node.total);
                            occupancy.note_start(ni, job);
                            chosen.push((node.name.to_string(), uuids(node, &set)));
                        }
                        plan.decisions.push(Decision::LaunchWide {
                            job: job.id,
                            nodes: chosen,
                        });
                    }
                    None => {
                        if !wide_held {
                            if let Some(t) = wide::hold(&mut occupancy, input.nodes, job, count) {
                                plan.expected_starts.push((job.id, t));
                            }
                            wide_held = true;
                        }
                        input.after_waiting(&mut occupancy);
                        plan.waiting
                            .push((job.id, wide::waiting_reason(input.nodes, job, count)));
                    }
                }
                continue;
            }
            match exclusive_choice(input.nodes, &room, &claimed, &occupancy, job) {
                Some((ni, set)) => {
                    let node = &input.nodes[ni];
                    claimed.extend(set.iter().map(|ii| (ni, *ii)));
                    room[ni].take(&job.resources, &node.total);
                    occupancy.note_start(ni, job);
                    plan.decisions.push(Decision::Launch {
                        job: job.id,
                        node: node.name.into(),
                        instances: uuids(node, &set),
                    });
                }
                None => {
                    if let Some(t) = occupancy.hold_for(job, input.nodes) {
                        plan.expected_starts.push((job.id, t));
                    }
                    input.after_waiting(&mut occupancy);
                    plan.waiting.push((job.id, unfit_reason(input.nodes, job)))
                }
            }
        }
        plan
    }
}

/// Where [`ExclusiveLaunch`] starts a job now: the node and its instances
/// (free, unclaimed, satisfying the request), the smallest for one, the
/// best set ([`instance_set::best_set`]) for several.
fn exclusive_choice(
    nodes: &[NodeView<'_>],
    room: &[NodeResources],
    claimed: &HashSet<(usize, usize)>,
    occupancy: &Occupancies,
    job: &QueuedJob<'_>,
) -> Option<(usize, Vec<usize>)> {
    instance_set::best_on_nodes(
        nodes,
        job,
        |ni, n| n.up && job.may_join(n, occupancy, ni) && job.resources.fits(&room[ni], &n.total),
        |ni, ii, v| {
            v.isolated_owner.is_none()
                && v.draining_for.is_none()
                && !claimed.contains(&(ni, ii))
                && v.instance.satisfies(job.gpu)
        },
    )
}
