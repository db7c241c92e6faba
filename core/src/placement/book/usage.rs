//! What the book holds, summed: the reservations of one job (for its
//! GPU memory budget, `placement::budget`) and the largest instance.

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
}
