//! What the book holds, summed: the reservations of one job (for its
//! GPU memory budget, `placement::budget`), the largest instance, and the
//! room left for new processes (for the controller's admission of shared
//! jobs).

use super::TaskBook;
use crate::job::JobId;

impl TaskBook {
    /// The memory of the largest instance shared tasks may use, bytes.
    pub fn largest_open_bytes(&self) -> u64 {
        self.instances
            .iter()
            .map(|i| i.memory_bytes)
            .max()
            .unwrap_or(0)
    }

    /// The GPU memory `job`'s tasks hold or wait for (placed, queued, and
    /// growths waiting), bytes.
    pub fn reserved_by(&self, job: JobId) -> u64 {
        self.usage_of(job).1
    }

    /// How many tasks `job` has placed or waiting, and the bytes they
    /// hold or wait for (growths waiting included), in one pass.
    pub fn usage_of(&self, job: JobId) -> (usize, u64) {
        let (mut tasks, mut bytes) = (0usize, 0u64);
        for a in self.active.values().filter(|a| a.job == job) {
            tasks += 1;
            bytes = bytes.saturating_add(a.bytes);
        }
        for (_, r) in self.waiting.iter().filter(|(_, r)| r.job == job) {
            tasks += 1;
            bytes = bytes.saturating_add(r.bytes);
        }
        let growing: u64 = self
            .growing
            .iter()
            .filter(|(t, _)| self.active.get(t).is_some_and(|a| a.job == job))
            .map(|(_, b)| *b)
            .sum();
        (tasks, bytes.saturating_add(growing))
    }

    /// The compute the instances open to shared work could still take
    /// now under the ceiling, after the tasks already waiting (they go
    /// first), and what a process nothing is known about counts: for the
    /// controller's admission of shared jobs. `None` where no ceiling
    /// bounds placement (no ceiling, or a memory-blind policy): memory
    /// alone decides, which the controller does not model.
    pub fn room_for_newcomers(&self) -> Option<crate::wire::SharedRoom> {
        let ceiling = self
            .compute_ceiling
            .filter(|_| !self.policy.memory_blind())?;
        let (mut compute, mut default_demand) = (0u64, 0u64);
        for i in self
            .instances
            .iter()
            .filter(|i| i.takes_new_processes() && i.owner.is_none())
        {
            let capacity = i.capacity.max(1) as u64;
            let each =
                (capacity * self.default_share as u64 / crate::compute::WHOLE_GPU as u64).max(1);
            let limit = capacity * ceiling as u64 / crate::compute::WHOLE_GPU as u64;
            // An empty instance takes any one process.
            let limit = if i.compute == 0 {
                limit.max(each)
            } else {
                limit
            };
            compute += limit.saturating_sub(i.compute as u64);
            default_demand = default_demand.max(each);
        }
        let queued: u64 = self
            .waiting
            .iter()
            .map(|(_, r)| {
                crate::compute::demand_on(r.share, crate::compute::WHOLE_GPU, self.default_share)
                    as u64
            })
            .sum();
        Some(crate::wire::SharedRoom {
            compute: compute.saturating_sub(queued).min(u32::MAX as u64) as u32,
            default_demand: default_demand.max(1).min(u32::MAX as u64) as u32,
        })
    }
}
