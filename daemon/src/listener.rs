//! A listener for the daemons' HTTP servers that caps open connections per
//! client and overall, and closes connections idle for too long (no byte
//! read or written), so idle or slow clients cannot take every file
//! descriptor of a daemon.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::serve::Listener;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

use crate::limits::{Admitted, ConnectionLimits};

/// A listener whose connections can be told apart by client: an address
/// for TCP, a uid for a unix socket.
pub trait ClientOf: Listener {
    /// Who `io` (accepted from `addr`) counts against.
    fn client(io: &Self::Io, addr: &Self::Addr) -> String;
}

impl ClientOf for tokio::net::TcpListener {
    fn client(_: &Self::Io, addr: &Self::Addr) -> String {
        client_of_address(addr.ip())
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
}

impl<L: ClientOf> Bounded<L> {
    /// At most `per_client` open connections per client and `total` in
    /// all; a connection idle for `idle` is closed.
    pub fn new(inner: L, per_client: usize, total: usize, idle: Duration) -> Self {
        Bounded {
            inner,
            limits: ConnectionLimits::new(per_client, total),
            idle,
        }
    }
}

impl<L: ClientOf> Listener for Bounded<L> {
    type Io = Guarded<L::Io>;
    type Addr = L::Addr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let (io, addr) = self.inner.accept().await;
            let client = L::client(&io, &addr);
            match self.limits.admit(client) {
                Ok(admitted) => return (Guarded::new(io, admitted, self.idle), addr),
                // Closed at once: the client sees the connection reset.
                Err(e) => tracing::warn!(error = %e, "connection refused"),
            }
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

/// An admitted connection: gives its place back when closed, and fails
/// with `TimedOut` once nothing moved on it for the idle time.
pub struct Guarded<T> {
    inner: T,
    _admitted: Admitted<String>,
    idle: Duration,
    deadline: Pin<Box<Sleep>>,
}

impl<T> Guarded<T> {
    fn new(inner: T, admitted: Admitted<String>, idle: Duration) -> Self {
        Guarded {
            inner,
            _admitted: admitted,
            idle,
            deadline: Box::pin(tokio::time::sleep(idle)),
        }
    }

    /// The connection itself (for its peer's credentials).
    pub fn get_ref(&self) -> &T {
        &self.inner
    }

    fn moved(&mut self) {
        self.deadline.as_mut().reset(Instant::now() + self.idle);
    }

    /// After the inner stream said Pending: `TimedOut` once idle too long.
    fn check_idle(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
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
                this.moved();
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
                this.moved();
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
}
