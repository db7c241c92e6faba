//! Each user's jobs held in memory, for the counts that submission limits
//! need (`MaxSubmitJobs`, `MaxSubmitJobsPerUser`): a submission looks at
//! its own user's jobs, not at every job the controller holds. A job is
//! added when it is submitted (or restored) and removed when it is
//! forgotten (retention) or withdrawn, so the index holds exactly the jobs
//! in memory: its finished ones only until retention forgets them.

use std::collections::{BTreeSet, HashMap};

use crate::job::JobId;

#[derive(Debug, Default)]
pub(super) struct JobsByUser {
    by_user: HashMap<String, BTreeSet<JobId>>,
}

impl JobsByUser {
    pub fn add(&mut self, user: &str, id: JobId) {
        // The user's name is copied only for a user's first job.
        match self.by_user.get_mut(user) {
            Some(ids) => {
                ids.insert(id);
            }
            None => {
                self.by_user.insert(user.to_string(), BTreeSet::from([id]));
            }
        }
    }

    pub fn remove(&mut self, user: &str, id: JobId) {
        if let Some(ids) = self.by_user.get_mut(user) {
            ids.remove(&id);
            if ids.is_empty() {
                self.by_user.remove(user);
            }
        }
    }

    /// `user`'s jobs in memory.
    pub fn of(&self, user: &str) -> impl Iterator<Item = JobId> + '_ {
        self.by_user.get(user).into_iter().flatten().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_users_jobs_are_listed_until_removed() {
        let mut a = JobsByUser::default();
        a.add("ann", 2);
        a.add("ann", 1);
        a.add("bob", 3);
        assert_eq!(a.of("ann").collect::<Vec<_>>(), [1, 2]);
        a.remove("ann", 1);
        a.remove("ann", 2);
        a.remove("ann", 2);
        assert_eq!(a.of("ann").count(), 0);
        assert_eq!(a.of("bob").collect::<Vec<_>>(), [3]);
        assert!(!a.by_user.contains_key("ann"), "no empty lists kept");
    }
}
