//! How much GPU memory one shared job may hold reserved on a node at once.
//! A job's processes ask for their reservations themselves (the
//! interception library sends `GSCHED_TASK_MEM`, which the job can set),
//! so the node holds each job to a budget worked out from what the
//! controller counted for it:
//! - a job that stated `--gpu-mem` may reserve at most that per task (plus
//!   the CUDA context the node reserves with each process's first task),
//!   and at most that times its tasks on the node in all;
//! - a job that stated none may hold at most the largest instance open to
//!   shared jobs per task on the node, in all;
//! - either way no more than the GPU memory limit of its QOS or
//!   association (`gres/gpumem` in `MaxTRESPerUser`, `GrpTRES`,
//!   `MaxTRES`), which a job alone may never exceed.
//!
//! A learned footprint is not a cap: it measured another run. A task
//! over its budget is refused at once (naming the budget) rather than
//! queued: only the job's own tasks could make room, and they may wait for
//! it. Pure.

use serde::{Deserialize, Serialize};

use super::PlacementError;
use crate::job::{JobId, JobSpec};

const MIB: u64 = 1 << 20;

/// A job's GPU memory budget on one node, bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemBudget {
    /// The most one task may hold (`None`: only the total binds).
    pub per_task: Option<u64>,
    /// The most all its tasks here may hold together.
    pub total: u64,
}

/// What the controller knows of a job that sets its node budget (kept in
/// gnoded's root-owned spool, so an adopted job keeps its budget).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct BudgetInput {
    /// `--gpu-mem`, MiB per task.
    #[serde(default)]
    pub stated_mib: Option<u64>,
    /// Its Slurm tasks on the node (`-n`, `--ntasks-per-node`; at least
    /// one counts): its processes that may each hold a reservation.
    #[serde(default)]
    pub ntasks: u32,
    /// The smallest GPU memory limit of its QOS and association, MiB.
    #[serde(default)]
    pub cap_mib: Option<u64>,
    /// The CUDA context reserved with each process's first task, and the
    /// largest instance open to shared jobs, bytes, as they were at the
    /// launch (kept so an adopted job's budget does not change under it:
    /// its processes still ask for the context they were told).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub largest_bytes: Option<u64>,
}

impl BudgetInput {
    /// A shared job's input: its `--gpu-mem`, the most tasks it runs on
    /// one node, and `cap_mib` (the controller's
    /// `Cluster::gpu_mem_cap`).
    pub fn of(spec: &JobSpec, cap_mib: Option<u64>) -> BudgetInput {
        let width = crate::allocation::width_of(&spec.slurm);
        let tasks = crate::allocation::tasks_per_node(&spec.slurm, width)
            .into_iter()
            .max()
            .unwrap_or(1);
        BudgetInput {
            stated_mib: spec.gpu.mem_mib,
            ntasks: tasks,
            cap_mib,
            ..BudgetInput::default()
        }
    }
}

impl MemBudget {
    /// The budget of a job on a node whose largest instance open to shared
    /// jobs has `largest` bytes, and which reserves `context` bytes for
    /// each process's CUDA context (where the input does not say).
    pub fn of(input: BudgetInput, largest: u64, context: u64) -> MemBudget {
        let largest = input.largest_bytes.unwrap_or(largest);
        let context = input.context_bytes.unwrap_or(context);
        let tasks = u64::from(input.ntasks.max(1));
        let per_task = input
            .stated_mib
            .map(|m| m.saturating_mul(MIB).saturating_add(context));
        let total = per_task
            .unwrap_or(largest.max(context))
            .saturating_mul(tasks);
        let total = match input.cap_mib {
            // The limit counts what the job asked for; each task's context
            // comes on top, as on the stated footprint.
            Some(cap) => total.min(
                cap.saturating_mul(MIB)
                    .saturating_add(context.saturating_mul(tasks)),
            ),
            None => total,
        };
        MemBudget { per_task, total }
    }

    /// Checks that a task of `job` holding `task_bytes` may hold `more`
    /// bytes on top, while the job's tasks here hold `held` in all
    /// (waiting ones included).
    pub fn check(
        &self,
        job: JobId,
        task_bytes: u64,
        held: u64,
        more: u64,
    ) -> Result<(), PlacementError> {
        let over_task = self
            .per_task
            .filter(|max| task_bytes.saturating_add(more) > *max);
        if let Some(max) = over_task {
            return Err(PlacementError::OverBudget {
                job,
                want: task_bytes.saturating_add(more),
                budget: max,
                what: "per task (its --gpu-mem and the CUDA context)",
            });
        }
        if held.saturating_add(more) > self.total {
            return Err(PlacementError::OverBudget {
                job,
                want: held.saturating_add(more),
                budget: self.total,
                what: "for all its tasks on this node",
            });
        }
        Ok(())
    }

    /// How much of a growth of `bytes` (at least `at_least`) fits the
    /// budget: the growth to ask the book for, or the refusal.
    pub fn fit_growth(
        &self,
        job: JobId,
        task_bytes: u64,
        held: u64,
        bytes: u64,
        at_least: u64,
    ) -> Result<u64, PlacementError> {
        self.check(job, task_bytes, held, at_least)?;
        let task_room = self
            .per_task
            .map_or(u64::MAX, |max| max.saturating_sub(task_bytes));
        let room = task_room.min(self.total.saturating_sub(held));
        Ok(bytes.min(room).max(at_least))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    #[test]
    fn a_stated_footprint_bounds_each_task_and_the_job() {
        let b = MemBudget::of(
            BudgetInput {
                stated_mib: Some(1024),
                ntasks: 2,
                ..BudgetInput::default()
            },
            40 * GIB,
            GIB / 2,
        );
        assert_eq!(b.per_task, Some(GIB + GIB / 2));
        assert_eq!(b.total, 3 * GIB);
        assert!(b.check(7, 0, 0, GIB + GIB / 2).is_ok());
        let e = b.check(7, 0, 0, 2 * GIB).unwrap_err().to_string();
        assert!(e.contains("job 7") && e.contains("per task"), "{e}");
        // A second task fits, a third does not.
        assert!(b.check(7, 0, GIB + GIB / 2, GIB + GIB / 2).is_ok());
        assert!(b.check(7, 0, 3 * GIB, GIB).is_err());
    }

    #[test]
    fn without_a_statement_one_largest_instance_per_task_and_the_qos_cap_binds() {
        let b = MemBudget::of(BudgetInput::default(), 10 * GIB, 0);
        assert_eq!(
            b,
            MemBudget {
                per_task: None,
                total: 10 * GIB
            }
        );
        // Past one instance's worth is refused.
        assert!(b.check(1, 0, 10 * GIB, GIB).is_err());
        let capped = MemBudget::of(
            BudgetInput {
                stated_mib: None,
                ntasks: 4,
                cap_mib: Some(2048),
                ..BudgetInput::default()
            },
            10 * GIB,
            0,
        );
        assert_eq!(capped.total, 2 * GIB);
    }

    #[test]
    fn a_growth_is_cut_to_the_room_left_or_refused() {
        let b = MemBudget {
            per_task: Some(4 * GIB),
            total: 6 * GIB,
        };
        assert_eq!(b.fit_growth(1, 3 * GIB, 3 * GIB, 2 * GIB, GIB / 2), Ok(GIB));
        assert!(b.fit_growth(1, 4 * GIB, 4 * GIB, GIB, GIB).is_err());
        // Nothing overflows on absurd numbers.
        assert!(b.check(1, u64::MAX, u64::MAX, u64::MAX).is_err());
    }
}
