//! Shared jobs expected to run longest start first. Under submission
//! order, the launch pass looks at a window of the oldest pending shared
//! jobs; among those whose run time is known from earlier runs (the
//! longest of the latest few, `Learned::runtime_secs`), the longest take
//! the places in the window first, so that the jobs that set the
//! makespan are not the last to start. Jobs with no known run time (a
//! program's first run) keep their place in arrival order, and so does a
//! job that has waited [`MAX_REORDERED_WAIT_SECS`]: a stream of long jobs
//! cannot hold a short one back for ever.

use super::Cluster;
use crate::job::JobId;

/// The window looked at per free worker.
pub const WINDOW_PER_WORKER: usize = 4;

/// A job pending this long keeps its place in arrival order.
pub const MAX_REORDERED_WAIT_SECS: i64 = 300;

impl Cluster {
    /// Reorders `ids` (oldest first): see the module documentation.
    pub(super) fn longest_first(&self, ids: &mut [JobId], now: i64) {
        let runtime = |id: &JobId| -> Option<i64> {
            let job = self.jobs.get(id)?;
            if now.saturating_sub(job.submit_time) >= MAX_REORDERED_WAIT_SECS {
                return None;
            }
            self.learned(*id).runtime_secs
        };
        let known: Vec<(usize, i64, JobId)> = ids
            .iter()
            .enumerate()
            .filter_map(|(k, id)| runtime(id).map(|r| (k, r, *id)))
            .collect();
        let mut by_length: Vec<(i64, JobId)> = known.iter().map(|&(_, r, id)| (r, id)).collect();
        // Longest first; equal ones oldest first (ids grow with time).
        by_length.sort_by_key(|&(r, id)| (std::cmp::Reverse(r), id));
        for (&(k, _, _), (_, id)) in known.iter().zip(by_length) {
            ids[k] = id;
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::cluster::testkit::{cluster, ended, launch, spec};

    #[test]
    fn known_long_jobs_take_the_places_of_known_short_ones() {
        let mut c = cluster();
        // Earlier runs: "long" took 100 s, "short" 10 s.
        let (l0, _) = c.submit(spec("long", false), 0).unwrap();
        let (s0, _) = c.submit(spec("short", false), 0).unwrap();
        launch(&mut c, 0);
        c.job_ended("n1", &ended(s0, 0, 0, 10)).unwrap();
        c.job_ended("n1", &ended(l0, 0, 0, 100)).unwrap();
        let mut id = |name: &str, at| c.submit(spec(name, false), at).unwrap().0;
        let old = id("short", 600);
        let s1 = id("short", 1000);
        let new = id("first-run", 1000);
        let l1 = id("long", 1000);
        let mut ids = vec![s1, new, l1];
        c.longest_first(&mut ids, 1001);
        assert_eq!(ids, vec![l1, new, s1], "the unknown keeps its place");
        // A short job pending 300 s keeps its place too.
        let mut ids = vec![old, l1];
        c.longest_first(&mut ids, 900);
        assert_eq!(ids, vec![old, l1]);
        let mut ids = vec![s1, l1];
        c.longest_first(&mut ids, 1001);
        assert_eq!(ids, vec![l1, s1]);
    }
}
