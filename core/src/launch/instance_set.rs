//! Choosing several instances for one job (`--gres=gpu:N`, N > 1): all on
//! one node, as few GPUs as possible (instances of one GPU first), then
//! GPUs of one link domain (NVLink or one PCIe switch, as the node's NVML
//! topology says), then those free now, then the smallest.

use std::collections::BTreeMap;

use super::{InstanceView, NodeView, QueuedJob};

/// How good a set is: lower is better.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct SetKey {
    /// Instances not already being drained for this job: a set being
    /// drained for it sticks.
    not_mine: usize,
    gpus: usize,
    domains: usize,
    /// Instances that must be drained of shared tasks first.
    must_wait: usize,
    memory_mib: u64,
}

/// Whether `job` could take instance `v` of a node (now or after a drain of
/// its shared tasks): it satisfies the request, and no isolated job holds
/// it or waits for it.
pub(super) fn could_take(job: &QueuedJob<'_>, v: &InstanceView<'_>) -> bool {
    v.instance.satisfies(job.gpu)
        && v.isolated_owner.is_none()
        && !v.retiring
        && v.draining_for.is_none_or(|j| j == job.id)
}

pub(super) fn must_wait(v: &InstanceView<'_>) -> bool {
    v.active_tasks > 0 || v.isolated_owner.is_some()
}

/// The best set of `count` instances of `node` among those `usable`
/// allows, with its key; `None` when the node has too few.
pub(super) fn best_set(
    node: &NodeView<'_>,
    job: &QueuedJob<'_>,
    count: usize,
    usable: impl Fn(usize, &InstanceView<'_>) -> bool,
) -> Option<(SetKey, Vec<usize>)> {
    // Candidates per GPU, best first within each.
    let mut by_gpu: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for (ii, v) in node.instances.iter().enumerate() {
        if usable(ii, v) {
            by_gpu.entry(v.instance.gpu_index).or_default().push(ii);
        }
    }
    let rank = |ii: &usize| {
        let v = &node.instances[*ii];
        (
            v.draining_for != Some(job.id),
            must_wait(v),
            v.expected_free.unwrap_or(i64::MAX),
            v.active_tasks,
            v.instance.memory_mib,
            *ii,
        )
    };
    for list in by_gpu.values_mut() {
        list.sort_by_key(rank);
    }
    // Each link domain on its own, then the node as a whole (a set across
    // domains when no one domain is big enough).
    let domain_of = |gpu: u32| -> Option<u32> {
        node.instances
            .iter()
            .find(|v| v.instance.gpu_index == gpu)
            .and_then(|v| v.instance.link_domain)
    };
    let mut domains: Vec<Option<u32>> = by_gpu.keys().map(|g| domain_of(*g)).collect();
    domains.sort();
    domains.dedup();
    let mut best: Option<(SetKey, Vec<usize>)> = None;
    let mut consider = |chosen: Vec<usize>| {
        if chosen.len() < count {
            return;
        }
        let key = key_of(node, job, &chosen, &domain_of);
        if best.as_ref().is_none_or(|(k, _)| key < *k) {
            best = Some((key, chosen));
        }
    };
    // Each GPU on its own.
    for list in by_gpu.values() {
        consider(list.iter().copied().take(count).collect());
    }
    // Each link domain, then the node as a whole (a set across domains
    // when no one domain is big enough): the GPUs with the most candidates
    // first, for the fewest GPUs.
    let scopes = domains.into_iter().map(Some).chain([None]);
    for scope in scopes {
        let mut gpus: Vec<(&u32, &Vec<usize>)> = by_gpu
            .iter()
            .filter(|(g, _)| scope.is_none_or(|d| domain_of(**g) == d))
            .collect();
        gpus.sort_by_key(|(g, list)| (std::cmp::Reverse(list.len()), list.first().map(rank), **g));
        consider(
            gpus.iter()
                .flat_map(|(_, list)| list.iter().copied())
                .take(count)
                .collect(),
        );
    }
    best
}

/// The node (index) and instances of the best set for `job` over the
/// nodes `node_ok` allows, taking instances `usable(node, instance, view)`
/// allows; ties go to the first node.
pub(super) fn best_on_nodes(
    nodes: &[NodeView<'_>],
    job: &QueuedJob<'_>,
    node_ok: impl Fn(usize, &NodeView<'_>) -> bool,
    usable: impl Fn(usize, usize, &InstanceView<'_>) -> bool,
) -> Option<(usize, Vec<usize>)> {
    let count = job.gpu.instances();
    nodes
        .iter()
        .enumerate()
        .filter(|(ni, n)| node_ok(*ni, n))
        .filter_map(|(ni, n)| {
            best_set(n, job, count, |ii, v| usable(ni, ii, v)).map(|(key, set)| (key, ni, set))
        })
        .min_by_key(|(key, ni, _)| (*key, *ni))
        .map(|(_, ni, set)| (ni, set))
}

fn key_of(
    node: &NodeView<'_>,
    job: &QueuedJob<'_>,
    chosen: &[usize],
    domain_of: &dyn Fn(u32) -> Option<u32>,
) -> SetKey {
    let views: Vec<&InstanceView<'_>> = chosen.iter().map(|i| &node.instances[*i]).collect();
    let mut gpus: Vec<u32> = views.iter().map(|v| v.instance.gpu_index).collect();
    gpus.sort();
    gpus.dedup();
    let mut domains: Vec<Option<u32>> = gpus.iter().map(|g| domain_of(*g)).collect();
    domains.sort();
    domains.dedup();
    SetKey {
        not_mine: views
            .iter()
            .filter(|v| v.draining_for != Some(job.id))
            .count(),
        gpus: gpus.len(),
        domains: domains.len(),
        must_wait: views.iter().filter(|v| must_wait(v)).count(),
        memory_mib: views.iter().map(|v| v.instance.memory_mib).sum(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::{parse_sim_spec, sim_instances, Instance};
    use crate::job::GpuRequest;
    use crate::resources::{JobResources, MemoryRequest, NodeResources};

    fn view(i: &Instance, tasks: u32) -> InstanceView<'_> {
        InstanceView {
            instance: i,
            isolated_owner: None,
            draining_for: None,
            active_tasks: tasks,
            expected_free: None,
            retiring: false,
        }
    }

    fn node<'a>(inst: &'a [Instance], tasks: &[u32]) -> NodeView<'a> {
        let big = NodeResources {
            cpus: 64,
            memory_mib: 1 << 20,
        };
        NodeView {
            shared_waiting: 0,
            shared_starting: 0,
            shared_room: None,
            host_mem_low: false,
            expected_empty: None,
            name: "n",
            occupancy: Default::default(),
            up: true,
            worker_limit: 8,
            workers_used: 0,
            shared_running: 0,
            total: big,
            free: big,
            instances: inst
                .iter()
                .zip(tasks.iter().chain(std::iter::repeat(&0)))
                .map(|(i, t)| view(i, *t))
                .collect(),
        }
    }

    fn job(gpu: &GpuRequest) -> QueuedJob<'_> {
        QueuedJob {
            share: None,
            id: 9,
            gpu,
            uid: 0,
            sharing: None,
            width: 1,
            time_limit: None,
            resources: JobResources {
                cpus: 1,
                memory: MemoryRequest::Unspecified,
            },
            nodes: None,
            priority: 0,
        }
    }

    #[test]
    fn instances_of_one_gpu_come_before_instances_spread_over_gpus() {
        // GPU 0: 1g.10gb*2 (busy) ; GPU 1: 1g.10gb*3 (idle) ; GPU 2: one.
        let inst = sim_instances(
            "n",
            &parse_sim_spec("1xA100-80GB:1g.10gb*2+1xA100-80GB:1g.10gb*3+1xA100-80GB:1g.10gb")
                .unwrap(),
        );
        let gpu = GpuRequest {
            mig_profile: Some("1g.10gb".into()),
            count: Some(3),
            ..GpuRequest::default()
        };
        let n = node(&inst, &[1, 1]);
        let (key, set) = best_set(&n, &job(&gpu), 3, |_, v| could_take(&job(&gpu), v)).unwrap();
        assert_eq!(set, [2, 3, 4], "the three of GPU 1");
        assert_eq!((key.gpus, key.must_wait), (1, 0));
        // Four need two GPUs: GPU 1's three and one more, free ones first.
        let (key, set) = best_set(&n, &job(&gpu), 4, |_, v| could_take(&job(&gpu), v)).unwrap();
        assert_eq!(key.gpus, 2);
        assert!(set.starts_with(&[2, 3, 4]), "{set:?}");
        assert!(best_set(&n, &job(&gpu), 7, |_, _| true).is_none());
    }

    #[test]
    fn gpus_of_one_link_domain_come_first() {
        let mut inst = sim_instances("n", &parse_sim_spec("4xH100-80GB").unwrap());
        // GPUs 0 and 2 share NVLink; 1 and 3 another domain.
        for (i, d) in inst.iter_mut().zip([0, 1, 0, 1]) {
            i.link_domain = Some(d);
        }
        let gpu = GpuRequest {
            count: Some(2),
            ..GpuRequest::default()
        };
        let n = node(&inst, &[]);
        let (key, set) = best_set(&n, &job(&gpu), 2, |_, _| true).unwrap();
        assert_eq!(set, [0, 2]);
        assert_eq!(key.domains, 1);
        // With GPU 2 taken, 1 and 3 are the pair of one domain.
        let (_, set) = best_set(&n, &job(&gpu), 2, |ii, _| ii != 2).unwrap();
        assert_eq!(set, [1, 3]);
        // Three span two domains.
        let (key, _) = best_set(&n, &job(&gpu), 3, |_, _| true).unwrap();
        assert_eq!(key.domains, 2);
    }
}
