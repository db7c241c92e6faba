//! The driver's critical Xid errors (NVML events), kept for a while so
//! that a fault gnoded finds later (an MPS server's log) can name them.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long an Xid is kept for the faults found after it.
pub const XID_WINDOW: Duration = Duration::from_secs(60);

/// Recent Xids: (when, GPU index, Xid).
#[derive(Default)]
pub struct XidLog {
    seen: Mutex<VecDeque<(Instant, u32, u64)>>,
}

impl XidLog {
    pub fn note(&self, at: Instant, gpu: u32, xid: u64) {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        seen.push_back((at, gpu, xid));
        while seen
            .front()
            .is_some_and(|(t, _, _)| at.duration_since(*t) > XID_WINDOW)
        {
            seen.pop_front();
        }
    }

    /// The Xids of GPU `gpu` within [`XID_WINDOW`] before `now`, oldest
    /// first, each once.
    pub fn recent(&self, gpu: u32, now: Instant) -> Vec<u64> {
        let seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = Vec::new();
        for (t, g, x) in seen.iter() {
            if *g == gpu && now.saturating_duration_since(*t) <= XID_WINDOW && !out.contains(x) {
                out.push(*x);
            }
        }
        out
    }
}

/// Watches every GPU's critical Xid events on a thread of its own (NVML's
/// wait blocks), logging each and noting it in `log`. Returns false where
/// NVML cannot deliver them (the log says why).
pub fn watch(log: std::sync::Arc<XidLog>) -> bool {
    use nvml_wrapper::bitmasks::event::EventTypes;
    use nvml_wrapper::enums::event::XidError;
    use nvml_wrapper::error::NvmlError;
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("gnoded-xid".into())
        .spawn(move || {
            let nvml = match nvml_wrapper::Nvml::init() {
                Ok(n) => n,
                Err(e) => {
                    let _ = ready_tx.send(Err(format!("NVML: {e}")));
                    return;
                }
            };
            let mut set = match nvml.create_event_set() {
                Ok(s) => s,
                Err(e) => {
                    let _ = ready_tx.send(Err(format!("nvmlEventSetCreate: {e}")));
                    return;
                }
            };
            // A failed registration frees the set: start a new one with
            // the GPUs registered so far.
            let mut registered: Vec<u32> = Vec::new();
            for i in 0..nvml.device_count().unwrap_or(0) {
                let Ok(d) = nvml.device_by_index(i) else { continue };
                match d.register_events(EventTypes::CRITICAL_XID_ERROR, set) {
                    Ok(s) => {
                        set = s;
                        registered.push(i);
                    }
                    Err(e) => {
                        tracing::warn!(gpu = i, error = %e.error, "cannot watch this GPU's Xid errors");
                        let Ok(mut fresh) = nvml.create_event_set() else {
                            let _ = ready_tx.send(Err("nvmlEventSetCreate failed".into()));
                            return;
                        };
                        for &j in &registered {
                            if let Ok(dj) = nvml.device_by_index(j) {
                                match dj.register_events(EventTypes::CRITICAL_XID_ERROR, fresh) {
                                    Ok(s) => fresh = s,
                                    Err(_) => {
                                        let _ = ready_tx.send(Err("re-registering Xid events failed".into()));
                                        return;
                                    }
                                }
                            }
                        }
                        set = fresh;
                    }
                }
            }
            let registered = registered.len();
            if registered == 0 {
                let _ = ready_tx.send(Err("no GPU delivers Xid events".into()));
                return;
            }
            let _ = ready_tx.send(Ok(registered));
            loop {
                match set.wait(5_000) {
                    Ok(ev) => {
                        let gpu = ev.device.index().unwrap_or(u32::MAX);
                        let xid = match ev.event_data {
                            Some(XidError::Value(x)) => x,
                            _ => continue,
                        };
                        tracing::warn!(gpu, xid, "the driver reported a critical Xid error");
                        log.note(Instant::now(), gpu, xid);
                    }
                    Err(NvmlError::Timeout) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, "stopped watching Xid errors");
                        return;
                    }
                }
            }
        });
    if spawned.is_err() {
        return false;
    }
    match ready_rx.recv() {
        Ok(Ok(n)) => {
            tracing::info!(gpus = n, "watching the GPUs' critical Xid errors");
            true
        }
        Ok(Err(why)) => {
            tracing::warn!(%why, "Xid errors are not watched");
            false
        }
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recent_xids_of_one_gpu_within_the_window() {
        let log = XidLog::default();
        let t0 = Instant::now();
        log.note(t0, 0, 13);
        log.note(t0 + Duration::from_secs(1), 1, 79);
        log.note(t0 + Duration::from_secs(2), 0, 43);
        log.note(t0 + Duration::from_secs(3), 0, 43);
        assert_eq!(log.recent(0, t0 + Duration::from_secs(5)), vec![13, 43]);
        assert_eq!(log.recent(1, t0 + Duration::from_secs(5)), vec![79]);
        // The first is past the window a minute later; the rest are not.
        let later = t0 + XID_WINDOW + Duration::from_millis(1500);
        assert_eq!(log.recent(0, later), vec![43]);
        assert!(log.recent(2, later).is_empty());
    }
}
