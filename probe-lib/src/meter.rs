//! Counting a process's GPU allocations against its reservation. Pure: the
//! interception library asks it what to do and tells it what happened.

use std::collections::HashMap;

/// Reservations grow in steps of at least this much, so a program that
/// allocates in small pieces does not ask gnoded for each of them.
pub const GROW_STEP: u64 = 64 << 20;

/// The allocations of one process and the reservation they live in.
#[derive(Debug, Default, Clone)]
pub struct Meter {
    /// Bytes gnoded has reserved for this process's task.
    pub reserved: u64,
    /// Bytes allocated now (including admitted allocations in flight).
    pub used: u64,
    /// Most bytes ever allocated at once.
    pub peak: u64,
    live: HashMap<u64, u64>,
    /// Highest warps seen in one launch, and the last value reported.
    pub warps: u64,
    pub warps_reported: u64,
}

/// What an allocation needs before it may go ahead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// It fits the reservation (and has been counted).
    Go,
    /// The reservation must grow by this much first.
    Grow { by: u64, exact: u64 },
}

impl Meter {
    pub fn new(reserved: u64) -> Meter {
        Meter {
            reserved,
            ..Default::default()
        }
    }

    /// Admits an allocation of `size` if it fits, counting it; else says how
    /// much to grow (a step, and the exact shortfall to try if the step
    /// does not fit).
    pub fn admit(&mut self, size: u64) -> Admit {
        let after = self.used.saturating_add(size);
        if after <= self.reserved {
            self.used = after;
            self.peak = self.peak.max(self.used);
            return Admit::Go;
        }
        let exact = after - self.reserved;
        Admit::Grow {
            by: exact.max(GROW_STEP),
            exact,
        }
    }

    /// The reservation grew.
    pub fn grown(&mut self, by: u64) {
        self.reserved += by;
    }

    /// An admitted allocation failed in the driver: uncount it.
    pub fn failed(&mut self, size: u64) {
        self.used = self.used.saturating_sub(size);
    }

    /// An admitted allocation succeeded at `handle` (pointer or handle).
    pub fn allocated(&mut self, handle: u64, size: u64) {
        if let Some(old) = self.live.insert(handle, size) {
            // A handle reused without a free we saw: the old one is gone.
            self.used = self.used.saturating_sub(old);
        }
    }

    /// `handle` was freed; returns the bytes it held, if it was counted.
    pub fn freed(&mut self, handle: u64) -> Option<u64> {
        let size = self.live.remove(&handle)?;
        self.used = self.used.saturating_sub(size);
        Some(size)
    }

    /// Free bytes of the reservation, as `cuMemGetInfo` reports them.
    pub fn free(&self) -> u64 {
        self.reserved.saturating_sub(self.used)
    }

    /// A kernel launch of `warps`; returns the new maximum to report, if it rose.
    pub fn launched(&mut self, warps: u64) -> Option<u64> {
        self.warps = self.warps.max(warps);
        if self.warps > self.warps_reported {
            self.warps_reported = self.warps;
            Some(self.warps)
        } else {
            None
        }
    }
}

/// Warps of a launch: threads per block rounded up to whole warps, times blocks.
pub fn launch_warps(grid: [u32; 3], block: [u32; 3]) -> u64 {
    let threads = block.iter().map(|&b| b.max(1) as u64).product::<u64>();
    let blocks = grid.iter().map(|&g| g.max(1) as u64).product::<u64>();
    threads.div_ceil(32) * blocks
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: u64 = 1 << 20;

    #[test]
    fn counts_grows_and_frees() {
        let mut m = Meter::new(100 * M);
        assert_eq!(m.admit(60 * M), Admit::Go);
        m.allocated(0x1000, 60 * M);
        assert_eq!(m.admit(30 * M), Admit::Go);
        m.allocated(0x2000, 30 * M);
        assert_eq!(m.free(), 10 * M);
        // 20M more: 10M short; asks for a step, or exactly the 10M.
        assert_eq!(
            m.admit(20 * M),
            Admit::Grow {
                by: GROW_STEP,
                exact: 10 * M
            }
        );
        m.grown(GROW_STEP);
        assert_eq!(m.admit(20 * M), Admit::Go);
        m.allocated(0x3000, 20 * M);
        assert_eq!(m.peak, 110 * M);
        assert_eq!(m.freed(0x1000), Some(60 * M));
        assert_eq!(m.freed(0x1000), None, "double free is not counted twice");
        assert_eq!(m.used, 50 * M);
        // A failed driver call gives its admission back.
        assert_eq!(m.admit(10 * M), Admit::Go);
        m.failed(10 * M);
        assert_eq!(m.used, 50 * M);
        assert_eq!(m.peak, 110 * M);
    }

    #[test]
    fn warps_of_launches() {
        assert_eq!(launch_warps([1, 1, 1], [32, 1, 1]), 1);
        assert_eq!(launch_warps([10, 2, 1], [33, 1, 1]), 40);
        assert_eq!(launch_warps([0, 0, 0], [0, 0, 0]), 1);
        let mut m = Meter::new(0);
        assert_eq!(m.launched(8), Some(8));
        assert_eq!(m.launched(4), None);
        assert_eq!(m.launched(16), Some(16));
    }
}
