//! What one controller holds: Slurm's `MaxJobCount` (jobs in memory, the
//! finished ones kept for MinJobAge included) and `max_script_size`. A
//! submission beyond either is refused with Slurm's words; nothing already
//! accepted is touched.

use super::{Cluster, ClusterError};
use crate::job::JobSpec;

/// Slurm's default MaxJobCount.
pub const DEFAULT_MAX_JOB_COUNT: usize = 10_000;
/// Slurm's default max_script_size (4 MB).
pub const DEFAULT_MAX_SCRIPT_BYTES: usize = 4 << 20;
/// The most jobs one user may have queued or running at once unless the
/// administrator says otherwise: half of the default MaxJobCount, so no
/// one user can fill the controller for everyone.
pub const DEFAULT_MAX_JOBS_PER_USER: usize = 5_000;

/// The caps on what submissions may add.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubmissionCaps {
    pub max_job_count: usize,
    pub max_script_bytes: usize,
    /// Jobs of one user queued or running (root's own jobs are not
    /// counted: root administers the controller).
    pub max_jobs_per_user: usize,
}

impl Default for SubmissionCaps {
    fn default() -> Self {
        SubmissionCaps {
            max_job_count: DEFAULT_MAX_JOB_COUNT,
            max_script_bytes: DEFAULT_MAX_SCRIPT_BYTES,
            max_jobs_per_user: DEFAULT_MAX_JOBS_PER_USER,
        }
    }
}

impl SubmissionCaps {
    /// No caps: the simulator and benchmarks, which hold what they make.
    pub fn unlimited() -> SubmissionCaps {
        SubmissionCaps {
            max_job_count: usize::MAX,
            max_script_bytes: usize::MAX,
            max_jobs_per_user: usize::MAX,
        }
    }
}

impl Cluster {
    pub fn set_submission_caps(&mut self, caps: SubmissionCaps) {
        self.caps = caps;
    }

    /// Refuses a submission whose script is too large or whose jobs (every
    /// task of an array) would take the controller past MaxJobCount.
    pub(super) fn check_caps(&self, spec: &JobSpec) -> Result<(), ClusterError> {
        if spec.script.len() > self.caps.max_script_bytes {
            return Err(ClusterError::ScriptTooLarge {
                size: spec.script.len(),
                max: self.caps.max_script_bytes,
            });
        }
        let adding = spec.array.as_ref().map_or(1, |a| a.indices.len().max(1));
        if self.jobs.len().saturating_add(adding) > self.caps.max_job_count {
            return Err(ClusterError::TooManyJobs(self.caps.max_job_count));
        }
        let max = self.caps.max_jobs_per_user;
        if spec.uid != 0 && max != usize::MAX {
            let active = self.active_jobs_of(&spec.user_name, |_| true) as usize;
            if active.saturating_add(adding) > max {
                return Err(ClusterError::Refused(format!(
                    "Job violates accounting/QOS policy (job submit limit, user's size and/or time limits): user {} may have {max} jobs queued or running (gctld --max-jobs-per-user)",
                    spec.user_name
                )));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::testkit;

    #[test]
    fn submissions_stop_at_max_job_count_and_max_script_size() {
        let mut c = testkit::cluster();
        c.set_submission_caps(SubmissionCaps {
            max_job_count: 3,
            max_script_bytes: 64,
            ..SubmissionCaps::default()
        });
        for _ in 0..3 {
            c.submit(testkit::spec("j", false), 0).unwrap();
        }
        let e = c.submit(testkit::spec("j", false), 0).unwrap_err();
        assert!(matches!(e, ClusterError::TooManyJobs(3)), "{e}");
        assert!(e.to_string().contains("MaxJobCount"));
        let mut c = testkit::cluster();
        c.set_submission_caps(SubmissionCaps {
            max_job_count: 3,
            max_script_bytes: 64,
            ..SubmissionCaps::default()
        });
        let mut big = testkit::spec("j", false);
        big.script = format!("#!/bin/sh\n{}\n", "#".repeat(100));
        let e = c.submit(big, 0).unwrap_err();
        assert!(e.to_string().contains("max_script_size"), "{e}");
        assert_eq!(c.jobs().count(), 0, "nothing was accepted");
    }

    #[test]
    fn one_user_cannot_fill_the_controller() {
        let mut c = testkit::cluster();
        c.set_submission_caps(SubmissionCaps {
            max_jobs_per_user: 2,
            ..SubmissionCaps::default()
        });
        let (a, _) = c.submit(testkit::spec("a", false), 0).unwrap();
        c.submit(testkit::spec("b", false), 0).unwrap();
        let e = c.submit(testkit::spec("c", false), 0).unwrap_err();
        assert!(e.to_string().contains("--max-jobs-per-user"), "{e}");
        // Another user, and root, still may.
        let mut other = testkit::spec("d", false);
        other.user_name = "v".into();
        other.uid = 2;
        c.submit(other, 0).unwrap();
        let mut root = testkit::spec("e", false);
        root.user_name = "root".into();
        root.uid = 0;
        c.submit(root, 0).unwrap();
        // A finished job no longer counts.
        c.cancel(a, None, 1).unwrap();
        c.submit(testkit::spec("f", false), 2).unwrap();
    }
}
