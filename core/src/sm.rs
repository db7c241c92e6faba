//! Per-SM resident slots: the hardware's placement of thread blocks on
//! streaming multiprocessors, emulated for the multi-GPU paper's
//! Algorithm 2 (`mgb-sm`), where compute is a hard limit like memory.
//!
//! An SM holds at most [`MAX_BLOCKS_PER_SM`] resident blocks and
//! [`MAX_WARPS_PER_SM`] resident warps (the limits of compute capability
//! 8.0 and 9.0, i.e. every GPU model gsched knows: A30, A100, H100, H200).
//! A kernel's blocks are dealt to SMs round robin, each block to the next
//! SM with a free block slot and room for its warps. A kernel with more
//! blocks than an empty instance can hold at once runs in waves; only its
//! first wave is resident, so that is what it reserves.

use serde::{Deserialize, Serialize};

/// Resident thread blocks per SM (compute capability 8.0 and 9.0).
pub const MAX_BLOCKS_PER_SM: u32 = 32;
/// Resident warps per SM (compute capability 8.0 and 9.0).
pub const MAX_WARPS_PER_SM: u32 = 64;

/// A kernel's launch shape: how many thread blocks, of how many warps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelShape {
    pub blocks: u64,
    /// Warps per block (threads per block / 32, rounded up); 1 to 32.
    pub block_warps: u32,
}

impl KernelShape {
    /// The shape of a launch with `blocks` blocks of `threads` threads.
    pub fn from_launch(blocks: u64, threads: u64) -> KernelShape {
        KernelShape {
            blocks,
            block_warps: threads.div_ceil(32).clamp(1, 32) as u32,
        }
    }

    pub fn warps(&self) -> u64 {
        self.blocks.saturating_mul(self.block_warps as u64)
    }
}

/// Free resident slots of each SM of one instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SmTable {
    /// (free blocks, free warps) per SM.
    free: Vec<(u32, u32)>,
}

impl SmTable {
    /// An empty instance of `sms` SMs.
    pub fn new(sms: u32) -> SmTable {
        SmTable {
            free: vec![(MAX_BLOCKS_PER_SM, MAX_WARPS_PER_SM); sms as usize],
        }
    }

    pub fn sms(&self) -> usize {
        self.free.len()
    }

    pub fn free_warps(&self) -> u64 {
        self.free.iter().map(|&(_, w)| w as u64).sum()
    }

    /// Blocks of `block_warps` warps that one empty SM holds.
    fn per_sm(block_warps: u32) -> u32 {
        MAX_BLOCKS_PER_SM.min(MAX_WARPS_PER_SM / block_warps.clamp(1, 32))
    }

    /// The blocks of `shape` resident at once on an empty instance (its
    /// first wave).
    pub fn wave(&self, shape: KernelShape) -> u64 {
        shape
            .blocks
            .min(self.free.len() as u64 * Self::per_sm(shape.block_warps) as u64)
    }

    /// Blocks per SM where the first wave of `shape` would go, dealt round
    /// robin; `None` when some block finds no SM with room.
    pub fn fit(&self, shape: KernelShape) -> Option<Vec<u32>> {
        let n = self.free.len();
        if n == 0 {
            return None;
        }
        let w = shape.block_warps.clamp(1, 32);
        // How many more blocks each SM can take.
        let room: Vec<u32> = self
            .free
            .iter()
            .map(|&(b, free_w)| b.min(free_w / w))
            .collect();
        let wave = self.wave(shape);
        if wave > room.iter().map(|&r| r as u64).sum::<u64>() {
            return None;
        }
        // Round robin: every pass gives one block to each SM that still has
        // room, until the wave is placed. Computed pass by pass in bulk.
        let mut taken = vec![0u32; n];
        let mut left = wave;
        while left > 0 {
            let open: Vec<usize> = (0..n).filter(|&s| taken[s] < room[s]).collect();
            // Whole passes all open SMs can take.
            let min_room = open.iter().map(|&s| room[s] - taken[s]).min()?;
            let passes = (left / open.len() as u64).min(min_room as u64) as u32;
            if passes > 0 {
                for &s in &open {
                    taken[s] += passes;
                }
                left -= passes as u64 * open.len() as u64;
            } else {
                // Fewer blocks left than open SMs: one each, in SM order.
                for &s in open.iter().take(left as usize) {
                    taken[s] += 1;
                }
                left = 0;
            }
        }
        Some(taken)
    }

    /// Takes the slots `fit` returned for blocks of `block_warps` warps.
    pub fn take(&mut self, block_warps: u32, blocks: &[u32]) {
        let w = block_warps.clamp(1, 32);
        for (slot, &b) in self.free.iter_mut().zip(blocks) {
            slot.0 -= b;
            slot.1 -= b * w;
        }
    }

    /// Gives back slots taken by [`SmTable::take`].
    pub fn give_back(&mut self, block_warps: u32, blocks: &[u32]) {
        let w = block_warps.clamp(1, 32);
        for (slot, &b) in self.free.iter_mut().zip(blocks) {
            slot.0 = (slot.0 + b).min(MAX_BLOCKS_PER_SM);
            slot.1 = (slot.1 + b * w).min(MAX_WARPS_PER_SM);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn shape(blocks: u64, block_warps: u32) -> KernelShape {
        KernelShape {
            blocks,
            block_warps,
        }
    }

    #[test]
    fn blocks_are_dealt_round_robin() {
        let t = SmTable::new(4);
        assert_eq!(t.fit(shape(6, 8)), Some(vec![2, 2, 1, 1]));
        assert_eq!(t.fit(shape(1, 8)), Some(vec![1, 0, 0, 0]));
    }

    #[test]
    fn warps_per_sm_limit_the_blocks() {
        let mut t = SmTable::new(2);
        // 16-warp blocks: 4 per SM (64 warps), 8 on two SMs.
        assert_eq!(t.wave(shape(100, 16)), 8);
        let a = t.fit(shape(6, 16)).unwrap();
        assert_eq!(a, vec![3, 3]);
        t.take(16, &a);
        // One 16-warp block per SM is left; a kernel needing 3 waits.
        assert!(t.fit(shape(3, 16)).is_none());
        assert_eq!(t.fit(shape(2, 16)), Some(vec![1, 1]));
        // Small blocks still fit in the 16 warps left per SM.
        assert_eq!(t.fit(shape(8, 4)), Some(vec![4, 4]));
        t.give_back(16, &a);
        assert_eq!(t, SmTable::new(2));
    }

    #[test]
    fn the_block_slot_limit_counts_too() {
        let mut t = SmTable::new(1);
        // 1-warp blocks: 32 blocks fill the block slots with 32 warps free.
        let a = t.fit(shape(32, 1)).unwrap();
        t.take(1, &a);
        assert_eq!(t.free_warps(), 32);
        assert!(t.fit(shape(1, 1)).is_none());
    }

    #[test]
    fn a_kernel_bigger_than_the_instance_reserves_one_wave() {
        let t = SmTable::new(14);
        // 8-warp blocks: 8 per SM, 112 at once on 14 SMs.
        let a = t.fit(shape(10_000, 8)).unwrap();
        assert_eq!(a, vec![8; 14]);
    }

    #[test]
    fn launch_shapes_round_threads_up_to_warps() {
        assert_eq!(KernelShape::from_launch(10, 256).block_warps, 8);
        assert_eq!(KernelShape::from_launch(10, 33).block_warps, 2);
        assert_eq!(KernelShape::from_launch(10, 0).block_warps, 1);
        assert_eq!(KernelShape::from_launch(10, 4096).block_warps, 32);
    }

    proptest! {
        /// Taking and giving back any sequence of fits never exceeds the
        /// limits and restores the table.
        #[test]
        fn take_and_give_back_keep_the_limits(
            sms in 1u32..20,
            kernels in proptest::collection::vec((1u64..400, 1u32..33), 1..12),
        ) {
            let mut t = SmTable::new(sms);
            let mut held = Vec::new();
            for (blocks, w) in kernels {
                if let Some(a) = t.fit(shape(blocks, w)) {
                    prop_assert_eq!(a.iter().map(|&b| b as u64).sum::<u64>(), t.wave(shape(blocks, w)));
                    t.take(w, &a);
                    for &(b, fw) in &t.free {
                        prop_assert!(b <= MAX_BLOCKS_PER_SM && fw <= MAX_WARPS_PER_SM);
                    }
                    held.push((w, a));
                }
            }
            for (w, a) in held.into_iter().rev() {
                t.give_back(w, &a);
            }
            prop_assert_eq!(t, SmTable::new(sms));
        }
    }
}
