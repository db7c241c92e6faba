//! The node's placement state machine: the [`TaskBook`] and everything the
//! node keeps around it. Instances held by isolated jobs running here and
//! instances the controller drains are closed to shared tasks; an instance
//! where a process died holding memory is *settling* for a while (the
//! memory may still be on its way back); processes recently gone are
//! remembered (an MPS server's log names the clients it tore down after
//! they are gone); reservations that began are kept for their records; and
//! growths wait for room.
//!
//! It is pure: the time comes in as an argument (unix milliseconds), and
//! what the caller must carry out comes back as [`NodeEvent`]s, taken with
//! [`NodeBook::take_events`] after each call. gnoded's probe server (which
//! owns the sockets, the waiting callers, the process watchers and NVML)
//! and the simulator drive the same `NodeBook` through the same calls, so
//! the simulator runs the node's rules rather than a copy of them.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::budget::MemBudget;
use super::measured::Measured;
use super::{Begin, Growth, Placed, PlacementError, TaskBook, TaskId, TaskRequest};
use crate::job::JobId;
use crate::probe::TaskRecord;

/// How long a process that was bound to an instance is remembered after
/// it is gone (ms).
pub const RECENTLY_GONE_MS: i64 = 60_000;

/// How long after a process died holding memory on an instance a
/// placement there checks that the memory is physically free (ms).
pub const SETTLE_MS: i64 = 20_000;

/// How long a job's room is kept for its next process after its last
/// task ended (ms; gnoded's `--hold-between-processes`, `book/keep.rs`).
/// Long enough for a job script to start its next GPU program, short
/// enough that a job doing host work between programs gives its room
/// back soon.
pub const DEFAULT_HOLD_BETWEEN_MS: i64 = 3_000;

/// The most tasks one job may have placed or waiting on a node at once
/// (every task is a record gnoded keeps and a place the book scans).
pub const MAX_TASKS_PER_JOB: usize = 4096;

/// What the node must carry out after a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeEvent {
    /// A task that waited is placed: answer its process. If it cannot be
    /// answered (the process gave up), call [`NodeBook::abandon`].
    Placed(Placed),
    /// A reservation began or ended: tell the controller.
    Record(TaskRecord),
    /// A waiting growth was decided: grown by `bytes`, or refused (every
    /// task on its instance waits to grow, or its process is gone).
    Growth {
        task: TaskId,
        grown: bool,
        bytes: u64,
    },
    /// The task is gone (ended, released, or dropped while waiting):
    /// whatever waits for its answer gets none.
    Gone(TaskId),
    /// Room is kept for `job`'s next process until `at_ms`: then call
    /// [`NodeBook::end_keep`] with `seq`.
    KeepUntil { job: JobId, seq: u64, at_ms: i64 },
    /// `job`'s next process met the room kept for it: taken, or given
    /// back and why (for the node's log).
    KeepUsed { job: JobId, outcome: super::KeepUse },
}

/// A process bound to an instance and gone: when, where, whose.
#[derive(Debug, Clone)]
struct GoneProcess {
    at_ms: i64,
    instance: String,
    job: JobId,
    pid: u32,
}

/// The node's placement state: see the module documentation.
pub struct NodeBook {
    book: TaskBook,
    /// Instances held by isolated jobs running here.
    held: HashMap<String, JobId>,
    /// Isolated jobs started early on an instance another isolated job
    /// still holds: each takes it over when that job ends.
    next_holder: HashMap<String, JobId>,
    /// Instances the controller drains for isolated jobs (its newest set).
    drained: HashSet<String>,
    /// The number of the newest drain set applied since the node last
    /// registered.
    drain_seq: u64,
    /// Instances where a process died holding memory, and when (ms).
    settling: HashMap<String, i64>,
    gone: Vec<GoneProcess>,
    /// Reservations that began, and when (ms): their records.
    begun: HashMap<TaskId, (Placed, i64)>,
    /// Tasks waiting to grow, and by how much.
    growers: HashMap<TaskId, u64>,
    /// Each shared job's GPU memory budget here (`budget`); a job without
    /// one (registered before budgets, or by a caller that sets none) is
    /// held only by the instances' memory.
    budgets: HashMap<JobId, MemBudget>,
    /// Compute demands measured while processes run (`measured`).
    measured: Measured,
    /// How long a job's room is kept for its next process (ms; 0: not).
    hold_ms: i64,
    events: Vec<NodeEvent>,
}

impl NodeBook {
    pub fn new(book: TaskBook) -> NodeBook {
        NodeBook {
            book,
            held: HashMap::new(),
            next_holder: HashMap::new(),
            drained: HashSet::new(),
            drain_seq: 0,
            settling: HashMap::new(),
            gone: Vec::new(),
            begun: HashMap::new(),
            growers: HashMap::new(),
            budgets: HashMap::new(),
            measured: Measured::default(),
            hold_ms: 0,
            events: Vec::new(),
        }
    }

    /// Keeps a job's room for its next process `ms` after its last task
    /// ended (0: never; [`DEFAULT_HOLD_BETWEEN_MS`]).
    pub fn holding_between(mut self, ms: i64) -> NodeBook {
        self.hold_ms = ms.max(0);
        self.book = self.book.with_keeping(self.hold_ms > 0);
        self
    }

    /// How long a job's room is kept for its next process (ms; 0: not).
    pub fn hold_between_ms(&self) -> i64 {
        self.hold_ms
    }

    /// The room kept for `job` (keep `seq`) is given back: its time is up.
    pub fn end_keep(&mut self, job: JobId, seq: u64, now_ms: i64) {
        let placed = self.book.end_keep(job, seq);
        self.deliver(placed, now_ms);
    }

    /// Sets the GPU memory budget of `job`'s tasks here (until it ends).
    pub fn set_budget(&mut self, job: JobId, budget: MemBudget) {
        self.budgets.insert(job, budget);
    }

    /// The reservations, pins and instances, to read.
    pub fn tasks(&self) -> &TaskBook {
        &self.book
    }

    /// What the calls since the last take ask the caller to carry out, in
    /// order.
    pub fn take_events(&mut self) -> Vec<NodeEvent> {
        std::mem::take(&mut self.events)
    }

    /// Whether `task` is an active task of `job`.
    pub fn owns(&self, job: JobId, task: TaskId) -> bool {
        self.book.task(task).is_some_and(|t| t.job == job)
    }

    /// A task asks for a place: placed now (its record follows as an
    /// event), queued, or refused when it can never fit.
    pub fn begin(&mut self, mut req: TaskRequest, now_ms: i64) -> Result<Begin, PlacementError> {
        // What the job's processes measured here comes before any guess.
        if let Some(d) = self.measured.of_job(req.job) {
            req.share = Some(d);
        }
        // One pass over the book for both of the job's sums.
        let (tasks, held) = self.book.usage_of(req.job);
        if tasks >= MAX_TASKS_PER_JOB {
            return Err(PlacementError::TooManyTasks {
                job: req.job,
                max: MAX_TASKS_PER_JOB,
            });
        }
        // A task that can never fit is told so by the book, first.
        let budget = self
            .budgets
            .get(&req.job)
            .filter(|_| req.bytes <= self.book.largest_open_bytes());
        if let Some(b) = budget {
            b.check(req.job, 0, held, req.bytes)?;
        }
        let kept = self.book.keeps_for(req.job);
        let begun = self.book.begin(req);
        if let Some((job, outcome)) = self.book.take_keep_use() {
            self.events.push(NodeEvent::KeepUsed { job, outcome });
        }
        let begin = begun?;
        if let Begin::Placed(p) = &begin {
            self.began(p, now_ms);
        }
        if kept {
            // The keep was taken: what the process left of it is free.
            let placed = self.book.place_waiting();
            self.deliver(placed, now_ms);
        }
        Ok(begin)
    }

    /// A task ended; the waiting tasks this made room for are placed.
    pub fn end(&mut self, task: TaskId, now_ms: i64) -> Result<(), PlacementError> {
        let owner = self.book.task(task).map(|t| (t.job, t.pid));
        let placed = self.book.end(task)?;
        if let Some((job, pid)) = owner.filter(|&(j, p)| self.book.process_demand(j, p).is_none()) {
            self.measured.forget_process(job, pid);
        }
        self.finish(&[task], false, now_ms);
        self.note_keeps(now_ms);
        self.deliver(placed, now_ms);
        Ok(())
    }

    /// A placed task whose process could not be told (it gave up waiting):
    /// its place is given back.
    pub fn abandon(&mut self, task: TaskId, now_ms: i64) {
        // Its process never took it: nothing is kept for the job.
        if let Ok(more) = self.book.end_with(task, false) {
            self.finish(&[task], false, now_ms);
            self.deliver(more, now_ms);
        }
    }

    /// Grows a task's reservation by `bytes`, or by `at_least` if only that
    /// fits, or waits for room ([`NodeEvent::Growth`] answers it later).
    pub fn grow(
        &mut self,
        task: TaskId,
        bytes: u64,
        at_least: u64,
    ) -> Result<Growth, PlacementError> {
        let (bytes, at_least) = match self.book.task(task) {
            Some(t) => match self.budgets.get(&t.job) {
                Some(b) => {
                    let held = self.book.reserved_by(t.job);
                    let fits = b.fit_growth(t.job, t.bytes, held, bytes, at_least)?;
                    (fits, at_least.min(fits))
                }
                None => (bytes, at_least),
            },
            None => (bytes, at_least),
        };
        let growth = self.book.grow_or_wait(task, bytes, at_least)?;
        match growth {
            Growth::Grown(_) => self.grew(task),
            Growth::Waiting => {
                self.growers.insert(task, at_least);
            }
        }
        Ok(growth)
    }

    /// Stops a waiting growth that waited too long. Returns whether it was
    /// waiting (the caller then refuses it).
    pub fn cancel_growth(&mut self, task: TaskId, now_ms: i64) -> bool {
        let Some(placed) = self.book.cancel_growth(task) else {
            return false;
        };
        let waited = self.growers.remove(&task).is_some();
        self.deliver(placed, now_ms);
        waited
    }

    /// The task launched kernels of `warps` warps; its record keeps the most.
    pub fn set_warps(&mut self, task: TaskId, warps: u64) {
        let _ = self.book.set_warps(task, warps);
        if let Some(b) = self.begun.get_mut(&task) {
            b.0.warps = b.0.warps.max(warps);
        }
    }

    /// Process `pid` of `job` reports how long it has kept its instance
    /// busy since it was placed ([`crate::probe::ProbeRequest::Busy`]):
    /// when that closes a measurement window, its tasks' demand becomes
    /// what was measured, and waiting tasks a lower demand makes room for
    /// are placed. Returns `false` for a process bound to no instance (it
    /// has nothing to measure).
    pub fn busy_report(
        &mut self,
        job: JobId,
        pid: u32,
        busy: crate::probe::BusyTime,
        now_ms: i64,
    ) -> bool {
        let Some(capacity) = self.book.pinned_capacity(job, pid) else {
            return false;
        };
        let Some(counted) = self.book.process_demand(job, pid) else {
            return false;
        };
        if let Some(demand) = self
            .measured
            .report(job, pid, busy, capacity, counted, now_ms)
        {
            let placed = self.book.set_process_demand(job, pid, demand);
            self.deliver(placed, now_ms);
        }
        true
    }

    /// The compute demand measured last for a process of `job`, if any.
    pub fn measured_demand(&self, job: JobId) -> Option<u32> {
        self.measured.of_job(job)
    }

    /// A process exited: its tasks (active or waiting) are released, its
    /// instance settles. Returns how many tasks it had.
    pub fn process_exited(&mut self, job: JobId, pid: u32, now_ms: i64) -> usize {
        self.note_gone(job, Some(pid), now_ms);
        self.measured.forget_process(job, pid);
        let (gone, placed) = self.book.release_process(job, pid);
        self.finish(&gone, true, now_ms);
        self.note_keeps(now_ms);
        self.deliver(placed, now_ms);
        gone.len()
    }

    /// A job ended or was cancelled: its reservations go at once, and the
    /// instances it held open again unless the controller drains them.
    pub fn job_ended(&mut self, job: JobId, now_ms: i64) {
        self.budgets.remove(&job);
        self.measured.forget_job(job);
        self.note_gone(job, None, now_ms);
        let (gone, placed) = self.book.release_job(job);
        self.finish(&gone, true, now_ms);
        self.deliver(placed, now_ms);
        self.next_holder.retain(|_, j| *j != job);
        let held: Vec<String> = self
            .held
            .iter()
            .filter(|(_, j)| **j == job)
            .map(|(u, _)| u.clone())
            .collect();
        for uuid in held {
            self.held.remove(&uuid);
            if let Some(next) = self.next_holder.remove(&uuid) {
                // Handed straight to the job started early for it: it stays
                // closed to shared tasks.
                self.held.insert(uuid, next);
            } else if !self.drained.contains(&uuid) {
                let placed = self.book.set_closed(&uuid, false);
                self.deliver(placed, now_ms);
            }
        }
    }

    /// An isolated job takes `uuid`: no new placements there from now on.
    /// Returns whether it must wait before using it: shared tasks still
    /// run there, or another isolated job holds it (this one takes it over
    /// when that one ends, see [`Self::job_ended`]).
    pub fn hold(&mut self, uuid: &str, job: JobId) -> bool {
        // Closing places nothing; nor does shutting what the drain left
        // open (`set_drained`).
        let _ = self.book.set_closed(uuid, true);
        let _ = self.book.set_open_to(uuid, Vec::new());
        match self.held.get(uuid) {
            Some(&other) if other != job => {
                self.next_holder.insert(uuid.to_string(), job);
                true
            }
            _ => {
                self.held.insert(uuid.to_string(), job);
                self.book.tasks_on(uuid) > 0
            }
        }
    }

    /// Whether `job` may use `uuid` now: it holds it and no shared task is
    /// left there.
    pub fn free_for(&self, uuid: &str, job: JobId) -> bool {
        self.held.get(uuid) == Some(&job) && self.book.tasks_on(uuid) == 0
    }

    /// The isolated job holding `uuid`, if any.
    pub fn holder(&self, uuid: &str) -> Option<JobId> {
        self.held.get(uuid).copied()
    }

    /// The instances the controller drains (the full set), as drain set
    /// number `seq`, and the running jobs each still takes tasks of
    /// (`open_to`: expected to end before the isolated job it is drained
    /// for could have it). A set older than the newest applied since the
    /// node last registered changes nothing. Returns whether it was applied.
    pub fn set_drained(
        &mut self,
        uuids: &[String],
        open_to: &BTreeMap<String, Vec<JobId>>,
        seq: u64,
        now_ms: i64,
    ) -> bool {
        if seq <= self.drain_seq {
            return false;
        }
        self.drain_seq = seq;
        let now: HashSet<String> = uuids.iter().cloned().collect();
        let before = std::mem::take(&mut self.drained);
        for u in now.difference(&before) {
            let _ = self.book.set_closed(u, true);
        }
        for u in before.difference(&now) {
            let _ = self.book.set_open_to(u, Vec::new());
            if !self.held.contains_key(u) {
                let placed = self.book.set_closed(u, false);
                self.deliver(placed, now_ms);
            }
        }
        for u in &now {
            // An instance an isolated job holds (or is started early for)
            // takes nobody else's tasks, whatever a set sent before its
            // launch arrived says.
            let jobs = match open_to.get(u) {
                Some(jobs) if !self.held.contains_key(u) && !self.next_holder.contains_key(u) => {
                    jobs.clone()
                }
                _ => Vec::new(),
            };
            let placed = self.book.set_open_to(u, jobs);
            self.deliver(placed, now_ms);
        }
        self.drained = now;
        true
    }

    /// The node registered: the controller numbers drain sets afresh.
    pub fn reset_drain_seq(&mut self) {
        self.drain_seq = 0;
    }

    /// Says whether an instance's MPS server is down (no new process is
    /// bound there while it is). Returns whether that changed.
    pub fn set_mps_down(&mut self, uuid: &str, down: bool, now_ms: i64) -> bool {
        let was = self
            .book
            .instances()
            .iter()
            .any(|i| i.uuid == uuid && i.mps_down);
        if was == down {
            return false;
        }
        let placed = self.book.set_mps_down(uuid, down);
        self.deliver(placed, now_ms);
        true
    }

    /// Gives the instance `uuid` to `job` alone (Slurm's exclusive use), or
    /// back to everyone with `None`.
    pub fn set_owner(&mut self, uuid: &str, owner: Option<JobId>, now_ms: i64) {
        let placed = self.book.set_owner(uuid, owner);
        self.deliver(placed, now_ms);
    }

    /// Marks an instance as being re-partitioned (no new process is bound
    /// to it; those bound go on until they exit), or back in use.
    pub fn set_retiring(&mut self, uuid: &str, retiring: bool, now_ms: i64) {
        let placed = self.book.set_retiring(uuid, retiring);
        self.deliver(placed, now_ms);
    }

    /// Drops an idle instance (destroyed by a re-partition); refused when
    /// it is unknown or not idle.
    pub fn remove_instance(&mut self, uuid: &str) -> bool {
        let removed = self.book.remove_instance(uuid);
        if removed {
            self.settling.remove(uuid);
            self.drained.remove(uuid);
            self.next_holder.remove(uuid);
        }
        removed
    }

    /// Adds an instance made by a re-partition, sized as the GPU layer
    /// reports it (as [`TaskBook::of_instances`] does); waiting tasks may
    /// be placed on it.
    pub fn add_instance(&mut self, i: &crate::gpu::Instance, now_ms: i64) {
        let placed = self.book.add_instance(
            &i.uuid,
            i.memory_mib * 1024 * 1024,
            Some(i.sms),
            crate::compute::instance_capacity(i),
        );
        self.deliver(placed, now_ms);
    }

    /// The jobs' processes the GPU reports on `uuid` (pid, job): those with
    /// no placement there (a shared job that turned the interception off)
    /// close the instance to new processes while they run; the isolated
    /// job holding it is where it belongs. Returns the processes without a
    /// placement when that closed or reopened the instance, `None` when
    /// nothing changed.
    pub fn note_processes(
        &mut self,
        uuid: &str,
        mut seen: Vec<(u32, JobId)>,
        now_ms: i64,
    ) -> Option<Vec<(u32, JobId)>> {
        if let Some(holder) = self.held.get(uuid) {
            seen.retain(|(_, job)| job != holder);
        }
        let unplaced = self.book.unplaced_on(uuid, &seen);
        let bypassed = !unplaced.is_empty();
        let was = self
            .book
            .instances()
            .iter()
            .any(|i| i.uuid == uuid && i.bypassed);
        if was == bypassed {
            return None;
        }
        let placed = self.book.set_bypassed(uuid, bypassed);
        self.deliver(placed, now_ms);
        Some(unplaced)
    }

    /// Puts back a reservation recorded before a restart when its process
    /// is `alive` and it fits as it was; otherwise its record is closed (a
    /// [`NodeEvent::Record`] with its end). Returns whether it was restored.
    pub fn restore(&mut self, r: &TaskRecord, alive: bool, now_ms: i64) -> bool {
        let req = TaskRequest {
            job: r.job,
            pid: r.pid,
            bytes: r.bytes,
            warps: r.warps,
            share: Some(r.share).filter(|&s| s > 0),
            shape: None,
        };
        if alive && self.book.restore(r.task, &req, &r.instance) {
            let p = Placed {
                task: r.task,
                job: r.job,
                pid: r.pid,
                instance: r.instance.clone(),
                bytes: r.bytes,
                warps: r.warps,
                share: r.share,
            };
            self.begun.insert(r.task, (p, r.begin_ms));
            return true;
        }
        self.events.push(NodeEvent::Record(TaskRecord {
            end_ms: Some(now_ms.max(r.begin_ms)),
            ..r.clone()
        }));
        false
    }

    /// Whether a process died holding memory on `instance` less than
    /// [`SETTLE_MS`] ago: a placement there should check that its memory is
    /// physically free.
    pub fn settling(&self, instance: &str, now_ms: i64) -> bool {
        self.settling
            .get(instance)
            .is_some_and(|&at| now_ms - at < SETTLE_MS)
    }

    /// The processes bound to `uuid` now, or until less than
    /// [`RECENTLY_GONE_MS`] ago and not before `gone_since` (job, pid): an
    /// MPS fault's clients, gone by the time its log is read; one that was
    /// gone before the fault was no client of it.
    pub fn bound_or_recent(
        &self,
        uuid: &str,
        now_ms: i64,
        gone_since: Option<i64>,
    ) -> Vec<(JobId, u32)> {
        let mut out = self.book.processes_on(uuid);
        let bound_now = out.len();
        for g in &self.gone {
            // A pid bound now belongs to its current process (pid reuse).
            let taken = out[..bound_now].iter().any(|(_, p)| *p == g.pid);
            let after = gone_since.is_none_or(|t| g.at_ms >= t);
            if g.instance == uuid && now_ms - g.at_ms <= RECENTLY_GONE_MS && after && !taken {
                out.push((g.job, g.pid));
            }
        }
        out
    }

    // Below: the book-keeping every call above shares.

    /// Keeps the book made: the caller ends each when its time is up.
    fn note_keeps(&mut self, now_ms: i64) {
        for (job, seq) in self.book.take_new_keeps() {
            self.events.push(NodeEvent::KeepUntil {
                job,
                seq,
                at_ms: now_ms.saturating_add(self.hold_ms),
            });
        }
    }

    fn began(&mut self, p: &Placed, now_ms: i64) {
        self.events.push(NodeEvent::Record(record(p, now_ms, None)));
        self.begun.insert(p.task, (p.clone(), now_ms));
    }

    /// The task's reservation grew: its end record carries the new size.
    fn grew(&mut self, task: TaskId) {
        if let (Some(t), Some(b)) = (self.book.task(task), self.begun.get_mut(&task)) {
            b.0.bytes = t.bytes;
        }
    }

    /// Answers decided growths, then the tasks placed.
    fn deliver(&mut self, placed: Vec<Placed>, now_ms: i64) {
        for (task, grown) in self.book.take_growth() {
            let Some(bytes) = self.growers.remove(&task) else {
                continue;
            };
            if grown {
                self.grew(task);
            }
            self.events.push(NodeEvent::Growth { task, grown, bytes });
        }
        for p in placed {
            self.began(&p, now_ms);
            self.events.push(NodeEvent::Placed(p));
        }
    }

    /// Records the end of reservations; `died`: their process is gone (or
    /// its job ended), so its memory may still be on its way back.
    fn finish(&mut self, tasks: &[TaskId], died: bool, now_ms: i64) {
        for t in tasks {
            self.events.push(NodeEvent::Gone(*t));
            if let Some((p, begin)) = self.begun.remove(t) {
                if died {
                    self.settling.insert(p.instance.clone(), now_ms);
                }
                self.events.push(NodeEvent::Record(record(
                    &p,
                    begin,
                    Some(now_ms.max(begin)),
                )));
            }
        }
    }

    /// Remembers the processes of `job` (or only `pid`) bound here as gone
    /// now, before their pins are dropped.
    fn note_gone(&mut self, job: JobId, pid: Option<u32>, now_ms: i64) {
        self.gone.retain(|g| now_ms - g.at_ms <= RECENTLY_GONE_MS);
        let pids: Vec<u32> = match pid {
            Some(p) => vec![p],
            None => self
                .book
                .bound_processes()
                .into_iter()
                .filter(|(j, _)| *j == job)
                .map(|(_, p)| p)
                .collect(),
        };
        for pid in pids {
            if let Some(instance) = self.book.pinned(job, pid).map(String::from) {
                self.gone.push(GoneProcess {
                    at_ms: now_ms,
                    instance,
                    job,
                    pid,
                });
            }
        }
    }
}

fn record(p: &Placed, begin_ms: i64, end_ms: Option<i64>) -> TaskRecord {
    TaskRecord {
        job: p.job,
        task: p.task,
        pid: p.pid,
        instance: p.instance.clone(),
        bytes: p.bytes,
        warps: p.warps,
        share: p.share,
        begin_ms,
        end_ms,
    }
}

#[cfg(test)]
mod tests;
