//! A fixed-bucket latency histogram a node keeps and reports in its
//! heartbeats (the controller exports it to Prometheus).

use serde::{Deserialize, Serialize};

/// Upper bounds (seconds) for probe round trips: tens of microseconds up.
pub const PROBE_BOUNDS: [f64; 11] = [
    25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 50e-3, 0.1,
];

/// Upper bounds (seconds) for placement waits: an immediate placement up
/// to half an hour behind other tasks' memory.
pub const WAIT_BOUNDS: [f64; 11] = [
    1e-3, 0.01, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0,
];

/// Counts of observations per bucket (not cumulative), with one more
/// bucket than bounds for everything above the last.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LatencyHistogram {
    pub bounds: Vec<f64>,
    pub counts: Vec<u64>,
    pub sum: f64,
    pub count: u64,
}

impl LatencyHistogram {
    pub fn new(bounds: &[f64]) -> LatencyHistogram {
        LatencyHistogram {
            bounds: bounds.to_vec(),
            counts: vec![0; bounds.len() + 1],
            sum: 0.0,
            count: 0,
        }
    }

    pub fn observe(&mut self, secs: f64) {
        let i = self
            .bounds
            .iter()
            .position(|&b| secs <= b)
            .unwrap_or(self.bounds.len());
        if let Some(c) = self.counts.get_mut(i) {
            *c += 1;
        }
        self.sum += secs;
        self.count += 1;
    }

    /// (upper bound, count) pairs, the last bound `f64::MAX` (+Inf).
    /// A histogram whose lengths disagree (bad input) yields its valid part.
    pub fn buckets(&self) -> Vec<(f64, u64)> {
        self.bounds
            .iter()
            .copied()
            .chain(std::iter::once(f64::MAX))
            .zip(self.counts.iter().copied())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_land_in_their_buckets() {
        let mut h = LatencyHistogram::new(&[0.1, 1.0]);
        for s in [0.05, 0.1, 0.5, 7.0] {
            h.observe(s);
        }
        assert_eq!(h.counts, vec![2, 1, 1]);
        assert_eq!(h.count, 4);
        assert!((h.sum - 7.65).abs() < 1e-9);
        assert_eq!(h.buckets(), vec![(0.1, 2), (1.0, 1), (f64::MAX, 1)]);
    }
}
