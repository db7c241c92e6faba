//! cgroup v2: one unified hierarchy. Controllers are enabled down to the
//! node's directory; device rules are an eBPF program on the job's cgroup
//! (v2 has no devices files).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use gsched_core::devices::DeviceRule;
use gsched_core::job::JobId;

use super::{
    keyed, kill_pids, make_dir, pids_below, read_u64, read_words, remove_tree, steps_below,
    write_file, CgroupConfig, Cgroups, Counters, Enforced, JobLimits, Result, Scope, BATCH_STEP,
};

/// The controllers gnoded enables.
const CONTROLLERS: [&str; 4] = ["memory", "cpu", "cpuset", "pids"];

pub struct CgroupV2 {
    node_dir: PathBuf,
    /// Controllers enabled for the node's job cgroups.
    controllers: BTreeSet<String>,
    enforced: Enforced,
}

impl CgroupV2 {
    pub fn new(root: &Path, config: &CgroupConfig, node_dir: &str) -> Result<CgroupV2> {
        let base = root.join(&config.base);
        let dir = base.join(node_dir);
        make_dir(&base)?;
        make_dir(&dir)?;
        // Enable what the hierarchy has, level by level. A level that holds
        // processes itself cannot (the kernel says EBUSY): what is missing
        // shows in `enforced`.
        for level in [root, base.as_path(), dir.as_path()] {
            let have = read_words(&level.join("cgroup.controllers"));
            for c in CONTROLLERS.iter().filter(|c| have.contains(**c)) {
                let _ = write_file(&level.join("cgroup.subtree_control"), &format!("+{c}"));
            }
        }
        let controllers = read_words(&dir.join("cgroup.subtree_control"));
        let memory = controllers.contains("memory");
        let enforced = Enforced {
            memory: memory && config.constrain_ram_space,
            swap: memory && config.constrain_swap_space && swap_accounted(&dir),
            cores: controllers.contains("cpuset") && config.constrain_cores,
            devices: config.constrain_devices && super::bpf::supported(),
            tracking: true,
            processes: controllers.contains("pids"),
        };
        Ok(CgroupV2 {
            node_dir: dir,
            controllers,
            enforced,
        })
    }

    fn job_dir(&self, job: JobId) -> PathBuf {
        self.node_dir.join(format!("job_{job}"))
    }

    fn scope_dir(&self, job: JobId, scope: Scope) -> PathBuf {
        scope.dir(&self.job_dir(job))
    }

    fn try_create(&self, job: JobId, limits: &JobLimits) -> Result<Vec<PathBuf>> {
        let dir = self.job_dir(job);
        make_dir(&dir)?;
        if let (true, Some(m)) = (self.enforced.memory, &limits.memory) {
            write_file(&dir.join("memory.max"), &m.ram_bytes.to_string())?;
            if let (true, Some(swap)) = (self.enforced.swap, m.swap_bytes()) {
                write_file(&dir.join("memory.swap.max"), &swap.to_string())?;
            }
        }
        if let (true, Some(cpus)) = (self.enforced.cores, &limits.cpus) {
            write_file(
                &dir.join("cpuset.cpus"),
                &gsched_core::resources::format_cpu_list(cpus),
            )?;
        }
        if let (true, Some(rules)) = (self.enforced.devices, &limits.devices) {
            super::bpf::attach_device_filter(&dir, rules)?;
        }
        if let (true, Some(n)) = (self.enforced.processes, limits.max_processes) {
            write_file(&dir.join("pids.max"), &n.to_string())?;
        }
        // Per-step counters: the job's own controllers for its steps.
        for c in &self.controllers {
            let _ = write_file(&dir.join("cgroup.subtree_control"), &format!("+{c}"));
        }
        let step = dir.join(BATCH_STEP);
        make_dir(&step)?;
        Ok(vec![step.join("cgroup.procs")])
    }
}

/// Whether the kernel accounts swap per cgroup (`memory.swap.max` exists
/// below a cgroup with the memory controller).
fn swap_accounted(node_dir: &Path) -> bool {
    let probe = node_dir.join("swap-probe");
    let _ = make_dir(&probe);
    let yes = probe.join("memory.swap.max").exists();
    let _ = std::fs::remove_dir(&probe);
    yes
}

impl Cgroups for CgroupV2 {
    fn version(&self) -> &'static str {
        "v2"
    }

    fn enforced(&self) -> Enforced {
        self.enforced
    }

    fn create(&self, job: JobId, limits: &JobLimits) -> Result<Vec<PathBuf>> {
        self.try_create(job, limits)
    }

    fn create_step(&self, job: JobId, step: u32) -> Result<()> {
        // The job's controllers are on for its children (`try_create`),
        // and its device filter applies below it.
        make_dir(&self.scope_dir(job, Scope::Step(step)))
    }

    fn freeze(&self, job: JobId, frozen: bool) -> bool {
        let dir = self.job_dir(job);
        let want = u64::from(frozen);
        if write_file(&dir.join("cgroup.freeze"), &want.to_string()).is_err() {
            return false;
        }
        for _ in 0..200 {
            if keyed(&dir.join("cgroup.events"), "frozen") == Some(want) {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        false
    }

    fn set_cpus(&self, job: JobId, cpus: &[u32]) -> Result<()> {
        if !self.enforced.cores {
            return Ok(());
        }
        // Its steps set none of their own: they follow the job's.
        write_file(
            &self.job_dir(job).join("cpuset.cpus"),
            &gsched_core::resources::format_cpu_list(cpus),
        )
    }

    fn set_devices(&self, job: JobId, rules: &[DeviceRule]) -> Result<()> {
        if !self.enforced.devices {
            return Ok(());
        }
        super::bpf::replace_device_filter(&self.job_dir(job), rules)
    }

    fn procs_files(&self, job: JobId, scope: Scope) -> Vec<PathBuf> {
        vec![self.scope_dir(job, scope).join("cgroup.procs")]
    }

    fn join(&self, job: JobId, scope: Scope, pid: i32) -> Result<()> {
        write_file(
            &self.scope_dir(job, scope).join("cgroup.procs"),
            &pid.to_string(),
        )
    }

    fn steps(&self, job: JobId) -> Vec<Scope> {
        steps_below(&self.job_dir(job))
    }

    fn pids(&self, job: JobId, scope: Scope) -> Vec<i32> {
        pids_below(&self.scope_dir(job, scope))
    }

    fn kill(&self, job: JobId, scope: Scope) {
        let dir = self.scope_dir(job, scope);
        if write_file(&dir.join("cgroup.kill"), "1").is_ok() {
            return;
        }
        // Before Linux 5.14: freeze, kill, thaw.
        let frozen = write_file(&dir.join("cgroup.freeze"), "1").is_ok();
        if frozen {
            for _ in 0..200 {
                if keyed(&dir.join("cgroup.events"), "frozen") == Some(1) {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        }
        kill_pids(&self.pids(job, scope));
        let _ = write_file(&dir.join("cgroup.freeze"), "0");
    }

    fn counters(&self, job: JobId, scope: Scope) -> Counters {
        let dir = self.scope_dir(job, scope);
        let cpu = dir.join("cpu.stat");
        Counters {
            peak_bytes: read_u64(&dir.join("memory.peak")),
            current_bytes: read_u64(&dir.join("memory.current")).unwrap_or(0),
            user_usec: keyed(&cpu, "user_usec").unwrap_or(0),
            system_usec: keyed(&cpu, "system_usec").unwrap_or(0),
            // Hierarchical: the steps' kills count here too.
            oom_kills: keyed(&dir.join("memory.events"), "oom_kill").unwrap_or(0),
        }
    }

    fn remove(&self, job: JobId, scope: Scope) -> bool {
        remove_tree(&self.scope_dir(job, scope))
    }

    fn remove_node_dir(&self) {
        let _ = std::fs::remove_dir(&self.node_dir);
        // gsched's base too, when no other node uses it.
        if let Some(base) = self.node_dir.parent() {
            let _ = std::fs::remove_dir(base);
        }
    }
}
