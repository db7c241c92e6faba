//! A process that allocates past its reservation when its instance has no
//! room for more: its allocation waits until memory is freed there, instead
//! of failing at once, unless nothing there could ever free it (every task
//! on the instance is itself waiting to grow). While a growth waits, no new
//! process is bound to that instance, so freed memory goes to it first.

use std::collections::VecDeque;

use super::TaskBook;
use crate::placement::{Placed, PlacementError, TaskId};

/// What became of a request to grow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Growth {
    /// Grown now, by this many bytes.
    Grown(u64),
    /// Waiting for room on its instance (see [`TaskBook::take_growth`]).
    Waiting,
}

impl TaskBook {
    /// Grows task `id` by `more` bytes on its instance, or by `at_least`
    /// if only that fits. When neither fits, the task waits to grow by
    /// `at_least`, unless it could never fit there, or every other task on
    /// its instance already waits to grow: then the growth is refused
    /// (`Full`), as nothing there would free memory.
    pub fn grow_or_wait(
        &mut self,
        id: TaskId,
        more: u64,
        at_least: u64,
    ) -> Result<Growth, PlacementError> {
        let at_least = at_least.clamp(1, more.max(1));
        let full = match self.grow(id, more) {
            Ok(()) => return Ok(Growth::Grown(more)),
            Err(e @ PlacementError::Full { .. }) => e,
            Err(e) => return Err(e),
        };
        if at_least < more && self.grow(id, at_least).is_ok() {
            return Ok(Growth::Grown(at_least));
        }
        let (i, bytes) = (self.active[&id].instance, self.active[&id].bytes);
        // More than the whole instance: no end of other tasks would make room.
        if bytes.saturating_add(at_least) > self.instances[i].memory_bytes {
            return Err(full);
        }
        self.growing.push_back((id, at_least));
        if self.growth_deadlocked(i) {
            self.growing.pop_back();
            return Err(full);
        }
        Ok(Growth::Waiting)
    }

    /// Whether a growth waits on instance `i`.
    pub(super) fn growth_pending_on(&self, i: usize) -> bool {
        self.growing
            .iter()
            .any(|(t, _)| self.active.get(t).is_some_and(|a| a.instance == i))
    }

    /// Whether every task on instance `i` waits to grow.
    fn growth_deadlocked(&self, i: usize) -> bool {
        self.active
            .iter()
            .filter(|(_, a)| a.instance == i)
            .all(|(t, _)| self.growing.iter().any(|(g, _)| g == t))
    }

    /// Grows the waiting tasks that fit now, in order; refuses, newest
    /// first, those on instances where every task waits to grow. Called
    /// before waiting tasks are placed.
    pub(super) fn serve_growth(&mut self) {
        if self.growing.is_empty() {
            return;
        }
        let mut still = VecDeque::new();
        for (id, more) in std::mem::take(&mut self.growing) {
            if !self.active.contains_key(&id) {
                // Its process is gone.
                self.grown.push((id, false));
            } else if self.grow(id, more).is_ok() {
                self.grown.push((id, true));
            } else {
                still.push_back((id, more));
            }
        }
        self.growing = still;
        while let Some(k) = self
            .growing
            .iter()
            .rposition(|(t, _)| self.growth_deadlocked(self.active[t].instance))
        {
            if let Some((id, _)) = self.growing.remove(k) {
                self.grown.push((id, false));
            }
        }
    }

    /// Stops a waiting growth (its wait ran too long). `None` if it was
    /// not waiting; else the waiting tasks placed now that its instance
    /// takes new processes again.
    pub fn cancel_growth(&mut self, id: TaskId) -> Option<Vec<Placed>> {
        let k = self.growing.iter().position(|(t, _)| *t == id)?;
        self.growing.remove(k);
        Some(self.retry())
    }

    /// The waiting growths decided since the last call: (task, grown). A
    /// task not grown was refused (or its process is gone).
    pub fn take_growth(&mut self) -> Vec<(TaskId, bool)> {
        std::mem::take(&mut self.grown)
    }
}
