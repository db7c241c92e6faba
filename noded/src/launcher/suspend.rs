//! Suspending a job here (`scontrol suspend`, `PreemptMode=SUSPEND`): its
//! processes are stopped (SIGSTOP) and its cores parked for other jobs;
//! resumed, it takes cores back and its processes continue (SIGCONT). The
//! record of it is in the job's root-owned spool, so a restarted gnoded
//! keeps it stopped and its time limit paused. Its time limit and
//! `--signal` warning count only the time it runs.

use std::sync::Arc;
use std::time::Duration;

use gsched_core::job::JobId;
use gsched_core::suspension::Suspension;
use gsched_core::wire::SuspendRequest;
use nix::sys::signal::Signal;
use tracing::{info, warn};

use gsched_daemon::unix_now;

use super::{LaunchError, Launcher};

impl Launcher {
    /// Stops or continues run `req.run` of `job`. Nothing where it is in
    /// that state already, or where another run is here.
    pub fn suspend(self: &Arc<Self>, job: JobId, req: &SuspendRequest) -> Result<(), LaunchError> {
        let (pgid, run, mut suspension) = {
            let jobs = self.jobs();
            let r = jobs.get(&job).ok_or(LaunchError::NotRunning(job))?;
            (r.pgid, r.run, r.suspension)
        };
        if run != req.run || suspension.is_suspended() == req.suspend {
            return Ok(());
        }
        let pgid = pgid.ok_or_else(|| {
            LaunchError::Refused(format!(
                "job {job} has not started yet; ask again once it has"
            ))
        })?;
        let now = unix_now();
        if req.suspend {
            suspension.suspend(now, None);
            // Recorded first: a gnoded that dies now keeps it stopped.
            self.record_suspension(job, suspension)?;
            let how = match self.confinement().stop(job) {
                Some(how) => how,
                None if self.confinement().tracks() => {
                    warn!(job, "some of the job's processes did not stop");
                    "SIGSTOP, not all stopped"
                }
                None => {
                    // No cgroup holds it: its process groups. (Stopped
                    // processes whose group a gnoded restart orphans get
                    // SIGHUP from the kernel: docs/security.md.)
                    self.signal_job(job, pgid, Signal::SIGSTOP);
                    "SIGSTOP to its process groups"
                }
            };
            info!(job, how, "suspended");
        } else {
            self.confinement()
                .cont(job)
                .map_err(|e| LaunchError::Refused(format!("job {job} cannot resume: {e}")))?;
            if !self.confinement().tracks() {
                self.signal_job(job, pgid, Signal::SIGCONT);
            }
            suspension.resume(now);
            self.record_suspension(job, suspension)?;
            info!(job, "resumed");
        }
        Ok(())
    }

    /// Keeps the job's suspensions in memory and in its spool.
    fn record_suspension(&self, job: JobId, s: Suspension) -> Result<(), LaunchError> {
        let spool = self.spool(job);
        spool
            .write_json(&spool.suspension_path(), &s)
            .map_err(|e| {
                LaunchError::Io(format!("cannot record the suspension of job {job}: {e}"))
            })?;
        if let Some(r) = self.jobs().get_mut(&job) {
            r.suspension = s;
        }
        Ok(())
    }

    /// The jobs held stopped here.
    pub fn suspended_ids(&self) -> Vec<JobId> {
        let mut v: Vec<JobId> = self
            .jobs()
            .iter()
            .filter(|(_, r)| r.suspension.is_suspended())
            .map(|(id, _)| *id)
            .collect();
        v.sort_unstable();
        v
    }

    /// Sleeps until job `job` (its shepherd `pid`) has run `left` more,
    /// leaving out the time it spends suspended; false if it ended first.
    pub(super) async fn sleep_running(&self, job: JobId, pid: i32, left: Duration) -> bool {
        let base = tokio::time::Instant::now();
        let stopped_before = self.stopped_secs(job);
        let mut due = base + left;
        loop {
            tokio::time::sleep_until(due).await;
            if self.pgid_of(job) != Some(pid) {
                return false;
            }
            let (stopped, secs) = (self.is_stopped(job), self.stopped_secs(job));
            let extra = Duration::from_secs((secs - stopped_before).max(0) as u64);
            let now = tokio::time::Instant::now();
            if !stopped && now >= base + left + extra {
                return true;
            }
            // Stopped: its limit waits (a second at least between looks).
            due = (base + left + extra).max(now + Duration::from_secs(1));
        }
    }

    fn is_stopped(&self, job: JobId) -> bool {
        self.jobs()
            .get(&job)
            .is_some_and(|r| r.suspension.is_suspended())
    }

    /// Seconds the job's run has been stopped in all, up to now.
    fn stopped_secs(&self, job: JobId) -> i64 {
        self.jobs()
            .get(&job)
            .map_or(0, |r| r.suspension.secs_until(unix_now()))
    }
}
