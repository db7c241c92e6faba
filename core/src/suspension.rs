//! A run stopped and started again (Slurm's SUSPENDED): by an
//! administrator (`scontrol suspend`/`resume`) or for a job of a higher
//! QOS (`PreemptMode=SUSPEND`). Its node stops every process of the job
//! (SIGSTOP) and continues them (SIGCONT); its time limit and its elapsed
//! time leave out the time it was stopped. What a suspended job keeps: its
//! host memory, its GPU instances and the GPU memory its processes hold
//! (a stopped process keeps its CUDA context). What it gives back: its
//! CPUs, and the GPU time it would have used. Pure.

use serde::{Deserialize, Serialize};

use crate::job_state::JobId;

/// The suspensions of a job's current run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Suspension {
    /// Since when it is stopped; `None`: it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<i64>,
    /// The job it was stopped for (preemption); `None`: by an
    /// administrator, and only one resumes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub for_job: Option<JobId>,
    /// Seconds it was stopped before `since` (earlier suspensions).
    #[serde(default)]
    pub secs: i64,
}

impl Suspension {
    pub fn is_suspended(&self) -> bool {
        self.since.is_some()
    }

    /// Seconds stopped in all, up to `now` while it is.
    pub fn secs_until(&self, now: i64) -> i64 {
        self.secs + self.since.map_or(0, |s| (now - s).max(0))
    }

    /// Stops it at `now` (for `for_job`, or by an administrator); false if
    /// it already was.
    pub fn suspend(&mut self, now: i64, for_job: Option<JobId>) -> bool {
        if self.is_suspended() {
            return false;
        }
        self.since = Some(now);
        self.for_job = for_job;
        true
    }

    /// Runs it again at `now`; false if it was not stopped.
    pub fn resume(&mut self, now: i64) -> bool {
        let Some(since) = self.since.take() else {
            return false;
        };
        self.secs += (now - since).max(0);
        self.for_job = None;
        true
    }
}

/// A time limit that leaves out suspended time: how long a run that
/// started at `start`, with `limit` seconds, may still run at `now`
/// (`None`: it is stopped, so its limit does not run down).
pub fn time_left(start: i64, limit: i64, suspension: &Suspension, now: i64) -> Option<i64> {
    if suspension.is_suspended() {
        return None;
    }
    Some(
        start
            .saturating_add(limit)
            .saturating_add(suspension.secs)
            .saturating_sub(now)
            .max(0),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stopped_time_is_added_up_and_left_out_of_the_limit() {
        let mut s = Suspension::default();
        assert_eq!(time_left(100, 60, &s, 130), Some(30));
        assert!(s.suspend(130, Some(7)));
        assert!(!s.suspend(131, None), "already stopped");
        assert_eq!(s.for_job, Some(7));
        assert_eq!(
            time_left(100, 60, &s, 500),
            None,
            "the limit does not run down"
        );
        assert_eq!(s.secs_until(150), 20);
        assert!(s.resume(200));
        assert!(!s.resume(201), "not stopped");
        assert_eq!((s.secs, s.for_job), (70, None));
        // 30 s were left when it stopped; 10 s later, 20 remain.
        assert_eq!(time_left(100, 60, &s, 210), Some(20));
        assert_eq!(time_left(100, 60, &s, 999), Some(0));
    }

    #[test]
    fn a_clock_that_goes_back_counts_no_negative_time() {
        let mut s = Suspension::default();
        s.suspend(100, None);
        assert_eq!(s.secs_until(90), 0);
        s.resume(90);
        assert_eq!(s.secs, 0);
    }
}
