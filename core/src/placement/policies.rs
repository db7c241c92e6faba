//! The placement policies: which open instance a task goes to (one type
//! each, registered in `placement_policy`).

use super::{InstanceLoad, PlacementPolicy, TaskRequest};

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

/// Slurm's exclusive use: a task goes to the instance its job holds
/// ([`TaskBook::set_owner`](crate::placement::TaskBook::set_owner)) and nowhere else; it waits while its job holds
/// none.
pub struct ExclusivePlacement;

impl PlacementPolicy for ExclusivePlacement {
    fn name(&self) -> &'static str {
        "exclusive"
    }
    fn choose(
        &self,
        instances: &[InstanceLoad],
        candidates: &[usize],
        task: &TaskRequest,
    ) -> Option<usize> {
        candidates
            .iter()
            .copied()
            .find(|&i| instances[i].owner == Some(task.job))
    }
}

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
