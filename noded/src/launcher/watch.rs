//! The shepherd of a run: started, tracked, and watched until it exits.

use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use gsched_core::job::{JobId, WarnSignal};
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use tokio::io::unix::AsyncFd;
use tracing::{info, warn};

use super::{
    children_of, ended_from_spool, record_finished, signal_group, LaunchError, Launcher,
    RunningJob, TIMEOUT,
};
use crate::shepherd::SHEPHERD_ARG;
use crate::spool::{pidfd_open, process_starttime};

impl Launcher {
    /// Starts the shepherd of a job whose spool is ready.
    pub(super) fn start_shepherd(
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
    pub(super) fn track(
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

    pub(super) fn pgid_of(&self, job: JobId) -> Option<i32> {
        self.jobs().get(&job).and_then(|r| r.pgid)
    }

    pub(super) async fn watch(self: Arc<Self>, job: JobId, pid: i32, fd: OwnedFd) {
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
        let check = self.end_check.clone();
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
        if let Some(probe) = self.probe.as_ref() {
            probe.job_ended(job);
        }
        info!(job, outcome = ?ended.outcome, "job ended");
        let _ = self.ended.send(ended);
    }
}
