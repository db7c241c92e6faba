//! The `ExclusivePlacement` placement policy.

use crate::placement::{InstanceLoad, PlacementPolicy, TaskRequest};

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
