//! The simulator's node side of MIG re-partitioning. The decisions are the
//! controller's (`Cluster`'s planner in `cluster/reshapes.rs`, with the
//! same policy as a live gctld): each `Effect::Reshape` is carried out here
//! as gnoded carries it out, on the virtual clock. Its instances retire in
//! the node's book at once, are destroyed once idle there, and their
//! replacements appear `reconfig_secs` later, when the order is reported
//! done (`Cluster::reshape_done`).

use super::engine::{Creating, Retiring, Sim};
use super::NODE;
use crate::cluster::ReshapeOrder;
use crate::gpu::mig::MigPlacement;
use crate::gpu::{sim_gpu_uuid, sim_mig_uuid, Instance};

impl Sim<'_> {
    /// Takes a reshape order from the controller: its instances take no
    /// new process from now on.
    pub(super) fn reshape_ordered(&mut self, order: ReshapeOrder) {
        let gi = order.gpu as usize;
        let model = self.gpus[gi].model;
        let create: Vec<MigPlacement> = order
            .create
            .iter()
            .filter_map(|s| {
                model.profile(&s.profile).map(|profile| MigPlacement {
                    profile,
                    start: s.start,
                })
            })
            .collect();
        let now = self.now_ms();
        for uuid in &order.retire {
            self.books[0].set_retiring(uuid, true, now);
        }
        self.carry_out();
        self.retiring.push(Retiring {
            seq: order.seq,
            gpu: gi,
            retire: order.retire,
            create,
        });
        self.finish_reshapes();
    }

    /// Destroys the instances of re-partitions that are now idle; their
    /// replacements appear `reconfig_secs` later.
    pub(super) fn finish_reshapes(&mut self) {
        let mut k = 0;
        while k < self.retiring.len() {
            if !self.retiring[k]
                .retire
                .iter()
                .all(|u| self.books[0].tasks().is_idle(u))
            {
                k += 1;
                continue;
            }
            let r = self.retiring.swap_remove(k);
            let mut gone = Vec::new();
            for uuid in &r.retire {
                self.books[0].remove_instance(uuid);
                let i = self.uuid_index(uuid);
                self.alive[i] = false;
                gone.extend(self.layout[i].map(|(_, p)| p));
            }
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
            self.creating.push(Creating {
                at: self.now + self.reconfig_secs,
                seq: r.seq,
                gpu: r.gpu,
                removed: r.retire,
                create: r.create,
            });
        }
    }

    /// Creates the instances of re-partitions that are due, and reports
    /// each order done to the controller.
    pub(super) fn create_due(&mut self) {
        let now = self.now;
        let due: Vec<Creating> = {
            let (due, later) = std::mem::take(&mut self.creating)
                .into_iter()
                .partition(|c| c.at <= now);
            self.creating = later;
            due
        };
        for c in due {
            let gi = c.gpu;
            let model = self.gpus[gi].model;
            let mut fresh = Vec::new();
            for p in c.create {
                // The policy only makes layouts MIG allows.
                debug_assert!({
                    let live: Vec<MigPlacement> = (0..self.inst.len())
                        .filter(|&k| self.alive[k])
                        .filter_map(|k| self.layout[k].filter(|(g, _)| *g == gi).map(|(_, p)| p))
                        .collect();
                    crate::gpu::mig::check_create(model, &live, p.profile, p.start).is_ok()
                });
                let inst = Instance {
                    mig_start: Some(p.start),
                    ..Instance::mig(
                        sim_mig_uuid(NODE, gi, &p),
                        gi as u32,
                        sim_gpu_uuid(NODE, gi),
                        model.name,
                        p.profile,
                    )
                };
                self.inst.push(inst.clone());
                self.alive.push(true);
                self.inst_node.push(0);
                self.layout.push(Some((gi, p)));
                fresh.push(inst);
            }
            let _ = self
                .cluster
                .reshape_done(NODE, c.seq, &c.removed, fresh.clone());
            for inst in fresh {
                let now = self.now_ms();
                self.books[0].add_instance(&inst, now);
                self.carry_out();
            }
        }
        for j in std::mem::take(&mut self.deferred) {
            self.advance(j);
        }
    }
}
