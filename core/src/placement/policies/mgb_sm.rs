//! The `MgbSmPlacement` placement policy.

use crate::placement::{InstanceLoad, PlacementPolicy, TaskRequest};

/// The multi-GPU paper's Algorithm 2 ("MGB", memory and compute both
/// hard): a task goes to the first instance where its memory fits and all
/// the blocks of its kernel's first wave find an SM with a free block slot
/// and room for their warps, dealt round robin as the hardware does
/// ([`crate::sm`]); otherwise it waits. Instances whose SMs are unknown
/// count as having room.
pub struct MgbSmPlacement;

impl PlacementPolicy for MgbSmPlacement {
    fn name(&self) -> &'static str {
        "mgb-sm"
    }
    fn choose(
        &self,
        instances: &[InstanceLoad],
        candidates: &[usize],
        task: &TaskRequest,
    ) -> Option<usize> {
        candidates.iter().copied().find(|&i| {
            instances[i]
                .sms
                .as_ref()
                .is_none_or(|t| t.fit(task.kernel_shape()).is_some())
        })
    }
    fn uses_sm_slots(&self) -> bool {
        true
    }
}
