//! Signals to a job's processes: the batch script's group, its steps'
//! groups, and the fence that stops every run when the node loses the
//! controller.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use gsched_core::job::JobId;
use gsched_core::outcome::SignalScope;
use gsched_core::wire::SignalRequest;
use nix::sys::signal::Signal;
use tracing::{info, warn};

use super::{ended_from_spool, signal_group, LaunchError, Launcher, CANCELLED, FENCED};

impl Launcher {
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
    pub(super) fn end_unstarted(&self, job: JobId) {
        self.jobs().remove(&job);
        if let Some(probe) = self.probe.as_ref() {
            probe.job_ended(job);
        }
        self.confinement().abandon(job);
        let _ = self.ended.send(ended_from_spool(job, &self.spool(job)));
    }

    /// Sends `sig` to every process of a job: those in its cgroup where
    /// the node has one (so `setsid` children get it too), else its
    /// process group.
    pub(super) fn signal_job(&self, job: JobId, pgid: i32, sig: Signal) {
        if self.confinement().tracks() {
            self.confinement().signal(job, sig);
        } else {
            signal_group(pgid, sig);
        }
        self.signal_step_groups(job, sig);
    }

    /// Sends `sig` to the processes of a job that `scope` names: with
    /// cgroups, the batch step's and the `srun` steps' own cgroups; without,
    /// the batch script's process group and the step tasks started here
    /// for other nodes' `srun` (a local `srun`'s tasks are then in the
    /// script's group).
    fn signal_scope(&self, job: JobId, pgid: i32, sig: Signal, scope: SignalScope) {
        let tracked = self.confinement().tracks();
        match scope {
            SignalScope::Full => self.signal_job(job, pgid, sig),
            SignalScope::Batch if tracked => self.confinement().signal_batch(job, sig),
            SignalScope::Batch => signal_group(pgid, sig),
            SignalScope::Steps if tracked => self.confinement().signal_steps(job, sig),
            SignalScope::Steps => self.signal_step_groups(job, sig),
        }
        info!(job, signal = %sig, ?scope, "job signalled");
    }

    /// SIGKILLs every process of a job, its whole cgroup at once.
    pub(super) fn kill_job(&self, job: JobId, pgid: i32) {
        signal_group(pgid, Signal::SIGKILL);
        self.signal_step_groups(job, Signal::SIGKILL);
        self.confinement().kill(job);
    }

    pub(super) fn step_groups(&self) -> std::sync::MutexGuard<'_, HashMap<JobId, HashSet<i32>>> {
        self.step_groups.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn signal_step_groups(&self, job: JobId, sig: Signal) {
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

    /// SIGCONT and SIGTERM to the job, then SIGKILL after the grace period
    /// (a suspended job is thawed first: frozen processes see no signal).
    pub(super) fn terminate(self: &Arc<Self>, job: JobId, pgid: i32) {
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
            self.signal_scope(job, pgid, sig, req.scope);
        }
        Ok(())
    }
}
