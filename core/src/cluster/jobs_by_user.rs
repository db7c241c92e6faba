//! Each user's jobs held in memory, for the counts that submission limits
//! need (`MaxSubmitJobs`, `MaxSubmitJobsPerUser`, the per-user caps): a
//! submission looks at its own user's jobs, not at every job the
//! controller holds. A job is added when it is submitted (or restored)
//! and removed when it is forgotten (retention) or withdrawn, so the index
//! holds exactly the jobs in memory: its finished ones only until
//! retention forgets them. With each job, the bytes of script,
//! environment and arguments it came with; their sum per user is kept, so
//! the byte cap costs a submission nothing.

use std::collections::{BTreeMap, HashMap};

use crate::job::JobId;

#[derive(Debug, Default)]
struct UserJobs {
    bytes: BTreeMap<JobId, usize>,
    total: usize,
}

#[derive(Debug, Default)]
pub(super) struct JobsByUser {
    by_user: HashMap<String, UserJobs>,
}

impl JobsByUser {
    /// Adds job `id` of `user`, which came with `bytes`.
    pub fn add(&mut self, user: &str, id: JobId, bytes: usize) {
        // The user's name is copied only for a user's first job.
        let jobs = match self.by_user.get_mut(user) {
            Some(jobs) => jobs,
            None => self.by_user.entry(user.to_string()).or_default(),
        };
        if let Some(old) = jobs.bytes.insert(id, bytes) {
            jobs.total -= old;
        }
        jobs.total += bytes;
    }

    pub fn remove(&mut self, user: &str, id: JobId) {
        if let Some(jobs) = self.by_user.get_mut(user) {
            if let Some(b) = jobs.bytes.remove(&id) {
                jobs.total -= b;
            }
            if jobs.bytes.is_empty() {
                self.by_user.remove(user);
            }
        }
    }

    /// `user`'s jobs in memory.
    pub fn of(&self, user: &str) -> impl Iterator<Item = JobId> + '_ {
        self.by_user
            .get(user)
            .into_iter()
            .flat_map(|j| j.bytes.keys())
            .copied()
    }

    /// How many jobs `user` has in memory, and the bytes they came with.
    pub fn held(&self, user: &str) -> (usize, usize) {
        self.by_user
            .get(user)
            .map_or((0, 0), |j| (j.bytes.len(), j.total))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_users_jobs_are_listed_until_removed() {
        let mut a = JobsByUser::default();
        a.add("ann", 2, 10);
        a.add("ann", 1, 5);
        a.add("bob", 3, 1);
        assert_eq!(a.of("ann").collect::<Vec<_>>(), [1, 2]);
        assert_eq!(a.held("ann"), (2, 15));
        a.add("ann", 1, 7);
        assert_eq!(a.held("ann"), (2, 17), "a job added again counts once");
        a.remove("ann", 1);
        a.remove("ann", 2);
        a.remove("ann", 2);
        assert_eq!(a.of("ann").count(), 0);
        assert_eq!(a.of("bob").collect::<Vec<_>>(), [3]);
        assert!(!a.by_user.contains_key("ann"), "no empty lists kept");
    }
}
