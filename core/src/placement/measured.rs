//! Compute demand measured while a process runs: the interception library
//! reports, every [`crate::compute::BUSY_REPORT_EVERY_MS`], how long its
//! process has kept its instance busy since its first kernel launch
//! (cumulative microseconds). Each window of at least
//! [`crate::compute::MEASURE_WINDOW_USEC`] of placed time gives a demand
//! ([`crate::compute::window_demand`]), carried forward by
//! [`crate::compute::next_demand`]. The first guess (stated, learned from
//! an earlier run, or the node's default) is corrected within seconds,
//! not after a whole run.
//!
//! Pure: the book keeps one record per process that reported, dropped
//! when it leaves, and the newest demand of each job, so that the job's
//! next process starts from what its last one measured.

use std::collections::HashMap;

use crate::compute::{next_demand, window_demand};
use crate::job::JobId;
use crate::probe::BusyTime;

/// Where a process's last window closed, and the demand it gave.
#[derive(Debug, Clone, Copy, Default)]
struct Window {
    busy_usec: u64,
    placed_usec: u64,
    /// When the node took that report (its own clock, unix ms).
    at_ms: i64,
    demand: Option<u32>,
}

/// The least time between two reports of one process that the node takes
/// (ms): a process that reports faster is not listened to faster.
pub const MIN_REPORT_GAP_MS: i64 = crate::compute::BUSY_REPORT_EVERY_MS as i64 / 2;

/// The demands measured on a node (see the module documentation).
#[derive(Debug, Default)]
pub struct Measured {
    windows: HashMap<(JobId, u32), Window>,
    by_job: HashMap<JobId, u32>,
}

impl Measured {
    /// Process `pid` of `job`, bound to an instance offering `capacity`
    /// and counted there to demand `counted` (its first guess, until a
    /// window closes), reported `busy` so far, taken at `now_ms` (the
    /// node's own clock; set back, it starts the windows again). Returns its new
    /// demand (thousandths of a GPU) when a window closed.
    ///
    /// The numbers come from the job's own process, so they are held to
    /// the node's clock: a process's first report only starts its windows,
    /// one sooner than [`MIN_REPORT_GAP_MS`] after the last is ignored, a
    /// window counts no more placed time than passed on the node, a
    /// report that goes backwards starts the windows again with the
    /// demand kept, and even the first window lowers the first guess only
    /// halfway ([`next_demand`]): a process cannot talk its demand down
    /// at once.
    pub fn report(
        &mut self,
        job: JobId,
        pid: u32,
        busy: BusyTime,
        capacity: u32,
        counted: u32,
        now_ms: i64,
    ) -> Option<u32> {
        let w = match self.windows.entry((job, pid)) {
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(Window {
                    busy_usec: busy.busy_usec,
                    placed_usec: busy.placed_usec,
                    at_ms: now_ms,
                    demand: Some(counted),
                });
                return None;
            }
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
        };
        let passed_ms = now_ms.saturating_sub(w.at_ms);
        if (0..MIN_REPORT_GAP_MS).contains(&passed_ms) {
            return None;
        }
        // Backwards, the report or the node's clock (set back): the
        // windows start again from here.
        if passed_ms < 0 || busy.placed_usec < w.placed_usec || busy.busy_usec < w.busy_usec {
            *w = Window {
                busy_usec: busy.busy_usec,
                placed_usec: busy.placed_usec,
                at_ms: now_ms,
                demand: w.demand,
            };
            return None;
        }
        let placed = (busy.placed_usec - w.placed_usec).min(passed_ms as u64 * 1000);
        let window = window_demand(busy.busy_usec - w.busy_usec, placed, capacity)?;
        let demand = next_demand(w.demand, window);
        *w = Window {
            busy_usec: busy.busy_usec,
            placed_usec: busy.placed_usec,
            at_ms: now_ms,
            demand: Some(demand),
        };
        self.by_job.insert(job, demand);
        Some(demand)
    }

    /// The newest demand measured for any process of `job`.
    pub fn of_job(&self, job: JobId) -> Option<u32> {
        self.by_job.get(&job).copied()
    }

    /// The process left its instance: its windows end (its job's newest
    /// demand stays for the job's next process).
    pub fn forget_process(&mut self, job: JobId, pid: u32) {
        self.windows.remove(&(job, pid));
    }

    /// The job ended here.
    pub fn forget_job(&mut self, job: JobId) {
        self.windows.retain(|(j, _), _| *j != job);
        self.by_job.remove(&job);
    }

    /// How many processes have windows open (bounded by the processes
    /// bound to instances: only they may report).
    pub fn len(&self) -> usize {
        self.windows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.windows.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn busy(busy_usec: u64, placed_usec: u64) -> BusyTime {
        BusyTime {
            busy_usec,
            placed_usec,
        }
    }

    #[test]
    fn windows_close_after_a_second_of_placed_time() {
        let mut m = Measured::default();
        assert_eq!(
            m.report(7, 1, busy(0, 0), 1000, 375, 0),
            None,
            "the first only starts"
        );
        assert_eq!(
            m.report(7, 1, busy(100_000, 500_000), 1000, 375, 500),
            None,
            "half a second says nothing"
        );
        // A fifth of the GPU, against a first guess of 0.375: halfway
        // down, so that no process talks its demand down at once.
        assert_eq!(
            m.report(7, 1, busy(200_000, 1_000_000), 1000, 375, 1_000),
            Some(288)
        );
        assert_eq!(m.of_job(7), Some(288));
        // The next window: busy 0.9 of it: taken at once.
        assert_eq!(
            m.report(7, 1, busy(1_100_000, 2_000_000), 1000, 375, 2_000),
            Some(900)
        );
        // Idle for a second: halfway down (to 1, the least).
        assert_eq!(
            m.report(7, 1, busy(1_100_000, 3_000_000), 1000, 375, 3_000),
            Some(451)
        );
    }

    #[test]
    fn a_process_is_held_to_the_node_s_clock() {
        let mut m = Measured::default();
        m.report(7, 1, busy(0, 0), 1000, 375, 0);
        // Too soon after the last: ignored, whatever it claims.
        assert_eq!(m.report(7, 1, busy(0, 50_000_000), 1000, 375, 100), None);
        // Ten seconds claimed in one real second: one second counted, so
        // the busy half-second is half of it, not a twentieth.
        assert_eq!(
            m.report(7, 1, busy(500_000, 10_000_000), 1000, 375, 1_000),
            Some(500)
        );
        // Backwards: the windows start again, the demand stays.
        assert_eq!(m.report(7, 1, busy(0, 0), 1000, 375, 2_000), None);
        assert_eq!(m.of_job(7), Some(500));
        // From there, idle: halfway down from what was kept.
        assert_eq!(
            m.report(7, 1, busy(0, 1_000_000), 1000, 375, 3_000),
            Some(251)
        );
        // The node's clock set back an hour: the windows start again
        // there, rather than wait for the clock to come back.
        let back = 3_000 - 3_600_000;
        assert_eq!(m.report(7, 1, busy(0, 2_000_000), 1000, 375, back), None);
        assert_eq!(
            m.report(7, 1, busy(1_000_000, 3_000_000), 1000, 375, back + 1_000),
            Some(1000)
        );
        // A window on a seventh of a GPU, busy all the time: that seventh.
        m.report(8, 2, busy(0, 0), 142, 142, 0);
        assert_eq!(
            m.report(8, 2, busy(1_000_000, 1_000_000), 142, 142, 1_000),
            Some(142)
        );
    }

    #[test]
    fn a_job_keeps_its_newest_demand_after_its_process_left() {
        let mut m = Measured::default();
        m.report(7, 1, busy(0, 0), 1000, 375, 0);
        m.report(7, 1, busy(400_000, 1_000_000), 1000, 375, 1_000);
        m.forget_process(7, 1);
        assert!(m.is_empty());
        assert_eq!(m.of_job(7), Some(400));
        m.forget_job(7);
        assert_eq!(m.of_job(7), None);
    }
}
