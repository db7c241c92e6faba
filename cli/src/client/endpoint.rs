//! One controller and how a command's requests reach it: over TCP (with
//! a token when one is known), or through its local socket, found where
//! only its user can have put it.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Result};
use gsched_core::env::TLS_CA_ENV;

use super::{tls_ca, NotConnected, Unreachable};

/// Where one request goes.
pub(super) enum Route<'a> {
    /// TCP, with the token to send (none to a plain-HTTP loopback port).
    Http(&'a ureq::Agent, Option<&'a str>),
    Unix(PathBuf),
}

/// One controller and how requests reach it.
pub(super) struct Endpoint {
    pub(super) base: String,
    pub(super) transport: Transport,
}

/// How requests reach the controller.
pub(super) enum Transport {
    /// TCP, with a token when one is known. To a plain-HTTP loopback URL
    /// (`loopback_port`), requests go through the controller's local
    /// socket, found where only its user can have put it
    /// (`crate::local_socket`), never by asking the port; no token and no
    /// request body ever goes to a loopback port over plain HTTP.
    Http {
        agent: ureq::Agent,
        token: Option<String>,
        loopback_port: Option<u16>,
        /// TLS: the server is verified, so a token may go to the port when
        /// no local socket is found.
        tls: bool,
    },
    /// The controller's local socket: no token, the kernel says who we are.
    Unix(PathBuf),
    /// No request can be made: why (a CA file that cannot be used).
    Unusable(String),
}

impl Endpoint {
    pub(super) fn with_token(base: &str, token: Option<String>) -> Endpoint {
        if let Some(path) = base.strip_prefix("unix:") {
            return Endpoint {
                base: base.to_string(),
                transport: Transport::Unix(PathBuf::from(path)),
            };
        }
        let base = base.trim_end_matches('/').to_string();
        let mut agent = ureq::AgentBuilder::new().timeout(Duration::from_secs(30));
        let ca = match tls_ca() {
            Ok(ca) => ca,
            Err(e) => {
                return Endpoint {
                    base,
                    transport: Transport::Unusable(format!("{e:#}")),
                }
            }
        };
        if let Some(ca) = ca {
            match crate::tls::client_config(&ca) {
                Ok(config) => agent = agent.tls_config(config),
                Err(e) => {
                    return Endpoint {
                        base,
                        transport: Transport::Unusable(format!(
                            "{} ({TLS_CA_ENV}): {e}",
                            ca.display()
                        )),
                    }
                }
            }
        }
        let agent = agent.build();
        let loopback_port = loopback_port(&base);
        let tls = base.to_ascii_lowercase().starts_with("https://");
        Endpoint {
            base,
            transport: Transport::Http {
                agent,
                token,
                loopback_port,
                tls,
            },
        }
    }

    /// Where the next request goes. A plain-HTTP loopback controller is
    /// reached through its trusted local socket; without one, only a
    /// request that carries nothing (no token, no body) goes to the port.
    /// Looked up again at every attempt, so a restarting controller's
    /// socket is found once it is back.
    pub(super) fn route(&self, has_body: bool) -> Result<Route<'_>> {
        match &self.transport {
            Transport::Unusable(why) => bail!("{why}"),
            Transport::Unix(sock) => match crate::local_socket::check(sock) {
                Ok(()) => Ok(Route::Unix(sock.clone())),
                Err(e) if e.is_missing() => Err(NotConnected(e.to_string()).into()),
                Err(e) => bail!("refusing the controller socket: {e}"),
            },
            Transport::Http {
                agent,
                token,
                loopback_port: None,
                ..
            } => Ok(Route::Http(agent, token.as_deref())),
            // Over TLS the server is verified: a token goes there as given.
            Transport::Http {
                agent,
                token: Some(token),
                tls: true,
                ..
            } => Ok(Route::Http(agent, Some(token))),
            Transport::Http {
                agent,
                token,
                loopback_port: Some(port),
                tls,
            } => match crate::local_socket::find(*port) {
                Ok(sock) => Ok(Route::Unix(sock)),
                Err(_) if *tls => Ok(Route::Http(agent, token.as_deref())),
                Err(_) if token.is_none() && !has_body => Ok(Route::Http(agent, None)),
                Err(why) => {
                    let why: Vec<String> = why.iter().map(|w| w.to_string()).collect();
                    Err(NotConnected(format!(
                        "no trusted local socket of the controller ({}); a token or a request is never sent over plain HTTP to a loopback port, which any local user may hold while the controller restarts (set {} to the controller's socket, or use https)",
                        why.join("; "),
                        gsched_core::env::SOCKET_ENV
                    ))
                    .into())
                }
            },
        }
    }

    pub(super) fn unreachable(&self, why: impl std::fmt::Display) -> anyhow::Error {
        Unreachable(format!(
            "cannot reach the gsched controller at {}: {why}; is `gsched up` (or gctld) running, and is GSCHED_URL (or [cluster] controller in /etc/gsched/gsched.toml) right?",
            self.base
        ))
        .into()
    }
}

/// The port of an http(s) URL on this host's loopback (any of 127/8,
/// `::1`, IPv4-mapped loopback, `localhost`, in any case) or its wildcard
/// address (`0.0.0.0`, `::`, which reach this host); `None` for another
/// host. Commands reach such a controller through its local socket.
pub(super) fn loopback_port(base: &str) -> Option<u16> {
    let url = url::Url::parse(base).ok()?;
    if !matches!(url.scheme(), "http" | "https") {
        return None;
    }
    let local = match url.host()? {
        url::Host::Domain(d) => {
            let d = d.trim_end_matches('.').to_ascii_lowercase();
            d == "localhost" || d.ends_with(".localhost")
        }
        url::Host::Ipv4(ip) => ip.is_loopback() || ip.is_unspecified(),
        url::Host::Ipv6(ip) => {
            ip.is_loopback()
                || ip.is_unspecified()
                || ip.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    };
    local.then(|| url.port_or_known_default().unwrap_or(80))
}
