//! Jobs: what a user submits ([`JobSpec`]), what the controller tracks
//! ([`Job`]), and the state machine that governs them ([`JobState`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::resources::{JobResources, MemoryRequest};

mod stored_text;
mod text;
mod uid_policy;
mod validate;

pub use crate::job_state::{IllegalTransition, JobId, JobState, UnknownState};
pub use stored_text::{intercept_off, script_hash, JobText, StoredText};
pub use text::{is_unprintable, MAX_ARGUMENTS_BYTES, MAX_ENVIRONMENT_BYTES, MAX_OPTION_BYTES};
pub use uid_policy::{JobUidPolicy, UidRefused, DEFAULT_MIN_JOB_UID};
pub use validate::SpecError;

/// Nice values are bounded as in Slurm (`--nice` and `Nice=`).
pub const NICE_LIMIT: i64 = 2_147_483_645;

/// Longest job name accepted (Slurm truncates at 1024 as well).
pub const MAX_NAME_LEN: usize = 1024;

pub use crate::units::MAX_TIME_LIMIT_SECS;

/// Largest GPU memory request accepted, MiB (16 TiB: far above any GPU, far
/// below where MiB-to-bytes arithmetic could overflow).
pub const MAX_GPU_MEM_MIB: u64 = 16 << 20;

/// The umask a job gets when its submission carried none.
pub const DEFAULT_UMASK: u32 = 0o022;

pub use crate::gpu::{GpuRequest, MAX_GPUS_PER_JOB};

/// What a user submits. The controller validates it with [`JobSpec::validate`].
/// `Default` is an empty spec, for building one field by field.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct JobSpec {
    pub name: String,
    /// The batch script itself (copied at submit time).
    pub script: String,
    /// Arguments passed to the script.
    #[serde(default)]
    pub argv: Vec<String>,
    /// The environment the job starts with (the submitter's with `--export=ALL`).
    #[serde(default)]
    pub environment: BTreeMap<String, String>,
    pub working_dir: String,
    pub user_name: String,
    pub uid: u32,
    pub gid: u32,
    /// Host the job was submitted from (`SLURM_SUBMIT_HOST`).
    #[serde(default)]
    pub submit_host: String,
    #[serde(default)]
    pub isolated: bool,
    #[serde(default)]
    pub gpu: GpuRequest,
    /// Time limit in seconds; `None` is unlimited.
    #[serde(default)]
    pub time_limit: Option<u64>,
    /// Output file pattern; `None` means `slurm-%j.out`.
    #[serde(default)]
    pub stdout: Option<String>,
    /// Error file pattern; `None` means the output file.
    #[serde(default)]
    pub stderr: Option<String>,
    /// Requeue instead of NODE_FAIL when the node is lost (`--requeue`,
    /// `--no-requeue`); `None`: the controller's default (Slurm's
    /// JobRequeue, on unless configured off), set when it accepts the job.
    #[serde(default)]
    pub requeue: Option<bool>,
    #[serde(default)]
    pub partition: Option<String>,
    /// An array request (`--array`): the controller makes one job per index.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array: Option<crate::array::ArrayRequest>,
    /// Submit held (`--hold`): the job waits for `scontrol release`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hold: bool,
    /// Jobs this one waits for (`--dependency`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dependency: Option<crate::dependency::Dependency>,
    /// Not started before this (unix seconds; `--begin`): pending with
    /// reason `BeginTime` until then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub begin: Option<i64>,
    /// The job's place in its array, set by the controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array_task: Option<crate::array::ArrayTask>,
    /// Slurm options recorded and shown (some acted on; docs/slurm.md).
    #[serde(default, skip_serializing_if = "SlurmOptions::is_empty")]
    pub slurm: SlurmOptions,
    /// The submitter's umask (`SLURM_UMASK`): the job's files are created
    /// with it. `None`: [`DEFAULT_UMASK`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub umask: Option<u32>,
    /// A key the client chose for this submission (`Idempotency-Key`): a
    /// second submission by the same user with the same key is the same
    /// job, so a client may retry after a lost answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// Taken off the job's priority (`--nice`, `Nice=`): positive lowers
    /// it; only administrators give a negative one.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub nice: i64,
    /// The submitter's resource limits (`gsub`/`sbatch` send them, as
    /// Slurm's PropagateResourceLimits does); empty: the node's defaults.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub rlimits: crate::rlimits::ResourceLimits,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

/// Longest idempotency key accepted.
pub const MAX_IDEMPOTENCY_KEY_LEN: usize = 255;

pub use crate::slurm_options::SlurmOptions;

/// A signal sent ahead of the time limit (`--signal=[B:]SIG[@SECS]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct WarnSignal {
    pub signal: i32,
    pub secs_before: u64,
    /// `B:`: the batch shell only, not every process of the job.
    pub batch_only: bool,
}

/// A malformed `--signal` value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Invalid --signal specification '{0}': expected [B:]SIG[@SECS], e.g. USR1@90")]
pub struct BadWarnSignal(pub String);

impl WarnSignal {
    /// Parses `[B:]SIG[@SECS]`; SECS is 60 when left out, as in Slurm.
    pub fn parse(value: &str) -> Result<WarnSignal, BadWarnSignal> {
        let bad = || BadWarnSignal(value.to_string());
        let (batch_only, rest) = match value.strip_prefix("B:") {
            Some(r) => (true, r),
            None => (false, value),
        };
        let (sig, secs) = match rest.split_once('@') {
            Some((s, t)) => (s, t.parse().map_err(|_| bad())?),
            None => (rest, 60),
        };
        Ok(WarnSignal {
            signal: crate::outcome::parse_signal(sig).map_err(|_| bad())?,
            secs_before: secs,
            batch_only,
        })
    }
}

impl JobSpec {
    /// The GPU time quota the job states (`--gpu-share=REQ[:LIMIT]`).
    pub fn stated_time_quota(&self) -> Option<crate::time_quota::TimeQuota> {
        let request = self.gpu.share?;
        Some(crate::time_quota::TimeQuota {
            request,
            limit: self.gpu.share_limit.unwrap_or(crate::compute::WHOLE_GPU),
            latency_critical: false,
        })
    }

    /// Whether the job goes back to the queue when its node is lost (its
    /// `requeue`, as the controller settled it at submission).
    pub fn requeues(&self) -> bool {
        self.requeue == Some(true)
    }
}

/// A job as the controller tracks it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Job {
    pub id: JobId,
    pub spec: JobSpec,
    pub state: JobState,
    /// Why the job is pending, or why it ended the way it did.
    pub reason: Option<String>,
    pub exit_code: Option<i32>,
    /// Signal that ended the batch script, if any.
    pub exit_signal: Option<i32>,
    pub submit_time: i64,
    pub start_time: Option<i64>,
    pub end_time: Option<i64>,
    pub node: Option<String>,
    /// UUIDs of the instances an isolated job holds, in the order its
    /// `CUDA_VISIBLE_DEVICES` names them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpu_instances: Vec<String>,
    /// Peak GPU memory reported by the job's probes, MiB.
    pub gpu_mem_peak: Option<u64>,
    /// How many times the job went back to the queue.
    pub restarts: u32,
    /// How many of those were after a GPU fault that tore it down as a
    /// bystander (bounded: `Cluster::set_max_gpu_fault_requeues`).
    #[serde(default)]
    pub gpu_fault_requeues: u32,
    /// Held by its user: pending, and not started until released.
    #[serde(default)]
    pub held: bool,
    /// Steps started by `srun` inside the current run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<Step>,
    /// The uid that cancelled the job, when one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancelled_by: Option<u32>,
    /// The run generation: 0 before the first launch, one more at each
    /// launch. Launches, the node's books, signals and end reports carry
    /// it, so a report from an earlier run never changes a later one.
    #[serde(default)]
    pub run: u32,
    /// Running, but the node has not yet confirmed the launch (Slurm's
    /// CONFIGURING): persisted before the launch is sent, so a controller
    /// that restarts knows the run may never have begun.
    #[serde(default)]
    pub launching: bool,
    /// CPU time and memory the job's processes used, from its cgroup: so
    /// far while it runs, in total once it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<ResourceUsage>,
    /// What the batch step's processes used (its own cgroup, without the
    /// `srun` steps'): sacct's `.batch` row.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_usage: Option<ResourceUsage>,
    /// The job's other nodes, after `node` (its batch node), for a job on
    /// several (`-N`): each holds its share of the job (cgroup, CPUs,
    /// memory, instances) and runs the tasks of its steps there. Kept once
    /// the job ended (its node list).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sisters: Vec<Sister>,
    /// The current run's suspensions (SUSPENDED while stopped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspension: Option<crate::suspension::Suspension>,
    /// Preempted and in its QOS's grace time (running until it ends).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grace: Option<crate::preempt::Grace>,
    /// Set once the job's script and environment are in the controller's
    /// store only (see [`Job::take_text`]); never sent to a node.
    #[serde(default, skip)]
    pub stored_text: Option<StoredText>,
}

/// One of a job's nodes after its first (see [`Job::sisters`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sister {
    pub node: String,
    /// The instances the job holds there, in its device order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub instances: Vec<String>,
}

/// What a job's processes used, as its node's cgroup counted it (sacct's
/// MaxRSS, AveRSS, MaxVMSize, UserCPU, SystemCPU; TotalCPU is their sum).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ResourceUsage {
    /// The most memory in use at once (bytes): the cgroup's peak, which is
    /// what `--mem` limits.
    pub max_rss: u64,
    /// Memory in use on average over the samples (bytes).
    pub ave_rss: u64,
    /// The largest sum of the processes' virtual sizes seen (bytes).
    pub max_vmsize: u64,
    pub user_cpu_usec: u64,
    pub system_cpu_usec: u64,
    /// GPU time: how long the job's processes kept a GPU's SMs busy, summed
    /// from the driver's per-process utilization samples (NVML), in
    /// microseconds. `None` where the driver gives none (MIG instances,
    /// simulated GPUs, a node without NVML).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_time_usec: Option<u64>,
    /// How long the job's intercepted processes kept their instances busy
    /// (work in flight on one of their streams, as the interception library
    /// sampled it), in microseconds of a whole GPU: a process busy all the
    /// time on an instance of a seventh of a GPU counts a seventh of its
    /// time. Measured under MPS and on MIG instances too, where the driver
    /// gives no GPU time. `None` where no process reported it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_busy_usec: Option<u64>,
    /// How long those processes were placed, summed (microseconds): the
    /// time `gpu_busy_usec` is a part of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_placed_usec: Option<u64>,
}

impl ResourceUsage {
    /// The share of a GPU the run's processes kept busy while placed, where
    /// the interception measured it; else its GPU time over its elapsed
    /// time (`elapsed_secs`), where the driver measured any. Thousandths
    /// ([`crate::compute`]).
    pub fn gpu_share(&self, elapsed_secs: i64) -> Option<u32> {
        crate::compute::share_of_busy(self.gpu_busy_usec, self.gpu_placed_usec)
            .or_else(|| crate::compute::share_of_run(self.gpu_time_usec, elapsed_secs))
    }

    pub fn total_cpu_usec(&self) -> u64 {
        self.user_cpu_usec.saturating_add(self.system_cpu_usec)
    }
}

impl Job {
    /// Every node of its allocation, its batch node first (none before it
    /// started).
    pub fn nodes(&self) -> Vec<&str> {
        self.node
            .iter()
            .map(String::as_str)
            .chain(self.sisters.iter().map(|s| s.node.as_str()))
            .collect()
    }

    /// Whether `node` is one of its allocation's (batch node or sister).
    pub fn runs_on(&self, node: &str) -> bool {
        self.node.as_deref() == Some(node) || self.is_sister(node)
    }

    /// Whether `node` is one of its sisters (not its batch node).
    pub fn is_sister(&self, node: &str) -> bool {
        self.node.as_deref() != Some(node) && self.sisters.iter().any(|s| s.node == node)
    }

    /// The instances it holds on `node`.
    pub fn instances_on(&self, node: &str) -> &[String] {
        if self.node.as_deref() == Some(node) {
            return &self.gpu_instances;
        }
        self.sisters
            .iter()
            .find(|s| s.node == node)
            .map_or(&[], |s| &s.instances)
    }

    /// The share of a GPU this (finished) run kept busy, thousandths
    /// ([`ResourceUsage::gpu_share`]).
    pub fn gpu_share(&self) -> Option<u32> {
        let elapsed = self.end_time? - self.start_time?;
        self.usage.as_ref()?.gpu_share(elapsed)
    }

    /// The id its submission was answered with: the array's for a task of
    /// an array, else its own.
    pub fn submitted_as(&self) -> JobId {
        self.spec
            .array_task
            .as_ref()
            .map_or(self.id, |t| t.array_job_id)
    }

    /// Whether the controller keeps the job's environment in memory: only
    /// while it may still start (a finished job's stays in the store).
    pub fn keeps_environment(state: JobState) -> bool {
        !state.is_final()
    }
}

/// The most steps one run of a job may start (Slurm's MaxStepCount).
pub const MAX_STEPS: usize = 40_000;

/// What the steps of a running job have used, as its node counts them in
/// their cgroups: the batch step's and each `srun` step's (those that ended
/// in total, the running ones so far).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepUsage {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<ResourceUsage>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub steps: BTreeMap<u32, ResourceUsage>,
}

impl StepUsage {
    pub fn is_empty(&self) -> bool {
        self.batch.is_none() && self.steps.is_empty()
    }
}

/// A step: one `srun` inside a job (`ID.0`, `ID.1`, ...).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Step {
    pub id: u32,
    /// The command it ran.
    pub name: String,
    pub ntasks: u32,
    pub start_time: i64,
    pub end_time: Option<i64>,
    pub state: JobState,
    pub exit_code: Option<i32>,
    pub exit_signal: Option<i32>,
    /// What its processes used (its own cgroup), as its node reported it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<ResourceUsage>,
}

impl Job {
    /// The CPUs and memory the job takes on its node. A job stored before
    /// its request was checked and found wanting takes one CPU and no
    /// memory.
    pub fn resources(&self) -> JobResources {
        JobResources::of(&self.spec.slurm).unwrap_or(JobResources {
            cpus: 1,
            memory: MemoryRequest::Unspecified,
        })
    }
}

impl Job {
    pub fn new(id: JobId, spec: JobSpec, now: i64) -> Job {
        let held = spec.hold;
        Job {
            id,
            spec,
            state: JobState::Pending,
            reason: None,
            exit_code: None,
            exit_signal: None,
            submit_time: now,
            start_time: None,
            end_time: None,
            node: None,
            gpu_instances: Vec::new(),
            gpu_mem_peak: None,
            usage: None,
            batch_usage: None,
            sisters: Vec::new(),
            restarts: 0,
            gpu_fault_requeues: 0,
            held,
            steps: Vec::new(),
            cancelled_by: None,
            run: 0,
            launching: false,
            suspension: None,
            grace: None,
            stored_text: None,
        }
    }

    /// Moves the job to `to`, checking the state machine and keeping the
    /// times and placement consistent with the new state.
    pub fn transition(&mut self, to: JobState, now: i64) -> Result<(), IllegalTransition> {
        self.state = self.state.transition(to)?;
        // Every start is a launch to be confirmed; leaving RUNNING ends it.
        self.launching = to == JobState::Running;
        // Leaving RUNNING ends a suspension (its time counted) and a grace
        // time.
        if let Some(s) = self.suspension.as_mut() {
            s.resume(now);
        }
        self.grace = None;
        match to {
            JobState::Running => {
                self.suspension = None;
                self.start_time = Some(now);
                self.end_time = None;
                self.reason = None;
                self.run += 1;
            }
            JobState::Pending => {
                // Back in the queue after a requeue: forget the last run's placement.
                self.node = None;
                self.gpu_instances.clear();
                self.start_time = None;
                self.end_time = None;
                self.exit_code = None;
                self.exit_signal = None;
                self.restarts += 1;
                self.steps.clear();
            }
            JobState::Requeued => {}
            _ => {
                self.end_time = Some(now);
                // Steps still running end with the job.
                for s in self.steps.iter_mut().filter(|s| s.end_time.is_none()) {
                    s.end_time = Some(now);
                    s.state = to;
                }
            }
        }
        Ok(())
    }

    /// Puts a launching job back in the queue: its launch was never
    /// confirmed, so as far as anyone knows it never started, and no restart
    /// is counted. The run number stays, so a late report of that run is
    /// recognised.
    pub fn return_unstarted(&mut self, now: i64) -> Result<(), IllegalTransition> {
        let restarts = self.restarts;
        self.transition(JobState::Requeued, now)?;
        self.transition(JobState::Pending, now)?;
        self.restarts = restarts;
        // Back in the queue, it is not being cancelled (see `cancelling`).
        self.cancelled_by = None;
        Ok(())
    }

    /// The state in Slurm's words: CONFIGURING for a job whose launch the
    /// node has not confirmed, else the state's own name.
    pub fn state_name(&self) -> &'static str {
        if self.cancelling() {
            "COMPLETING"
        } else if self.launching && self.state == JobState::Running {
            "CONFIGURING"
        } else if self.is_suspended() {
            "SUSPENDED"
        } else {
            self.state.as_str()
        }
    }

    /// Cancelled by a user while running: shown CANCELLED, and completing
    /// (Slurm's `CG`) until its node reports its processes gone. It keeps
    /// its resources until then, and its run ends CANCELLED whatever the
    /// processes did.
    pub fn cancelling(&self) -> bool {
        self.state == JobState::Running && self.cancelled_by.is_some()
    }

    /// Ends a job being cancelled ([`Job::cancelling`]): CANCELLED, as its
    /// users already see it, whatever ended its run.
    pub fn end_cancelled(&mut self, now: i64) {
        self.transition(JobState::Cancelled, now)
            .expect("a job being cancelled is running");
        self.reason = None;
    }

    /// The state users see: CANCELLED for a job being cancelled, else its
    /// state.
    pub fn shown_state(&self) -> JobState {
        if self.cancelling() {
            JobState::Cancelled
        } else {
            self.state
        }
    }

    /// Running, and stopped (Slurm's SUSPENDED).
    pub fn is_suspended(&self) -> bool {
        self.state == JobState::Running && self.suspension.is_some_and(|s| s.is_suspended())
    }

    /// Seconds the current (or last) run was suspended, up to `now`.
    pub fn suspended_secs(&self, now: i64) -> i64 {
        self.suspension.map_or(0, |s| s.secs_until(now))
    }

    /// The end a run lost with its node really had, reported once the node
    /// was back: it replaces NODE_FAIL, or the requeue that followed the
    /// loss when the job has not started again (`requeued`). The only way a
    /// final state changes: NODE_FAIL said "we do not know how it ended".
    pub fn settle_lost_run(&mut self, to: JobState, start: Option<i64>, end: i64, requeued: bool) {
        self.state = to;
        self.start_time = start;
        self.end_time = Some(end);
        if requeued {
            self.restarts = self.restarts.saturating_sub(1);
        }
    }

    /// Takes what its node counted: the whole job's use and its steps'.
    /// Only steps the job has are given usage (a node counts what a job's
    /// `srun` calls say their step is; a step number the controller never
    /// handed out only shows in the job's total).
    pub fn record_usage(&mut self, total: Option<ResourceUsage>, steps: &StepUsage) {
        if total.is_some() {
            self.usage = total;
        }
        if steps.batch.is_some() {
            self.batch_usage = steps.batch;
        }
        for (id, u) in &steps.steps {
            if let Some(s) = self.steps.get_mut(*id as usize) {
                s.usage = Some(*u);
            }
        }
    }

    /// Seconds the job has run (up to `now` while running), leaving out
    /// the time it was suspended.
    pub fn elapsed(&self, now: i64) -> i64 {
        let wall = match (self.start_time, self.end_time) {
            (Some(s), Some(e)) => (e - s).max(0),
            (Some(s), None) => (now - s).max(0),
            _ => 0,
        };
        let end = self.end_time.unwrap_or(now);
        (wall - self.suspended_secs(end)).max(0)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn warn_signals_as_slurm_spells_them() {
        let w = WarnSignal::parse("B:USR1@90").unwrap();
        assert_eq!((w.signal, w.secs_before, w.batch_only), (10, 90, true));
        let w = WarnSignal::parse("SIGUSR2").unwrap();
        assert_eq!((w.signal, w.secs_before, w.batch_only), (12, 60, false));
        assert_eq!(WarnSignal::parse("15@5").unwrap().signal, 15);
        for bad in ["USR1@x", "NOPE@5", "B:", ""] {
            assert_eq!(
                WarnSignal::parse(bad).unwrap_err().to_string(),
                format!(
                    "Invalid --signal specification '{bad}': expected [B:]SIG[@SECS], e.g. USR1@90"
                )
            );
        }
    }
    use proptest::prelude::*;

    pub(crate) fn spec() -> JobSpec {
        JobSpec {
            name: "t".into(),
            script: "#!/bin/sh\ntrue\n".into(),
            working_dir: "/tmp".into(),
            user_name: "u".into(),
            uid: 1000,
            gid: 1000,
            submit_host: "h".into(),
            ..JobSpec::default()
        }
    }

    #[test]
    fn names_round_trip() {
        for st in JobState::ALL {
            assert_eq!(JobState::parse(st.as_str()).unwrap(), st);
            assert_eq!(JobState::parse(st.compact()).unwrap(), st);
            assert_eq!(JobState::parse(&st.as_str().to_lowercase()).unwrap(), st);
        }
        assert!(JobState::parse("RUN").is_err());
    }

    #[test]
    fn final_states_never_change() {
        for from in JobState::ALL.into_iter().filter(|s| s.is_final()) {
            for to in JobState::ALL {
                assert!(from.transition(to).is_err(), "{from} -> {to} allowed");
            }
        }
    }

    #[test]
    fn legal_and_illegal_examples() {
        use JobState::*;
        assert!(Pending.transition(Running).is_ok());
        assert!(Running.transition(Timeout).is_ok());
        assert!(Requeued.transition(Pending).is_ok());
        let err = Pending.transition(Completed).unwrap_err();
        assert_eq!(
            err.to_string(),
            "job state cannot change from PENDING to COMPLETED"
        );
        assert!(Pending.transition(Pending).is_err());
        assert!(Running.transition(Pending).is_err());
    }

    #[test]
    fn validation_names_the_problem() {
        let mut s = spec();
        assert!(s.validate().is_ok());
        s.script = "echo hi\n".into();
        assert_eq!(s.validate(), Err(SpecError::NoShebang));
        let mut s = spec();
        s.isolated = true;
        // No footprint: any instance will do (the smallest free one).
        assert!(s.validate().is_ok());
        s.gpu.mig_profile = Some("1g.5gb".into());
        assert!(s.validate().is_ok());
        s.gpu.mig_profile = Some("big".into());
        assert_eq!(s.validate(), Err(SpecError::BadProfile("big".into())));
        let mut s = spec();
        s.working_dir = "rel".into();
        assert!(matches!(
            s.validate(),
            Err(SpecError::RelativeWorkingDir(_))
        ));
        let mut s = spec();
        s.gpu.mig_profile = Some("1g.5gb".into());
        assert!(matches!(
            s.validate(),
            Err(SpecError::ProfileWithoutIsolated(_))
        ));
    }

    #[test]
    fn out_of_range_numbers_and_nul_bytes_are_refused() {
        let refused = |f: &dyn Fn(&mut JobSpec)| {
            let mut s = spec();
            f(&mut s);
            s.validate().unwrap_err()
        };
        assert_eq!(
            refused(&|s| s.time_limit = Some(u64::MAX)),
            SpecError::TimeLimitTooLong(u64::MAX)
        );
        let mut s = spec();
        s.time_limit = Some(MAX_TIME_LIMIT_SECS);
        assert!(s.validate().is_ok());
        assert_eq!(
            refused(&|s| s.gpu.mem_mib = Some(u64::MAX)),
            SpecError::GpuMemTooLarge(u64::MAX)
        );
        assert_eq!(
            refused(&|s| s.umask = Some(0o1777)),
            SpecError::BadUmask(0o1777)
        );
        // A GPU share is for shared jobs, above 0 and at most a whole GPU
        // (a REST submission is checked here; gsub reads it first).
        assert_eq!(
            refused(&|s| s.gpu.share = Some(0)),
            SpecError::BadGpuShare(0)
        );
        assert_eq!(
            refused(&|s| s.gpu.share = Some(1001)),
            SpecError::BadGpuShare(1001)
        );
        assert_eq!(
            refused(&|s| {
                s.isolated = true;
                s.gpu.share = Some(500);
            }),
            SpecError::GpuShareWithIsolated
        );
        let mut s = spec();
        s.gpu.share = Some(1000);
        assert!(s.validate().is_ok());
        assert_eq!(
            refused(&|s| {
                s.environment.insert("A".into(), "x\0y".into());
            }),
            SpecError::Nul("environment")
        );
        assert_eq!(
            refused(&|s| {
                s.environment.insert("A=B".into(), "x".into());
            }),
            SpecError::BadEnvName("A=B".into())
        );
        assert_eq!(
            refused(&|s| s.argv.push("a\0b".into())),
            SpecError::Nul("arguments")
        );
        assert_eq!(
            refused(&|s| s.working_dir = "/tmp/\0".into()),
            SpecError::Nul("working directory")
        );
        assert_eq!(
            refused(&|s| s.stdout = Some("o\0".into())),
            SpecError::Nul("output file name")
        );
    }

    #[test]
    fn job_times_follow_transitions() {
        let mut j = Job::new(1, spec(), 100);
        j.transition(JobState::Running, 110).unwrap();
        assert_eq!(j.elapsed(115), 5);
        j.transition(JobState::Completed, 120).unwrap();
        assert_eq!(j.elapsed(999), 10);
        assert!(j.transition(JobState::Running, 130).is_err());
        assert_eq!(j.state, JobState::Completed);
    }

    fn any_state() -> impl Strategy<Value = JobState> {
        (0..JobState::ALL.len()).prop_map(|i| JobState::ALL[i])
    }

    proptest! {
        /// Whatever sequence of transitions is attempted, illegal ones change
        /// nothing, and once final a job stays in that one final state.
        #[test]
        fn random_transitions_keep_one_final_state(steps in proptest::collection::vec(any_state(), 0..40)) {
            let mut j = Job::new(1, spec(), 0);
            let mut final_seen: Option<JobState> = None;
            for (t, to) in steps.into_iter().enumerate() {
                let before = j.state;
                match j.transition(to, t as i64) {
                    Ok(()) => prop_assert!(before.can_become(to)),
                    Err(_) => prop_assert_eq!(j.state, before),
                }
                if let Some(f) = final_seen {
                    prop_assert_eq!(j.state, f);
                }
                if j.state.is_final() {
                    final_seen = Some(j.state);
                }
            }
        }
    }
}
