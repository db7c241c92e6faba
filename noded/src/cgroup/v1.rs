//! cgroup v1: one hierarchy per controller (or a few together). A job's
//! cgroup exists in each hierarchy gnoded uses; its processes join all.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use gsched_core::devices::DeviceRule;
use gsched_core::job::JobId;

use super::{
    keyed, kill_pids, make_dir, pids_below, read_u64, remove_tree, steps_below, write_file,
    CgroupConfig, Cgroups, Counters, Enforced, JobLimits, Result, Scope, BATCH_STEP,
};

/// The controllers gnoded uses, in the order their hierarchies are joined.
const CONTROLLERS: [&str; 6] = ["freezer", "memory", "cpuset", "devices", "cpuacct", "pids"];

pub struct CgroupV1 {
    /// Each used hierarchy's node directory (`<mount>/<base>/<node>`), by
    /// controller; one hierarchy may carry several controllers.
    dirs: Vec<(&'static str, PathBuf)>,
    enforced: Enforced,
}

impl CgroupV1 {
    pub fn new(mounts: &super::Mounts, config: &CgroupConfig, node_dir: &str) -> Result<CgroupV1> {
        let mut dirs = Vec::new();
        for ctrl in CONTROLLERS {
            let Some(mount) = mounts.v1_of(ctrl) else {
                continue;
            };
            let base = mount.join(&config.base);
            let dir = base.join(node_dir);
            make_dir(&base)?;
            make_dir(&dir)?;
            if ctrl == "cpuset" {
                // A new cpuset has no CPUs or memory nodes: give gsched's
                // directories their parents'.
                inherit_cpuset(mount, &base)?;
                inherit_cpuset(&base, &dir)?;
            }
            dirs.push((ctrl, dir));
        }
        let has = |c: &str| dirs.iter().any(|(x, _)| *x == c);
        let memsw = dirs
            .iter()
            .find(|(c, _)| *c == "memory")
            .is_some_and(|(_, d)| d.join("memory.memsw.limit_in_bytes").exists());
        let enforced = Enforced {
            memory: has("memory") && config.constrain_ram_space,
            swap: has("memory") && memsw && config.constrain_swap_space,
            cores: has("cpuset") && config.constrain_cores,
            devices: has("devices") && config.constrain_devices,
            tracking: has("freezer"),
            processes: has("pids"),
        };
        if dirs.is_empty() {
            return Err(super::CgroupError {
                what: "no v1 hierarchy of",
                path: PathBuf::from(CONTROLLERS.join(",")),
                source: std::io::Error::from(std::io::ErrorKind::NotFound),
            });
        }
        Ok(CgroupV1 { dirs, enforced })
    }

    fn dir_of(&self, ctrl: &str) -> Option<&Path> {
        self.dirs
            .iter()
            .find(|(c, _)| *c == ctrl)
            .map(|(_, d)| d.as_path())
    }

    fn job_dir(&self, node_dir: &Path, job: JobId) -> PathBuf {
        node_dir.join(format!("job_{job}"))
    }

    fn scope_dir(&self, node_dir: &Path, job: JobId, scope: Scope) -> PathBuf {
        scope.dir(&self.job_dir(node_dir, job))
    }

    /// The hierarchies, each once (co-mounted controllers share one).
    fn hierarchies(&self) -> Vec<&Path> {
        let mut out: Vec<&Path> = Vec::new();
        for (_, d) in &self.dirs {
            if !out.contains(&d.as_path()) {
                out.push(d);
            }
        }
        out
    }

    fn set_limits(&self, ctrl: &str, job_dir: &Path, limits: &JobLimits) -> Result<()> {
        match ctrl {
            "memory" => {
                if let (true, Some(m)) = (self.enforced.memory, &limits.memory) {
                    write_file(
                        &job_dir.join("memory.limit_in_bytes"),
                        &m.ram_bytes.to_string(),
                    )?;
                    if let (true, Some(both)) = (self.enforced.swap, m.ram_and_swap_bytes) {
                        write_file(
                            &job_dir.join("memory.memsw.limit_in_bytes"),
                            &both.to_string(),
                        )?;
                    }
                }
            }
            "cpuset" => {
                let parent = job_dir.parent().unwrap_or(job_dir);
                inherit_cpuset(parent, job_dir)?;
                if let (true, Some(cpus)) = (self.enforced.cores, &limits.cpus) {
                    write_file(
                        &job_dir.join("cpuset.cpus"),
                        &gsched_core::resources::format_cpu_list(cpus),
                    )?;
                }
            }
            "pids" => {
                if let Some(n) = limits.max_processes {
                    write_file(&job_dir.join("pids.max"), &n.to_string())?;
                }
            }
            "devices" => {
                if let (true, Some(rules)) = (self.enforced.devices, &limits.devices) {
                    write_file(&job_dir.join("devices.deny"), "a")?;
                    for r in rules {
                        write_file(&job_dir.join("devices.allow"), &r.to_string())?;
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn try_create(&self, job: JobId, limits: &JobLimits) -> Result<Vec<PathBuf>> {
        let mut procs = Vec::new();
        for (ctrl, node_dir) in &self.dirs {
            let job_dir = self.job_dir(node_dir, job);
            make_dir(&job_dir)?;
            self.set_limits(ctrl, &job_dir, limits)?;
            let step = job_dir.join(BATCH_STEP);
            // Made after the limits: a v1 child copies its parent's device
            // rules when it is created.
            make_dir(&step)?;
            if *ctrl == "cpuset" {
                inherit_cpuset(&job_dir, &step)?;
            }
            let file = step.join("cgroup.procs");
            if !procs.contains(&file) {
                procs.push(file);
            }
        }
        Ok(procs)
    }

    fn set_freezer(&self, job_dir: &Path, state: &str) -> bool {
        if write_file(&job_dir.join("freezer.state"), state).is_err() {
            return false;
        }
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline {
            let now = std::fs::read_to_string(job_dir.join("freezer.state")).unwrap_or_default();
            if now.trim() == state {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }
}

/// Gives `dir` its parent's CPUs and memory nodes where it has none.
fn inherit_cpuset(parent: &Path, dir: &Path) -> Result<()> {
    for f in ["cpuset.cpus", "cpuset.mems"] {
        let mine = std::fs::read_to_string(dir.join(f)).unwrap_or_default();
        if mine.trim().is_empty() {
            let theirs = std::fs::read_to_string(parent.join(f)).unwrap_or_default();
            write_file(&dir.join(f), theirs.trim())?;
        }
    }
    Ok(())
}

impl Cgroups for CgroupV1 {
    fn version(&self) -> &'static str {
        "v1"
    }

    fn enforced(&self) -> Enforced {
        self.enforced
    }

    fn create(&self, job: JobId, limits: &JobLimits) -> Result<Vec<PathBuf>> {
        self.try_create(job, limits)
    }

    fn create_step(&self, job: JobId, step: u32) -> Result<()> {
        for (ctrl, node_dir) in &self.dirs {
            let job_dir = self.job_dir(node_dir, job);
            let dir = Scope::Step(step).dir(&job_dir);
            // A v1 child copies its parent's device rules; memory and
            // cpuacct count it in the job's; a cpuset needs its CPUs given.
            make_dir(&dir)?;
            if *ctrl == "cpuset" {
                inherit_cpuset(&job_dir, &dir)?;
            }
        }
        Ok(())
    }

    fn freeze(&self, job: JobId, frozen: bool) -> bool {
        let Some(fz) = self.dir_of("freezer") else {
            return false;
        };
        let dir = self.job_dir(fz, job);
        self.set_freezer(&dir, if frozen { "FROZEN" } else { "THAWED" })
    }

    fn set_cpus(&self, job: JobId, cpus: &[u32]) -> Result<()> {
        let (true, Some(node_dir)) = (self.enforced.cores, self.dir_of("cpuset")) else {
            return Ok(());
        };
        let dir = self.job_dir(node_dir, job);
        let file = dir.join("cpuset.cpus");
        let old = std::fs::read_to_string(&file).map_err(super::error("cannot read", &file))?;
        let mut wide = gsched_core::resources::parse_cpu_list(&old).unwrap_or_default();
        wide.extend(cpus.iter().copied());
        let wide: Vec<u32> = wide.into_iter().collect();
        let new = gsched_core::resources::format_cpu_list(cpus);
        // A v1 cpuset's children must stay within it: widen it, move its
        // steps, then narrow it.
        write_file(&file, &gsched_core::resources::format_cpu_list(&wide))?;
        for child in super::child_dirs(&dir) {
            write_file(&child.join("cpuset.cpus"), &new)?;
        }
        write_file(&file, &new)
    }

    fn set_devices(&self, job: JobId, rules: &[DeviceRule]) -> Result<()> {
        let (true, Some(node_dir)) = (self.enforced.devices, self.dir_of("devices")) else {
            return Ok(());
        };
        let dir = self.job_dir(node_dir, job);
        let list = std::fs::read_to_string(dir.join("devices.list"))
            .map_err(super::error("cannot read", &dir.join("devices.list")))?;
        let now: BTreeSet<DeviceRule> = list.lines().filter_map(DeviceRule::parse).collect();
        let want: BTreeSet<DeviceRule> = rules.iter().copied().collect();
        // A rule denied at the job is taken from its steps by the kernel.
        for r in now.difference(&want) {
            write_file(&dir.join("devices.deny"), &r.to_string())?;
        }
        // One allowed must be given to each cgroup, parents first.
        let added: Vec<&DeviceRule> = want.difference(&now).collect();
        if !added.is_empty() {
            for d in std::iter::once(dir.clone()).chain(subdirs(&dir)) {
                for r in &added {
                    write_file(&d.join("devices.allow"), &r.to_string())?;
                }
            }
        }
        Ok(())
    }

    fn procs_files(&self, job: JobId, scope: Scope) -> Vec<PathBuf> {
        self.hierarchies()
            .into_iter()
            .map(|d| self.scope_dir(d, job, scope).join("cgroup.procs"))
            .collect()
    }

    fn join(&self, job: JobId, scope: Scope, pid: i32) -> Result<()> {
        for d in self.hierarchies() {
            let procs = self.scope_dir(d, job, scope).join("cgroup.procs");
            write_file(&procs, &pid.to_string())?;
        }
        Ok(())
    }

    fn steps(&self, job: JobId) -> Vec<Scope> {
        self.hierarchies()
            .first()
            .map(|d| steps_below(&self.job_dir(d, job)))
            .unwrap_or_default()
    }

    fn pids(&self, job: JobId, scope: Scope) -> Vec<i32> {
        let mut all: Vec<i32> = self
            .hierarchies()
            .into_iter()
            .flat_map(|d| pids_below(&self.scope_dir(d, job, scope)))
            .collect();
        all.sort_unstable();
        all.dedup();
        all
    }

    fn kill(&self, job: JobId, scope: Scope) {
        match self.dir_of("freezer") {
            Some(fz) => {
                let dir = self.scope_dir(fz, job, scope);
                // Frozen processes cannot fork; the kill lands on every one.
                let frozen = self.set_freezer(&dir, "FROZEN");
                kill_pids(&self.pids(job, scope));
                self.set_freezer(&dir, "THAWED");
                if !frozen {
                    kill_pids(&self.pids(job, scope));
                }
            }
            None => {
                for _ in 0..3 {
                    kill_pids(&self.pids(job, scope));
                }
            }
        }
    }

    fn counters(&self, job: JobId, scope: Scope) -> Counters {
        let mut c = Counters::default();
        if let Some(mem) = self.dir_of("memory") {
            let dir = self.scope_dir(mem, job, scope);
            c.peak_bytes = read_u64(&dir.join("memory.max_usage_in_bytes"));
            c.current_bytes = read_u64(&dir.join("memory.usage_in_bytes")).unwrap_or(0);
            // v1 counts an OOM kill in the cgroup of the process killed.
            c.oom_kills = oom_kills_below(&dir);
        }
        if let Some(acct) = self.dir_of("cpuacct") {
            let dir = self.scope_dir(acct, job, scope);
            match (
                read_u64(&dir.join("cpuacct.usage_user")),
                read_u64(&dir.join("cpuacct.usage_sys")),
            ) {
                (Some(u), Some(s)) => {
                    c.user_usec = u / 1000;
                    c.system_usec = s / 1000;
                }
                _ => {
                    // SAFETY: sysconf has no preconditions.
                    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
                    let stat = dir.join("cpuacct.stat");
                    c.user_usec = keyed(&stat, "user").unwrap_or(0) * 1_000_000 / hz;
                    c.system_usec = keyed(&stat, "system").unwrap_or(0) * 1_000_000 / hz;
                }
            }
        }
        c
    }

    fn remove(&self, job: JobId, scope: Scope) -> bool {
        let mut ok = true;
        for d in self.hierarchies() {
            ok &= remove_tree(&self.scope_dir(d, job, scope));
        }
        ok
    }

    fn remove_node_dir(&self) {
        for (_, d) in &self.dirs {
            let _ = std::fs::remove_dir(d);
            // gsched's base too, when no other node uses it.
            if let Some(base) = d.parent() {
                let _ = std::fs::remove_dir(base);
            }
        }
    }
}

/// Every cgroup below `dir`, parents before their children.
fn subdirs(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut next = vec![dir.to_path_buf()];
    while let Some(d) = next.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            // cgroupfs has no links; a directory is a cgroup.
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                out.push(e.path());
                next.push(e.path());
            }
        }
    }
    out
}

fn oom_kills_below(dir: &Path) -> u64 {
    keyed(&dir.join("memory.oom_control"), "oom_kill").unwrap_or(0)
        + super::child_dirs(dir)
            .iter()
            .map(|d| oom_kills_below(d))
            .sum::<u64>()
}
