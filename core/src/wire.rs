//! Messages between gctld and gnoded (sealed JSON over HTTP, see
//! `gsched_daemon::peer`). The public API's views are in `crate::views`
//! (re-exported here under their old paths).

use serde::{Deserialize, Serialize};

use crate::gpu::Instance;
use crate::job::{Job, JobId};
use crate::outcome::ProcessOutcome;

pub use crate::views::{
    AdminState, ErrorBody, InstanceInfo, JobInfo, JobList, MigChange, MigGpuInfo, MigInstanceInfo,
    MigNodeInfo, MigSlot, MigSlotsInFlight, NodeAdmin, NodeInfo, NodeStateChange, Priority,
    Reservation, Submitted,
};

/// A node introduces itself (at start, and again if the controller forgot it).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeRegistration {
    pub name: String,
    /// Random, kept in the node's state directory: the same across
    /// restarts of one gnoded, different for another daemon that claims the
    /// same name (empty from nodes that predate it).
    #[serde(default)]
    pub instance_id: String,
    /// Base URL of the node's API, e.g. `http://127.0.0.1:6818`.
    pub url: String,
    pub cpus: u32,
    pub memory_mib: u64,
    /// The size of the node's temporary file system, MiB (Slurm's TmpDisk
    /// of its TmpFS, `/tmp`): `--tmp` asks for at least so much. 0 from a
    /// node that does not say.
    #[serde(default)]
    pub tmp_disk_mib: u64,
    pub instances: Vec<Instance>,
    /// Non-isolated jobs the node runs at once; `None` lets the controller
    /// derive it from the instances.
    pub worker_limit: Option<u32>,
    /// Jobs whose processes are alive on the node.
    pub running: Vec<JobId>,
    /// The run generation of each of `running` (absent from nodes that
    /// predate generations: then the current run is assumed).
    #[serde(default)]
    pub runs: std::collections::BTreeMap<JobId, u32>,
    /// Jobs that ended while nobody was listening.
    pub ended: Vec<JobEnded>,
    /// How long the node goes without the controller before it kills its
    /// jobs, in ms (`crate::fence`): `None` asks for the controller's
    /// default, `Some(0)` says the node never fences itself.
    #[serde(default)]
    pub fence_timeout_ms: Option<u64>,
    /// The node's heartbeat interval, ms (0: not said).
    #[serde(default)]
    pub heartbeat_ms: u64,
    /// The GPUs (by index) whose MIG layout the node changes when the
    /// controller asks (`POST /v1/reshape`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reshape_gpus: Vec<u32>,
    /// Per GPU, the instances its re-partitioning must leave: (profile,
    /// at least how many) (`keep` in `gpus.toml`).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub reshape_keep: std::collections::BTreeMap<u32, Vec<(String, u32)>>,
    /// The node's gsched release (`crate::version`; empty from nodes of
    /// 0.1.0, which did not say).
    #[serde(default)]
    pub release: String,
    /// The protocol the node speaks (0 from nodes that did not say).
    #[serde(default)]
    pub protocol: u32,
    /// The highest leadership epoch the node has followed (0: none, or a
    /// node that does not say): a leader behind it steps down
    /// (`gsched_core::leadership::check_followed`).
    #[serde(default)]
    pub followed_epoch: i64,
}

/// The controller's answer to a registration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegistrationReply {
    /// After this long without a heartbeat the node is declared down.
    pub node_timeout_ms: u64,
    /// The fence timeout the node must keep (`None`: it does not fence).
    pub fence_timeout_ms: Option<u64>,
    /// The controller's gsched release (empty from controllers of 0.1.0).
    #[serde(default)]
    pub release: String,
    /// The leadership epoch the controller leads in: the node refuses
    /// calls of older ones from then on (`gsched_core::leadership`).
    #[serde(default)]
    pub epoch: i64,
}

/// Periodic liveness report.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Heartbeat {
    /// The sender's [`NodeRegistration::instance_id`].
    #[serde(default)]
    pub instance_id: String,
    pub running: Vec<JobId>,
    /// The run generation of each of `running`.
    #[serde(default)]
    pub runs: std::collections::BTreeMap<JobId, u32>,
    /// Those of `running` the node holds stopped (suspended).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub suspended: Vec<JobId>,
    /// State of each instance's MPS control daemon, where it has one.
    #[serde(default)]
    pub mps: std::collections::BTreeMap<String, crate::gpu::MpsState>,
    /// Shared tasks and their reservations on each instance.
    #[serde(default)]
    pub instances: std::collections::BTreeMap<String, InstanceUse>,
    /// Shared tasks waiting for a place on the node.
    #[serde(default)]
    pub tasks_waiting: u32,
    /// Those tasks, first in line first (a higher QOS may preempt shared
    /// jobs on an instance to make room for one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waiting_tasks: Vec<WaitingTask>,
    /// Probe requests, read to answered, since the node started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe_round_trip: Option<crate::histogram::LatencyHistogram>,
    /// Task placements, asked to placed, since the node started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement_wait: Option<crate::histogram::LatencyHistogram>,
    /// What each running job has used so far (its cgroup's counters).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub usage: std::collections::BTreeMap<JobId, crate::job::ResourceUsage>,
    /// What the steps of each running job have used so far.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub steps: std::collections::BTreeMap<JobId, crate::job::StepUsage>,
    /// What the node's open instances could still take of new shared
    /// processes under its compute ceiling (`None`: not bounded that way,
    /// or not said).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_room: Option<SharedRoom>,
    /// The node's available host memory (MemAvailable), MiB, where it
    /// reads one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_available_mib: Option<u64>,
}

/// The compute a node's instances open to shared work could still take
/// under its compute ceiling, thousandths of a GPU, after the tasks
/// waiting there; and what a new process nothing is known about counts
/// (the node's default share of its largest open instance).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SharedRoom {
    pub compute: u32,
    pub default_demand: u32,
}

/// A shared task waiting for memory on its node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitingTask {
    pub job: JobId,
    pub bytes: u64,
    /// The instance its process is bound to (it can go nowhere else).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
}

/// Shared tasks on one instance, as its node reports them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceUse {
    pub tasks: u32,
    pub reserved_bytes: u64,
    /// Warps the active tasks declared.
    #[serde(default)]
    pub warps: u64,
    /// Bytes reserved per job.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub jobs: std::collections::BTreeMap<JobId, u64>,
    /// Device memory in use as the GPU reports it (total less free), where
    /// the node can read it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used_bytes: Option<u64>,
    /// Processes bound to it (a process's first placement binds it there
    /// until it exits), with or without a task now.
    #[serde(default)]
    pub processes: u32,
}

/// The controller's answer to a heartbeat.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HeartbeatReply {
    /// `false`: the controller does not know this node; register again.
    pub known: bool,
}

/// The instances of a node being drained for isolated jobs (the whole
/// set): no new shared tasks there. A node keeps the highest `seq` it has
/// seen, so an older set that arrives late changes nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DrainRequest {
    pub instances: Vec<String>,
    pub seq: u64,
    /// The running jobs a drained instance still takes tasks of (expected
    /// to end before it must be free); absent from older controllers.
    #[serde(default)]
    pub open_to: std::collections::BTreeMap<String, Vec<JobId>>,
}

/// `POST /v1/reshape` on a node: re-partition GPU `gpu`. The `retire`
/// instances take no new work and are destroyed once nothing uses them;
/// then `create` are made in their place. `seq` names the order in the
/// node's report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReshapeRequest {
    pub seq: u64,
    pub gpu: u32,
    pub retire: Vec<String>,
    pub create: Vec<MigSlot>,
}

/// `POST /internal/v1/nodes/reshaped`: what a node's re-partition did.
/// `removed` are gone and `added` exist; `error` says why it stopped short
/// (what was not removed is in use again).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReshapeReport {
    pub node: String,
    pub seq: u64,
    pub removed: Vec<String>,
    pub added: Vec<crate::gpu::Instance>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Start a job on the node.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LaunchRequest {
    pub job: Job,
    /// The instances an isolated job holds, in the job's device order.
    #[serde(default)]
    pub instances: Vec<Instance>,
    pub cluster: String,
    pub partition: String,
    pub controller_url: String,
    /// The GPU memory peak (MiB) of the latest earlier run of the same job
    /// (same user and name), for the reservation of a job that states none.
    #[serde(default)]
    pub learned_footprint_mib: Option<u64>,
    /// The GPU share (thousandths of a GPU) the latest earlier run of the
    /// same job that measured one kept busy: its compute demand.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub learned_gpu_share: Option<u32>,
    /// A token for the job's user, given to the job as GSCHED_TOKEN so its
    /// own gsched and Slurm commands authenticate on the TCP API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_token: Option<String>,
    /// Start the job's processes now although its instances are still in
    /// use (shared tasks, or the isolated job before it, about to leave):
    /// they wait at their first CUDA call, through the interception
    /// library, until the instances are the job's alone. A node that
    /// cannot hold them there (no probe socket or no library, or the job
    /// turned the interception off) starts the job when the instances are
    /// free, as without it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub early: bool,
    /// The GPU time quota the job's shared processes are held to on their
    /// instance (its `--gpu-share`, or its QOS's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_quota: Option<crate::time_quota::TimeQuota>,
    /// The smallest GPU memory limit (MiB) of the job's QOS and
    /// association, which its shared processes' reservations on the node
    /// never exceed (`placement::budget`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_mem_cap_mib: Option<u64>,
}

/// Signal a job, or cancel it (SIGCONT, SIGTERM, then SIGKILL after the grace).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SignalRequest {
    pub signal: i32,
    pub cancel: bool,
    /// Only this run of the job (a run the controller no longer owns);
    /// `None`: whichever run the node has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<u32>,
    /// Which processes a signal that does not cancel goes to (absent:
    /// every one, as nodes before it did).
    #[serde(default)]
    pub scope: crate::outcome::SignalScope,
}

/// Stop (SIGSTOP) or continue (SIGCONT) run `run` of a job: Slurm's
/// suspend and resume. A node that has another run, or has it in that
/// state already, does nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SuspendRequest {
    pub run: u32,
    pub suspend: bool,
}

/// A job's processes ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobEnded {
    pub job_id: JobId,
    /// The run that ended (0 from nodes that predate run generations).
    #[serde(default)]
    pub run: u32,
    pub outcome: ProcessOutcome,
    /// Unix seconds when it ended.
    pub end_time: i64,
    /// What its processes used, from its cgroup (none where jobs are not
    /// confined).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<crate::job::ResourceUsage>,
    /// What its steps used (batch and `srun` steps), each from its own cgroup.
    #[serde(default, skip_serializing_if = "crate::job::StepUsage::is_empty")]
    pub steps: crate::job::StepUsage,
}

/// A batch of job endings from a node.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobEndReport {
    pub node: String,
    pub ended: Vec<JobEnded>,
}

/// Why a cluster key file cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyFileError {
    #[error(
        "cluster key file {path} can be read by other users (mode {mode:o}); run: chmod 600 {path}"
    )]
    TooOpen { path: String, mode: u32 },
    #[error("cluster key file {path} is empty or shorter than 16 characters")]
    TooShort { path: String },
}

/// Checks a key file's permission bits and contents; returns the key.
pub fn check_key_file(path: &str, mode: u32, contents: &str) -> Result<String, KeyFileError> {
    if mode & 0o077 != 0 {
        return Err(KeyFileError::TooOpen {
            path: path.into(),
            mode: mode & 0o777,
        });
    }
    let key = contents.trim();
    if key.len() < 16 {
        return Err(KeyFileError::TooShort { path: path.into() });
    }
    Ok(key.to_string())
}

/// Compares two keys in time independent of where they differ.
pub fn keys_match(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// The task reservations a node held open, as the controller recorded
/// them (`GET /internal/v1/nodes/NAME/tasks`), for the node to restore
/// after its restart.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpenTasks {
    pub tasks: Vec<crate::probe::TaskRecord>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drain_set_from_an_older_controller_opens_nothing() {
        let old: DrainRequest = serde_json::from_str(r#"{"instances":["I0"],"seq":3}"#).unwrap();
        assert!(old.open_to.is_empty());
        let new = DrainRequest {
            instances: vec!["I0".into()],
            seq: 4,
            open_to: [("I0".to_string(), vec![7])].into(),
        };
        let back: DrainRequest =
            serde_json::from_str(&serde_json::to_string(&new).unwrap()).unwrap();
        assert_eq!(back, new);
    }

    #[test]
    fn key_files() {
        assert!(matches!(
            check_key_file("k", 0o644, "0123456789abcdef"),
            Err(KeyFileError::TooOpen { .. })
        ));
        assert!(matches!(
            check_key_file("k", 0o600, "short"),
            Err(KeyFileError::TooShort { .. })
        ));
        assert_eq!(
            check_key_file("k", 0o100600, "0123456789abcdef\n").unwrap(),
            "0123456789abcdef"
        );
        assert!(keys_match("abc", "abc"));
        assert!(!keys_match("abc", "abd"));
        assert!(!keys_match("abc", "abcd"));
    }
}
