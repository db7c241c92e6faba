//! MIG re-partitioning, decided by the controller and carried out by the
//! nodes (issue 19). With a [`RepartitionPolicy`] set, each launch pass
//! asks it, from the queues and every up node's MIG GPUs, what to re-make;
//! each reshape marks its instances retiring (no launch goes there, and the
//! node binds no new process to them) and reaches the node as an
//! [`Effect::Reshape`]. The node destroys the instances once nothing uses
//! them, creates the new ones and reports both ([`Cluster::reshape_done`]).
//! Several reshapes of one GPU may be in flight (each retires its own idle
//! instances; the node runs them side by side); a node that registers again
//! (restarted) reports its real instances, which replace the books.

use super::{Cluster, ClusterError, Effect};
use crate::gpu::mig::MigPlacement;
use crate::gpu::Instance;
use crate::repartition::{Demand, GpuUse, InstanceUse, RepartitionPolicy, Use};
use crate::wire::MigSlot;

/// A reshape sent to a node and not yet reported done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReshapeOrder {
    pub seq: u64,
    pub gpu: u32,
    pub retire: Vec<String>,
    pub create: Vec<MigSlot>,
}

impl Cluster {
    /// Re-partitions MIG GPUs with `policy` from now on (`None`: never).
    pub fn set_repartition(&mut self, policy: Option<Box<dyn RepartitionPolicy>>) {
        self.repartition = policy;
    }

    /// Whether MIG layouts may change (a policy is set).
    pub fn repartitions(&self) -> bool {
        self.repartition.is_some()
    }

    /// The reshapes sent to `node` and not yet done.
    pub fn reshapes_on(&self, node: &str) -> &[ReshapeOrder] {
        self.reshapes.get(node).map_or(&[], Vec::as_slice)
    }

    /// Asks the policy for new reshapes; marks their instances retiring
    /// and returns one [`Effect::Reshape`] each.
    pub(super) fn new_reshapes(&mut self) -> Vec<Effect> {
        let Some(policy) = self.repartition.as_deref() else {
            return Vec::new();
        };
        // The queues (isolated ones in id order, as the policy takes them)
        // and what runs: not every job the controller remembers. (A
        // requeued job whose old run is still ending is on its node's books
        // too: it counts once, as pending.)
        let queued = self.isolated_queue.iter().chain(self.shared_queue.iter());
        let running = self
            .nodes
            .values()
            .flat_map(|n| n.running.iter())
            .filter(|id| !self.isolated_queue.contains(id) && !self.shared_queue.contains(id));
        let waiting = self
            .nodes
            .values()
            .any(|n| n.up && !n.waiting_tasks.is_empty());
        let jobs = queued.chain(running).filter_map(|id| self.jobs.get(id));
        let demand = Demand::of(jobs, waiting);
        if demand.isolated.is_empty() && !demand.shared_backlog {
            return Vec::new();
        }
        let mut orders = Vec::new();
        for n in self.nodes.values().filter(|n| n.accepts_launches()) {
            let in_flight = self.reshapes.get(&n.name);
            let (gpus, uuids) = mig_gpus(n, in_flight.map_or(&[], Vec::as_slice));
            if gpus.is_empty() {
                continue;
            }
            let views: Vec<GpuUse> = gpus.iter().map(|(_, g)| g.clone()).collect();
            for r in policy.plan(&views, &demand) {
                let Some((gpu_index, _)) = gpus.get(r.gpu) else {
                    continue;
                };
                // Only live instances are retired (never one being made).
                let retire: Vec<String> = r
                    .retire
                    .iter()
                    .filter_map(|&i| uuids[r.gpu].get(i).cloned())
                    .collect();
                if retire.len() != r.retire.len() || retire.is_empty() {
                    continue;
                }
                orders.push((n.name.clone(), *gpu_index, retire, r.create));
            }
        }
        orders
            .into_iter()
            .map(|(node, gpu, retire, create)| self.send_reshape(node, gpu, retire, create))
            .collect()
    }

    /// Pending isolated jobs that no instance serves now, but one a
    /// reshape in flight makes would: they wait with `MigReconfiguring`.
    pub(super) fn note_reconfiguring(&mut self) {
        if self.reshapes.values().all(Vec::is_empty) {
            return;
        }
        let mut waiting = Vec::new();
        for id in &self.isolated_queue {
            let Some(job) = self.jobs.get(id) else {
                continue;
            };
            let req = &job.spec.gpu;
            let served_now = self.nodes.values().filter(|n| n.up).any(|n| {
                n.instances
                    .iter()
                    .any(|s| !s.retiring && s.instance.satisfies(req))
            });
            if served_now {
                continue;
            }
            let coming = self.reshapes.iter().any(|(name, orders)| {
                let Some(n) = self.nodes.get(name) else {
                    return false;
                };
                orders.iter().any(|o| {
                    let Some(like) = n.instances.iter().find(|s| s.instance.gpu_index == o.gpu)
                    else {
                        return false;
                    };
                    let model = crate::gpu::model(&like.instance.model);
                    o.create.iter().any(|c| {
                        model.and_then(|m| m.profile(&c.profile)).is_some_and(|p| {
                            Instance::mig(
                                String::new(),
                                o.gpu,
                                like.instance.gpu_uuid.clone(),
                                &like.instance.model,
                                p,
                            )
                            .satisfies(req)
                        })
                    })
                })
            });
            if coming {
                waiting.push(*id);
            }
        }
        for id in waiting {
            self.set_reason(id, "MigReconfiguring");
        }
    }

    /// A node carried out reshape `seq`: `removed` instances are gone and
    /// `added` exist. The node is the truth about its instances: a report
    /// of an order the controller does not know (it restarted meanwhile, and
    /// the node registered again in the middle of the reshape) still
    /// updates the books, for what they still hold and lack.
    pub fn reshape_done(
        &mut self,
        node: &str,
        seq: u64,
        removed: &[String],
        added: Vec<Instance>,
    ) -> Result<Vec<Effect>, ClusterError> {
        if !self.nodes.contains_key(node) {
            return Err(ClusterError::UnknownNode(node.into()));
        }
        let orders = self.reshapes.entry(node.to_string()).or_default();
        let Some(k) = orders.iter().position(|o| o.seq == seq) else {
            return Ok(self.unknown_reshape_done(node, removed, added));
        };
        let order = orders.remove(k);
        // What was not removed (the node gave up) is in use again.
        for uuid in order.retire.iter().filter(|u| !removed.contains(u)) {
            self.set_retiring(node, uuid, false);
        }
        self.reshape_node(node, removed, added)?;
        Ok(vec![Effect::Node { name: node.into() }])
    }

    /// Freezes (or thaws) the layout of GPU `gpu` of `node`: the policy
    /// leaves a frozen GPU alone; an administrator may still apply a
    /// layout to it.
    pub fn set_mig_frozen(
        &mut self,
        node: &str,
        gpu: u32,
        frozen: bool,
    ) -> Result<Vec<Effect>, ClusterError> {
        let n = self
            .nodes
            .get_mut(node)
            .ok_or_else(|| ClusterError::UnknownNode(node.into()))?;
        if !n.instances.iter().any(|s| s.instance.gpu_index == gpu) {
            return Err(ClusterError::Refused(format!(
                "node {node} has no GPU {gpu}"
            )));
        }
        let changed = if frozen {
            n.mig_frozen.insert(gpu)
        } else {
            n.mig_frozen.remove(&gpu)
        };
        Ok(if changed {
            vec![Effect::Node { name: node.into() }]
        } else {
            Vec::new()
        })
    }

    /// An administrator's layout for GPU `gpu` of `node` (`3g.20gb,1g.5gb*4`):
    /// the instances the layout keeps in place stay, the others retire and
    /// go once nothing uses them, and the missing ones are made. Refused
    /// when the node does not re-partition that GPU, a reshape of it is
    /// under way, the layout cannot exist, or an instance it would remove
    /// is held or drained for an isolated job. Returns the reshape (none
    /// when the GPU has the layout already).
    pub fn order_layout(
        &mut self,
        node: &str,
        gpu: u32,
        layout: &str,
    ) -> Result<Vec<Effect>, ClusterError> {
        let refused = |why: String| Err(ClusterError::Refused(why));
        let n = self
            .nodes
            .get(node)
            .ok_or_else(|| ClusterError::UnknownNode(node.into()))?;
        if !n.reshape_gpus.contains(&gpu) {
            return refused(format!(
                "node {node} does not re-partition GPU {gpu} (not in MIG mode, or MIG changes not allowed in its gpus.toml)"
            ));
        }
        if self.reshapes_on(node).iter().any(|o| o.gpu == gpu) {
            return refused(format!(
                "a reshape of GPU {gpu} of node {node} is under way"
            ));
        }
        let slots: Vec<&super::InstanceSlot> = n
            .instances
            .iter()
            .filter(|s| s.instance.gpu_index == gpu)
            .collect();
        let Some(model) = slots
            .first()
            .and_then(|s| crate::gpu::model(&s.instance.model))
        else {
            return refused(format!("GPU {gpu} of node {node} has no known MIG table"));
        };
        let mut existing = Vec::new();
        for s in &slots {
            let (Some(p), Some(start)) = (s.instance.profile.as_deref(), s.instance.mig_start)
            else {
                return refused(format!(
                    "the placement of instance {} is not known",
                    s.instance.uuid
                ));
            };
            let Some(profile) = model.profile(p) else {
                return refused(format!(
                    "instance {} has a profile {p} {} does not have",
                    s.instance.uuid, model.name
                ));
            };
            existing.push(MigPlacement { profile, start });
        }
        let desired = crate::gpu::mig::parse_profiles(model, layout)
            .map_err(|e| ClusterError::Refused(e.to_string()))?;
        let change = crate::gpu::mig::reconcile(model, &existing, &desired)
            .map_err(|e| ClusterError::Refused(e.to_string()))?;
        if change.is_noop() {
            return Ok(Vec::new());
        }
        for &k in &change.destroy {
            let s = slots[k];
            if let Some(job) = s.isolated_owner.or(s.draining_for) {
                return refused(format!(
                    "instance {} is held for job {job}: wait for it to end, or choose a layout that keeps it",
                    s.instance.uuid
                ));
            }
        }
        let retire: Vec<String> = change
            .destroy
            .iter()
            .map(|&k| slots[k].instance.uuid.clone())
            .collect();
        Ok(vec![self.send_reshape(
            node.to_string(),
            gpu,
            retire,
            change.create,
        )])
    }

    /// Records a reshape order, marks its instances retiring, and returns
    /// the effect that sends it.
    fn send_reshape(
        &mut self,
        node: String,
        gpu: u32,
        retire: Vec<String>,
        create: Vec<MigPlacement>,
    ) -> Effect {
        self.reshape_seq += 1;
        for uuid in &retire {
            self.set_retiring(&node, uuid, true);
        }
        let order = ReshapeOrder {
            seq: self.reshape_seq,
            gpu,
            retire,
            create: create
                .iter()
                .map(|p| MigSlot {
                    profile: p.profile.name.into(),
                    start: p.start,
                })
                .collect(),
        };
        self.reshapes
            .entry(node.clone())
            .or_default()
            .push(order.clone());
        Effect::Reshape { node, order }
    }

    /// Node `node`'s GPUs as re-partitioning sees them.
    pub fn mig_info(&self, node: &str) -> Option<crate::wire::MigNodeInfo> {
        use crate::wire::{MigGpuInfo, MigInstanceInfo, MigSlotsInFlight};
        let n = self.nodes.get(node)?;
        let mut gpus: Vec<MigGpuInfo> = Vec::new();
        for s in &n.instances {
            let i = &s.instance;
            let k = match gpus.iter().position(|g| g.index == i.gpu_index) {
                Some(k) => k,
                None => {
                    gpus.push(MigGpuInfo {
                        index: i.gpu_index,
                        model: i.model.clone(),
                        reshapeable: n.reshape_gpus.contains(&i.gpu_index),
                        frozen: n.mig_frozen.contains(&i.gpu_index),
                        instances: Vec::new(),
                        reshaping: self
                            .reshapes_on(node)
                            .iter()
                            .filter(|o| o.gpu == i.gpu_index)
                            .map(|o| MigSlotsInFlight {
                                seq: o.seq,
                                retire: o.retire.clone(),
                                create: o.create.clone(),
                            })
                            .collect(),
                    });
                    gpus.len() - 1
                }
            };
            let state = if s.retiring {
                "retiring"
            } else if s.isolated_owner.is_some() {
                "isolated"
            } else if s.draining_for.is_some() {
                "draining"
            } else if s.active_tasks == 0 && s.processes == 0 && s.job_bytes.is_empty() {
                "idle"
            } else {
                "shared"
            };
            gpus[k].instances.push(MigInstanceInfo {
                uuid: i.uuid.clone(),
                profile: i.profile.clone(),
                start: i.mig_start,
                state: state.into(),
            });
        }
        for g in &mut gpus {
            g.instances.sort_by_key(|i| i.start);
        }
        gpus.sort_by_key(|g| g.index);
        Some(crate::wire::MigNodeInfo {
            node: node.into(),
            gpus,
        })
    }

    /// Books the instances an unknown order removed and added, where they
    /// still differ from the report.
    fn unknown_reshape_done(
        &mut self,
        node: &str,
        removed: &[String],
        added: Vec<Instance>,
    ) -> Vec<Effect> {
        let Some(n) = self.nodes.get(node) else {
            return Vec::new();
        };
        let has = |u: &str| n.instances.iter().any(|s| s.instance.uuid == u);
        let gone: Vec<String> = removed.iter().filter(|u| has(u)).cloned().collect();
        let new: Vec<Instance> = added.into_iter().filter(|i| !has(&i.uuid)).collect();
        if gone.is_empty() && new.is_empty() {
            return Vec::new();
        }
        match self.reshape_node(node, &gone, new) {
            Ok(()) => vec![Effect::Node { name: node.into() }],
            Err(_) => Vec::new(),
        }
    }

    /// A node registered: its books start from what it reported.
    pub(super) fn forget_reshapes(&mut self, node: &str) {
        self.reshapes.remove(node);
    }
}

/// The node's MIG GPUs as the policy sees them, by GPU index, and for
/// each the UUIDs of its live instances in the same order. Instances being
/// created by an order in flight come last, as `Creating`; a GPU with an
/// order in flight is shown (its room counts) but the policy never plans
/// over retiring or creating instances.
fn mig_gpus(
    node: &super::Node,
    in_flight: &[ReshapeOrder],
) -> (Vec<(u32, GpuUse)>, Vec<Vec<String>>) {
    let mut gpus: Vec<(u32, GpuUse)> = Vec::new();
    let mut uuids: Vec<Vec<String>> = Vec::new();
    for s in &node.instances {
        let i = &s.instance;
        if !node.reshape_gpus.contains(&i.gpu_index) || node.mig_frozen.contains(&i.gpu_index) {
            continue;
        }
        let (Some(profile), Some(start)) = (i.profile.as_deref(), i.mig_start) else {
            continue;
        };
        let Some(model) = crate::gpu::model(&i.model) else {
            continue;
        };
        let Some(profile) = model.profile(profile) else {
            continue;
        };
        let state = if s.retiring {
            Use::Retiring
        } else if s.isolated_owner.is_some() || s.draining_for.is_some() {
            Use::Isolated
        } else if s.active_tasks == 0 && s.processes == 0 && s.job_bytes.is_empty() {
            Use::Idle
        } else {
            Use::Shared
        };
        let k = match gpus.iter().position(|(g, _)| *g == i.gpu_index) {
            Some(k) => k,
            None => {
                gpus.push((
                    i.gpu_index,
                    GpuUse {
                        model,
                        instances: Vec::new(),
                        keep: node
                            .reshape_keep
                            .get(&i.gpu_index)
                            .into_iter()
                            .flatten()
                            .filter_map(|(p, n)| model.profile(p).map(|p| (p, *n)))
                            .collect(),
                    },
                ));
                uuids.push(Vec::new());
                gpus.len() - 1
            }
        };
        gpus[k].1.instances.push(InstanceUse {
            placement: MigPlacement { profile, start },
            state,
        });
        uuids[k].push(i.uuid.clone());
    }
    for o in in_flight {
        let Some(k) = gpus.iter().position(|(g, _)| *g == o.gpu) else {
            continue;
        };
        let model = gpus[k].1.model;
        for c in &o.create {
            if let Some(profile) = model.profile(&c.profile) {
                gpus[k].1.instances.push(InstanceUse {
                    placement: MigPlacement {
                        profile,
                        start: c.start,
                    },
                    state: Use::Creating,
                });
            }
        }
    }
    (gpus, uuids)
}

#[cfg(test)]
mod tests;
