//! TLS for the TCP connections between hosts (rustls, ring): the daemons'
//! server side (a certificate and key from PEM files), and the clients'
//! trust (a CA file). Plain HTTP stays for loopback and the unix socket.

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::serve::Listener;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio::sync::mpsc;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read the certificates in {path}: {why}")]
    Certs { path: String, why: String },
    #[error("{path} holds no certificate (PEM `BEGIN CERTIFICATE` blocks)")]
    NoCerts { path: String },
    #[error("cannot read the private key in {path}: {why}")]
    Key { path: String, why: String },
    #[error("the certificate in {cert} and the key in {key} do not go together: {why}")]
    Mismatch {
        cert: String,
        key: String,
        why: String,
    },
    #[error(
        "the TLS key {path} may be read or changed by others (mode {mode:04o}, owner uid {uid}): \
         `chown root {path}; chmod 600 {path}`"
    )]
    KeyExposed { path: String, mode: u32, uid: u32 },
    #[error("the CA file {path} has no usable certificate: {why}")]
    Ca { path: String, why: String },
    #[error(
        "--tls-cert and --tls-key go together: give both (or neither, for plain HTTP on loopback)"
    )]
    Half,
    #[error(
        "{what} {addr} is not a loopback address, and plain HTTP there would carry tokens and \
         the cluster key in clear: give --tls-cert and --tls-key (see docs/security.md), or \
         --allow-plain-http on a network only trusted hosts can reach"
    )]
    PlainOffLoopback {
        what: &'static str,
        addr: SocketAddr,
    },
}

/// A daemon's certificate and key files (`--tls-cert`, `--tls-key`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl ServerFiles {
    /// Both files or neither.
    pub fn from_flags(
        cert: Option<&Path>,
        key: Option<&Path>,
    ) -> Result<Option<ServerFiles>, TlsError> {
        match (cert, key) {
            (Some(c), Some(k)) => Ok(Some(ServerFiles {
                cert: c.to_path_buf(),
                key: k.to_path_buf(),
            })),
            (None, None) => Ok(None),
            _ => Err(TlsError::Half),
        }
    }
}

/// Refuses plain HTTP on an address other hosts may reach, unless the
/// administrator said the network is trusted.
pub fn check_plain_allowed(
    what: &'static str,
    addr: SocketAddr,
    tls: bool,
    allow_plain: bool,
) -> Result<(), TlsError> {
    if tls || allow_plain || addr.ip().is_loopback() {
        Ok(())
    } else {
        Err(TlsError::PlainOffLoopback { what, addr })
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let shown = path.display().to_string();
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| TlsError::Certs {
            path: shown.clone(),
            why: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCerts { path: shown });
    }
    Ok(certs)
}

/// The server side: the certificate chain (leaf first) and its key. The
/// key file must be private to the daemon's user (checked like the other
/// key files).
pub fn server_config(files: &ServerFiles) -> Result<Arc<ServerConfig>, TlsError> {
    check_key_private(&files.key)?;
    let chain = certs(&files.cert)?;
    let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|e| TlsError::Key {
        path: files.key.display().to_string(),
        why: e.to_string(),
    })?;
    let mismatch = |why: String| TlsError::Mismatch {
        cert: files.cert.display().to_string(),
        key: files.key.display().to_string(),
        why,
    };
    let config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| mismatch(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| mismatch(e.to_string()))?;
    Ok(Arc::new(config))
}

/// The key must be the daemon's user's or root's, and no one else's to
/// read or write. Links are followed: certificate managers link keys from
/// directories only root may change.
fn check_key_private(path: &Path) -> Result<(), TlsError> {
    use std::os::unix::fs::MetadataExt;
    let shown = path.display().to_string();
    let meta = std::fs::metadata(path).map_err(|e| TlsError::Key {
        path: shown.clone(),
        why: e.to_string(),
    })?;
    let me = nix::unistd::geteuid().as_raw();
    let mode = meta.mode() & 0o7777;
    if mode & 0o077 != 0 || (meta.uid() != me && meta.uid() != 0) {
        return Err(TlsError::KeyExposed {
            path: shown,
            mode,
            uid: meta.uid(),
        });
    }
    Ok(())
}

/// A client that trusts the certificates in `ca` (PEM) and nothing else.
pub fn client_config(ca: &Path) -> Result<ClientConfig, TlsError> {
    let ca_error = |why: String| TlsError::Ca {
        path: ca.display().to_string(),
        why,
    };
    let mut roots = RootCertStore::empty();
    for cert in certs(ca).map_err(|e| ca_error(e.to_string()))? {
        roots.add(cert).map_err(|e| ca_error(e.to_string()))?;
    }
    Ok(ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| ca_error(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// The HTTP client for daemon-to-daemon calls (gctld to gnoded and back):
/// trusting `ca` when given (for `https://` peers), plain otherwise.
pub fn http_client(ca: Option<&Path>) -> Result<reqwest::Client, TlsError> {
    let builder = reqwest::Client::builder()
        // Below the servers' idle timeout, so a pooled connection is never
        // reused just as the other side closes it.
        .pool_idle_timeout(Duration::from_secs(30))
        .timeout(Duration::from_secs(10))
        // A daemon's request goes where it was addressed, never where an
        // answer points (a squatter's redirect to another node).
        .redirect(reqwest::redirect::Policy::none());
    let builder = match ca {
        Some(ca) => builder.use_preconfigured_tls(client_config(ca)?),
        None => builder,
    };
    builder.build().map_err(|e| TlsError::Ca {
        path: ca.map(|p| p.display().to_string()).unwrap_or_default(),
        why: e.to_string(),
    })
}

/// A daemon's TCP API as its flags ask: TLS or plain, refusing plain HTTP
/// off loopback unless allowed.
pub struct Endpoint {
    tls: Option<Arc<ServerConfig>>,
}

impl Endpoint {
    /// From `--tls-cert`, `--tls-key`, `--listen` and `--allow-plain-http`.
    pub fn from_flags(
        cert: Option<&Path>,
        key: Option<&Path>,
        listen: SocketAddr,
        allow_plain: bool,
    ) -> Result<Endpoint, TlsError> {
        let tls = ServerFiles::from_flags(cert, key)?
            .as_ref()
            .map(server_config)
            .transpose()?;
        check_plain_allowed("--listen", listen, tls.is_some(), allow_plain)?;
        Ok(Endpoint { tls })
    }

    /// `https` or `http`.
    pub fn scheme(&self) -> &'static str {
        if self.tls.is_some() {
            "https"
        } else {
            "http"
        }
    }

    /// Serves `app` on `listener` (over TLS when configured) in a task of
    /// its own; `what` names it in the log if it stops.
    pub fn serve<L>(&self, what: &'static str, listener: L, app: axum::Router)
    where
        L: Listener,
        L::Addr: Clone + Sync + std::fmt::Debug,
    {
        match &self.tls {
            Some(config) => spawn_serve(what, TlsListener::new(listener, Arc::clone(config)), app),
            None => spawn_serve(what, listener, app),
        }
    }
}

fn spawn_serve<L>(what: &'static str, listener: L, app: axum::Router)
where
    L: Listener,
    L::Addr: std::fmt::Debug,
{
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "{what} server stopped");
        }
    });
}

/// How long a client has to finish its TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves TLS over another listener. Handshakes run in their own tasks
/// (with [`HANDSHAKE_TIMEOUT`]), so a slow client never holds up the
/// others; the inner listener's limits count each connection from accept
/// to close.
pub struct TlsListener<L: Listener> {
    ready: mpsc::Receiver<(TlsStream<L::Io>, L::Addr)>,
    local: io::Result<L::Addr>,
}

impl<L> TlsListener<L>
where
    L: Listener,
    L::Addr: Clone + Sync,
{
    pub fn new(mut inner: L, config: Arc<ServerConfig>) -> TlsListener<L> {
        let local = inner.local_addr();
        let acceptor = TlsAcceptor::from(config);
        let (tx, ready) = mpsc::channel(64);
        tokio::spawn(async move {
            loop {
                let (io, addr) = inner.accept().await;
                let (acceptor, tx) = (acceptor.clone(), tx.clone());
                if tx.is_closed() {
                    return;
                }
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(io)).await {
                        Ok(Ok(stream)) => {
                            let _ = tx.send((stream, addr)).await;
                        }
                        Ok(Err(e)) => tracing::debug!(error = %e, "TLS handshake failed"),
                        Err(_) => tracing::debug!("TLS handshake timed out"),
                    }
                });
            }
        });
        TlsListener { ready, local }
    }
}

impl<L> Listener for TlsListener<L>
where
    L: Listener,
    L::Addr: Clone + Sync,
{
    type Io = TlsStream<L::Io>;
    type Addr = L::Addr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(conn) => conn,
            // The accepting task ended (it never does on its own): serve
            // nothing more.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        match &self.local {
            Ok(a) => Ok(a.clone()),
            Err(e) => Err(io::Error::new(e.kind(), e.to_string())),
        }
    }
}

#[cfg(test)]
mod tests;
