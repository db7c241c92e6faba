//! What the REST API and the commands show (jobs, nodes, instances, MIG
//! layouts, priorities, errors): the public views, apart from the
//! daemons' own messages (`crate::wire`, which re-exports these under
//! their old paths).

use serde::{Deserialize, Serialize};

use crate::job::{Job, JobId};

fn one_node() -> u32 {
    1
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

/// `GET /api/v1/nodes/{name}/mig`: a node's MIG GPUs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct MigNodeInfo {
    pub node: String,
    pub gpus: Vec<MigGpuInfo>,
}

/// One GPU of a node, as re-partitioning sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
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

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct MigInstanceInfo {
    pub uuid: String,
    pub profile: Option<String>,
    pub start: Option<u32>,
    pub state: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct MigSlotsInFlight {
    pub seq: u64,
    pub retire: Vec<String>,
    pub create: Vec<MigSlot>,
}

/// `POST /api/v1/nodes/{name}/mig` (administrators): freeze or thaw GPU
/// `gpu`'s layout, or apply `layout` (`3g.20gb,1g.5gb*4`) to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MigChange {
    pub gpu: u32,
    #[serde(default)]
    pub frozen: Option<bool>,
    #[serde(default)]
    pub layout: Option<String>,
}

/// Errors on the wire: `{"error": "..."}` with an HTTP status.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ErrorBody {
    pub error: String,
}

/// A job as the REST API, `gqueue --json` and `gacct --json` show it.
/// Field names are slurmrestd's where it has one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
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
    /// Not started before this (`--begin`, unix seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub begin: Option<i64>,
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
    /// CANCELLED, and its processes not yet gone (Slurm's COMPLETING,
    /// `CG`): it keeps its resources until its node reports the end.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub completing: bool,
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

impl JobInfo {
    /// The state in Slurm's words (CONFIGURING while launching).
    pub fn state_name(&self) -> &'static str {
        if self.completing {
            "COMPLETING"
        } else if self.launching && self.job_state == crate::job::JobState::Running {
            "CONFIGURING"
        } else if self.suspended && self.job_state == crate::job::JobState::Running {
            "SUSPENDED"
        } else {
            self.job_state.as_str()
        }
    }

    /// The state's short form, as squeue's `%t` (CF while launching).
    pub fn state_compact(&self) -> &'static str {
        if self.completing {
            "CG"
        } else if self.launching && self.job_state == crate::job::JobState::Running {
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
            job_state: job.shown_state(),
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
            begin: s.begin,
            dependency: s.dependency.as_ref().map(|d| d.to_string()),
            array: s.array_task.clone(),
            slurm: s.slurm.clone(),
            steps: job.steps.clone(),
            cancelled_by: job.cancelled_by,
            launching: job.launching,
            suspended: job.is_suspended(),
            completing: job.cancelling(),
            suspended_secs: job.suspended_secs(job.end_time.unwrap_or(now)),
            usage: job.usage,
            batch_usage: job.batch_usage,
        }
    }
}

/// What an administrator set on a node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct NodeAdmin {
    pub state: AdminState,
    /// Why, as the administrator gave it (Slurm requires one).
    pub reason: String,
    /// Who set it (user name) and when (unix seconds): sinfo -R's USER
    /// and TIMESTAMP.
    pub by: String,
    pub since: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "state", rename_all = "lowercase")]
pub enum NodeStateChange {
    Drain { reason: String },
    Down { reason: String },
    Resume,
}

/// A job's priority and the weighted factors it is made of (`sprio`'s
/// columns; a factor a policy does not use is 0).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
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

/// A node as the REST API and `ginfo --json` show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct NodeInfo {
    pub name: String,
    /// Slurm's words: IDLE, MIXED, ALLOCATED, DRAINING, DRAINED or DOWN.
    pub state: String,
    pub cpus: u32,
    pub memory_mib: u64,
    /// Its temporary file system's size, MiB (Slurm's TmpDisk).
    #[serde(default)]
    pub tmp_disk_mib: u64,
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
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
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct JobList {
    pub jobs: Vec<JobInfo>,
    /// Set when there may be more: ask again with `after` set to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_after: Option<JobId>,
}

/// `POST /api/v1/jobs` answer.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Submitted {
    pub job_id: JobId,
}

/// One MIG instance to create: its profile and the memory slice where it
/// starts on its GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct MigSlot {
    pub profile: String,
    pub start: u32,
}
