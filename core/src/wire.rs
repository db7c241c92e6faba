//! Messages between gctld and gnoded (HTTP JSON, cluster key in a header).

use serde::{Deserialize, Serialize};

use crate::gpu::Instance;
use crate::job::{Job, JobId};
use crate::outcome::ProcessOutcome;

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
}

/// The controller's answer to a registration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegistrationReply {
    /// After this long without a heartbeat the node is declared down.
    pub node_timeout_ms: u64,
    /// The fence timeout the node must keep (`None`: it does not fence).
    pub fence_timeout_ms: Option<u64>,
}

/// Periodic liveness report.
#[derive(Debug, Clone, Serialize, Deserialize)]
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
}

/// One MIG instance to create: its profile and the memory slice where it
/// starts on its GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigSlot {
    pub profile: String,
    pub start: u32,
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

/// `GET /api/v1/nodes/{name}/mig`: a node's MIG GPUs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigNodeInfo {
    pub node: String,
    pub gpus: Vec<MigGpuInfo>,
}

/// One GPU of a node, as re-partitioning sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigGpuInfo {
    pub index: u32,
    pub model: String,
    /// The node changes its layout when asked.
    pub reshapeable: bool,
    /// An administrator froze its layout: the policy leaves it alone.
    pub frozen: bool,
    /// Its instances by placement: `state` is idle, shared, isolated,
    /// draining or retiring.
    pub instances: Vec<MigInstanceInfo>,
    /// Reshapes sent to the node and not yet done: `(seq, retire, create)`.
    pub reshaping: Vec<MigSlotsInFlight>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigInstanceInfo {
    pub uuid: String,
    pub profile: Option<String>,
    pub start: Option<u32>,
    pub state: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigSlotsInFlight {
    pub seq: u64,
    pub retire: Vec<String>,
    pub create: Vec<MigSlot>,
}

/// `POST /api/v1/nodes/{name}/mig` (administrators): freeze or thaw GPU
/// `gpu`'s layout, or apply `layout` (`3g.20gb,1g.5gb*4`) to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MigChange {
    pub gpu: u32,
    #[serde(default)]
    pub frozen: Option<bool>,
    #[serde(default)]
    pub layout: Option<String>,
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

/// Errors on the wire: `{"error": "..."}` with an HTTP status.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: String,
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

/// A job as the REST API, `gqueue --json` and `gacct --json` show it.
/// Field names are slurmrestd's where it has one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobInfo {
    pub job_id: JobId,
    pub name: String,
    pub job_state: crate::job::JobState,
    pub state_reason: Option<String>,
    pub exit_code: Option<i32>,
    pub exit_signal: Option<i32>,
    pub user_name: String,
    pub user_id: u32,
    pub group_id: u32,
    pub partition: String,
    /// Nodes the job runs or ran on, in hostlist form (`n[1-2]`; "" while
    /// pending); its batch script runs on the first.
    pub nodes: String,
    /// How many nodes it runs on, or asks for while pending (`-N`).
    #[serde(default = "one_node")]
    pub num_nodes: u32,
    /// Pending: when it is expected to start, where the controller can tell
    /// (`squeue --start`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_start: Option<i64>,
    pub submit_time: i64,
    pub start_time: Option<i64>,
    pub end_time: Option<i64>,
    /// Seconds run so far.
    pub elapsed: i64,
    /// Minutes, as slurmrestd; `null` is unlimited.
    pub time_limit: Option<u64>,
    pub current_working_directory: String,
    pub standard_output: String,
    pub standard_error: String,
    pub isolated: bool,
    pub gpu_request: crate::job::GpuRequest,
    /// The first of `gpu_instances` (kept for clients that read one).
    pub gpu_instance: Option<String>,
    /// The instances an isolated job holds.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpu_instances: Vec<String>,
    /// MiB, from the job's probes.
    pub gpu_mem_peak: Option<u64>,
    pub requeue: bool,
    pub restart_cnt: u32,
    /// Held by its user (`--hold`, `scontrol hold`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub held: bool,
    /// Taken off its priority (`--nice`, `Nice=`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub nice: i64,
    /// Its priority and the factors of it, for jobs the controller holds
    /// in memory (`sprio`, `squeue %Q`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<Priority>,
    /// What it waits for (`--dependency`), as Slurm writes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dependency: Option<String>,
    /// The job's array and its index in it, for array tasks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array: Option<crate::array::ArrayTask>,
    /// Slurm options recorded at submission (account, qos, comment, ...).
    #[serde(default, skip_serializing_if = "crate::job::SlurmOptions::is_empty")]
    pub slurm: crate::job::SlurmOptions,
    /// Steps started by `srun` in the current run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<crate::job::Step>,
    /// The uid that cancelled the job, when one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancelled_by: Option<u32>,
    /// RUNNING, but the node has not confirmed the launch yet (Slurm's
    /// CONFIGURING).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub launching: bool,
    /// RUNNING, but stopped (Slurm's SUSPENDED).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub suspended: bool,
    /// Seconds its run was suspended in all (sacct's `Suspended`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub suspended_secs: i64,
    /// What the job's processes used (its cgroup's counters): so far while
    /// it runs, in total once it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<crate::job::ResourceUsage>,
    /// What the batch step used, without its `srun` steps (sacct's `.batch`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_usage: Option<crate::job::ResourceUsage>,
}

fn one_node() -> u32 {
    1
}

impl JobInfo {
    /// The state in Slurm's words (CONFIGURING while launching).
    pub fn state_name(&self) -> &'static str {
        if self.launching && self.job_state == crate::job::JobState::Running {
            "CONFIGURING"
        } else if self.suspended && self.job_state == crate::job::JobState::Running {
            "SUSPENDED"
        } else {
            self.job_state.as_str()
        }
    }

    /// The state's short form, as squeue's `%t` (CF while launching).
    pub fn state_compact(&self) -> &'static str {
        if self.launching && self.job_state == crate::job::JobState::Running {
            "CF"
        } else if self.suspended && self.job_state == crate::job::JobState::Running {
            "S"
        } else {
            self.job_state.compact()
        }
    }

    /// The id as Slurm prints it: `A_i` for an array task, else `N`.
    pub fn display_id(&self) -> String {
        match &self.array {
            Some(t) => t.display_id(),
            None => self.job_id.to_string(),
        }
    }

    /// With its priority now (the controller's policy weighed it).
    pub fn weighed(mut self, priority: Priority) -> JobInfo {
        self.priority = Some(priority);
        self
    }

    /// With its expected start (pending jobs holding nodes).
    pub fn expecting(mut self, start: Option<i64>) -> JobInfo {
        self.expected_start = start;
        self
    }

    pub fn new(job: &Job, default_partition: &str, now: i64) -> JobInfo {
        // The batch node names the output files.
        let s = &job.spec;
        let node = job.node.clone().unwrap_or_default();
        let (out, err) = crate::pattern::job_output_paths(job, &node);
        JobInfo {
            job_id: job.id,
            name: s.name.clone(),
            job_state: job.state,
            state_reason: job.reason.clone(),
            exit_code: job.exit_code,
            exit_signal: job.exit_signal,
            user_name: s.user_name.clone(),
            user_id: s.uid,
            group_id: s.gid,
            partition: s
                .partition
                .clone()
                .unwrap_or_else(|| default_partition.to_string()),
            nodes: crate::hostlist::compress(&job.nodes()),
            num_nodes: match job.nodes().len() {
                0 => crate::allocation::width_of(&s.slurm),
                n => n as u32,
            },
            expected_start: None,
            submit_time: job.submit_time,
            start_time: job.start_time,
            end_time: job.end_time,
            elapsed: job.elapsed(now),
            time_limit: s.time_limit.map(|t| t.div_ceil(60)),
            current_working_directory: s.working_dir.clone(),
            standard_output: out,
            standard_error: err,
            isolated: s.isolated,
            gpu_request: s.gpu.clone(),
            gpu_instance: job.gpu_instances.first().cloned(),
            gpu_instances: job.gpu_instances.clone(),
            gpu_mem_peak: job.gpu_mem_peak,
            requeue: s.requeues(),
            restart_cnt: job.restarts,
            held: job.held,
            nice: s.nice,
            priority: None,
            dependency: s.dependency.as_ref().map(|d| d.to_string()),
            array: s.array_task.clone(),
            slurm: s.slurm.clone(),
            steps: job.steps.clone(),
            cancelled_by: job.cancelled_by,
            launching: job.launching,
            suspended: job.is_suspended(),
            suspended_secs: job.suspended_secs(job.end_time.unwrap_or(now)),
            usage: job.usage,
            batch_usage: job.batch_usage,
        }
    }
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

/// What an administrator set on a node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeAdmin {
    pub state: AdminState,
    /// Why, as the administrator gave it (Slurm requires one).
    pub reason: String,
    /// Who set it (user name) and when (unix seconds): sinfo -R's USER
    /// and TIMESTAMP.
    pub by: String,
    pub since: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AdminState {
    Drain,
    Down,
}

impl AdminState {
    pub fn as_str(self) -> &'static str {
        match self {
            AdminState::Drain => "drain",
            AdminState::Down => "down",
        }
    }

    pub fn parse(s: &str) -> Option<AdminState> {
        match s {
            "drain" => Some(AdminState::Drain),
            "down" => Some(AdminState::Down),
            _ => None,
        }
    }
}

/// What an administrator asks of a node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "lowercase")]
pub enum NodeStateChange {
    Drain { reason: String },
    Down { reason: String },
    Resume,
}

/// A job's priority and the weighted factors it is made of (`sprio`'s
/// columns; a factor a policy does not use is 0).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Priority {
    pub value: u64,
    pub age: u64,
    pub job_size: u64,
    #[serde(default)]
    pub fair_share: u64,
    #[serde(default)]
    pub qos: u64,
    #[serde(default)]
    pub partition: u64,
    /// The job's nice, subtracted from the sum.
    pub nice: i64,
}

/// The task reservations a node held open, as the controller recorded
/// them (`GET /internal/v1/nodes/NAME/tasks`), for the node to restore
/// after its restart.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpenTasks {
    pub tasks: Vec<crate::probe::TaskRecord>,
}

/// A node as the REST API and `ginfo --json` show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInfo {
    pub name: String,
    /// Slurm's words: IDLE, MIXED, ALLOCATED, DRAINING, DRAINED or DOWN.
    pub state: String,
    pub cpus: u32,
    pub memory_mib: u64,
    pub worker_limit: u32,
    pub workers_used: u32,
    pub running_jobs: Vec<JobId>,
    pub gpu_instances: usize,
    /// Where the controller reaches the node's gnoded (Slurm's NodeAddr).
    #[serde(default)]
    pub url: String,
    /// An administrator's drain or down: why, by whom, since when.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin: Option<NodeAdmin>,
}

/// A GPU instance as the REST API and `ginfo --json` show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceInfo {
    pub uuid: String,
    pub node: String,
    pub gpu_index: u32,
    pub gpu_uuid: String,
    pub model: String,
    pub profile: Option<String>,
    pub memory_mib: u64,
    /// Memory held: the whole instance for an isolated job, else the sum of
    /// task reservations.
    pub memory_reserved_mib: u64,
    pub sms: u32,
    pub isolated_owner: Option<JobId>,
    pub draining_for: Option<JobId>,
    /// While draining: when the shared jobs on it reach their time limits
    /// (unix seconds), if they all have one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain_expected_end: Option<i64>,
    pub active_tasks: u32,
    pub worker_limit: u32,
    /// Warps the active shared tasks declared.
    #[serde(default)]
    pub warps_in_use: u64,
    /// Memory each job reserves here: shared tasks' reservations, or the
    /// whole instance for its isolated owner.
    #[serde(default)]
    pub reservations: Vec<Reservation>,
    /// Memory in use as the GPU reports it, where the node can read it.
    #[serde(default)]
    pub memory_used_mib: Option<u64>,
    /// The instance's MPS control daemon, when it has one.
    #[serde(default)]
    pub mps: Option<crate::gpu::Mps>,
    /// Its GPU's link domain (NVLink or one PCIe switch), where the node
    /// knows it ([`crate::gpu::Instance::link_domain`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_domain: Option<u32>,
    /// Being re-partitioned: no new work goes there, and it is destroyed
    /// once idle.
    #[serde(default)]
    pub retiring: bool,
    /// Where a MIG instance starts on its GPU (memory slice).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mig_start: Option<u32>,
}

/// One job's memory on one instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reservation {
    pub job_id: JobId,
    pub memory_mib: u64,
}

impl InstanceInfo {
    /// With the drain's expected end (`Cluster::drain_expected_end`).
    pub fn with_drain_end(mut self, end: Option<i64>) -> InstanceInfo {
        self.drain_expected_end = end;
        self
    }
}

/// `GET /api/v1/jobs` answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobList {
    pub jobs: Vec<JobInfo>,
    /// Set when there may be more: ask again with `after` set to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_after: Option<JobId>,
}

/// `POST /api/v1/jobs` answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Submitted {
    pub job_id: JobId,
}

#[cfg(test)]
mod tests {
    use super::*;

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
