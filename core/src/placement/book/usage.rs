//! What the book holds, summed: the reservations of one job (for its
//! GPU memory budget, `placement::budget`) and the largest instance.

use super::TaskBook;
use crate::job::JobId;

impl TaskBook {
    /// How many tasks `job` has placed or waiting.
    pub fn tasks_of(&self, job: JobId) -> usize {
        self.active.values().filter(|a| a.job == job).count()
            + self.waiting.iter().filter(|(_, r)| r.job == job).count()
    }

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
        let placed: u64 = self
            .active
            .values()
            .filter(|a| a.job == job)
            .map(|a| a.bytes)
            .sum();
        let queued: u64 = self
            .waiting
            .iter()
            .filter(|(_, r)| r.job == job)
            .map(|(_, r)| r.bytes)
            .sum();
        let growing: u64 = self
            .growing
            .iter()
            .filter(|(t, _)| self.active.get(t).is_some_and(|a| a.job == job))
            .map(|(_, b)| *b)
            .sum();
        placed.saturating_add(queued).saturating_add(growing)
    }
}
