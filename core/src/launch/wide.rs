//! Jobs on several nodes (`-N`, or the nodes `-w` names): all their nodes
//! are chosen in one decision, and only when every one of them can take
//! its share now (a worker, its CPUs and memory, and, asking for GPUs, a
//! set of instances free now: a job on several nodes does not wait for
//! drains). One that cannot start holds the nodes that will empty first
//! from the jobs after it in the pass, so a stream of narrow jobs cannot
//! starve it (only the first such job in a pass holds nodes).

use super::node_sharing::Occupancies;
use super::{instance_set, InstanceView, NodeView, PendingReason, QueuedJob};

/// The nodes (by index, the batch node first) and on each the instances
/// (by index) where `job` starts now; `None` when fewer than its width can
/// take it. `node_ok` says whether a node has a worker and room for the
/// job's share; `usable` whether an instance may be given (free now,
/// unclaimed). `count`: the instances it asks for on each node (0 for a
/// job without its own).
pub(super) fn choose(
    nodes: &[NodeView<'_>],
    job: &QueuedJob<'_>,
    count: usize,
    node_ok: impl Fn(usize, &NodeView<'_>) -> bool,
    usable: impl Fn(usize, usize, &InstanceView<'_>) -> bool,
) -> Option<Vec<(usize, Vec<usize>)>> {
    let width = job.width.max(1) as usize;
    let mut candidates: Vec<(instance_set::SetKey, u32, usize, Vec<usize>)> = nodes
        .iter()
        .enumerate()
        .filter(|(ni, n)| node_ok(*ni, n))
        .filter_map(|(ni, n)| {
            let (key, set) = if count == 0 {
                (instance_set::SetKey::default(), Vec::new())
            } else {
                instance_set::best_set(n, job, count, |ii, v| {
                    usable(ni, ii, v) && !instance_set::must_wait(v)
                })?
            };
            Some((key, n.workers_used, ni, set))
        })
        .collect();
    if candidates.len() < width {
        return None;
    }
    // The best sets first, then the emptiest nodes; the chosen nodes in
    // their own order (the first named is the batch node).
    candidates.sort_by(|a, b| (&a.0, a.1, a.2).cmp(&(&b.0, b.1, b.2)));
    candidates.truncate(width);
    candidates.sort_by_key(|c| c.2);
    Some(
        candidates
            .into_iter()
            .map(|(_, _, ni, set)| (ni, set))
            .collect(),
    )
}

/// Why a job on several nodes that could not start waits: for resources,
/// or because fewer of the up nodes than its width could ever run it.
pub(super) fn waiting_reason(
    nodes: &[NodeView<'_>],
    job: &QueuedJob<'_>,
    count: usize,
) -> PendingReason {
    if could_run_on(nodes, job, count).len() >= job.width.max(1) as usize {
        PendingReason::Resources
    } else {
        PendingReason::ReqNodeNotAvail
    }
}

/// The up nodes that could ever run `job`'s share (size, `-w`/`-x`, enough
/// instances satisfying its request).
fn could_run_on(nodes: &[NodeView<'_>], job: &QueuedJob<'_>, count: usize) -> Vec<usize> {
    nodes
        .iter()
        .enumerate()
        .filter(|(_, n)| {
            n.up && n.could_run(job)
                && n.instances
                    .iter()
                    .filter(|v| v.instance.satisfies(job.gpu))
                    .count()
                    >= count
        })
        .map(|(ni, _)| ni)
        .collect()
}

/// Holds for a job on several nodes that could not start the nodes that
/// will empty first (by their jobs' time limits, else fewest jobs there),
/// so the jobs after it in this pass start elsewhere, or there only if
/// they will have ended by the time all of them are expected empty (EASY
/// backfill). Returns that time, the job's expected start, where known.
pub(super) fn hold(
    occupancy: &mut Occupancies,
    nodes: &[NodeView<'_>],
    job: &QueuedJob<'_>,
    count: usize,
) -> Option<i64> {
    let mut could = could_run_on(nodes, job, count);
    let width = job.width.max(1) as usize;
    if could.len() < width {
        return None;
    }
    could.sort_by_key(|ni| {
        let n = &nodes[*ni];
        (n.expected_empty.unwrap_or(i64::MAX), n.workers_used, *ni)
    });
    could.truncate(width);
    // All of them free: the latest of their expected ends.
    let until = could
        .iter()
        .map(|ni| nodes[*ni].expected_empty)
        .try_fold(i64::MIN, |t, e| e.map(|e| t.max(e)));
    for ni in could {
        occupancy.hold_node(ni, until);
    }
    until
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::{parse_sim_spec, sim_instances};
    use crate::job::GpuRequest;
    use crate::launch::{
        CaseLaunch, Decision, ExclusiveLaunch, LaunchInput, LaunchPolicy, NodeOccupancy,
    };
    use crate::resources::{JobResources, MemoryRequest, NodeResources};

    const NAMES: [&str; 4] = ["n1", "n2", "n3", "n4"];

    fn node<'a>(name: &'a str, instances: Vec<InstanceView<'a>>, used: u32) -> NodeView<'a> {
        let big = NodeResources {
            cpus: 8,
            memory_mib: 1 << 20,
        };
        NodeView {
            shared_waiting: 0,
            shared_starting: 0,
            shared_room: None,
            host_mem_low: false,
            expected_empty: None,
            name,
            up: true,
            worker_limit: 4,
            workers_used: used,
            shared_running: used,
            total: big,
            free: big,
            instances,
            occupancy: NodeOccupancy::default(),
        }
    }

    fn views(instances: &[crate::gpu::Instance]) -> Vec<InstanceView<'_>> {
        instances
            .iter()
            .map(|instance| InstanceView {
                instance,
                isolated_owner: None,
                draining_for: None,
                active_tasks: 0,
                expected_free: None,
                retiring: false,
            })
            .collect()
    }

    fn job(id: u64, width: u32, cpus: u32, gpu: &GpuRequest) -> QueuedJob<'_> {
        QueuedJob {
            share: None,
            id,
            gpu,
            resources: JobResources {
                cpus,
                memory: MemoryRequest::Unspecified,
            },
            nodes: None,
            uid: 1,
            sharing: None,
            width,
            time_limit: None,
            priority: 0,
        }
    }

    fn launches(plan: &crate::launch::LaunchPlan) -> Vec<(u64, Vec<String>)> {
        plan.decisions
            .iter()
            .filter_map(|d| match d {
                Decision::Launch { job, node, .. } => Some((*job, vec![node.clone()])),
                Decision::LaunchWide { job, nodes } => {
                    Some((*job, nodes.iter().map(|(n, _)| n.clone()).collect()))
                }
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_wide_job_starts_on_as_many_nodes_as_it_asks_or_waits() {
        let none = GpuRequest::default();
        let nodes: Vec<NodeView<'_>> = NAMES[..2].iter().map(|n| node(n, vec![], 0)).collect();
        let two = [job(1, 2, 2, &none)];
        // (`exclusive` gives every job an instance: see the GPU test.)
        let plan = CaseLaunch.plan(&LaunchInput {
            shared: &two,
            nodes: &nodes,
            ..Default::default()
        });
        assert_eq!(launches(&plan), vec![(1, vec!["n1".into(), "n2".into()])]);
        let three = [job(2, 3, 1, &none)];
        let plan = CaseLaunch.plan(&LaunchInput {
            shared: &three,
            nodes: &nodes,
            ..Default::default()
        });
        assert!(launches(&plan).is_empty());
        assert_eq!(plan.waiting, vec![(2, PendingReason::ReqNodeNotAvail)]);
    }

    #[test]
    fn a_waiting_wide_job_holds_nodes_from_the_narrow_jobs_after_it() {
        let none = GpuRequest::default();
        // n1 is full of CPUs (one 8-CPU job); n2 and n3 are free.
        let mut full = node("n1", vec![], 1);
        full.free.cpus = 0;
        let nodes = vec![full, node("n2", vec![], 0), node("n3", vec![], 0)];
        // The wide job wants all three; the narrow ones after it find the
        // two free nodes held for it.
        let queue = [
            job(1, 3, 8, &none),
            job(2, 1, 1, &none),
            job(3, 1, 1, &none),
        ];
        let plan = CaseLaunch.plan(&LaunchInput {
            shared: &queue,
            nodes: &nodes,
            ..Default::default()
        });
        assert!(launches(&plan).is_empty(), "{plan:?}");
        assert!(plan.waiting.contains(&(1, PendingReason::Resources)));
    }

    #[test]
    fn narrow_jobs_backfill_held_nodes_only_if_they_end_before_the_wide_job_can_start() {
        let none = GpuRequest::default();
        // n1 is full until t=100 (its job's time limit); n2 is free.
        let mut full = node("n1", vec![], 1);
        full.free.cpus = 0;
        full.expected_empty = Some(100);
        let mut free = node("n2", vec![], 0);
        free.expected_empty = Some(0);
        let nodes = vec![full, free];
        let limited = |id, secs| QueuedJob {
            time_limit: secs,
            ..job(id, 1, 1, &none)
        };
        let queue = [
            job(1, 2, 8, &none),
            limited(2, Some(300)),
            limited(3, None),
            limited(4, Some(100)),
        ];
        let plan = CaseLaunch.plan(&LaunchInput {
            shared: &queue,
            nodes: &nodes,
            now: 0,
            reserved: &[],
            scheduler: Default::default(),
            ..Default::default()
        });
        // Only the job that ends by t=100 starts (on n2); the wide job is
        // expected to start then.
        assert_eq!(launches(&plan), vec![(4, vec!["n2".into()])], "{plan:?}");
        assert_eq!(plan.expected_starts, vec![(1, 100)]);
        // Where a running job has no limit, nothing is known: no backfill.
        let mut unknown = nodes.clone();
        unknown[0].expected_empty = None;
        let plan = CaseLaunch.plan(&LaunchInput {
            shared: &queue,
            nodes: &unknown,
            now: 0,
            reserved: &[],
            scheduler: Default::default(),
            ..Default::default()
        });
        assert!(launches(&plan).is_empty(), "{plan:?}");
        assert!(plan.expected_starts.is_empty());
    }

    #[test]
    fn a_wide_gpu_job_takes_free_instances_on_each_node() {
        let spec = parse_sim_spec("1xA100-40GB:3g.20gb*2").unwrap();
        let gpus: Vec<_> = NAMES[..2].iter().map(|n| sim_instances(n, &spec)).collect();
        let mut nodes: Vec<NodeView<'_>> = NAMES[..2]
            .iter()
            .zip(&gpus)
            .map(|(n, g)| node(n, views(g), 0))
            .collect();
        let req = GpuRequest {
            mig_profile: Some("3g.20gb".into()),
            count: Some(2),
            ..Default::default()
        };
        let queue = [job(1, 2, 1, &req)];
        for policy in [&CaseLaunch as &dyn LaunchPolicy, &ExclusiveLaunch] {
            let plan = policy.plan(&LaunchInput {
                isolated: &queue,
                nodes: &nodes,
                ..Default::default()
            });
            match plan.decisions.as_slice() {
                [Decision::LaunchWide { nodes, .. }] => {
                    assert_eq!(nodes.len(), 2);
                    assert!(nodes.iter().all(|(_, set)| set.len() == 2), "{nodes:?}");
                }
                other => panic!("{}: {other:?}", policy.name()),
            }
        }
        // One instance busy with shared tasks on n2: the job does not wait
        // for a drain; it waits for resources.
        nodes[1].instances[0].active_tasks = 1;
        let plan = CaseLaunch.plan(&LaunchInput {
            isolated: &queue,
            nodes: &nodes,
            ..Default::default()
        });
        assert!(plan.decisions.is_empty(), "{plan:?}");
        assert_eq!(plan.waiting, vec![(1, PendingReason::Resources)]);
    }
}
