//! A job's room kept between its processes. A job script that runs
//! several GPU programs one after another (a pipeline: prepare, train,
//! evaluate) asks for a placement once per process. When its last task
//! ends, the memory and compute it held stay reserved for the job a short
//! while ([`crate::placement::DEFAULT_HOLD_BETWEEN_MS`]), so that its next
//! process finds its place again instead of queueing behind jobs that took
//! the room in the gap (as a Slurm job keeps its GPU for its life). The
//! next process of the job is placed there first if it fits in what is
//! kept and free; the keep goes when it is taken, when the node's timer
//! ends it, when its job ends, or when its instance is closed.

use super::{Active, TaskBook};
use crate::job::JobId;
use crate::placement::{Placed, TaskRequest};

/// What became of a job's keep when its next process asked for a place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeepUse {
    /// The process was placed in it.
    Taken,
    /// A waiting task the aging rule protects could use the instance: the
    /// keep was given back and the process went the normal way.
    Barred,
    /// The process did not fit in what was kept and free: given back, the
    /// process went the normal way.
    TooSmall,
}

/// Room kept for a job: on which instance, how much, which keep.
#[derive(Debug, Clone)]
pub(super) struct Kept {
    pub(super) instance: usize,
    pub(super) bytes: u64,
    pub(super) compute: u32,
    pub(super) seq: u64,
}

impl TaskBook {
    /// Keeps rooms between processes (`true`) or not. Memory-blind
    /// policies never keep: they reserve nothing to keep.
    pub fn with_keeping(mut self, on: bool) -> TaskBook {
        self.keeping = on;
        self
    }

    /// Whether room is kept for `job`.
    pub fn keeps_for(&self, job: JobId) -> bool {
        self.kept.contains_key(&job)
    }

    /// Keeps made since the last take: (job, keep number).
    pub fn take_new_keeps(&mut self) -> Vec<(JobId, u64)> {
        std::mem::take(&mut self.new_keeps)
    }

    /// What became of the keep a job's newest process met, if it met one
    /// (taken once: the caller reports it).
    pub fn take_keep_use(&mut self) -> Option<(JobId, KeepUse)> {
        self.keep_use.take()
    }

    /// The tasks `released` (all of one job) ended: if the job has no task
    /// left here, what they held on the instance where they held most is
    /// kept for its next process. Call before the waiting tasks are
    /// retried, so that they do not take it.
    pub(super) fn keep_released(&mut self, released: &[Active]) {
        let Some(job) = released.first().map(|a| a.job) else {
            return;
        };
        if !self.keeping || self.policy.memory_blind() || self.usage_of(job).0 > 0 {
            return;
        }
        let Some(instance) = released.iter().max_by_key(|a| a.bytes).map(|a| a.instance) else {
            return;
        };
        let inst = &self.instances[instance];
        // Nothing is kept where no new process may go, nor where a task
        // waits to grow (growths come first: a keep would stand in its way).
        if !inst.takes_new_processes()
            || inst.owner.is_some_and(|o| o != job)
            || self.growth_pending_on(instance)
        {
            return;
        }
        let on: Vec<&Active> = released.iter().filter(|a| a.instance == instance).collect();
        let bytes = on.iter().map(|a| a.bytes).fold(0u64, u64::saturating_add);
        let compute = on.iter().map(|a| a.compute).fold(0u32, u32::saturating_add);
        if bytes == 0 && compute == 0 {
            return;
        }
        self.discard_keep(job);
        self.keep_seq += 1;
        let seq = self.keep_seq;
        let inst = &mut self.instances[instance];
        inst.reserved_bytes += bytes;
        inst.compute += compute;
        self.kept.insert(
            job,
            Kept {
                instance,
                bytes,
                compute,
                seq,
            },
        );
        self.new_keeps.push((job, seq));
    }

    /// Gives back what is kept for `job` (any keep when `seq` is `None`,
    /// else only keep `seq`: a later keep outlives an earlier timer).
    /// Returns whether there was one; the caller decides whether the
    /// waiting tasks are retried.
    pub(super) fn discard_keep_if(&mut self, job: JobId, seq: Option<u64>) -> bool {
        let Some(k) = self.kept.remove(&job) else {
            return false;
        };
        if seq.is_some_and(|s| s != k.seq) {
            self.kept.insert(job, k);
            return false;
        }
        let inst = &mut self.instances[k.instance];
        inst.reserved_bytes -= k.bytes;
        inst.compute -= k.compute;
        true
    }

    pub(super) fn discard_keep(&mut self, job: JobId) -> bool {
        self.discard_keep_if(job, None)
    }

    /// Keep `seq` of `job` ended (its time is up): given back. Returns the
    /// waiting tasks this placed.
    pub fn end_keep(&mut self, job: JobId, seq: u64) -> Vec<Placed> {
        if self.discard_keep_if(job, Some(seq)) {
            self.retry()
        } else {
            Vec::new()
        }
    }

    /// Gives back what is kept on instance `i` for jobs other than
    /// `except` (it closes, or becomes one job's): a keep there would only
    /// hold it up. What it frees goes to waiting tasks at the next retry
    /// (closing an instance places nothing: its callers rely on that).
    pub(super) fn discard_keeps_on(&mut self, i: usize, except: Option<JobId>) {
        let jobs: Vec<JobId> = self
            .kept
            .iter()
            .filter(|(j, k)| k.instance == i && except != Some(**j))
            .map(|(j, _)| *j)
            .collect();
        for job in jobs {
            self.discard_keep(job);
        }
    }

    /// Whether anything is kept on instance `i`.
    pub(super) fn kept_on(&self, i: usize) -> bool {
        self.kept.values().any(|k| k.instance == i)
    }

    /// Instance `i` was removed: the keeps on later ones move down.
    pub(super) fn shift_keeps_after(&mut self, i: usize) {
        for k in self.kept.values_mut() {
            if k.instance > i {
                k.instance -= 1;
            }
        }
    }

    /// The next process of a job with a keep: given back, then `req` is
    /// placed where it was if it fits there now, ahead of the waiting
    /// tasks (the room was the job's), but not ahead of one the aging
    /// rule bars the instance for, and each one it goes ahead of counts it
    /// (so a job running programs in a loop cannot keep its room from a
    /// waiting task for good). `None`: it goes the normal way.
    pub(super) fn place_in_keep(&mut self, id: u64, req: &TaskRequest) -> Option<Placed> {
        let i = self.kept.get(&req.job)?.instance;
        self.discard_keep(req.job);
        let outcome = if self.barred_by(self.waiting.iter()).contains(&i) {
            KeepUse::Barred
        } else if !self.fits_on(req, i, self.need_total(req), self.ceiling_for(req)) {
            KeepUse::TooSmall
        } else {
            KeepUse::Taken
        };
        self.keep_use = Some((req.job, outcome));
        if outcome != KeepUse::Taken {
            return None;
        }
        let ahead: Vec<u64> = self.waiting.iter().map(|(w, _)| *w).collect();
        self.note_overtaking(&ahead, i);
        Some(self.place_on(i, id, req))
    }

    /// Places the waiting tasks that fit now (after a keep was taken: what
    /// the job's next process left of it goes to them).
    pub fn place_waiting(&mut self) -> Vec<Placed> {
        self.retry()
    }
}

#[cfg(test)]
mod tests {
    use crate::placement::{
        Begin, BlindPlacement, CasePlacement, KeepUse, PlacementPolicy, TaskBook, TaskRequest,
    };

    const G: u64 = 1 << 30;

    fn book(policy: Box<dyn PlacementPolicy>, gib: u64) -> TaskBook {
        TaskBook::new(policy, vec![("I0".into(), gib * G)]).with_keeping(true)
    }

    fn req(job: u64, pid: u32, gib: u64) -> TaskRequest {
        TaskRequest {
            job,
            pid,
            bytes: gib * G,
            warps: 0,
            share: Some(500),
            shape: None,
        }
    }

    fn task(b: &mut TaskBook, job: u64, pid: u32, gib: u64) -> u64 {
        match b.begin(req(job, pid, gib)).unwrap() {
            Begin::Placed(p) => p.task,
            Begin::Waiting(w) => panic!("task {w} of job {job} waits"),
        }
    }

    #[test]
    fn a_job_s_next_process_finds_the_room_its_last_one_left() {
        let mut b = book(Box::new(CasePlacement), 10);
        let first = task(&mut b, 1, 100, 6);
        assert!(matches!(
            b.begin(req(2, 200, 6)).unwrap(),
            Begin::Waiting(_)
        ));
        // Job 1's process ends: its 6 GiB stay kept, job 2 still waits.
        assert!(b.end(first).unwrap().is_empty());
        let keeps = b.take_new_keeps();
        assert_eq!(keeps.len(), 1);
        assert_eq!(b.instances()[0].reserved_bytes, 6 * G);
        // Its next process goes ahead of job 2, into what was kept.
        let second = task(&mut b, 1, 101, 5);
        assert!(!b.keeps_for(1));
        assert_eq!(b.take_keep_use(), Some((1, KeepUse::Taken)));
        assert!(
            b.place_waiting().is_empty(),
            "5 of 10 GiB free: job 2 needs 6"
        );
        assert!(b.end(second).unwrap().is_empty());
        let (job, seq) = b.take_new_keeps()[0];
        // The first keep's timer is stale: nothing happens.
        assert!(b.end_keep(keeps[0].0, keeps[0].1).is_empty());
        assert!(b.keeps_for(1));
        // Its time is up: job 2 gets the room.
        let placed = b.end_keep(job, seq);
        assert_eq!((placed.len(), placed[0].job), (1, 2));
        assert_eq!(b.instances()[0].reserved_bytes, 6 * G);
    }

    #[test]
    fn without_keeping_the_room_goes_to_the_waiting_task_at_once() {
        let mut b = book(Box::new(CasePlacement), 10).with_keeping(false);
        let first = task(&mut b, 1, 100, 6);
        assert!(matches!(
            b.begin(req(2, 200, 6)).unwrap(),
            Begin::Waiting(_)
        ));
        assert_eq!(b.end(first).unwrap()[0].job, 2);
        assert!(b.take_new_keeps().is_empty());
    }

    #[test]
    fn nothing_is_kept_while_the_job_has_other_tasks_or_when_it_ends() {
        let mut b = book(Box::new(CasePlacement), 10);
        let a = task(&mut b, 1, 100, 2);
        let c = task(&mut b, 1, 101, 2);
        b.end(a).unwrap();
        assert!(b.take_new_keeps().is_empty(), "process 101 still runs");
        // Its last process exits: kept; the job ends: given back.
        let (gone, _) = b.release_process(1, 101);
        assert_eq!(gone, vec![c]);
        assert_eq!(b.take_new_keeps().len(), 1);
        b.release_job(1);
        assert!(!b.keeps_for(1));
        assert_eq!(b.instances()[0].reserved_bytes, 0);
    }

    #[test]
    fn a_closed_instance_keeps_nothing_and_a_blind_policy_never_keeps() {
        let mut b = book(Box::new(CasePlacement), 10);
        let a = task(&mut b, 1, 100, 4);
        b.end(a).unwrap();
        assert!(b.keeps_for(1));
        b.set_closed("I0", true);
        assert!(!b.keeps_for(1));
        assert_eq!(b.instances()[0].reserved_bytes, 0);
        let mut blind = book(Box::new(BlindPlacement), 10);
        let a = task(&mut blind, 1, 100, 4);
        blind.end(a).unwrap();
        assert!(!blind.keeps_for(1) && blind.take_new_keeps().is_empty());
    }

    #[test]
    fn a_next_process_bigger_than_what_is_free_with_the_keep_goes_the_normal_way() {
        let mut b = book(Box::new(CasePlacement), 10);
        let first = task(&mut b, 1, 100, 4);
        let other = task(&mut b, 2, 200, 5);
        b.end(first).unwrap();
        // 4 kept + 1 free: 6 GiB does not fit; the keep is given back and
        // the process waits like any other.
        assert!(matches!(
            b.begin(req(1, 101, 6)).unwrap(),
            Begin::Waiting(_)
        ));
        assert!(!b.keeps_for(1));
        assert_eq!(b.take_keep_use(), Some((1, KeepUse::TooSmall)));
        assert_eq!(b.instances()[0].reserved_bytes, 5 * G);
        // Job 2 ends: its room is not kept (its job is over) and goes to job 1.
        assert_eq!(b.release_job(2).1[0].job, 1);
        let _ = other;
    }

    #[test]
    fn keeps_follow_their_instance_when_another_is_removed() {
        let mut b = TaskBook::new(
            Box::new(CasePlacement),
            vec![("I0".into(), 10 * G), ("I1".into(), 10 * G)],
        )
        .with_keeping(true);
        let a = task(&mut b, 1, 100, 8);
        let c = task(&mut b, 2, 200, 8);
        assert_eq!(b.task(c).unwrap().instance, "I1");
        b.end(a).unwrap();
        // I0 holds a keep: it is not idle and cannot go.
        assert!(!b.is_idle("I0") && !b.remove_instance("I0"));
        b.release_job(1);
        b.end(c).unwrap();
        assert!(b.remove_instance("I0"));
        // Job 2's keep moved with I1 and is given back there.
        assert_eq!(b.instances()[0].reserved_bytes, 8 * G);
        let (job, seq) = *b.take_new_keeps().last().unwrap();
        assert_eq!(job, 2);
        b.end_keep(job, seq);
        assert_eq!(b.instances()[0].reserved_bytes, 0);
        b.release_job(2);
        assert!(b.remove_instance("I1"));
    }

    #[test]
    fn a_waiting_task_aged_enough_gets_the_room_before_the_job_s_next_process() {
        let mut b = book(Box::new(CasePlacement), 10).with_max_overtakes(1);
        let first = task(&mut b, 1, 100, 6);
        assert!(matches!(
            b.begin(req(2, 200, 6)).unwrap(),
            Begin::Waiting(_)
        ));
        // Job 1 runs its program again and again: the first time its next
        // process goes ahead of job 2 (overtaking it once) ...
        b.end(first).unwrap();
        let second = task(&mut b, 1, 101, 6);
        b.end(second).unwrap();
        // ... then job 2 has been overtaken enough: the keep is given back
        // and job 1's process waits behind it.
        assert!(matches!(
            b.begin(req(1, 102, 6)).unwrap(),
            Begin::Waiting(_)
        ));
        assert_eq!(b.take_keep_use(), Some((1, KeepUse::Barred)));
        assert_eq!(b.place_waiting()[0].job, 2);
    }

    #[test]
    fn nothing_is_kept_where_a_task_waits_to_grow() {
        let mut b = book(Box::new(CasePlacement), 10);
        let a = task(&mut b, 1, 100, 4);
        let c = task(&mut b, 2, 200, 4);
        // Job 2's task wants 4 GiB more: 2 are free, it waits.
        assert!(matches!(
            b.grow_or_wait(c, 4 * G, 4 * G).unwrap(),
            crate::placement::Growth::Waiting
        ));
        b.end(a).unwrap();
        assert!(!b.keeps_for(1), "kept in the way of a growth");
        assert_eq!(b.take_growth(), vec![(c, true)]);
    }
}
