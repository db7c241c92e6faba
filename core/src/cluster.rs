//! The controller's state: jobs, the two queues, nodes and their instances.
//!
//! Every operation is pure: it takes the current time, changes the state,
//! and returns the [`Effect`]s the caller must carry out (persist a job,
//! tell a node to launch or signal). gctld wraps a [`Cluster`] in a lock and
//! executes the effects; the simulator can drive the same type.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::gpu::Instance;
use crate::job::{IllegalTransition, Job, JobId, JobState, SpecError};
use crate::launch::{LaunchPolicy, QueuedJob};
use crate::resources::{JobResources, NodeResources};

mod accounting;
mod capacity;
mod drain_backfill;
mod drains;
mod early_start;
mod footprints;
mod job_control;
mod job_end;
mod job_update;
mod jobs_by_user;
mod launch_pass;
mod launching;
mod longest_first;
mod node_admin;
mod node_registration;
mod node_reports;
mod preemption;
#[cfg(test)]
mod proptests;
mod reshapes;
mod sisters;
mod suspension;
mod task_preemption;
mod weigher;
pub use accounting::{AccountingConfig, StoredAccounting};
pub use capacity::{
    SubmissionCaps, DEFAULT_MAX_BYTES_PER_USER, DEFAULT_MAX_JOBS_PER_USER, DEFAULT_MAX_JOB_COUNT,
    DEFAULT_MAX_SCRIPT_BYTES,
};
pub use job_update::JobUpdate;
pub use launching::{LaunchAnswer, LaunchNext};
pub use node_admin::{AdminState, NodeAdmin, NodeStateChange};
pub use node_reports::{WaitingJobs, MOST_WAITING_CHANGES};
pub use reshapes::ReshapeOrder;
mod leases;
mod retention;
mod runs;
mod submission;
#[cfg(test)]
mod testkit;
mod unsatisfiable;
mod views;

use footprints::Footprints;
pub use footprints::{Learned, PastRun, PEAK_HISTORY, PEAK_WINDOW};
pub use retention::{kept_finished_since, DEFAULT_MIN_JOB_AGE};

/// An instance on a node and what holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceSlot {
    pub instance: Instance,
    pub isolated_owner: Option<JobId>,
    pub draining_for: Option<JobId>,
    /// Non-isolated tasks with reservations here, as the node last reported.
    pub active_tasks: u32,
    /// Bytes those tasks reserve.
    pub reserved_bytes: u64,
    /// Warps those tasks declared.
    pub warps: u64,
    /// Bytes reserved per job.
    pub job_bytes: BTreeMap<JobId, u64>,
    /// Memory in use as the GPU reports it, where the node can read it.
    pub used_bytes: Option<u64>,
    /// Being re-partitioned: no isolated job is given it.
    pub retiring: bool,
    /// Processes bound to it, as the node last reported.
    pub processes: u32,
}

impl InstanceSlot {
    /// The isolated job holding the whole instance: its owner, once the
    /// shared tasks that were on it have left (until then the owner waits
    /// and those tasks' reservations are what is there).
    pub fn holder(&self) -> Option<JobId> {
        self.isolated_owner.filter(|_| self.job_bytes.is_empty())
    }

    /// Memory held on the instance: all of it for its [`holder`], else
    /// the shared tasks' reservations.
    ///
    /// [`holder`]: InstanceSlot::holder
    pub fn held_bytes(&self) -> u64 {
        match self.holder() {
            Some(_) => self.instance.memory_mib * 1024 * 1024,
            None => self.reserved_bytes,
        }
    }

    /// An instance with nothing on it.
    pub fn new(instance: Instance) -> InstanceSlot {
        InstanceSlot {
            instance,
            isolated_owner: None,
            draining_for: None,
            active_tasks: 0,
            reserved_bytes: 0,
            warps: 0,
            job_bytes: BTreeMap::new(),
            used_bytes: None,
            retiring: false,
            processes: 0,
        }
    }
}

/// A node as the controller knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub name: String,
    /// An administrator's drain or down, with the reason.
    pub admin: Option<NodeAdmin>,
    pub url: String,
    pub cpus: u32,
    pub memory_mib: u64,
    /// Its temporary file system's size, MiB (`--tmp`; not stored: taken
    /// from the node's registration).
    pub tmp_disk_mib: u64,
    pub worker_limit: u32,
    pub up: bool,
    pub instances: Vec<InstanceSlot>,
    /// The jobs on the node's books (changed only through
    /// [`Node::add_running`], [`Node::remove_running`] and
    /// [`Node::clear_running`], which keep `taken` with it).
    pub running: BTreeSet<JobId>,
    /// CPUs and memory (MiB) the jobs in `running` take, kept so that a
    /// launch pass need not add them up again. A suspended job's CPUs are
    /// not taken.
    pub taken: (u64, u64),
    /// The jobs of `running` that are suspended (their CPUs free).
    pub suspended: BTreeSet<JobId>,
    /// The jobs of `running` that are shared (not isolated), kept so that
    /// a pass need not look each job up.
    pub shared: BTreeSet<JobId>,
    /// A launch could not reach the node: no launches go there until it is
    /// heard from again (a heartbeat or registration). Not a down node:
    /// only its lease says that.
    pub unconfirmed: bool,
    /// The registered daemon's instance id (not stored: a restarted
    /// controller takes the next registration's).
    pub instance_id: String,
    /// The drain set last pushed to the node (`None`: none since it
    /// registered) and its number (see `drains.rs`). Not stored.
    pub drain_sent: Option<drains::DrainSet>,
    pub drain_seq: u64,
    /// The GPUs whose MIG layout the node changes when asked (from its
    /// registration; not stored).
    pub reshape_gpus: BTreeSet<u32>,
    /// GPUs an administrator froze: the re-partitioning policy leaves
    /// their layout alone (stored).
    pub mig_frozen: BTreeSet<u32>,
    /// Shared tasks waiting for a place on the node, first in line first
    /// (its heartbeats).
    pub waiting_tasks: Vec<crate::wire::WaitingTask>,
    /// How many times the node has reported them.
    pub waiting_reports: u64,
    pub waiting_jobs: node_reports::WaitingJobs,
    /// Per GPU, the instances re-partitioning must leave (registration).
    pub reshape_keep: BTreeMap<u32, Vec<(String, u32)>>,
    /// What its last heartbeat said about room for shared processes and
    /// available host memory (`wire::Heartbeat`; not stored).
    pub shared_room: Option<crate::wire::SharedRoom>,
    pub mem_available_mib: Option<u64>,
}

/// A queued job as the launch policy sees it (`nodes`: its `-w`/`-x`;
/// `priority`: this pass's, where the policy orders the queues).
fn queued<'a>(
    job: &'a Job,
    nodes: Option<&'a crate::allocation::NodeChoice>,
    priority: u64,
    share: Option<u32>,
) -> QueuedJob<'a> {
    QueuedJob {
        priority,
        share,
        id: job.id,
        gpu: &job.spec.gpu,
        uid: job.spec.uid,
        sharing: node_sharing(job),
        resources: resources_of(job),
        nodes,
        width: crate::allocation::width_of(&job.spec.slurm),
        time_limit: job.spec.time_limit.map(|t| t.min(i64::MAX as u64) as i64),
    }
}

/// How a job shares its node (`--exclusive[=user]`).
pub fn node_sharing(job: &Job) -> Option<crate::launch::NodeSharing> {
    job.spec
        .slurm
        .other
        .get("exclusive")
        .and_then(|v| crate::launch::NodeSharing::parse(v))
}

/// The CPUs and memory a job takes on its node ([`Job::resources`]).
pub fn resources_of(job: &Job) -> JobResources {
    job.resources()
}

impl Node {
    /// Job `id`, taking `res`, shared or isolated, is on the node's books.
    pub fn add_running(&mut self, id: JobId, res: &JobResources, shared: bool) {
        if self.running.insert(id) {
            self.taken.0 += u64::from(res.cpus);
            self.taken.1 += res.memory_mib(self.memory_mib);
            if shared {
                self.shared.insert(id);
            }
        }
    }

    /// Job `id`, which took `res`, is off the node's books.
    pub fn remove_running(&mut self, id: JobId, res: &JobResources) {
        if self.running.remove(&id) {
            self.shared.remove(&id);
            if !self.suspended.remove(&id) {
                self.taken.0 = self.taken.0.saturating_sub(u64::from(res.cpus));
            }
            self.taken.1 = self.taken.1.saturating_sub(res.memory_mib(self.memory_mib));
        }
    }

    /// Job `id` on the node's books, taking `res`, is suspended (its CPUs
    /// free) or runs again (taken again).
    pub fn set_suspended(&mut self, id: JobId, res: &JobResources, suspended: bool) {
        if !self.running.contains(&id) {
            return;
        }
        let cpus = u64::from(res.cpus);
        if suspended && self.suspended.insert(id) {
            self.taken.0 = self.taken.0.saturating_sub(cpus);
        } else if !suspended && self.suspended.remove(&id) {
            self.taken.0 += cpus;
        }
    }

    /// Running job `job` is on the node's books as it is (suspended or
    /// not).
    pub fn book(&mut self, job: &Job) {
        let res = resources_of(job);
        self.add_running(job.id, &res, !job.spec.isolated);
        if job.is_suspended() {
            self.set_suspended(job.id, &res, true);
        }
    }

    /// No job is on the node's books.
    pub fn clear_running(&mut self) {
        self.running.clear();
        self.suspended.clear();
        self.shared.clear();
        self.taken = (0, 0);
    }

    /// What the jobs on its books leave free of the node's CPUs and memory.
    pub fn free(&self) -> NodeResources {
        NodeResources {
            cpus: u64::from(self.cpus).saturating_sub(self.taken.0) as u32,
            memory_mib: self.memory_mib.saturating_sub(self.taken.1),
        }
    }

    /// Whether jobs may be launched onto the node now.
    pub fn accepts_launches(&self) -> bool {
        self.up && !self.unconfirmed && self.admin.is_none()
    }

    /// The node's CPUs and memory.
    pub fn total(&self) -> NodeResources {
        NodeResources {
            cpus: self.cpus,
            memory_mib: self.memory_mib,
        }
    }

    /// The node's state in Slurm's words: DOWN, DRAINED (drained by an
    /// administrator, no job left), DRAINING (jobs left), IDLE, MIXED or
    /// ALLOCATED (every job slot used).
    pub fn state_name(&self) -> &'static str {
        let used = self.running.len() as u32;
        let admin = self.admin.as_ref().map(|a| a.state);
        if !self.up || admin == Some(AdminState::Down) {
            "DOWN"
        } else if admin == Some(AdminState::Drain) {
            if used == 0 {
                "DRAINED"
            } else {
                "DRAINING"
            }
        } else if used == 0 {
            "IDLE"
        } else if used >= self.worker_limit {
            "ALLOCATED"
        } else {
            "MIXED"
        }
    }
}

/// Something the caller must do after an operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// Persist this newly submitted job's whole row, its script and
    /// environment with it, and log its submission.
    Submitted { id: JobId },
    /// Persist this job's row and append `event` to the event log.
    Job { id: JobId, event: String },
    /// Persist the accounts, associations and their usage.
    Accounts,
    /// Persist this node and its instances.
    Node { name: String },
    /// Persist the job's spec: it changed while pending (`scontrol
    /// update`).
    JobSpec { id: JobId },
    /// Ask the node to start the job; `early`: its instances are still in
    /// use (see `wire::LaunchRequest::early`).
    Launch {
        job: JobId,
        node: String,
        early: bool,
    },
    /// Ask the node to kill a run of the job the controller does not own
    /// (any run when `run` is unknown).
    StopRun {
        job: JobId,
        node: String,
        run: Option<u32>,
    },
    /// Tell the node which of its instances are being drained for
    /// isolated jobs (the whole set; no new shared tasks there). `seq`
    /// grows with each set sent to the node.
    Drain {
        node: String,
        instances: Vec<String>,
        /// The running jobs a drained instance still takes tasks of
        /// (`drain_backfill.rs`).
        open_to: BTreeMap<String, Vec<JobId>>,
        seq: u64,
    },
    /// Ask the node to re-partition one of its GPUs (`reshapes.rs`).
    Reshape {
        node: String,
        order: reshapes::ReshapeOrder,
    },
    /// Ask the node to signal (or cancel) the job.
    Signal {
        job: JobId,
        node: String,
        signal: i32,
        cancel: bool,
        /// Which processes a signal that does not cancel goes to.
        scope: crate::outcome::SignalScope,
    },
    /// Ask the node to stop (SIGSTOP) or continue (SIGCONT) run `run` of
    /// the job (`suspension.rs`).
    Suspend {
        job: JobId,
        node: String,
        run: u32,
        suspend: bool,
    },
}

/// Why an operation was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClusterError {
    #[error("invalid job: {0}")]
    Spec(#[from] SpecError),
    #[error("Invalid job id specified: {0}")]
    UnknownJob(JobId),
    #[error(
        "node name {name} is held by another gnoded (instance {holder}) whose lease is live; \
         give this one another --name, or stop the other"
    )]
    NameTaken { name: String, holder: String },
    #[error("Slurm temporarily unable to accept job, sleeping and retrying: the controller holds MaxJobCount ({0}) jobs; try again as jobs end (an administrator raises it with gctld --max-job-count)")]
    TooManyJobs(usize),
    #[error("Batch job script is {size} bytes, larger than the limit of {max} (max_script_size; gctld --max-script-size)")]
    ScriptTooLarge { size: usize, max: usize },
    #[error("Job dependency problem: job {0} does not exist")]
    DependencyOnUnknownJob(JobId),
    #[error("unknown node '{0}'")]
    UnknownNode(String),
    #[error("job {0} is not running")]
    NotRunning(JobId),
    #[error("job {0} is not pending")]
    NotPending(JobId),
    #[error("Job {0} is still starting on its node; try again in a moment")]
    Launching(JobId),
    #[error("Job {0} is already suspended")]
    AlreadySuspended(JobId),
    #[error("Job {0} is not suspended")]
    NotSuspended(JobId),
    #[error("Job {0} cannot resume now: its CPUs on {1} went to jobs started while it was suspended; try again when they end")]
    NoRoomToResume(JobId, String),
    #[error("job {0} has no running step {1}")]
    NoSuchStep(JobId, u32),
    #[error("job {0} has started {max} steps, the most one run may start (MaxStepCount)", max = crate::job::MAX_STEPS)]
    TooManySteps(JobId),
    #[error("job {job} does not run on node {node}")]
    WrongNode { job: JobId, node: String },
    #[error("instance {0} is unknown or held by an isolated job")]
    InstanceBusy(String),
    #[error(transparent)]
    Transition(#[from] IllegalTransition),
    /// A request refused, in words the user can act on.
    #[error("{0}")]
    Refused(String),
}

pub const SIGTERM: i32 = 15;
pub const SIGKILL: i32 = 9;

/// The whole controller state.
pub struct Cluster {
    jobs: BTreeMap<JobId, Job>,
    isolated_queue: BTreeSet<JobId>,
    shared_queue: BTreeSet<JobId>,
    nodes: BTreeMap<String, Node>,
    next_id: JobId,
    policy: Box<dyn LaunchPolicy>,
    /// Jobs queued since the last launch pass (they have no reason yet).
    unexamined: Vec<JobId>,
    /// GPU peaks of earlier runs, where footprints are learned from.
    footprints: Footprints,
    /// Arrays with a `%max` limit on tasks running at once: array id → max.
    array_limits: BTreeMap<JobId, u32>,
    /// Requeued jobs whose previous run is still ending: job → its node.
    /// The node keeps the job's worker and instance until the end report,
    /// and the job does not start again before it.
    requeued_runs: HashMap<JobId, String>,
    /// Submissions that carried an idempotency key: (uid, key) → job (the
    /// array's id for an array), while the job is known here.
    submissions: HashMap<(u32, String), JobId>,
    /// Jobs that left memory since this controller started, by final state.
    purged: HashMap<JobState, u64>,
    /// Runs given up with their node, whose real end may still be reported.
    lost_runs: HashMap<JobId, runs::LostRun>,
    /// Whether a job that says neither `--requeue` nor `--no-requeue`
    /// requeues when its node is lost (Slurm's JobRequeue; on by default).
    job_requeue: bool,
    /// How many times a requeueable job torn down by a GPU fault it was
    /// not named in goes back to the queue; after that it fails.
    max_gpu_fault_requeues: u32,
    /// MaxJobCount and max_script_size.
    caps: capacity::SubmissionCaps,
    /// How far ahead (seconds) an isolated job may start while its
    /// instances are still in use ([`crate::launch::EarlyStart`]); `None`:
    /// never.
    early_start_secs: Option<i64>,
    /// How many shared jobs may wait for a GPU placement on a node before
    /// no more start there (`None`: no limit; [`crate::launch`]'s
    /// admission).
    shared_start_ahead: Option<u32>,
    /// The percent of a node's host memory kept free of shared jobs that
    /// set none aside (0: none).
    host_mem_reserve_pct: u32,
    /// Which pending job goes first ([`crate::priority`]).
    priority: Box<dyn crate::priority::PriorityPolicy>,
    /// Refuse at submission what no known node could ever run
    /// (`unsatisfiable.rs`).
    refuse_unsatisfiable: bool,
    /// Jobs with `--exclusive[=user]` that may be on a node's books (a
    /// superset: each is checked against the node), so a launch pass finds
    /// the nodes they hold without looking at every running job.
    sharing_jobs: BTreeSet<JobId>,
    /// When jobs holding nodes are expected to start, from the latest
    /// launch pass (`squeue --start`).
    expected_starts: HashMap<JobId, i64>,
    /// Accounts, associations and their usage (`accounting.rs`).
    fair_share: crate::fairshare::FairShare,
    accounting: accounting::AccountingConfig,
    qos: crate::qos::QosTable,
    preempt_mode: crate::preempt::PreemptMode,
    /// The partitions' job factors (`weigher.rs`).
    partitions: Option<crate::priority::PartitionFactors>,
    /// Each user's jobs in memory, for submission limits.
    jobs_by_user: jobs_by_user::JobsByUser,
    /// Per node, the CPUs suspended jobs wait for to go on (the last
    /// resume pass's; `suspension.rs`).
    resuming: BTreeMap<String, u32>,
    /// Backfill, or strict priority order.
    scheduler_type: crate::launch::SchedulerType,
    /// Nodes kept for jobs that preempted others there.
    preemptions: BTreeMap<JobId, preemption::Preemption>,
    /// Jobs preempted for a running job's waiting task (`task_preemption.rs`).
    task_preemptions: BTreeMap<JobId, task_preemption::TaskPreemption>,
    /// Preempted jobs in their QOS's grace time (signalled, still running).
    graced: BTreeMap<JobId, crate::preempt::Grace>,
    /// Decides MIG re-partitions (`reshapes.rs`); `None`: layouts stay.
    repartition: Option<Box<dyn crate::repartition::RepartitionPolicy>>,
    /// Reshapes sent to each node and not yet reported done.
    reshapes: BTreeMap<String, Vec<reshapes::ReshapeOrder>>,
    reshape_seq: u64,
}

/// Job `id`, or every task of the array `id` (tasks are numbered on from
/// the array's id, so this is a range, not a scan).
fn job_or_array(jobs: &BTreeMap<JobId, Job>, id: JobId) -> impl Iterator<Item = &Job> {
    let array = jobs
        .get(&id)
        .and_then(|j| j.spec.array_task.as_ref())
        .is_some_and(|t| t.array_job_id == id);
    jobs.range(id..).map(|(_, j)| j).take_while(move |j| {
        j.id == id
            || (array
                && j.spec
                    .array_task
                    .as_ref()
                    .is_some_and(|t| t.array_job_id == id))
    })
}

/// The states of job `id`, or of every task of the array `id`.
fn states_of(jobs: &BTreeMap<JobId, Job>, id: JobId) -> Vec<JobState> {
    job_or_array(jobs, id).map(|j| j.state).collect()
}

impl Cluster {
    pub fn new(policy: Box<dyn LaunchPolicy>) -> Cluster {
        Cluster {
            jobs: BTreeMap::new(),
            isolated_queue: BTreeSet::new(),
            shared_queue: BTreeSet::new(),
            nodes: BTreeMap::new(),
            next_id: 1,
            policy,
            unexamined: Vec::new(),
            footprints: Footprints::default(),
            array_limits: BTreeMap::new(),
            requeued_runs: HashMap::new(),
            submissions: HashMap::new(),
            purged: HashMap::new(),
            lost_runs: HashMap::new(),
            job_requeue: true,
            max_gpu_fault_requeues: crate::outcome::DEFAULT_MAX_GPU_FAULT_REQUEUES,
            caps: capacity::SubmissionCaps::unlimited(),
            early_start_secs: None,
            shared_start_ahead: Some(crate::launch::DEFAULT_START_AHEAD),
            host_mem_reserve_pct: crate::launch::DEFAULT_HOST_MEM_RESERVE_PCT,
            priority: Box::new(crate::priority::Basic),
            refuse_unsatisfiable: false,
            sharing_jobs: BTreeSet::new(),
            expected_starts: HashMap::new(),
            fair_share: Default::default(),
            accounting: Default::default(),
            qos: Default::default(),
            preempt_mode: Default::default(),
            partitions: None,
            jobs_by_user: Default::default(),
            resuming: BTreeMap::new(),
            scheduler_type: Default::default(),
            preemptions: BTreeMap::new(),
            task_preemptions: BTreeMap::new(),
            graced: BTreeMap::new(),
            repartition: None,
            reshapes: BTreeMap::new(),
            reshape_seq: 0,
        }
    }

    /// Sets the requeue default of jobs that state none (Slurm's
    /// JobRequeue): applies to jobs accepted from now on.
    pub fn set_job_requeue(&mut self, requeue: bool) {
        self.job_requeue = requeue;
    }

    /// How many times a bystander of GPU faults is requeued before it
    /// fails (`max_gpu_fault_requeues`).
    pub fn set_max_gpu_fault_requeues(&mut self, most: u32) {
        self.max_gpu_fault_requeues = most;
    }

    /// How many shared jobs may wait for a GPU placement on one node
    /// before no more are started there (`None`: as many as workers allow).
    pub fn set_shared_start_ahead(&mut self, ahead: Option<u32>) {
        self.shared_start_ahead = ahead;
    }

    /// The percent of a node's host memory kept free of shared jobs that
    /// set no memory aside (0: none; at most 100).
    pub fn set_host_mem_reserve(&mut self, pct: u32) {
        self.host_mem_reserve_pct = pct.min(100);
    }

    /// Backfill (the default) or strict priority order, from the next pass.
    pub fn set_scheduler_type(&mut self, scheduler: crate::launch::SchedulerType) {
        self.scheduler_type = scheduler;
    }

    /// Orders the pending queues with `policy` from now on.
    pub fn set_priority_policy(&mut self, policy: Box<dyn crate::priority::PriorityPolicy>) {
        self.priority = policy;
    }

    /// `ids` highest priority first (ties: submitted first), where the
    /// policy orders the queues (their priorities noted in `values`); left
    /// in submission order otherwise.
    fn by_priority(&self, ids: &mut [JobId], now: i64, values: &mut HashMap<JobId, u64>) {
        if !self.priority.orders() {
            return;
        }
        let weigher = self.weigher(now);
        let mut keyed: Vec<(std::cmp::Reverse<u64>, JobId)> = ids
            .iter()
            .map(|id| {
                (
                    std::cmp::Reverse(weigher.priority_of(&self.jobs[id]).value),
                    *id,
                )
            })
            .collect();
        keyed.sort_unstable();
        for (slot, (std::cmp::Reverse(value), id)) in ids.iter_mut().zip(keyed) {
            *slot = id;
            values.insert(id, value);
        }
    }

    /// Lets isolated jobs start up to `secs` seconds before their instances
    /// are expected free (`None` or 0: never; see
    /// [`crate::launch::EarlyStart`]).
    pub fn set_early_start(&mut self, secs: Option<u64>) {
        self.early_start_secs = secs
            .filter(|s| *s > 0)
            .map(|s| i64::try_from(s).unwrap_or(i64::MAX));
    }

    /// Rebuilds the state from stored jobs and nodes (all nodes start down
    /// until they register again).
    pub fn restore(policy: Box<dyn LaunchPolicy>, jobs: Vec<Job>, nodes: Vec<Node>) -> Cluster {
        let mut c = Cluster::new(policy);
        for mut n in nodes {
            n.up = false;
            n.clear_running();
            for s in &mut n.instances {
                s.isolated_owner = None;
                s.draining_for = None;
            }
            c.nodes.insert(n.name.clone(), n);
        }
        for job in jobs {
            c.next_id = c.next_id.max(job.id + 1);
            if let Some(t) = &job.spec.array_task {
                if let (Some(m), false) = (t.max_running, job.state.is_final()) {
                    c.array_limits.insert(t.array_job_id, m);
                }
            }
            c.index(&job);
            c.restore_grace(&job);
            c.jobs_by_user
                .add(&job.spec.user_name, job.id, job.held_bytes());
            if let Some(k) = &job.spec.idempotency_key {
                c.submissions
                    .insert((job.spec.uid, k.clone()), job.submitted_as());
            }
            c.footprints.note(&job);
            let lost = job.state == JobState::NodeFail;
            let id = job.id;
            c.jobs.insert(id, job);
            if lost {
                // Its node may still report how the run really ended.
                c.note_lost_run(id);
            }
        }
        early_start::reasons_as_booked(&mut c.jobs, &c.nodes);
        c
    }

    /// Puts a job into the queue or onto its node's books, by its state.
    fn index(&mut self, job: &Job) {
        match job.state {
            JobState::Pending => self.enqueue(job.id, job.spec.isolated),
            JobState::Running => {
                if node_sharing(job).is_some() {
                    self.sharing_jobs.insert(job.id);
                }
                for name in job.nodes() {
                    let Some(node) = self.nodes.get_mut(name) else {
                        continue;
                    };
                    node.book(job);
                    let held = job.instances_on(name);
                    for slot in node
                        .instances
                        .iter_mut()
                        .filter(|s| held.contains(&s.instance.uuid))
                    {
                        early_start::book_running_on(slot, job, &self.jobs);
                    }
                }
            }
            _ => {}
        }
    }

    /// Puts a pending job in its queue.
    fn enqueue(&mut self, id: JobId, isolated: bool) {
        self.queue_for(isolated).insert(id);
        self.unexamined.push(id);
    }

    fn queue_for(&mut self, isolated: bool) -> &mut BTreeSet<JobId> {
        if isolated {
            &mut self.isolated_queue
        } else {
            &mut self.shared_queue
        }
    }

    pub fn policy_name(&self) -> &'static str {
        self.policy.name()
    }

    pub fn job(&self, id: JobId) -> Option<&Job> {
        self.jobs.get(&id)
    }

    pub fn jobs(&self) -> impl DoubleEndedIterator<Item = &Job> {
        self.jobs.values()
    }

    /// The jobs with ids above `id`, by id.
    pub fn jobs_after(&self, id: JobId) -> impl Iterator<Item = &Job> {
        self.jobs.range(id.saturating_add(1)..).map(|(_, j)| j)
    }

    /// Job `id`, or, when `id` is an array's, every task of it.
    pub fn job_or_array(&self, id: JobId) -> impl Iterator<Item = &Job> {
        job_or_array(&self.jobs, id)
    }

    pub fn node(&self, name: &str) -> Option<&Node> {
        self.nodes.get(name)
    }

    pub fn nodes(&self) -> impl Iterator<Item = &Node> {
        self.nodes.values()
    }

    /// The peak GPU memory (MiB) of the latest earlier finished run of the
    /// same job: same user, and the same job name or the same script.
    pub fn learned_footprint(&self, job: JobId) -> Option<u64> {
        self.learned(job).mib
    }

    /// What the same job's earlier finished runs tell: the latest peak
    /// (MiB), and the latest measured GPU share ([`crate::compute`]).
    pub fn learned(&self, job: JobId) -> Learned {
        match self.jobs.get(&job) {
            Some(j) => self.footprints.learned(j, &self.jobs),
            None => Learned::default(),
        }
    }

    pub fn pending_count(&self) -> usize {
        self.isolated_queue.len() + self.shared_queue.len()
    }

    /// Jobs running on all nodes.
    pub fn running_count(&self) -> usize {
        self.nodes.values().map(|n| n.running.len()).sum()
    }

    /// What a node's running jobs leave free of its CPUs and memory, less
    /// the CPUs suspended jobs wait for to go on.
    pub fn free_on(&self, node: &Node) -> NodeResources {
        let mut free = node.free();
        free.cpus = free.cpus.saturating_sub(self.resuming_on(&node.name));
        free
    }

    /// No instance is drained for `job` any more.
    fn forget_drains_for(&mut self, job: JobId) {
        for s in self.nodes.values_mut().flat_map(|n| n.instances.iter_mut()) {
            if s.draining_for == Some(job) {
                s.draining_for = None;
            }
        }
    }
}

#[cfg(test)]
mod tests;
