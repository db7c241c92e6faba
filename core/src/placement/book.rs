//! The node's placement state: reservations, pins, closed and retiring
//! instances, and the queue of waiting tasks with its aging rule.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};

mod demand;
mod growth;
mod keep;
pub use keep::KeepUse;

pub use growth::Growth;

use super::{Begin, InstanceLoad, Placed, PlacementError, PlacementPolicy, TaskId, TaskRequest};
use crate::job::JobId;
use crate::sm::SmTable;

#[derive(Debug, Clone)]
struct Active {
    job: JobId,
    pid: u32,
    instance: usize,
    bytes: u64,
    warps: u64,
    /// Its demand as counted on its instance (at most the instance).
    compute: u32,
    /// Blocks per SM taken on the instance's SM table, of `block_warps`.
    sm_blocks: Vec<u32>,
    block_warps: u32,
}

/// How many times a waiting task may be overtaken, by a later task
/// placed on an instance it could use, before nothing overtakes it there
/// any more (aging: a task that fits now goes ahead of a bigger one that
/// does not, but a stream of small tasks cannot starve the big one).
pub const DEFAULT_MAX_OVERTAKES: u32 = 8;

/// The node's placement state.
pub struct TaskBook {
    policy: Box<dyn PlacementPolicy>,
    instances: Vec<InstanceLoad>,
    active: BTreeMap<TaskId, Active>,
    waiting: VecDeque<(TaskId, TaskRequest)>,
    /// How often each waiting task was overtaken (absent: never).
    overtaken: HashMap<TaskId, u32>,
    max_overtakes: u32,
    /// Thousandths of an instance's capacity that the tasks bound to it may
    /// demand together (`None`: no ceiling).
    compute_ceiling: Option<u32>,
    /// The demand of a task that states none, thousandths of its instance.
    default_share: u32,
    /// (job, pid) → instance index, set by the process's first placement.
    pins: BTreeMap<(JobId, u32), usize>,
    /// Tasks waiting to grow by so many bytes, in order (`growth.rs`).
    growing: VecDeque<(TaskId, u64)>,
    /// Waiting growths decided, not yet taken: (task, grown).
    grown: Vec<(TaskId, bool)>,
    /// Rooms kept for jobs between their processes (`keep.rs`).
    keeping: bool,
    kept: BTreeMap<JobId, keep::Kept>,
    keep_seq: u64,
    /// Keeps made, not yet taken: (job, keep number).
    new_keeps: Vec<(JobId, u64)>,
    /// What became of the keep the newest process met, not yet taken.
    keep_use: Option<(JobId, keep::KeepUse)>,
    next: TaskId,
}

impl TaskBook {
    pub fn new(policy: Box<dyn PlacementPolicy>, instances: Vec<(String, u64)>) -> TaskBook {
        TaskBook {
            policy,
            instances: instances
                .into_iter()
                .map(|(uuid, memory_bytes)| InstanceLoad::empty(uuid, memory_bytes))
                .collect(),
            active: BTreeMap::new(),
            waiting: VecDeque::new(),
            overtaken: HashMap::new(),
            max_overtakes: DEFAULT_MAX_OVERTAKES,
            compute_ceiling: None,
            default_share: crate::compute::DEFAULT_TASK_SHARE,
            pins: BTreeMap::new(),
            growing: VecDeque::new(),
            grown: Vec::new(),
            keeping: false,
            kept: BTreeMap::new(),
            keep_seq: 0,
            new_keeps: Vec::new(),
            keep_use: None,
            next: 1,
        }
    }

    /// A book over a node's instances as the GPU layer reports them: each
    /// with its memory, SMs and the part of its GPU it offers. gnoded and
    /// the simulator both build theirs here.
    pub fn of_instances(
        policy: Box<dyn PlacementPolicy>,
        instances: &[crate::gpu::Instance],
    ) -> TaskBook {
        let mut book = TaskBook::new(
            policy,
            instances
                .iter()
                .map(|i| (i.uuid.clone(), i.memory_mib * 1024 * 1024))
                .collect(),
        );
        for i in instances {
            book = book
                .with_sms(&i.uuid, i.sms)
                .with_capacity(&i.uuid, crate::compute::instance_capacity(i));
        }
        book
    }

    /// Sets how many times a waiting task may be overtaken (0: never; a
    /// task waits behind every earlier one that could use its instance).
    pub fn with_max_overtakes(mut self, n: u32) -> TaskBook {
        self.max_overtakes = n;
        self
    }

    /// Sets the compute ceiling: a process is bound to an instance only
    /// while the demands of the tasks there, its own added, stay within
    /// `ceiling` thousandths of the instance's capacity (an empty instance
    /// takes any one task). `None` places by memory alone. Memory-blind
    /// policies ignore it.
    pub fn with_compute_ceiling(mut self, ceiling: Option<u32>) -> TaskBook {
        self.compute_ceiling = ceiling;
        self
    }

    /// Sets the demand counted for a task that states none: thousandths of
    /// the instance it is placed on (at least 1).
    pub fn with_default_share(mut self, share: u32) -> TaskBook {
        self.default_share = share.clamp(1, crate::compute::WHOLE_GPU);
        self
    }

    /// What `req` takes of instance `i`.
    fn demand(&self, req: &TaskRequest, i: usize) -> u32 {
        crate::compute::demand_on(req.share, self.instances[i].capacity, self.default_share)
    }

    /// Tells the book what part of its GPU instance `uuid` offers
    /// ([`crate::compute::instance_capacity`]).
    pub fn with_capacity(mut self, uuid: &str, capacity: u32) -> TaskBook {
        if let Some(i) = self.instances.iter_mut().find(|i| i.uuid == uuid) {
            i.capacity = capacity.max(1);
        }
        self
    }

    /// Tells the book that instance `uuid` has `sms` SMs, so that their
    /// resident block and warp slots are tracked, when the policy uses them
    /// (`mgb-sm`); other policies skip that work on every placement.
    pub fn with_sms(mut self, uuid: &str, sms: u32) -> TaskBook {
        if !self.policy.uses_sm_slots() {
            return self;
        }
        if let Some(i) = self.instances.iter_mut().find(|i| i.uuid == uuid) {
            i.sms = Some(SmTable::new(sms));
        }
        self
    }

    /// Numbers tasks from `first` (a node seeds it from the clock so ids
    /// stay unique across its restarts).
    pub fn starting_at(mut self, first: TaskId) -> TaskBook {
        self.next = first.max(1);
        self
    }

    pub fn instances(&self) -> &[InstanceLoad] {
        &self.instances
    }

    pub fn waiting_len(&self) -> usize {
        self.waiting.len()
    }

    /// What each instance's shared tasks hold, as the node reports it to
    /// the controller (the device's own reading of used memory, where the
    /// node has one, is the node's to add).
    pub fn instance_uses(&self) -> std::collections::BTreeMap<String, crate::wire::InstanceUse> {
        self.instances()
            .iter()
            .map(|i| {
                (
                    i.uuid.clone(),
                    crate::wire::InstanceUse {
                        tasks: self.tasks_on(&i.uuid),
                        reserved_bytes: i.reserved_bytes,
                        warps: i.warps,
                        jobs: self.reservations_on(&i.uuid),
                        processes: i.processes,
                        used_bytes: None,
                    },
                )
            })
            .collect()
    }

    /// The waiting tasks, first in line first: job, bytes, and the
    /// instance the process is bound to, if it is.
    pub fn waiting_tasks(&self) -> Vec<crate::wire::WaitingTask> {
        self.waiting
            .iter()
            .map(|(_, r)| crate::wire::WaitingTask {
                job: r.job,
                bytes: r.bytes,
                instance: self.pinned(r.job, r.pid).map(str::to_string),
            })
            .collect()
    }

    pub fn active_len(&self) -> usize {
        self.active.len()
    }

    /// Active tasks per instance uuid.
    pub fn tasks_on(&self, uuid: &str) -> u32 {
        let Some(i) = self.index(uuid) else { return 0 };
        self.active.values().filter(|a| a.instance == i).count() as u32
    }

    /// Bytes reserved on instance `uuid`, per job.
    pub fn reservations_on(&self, uuid: &str) -> BTreeMap<JobId, u64> {
        let mut m = BTreeMap::new();
        if let Some(i) = self.index(uuid) {
            for a in self.active.values().filter(|a| a.instance == i) {
                *m.entry(a.job).or_insert(0) += a.bytes;
            }
        }
        m
    }

    fn index(&self, uuid: &str) -> Option<usize> {
        self.instances.iter().position(|i| i.uuid == uuid)
    }

    /// The processes bound to instance `uuid` (job, pid).
    pub fn processes_on(&self, uuid: &str) -> Vec<(JobId, u32)> {
        let Some(i) = self.index(uuid) else {
            return Vec::new();
        };
        self.pins
            .iter()
            .filter(|(_, &p)| p == i)
            .map(|(&k, _)| k)
            .collect()
    }

    /// Every process bound to an instance (job, pid).
    pub fn bound_processes(&self) -> Vec<(JobId, u32)> {
        self.pins.keys().copied().collect()
    }

    /// The instance a process is bound to, if its first task was placed.
    pub fn pinned(&self, job: JobId, pid: u32) -> Option<&str> {
        self.pins
            .get(&(job, pid))
            .map(|&i| self.instances[i].uuid.as_str())
    }

    /// Asks for a place: placed now, queued, or refused when it can never fit.
    pub fn begin(&mut self, req: TaskRequest) -> Result<Begin, PlacementError> {
        match self.pins.get(&(req.job, req.pid)) {
            Some(&i) if self.instances[i].memory_bytes < req.bytes => {
                return Err(PlacementError::NeverFitsPinned {
                    need: req.bytes,
                    instance: self.instances[i].uuid.clone(),
                    total: self.instances[i].memory_bytes,
                })
            }
            Some(_) => {}
            None => {
                let largest = self.largest_open_bytes();
                if req.bytes > largest {
                    return Err(PlacementError::NeverFits {
                        need: req.bytes,
                        largest,
                    });
                }
            }
        }
        let id = self.next;
        self.next += 1;
        if let Some(p) = self.place_in_keep(id, &req) {
            return Ok(Begin::Placed(p));
        }
        // A newcomer that fits now goes ahead of waiting tasks that do not,
        // except where one of them has been overtaken enough (aging), and
        // never ahead of its own process's earlier tasks.
        let own_waiting = self
            .waiting
            .iter()
            .any(|(_, w)| w.job == req.job && w.pid == req.pid);
        if !own_waiting {
            let barred = self.barred_by(self.waiting.iter());
            if let Some(i) = self.choice(&req, &barred) {
                let free = self.instances[i].free_bytes();
                if free < req.bytes {
                    // Only a memory-blind policy chooses where it does not fit.
                    return Err(PlacementError::Overflow {
                        instance: self.instances[i].uuid.clone(),
                        free,
                        want: req.bytes,
                    });
                }
                let ahead: Vec<TaskId> = self.waiting.iter().map(|(w, _)| *w).collect();
                self.note_overtaking(&ahead, i);
                return Ok(Begin::Placed(self.place_on(i, id, &req)));
            }
        }
        self.waiting.push_back((id, req));
        Ok(Begin::Waiting(id))
    }

    /// Whether waiting task `w` could ever be placed on instance `i`.
    fn could_use(&self, w: &TaskRequest, i: usize) -> bool {
        self.allowed(w, i) && w.bytes <= self.instances[i].memory_bytes
    }

    /// The instances that waiting tasks overtaken `max_overtakes` times
    /// could use: nothing later is placed there before them.
    fn barred_by<'a>(
        &self,
        waiters: impl Iterator<Item = &'a (TaskId, TaskRequest)>,
    ) -> BTreeSet<usize> {
        let mut barred = BTreeSet::new();
        for (id, w) in waiters {
            if self.overtaken.get(id).copied().unwrap_or(0) >= self.max_overtakes {
                barred.extend((0..self.instances.len()).filter(|&i| self.could_use(w, i)));
            }
        }
        barred
    }

    /// A later task was placed on instance `i`: each of the waiting tasks
    /// `ahead` that could use it was overtaken once more.
    fn note_overtaking(&mut self, ahead: &[TaskId], i: usize) {
        let count: Vec<TaskId> = self
            .waiting
            .iter()
            .filter(|(id, w)| ahead.contains(id) && self.could_use(w, i))
            .map(|(id, _)| *id)
            .collect();
        for id in count {
            *self.overtaken.entry(id).or_default() += 1;
        }
    }

    fn allowed(&self, req: &TaskRequest, i: usize) -> bool {
        let inst = &self.instances[i];
        let pin = self.pins.get(&(req.job, req.pid));
        (!inst.closed || inst.open_to.contains(&req.job))
            && inst.owner.is_none_or(|o| o == req.job)
            && pin.is_none_or(|&p| p == i)
            && ((!inst.retiring && !inst.mps_down && !inst.bypassed) || pin == Some(&i))
            && !self.growth_pending_on(i)
    }

    fn choice(&self, req: &TaskRequest, barred: &BTreeSet<usize>) -> Option<usize> {
        self.choice_with(req, self.need_total(req), barred)
    }

    /// A process's first placement pins it: the instance must be able to
    /// hold each of its tasks that is already queued, too.
    fn need_total(&self, req: &TaskRequest) -> u64 {
        if self.pins.contains_key(&(req.job, req.pid)) {
            return 0;
        }
        self.waiting
            .iter()
            .filter(|(_, w)| w.job == req.job && w.pid == req.pid)
            .map(|(_, w)| w.bytes)
            .max()
            .unwrap_or(0)
    }

    /// The compute ceiling `req` is held to: none under a memory-blind
    /// policy, and none for a process with a task running (it goes on where
    /// it is bound, so its own tasks never wait for each other; only a bound
    /// process can have one, so the look at the active tasks is skipped for
    /// new ones).
    fn ceiling_for(&self, req: &TaskRequest) -> Option<u32> {
        self.compute_ceiling.filter(|_| {
            let running = self.pins.contains_key(&(req.job, req.pid))
                && self
                    .active
                    .values()
                    .any(|a| a.job == req.job && a.pid == req.pid);
            !self.policy.memory_blind() && !running
        })
    }

    /// Whether instance `i` may take `req` now: allowed to, with
    /// `req.bytes` free and at least `need_total` in all (unless the policy
    /// is memory-blind), and within `ceiling`.
    fn fits_on(&self, req: &TaskRequest, i: usize, need_total: u64, ceiling: Option<u32>) -> bool {
        let inst = &self.instances[i];
        self.allowed(req, i)
            && (self.policy.memory_blind()
                || (inst.free_bytes() >= req.bytes && inst.memory_bytes >= need_total))
            && ceiling.is_none_or(|c| {
                crate::compute::fits_under(inst.compute, self.demand(req, i), inst.capacity, c)
            })
    }

    /// The policy's choice among open instances, other than `barred`, with
    /// `req.bytes` free and at least `need_total` in all.
    fn choice_with(
        &self,
        req: &TaskRequest,
        need_total: u64,
        barred: &BTreeSet<usize>,
    ) -> Option<usize> {
        let ceiling = self.ceiling_for(req);
        let candidates: Vec<usize> = (0..self.instances.len())
            .filter(|&i| !barred.contains(&i) && self.fits_on(req, i, need_total, ceiling))
            .collect();
        if candidates.is_empty() {
            return None;
        }
        self.policy
            .choose(&self.instances, &candidates, req)
            .filter(|c| candidates.contains(c))
    }

    fn place_on(&mut self, i: usize, id: TaskId, req: &TaskRequest) -> Placed {
        let compute = self.demand(req, i);
        let inst = &mut self.instances[i];
        inst.reserved_bytes += req.bytes;
        inst.warps += req.warps;
        inst.compute += compute;
        // SM slots (tracked only for policies that use them) are taken
        // where the kernel's wave fits: always, under such policies.
        let shape = req.kernel_shape();
        let sm_blocks = match inst.sms.as_mut() {
            Some(t) => match t.fit(shape) {
                Some(b) => {
                    t.take(shape.block_warps, &b);
                    b
                }
                None => Vec::new(),
            },
            None => Vec::new(),
        };
        if let std::collections::btree_map::Entry::Vacant(e) = self.pins.entry((req.job, req.pid)) {
            e.insert(i);
            inst.processes += 1;
        }
        self.active.insert(
            id,
            Active {
                job: req.job,
                pid: req.pid,
                instance: i,
                bytes: req.bytes,
                warps: req.warps,
                compute,
                sm_blocks,
                block_warps: shape.block_warps,
            },
        );
        Placed {
            task: id,
            job: req.job,
            pid: req.pid,
            instance: inst.uuid.clone(),
            bytes: req.bytes,
            warps: req.warps,
            share: compute,
        }
    }

    /// Most free bytes on any open instance.
    fn max_open_free(&self) -> u64 {
        self.instances
            .iter()
            .filter(|i| !i.closed || !i.open_to.is_empty())
            .map(|i| i.free_bytes())
            .max()
            .unwrap_or(0)
    }

    /// Places waiting tasks that now fit, in FIFO order. Linear in the
    /// queue: tasks bigger than any open instance's free memory are skipped
    /// without asking the policy.
    fn retry(&mut self) -> Vec<Placed> {
        // Running processes waiting to grow come before new ones.
        self.serve_growth();
        let mut placed = Vec::new();
        if self.waiting.is_empty() {
            return placed;
        }
        // The largest queued task of each process, for first placements.
        let mut queued_max: HashMap<(JobId, u32), u64> = HashMap::new();
        for (_, w) in &self.waiting {
            let e = queued_max.entry((w.job, w.pid)).or_default();
            *e = (*e).max(w.bytes);
        }
        let mut max_free = self.max_open_free();
        // Processes with an earlier task still waiting keep their order.
        let mut blocked: HashSet<(JobId, u32)> = HashSet::new();
        // Instances kept for earlier tasks overtaken often enough.
        let mut barred: BTreeSet<usize> = BTreeSet::new();
        let mut waiting = std::mem::take(&mut self.waiting);
        while let Some((id, req)) = waiting.pop_front() {
            let key = (req.job, req.pid);
            let choice = if blocked.contains(&key) || req.bytes > max_free {
                None
            } else {
                let need = if self.pins.contains_key(&key) {
                    0
                } else {
                    queued_max.get(&key).copied().unwrap_or(0)
                };
                self.choice_with(&req, need, &barred)
                    // A memory-blind choice waits rather than overflow here.
                    .filter(|&i| self.instances[i].free_bytes() >= req.bytes)
            };
            match choice {
                Some(i) => {
                    let ahead: Vec<TaskId> = self.waiting.iter().map(|(w, _)| *w).collect();
                    self.note_overtaking(&ahead, i);
                    // One of them may have been overtaken enough now.
                    barred = self.barred_by(self.waiting.iter());
                    self.overtaken.remove(&id);
                    placed.push(self.place_on(i, id, &req));
                    max_free = self.max_open_free();
                }
                None => {
                    blocked.insert(key);
                    let entry = (id, req);
                    barred.extend(self.barred_by(std::iter::once(&entry)));
                    // Kept in order: those still waiting are the ones ahead.
                    self.waiting.push_back(entry);
                }
            }
        }
        placed
    }

    fn release(&mut self, id: TaskId) -> Option<Active> {
        let a = self.active.remove(&id)?;
        let inst = &mut self.instances[a.instance];
        inst.reserved_bytes -= a.bytes;
        inst.warps -= a.warps;
        inst.compute -= a.compute;
        if let Some(t) = inst.sms.as_mut() {
            t.give_back(a.block_warps, &a.sm_blocks);
        }
        Some(a)
    }

    /// A task ended. Returns the waiting tasks this made room for.
    pub fn end(&mut self, id: TaskId) -> Result<Vec<Placed>, PlacementError> {
        self.end_with(id, true)
    }

    /// A task ended; `keep`: what it held may be kept for its job's next
    /// process (not for a placement its process never took).
    pub fn end_with(&mut self, id: TaskId, keep: bool) -> Result<Vec<Placed>, PlacementError> {
        if let Some(a) = self.release(id) {
            if keep {
                self.keep_released(&[a]);
            }
        } else {
            // A waiting task that gives up.
            let before = self.waiting.len();
            self.waiting.retain(|(w, _)| *w != id);
            self.overtaken.remove(&id);
            if self.waiting.len() == before {
                return Err(PlacementError::NoSuchTask(id));
            }
        }
        Ok(self.retry())
    }

    /// Grows an active task's reservation on its own instance, or says how
    /// much is free there.
    pub fn grow(&mut self, id: TaskId, more: u64) -> Result<(), PlacementError> {
        let a = self
            .active
            .get_mut(&id)
            .ok_or(PlacementError::NoSuchTask(id))?;
        let inst = &mut self.instances[a.instance];
        // A memory-blind policy lets a task grow as its process allocates,
        // whatever the others hold: the GPU, not the book, says no.
        if !self.policy.memory_blind() && inst.free_bytes() < more {
            return Err(PlacementError::Full {
                instance: inst.uuid.clone(),
                free: inst.free_bytes(),
                want: more,
            });
        }
        inst.reserved_bytes += more;
        a.bytes += more;
        Ok(())
    }

    /// Sets an active task's warps (kernel launches update them).
    pub fn set_warps(&mut self, id: TaskId, warps: u64) -> Result<(), PlacementError> {
        let a = self
            .active
            .get_mut(&id)
            .ok_or(PlacementError::NoSuchTask(id))?;
        let inst = &mut self.instances[a.instance];
        inst.warps = inst.warps - a.warps + warps;
        a.warps = warps;
        Ok(())
    }

    /// Puts back a reservation that existed before a restart, as it was:
    /// task `id` of `req` on `uuid`. Returns false (and changes nothing) if
    /// the instance is unknown, the task exists, or it would over-reserve.
    pub fn restore(&mut self, id: TaskId, req: &TaskRequest, uuid: &str) -> bool {
        let Some(i) = self.index(uuid) else {
            return false;
        };
        if self.active.contains_key(&id) || self.instances[i].free_bytes() < req.bytes {
            return false;
        }
        self.place_on(i, id, req);
        self.next = self.next.max(id + 1);
        true
    }

    /// The reservation of an active task.
    pub fn task(&self, id: TaskId) -> Option<Placed> {
        self.active.get(&id).map(|a| Placed {
            task: id,
            job: a.job,
            pid: a.pid,
            instance: self.instances[a.instance].uuid.clone(),
            bytes: a.bytes,
            warps: a.warps,
            share: a.compute,
        })
    }

    /// Drops every task (active or waiting) of a process that exited.
    /// Returns (released task ids, waiting tasks now placed).
    /// What the job held is kept for its next process (`keep.rs`).
    pub fn release_process(&mut self, job: JobId, pid: u32) -> (Vec<TaskId>, Vec<Placed>) {
        self.unpin(|j, p| j == job && p == pid);
        self.release_where(|a_job, a_pid| a_job == job && a_pid == pid, true)
    }

    /// Drops every task of a job that ended or was cancelled.
    /// Nothing is kept for it any more.
    pub fn release_job(&mut self, job: JobId) -> (Vec<TaskId>, Vec<Placed>) {
        self.unpin(|j, _| j == job);
        self.discard_keep(job);
        self.release_where(|a_job, _| a_job == job, false)
    }

    fn unpin(&mut self, f: impl Fn(JobId, u32) -> bool) {
        let instances = &mut self.instances;
        self.pins.retain(|&(j, p), &mut i| {
            let keep = !f(j, p);
            if !keep {
                instances[i].processes -= 1;
            }
            keep
        });
    }

    /// `keep`: what the released tasks held is kept for their job's next
    /// process (they are all of one job).
    fn release_where(
        &mut self,
        f: impl Fn(JobId, u32) -> bool,
        keep: bool,
    ) -> (Vec<TaskId>, Vec<Placed>) {
        let ids: Vec<TaskId> = self
            .active
            .iter()
            .filter(|(_, a)| f(a.job, a.pid))
            .map(|(id, _)| *id)
            .collect();
        let released: Vec<Active> = ids.iter().filter_map(|id| self.release(*id)).collect();
        let mut dropped: Vec<TaskId> = self
            .waiting
            .iter()
            .filter(|(_, w)| f(w.job, w.pid))
            .map(|(id, _)| *id)
            .collect();
        self.waiting.retain(|(_, w)| !f(w.job, w.pid));
        for id in &dropped {
            self.overtaken.remove(id);
        }
        if keep {
            self.keep_released(&released);
        }
        dropped.extend(ids);
        (dropped, self.retry())
    }

    /// Whether nothing runs on the instance and no process is bound to it
    /// (so it may be destroyed). Unknown instances are not idle.
    pub fn is_idle(&self, uuid: &str) -> bool {
        self.index(uuid).is_some_and(|i| {
            let inst = &self.instances[i];
            inst.processes == 0
                && inst.reserved_bytes == 0
                && !self.kept_on(i)
                && !self.active.values().any(|a| a.instance == i)
        })
    }

    /// Drops an idle instance (destroyed by a re-partition). Refused, and
    /// nothing changes, when it is unknown or not idle.
    pub fn remove_instance(&mut self, uuid: &str) -> bool {
        if !self.is_idle(uuid) {
            return false;
        }
        let Some(i) = self.index(uuid) else {
            return false;
        };
        self.instances.remove(i);
        self.shift_keeps_after(i);
        for a in self.active.values_mut() {
            if a.instance > i {
                a.instance -= 1;
            }
        }
        for p in self.pins.values_mut() {
            if *p > i {
                *p -= 1;
            }
        }
        true
    }

    /// Adds an instance (created by a re-partition; `sms` where known;
    /// `capacity` as in [`Self::with_capacity`]). Returns the waiting tasks
    /// it took.
    pub fn add_instance(
        &mut self,
        uuid: &str,
        memory_bytes: u64,
        sms: Option<u32>,
        capacity: u32,
    ) -> Vec<Placed> {
        let mut load = InstanceLoad::empty(uuid.into(), memory_bytes);
        load.capacity = capacity.max(1);
        load.sms = sms
            .filter(|_| self.policy.uses_sm_slots())
            .map(SmTable::new);
        self.instances.push(load);
        self.retry()
    }

    /// Of the jobs' processes the GPU reports on instance `uuid` (pid,
    /// job), those of jobs with no process bound there: they use the
    /// instance without a placement (a job that turned the interception
    /// off). Any process of a job with a process bound there counts as
    /// placed (`gprobe run` places itself and runs its command).
    pub fn unplaced_on(&self, uuid: &str, processes: &[(u32, JobId)]) -> Vec<(u32, JobId)> {
        let placed: BTreeSet<JobId> = self
            .processes_on(uuid)
            .into_iter()
            .map(|(j, _)| j)
            .collect();
        processes
            .iter()
            .filter(|(_, job)| !placed.contains(job))
            .copied()
            .collect()
    }
}

mod access;
mod usage;

#[cfg(test)]
mod tests;
