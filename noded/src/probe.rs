//! The probe server: a unix socket where the processes of non-isolated jobs
//! ask for GPU placements. It is transport: every decision (placement,
//! holds, drains, settling, growths) is made by the node's
//! [`NodeBook`] in gsched-core, and this server carries out the events it
//! returns (answers to waiting callers, records for gctld).
//!
//! Every request carries its job id and the job's secret; the peer's uid
//! (from the socket) must be the job's user, and its pid, also from the
//! socket, identifies the process. A process's reservations are released
//! when it ends a task, when it exits (watched through a pidfd), and when
//! its job ends.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use gsched_core::histogram::{LatencyHistogram, PROBE_BOUNDS, WAIT_BOUNDS};
use gsched_core::job::JobId;
use gsched_core::placement::budget::{BudgetInput, MemBudget};
use gsched_core::placement::{NodeBook, NodeEvent, Placed, TaskBook, TaskId};
use gsched_core::probe::{code, ProbeReply, TaskRecord};
use gsched_core::time_quota::{TimeQuota, TokenConfig};
use gsched_core::wire::InstanceUse;
use tokio::net::UnixListener;
use tokio::sync::{oneshot, Notify};
use tracing::{debug, info, warn};

use crate::tokens::TokenServer;

/// Longest socket path (the kernel's limit is 108 bytes with the NUL).
const MAX_SOCK_PATH: usize = 100;

pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// What the server tells gctld about: reservations and process peaks.
#[derive(Debug, Clone)]
pub enum TaskEvent {
    Record(TaskRecord),
    Peak(JobId, u64),
}

/// Events waiting to go to gctld. Probe calls only push here (no wake-up
/// on the hot path); the controller link collects them every 100 ms.
#[derive(Default)]
pub struct TaskEvents {
    buf: Mutex<Vec<TaskEvent>>,
}

impl TaskEvents {
    pub fn send(&self, e: TaskEvent) {
        self.buf.lock().unwrap_or_else(|e| e.into_inner()).push(e);
    }

    pub fn take(&self) -> Vec<TaskEvent> {
        std::mem::take(&mut *self.buf.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

struct JobAuth {
    key: String,
    uid: u32,
    /// The GPU time quota its processes are held to, if any.
    quota: Option<TimeQuota>,
}

/// The node's placement state (decisions, in gsched-core) and what this
/// transport keeps around it: the jobs allowed to ask, the callers waiting
/// for an answer, and the processes watched.
struct State {
    node: NodeBook,
    jobs: HashMap<JobId, JobAuth>,
    waiters: HashMap<TaskId, oneshot::Sender<ProbeReply>>,
    /// Tasks waiting to grow (the book knows by how much).
    growers: HashMap<TaskId, oneshot::Sender<ProbeReply>>,
    watched: HashSet<(JobId, u32)>,
    /// Isolated jobs started early whose instances are not yet theirs, with
    /// their processes waiting for them (`ProbeRequest::Gate`).
    gates: HashMap<JobId, Vec<oneshot::Sender<ProbeReply>>>,
    /// Rooms kept for jobs' next processes: (until, job, keep), `keeps.rs`.
    keeps: std::collections::BTreeSet<(i64, JobId, u64)>,
}

/// Reads the memory physically free on an instance (bytes).
pub type FreeMemory = Arc<dyn Fn(&str) -> Option<u64> + Send + Sync>;

/// The jobs' processes the GPU reports on an instance (by UUID), as (pid,
/// job), where it can tell: those of shared jobs that bypassed the
/// interception too.
pub type ProcessesOn = Arc<dyn Fn(&str) -> Option<Vec<(u32, JobId)>> + Send + Sync>;

/// How long a process may wait for room to grow its reservation before
/// its allocation fails.
const GROW_WAIT_LIMIT: std::time::Duration = std::time::Duration::from_secs(120);

/// How often a drain looks again at processes it has no placement for.
const UNPLACED_POLL: std::time::Duration = std::time::Duration::from_millis(500);

/// How long a placed task may wait for memory its predecessor still holds
/// physically (a process that has exited, whose memory the driver or MPS
/// server has not yet returned): as long as the instance settles.
const PHYSICAL_WAIT: std::time::Duration =
    std::time::Duration::from_millis(gsched_core::placement::SETTLE_MS as u64);

pub struct ProbeServer {
    path: PathBuf,
    /// For the pidfd watchers, spawned from connection threads.
    runtime: tokio::runtime::Handle,
    free_memory: Option<FreeMemory>,
    processes_on: Option<ProcessesOn>,
    /// Learns the context cost from the processes placed here.
    context: Option<Arc<crate::context::ContextWatch>>,
    state: Mutex<State>,
    /// Each instance's MPS pipe directory (re-partitions change them).
    mps: std::sync::RwLock<BTreeMap<String, String>>,
    events: Arc<TaskEvents>,
    changed: Notify,
    /// Wakes the task that ends kept rooms (`keeps.rs`).
    keep_wake: Arc<Notify>,
    /// Probe round trips and placement waits, for the heartbeat.
    latency: Mutex<(LatencyHistogram, LatencyHistogram)>,
    /// Open connections by uid: each holds a thread.
    limits: Arc<gsched_daemon::limits::ConnectionLimits<u32>>,
    steps: std::sync::Weak<dyn StepControl>,
    gpu_busy: Option<GpuBusy>,
    /// GPU time quotas (token connections).
    tokens: Arc<TokenServer>,
}

/// Counts what a job's process measured of its GPU use: (job, pid, busy
/// microseconds of a whole GPU, placed microseconds).
pub type GpuBusy = Arc<dyn Fn(JobId, u32, u64, u64) + Send + Sync>;

/// What the probe server asks of the node for `srun` steps (the
/// launcher, which knows the jobs and their cgroups). `pid` is the asking
/// process, from the socket's credentials.
pub trait StepControl: Send + Sync {
    fn begin_step(&self, job: JobId, step: u32, pid: i32) -> std::result::Result<(), StepRefused>;
    /// Blocks while the step's leftover processes die.
    fn end_step(&self, job: JobId, step: u32, pid: i32) -> std::result::Result<(), StepRefused>;
}

/// Why a step could not begin or end on this node.
#[derive(Debug, thiserror::Error)]
pub enum StepRefused {
    #[error("job {0} is not running on this node")]
    NotRunning(JobId),
    #[error("{0}")]
    Confinement(String),
}

/// Probe connections one uid may hold open at once (each is a thread; a
/// job's CUDA processes hold one each), and all users together.
pub const PROBE_CONNECTIONS_PER_UID: usize = 256;
pub const PROBE_CONNECTIONS_TOTAL: usize = 2048;
/// How long a new connection may take to send its first request.
const FIRST_REQUEST_WITHIN: std::time::Duration = std::time::Duration::from_secs(10);

thread_local! {
    /// Set by a request that waited for memory on this connection thread.
    static WAITED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// What the probe server reads from the GPUs and the cgroups, each
/// optional (simulated GPUs and tests have none of them).
#[derive(Default)]
pub struct ProbeReaders {
    /// Lets placements wait until the memory they reserve is physically
    /// free.
    pub free_memory: Option<FreeMemory>,
    /// Lets drains see processes the GPU runs on an instance, placed or not.
    pub processes_on: Option<ProcessesOn>,
    /// Learns the context cost from the processes placed here.
    pub context: Option<Arc<crate::context::ContextWatch>>,
    /// Where a process's measured GPU use is counted.
    pub gpu_busy: Option<GpuBusy>,
}

/// The probe socket, bound, and the GPU token timer: what can fail in
/// building a probe server, done before it is built.
pub struct ProbeSocket {
    path: PathBuf,
    tokens: Arc<TokenServer>,
}

impl ProbeSocket {
    /// Binds the socket at `path` (any local user may connect; requests are
    /// checked by key and uid) and starts the token timer.
    pub fn bind(path: PathBuf) -> Result<(ProbeSocket, UnixListener)> {
        if path.as_os_str().len() > MAX_SOCK_PATH {
            bail!(
                "the probe socket path {} is too long for a unix socket; use a shorter state directory",
                path.display()
            );
        }
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))?;
        }
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path)
            .with_context(|| format!("cannot bind the probe socket {}", path.display()))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666))?;
        let tokens = TokenServer::start(TokenConfig::default())
            .context("cannot start the GPU token timer")?;
        Ok((ProbeSocket { path, tokens }, listener))
    }
}

/// What a probe server is built from, beside its socket.
pub struct ProbeSetup {
    pub book: TaskBook,
    /// How long a job's room is kept for its next process (ms; 0: not).
    pub hold_between_ms: i64,
    /// Each instance's MPS pipe directory.
    pub mps: BTreeMap<String, String>,
    pub events: Arc<TaskEvents>,
    pub readers: ProbeReaders,
    /// Where steps begin and end (the launcher, which holds this server).
    pub steps: std::sync::Weak<dyn StepControl>,
}

impl ProbeServer {
    /// The server on `socket`, with everything it reads given here.
    pub fn new(socket: ProbeSocket, setup: ProbeSetup) -> Arc<ProbeServer> {
        let ProbeReaders {
            free_memory,
            processes_on,
            context,
            gpu_busy,
        } = setup.readers;
        let server = Arc::new(ProbeServer {
            path: socket.path,
            runtime: tokio::runtime::Handle::current(),
            free_memory,
            processes_on,
            context,
            state: Mutex::new(State {
                node: NodeBook::new(setup.book).holding_between(setup.hold_between_ms),
                jobs: HashMap::new(),
                waiters: HashMap::new(),
                growers: HashMap::new(),
                watched: HashSet::new(),
                gates: HashMap::new(),
                keeps: Default::default(),
            }),
            mps: std::sync::RwLock::new(setup.mps),
            events: setup.events,
            changed: Notify::new(),
            keep_wake: Arc::new(Notify::new()),
            latency: Mutex::new((
                LatencyHistogram::new(&PROBE_BOUNDS),
                LatencyHistogram::new(&WAIT_BOUNDS),
            )),
            limits: gsched_daemon::limits::ConnectionLimits::new(
                PROBE_CONNECTIONS_PER_UID,
                PROBE_CONNECTIONS_TOTAL,
            ),
            steps: setup.steps,
            gpu_busy,
            tokens: socket.tokens,
        });
        server.spawn_keep_ender();
        server
    }

    /// A server with no readers and no steps, on a socket at `path`.
    #[cfg(test)]
    pub(crate) fn bind(
        path: PathBuf,
        book: TaskBook,
        mps: BTreeMap<String, String>,
        events: Arc<TaskEvents>,
    ) -> Result<(Arc<ProbeServer>, UnixListener)> {
        ProbeServer::bind_reading(path, book, mps, events, ProbeReaders::default())
    }

    /// A server with `readers` and no steps, on a socket at `path`.
    #[cfg(test)]
    pub(crate) fn bind_reading(
        path: PathBuf,
        book: TaskBook,
        mps: BTreeMap<String, String>,
        events: Arc<TaskEvents>,
        readers: ProbeReaders,
    ) -> Result<(Arc<ProbeServer>, UnixListener)> {
        ProbeServer::bind_holding(path, book, mps, events, readers, 0)
    }

    /// The same, keeping jobs' rooms `hold_between_ms` between processes.
    #[cfg(test)]
    pub(crate) fn bind_holding(
        path: PathBuf,
        book: TaskBook,
        mps: BTreeMap<String, String>,
        events: Arc<TaskEvents>,
        readers: ProbeReaders,
        hold_between_ms: i64,
    ) -> Result<(Arc<ProbeServer>, UnixListener)> {
        struct NoSteps;
        impl StepControl for NoSteps {
            fn begin_step(
                &self,
                job: JobId,
                _: u32,
                _: i32,
            ) -> std::result::Result<(), StepRefused> {
                Err(StepRefused::NotRunning(job))
            }
            fn end_step(&self, job: JobId, _: u32, _: i32) -> std::result::Result<(), StepRefused> {
                Err(StepRefused::NotRunning(job))
            }
        }
        let (socket, listener) = ProbeSocket::bind(path)?;
        let setup = ProbeSetup {
            book,
            hold_between_ms,
            mps,
            events,
            readers,
            steps: std::sync::Weak::<NoSteps>::new(),
        };
        Ok((ProbeServer::new(socket, setup), listener))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every process bound to an instance here (job, pid).
    pub fn placed_processes(&self) -> Vec<(JobId, u32)> {
        self.lock().node.tasks().bound_processes()
    }

    /// Jobs' processes the GPU reports on `uuid` (none where it cannot
    /// tell).
    fn processes_on(&self, uuid: &str) -> Vec<(u32, JobId)> {
        self.processes_on
            .as_ref()
            .and_then(|f| f(uuid))
            .unwrap_or_default()
    }

    /// Looks for processes that use an instance without a placement (a
    /// shared job that turned the interception off): while one does, no
    /// new process is bound to that instance, as if its job held it, and
    /// the log names it. Blocks on the GPU (call it off the async threads).
    pub fn check_unplaced(&self) {
        if self.processes_on.is_none() {
            return;
        }
        let uuids: Vec<String> = self
            .lock()
            .node
            .tasks()
            .instances()
            .iter()
            .map(|i| i.uuid.clone())
            .collect();
        for uuid in uuids {
            let seen = self.processes_on(&uuid);
            let mut st = self.lock();
            let Some(unplaced) = st.node.note_processes(&uuid, seen, now_ms()) else {
                continue;
            };
            if unplaced.is_empty() {
                info!(instance = %uuid, "no process without a placement is left on the instance: shared work is placed there again");
            } else {
                warn!(instance = %uuid, processes = ?unplaced, "job processes use the instance without a placement (the interception turned off?): no new shared process is placed there until they end");
            }
            self.dispatch(&mut st);
            drop(st);
            self.changed.notify_waiters();
        }
    }

    /// Returns once `bytes` are physically free on `instance` (or after
    /// [`PHYSICAL_WAIT`], with a warning): the reservation accounting says
    /// the memory is available, but an exited process's memory may still be
    /// on its way back.
    fn physically_free(&self, instance: &str, bytes: u64) {
        let Some(f) = &self.free_memory else {
            return;
        };
        // Only where a dead process's memory may still be returning: the
        // common path makes no device query.
        let settling = self.lock().node.settling(instance, now_ms());
        if !settling {
            return;
        }
        let start = std::time::Instant::now();
        loop {
            match f(instance) {
                Some(free) if free < bytes => {}
                _ => return,
            }
            if start.elapsed() > PHYSICAL_WAIT {
                warn!(
                    instance,
                    bytes, "reserved memory is still in use on the device; placing anyway"
                );
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Puts back the reservations gctld recorded as held by this node's
    /// running jobs before a restart, and watches their processes again.
    /// Records of processes that are gone are closed.
    pub fn restore(self: &Arc<Self>, records: Vec<TaskRecord>, running: &[JobId]) {
        let mut st = self.lock();
        let now = now_ms();
        for r in records {
            let alive =
                running.contains(&r.job) && crate::spool::process_starttime(r.pid as i32).is_some();
            if st.node.restore(&r, alive, now) {
                if st.watched.insert((r.job, r.pid)) {
                    self.watch_process(r.job, r.pid);
                }
                info!(job = r.job, task = r.task, instance = %r.instance, bytes = r.bytes, "reservation restored");
            }
        }
        self.dispatch(&mut st);
    }

    /// The memory of the largest instance shared tasks may use, bytes.
    pub fn largest_open_bytes(&self) -> u64 {
        self.lock().node.tasks().largest_open_bytes()
    }

    /// Lets a job use the probe socket; returns its secret. `key` is given
    /// when re-registering an adopted job; `quota` is the GPU time quota
    /// its processes are held to, `budget` what sets the GPU memory its
    /// processes may reserve (shared jobs).
    pub fn register_job(
        &self,
        job: JobId,
        uid: u32,
        key: Option<String>,
        quota: Option<TimeQuota>,
        budget: Option<BudgetInput>,
    ) -> Result<String> {
        let key = match key {
            Some(k) => k,
            None => gsched_daemon::key::random_hex(24)?,
        };
        let context = self.context.as_ref().map_or(0, |c| c.reserve_bytes());
        let mut st = self.lock();
        if let Some(input) = budget {
            let largest = st.node.tasks().largest_open_bytes();
            st.node
                .set_budget(job, MemBudget::of(input, largest, context));
        }
        st.jobs.insert(
            job,
            JobAuth {
                key: key.clone(),
                uid,
                quota,
            },
        );
        Ok(key)
    }

    /// The job ended or was cancelled: its reservations go, at once.
    pub fn job_ended(&self, job: JobId) {
        if let Some(c) = self.context.as_ref() {
            c.job_ended(job);
        }
        let mut st = self.lock();
        st.jobs.remove(&job);
        st.gates.remove(&job);
        st.watched.retain(|(j, _)| *j != job);
        st.node.job_ended(job, now_ms());
        self.dispatch(&mut st);
        drop(st);
        self.changed.notify_waiters();
    }

    /// Shared tasks waiting for a place, first in line first.
    pub fn waiting_tasks(&self) -> Vec<gsched_core::wire::WaitingTask> {
        self.lock().node.tasks().waiting_tasks()
    }

    /// What the node's open instances could still take of new processes
    /// (`TaskBook::room_for_newcomers`).
    pub fn room_for_newcomers(&self) -> Option<gsched_core::wire::SharedRoom> {
        self.lock().node.tasks().room_for_newcomers()
    }

    /// Records one request: a round trip unless it waited for memory, and
    /// a placement wait for a task's begin.
    fn observe(&self, secs: f64, begin: bool, waited: bool) {
        let mut l = self.latency.lock().unwrap_or_else(|p| p.into_inner());
        if !waited {
            l.0.observe(secs);
        }
        if begin {
            l.1.observe(secs);
        }
    }

    /// Round trips and placement waits so far.
    pub fn latency(&self) -> (LatencyHistogram, LatencyHistogram) {
        self.latency
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Tasks and reserved bytes per instance.
    pub fn usage(&self) -> BTreeMap<String, InstanceUse> {
        let st = self.lock();
        let book = st.node.tasks();
        let mut uses = book.instance_uses();
        for i in book.instances() {
            if let Some(u) = uses.get_mut(&i.uuid) {
                u.used_bytes = self
                    .free_memory
                    .as_ref()
                    .and_then(|f| f(&i.uuid))
                    .map(|free| i.memory_bytes.saturating_sub(free));
            }
        }
        uses
    }

    /// Refuses a growth still waiting after [`GROW_WAIT_LIMIT`]: a process
    /// may wait for memory its own job's other processes hold (which the
    /// book cannot see), so the wait is bounded.
    fn limit_growth_wait(self: &Arc<Self>, task: TaskId) {
        let this = Arc::clone(self);
        self.runtime.spawn(async move {
            tokio::time::sleep(GROW_WAIT_LIMIT).await;
            let mut st = this.lock();
            if !st.node.cancel_growth(task, now_ms()) {
                return;
            }
            if let Some(tx) = st.growers.remove(&task) {
                warn!(task, "a task waited too long to grow; its allocation fails");
                let _ = tx.send(ProbeReply::error(
                    code::FULL,
                    format!(
                        "no room to grow into on the instance within {} s",
                        GROW_WAIT_LIMIT.as_secs()
                    ),
                ));
            }
            this.dispatch(&mut st);
            drop(st);
            this.changed.notify_waiters();
        });
    }

    /// Carries out what the node's book decided: records go to gctld,
    /// waiting callers get their answers (a placement nobody waits for any
    /// more is given back), and callers of tasks that are gone get none.
    fn dispatch(&self, st: &mut State) {
        loop {
            let events = st.node.take_events();
            if events.is_empty() {
                return;
            }
            for e in events {
                match e {
                    NodeEvent::Record(r) => self.events.send(TaskEvent::Record(r)),
                    NodeEvent::Gone(task) => {
                        st.waiters.remove(&task);
                    }
                    NodeEvent::KeepUsed { job, outcome } => {
                        debug!(job, ?outcome, "the job's next process met its kept room");
                    }
                    NodeEvent::KeepUntil { job, seq, at_ms } => {
                        debug!(job, seq, "room kept for the job's next process");
                        // A job has one keep at a time: a newer one replaces it.
                        st.keeps.retain(|k| k.1 != job);
                        st.keeps.insert((at_ms, job, seq));
                        self.keep_wake.notify_one();
                    }
                    NodeEvent::Growth { task, grown, bytes } => {
                        let Some(tx) = st.growers.remove(&task) else {
                            continue;
                        };
                        let reply = if grown {
                            info!(task, bytes, "task grew after waiting");
                            ProbeReply::Grown { bytes }
                        } else {
                            ProbeReply::error(
                                code::FULL,
                                "the instance has no room to grow into, and every task on it is waiting to grow",
                            )
                        };
                        let _ = tx.send(reply);
                    }
                    NodeEvent::Placed(p) => {
                        info!(job = p.job, task = p.task, instance = %p.instance, bytes = p.bytes, "task placed after waiting");
                        let reply = self.placed_reply(&p);
                        let delivered = st
                            .waiters
                            .remove(&p.task)
                            .is_some_and(|tx| tx.send(reply).is_ok());
                        if !delivered {
                            // The asker is gone: give the place back.
                            st.node.abandon(p.task, now_ms());
                        }
                    }
                }
            }
        }
    }

    /// Isolated job `job` starts early: its processes' `Gate` requests
    /// wait until [`Self::open_gate`].
    pub fn close_gate(&self, job: JobId) {
        self.lock().gates.entry(job).or_default();
    }

    /// Job `job`'s instances are its own: its processes may use them.
    pub fn open_gate(&self, job: JobId) {
        let waiting = self.lock().gates.remove(&job).unwrap_or_default();
        for tx in waiting {
            let _ = tx.send(ProbeReply::Ok);
        }
    }

    fn placed_reply(&self, p: &Placed) -> ProbeReply {
        ProbeReply::Placed {
            task: p.task,
            instance: p.instance.clone(),
            mps_pipe_dir: self
                .mps
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .get(&p.instance)
                .cloned(),
            bytes: p.bytes,
        }
    }
}

/// The peer's uid and pid (SO_PEERCRED).
fn peer_cred(s: &std::os::unix::net::UnixStream) -> std::io::Result<(u32, u32)> {
    let c = nix::sys::socket::getsockopt(s, nix::sys::socket::sockopt::PeerCredentials)?;
    Ok((c.uid(), c.pid().max(0) as u32))
}

mod instances;
mod keeps;
mod requests;
mod transport;

#[cfg(test)]
mod tests {
    use super::*;
    use gsched_core::placement::CasePlacement;
    use gsched_core::probe::ProbeRequest;
    use std::io::{Read, Write};

    const G: u64 = 1 << 30;

    fn call(sock: &Path, body: &[u8]) -> ProbeReply {
        let mut s = std::os::unix::net::UnixStream::connect(sock).unwrap();
        let mut frame = (body.len() as u32).to_le_bytes().to_vec();
        frame.extend_from_slice(body);
        s.write_all(&frame).unwrap();
        let mut h = [0u8; 4];
        s.read_exact(&mut h).unwrap();
        let mut b = vec![0u8; u32::from_le_bytes(h) as usize];
        s.read_exact(&mut b).unwrap();
        serde_json::from_slice(&b).unwrap()
    }

    /// A probe server on `sock` with `book` and no MPS.
    fn server_on(sock: std::path::PathBuf, book: TaskBook) -> (Arc<ProbeServer>, UnixListener) {
        ProbeServer::bind(sock, book, BTreeMap::new(), Arc::new(TaskEvents::default())).unwrap()
    }

    /// The same, with the GPU reporting `processes_on` each instance.
    fn server_seeing(
        sock: std::path::PathBuf,
        book: TaskBook,
        processes_on: ProcessesOn,
    ) -> (Arc<ProbeServer>, UnixListener) {
        let readers = ProbeReaders {
            processes_on: Some(processes_on),
            ..ProbeReaders::default()
        };
        let events = Arc::new(TaskEvents::default());
        ProbeServer::bind_reading(sock, book, BTreeMap::new(), events, readers).unwrap()
    }

    fn begin(job: JobId, key: &str, bytes: u64) -> Vec<u8> {
        serde_json::to_vec(&ProbeRequest::Begin {
            job,
            key: key.into(),
            bytes,
            warps: 32,
            shape: None,
            share: None,
        })
        .unwrap()
    }

    fn end_request(job: JobId, key: &str, task: u64) -> Vec<u8> {
        serde_json::to_vec(&ProbeRequest::End {
            job,
            key: key.into(),
            task,
        })
        .unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_drain_waits_for_processes_it_has_no_placement_for() {
        let dir = tempfile::tempdir().unwrap();
        let book = TaskBook::new(Box::new(CasePlacement), vec![("GPU-a".into(), 4 * G)]);
        // The GPU reports a process there that gnoded never placed.
        let running = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let r = Arc::clone(&running);
        let (server, _listener) = server_seeing(
            dir.path().join("p.sock"),
            book,
            Arc::new(move |uuid: &str| {
                (uuid == "GPU-a" && r.load(std::sync::atomic::Ordering::SeqCst))
                    .then(|| vec![(4242, 9)])
            }),
        );
        assert!(server.hold("GPU-a", 7), "a process is on the instance");
        let s = Arc::clone(&server);
        server.register_job(7, 0, None, None, None).unwrap();
        let drained = tokio::spawn(async move { s.drained_for("GPU-a", 7).await });
        tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
        assert!(!drained.is_finished(), "drained while a process ran there");
        running.store(false, std::sync::atomic::Ordering::SeqCst);
        tokio::time::timeout(std::time::Duration::from_secs(5), drained)
            .await
            .expect("drained once the process ended")
            .unwrap()
            .then_some(())
            .expect("free for job 7");
        // Job 8 started early waits for job 7; then nothing is on it.
        assert!(server.hold("GPU-a", 8), "job 7 holds it");
        server.job_ended(7);
        assert!(!server.hold("GPU-a", 8));
    }

    #[tokio::test]
    async fn a_process_without_a_placement_closes_its_instance_while_it_runs() {
        let dir = tempfile::tempdir().unwrap();
        let book = || TaskBook::new(Box::new(CasePlacement), vec![("GPU-a".into(), 40 * G)]);
        let (blind, _l) = server_on(dir.path().join("blind.sock"), book());
        let bypassed = |s: &ProbeServer| s.lock().node.tasks().instances()[0].bypassed;
        // Nothing to look at: nothing changes.
        blind.check_unplaced();
        assert!(!bypassed(&blind));
        let running = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let r = Arc::clone(&running);
        let (server, _listener) = server_seeing(
            dir.path().join("p.sock"),
            book(),
            Arc::new(move |_: &str| {
                Some(if r.load(std::sync::atomic::Ordering::SeqCst) {
                    vec![(4242, 9)]
                } else {
                    Vec::new()
                })
            }),
        );
        server.check_unplaced();
        assert!(bypassed(&server), "job 9's process has no placement");
        running.store(false, std::sync::atomic::Ordering::SeqCst);
        server.check_unplaced();
        assert!(!bypassed(&server), "open again once it is gone");
        // The job holding the instance is at home there.
        server.hold("GPU-a", 9);
        running.store(true, std::sync::atomic::Ordering::SeqCst);
        server.check_unplaced();
        assert!(!bypassed(&server), "an isolated job's own process");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_growth_without_room_waits_until_another_task_ends() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("p.sock");
        let book = TaskBook::new(Box::new(CasePlacement), vec![("GPU-a".into(), 4 * G)]);
        let (server, listener) = server_on(sock.clone(), book);
        tokio::spawn(Arc::clone(&server).serve(listener));
        let me = nix::unistd::getuid().as_raw();
        let (k1, k2) = (
            server.register_job(1, me, None, None, None).unwrap(),
            server.register_job(2, me, None, None, None).unwrap(),
        );
        let task_of = |r: ProbeReply| match r {
            ProbeReply::Placed { task, .. } => task,
            r => panic!("{r:?}"),
        };
        let (s, k) = (sock.clone(), k1.clone());
        let t1 = tokio::task::spawn_blocking(move || task_of(call(&s, &begin(1, &k, 3 * G))))
            .await
            .unwrap();
        let (s, k) = (sock.clone(), k2.clone());
        let t2 = tokio::task::spawn_blocking(move || task_of(call(&s, &begin(2, &k, G))))
            .await
            .unwrap();
        // Job 1 wants 2 GiB more, at least 1: none is free, it waits.
        let (s, k) = (sock.clone(), k1.clone());
        let grow = tokio::task::spawn_blocking(move || {
            let req = ProbeRequest::Grow {
                job: 1,
                key: k,
                task: t1,
                bytes: 2 * G,
                at_least: Some(G),
            };
            call(&s, &serde_json::to_vec(&req).unwrap())
        });
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        assert!(!grow.is_finished(), "grew with no room");
        let (s, k) = (sock.clone(), k2.clone());
        let end = tokio::task::spawn_blocking(move || call(&s, &end_request(2, &k, t2)))
            .await
            .unwrap();
        assert!(matches!(end, ProbeReply::Ok), "{end:?}");
        let grown = tokio::time::timeout(std::time::Duration::from_secs(5), grow)
            .await
            .expect("the growth is answered")
            .unwrap();
        assert!(
            matches!(grown, ProbeReply::Grown { bytes } if bytes == G),
            "{grown:?}"
        );
        assert_eq!(server.usage()["GPU-a"].reserved_bytes, 4 * G);
        server.job_ended(1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_job_s_room_is_kept_for_its_next_process_until_the_hold_ends() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("p.sock");
        let book = TaskBook::new(Box::new(CasePlacement), vec![("GPU-a".into(), 4 * G)]);
        let events = Arc::new(TaskEvents::default());
        let (server, listener) = ProbeServer::bind_holding(
            sock.clone(),
            book,
            BTreeMap::new(),
            events,
            ProbeReaders::default(),
            2_000,
        )
        .unwrap();
        tokio::spawn(Arc::clone(&server).serve(listener));
        let me = nix::unistd::getuid().as_raw();
        let (k1, k2) = (
            server.register_job(1, me, None, None, None).unwrap(),
            server.register_job(2, me, None, None, None).unwrap(),
        );
        let (s, k) = (sock.clone(), k1.clone());
        let t1 = match tokio::task::spawn_blocking(move || call(&s, &begin(1, &k, 3 * G)))
            .await
            .unwrap()
        {
            ProbeReply::Placed { task, .. } => task,
            r => panic!("{r:?}"),
        };
        let (s, k) = (sock.clone(), k2.clone());
        let waiting = tokio::task::spawn_blocking(move || call(&s, &begin(2, &k, 3 * G)));
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        assert!(!waiting.is_finished(), "placed with no room");
        let (s, k) = (sock.clone(), k1.clone());
        let end = tokio::task::spawn_blocking(move || call(&s, &end_request(1, &k, t1)))
            .await
            .unwrap();
        assert!(matches!(end, ProbeReply::Ok), "{end:?}");
        // Job 1's room is kept a while: job 2 still waits.
        tokio::time::sleep(std::time::Duration::from_millis(150)).await;
        assert!(!waiting.is_finished(), "job 2 took the room kept for job 1");
        assert_eq!(server.usage()["GPU-a"].reserved_bytes, 3 * G);
        // The hold ends (the server's timer): job 2 is placed.
        let placed = tokio::time::timeout(std::time::Duration::from_secs(5), waiting)
            .await
            .expect("placed once the hold ended")
            .unwrap();
        assert!(matches!(placed, ProbeReply::Placed { .. }), "{placed:?}");
        server.job_ended(1);
        server.job_ended(2);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn auth_malformed_input_and_release() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("p.sock");
        let book = TaskBook::new(Box::new(CasePlacement), vec![("MIG-a".into(), 4 * G)]);
        let events = Arc::new(TaskEvents::default());
        let (server, listener) =
            ProbeServer::bind(sock.clone(), book, BTreeMap::new(), Arc::clone(&events)).unwrap();
        tokio::spawn(Arc::clone(&server).serve(listener));
        let me = nix::unistd::getuid().as_raw();
        let key = server.register_job(1, me, None, None, None).unwrap();
        server
            .register_job(2, me + 1, Some("other".into()), None, None)
            .unwrap();

        let s = sock.clone();
        let k = key.clone();
        let r = tokio::task::spawn_blocking(move || {
            let wrong = call(&s, &begin(1, "nope", G));
            let unknown = call(&s, &begin(9, &k, G));
            let foreign = call(&s, &begin(2, "other", G));
            let malformed = call(&s, br#"{"op":"begin","job":1}"#);
            let never = call(&s, &begin(1, &k, 5 * G));
            let ok = call(&s, &begin(1, &k, 3 * G));
            (wrong, unknown, foreign, malformed, never, ok)
        })
        .await
        .unwrap();
        let code_of = |r: &ProbeReply| match r {
            ProbeReply::Error { code, .. } => *code,
            _ => 0,
        };
        assert_eq!(code_of(&r.0), code::AUTH);
        assert_eq!(code_of(&r.1), code::AUTH);
        assert_eq!(code_of(&r.2), code::AUTH, "{:?}", r.2);
        assert_eq!(code_of(&r.3), code::PROTOCOL);
        assert_eq!(code_of(&r.4), code::NEVER_FITS);
        let ProbeReply::Placed { task, instance, .. } = r.5 else {
            panic!("{:?}", r.5)
        };
        assert_eq!(instance, "MIG-a");
        // Nothing the refused requests asked for was reserved.
        assert_eq!(server.usage()["MIG-a"].reserved_bytes, 3 * G);
        // The connection closed, but the test process lives: still reserved.
        // The job's end releases it, and the record is closed.
        server.job_ended(1);
        assert_eq!(server.usage()["MIG-a"].reserved_bytes, 0);
        // Unbound, but remembered a while for faults found later.
        assert!(server.bound_to("MIG-a").is_empty());
        assert_eq!(
            server.bound_or_recent("MIG-a", None),
            vec![(1, std::process::id())]
        );
        let mut ends = 0;
        for e in events.take() {
            if let TaskEvent::Record(r) = e {
                assert_eq!(r.task, task);
                ends += r.end_ms.is_some() as u32;
            }
        }
        assert_eq!(ends, 1);
    }
}
