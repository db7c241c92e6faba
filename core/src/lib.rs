//! gsched-core: the domain model and the scheduling decisions of gsched.
//!
//! Everything here is pure: no I/O, no async, no clock of its own. Callers pass
//! the current time in (unix seconds). The daemons (`gsched-ctld`,
//! `gsched-noded`) and the simulator drive the same functions.

pub mod allocation;
pub mod array;
pub mod cluster;
pub mod compute;
pub mod context;
pub mod dependency;
pub mod devices;
pub mod env;
pub mod fair_tree;
pub mod fairshare;
pub mod fence;
pub mod gpu;
pub mod gpu_time;
pub mod histogram;
pub mod hostlist;
pub mod job;
pub mod job_state;
pub mod launch;
pub mod leadership;
pub mod mps_recovery;
pub mod outcome;
pub mod pattern;
pub mod placement;
pub mod preempt;
pub mod priority;
pub mod probe;
pub mod qos;
pub mod qos_rights;
pub mod repartition;
pub mod resources;
pub mod rlimits;
pub mod sim;
pub mod slurm_options;
pub mod sm;
pub mod steps;
pub mod suspension;
pub mod time_quota;
pub mod tres;
pub mod units;
pub mod version;
pub mod views;
pub mod wire;

pub use fairshare::assoc_limits;
pub use gpu::mig;

pub use job::{Job, JobId, JobSpec, JobState};
