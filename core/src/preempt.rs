//! Preemption by QOS (Slurm's `PreemptType=preempt/qos`): a job that
//! cannot start for want of resources, whose QOS may preempt others
//! (`Preempt=`), has running jobs of those QOS on one node requeued,
//! cancelled or suspended (`PreemptMode=REQUEUE|CANCEL|SUSPEND`) to make
//! room, the node then held for it. A suspended job gives back only its
//! CPUs (see `crate::suspension`), so suspending makes room only for a
//! job that waits for CPUs. Which jobs: on the node where the fewest nodes' work is
//! lost (a job on several nodes loses its run on each), jobs on that node
//! alone before jobs on several, the youngest first (the latest started
//! lose the least work). Pure.

use serde::{Deserialize, Serialize};

use crate::job_state::JobId;

/// What happens to a preempted job.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum PreemptMode {
    /// No preemption.
    #[default]
    Off,
    /// Back to the queue (its node kills it; it starts again later).
    Requeue,
    /// Cancelled.
    Cancel,
    /// Stopped (SIGSTOP) until the job it was stopped for has ended, then
    /// continued: it keeps its memory, GPU instances and GPU memory, and
    /// gives back its CPUs.
    Suspend,
}

/// A preemption mode gsched does not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PreemptModeError(pub String);

impl From<String> for PreemptModeError {
    fn from(why: String) -> Self {
        PreemptModeError(why)
    }
}

impl PreemptMode {
    pub fn parse(s: &str) -> Result<PreemptMode, PreemptModeError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "off" | "none" => Ok(PreemptMode::Off),
            "requeue" => Ok(PreemptMode::Requeue),
            "cancel" => Ok(PreemptMode::Cancel),
            "suspend" => Ok(PreemptMode::Suspend),
            other => Err(PreemptModeError(format!(
                "'{other}': gsched preempts with off, requeue, cancel or suspend"
            ))),
        }
    }
}

/// A preempted job in its QOS's grace time: SIGTERM was sent at `since`;
/// at `until` it is requeued (or cancelled), for job `for_job`. Kept with
/// the job (and stored with it), so a controller that restarts meanwhile
/// neither forgets how the job's end counts nor gives it a second grace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grace {
    pub since: i64,
    pub until: i64,
    pub requeue: bool,
    pub for_job: JobId,
}

/// A running job on the node that may be preempted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub id: JobId,
    pub start: i64,
    /// The nodes it runs on (all of them lose its run).
    pub nodes: u32,
    pub cpus: u32,
    pub memory_mib: u64,
    /// The node's instances it holds (indices).
    pub instances: Vec<usize>,
    /// Whether preempting it ends its processes (requeue, cancel) and so
    /// frees its memory, instances and worker, or only stops them
    /// (suspend: its CPUs alone).
    pub ends: bool,
}

impl Candidate {
    /// What preempting it frees under `mode`: a suspended job gives back
    /// its CPUs alone.
    pub fn under(mut self, mode: PreemptMode) -> Candidate {
        self.ends = mode != PreemptMode::Suspend;
        if !self.ends {
            self.memory_mib = 0;
            self.instances.clear();
        }
        self
    }
}

/// What the node has free now, and what the waiting job needs there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Room {
    pub free_cpus: u32,
    pub free_memory_mib: u64,
    pub free_workers: u32,
    /// Per instance: free now (no job, no shared task, not drained).
    pub free_instances: Vec<bool>,
    pub need_cpus: u32,
    pub need_memory_mib: u64,
    /// How many instances it needs, and which would do.
    pub need_instances: usize,
    pub satisfies: Vec<bool>,
}

impl Room {
    /// Whether the waiting job fits without preempting anyone.
    pub fn fits_now(&self) -> bool {
        self.fits(&[])
    }

    fn fits(&self, chosen: &[&Candidate]) -> bool {
        let cpus = self.free_cpus as u64 + chosen.iter().map(|c| c.cpus as u64).sum::<u64>();
        let mem = self.free_memory_mib + chosen.iter().map(|c| c.memory_mib).sum::<u64>();
        let workers = self.free_workers as usize + chosen.iter().filter(|c| c.ends).count();
        let instances = (0..self.satisfies.len())
            .filter(|i| self.satisfies[*i])
            .filter(|i| {
                self.free_instances.get(*i).copied().unwrap_or(false)
                    || chosen.iter().any(|c| c.instances.contains(i))
            })
            .count();
        cpus >= self.need_cpus as u64
            && mem >= self.need_memory_mib
            && workers >= 1
            && instances >= self.need_instances
    }
}

/// The jobs to preempt on a node so that the waiting job fits there: jobs
/// on this node alone before jobs on several (those lose their run on
/// every node), the youngest first, until it fits; then any of them it
/// would fit without (oldest first) spared; `None` if all of them would
/// not do.
pub fn victims(room: &Room, candidates: &[Candidate]) -> Option<Vec<JobId>> {
    let mut order: Vec<&Candidate> = candidates.iter().collect();
    order.sort_by_key(|c| (c.nodes, std::cmp::Reverse(c.start), c.id));
    let mut chosen: Vec<&Candidate> = Vec::new();
    for c in order {
        if room.fits(&chosen) {
            break;
        }
        chosen.push(c);
    }
    if !room.fits(&chosen) || chosen.is_empty() {
        return None;
    }
    // Spare those it does not need, the oldest first.
    let mut i = chosen.len();
    while i > 0 {
        i -= 1;
        let without: Vec<&Candidate> = chosen
            .iter()
            .enumerate()
            .filter(|(k, _)| *k != i)
            .map(|(_, c)| *c)
            .collect();
        if room.fits(&without) {
            chosen = without;
        }
    }
    Some(chosen.iter().map(|c| c.id).collect())
}

/// A shared job on an instance that may be preempted for a waiting task:
/// its id, when it started, the bytes it holds there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskCandidate {
    pub id: JobId,
    pub start: i64,
    pub bytes: u64,
}

/// The shared jobs to preempt on an instance with `free` bytes so that a
/// task of `need` bytes fits: the youngest first until it fits, then any
/// it would fit without (oldest first) spared; `None` if all of them would
/// not do (or it fits already).
pub fn task_victims(free: u64, need: u64, candidates: &[TaskCandidate]) -> Option<Vec<JobId>> {
    if free >= need {
        return None;
    }
    let mut order: Vec<&TaskCandidate> = candidates.iter().collect();
    order.sort_by_key(|c| (std::cmp::Reverse(c.start), c.id));
    let freed = |chosen: &[&TaskCandidate]| free + chosen.iter().map(|c| c.bytes).sum::<u64>();
    let mut chosen: Vec<&TaskCandidate> = Vec::new();
    for c in order {
        if freed(&chosen) >= need {
            break;
        }
        chosen.push(c);
    }
    if freed(&chosen) < need {
        return None;
    }
    let mut i = chosen.len();
    while i > 0 {
        i -= 1;
        let without: Vec<&TaskCandidate> = chosen
            .iter()
            .enumerate()
            .filter(|(k, _)| *k != i)
            .map(|(_, c)| *c)
            .collect();
        if freed(&without) >= need {
            chosen = without;
        }
    }
    Some(chosen.iter().map(|c| c.id).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cand(id: JobId, start: i64, cpus: u32, instances: Vec<usize>) -> Candidate {
        Candidate {
            id,
            start,
            nodes: 1,
            cpus,
            memory_mib: 0,
            instances,
            ends: true,
        }
    }

    fn room(free_cpus: u32, need_cpus: u32) -> Room {
        Room {
            free_cpus,
            free_memory_mib: 0,
            free_workers: 4,
            free_instances: vec![false, false],
            need_cpus,
            need_memory_mib: 0,
            need_instances: 0,
            satisfies: vec![true, true],
        }
    }

    #[test]
    fn the_youngest_go_first_and_only_as_many_as_needed() {
        let c = [
            cand(1, 10, 4, vec![]),
            cand(2, 20, 4, vec![]),
            cand(3, 30, 4, vec![]),
        ];
        // 4 CPUs missing: the youngest job alone.
        assert_eq!(victims(&room(0, 4), &c), Some(vec![3]));
        // 8 missing: the two youngest.
        assert_eq!(victims(&room(0, 8), &c), Some(vec![3, 2]));
        // More than all of them free: none.
        assert_eq!(victims(&room(0, 20), &c), None);
        // It fits already: nothing to preempt (the caller waits).
        assert_eq!(victims(&room(8, 4), &c), None);
    }

    #[test]
    fn instances_are_freed_by_the_jobs_that_hold_them() {
        let mut r = room(64, 1);
        r.need_instances = 1;
        r.satisfies = vec![false, true];
        // Job 5 (younger) holds an instance that would not do; job 4 the
        // one that would: only job 4 goes.
        let c = [cand(4, 10, 1, vec![1]), cand(5, 20, 1, vec![0])];
        assert_eq!(victims(&r, &c), Some(vec![4]));
    }

    #[test]
    fn jobs_on_one_node_go_before_a_younger_one_on_several() {
        let mut r = room(64, 1);
        r.need_instances = 1;
        let mut wide = cand(6, 30, 1, vec![0]);
        wide.nodes = 4;
        let c = [cand(4, 10, 1, vec![1]), wide.clone()];
        assert_eq!(victims(&r, &c), Some(vec![4]));
        // Where only the job on several nodes holds what is needed, it
        // goes.
        r.satisfies = vec![true, false];
        assert_eq!(victims(&r, &[cand(4, 10, 1, vec![1]), wide]), Some(vec![6]));
    }

    #[test]
    fn a_waiting_task_takes_the_memory_of_the_youngest_jobs_it_needs() {
        let c = |id, start, bytes| TaskCandidate { id, start, bytes };
        let jobs = [c(1, 10, 4), c(2, 20, 2), c(3, 30, 1)];
        // 2 free, 4 needed: the youngest (1 byte) is not enough alone;
        // with the next it is; the youngest is then spared if not needed.
        assert_eq!(task_victims(2, 4, &jobs), Some(vec![2]));
        assert_eq!(task_victims(2, 5, &jobs), Some(vec![3, 2]));
        assert_eq!(task_victims(0, 8, &jobs), None, "not enough in all");
        assert_eq!(task_victims(4, 4, &jobs), None, "it fits already");
    }

    #[test]
    fn modes_read_and_others_are_refused_by_name() {
        assert_eq!(PreemptMode::parse("REQUEUE"), Ok(PreemptMode::Requeue));
        assert_eq!(PreemptMode::parse("cancel"), Ok(PreemptMode::Cancel));
        assert_eq!(PreemptMode::parse("off"), Ok(PreemptMode::Off));
        assert_eq!(PreemptMode::parse("Suspend"), Ok(PreemptMode::Suspend));
        assert!(PreemptMode::parse("gang")
            .unwrap_err()
            .to_string()
            .contains("'gang'"));
    }

    #[test]
    fn suspending_frees_cpus_but_not_instances_memory_or_workers() {
        let held = cand(1, 10, 4, vec![0]).under(PreemptMode::Suspend);
        assert!(held.instances.is_empty() && !held.ends);
        // CPUs: suspending makes room.
        assert_eq!(
            victims(&room(0, 4), std::slice::from_ref(&held)),
            Some(vec![1])
        );
        // An instance: it does not.
        let mut r = room(64, 1);
        r.need_instances = 1;
        assert_eq!(victims(&r, std::slice::from_ref(&held)), None);
        // Memory: it does not either.
        let mut r = room(64, 1);
        r.need_memory_mib = 1024;
        let mut big = cand(2, 10, 1, vec![]);
        big.memory_mib = 4096;
        assert_eq!(
            victims(&r, &[big.clone().under(PreemptMode::Suspend)]),
            None
        );
        assert_eq!(
            victims(&r, &[big.under(PreemptMode::Requeue)]),
            Some(vec![2])
        );
        // No free worker: a stopped job still holds its own.
        let mut r = room(0, 4);
        r.free_workers = 0;
        assert_eq!(
            victims(&r, &[cand(3, 10, 4, vec![]).under(PreemptMode::Suspend)]),
            None
        );
        assert_eq!(victims(&r, &[cand(3, 10, 4, vec![])]), Some(vec![3]));
    }
}
