//! `srun` steps: a cgroup of their own below the job's, begun and ended by
//! the `srun` process of the job through the probe socket.
//!
//! The process that asks is known from the socket's credentials, never
//! from the message, and must be in the job's cgroup: a step is the job's
//! own business and no process is moved across jobs. The step's processes
//! stay bounded by the job's limits (its cgroup is below the job's); what
//! the step used is counted from its own cgroup.

use std::time::Duration;

use gsched_core::job::{JobId, ResourceUsage, MAX_STEPS};
use tracing::{info, warn};

use super::Confinement;
use crate::cgroup::Scope;

/// Steps of one job that may run at once on a node.
pub const MAX_RUNNING_STEPS: usize = 256;

/// How long a step's end waits for its leftover processes to die.
const STEP_KILL_WAIT: Duration = Duration::from_secs(30);

/// Why a step cannot begin or end as asked.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum StepError {
    #[error("step {0} is out of range (a job starts at most {max} steps)", max = MAX_STEPS)]
    OutOfRange(u32),
    #[error("job {job} already runs {MAX_RUNNING_STEPS} steps on this node; wait for one to end")]
    TooMany { job: JobId },
    #[error("process {pid} is not a process of job {job}")]
    NotOfJob { job: JobId, pid: i32 },
    #[error("step {0} has already begun")]
    AlreadyBegun(u32),
    #[error("step {0} has not begun (or has ended)")]
    NotBegun(u32),
    #[error("cannot confine step {step}: {why}")]
    Cgroup { step: u32, why: String },
    #[error("processes of step {0} do not die; it is counted with the job")]
    Stuck(u32),
}

impl Confinement {
    /// Step `step` of `job` begins: creates its cgroup and moves `pid` (the
    /// `srun` that asked) into it, so the tasks it starts are the step's.
    /// Creates the cgroup of step `step` of `job` for tasks this node
    /// starts itself (a step's tasks on a sister node, `crate::api::steps`):
    /// the files each task writes `0` into to join it before it executes
    /// (none where nothing is confined).
    pub fn open_step(&self, job: JobId, step: u32) -> Result<Vec<std::path::PathBuf>, StepError> {
        if !self.tracks() {
            return Ok(Vec::new());
        }
        if step as usize >= MAX_STEPS {
            return Err(StepError::OutOfRange(step));
        }
        let existing = self.cgroups.steps(job);
        if existing.contains(&Scope::Step(step)) {
            return Err(StepError::AlreadyBegun(step));
        }
        if existing.iter().filter(|s| **s != Scope::Batch).count() >= MAX_RUNNING_STEPS {
            return Err(StepError::TooMany { job });
        }
        if let Err(e) = self.cgroups.create_step(job, step) {
            self.cgroups.remove(job, Scope::Step(step));
            return Err(StepError::Cgroup {
                step,
                why: e.to_string(),
            });
        }
        Ok(self.cgroups.procs_files(job, Scope::Step(step)))
    }

    /// Sends `sig` to the processes of the job's steps, `srun` itself left
    /// out (the signal is for its tasks, as Slurm's slurmstepd delivers
    /// it). Only where jobs are tracked in cgroups.
    pub fn signal_steps(&self, job: JobId, sig: nix::sys::signal::Signal) {
        let sruns: std::collections::HashSet<i32> = self
            .accounts()
            .get(&job)
            .map(|a| a.joined.values().map(|(pid, _)| *pid).collect())
            .unwrap_or_default();
        for scope in self.cgroups.steps(job) {
            if !matches!(scope, Scope::Step(_)) {
                continue;
            }
            for pid in self.cgroups.pids(job, scope) {
                if !sruns.contains(&pid) {
                    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig);
                }
            }
        }
    }

    /// Sends `sig` to the batch script and its children (its step), not
    /// to the job's `srun` steps. Only where jobs are tracked in cgroups.
    pub fn signal_batch(&self, job: JobId, sig: nix::sys::signal::Signal) {
        for pid in self.cgroups.pids(job, Scope::Batch) {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig);
        }
    }

    pub fn begin_step(&self, job: JobId, step: u32, pid: i32) -> Result<(), StepError> {
        if !self.tracks() {
            // Nothing is confined: the step's processes are the job's.
            return Ok(());
        }
        if step as usize >= MAX_STEPS {
            return Err(StepError::OutOfRange(step));
        }
        let existing = self.cgroups.steps(job);
        if existing.contains(&Scope::Step(step)) {
            return Err(StepError::AlreadyBegun(step));
        }
        let running = existing.iter().filter(|s| **s != Scope::Batch).count();
        if running >= MAX_RUNNING_STEPS {
            return Err(StepError::TooMany { job });
        }
        let Some(origin) = existing
            .into_iter()
            .find(|s| self.cgroups.pids(job, *s).contains(&pid))
        else {
            return Err(StepError::NotOfJob { job, pid });
        };
        let made = self
            .cgroups
            .create_step(job, step)
            .and_then(|()| self.cgroups.join(job, Scope::Step(step), pid));
        if let Err(e) = made {
            self.cgroups.remove(job, Scope::Step(step));
            return Err(StepError::Cgroup {
                step,
                why: e.to_string(),
            });
        }
        self.accounts()
            .entry(job)
            .or_default()
            .joined
            .insert(step, (pid, origin));
        info!(job, step, pid, "step began in its own cgroup");
        Ok(())
    }

    /// Step `step` of `job` ended (its `srun`, `pid`, says so): moves `pid`
    /// back where it came from, kills what is left in the step, and counts
    /// and removes its cgroup. Returns what it used. Blocks while leftover
    /// processes die (call it off the async threads).
    pub fn end_step(&self, job: JobId, step: u32, pid: i32) -> Result<ResourceUsage, StepError> {
        if !self.tracks() {
            return Ok(ResourceUsage::default());
        }
        let scope = Scope::Step(step);
        if !self.cgroups.steps(job).contains(&scope) {
            return Err(StepError::NotBegun(step));
        }
        let joined = self
            .accounts()
            .get_mut(&job)
            .and_then(|a| a.joined.remove(&step));
        if self.cgroups.pids(job, scope).contains(&pid) {
            // Back to the step it came from, if that is still there.
            let back = joined
                .filter(|(p, origin)| *p == pid && self.cgroups.steps(job).contains(origin))
                .map_or(Scope::Batch, |(_, origin)| origin);
            if let Err(e) = self.cgroups.join(job, back, pid) {
                warn!(job, step, pid, error = %e, "cannot move srun out of its step");
            }
        }
        if !self.kill_until_empty(job, scope, Some(STEP_KILL_WAIT)) {
            return Err(StepError::Stuck(step));
        }
        let c = self.cgroups.counters(job, scope);
        let metered = self.gpu_metered();
        let usage = {
            let mut all = self.accounts();
            let a = all.entry(job).or_default();
            let u = a.usage(scope, &c, metered);
            a.samples.remove(&scope);
            a.last.remove(&scope);
            a.gpu_usec.remove(&scope);
            a.ended.insert(step, u);
            u
        };
        if !self.cgroups.remove(job, scope) {
            warn!(job, step, "cannot remove the step's cgroup");
        }
        info!(job, step, "step ended");
        Ok(usage)
    }

    /// The ended steps' use, to keep in the spool across restarts.
    pub fn ended_steps(&self, job: JobId) -> std::collections::BTreeMap<u32, ResourceUsage> {
        self.accounts()
            .get(&job)
            .map(|a| a.ended.clone())
            .unwrap_or_default()
    }
}
