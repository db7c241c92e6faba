//! The simulator's side of MIG re-partitioning: asks the
//! [`crate::repartition::RepartitionPolicy`] what to re-make, keeps new
//! processes off retiring instances, destroys them when idle, and creates
//! their replacements after the reconfiguration time.

use super::{Retiring, Sim, MIB, NODE};
use crate::gpu::{sim_gpu_uuid, sim_mig_uuid, Instance};
use crate::mig::MigPlacement;
use crate::repartition::{self, RepartitionPolicy, Reshape};

impl Sim<'_> {
    /// Finishes re-partitions whose instances are idle, then asks the
    /// policy for new ones.
    pub(super) fn repartition(&mut self) {
        let Some(policy) = self.repartition else {
            return;
        };
        self.finish_reshapes();
        let retiring: Vec<&String> = self.retiring.iter().flat_map(|r| &r.retire).collect();
        let slots = self.cluster.node(NODE).map(|n| &n.instances);
        let mut gpus: Vec<repartition::GpuUse> = self
            .gpus
            .iter()
            .map(|g| repartition::GpuUse {
                model: g.model,
                instances: Vec::new(),
            })
            .collect();
        for (k, inst) in self.inst.iter().enumerate() {
            let (true, Some((gi, placement))) = (self.alive[k], self.layout[k]) else {
                continue;
            };
            let isolated = slots
                .and_then(|v| v.iter().find(|s| s.instance.uuid == inst.uuid))
                .is_some_and(|s| s.isolated_owner.is_some() || s.draining_for.is_some());
            let state = if retiring.contains(&&inst.uuid) {
                repartition::Use::Retiring
            } else if isolated {
                repartition::Use::Isolated
            } else if self.node.tasks().is_idle(&inst.uuid) {
                repartition::Use::Idle
            } else {
                repartition::Use::Shared
            };
            gpus[gi]
                .instances
                .push(repartition::InstanceUse { placement, state });
        }
        // Instances being created come after the live ones.
        for (_, gi, create) in &self.creating {
            for &placement in create {
                gpus[*gi].instances.push(repartition::InstanceUse {
                    placement,
                    state: repartition::Use::Creating,
                });
            }
        }
        let demand =
            repartition::Demand::of(self.cluster.jobs(), self.node.tasks().waiting_len() > 0);
        let gpu_of = |k: usize| self.layout[k].map(|(g, _)| g);
        let plans: Vec<Reshape> = policy.plan(&gpus, &demand);
        for r in plans {
            // `retire` indexes the GPU's live instances, in `inst` order.
            let live: Vec<usize> = (0..self.inst.len())
                .filter(|&k| self.alive[k] && gpu_of(k) == Some(r.gpu))
                .collect();
            let retire: Vec<String> = r
                .retire
                .iter()
                .map(|&i| self.inst[live[i]].uuid.clone())
                .collect();
            for uuid in &retire {
                let now = self.now_ms();
                self.node.set_retiring(uuid, true, now);
                self.cluster.set_retiring(NODE, uuid, true);
            }
            self.retiring.push(Retiring {
                gpu: r.gpu,
                retire,
                create: r.create,
            });
        }
        self.finish_reshapes();
    }

    /// Destroys the instances of re-partitions that are now idle; their
    /// replacements appear `reconfig_secs` later.
    fn finish_reshapes(&mut self) {
        let mut k = 0;
        while k < self.retiring.len() {
            if !self.retiring[k]
                .retire
                .iter()
                .all(|u| self.node.tasks().is_idle(u))
            {
                k += 1;
                continue;
            }
            let r = self.retiring.swap_remove(k);
            let mut gone = Vec::new();
            for uuid in &r.retire {
                self.node.remove_instance(uuid);
                let i = self.uuid_index(uuid);
                self.alive[i] = false;
                gone.extend(self.layout[i].map(|(_, p)| p));
            }
            let _ = self.cluster.reshape_node(NODE, &r.retire, Vec::new());
            let names = |v: &[MigPlacement]| {
                v.iter()
                    .map(|p| format!("{}@{}", p.profile.name, p.start))
                    .collect::<Vec<_>>()
                    .join(",")
            };
            self.decisions.push(format!(
                "reshape gpu{} {} -> {}",
                r.gpu,
                names(&gone),
                names(&r.create)
            ));
            self.reshapes += 1;
            self.creating
                .push((self.now + self.reconfig_secs, r.gpu, r.create));
        }
    }

    /// Creates the instances of re-partitions that are due.
    pub(super) fn create_due(&mut self) {
        let now = self.now;
        let due: Vec<(f64, usize, Vec<MigPlacement>)> = {
            let (due, later) = std::mem::take(&mut self.creating)
                .into_iter()
                .partition(|(at, _, _)| *at <= now);
            self.creating = later;
            due
        };
        for (_, gi, create) in due {
            let model = self.gpus[gi].model;
            let mut fresh = Vec::new();
            for p in create {
                // The policy only makes layouts MIG allows.
                debug_assert!({
                    let live: Vec<MigPlacement> = (0..self.inst.len())
                        .filter(|&k| self.alive[k])
                        .filter_map(|k| self.layout[k].filter(|(g, _)| *g == gi).map(|(_, p)| p))
                        .collect();
                    crate::mig::check_create(model, &live, p.profile, p.start).is_ok()
                });
                let inst = Instance::mig(
                    sim_mig_uuid(NODE, gi, &p),
                    gi as u32,
                    sim_gpu_uuid(NODE, gi),
                    model.name,
                    p.profile,
                );
                self.inst.push(inst.clone());
                self.alive.push(true);
                self.layout.push(Some((gi, p)));
                fresh.push(inst);
            }
            let _ = self.cluster.reshape_node(NODE, &[], fresh.clone());
            for inst in fresh {
                let sms = Some(inst.sms);
                let now = self.now_ms();
                self.node.add_instance(
                    &inst.uuid,
                    inst.memory_mib * MIB,
                    sms,
                    crate::compute::instance_capacity(&inst),
                    now,
                );
                self.carry_out();
            }
        }
        for j in std::mem::take(&mut self.deferred) {
            self.advance(j);
        }
    }
}
