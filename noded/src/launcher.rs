//! Starting, watching, signalling and adopting jobs on this node.
//!
//! Each job runs under a shepherd process (see [`crate::shepherd`]) that is
//! the leader of the job's process group. gnoded watches the shepherd through
//! a pidfd, so it learns of the end at once (also for shepherds it adopted
//! after a restart, which are not its children), and signals the job by
//! signalling that process group.

use std::collections::{HashMap, HashSet};
use std::os::fd::OwnedFd;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gsched_core::env::{add_interception, job_environment, Interception, Placement};
use gsched_core::job::JobId;
use gsched_core::outcome::{EndCause, EndFacts, GpuFault, ProcessOutcome};
use gsched_core::pattern::job_output_paths;
use gsched_core::probe::{JOB_KEY_ENV, PROBE_SOCK_ENV};
use gsched_core::time_quota::{TimeQuota, TIME_QUOTA_ENV};
use gsched_core::wire::{JobEnded, LaunchRequest, SignalRequest};
use gsched_daemon::unix_now;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::io::unix::AsyncFd;
use tokio::sync::mpsc;
use tracing::{info, warn};

use crate::confine::{Confinement, Finished, GpuAccess};
use crate::shepherd::SHEPHERD_ARG;
use crate::spool::{is_shepherd_of, pidfd_open, process_starttime, JobSpool, ShepherdSpec};
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
    /// script runs on another node (`crate::steps`): signalled and killed
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
    probe: std::sync::OnceLock<Arc<crate::probe::ProbeServer>>,
    /// `libgprobe.so` to preload into non-isolated jobs, and the reservation
    /// for a job with no footprint of its own (bytes).
    interception: std::sync::OnceLock<(PathBuf, u64, Arc<crate::context::ContextWatch>)>,
    end_check: std::sync::OnceLock<Arc<dyn Fn() + Send + Sync>>,
    /// The CA file jobs' tools check an https controller against.
    tls_ca: std::sync::OnceLock<PathBuf>,
    /// Runs that ended and whose spools were removed, newest last.
    finished_runs: Mutex<std::collections::VecDeque<(JobId, u32)>>,
    /// Jobs' cgroups (unconfined until set).
    confine: std::sync::OnceLock<Arc<Confinement>>,
}

fn signal_group(pgid: i32, sig: Signal) {
    if pgid > 1 {
        let _ = kill(Pid::from_raw(-pgid), sig);
    }
}

impl Launcher {
    pub fn new(
        node: String,
        spool_root: PathBuf,
        shepherd_exe: PathBuf,
        kill_wait: Duration,
        uid_policy: gsched_core::job::JobUidPolicy,
        ended: mpsc::UnboundedSender<JobEnded>,
    ) -> std::io::Result<Arc<Launcher>> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o711)
            .create(&spool_root)?;
        std::fs::set_permissions(&spool_root, std::fs::Permissions::from_mode(0o711))?;
        let uid = nix::unistd::getuid().as_raw();
        Ok(Arc::new(Launcher {
            node,
            spool_root,
            shepherd_exe,
            kill_wait,
            is_root: uid == 0,
            my_uid: uid,
            uid_policy,
            running: Mutex::new(HashMap::new()),
            step_groups: Mutex::new(HashMap::new()),
            steps_started: Mutex::new(HashSet::new()),
            setting_up: Mutex::new(HashSet::new()),
            ended,
            probe: std::sync::OnceLock::new(),
            interception: std::sync::OnceLock::new(),
            end_check: std::sync::OnceLock::new(),
            tls_ca: std::sync::OnceLock::new(),
            finished_runs: Mutex::new(std::collections::VecDeque::new()),
            confine: std::sync::OnceLock::new(),
        }))
    }

    /// Preloads `lib` into non-isolated jobs (CUDA driver interception);
    /// `default_bytes` is the reservation of a job with no known footprint.
    /// `context` says what is reserved on top of each process's footprint
    /// for its CUDA context.
    /// Runs `check` at each job's end before its outcome is read (the MPS
    /// servers' logs: a fault found there marks the jobs it hit).
    pub fn set_end_check(&self, check: Arc<dyn Fn() + Send + Sync>) {
        let _ = self.end_check.set(check);
    }

    pub fn set_interception(
        &self,
        lib: PathBuf,
        default_bytes: u64,
        context: Arc<crate::context::ContextWatch>,
    ) {
        let _ = self.interception.set((lib, default_bytes, context));
    }

    /// Tells jobs' tools which CA to check an https controller against
    /// (`GSCHED_TLS_CA`).
    pub fn set_tls_ca(&self, ca: PathBuf) {
        let _ = self.tls_ca.set(ca);
    }

    /// Confines jobs with cgroups (once, at start).
    pub fn set_confinement(&self, confine: Arc<Confinement>) {
        let _ = self.confine.set(confine);
    }

    pub fn confinement(&self) -> &Arc<Confinement> {
        self.confine
            .get_or_init(|| Arc::new(Confinement::unconfined()))
    }

    /// Connects the probe server (once, at start).
    pub fn set_probe(&self, probe: Arc<crate::probe::ProbeServer>) {
        let _ = self.probe.set(probe);
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
    /// job that is not running here is left alone.
    pub fn mark_gpu_fault(&self, job: JobId, fault: &GpuFault) {
        if !self.jobs().contains_key(&job) {
            return;
        }
        let spool = self.spool(job);
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
        if let Some(ca) = self.tls_ca.get() {
            env.insert(
                gsched_core::env::TLS_CA_ENV.into(),
                ca.display().to_string(),
            );
        }
        // Only the shared processes of a job with a quota are held to one.
        let quota = req.time_quota.filter(|_| req.instances.is_empty());
        // One context reservation for the job's environment and its budget.
        let context_bytes = self.interception.get().map(|(_, _, c)| c.reserve_bytes());
        let budget = gpu_budget(req).map(|mut b| {
            b.context_bytes = context_bytes;
            b.largest_bytes = self.probe.get().map(|p| p.largest_open_bytes());
            b
        });
        if let Some(probe) = self.probe.get() {
            let key = probe
                .register_job(job.id, job.spec.uid, None, quota, budget)
                .map_err(|e| LaunchError::Io(e.to_string()))?;
            if let Some(q) = quota {
                env.insert(TIME_QUOTA_ENV.into(), q.to_env());
            }
            env.insert(PROBE_SOCK_ENV.into(), probe.path().display().to_string());
            env.insert(JOB_KEY_ENV.into(), key);
        }
        if let (Some((lib, default_bytes, _)), Some(context_bytes)) =
            (self.interception.get(), context_bytes)
        {
            let lib = lib.display().to_string();
            let with = Interception {
                lib: &lib,
                default_bytes: *default_bytes,
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
            .map_err(LaunchError::Refused)
            .and_then(|prepared| self.begin(req, &spool, env, prepared, early, budget));
        if started.is_err() {
            // Nothing of this run is left to run or to report later: its
            // cgroup (and anything in it), its probe key and its spool go.
            self.confinement().abandon(job.id);
            if let Some(probe) = self.probe.get() {
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
        if let (Some(probe), false) = (self.probe.get(), uuids.is_empty()) {
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
        let Some(probe) = self.probe.get().cloned() else {
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
        match (self.probe.get(), self.interception.get()) {
            (Some(_), Some((lib, _, _))) => {
                gsched_core::env::add_gate(env, &lib.display().to_string())
            }
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

    /// Kills every job: the node's lease ran out (see `crate::fence`). Each
    /// ends as fenced, which the controller takes for a node failure.
    /// Returns how many jobs were killed.
    pub fn fence_all(self: &Arc<Self>) -> usize {
        let jobs: Vec<(JobId, Option<i32>)> =
            self.jobs().iter().map(|(id, r)| (*id, r.pgid)).collect();
        for &(job, pgid) in &jobs {
            let spool = self.spool(job);
            if spool.read_status().is_none() {
                spool.mark(FENCED);
            }
            match pgid {
                Some(pgid) => self.kill_job(job, pgid),
                // Waiting for its instance: it never starts.
                None => self.end_unstarted(job),
            }
        }
        jobs.len()
    }

    /// Ends a job that never started (its instance was still draining):
    /// nothing of it runs, its cgroup and cores go.
    fn end_unstarted(&self, job: JobId) {
        self.jobs().remove(&job);
        if let Some(probe) = self.probe.get() {
            probe.job_ended(job);
        }
        self.confinement().abandon(job);
        let _ = self.ended.send(ended_from_spool(job, &self.spool(job)));
    }

    /// Sends `sig` to every process of a job: those in its cgroup where
    /// the node has one (so `setsid` children get it too), else its
    /// process group.
    fn signal_job(&self, job: JobId, pgid: i32, sig: Signal) {
        if self.confinement().tracks() {
            self.confinement().signal(job, sig);
        } else {
            signal_group(pgid, sig);
        }
        self.signal_step_groups(job, sig);
    }

    /// SIGKILLs every process of a job, its whole cgroup at once.
    fn kill_job(&self, job: JobId, pgid: i32) {
        signal_group(pgid, Signal::SIGKILL);
        self.signal_step_groups(job, Signal::SIGKILL);
        self.confinement().kill(job);
    }

    fn step_groups(&self) -> std::sync::MutexGuard<'_, HashMap<JobId, HashSet<i32>>> {
        self.step_groups.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn signal_step_groups(&self, job: JobId, sig: Signal) {
        for g in self.step_groups().get(&job).into_iter().flatten() {
            signal_group(*g, sig);
        }
    }

    /// A step task of `job` started here, leading process group `pgid`.
    pub fn add_step_group(&self, job: JobId, pgid: i32) {
        self.step_groups().entry(job).or_default().insert(pgid);
    }

    /// Notes that step `step` of run `run` of `job` starts here; false if
    /// it already did (a credential used twice). Forgotten with the job.
    pub fn first_start_of_step(&self, job: JobId, run: u32, step: u32) -> bool {
        let mut started = self.steps_started.lock().unwrap_or_else(|p| p.into_inner());
        started.retain(|(j, _, _)| self.jobs().contains_key(j));
        started.insert((job, run, step))
    }

    /// That step task ended.
    pub fn remove_step_group(&self, job: JobId, pgid: i32) {
        let mut all = self.step_groups();
        if let Some(g) = all.get_mut(&job) {
            g.remove(&pgid);
            if g.is_empty() {
                all.remove(&job);
            }
        }
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

    /// Starts the shepherd of a job whose spool is ready.
    fn start_shepherd(
        self: &Arc<Self>,
        job_id: JobId,
        run: u32,
        limit: Option<Duration>,
        warn: Option<WarnSignal>,
    ) -> Result<(), LaunchError> {
        let spool = self.spool(job_id);
        let io = |what: &str, e: std::io::Error| {
            LaunchError::Io(format!("{what} in {}: {e}", spool.dir.display()))
        };
        let log = spool
            .create_log()
            .map_err(|e| io("cannot create shepherd log", e))?;
        let log2 = log
            .try_clone()
            .map_err(|e| io("cannot duplicate shepherd log", e))?;
        let mut cmd = Command::new(&self.shepherd_exe);
        // The shepherd leads a session of its own (so also a new process
        // group, which holds the whole job): no terminal gnoded was started
        // from is the job's controlling terminal, and the job cannot signal
        // gnoded's group. Only descriptors 0-2 reach it.
        cmd.arg(SHEPHERD_ARG)
            .arg(&spool.dir)
            .env_clear()
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2);
        // SAFETY: the hook makes two system calls (setsid, close_range) and
        // allocates nothing.
        unsafe {
            cmd.pre_exec(|| {
                gsched_daemon::island::new_session().map_err(std::io::Error::from_raw_os_error)?;
                gsched_daemon::island::close_all_at_exec();
                Ok(())
            });
        }
        let child = cmd.spawn().map_err(|e| {
            LaunchError::Io(format!(
                "cannot start the shepherd {}: {e}",
                self.shepherd_exe.display()
            ))
        })?;
        let pid = child.id() as i32;
        // The child is reaped in `watch` with waitpid; std's handle is not needed.
        drop(child);
        let starttime = process_starttime(pid).unwrap_or(0);
        let _ = spool.write_pid(pid, starttime);
        let fd = pidfd_open(pid)
            .map_err(|e| LaunchError::Io(format!("cannot watch the shepherd (pidfd_open): {e}")))?;
        self.jobs().insert(
            job_id,
            RunningJob {
                pgid: Some(pid),
                run,
                suspension: Default::default(),
            },
        );
        info!(job = job_id, pid, "job started");
        // A fresh job gets its whole limit from now (the recorded start
        // time has whole-second precision).
        self.track(job_id, pid, fd, limit, warn);
        Ok(())
    }

    /// Watches a shepherd and enforces the time limit (`left`: time to
    /// run, not counting time it spends suspended) and its `--signal`
    /// warning.
    fn track(
        self: &Arc<Self>,
        job: JobId,
        pid: i32,
        fd: OwnedFd,
        left: Option<Duration>,
        warn: Option<WarnSignal>,
    ) {
        let this = Arc::clone(self);
        tokio::spawn(async move { this.watch(job, pid, fd).await });
        if let (Some(left), Some(w)) = (left, warn) {
            let this = Arc::clone(self);
            tokio::spawn(async move {
                let before = left.saturating_sub(Duration::from_secs(w.secs_before));
                if this.sleep_running(job, pid, before).await {
                    info!(
                        job,
                        signal = w.signal,
                        "sending the --signal warning before the time limit"
                    );
                    let Ok(sig) = Signal::try_from(w.signal) else {
                        return;
                    };
                    if w.batch_only {
                        // The batch shell is the shepherd's child.
                        for child in children_of(pid) {
                            let _ = nix::sys::signal::kill(Pid::from_raw(child), sig);
                        }
                    } else {
                        this.signal_job(job, pid, sig);
                    }
                }
            });
        }
        if let Some(left) = left {
            let this = Arc::clone(self);
            tokio::spawn(async move {
                if this.sleep_running(job, pid, left).await {
                    info!(job, "time limit reached");
                    let spool = this.spool(job);
                    if spool.read_status().is_none() {
                        spool.mark(TIMEOUT);
                    }
                    this.terminate(job, pid);
                }
            });
        }
    }

    fn pgid_of(&self, job: JobId) -> Option<i32> {
        self.jobs().get(&job).and_then(|r| r.pgid)
    }

    /// SIGCONT and SIGTERM to the job, then SIGKILL after the grace period
    /// (a suspended job is thawed first: frozen processes see no signal).
    fn terminate(self: &Arc<Self>, job: JobId, pgid: i32) {
        self.confinement().thaw(job);
        self.signal_job(job, pgid, Signal::SIGCONT);
        self.signal_job(job, pgid, Signal::SIGTERM);
        let this = Arc::clone(self);
        tokio::spawn(async move {
            tokio::time::sleep(this.kill_wait).await;
            if this.pgid_of(job) == Some(pgid) {
                warn!(job, "job outlived its grace period; killing it");
                this.kill_job(job, pgid);
            }
        });
    }

    async fn watch(self: Arc<Self>, job: JobId, pid: i32, fd: OwnedFd) {
        // SAFETY: `fd` is an OwnedFd moved into the AsyncFd, so it stays open
        // and refers to the same pidfd for the AsyncFd's whole life.
        match unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) } {
            Ok(afd) => {
                let _ = afd.readable().await;
            }
            Err(e) => {
                warn!(job, error = %e, "cannot poll pidfd; falling back to polling /proc");
                while process_starttime(pid).is_some() {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
        // Reap it if it is our child (not if it was adopted).
        let _ = nix::sys::wait::waitpid(
            Pid::from_raw(pid),
            Some(nix::sys::wait::WaitPidFlag::WNOHANG),
        );
        // Whatever the script left behind goes with it: its process group,
        // and everything in its cgroup (setsid and double-forked ones too).
        // The job ends when its cgroup is empty.
        signal_group(pid, Signal::SIGKILL);
        self.signal_step_groups(job, Signal::SIGKILL);
        let confine = Arc::clone(self.confinement());
        let check = self.end_check.get().cloned();
        let finished = tokio::task::spawn_blocking(move || {
            if let Some(check) = check {
                check();
            }
            confine.finish(job)
        })
        .await
        .unwrap_or_default();
        let spool = self.spool(job);
        record_finished(&spool, &finished);
        let ended = ended_from_spool(job, &spool);
        self.jobs().remove(&job);
        if let Some(probe) = self.probe.get() {
            probe.job_ended(job);
        }
        info!(job, outcome = ?ended.outcome, "job ended");
        let _ = self.ended.send(ended);
    }

    /// Sends a signal to a running job, or cancels it.
    pub fn signal(self: &Arc<Self>, job: JobId, req: &SignalRequest) -> Result<(), LaunchError> {
        let other_run = req
            .run
            .is_some_and(|r| self.jobs().get(&job).is_some_and(|j| j.run != r));
        if other_run {
            // Meant for another run of the job than the one here.
            info!(job, run = ?req.run, "signal for another run ignored");
            return Ok(());
        }
        let waiting = self.jobs().get(&job).is_some_and(|r| r.pgid.is_none());
        if waiting {
            // Not started yet (its instance is draining): cancel means never start.
            if req.cancel {
                info!(job, "cancelling job before it started");
                self.spool(job).mark(CANCELLED);
                self.end_unstarted(job);
            }
            return Ok(());
        }
        let pgid = self.pgid_of(job).ok_or(LaunchError::NotRunning(job))?;
        if req.cancel {
            info!(job, "cancelling job");
            let spool = self.spool(job);
            // A script that already ended (its end not reported yet) ended
            // on its own: the cancel only clears what it left behind.
            if spool.read_status().is_none() {
                spool.mark(CANCELLED);
            }
            if req.signal == libc::SIGKILL {
                self.kill_job(job, pgid);
            } else {
                self.terminate(job, pgid);
            }
        } else {
            let sig = Signal::try_from(req.signal).map_err(|_| {
                LaunchError::Refused(format!("invalid signal number {}", req.signal))
            })?;
            self.signal_job(job, pgid, sig);
        }
        Ok(())
    }

    /// Looks at the spool after a restart: adopts jobs whose shepherd still
    /// runs and returns how the others ended.
    pub fn adopt(self: &Arc<Self>) -> Vec<JobEnded> {
        let mut ended = Vec::new();
        let Ok(dir) = std::fs::read_dir(&self.spool_root) else {
            return ended;
        };
        // Shepherds by their command line, for jobs whose pid file was never
        // written (gnoded died between starting the shepherd and writing it).
        let by_cmdline = crate::spool::shepherds_under(&self.spool_root);
        let mut gated = Vec::new();
        for entry in dir.flatten() {
            let Some(job) = JobSpool::job_of(&entry.path()) else {
                continue;
            };
            let spool = self.spool(job);
            // Only a process proven to be this spool's shepherd is adopted
            // and, later, signalled (see spool::is_shepherd_of).
            let candidates = spool.read_pid().into_iter().chain(
                by_cmdline
                    .iter()
                    .filter(|(_, d)| *d == spool.dir)
                    .filter_map(|(pid, _)| Some((*pid, process_starttime(*pid)?))),
            );
            let found = candidates
                .filter_map(|(pid, start)| {
                    let fd = pidfd_open(pid).ok()?;
                    is_shepherd_of(pid, start, &spool.dir, self.my_uid).then_some((pid, fd))
                })
                .next();
            match found {
                Some((pid, fd)) => {
                    if let Some(start) = process_starttime(pid) {
                        let _ = spool.write_pid(pid, start);
                    }
                    let spec = spool.read_spec().ok();
                    // What it has left of its limit, as if it ran now
                    // (a stopped one's limit waits for it to go on).
                    let left = spec.as_ref().and_then(|s| {
                        let limit = i64::try_from(s.time_limit?).unwrap_or(i64::MAX);
                        let mut gone = spool.read_suspension();
                        gone.resume(unix_now());
                        let left = gsched_core::suspension::time_left(
                            s.start_time,
                            limit,
                            &gone,
                            unix_now(),
                        )?;
                        Some(Duration::from_secs(left as u64))
                    });
                    let run = spec.as_ref().map_or(0, |s| s.run);
                    if let Some(s) = &spec {
                        self.confinement().adopt(job, &s.cpus, &s.instances);
                    }
                    if let Some(ended) = read_json(&spool.steps_path()) {
                        self.confinement().adopt_steps(job, ended);
                    }
                    // Stopped before the restart: it stays so, its cores
                    // free, its limit paused.
                    let suspension = spool.read_suspension();
                    if suspension.is_suspended() {
                        self.confinement().park(job);
                    }
                    self.jobs().insert(
                        job,
                        RunningJob {
                            pgid: Some(pid),
                            run,
                            suspension,
                        },
                    );
                    if let (Some(probe), Some(spec)) = (self.probe.get(), &spec) {
                        // The job keeps its key across gnoded restarts.
                        let key = spec.env.get(JOB_KEY_ENV).cloned();
                        // Its quota, as given at its launch (gnoded's own
                        // spool, not the job's).
                        let quota = spec
                            .env
                            .get(TIME_QUOTA_ENV)
                            .and_then(|q| TimeQuota::from_env(q));
                        let _ = probe.register_job(job, spec.uid, key, quota, spec.gpu_budget);
                        if spool.is_gated() {
                            // Started early and still waiting: it takes its
                            // instances after the jobs that hold them.
                            gated.push((job, run, spec.instances.clone()));
                        } else {
                            // An isolated job's instance stays closed to
                            // shared tasks.
                            for uuid in &spec.instances {
                                probe.hold(uuid, job);
                            }
                        }
                    }
                    info!(job, pid, "adopted running job");
                    let warn = spec.and_then(|s| s.warn_signal);
                    self.track(job, pid, fd, left, warn);
                }
                None => {
                    // It ended while gnoded was away: what is left of it in
                    // its cgroup goes now.
                    if !spool.cgroup_path().exists() {
                        record_finished(&spool, &self.confinement().finish(job));
                    }
                    ended.push(ended_from_spool(job, &spool))
                }
            }
        }
        if let Some(probe) = self.probe.get() {
            for (job, run, instances) in gated {
                probe.close_gate(job);
                for uuid in &instances {
                    probe.hold(uuid, job);
                }
                info!(job, "adopted while it waits for its instances");
                self.open_when_free(job, run, instances.clone(), instances);
            }
        }
        ended
    }

    /// Removes the spool of a job whose end the controller acknowledged,
    /// unless the spool now belongs to a later run of the job (requeued and
    /// launched again, running or ended with another end time).
    pub fn forget(&self, ended: &JobEnded) {
        let setting_up = self.setting_up();
        if setting_up.contains(&ended.job_id) || self.jobs().contains_key(&ended.job_id) {
            return;
        }
        let spool = self.spool(ended.job_id);
        let later_run = spool
            .read_status()
            .is_some_and(|s| s.end_time != ended.end_time);
        if !later_run {
            spool.remove();
            let mut runs = self.finished_runs.lock().unwrap_or_else(|p| p.into_inner());
            if runs.len() == REMEMBERED_RUNS {
                runs.pop_front();
            }
            runs.push_back((ended.job_id, ended.run));
        }
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
    fn begin_step(&self, job: JobId, step: u32, pid: i32) -> Result<(), String> {
        if self.jobs().get(&job).is_none_or(|r| r.pgid.is_none()) {
            return Err(format!("job {job} is not running on this node"));
        }
        self.confinement()
            .begin_step(job, step, pid)
            .map_err(|e| e.to_string())
    }

    fn end_step(&self, job: JobId, step: u32, pid: i32) -> Result<(), String> {
        let confine = self.confinement();
        let ended = confine.end_step(job, step, pid);
        // What ended is kept, so a restarted gnoded still reports it.
        let spool = self.spool(job);
        if spool.dir.is_dir() {
            if let Err(e) = spool.write_json(&spool.steps_path(), &confine.ended_steps(job)) {
                warn!(job, step, error = %e, "cannot record the step's use");
            }
        }
        ended.map(|_| ()).map_err(|e| e.to_string())
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

mod suspend;

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
        let l = Launcher::new(
            "n".into(),
            root.path().join("spool"),
            "/bin/false".into(),
            Duration::from_secs(1),
            gsched_core::job::JobUidPolicy {
                min_uid: 1000,
                allow_root: true,
            },
            tx,
        )
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
