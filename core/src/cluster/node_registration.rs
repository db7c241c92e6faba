//! A node registers (first start, restart, or back after a loss) and is
//! reconciled with what the controller holds; a node lost takes its runs.

use std::collections::BTreeSet;

use super::{early_start, Cluster, Effect, InstanceSlot, Node};
use crate::gpu::Instance;
use crate::job::{JobId, JobState};
use crate::wire::NodeRegistration;

impl Cluster {
    /// A node registers (first start, restart, or after the controller
    /// restarted). Reconciles its jobs: reported endings are applied, jobs the
    /// controller thinks run there but the node does not know are lost, and
    /// processes the controller does not expect are killed.
    pub fn register_node(&mut self, reg: &NodeRegistration, now: i64) -> Vec<Effect> {
        let mut effects = vec![Effect::Node {
            name: reg.name.clone(),
        }];
        let worker_limit = reg.worker_limit.unwrap_or_else(|| {
            let sum: u32 = reg.instances.iter().map(Instance::worker_limit).sum();
            if sum == 0 {
                reg.cpus.max(1)
            } else {
                sum
            }
        });
        let old = self.nodes.remove(&reg.name);
        self.forget_reshapes(&reg.name);
        let mut node = Node {
            name: reg.name.clone(),
            // A node that registers again stays drained or down.
            admin: old.as_ref().and_then(|o| o.admin.clone()),
            url: reg.url.clone(),
            cpus: reg.cpus,
            memory_mib: reg.memory_mib,
            tmp_disk_mib: reg.tmp_disk_mib,
            worker_limit,
            up: true,
            instances: reg
                .instances
                .iter()
                .map(|i| InstanceSlot::new(i.clone()))
                .collect(),
            running: BTreeSet::new(),
            taken: (0, 0),
            suspended: BTreeSet::new(),
            shared: BTreeSet::new(),
            unconfirmed: false,
            instance_id: reg.instance_id.clone(),
            drain_sent: None,
            drain_seq: old.as_ref().map_or(0, |o| o.drain_seq),
            reshape_gpus: reg.reshape_gpus.iter().copied().collect(),
            mig_frozen: old
                .as_ref()
                .map(|o| o.mig_frozen.clone())
                .unwrap_or_default(),
            waiting_tasks: Vec::new(),
            waiting_reports: 0,
            waiting_jobs: Default::default(),
            reshape_keep: reg.reshape_keep.clone(),
            shared_room: None,
            mem_available_mib: None,
        };
        // Keep the books of jobs we believe run there.
        let believed: Vec<JobId> = old
            .map(|o| o.running.into_iter().collect())
            .unwrap_or_default();
        for id in &believed {
            let j = &self.jobs[id];
            node.book(j);
            let held = j.instances_on(&reg.name);
            for s in node
                .instances
                .iter_mut()
                .filter(|s| held.contains(&s.instance.uuid))
            {
                early_start::book_running_on(s, j, &self.jobs);
            }
        }
        self.nodes.insert(reg.name.clone(), node);
        for e in &reg.ended {
            if let Ok(mut fx) = self.job_ended(&reg.name, e) {
                effects.append(&mut fx);
            }
        }
        for id in believed {
            let still = self.jobs[&id].state == JobState::Running;
            if still && !reg.running.contains(&id) {
                effects.extend(self.lose_from(&reg.name, id, now));
            }
        }
        effects.extend(self.reconcile_runs(&reg.name, &reg.running, &reg.runs));
        // Its own set; what its ends changed elsewhere goes at the pass the
        // registration wakes.
        effects.extend(self.drain_change_of(&reg.name, now));
        effects
    }

    /// A node stopped answering (or never came back after a controller
    /// restart): mark it down and lose its jobs.
    pub fn node_down(&mut self, name: &str, now: i64) -> Vec<Effect> {
        let Some(n) = self.nodes.get_mut(name) else {
            return vec![];
        };
        if !n.up && n.running.is_empty() {
            return vec![];
        }
        n.up = false;
        let running: Vec<JobId> = n.running.iter().copied().collect();
        let mut effects = vec![Effect::Node { name: name.into() }];
        for id in running {
            effects.extend(self.lose_from(name, id, now));
        }
        effects
    }
}
