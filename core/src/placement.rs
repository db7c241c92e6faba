//! Placing probed GPU tasks on a node's instances (CASE Algorithm 2).
//!
//! [`TaskBook`] is the node's whole placement state: each instance's
//! reservations and in-use warps, which instances are held or being drained
//! for isolated jobs, the process-to-instance pins, and the FIFO of waiting
//! tasks. It is pure: the probe server in gnoded feeds it requests and
//! releases and carries out what it returns. The choice among instances is a
//! [`PlacementPolicy`].

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};

use crate::job::JobId;
use crate::sm::{KernelShape, SmTable};

pub type TaskId = u64;

/// One instance as placement sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceLoad {
    pub uuid: String,
    pub memory_bytes: u64,
    pub reserved_bytes: u64,
    pub warps: u64,
    /// Free resident block and warp slots per SM, where known; only
    /// policies that treat compute as a hard limit use them.
    pub sms: Option<SmTable>,
    /// Held by an isolated job, or being drained for one: no placements.
    pub closed: bool,
    /// Held by this job (Slurm's exclusive use): only its tasks go here.
    pub owner: Option<JobId>,
    /// Processes bound here by their first placement.
    pub processes: u32,
    /// Being re-partitioned: no new process is bound here; those bound
    /// here go on until they exit.
    pub retiring: bool,
    /// Its MPS server is down: no new process is bound here until it is
    /// back (a process started now would run without MPS, or not at all).
    pub mps_down: bool,
}

impl InstanceLoad {
    /// An instance with nothing on it.
    fn empty(uuid: String, memory_bytes: u64) -> InstanceLoad {
        InstanceLoad {
            uuid,
            memory_bytes,
            reserved_bytes: 0,
            warps: 0,
            sms: None,
            closed: false,
            owner: None,
            processes: 0,
            retiring: false,
            mps_down: false,
        }
    }

    pub fn free_bytes(&self) -> u64 {
        self.memory_bytes.saturating_sub(self.reserved_bytes)
    }
}

/// A task asking for a place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskRequest {
    pub job: JobId,
    /// The process the task belongs to: its first placement pins it.
    pub pid: u32,
    pub bytes: u64,
    pub warps: u64,
    /// The launch shape of the task's kernel, when the probe reports it.
    pub shape: Option<KernelShape>,
}

impl TaskRequest {
    /// The kernel shape: as reported, or else `warps` taken as blocks of
    /// 256 threads (8 warps), the most common block size.
    pub fn kernel_shape(&self) -> KernelShape {
        self.shape.unwrap_or(KernelShape {
            blocks: self.warps.div_ceil(8),
            block_warps: 8,
        })
    }
}

/// Chooses an instance for a task among the open ones that can hold it.
pub trait PlacementPolicy: Send + Sync {
    fn name(&self) -> &'static str;
    /// Index into `instances` of the chosen one, or `None` to wait. Only
    /// instances in `candidates` (open, enough free memory) may be chosen.
    fn choose(
        &self,
        instances: &[InstanceLoad],
        candidates: &[usize],
        task: &TaskRequest,
    ) -> Option<usize>;
    /// A memory-blind policy is offered every open instance, whether the
    /// task fits or not; placing a task where it does not fit is an
    /// overflow ([`PlacementError::Overflow`]), an out-of-memory crash on a
    /// real GPU.
    fn memory_blind(&self) -> bool {
        false
    }
    /// Whether the policy looks at per-SM slots; the book keeps SM tables
    /// (work on every placement) only for such policies.
    fn uses_sm_slots(&self) -> bool {
        false
    }
}

/// CASE Algorithm 2 (the multi-GPU paper's Algorithm 3): among instances
/// with enough free memory, the one with the fewest in-use warps; ties go to
/// the least free memory (best fit), then the first.
pub struct CasePlacement;

impl PlacementPolicy for CasePlacement {
    fn name(&self) -> &'static str {
        "case"
    }
    fn choose(
        &self,
        instances: &[InstanceLoad],
        candidates: &[usize],
        _task: &TaskRequest,
    ) -> Option<usize> {
        candidates
            .iter()
            .copied()
            .min_by_key(|&i| (instances[i].warps, instances[i].free_bytes(), i))
    }
}

/// The multi-GPU paper's Algorithm 2 ("MGB", memory and compute both
/// hard): a task goes to the first instance where its memory fits and all
/// the blocks of its kernel's first wave find an SM with a free block slot
/// and room for their warps, dealt round robin as the hardware does
/// ([`crate::sm`]); otherwise it waits. Instances whose SMs are unknown
/// count as having room.
pub struct MgbSmPlacement;

impl PlacementPolicy for MgbSmPlacement {
    fn name(&self) -> &'static str {
        "mgb-sm"
    }
    fn choose(
        &self,
        instances: &[InstanceLoad],
        candidates: &[usize],
        task: &TaskRequest,
    ) -> Option<usize> {
        candidates.iter().copied().find(|&i| {
            instances[i]
                .sms
                .as_ref()
                .is_none_or(|t| t.fit(task.kernel_shape()).is_some())
        })
    }
    fn uses_sm_slots(&self) -> bool {
        true
    }
}

/// Slurm's exclusive use: a task goes to the instance its job holds
/// ([`TaskBook::set_owner`]) and nowhere else; it waits while its job holds
/// none.
pub struct ExclusivePlacement;

impl PlacementPolicy for ExclusivePlacement {
    fn name(&self) -> &'static str {
        "exclusive"
    }
    fn choose(
        &self,
        instances: &[InstanceLoad],
        candidates: &[usize],
        task: &TaskRequest,
    ) -> Option<usize> {
        candidates
            .iter()
            .copied()
            .find(|&i| instances[i].owner == Some(task.job))
    }
}

/// Memory-blind sharing (the papers' core-to-GPU ratio baseline, `cg:R`):
/// a process goes round robin to the open instance with the fewest
/// processes bound to it, whether its memory fits or not.
pub struct BlindPlacement;

impl PlacementPolicy for BlindPlacement {
    fn name(&self) -> &'static str {
        "blind"
    }
    fn choose(
        &self,
        instances: &[InstanceLoad],
        candidates: &[usize],
        _task: &TaskRequest,
    ) -> Option<usize> {
        candidates
            .iter()
            .copied()
            .min_by_key(|&i| (instances[i].processes, i))
    }
    fn memory_blind(&self) -> bool {
        true
    }
}

/// The names [`placement_policy`] knows.
pub const PLACEMENT_POLICIES: &[&str] = &["case", "mgb-sm", "exclusive", "blind"];

/// The placement policy called `name`.
pub fn placement_policy(name: &str) -> Option<Box<dyn PlacementPolicy>> {
    match name {
        "case" => Some(Box::new(CasePlacement)),
        "mgb-sm" => Some(Box::new(MgbSmPlacement)),
        "exclusive" => Some(Box::new(ExclusivePlacement)),
        "blind" => Some(Box::new(BlindPlacement)),
        _ => None,
    }
}

/// Where a task was put.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placed {
    pub task: TaskId,
    pub job: JobId,
    pub pid: u32,
    pub instance: String,
    pub bytes: u64,
    pub warps: u64,
}

/// What happened to a task that asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Begin {
    Placed(Placed),
    /// Queued; it is placed by a later release (returned from that call).
    Waiting(TaskId),
}

/// Why a request cannot be served.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    #[error("task needs {need} bytes but the largest instance open to shared jobs has {largest} bytes: it can never be placed")]
    NeverFits { need: u64, largest: u64 },
    #[error("task needs {need} bytes but this process is bound to instance {instance}, which has {total} bytes")]
    NeverFitsPinned {
        need: u64,
        instance: String,
        total: u64,
    },
    #[error("task needs {want} bytes but instance {instance}, where a memory-blind policy put it, has {free} bytes free: out of memory")]
    Overflow {
        instance: String,
        free: u64,
        want: u64,
    },
    #[error("no such task {0}")]
    NoSuchTask(TaskId),
    #[error("instance {instance} has {free} bytes free; {want} more were asked")]
    Full {
        instance: String,
        free: u64,
        want: u64,
    },
}

#[derive(Debug, Clone)]
struct Active {
    job: JobId,
    pid: u32,
    instance: usize,
    bytes: u64,
    warps: u64,
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
    /// (job, pid) → instance index, set by the process's first placement.
    pins: BTreeMap<(JobId, u32), usize>,
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
            pins: BTreeMap::new(),
            next: 1,
        }
    }

    /// Sets how many times a waiting task may be overtaken (0: never; a
    /// task waits behind every earlier one that could use its instance).
    pub fn with_max_overtakes(mut self, n: u32) -> TaskBook {
        self.max_overtakes = n;
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
                let largest = self
                    .instances
                    .iter()
                    .map(|i| i.memory_bytes)
                    .max()
                    .unwrap_or(0);
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
        !inst.closed
            && inst.owner.is_none_or(|o| o == req.job)
            && pin.is_none_or(|&p| p == i)
            && ((!inst.retiring && !inst.mps_down) || pin == Some(&i))
    }

    fn choice(&self, req: &TaskRequest, barred: &BTreeSet<usize>) -> Option<usize> {
        // A process's first placement pins it: the instance must be able to
        // hold each of its tasks that is already queued, too.
        let need_total = if self.pins.contains_key(&(req.job, req.pid)) {
            0
        } else {
            self.waiting
                .iter()
                .filter(|(_, w)| w.job == req.job && w.pid == req.pid)
                .map(|(_, w)| w.bytes)
                .max()
                .unwrap_or(0)
        };
        self.choice_with(req, need_total, barred)
    }

    /// The policy's choice among open instances, other than `barred`, with
    /// `req.bytes` free and at least `need_total` in all.
    fn choice_with(
        &self,
        req: &TaskRequest,
        need_total: u64,
        barred: &BTreeSet<usize>,
    ) -> Option<usize> {
        let blind = self.policy.memory_blind();
        let candidates: Vec<usize> = (0..self.instances.len())
            .filter(|&i| {
                !barred.contains(&i)
                    && self.allowed(req, i)
                    && (blind
                        || (self.instances[i].free_bytes() >= req.bytes
                            && self.instances[i].memory_bytes >= need_total))
            })
            .collect();
        if candidates.is_empty() {
            return None;
        }
        self.policy
            .choose(&self.instances, &candidates, req)
            .filter(|c| candidates.contains(c))
    }

    fn place_on(&mut self, i: usize, id: TaskId, req: &TaskRequest) -> Placed {
        let inst = &mut self.instances[i];
        inst.reserved_bytes += req.bytes;
        inst.warps += req.warps;
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
        }
    }

    /// Most free bytes on any open instance.
    fn max_open_free(&self) -> u64 {
        self.instances
            .iter()
            .filter(|i| !i.closed)
            .map(|i| i.free_bytes())
            .max()
            .unwrap_or(0)
    }

    /// Places waiting tasks that now fit, in FIFO order. Linear in the
    /// queue: tasks bigger than any open instance's free memory are skipped
    /// without asking the policy.
    fn retry(&mut self) -> Vec<Placed> {
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
        if let Some(t) = inst.sms.as_mut() {
            t.give_back(a.block_warps, &a.sm_blocks);
        }
        Some(a)
    }

    /// A task ended. Returns the waiting tasks this made room for.
    pub fn end(&mut self, id: TaskId) -> Result<Vec<Placed>, PlacementError> {
        if self.release(id).is_none() {
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
        if inst.free_bytes() < more {
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
        })
    }

    /// Drops every task (active or waiting) of a process that exited.
    /// Returns (released task ids, waiting tasks now placed).
    pub fn release_process(&mut self, job: JobId, pid: u32) -> (Vec<TaskId>, Vec<Placed>) {
        self.unpin(|j, p| j == job && p == pid);
        self.release_where(|a_job, a_pid| a_job == job && a_pid == pid)
    }

    /// Drops every task of a job that ended or was cancelled.
    pub fn release_job(&mut self, job: JobId) -> (Vec<TaskId>, Vec<Placed>) {
        self.unpin(|j, _| j == job);
        self.release_where(|a_job, _| a_job == job)
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

    fn release_where(&mut self, f: impl Fn(JobId, u32) -> bool) -> (Vec<TaskId>, Vec<Placed>) {
        let ids: Vec<TaskId> = self
            .active
            .iter()
            .filter(|(_, a)| f(a.job, a.pid))
            .map(|(id, _)| *id)
            .collect();
        for id in &ids {
            self.release(*id);
        }
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
        dropped.extend(ids);
        (dropped, self.retry())
    }

    /// Gives the instance `uuid` to `job` alone (Slurm's exclusive use), or
    /// back to everyone with `None`. Returns the waiting tasks this placed.
    pub fn set_owner(&mut self, uuid: &str, owner: Option<JobId>) -> Vec<Placed> {
        let Some(i) = self.index(uuid) else {
            return Vec::new();
        };
        self.instances[i].owner = owner;
        self.retry()
    }

    /// Marks an instance as being re-partitioned (no new processes bound
    /// to it) or back in use. Returns the waiting tasks this placed.
    pub fn set_retiring(&mut self, uuid: &str, retiring: bool) -> Vec<Placed> {
        self.restrict(uuid, retiring, |i| &mut i.retiring)
    }

    /// Sets one of an instance's restrictions; lifting it may place
    /// waiting tasks, which are returned.
    fn restrict(
        &mut self,
        uuid: &str,
        on: bool,
        flag: impl FnOnce(&mut InstanceLoad) -> &mut bool,
    ) -> Vec<Placed> {
        let Some(i) = self.index(uuid) else {
            return Vec::new();
        };
        *flag(&mut self.instances[i]) = on;
        if on {
            Vec::new()
        } else {
            self.retry()
        }
    }

    /// Whether nothing runs on the instance and no process is bound to it
    /// (so it may be destroyed). Unknown instances are not idle.
    pub fn is_idle(&self, uuid: &str) -> bool {
        self.index(uuid).is_some_and(|i| {
            let inst = &self.instances[i];
            inst.processes == 0
                && inst.reserved_bytes == 0
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

    /// Adds an instance (created by a re-partition; `sms` where known).
    /// Returns the waiting tasks it took.
    pub fn add_instance(&mut self, uuid: &str, memory_bytes: u64, sms: Option<u32>) -> Vec<Placed> {
        let mut load = InstanceLoad::empty(uuid.into(), memory_bytes);
        load.sms = sms
            .filter(|_| self.policy.uses_sm_slots())
            .map(SmTable::new);
        self.instances.push(load);
        self.retry()
    }

    /// Says whether the instance's MPS server is down: while it is, no new
    /// process is bound there. Returns the waiting tasks its return placed.
    pub fn set_mps_down(&mut self, uuid: &str, down: bool) -> Vec<Placed> {
        self.restrict(uuid, down, |i| &mut i.mps_down)
    }

    /// Opens or closes an instance to shared tasks (closed while held or
    /// drained for an isolated job). Opening may place waiting tasks.
    pub fn set_closed(&mut self, uuid: &str, closed: bool) -> Vec<Placed> {
        self.restrict(uuid, closed, |i| &mut i.closed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const G: u64 = 1 << 30;

    fn book(sizes: &[u64]) -> TaskBook {
        TaskBook::new(
            Box::new(CasePlacement),
            sizes
                .iter()
                .enumerate()
                .map(|(i, s)| (format!("I{i}"), *s))
                .collect(),
        )
    }

    fn req(job: JobId, pid: u32, bytes: u64, warps: u64) -> TaskRequest {
        TaskRequest {
            job,
            pid,
            bytes,
            warps,
            shape: None,
        }
    }

    fn placed(b: Result<Begin, PlacementError>) -> Placed {
        match b.unwrap() {
            Begin::Placed(p) => p,
            other => panic!("not placed: {other:?}"),
        }
    }

    #[test]
    fn fewest_warps_among_those_with_room() {
        let mut b = book(&[5 * G, 5 * G, 10 * G]);
        let a = placed(b.begin(req(1, 1, 3 * G, 100)));
        assert_eq!(a.instance, "I0");
        let c = placed(b.begin(req(2, 2, 3 * G, 10)));
        assert_eq!(c.instance, "I1", "I0 has warps in use");
        let d = placed(b.begin(req(3, 3, 3 * G, 10)));
        assert_eq!(d.instance, "I2", "I0 and I1 lack memory");
        // 4G fits only I2 (7G free); it has 10 warps, it is still the choice.
        let e = placed(b.begin(req(4, 4, 4 * G, 1)));
        assert_eq!(e.instance, "I2");
        assert_eq!(b.begin(req(5, 5, 4 * G, 1)).unwrap(), Begin::Waiting(5));
        let now = b.end(a.task).unwrap();
        assert_eq!(now.len(), 1);
        assert_eq!(now[0].instance, "I0");
        assert_eq!(now[0].job, 5);
    }

    #[test]
    fn mgb_sm_treats_sm_slots_as_a_hard_limit() {
        let shaped = |job, blocks, block_warps| TaskRequest {
            shape: Some(KernelShape {
                blocks,
                block_warps,
            }),
            ..req(job, job as u32, G, 0)
        };
        let mut b = TaskBook::new(
            Box::new(MgbSmPlacement),
            vec![("I0".into(), 5 * G), ("I1".into(), 5 * G)],
        )
        .with_sms("I0", 2)
        .with_sms("I1", 2);
        // Six 16-warp blocks: three per SM, 48 of each SM's 64 warps.
        let first = placed(b.begin(shaped(1, 6, 16)));
        assert_eq!(first.instance, "I0");
        // Three more per SM do not fit I0's 16 free warps: first fit is I1.
        assert_eq!(placed(b.begin(shaped(2, 6, 16))).instance, "I1");
        // Memory is free everywhere, SM slots are not: it waits.
        assert!(matches!(
            b.begin(shaped(3, 6, 16)).unwrap(),
            Begin::Waiting(_)
        ));
        // One block per SM fits I0 now: it goes ahead of the waiting task,
        // which cannot use those slots yet.
        assert_eq!(placed(b.begin(shaped(4, 2, 16))).instance, "I0");
        let now = b.end(first.task).unwrap();
        let got: Vec<(JobId, String)> = now.iter().map(|p| (p.job, p.instance.clone())).collect();
        assert_eq!(got, vec![(3, "I0".to_string())]);
        assert!(placement_policy("mgb-sm").is_some());
    }

    #[test]
    fn mgb_sm_sees_slots_split_across_sms() {
        let shaped = |job, blocks, block_warps| TaskRequest {
            shape: Some(KernelShape {
                blocks,
                block_warps,
            }),
            ..req(job, job as u32, G, 0)
        };
        let mut b =
            TaskBook::new(Box::new(MgbSmPlacement), vec![("I0".into(), 5 * G)]).with_sms("I0", 2);
        let first = placed(b.begin(shaped(1, 2, 20)));
        // 44 warps free on each SM, 88 in all: 72 warps in 24-warp blocks
        // would fit the total but only one such block fits an SM.
        assert!(matches!(
            b.begin(shaped(2, 3, 24)).unwrap(),
            Begin::Waiting(_)
        ));
        assert_eq!(b.instances()[0].sms.as_ref().unwrap().free_warps(), 88);
        let now = b.end(first.task).unwrap();
        assert_eq!(now.len(), 1);
        assert_eq!(now[0].job, 2);
    }

    #[test]
    fn exclusive_tasks_go_only_to_their_jobs_instance() {
        let mut b = TaskBook::new(
            Box::new(ExclusivePlacement),
            vec![("I0".into(), 5 * G), ("I1".into(), 5 * G)],
        );
        // Job 1 holds nothing yet: it waits, though both instances are free.
        assert!(matches!(
            b.begin(req(1, 1, G, 1)).unwrap(),
            Begin::Waiting(_)
        ));
        let now = b.set_owner("I1", Some(1));
        assert_eq!((now[0].job, now[0].instance.as_str()), (1, "I1"));
        // Another job cannot use job 1's instance, even with memory free.
        assert!(matches!(
            b.begin(req(2, 2, G, 1)).unwrap(),
            Begin::Waiting(_)
        ));
        b.release_job(1);
        let now = b.set_owner("I1", Some(2));
        assert_eq!((now[0].job, now[0].instance.as_str()), (2, "I1"));
    }

    #[test]
    fn blind_placement_deals_processes_round_robin_and_overflows() {
        let mut b = TaskBook::new(
            Box::new(BlindPlacement),
            vec![("I0".into(), 5 * G), ("I1".into(), 5 * G)],
        );
        assert_eq!(placed(b.begin(req(1, 1, 4 * G, 1))).instance, "I0");
        assert_eq!(placed(b.begin(req(2, 2, 4 * G, 1))).instance, "I1");
        // Both have 1 GiB free; the next process goes to I0 regardless.
        match b.begin(req(3, 3, 2 * G, 1)) {
            Err(PlacementError::Overflow {
                instance,
                free,
                want,
            }) => {
                assert_eq!((instance.as_str(), free, want), ("I0", G, 2 * G));
            }
            other => panic!("expected an overflow, got {other:?}"),
        }
        // Nothing was reserved beyond the instance.
        assert!(b
            .instances()
            .iter()
            .all(|i| i.reserved_bytes <= i.memory_bytes));
        assert_eq!(placed(b.begin(req(4, 4, G / 2, 1))).instance, "I0");
        assert_eq!(b.instances()[0].processes, 2);
        b.release_job(4);
        assert_eq!(b.instances()[0].processes, 1);
        assert!(placement_policy("blind").is_some());
        assert!(placement_policy("exclusive").is_some());
    }

    #[test]
    fn restored_reservations_count() {
        let mut b = book(&[5 * G]);
        assert!(b.restore(40, &req(1, 9, 3 * G, 10), "I0"));
        assert!(!b.restore(40, &req(1, 9, G, 10), "I0"), "same id twice");
        assert!(
            !b.restore(41, &req(2, 9, 3 * G, 10), "I0"),
            "would over-reserve"
        );
        assert!(!b.restore(42, &req(2, 9, G, 10), "nowhere"));
        assert_eq!(b.pinned(1, 9), Some("I0"));
        assert!(matches!(
            b.begin(req(3, 3, 3 * G, 0)).unwrap(),
            Begin::Waiting(41)
        ));
        let now = b.end(40).unwrap();
        assert_eq!(now[0].job, 3);
    }

    #[test]
    fn tasks_that_can_never_fit_fail_at_once() {
        let mut b = book(&[5 * G, 10 * G]);
        let e = b.begin(req(1, 1, 11 * G, 1)).unwrap_err();
        assert!(matches!(e, PlacementError::NeverFits { .. }));
        // A process pinned to the 5G instance cannot grow a task past it.
        let p = placed(b.begin(req(1, 1, 4 * G, 1)));
        assert_eq!(p.instance, "I0");
        let e = b.begin(req(1, 1, 6 * G, 1)).unwrap_err();
        assert!(matches!(e, PlacementError::NeverFitsPinned { .. }), "{e}");
    }

    #[test]
    fn later_tasks_of_a_process_stay_on_its_instance() {
        let mut b = book(&[5 * G, 5 * G]);
        let first = placed(b.begin(req(1, 7, G, 1000)));
        assert_eq!(first.instance, "I0");
        let second = placed(b.begin(req(1, 7, G, 1)));
        assert_eq!(second.instance, "I0", "pinned despite more warps");
        assert_eq!(b.pinned(1, 7), Some("I0"));
        b.begin(req(1, 7, 4 * G, 1)).unwrap(); // waits for I0
        assert_eq!(b.waiting_len(), 1);
        let (released, now) = b.release_process(1, 7);
        assert_eq!(released.len(), 3);
        assert!(now.is_empty());
        assert_eq!(b.instances()[0].reserved_bytes, 0);
    }

    #[test]
    fn closed_instances_get_nothing_and_drain() {
        let mut b = book(&[5 * G, 5 * G]);
        let t = placed(b.begin(req(1, 1, G, 1)));
        assert!(b.set_closed("I0", true).is_empty());
        assert_eq!(b.tasks_on("I0"), 1);
        let n = placed(b.begin(req(2, 2, G, 0)));
        assert_eq!(n.instance, "I1");
        b.end(t.task).unwrap();
        assert_eq!(b.tasks_on("I0"), 0, "drained");
        assert!(b.set_closed("I1", true).is_empty());
        assert!(matches!(
            b.begin(req(3, 3, G, 0)).unwrap(),
            Begin::Waiting(_)
        ));
        let now = b.set_closed("I0", false);
        assert_eq!(now.len(), 1);
        assert_eq!(now[0].instance, "I0");
    }

    #[test]
    fn with_no_overtaking_newcomers_wait_behind_waiters_that_could_use_the_instance() {
        let mut b = book(&[4 * G]).with_max_overtakes(0);
        let big = placed(b.begin(req(1, 1, 3 * G, 0)));
        assert!(matches!(
            b.begin(req(2, 2, 2 * G, 0)).unwrap(),
            Begin::Waiting(_)
        ));
        // 1G would fit now, but the 2G waiter could use this instance: wait.
        assert!(matches!(
            b.begin(req(3, 3, G, 0)).unwrap(),
            Begin::Waiting(_)
        ));
        let now = b.end(big.task).unwrap();
        let jobs: Vec<JobId> = now.iter().map(|p| p.job).collect();
        assert_eq!(jobs, vec![2, 3]);
    }

    #[test]
    fn a_task_that_fits_goes_ahead_of_one_that_does_not() {
        // The head-of-line blocking seen on an H100 (issue 17): a big task
        // waiting for memory held back smaller ones that fitted.
        let mut b = book(&[4 * G]);
        let big = placed(b.begin(req(1, 1, 3 * G, 0)));
        let waiting = b.begin(req(2, 2, 2 * G, 0)).unwrap();
        assert!(matches!(waiting, Begin::Waiting(_)));
        assert_eq!(placed(b.begin(req(3, 3, G, 0))).job, 3);
        // A process's own tasks stay in order, though.
        let mut b2 = book(&[4 * G]);
        placed(b2.begin(req(1, 1, 3 * G, 0)));
        assert!(matches!(
            b2.begin(req(2, 2, 2 * G, 0)).unwrap(),
            Begin::Waiting(_)
        ));
        assert!(matches!(
            b2.begin(req(2, 2, G / 2, 0)).unwrap(),
            Begin::Waiting(_)
        ));
        // The 3G task and the 1G one end: the 2G waiter is placed.
        b.end(big.task).unwrap();
        assert_eq!(b.waiting_len(), 0);
    }

    #[test]
    fn aging_stops_a_stream_of_small_tasks_from_starving_a_big_one() {
        let mut b = book(&[4 * G]).with_max_overtakes(2);
        let first = placed(b.begin(req(1, 1, 3 * G, 0)));
        assert!(matches!(
            b.begin(req(2, 2, 2 * G, 0)).unwrap(),
            Begin::Waiting(_)
        ));
        // Two small ones go ahead of the 2G waiter; the third waits.
        let s1 = placed(b.begin(req(3, 3, G / 2, 0)));
        placed(b.begin(req(4, 4, G / 2, 0)));
        assert!(matches!(
            b.begin(req(5, 5, G / 4, 0)).unwrap(),
            Begin::Waiting(_)
        ));
        // Room at last: the big one goes first, then the small one behind it.
        let now = b.end(first.task).unwrap();
        let jobs: Vec<JobId> = now.iter().map(|p| p.job).collect();
        assert_eq!(jobs, vec![2, 5]);
        // Once placed, a task's count is gone with it.
        assert!(b.overtaken.is_empty(), "{:?}", b.overtaken);
        b.end(s1.task).unwrap();
    }

    #[test]
    fn overtaking_within_the_queue_is_bounded_too() {
        let mut c = book(&[4 * G]).with_max_overtakes(1);
        let big = placed(c.begin(req(1, 1, 3 * G, 0)));
        let mid = placed(c.begin(req(9, 9, G, 0)));
        for (job, bytes) in [(2, 2 * G), (3, G / 2), (4, G / 2)] {
            assert!(matches!(
                c.begin(req(job, job as u32, bytes, 0)).unwrap(),
                Begin::Waiting(_)
            ));
        }
        // 1G free: one half goes ahead (the 2G task is overtaken once),
        // the next half waits for it.
        let now = c.end(mid.task).unwrap();
        assert_eq!(now.iter().map(|p| p.job).collect::<Vec<_>>(), vec![3]);
        let now = c.end(big.task).unwrap();
        assert_eq!(now.iter().map(|p| p.job).collect::<Vec<_>>(), vec![2, 4]);
    }

    #[test]
    fn grow_only_into_free_memory_of_the_same_instance() {
        let mut b = book(&[4 * G, 8 * G]);
        let t = placed(b.begin(req(1, 1, 3 * G, 0)));
        assert_eq!(t.instance, "I0");
        b.grow(t.task, G).unwrap();
        let e = b.grow(t.task, 1).unwrap_err();
        assert!(matches!(e, PlacementError::Full { free: 0, .. }));
        assert_eq!(b.task(t.task).unwrap().bytes, 4 * G);
        b.set_warps(t.task, 64).unwrap();
        assert_eq!(b.instances()[0].warps, 64);
        let (gone, _) = b.release_job(1);
        assert_eq!(gone, vec![t.task]);
        assert_eq!(b.instances()[0].reserved_bytes, 0);
        assert_eq!(b.instances()[0].warps, 0);
    }

    #[test]
    fn an_instance_whose_mps_is_down_binds_no_new_process_until_it_is_back() {
        let mut b = book(&[8 * G, 8 * G]);
        let first = placed(b.begin(req(1, 10, G, 0)));
        let on = first.instance.clone();
        let other = if on == "I0" { "I1" } else { "I0" };
        b.set_mps_down(&on, true);
        b.set_mps_down(other, true);
        // A new process waits; the one bound there may still grow its work.
        let waiting = b.begin(req(2, 20, G, 0)).unwrap();
        assert!(matches!(waiting, Begin::Waiting(_)), "{waiting:?}");
        assert_eq!(placed(b.begin(req(1, 10, G, 0))).instance, on);
        // The server is back: the waiting process is placed there.
        let now = b.set_mps_down(other, false);
        assert_eq!(now.len(), 1);
        assert_eq!(now[0].instance, other);
    }

    #[test]
    fn retiring_instances_keep_their_processes_and_go_when_idle() {
        let mut b = book(&[4 * G, 4 * G]);
        let t = placed(b.begin(req(1, 1, G, 10)));
        assert_eq!(t.instance, "I0");
        b.set_retiring("I0", true);
        // A new process goes elsewhere, even to more warps.
        assert_eq!(placed(b.begin(req(2, 1, G, 100))).instance, "I1");
        assert_eq!(placed(b.begin(req(3, 1, G, 100))).instance, "I1");
        // The bound process's next task still goes to its instance.
        b.end(t.task).unwrap();
        assert!(!b.is_idle("I0"), "the process is still bound there");
        assert!(!b.remove_instance("I0"));
        let t2 = placed(b.begin(req(1, 1, 2 * G, 10)));
        assert_eq!(t2.instance, "I0");
        b.release_job(1);
        assert!(b.is_idle("I0"));
        // Removing it keeps the other instance's tasks and pins in place.
        assert!(b.remove_instance("I0"));
        assert!(!b.is_idle("I1"));
        assert_eq!(b.pinned(2, 1), Some("I1"));
        assert_eq!(b.instances()[0].reserved_bytes, 2 * G);
        // A task bigger than what is left waits; a new instance takes it.
        assert!(matches!(
            b.begin(req(4, 1, 3 * G, 0)).unwrap(),
            Begin::Waiting(_)
        ));
        let now = b.add_instance("I2", 8 * G, None);
        assert_eq!((now.len(), now[0].instance.as_str()), (1, "I2"));
        let (gone, _) = b.release_job(2);
        assert_eq!(gone.len(), 1);
        assert_eq!(b.instances()[0].reserved_bytes, G);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Begin {
            job: u64,
            pid: u32,
            gib: u64,
            warps: u64,
        },
        End(usize),
        ExitProcess(usize),
        EndJob(u64),
        Grow(usize, u64),
        Close(usize),
        Open(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (1u64..6, 0u32..3, 1u64..12, 0u64..200).prop_map(|(job, pid, gib, warps)| Op::Begin { job, pid, gib, warps }),
            3 => (0usize..64).prop_map(Op::End),
            1 => (0usize..64).prop_map(Op::ExitProcess),
            1 => (1u64..6).prop_map(Op::EndJob),
            1 => (0usize..64, 1u64..3).prop_map(|(i, g)| Op::Grow(i, g)),
            1 => (0usize..5).prop_map(Op::Close),
            1 => (0usize..5).prop_map(Op::Open),
        ]
    }

    proptest! {
        /// Random concurrent begins, ends, exits, growths and isolations:
        /// no instance is ever over-reserved, nothing is placed on a closed
        /// instance, no waiting task is overtaken more than the aging bound,
        /// and once everything active ends and every instance opens, every
        /// waiting task has been placed.
        #[test]
        fn never_over_reserved_and_waiters_are_placed(ops in prop::collection::vec(op(), 1..120)) {
            let sizes = [5 * G, 5 * G, 5 * G, 10 * G, 10 * G];
            let mut b = book(&sizes).with_max_overtakes(3);
            let mut live: Vec<TaskId> = Vec::new();
            let check = |b: &TaskBook, placed: &[Placed], live: &mut Vec<TaskId>| -> Result<(), TestCaseError> {
                for p in placed {
                    let i = b.instances().iter().position(|i| i.uuid == p.instance).unwrap();
                    prop_assert!(!b.instances()[i].closed, "placed on a closed instance");
                    live.push(p.task);
                }
                for i in b.instances() {
                    prop_assert!(i.reserved_bytes <= i.memory_bytes, "{} over-reserved", i.uuid);
                }
                // Aging: no waiting task is overtaken more than the bound.
                prop_assert!(b.overtaken.values().all(|&n| n <= 3), "{:?}", b.overtaken);
                prop_assert!(b.overtaken.keys().all(|id| b.waiting.iter().any(|(w, _)| w == id)));
                Ok(())
            };
            for o in ops {
                let placed = match o {
                    Op::Begin { job, pid, gib, warps } => match b.begin(req(job, pid, gib * G, warps)) {
                        Ok(Begin::Placed(p)) => vec![p],
                        Ok(Begin::Waiting(_)) => vec![],
                        Err(PlacementError::NeverFits { .. }) | Err(PlacementError::NeverFitsPinned { .. }) => {
                            prop_assert!(gib * G > 5 * G);
                            vec![]
                        }
                        Err(e) => return Err(TestCaseError::fail(e.to_string())),
                    },
                    Op::End(k) if !live.is_empty() => {
                        let id = live.remove(k % live.len());
                        b.end(id).unwrap()
                    }
                    Op::ExitProcess(k) if !live.is_empty() => {
                        let t = b.task(live[k % live.len()]).unwrap();
                        let (gone, now) = b.release_process(t.job, t.pid);
                        live.retain(|id| !gone.contains(id));
                        now
                    }
                    Op::EndJob(job) => {
                        let (gone, now) = b.release_job(job);
                        live.retain(|id| !gone.contains(id));
                        now
                    }
                    Op::Grow(k, g) if !live.is_empty() => {
                        let _ = b.grow(live[k % live.len()], g * G);
                        vec![]
                    }
                    Op::Close(i) => b.set_closed(&format!("I{i}"), true),
                    Op::Open(i) => b.set_closed(&format!("I{i}"), false),
                    _ => vec![],
                };
                check(&b, &placed, &mut live)?;
            }
            // Drain: open everything, end every task; waiters get placed and end too.
            for i in 0..sizes.len() {
                let p = b.set_closed(&format!("I{i}"), false);
                check(&b, &p, &mut live)?;
            }
            let mut rounds = 0;
            while let Some(id) = live.pop() {
                let p = b.end(id).unwrap();
                check(&b, &p, &mut live)?;
                rounds += 1;
                prop_assert!(rounds < 10_000);
            }
            prop_assert_eq!(b.waiting_len(), 0, "every waiting task was placed");
            prop_assert!(b.instances().iter().all(|i| i.reserved_bytes == 0 && i.warps == 0));
        }
    }
}
