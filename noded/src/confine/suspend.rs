//! A suspended job's processes and cores. Its cgroup is frozen (as
//! Slurm's proctrack/cgroup does), else, without a freezer, every process
//! in it gets SIGSTOP (in rounds until none is left running); it is thawed
//! (or gets SIGCONT) to go on. Its cores are free for other jobs while it
//! is stopped; when it goes on it takes them back, or other free cores
//! where they were taken (its cgroup moved there).

use std::collections::BTreeSet;
use std::time::Duration;

use gsched_core::job::JobId;
use gsched_core::resources::cpus_to_resume;
use nix::sys::signal::Signal;

use super::Confinement;
use crate::cgroup::Scope;

/// How many rounds of SIGSTOP catch processes forked meanwhile.
const STOP_ROUNDS: u32 = 50;

/// Why a suspended job cannot go on now.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ResumeRefused(pub String);

impl From<String> for ResumeRefused {
    fn from(why: String) -> Self {
        ResumeRefused(why)
    }
}

impl From<&str> for ResumeRefused {
    fn from(why: &str) -> Self {
        ResumeRefused(why.to_string())
    }
}

impl Confinement {
    fn parked(&self) -> std::sync::MutexGuard<'_, std::collections::BTreeMap<JobId, Vec<u32>>> {
        self.parked.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The job's cores, held or parked, are no longer its.
    pub(super) fn forget_cores(&self, job: JobId) {
        self.taken().remove(&job);
        self.parked().remove(&job);
    }

    /// Stops every process of the job and parks its cores: its cgroup
    /// frozen, else SIGSTOP to every process in it, in rounds until all
    /// are stopped (one forked meanwhile is caught in the next). Says how;
    /// `None` where neither reached them all (a node that does not hold
    /// jobs in cgroups: the caller signals the job's process group).
    /// Blocks for at most a couple of seconds.
    pub fn stop(&self, job: JobId) -> Option<&'static str> {
        self.park(job);
        if self.cgroups.freeze(job, true) {
            return Some("cgroup frozen");
        }
        if !self.tracks() {
            return None;
        }
        for _ in 0..STOP_ROUNDS {
            let running: Vec<i32> = self
                .cgroups
                .pids(job, Scope::Job)
                .into_iter()
                .filter(|p| !is_stopped(*p))
                .collect();
            if running.is_empty() {
                return Some("SIGSTOP to its cgroup's processes");
            }
            for pid in running {
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), Signal::SIGSTOP);
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        None
    }

    /// Lets a stopped job's processes go on (thawed, or SIGCONT), without
    /// taking its cores back: a job being cancelled must see its SIGTERM.
    pub fn thaw(&self, job: JobId) {
        if !self.cgroups.freeze(job, false) {
            self.signal(job, Signal::SIGCONT);
        }
    }

    /// The job's cores are free for others while it is stopped.
    pub fn park(&self, job: JobId) {
        if let Some(cpus) = self.taken().remove(&job) {
            self.parked().insert(job, cpus);
        }
    }

    /// Takes the cores of a stopped job back (its own where all are free,
    /// else as many others, its cgroup moved onto them) and lets its
    /// processes go on. `Err` (it stays stopped) where too few cores are
    /// free.
    pub fn cont(&self, job: JobId) -> Result<(), ResumeRefused> {
        let parked = self.parked().get(&job).cloned();
        if let Some(own) = parked {
            let mut taken = self.taken();
            let busy: BTreeSet<u32> = taken.values().flatten().copied().collect();
            let (cpus, its_own) = cpus_to_resume(&self.online, &busy, &own).ok_or_else(|| {
                format!(
                    "the job needs {} CPUs to go on and this node has {} free",
                    own.len(),
                    self.online.len().saturating_sub(busy.len())
                )
            })?;
            if !its_own {
                self.cgroups.set_cpus(job, &cpus).map_err(|e| {
                    ResumeRefused(format!("cannot move the job onto CPUs {cpus:?}: {e}"))
                })?;
            }
            taken.insert(job, cpus);
            self.parked().remove(&job);
        }
        self.thaw(job);
        Ok(())
    }
}

/// Whether process `pid` is stopped (or gone).
fn is_stopped(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return true;
    };
    // The state follows the command name, which is in parentheses and may
    // hold anything.
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next())
        .is_none_or(|state| matches!(state, 'T' | 't' | 'Z' | 'X'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stopped_process_reads_as_stopped_and_a_running_one_does_not() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        assert!(!is_stopped(pid));
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), Signal::SIGSTOP).unwrap();
        let mut stopped = false;
        for _ in 0..200 {
            if is_stopped(pid) {
                stopped = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(stopped);
        let _ = child.kill();
        let _ = child.wait();
        assert!(is_stopped(pid), "gone");
    }
}
