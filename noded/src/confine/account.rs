//! What gnoded counts of a running job: samples of each of its cgroups
//! (the job's, the batch step's, each `srun` step's) for AveRSS and
//! MaxVMSize, the use of the steps that ended, and GPU time per cgroup.

use std::collections::{BTreeMap, HashMap};

use gsched_core::job::{ResourceUsage, StepUsage};

use crate::cgroup::{Counters, Scope};

/// Samples of one cgroup of a running job.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Samples {
    rss_sum: u128,
    count: u64,
    max_rss: u64,
    max_vmsize: u64,
}

impl Samples {
    pub(super) fn add(&mut self, current_bytes: u64, vmsize: u64) {
        self.rss_sum += u128::from(current_bytes);
        self.count += 1;
        self.max_rss = self.max_rss.max(current_bytes);
        self.max_vmsize = self.max_vmsize.max(vmsize);
    }
}

/// Everything counted of one running job.
#[derive(Debug, Clone, Default)]
pub(super) struct Account {
    pub samples: HashMap<Scope, Samples>,
    /// The use of each cgroup as of the last sample.
    pub last: HashMap<Scope, ResourceUsage>,
    /// `srun` steps that ended, with what they used in all.
    pub ended: BTreeMap<u32, ResourceUsage>,
    /// Per running step, the process that began it and the step it came
    /// from (it goes back there at the step's end).
    pub joined: HashMap<u32, (i32, Scope)>,
    /// GPU busy microseconds per cgroup (the job's own: all of them).
    pub gpu_usec: HashMap<Scope, u64>,
    /// Per cgroup (the job's own: all of them), how long its processes
    /// kept their instances busy (microseconds of a whole GPU) and how
    /// long they were placed, as their interception library measured it.
    pub gpu_busy: HashMap<Scope, (u64, u64)>,
}

impl Account {
    /// The use of `scope` from its counters and what was sampled of it.
    /// `gpu_metered`: the node measures GPU time (else it is `None`).
    pub fn usage(&self, scope: Scope, c: &Counters, gpu_metered: bool) -> ResourceUsage {
        let s = self.samples.get(&scope).copied().unwrap_or_default();
        let max_rss = c.peak_bytes.unwrap_or(0).max(s.max_rss);
        ResourceUsage {
            max_rss,
            ave_rss: if s.count > 0 {
                (s.rss_sum / u128::from(s.count)) as u64
            } else {
                max_rss
            },
            max_vmsize: s.max_vmsize,
            user_cpu_usec: c.user_usec,
            system_cpu_usec: c.system_usec,
            gpu_time_usec: gpu_metered.then(|| self.gpu_usec.get(&scope).copied().unwrap_or(0)),
            gpu_busy_usec: self.gpu_busy.get(&scope).map(|b| b.0),
            gpu_placed_usec: self.gpu_busy.get(&scope).map(|b| b.1),
        }
    }

    /// The steps' use as of the last sample, with the ended steps' totals.
    pub fn steps_so_far(&self) -> StepUsage {
        let mut steps = self.ended.clone();
        for (scope, u) in &self.last {
            if let Scope::Step(n) = scope {
                steps.entry(*n).or_insert(*u);
            }
        }
        StepUsage {
            batch: self.last.get(&Scope::Batch).copied(),
            steps,
        }
    }

    /// Adds a process's busy time (microseconds of a whole GPU) out of its
    /// placed time in `scope` (and so in the job).
    pub fn add_gpu_busy(&mut self, scope: Scope, busy_usec: u64, placed_usec: u64) {
        for s in [scope, Scope::Job] {
            let b = self.gpu_busy.entry(s).or_default();
            b.0 = b.0.saturating_add(busy_usec);
            b.1 = b.1.saturating_add(placed_usec);
            if scope == Scope::Job {
                break;
            }
        }
    }

    /// Adds GPU busy time of a process in `scope` (and so in the job).
    pub fn add_gpu_time(&mut self, scope: Scope, usec: u64) {
        *self.gpu_usec.entry(scope).or_default() += usec;
        if scope != Scope::Job {
            *self.gpu_usec.entry(Scope::Job).or_default() += usec;
        }
    }
}

/// A process's virtual size in bytes (`/proc/PID/statm`), 0 if it is gone.
pub(super) fn vm_size(pid: i32) -> u64 {
    let pages: u64 = std::fs::read_to_string(format!("/proc/{pid}/statm"))
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as u64;
    pages * page
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_takes_the_larger_peak_and_averages_the_samples() {
        let mut a = Account::default();
        let s = a.samples.entry(Scope::Batch).or_default();
        s.add(100, 1000);
        s.add(300, 500);
        let c = Counters {
            peak_bytes: Some(250),
            current_bytes: 0,
            user_usec: 7,
            system_usec: 3,
            oom_kills: 0,
        };
        let u = a.usage(Scope::Batch, &c, false);
        assert_eq!((u.max_rss, u.ave_rss, u.max_vmsize), (300, 200, 1000));
        assert_eq!(u.total_cpu_usec(), 10);
        assert_eq!(u.gpu_time_usec, None);
        // No sample: the average is the peak.
        let u = a.usage(Scope::Step(0), &c, true);
        assert_eq!((u.max_rss, u.ave_rss), (250, 250));
        assert_eq!(u.gpu_time_usec, Some(0));
    }

    #[test]
    fn gpu_time_counts_for_the_step_and_the_job() {
        let mut a = Account::default();
        a.add_gpu_time(Scope::Step(2), 40);
        a.add_gpu_time(Scope::Batch, 2);
        let c = Counters::default();
        assert_eq!(a.usage(Scope::Step(2), &c, true).gpu_time_usec, Some(40));
        assert_eq!(a.usage(Scope::Job, &c, true).gpu_time_usec, Some(42));
        // Busy time the interception measured: the step's and the job's.
        assert_eq!(a.usage(Scope::Job, &c, false).gpu_busy_usec, None);
        a.add_gpu_busy(Scope::Step(2), 5, 10);
        a.add_gpu_busy(Scope::Batch, 1, 4);
        let step = a.usage(Scope::Step(2), &c, false);
        assert_eq!(
            (step.gpu_busy_usec, step.gpu_placed_usec),
            (Some(5), Some(10))
        );
        let job = a.usage(Scope::Job, &c, false);
        assert_eq!(
            (job.gpu_busy_usec, job.gpu_placed_usec),
            (Some(6), Some(14))
        );
    }

    #[test]
    fn ended_steps_keep_their_totals_beside_running_ones() {
        let mut a = Account::default();
        let total = ResourceUsage {
            max_rss: 9,
            ..Default::default()
        };
        let so_far = ResourceUsage {
            max_rss: 1,
            ..Default::default()
        };
        a.ended.insert(0, total);
        a.last.insert(Scope::Step(0), so_far);
        a.last.insert(Scope::Step(1), so_far);
        a.last.insert(Scope::Batch, so_far);
        let s = a.steps_so_far();
        assert_eq!(s.steps[&0], total);
        assert_eq!(s.steps[&1], so_far);
        assert_eq!(s.batch, Some(so_far));
    }
}
