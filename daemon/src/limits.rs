//! Caps on connections: per client (a uid, an address) and overall, so one
//! user cannot take every thread or file descriptor of a daemon.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Why a connection was turned away.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    #[error("too many connections from {who} (at most {limit}); close some and retry")]
    PerClient { who: String, limit: usize },
    #[error("the daemon is at its connection limit ({limit}); retry later")]
    Total { limit: usize },
}

/// Counts open connections by client.
pub struct ConnectionLimits<K: Hash + Eq + Clone + std::fmt::Display> {
    per_client: usize,
    /// Raised by the daemon as its peers grow ([`Self::set_total`]).
    total: AtomicUsize,
    open: Mutex<(HashMap<K, usize>, usize)>,
}

/// One admitted connection; dropping it gives its place back.
pub struct Admitted<K: Hash + Eq + Clone + std::fmt::Display> {
    limits: Arc<ConnectionLimits<K>>,
    client: K,
}

impl<K: Hash + Eq + Clone + std::fmt::Display> ConnectionLimits<K> {
    pub fn new(per_client: usize, total: usize) -> Arc<Self> {
        Arc::new(ConnectionLimits {
            per_client,
            total: AtomicUsize::new(total),
            open: Mutex::new((HashMap::new(), 0)),
        })
    }

    /// Admits a connection of `client`, or says which limit it hit.
    pub fn admit(self: &Arc<Self>, client: K) -> Result<Admitted<K>, LimitError> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        // The client's own cap first: a client at it is told so, whatever
        // the total (so room made for it comes from its own connections).
        if open.0.get(&client).is_some_and(|n| *n >= self.per_client) {
            return Err(LimitError::PerClient {
                who: client.to_string(),
                limit: self.per_client,
            });
        }
        let total = self.total();
        if open.1 >= total {
            return Err(LimitError::Total { limit: total });
        }
        *open.0.entry(client.clone()).or_insert(0) += 1;
        open.1 += 1;
        Ok(Admitted {
            limits: Arc::clone(self),
            client,
        })
    }

    /// The cap on all connections together.
    pub fn total(&self) -> usize {
        self.total.load(Ordering::Relaxed)
    }

    /// Sets the cap on all connections together (a controller raises it
    /// with its node count: each node keeps a connection open, and one
    /// cap below the nodes would close them in turn). Connections open
    /// over a lowered cap stay; new ones wait for room.
    pub fn set_total(&self, total: usize) {
        self.total.store(total, Ordering::Relaxed);
    }

    /// Admits a connection of `client` over the caps: only in place of
    /// one that is being closed to make room for it (the counts exceed
    /// the caps only until that one is gone).
    pub fn admit_in_place(self: &Arc<Self>, client: K) -> Admitted<K> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        *open.0.entry(client.clone()).or_insert(0) += 1;
        open.1 += 1;
        Admitted {
            limits: Arc::clone(self),
            client,
        }
    }

    /// Connections open now.
    #[cfg(test)]
    fn open(&self) -> usize {
        self.open.lock().unwrap_or_else(|p| p.into_inner()).1
    }
}

impl<K: Hash + Eq + Clone + std::fmt::Display> Drop for Admitted<K> {
    fn drop(&mut self) {
        let mut open = self.limits.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = open.0.get_mut(&self.client) {
            *n -= 1;
            if *n == 0 {
                open.0.remove(&self.client);
            }
        }
        open.1 = open.1.saturating_sub(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_client_and_total_caps_hold_and_free_on_drop() {
        let l = ConnectionLimits::<u32>::new(2, 3);
        let a1 = l.admit(1).unwrap();
        let _a2 = l.admit(1).unwrap();
        assert_eq!(
            l.admit(1).err(),
            Some(LimitError::PerClient {
                who: "1".into(),
                limit: 2
            })
        );
        let _b1 = l.admit(2).unwrap();
        assert_eq!(l.admit(3).err(), Some(LimitError::Total { limit: 3 }));
        drop(a1);
        assert_eq!(l.open(), 2);
        let _a3 = l.admit(1).unwrap();
        assert_eq!(l.open(), 3);
    }

    #[test]
    fn the_total_cap_can_be_raised_and_lowered_while_connections_are_open() {
        let l = ConnectionLimits::<u32>::new(10, 2);
        let held: Vec<_> = (0..2).map(|c| l.admit(c).unwrap()).collect();
        assert_eq!(l.admit(5).err(), Some(LimitError::Total { limit: 2 }));
        l.set_total(4);
        let more: Vec<_> = (5..7).map(|c| l.admit(c).unwrap()).collect();
        assert_eq!(l.admit(8).err(), Some(LimitError::Total { limit: 4 }));
        // Lowered under what is open: those stay, nothing new comes in.
        l.set_total(1);
        assert_eq!((l.open(), l.total()), (4, 1));
        assert!(l.admit(9).is_err());
        drop((held, more));
        assert!(l.admit(9).is_ok());
    }
}
