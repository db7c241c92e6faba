//! Placing probed GPU tasks on a node's instances (CASE Algorithm 2).
//!
//! [`TaskBook`] is the node's whole placement state: each instance's
//! reservations and in-use warps, which instances are held or being drained
//! for isolated jobs, the process-to-instance pins, and the FIFO of waiting
//! tasks. It is pure: the probe server in gnoded feeds it requests and
//! releases and carries out what it returns. The choice among instances is a
//! [`PlacementPolicy`].

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

use crate::job::JobId;

pub type TaskId = u64;

/// One instance as placement sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceLoad {
    pub uuid: String,
    pub memory_bytes: u64,
    pub reserved_bytes: u64,
    pub warps: u64,
    /// Warps the instance can hold resident at once (SMs x warps per SM);
    /// only policies that treat compute as a hard limit use it.
    pub warp_capacity: u64,
    /// Held by an isolated job, or being drained for one: no placements.
    pub closed: bool,
}

impl InstanceLoad {
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
/// hard): a task goes to the first instance where its memory fits and its
/// warps fit the warps still free (SMs x resident warps per SM, minus the
/// warps of the tasks there); otherwise it waits. A coarse form of the
/// paper's per-SM block emulation: it checks the instance's total resident
/// warps rather than each SM's block and warp slots.
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
        candidates
            .iter()
            .copied()
            .find(|&i| instances[i].warps.saturating_add(task.warps) <= instances[i].warp_capacity)
    }
}

/// The placement policy called `name`.
pub fn placement_policy(name: &str) -> Option<Box<dyn PlacementPolicy>> {
    match name {
        "case" => Some(Box::new(CasePlacement)),
        "mgb-sm" => Some(Box::new(MgbSmPlacement)),
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
}

/// The node's placement state.
pub struct TaskBook {
    policy: Box<dyn PlacementPolicy>,
    instances: Vec<InstanceLoad>,
    active: BTreeMap<TaskId, Active>,
    waiting: VecDeque<(TaskId, TaskRequest)>,
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
                .map(|(uuid, memory_bytes)| InstanceLoad {
                    uuid,
                    memory_bytes,
                    reserved_bytes: 0,
                    warps: 0,
                    warp_capacity: u64::MAX,
                    closed: false,
                })
                .collect(),
            active: BTreeMap::new(),
            waiting: VecDeque::new(),
            pins: BTreeMap::new(),
            next: 1,
        }
    }

    /// Sets the resident-warp capacity of the instance `uuid`.
    pub fn with_warp_capacity(mut self, uuid: &str, warps: u64) -> TaskBook {
        if let Some(i) = self.instances.iter_mut().find(|i| i.uuid == uuid) {
            i.warp_capacity = warps;
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
        // Earlier waiters keep their turn: a newcomer goes first only where
        // it takes nothing a waiter could use.
        if self.waiting.is_empty() || self.fits_without_overtaking(&req) {
            if let Some(p) = self.try_place(id, &req) {
                return Ok(Begin::Placed(p));
            }
        }
        self.waiting.push_back((id, req));
        Ok(Begin::Waiting(id))
    }

    /// A newcomer may go ahead of waiting tasks only where none of them
    /// could be placed on the instance it would take.
    fn fits_without_overtaking(&self, req: &TaskRequest) -> bool {
        // A process's tasks are placed in order: its first placement pins it.
        if self
            .waiting
            .iter()
            .any(|(_, w)| w.job == req.job && w.pid == req.pid)
        {
            return false;
        }
        let Some(i) = self.choice(req) else {
            return false;
        };
        !self
            .waiting
            .iter()
            .any(|(_, w)| self.allowed(w, i) && w.bytes <= self.instances[i].memory_bytes)
    }

    fn allowed(&self, req: &TaskRequest, i: usize) -> bool {
        !self.instances[i].closed && self.pins.get(&(req.job, req.pid)).is_none_or(|&p| p == i)
    }

    fn choice(&self, req: &TaskRequest) -> Option<usize> {
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
        self.choice_with(req, need_total)
    }

    /// The policy's choice among open instances with `req.bytes` free and at
    /// least `need_total` in all.
    fn choice_with(&self, req: &TaskRequest, need_total: u64) -> Option<usize> {
        let candidates: Vec<usize> = (0..self.instances.len())
            .filter(|&i| {
                self.allowed(req, i)
                    && self.instances[i].free_bytes() >= req.bytes
                    && self.instances[i].memory_bytes >= need_total
            })
            .collect();
        if candidates.is_empty() {
            return None;
        }
        self.policy
            .choose(&self.instances, &candidates, req)
            .filter(|c| candidates.contains(c))
    }

    fn try_place(&mut self, id: TaskId, req: &TaskRequest) -> Option<Placed> {
        let i = self.choice(req)?;
        Some(self.place_on(i, id, req))
    }

    fn place_on(&mut self, i: usize, id: TaskId, req: &TaskRequest) -> Placed {
        let inst = &mut self.instances[i];
        inst.reserved_bytes += req.bytes;
        inst.warps += req.warps;
        self.pins.entry((req.job, req.pid)).or_insert(i);
        self.active.insert(
            id,
            Active {
                job: req.job,
                pid: req.pid,
                instance: i,
                bytes: req.bytes,
                warps: req.warps,
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
        let waiting = std::mem::take(&mut self.waiting);
        let mut still = VecDeque::with_capacity(waiting.len());
        for (id, req) in waiting {
            let key = (req.job, req.pid);
            let choice = if blocked.contains(&key) || req.bytes > max_free {
                None
            } else {
                let need = if self.pins.contains_key(&key) {
                    0
                } else {
                    queued_max.get(&key).copied().unwrap_or(0)
                };
                self.choice_with(&req, need)
            };
            match choice {
                Some(i) => {
                    placed.push(self.place_on(i, id, &req));
                    max_free = self.max_open_free();
                }
                None => {
                    blocked.insert(key);
                    still.push_back((id, req));
                }
            }
        }
        self.waiting = still;
        placed
    }

    fn release(&mut self, id: TaskId) -> Option<Active> {
        let a = self.active.remove(&id)?;
        let inst = &mut self.instances[a.instance];
        inst.reserved_bytes -= a.bytes;
        inst.warps -= a.warps;
        Some(a)
    }

    /// A task ended. Returns the waiting tasks this made room for.
    pub fn end(&mut self, id: TaskId) -> Result<Vec<Placed>, PlacementError> {
        if self.release(id).is_none() {
            // A waiting task that gives up.
            let before = self.waiting.len();
            self.waiting.retain(|(w, _)| *w != id);
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
        self.pins.remove(&(job, pid));
        self.release_where(|a_job, a_pid| a_job == job && a_pid == pid)
    }

    /// Drops every task of a job that ended or was cancelled.
    pub fn release_job(&mut self, job: JobId) -> (Vec<TaskId>, Vec<Placed>) {
        self.pins.retain(|(j, _), _| *j != job);
        self.release_where(|a_job, _| a_job == job)
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
        dropped.extend(ids);
        (dropped, self.retry())
    }

    /// Opens or closes an instance to shared tasks (closed while held or
    /// drained for an isolated job). Opening may place waiting tasks.
    pub fn set_closed(&mut self, uuid: &str, closed: bool) -> Vec<Placed> {
        let Some(i) = self.index(uuid) else {
            return Vec::new();
        };
        self.instances[i].closed = closed;
        if closed {
            Vec::new()
        } else {
            self.retry()
        }
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
    fn mgb_sm_treats_warps_as_a_hard_limit() {
        let mut b = TaskBook::new(
            Box::new(MgbSmPlacement),
            vec![("I0".into(), 5 * G), ("I1".into(), 5 * G)],
        )
        .with_warp_capacity("I0", 100)
        .with_warp_capacity("I1", 100);
        let first = placed(b.begin(req(1, 1, G, 60)));
        assert_eq!(first.instance, "I0");
        // 60 more warps do not fit I0's 100: first fit goes to I1.
        assert_eq!(placed(b.begin(req(2, 2, G, 60))).instance, "I1");
        // Memory is free everywhere, warps are not: it waits.
        assert!(matches!(
            b.begin(req(3, 3, G, 60)).unwrap(),
            Begin::Waiting(_)
        ));
        // 40 warps would fit I0, but not ahead of the waiting task.
        assert!(matches!(
            b.begin(req(4, 4, G, 40)).unwrap(),
            Begin::Waiting(_)
        ));
        let now = b.end(first.task).unwrap();
        let got: Vec<(JobId, String)> = now.iter().map(|p| (p.job, p.instance.clone())).collect();
        assert_eq!(got, vec![(3, "I0".to_string()), (4, "I0".to_string())]);
        assert!(placement_policy("mgb-sm").is_some());
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
    fn newcomers_do_not_overtake_waiters_that_fit() {
        let mut b = book(&[4 * G]);
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
        /// instance, and once everything active ends and every instance
        /// opens, every waiting task has been placed.
        #[test]
        fn never_over_reserved_and_waiters_are_placed(ops in prop::collection::vec(op(), 1..120)) {
            let sizes = [5 * G, 5 * G, 5 * G, 10 * G, 10 * G];
            let mut b = book(&sizes);
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
