//! The node with the most free workers, found without scanning every node
//! for every job: a launch pass over thousands of nodes and hundreds of
//! thousands of jobs would otherwise cost jobs × nodes.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Nodes by free workers (most first, lowest index on ties), as of the
/// counts last given; an entry whose count changed since is stale and
/// dropped when met.
pub(super) struct MostFree {
    heap: BinaryHeap<(u32, Reverse<usize>)>,
}

impl MostFree {
    pub(super) fn new(free: &[u32]) -> MostFree {
        MostFree {
            heap: free
                .iter()
                .enumerate()
                .filter(|(_, f)| **f > 0)
                .map(|(i, f)| (*f, Reverse(i)))
                .collect(),
        }
    }

    /// Whether any node has a worker free.
    pub(super) fn any(&mut self, free: &[u32]) -> bool {
        while let Some(&(f, Reverse(i))) = self.heap.peek() {
            if f == free[i] {
                return true;
            }
            self.heap.pop();
        }
        false
    }

    /// The node with the most free workers that `ok` accepts (the lowest
    /// index among equals), as `free.iter().enumerate().filter(f > 0 &&
    /// ok).max_by_key((f, Reverse(i)))` would choose. Its entry is taken
    /// out: give its new count with [`MostFree::set`].
    pub(super) fn pick(&mut self, free: &[u32], ok: impl Fn(usize) -> bool) -> Option<usize> {
        let mut passed = Vec::new();
        let mut chosen = None;
        while let Some((f, Reverse(i))) = self.heap.pop() {
            if f != free[i] {
                continue;
            }
            if ok(i) {
                chosen = Some(i);
                break;
            }
            passed.push((f, Reverse(i)));
        }
        self.heap.extend(passed);
        chosen
    }

    /// Node `i` now has `f` workers free.
    pub(super) fn set(&mut self, i: usize, f: u32) {
        if f > 0 {
            self.heap.push((f, Reverse(i)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Each pick is the scan's choice, through a run of picks that
        /// take a worker each.
        #[test]
        fn picks_what_the_scan_picks(
            start in proptest::collection::vec(0u32..5, 1..30),
            refused in proptest::collection::vec(any::<bool>(), 30),
            picks in 0usize..80,
        ) {
            let mut free = start.clone();
            let mut m = MostFree::new(&free);
            for k in 0..picks {
                let ok = |i: usize| !refused[(i + k) % refused.len()];
                let scan = free
                    .iter()
                    .enumerate()
                    .filter(|(i, &f)| f > 0 && ok(*i))
                    .max_by_key(|(i, &f)| (f, Reverse(*i)))
                    .map(|(i, _)| i);
                prop_assert_eq!(m.any(&free), free.iter().any(|f| *f > 0));
                let got = m.pick(&free, ok);
                prop_assert_eq!(got, scan);
                if let Some(i) = got {
                    free[i] -= 1;
                    m.set(i, free[i]);
                }
            }
        }
    }
}
