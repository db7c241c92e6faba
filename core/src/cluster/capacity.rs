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

/// The caps on what submissions may add.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubmissionCaps {
    pub max_job_count: usize,
    pub max_script_bytes: usize,
}

impl Default for SubmissionCaps {
    fn default() -> Self {
        SubmissionCaps {
            max_job_count: DEFAULT_MAX_JOB_COUNT,
            max_script_bytes: DEFAULT_MAX_SCRIPT_BYTES,
        }
    }
}

impl SubmissionCaps {
    /// No caps: the simulator and benchmarks, which hold what they make.
    pub fn unlimited() -> SubmissionCaps {
        SubmissionCaps {
            max_job_count: usize::MAX,
            max_script_bytes: usize::MAX,
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
        });
        let mut big = testkit::spec("j", false);
        big.script = format!("#!/bin/sh\n{}\n", "#".repeat(100));
        let e = c.submit(big, 0).unwrap_err();
        assert!(e.to_string().contains("max_script_size"), "{e}");
        assert_eq!(c.jobs().count(), 0, "nothing was accepted");
    }
}
