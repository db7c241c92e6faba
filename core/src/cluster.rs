//! The controller's state: jobs, the two queues, nodes and their instances.
//!
//! Every operation is pure: it takes the current time, changes the state,
//! and returns the [`Effect`]s the caller must carry out (persist a job,
//! tell a node to launch or signal). gctld wraps a [`Cluster`] in a lock and
//! executes the effects; the simulator can drive the same type.

use crate::array::ArrayTask;
use crate::dependency::Verdict;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use crate::gpu::Instance;
use crate::job::{IllegalTransition, Job, JobId, JobSpec, JobState, SpecError, Step};
use crate::launch::{
    Decision, InstanceView, LaunchInput, LaunchPolicy, NodeView, PendingReason, QueuedJob,
};
use crate::resources::{JobResources, MemoryRequest, NodeResources};
use crate::wire::{JobEnded, NodeRegistration};

mod accounting;
mod capacity;
mod drains;
mod early_start;
mod footprints;
mod job_update;
mod jobs_by_user;
mod launching;
mod node_admin;
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
pub use reshapes::ReshapeOrder;
mod leases;
mod retention;
mod runs;
#[cfg(test)]
mod testkit;
mod unsatisfiable;

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
    pub drain_sent: Option<BTreeSet<String>>,
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
    /// Per GPU, the instances re-partitioning must leave (registration).
    pub reshape_keep: BTreeMap<u32, Vec<(String, u32)>>,
}

/// A queued job as the launch policy sees it (`nodes`: its `-w`/`-x`;
/// `priority`: this pass's, where the policy orders the queues).
fn queued<'a>(
    job: &'a Job,
    nodes: Option<&'a crate::allocation::NodeChoice>,
    priority: u64,
) -> QueuedJob<'a> {
    QueuedJob {
        priority,
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

/// The CPUs and memory a job takes on its node. A job stored before its
/// request was checked and found wanting takes one CPU and no memory.
pub fn resources_of(job: &Job) -> JobResources {
    JobResources::of(&job.spec).unwrap_or(JobResources {
        cpus: 1,
        memory: MemoryRequest::Unspecified,
    })
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
    /// MaxJobCount and max_script_size.
    caps: capacity::SubmissionCaps,
    /// How far ahead (seconds) an isolated job may start while its
    /// instances are still in use ([`crate::launch::EarlyStart`]); `None`:
    /// never.
    early_start_secs: Option<i64>,
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
            caps: capacity::SubmissionCaps::unlimited(),
            early_start_secs: None,
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

    /// Records the shared-task use a node reported. Returns whether an
    /// instance drained for an isolated job became free (a launch may follow).
    pub fn update_instance_use(
        &mut self,
        node: &str,
        uses: &std::collections::BTreeMap<String, crate::wire::InstanceUse>,
    ) -> bool {
        let Some(n) = self.nodes.get_mut(node) else {
            return false;
        };
        let mut freed = false;
        for slot in &mut n.instances {
            let u = uses.get(&slot.instance.uuid).cloned().unwrap_or_default();
            freed |= slot.draining_for.is_some() && slot.active_tasks > 0 && u.tasks == 0;
            slot.active_tasks = u.tasks;
            slot.reserved_bytes = u.reserved_bytes;
            slot.warps = u.warps;
            slot.job_bytes = u.jobs;
            slot.used_bytes = u.used_bytes;
            slot.processes = u.processes;
        }
        freed
    }

    /// The shared tasks waiting for a place on `node`, as it last said.
    pub fn set_waiting_tasks(&mut self, node: &str, waiting: Vec<crate::wire::WaitingTask>) {
        if let Some(n) = self.nodes.get_mut(node) {
            n.waiting_tasks = waiting;
            n.waiting_reports += 1;
        }
    }

    /// Notes reservations a node reported as begun (task records arrive
    /// every 100 ms; heartbeats only every few seconds): an instance the
    /// controller thought idle is marked busy at once, so an isolated job
    /// is not sent there to wait for a drain while an idle instance is
    /// free. The next heartbeat replaces these counts with the node's own.
    pub fn note_tasks_begun(&mut self, node: &str, records: &[crate::probe::TaskRecord]) {
        let Some(n) = self.nodes.get_mut(node) else {
            return;
        };
        for r in records.iter().filter(|r| r.end_ms.is_none()) {
            let Some(slot) = n
                .instances
                .iter_mut()
                .find(|s| s.instance.uuid == r.instance)
            else {
                continue;
            };
            if let std::collections::btree_map::Entry::Vacant(e) = slot.job_bytes.entry(r.job) {
                e.insert(r.bytes);
                slot.reserved_bytes += r.bytes;
                slot.active_tasks = slot.active_tasks.max(1);
            }
        }
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

    /// A process of `job` reported its peak GPU memory; the job keeps the
    /// largest (MiB).
    pub fn record_peak(&mut self, job: JobId, bytes: u64) -> Vec<Effect> {
        let Some(j) = self.jobs.get_mut(&job) else {
            return Vec::new();
        };
        let mib = bytes.div_ceil(1024 * 1024);
        if j.gpu_mem_peak.is_some_and(|p| p >= mib) {
            return Vec::new();
        }
        j.gpu_mem_peak = Some(mib);
        self.footprints.note(j);
        vec![Effect::Job {
            id: job,
            event: "gpu_peak".into(),
        }]
    }

    /// Marks a node's instance as being re-partitioned (no isolated job is
    /// given it) or back in use. Returns whether the instance exists.
    pub fn set_retiring(&mut self, node: &str, uuid: &str, retiring: bool) -> bool {
        let slot = self
            .nodes
            .get_mut(node)
            .and_then(|n| n.instances.iter_mut().find(|s| s.instance.uuid == uuid));
        match slot {
            Some(s) => {
                s.retiring = retiring;
                true
            }
            None => false,
        }
    }

    /// Replaces instances of a node after a re-partition: `remove` go (each
    /// must be free of isolated jobs), `add` come. Refused, changing
    /// nothing, if the node is unknown or an instance to remove is unknown
    /// or held.
    pub fn reshape_node(
        &mut self,
        node: &str,
        remove: &[String],
        add: Vec<Instance>,
    ) -> Result<(), ClusterError> {
        let n = self
            .nodes
            .get_mut(node)
            .ok_or_else(|| ClusterError::UnknownNode(node.into()))?;
        for uuid in remove {
            let slot = n.instances.iter().find(|s| &s.instance.uuid == uuid);
            match slot {
                Some(s) if s.isolated_owner.is_none() && s.draining_for.is_none() => {}
                _ => return Err(ClusterError::InstanceBusy(uuid.clone())),
            }
        }
        n.instances.retain(|s| !remove.contains(&s.instance.uuid));
        n.instances.extend(add.into_iter().map(InstanceSlot::new));
        Ok(())
    }

    /// Records the MPS daemon states a node reported. Returns whether any
    /// changed.
    pub fn update_mps(
        &mut self,
        node: &str,
        states: &std::collections::BTreeMap<String, crate::gpu::MpsState>,
    ) -> bool {
        let Some(n) = self.nodes.get_mut(node) else {
            return false;
        };
        let mut changed = false;
        for slot in &mut n.instances {
            if let (Some(m), Some(s)) =
                (slot.instance.mps.as_mut(), states.get(&slot.instance.uuid))
            {
                changed |= m.state != *s;
                m.state = *s;
            }
        }
        changed
    }

    pub fn pending_count(&self) -> usize {
        self.isolated_queue.len() + self.shared_queue.len()
    }

    /// Jobs running on all nodes.
    pub fn running_count(&self) -> usize {
        self.nodes.values().map(|n| n.running.len()).sum()
    }

    /// Accepts a job. It is queued at once; the caller persists it before
    /// acknowledging, and withdraws it with [`Cluster::withdraw`] if that fails.
    pub fn submit(
        &mut self,
        mut spec: JobSpec,
        now: i64,
    ) -> Result<(JobId, Vec<Effect>), ClusterError> {
        spec.validate()?;
        spec.requeue.get_or_insert(self.job_requeue);
        if let Some(&id) = spec
            .idempotency_key
            .as_ref()
            .and_then(|k| self.submissions.get(&(spec.uid, k.clone())))
        {
            // A retry of a submission already accepted: the same job.
            return Ok((id, Vec::new()));
        }
        self.check_caps(&spec)?;
        self.check_satisfiable(&spec)?;
        self.choose_account(&mut spec)?;
        self.choose_qos(&mut spec)?;
        self.apply_max_wall(&mut spec);
        if let Some(d) = &spec.dependency {
            self.check_dependency(spec.uid, d)?;
        }
        let key = spec.idempotency_key.clone().map(|k| (spec.uid, k));
        let (id, effects) = self.add_submission(spec, now);
        if let Some(key) = key {
            self.submissions.insert(key, id);
        }
        Ok((id, effects))
    }

    /// Adds a checked submission: one job, or every task of an array (the
    /// id returned is the array's).
    fn add_submission(&mut self, spec: JobSpec, now: i64) -> (JobId, Vec<Effect>) {
        let Some(array) = spec.array.clone() else {
            let id = self.add_job(spec, now);
            return (
                id,
                vec![Effect::Job {
                    id,
                    event: "submitted".into(),
                }],
            );
        };
        // An array: one job per index, numbered on from the first, whose
        // id is the array's (as Slurm does).
        let first = self.next_id;
        let mut effects = Vec::with_capacity(array.indices.len());
        for &index in &array.indices {
            let mut task = spec.clone();
            task.array = None;
            task.array_task = Some(ArrayTask {
                array_job_id: first,
                task_id: index,
                min: array.indices[0],
                max: *array.indices.last().expect("an array has indices"),
                step: array.step(),
                count: array.indices.len() as u32,
                max_running: array.max_running,
            });
            if let Some(m) = array.max_running {
                self.array_limits.insert(first, m);
            }
            let id = self.add_job(task, now);
            effects.push(Effect::Job {
                id,
                event: "submitted".into(),
            });
        }
        (first, effects)
    }

    fn add_job(&mut self, spec: JobSpec, now: i64) -> JobId {
        let id = self.next_id;
        self.next_id += 1;
        let job = Job::new(id, spec, now);
        self.enqueue(id, job.spec.isolated);
        self.jobs_by_user
            .add(&job.spec.user_name, id, job.spec.held_bytes());
        self.jobs.insert(id, job);
        id
    }

    /// Removes a job that could not be persisted. Only a pending job that
    /// nothing else has touched can be withdrawn.
    pub fn withdraw(&mut self, id: JobId) {
        if self
            .jobs
            .get(&id)
            .is_some_and(|j| j.state == JobState::Pending)
        {
            self.isolated_queue.remove(&id);
            self.shared_queue.remove(&id);
            if let Some(j) = self.jobs.remove(&id) {
                self.jobs_by_user.remove(&j.spec.user_name, id);
                if let Some(k) = j.spec.idempotency_key {
                    self.submissions.remove(&(j.spec.uid, k));
                }
            }
        }
    }

    /// What a node's running jobs leave free of its CPUs and memory, less
    /// the CPUs suspended jobs wait for to go on.
    pub fn free_on(&self, node: &Node) -> NodeResources {
        let mut free = node.free();
        free.cpus = free.cpus.saturating_sub(self.resuming_on(&node.name));
        free
    }

    /// One launch pass of the policy; applies its decisions.
    pub fn schedule(&mut self, now: i64) -> Vec<Effect> {
        // MIG layouts are re-made for what waits before the launch policy
        // hands out instances (an isolated job then gets a right-sized
        // instance rather than an oversized one), and retiring instances
        // are launched onto by nobody.
        let mut effects = self.new_reshapes();
        // Jobs suspended for others go on before anything queued starts.
        effects.extend(self.resume_suspended(now));
        effects.extend(self.launch_queued(now));
        // A running shared job's task waiting for memory may make room.
        effects.extend(self.preempt_for_tasks(now));
        // Drains change with launches, and with ends when nothing is queued.
        effects.extend(self.drain_changes());
        self.note_reconfiguring();
        effects
    }

    fn launch_queued(&mut self, now: i64) -> Vec<Effect> {
        let mut effects = Vec::new();
        if self.isolated_queue.is_empty() && self.shared_queue.is_empty() {
            self.unexamined.clear();
            return effects;
        }
        // Every policy launches onto a free worker: when there is none, a pass
        // would only repeat the reasons it gave before. Give the jobs queued
        // since then theirs, without walking the whole queue.
        // (With preemption, a full node may be made room on.)
        let may_preempt =
            self.preempt_mode != crate::preempt::PreemptMode::Off && self.qos.in_use();
        if !may_preempt
            && !self
                .nodes
                .values()
                .any(|n| n.accepts_launches() && (n.running.len() as u32) < n.worker_limit)
        {
            let reason = if self.nodes.values().any(|n| n.up) {
                PendingReason::Resources
            } else {
                PendingReason::NodeDown
            };
            for id in std::mem::take(&mut self.unexamined) {
                if self
                    .jobs
                    .get(&id)
                    .is_some_and(|j| j.state == JobState::Pending)
                {
                    self.set_reason(id, &reason.to_string());
                }
            }
            return effects;
        }
        self.unexamined.clear();
        // Arrays at their `%max`: their pending tasks sit this pass out.
        let mut array_room = self.array_room();
        // Worked out when a job with a singleton dependency is first seen.
        let mut singletons: Option<HashMap<(&str, &str), JobId>> = None;
        let mut throttled: Vec<JobId> = Vec::new();
        let mut waiting: Vec<(JobId, Verdict)> = Vec::new();
        let jobs = &self.jobs;
        let requeued = &self.requeued_runs;
        let mut held: Vec<JobId> = Vec::new();
        let mut eligible = |id: &JobId| -> bool {
            let job = &jobs[id];
            if requeued.contains_key(id) {
                return false;
            }
            if job.held {
                held.push(*id);
                return false;
            }
            if let Some(d) = &job.spec.dependency {
                let earlier = d.singleton
                    && singletons
                        .get_or_insert_with(|| self.active_by_name())
                        .get(&(job.spec.user_name.as_str(), job.spec.name.as_str()))
                        .is_some_and(|first| first < id);
                match d.verdict(|dep| states_of(jobs, dep), earlier) {
                    Verdict::Ready => {}
                    v => {
                        waiting.push((*id, v));
                        return false;
                    }
                }
            }
            let Some(t) = job.spec.array_task.as_ref() else {
                return true;
            };
            match array_room.get_mut(&t.array_job_id) {
                Some(0) => {
                    throttled.push(*id);
                    false
                }
                Some(room) => {
                    *room -= 1;
                    true
                }
                None => true,
            }
        };
        // The jobs this pass considers: every eligible isolated one, and the
        // eligible shared ones up to the free workers (each launch takes a
        // worker: jobs past them cannot start in this pass; they get the
        // pass's `rest` reason).
        let mut iso_ids: Vec<JobId> = self
            .isolated_queue
            .iter()
            .filter(|id| eligible(id))
            .copied()
            .collect();
        let free_workers: usize = self
            .nodes
            .values()
            .filter(|n| n.accepts_launches())
            .map(|n| n.worker_limit.saturating_sub(n.running.len() as u32) as usize)
            .sum();
        let truncated = self.shared_queue.len() > free_workers;
        let ordered = self.priority.orders();
        let mut shared_ids: Vec<JobId> = self
            .shared_queue
            .iter()
            .filter(|id| eligible(id))
            // In submission order the first ones are the ones to look at;
            // by priority, every eligible job is weighed first.
            .take(if ordered { usize::MAX } else { free_workers })
            .copied()
            .collect();
        let mut priorities = HashMap::new();
        self.by_priority(&mut iso_ids, now, &mut priorities);
        self.by_priority(&mut shared_ids, now, &mut priorities);
        // Jobs their QOS's limits hold back sit this pass out.
        let over_qos = self.qos_filter([&mut iso_ids, &mut shared_ids]);
        // The order preemption looks at waiting jobs in (when it is on).
        let by_rank: Vec<JobId> = if may_preempt {
            iso_ids.iter().chain(shared_ids.iter()).copied().collect()
        } else {
            Vec::new()
        };
        shared_ids.truncate(free_workers);
        let choices = self.node_choices(iso_ids.iter().chain(shared_ids.iter()));
        let kept = self.kept_nodes(now);
        let mut plan = {
            let view = |ids: &[JobId]| -> Vec<QueuedJob<'_>> {
                ids.iter()
                    .map(|id| {
                        let p = priorities.get(id).copied().unwrap_or(0);
                        queued(&self.jobs[id], choices.get(id), p)
                    })
                    .collect()
            };
            let iso = view(&iso_ids);
            let shared = view(&shared_ids);
            // Who runs where matters to jobs that want a node alone.
            let with_users = iso.iter().chain(shared.iter()).any(|j| j.sharing.is_some());
            // When nodes empty matters to jobs that may hold nodes.
            let holding = with_users || iso.iter().chain(shared.iter()).any(|j| j.width > 1);
            let nodes: Vec<NodeView<'_>> = self
                .nodes
                .values()
                .map(|n| NodeView {
                    name: &n.name,
                    occupancy: self.occupancy(n, with_users),
                    up: n.accepts_launches(),
                    worker_limit: n.worker_limit,
                    workers_used: n.running.len() as u32,
                    // Only isolated jobs' placement asks for these two.
                    shared_running: n.shared.len() as u32,
                    total: n.total(),
                    free: self.free_on(n),
                    expected_empty: if holding {
                        self.expected_empty(n, now)
                    } else {
                        None
                    },
                    instances: n
                        .instances
                        .iter()
                        .map(|s| InstanceView {
                            instance: &s.instance,
                            isolated_owner: s.isolated_owner,
                            draining_for: s.draining_for,
                            active_tasks: s.active_tasks,
                            expected_free: if iso.is_empty() {
                                None
                            } else {
                                self.expected_free(s)
                            },
                            retiring: s.retiring,
                        })
                        .collect(),
                })
                .collect();
            let opted_out: HashSet<JobId> = match self.early_start_secs {
                Some(_) => iso_ids
                    .iter()
                    .filter(|id| self.jobs[id].intercept_off())
                    .copied()
                    .collect(),
                None => HashSet::new(),
            };
            self.policy.plan(&LaunchInput {
                now,
                reserved: &kept,
                scheduler: self.scheduler_type,
                isolated: &iso,
                shared: &shared,
                nodes: &nodes,
                early: self.early_start_secs.map(|secs| crate::launch::EarlyStart {
                    until: now.saturating_add(secs),
                    opted_out: &opted_out,
                }),
            })
        };
        if truncated && plan.rest.is_none() {
            plan.rest = Some(PendingReason::Resources);
        }
        self.expected_starts = std::mem::take(&mut plan.expected_starts)
            .into_iter()
            .collect();
        for d in plan.decisions {
            let (job, node, instances, early) = match d {
                Decision::Launch {
                    job,
                    node,
                    instances,
                } => (job, node, instances, false),
                Decision::EarlyStart {
                    job,
                    node,
                    instances,
                } => (job, node, instances, true),
                Decision::LaunchWide { job, nodes } => {
                    effects.extend(self.start_wide(job, nodes, now));
                    continue;
                }
                Decision::Drain {
                    job,
                    node,
                    instances,
                } => {
                    self.forget_drains_for(job);
                    for uuid in &instances {
                        if let Some(slot) = self.slot_mut(&node, uuid) {
                            slot.draining_for = Some(job);
                        }
                    }
                    continue;
                }
            };
            if self.start(job, &node, instances, now).is_ok() {
                let event = if early {
                    format!(
                        "started early on {node}: its GPU work waits until its instances are free"
                    )
                } else {
                    format!("started on {node}")
                };
                effects.push(Effect::Job { id: job, event });
                effects.push(Effect::Launch { job, node, early });
            }
        }
        let mut named = BTreeSet::new();
        for (id, reason) in plan.waiting {
            named.insert(id);
            self.set_reason(id, &reason.to_string());
        }
        if let Some(rest) = plan.rest {
            let rest = rest.to_string();
            let ids: Vec<JobId> = self
                .isolated_queue
                .iter()
                .chain(self.shared_queue.iter())
                .filter(|id| !named.contains(id))
                .copied()
                .collect();
            for id in ids {
                self.set_reason(id, &rest);
            }
        }
        for id in throttled {
            self.set_reason(id, "JobArrayTaskLimit");
        }
        for (id, reason) in over_qos {
            self.set_reason(id, reason);
        }
        let waiting_for_resources: Vec<JobId> = by_rank
            .into_iter()
            .filter(|id| {
                self.jobs.get(id).is_some_and(|j| {
                    j.state == JobState::Pending
                        && j.reason.as_deref() == Some(&PendingReason::Resources.to_string())
                })
            })
            .collect();
        effects.extend(self.preempt_for(&waiting_for_resources, now));
        for id in held {
            self.set_reason(id, "JobHeldUser");
        }
        let ending: Vec<JobId> = self.requeued_runs.keys().copied().collect();
        for id in ending {
            self.set_reason(id, "BeginTime");
        }
        for (id, v) in waiting {
            let reason = if v == Verdict::Never {
                "DependencyNeverSatisfied"
            } else {
                "Dependency"
            };
            self.set_reason(id, reason);
        }
        effects
    }

    /// For `singleton`: the lowest id of an active (pending or running)
    /// job per (user, name); worked out when a queued job asks for it.
    fn active_by_name(&self) -> HashMap<(&str, &str), JobId> {
        let mut m = HashMap::new();
        let running = self.nodes.values().flat_map(|n| n.running.iter());
        for id in self
            .isolated_queue
            .iter()
            .chain(&self.shared_queue)
            .chain(running)
        {
            let s = &self.jobs[id].spec;
            let e = m
                .entry((s.user_name.as_str(), s.name.as_str()))
                .or_insert(*id);
            *e = (*e).min(*id);
        }
        m
    }

    /// How many more tasks each throttled array may start now.
    fn array_room(&mut self) -> HashMap<JobId, u32> {
        if self.array_limits.is_empty() {
            return HashMap::new();
        }
        let mut running: HashMap<JobId, u32> = HashMap::new();
        let mut live: HashSet<JobId> = HashSet::new();
        for id in self.isolated_queue.iter().chain(&self.shared_queue) {
            if let Some(t) = &self.jobs[id].spec.array_task {
                live.insert(t.array_job_id);
            }
        }
        for n in self.nodes.values() {
            for id in &n.running {
                if let Some(t) = self.jobs.get(id).and_then(|j| j.spec.array_task.as_ref()) {
                    *running.entry(t.array_job_id).or_default() += 1;
                }
            }
        }
        // Arrays with nothing left to start no longer need a limit.
        self.array_limits.retain(|a, _| live.contains(a));
        self.array_limits
            .iter()
            .map(|(a, &m)| (*a, m.saturating_sub(running.get(a).copied().unwrap_or(0))))
            .collect()
    }

    fn set_reason(&mut self, id: JobId, reason: &str) {
        if let Some(j) = self.jobs.get_mut(&id) {
            if j.reason.as_deref() != Some(reason) {
                j.reason = Some(reason.to_string());
            }
        }
    }

    fn slot_mut(&mut self, node: &str, uuid: &str) -> Option<&mut InstanceSlot> {
        self.nodes
            .get_mut(node)?
            .instances
            .iter_mut()
            .find(|s| s.instance.uuid == uuid)
    }

    fn start(
        &mut self,
        id: JobId,
        node: &str,
        instances: Vec<String>,
        now: i64,
    ) -> Result<(), ClusterError> {
        let job = self.jobs.get_mut(&id).ok_or(ClusterError::UnknownJob(id))?;
        job.transition(JobState::Running, now)?;
        job.node = Some(node.to_string());
        job.gpu_instances = instances.clone();
        let isolated = job.spec.isolated;
        let res = resources_of(job);
        if node_sharing(job).is_some() {
            self.sharing_jobs.insert(id);
        }
        self.queue_for(isolated).remove(&id);
        self.preemptions.remove(&id);
        // A new run: an earlier run lost with its node is settled no more.
        self.lost_runs.remove(&id);
        let n = self
            .nodes
            .get_mut(node)
            .ok_or_else(|| ClusterError::UnknownNode(node.into()))?;
        n.add_running(id, &res, !isolated);
        if !instances.is_empty() {
            // Started early on an instance another isolated job still
            // holds, it waits for it (drained for it) and takes it over
            // when that one ends.
            let mut waits_for = Vec::new();
            for slot in n
                .instances
                .iter_mut()
                .filter(|s| instances.contains(&s.instance.uuid))
            {
                match slot.isolated_owner {
                    Some(other) if other != id => waits_for.push(slot.instance.uuid.clone()),
                    _ => slot.isolated_owner = Some(id),
                }
            }
            // Neither it nor an instance it waited for elsewhere is drained
            // for it any more.
            self.forget_drains_for(id);
            for uuid in waits_for {
                if let Some(slot) = self.slot_mut(node, &uuid) {
                    slot.draining_for = Some(id);
                }
            }
        }
        Ok(())
    }

    /// When pending job `id` is expected to start, where the latest launch
    /// pass could tell (it holds nodes whose jobs all have time limits).
    pub fn expected_start(&self, id: JobId) -> Option<i64> {
        let j = self.jobs.get(&id)?;
        (j.state == JobState::Pending)
            .then(|| self.expected_starts.get(&id).copied())
            .flatten()
    }

    /// When every job on `node`'s books will have ended by its time limit
    /// (`now` if none is there); `None` if one has no limit.
    fn expected_empty(&self, node: &Node, now: i64) -> Option<i64> {
        node.running.iter().try_fold(now, |t, id| {
            let j = self.jobs.get(id)?;
            // Its limit leaves out the time it was suspended.
            let end = j
                .start_time?
                .saturating_add(j.spec.time_limit?.min(i64::MAX as u64) as i64)
                .saturating_add(j.suspended_secs(now));
            Some(t.max(end))
        })
    }

    /// No instance is drained for `job` any more.
    fn forget_drains_for(&mut self, job: JobId) {
        for s in self.nodes.values_mut().flat_map(|n| n.instances.iter_mut()) {
            if s.draining_for == Some(job) {
                s.draining_for = None;
            }
        }
    }

    /// The node choices (-w, -x) of the jobs `ids` that make one. One that
    /// no longer reads (accepted by an older version) allows no node: the
    /// job waits with ReqNodeNotAvail.
    fn node_choices<'i>(
        &self,
        ids: impl Iterator<Item = &'i JobId>,
    ) -> HashMap<JobId, crate::allocation::NodeChoice> {
        ids.filter_map(|id| {
            let other = &self.jobs.get(id)?.spec.slurm.other;
            if !other.contains_key("nodelist") && !other.contains_key("exclude") {
                return None;
            }
            let choice = crate::allocation::node_choice(other)
                .ok()
                .flatten()
                .unwrap_or_else(|| crate::allocation::NodeChoice {
                    only: Some(Vec::new()),
                    ..Default::default()
                });
            Some((*id, choice))
        })
        .collect()
    }

    /// Who runs on `node`, against `--exclusive` jobs: whether a job there
    /// holds it alone (or for its user), and, where `with_users` (some
    /// queued job asks for a node alone), the users of every job there.
    fn occupancy(&self, node: &Node, with_users: bool) -> crate::launch::NodeOccupancy {
        let mut o = crate::launch::NodeOccupancy::default();
        if with_users {
            o.users = node
                .running
                .iter()
                .filter_map(|id| self.jobs.get(id))
                .map(|j| j.spec.uid)
                .collect();
        }
        for job in self
            .sharing_jobs
            .iter()
            .filter(|id| node.running.contains(id))
            .filter_map(|id| self.jobs.get(id))
        {
            match node_sharing(job) {
                Some(crate::launch::NodeSharing::Alone) => o.alone = true,
                Some(crate::launch::NodeSharing::UserOnly) => o.user_only = Some(job.spec.uid),
                None => {}
            }
        }
        o
    }

    /// Takes a job off its nodes' books (instances and workers). A job on
    /// several nodes has its run stopped on its sisters: the effects.
    #[must_use]
    fn release(&mut self, id: JobId) -> Vec<Effect> {
        let Some(node) = self.jobs.get(&id).and_then(|j| j.node.clone()) else {
            return vec![];
        };
        self.release_on(&node, id);
        self.release_sisters(id)
    }

    /// Takes job `id` off node `node`'s books (a requeued job's old run:
    /// the job itself no longer names the node).
    fn release_on(&mut self, node: &str, id: JobId) {
        self.sharing_jobs.remove(&id);
        // A job on a node's books is in memory (running, or pending while
        // its old run ends); were it not, its id still leaves the books.
        let res = self.jobs.get(&id).map_or(
            JobResources {
                cpus: 0,
                memory: MemoryRequest::Unspecified,
            },
            resources_of,
        );
        if let Some(n) = self.nodes.get_mut(node) {
            n.remove_running(id, &res);
            let running = &n.running;
            for s in &mut n.instances {
                if s.draining_for == Some(id) {
                    s.draining_for = None;
                }
                if s.isolated_owner == Some(id) {
                    // Handed to the job started early for it, if one waits.
                    s.isolated_owner = s.draining_for.filter(|j| running.contains(j));
                    if s.isolated_owner.is_some() {
                        s.draining_for = None;
                    }
                }
            }
        }
    }

    /// A job's processes ended on `node`.
    pub fn job_ended(&mut self, node: &str, ended: &JobEnded) -> Result<Vec<Effect>, ClusterError> {
        let id = ended.job_id;
        if self.is_stale(ended) {
            // An earlier run's end: logged, and nothing changes.
            return Ok(vec![Effect::Job {
                id,
                event: format!(
                    "end of run {} on {node} ignored: run {} is current",
                    ended.run, self.jobs[&id].run
                ),
            }]);
        }
        if self.requeued_runs.get(&id).is_some_and(|n| n == node) {
            // The run a requeue stopped: free its worker and instance; the
            // job itself is already pending again.
            self.requeued_runs.remove(&id);
            self.release_on(node, id);
            return Ok(vec![Effect::Job {
                id,
                event: "previous run ended".into(),
            }]);
        }
        let job = self.jobs.get(&id).ok_or(ClusterError::UnknownJob(id))?;
        if job.is_sister(node) {
            return Ok(self.sister_ended(node, ended));
        }
        let graced = self.graced.contains_key(&id)
            && job.state == JobState::Running
            && job.node.as_deref() == Some(node)
            && !ended.outcome.cause.is_node_failure();
        if graced {
            if let Some(effects) = self.graced_ended(id, ended) {
                return Ok(effects);
            }
        }
        let job = &self.jobs[&id];
        if job.state != JobState::Running {
            return self
                .late_end(node, ended)
                .ok_or(ClusterError::NotRunning(id));
        }
        if job.node.as_deref() != Some(node) {
            return Err(ClusterError::WrongNode {
                job: id,
                node: node.into(),
            });
        }
        if ended.outcome.cause.is_node_failure() {
            return Ok(self.lose(id, ended.end_time));
        }
        if let crate::outcome::EndCause::GpuFault(f) = &ended.outcome.cause {
            if f.requeues(job.spec.requeues()) {
                let mut effects = self.release(id);
                effects.extend(self.requeue_after_failure(
                    id,
                    ended.end_time,
                    "GpuFaultRequeued",
                    "requeued after a GPU fault",
                ));
                return Ok(effects);
            }
        }
        let (mut state, mut reason) = ended.outcome.final_state();
        if state == JobState::Cancelled && job.reason.as_deref() == Some(preemption::PREEMPTED) {
            // Cancelled to make room for another job.
            (state, reason) = (JobState::Preempted, Some(preemption::PREEMPTED.into()));
        }
        let stops = self.release(id);
        let job = self.jobs.get_mut(&id).expect("checked above");
        job.transition(state, ended.end_time)?;
        job.reason = reason;
        (job.exit_code, job.exit_signal) = ended.outcome.recorded_exit();
        job.record_usage(ended.usage, &ended.steps);
        // Its run time tells when the next run's instance will be free.
        self.footprints.note(job);
        let mut effects = vec![Effect::Job {
            id,
            event: format!("ended {state}"),
        }];
        effects.extend(stops);
        effects.extend(self.charge(id, ended.end_time));
        Ok(effects)
    }

    /// Takes what a node's running jobs have used so far (sstat). Only for
    /// jobs running there; never persisted before the job ends.
    pub fn note_usage(
        &mut self,
        node: &str,
        usage: &BTreeMap<JobId, crate::job::ResourceUsage>,
        steps: &BTreeMap<JobId, crate::job::StepUsage>,
    ) {
        let none = crate::job::StepUsage::default();
        for id in usage.keys().chain(steps.keys()) {
            if let Some(job) = self
                .jobs
                .get_mut(id)
                .filter(|j| j.state == JobState::Running && j.node.as_deref() == Some(node))
            {
                job.record_usage(usage.get(id).copied(), steps.get(id).unwrap_or(&none));
            }
        }
    }

    /// A step (`srun`) begins inside running job `id`: returns its number.
    pub fn begin_step(
        &mut self,
        id: JobId,
        name: &str,
        ntasks: u32,
        now: i64,
    ) -> Result<(u32, Vec<Effect>), ClusterError> {
        let job = self.jobs.get_mut(&id).ok_or(ClusterError::UnknownJob(id))?;
        if job.state != JobState::Running {
            return Err(ClusterError::NotRunning(id));
        }
        if job.steps.len() >= crate::job::MAX_STEPS {
            return Err(ClusterError::TooManySteps(id));
        }
        let step = job.steps.len() as u32;
        job.steps.push(Step {
            id: step,
            name: name.chars().take(crate::job::MAX_NAME_LEN).collect(),
            ntasks,
            start_time: now,
            end_time: None,
            state: JobState::Running,
            exit_code: None,
            exit_signal: None,
            usage: None,
        });
        Ok((
            step,
            vec![Effect::Job {
                id,
                event: format!("step {step} started"),
            }],
        ))
    }

    /// A step ended with the highest exit code (or a signal) of its tasks.
    pub fn end_step(
        &mut self,
        id: JobId,
        step: u32,
        exit_code: i32,
        signal: Option<i32>,
        now: i64,
    ) -> Result<Vec<Effect>, ClusterError> {
        let job = self.jobs.get_mut(&id).ok_or(ClusterError::UnknownJob(id))?;
        let s = job
            .steps
            .get_mut(step as usize)
            .filter(|s| s.end_time.is_none())
            .ok_or(ClusterError::NoSuchStep(id, step))?;
        s.end_time = Some(now);
        s.exit_code = Some(exit_code);
        s.exit_signal = signal.filter(|&x| x > 0);
        s.state = if exit_code == 0 && s.exit_signal.is_none() {
            JobState::Completed
        } else {
            JobState::Failed
        };
        Ok(vec![Effect::Job {
            id,
            event: format!("step {step} ended"),
        }])
    }

    /// Holds a pending job (`scontrol hold`) or releases it (`scontrol
    /// release`).
    pub fn set_held(&mut self, id: JobId, held: bool) -> Result<Vec<Effect>, ClusterError> {
        let job = self.jobs.get_mut(&id).ok_or(ClusterError::UnknownJob(id))?;
        if job.state != JobState::Pending {
            return Err(ClusterError::NotPending(id));
        }
        if job.held == held {
            return Ok(vec![]);
        }
        job.held = held;
        job.reason = held.then(|| "JobHeldUser".to_string());
        self.unexamined.push(id);
        Ok(vec![Effect::Job {
            id,
            event: if held { "held" } else { "released" }.into(),
        }])
    }

    /// Puts a running job back in the queue under the same id (`scontrol
    /// requeue`): PENDING at once, its processes stopped; it starts again
    /// once its node reports the old run ended.
    pub fn requeue(&mut self, id: JobId, now: i64) -> Result<Vec<Effect>, ClusterError> {
        let job = self.jobs.get_mut(&id).ok_or(ClusterError::UnknownJob(id))?;
        if job.state != JobState::Running {
            return Err(ClusterError::NotRunning(id));
        }
        let node = job.node.clone().unwrap_or_default();
        job.transition(JobState::Requeued, now)?;
        job.transition(JobState::Pending, now)?;
        job.reason = Some("BeginTime".into());
        let isolated = job.spec.isolated;
        // Its sisters' share is stopped now; its batch node's when that
        // run reports its end.
        let stops = self.release_sisters(id);
        self.enqueue(id, isolated);
        self.requeued_runs.insert(id, node.clone());
        let mut effects = vec![
            Effect::Job {
                id,
                event: "requeued".into(),
            },
            Effect::Signal {
                job: id,
                node,
                signal: SIGTERM,
                cancel: true,
            },
        ];
        effects.extend(stops);
        Ok(effects)
    }

    /// A running job (its resources released) goes back to the queue after
    /// a failure it did not cause.
    fn requeue_after_failure(
        &mut self,
        id: JobId,
        now: i64,
        reason: &str,
        event: &str,
    ) -> Vec<Effect> {
        let job = self.jobs.get_mut(&id).expect("caller checked");
        job.transition(JobState::Requeued, now)
            .expect("running job");
        job.transition(JobState::Pending, now)
            .expect("requeued job");
        job.reason = Some(reason.into());
        let isolated = job.spec.isolated;
        self.enqueue(id, isolated);
        vec![Effect::Job {
            id,
            event: event.into(),
        }]
    }

    /// A running job's processes are gone: NODE_FAIL, or back to the queue
    /// if it asked for requeue.
    fn lose(&mut self, id: JobId, now: i64) -> Vec<Effect> {
        if let Some(node) = self.requeued_runs.remove(&id) {
            // Already pending again: only its old run was lost, and with
            // it what it held on its node.
            self.release_on(&node, id);
            return vec![];
        }
        let mut effects = self.release(id);
        self.note_lost_run(id);
        // What it ran until now counts, as for any end.
        effects.extend(self.charge(id, now));
        let job = self.jobs.get_mut(&id).expect("caller checked");
        if job.spec.requeues() {
            effects.extend(self.requeue_after_failure(
                id,
                now,
                "NodeFailRequeued",
                "requeued after node failure",
            ));
        } else {
            job.transition(JobState::NodeFail, now)
                .expect("running job");
            job.reason = Some("NodeFail".into());
            effects.push(Effect::Job {
                id,
                event: "ended NODE_FAIL".into(),
            });
        }
        effects
    }

    /// Cancels a job: a queued one ends at once, a running one is signalled
    /// and ends when its node reports it. A finished job is left as it is.
    /// Cancels a job; `by` is the uid that asked (shown by sacct).
    pub fn cancel(
        &mut self,
        id: JobId,
        by: Option<u32>,
        now: i64,
    ) -> Result<Vec<Effect>, ClusterError> {
        let job = self.jobs.get_mut(&id).ok_or(ClusterError::UnknownJob(id))?;
        if matches!(
            job.state,
            JobState::Pending | JobState::Requeued | JobState::Running
        ) {
            job.cancelled_by = by;
        }
        match job.state {
            JobState::Pending | JobState::Requeued => {
                job.transition(JobState::Cancelled, now)?;
                job.reason = None;
                let isolated = job.spec.isolated;
                self.queue_for(isolated).remove(&id);
                Ok(vec![Effect::Job {
                    id,
                    event: "cancelled while pending".into(),
                }])
            }
            JobState::Running => {
                let node = job.node.clone().unwrap_or_default();
                Ok(vec![Effect::Signal {
                    job: id,
                    node,
                    signal: SIGTERM,
                    cancel: true,
                }])
            }
            _ => Ok(vec![]),
        }
    }

    /// Sends a signal to a running job without cancelling it.
    pub fn signal(&mut self, id: JobId, signal: i32) -> Result<Vec<Effect>, ClusterError> {
        let job = self.jobs.get(&id).ok_or(ClusterError::UnknownJob(id))?;
        if job.state != JobState::Running {
            return Err(ClusterError::NotRunning(id));
        }
        let node = job.node.clone().unwrap_or_default();
        Ok(vec![Effect::Signal {
            job: id,
            node,
            signal,
            cancel: false,
        }])
    }

    /// A node registers (first start, restart, or after the controller
    /// restarted). Reconciles its jobs: reported endings are applied, jobs the
    /// controller thinks run there but the node does not know are lost, and
    /// processes the controller does not expect are killed.
    pub fn register_node(&mut self, reg: &NodeRegistration, now: i64) -> Vec<Effect> {
        let mut effects = vec![Effect::Node {
            name: reg.name.clone(),
        }];
        let worker_limit = reg.worker_limit.unwrap_or_else(|| {
            let sum: u32 = reg.instances.iter().map(Instance::worker_limit).sum();
            if sum == 0 {
                reg.cpus.max(1)
            } else {
                sum
            }
        });
        let old = self.nodes.remove(&reg.name);
        self.forget_reshapes(&reg.name);
        let mut node = Node {
            name: reg.name.clone(),
            // A node that registers again stays drained or down.
            admin: old.as_ref().and_then(|o| o.admin.clone()),
            url: reg.url.clone(),
            cpus: reg.cpus,
            memory_mib: reg.memory_mib,
            worker_limit,
            up: true,
            instances: reg
                .instances
                .iter()
                .map(|i| InstanceSlot::new(i.clone()))
                .collect(),
            running: BTreeSet::new(),
            taken: (0, 0),
            suspended: BTreeSet::new(),
            shared: BTreeSet::new(),
            unconfirmed: false,
            instance_id: reg.instance_id.clone(),
            drain_sent: None,
            drain_seq: old.as_ref().map_or(0, |o| o.drain_seq),
            reshape_gpus: reg.reshape_gpus.iter().copied().collect(),
            mig_frozen: old
                .as_ref()
                .map(|o| o.mig_frozen.clone())
                .unwrap_or_default(),
            waiting_tasks: Vec::new(),
            waiting_reports: 0,
            reshape_keep: reg.reshape_keep.clone(),
        };
        // Keep the books of jobs we believe run there.
        let believed: Vec<JobId> = old
            .map(|o| o.running.into_iter().collect())
            .unwrap_or_default();
        for id in &believed {
            let j = &self.jobs[id];
            node.book(j);
            let held = j.instances_on(&reg.name);
            for s in node
                .instances
                .iter_mut()
                .filter(|s| held.contains(&s.instance.uuid))
            {
                early_start::book_running_on(s, j, &self.jobs);
            }
        }
        self.nodes.insert(reg.name.clone(), node);
        for e in &reg.ended {
            if let Ok(mut fx) = self.job_ended(&reg.name, e) {
                effects.append(&mut fx);
            }
        }
        for id in believed {
            let still = self.jobs[&id].state == JobState::Running;
            if still && !reg.running.contains(&id) {
                effects.extend(self.lose_from(&reg.name, id, now));
            }
        }
        effects.extend(self.reconcile_runs(&reg.name, &reg.running, &reg.runs));
        effects.extend(self.drain_changes());
        effects
    }

    /// A node stopped answering (or never came back after a controller
    /// restart): mark it down and lose its jobs.
    pub fn node_down(&mut self, name: &str, now: i64) -> Vec<Effect> {
        let Some(n) = self.nodes.get_mut(name) else {
            return vec![];
        };
        if !n.up && n.running.is_empty() {
            return vec![];
        }
        n.up = false;
        let running: Vec<JobId> = n.running.iter().copied().collect();
        let mut effects = vec![Effect::Node { name: name.into() }];
        for id in running {
            effects.extend(self.lose_from(name, id, now));
        }
        effects
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::GpuRequest;
    use crate::launch::CaseLaunch;
    use crate::outcome::{EndCause, GpuFault, ProcessOutcome};

    fn spec(isolated: bool, requeue: bool) -> JobSpec {
        JobSpec {
            name: "j".into(),
            script: "#!/bin/sh\ntrue\n".into(),
            working_dir: "/tmp".into(),
            user_name: "u".into(),
            uid: 1,
            gid: 1,
            submit_host: "h".into(),
            isolated,
            gpu: if isolated {
                GpuRequest {
                    model: None,
                    mig_profile: Some("1g.5gb".into()),
                    mem_mib: None,
                    share: None,
                    share_limit: None,
                    count: None,
                }
            } else {
                GpuRequest::default()
            },
            requeue: Some(requeue),
            ..JobSpec::default()
        }
    }

    fn reg(running: Vec<JobId>, ended: Vec<JobEnded>) -> NodeRegistration {
        NodeRegistration {
            worker_limit: Some(3),
            running,
            ..testkit::registration("n1", &[], ended)
        }
    }

    fn ended(id: JobId, code: i32, cause: EndCause) -> JobEnded {
        JobEnded {
            job_id: id,
            run: 0,
            outcome: ProcessOutcome {
                exit_code: Some(code),
                signal: None,
                cause,
            },
            end_time: 50,
            usage: None,
            steps: Default::default(),
        }
    }

    #[test]
    fn requeue_is_pending_at_once_but_starts_after_the_old_run_ends() {
        let mut c = Cluster::new(Box::new(CaseLaunch));
        c.register_node(&reg(vec![], vec![]), 0);
        let (a, _) = c.submit(spec(true, false), 1).unwrap();
        c.schedule(2);
        let inst = c.job(a).unwrap().gpu_instances.first().cloned();
        assert!(inst.is_some());
        let fx = c.requeue(a, 3).unwrap();
        assert!(fx
            .iter()
            .any(|e| matches!(e, Effect::Signal { cancel: true, .. })));
        assert_eq!(c.job(a).unwrap().state, JobState::Pending);
        assert_eq!(c.job(a).unwrap().restarts, 1);
        // The old run still holds its worker and instance: no relaunch yet.
        assert!(c.node("n1").unwrap().running.contains(&a));
        assert!(!c
            .schedule(4)
            .iter()
            .any(|e| matches!(e, Effect::Launch { .. })));
        assert_eq!(c.job(a).unwrap().reason.as_deref(), Some("BeginTime"));
        assert!(c.requeue(a, 4).is_err(), "only running jobs are requeued");
        c.job_ended("n1", &ended(a, 143, EndCause::Exited)).unwrap();
        assert_eq!(c.job(a).unwrap().state, JobState::Pending);
        assert!(c.schedule(5).contains(&Effect::Launch {
            job: a,
            node: "n1".into(),
            early: false
        }));
        assert_eq!(c.job(a).unwrap().state, JobState::Running);
    }

    #[test]
    fn a_requeued_run_found_after_a_restart_blocks_the_relaunch() {
        let mut c = Cluster::new(Box::new(CaseLaunch));
        c.register_node(&reg(vec![], vec![]), 0);
        let (a, _) = c.submit(spec(false, false), 1).unwrap();
        c.schedule(2);
        c.requeue(a, 3).unwrap();
        // The controller restarts: the requeue bookkeeping is gone, the
        // job is pending, and the node still runs the old process.
        let jobs: Vec<Job> = c.jobs().cloned().collect();
        let nodes: Vec<Node> = c.nodes().cloned().collect();
        let mut c = Cluster::restore(Box::new(CaseLaunch), jobs, nodes);
        let fx = c.register_node(&reg(vec![a], vec![]), 4);
        assert!(fx.contains(&Effect::StopRun {
            job: a,
            node: "n1".into(),
            run: None,
        }));
        assert!(!c
            .schedule(5)
            .iter()
            .any(|e| matches!(e, Effect::Launch { .. })));
        c.job_ended("n1", &ended(a, 137, EndCause::Exited)).unwrap();
        assert!(c.schedule(6).contains(&Effect::Launch {
            job: a,
            node: "n1".into(),
            early: false
        }));
    }

    #[test]
    fn a_retried_submission_is_the_same_job_across_a_restart() {
        let mut c = Cluster::new(Box::new(CaseLaunch));
        let keyed = |uid: u32, key: &str| JobSpec {
            uid,
            idempotency_key: Some(key.into()),
            ..spec(false, false)
        };
        let (a, fx) = c.submit(keyed(1, "k1"), 1).unwrap();
        assert_eq!(fx.len(), 1);
        // The retry: same user, same key, no new job and nothing to store.
        assert_eq!(c.submit(keyed(1, "k1"), 2).unwrap(), (a, vec![]));
        // Another user's key, or another key, is another job.
        assert_ne!(c.submit(keyed(2, "k1"), 3).unwrap().0, a);
        assert_ne!(c.submit(keyed(1, "k2"), 3).unwrap().0, a);
        let jobs: Vec<Job> = c.jobs().cloned().collect();
        let mut c = Cluster::restore(Box::new(CaseLaunch), jobs, vec![]);
        assert_eq!(c.submit(keyed(1, "k1"), 4).unwrap(), (a, vec![]));
        // A submission withdrawn because it could not be stored frees its key.
        let (b, _) = c.submit(keyed(1, "k3"), 5).unwrap();
        c.withdraw(b);
        let (b2, fx) = c.submit(keyed(1, "k3"), 6).unwrap();
        assert_eq!((b2 > b, fx.len()), (true, 1));
        assert!(c.submit(keyed(1, ""), 7).is_err());
    }

    #[test]
    fn submit_schedule_end() {
        let mut c = Cluster::new(Box::new(CaseLaunch));
        c.register_node(&reg(vec![], vec![]), 0);
        let (a, _) = c.submit(spec(true, false), 1).unwrap();
        let (b, _) = c.submit(spec(false, false), 1).unwrap();
        let fx = c.schedule(2);
        assert!(fx.contains(&Effect::Launch {
            job: a,
            node: "n1".into(),
            early: false
        }));
        assert!(fx.contains(&Effect::Launch {
            job: b,
            node: "n1".into(),
            early: false
        }));
        assert_eq!(c.job(a).unwrap().gpu_instances.len(), 1);
        assert!(c.job(b).unwrap().gpu_instances.is_empty());
        c.job_ended("n1", &ended(a, 0, EndCause::Exited)).unwrap();
        c.job_ended("n1", &ended(b, 2, EndCause::Exited)).unwrap();
        assert_eq!(c.job(a).unwrap().state, JobState::Completed);
        assert_eq!(c.job(b).unwrap().state, JobState::Failed);
        assert_eq!(c.job(b).unwrap().exit_code, Some(2));
        assert!(c.node("n1").unwrap().running.is_empty());
        assert!(c
            .node("n1")
            .unwrap()
            .instances
            .iter()
            .all(|s| s.isolated_owner.is_none()));
        // A second report of the same end is refused and changes nothing.
        assert!(matches!(
            c.job_ended("n1", &ended(a, 1, EndCause::Exited)),
            Err(ClusterError::NotRunning(_))
        ));
        assert_eq!(c.job(a).unwrap().state, JobState::Completed);
    }

    #[test]
    fn peaks_are_kept_and_learned_by_later_runs() {
        let mut c = Cluster::new(Box::new(CaseLaunch));
        c.register_node(&reg(vec![], vec![]), 0);
        let (a, _) = c.submit(spec(false, false), 1).unwrap();
        c.schedule(2);
        assert_eq!(c.record_peak(a, 3 << 30).len(), 1);
        assert!(
            c.record_peak(a, 1 << 30).is_empty(),
            "a lower peak changes nothing"
        );
        assert_eq!(c.job(a).unwrap().gpu_mem_peak, Some(3072));
        let (b, _) = c.submit(spec(false, false), 3).unwrap();
        assert_eq!(
            c.learned_footprint(b),
            None,
            "the earlier run has not finished"
        );
        c.job_ended("n1", &ended(a, 0, EndCause::Exited)).unwrap();
        assert_eq!(c.learned_footprint(b), Some(3072));
        // A restarted controller learns the same from the stored jobs.
        let r = Cluster::restore(Box::new(CaseLaunch), c.jobs().cloned().collect(), vec![]);
        assert_eq!(r.learned_footprint(b), Some(3072));
        // Same script under another name: still the same job.
        let mut renamed = spec(false, false);
        renamed.name = "other".into();
        let (d, _) = c.submit(renamed.clone(), 4).unwrap();
        assert_eq!(c.learned_footprint(d), Some(3072));
        // Another user's job learns nothing from it.
        renamed.user_name = "v".into();
        let (e, _) = c.submit(renamed, 5).unwrap();
        assert_eq!(c.learned_footprint(e), None);
    }

    #[test]
    fn a_learned_footprint_grows_at_once_and_shrinks_after_a_window_of_lighter_runs() {
        let mut c = Cluster::new(Box::new(CaseLaunch));
        c.register_node(&reg(vec![], vec![]), 0);
        let run = |c: &mut Cluster, at: i64, gib: u64| {
            let (id, _) = c.submit(spec(false, false), at).unwrap();
            c.schedule(at);
            c.record_peak(id, gib << 30);
            c.job_ended("n1", &ended(id, 0, EndCause::Exited)).unwrap();
            id
        };
        let next = |c: &mut Cluster, at: i64| {
            let (id, _) = c.submit(spec(false, false), at).unwrap();
            let mib = c.learned_footprint(id);
            c.cancel(id, None, at).unwrap();
            mib.map(|m| m >> 10)
        };
        run(&mut c, 1, 2);
        assert_eq!(next(&mut c, 2), Some(2));
        run(&mut c, 3, 8);
        assert_eq!(next(&mut c, 4), Some(8), "a heavier run counts at once");
        // Lighter runs: the heavy one still counts while it is among the
        // latest PEAK_WINDOW (3).
        run(&mut c, 5, 3);
        assert_eq!(next(&mut c, 6), Some(8));
        run(&mut c, 7, 3);
        assert_eq!(next(&mut c, 8), Some(8));
        run(&mut c, 9, 4);
        assert_eq!(next(&mut c, 10), Some(4), "three lighter runs in a row");
        // A restarted controller learns the same.
        let (id, _) = c.submit(spec(false, false), 11).unwrap();
        let r = Cluster::restore(Box::new(CaseLaunch), c.jobs().cloned().collect(), vec![]);
        assert_eq!(r.learned_footprint(id), Some(4 << 10));
    }

    #[test]
    fn gpu_shares_are_learned_from_the_latest_run_that_measured_one() {
        let mut c = Cluster::new(Box::new(CaseLaunch));
        c.register_node(&reg(vec![], vec![]), 0);
        let run = |c: &mut Cluster, at: i64, gpu_time_usec: Option<u64>| {
            let (id, _) = c.submit(spec(false, false), at).unwrap();
            c.schedule(at);
            c.record_peak(id, 1 << 30);
            let mut e = ended(id, 0, EndCause::Exited);
            e.end_time = at + 10;
            e.usage = Some(crate::job::ResourceUsage {
                gpu_time_usec,
                ..Default::default()
            });
            c.job_ended("n1", &e).unwrap();
            id
        };
        let a = run(&mut c, 0, Some(4_000_000));
        assert_eq!(c.job(a).unwrap().gpu_share(), Some(400), "4 s busy in 10 s");
        // A later run that measured nothing (a MIG instance) keeps the share.
        run(&mut c, 20, None);
        let (b, _) = c.submit(spec(false, false), 40).unwrap();
        assert_eq!(c.learned(b).share, Some(400));
        assert_eq!(c.learned(b).mib, Some(1024));
        // A later measured run replaces it.
        run(&mut c, 50, Some(9_000_000));
        let (d, _) = c.submit(spec(false, false), 70).unwrap();
        assert_eq!(c.learned(d).share, Some(900));
        // A restarted controller learns the same.
        let r = Cluster::restore(Box::new(CaseLaunch), c.jobs().cloned().collect(), vec![]);
        assert_eq!(r.learned(d).share, Some(900));
    }

    #[test]
    fn a_gpu_fault_fails_the_named_job_and_requeues_requeueable_neighbours() {
        let mut c = Cluster::new(Box::new(CaseLaunch));
        c.register_node(&reg(vec![], vec![]), 0);
        let (named, _) = c.submit(spec(false, true), 1).unwrap();
        let (plain, _) = c.submit(spec(false, false), 1).unwrap();
        let (requeueable, _) = c.submit(spec(false, true), 1).unwrap();
        c.schedule(2);
        let hit = [named, plain, requeueable];
        for id in hit {
            let mut e = ended(
                id,
                0,
                EndCause::GpuFault(GpuFault::of(
                    id,
                    "GPU-a",
                    &hit,
                    Some((474, Some(named))),
                    &[],
                )),
            );
            e.end_time = 9;
            c.job_ended("n1", &e).unwrap();
        }
        let j = c.job(named).unwrap();
        assert_eq!(j.state, JobState::Failed, "named, requeueable or not");
        assert!(
            j.reason.as_deref().unwrap().contains("GPU fault"),
            "{:?}",
            j.reason
        );
        assert_eq!(
            c.job(plain).unwrap().state,
            JobState::Failed,
            "exit 0 or not"
        );
        let r = c.job(requeueable).unwrap();
        assert_eq!(r.state, JobState::Pending);
        assert_eq!(r.reason.as_deref(), Some("GpuFaultRequeued"));
    }

    #[test]
    fn bad_spec_is_refused_and_nothing_queued() {
        let mut c = Cluster::new(Box::new(CaseLaunch));
        let mut s = spec(false, false);
        s.script = "no shebang".into();
        assert!(matches!(
            c.submit(s, 0),
            Err(ClusterError::Spec(SpecError::NoShebang))
        ));
        assert_eq!(c.pending_count(), 0);
        assert_eq!(c.jobs().count(), 0);
    }

    #[test]
    fn workers_limit_and_reasons() {
        let mut c = Cluster::new(Box::new(CaseLaunch));
        c.register_node(&reg(vec![], vec![]), 0);
        for _ in 0..5 {
            c.submit(spec(false, false), 0).unwrap();
        }
        c.schedule(1);
        assert_eq!(c.node("n1").unwrap().running.len(), 3);
        assert_eq!(c.job(4).unwrap().reason.as_deref(), Some("Resources"));
        // With every worker busy, a new job still gets its reason.
        let (late, _) = c.submit(spec(false, false), 2).unwrap();
        assert_eq!(c.job(late).unwrap().reason, None);
        assert!(c.schedule(3).is_empty());
        assert_eq!(c.job(late).unwrap().reason.as_deref(), Some("Resources"));
        c.node_down("n1", 4);
        let (down, _) = c.submit(spec(false, false), 5).unwrap();
        c.schedule(6);
        assert_eq!(c.job(down).unwrap().reason.as_deref(), Some("NodeDown"));
    }

    #[test]
    fn begun_tasks_mark_an_idle_instance_busy_until_the_heartbeat() {
        let mut c = Cluster::new(Box::new(CaseLaunch));
        c.register_node(&reg(vec![], vec![]), 0);
        let uuid = c.node("n1").unwrap().instances[0].instance.uuid.clone();
        let rec = |job, end_ms| crate::probe::TaskRecord {
            job,
            task: 1,
            pid: 5,
            instance: uuid.clone(),
            bytes: 1 << 30,
            warps: 0,
            share: 0,
            begin_ms: 0,
            end_ms,
        };
        c.note_tasks_begun("n1", &[rec(3, Some(9))]);
        assert_eq!(
            c.node("n1").unwrap().instances[0].active_tasks,
            0,
            "ended: no change"
        );
        c.note_tasks_begun("n1", &[rec(3, None), rec(3, None)]);
        let s = &c.node("n1").unwrap().instances[0];
        assert_eq!((s.active_tasks, s.reserved_bytes), (1, 1 << 30));
        c.update_instance_use("n1", &std::collections::BTreeMap::new());
        assert_eq!(
            c.node("n1").unwrap().instances[0].active_tasks,
            0,
            "the heartbeat wins"
        );
    }

    #[test]
    fn an_isolated_owner_holds_the_instance_once_shared_tasks_left() {
        let mut c = Cluster::new(Box::new(CaseLaunch));
        c.register_node(&reg(vec![], vec![]), 0);
        let n = c.nodes.get_mut("n1").unwrap();
        assert_eq!(n.state_name(), "IDLE");
        let s = &mut n.instances[0];
        let whole = s.instance.memory_mib * 1024 * 1024;
        s.isolated_owner = Some(4);
        s.job_bytes.insert(9, 1 << 30);
        s.reserved_bytes = 1 << 30;
        assert_eq!((s.holder(), s.held_bytes()), (None, 1 << 30), "owner waits");
        s.job_bytes.clear();
        s.reserved_bytes = 0;
        assert_eq!((s.holder(), s.held_bytes()), (Some(4), whole));
        n.add_running(4, &resources_of(&Job::new(4, JobSpec::default(), 0)), true);
        assert_eq!(n.state_name(), "MIXED");
        n.up = false;
        assert_eq!(n.state_name(), "DOWN");
    }

    #[test]
    fn cancel_pending_and_running() {
        let mut c = Cluster::new(Box::new(CaseLaunch));
        let (a, _) = c.submit(spec(false, false), 0).unwrap();
        c.cancel(a, None, 1).unwrap();
        assert_eq!(c.job(a).unwrap().state, JobState::Cancelled);
        assert_eq!(c.pending_count(), 0);
        assert_eq!(c.cancel(a, None, 2).unwrap(), vec![]);
        c.register_node(&reg(vec![], vec![]), 0);
        let (b, _) = c.submit(spec(false, false), 0).unwrap();
        c.schedule(1);
        let fx = c.cancel(b, Some(7), 2).unwrap();
        assert_eq!(c.job(b).unwrap().cancelled_by, Some(7), "who asked is kept");
        assert_eq!(
            fx,
            vec![Effect::Signal {
                job: b,
                node: "n1".into(),
                signal: SIGTERM,
                cancel: true
            }]
        );
        c.job_ended("n1", &ended(b, 0, EndCause::Cancelled))
            .unwrap();
        assert_eq!(c.job(b).unwrap().state, JobState::Cancelled);
        assert!(matches!(
            c.cancel(99, None, 0),
            Err(ClusterError::UnknownJob(99))
        ));
    }

    #[test]
    fn node_loss_fails_or_requeues() {
        let mut c = Cluster::new(Box::new(CaseLaunch));
        c.register_node(&reg(vec![], vec![]), 0);
        let (a, _) = c.submit(spec(false, false), 0).unwrap();
        let (b, _) = c.submit(spec(true, true), 0).unwrap();
        testkit::launch(&mut c, 1);
        c.node_down("n1", 5);
        assert_eq!(c.job(a).unwrap().state, JobState::NodeFail);
        let jb = c.job(b).unwrap();
        assert_eq!(
            (jb.state, jb.restarts, jb.node.clone()),
            (JobState::Pending, 1, None)
        );
        // Down node: nothing launches.
        assert!(c.schedule(6).is_empty());
        c.register_node(&reg(vec![], vec![]), 7);
        assert!(c.schedule(8).contains(&Effect::Launch {
            job: b,
            node: "n1".into(),
            early: false
        }));
    }

    #[test]
    fn restore_and_reregister_reconciles() {
        let reg4 = |running, ended| NodeRegistration {
            worker_limit: Some(4),
            ..reg(running, ended)
        };
        let mut c = Cluster::new(Box::new(CaseLaunch));
        c.register_node(&reg4(vec![], vec![]), 0);
        for _ in 0..3 {
            c.submit(spec(false, false), 0).unwrap();
        }
        let (iso, _) = c.submit(spec(true, true), 0).unwrap();
        testkit::launch(&mut c, 1);
        // Controller restarts: rebuild from the "store".
        let jobs: Vec<Job> = c.jobs().cloned().collect();
        let nodes: Vec<Node> = c.nodes().cloned().collect();
        let mut c = Cluster::restore(Box::new(CaseLaunch), jobs, nodes);
        assert!(
            c.schedule(2).is_empty(),
            "nothing launches before the node is back"
        );
        // Job 1 finished meanwhile, 2 still runs, 3 and the isolated job are gone;
        // job 77 is unknown and must be killed.
        let fx = c.register_node(&reg4(vec![2, 77], vec![ended(1, 0, EndCause::Exited)]), 3);
        assert_eq!(c.job(1).unwrap().state, JobState::Completed);
        assert_eq!(c.job(2).unwrap().state, JobState::Running);
        assert_eq!(c.job(3).unwrap().state, JobState::NodeFail);
        assert_eq!(c.job(iso).unwrap().state, JobState::Pending);
        assert!(fx.contains(&Effect::StopRun {
            job: 77,
            node: "n1".into(),
            run: None,
        }));
        assert_eq!(
            c.node("n1")
                .unwrap()
                .running
                .iter()
                .copied()
                .collect::<Vec<_>>(),
            vec![2]
        );
        // The isolated job can have its instance again; ids continue.
        assert!(c
            .schedule(4)
            .iter()
            .any(|e| matches!(e, Effect::Launch { job, .. } if *job == iso)));
        assert_eq!(c.submit(spec(false, false), 5).unwrap().0, 5);
    }

    #[test]
    fn unreachable_node_requeues_without_counting_a_restart() {
        let mut c = Cluster::new(Box::new(CaseLaunch));
        c.register_node(&reg(vec![], vec![]), 0);
        let (a, _) = c.submit(spec(false, false), 0).unwrap();
        c.schedule(1);
        c.launch_unreachable(a, "n1", 2);
        let j = c.job(a).unwrap();
        assert_eq!((j.state, j.restarts), (JobState::Pending, 0));
        assert!(
            c.node("n1").unwrap().up,
            "only the node's lease says it is down"
        );
        c.node_heard("n1");
        c.schedule(4);
        let fx = c.launch_refused(a, "user 1 is not the daemon's user".into(), 5);
        assert_eq!(fx.len(), 1);
        assert_eq!(c.job(a).unwrap().state, JobState::Failed);
    }
}
