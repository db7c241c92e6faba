//! An instance whose MPS server is handling a fatal GPU error: MPS tears
//! down every client there and refuses new ones until all of those have
//! exited (seen on an H100: docs/hardware.md). While it recovers, the node
//! binds no new shared process there, as while its MPS server is down.

use std::collections::BTreeMap;

/// The instances recovering from a fatal GPU error, with the client
/// processes their MPS server tore down.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct MpsRecovery {
    torn_down: BTreeMap<String, Vec<u32>>,
}

impl MpsRecovery {
    /// The MPS server of `uuid` tore down `pids` (a later fault there adds
    /// its own).
    pub fn fault(&mut self, uuid: &str, pids: &[u32]) {
        let left = self.torn_down.entry(uuid.to_string()).or_default();
        for p in pids {
            if !left.contains(p) {
                left.push(*p);
            }
        }
    }

    /// Forgets the torn-down processes that are gone (`alive` says which
    /// are not); returns the instances whose recovery ended with that.
    pub fn exited(&mut self, alive: impl Fn(u32) -> bool) -> Vec<String> {
        let mut ended = Vec::new();
        self.torn_down.retain(|uuid, pids| {
            pids.retain(|p| alive(*p));
            if pids.is_empty() {
                ended.push(uuid.clone());
            }
            !pids.is_empty()
        });
        ended
    }

    /// Whether a new shared process may not be bound to `uuid`: its MPS
    /// server is down, or it is recovering from a fatal GPU error.
    pub fn closed(&self, uuid: &str, server_down: bool) -> bool {
        server_down || self.torn_down.contains_key(uuid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_instance_recovers_once_every_torn_down_process_is_gone() {
        let mut r = MpsRecovery::default();
        assert!(!r.closed("GPU-a", false));
        assert!(r.closed("GPU-a", true), "a server that is down");
        r.fault("GPU-a", &[474, 494]);
        r.fault("GPU-b", &[]);
        assert!(r.closed("GPU-a", false));
        // A fault that tore down nothing leaves nothing to wait for.
        assert_eq!(r.exited(|_| true), vec!["GPU-b".to_string()]);
        assert!(r.exited(|p| p == 494).is_empty(), "494 still runs");
        assert!(r.closed("GPU-a", false));
        assert_eq!(r.exited(|_| false), vec!["GPU-a".to_string()]);
        assert!(!r.closed("GPU-a", false));
    }
}
