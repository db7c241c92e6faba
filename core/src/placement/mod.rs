//! Placing probed GPU tasks on a node's instances (CASE Algorithm 2).
//!
//! [`TaskBook`] keeps each instance's reservations and in-use warps, which
//! instances are closed, the process-to-instance pins, and the queue of
//! waiting tasks. [`NodeBook`] is the node's whole placement state around
//! it: holds for isolated jobs, the controller's drains, settling after a
//! process dies, processes recently gone, records and waiting growths. Both
//! are pure: gnoded's probe server and the simulator feed the `NodeBook`
//! requests and releases and carry out the events it returns. The choice
//! among instances is a [`PlacementPolicy`].

use crate::job::JobId;
use crate::sm::{KernelShape, SmTable};

pub use crate::probe::TaskId;

/// One instance as placement sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceLoad {
    pub uuid: String,
    pub memory_bytes: u64,
    pub reserved_bytes: u64,
    pub warps: u64,
    /// The part of its GPU the instance offers, in thousandths of the GPU
    /// ([`crate::compute::instance_capacity`]).
    pub capacity: u32,
    /// What the tasks on it demand together, in the same thousandths.
    pub compute: u32,
    /// Free resident block and warp slots per SM, where known; only
    /// policies that treat compute as a hard limit use them.
    pub sms: Option<SmTable>,
    /// Held by an isolated job, or being drained for one: no placements.
    pub closed: bool,
    /// Closed, yet open to these jobs' tasks: shared jobs the controller
    /// expects to end before the isolated job it drains the instance for
    /// could have it (backfill into the drain; `drain_backfill`).
    pub open_to: Vec<JobId>,
    /// Held by this job (Slurm's exclusive use): only its tasks go here.
    pub owner: Option<JobId>,
    /// Processes bound here by their first placement.
    pub processes: u32,
    /// Being re-partitioned: no new process is bound here; those bound
    /// here go on until they exit.
    pub retiring: bool,
    /// Its MPS server is down: no new process is bound here until it is
    /// back (a process started now would run without MPS, or not at all).
    pub mps_down: bool,
    /// A job's process uses it without a placement (it bypassed the
    /// interception): no new process is bound here until that process is
    /// gone, as if its job held the instance.
    pub bypassed: bool,
}

impl InstanceLoad {
    /// An instance with nothing on it.
    fn empty(uuid: String, memory_bytes: u64) -> InstanceLoad {
        InstanceLoad {
            uuid,
            memory_bytes,
            reserved_bytes: 0,
            warps: 0,
            capacity: crate::compute::WHOLE_GPU,
            compute: 0,
            sms: None,
            closed: false,
            open_to: Vec::new(),
            owner: None,
            processes: 0,
            retiring: false,
            mps_down: false,
            bypassed: false,
        }
    }

    /// Whether a new process may be bound to it (by anyone it is open to):
    /// not closed, re-partitioned, without its MPS server, or bypassed.
    pub fn takes_new_processes(&self) -> bool {
        !self.closed && !self.retiring && !self.mps_down && !self.bypassed
    }

    pub fn free_bytes(&self) -> u64 {
        self.memory_bytes.saturating_sub(self.reserved_bytes)
    }

    /// How busy the tasks on it keep it, in thousandths of its capacity.
    pub fn compute_load(&self) -> u64 {
        self.compute as u64 * crate::compute::WHOLE_GPU as u64 / self.capacity.max(1) as u64
    }
}

/// A task asking for a place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskRequest {
    pub job: JobId,
    /// The process the task belongs to: its first placement pins it.
    pub pid: u32,
    pub bytes: u64,
    pub warps: u64,
    /// Its compute demand: the share of a whole GPU it keeps busy, in
    /// thousandths ([`crate::compute`]); `None`: the node's default part
    /// of whichever instance it gets.
    pub share: Option<u32>,
    /// The launch shape of the task's kernel, when the probe reports it.
    pub shape: Option<KernelShape>,
}

impl TaskRequest {
    /// The kernel shape: as reported, or else `warps` taken as blocks of
    /// 256 threads (8 warps), the most common block size.
    pub fn kernel_shape(&self) -> KernelShape {
        self.shape.unwrap_or(KernelShape {
            blocks: self.warps.div_ceil(8),
            block_warps: 8,
        })
    }
}

/// Chooses an instance for a task among the open ones that can hold it.
pub trait PlacementPolicy: Send + Sync {
    fn name(&self) -> &'static str;
    /// Index into `instances` of the chosen one, or `None` to wait. Only
    /// instances in `candidates` (open, enough free memory) may be chosen.
    fn choose(
        &self,
        instances: &[InstanceLoad],
        candidates: &[usize],
        task: &TaskRequest,
    ) -> Option<usize>;
    /// A memory-blind policy is offered every open instance, whether the
    /// task fits or not; placing a task where it does not fit is an
    /// overflow ([`PlacementError::Overflow`]), an out-of-memory crash on a
    /// real GPU.
    fn memory_blind(&self) -> bool {
        false
    }
    /// Whether the policy looks at per-SM slots; the book keeps SM tables
    /// (work on every placement) only for such policies.
    fn uses_sm_slots(&self) -> bool {
        false
    }
}

/// Where a task was put.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placed {
    pub task: TaskId,
    pub job: JobId,
    pub pid: u32,
    pub instance: String,
    pub bytes: u64,
    pub warps: u64,
    /// The compute demand it counts for on its instance (thousandths of a
    /// whole GPU).
    pub share: u32,
}

/// What happened to a task that asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Begin {
    Placed(Placed),
    /// Queued; it is placed by a later release (returned from that call).
    Waiting(TaskId),
}

/// Why a request cannot be served.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    #[error("task needs {need} bytes but the largest instance open to shared jobs has {largest} bytes: it can never be placed")]
    NeverFits { need: u64, largest: u64 },
    #[error("task needs {need} bytes but this process is bound to instance {instance}, which has {total} bytes")]
    NeverFitsPinned {
        need: u64,
        instance: String,
        total: u64,
    },
    #[error("task needs {want} bytes but instance {instance}, where a memory-blind policy put it, has {free} bytes free: out of memory")]
    Overflow {
        instance: String,
        free: u64,
        want: u64,
    },
    #[error("no such task {0}")]
    NoSuchTask(TaskId),
    #[error("instance {instance} has {free} bytes free; {want} more were asked")]
    Full {
        instance: String,
        free: u64,
        want: u64,
    },
    #[error("job {job} has {max} GPU tasks on this node, the most one job may have at once: end some first")]
    TooManyTasks { job: JobId, max: usize },
    #[error("job {job} would hold {want} bytes of GPU memory, over its budget of {budget} bytes {what}: state more with --gpu-mem or more tasks")]
    OverBudget {
        job: JobId,
        want: u64,
        budget: u64,
        what: &'static str,
    },
}

mod book;
pub mod budget;
pub mod measured;
mod node;
mod policies;

pub use book::{Growth, KeepUse, TaskBook, DEFAULT_MAX_OVERTAKES};
pub use node::{NodeBook, NodeEvent, DEFAULT_HOLD_BETWEEN_MS, RECENTLY_GONE_MS, SETTLE_MS};
pub use policies::{
    placement_names, placement_policy, BlindPlacement, CasePlacement, ExclusivePlacement,
    MgbSmPlacement, PlacementEntry, PLACEMENTS,
};
