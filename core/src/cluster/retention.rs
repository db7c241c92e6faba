//! How long finished jobs stay in the controller's memory (Slurm's
//! `MinJobAge`): a finished job leaves once it has been over for the
//! minimum age and nothing still needs it; accounting then answers from the
//! store.

use std::collections::{BTreeMap, HashSet};

use super::{Cluster, PastRun};
use crate::job::{Job, JobId, JobState, JobText};

/// Slurm's default `MinJobAge`, seconds.
pub const DEFAULT_MIN_JOB_AGE: u64 = 300;

/// The end time from which finished jobs are held in memory at `now`
/// (`None`: all of them, when `min_age` is 0), for loading at start what
/// [`Cluster::purge_finished`] would keep.
pub fn kept_finished_since(now: i64, min_age: u64) -> Option<i64> {
    (min_age > 0).then(|| now.saturating_sub(i64::try_from(min_age).unwrap_or(i64::MAX)))
}

impl Cluster {
    /// Removes the finished jobs that ended at least `min_age` seconds
    /// before `now`, and returns their ids. A finished job stays while a
    /// job not yet finished names it in a dependency, and an array's tasks
    /// leave together, once all of them may. Their footprints stay learned.
    pub fn purge_finished(&mut self, now: i64, min_age: u64) -> Vec<JobId> {
        let min_age = i64::try_from(min_age).unwrap_or(i64::MAX);
        let needed = self.needed_by_dependencies();
        let old_enough = |j: &Job| {
            j.state.is_final()
                && j.end_time.unwrap_or(j.submit_time).saturating_add(min_age) <= now
                && !needed.contains(&j.id)
        };
        // Every array's tasks may go, or none.
        let mut arrays: BTreeMap<JobId, bool> = BTreeMap::new();
        for j in self.jobs.values() {
            if let Some(t) = &j.spec.array_task {
                let all = arrays.entry(t.array_job_id).or_insert(true);
                *all = *all && old_enough(j);
            }
        }
        let gone: Vec<JobId> = self
            .jobs
            .values()
            .filter(|j| match &j.spec.array_task {
                Some(t) => arrays[&t.array_job_id],
                None => old_enough(j),
            })
            .map(|j| j.id)
            .collect();
        for id in &gone {
            self.forget(*id);
        }
        self.shed_environments();
        gone
    }

    /// Moves job `id`'s script and environment out of memory, for a
    /// controller that keeps them in its store from now on (the launch and
    /// the script's readers fetch them there); `None` when the job is
    /// unknown or its text already left.
    pub fn take_text(&mut self, id: JobId) -> Option<JobText> {
        self.jobs.get_mut(&id).and_then(|j| j.take_text())
    }

    /// A finished job's environment is needed no more (it never starts
    /// again, and the store keeps it): its memory is given back while the
    /// job waits out its minimum age.
    fn shed_environments(&mut self) {
        for j in self
            .jobs
            .values_mut()
            .filter(|j| !Job::keeps_environment(j.state))
        {
            if !j.spec.environment.is_empty() {
                j.spec.environment = Default::default();
            }
        }
    }

    /// Jobs named in the dependencies of jobs not yet finished (with every
    /// task of a named array).
    fn needed_by_dependencies(&self) -> HashSet<JobId> {
        let mut needed = HashSet::new();
        for j in self.jobs.values().filter(|j| !j.state.is_final()) {
            let Some(d) = &j.spec.dependency else {
                continue;
            };
            for id in d.job_ids() {
                needed.extend(super::job_or_array(&self.jobs, id).map(|t| t.id));
            }
        }
        needed
    }

    fn forget(&mut self, id: JobId) {
        let Some(job) = self.jobs.remove(&id) else {
            return;
        };
        self.jobs_by_user.remove(&job.spec.user_name, id);
        self.footprints.retire(&job);
        self.lost_runs.remove(&id);
        *self.purged.entry(job.state).or_default() += 1;
        if let Some(k) = &job.spec.idempotency_key {
            let key = (job.spec.uid, k.clone());
            if self.submissions.get(&key) == Some(&job.submitted_as()) {
                self.submissions.remove(&key);
            }
        }
        if let Some(t) = &job.spec.array_task {
            self.array_limits.remove(&t.array_job_id);
        }
    }

    /// After [`Cluster::restore`] from the jobs still held in memory: what
    /// the store knows of the jobs that left it. New jobs are numbered
    /// after `max_id` (the highest id ever given), and `peaks` are earlier
    /// runs' footprints.
    pub fn restore_history(&mut self, max_id: JobId, peaks: Vec<PastRun>) {
        self.next_id = self.next_id.max(max_id.saturating_add(1));
        self.shed_environments();
        for p in peaks {
            if !self.jobs.contains_key(&p.id) {
                self.footprints.remember(p);
            }
        }
    }

    /// How many jobs ending in `state` left memory since this controller
    /// started (with the jobs still held: a count that never goes down).
    pub fn purged_count(&self, state: JobState) -> u64 {
        self.purged.get(&state).copied().unwrap_or(0)
    }

    /// Peaks kept for jobs no longer in memory.
    pub fn retired_peak_count(&self) -> usize {
        self.footprints.retired_count()
    }
}

#[cfg(test)]
mod tests;
