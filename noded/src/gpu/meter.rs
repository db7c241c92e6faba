//! GPU time: polls the driver's per-process utilization of each GPU once a
//! second and adds the busy time to the jobs and steps whose cgroups hold
//! those processes (the arithmetic is core's `gpu_time`).

use std::sync::Arc;
use std::time::Duration;

use gsched_core::gpu_time::GpuTimeMeter;

use super::GpuBackend;
use crate::confine::Confinement;

/// How often the GPUs are polled.
const POLL: Duration = Duration::from_secs(1);

fn unix_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// Starts measuring GPU time on the GPUs `gpus` that give per-process
/// utilization; returns how many do (0: GPU time is not measured here).
pub fn start(backend: Arc<dyn GpuBackend>, confine: Arc<Confinement>, gpus: &[u32]) -> usize {
    let now = unix_us();
    let metered: Vec<u32> = gpus
        .iter()
        .copied()
        .filter(|g| backend.process_utilization(*g, now).is_some())
        .collect();
    if metered.is_empty() {
        tracing::info!(
            "GPU time is not measured: the driver gives no per-process utilization here (MIG instances or simulated GPUs)"
        );
        return 0;
    }
    tracing::info!(gpus = ?metered, "GPU time is measured from the driver's per-process utilization");
    confine.meter_gpu_time();
    let count = metered.len();
    tokio::spawn(async move {
        let meter = Arc::new(std::sync::Mutex::new(GpuTimeMeter::new(
            now,
            2 * POLL.as_micros() as u64,
        )));
        let mut tick = tokio::time::interval(POLL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let (b, c, m, g) = (
                Arc::clone(&backend),
                Arc::clone(&confine),
                Arc::clone(&meter),
                metered.clone(),
            );
            let _ = tokio::task::spawn_blocking(move || poll(&*b, &c, &m, &g)).await;
        }
    });
    count
}

fn poll(
    backend: &dyn GpuBackend,
    confine: &Confinement,
    meter: &std::sync::Mutex<GpuTimeMeter>,
    gpus: &[u32],
) {
    let mut meter = meter.lock().unwrap_or_else(|p| p.into_inner());
    for &gpu in gpus {
        let Some(samples) = backend.process_utilization(gpu, meter.since(gpu)) else {
            continue;
        };
        if !samples.is_empty() {
            tracing::debug!(gpu, ?samples, "process utilization samples");
        }
        confine.add_gpu_time(&meter.take(gpu, &samples));
    }
}
