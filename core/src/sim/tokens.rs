//! GPU time quotas in the simulator: the token scheduler of
//! [`crate::time_quota`], one per instance, driven as gnoded's token
//! server drives it, with each quota'd job's process as the client the
//! interception library is. A GPU task under a quota runs only while its
//! process holds a token (an ordinary holder alone, latency-critical ones
//! beside each other); it asks when its task starts, renews when its
//! quota runs out and gives the token back when its task ends (its CPU
//! phases hold none); it leaves when its job ends. Times are the virtual
//! clock's, in microseconds.

use std::collections::{BTreeMap, BTreeSet};

use crate::time_quota::{TimeQuota, TokenConfig, TokenOrder, TokenScheduler};

/// The token schedulers of the simulated instances and who holds tokens.
#[derive(Default)]
pub(super) struct Tokens {
    /// Per instance (its index), from its first quota'd task on.
    schedulers: BTreeMap<usize, TokenScheduler>,
    /// (instance, client) -> when its quota runs out, µs.
    holding: BTreeMap<(usize, u64), u64>,
    /// Clients joined on each instance.
    joined: BTreeSet<(usize, u64)>,
    /// Clients with a GPU task in progress (they want the token).
    busy: BTreeSet<(usize, u64)>,
}

impl Tokens {
    /// Whether `client` may run its GPU work on `inst` now.
    pub fn holds(&self, inst: usize, client: u64) -> bool {
        self.holding.contains_key(&(inst, client))
    }

    /// `client` (a process of `job` held to `quota` on `inst`, already
    /// scaled to the instance) starts a GPU task: it joins once, then
    /// asks.
    pub fn start(&mut self, inst: usize, client: u64, job: u64, quota: TimeQuota, now: u64) {
        let s = self
            .schedulers
            .entry(inst)
            .or_insert_with(|| TokenScheduler::new(TokenConfig::default()));
        if self.joined.insert((inst, client)) {
            s.join(client, job, quota);
        }
        self.busy.insert((inst, client));
        let orders = s.ask(client, now);
        self.apply(inst, orders, now);
    }

    /// `client`'s GPU task on `inst` ended: it gives its token back.
    pub fn task_done(&mut self, inst: usize, client: u64, now: u64) {
        self.busy.remove(&(inst, client));
        if let Some(s) = self.schedulers.get_mut(&inst) {
            let orders = s.give_back(client, now);
            self.holding.remove(&(inst, client));
            self.apply(inst, orders, now);
        }
    }

    /// `client`'s process is gone (its job ended or was killed).
    pub fn leave(&mut self, client: u64, now: u64) {
        let insts: Vec<usize> = self
            .joined
            .iter()
            .filter(|(_, c)| *c == client)
            .map(|(i, _)| *i)
            .collect();
        for inst in insts {
            self.joined.remove(&(inst, client));
            self.busy.remove(&(inst, client));
            self.holding.remove(&(inst, client));
            if let Some(s) = self.schedulers.get_mut(&inst) {
                let orders = s.leave(client, now);
                self.apply(inst, orders, now);
            }
        }
    }

    /// When the next quota runs out or a scheduler wants a tick, µs.
    pub fn next_event(&self, now: u64) -> Option<u64> {
        self.holding
            .values()
            .copied()
            .chain(self.schedulers.values().filter_map(|s| s.next_tick(now)))
            .min()
    }

    /// Quotas that ran out renew (the holder still has work), and the
    /// schedulers tick.
    pub fn advance(&mut self, now: u64) {
        let due: Vec<(usize, u64)> = self
            .holding
            .iter()
            .filter(|(_, &d)| d <= now)
            .map(|(k, _)| *k)
            .collect();
        for (inst, client) in due {
            self.holding.remove(&(inst, client));
            if let Some(s) = self.schedulers.get_mut(&inst) {
                let orders = s.renew(client, now);
                self.apply(inst, orders, now);
            }
        }
        let insts: Vec<usize> = self.schedulers.keys().copied().collect();
        for inst in insts {
            let s = self.schedulers.get_mut(&inst).expect("listed above");
            if s.next_tick(now).is_some_and(|t| t <= now) {
                let orders = s.tick(now);
                self.apply(inst, orders, now);
            }
        }
    }

    /// Carries out the scheduler's orders as the library would: a grant
    /// runs for its quota; a revoked holder gives the token back at once
    /// (the simulator has no work in flight to drain) and asks again.
    fn apply(&mut self, inst: usize, mut orders: Vec<TokenOrder>, now: u64) {
        while !orders.is_empty() {
            let mut more = Vec::new();
            for o in orders {
                match o {
                    TokenOrder::Grant { client, quota } => {
                        self.holding.insert((inst, client), now + quota.max(1));
                    }
                    TokenOrder::Revoke { client } => {
                        self.holding.remove(&(inst, client));
                        let s = self.schedulers.get_mut(&inst).expect("ordered by it");
                        if self.busy.contains(&(inst, client)) {
                            more.extend(s.give_back_and_ask(client, now));
                        } else {
                            more.extend(s.give_back(client, now));
                        }
                    }
                }
            }
            orders = more;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(request: u32) -> TimeQuota {
        TimeQuota {
            request,
            limit: 1000,
            latency_critical: false,
        }
    }

    #[test]
    fn one_ordinary_holder_at_a_time_and_both_get_time() {
        let mut t = Tokens::default();
        t.start(0, 1, 1, q(300), 0);
        t.start(0, 2, 2, q(700), 0);
        assert!(t.holds(0, 1) ^ t.holds(0, 2), "exactly one holds");
        let mut now = 0;
        let mut held = [0u64; 2];
        while now < 10_000_000 {
            let next = t.next_event(now).unwrap().max(now + 1);
            for (k, c) in [1u64, 2].iter().enumerate() {
                if t.holds(0, *c) {
                    held[k] += next - now;
                }
            }
            now = next;
            t.advance(now);
        }
        let share = held[0] as f64 / (held[0] + held[1]) as f64;
        assert!((share - 0.3).abs() < 0.05, "{share}");
        // The task of client 2 ends: client 1 gets the token.
        t.task_done(0, 2, now);
        if !t.holds(0, 1) {
            t.advance(t.next_event(now).unwrap());
        }
        assert!(t.holds(0, 1));
        t.leave(1, now);
        assert!(!t.holds(0, 1));
    }
}
