//! What the probe library asks, and the answers: each request kind is
//! checked against the job's key and the caller's uid, then handled.

use std::sync::{Arc, MutexGuard};

use gsched_core::compute::{is_share, WHOLE_GPU};
use gsched_core::job::JobId;
use gsched_core::placement::{Begin, Growth, PlacementError, TaskId, TaskRequest};
use gsched_core::probe::{code, BusyTime, ProbeReply, ProbeRequest};
use gsched_core::time_quota::TimeQuota;
use gsched_core::wire::keys_match;
use tokio::io::unix::AsyncFd;
use tokio::sync::oneshot;
use tracing::{debug, info, warn};

use super::{now_ms, ProbeServer, State, TaskEvent, WAITED};

/// A request's answer: now, or once what it waits for happens.
enum Answer {
    Now(ProbeReply),
    Later(oneshot::Receiver<ProbeReply>),
}

/// The answer to a request about a task the job does not have.
fn no_task(job: JobId, task: TaskId) -> ProbeReply {
    ProbeReply::error(code::NO_TASK, format!("job {job} has no task {task}"))
}

impl ProbeServer {
    pub(super) fn check(
        &self,
        st: &State,
        job: JobId,
        key: &str,
        uid: u32,
    ) -> Result<(), ProbeReply> {
        let Some(auth) = st.jobs.get(&job) else {
            return Err(ProbeReply::error(
                code::AUTH,
                format!("job {job} is not running on this node"),
            ));
        };
        if !keys_match(&auth.key, key) {
            return Err(ProbeReply::error(
                code::AUTH,
                format!("wrong key for job {job}"),
            ));
        }
        if auth.uid != uid {
            return Err(ProbeReply::error(
                code::AUTH,
                format!(
                    "uid {uid} may not probe for job {job} (it belongs to uid {})",
                    auth.uid
                ),
            ));
        }
        Ok(())
    }

    /// Checks a token connection's opening: a placed process of a job
    /// with a quota. Returns its instance and the job's quota.
    pub(super) fn open_tokens(
        &self,
        job: JobId,
        key: &str,
        uid: u32,
        pid: u32,
    ) -> std::result::Result<(String, TimeQuota), ProbeReply> {
        let st = self.lock();
        self.check(&st, job, key, uid)?;
        let Some(quota) = st.jobs.get(&job).and_then(|a| a.quota) else {
            return Err(ProbeReply::error(
                code::PROTOCOL,
                format!("job {job} has no GPU time quota (--gpu-share)"),
            ));
        };
        let tasks = st.node.tasks();
        match tasks.pinned(job, pid) {
            Some(instance) => {
                // A share is of a whole GPU; the instance's time is counted.
                let capacity = tasks
                    .instances()
                    .iter()
                    .find(|i| i.uuid == instance)
                    .map_or(WHOLE_GPU, |i| i.capacity);
                Ok((instance.to_string(), quota.of_instance(capacity)))
            }
            None => Err(ProbeReply::error(
                code::NO_TASK,
                format!("process {pid} of job {job} is not placed on an instance"),
            )),
        }
    }

    pub(super) fn handle(self: &Arc<Self>, req: ProbeRequest, uid: u32, pid: u32) -> ProbeReply {
        let st = self.lock();
        let (job, key) = req.job_and_key();
        if let Err(reply) = self.check(&st, job, key, uid) {
            warn!(job, uid, pid, "probe request refused");
            return reply;
        }
        let answer = match req {
            ProbeRequest::Begin {
                job,
                bytes,
                warps,
                shape,
                share,
                ..
            } => self.begin_task(
                st,
                TaskRequest {
                    job,
                    pid,
                    bytes,
                    warps,
                    share,
                    shape,
                },
            ),
            ProbeRequest::End { job, task, .. } => self.end_task(st, job, task),
            ProbeRequest::Grow {
                job,
                task,
                bytes,
                at_least,
                ..
            } => self.grow_task(st, job, task, bytes, at_least.unwrap_or(bytes)),
            ProbeRequest::Warps {
                job, task, warps, ..
            } => {
                let mut st = st;
                Answer::Now(if st.node.owns(job, task) {
                    st.node.set_warps(task, warps);
                    ProbeReply::Ok
                } else {
                    no_task(job, task)
                })
            }
            ProbeRequest::Peak {
                job, bytes, busy, ..
            } => Answer::Now(self.peak(st, job, pid, bytes, busy)),
            ProbeRequest::Busy { job, busy, .. } => {
                let mut st = st;
                // Looked up only when the log takes it (a scan of the tasks).
                let logged = tracing::enabled!(tracing::Level::DEBUG);
                let before = logged.then(|| st.node.tasks().process_demand(job, pid));
                if st.node.busy_report(job, pid, busy, now_ms()) {
                    if let Some(before) = before {
                        let after = st.node.tasks().process_demand(job, pid);
                        if after != before {
                            debug!(job, pid, ?before, ?after, "measured compute demand");
                        }
                    }
                    self.dispatch(&mut st);
                    Answer::Now(ProbeReply::Ok)
                } else {
                    Answer::Now(ProbeReply::error(
                        code::NO_TASK,
                        format!("process {pid} of job {job} has no task placed"),
                    ))
                }
            }
            ProbeRequest::StepBegin { job, step, .. } => {
                drop(st);
                Answer::Now(self.step(job, step, pid, true))
            }
            ProbeRequest::StepEnd { job, step, .. } => {
                drop(st);
                Answer::Now(self.step(job, step, pid, false))
            }
            ProbeRequest::Gate { job, .. } => {
                let mut st = st;
                match st.gates.get_mut(&job) {
                    None => Answer::Now(ProbeReply::Ok),
                    Some(waiting) => {
                        debug!(job, pid, "waits for its instances (started early)");
                        let (tx, rx) = oneshot::channel();
                        waiting.push(tx);
                        Answer::Later(rx)
                    }
                }
            }
            // Taken by `connection` before it gets here.
            ProbeRequest::Tokens { .. } => Answer::Now(ProbeReply::error(
                code::PROTOCOL,
                "a token connection opens alone",
            )),
        };
        match answer {
            Answer::Now(reply) => reply,
            Answer::Later(wait) => self.await_reply(wait),
        }
    }

    /// A task begins: placed now, or waiting for memory or compute.
    fn begin_task(self: &Arc<Self>, mut st: MutexGuard<'_, State>, task: TaskRequest) -> Answer {
        let (job, pid, bytes, share) = (task.job, task.pid, task.bytes, task.share);
        if pid == 0 {
            return Answer::Now(ProbeReply::error(
                code::PROTOCOL,
                "the peer's pid is unknown",
            ));
        }
        if let Some(s) = share.filter(|s| !is_share(*s)) {
            return Answer::Now(ProbeReply::error(
                code::PROTOCOL,
                format!("job {job}: a GPU share of {s} thousandths is outside 1..={WHOLE_GPU}"),
            ));
        }
        if st.watched.insert((job, pid)) {
            self.watch_process(job, pid);
        }
        let begun = st.node.begin(task, now_ms());
        self.dispatch(&mut st);
        match begun {
            Ok(Begin::Placed(p)) => {
                debug!(job, task = p.task, instance = %p.instance, bytes, "task placed");
                let reply = self.placed_reply(&p);
                drop(st);
                self.physically_free(&p.instance, p.bytes);
                Answer::Now(reply)
            }
            Ok(Begin::Waiting(task)) => {
                info!(job, task, bytes, share, "task waits for memory or compute");
                let (tx, rx) = oneshot::channel();
                st.waiters.insert(task, tx);
                Answer::Later(rx)
            }
            Err(e) => Answer::Now(ProbeReply::error(
                code::NEVER_FITS,
                format!("job {job}: {e}"),
            )),
        }
    }

    /// A task ends: its reservation is given back.
    fn end_task(&self, mut st: MutexGuard<'_, State>, job: JobId, task: TaskId) -> Answer {
        if !st.node.owns(job, task) {
            return Answer::Now(no_task(job, task));
        }
        Answer::Now(match st.node.end(task, now_ms()) {
            Ok(()) => {
                self.dispatch(&mut st);
                drop(st);
                self.changed.notify_waiters();
                ProbeReply::Ok
            }
            Err(e) => ProbeReply::error(code::NO_TASK, e.to_string()),
        })
    }

    /// A task's reservation grows to `bytes` (at least `at_least`): now,
    /// or once room is made.
    fn grow_task(
        self: &Arc<Self>,
        mut st: MutexGuard<'_, State>,
        job: JobId,
        task: TaskId,
        bytes: u64,
        at_least: u64,
    ) -> Answer {
        if !st.node.owns(job, task) {
            return Answer::Now(no_task(job, task));
        }
        match st.node.grow(task, bytes, at_least) {
            Ok(Growth::Grown(by)) => Answer::Now(ProbeReply::Grown { bytes: by }),
            Ok(Growth::Waiting) => {
                info!(job, task, bytes, "task waits for memory to grow");
                let (tx, rx) = oneshot::channel();
                st.growers.insert(task, tx);
                self.limit_growth_wait(task);
                Answer::Later(rx)
            }
            Err(e @ PlacementError::Full { .. }) => {
                Answer::Now(ProbeReply::error(code::FULL, e.to_string()))
            }
            Err(e) => Answer::Now(ProbeReply::error(code::NO_TASK, e.to_string())),
        }
    }

    /// A process reports its GPU memory peak and its busy time.
    fn peak(
        &self,
        st: MutexGuard<'_, State>,
        job: JobId,
        pid: u32,
        bytes: u64,
        busy: Option<BusyTime>,
    ) -> ProbeReply {
        if let Some(c) = self.context.as_ref() {
            c.allocated(job, pid, bytes);
        }
        self.events.send(TaskEvent::Peak(job, bytes));
        // Busy time on an instance counts as its part of a GPU.
        let book = st.node.tasks();
        let capacity = book.pinned(job, pid).and_then(|uuid| {
            book.instances()
                .iter()
                .find(|i| i.uuid == uuid)
                .map(|i| i.capacity)
        });
        drop(st);
        if let (Some(b), Some(capacity), Some(add)) = (busy, capacity, self.gpu_busy.as_ref()) {
            let whole = gsched_core::compute::whole_gpu_usec(b.busy_usec, capacity);
            add(job, pid, whole.min(b.placed_usec), b.placed_usec);
        }
        ProbeReply::Ok
    }

    /// The answer to a request that waited (the thread blocks: each
    /// connection has its own).
    fn await_reply(&self, wait: oneshot::Receiver<ProbeReply>) -> ProbeReply {
        WAITED.with(|w| w.set(true));
        match wait.blocking_recv() {
            Ok(reply) => {
                if let ProbeReply::Placed {
                    instance, bytes, ..
                } = &reply
                {
                    self.physically_free(instance, *bytes);
                }
                reply
            }
            Err(_) => ProbeReply::error(
                code::UNAVAILABLE,
                "the task was dropped while it waited (its job or process ended)",
            ),
        }
    }

    /// Begins or ends step `step` of `job` for the process `pid`.
    pub(super) fn step(&self, job: JobId, step: u32, pid: u32, begin: bool) -> ProbeReply {
        let Some(control) = self.steps.upgrade() else {
            return ProbeReply::error(code::UNAVAILABLE, "this node does not run steps");
        };
        let Ok(pid) = i32::try_from(pid) else {
            return ProbeReply::error(code::PROTOCOL, "the peer's pid is unknown");
        };
        if pid <= 0 {
            return ProbeReply::error(code::PROTOCOL, "the peer's pid is unknown");
        }
        let done = if begin {
            control.begin_step(job, step, pid)
        } else {
            control.end_step(job, step, pid)
        };
        match done {
            Ok(()) => ProbeReply::Ok,
            Err(e) => {
                warn!(job, step, pid, begin, error = %e, "step request refused");
                ProbeReply::error(code::STEP, e.to_string())
            }
        }
    }

    /// Releases a process's tasks when it exits.
    pub(super) fn watch_process(self: &Arc<Self>, job: JobId, pid: u32) {
        let fd = match crate::spool::pidfd_open(pid as i32) {
            Ok(fd) => fd,
            Err(e) => {
                warn!(job, pid, error = %e, "cannot watch probing process; its tasks are released with the job");
                return;
            }
        };
        let this = Arc::clone(self);
        self.runtime.spawn(async move {
            // SAFETY: `fd` is an OwnedFd moved into the AsyncFd, which keeps it
            // open for its whole life.
            if let Ok(afd) =
                unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }
            {
                let _ = afd.readable().await;
            }
            if let Some(c) = this.context.as_ref() {
                c.ended(job, pid);
            }
            let mut st = this.lock();
            st.watched.remove(&(job, pid));
            let gone = st.node.process_exited(job, pid, now_ms());
            if gone > 0 {
                debug!(
                    job,
                    pid,
                    tasks = gone,
                    "process exited; its reservations are released"
                );
            }
            this.dispatch(&mut st);
            drop(st);
            this.changed.notify_waiters();
        });
    }
}
