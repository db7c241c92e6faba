//! Compute demand measured while a process runs
//! ([`crate::placement::measured`]): the book counts what was measured in
//! place of the first guess, and places what a lower demand made room for.

use super::{Placed, TaskBook, TaskId};
use crate::job::JobId;

impl TaskBook {
    /// The capacity of the instance a process is bound to, if it is.
    pub fn pinned_capacity(&self, job: JobId, pid: u32) -> Option<u32> {
        self.pins
            .get(&(job, pid))
            .map(|&i| self.instances[i].capacity)
    }

    /// What process `pid` of `job` is counted to demand, its placed tasks
    /// together; `None` when none is placed.
    pub fn process_demand(&self, job: JobId, pid: u32) -> Option<u32> {
        self.active
            .values()
            .filter(|a| a.job == job && a.pid == pid)
            .map(|a| a.compute)
            .reduce(|a, b| a.saturating_add(b))
    }

    /// Process `pid` of `job` was measured to demand `demand` thousandths
    /// of a GPU (all its tasks together, shared evenly among them, each at
    /// most its instance). Returns the waiting tasks a lower demand made
    /// room for under the compute ceiling.
    pub fn set_process_demand(&mut self, job: JobId, pid: u32, demand: u32) -> Vec<Placed> {
        let ids: Vec<TaskId> = self
            .active
            .iter()
            .filter(|(_, a)| a.job == job && a.pid == pid)
            .map(|(id, _)| *id)
            .collect();
        if ids.is_empty() {
            return Vec::new();
        }
        let each = demand.div_ceil(ids.len() as u32).max(1);
        let mut lowered = false;
        for id in ids {
            let Some(a) = self.active.get_mut(&id) else {
                continue;
            };
            let inst = &mut self.instances[a.instance];
            let now = each.min(inst.capacity.max(1));
            lowered |= now < a.compute;
            inst.compute = inst.compute - a.compute + now;
            a.compute = now;
        }
        if lowered {
            self.retry()
        } else {
            Vec::new()
        }
    }
}
