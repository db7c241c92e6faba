//! The `BlindPlacement` placement policy.

use crate::placement::{InstanceLoad, PlacementPolicy, TaskRequest};

/// Memory-blind sharing (the papers' core-to-GPU ratio baseline, `cg:R`):
/// a process goes round robin to the open instance with the fewest
/// processes bound to it, whether its memory fits or not.
pub struct BlindPlacement;

impl PlacementPolicy for BlindPlacement {
    fn name(&self) -> &'static str {
        "blind"
    }
    fn choose(
        &self,
        instances: &[InstanceLoad],
        candidates: &[usize],
        _task: &TaskRequest,
    ) -> Option<usize> {
        candidates
            .iter()
            .copied()
            .min_by_key(|&i| (instances[i].processes, i))
    }
    fn memory_blind(&self) -> bool {
        true
    }
}
