//! The REST API's views of nodes and instances (`crate::wire`), built from
//! the controller's state.

use super::{InstanceSlot, Node};
use crate::wire::{InstanceInfo, NodeInfo, Reservation};

impl NodeInfo {
    pub fn new(n: &Node) -> NodeInfo {
        let used = n.running.len() as u32;
        NodeInfo {
            name: n.name.clone(),
            state: n.state_name().into(),
            cpus: n.cpus,
            memory_mib: n.memory_mib,
            tmp_disk_mib: n.tmp_disk_mib,
            worker_limit: n.worker_limit,
            workers_used: used,
            running_jobs: n.running.iter().copied().collect(),
            gpu_instances: n.instances.len(),
            url: n.url.clone(),
            admin: n.admin.clone(),
        }
    }
}

impl InstanceInfo {
    pub fn new(node: &str, s: &InstanceSlot) -> InstanceInfo {
        let i = &s.instance;
        let reservations = match s.holder() {
            Some(owner) => vec![Reservation {
                job_id: owner,
                memory_mib: i.memory_mib,
            }],
            None => s
                .job_bytes
                .iter()
                .map(|(&job_id, &b)| Reservation {
                    job_id,
                    memory_mib: b.div_ceil(1024 * 1024),
                })
                .collect(),
        };
        InstanceInfo {
            warps_in_use: s.warps,
            reservations,
            memory_used_mib: s.used_bytes.map(|b| b.div_ceil(1024 * 1024)),
            uuid: i.uuid.clone(),
            node: node.into(),
            gpu_index: i.gpu_index,
            gpu_uuid: i.gpu_uuid.clone(),
            model: i.model.clone(),
            profile: i.profile.clone(),
            memory_mib: i.memory_mib,
            memory_reserved_mib: s.held_bytes().div_ceil(1024 * 1024),
            sms: i.sms,
            isolated_owner: s.isolated_owner,
            draining_for: s.draining_for,
            drain_expected_end: None,
            active_tasks: s.active_tasks,
            worker_limit: i.worker_limit(),
            mps: i.mps.clone(),
            link_domain: i.link_domain,
            retiring: s.retiring,
            mig_start: i.mig_start,
        }
    }
}
