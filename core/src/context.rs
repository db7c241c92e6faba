//! The device memory a CUDA process takes beyond what it allocates: its
//! context, the modules (kernels) it loads, the driver's own buffers. On an
//! H100 (driver 580) a bare context took 518 MiB, PyTorch 612-638 MiB and
//! CuPy 520 MiB, with or without MPS (`docs/hardware.md`). A node learns it
//! per GPU model from the processes it placed: the most device memory the
//! driver reported for a process, less the most the process allocated (as
//! the interception counted it).

use std::collections::{BTreeMap, VecDeque};

/// Reserved for a process's context where nothing was measured yet.
pub const DEFAULT_CONTEXT_MIB: u64 = 640;
/// Added on top of the largest overhead measured.
pub const CONTEXT_MARGIN_MIB: u64 = 32;
/// Measurements kept per GPU model (the newest).
pub const CONTEXT_SAMPLES: usize = 32;
/// The most overhead one measurement may show to be believed: three times
/// the largest context measured (PyTorch's, 638 MiB). What a process
/// allocated is its own word (its interception library reports it), so a
/// process that said it allocated nothing while it used 30 GB would
/// otherwise make the node reserve 30 GB for every process after it.
pub const MAX_CONTEXT_MIB: u64 = 2048;

/// What processes took beyond their allocations, per GPU model.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContextCosts {
    by_model: BTreeMap<String, VecDeque<u64>>,
}

impl ContextCosts {
    /// A process on a `model` GPU was seen using at most `device_peak_mib`
    /// of device memory while it allocated at most `allocated_peak_mib`. A
    /// process the driver never reported (0) teaches nothing, and neither
    /// does one whose overhead is beyond [`MAX_CONTEXT_MIB`] (its own word
    /// on what it allocated is not believed).
    pub fn observe(&mut self, model: &str, device_peak_mib: u64, allocated_peak_mib: u64) {
        let overhead = device_peak_mib.saturating_sub(allocated_peak_mib);
        if device_peak_mib == 0 || overhead > MAX_CONTEXT_MIB {
            return;
        }
        let samples = self.by_model.entry(model.to_string()).or_default();
        samples.push_back(overhead);
        while samples.len() > CONTEXT_SAMPLES {
            samples.pop_front();
        }
    }

    /// What to reserve for a new process's context on a `model` GPU: the
    /// largest overhead among the recent ones, plus a margin. `None` before
    /// any was measured.
    pub fn estimate(&self, model: &str) -> Option<u64> {
        let largest = self.by_model.get(model)?.iter().max()?;
        Some(largest + CONTEXT_MARGIN_MIB)
    }

    /// The largest estimate over the models measured (a launch does not
    /// know yet which GPU its processes will get).
    pub fn node_estimate(&self) -> Option<u64> {
        self.by_model.keys().filter_map(|m| self.estimate(m)).max()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_largest_recent_overhead_plus_a_margin() {
        let mut c = ContextCosts::default();
        assert_eq!(c.estimate("H100"), None);
        assert_eq!(c.node_estimate(), None);
        // A PyTorch process: 4258 MiB allocated, 4870 seen.
        c.observe("H100", 4870, 4258);
        // A bare one: nothing allocated.
        c.observe("H100", 518, 0);
        assert_eq!(c.estimate("H100"), Some(612 + CONTEXT_MARGIN_MIB));
        // Never reported by the driver: no sample.
        c.observe("H100", 0, 100);
        assert_eq!(c.estimate("H100"), Some(612 + CONTEXT_MARGIN_MIB));
        // Sampled below what it allocated (a missed peak): 0, not negative.
        c.observe("A30", 100, 300);
        assert_eq!(c.estimate("A30"), Some(CONTEXT_MARGIN_MIB));
        assert_eq!(c.node_estimate(), Some(612 + CONTEXT_MARGIN_MIB));
        // Old measurements age out.
        for _ in 0..CONTEXT_SAMPLES {
            c.observe("H100", 520, 0);
        }
        assert_eq!(c.estimate("H100"), Some(520 + CONTEXT_MARGIN_MIB));
    }

    #[test]
    fn a_process_that_understates_its_allocations_teaches_nothing() {
        let mut c = ContextCosts::default();
        c.observe("H100", 600, 0);
        // 30 GB used, "nothing allocated": not believed.
        c.observe("H100", 30_000, 0);
        assert_eq!(c.estimate("H100"), Some(600 + CONTEXT_MARGIN_MIB));
    }
}
