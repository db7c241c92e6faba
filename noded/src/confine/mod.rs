//! What gnoded does with a job's cgroup: decides its limits (with core's
//! rules), holds its cores, samples its use (and its steps'), and at its
//! end kills what is left, reads its counters and removes it. `srun` steps
//! get cgroups of their own below the job's (`steps.rs`).

mod account;
mod devices;
mod steps;
mod suspend;

pub use steps::StepError;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use gsched_core::gpu::Instance;
use gsched_core::job::{Job, JobId, ResourceUsage, StepUsage};
use gsched_core::resources::{pick_cpus, JobResources, MemoryLimits, MemoryRequest};
use serde::{Deserialize, Serialize};
use tracing::warn;

use crate::cgroup::{CgroupConfig, Cgroups, JobLimits, Scope};
use account::{vm_size, Account};
use devices::GpuHolds;

/// Where the kernel lists device majors.
const PROC_DEVICES: &str = "/proc/devices";
/// Where the driver lists MIG capability minors.
const MIG_MINORS: &str = "/proc/driver/nvidia-caps/mig-minors";

/// The GPUs a job may open.
pub enum GpuAccess<'a> {
    /// An isolated job: its instances only.
    Instances(&'a [Instance]),
    /// A shared job, whose tasks gnoded places at run time on any
    /// instance open to shared work: every instance of the node but those
    /// isolated jobs hold. Which ones those are changes while it runs
    /// ([`Confinement::isolate`]): its device rules follow.
    Shared,
}

/// A node's real GPUs: its instances, and the GPU, GPU instance and
/// compute instance ids of each MIG instance by UUID.
pub struct NodeGpus {
    pub instances: Vec<Instance>,
    pub mig_ids: HashMap<String, (u32, u32, u32)>,
}

/// What a job's cgroup is given at launch.
pub struct Prepared {
    /// The files the script's process joins (see `ShepherdSpec`).
    pub procs: Vec<PathBuf>,
    pub cpus: Vec<u32>,
    /// The memory limit as the user gave it, if they did.
    pub memory_limit: Option<String>,
}

/// What a job's cgroups counted when it ended.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finished {
    pub usage: Option<ResourceUsage>,
    pub oom_kills: u64,
    /// Its batch step's and `srun` steps' use.
    #[serde(default)]
    pub steps: StepUsage,
}

pub struct Confinement {
    cgroups: Arc<dyn Cgroups>,
    config: CgroupConfig,
    /// The memory the node offers jobs (RealMemory), MiB.
    memory_mib: u64,
    /// The cores jobs may be given.
    online: BTreeSet<u32>,
    taken: Mutex<BTreeMap<JobId, Vec<u32>>>,
    /// The cores of suspended jobs: free for others meanwhile.
    parked: Mutex<BTreeMap<JobId, Vec<u32>>>,
    /// The node's GPUs, if they are real devices (a node with simulated
    /// GPUs gives no job any NVIDIA device).
    gpus: RwLock<Option<NodeGpus>>,
    accounts: Mutex<HashMap<JobId, Account>>,
    holds: Mutex<GpuHolds>,
    /// Where device majors and MIG capability minors are read
    /// ([`PROC_DEVICES`], [`MIG_MINORS`]; other files in tests).
    device_files: (PathBuf, PathBuf),
    /// Whether the node measures GPU time (its GPUs give per-process
    /// utilization).
    gpu_metered: std::sync::atomic::AtomicBool,
}

/// Why a job's confinement (cores, cgroup, device rules) could not be set up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfineError(pub String);

impl From<String> for ConfineError {
    fn from(why: String) -> Self {
        ConfineError(why)
    }
}

impl From<&str> for ConfineError {
    fn from(why: &str) -> Self {
        ConfineError(why.to_string())
    }
}

impl Confinement {
    pub fn new(
        cgroups: Arc<dyn Cgroups>,
        config: CgroupConfig,
        memory_mib: u64,
        online: BTreeSet<u32>,
    ) -> Confinement {
        Confinement {
            cgroups,
            config,
            memory_mib,
            online,
            taken: Mutex::new(BTreeMap::new()),
            parked: Mutex::new(BTreeMap::new()),
            gpus: RwLock::new(None),
            accounts: Mutex::new(HashMap::new()),
            holds: Mutex::new(GpuHolds::default()),
            device_files: (PROC_DEVICES.into(), MIG_MINORS.into()),
            gpu_metered: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// A node whose jobs are not confined (tests of the launcher).
    pub fn unconfined() -> Confinement {
        Confinement::new(
            Arc::new(crate::cgroup::Unconfined),
            CgroupConfig::default(),
            0,
            BTreeSet::new(),
        )
    }

    pub fn cgroups(&self) -> &dyn Cgroups {
        self.cgroups.as_ref()
    }

    pub fn sample_interval(&self) -> Duration {
        Duration::from_secs(self.config.acct_gather_frequency.max(1))
    }

    /// Tells the node's real GPUs (`None`: they are simulated).
    pub fn set_gpus(&self, gpus: Option<NodeGpus>) {
        *self.gpus.write().unwrap_or_else(|p| p.into_inner()) = gpus;
    }

    fn taken(&self) -> std::sync::MutexGuard<'_, BTreeMap<JobId, Vec<u32>>> {
        self.taken.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Picks the job's cores and creates its cgroup with its limits.
    pub fn prepare(&self, job: &Job, gpus: GpuAccess<'_>) -> Result<Prepared, ConfineError> {
        let need = JobResources::of(&job.spec.slurm).map_err(|e| e.to_string())?;
        let enforced = self.cgroups.enforced();
        let shared = matches!(gpus, GpuAccess::Shared);
        // Held from the rules to the job's listing as shared, so that an
        // isolated job taking an instance meanwhile reaches it too.
        let mut holds = self.holds();
        let devices = if enforced.devices {
            Some(self.device_rules(gpus, &holds)?)
        } else {
            None
        };
        let cpus = if enforced.cores {
            let mut taken = self.taken();
            let busy: BTreeSet<u32> = taken.values().flatten().copied().collect();
            let cpus = pick_cpus(&self.online, &busy, need.cpus).ok_or_else(|| {
                format!(
                    "the job needs {} CPUs and this node has {} of {} free",
                    need.cpus,
                    self.online.len().saturating_sub(busy.len()),
                    self.online.len()
                )
            })?;
            taken.insert(job.id, cpus.clone());
            cpus
        } else {
            Vec::new()
        };
        let limits = JobLimits {
            memory: enforced.memory.then(|| {
                MemoryLimits::for_job(need.memory, self.memory_mib, &self.config.memory_policy())
            }),
            cpus: enforced.cores.then(|| cpus.clone()),
            devices,
            max_processes: enforced.processes.then_some(self.config.max_processes),
        };
        match self.cgroups.create(job.id, &limits) {
            Ok(procs) => {
                if shared {
                    holds.shared.insert(job.id);
                }
                drop(holds);
                // Counted from its first process on (GPU time too).
                self.accounts().insert(job.id, Account::default());
                Ok(Prepared {
                    procs,
                    cpus,
                    memory_limit: memory_request(job, need.memory),
                })
            }
            Err(e) => {
                self.cgroups.remove(job.id, Scope::Job);
                self.taken().remove(&job.id);
                Err(ConfineError(format!("cannot confine the job: {e}")))
            }
        }
    }

    /// Takes back the cores of a job adopted after a restart, and its GPU
    /// access: the instance it holds (an isolated job), or else the
    /// instances open to shared jobs now.
    pub fn adopt(&self, job: JobId, cpus: &[u32], instances: &[String]) {
        self.accounts().entry(job).or_default();
        if !cpus.is_empty() {
            self.taken().insert(job, cpus.to_vec());
        }
        match instances {
            [_, ..] => self.isolate(job, instances),
            [] => {
                let mut holds = self.holds();
                holds.shared.insert(job);
                if !self.cgroups.enforced().devices {
                    return;
                }
                match self.device_rules(GpuAccess::Shared, &holds) {
                    Ok(rules) => {
                        if let Err(e) = self.cgroups.set_devices(job, &rules) {
                            warn!(job, error = %e, "cannot set the adopted job's GPU devices");
                        }
                    }
                    Err(e) => warn!(job, error = %e, "cannot decide the adopted job's GPU devices"),
                }
            }
        }
    }

    /// Removes the cgroup of a job that never started, and frees its cores.
    pub fn abandon(&self, job: JobId) {
        self.cgroups.kill(job, Scope::Job);
        self.cgroups.remove(job, Scope::Job);
        self.forget_cores(job);
        self.accounts().remove(&job);
        self.release(job);
    }

    /// Whether the cgroup holds the job's processes (so signals and kills
    /// reach every one, not only its process group).
    pub fn tracks(&self) -> bool {
        self.cgroups.enforced().tracking
    }

    /// Sends `sig` to every process in the job's cgroup.
    pub fn signal(&self, job: JobId, sig: nix::sys::signal::Signal) {
        for pid in self.cgroups.pids(job, Scope::Job) {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig);
        }
    }

    /// Kills every process in the job's cgroup.
    pub fn kill(&self, job: JobId) {
        self.cgroups.kill(job, Scope::Job);
    }

    fn accounts(&self) -> std::sync::MutexGuard<'_, HashMap<JobId, Account>> {
        self.accounts.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn gpu_metered(&self) -> bool {
        self.gpu_metered.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Says that the node measures GPU time from now on.
    pub fn meter_gpu_time(&self) {
        self.gpu_metered
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// The job's cgroup and those of its steps that exist now.
    fn scopes(&self, job: JobId) -> Vec<Scope> {
        let mut all = vec![Scope::Job];
        all.extend(self.cgroups.steps(job));
        all
    }

    /// Samples a running job's memory and virtual size, and its steps';
    /// returns its use so far.
    pub fn sample(&self, job: JobId) -> Option<ResourceUsage> {
        if !self.tracks() {
            return None;
        }
        let read: Vec<_> = self
            .scopes(job)
            .into_iter()
            .map(|scope| {
                let c = self.cgroups.counters(job, scope);
                let vmsize: u64 = self.cgroups.pids(job, scope).into_iter().map(vm_size).sum();
                (scope, c, vmsize)
            })
            .collect();
        let metered = self.gpu_metered();
        let mut all = self.accounts();
        let a = all.entry(job).or_default();
        a.last.clear();
        for (scope, c, vmsize) in read {
            a.samples
                .entry(scope)
                .or_default()
                .add(c.current_bytes, vmsize);
            let u = a.usage(scope, &c, metered);
            a.last.insert(scope, u);
        }
        a.last.get(&Scope::Job).copied()
    }

    /// A running job's use as of its last sample.
    pub fn last_sample(&self, job: JobId) -> Option<ResourceUsage> {
        self.accounts()
            .get(&job)
            .and_then(|a| a.last.get(&Scope::Job).copied())
    }

    /// A running job's steps' use as of the last sample, with the totals
    /// of the steps that ended.
    pub fn steps_so_far(&self, job: JobId) -> Option<StepUsage> {
        self.accounts()
            .get(&job)
            .map(Account::steps_so_far)
            .filter(|s| !s.is_empty())
    }

    /// Which of `pids` are processes of jobs on this node, with their job
    /// and step (from the kernel's lists of each job's cgroups).
    pub fn jobs_of(&self, pids: &[u32]) -> Vec<(u32, JobId, Scope)> {
        if pids.is_empty() || !self.tracks() {
            return Vec::new();
        }
        let jobs: Vec<JobId> = self.accounts().keys().copied().collect();
        let mut found = Vec::new();
        for job in jobs {
            for scope in self.cgroups.steps(job) {
                for pid in self.cgroups.pids(job, scope) {
                    if let Some(p) = u32::try_from(pid).ok().filter(|p| pids.contains(p)) {
                        found.push((p, job, scope));
                    }
                }
            }
        }
        found
    }

    /// Adds GPU busy time (microseconds per process id) to the jobs and
    /// steps whose cgroups hold those processes.
    pub fn add_gpu_time(&self, busy: &BTreeMap<u32, u64>) {
        let pids: Vec<u32> = busy.keys().copied().collect();
        let found = self.jobs_of(&pids);
        let mut all = self.accounts();
        for (pid, job, scope) in found {
            if let Some(a) = all.get_mut(&job) {
                a.add_gpu_time(scope, busy[&pid]);
            }
        }
    }

    /// Adds what process `pid` of `job` measured of its own GPU use (busy
    /// microseconds of a whole GPU, out of placed microseconds) to the job
    /// and to the step whose cgroup holds it. A process in none of the
    /// job's cgroups counts nothing.
    pub fn add_gpu_busy(&self, job: JobId, pid: u32, busy_usec: u64, placed_usec: u64) {
        if !self.tracks() {
            return;
        }
        let Some(scope) = self
            .cgroups
            .steps(job)
            .into_iter()
            .find(|s| self.cgroups.pids(job, *s).contains(&(pid as i32)))
        else {
            return;
        };
        if let Some(a) = self.accounts().get_mut(&job) {
            a.add_gpu_busy(scope, busy_usec, placed_usec);
        }
    }

    /// Takes back the use of the steps that ended before a restart.
    pub fn adopt_steps(&self, job: JobId, ended: BTreeMap<u32, ResourceUsage>) {
        self.accounts().entry(job).or_default().ended = ended;
    }

    /// At the job's end: kills what is left in its cgroup, waits until the
    /// cgroup is empty, reads its counters (and its steps') and removes
    /// it. Blocks (call it off the async threads).
    pub fn finish(&self, job: JobId) -> Finished {
        let finished = self.finish_cgroup(job);
        // Its processes are gone: an instance it held opens.
        self.release(job);
        finished
    }

    fn finish_cgroup(&self, job: JobId) -> Finished {
        if !self.tracks() {
            self.forget_cores(job);
            self.accounts().remove(&job);
            return Finished::default();
        }
        self.kill_until_empty(job, Scope::Job, None);
        let read: Vec<_> = self
            .scopes(job)
            .into_iter()
            .map(|scope| (scope, self.cgroups.counters(job, scope)))
            .collect();
        let account = self.accounts().remove(&job).unwrap_or_default();
        let metered = self.gpu_metered();
        let mut finished = Finished {
            steps: StepUsage {
                batch: None,
                steps: account.ended.clone(),
            },
            ..Finished::default()
        };
        for (scope, c) in read {
            let u = account.usage(scope, &c, metered);
            match scope {
                Scope::Job => {
                    finished.usage = Some(u);
                    finished.oom_kills = c.oom_kills;
                }
                Scope::Batch => finished.steps.batch = Some(u),
                Scope::Step(n) => {
                    finished.steps.steps.insert(n, u);
                }
            }
        }
        if !self.cgroups.remove(job, Scope::Job) {
            warn!(job, "cannot remove the job's cgroup");
        }
        self.forget_cores(job);
        finished
    }

    /// Kills what is in `scope` until it is empty; with `give_up`, stops
    /// waiting after that long (false: processes are left).
    fn kill_until_empty(&self, job: JobId, scope: Scope, give_up: Option<Duration>) -> bool {
        let mut waited = Duration::ZERO;
        let mut step = Duration::from_millis(5);
        let mut next_warning = Duration::from_secs(30);
        loop {
            self.cgroups.kill(job, scope);
            if self.cgroups.pids(job, scope).is_empty() {
                return true;
            }
            if give_up.is_some_and(|g| waited >= g) {
                return false;
            }
            std::thread::sleep(step);
            waited += step;
            step = (step * 2).min(Duration::from_secs(1));
            if waited >= next_warning {
                next_warning += Duration::from_secs(30);
                warn!(
                    job,
                    ?scope,
                    waited_s = waited.as_secs(),
                    pids = ?self.cgroups.pids(job, scope),
                    "processes of an ended job or step do not die (uninterruptible?); it ends when they do"
                );
            }
        }
    }
}

/// The memory option the job gave (`--mem=100M`), for messages.
fn memory_request(job: &Job, request: MemoryRequest) -> Option<String> {
    if request == MemoryRequest::Unspecified {
        return None;
    }
    ["mem", "mem-per-cpu", "mem-per-gpu"]
        .iter()
        .find_map(|o| job.spec.slurm.other.get(*o).map(|v| format!("--{o}={v}")))
}

/// Reads this host's cores gnoded may hand out (its own CPU affinity).
pub fn online_cpus() -> BTreeSet<u32> {
    match nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)) {
        Ok(set) => (0..nix::sched::CpuSet::count() as u32)
            .filter(|c| set.is_set(*c as usize).unwrap_or(false))
            .collect(),
        Err(_) => (0..std::thread::available_parallelism().map_or(1, |n| n.get() as u32)).collect(),
    }
}

/// Sets up job confinement at start: reads the cgroup config, picks the
/// backend, and decides the CPUs and memory the node offers. Returns the
/// confinement and the node's (CPUs, memory MiB).
pub fn start(
    config: &crate::NodeConfig,
    node_dir: &str,
    host_memory_mib: u64,
    gpus: Option<NodeGpus>,
) -> anyhow::Result<(Arc<Confinement>, u32, u64)> {
    use anyhow::Context;
    let cg_config = match (&config.cgroup, &config.cgroup_config) {
        (Some(c), _) => c.clone(),
        (None, Some(p)) => CgroupConfig::load(p)?,
        (None, None) => CgroupConfig::default(),
    };
    let cgroups: Arc<dyn Cgroups> = if nix::unistd::getuid().is_root() {
        crate::cgroup::select(&cg_config, node_dir)
    } else {
        tracing::warn!(
            "JOBS ARE NOT CONFINED: gnoded does not run as root, so it cannot create cgroups (no memory, core or device limits; double-forked processes outlive their job)"
        );
        Arc::new(crate::cgroup::Unconfined)
    };
    let online = online_cpus();
    let cpus = match config.cpus {
        Some(0) => anyhow::bail!("--cpus 0: a node gives jobs at least one CPU"),
        Some(n) => n,
        None => online.len().max(1) as u32,
    };
    if cgroups.enforced().cores && cpus as usize > online.len() {
        anyhow::bail!(
            "--cpus {cpus} is more than the {} cores gnoded may use; with core confinement each CPU given out is a real core (set constrain_cores = false in the cgroup config to oversubscribe)",
            online.len()
        );
    }
    let memory_mib = match &config.real_memory {
        Some(m) => gsched_core::units::parse_mem_mib(m)
            .with_context(|| format!("invalid --real-memory '{m}'"))?,
        None => host_memory_mib,
    };
    if config.real_memory.is_some() && memory_mib == 0 {
        anyhow::bail!("--real-memory 0: a node gives jobs some memory (e.g. 16G)");
    }
    if memory_mib > host_memory_mib && cgroups.enforced().memory {
        tracing::warn!(
            real_memory_mib = memory_mib,
            host_memory_mib,
            "--real-memory is more than this host has: jobs may be given memory that is not there"
        );
    }
    let confine = Confinement::new(
        cgroups,
        cg_config,
        memory_mib,
        online.into_iter().take(cpus as usize).collect(),
    );
    confine.set_gpus(gpus);
    Ok((Arc::new(confine), cpus, memory_mib))
}

/// A node name as a cgroup directory name (only `[A-Za-z0-9._-]`).
pub fn dir_name(node: &str, node_id: &str) -> String {
    let clean: String = node
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{clean}.{node_id}")
}
