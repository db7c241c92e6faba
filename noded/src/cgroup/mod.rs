//! Confining jobs with cgroups: one cgroup per job, the batch step's
//! processes in a `step_batch` cgroup below it, each `srun` step's in a
//! `step_<n>` cgroup beside it, limits on the job's.
//!
//! Two backends behind one trait, [`Cgroups`]: cgroup v2 where the unified
//! hierarchy has the controllers, cgroup v1 otherwise (memory, cpuset,
//! devices, freezer, cpuacct, pids hierarchies). [`select`] picks one at
//! start and says what it enforces; a node where neither works runs jobs
//! unconfined, and says so loudly. The limits themselves are decided in
//! core (`gsched_core::resources`, `gsched_core::devices`).
//!
//! Layout, under each hierarchy used:
//! `<base>/<node>.<node id>/job_<id>/step_{batch,0,1,...}`, where `<base>` is
//! `gsched` unless configured. The node part keeps two gnoded on one host
//! (tests, or two state directories) apart.

pub mod bpf;
pub mod config;
pub mod v1;
pub mod v2;

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use gsched_core::devices::DeviceRule;
use gsched_core::job::JobId;
use gsched_core::resources::MemoryLimits;

pub use config::{CgroupConfig, Plugin};

/// The cgroup of the batch step, below the job's.
pub const BATCH_STEP: &str = "step_batch";

/// A job's cgroup, or one of its steps' below it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scope {
    /// The job's own cgroup: every process of the job, its steps' too.
    Job,
    /// The batch script's step.
    Batch,
    /// An `srun` step.
    Step(u32),
}

impl Scope {
    /// The scope's directory below the job's (none for the job itself).
    pub fn dir_name(self) -> Option<String> {
        match self {
            Scope::Job => None,
            Scope::Batch => Some(BATCH_STEP.into()),
            Scope::Step(n) => Some(format!("step_{n}")),
        }
    }

    /// The step a directory below a job's cgroup is.
    pub fn of_dir_name(name: &str) -> Option<Scope> {
        if name == BATCH_STEP {
            return Some(Scope::Batch);
        }
        let n = name.strip_prefix("step_")?;
        // Only the canonical spelling: `step_007` is no step of ours.
        let step: u32 = n.parse().ok()?;
        (step.to_string() == n).then_some(Scope::Step(step))
    }

    /// Its directory, given the job's.
    pub fn dir(self, job_dir: &Path) -> PathBuf {
        match self.dir_name() {
            Some(n) => job_dir.join(n),
            None => job_dir.to_path_buf(),
        }
    }
}

/// A cgroup operation that failed, with the file it failed on.
#[derive(Debug, thiserror::Error)]
#[error("{what} {}: {source}", path.display())]
pub struct CgroupError {
    pub what: &'static str,
    pub path: PathBuf,
    pub source: std::io::Error,
}

pub type Result<T> = std::result::Result<T, CgroupError>;

/// The limits a job's cgroup gets; `None`: not enforced.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobLimits {
    pub memory: Option<MemoryLimits>,
    /// The cores it may run on.
    pub cpus: Option<Vec<u32>>,
    /// The devices it may open (every other one is denied).
    pub devices: Option<Vec<DeviceRule>>,
    /// The most processes and threads it may have at once (`pids.max`).
    pub max_processes: Option<u64>,
}

/// What a backend enforces on this node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Enforced {
    pub memory: bool,
    pub swap: bool,
    pub cores: bool,
    pub devices: bool,
    /// Every process of a job is tracked and killed with it.
    pub tracking: bool,
    /// A job's processes and threads are capped (`pids.max`).
    pub processes: bool,
}

impl Enforced {
    /// What is not enforced, for the start-up warning.
    pub fn missing(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        for (on, what) in [
            (
                self.tracking,
                "process tracking (double-forked processes outlive their job)",
            ),
            (self.memory, "memory limits (--mem is not enforced)"),
            (self.swap, "swap limits (jobs may exceed --mem in swap)"),
            (self.cores, "core confinement (-c is not enforced)"),
            (self.devices, "device confinement (jobs can open every GPU)"),
            (
                self.processes,
                "process caps (max_processes is not enforced: a fork bomb in a job can fill the process table)",
            ),
        ] {
            if !on {
                out.push(what);
            }
        }
        out
    }
}

/// A job cgroup's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// The most memory the job used at once (bytes), if the kernel keeps it.
    pub peak_bytes: Option<u64>,
    pub current_bytes: u64,
    pub user_usec: u64,
    pub system_usec: u64,
    /// Processes the kernel's OOM killer ended in the job.
    pub oom_kills: u64,
}

/// One cgroup backend. Every method takes the job id; the backend knows
/// where its cgroups are.
pub trait Cgroups: Send + Sync {
    /// `v1`, `v2`, or `none`.
    fn version(&self) -> &'static str;
    fn enforced(&self) -> Enforced;
    /// Creates the job's cgroup with `limits` and its batch step's below
    /// it. Returns the files a process writes `0` into to join the batch
    /// step (every hierarchy's `cgroup.procs`). On failure, part of it may
    /// exist: the caller removes it.
    fn create(&self, job: JobId, limits: &JobLimits) -> Result<Vec<PathBuf>>;
    /// Creates the cgroup of `srun` step `step` below the job's (the job's
    /// limits bound it).
    fn create_step(&self, job: JobId, step: u32) -> Result<()>;
    /// Replaces the devices a running job may open (its steps' too) with
    /// `rules`. Processes keep what they opened before; only new opens
    /// are checked.
    fn set_devices(&self, job: JobId, rules: &[DeviceRule]) -> Result<()>;
    /// Moves a running job (and its steps) onto cores `cpus` (a
    /// suspended job resumed where its own cores were taken meanwhile).
    fn set_cpus(&self, job: JobId, cpus: &[u32]) -> Result<()>;
    /// Freezes (or thaws) every process of the job, its steps' too, as
    /// Slurm's proctrack/cgroup suspends a job. Frozen processes are not
    /// stopped in the job-control sense: no parent is told, and a restart
    /// of gnoded (whose process group the shepherd leaves orphaned) sends
    /// them no SIGHUP, as it would stopped ones. False where the node has
    /// no freezer (or it did not take).
    fn freeze(&self, job: JobId, frozen: bool) -> bool;
    /// Moves process `pid`, all its threads, into a step of the job.
    fn join(&self, job: JobId, scope: Scope, pid: i32) -> Result<()>;
    /// The files a process writes `0` into to join a step of the job
    /// (every hierarchy's `cgroup.procs`; none where nothing is confined).
    fn procs_files(&self, job: JobId, scope: Scope) -> Vec<PathBuf>;
    /// The steps whose cgroups exist below the job's.
    fn steps(&self, job: JobId) -> Vec<Scope>;
    /// Every process in the scope's cgroup and the ones below it.
    fn pids(&self, job: JobId, scope: Scope) -> Vec<i32>;
    /// Kills every process in the scope at once (so none can fork away
    /// meanwhile).
    fn kill(&self, job: JobId, scope: Scope);
    fn counters(&self, job: JobId, scope: Scope) -> Counters;
    /// Removes the scope's cgroups (the job's: its steps' too); false if
    /// some could not be (processes are left).
    fn remove(&self, job: JobId, scope: Scope) -> bool;
    /// Removes this node's directory and gsched's base directory where
    /// they are empty, at shutdown.
    fn remove_node_dir(&self);
}

/// No cgroups: jobs are tracked by process group only.
pub struct Unconfined;

impl Cgroups for Unconfined {
    fn version(&self) -> &'static str {
        "none"
    }
    fn enforced(&self) -> Enforced {
        Enforced::default()
    }
    fn create(&self, _: JobId, _: &JobLimits) -> Result<Vec<PathBuf>> {
        Ok(Vec::new())
    }
    fn create_step(&self, _: JobId, _: u32) -> Result<()> {
        Ok(())
    }
    fn set_devices(&self, _: JobId, _: &[DeviceRule]) -> Result<()> {
        Ok(())
    }
    fn set_cpus(&self, _: JobId, _: &[u32]) -> Result<()> {
        Ok(())
    }
    fn freeze(&self, _: JobId, _: bool) -> bool {
        false
    }
    fn procs_files(&self, _: JobId, _: Scope) -> Vec<PathBuf> {
        Vec::new()
    }
    fn join(&self, _: JobId, _: Scope, _: i32) -> Result<()> {
        Ok(())
    }
    fn steps(&self, _: JobId) -> Vec<Scope> {
        Vec::new()
    }
    fn pids(&self, _: JobId, _: Scope) -> Vec<i32> {
        Vec::new()
    }
    fn kill(&self, _: JobId, _: Scope) {}
    fn counters(&self, _: JobId, _: Scope) -> Counters {
        Counters::default()
    }
    fn remove(&self, _: JobId, _: Scope) -> bool {
        true
    }
    fn remove_node_dir(&self) {}
}

/// The cgroup mounts of this host, from `/proc/self/mountinfo`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Mounts {
    /// The unified (v2) hierarchy.
    pub v2: Option<PathBuf>,
    /// v1 hierarchies: mount point and the controllers it carries.
    pub v1: Vec<(PathBuf, Vec<String>)>,
}

impl Mounts {
    pub fn read() -> Mounts {
        Mounts::parse(&std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default())
    }

    /// Reads mountinfo lines (`... mountpoint opts - fstype source superopts`).
    pub fn parse(mountinfo: &str) -> Mounts {
        let mut m = Mounts::default();
        for line in mountinfo.lines() {
            let Some((left, right)) = line.split_once(" - ") else {
                continue;
            };
            let Some(point) = left.split_whitespace().nth(4) else {
                continue;
            };
            let mut r = right.split_whitespace();
            let (fstype, super_opts) = (r.next(), r.nth(1).unwrap_or(""));
            let point = PathBuf::from(unescape_mount(point));
            match fstype {
                Some("cgroup2") if m.v2.is_none() => m.v2 = Some(point),
                Some("cgroup") => {
                    let ctrls = super_opts
                        .split(',')
                        .filter(|o| !o.contains('=') && !["rw", "ro"].contains(o))
                        .map(String::from)
                        .collect();
                    m.v1.push((point, ctrls));
                }
                _ => {}
            }
        }
        m
    }

    /// The v1 hierarchy that carries `controller`.
    pub fn v1_of(&self, controller: &str) -> Option<&Path> {
        self.v1
            .iter()
            .find(|(_, c)| c.iter().any(|x| x == controller))
            .map(|(p, _)| p.as_path())
    }
}

/// mountinfo escapes spaces and the like as `\040`.
fn unescape_mount(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 4 <= b.len() && b[i + 1..i + 4].iter().all(u8::is_ascii_digit) {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 4], 8) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Which backend to use. `Auto` takes v2 when the unified hierarchy has
/// the memory controller (or can be given it), else v1 when its memory
/// or freezer hierarchy is mounted, else none.
pub fn choose(plugin: Plugin, mounts: &Mounts, v2_controllers: &BTreeSet<String>) -> Plugin {
    match plugin {
        Plugin::Auto => {
            if mounts.v2.is_some() && v2_controllers.contains("memory") {
                Plugin::V2
            } else if mounts.v1_of("memory").is_some() || mounts.v1_of("freezer").is_some() {
                Plugin::V1
            } else if mounts.v2.is_some() {
                // Tracking and kill work on a v2 hierarchy without controllers.
                Plugin::V2
            } else {
                Plugin::None
            }
        }
        other => other,
    }
}

/// The node's backend, chosen and set up as `config` says. Never fails:
/// a node where cgroups do not work runs jobs unconfined, and the log says
/// what is not enforced.
pub fn select(config: &CgroupConfig, node_dir: &str) -> std::sync::Arc<dyn Cgroups> {
    let mounts = Mounts::read();
    let v2_controllers = mounts
        .v2
        .as_ref()
        .map(|p| read_words(&p.join("cgroup.controllers")))
        .unwrap_or_default();
    let chosen = choose(config.plugin, &mounts, &v2_controllers);
    let made: std::result::Result<
        std::sync::Arc<dyn Cgroups>,
        Box<dyn std::error::Error + Send + Sync>,
    > = match chosen {
        Plugin::V2 => match &mounts.v2 {
            Some(root) => v2::CgroupV2::new(root, config, node_dir)
                .map(|c| std::sync::Arc::new(c) as _)
                .map_err(Into::into),
            None => Err("no cgroup v2 hierarchy is mounted".into()),
        },
        Plugin::V1 => v1::CgroupV1::new(&mounts, config, node_dir)
            .map(|c| std::sync::Arc::new(c) as _)
            .map_err(Into::into),
        Plugin::None | Plugin::Auto => Err("cgroups are turned off (plugin = \"none\")".into()),
    };
    match made {
        Ok(c) => {
            let missing = c.enforced().missing();
            if missing.is_empty() {
                tracing::info!(version = c.version(), "jobs are confined with cgroups");
            } else {
                tracing::warn!(
                    version = c.version(),
                    not_enforced = %missing.join("; "),
                    "jobs are confined with cgroups, but not everything is enforced"
                );
            }
            c
        }
        Err(why) => {
            tracing::error!(
                %why,
                not_enforced = %Enforced::default().missing().join("; "),
                "JOBS ARE NOT CONFINED: no cgroup backend works on this node"
            );
            std::sync::Arc::new(Unconfined)
        }
    }
}

pub(crate) fn error<'a>(
    what: &'static str,
    path: &'a Path,
) -> impl FnOnce(std::io::Error) -> CgroupError + 'a {
    move |source| CgroupError {
        what,
        path: path.to_path_buf(),
        source,
    }
}

/// Writes `value` into a cgroup file (one write, as the kernel wants).
pub(crate) fn write_file(path: &Path, value: &str) -> Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(error("cannot open", path))?;
    f.write_all(value.as_bytes())
        .map_err(error("cannot write", path))
}

/// Creates a cgroup directory (0700: only root looks inside).
pub(crate) fn make_dir(path: &Path) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    match std::fs::DirBuilder::new().mode(0o700).create(path) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
            Err(error("cannot create cgroup", path)(e))
        }
        _ => Ok(()),
    }
}

pub(crate) fn read_u64(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

pub(crate) fn read_words(path: &Path) -> BTreeSet<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .split_whitespace()
        .map(String::from)
        .collect()
}

/// A `key value` field of a flat-keyed file (`memory.events`, `cpu.stat`).
pub(crate) fn keyed(path: &Path, key: &str) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

/// The pids in `dir`'s `cgroup.procs` and every cgroup below it.
pub(crate) fn pids_below(dir: &Path) -> Vec<i32> {
    let mut out: Vec<i32> = std::fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect();
    for sub in child_dirs(dir) {
        out.extend(pids_below(&sub));
    }
    out
}

/// The steps whose directories are below a job's directory.
pub(crate) fn steps_below(job_dir: &Path) -> Vec<Scope> {
    let mut out: Vec<Scope> = child_dirs(job_dir)
        .iter()
        .filter_map(|d| Scope::of_dir_name(d.file_name()?.to_str()?))
        .collect();
    out.sort_unstable();
    out
}

pub(crate) fn child_dirs(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default()
}

/// Removes a cgroup and the ones below it (deepest first). A cgroup with
/// processes cannot be removed: returns false.
pub(crate) fn remove_tree(dir: &Path) -> bool {
    if !dir.exists() {
        return true;
    }
    let mut ok = true;
    for sub in child_dirs(dir) {
        ok &= remove_tree(&sub);
    }
    // The kernel may still be tearing the last process down: retry a little.
    for _ in 0..50 {
        match std::fs::remove_dir(dir) {
            Ok(()) => return ok,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return ok,
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
    false
}

/// SIGKILLs every listed process.
pub(crate) fn kill_pids(pids: &[i32]) {
    for &p in pids {
        if p > 1 {
            let _ =
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(p), nix::sys::signal::SIGKILL);
        }
    }
}

#[cfg(test)]
mod tests;
