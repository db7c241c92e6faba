//! The probe socket: connections admitted by their peer's credentials, one
//! request and reply per line.

use std::sync::Arc;

use gsched_core::probe::{code, encode, frame_len, ProbeReply, ProbeRequest};
use tokio::net::UnixListener;
use tracing::warn;

use super::{peer_cred, ProbeServer, FIRST_REQUEST_WITHIN, WAITED};

impl ProbeServer {
    /// Accepts connections for the life of the daemon. Each connection is
    /// served by its own thread with blocking I/O: a probe round trip then
    /// costs two system calls each way and no task wake-ups.
    pub async fn serve(self: Arc<Self>, listener: UnixListener) {
        loop {
            match listener.accept().await {
                Ok((stream, _)) => {
                    let this = Arc::clone(&self);
                    let stream = match stream
                        .into_std()
                        .and_then(|s| s.set_nonblocking(false).map(|_| s))
                    {
                        Ok(s) => s,
                        Err(e) => {
                            warn!(error = %e, "cannot take over a probe connection");
                            continue;
                        }
                    };
                    let peer = match peer_cred(&stream) {
                        Ok(c) => c,
                        Err(e) => {
                            warn!(error = %e, "probe peer credentials unreadable");
                            continue;
                        }
                    };
                    let Some(admitted) = self.admit(&stream, peer.0) else {
                        continue;
                    };
                    let spawned = std::thread::Builder::new()
                        .name("probe-conn".into())
                        .stack_size(256 * 1024)
                        .spawn(move || {
                            let _admitted = admitted;
                            this.connection(stream, peer)
                        });
                    if let Err(e) = spawned {
                        warn!(error = %e, "cannot start a probe connection thread");
                    }
                }
                Err(e) => {
                    warn!(error = %e, "probe socket accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
            }
        }
    }

    /// Counts a new connection against its uid's and the total limit; one
    /// over a limit is answered with the reason and closed.
    pub(super) fn admit(
        &self,
        stream: &std::os::unix::net::UnixStream,
        uid: u32,
    ) -> Option<gsched_daemon::limits::Admitted<u32>> {
        use std::io::Write;
        match self.limits.admit(uid) {
            Ok(a) => Some(a),
            Err(e) => {
                warn!(uid, error = %e, "probe connection refused");
                let _ = stream.set_write_timeout(Some(std::time::Duration::from_millis(100)));
                let _ = (&*stream)
                    .write_all(&encode(&ProbeReply::error(code::PROTOCOL, e.to_string())));
                None
            }
        }
    }

    /// Serves one connection of the process `(uid, pid)` (from the kernel).
    pub(super) fn connection(
        self: Arc<Self>,
        mut stream: std::os::unix::net::UnixStream,
        peer: (u32, u32),
    ) {
        use std::io::{Read, Write};
        let (uid, pid) = peer;
        let mut body = Vec::new();
        // A connection that sends nothing is closed; one that sent a request
        // may stay idle (a process keeps its connection between tasks).
        let _ = stream.set_read_timeout(Some(FIRST_REQUEST_WITHIN));
        let mut first = true;
        loop {
            let mut header = [0u8; 4];
            if stream.read_exact(&mut header).is_err() {
                return; // closed, or no first request in time
            }
            if std::mem::take(&mut first) {
                let _ = stream.set_read_timeout(None);
            }
            let n = match frame_len(header) {
                Ok(n) => n,
                Err(e) => {
                    let _ = stream
                        .write_all(&encode(&ProbeReply::error(code::PROTOCOL, e.to_string())));
                    return; // framing is lost
                }
            };
            body.resize(n, 0);
            if stream.read_exact(&mut body).is_err() {
                return;
            }
            let started = std::time::Instant::now();
            WAITED.with(|w| w.set(false));
            // A process's busy reports (one a second) are not what the
            // round-trip histogram is for: placements and growths.
            let mut counted = true;
            let (reply, begin) = match serde_json::from_slice::<ProbeRequest>(&body) {
                Ok(ProbeRequest::Tokens { job, key }) => {
                    match self.open_tokens(job, &key, uid, pid) {
                        Ok((instance, quota)) => {
                            if stream.write_all(&encode(&ProbeReply::Ok)).is_err() {
                                return;
                            }
                            // The connection is the token client's from now on.
                            self.tokens.serve(stream, job, pid, &instance, quota);
                            return;
                        }
                        Err(reply) => (reply, false),
                    }
                }
                Ok(req) => {
                    let begin = matches!(req, ProbeRequest::Begin { .. });
                    counted = !matches!(req, ProbeRequest::Busy { .. });
                    (self.handle(req, uid, pid), begin)
                }
                Err(e) => (
                    ProbeReply::error(code::PROTOCOL, format!("malformed probe request: {e}")),
                    false,
                ),
            };
            if stream.write_all(&encode(&reply)).is_err() {
                return;
            }
            if counted {
                self.observe(
                    started.elapsed().as_secs_f64(),
                    begin,
                    WAITED.with(|w| w.get()),
                );
            }
        }
    }
}
