//! The `CasePlacement` placement policy.

use crate::placement::{InstanceLoad, PlacementPolicy, TaskRequest};

/// CASE Algorithm 2 (the multi-GPU paper's Algorithm 3): among instances
/// with enough free memory (and, under a compute ceiling, room for the
/// task's demand), the least busy one: the fewest in-use compute for its
/// size, then the fewest in-use warps; ties go to the least free memory
/// (best fit), then the first.
pub struct CasePlacement;

impl PlacementPolicy for CasePlacement {
    fn name(&self) -> &'static str {
        "case"
    }
    fn choose(
        &self,
        instances: &[InstanceLoad],
        candidates: &[usize],
        _task: &TaskRequest,
    ) -> Option<usize> {
        candidates.iter().copied().min_by_key(|&i| {
            let inst = &instances[i];
            (inst.compute_load(), inst.warps, inst.free_bytes(), i)
        })
    }
}
