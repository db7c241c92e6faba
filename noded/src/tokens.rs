//! The token server: GPU time quotas for the shared processes of each
//! instance (`gsched_core::time_quota`, Gemini's token scheduling).
//!
//! A placed process of a job with a quota opens a token connection on the
//! probe socket (`ProbeRequest::Tokens`); from then on the connection's
//! thread reads its [`TokenRequest`]s and feeds them to its instance's
//! [`TokenScheduler`], and the orders that come out are written to the
//! clients they name, from whichever thread decided them. A timer thread
//! ticks the schedulers (forfeits, clients waiting on their limits).
//! Decisions are the scheduler's; this is transport and a clock.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use gsched_core::job::JobId;
use gsched_core::probe::{encode, frame_len, TokenReply, TokenRequest};
use gsched_core::time_quota::{TimeQuota, TokenConfig, TokenOrder, TokenScheduler};
use tracing::{debug, info, warn};

/// A client that does not read its orders for this long is dropped.
const WRITE_TIMEOUT: Duration = Duration::from_millis(200);

struct Conn {
    instance: String,
    job: JobId,
    pid: u32,
    writer: UnixStream,
}

#[derive(Default)]
struct Inner {
    schedulers: HashMap<String, TokenScheduler>,
    clients: HashMap<u64, Conn>,
    next: u64,
}

pub struct TokenServer {
    inner: Mutex<Inner>,
    /// Wakes the timer when a scheduler's next tick may have moved.
    wake: Condvar,
    epoch: Instant,
    config: TokenConfig,
}

impl TokenServer {
    /// A server whose timer thread runs for the life of the daemon.
    pub fn start(config: TokenConfig) -> std::io::Result<Arc<TokenServer>> {
        let server = Arc::new(TokenServer {
            inner: Mutex::new(Inner::default()),
            wake: Condvar::new(),
            epoch: Instant::now(),
            config,
        });
        let timer = Arc::clone(&server);
        std::thread::Builder::new()
            .name("gpu-tokens".into())
            .stack_size(256 * 1024)
            .spawn(move || timer.timer())?;
        Ok(server)
    }

    fn now(&self) -> u64 {
        self.epoch.elapsed().as_micros() as u64
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Serves the token connection of process `pid` of `job`, placed on
    /// `instance`, until it closes (on the caller's thread).
    pub fn serve(
        &self,
        mut stream: UnixStream,
        job: JobId,
        pid: u32,
        instance: &str,
        quota: TimeQuota,
    ) {
        let writer = match stream.try_clone() {
            Ok(w) => w,
            Err(e) => {
                warn!(job, pid, error = %e, "cannot serve a token connection");
                return;
            }
        };
        let _ = writer.set_write_timeout(Some(WRITE_TIMEOUT));
        let id = {
            let mut inner = self.lock();
            inner.next += 1;
            let id = inner.next;
            inner
                .schedulers
                .entry(instance.to_string())
                .or_insert_with(|| TokenScheduler::new(self.config))
                .join(id, job, quota);
            inner.clients.insert(
                id,
                Conn {
                    instance: instance.to_string(),
                    job,
                    pid,
                    writer,
                },
            );
            id
        };
        debug!(
            job,
            pid,
            instance,
            client = id,
            ?quota,
            "token client joined"
        );
        let mut body = Vec::new();
        loop {
            let mut header = [0u8; 4];
            if stream.read_exact(&mut header).is_err() {
                break;
            }
            let Ok(n) = frame_len(header) else { break };
            body.resize(n, 0);
            if stream.read_exact(&mut body).is_err() {
                break;
            }
            let Ok(req) = serde_json::from_slice::<TokenRequest>(&body) else {
                warn!(job, pid, "malformed token request; closing its connection");
                break;
            };
            self.request(id, req);
        }
        self.leave(id);
    }

    fn request(&self, id: u64, req: TokenRequest) {
        let now = self.now();
        let mut inner = self.lock();
        let Some(instance) = inner.clients.get(&id).map(|c| c.instance.clone()) else {
            return;
        };
        let Some(s) = inner.schedulers.get_mut(&instance) else {
            return;
        };
        let orders = match req {
            TokenRequest::Ask => s.ask(id, now),
            TokenRequest::Renew => s.renew(id, now),
            TokenRequest::GiveBack => s.give_back(id, now),
            TokenRequest::GiveBackAndAsk => s.give_back_and_ask(id, now),
        };
        send(&mut inner, &orders);
        drop(inner);
        self.wake.notify_one();
    }

    fn leave(&self, id: u64) {
        let now = self.now();
        let mut inner = self.lock();
        let Some(conn) = inner.clients.remove(&id) else {
            return;
        };
        let mut orders = Vec::new();
        if let Some(s) = inner.schedulers.get_mut(&conn.instance) {
            let held = s.held_total(id, now);
            info!(
                job = conn.job,
                pid = conn.pid,
                instance = %conn.instance,
                held_ms = held / 1000,
                "token client left"
            );
            orders = s.leave(id, now);
            if s.is_empty() {
                inner.schedulers.remove(&conn.instance);
            }
        }
        send(&mut inner, &orders);
        drop(inner);
        self.wake.notify_one();
    }

    fn timer(&self) {
        let mut inner = self.lock();
        loop {
            let now = self.now();
            let next = inner
                .schedulers
                .values()
                .filter_map(|s| s.next_tick(now))
                .min();
            let wait = match next {
                Some(at) if at <= now => Duration::ZERO,
                Some(at) => Duration::from_micros(at - now),
                None => Duration::from_secs(3600),
            };
            if !wait.is_zero() {
                inner = self
                    .wake
                    .wait_timeout(inner, wait)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
            let now = self.now();
            let mut orders = Vec::new();
            for s in inner.schedulers.values_mut() {
                orders.extend(s.tick(now));
            }
            send(&mut inner, &orders);
        }
    }
}

/// Writes each order to its client; one that cannot be written to is shut
/// down (its reader then leaves).
fn send(inner: &mut Inner, orders: &[TokenOrder]) {
    for order in orders {
        let (client, reply) = match *order {
            TokenOrder::Grant { client, quota } => (client, TokenReply::Grant { quota_us: quota }),
            TokenOrder::Revoke { client } => (client, TokenReply::Revoke),
        };
        let Some(conn) = inner.clients.get_mut(&client) else {
            continue;
        };
        if let Err(e) = conn.writer.write_all(&encode(&reply)) {
            warn!(job = conn.job, pid = conn.pid, error = %e, "token client does not read its orders; dropping it");
            let _ = conn.writer.shutdown(std::net::Shutdown::Both);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gsched_core::probe::ProbeReply;

    fn read_reply(s: &mut UnixStream) -> TokenReply {
        let mut h = [0u8; 4];
        s.read_exact(&mut h).unwrap();
        let mut b = vec![0u8; frame_len(h).unwrap()];
        s.read_exact(&mut b).unwrap();
        serde_json::from_slice(&b).unwrap()
    }

    fn ask(s: &mut UnixStream, r: TokenRequest) {
        s.write_all(&encode(&r)).unwrap();
    }

    fn q(request: u32, latency_critical: bool) -> TimeQuota {
        TimeQuota {
            request,
            limit: 1000,
            latency_critical,
        }
    }

    #[test]
    fn tokens_go_one_at_a_time_and_latency_critical_first() {
        let server = TokenServer::start(TokenConfig::default()).unwrap();
        let mut clients = Vec::new();
        for (i, lc) in [false, false, true].into_iter().enumerate() {
            let (ours, theirs) = UnixStream::pair().unwrap();
            let s = Arc::clone(&server);
            std::thread::spawn(move || s.serve(theirs, 1, 100 + i as u32, "GPU-a", q(300, lc)));
            clients.push(ours);
        }
        // Joining is asynchronous: give the threads a moment.
        std::thread::sleep(Duration::from_millis(50));
        ask(&mut clients[0], TokenRequest::Ask);
        assert!(matches!(
            read_reply(&mut clients[0]),
            TokenReply::Grant { .. }
        ));
        ask(&mut clients[1], TokenRequest::Ask);
        ask(&mut clients[2], TokenRequest::Ask);
        // The latency-critical client gets one at once; the holder is
        // told to give its back.
        assert!(matches!(
            read_reply(&mut clients[2]),
            TokenReply::Grant { .. }
        ));
        assert_eq!(read_reply(&mut clients[0]), TokenReply::Revoke);
        ask(&mut clients[0], TokenRequest::GiveBack);
        ask(&mut clients[2], TokenRequest::GiveBack);
        assert!(matches!(
            read_reply(&mut clients[1]),
            TokenReply::Grant { .. }
        ));
        // A client that goes away passes its token on.
        ask(&mut clients[0], TokenRequest::Ask);
        drop(clients.remove(1));
        assert!(matches!(
            read_reply(&mut clients[0]),
            TokenReply::Grant { .. }
        ));
        // Malformed input closes only that connection.
        clients[1].write_all(&encode(&ProbeReply::Ok)).unwrap();
        let mut buf = [0u8; 1];
        assert_eq!(clients[1].read(&mut buf).unwrap(), 0, "closed");
    }
}
