//! The URL a daemon tells others to reach it at: given (`--advertise-url`),
//! or derived from the bound address. An unspecified address (`0.0.0.0`,
//! `::`) is never advertised: it means "every interface here" to the
//! listener and "this host" to whoever connects, so another host would
//! reach itself.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs, UdpSocket};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AdvertiseError {
    #[error("--advertise-url {url}: {why}")]
    Bad { url: String, why: String },
    #[error(
        "listening on {bound}, which other hosts cannot connect to as such, and no address \
         of this host could be derived ({why}): give --advertise-url http(s)://HOST:{port}"
    )]
    Underivable {
        bound: SocketAddr,
        port: u16,
        why: String,
    },
}

/// The URL to advertise. `given` wins (checked); else the bound address,
/// or, when that is unspecified, `routed`: the address this host uses
/// toward its peer (the controller, for a node), else `host_name`.
pub fn choose(
    given: Option<&str>,
    scheme: &str,
    bound: SocketAddr,
    routed: Option<IpAddr>,
    host_name: Option<&str>,
) -> Result<String, AdvertiseError> {
    if let Some(url) = given {
        return check_given(url);
    }
    if !bound.ip().is_unspecified() {
        return Ok(format!("{scheme}://{bound}"));
    }
    let port = bound.port();
    match (routed.filter(|ip| !ip.is_unspecified()), host_name) {
        (Some(ip), _) => Ok(format!("{scheme}://{}", SocketAddr::new(ip, port))),
        (None, Some(h)) if !h.is_empty() => Ok(format!("{scheme}://{h}:{port}")),
        _ => Err(AdvertiseError::Underivable {
            bound,
            port,
            why: "no route toward the peer and no host name".into(),
        }),
    }
}

fn check_given(url: &str) -> Result<String, AdvertiseError> {
    let bad = |why: &str| AdvertiseError::Bad {
        url: url.into(),
        why: why.into(),
    };
    let parsed = reqwest::Url::parse(url).map_err(|e| bad(&e.to_string()))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(bad("the scheme must be http or https"));
    }
    let unspecified = match parsed.host() {
        None => return Err(bad("no host")),
        Some(url::Host::Ipv4(ip)) => ip.is_unspecified(),
        Some(url::Host::Ipv6(ip)) => ip.is_unspecified(),
        Some(url::Host::Domain(_)) => false,
    };
    if unspecified {
        return Err(bad(
            "an unspecified address is not reachable from other hosts",
        ));
    }
    Ok(url.trim_end_matches('/').to_string())
}

/// The address this host sends from toward `peer_url`'s host (a UDP
/// socket "connected" to it: no packet is sent).
pub fn routed_toward(peer_url: &str) -> Option<IpAddr> {
    let url = reqwest::Url::parse(peer_url).ok()?;
    let host = url
        .host_str()?
        .trim_start_matches('[')
        .trim_end_matches(']');
    let port = url.port_or_known_default()?;
    let peer = (host, port).to_socket_addrs().ok()?.next()?;
    let any: SocketAddr = if peer.is_ipv4() {
        "0.0.0.0:0".parse().ok()?
    } else {
        "[::]:0".parse().ok()?
    };
    let sock = UdpSocket::bind(any).ok()?;
    sock.connect(peer).ok()?;
    Some(sock.local_addr().ok()?.ip())
}

/// This host's name, if it has one.
pub fn host_name() -> Option<String> {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_bound_address_is_advertised_as_it_is() {
        let u = choose(None, "http", addr("10.0.0.5:6818"), None, None).unwrap();
        assert_eq!(u, "http://10.0.0.5:6818");
    }

    #[test]
    fn an_unspecified_address_is_replaced_never_advertised() {
        let any = addr("0.0.0.0:6818");
        let routed = Some("10.1.2.3".parse().unwrap());
        assert_eq!(
            choose(None, "https", any, routed, Some("n1")).unwrap(),
            "https://10.1.2.3:6818"
        );
        assert_eq!(
            choose(None, "http", any, None, Some("n1")).unwrap(),
            "http://n1:6818"
        );
        let e = choose(None, "http", addr("[::]:6818"), None, None).unwrap_err();
        assert!(e.to_string().contains("--advertise-url"), "{e}");
    }

    #[test]
    fn a_given_url_is_checked() {
        let any = addr("0.0.0.0:1");
        assert_eq!(
            choose(Some("https://node7.lab:6818/"), "http", any, None, None).unwrap(),
            "https://node7.lab:6818"
        );
        for bad in [
            "http://0.0.0.0:6818",
            "ftp://n:1",
            "not a url",
            "http://[::]:1",
        ] {
            assert!(choose(Some(bad), "http", any, None, None).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_route_toward_loopback_is_loopback() {
        let ip = routed_toward("http://127.0.0.1:6817").unwrap();
        assert!(ip.is_loopback(), "{ip}");
    }
}
