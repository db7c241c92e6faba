//! Learns what a CUDA process takes on the device beyond its allocations
//! (`gsched_core::context`): the GPUs' per-process memory is sampled once a
//! second for the processes gnoded placed, the interception reports each
//! process's allocation peak when it exits, and when the process is gone
//! the difference is one measurement. Launches then reserve the learned
//! cost for each process's context instead of a constant (unless the node
//! was given `--context-mem`).

use std::collections::HashMap;
use std::sync::Mutex;

use gsched_core::context::ContextCosts;
use gsched_core::job::JobId;

/// One placed process as the samples saw it.
#[derive(Debug, Default)]
struct Seen {
    model: String,
    device_peak_mib: u64,
    allocated_peak_mib: Option<u64>,
}

/// How much a process's context gets reserved.
#[derive(Debug)]
pub enum ContextMem {
    /// `--context-mem`, or simulated GPUs (0).
    Fixed(u64),
    /// Learned on this node; `default` until something was measured.
    Learned { default_mib: u64 },
}

pub struct ContextWatch {
    mode: ContextMem,
    costs: Mutex<ContextCosts>,
    seen: Mutex<HashMap<(JobId, u32), Seen>>,
}

impl ContextWatch {
    pub fn new(mode: ContextMem) -> ContextWatch {
        ContextWatch {
            mode,
            costs: Mutex::new(ContextCosts::default()),
            seen: Mutex::new(HashMap::new()),
        }
    }

    fn seen(&self) -> std::sync::MutexGuard<'_, HashMap<(JobId, u32), Seen>> {
        self.seen.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn costs(&self) -> std::sync::MutexGuard<'_, ContextCosts> {
        self.costs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether it learns (else samples are not needed).
    pub fn learns(&self) -> bool {
        matches!(self.mode, ContextMem::Learned { .. })
    }

    /// What a launch reserves for each process's context now, bytes.
    pub fn reserve_bytes(&self) -> u64 {
        let mib = match self.mode {
            ContextMem::Fixed(mib) => mib,
            ContextMem::Learned { default_mib } => {
                self.costs().node_estimate().unwrap_or(default_mib)
            }
        };
        mib * 1024 * 1024
    }

    /// One sample of a `model` GPU's processes (pid, MiB the driver reports
    /// for it), of which `placed` are gnoded's (job, pid).
    pub fn sampled(&self, model: &str, processes: &[(u32, u64)], placed: &[(JobId, u32)]) {
        let mut seen = self.seen();
        for &(pid, mib) in processes {
            for &(job, p) in placed.iter().filter(|(_, p)| *p == pid) {
                let s = seen.entry((job, p)).or_default();
                if s.model.is_empty() {
                    s.model = model.to_string();
                }
                s.device_peak_mib = s.device_peak_mib.max(mib);
            }
        }
    }

    /// The interception's report of what process `pid` of `job` allocated
    /// at most, bytes.
    pub fn allocated(&self, job: JobId, pid: u32, bytes: u64) {
        let mib = bytes.div_ceil(1024 * 1024);
        let mut seen = self.seen();
        let s = seen.entry((job, pid)).or_default();
        s.allocated_peak_mib = Some(s.allocated_peak_mib.unwrap_or(0).max(mib));
    }

    /// Process `pid` of `job` is gone: what it took beyond its allocations
    /// is learned, if both sides were seen.
    pub fn ended(&self, job: JobId, pid: u32) {
        let Some(s) = self.seen().remove(&(job, pid)) else {
            return;
        };
        if let (false, Some(allocated)) = (s.model.is_empty(), s.allocated_peak_mib) {
            let mut costs = self.costs();
            let before = costs.node_estimate();
            costs.observe(&s.model, s.device_peak_mib, allocated);
            let after = costs.node_estimate();
            let (device_peak_mib, allocated_peak_mib) = (s.device_peak_mib, allocated);
            if after != before {
                tracing::info!(job, pid, device_peak_mib, allocated_peak_mib, context_mib = ?after, "context reservation changed");
            } else {
                tracing::debug!(
                    job,
                    pid,
                    device_peak_mib,
                    allocated_peak_mib,
                    "context cost measured"
                );
            }
        }
    }

    /// The job ended, so all its processes did: each is measured (the
    /// pidfd watch of one may not have fired yet, or never been set up).
    pub fn job_ended(&self, job: JobId) {
        let pids: Vec<u32> = self
            .seen()
            .keys()
            .filter(|(j, _)| *j == job)
            .map(|(_, p)| *p)
            .collect();
        for pid in pids {
            self.ended(job, pid);
        }
    }
}

/// How often the GPUs' per-process memory is sampled.
const SAMPLE_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// Samples each GPU (index, model) once a second for the processes the
/// probe server placed (`placed_processes`: job and pid of each).
pub fn start_sampling(
    watch: std::sync::Arc<ContextWatch>,
    backend: std::sync::Arc<dyn crate::gpu::GpuBackend>,
    placed_processes: impl Fn() -> Vec<(gsched_core::job::JobId, u32)> + Send + 'static,
    gpus: Vec<(u32, String)>,
) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(SAMPLE_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let placed = placed_processes();
            if placed.is_empty() {
                continue;
            }
            let (w, b, g) = (
                std::sync::Arc::clone(&watch),
                std::sync::Arc::clone(&backend),
                gpus.clone(),
            );
            // NVML: off the async threads.
            let _ = tokio::task::spawn_blocking(move || {
                for (gpu, model) in &g {
                    if let Ok(procs) = b.processes(*gpu) {
                        let procs: Vec<(u32, u64)> =
                            procs.iter().map(|p| (p.pid, p.used_mib)).collect();
                        w.sampled(model, &procs, &placed);
                    }
                }
            })
            .await;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use gsched_core::context::{CONTEXT_MARGIN_MIB, DEFAULT_CONTEXT_MIB};

    const MIB: u64 = 1024 * 1024;

    #[test]
    fn a_measured_context_replaces_the_default() {
        let w = ContextWatch::new(ContextMem::Learned {
            default_mib: DEFAULT_CONTEXT_MIB,
        });
        assert_eq!(w.reserve_bytes(), DEFAULT_CONTEXT_MIB * MIB);
        // Process 10 of job 1 is placed; 99 is someone else's.
        w.sampled("H100", &[(10, 700), (99, 5000)], &[(1, 10)]);
        w.sampled("H100", &[(10, 4870)], &[(1, 10)]);
        w.allocated(1, 10, 4258 * MIB);
        // Job 2's process never reported its allocations: no measurement.
        w.sampled("H100", &[(20, 3000)], &[(2, 20)]);
        w.ended(2, 20);
        assert_eq!(w.reserve_bytes(), DEFAULT_CONTEXT_MIB * MIB);
        w.ended(1, 10);
        assert_eq!(w.reserve_bytes(), (612 + CONTEXT_MARGIN_MIB) * MIB);
        assert!(w.seen().is_empty());
        let fixed = ContextWatch::new(ContextMem::Fixed(512));
        fixed.sampled("H100", &[(10, 600)], &[(1, 10)]);
        fixed.allocated(1, 10, 0);
        fixed.ended(1, 10);
        assert_eq!(fixed.reserve_bytes(), 512 * MIB);
        assert!(!fixed.learns());
    }
}
