//! Which gsched releases work together.
//!
//! Every daemon and command reports its release (`0.2.0`) and the protocol
//! its messages follow. A controller and a node work together when their
//! releases share the major version and are at most one minor version
//! apart, so nodes can be upgraded one at a time after the controller (or
//! before it); anything further apart is refused, naming both releases.

use std::fmt;

/// This build's release, from the workspace's `Cargo.toml`.
pub const RELEASE: &str = env!("CARGO_PKG_VERSION");

/// The protocol between commands, controller and nodes. Raised when a
/// message changes in a way an older peer cannot read; a change of it
/// comes with a minor release, so the release rule above covers it.
pub const PROTOCOL: u32 = 2;

/// What `--version` prints after the program's name: the release and the
/// protocol (kept equal to `PROTOCOL` by a test).
pub const VERSION_LINE: &str = concat!(env!("CARGO_PKG_VERSION"), " (protocol 2)");

/// The release that nodes which do not say theirs run: 0.1.0, the last
/// release before nodes reported it.
pub const UNSTATED_RELEASE: Release = Release {
    major: 0,
    minor: 1,
    patch: 0,
};

/// A release number, `MAJOR.MINOR.PATCH` (a pre-release suffix such as
/// `-rc1` is read and ignored).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Release {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl Release {
    /// This build's release.
    pub fn this() -> Release {
        Release::parse(RELEASE).unwrap_or(UNSTATED_RELEASE)
    }

    /// Reads `MAJOR.MINOR.PATCH`; `None` when it is not one.
    pub fn parse(text: &str) -> Option<Release> {
        let core = text.split(['-', '+']).next()?;
        let mut parts = core.split('.').map(|p| p.parse::<u32>().ok());
        let release = Release {
            major: parts.next()??,
            minor: parts.next()??,
            patch: parts.next()??,
        };
        parts.next().is_none().then_some(release)
    }

    /// The release a peer states, or the one before releases were stated.
    pub fn stated(text: &str) -> Result<Release, VersionMismatch> {
        if text.is_empty() {
            return Ok(UNSTATED_RELEASE);
        }
        Release::parse(text)
            .ok_or_else(|| VersionMismatch::Unreadable(text.chars().take(40).collect()))
    }
}

impl fmt::Display for Release {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// The protocol of peers that do not state one (0.1.0).
pub const UNSTATED_PROTOCOL: u32 = 1;

/// Why two releases do not work together.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VersionMismatch {
    #[error("{peer_role} speaks protocol {peer}, {our_role} protocol {ours}: protocols more than one apart do not work together; upgrade the older side")]
    ProtocolTooFarApart {
        ours: u32,
        our_role: &'static str,
        peer: u32,
        peer_role: String,
    },
    #[error("the peer's release '{0}' is not MAJOR.MINOR.PATCH")]
    Unreadable(String),
    #[error("{peer_role} runs gsched {peer}, {our_role} gsched {ours}: releases more than one minor version apart do not work together; upgrade the older one to at least {needed}")]
    TooFarApart {
        ours: Release,
        our_role: &'static str,
        peer: Release,
        peer_role: String,
        needed: String,
    },
}

/// Whether a peer of release `peer` (named by `peer_role`, e.g. "node
/// gpu01") works with us (`our_role`, e.g. "the controller"): same major
/// version, at most one minor version apart.
pub fn check_peer(
    ours: Release,
    our_role: &'static str,
    peer: Release,
    peer_role: &str,
) -> Result<(), VersionMismatch> {
    if ours.major == peer.major && ours.minor.abs_diff(peer.minor) <= 1 {
        return Ok(());
    }
    let newer = ours.max(peer);
    let needed = if newer.minor == 0 {
        format!("{}.0.0", newer.major)
    } else {
        format!("{}.{}.0", newer.major, newer.minor - 1)
    };
    Err(VersionMismatch::TooFarApart {
        ours,
        our_role,
        peer,
        peer_role: peer_role.to_string(),
        needed,
    })
}

/// Whether a peer of protocol `peer` (0: not stated, a peer of 0.1.0)
/// works with ours: at most one apart, as releases one minor version apart
/// are.
pub fn check_protocol(
    ours: u32,
    our_role: &'static str,
    peer: u32,
    peer_role: &str,
) -> Result<(), VersionMismatch> {
    let peer = if peer == 0 { UNSTATED_PROTOCOL } else { peer };
    if ours.abs_diff(peer) <= 1 {
        return Ok(());
    }
    Err(VersionMismatch::ProtocolTooFarApart {
        ours,
        our_role,
        peer,
        peer_role: peer_role.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(text: &str) -> Release {
        Release::parse(text).unwrap()
    }

    #[test]
    fn releases_read_with_and_without_suffixes() {
        assert_eq!(
            r("0.2.0"),
            Release {
                major: 0,
                minor: 2,
                patch: 0
            }
        );
        assert_eq!(
            r("1.10.3-rc1"),
            Release {
                major: 1,
                minor: 10,
                patch: 3
            }
        );
        assert_eq!(Release::parse("1.2"), None);
        assert_eq!(Release::parse("1.2.3.4"), None);
        assert_eq!(Release::parse("one.2.3"), None);
        assert_eq!(Release::stated("").unwrap(), UNSTATED_RELEASE);
        assert!(matches!(
            Release::stated("x"),
            Err(VersionMismatch::Unreadable(_))
        ));
        assert_eq!(
            Release::this().to_string(),
            RELEASE.split('-').next().unwrap()
        );
    }

    #[test]
    fn the_version_line_names_this_protocol() {
        assert_eq!(VERSION_LINE, format!("{RELEASE} (protocol {PROTOCOL})"));
    }

    #[test]
    fn one_minor_version_apart_works_either_way() {
        for (a, b) in [
            ("0.2.0", "0.1.0"),
            ("0.1.0", "0.2.0"),
            ("0.2.0", "0.2.7"),
            ("1.4.0", "1.5.2"),
        ] {
            assert_eq!(
                check_peer(r(a), "the controller", r(b), "node n1"),
                Ok(()),
                "{a} with {b}"
            );
        }
    }

    #[test]
    fn protocols_at_most_one_apart_work_and_unstated_is_the_first() {
        assert_eq!(check_protocol(2, "the controller", 0, "node n1"), Ok(()));
        assert_eq!(check_protocol(2, "the controller", 3, "node n1"), Ok(()));
        let e = check_protocol(2, "the controller", 99, "node n1").unwrap_err();
        assert_eq!(
            e.to_string(),
            "node n1 speaks protocol 99, the controller protocol 2: protocols more than one apart do not work together; upgrade the older side"
        );
        assert!(check_protocol(4, "the controller", 0, "node n1").is_err());
    }

    #[test]
    fn further_apart_is_refused_naming_both_releases() {
        for (a, b) in [
            ("0.3.0", "0.1.0"),
            ("0.1.0", "0.3.0"),
            ("1.0.0", "0.9.0"),
            ("2.1.0", "1.1.0"),
        ] {
            let e = check_peer(r(a), "the controller", r(b), "node n1").unwrap_err();
            let text = e.to_string();
            assert!(text.contains(&format!("node n1 runs gsched {b}")), "{text}");
            assert!(
                text.contains(&format!("the controller gsched {a}")),
                "{text}"
            );
        }
        let e = check_peer(r("0.4.0"), "the controller", r("0.1.0"), "node n1").unwrap_err();
        assert!(e.to_string().ends_with("at least 0.3.0"), "{e}");
    }
}
