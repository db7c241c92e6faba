//! A listener for the daemons' HTTP servers that caps open connections per
//! client and overall, and closes connections idle for too long (no byte
//! read or written), so idle or slow clients cannot take every file
//! descriptor of a daemon:
//! - a new connection must send its first byte within [`FIRST_BYTE`];
//! - when a client is at its cap (or the daemon at its total), the
//!   connection idle the longest (at least [`EVICTABLE_IDLE`]) of that
//!   client (of the client holding the most) is closed to make room,
//!   rather than the newcomer turned away: idle connections cannot hold
//!   slots against anyone, a daemon peer's own included. Only a client
//!   that keeps every one of its connections busy is refused more.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use axum::serve::Listener;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

use crate::limits::{Admitted, ConnectionLimits, LimitError};

/// The client key of root's processes on this host (`local_peer`).
const ROOT_HERE: &str = "local uid 0";

/// How long a new connection may take to send its first byte.
pub const FIRST_BYTE: Duration = Duration::from_secs(10);

/// How long a connection must have been idle to be closed for a newcomer
/// (a streaming answer, such as a step's, moves at least every second).
pub const EVICTABLE_IDLE: Duration = Duration::from_secs(2);

/// A listener whose connections can be told apart by client: an address
/// for TCP, a uid for a unix socket.
pub trait ClientOf: Listener {
    /// Who `io` (accepted from `addr`) counts against.
    fn client(io: &Self::Io, addr: &Self::Addr) -> String;
}

impl ClientOf for tokio::net::TcpListener {
    /// A connection from this host (any of its addresses) counts against
    /// its user (the kernel says whose socket it is: `local_peer`), so a
    /// local user's flood takes only that user's share and root's daemons
    /// on the host keep theirs; any other, against its address.
    fn client(io: &Self::Io, addr: &Self::Addr) -> String {
        match io
            .local_addr()
            .ok()
            .and_then(|l| crate::local_peer::uid_of(*addr, l))
        {
            Some(uid) => format!("local uid {uid}"),
            None => client_of_address(addr.ip()),
        }
    }
}

/// Who a TCP peer counts as: its address, except that every loopback
/// address (all of 127/8, `::1`, and IPv4-mapped loopback) is one client,
/// the local host, so a local user cannot take every slot by using many
/// loopback source addresses.
pub fn client_of_address(ip: std::net::IpAddr) -> String {
    let ip = match ip {
        std::net::IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map(std::net::IpAddr::V4)
            .unwrap_or(std::net::IpAddr::V6(v6)),
        v4 => v4,
    };
    if ip.is_loopback() {
        "loopback".into()
    } else {
        ip.to_string()
    }
}

impl ClientOf for tokio::net::UnixListener {
    fn client(io: &Self::Io, _: &Self::Addr) -> String {
        io.peer_cred()
            .map(|c| format!("uid {}", c.uid()))
            .unwrap_or_default()
    }
}

/// A listener that admits connections within [`ConnectionLimits`].
pub struct Bounded<L: ClientOf> {
    inner: L,
    limits: Arc<ConnectionLimits<String>>,
    idle: Duration,
    first_byte: Duration,
    slots: Arc<Slots>,
}

impl<L: ClientOf> Bounded<L> {
    /// At most `per_client` open connections per client and `total` in
    /// all; a connection idle for `idle` is closed.
    pub fn new(inner: L, per_client: usize, total: usize, idle: Duration) -> Self {
        Bounded {
            inner,
            limits: ConnectionLimits::new(per_client, total),
            idle,
            first_byte: FIRST_BYTE,
            slots: Arc::new(Slots::new(EVICTABLE_IDLE)),
        }
    }

    /// Its caps, to change while it serves ([`ConnectionLimits::set_total`]).
    pub fn limits(&self) -> Arc<ConnectionLimits<String>> {
        Arc::clone(&self.limits)
    }

    /// Shorter deadlines, for tests.
    #[cfg(test)]
    fn timing(mut self, first_byte: Duration, evictable: Duration) -> Self {
        self.first_byte = first_byte;
        self.slots = Arc::new(Slots::new(evictable));
        self
    }
}

impl<L: ClientOf> Listener for Bounded<L> {
    type Io = Guarded<L::Io>;
    type Addr = L::Addr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let (io, addr) = self.inner.accept().await;
            let client = L::client(&io, &addr);
            let admitted = match self.limits.admit(client.clone()) {
                Ok(a) => Some(a),
                // Root's own daemons on this host (gnoded's heartbeats,
                // gctld's launches) are held to their own cap only: other
                // users together cannot fill the total against them.
                Err(LimitError::Total { .. }) if client == ROOT_HERE => {
                    Some(self.limits.admit_in_place(client.clone()))
                }
                Err(e) => self.slots.evict_for(&client, &e).then(|| {
                    tracing::info!(
                        client,
                        "closed the connection idle the longest to make room"
                    );
                    self.limits.admit_in_place(client.clone())
                }),
            };
            match admitted {
                Some(a) => {
                    let slot = self.slots.open(&client);
                    let first = self.first_byte.min(self.idle);
                    return (Guarded::new(io, a, slot, self.idle, first), addr);
                }
                // Closed at once: the client sees the connection reset.
                None => tracing::warn!(
                    client,
                    "connection refused: every connection of the client is busy"
                ),
            }
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

/// What the listener knows of one open connection: when it last moved,
/// whether it is answering a request, and whether it is to be closed.
#[derive(Debug)]
struct Slot {
    /// Milliseconds since the listener's epoch.
    moved_ms: AtomicU64,
    /// Its last move was a read (a request, or part of one) with nothing
    /// written since: it is not idle but waiting for its answer.
    answering: AtomicBool,
    evicted: AtomicBool,
    closed: AtomicBool,
    waker: Mutex<Option<Waker>>,
}

/// The open connections by client, to find one to close for a newcomer.
#[derive(Debug)]
struct Slots {
    epoch: std::time::Instant,
    /// How long a connection must have been idle to be closed for another.
    evictable: Duration,
    by_client: Mutex<HashMap<String, Vec<Arc<Slot>>>>,
}

impl Slots {
    fn new(evictable: Duration) -> Slots {
        Slots {
            epoch: std::time::Instant::now(),
            evictable,
            by_client: Mutex::new(HashMap::new()),
        }
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    fn open(self: &Arc<Self>, client: &str) -> SlotHandle {
        let slot = Arc::new(Slot {
            moved_ms: AtomicU64::new(self.now_ms()),
            answering: AtomicBool::new(false),
            evicted: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            waker: Mutex::new(None),
        });
        let mut all = self.by_client.lock().unwrap_or_else(|p| p.into_inner());
        let list = all.entry(client.to_string()).or_default();
        list.retain(|s| !s.closed.load(Ordering::Relaxed));
        list.push(Arc::clone(&slot));
        SlotHandle {
            slots: Arc::clone(self),
            client: client.to_string(),
            slot,
        }
    }

    /// Forgets a closed connection (and its client with its last one).
    fn close(&self, client: &str, slot: &Arc<Slot>) {
        let mut all = self.by_client.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(list) = all.get_mut(client) {
            list.retain(|s| !Arc::ptr_eq(s, slot));
            if list.is_empty() {
                all.remove(client);
            }
        }
    }

    /// Marks for closing the connection idle the longest (at least
    /// [`EVICTABLE_IDLE`], and not in the middle of an answer: a request
    /// read and not yet answered) of `client`, or, when the daemon is full,
    /// of the clients holding the most, biggest first; returns whether one
    /// was found.
    fn evict_for(&self, client: &str, refused: &LimitError) -> bool {
        let now = self.now_ms();
        let mut all = self.by_client.lock().unwrap_or_else(|p| p.into_inner());
        for list in all.values_mut() {
            list.retain(|s| {
                !s.closed.load(Ordering::Relaxed) && !s.evicted.load(Ordering::Relaxed)
            });
        }
        all.retain(|_, l| !l.is_empty());
        let evictable = |sl: &&Arc<Slot>| {
            !sl.answering.load(Ordering::Relaxed)
                && now.saturating_sub(sl.moved_ms.load(Ordering::Relaxed))
                    >= self.evictable.as_millis() as u64
        };
        let oldest_of = |l: &Vec<Arc<Slot>>| {
            l.iter()
                .filter(evictable)
                .min_by_key(|sl| sl.moved_ms.load(Ordering::Relaxed))
                .cloned()
        };
        let oldest = match refused {
            LimitError::PerClient { .. } => all.get(client).and_then(oldest_of),
            LimitError::Total { .. } => {
                let mut by_size: Vec<&Vec<Arc<Slot>>> = all.values().collect();
                by_size.sort_by_key(|l| std::cmp::Reverse(l.len()));
                by_size.into_iter().find_map(oldest_of)
            }
        };
        let Some(victim) = oldest else {
            return false;
        };
        victim.evicted.store(true, Ordering::Relaxed);
        if let Some(w) = victim
            .waker
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            w.wake();
        }
        true
    }
}

/// A connection's place in [`Slots`]; forgotten when dropped.
#[derive(Debug)]
struct SlotHandle {
    slots: Arc<Slots>,
    client: String,
    slot: Arc<Slot>,
}

impl SlotHandle {
    /// Bytes moved: read (`answering` from now) or written (answered).
    fn moved(&self, read: bool) {
        self.slot
            .moved_ms
            .store(self.slots.now_ms(), Ordering::Relaxed);
        self.slot.answering.store(read, Ordering::Relaxed);
    }

    fn evicted(&self, cx: &Context<'_>) -> bool {
        *self.slot.waker.lock().unwrap_or_else(|p| p.into_inner()) = Some(cx.waker().clone());
        self.slot.evicted.load(Ordering::Relaxed)
    }
}

impl Drop for SlotHandle {
    fn drop(&mut self) {
        self.slot.closed.store(true, Ordering::Relaxed);
        self.slots.close(&self.client, &self.slot);
    }
}

/// An admitted connection: gives its place back when closed, and fails
/// with `TimedOut` once nothing moved on it for the idle time (for the
/// first byte, [`FIRST_BYTE`]), or `ConnectionAborted` once closed to make
/// room for another.
pub struct Guarded<T> {
    inner: T,
    _admitted: Admitted<String>,
    slot: SlotHandle,
    idle: Duration,
    deadline: Pin<Box<Sleep>>,
}

impl<T> Guarded<T> {
    fn new(
        inner: T,
        admitted: Admitted<String>,
        slot: SlotHandle,
        idle: Duration,
        first_byte: Duration,
    ) -> Self {
        Guarded {
            inner,
            _admitted: admitted,
            slot,
            idle,
            deadline: Box::pin(tokio::time::sleep(first_byte)),
        }
    }

    /// The connection itself (for its peer's credentials).
    pub fn get_ref(&self) -> &T {
        &self.inner
    }

    fn moved(&mut self, read: bool) {
        self.deadline.as_mut().reset(Instant::now() + self.idle);
        self.slot.moved(read);
    }

    /// After the inner stream said Pending: `TimedOut` once idle too long,
    /// `ConnectionAborted` once closed for a newcomer.
    fn check_idle(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        if self.slot.evicted(cx) {
            return Poll::Ready(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "closed to make room for another connection (this one was idle)",
            ));
        }
        match self.deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(io::Error::new(
                io::ErrorKind::TimedOut,
                "connection idle for too long",
            )),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Guarded<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(r) => {
                this.moved(true);
                Poll::Ready(r)
            }
            Poll::Pending => this.check_idle(cx).map(Err),
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Guarded<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_write(cx, buf) {
            Poll::Ready(r) => {
                this.moved(false);
                Poll::Ready(r)
            }
            Poll::Pending => this.check_idle(cx).map(Err),
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn connections_beyond_the_cap_are_closed_and_idle_ones_time_out() {
        let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = tcp.local_addr().unwrap();
        let mut l = Bounded::new(tcp, 2, 10, Duration::from_millis(300));
        let mut c1 = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (mut s1, _) = l.accept().await;
        let _c2 = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (_s2, _) = l.accept().await;
        // The third from the same address is closed; the next admitted
        // connection is the fourth, after s1 gives its place back.
        let mut c3 = tokio::net::TcpStream::connect(addr).await.unwrap();
        c1.write_all(b"x").await.unwrap();
        let mut b = [0u8; 1];
        s1.read_exact(&mut b).await.unwrap();
        // s1 now idles: its read fails with TimedOut.
        let e = s1.read(&mut b).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        drop(s1);
        let _c4 = tokio::net::TcpStream::connect(addr).await.unwrap();
        let accepting = tokio::spawn(async move { l.accept().await.1 });
        let got = tokio::time::timeout(Duration::from_secs(5), accepting)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got.ip(), addr.ip());
        // c3 was closed by the listener.
        let n = tokio::time::timeout(Duration::from_secs(5), c3.read(&mut b))
            .await
            .unwrap()
            .unwrap_or(0);
        assert_eq!(n, 0);
    }

    #[tokio::test]
    async fn a_full_client_gets_room_from_its_longest_idle_connection() {
        let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = tcp.local_addr().unwrap();
        let evictable = Duration::from_millis(300);
        let mut l = Bounded::new(tcp, 2, 10, Duration::from_secs(60))
            .timing(Duration::from_secs(60), evictable);
        let mut c1 = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (mut s1, _) = l.accept().await;
        let mut c2 = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (mut s2, _) = l.accept().await;
        let mut b = [0u8; 1];
        // s1 answers a request; s2 reads one and does not answer yet.
        c1.write_all(b"a").await.unwrap();
        s1.read_exact(&mut b).await.unwrap();
        s1.write_all(b"A").await.unwrap();
        c1.read_exact(&mut b).await.unwrap();
        c2.write_all(b"q").await.unwrap();
        s2.read_exact(&mut b).await.unwrap();
        // Both busy: a third is refused (closed at once), and nothing is
        // admitted.
        let mut c3 = tokio::net::TcpStream::connect(addr).await.unwrap();
        assert!(tokio::time::timeout(Duration::from_millis(100), l.accept())
            .await
            .is_err());
        let refused = tokio::spawn(async move { c3.read(&mut [0u8; 1]).await.unwrap_or(0) });
        // Both idle past the eviction age: s1 answered, s2 is still
        // answering its request (a handler at work) and is never chosen.
        tokio::time::sleep(evictable + Duration::from_millis(200)).await;
        // The next one gets in: s1 is closed for it, s2 stays.
        let _c4 = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (_s4, _) = tokio::time::timeout(Duration::from_secs(5), l.accept())
            .await
            .unwrap();
        assert_eq!(refused.await.unwrap(), 0, "c3 was closed by the listener");
        let e = s1.read(&mut b).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::ConnectionAborted);
        c2.write_all(b"y").await.unwrap();
        s2.read_exact(&mut b).await.unwrap();
        assert_eq!(&b, b"y");
    }

    #[tokio::test]
    async fn a_connection_that_sends_nothing_is_closed_at_the_first_byte_deadline() {
        let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = tcp.local_addr().unwrap();
        let mut l = Bounded::new(tcp, 2, 10, Duration::from_secs(60))
            .timing(Duration::from_millis(200), Duration::from_secs(5));
        let _c = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (mut s, _) = l.accept().await;
        let t = std::time::Instant::now();
        let e = s.read(&mut [0u8; 1]).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert!(t.elapsed() < Duration::from_secs(30), "{:?}", t.elapsed());
    }
}
