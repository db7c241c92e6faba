//! What one controller holds: Slurm's `MaxJobCount` (jobs in memory, the
//! finished ones kept for MinJobAge included), `max_script_size` and
//! `MaxArraySize`. A submission beyond any is refused with Slurm's words; nothing already
//! accepted is touched.

use super::{Cluster, ClusterError};
use crate::dependency::Dependency;
use crate::job::JobSpec;

/// The most jobs one dependency may name.
pub const MAX_DEPENDENCY_JOBS: usize = 1_000;

/// Slurm's default MaxJobCount.
pub const DEFAULT_MAX_JOB_COUNT: usize = 10_000;
/// Slurm's default max_script_size (4 MB).
pub const DEFAULT_MAX_SCRIPT_BYTES: usize = 4 << 20;
/// The most jobs of one user the controller holds (queued, running, and
/// finished ones kept for MinJobAge) unless the administrator says
/// otherwise: half of the default MaxJobCount, so no one user can fill
/// the controller for everyone.
pub const DEFAULT_MAX_JOBS_PER_USER: usize = 5_000;
/// The most bytes of scripts, environments and arguments one user's
/// queued and running jobs may hold in the controller's memory unless the
/// administrator says otherwise (256 MiB): with the count alone, 5,000
/// jobs of 4 MB scripts would be 20 GB.
pub const DEFAULT_MAX_BYTES_PER_USER: usize = 256 << 20;

/// The caps on what submissions may add.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubmissionCaps {
    pub max_job_count: usize,
    pub max_script_bytes: usize,
    /// Jobs of one user in memory, as MaxJobCount counts them (root's own
    /// jobs are not counted: root administers the controller).
    pub max_jobs_per_user: usize,
    /// Bytes of scripts, environments and arguments of one user's queued
    /// and running jobs (root's not counted).
    pub max_bytes_per_user: usize,
    /// Largest array index plus one (Slurm's `MaxArraySize`).
    pub max_array_size: u32,
}

impl Default for SubmissionCaps {
    fn default() -> Self {
        SubmissionCaps {
            max_job_count: DEFAULT_MAX_JOB_COUNT,
            max_script_bytes: DEFAULT_MAX_SCRIPT_BYTES,
            max_jobs_per_user: DEFAULT_MAX_JOBS_PER_USER,
            max_bytes_per_user: DEFAULT_MAX_BYTES_PER_USER,
            max_array_size: crate::array::DEFAULT_MAX_ARRAY_SIZE,
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
            max_bytes_per_user: usize::MAX,
            max_array_size: crate::array::MOST_MAX_ARRAY_SIZE,
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
        if spec.array_task.is_some() {
            // Only the controller makes array tasks (`add_submission`): a
            // submission naming one would join another user's array.
            return Err(ClusterError::Refused(
                "array_task is set by the controller for the tasks of an array; submit an array with `array` (sbatch --array)".into(),
            ));
        }
        if spec.script.len() > self.caps.max_script_bytes {
            return Err(ClusterError::ScriptTooLarge {
                size: spec.script.len(),
                max: self.caps.max_script_bytes,
            });
        }
        if let Some(a) = &spec.array {
            a.check(self.caps.max_array_size)
                .map_err(|e| ClusterError::Refused(e.to_string()))?;
        }
        let adding = spec.array.as_ref().map_or(1, |a| a.indices.len());
        if self.jobs.len().saturating_add(adding) > self.caps.max_job_count {
            return Err(ClusterError::TooManyJobs(self.caps.max_job_count));
        }
        self.check_user_caps(spec, adding)
    }

    /// Checks what a dependency of a job of `uid` names: jobs that exist,
    /// at most [`MAX_DEPENDENCY_JOBS`], and only its own user's (root's
    /// jobs may name any): a job named by a waiting job stays in memory
    /// after it ends, so naming other users' jobs would hold them against
    /// their owners' caps and MaxJobCount.
    pub(super) fn check_dependency(&self, uid: u32, d: &Dependency) -> Result<(), ClusterError> {
        let ids: Vec<_> = d.job_ids().collect();
        if ids.len() > MAX_DEPENDENCY_JOBS {
            return Err(ClusterError::Refused(format!(
                "Job dependency problem: a dependency names at most {MAX_DEPENDENCY_JOBS} jobs ({} given)",
                ids.len()
            )));
        }
        for id in ids {
            match self.jobs.get(&id) {
                None => return Err(ClusterError::DependencyOnUnknownJob(id)),
                Some(j) if uid != 0 && j.spec.uid != uid => {
                    return Err(ClusterError::Refused(format!(
                        "Job dependency problem: job {id} belongs to another user; a job may wait only for its own user's jobs"
                    )))
                }
                Some(_) => {}
            }
        }
        Ok(())
    }

    /// One user's jobs in memory (queued, running, and finished ones kept
    /// for MinJobAge, as MaxJobCount counts them: a user who cancels what
    /// they submit still holds those jobs): how many, and the bytes of
    /// scripts, environments and arguments they came with (root's not
    /// counted), from the per-user index: no walk over the user's jobs.
    fn check_user_caps(&self, spec: &JobSpec, adding: usize) -> Result<(), ClusterError> {
        let (max_jobs, max_bytes) = (self.caps.max_jobs_per_user, self.caps.max_bytes_per_user);
        if spec.uid == 0 || (max_jobs == usize::MAX && max_bytes == usize::MAX) {
            return Ok(());
        }
        let (jobs, bytes) = self.jobs_by_user.held(&spec.user_name);
        let violates =
            "Job violates accounting/QOS policy (job submit limit, user's size and/or time limits)";
        if jobs.saturating_add(adding) > max_jobs {
            return Err(ClusterError::Refused(format!(
                "{violates}: user {} may have {max_jobs} jobs in the controller, finished ones kept for MinJobAge included (gctld --max-jobs-per-user)",
                spec.user_name
            )));
        }
        let more = spec.held_bytes().saturating_mul(adding);
        if bytes.saturating_add(more) > max_bytes {
            return Err(ClusterError::Refused(format!(
                "{violates}: the jobs of user {} would total {} bytes of scripts, environments and arguments, over {max_bytes} (gctld --max-bytes-per-user)",
                spec.user_name,
                bytes.saturating_add(more)
            )));
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
    fn arrays_are_held_to_max_array_size_and_checked_as_sent() {
        let mut c = testkit::cluster();
        c.set_submission_caps(SubmissionCaps {
            max_array_size: 11,
            ..SubmissionCaps::default()
        });
        let array = |indices: Vec<u32>| {
            let mut s = testkit::spec("a", false);
            s.array = Some(crate::array::ArrayRequest {
                indices,
                max_running: None,
            });
            s
        };
        assert!(c.submit(array(vec![0, 10]), 0).is_ok());
        let e = c.submit(array(vec![0, 11]), 0).unwrap_err();
        assert!(e.to_string().contains("MaxArraySize-1 (10)"), "{e}");
        // What a client may send that the parser never makes: refused,
        // nothing taken.
        for bad in [vec![], vec![3, 2], vec![4, 4]] {
            let e = c.submit(array(bad.clone()), 0).unwrap_err();
            assert!(e.to_string().starts_with("invalid array"), "{bad:?}: {e}");
        }
        assert_eq!(c.jobs().count(), 2, "the first array's two tasks only");
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
        // A cancelled job still counts while it is kept (MinJobAge): a
        // user cannot fill MaxJobCount by cancelling what they submit.
        c.cancel(a, None, 1).unwrap();
        assert!(c.submit(testkit::spec("f", false), 2).is_err());
    }

    #[test]
    fn a_submission_naming_an_array_task_is_refused() {
        let mut c = testkit::cluster();
        let mut forged = testkit::spec("fake", false);
        forged.array_task = Some(crate::array::ArrayTask {
            array_job_id: 7,
            task_id: 99,
            min: 0,
            max: 99,
            step: 1,
            count: 100,
            max_running: Some(0),
        });
        let e = c.submit(forged, 0).unwrap_err().to_string();
        assert!(e.contains("array_task"), "{e}");
        assert_eq!(c.jobs().count(), 0);
    }

    #[test]
    fn one_users_jobs_hold_bounded_bytes() {
        let mut c = testkit::cluster();
        c.set_submission_caps(SubmissionCaps {
            max_bytes_per_user: 4096,
            ..SubmissionCaps::default()
        });
        let mut big = testkit::spec("a", false);
        big.script = format!("#!/bin/sh\n#{}\n", "x".repeat(1500));
        c.submit(big.clone(), 0).unwrap();
        c.submit(big.clone(), 0).unwrap();
        let e = c.submit(big, 0).unwrap_err().to_string();
        assert!(e.contains("--max-bytes-per-user"), "{e}");
        assert_eq!(c.pending_count(), 2, "nothing more was accepted");
    }

    #[test]
    fn a_dependency_names_only_its_own_users_jobs() {
        let mut c = testkit::cluster();
        let mut other = testkit::spec("theirs", false);
        other.user_name = "v".into();
        other.uid = 2;
        let (theirs, _) = c.submit(other, 0).unwrap();
        let (mine, _) = c.submit(testkit::spec("mine", false), 0).unwrap();
        let mut pin = testkit::spec("pin", false);
        pin.dependency = Some(Dependency::parse(&format!("afterany:{theirs}")).unwrap());
        let e = c.submit(pin.clone(), 0).unwrap_err().to_string();
        assert!(e.contains("belongs to another user"), "{e}");
        pin.dependency = Some(Dependency::parse(&format!("afterany:{mine}")).unwrap());
        c.submit(pin, 0).unwrap();
        // Root's jobs may wait for anyone's.
        let mut root = testkit::spec("root", false);
        root.uid = 0;
        root.dependency = Some(Dependency::parse(&format!("afterok:{theirs}")).unwrap());
        c.submit(root, 0).unwrap();
    }
}
