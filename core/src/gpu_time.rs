//! GPU time: how long a process kept a GPU's SMs busy, from the driver's
//! per-process utilization samples (NVML's `nvmlDeviceGetProcessUtilization`).
//!
//! The driver answers a poll with the samples newer than the timestamp it
//! is given: per process, its SM utilization (percent) over a sampling
//! period, stamped with the CPU time (microseconds) at which the period
//! ended. A process with no utilization in a period has no sample. So a
//! sample stands for the time since the previous sample of that process,
//! or since the last poll for its first one, and never for more than
//! `max_window_us` (a process idle for a minute and busy for its last
//! period is not busy for the minute).

use std::collections::BTreeMap;

/// One utilization sample of one process on one GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UtilSample {
    pub pid: u32,
    /// When the sampling period ended, microseconds (the driver's CPU clock).
    pub timestamp_us: u64,
    /// SM utilization over the period, percent (clamped to 100).
    pub sm_percent: u32,
}

/// The busy microseconds `sm_percent` stands for over `window_us`.
pub fn busy_usec(sm_percent: u32, window_us: u64) -> u64 {
    window_us.saturating_mul(u64::from(sm_percent.min(100))) / 100
}

/// Turns successive polls of each GPU into busy time per process.
#[derive(Debug, Clone)]
pub struct GpuTimeMeter {
    /// Per GPU, the newest sample timestamp taken: the next poll asks for
    /// samples after it.
    last_seen: BTreeMap<u32, u64>,
    /// Where polling starts (no sample before it is counted).
    start_us: u64,
    max_window_us: u64,
}

impl GpuTimeMeter {
    /// A meter that counts samples after `start_us`; one sample counts for
    /// at most `max_window_us` (about twice the polling interval).
    pub fn new(start_us: u64, max_window_us: u64) -> GpuTimeMeter {
        GpuTimeMeter {
            last_seen: BTreeMap::new(),
            start_us,
            max_window_us: max_window_us.max(1),
        }
    }

    /// The timestamp to ask GPU `gpu`'s driver for samples after.
    pub fn since(&self, gpu: u32) -> u64 {
        self.last_seen.get(&gpu).copied().unwrap_or(self.start_us)
    }

    /// Takes one poll's samples of GPU `gpu`; returns the busy
    /// microseconds per process they stand for. Samples not newer than
    /// what was already taken are ignored (a driver that answers with its
    /// whole buffer counts each period once).
    pub fn take(&mut self, gpu: u32, samples: &[UtilSample]) -> BTreeMap<u32, u64> {
        let since = self.since(gpu);
        let mut sorted: Vec<&UtilSample> =
            samples.iter().filter(|s| s.timestamp_us > since).collect();
        sorted.sort_by_key(|s| (s.pid, s.timestamp_us));
        let mut busy: BTreeMap<u32, u64> = BTreeMap::new();
        let mut previous: Option<(u32, u64)> = None;
        for s in sorted {
            let from = match previous {
                Some((pid, at)) if pid == s.pid => at,
                _ => since,
            };
            let window = (s.timestamp_us - from).min(self.max_window_us);
            *busy.entry(s.pid).or_default() += busy_usec(s.sm_percent, window);
            previous = Some((s.pid, s.timestamp_us));
        }
        if let Some(newest) = samples.iter().map(|s| s.timestamp_us).max() {
            if newest > since {
                self.last_seen.insert(gpu, newest);
            }
        }
        busy
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(pid: u32, timestamp_us: u64, sm_percent: u32) -> UtilSample {
        UtilSample {
            pid,
            timestamp_us,
            sm_percent,
        }
    }

    #[test]
    fn busy_time_is_utilization_times_window() {
        assert_eq!(busy_usec(100, 1_000_000), 1_000_000);
        assert_eq!(busy_usec(50, 1_000_000), 500_000);
        assert_eq!(busy_usec(0, 1_000_000), 0);
        // A driver that says more than 100% is taken as 100%.
        assert_eq!(busy_usec(250, 1_000), 1_000);
        assert_eq!(busy_usec(100, u64::MAX), u64::MAX / 100);
    }

    #[test]
    fn each_sample_stands_for_the_time_since_the_previous_one() {
        let mut m = GpuTimeMeter::new(1_000_000, 2_000_000);
        assert_eq!(m.since(0), 1_000_000);
        // One poll a second; pid 7 busy at 100%, pid 8 at 50% in several
        // periods of a sixth of a second.
        let busy = m.take(
            0,
            &[
                s(7, 2_000_000, 100),
                s(8, 1_500_000, 50),
                s(8, 2_000_000, 50),
            ],
        );
        assert_eq!(busy[&7], 1_000_000);
        assert_eq!(busy[&8], 500_000);
        assert_eq!(m.since(0), 2_000_000);
        // The next poll counts from there; an old sample again is ignored.
        let busy = m.take(0, &[s(7, 2_000_000, 100), s(7, 3_000_000, 20)]);
        assert_eq!(busy.get(&7), Some(&200_000));
        assert_eq!(m.since(0), 3_000_000);
        // GPUs are counted apart.
        assert_eq!(m.since(1), 1_000_000);
    }

    #[test]
    fn an_idle_stretch_is_not_counted_as_busy() {
        let mut m = GpuTimeMeter::new(0, 2_000_000);
        // No sample for a minute, then one busy period: it counts for at
        // most the window, not the minute.
        let busy = m.take(0, &[s(9, 60_000_000, 100)]);
        assert_eq!(busy[&9], 2_000_000);
        // A poll with no sample keeps where it was.
        assert!(m.take(0, &[]).is_empty());
        assert_eq!(m.since(0), 60_000_000);
    }
}
