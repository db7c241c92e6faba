//! GPU time quotas for processes sharing an instance: Gemini's token
//! scheduling of kernel bursts.
//!
//! A shared job may ask for a share of its instance's time with a request
//! and a limit (`--gpu-share=REQ[:LIMIT]`, or its QOS's `GpuShare=`). On
//! each instance, gnoded keeps one [`TokenScheduler`] for the processes of
//! such jobs (its clients). A client launches kernels only while it holds
//! a token; a token is good for a quota of time, after which (or when the
//! client runs out of work first) the client lets its work in flight finish
//! and gives the token back. One client of ordinary jobs holds a token at a
//! time, so the time an instance spends on a client's work is the time it
//! held tokens, which is what is counted.
//!
//! Whom a token goes to, among the clients waiting for one:
//! 1. a latency-critical client (its QOS's `Flags=LatencyCritical`), at
//!    once and beside the others: an ordinary holder is told to give its
//!    token back, and no ordinary client gets one while a latency-critical
//!    one holds a token;
//! 2. else the waiting client furthest below its request (the least usage
//!    over the last window, per thousandth of request);
//! 3. else, once every waiting client has its request, the one with the
//!    least usage per request among those below their limit: time nobody
//!    asked for is divided by requests (elastic), never past a limit.
//!
//! A client's quota follows its bursts, as Gemini's does: a client that
//! gives its token back before the quota ends (out of work) gets about its
//! burst next time; one that used it all gets half as much again, up to
//! the most. A client alone keeps its token through renewals.
//!
//! Everything here is pure: times are microseconds on the caller's
//! monotonic clock. Clients are trusted only in when they give a token
//! back (they cannot claim less time than they held it); a process that
//! bypasses the interception library is not held at all, as with memory.

use std::collections::{BTreeMap, VecDeque};

use crate::compute::WHOLE_GPU;

/// A client's claim on its instance's time, in thousandths of it.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema,
)]
pub struct TimeQuota {
    /// Time the client is owed when it has work (1..=1000).
    pub request: u32,
    /// Time it may take at most, whoever else waits (request..=1000).
    pub limit: u32,
    /// Its bursts go first, beside the holder of ordinary jobs.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub latency_critical: bool,
}

/// A time quota that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuotaError {
    #[error("GPU share '{0}': {1}")]
    Share(String, crate::compute::ShareError),
    #[error(
        "GPU share '{0}': the limit must be at least the request (REQ:LIMIT, such as 0.3:0.6)"
    )]
    LimitBelowRequest(String),
    #[error("a GPU time quota is for shared jobs: an isolated job has its instance alone")]
    Isolated,
}

impl TimeQuota {
    /// Reads `REQ[:LIMIT]` (fractions such as `0.3:0.6`, or percentages);
    /// no limit means the whole instance.
    pub fn parse(text: &str) -> Result<TimeQuota, QuotaError> {
        let share =
            |t: &str| crate::compute::parse_share(t).map_err(|e| QuotaError::Share(text.into(), e));
        let (req, limit) = match text.split_once(':') {
            Some((r, l)) => (share(r)?, share(l)?),
            None => (share(text)?, WHOLE_GPU),
        };
        if limit < req {
            return Err(QuotaError::LimitBelowRequest(text.into()));
        }
        Ok(TimeQuota {
            request: req,
            limit,
            latency_critical: false,
        })
    }

    /// `REQ:LIMIT` as fractions (`0.3:1`), as [`TimeQuota::parse`] reads it.
    pub fn to_setting(&self) -> String {
        format!(
            "{}:{}",
            self.request as f64 / WHOLE_GPU as f64,
            self.limit as f64 / WHOLE_GPU as f64
        )
    }

    /// The environment form gnoded gives the job (`300:1000[:lc]`).
    pub fn to_env(&self) -> String {
        let lc = if self.latency_critical { ":lc" } else { "" };
        format!("{}:{}{lc}", self.request, self.limit)
    }

    /// Reads [`TimeQuota::to_env`]'s form back (from gnoded's own spool).
    pub fn from_env(text: &str) -> Option<TimeQuota> {
        let mut parts = text.split(':');
        let request: u32 = parts.next()?.parse().ok()?;
        let limit: u32 = parts.next()?.parse().ok()?;
        let latency_critical = match parts.next() {
            None => false,
            Some("lc") => true,
            Some(_) => return None,
        };
        let q = TimeQuota {
            request,
            limit,
            latency_critical,
        };
        q.is_valid().then_some(q)
    }

    /// The quota in thousandths of an instance offering `capacity`
    /// thousandths of its GPU (a share is stated of a whole GPU): 0.1 of a
    /// GPU is 0.7 of a 1g instance of 7, and at most all of it.
    pub fn of_instance(&self, capacity: u32) -> TimeQuota {
        let scale = |v: u32| {
            ((v as u64 * WHOLE_GPU as u64).div_ceil(capacity.clamp(1, WHOLE_GPU) as u64))
                .clamp(1, WHOLE_GPU as u64) as u32
        };
        TimeQuota {
            request: scale(self.request),
            limit: scale(self.limit),
            latency_critical: self.latency_critical,
        }
    }

    /// One of `n` processes' part of this quota: a job's request holds
    /// for all its processes on an instance together, so that starting
    /// more of them takes no more time. A limit is divided too (each
    /// process keeps to its part, even while the others idle); no limit
    /// stays none.
    pub fn divided(&self, n: usize) -> TimeQuota {
        let n = n.max(1) as u32;
        let request = (self.request / n).max(1);
        let limit = if self.limit >= WHOLE_GPU {
            WHOLE_GPU
        } else {
            (self.limit / n).max(request)
        };
        TimeQuota {
            request,
            limit,
            latency_critical: self.latency_critical,
        }
    }

    pub fn is_valid(&self) -> bool {
        crate::compute::is_share(self.request)
            && crate::compute::is_share(self.limit)
            && self.limit >= self.request
    }
}

/// The job environment variable carrying its quota (set by gnoded; the
/// library opens a token connection when it is there).
pub const TIME_QUOTA_ENV: &str = "GSCHED_TIME_QUOTA";

/// Sizes and periods of the token scheduling, microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenConfig {
    /// Usage is counted over the last `window`.
    pub window: u64,
    /// The quota of a client nothing is known about yet.
    pub first_quota: u64,
    pub min_quota: u64,
    pub max_quota: u64,
    /// A holder still holding this long after its quota ended (its work in
    /// flight did not finish, or it does not answer) is counted as having
    /// given the token back, and the token goes on.
    pub forfeit_after: u64,
}

impl Default for TokenConfig {
    fn default() -> TokenConfig {
        TokenConfig {
            window: 2_000_000,
            first_quota: 10_000,
            min_quota: 2_000,
            max_quota: 100_000,
            forfeit_after: 500_000,
        }
    }
}

/// What the scheduler tells clients (gnoded sends each to its process).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenOrder {
    /// Launch for `quota` microseconds, then give the token back (or ask
    /// to renew it).
    Grant { client: u64, quota: u64 },
    /// Stop launching and give the token back once the work in flight is
    /// done.
    Revoke { client: u64 },
}

#[derive(Debug, Clone)]
struct Hold {
    since: u64,
    deadline: u64,
    revoked: bool,
}

#[derive(Debug, Clone)]
struct Client {
    /// Its job (its processes on the instance share the job's quota).
    job: u64,
    /// The job's quota, and this client's part of it.
    job_quota: TimeQuota,
    quota: TimeQuota,
    /// Held periods that end within the window, oldest first.
    held: VecDeque<(u64, u64)>,
    asked_at: Option<u64>,
    hold: Option<Hold>,
    /// The quota its next token is good for.
    next_quota: u64,
    /// All the time it held tokens, for the record.
    held_total: u64,
}

/// The token scheduler of one instance.
#[derive(Debug, Clone, Default)]
pub struct TokenScheduler {
    config: TokenConfig,
    clients: BTreeMap<u64, Client>,
}

impl TokenScheduler {
    pub fn new(config: TokenConfig) -> TokenScheduler {
        TokenScheduler {
            config,
            clients: BTreeMap::new(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.clients.is_empty()
    }

    /// A process of `job`, whose quota is `quota`, joins (it holds
    /// nothing yet). A job's quota holds for all its processes on the
    /// instance together: each gets an equal part
    /// ([`TimeQuota::divided`]), so starting more of them takes no more
    /// time.
    pub fn join(&mut self, client: u64, job: u64, quota: TimeQuota) {
        self.clients.insert(
            client,
            Client {
                job,
                job_quota: quota,
                quota,
                held: VecDeque::new(),
                asked_at: None,
                hold: None,
                next_quota: self.config.first_quota,
                held_total: 0,
            },
        );
        self.divide(job);
    }

    /// Divides `job`'s quota among its clients.
    fn divide(&mut self, job: u64) {
        let n = self.clients.values().filter(|c| c.job == job).count();
        for c in self.clients.values_mut().filter(|c| c.job == job) {
            c.quota = c.job_quota.divided(n);
        }
    }

    pub fn quota(&self, client: u64) -> Option<TimeQuota> {
        self.clients.get(&client).map(|c| c.quota)
    }

    /// The client is gone (its process ended or its connection closed).
    pub fn leave(&mut self, client: u64, now: u64) -> Vec<TokenOrder> {
        if let Some(c) = self.clients.remove(&client) {
            self.divide(c.job);
        }
        self.schedule(now)
    }

    /// All the time the client held tokens (microseconds), its current
    /// token included.
    pub fn held_total(&self, client: u64, now: u64) -> u64 {
        self.clients.get(&client).map_or(0, |c| {
            c.held_total + c.hold.as_ref().map_or(0, |h| now.saturating_sub(h.since))
        })
    }

    /// The client wants a token (its next launch waits for one).
    pub fn ask(&mut self, client: u64, now: u64) -> Vec<TokenOrder> {
        match self.clients.get_mut(&client) {
            Some(c) if c.hold.is_none() => {
                c.asked_at.get_or_insert(now);
            }
            // Already holding (a late ask): the holder keeps it.
            _ => return Vec::new(),
        }
        self.schedule(now)
    }

    /// The client's quota ended with work still to launch: it keeps the
    /// token for another quota if nobody it must yield to waits and its
    /// limit allows, else it is told to give it back.
    pub fn renew(&mut self, client: u64, now: u64) -> Vec<TokenOrder> {
        let Some(c) = self.clients.get(&client) else {
            return Vec::new();
        };
        let Some(hold) = &c.hold else {
            // Not holding: a renewal is an ask.
            return self.ask(client, now);
        };
        let lc = c.quota.latency_critical;
        let revoked = hold.revoked;
        let mine = self.rank(c, now);
        // Another waiting client goes first: a latency-critical one, or
        // (for an ordinary holder) one ranked before it.
        let someone_first = self.clients.iter().any(|(&id, o)| {
            id != client
                && o.asked_at.is_some()
                && self.under_limit(o, now)
                && (o.quota.latency_critical || (!lc && self.rank(o, now) < mine))
        });
        let quota = self.quota_for(client, now);
        let c = self.clients.get_mut(&client).expect("checked above");
        if revoked || someone_first || quota.is_none() {
            let hold = c.hold.as_mut().expect("checked above");
            hold.revoked = true;
            return vec![TokenOrder::Revoke { client }];
        }
        let quota = quota.expect("checked above");
        c.next_quota = (c.next_quota * 3 / 2).min(self.config.max_quota);
        let hold = c.hold.as_mut().expect("checked above");
        hold.deadline = now + quota;
        vec![TokenOrder::Grant { client, quota }]
    }

    /// The client gave its token back and wants another at once: it is
    /// ranked with the waiting clients for the next one (it is not passed
    /// over because its ask came after its token).
    pub fn give_back_and_ask(&mut self, client: u64, now: u64) -> Vec<TokenOrder> {
        self.release(client, now);
        if let Some(c) = self.clients.get_mut(&client) {
            c.asked_at.get_or_insert(now);
        }
        self.schedule(now)
    }

    /// The client gave its token back (its work in flight is done).
    pub fn give_back(&mut self, client: u64, now: u64) -> Vec<TokenOrder> {
        self.release(client, now);
        self.schedule(now)
    }

    fn release(&mut self, client: u64, now: u64) {
        let cfg = self.config;
        if let Some(c) = self.clients.get_mut(&client) {
            if let Some(h) = c.hold.take() {
                let used = now.saturating_sub(h.since);
                let granted = h.deadline.saturating_sub(h.since);
                c.held.push_back((h.since, now));
                c.held_total += used;
                // Out of work before the quota ended: about its burst
                // next time; else half as much again.
                c.next_quota = if used < granted {
                    (used + used / 4).clamp(cfg.min_quota, cfg.max_quota)
                } else {
                    (c.next_quota * 3 / 2).min(cfg.max_quota)
                };
            }
        }
    }

    /// Time went on: holders far past their quota are counted as having
    /// given the token back, and clients held back by their limit may get
    /// one.
    pub fn tick(&mut self, now: u64) -> Vec<TokenOrder> {
        let forfeit = self.config.forfeit_after;
        let overdue: Vec<u64> = self
            .clients
            .iter()
            .filter(|(_, c)| {
                c.hold
                    .as_ref()
                    .is_some_and(|h| now >= h.deadline.saturating_add(forfeit))
            })
            .map(|(&id, _)| id)
            .collect();
        let mut orders = Vec::new();
        for id in overdue {
            orders.push(TokenOrder::Revoke { client: id });
            orders.extend(self.give_back(id, now));
        }
        orders.extend(self.schedule(now));
        orders
    }

    /// When [`TokenScheduler::tick`] should run next: a holder's forfeit
    /// time, or soon when a client waits on its limit.
    pub fn next_tick(&self, now: u64) -> Option<u64> {
        let forfeits = self
            .clients
            .values()
            .filter_map(|c| c.hold.as_ref())
            .map(|h| h.deadline.saturating_add(self.config.forfeit_after));
        // Only a client waiting on its limit can get a token at a tick
        // (any other waiting client gets one when the holder gives it
        // back).
        let limited = self
            .clients
            .values()
            .any(|c| c.asked_at.is_some() && !self.under_limit(c, now))
            .then_some(now + self.config.min_quota);
        forfeits.chain(limited).min()
    }

    /// The client's usage over the last window, thousandths of the window.
    pub fn usage(&self, client: u64, now: u64) -> Option<u32> {
        let c = self.clients.get(&client)?;
        Some((self.used(c, now) * WHOLE_GPU as u64 / self.config.window) as u32)
    }

    pub fn holders(&self) -> Vec<u64> {
        self.clients
            .iter()
            .filter(|(_, c)| c.hold.is_some())
            .map(|(&id, _)| id)
            .collect()
    }

    /// Microseconds held within the window ending `now`.
    fn used(&self, c: &Client, now: u64) -> u64 {
        let from = now.saturating_sub(self.config.window);
        let past: u64 = c
            .held
            .iter()
            .map(|&(s, e)| e.saturating_sub(s.max(from)))
            .sum();
        past + c
            .hold
            .as_ref()
            .map_or(0, |h| now.saturating_sub(h.since.max(from)))
    }

    fn allowance(&self, share: u32) -> u64 {
        self.config.window * share as u64 / WHOLE_GPU as u64
    }

    fn under_limit(&self, c: &Client, now: u64) -> bool {
        c.quota.limit >= WHOLE_GPU || self.used(c, now) < self.allowance(c.quota.limit)
    }

    /// Where a client ranks for a token, first first: owed time (below
    /// its request) before any other, then by usage per request.
    fn rank(&self, c: &Client, now: u64) -> (bool, u128) {
        let used = self.used(c, now);
        let owed = used < self.allowance(c.quota.request);
        let per_request = used as u128 * WHOLE_GPU as u128 / c.quota.request.max(1) as u128;
        (!owed, per_request)
    }

    /// The quota a token for `client` would be good for now: its next
    /// quota, cut to what its limit leaves (at least the least quota);
    /// `None` when its limit is spent.
    fn quota_for(&self, client: u64, now: u64) -> Option<u64> {
        let c = self.clients.get(&client)?;
        if c.quota.limit >= WHOLE_GPU {
            // No limit: a client alone keeps the instance.
            return Some(c.next_quota);
        }
        let left = self
            .allowance(c.quota.limit)
            .checked_sub(self.used(c, now))
            .filter(|&l| l > 0)?;
        Some(c.next_quota.min(left).max(self.config.min_quota))
    }

    fn grant(&mut self, client: u64, now: u64, quota: u64) -> TokenOrder {
        let c = self.clients.get_mut(&client).expect("a known client");
        c.asked_at = None;
        c.hold = Some(Hold {
            since: now,
            deadline: now + quota,
            revoked: false,
        });
        TokenOrder::Grant { client, quota }
    }

    fn schedule(&mut self, now: u64) -> Vec<TokenOrder> {
        // Drop periods that ended before the window.
        let from = now.saturating_sub(self.config.window);
        for c in self.clients.values_mut() {
            while c.held.front().is_some_and(|&(_, e)| e <= from) {
                c.held.pop_front();
            }
        }
        let mut orders = Vec::new();
        // 1. Latency-critical clients: at once, beside the others.
        let urgent: Vec<u64> = self
            .clients
            .iter()
            .filter(|(_, c)| c.quota.latency_critical && c.asked_at.is_some())
            .map(|(&id, _)| id)
            .collect();
        for id in urgent {
            if let Some(q) = self.quota_for(id, now) {
                orders.push(self.grant(id, now, q));
            }
        }
        let lc_holds = self
            .clients
            .values()
            .any(|c| c.quota.latency_critical && c.hold.is_some());
        if lc_holds {
            for (&id, c) in self.clients.iter_mut() {
                if let Some(h) = c.hold.as_mut().filter(|h| !h.revoked) {
                    if !c.quota.latency_critical {
                        h.revoked = true;
                        orders.push(TokenOrder::Revoke { client: id });
                    }
                }
            }
            return orders;
        }
        if self.clients.values().any(|c| c.hold.is_some()) {
            return orders;
        }
        // 2 and 3. The waiting client furthest below its request, else
        // the least used per request below its limit.
        let mut best: Option<(bool, u128, u64, u64)> = None;
        for (&id, c) in &self.clients {
            let Some(asked) = c.asked_at else { continue };
            if !self.under_limit(c, now) {
                continue;
            }
            let (behind, per_request) = self.rank(c, now);
            let key = (behind, per_request, asked, id);
            if best.is_none_or(|b| key < b) {
                best = Some(key);
            }
        }
        if let Some((_, _, _, id)) = best {
            if let Some(q) = self.quota_for(id, now) {
                orders.push(self.grant(id, now, q));
            }
        }
        orders
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(request: u32, limit: u32) -> TimeQuota {
        TimeQuota {
            request,
            limit,
            latency_critical: false,
        }
    }

    fn granted(orders: &[TokenOrder]) -> Vec<u64> {
        orders
            .iter()
            .filter_map(|o| match o {
                TokenOrder::Grant { client, .. } => Some(*client),
                _ => None,
            })
            .collect()
    }

    /// Drives clients that always have work: each holder uses its whole
    /// quota (asking to renew), gives the token back when told, and asks
    /// again at once. Returns each client's held time over `span`.
    fn run_busy(s: &mut TokenScheduler, clients: &[u64], span: u64) -> BTreeMap<u64, u64> {
        let mut now = 0;
        let mut deadline: BTreeMap<u64, u64> = BTreeMap::new();
        let mut since: BTreeMap<u64, u64> = BTreeMap::new();
        let mut held: BTreeMap<u64, u64> = BTreeMap::new();
        let mut pending: Vec<TokenOrder> = Vec::new();
        for &c in clients {
            pending.extend(s.ask(c, now));
        }
        while now < span {
            let mut more = Vec::new();
            for o in pending.drain(..) {
                match o {
                    TokenOrder::Grant { client, quota } => {
                        deadline.insert(client, now + quota);
                        since.entry(client).or_insert(now);
                    }
                    TokenOrder::Revoke { client } => {
                        deadline.remove(&client);
                        let s0 = since.remove(&client).unwrap_or(now);
                        *held.entry(client).or_default() += now - s0;
                        more.extend(s.give_back(client, now));
                        more.extend(s.ask(client, now));
                    }
                }
            }
            pending = more;
            if !pending.is_empty() {
                continue;
            }
            // Next event: the earliest deadline, or a tick.
            let next = deadline
                .values()
                .copied()
                .min()
                .or_else(|| s.next_tick(now))
                .unwrap_or(span);
            now = next.max(now + 1);
            let due: Vec<u64> = deadline
                .iter()
                .filter(|(_, &d)| d <= now)
                .map(|(&c, _)| c)
                .collect();
            for c in due {
                deadline.remove(&c);
                pending.extend(s.renew(c, now));
            }
            pending.extend(s.tick(now));
        }
        for (c, s0) in since {
            *held.entry(c).or_default() += span.min(now) - s0;
        }
        held
    }

    #[test]
    fn busy_clients_get_time_in_proportion_to_their_requests() {
        let mut s = TokenScheduler::new(TokenConfig::default());
        s.join(1, 1, q(300, 1000));
        s.join(2, 2, q(700, 1000));
        let held = run_busy(&mut s, &[1, 2], 20_000_000);
        let total = (held[&1] + held[&2]) as f64;
        let share1 = held[&1] as f64 / total;
        assert!((share1 - 0.3).abs() < 0.03, "client 1 got {share1}");
        assert!(total > 19_000_000.0, "the instance was kept busy: {total}");
    }

    #[test]
    fn time_nobody_asked_for_is_divided_by_requests_up_to_the_limits() {
        let mut s = TokenScheduler::new(TokenConfig::default());
        // Requests 0.2 and 0.2: the rest is split evenly; limits 1.
        s.join(1, 1, q(200, 1000));
        s.join(2, 2, q(200, 1000));
        let held = run_busy(&mut s, &[1, 2], 10_000_000);
        let share1 = held[&1] as f64 / (held[&1] + held[&2]) as f64;
        assert!((share1 - 0.5).abs() < 0.05, "{share1}");
        // A limit of 0.3 caps client 1; client 2 takes the rest.
        let mut s = TokenScheduler::new(TokenConfig::default());
        s.join(1, 1, q(200, 300));
        s.join(2, 2, q(200, 1000));
        let held = run_busy(&mut s, &[1, 2], 10_000_000);
        let share1 = held[&1] as f64 / 10_000_000.0;
        assert!((share1 - 0.3).abs() < 0.03, "{share1}");
        assert!(held[&2] as f64 > 6_500_000.0, "{:?}", held);
    }

    #[test]
    fn a_client_alone_keeps_all_of_the_time_up_to_its_limit() {
        let mut s = TokenScheduler::new(TokenConfig::default());
        s.join(1, 1, q(300, 1000));
        let held = run_busy(&mut s, &[1], 5_000_000);
        assert!(held[&1] > 4_990_000, "{:?}", held);
        // Without a limit it is never told to give its token back, however
        // long it held it (each refusal costs a drain on a real GPU).
        let mut s = TokenScheduler::new(TokenConfig::default());
        s.join(1, 1, q(300, 1000));
        s.ask(1, 0);
        for t in 1..300 {
            assert!(
                matches!(
                    s.renew(1, t * 10_000)[..],
                    [TokenOrder::Grant { client: 1, .. }]
                ),
                "refused at {t}"
            );
        }
        let mut s = TokenScheduler::new(TokenConfig::default());
        s.join(1, 1, q(300, 500));
        let held = run_busy(&mut s, &[1], 20_000_000);
        let share = held[&1] as f64 / 20_000_000.0;
        assert!((share - 0.5).abs() < 0.03, "{share}");
    }

    #[test]
    fn one_ordinary_holder_at_a_time_and_latency_critical_goes_first() {
        let mut s = TokenScheduler::new(TokenConfig::default());
        s.join(1, 1, q(500, 1000));
        s.join(2, 2, q(500, 1000));
        s.join(
            3,
            3,
            TimeQuota {
                latency_critical: true,
                ..q(100, 1000)
            },
        );
        assert_eq!(granted(&s.ask(1, 0)), vec![1]);
        assert!(s.ask(2, 10).is_empty(), "2 waits while 1 holds");
        // A latency-critical ask is granted at once and 1 is revoked.
        let orders = s.ask(3, 20);
        assert!(orders.contains(&TokenOrder::Grant {
            client: 3,
            quota: 10_000
        }));
        assert!(orders.contains(&TokenOrder::Revoke { client: 1 }));
        // 1 gives back: 2 still waits while 3 holds.
        assert!(granted(&s.give_back(1, 500)).is_empty());
        assert_eq!(s.holders(), vec![3]);
        // 3 done: 2 is next (less used than 1).
        assert_eq!(granted(&s.give_back(3, 2_000)), vec![2]);
    }

    #[test]
    fn quotas_follow_bursts_and_overdue_holders_forfeit() {
        let cfg = TokenConfig::default();
        let mut s = TokenScheduler::new(cfg);
        s.join(1, 1, q(500, 1000));
        s.join(2, 2, q(500, 1000));
        assert_eq!(
            s.ask(1, 0),
            vec![TokenOrder::Grant {
                client: 1,
                quota: cfg.first_quota
            }]
        );
        // Out of work after 3 ms: its next quota is about that.
        s.give_back(1, 3_000);
        let orders = s.ask(1, 4_000);
        assert_eq!(
            orders,
            vec![TokenOrder::Grant {
                client: 1,
                quota: 3_750
            }]
        );
        // It never gives the token back: after forfeit_after past its
        // deadline the token goes to 2.
        s.ask(2, 5_000);
        assert!(s.tick(100_000).is_empty());
        let at = 4_000 + 3_750 + cfg.forfeit_after;
        assert_eq!(s.next_tick(100_000), Some(at), "its forfeit");
        let orders = s.tick(at);
        assert!(orders.contains(&TokenOrder::Revoke { client: 1 }));
        assert_eq!(granted(&orders), vec![2]);
        // Charged for all it held: about 0.5 s of the 2 s window.
        assert!(s.usage(1, at).unwrap() > 250);
    }

    #[test]
    fn renewal_keeps_a_lone_holder_going_and_yields_to_a_waiter() {
        let mut s = TokenScheduler::new(TokenConfig::default());
        s.join(1, 1, q(500, 1000));
        s.join(2, 2, q(500, 1000));
        s.ask(1, 0);
        assert!(matches!(
            s.renew(1, 10_000)[..],
            [TokenOrder::Grant { client: 1, .. }]
        ));
        s.ask(2, 12_000);
        assert_eq!(s.renew(1, 25_000), vec![TokenOrder::Revoke { client: 1 }]);
        assert_eq!(granted(&s.give_back(1, 26_000)), vec![2]);
        // Leaving while holding passes the token on.
        s.ask(1, 27_000);
        assert_eq!(granted(&s.leave(2, 28_000)), vec![1]);
    }

    #[test]
    fn a_jobs_processes_share_its_quota() {
        let mut s = TokenScheduler::new(TokenConfig::default());
        s.join(1, 7, q(600, 1000));
        s.join(2, 7, q(600, 1000));
        s.join(3, 8, q(600, 1000));
        assert_eq!(s.quota(1).unwrap().request, 300, "half each");
        assert_eq!(s.quota(2).unwrap().request, 300);
        assert_eq!(s.quota(3).unwrap().request, 600, "alone in its job");
        // One of job 7's processes leaves: the other has the whole.
        s.leave(2, 0);
        assert_eq!(s.quota(1).unwrap().request, 600);
    }

    #[test]
    fn quotas_parse_and_round_trip() {
        assert_eq!(TimeQuota::parse("0.3").unwrap(), q(300, 1000));
        assert_eq!(TimeQuota::parse("30%:60%").unwrap(), q(300, 600));
        assert!(matches!(
            TimeQuota::parse("0.5:0.3"),
            Err(QuotaError::LimitBelowRequest(_))
        ));
        assert!(TimeQuota::parse("0.5:2").is_err());
        assert!(TimeQuota::parse("x").is_err());
        let lc = TimeQuota {
            latency_critical: true,
            ..q(100, 900)
        };
        assert_eq!(TimeQuota::from_env(&lc.to_env()), Some(lc));
        assert_eq!(TimeQuota::from_env("100:50"), None);
        assert_eq!(TimeQuota::from_env("100:500:x"), None);
        assert_eq!(
            TimeQuota::parse(&q(300, 600).to_setting()).unwrap(),
            q(300, 600)
        );
        // Of a 1g instance of 7 (142 thousandths of the GPU).
        assert_eq!(q(100, 1000).of_instance(142), q(705, 1000));
        assert_eq!(q(300, 600).of_instance(1000), q(300, 600));
        assert_eq!(q(300, 1000).divided(3), q(100, 1000));
        assert_eq!(q(300, 600).divided(2), q(150, 300));
        assert_eq!(q(1, 1).divided(2), q(1, 1));
    }

    use proptest::prelude::*;

    proptest! {
        /// Whatever clients do, at most one ordinary client holds a token
        /// that was not revoked, none is granted beside a latency-critical
        /// holder, and no grant exceeds the most quota.
        #[test]
        fn one_ordinary_holder_whatever_clients_do(
            ops in proptest::collection::vec((0u8..5, 0u64..4, 1u64..20_000), 1..200),
            lc in proptest::collection::vec(any::<bool>(), 4),
        ) {
            let cfg = TokenConfig::default();
            let mut s = TokenScheduler::new(cfg);
            for (id, &l) in lc.iter().enumerate() {
                s.join(id as u64, id as u64, TimeQuota { latency_critical: l, ..q(250, 1000) });
            }
            let mut now = 0;
            let mut revoked = std::collections::BTreeSet::new();
            for (op, client, dt) in ops {
                now += dt;
                let orders = match op {
                    0 => s.ask(client, now),
                    1 => s.renew(client, now),
                    2 => s.give_back(client, now),
                    3 => s.tick(now),
                    _ => {
                        let o = s.leave(client, now);
                        s.join(client, client, TimeQuota { latency_critical: lc[client as usize], ..q(250, 1000) });
                        o
                    }
                };
                for o in &orders {
                    match *o {
                        TokenOrder::Grant { client, quota } => {
                            prop_assert!(quota <= cfg.max_quota.max(cfg.first_quota));
                            revoked.remove(&client);
                        }
                        TokenOrder::Revoke { client } => { revoked.insert(client); }
                    }
                }
                let holders = s.holders();
                revoked.retain(|c| holders.contains(c));
                let ordinary: Vec<_> = holders.iter().filter(|c| !lc[**c as usize] && !revoked.contains(*c)).collect();
                let urgent = holders.iter().any(|c| lc[*c as usize]);
                prop_assert!(ordinary.len() <= 1, "holders {:?}", holders);
                prop_assert!(!urgent || ordinary.is_empty(), "ordinary beside urgent: {:?}", holders);
            }
        }
    }
}
