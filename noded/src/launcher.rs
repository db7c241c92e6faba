//! Starting, watching, signalling and adopting jobs on this node.
//!
//! Each job runs under a shepherd process (see [`crate::shepherd`]) that is
//! the leader of the job's process group. gnoded watches the shepherd through
//! a pidfd, so it learns of the end at once (also for shepherds it adopted
//! after a restart, which are not its children), and signals the job by
//! signalling that process group.

use std::collections::{HashMap, HashSet};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gsched_core::env::{add_interception, job_environment, Interception, Placement};
use gsched_core::job::JobId;
use gsched_core::outcome::{EndCause, EndFacts, GpuFault, ProcessOutcome};
use gsched_core::pattern::job_output_paths;
use gsched_core::probe::{JOB_KEY_ENV, PROBE_SOCK_ENV};
use gsched_core::time_quota::TIME_QUOTA_ENV;
use gsched_core::wire::{JobEnded, LaunchRequest};
use gsched_daemon::unix_now;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::sync::mpsc;
use tracing::{info, warn};

use crate::confine::{Confinement, Finished, GpuAccess};
use crate::probe::StepRefused;
use crate::spool::{JobSpool, ShepherdSpec};
use gsched_core::job::WarnSignal;

const CANCELLED: &str = "cancelled";
const TIMEOUT: &str = "timeout";
const FENCED: &str = "fenced";

/// How many ended runs the node remembers after their spools are gone, so
/// a launch repeated after a lost answer is not run a second time.
const REMEMBERED_RUNS: usize = 4096;

/// Why a launch or signal was refused.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("{0}")]
    Refused(String),
    #[error("job {0} is already running on this node (another run of it)")]
    AlreadyRunning(JobId),
    #[error("{0}")]
    NoLease(String),
    #[error("job {0} is not running on this node")]
    NotRunning(JobId),
    #[error("{0}")]
    Io(String),
}

struct RunningJob {
    /// The shepherd's pid, which is also the job's process group id; `None`
    /// while an isolated job waits for shared tasks to leave its instance.
    pgid: Option<i32>,
    /// Which run of the job this is.
    run: u32,
    /// Whether it is stopped, and how long it was (see `suspend.rs`).
    suspension: gsched_core::suspension::Suspension,
}

/// Where a sister's holder writes (nothing: its output is the steps').
const DEV_NULL: &str = "/dev/null";

/// What a sister runs as the job's user, in the job's cgroup, while the
/// job runs: nothing but a wait, so that its share of the node (cgroup,
/// devices) lives, is adopted across restarts and killed at the job's end
/// like any job's processes.
const SISTER_HOLDER: &str =
    "#!/bin/sh\n# gsched: this node's share of a job on several nodes, held until the job ends\nexec sleep 2147483647\n";

pub struct Launcher {
    node: String,
    spool_root: PathBuf,
    shepherd_exe: PathBuf,
    kill_wait: Duration,
    /// Whose jobs this node runs (no root unless allowed, no system
    /// accounts): checked on every launch, whatever the controller says.
    uid_policy: gsched_core::job::JobUidPolicy,
    is_root: bool,
    my_uid: u32,
    running: Mutex<HashMap<JobId, RunningJob>>,
    /// Process groups of the step tasks this node started for a job whose
    /// script runs on another node (`crate::api::steps`): signalled and killed
    /// with the job, also where no cgroup holds them.
    step_groups: Mutex<HashMap<JobId, HashSet<i32>>>,
    /// The steps (job, run, step) whose tasks this node started for
    /// another node's `srun`: a step credential opens one start only.
    steps_started: Mutex<HashSet<(JobId, u32, u32)>>,
    /// Jobs whose spool is being prepared (until they are in `running`).
    /// A requeued job can be launched again before the node hears that its
    /// last run's end was recorded; that late removal must not take the new
    /// run's spool. Launches only mark themselves here (no I/O under the
    /// lock); a removal holds it while it removes.
    setting_up: Mutex<HashSet<JobId>>,
    ended: mpsc::UnboundedSender<JobEnded>,
    /// The probe server: jobs get its socket and a key; isolated jobs hold
    /// their instance in it.
    probe: Option<Arc<crate::probe::ProbeServer>>,
    /// `libgprobe.so` to preload into non-isolated jobs, and the reservation
    /// for a job with no footprint of its own.
    interception: Option<InterceptionLib>,
    /// Run at each job's end before its outcome is read.
    end_check: Option<EndCheck>,
    /// The CA file jobs' tools check an https controller against.
    tls_ca: Option<PathBuf>,
    /// Runs that ended and whose spools were removed, newest last.
    finished_runs: Mutex<std::collections::VecDeque<(JobId, u32)>>,
    /// Jobs' cgroups.
    confine: Arc<Confinement>,
}

/// What is run at each job's end before its outcome is read (the MPS
/// servers' logs: a fault found there marks the jobs it hit).
pub type EndCheck = Arc<dyn Fn() + Send + Sync>;

/// The CUDA driver interception preloaded into non-isolated jobs.
pub struct InterceptionLib {
    /// `libgprobe.so`.
    pub lib: PathBuf,
    /// The reservation of a job with no known footprint (bytes).
    pub default_bytes: u64,
    /// What is reserved on top of each process's footprint for its CUDA
    /// context.
    pub context: Arc<crate::context::ContextWatch>,
}

/// Everything a launcher is given when it is built: no part is connected
/// later.
pub struct LauncherSetup {
    pub node: String,
    pub spool_root: PathBuf,
    pub shepherd_exe: PathBuf,
    pub kill_wait: Duration,
    pub uid_policy: gsched_core::job::JobUidPolicy,
    /// Where the ends of runs go (the controller link).
    pub ended: mpsc::UnboundedSender<JobEnded>,
    /// Jobs' cgroups ([`Confinement::unconfined`] where there are none).
    pub confine: Arc<Confinement>,
    /// The CA jobs' tools check an https controller against
    /// (`GSCHED_TLS_CA`).
    pub tls_ca: Option<PathBuf>,
    pub interception: Option<InterceptionLib>,
}

/// The parts built with the launcher that hold it (weakly) in turn: the
/// probe server (steps begin and end through the launcher) and the end
/// check (the MPS watch marks the jobs a GPU fault hit).
pub struct LauncherPeers {
    pub probe: Arc<crate::probe::ProbeServer>,
    pub end_check: Option<EndCheck>,
}

/// The spool root: root's, traversable by jobs' users (0711).
fn prepare_spool_root(root: &std::path::Path) -> std::io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o711)
        .create(root)?;
    std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o711))
}

fn signal_group(pgid: i32, sig: Signal) {
    if pgid > 1 {
        let _ = kill(Pid::from_raw(-pgid), sig);
    }
}

impl Launcher {
    /// A launcher on its own (no probe server, no end check).
    pub fn new(setup: LauncherSetup) -> std::io::Result<Arc<Launcher>> {
        prepare_spool_root(&setup.spool_root)?;
        Ok(Arc::new(Launcher::of(setup, None, None)))
    }

    /// A launcher with the parts that hold it in turn, built by `peers`
    /// from a weak reference to it.
    pub fn with_peers(
        setup: LauncherSetup,
        peers: impl FnOnce(&std::sync::Weak<Launcher>) -> LauncherPeers,
    ) -> std::io::Result<Arc<Launcher>> {
        prepare_spool_root(&setup.spool_root)?;
        Ok(Arc::new_cyclic(|me| {
            let p = peers(me);
            Launcher::of(setup, Some(p.probe), p.end_check)
        }))
    }

    fn of(
        setup: LauncherSetup,
        probe: Option<Arc<crate::probe::ProbeServer>>,
        end_check: Option<EndCheck>,
    ) -> Launcher {
        let uid = nix::unistd::getuid().as_raw();
        Launcher {
            node: setup.node,
            spool_root: setup.spool_root,
            shepherd_exe: setup.shepherd_exe,
            kill_wait: setup.kill_wait,
            is_root: uid == 0,
            my_uid: uid,
            uid_policy: setup.uid_policy,
            running: Mutex::new(HashMap::new()),
            step_groups: Mutex::new(HashMap::new()),
            steps_started: Mutex::new(HashSet::new()),
            setting_up: Mutex::new(HashSet::new()),
            ended: setup.ended,
            probe,
            interception: setup.interception,
            end_check,
            tls_ca: setup.tls_ca,
            finished_runs: Mutex::new(std::collections::VecDeque::new()),
            confine: setup.confine,
        }
    }

    pub fn confinement(&self) -> &Arc<Confinement> {
        &self.confine
    }

    fn jobs(&self) -> std::sync::MutexGuard<'_, HashMap<JobId, RunningJob>> {
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn setting_up(&self) -> std::sync::MutexGuard<'_, HashSet<JobId>> {
        self.setting_up.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn running_ids(&self) -> Vec<JobId> {
        let mut v: Vec<JobId> = self.jobs().keys().copied().collect();
        v.sort_unstable();
        v
    }

    /// The run of each job the node runs.
    pub fn running_runs(&self) -> std::collections::BTreeMap<JobId, u32> {
        self.jobs().iter().map(|(id, r)| (*id, r.run)).collect()
    }

    /// Records that a fatal GPU fault hit a job running here: it ends
    /// FAILED with the fault as its reason (or goes back to the queue, see
    /// [`GpuFault::requeues`]), whatever its script returns. The record is
    /// in the job's root-owned spool, so it survives a gnoded restart. A
    /// job that is not running here is left alone, and so is one whose
    /// script had ended (by its shepherd's record) before the fault
    /// happened at `fault_ms` (unix ms), whatever MPS listed: its work was
    /// done, and running it again would only cost. Not the job MPS named:
    /// a culprit must not escape its fault by ending first.
    pub fn mark_gpu_fault(&self, job: JobId, fault: &GpuFault, fault_ms: Option<i64>) {
        if !self.jobs().contains_key(&job) {
            return;
        }
        let spool = self.spool(job);
        if let (Some(status), Some(at), false) = (spool.read_status(), fault_ms, fault.named) {
            if gsched_core::mps_recovery::ended_before(status.end_time, at) {
                info!(
                    job,
                    "the job's script had ended before the GPU fault: its end stands"
                );
                return;
            }
        }
        if let Err(e) = spool.write_json(&spool.gpu_fault_path(), fault) {
            warn!(job, error = %e, "cannot record the GPU fault in the job's spool");
        }
    }

    pub fn spool(&self, job: JobId) -> JobSpool {
        JobSpool::new(&self.spool_root, job)
    }

    /// Starts a job under a new shepherd.
    pub fn launch(self: &Arc<Self>, req: &LaunchRequest) -> Result<(), LaunchError> {
        if !req.job.sisters.is_empty() && !req.job.runs_on(&self.node) {
            return Err(LaunchError::Refused(format!(
                "job {} is not allocated on node {} (its nodes: {})",
                req.job.id,
                self.node,
                req.job.nodes().join(",")
            )));
        }
        let job = &req.job;
        let span = tracing::info_span!(
            "job",
            job = job.id,
            instance = gsched_core::gpu::uuid_list(&req.instances)
        );
        let _g = span.enter();
        if self.has_run(job.id, job.run) {
            // The same launch again (its answer was lost): already done.
            info!(run = job.run, "launch repeated; this run is already here");
            return Ok(());
        }
        let _setup = SettingUp::mark(self, job.id)?;
        self.uid_policy
            .check(job.spec.uid, self.my_uid)
            .map_err(|e| LaunchError::Refused(e.to_string()))?;
        if !self.is_root && job.spec.uid != self.my_uid {
            return Err(LaunchError::Refused(format!(
                "gnoded runs as uid {} and cannot run jobs of user {} (uid {}); run gnoded as root to serve several users",
                self.my_uid, job.spec.user_name, job.spec.uid
            )));
        }
        let spool = self.spool(job.id);
        let io = |what: &str, e: std::io::Error| {
            LaunchError::Io(format!("{what} in {}: {e}", spool.dir.display()))
        };
        if std::fs::symlink_metadata(&spool.dir).is_ok() {
            // Left from an earlier run of this job id that has been dealt with.
            spool.remove();
        }
        let drop_privileges = self.is_root && job.spec.uid != 0;
        // gnoded's own directory: the user reaches only the script the
        // shepherd writes there (see crate::spool).
        spool
            .create(drop_privileges)
            .map_err(|e| io("cannot create spool", e))?;
        let mut env = job_environment(
            job,
            &Placement {
                node: &self.node,
                cluster: &req.cluster,
                partition: &req.partition,
                instances: &req.instances,
                controller_url: &req.controller_url,
            },
        );
        if let Some(token) = &req.job_token {
            env.insert(gsched_core::env::TOKEN_ENV.into(), token.clone());
        }
        if let Some(ca) = &self.tls_ca {
            env.insert(
                gsched_core::env::TLS_CA_ENV.into(),
                ca.display().to_string(),
            );
        }
        // Only the shared processes of a job with a quota are held to one.
        let quota = req.time_quota.filter(|_| req.instances.is_empty());
        // One context reservation for the job's environment and its budget.
        let context_bytes = self
            .interception
            .as_ref()
            .map(|i| i.context.reserve_bytes());
        let budget = gpu_budget(req).map(|mut b| {
            b.context_bytes = context_bytes;
            b.largest_bytes = self.probe.as_ref().map(|p| p.largest_open_bytes());
            b
        });
        if let Some(probe) = self.probe.as_ref() {
            let key = probe
                .register_job(job.id, job.spec.uid, None, quota, budget)
                .map_err(|e| LaunchError::Io(e.to_string()))?;
            if let Some(q) = quota {
                env.insert(TIME_QUOTA_ENV.into(), q.to_env());
            }
            env.insert(PROBE_SOCK_ENV.into(), probe.path().display().to_string());
            env.insert(JOB_KEY_ENV.into(), key);
        }
        if let (Some(i), Some(context_bytes)) = (&self.interception, context_bytes) {
            let lib = i.lib.display().to_string();
            let with = Interception {
                lib: &lib,
                default_bytes: i.default_bytes,
                context_bytes,
            };
            add_interception(
                &mut env,
                job,
                !req.instances.is_empty(),
                gsched_core::cluster::Learned {
                    mib: req.learned_footprint_mib,
                    share: req.learned_gpu_share,
                    ..Default::default()
                },
                &with,
            );
        }
        // Started early, the job opens no GPU until its instances are its
        // own (see `begin`).
        let early = req.early && !req.instances.is_empty() && self.gate(&mut env);
        let gpus = match (req.instances.as_slice(), early) {
            ([], _) => GpuAccess::Shared,
            (_, true) => GpuAccess::Instances(&[]),
            (some, false) => GpuAccess::Instances(some),
        };
        let started = self
            .confinement()
            .prepare(job, gpus)
            .map_err(|e| LaunchError::Refused(e.to_string()))
            .and_then(|prepared| self.begin(req, &spool, env, prepared, early, budget));
        if started.is_err() {
            // Nothing of this run is left to run or to report later: its
            // cgroup (and anything in it), its probe key and its spool go.
            self.confinement().abandon(job.id);
            if let Some(probe) = self.probe.as_ref() {
                probe.job_ended(job.id);
            }
            spool.remove();
        }
        started
    }

    /// Writes the launch spec and starts the shepherd, or waits for the
    /// job's instances to be free first (shared tasks, or the isolated job
    /// before it, still there); started `early`, the job starts at once and
    /// its processes wait at their first CUDA call instead.
    fn begin(
        self: &Arc<Self>,
        req: &LaunchRequest,
        spool: &JobSpool,
        env: std::collections::BTreeMap<String, String>,
        prepared: crate::confine::Prepared,
        early: bool,
        gpu_budget: Option<gsched_core::placement::budget::BudgetInput>,
    ) -> Result<(), LaunchError> {
        let job = &req.job;
        let io = |what: &str, e: std::io::Error| {
            LaunchError::Io(format!("{what} in {}: {e}", spool.dir.display()))
        };
        let drop_privileges = self.is_root && job.spec.uid != 0;
        // A sister (a node of a job on several, not its first) holds the
        // job's share here until the job ends: the batch script runs on
        // the first node, the steps' tasks come through `steps.rs`.
        let sister = job.is_sister(&self.node);
        let (stdout, stderr) = if sister {
            (DEV_NULL.to_string(), DEV_NULL.to_string())
        } else {
            job_output_paths(job, &self.node)
        };
        let start_time = job.start_time.unwrap_or_else(unix_now);
        let spec = ShepherdSpec {
            job_id: job.id,
            run: job.run,
            script: spool.script_path(),
            script_body: if sister {
                SISTER_HOLDER.to_string()
            } else {
                job.spec.script.clone()
            },
            argv: if sister {
                Vec::new()
            } else {
                job.spec.argv.clone()
            },
            env,
            cwd: job.spec.working_dir.clone(),
            stdout,
            stderr,
            uid: job.spec.uid,
            gid: job.spec.gid,
            user_name: job.spec.user_name.clone(),
            drop_privileges,
            start_time,
            // A sister ends with the job (its batch node keeps the limit).
            time_limit: job.spec.time_limit.filter(|_| !sister),
            append: job.spec.slurm.open_mode.as_deref() == Some("append"),
            warn_signal: job
                .spec
                .slurm
                .signal
                .as_deref()
                .and_then(|s| WarnSignal::parse(s).ok())
                .filter(|_| !sister),
            umask: job.spec.umask.unwrap_or(gsched_core::job::DEFAULT_UMASK),
            cgroup_procs: prepared.procs,
            cpus: prepared.cpus,
            memory_limit: prepared.memory_limit,
            instances: req.instances.iter().map(|i| i.uuid.clone()).collect(),
            rlimits: job.spec.rlimits.clone(),
            gpu_budget,
        };
        spool
            .write_json(&spool.spec_path(), &spec)
            .map_err(|e| io("cannot write launch.json", e))?;
        let limit = spec.time_limit.map(Duration::from_secs);
        let warn = spec.warn_signal;
        let uuids = spec.instances.clone();
        if let (Some(probe), false) = (self.probe.as_ref(), uuids.is_empty()) {
            // The instances are closed to shared tasks from now on.
            let busy: Vec<String> = uuids
                .iter()
                .filter(|u| probe.hold(u, job.id))
                .cloned()
                .collect();
            if !busy.is_empty() && early {
                spool
                    .mark_gated()
                    .map_err(|e| io("cannot write the GPU gate marker", e))?;
                probe.close_gate(job.id);
                self.start_shepherd(job.id, job.run, limit, warn)?;
                info!(
                    instances = busy.len(),
                    "started early: its processes wait at their first CUDA call until the instances are free"
                );
                self.open_when_free(job.id, job.run, uuids, busy);
                return Ok(());
            }
            if !busy.is_empty() {
                // Shared tasks are still there: start when they have left.
                self.jobs().insert(
                    job.id,
                    RunningJob {
                        pgid: None,
                        run: job.run,
                        suspension: Default::default(),
                    },
                );
                info!(instances = busy.len(), "waiting for shared tasks to leave");
                let (this, probe, id) = (Arc::clone(self), Arc::clone(probe), job.id);
                tokio::spawn(async move {
                    for uuid in &busy {
                        if !probe.drained_for(uuid, id).await {
                            return; // it ended meanwhile
                        }
                    }
                    if this.jobs().get(&id).is_some_and(|r| r.pgid.is_none()) {
                        this.confinement().isolate(id, &uuids);
                        let run = this.jobs().get(&id).map_or(0, |r| r.run);
                        if let Err(e) = this.start_shepherd(id, run, limit, warn) {
                            warn!(job = id, error = %e, "cannot start the job");
                            this.end_unstarted(id);
                        }
                    }
                });
                return Ok(());
            }
        }
        if early {
            // Free by the time it came: given at once.
            self.confinement().give_instances(job.id, &uuids);
        } else if !uuids.is_empty() {
            self.confinement().isolate(job.id, &uuids);
        }
        self.start_shepherd(job.id, job.run, limit, warn)
    }

    /// Opens the instances `uuids` to job `id` (run `run`, started early)
    /// once `busy` of them are free: its device rules open them and its
    /// processes waiting at their first CUDA call go ahead.
    fn open_when_free(
        self: &Arc<Self>,
        id: JobId,
        run: u32,
        uuids: Vec<String>,
        busy: Vec<String>,
    ) {
        let Some(probe) = self.probe.clone() else {
            return;
        };
        let this = Arc::clone(self);
        tokio::spawn(async move {
            for uuid in &busy {
                if !probe.drained_for(uuid, id).await {
                    return; // it ended meanwhile
                }
            }
            if this.jobs().get(&id).is_none_or(|r| r.run != run) {
                return;
            }
            this.confinement().give_instances(id, &uuids);
            this.spool(id).clear_gated();
            info!(job = id, "its instances are free: its GPU work goes ahead");
            probe.open_gate(id);
        });
    }

    /// Adds the GPU gate to a job's environment when this node can hold
    /// its processes (a probe socket and the interception library) and the
    /// job did not turn the interception off.
    fn gate(&self, env: &mut std::collections::BTreeMap<String, String>) -> bool {
        match (&self.probe, &self.interception) {
            (Some(_), Some(i)) => gsched_core::env::add_gate(env, &i.lib.display().to_string()),
            _ => false,
        }
    }

    /// Whether run `run` of `job` runs here or already ran here.
    /// This node's name.
    pub fn node_name(&self) -> &str {
        &self.node
    }

    /// Whether run `run` of `job` runs here, started (its shepherd up).
    pub fn is_running(&self, job: JobId, run: u32) -> bool {
        self.jobs()
            .get(&job)
            .is_some_and(|r| r.run == run && r.pgid.is_some())
    }

    fn has_run(&self, job: JobId, run: u32) -> bool {
        if self.jobs().get(&job).is_some_and(|r| r.run == run) {
            return true;
        }
        let spool = self.spool(job);
        let ended_here = spool.read_status().is_some()
            && spool.read_spec().is_ok_and(|s| s.run == run && run != 0);
        ended_here
            || self
                .finished_runs
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains(&(job, run))
    }

    /// Samples the memory and processes of every started job.
    pub fn sample_usage(&self) {
        for id in self.started_ids() {
            self.confinement().sample(id);
        }
    }

    /// What the steps of each running job had used at the last sample.
    pub fn steps_so_far(&self) -> std::collections::BTreeMap<JobId, gsched_core::job::StepUsage> {
        self.started_ids()
            .into_iter()
            .filter_map(|id| Some((id, self.confinement().steps_so_far(id)?)))
            .collect()
    }

    /// What each running job had used at its last sample.
    pub fn usage_so_far(
        &self,
    ) -> std::collections::BTreeMap<JobId, gsched_core::job::ResourceUsage> {
        self.started_ids()
            .into_iter()
            .filter_map(|id| Some((id, self.confinement().last_sample(id)?)))
            .collect()
    }

    fn started_ids(&self) -> Vec<JobId> {
        self.jobs()
            .iter()
            .filter(|(_, r)| r.pgid.is_some())
            .map(|(id, _)| *id)
            .collect()
    }
}

/// A launch's mark in [`Launcher::setting_up`], cleared when the launch
/// returns (by then the job is in `running`, or the launch failed).
struct SettingUp<'a> {
    launcher: &'a Launcher,
    job: JobId,
}

impl<'a> SettingUp<'a> {
    fn mark(launcher: &'a Launcher, job: JobId) -> Result<SettingUp<'a>, LaunchError> {
        let mut set = launcher.setting_up();
        if launcher.jobs().contains_key(&job) || !set.insert(job) {
            return Err(LaunchError::AlreadyRunning(job));
        }
        Ok(SettingUp { launcher, job })
    }
}

impl Drop for SettingUp<'_> {
    fn drop(&mut self) {
        self.launcher.setting_up().remove(&self.job);
    }
}

/// Keeps what the job's cgroup counted in its spool, so a restarted gnoded
/// still reports it.
fn record_finished(spool: &JobSpool, finished: &Finished) {
    if finished.usage.is_some() || finished.oom_kills > 0 {
        if let Err(e) = spool.write_json(&spool.cgroup_path(), finished) {
            warn!(error = %e, "cannot record the job's cgroup counters");
        }
    }
}

/// How a job ended, from what its spool holds.
fn ended_from_spool(job: JobId, spool: &JobSpool) -> JobEnded {
    let status = spool.read_status();
    let finished: Finished = read_json(&spool.cgroup_path()).unwrap_or_default();
    let spec = spool.read_spec().ok();
    let gpu_fault: Option<GpuFault> = read_json(&spool.gpu_fault_path());
    let cause = EndCause::decide(&EndFacts {
        cancelled: spool.is_marked(CANCELLED),
        fenced: spool.is_marked(FENCED),
        timed_out: spool.is_marked(TIMEOUT),
        recorded: status.is_some(),
        launch_error: status.as_ref().and_then(|s| s.error.as_deref()),
        oom_kills: finished.oom_kills,
        memory_limit: spec.as_ref().and_then(|s| s.memory_limit.as_deref()),
        gpu_fault: gpu_fault.as_ref(),
    });
    JobEnded {
        job_id: job,
        run: spec.map_or(0, |s| s.run),
        outcome: ProcessOutcome {
            exit_code: status.as_ref().and_then(|s| s.exit_code),
            signal: status.as_ref().and_then(|s| s.signal),
            cause,
        },
        end_time: status.map(|s| s.end_time).unwrap_or_else(unix_now),
        usage: finished.usage,
        steps: finished.steps,
    }
}

/// A JSON file of the spool, if it is there and reads.
fn read_json<T: serde::de::DeserializeOwned>(path: &std::path::Path) -> Option<T> {
    let text = std::fs::read_to_string(path).ok()?;
    match serde_json::from_str(&text) {
        Ok(v) => Some(v),
        Err(e) => {
            warn!(path = %path.display(), error = %e, "unreadable spool file ignored");
            None
        }
    }
}

impl crate::probe::StepControl for Launcher {
    fn begin_step(&self, job: JobId, step: u32, pid: i32) -> Result<(), StepRefused> {
        if self.jobs().get(&job).is_none_or(|r| r.pgid.is_none()) {
            return Err(StepRefused::NotRunning(job));
        }
        self.confinement()
            .begin_step(job, step, pid)
            .map_err(|e| StepRefused::Confinement(e.to_string()))
    }

    fn end_step(&self, job: JobId, step: u32, pid: i32) -> Result<(), StepRefused> {
        let confine = self.confinement();
        let ended = confine.end_step(job, step, pid);
        // What ended is kept, so a restarted gnoded still reports it.
        let spool = self.spool(job);
        if spool.dir.is_dir() {
            if let Err(e) = spool.write_json(&spool.steps_path(), &confine.ended_steps(job)) {
                warn!(job, step, error = %e, "cannot record the step's use");
            }
        }
        ended
            .map(|_| ())
            .map_err(|e| StepRefused::Confinement(e.to_string()))
    }
}

/// The pids of a process's children (from /proc).
fn children_of(pid: i32) -> Vec<i32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

mod adopt;
mod signals;
mod suspend;
mod watch;

/// What sets the GPU memory budget of a job's processes on this node:
/// only a shared job's processes reserve, so only it has one.
fn gpu_budget(req: &LaunchRequest) -> Option<gsched_core::placement::budget::BudgetInput> {
    req.instances.is_empty().then(|| {
        gsched_core::placement::budget::BudgetInput::of(&req.job.spec, req.gpu_mem_cap_mib)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ended_at(job: JobId, end_time: i64) -> JobEnded {
        JobEnded {
            job_id: job,
            run: 0,
            outcome: ProcessOutcome {
                exit_code: Some(0),
                signal: None,
                cause: EndCause::Exited,
            },
            end_time,
            usage: None,
            steps: Default::default(),
        }
    }

    fn run_ended(launcher: &Launcher, job: JobId, end_time: i64) -> JobSpool {
        let spool = launcher.spool(job);
        std::fs::create_dir_all(&spool.dir).unwrap();
        let status = crate::spool::ShepherdStatus {
            exit_code: Some(0),
            signal: None,
            error: None,
            end_time,
        };
        spool.write_json(&spool.status_path(), &status).unwrap();
        spool
    }

    #[test]
    fn an_acknowledged_end_removes_only_its_own_run() {
        let root = tempfile::tempdir().unwrap();
        let (tx, _rx) = mpsc::unbounded_channel();
        let l = Launcher::new(LauncherSetup {
            node: "n".into(),
            spool_root: root.path().join("spool"),
            shepherd_exe: "/bin/false".into(),
            kill_wait: Duration::from_secs(1),
            uid_policy: gsched_core::job::JobUidPolicy {
                min_uid: 1000,
                allow_root: true,
            },
            ended: tx,
            confine: Arc::new(Confinement::unconfined()),
            tls_ca: None,
            interception: None,
        })
        .unwrap();
        // The acknowledged run's spool goes.
        let spool = run_ended(&l, 7, 100);
        l.forget(&ended_at(7, 100));
        assert!(!spool.dir.exists());
        // A requeued job ran again and ended later: the first run's late
        // acknowledgement leaves the second run's spool alone.
        let spool = run_ended(&l, 8, 200);
        l.forget(&ended_at(8, 100));
        assert!(spool.dir.exists());
        // A run being set up or running (no status yet) is in `running`.
        let spool = l.spool(9);
        std::fs::create_dir_all(&spool.dir).unwrap();
        l.jobs().insert(
            9,
            RunningJob {
                pgid: Some(1),
                run: 1,
                suspension: Default::default(),
            },
        );
        l.forget(&ended_at(9, 100));
        assert!(spool.dir.exists());
        // A launch setting the spool up is left alone too, and a second
        // launch of the same job is refused meanwhile.
        let spool = l.spool(10);
        std::fs::create_dir_all(&spool.dir).unwrap();
        let mark = SettingUp::mark(&l, 10).unwrap();
        assert!(matches!(
            SettingUp::mark(&l, 10),
            Err(LaunchError::AlreadyRunning(10))
        ));
        l.forget(&ended_at(10, 100));
        assert!(spool.dir.exists());
        drop(mark);
        l.forget(&ended_at(10, 100));
        assert!(!spool.dir.exists());
    }
}
