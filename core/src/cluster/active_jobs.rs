//! Each user's jobs not yet known to be final, for the counts that
//! submission limits need (`MaxSubmitJobs`, `MaxSubmitJobsPerUser`): a
//! submission looks at its own user's jobs, not at every job the
//! controller holds. A job is added when it is submitted (or restored);
//! jobs that became final or were forgotten are dropped from their user's
//! list when it has doubled since it was last pruned (so adding stays
//! cheap on average), and nothing else has to tell the index.

use std::collections::{BTreeMap, HashMap};

use crate::job::{Job, JobId};

/// A user's list is pruned once it is this long at least.
const PRUNE_FROM: usize = 64;

#[derive(Debug, Default)]
pub(super) struct ActiveByUser {
    /// Each user's jobs, and how many were left at the last prune.
    by_user: HashMap<String, (Vec<JobId>, usize)>,
}

impl ActiveByUser {
    /// Adds job `id` of `user`; prunes the user's list (against `jobs`)
    /// when it has doubled since it was last pruned.
    pub fn add(&mut self, user: &str, id: JobId, jobs: &BTreeMap<JobId, Job>) {
        let (ids, kept) = self.by_user.entry(user.to_string()).or_default();
        ids.push(id);
        if ids.len() >= PRUNE_FROM.max(2 * *kept) {
            ids.retain(|i| *i == id || jobs.get(i).is_some_and(|j| !j.state.is_final()));
            *kept = ids.len();
        }
    }

    /// `user`'s jobs (some may have become final since the last prune).
    pub fn of(&self, user: &str) -> &[JobId] {
        self.by_user
            .get(user)
            .map_or(&[], |(ids, _)| ids.as_slice())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::{JobSpec, JobState};

    #[test]
    fn a_users_list_loses_final_and_forgotten_jobs_once_it_has_doubled() {
        let mut jobs = BTreeMap::new();
        let mut a = ActiveByUser::default();
        let n = PRUNE_FROM as JobId;
        for id in 1..n {
            jobs.insert(id, Job::new(id, JobSpec::default(), 0));
            a.add("ann", id, &jobs);
        }
        a.add("bob", 1000, &jobs);
        // Half of ann's end or are forgotten: still listed until it prunes.
        for id in 1..n / 2 {
            if id % 2 == 0 {
                jobs.get_mut(&id)
                    .unwrap()
                    .transition(JobState::Cancelled, 1)
                    .unwrap();
            } else {
                jobs.remove(&id);
            }
        }
        assert_eq!(a.of("ann").len(), PRUNE_FROM - 1);
        jobs.insert(n, Job::new(n, JobSpec::default(), 0));
        a.add("ann", n, &jobs);
        let left: Vec<JobId> = (n / 2..=n).collect();
        assert_eq!(a.of("ann"), left.as_slice());
        assert_eq!(a.of("bob"), [1000]);
        assert!(a.of("cem").is_empty());
    }
}
