//! Which controller leads: a lease in the database all controllers share,
//! with a fencing epoch.
//!
//! The leader holds the lease while it renews it; a lease not renewed for
//! its length (read on the database's clock, so the controllers' clocks
//! need not agree) may be taken by another controller, which raises the
//! epoch. Every write the leader commits checks the epoch in the same
//! transaction, so a leader that was paused or cut off and wakes up cannot
//! write once another has taken over; and it stops acting on its own (see
//! [`Timings::step_down_after`]) before its lease can have been taken.
//! Nodes learn the epoch from the leader and refuse calls with an older
//! one. A lease whose holder is known dead (the same machine by host name
//! and machine id, and in the same boot and process namespace its process
//! gone) is taken at once, so a restarted controller need not wait out its
//! own lease. Nothing here reads a clock or a
//! process table: the caller passes them in.

use std::time::Duration;

/// A controller process, as the lease names its holder: its host name and
/// machine id (both, since neither alone is sure to differ between
/// machines), the machine's boot, its process-id namespace, and its
/// process id and start time (clock ticks since boot, which tells a reused
/// pid apart). A part that could not be read is [`UNKNOWN`], and a holder
/// with an unknown part is never taken for dead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub host: String,
    pub machine: String,
    pub boot: String,
    pub pid_namespace: String,
    pub pid: u32,
    pub started: u64,
}

/// A part of a [`Holder`] that could not be read.
pub const UNKNOWN: &str = "-";

impl Holder {
    /// As stored: `host machine boot pid_namespace pid started`, each part
    /// without spaces (an empty or spaced one is stored as [`UNKNOWN`]).
    pub fn to_stored(&self) -> String {
        let part = |s: &str| {
            if s.is_empty() || s.contains(char::is_whitespace) {
                UNKNOWN.to_string()
            } else {
                s.to_string()
            }
        };
        format!(
            "{} {} {} {} {} {}",
            part(&self.host),
            part(&self.machine),
            part(&self.boot),
            part(&self.pid_namespace),
            self.pid,
            self.started
        )
    }

    /// A stored holder (`None`: one this release does not read, which is
    /// then never taken for dead).
    pub fn parse(stored: &str) -> Option<Holder> {
        let mut parts = stored.split(' ');
        let holder = Holder {
            host: parts.next()?.to_string(),
            machine: parts.next()?.to_string(),
            boot: parts.next()?.to_string(),
            pid_namespace: parts.next()?.to_string(),
            pid: parts.next()?.parse().ok()?,
            started: parts.next()?.parse().ok()?,
        };
        parts.next().is_none().then_some(holder)
    }

    /// Whether `other` is known to be gone, as seen from this process: on
    /// this very machine (same host name and machine id), in this boot and
    /// process namespace, and its process (pid and start time) not
    /// `alive`. A holder of another boot is not taken for gone: cloned
    /// machines can share a host name and machine id, and after a real
    /// reboot the lease has long run out anyway.
    fn sees_gone(&self, other: &Holder, alive: impl Fn(u32, u64) -> bool) -> bool {
        let known = |s: &str| !s.is_empty() && s != UNKNOWN;
        let same = |a: &str, b: &str| known(a) && a == b;
        other != self
            && same(&other.host, &self.host)
            && same(&other.machine, &self.machine)
            && same(&other.boot, &self.boot)
            && same(&other.pid_namespace, &self.pid_namespace)
            && other.started != 0
            && !alive(other.pid, other.started)
    }
}

/// The lease as the database holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// Raised at every takeover; every write carries it.
    pub epoch: i64,
    /// [`Holder::to_stored`] of the leader.
    pub holder: String,
    /// The leader's API URL, which standbys name to clients and nodes.
    pub address: String,
    /// When it runs out unless renewed, unix milliseconds on the database's
    /// clock.
    pub expires_ms: i64,
}

/// Whether a controller may take the lease now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// No controller ever led.
    Free,
    /// Not renewed in time.
    Expired,
    /// Its holder ran on this machine, in this boot, and has exited.
    HolderGone,
    /// Held: wait, and try again (it runs out at `until`, database clock).
    Held { until: i64 },
}

impl Claim {
    pub fn may_take(&self) -> bool {
        !matches!(self, Claim::Held { .. })
    }
}

/// Decides whether `me` may take `lease` at `now_ms` (database clock);
/// `alive(pid, started)` says whether that process runs on this host.
pub fn claim(
    lease: Option<&Lease>,
    now_ms: i64,
    me: &Holder,
    alive: impl Fn(u32, u64) -> bool,
) -> Claim {
    let Some(lease) = lease else {
        return Claim::Free;
    };
    if lease.expires_ms <= now_ms {
        return Claim::Expired;
    }
    if Holder::parse(&lease.holder).is_some_and(|holder| me.sees_gone(&holder, alive)) {
        return Claim::HolderGone;
    }
    Claim::Held {
        until: lease.expires_ms,
    }
}

/// The query parameter that carries the leader's epoch on its sealed calls
/// to nodes (sealed with the path, so it cannot be changed on the way).
pub const EPOCH_PARAM: &str = "epoch";

/// A call from a controller whose epoch is older than one the node has
/// seen: a leader that was superseded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("refused: the call comes from a controller of epoch {given}, but this node follows the leader of epoch {highest} (a superseded controller must not act)")]
pub struct StaleEpoch {
    pub given: i64,
    pub highest: i64,
}

/// Whether a node takes a call carrying `given` (none: epoch 0) when the
/// highest epoch it has seen is `highest`; the highest epoch after it.
pub fn admit(highest: i64, given: Option<i64>) -> Result<i64, StaleEpoch> {
    let given = given.unwrap_or(0);
    if given < highest {
        return Err(StaleEpoch { given, highest });
    }
    Ok(given)
}

/// A node has followed a leader of a later epoch than the one registering
/// it: the database went back in time (restored from an older copy, or
/// failed over to a replica that had not caught up), so its epoch is
/// behind what the nodes have seen and they would refuse every call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "refused: node {node} has followed the leader of epoch {followed}, but this controller \
     leads in epoch {epoch}: the database has gone back in time (restored from an older copy, \
     or failed over to a replica that had not caught up; jobs acknowledged since that copy are \
     lost); this controller steps down and raises the epoch past {followed}, so that nodes \
     follow the next leader"
)]
pub struct Outranked {
    pub node: String,
    pub followed: i64,
    pub epoch: i64,
}

/// How far past the leader's epoch a node's may be and still be believed:
/// epochs are the database's clock in ms at a takeover, so a day ahead
/// means a node that is wrong, not a database that went back in time.
pub const MAX_EPOCH_LEAD: i64 = 86_400_000;

/// Why a node's registration is refused for the epoch it followed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FollowedError {
    /// The leader is behind: it steps down and raises the epoch.
    #[error(transparent)]
    Outranked(#[from] Outranked),
    /// Too far ahead to be true: refused, and the leader stays.
    #[error(
        "refused: node {node} says it followed the leader of epoch {followed}, more than a day \
         (by the database's clock) past this controller's {epoch}; that is not believed (a node \
         in error, or the database's clock set back): restart gnoded on {node} to clear it"
    )]
    Implausible {
        node: String,
        followed: i64,
        epoch: i64,
    },
}

/// Whether a leader of `epoch` may register `node`, which has followed
/// `followed` (0: a node that does not say).
pub fn check_followed(node: &str, followed: i64, epoch: i64) -> Result<(), FollowedError> {
    if followed <= epoch {
        return Ok(());
    }
    if followed - epoch > MAX_EPOCH_LEAD {
        return Err(FollowedError::Implausible {
            node: node.to_string(),
            followed,
            epoch,
        });
    }
    Err(Outranked {
        node: node.to_string(),
        followed,
        epoch,
    }
    .into())
}

/// The longest leader lease taken (a standby waits it out after a crash).
pub const MAX_LEASE: Duration = Duration::from_secs(600);

/// How long a lease lasts and how often it is renewed and watched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timings {
    /// A lease not renewed for this long may be taken.
    pub lease: Duration,
}

/// Timings that would let a failover outlast the nodes' patience.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TimingError {
    #[error("the leader lease must be at least 3 s (it is renewed every third of it), not {0:?}")]
    TooShort(Duration),
    #[error(
        "the leader lease must be at most {max} s (a standby waits it out after the leader \
         dies), not {0:?}",
        max = MAX_LEASE.as_secs()
    )]
    TooLongLease(Duration),
    #[error(
        "a standby takes over up to {takeover:.1?} after the leader dies (the leader lease and \
         a poll), but nodes stop their jobs after {fence:.1?} without a controller (two thirds \
         of the node timeout of {node_timeout:?}); the takeover must fit in half of that, so \
         that nodes find the new leader in time: {fix}"
    )]
    TooLong {
        takeover: Duration,
        fence: Duration,
        node_timeout: Duration,
        fix: String,
    },
}

impl Timings {
    /// A controller alone (no standby listed): only a restart of its own
    /// takes its lease, and at once, so only the lease's least length is
    /// checked.
    pub fn alone(lease: Duration) -> Result<Timings, TimingError> {
        if lease < Duration::from_secs(3) {
            return Err(TimingError::TooShort(lease));
        }
        if lease > MAX_LEASE {
            return Err(TimingError::TooLongLease(lease));
        }
        Ok(Timings { lease })
    }

    /// With standbys: checks `lease` against the node timeout too (see
    /// [`TimingError`]).
    pub fn new(lease: Duration, node_timeout: Duration) -> Result<Timings, TimingError> {
        let t = Timings::alone(lease)?;
        let fence = crate::fence::default_fence_timeout(node_timeout);
        if t.takeover() > fence / 2 {
            let min_node_timeout =
                Duration::from_secs(t.takeover().as_secs_f64().mul_add(3.0, 0.999) as u64);
            let max_lease = (fence / 2).saturating_sub(Duration::from_secs(1));
            let fix = if max_lease >= Duration::from_secs(3) {
                format!(
                    "lower --leader-lease to at most {} s or raise --node-timeout to at least {} s",
                    max_lease.as_secs(),
                    min_node_timeout.as_secs()
                )
            } else {
                format!(
                    "raise --node-timeout to at least {} s",
                    min_node_timeout.as_secs()
                )
            };
            return Err(TimingError::TooLong {
                takeover: t.takeover(),
                fence,
                node_timeout,
                fix,
            });
        }
        Ok(t)
    }

    /// How often the leader renews: three times a lease.
    pub fn renew_every(&self) -> Duration {
        self.lease / 3
    }

    /// How often a standby looks at the lease.
    pub fn poll(&self) -> Duration {
        (self.lease / 6).min(Duration::from_secs(1))
    }

    /// The longest a standby waits after the leader's last renewal.
    pub fn takeover(&self) -> Duration {
        self.lease + self.poll()
    }

    /// The leader stops acting (and steps down) once this long has passed,
    /// on its own monotonic clock, since it *sent* its last renewal that
    /// succeeded: the database stamped that renewal later, so the lease
    /// cannot have run out yet; the margin covers the clocks' difference in
    /// rate and a stall between the check and the act.
    pub fn step_down_after(&self) -> Duration {
        self.lease - self.margin()
    }

    /// How long a lease given up still runs: the margin between stepping
    /// down and the lease's end, which a call to a node that passed its
    /// last check before the step-down has to land in before another
    /// controller may lead.
    pub fn handover_grace(&self) -> Duration {
        self.margin()
    }

    fn margin(&self) -> Duration {
        (self.lease / 5).max(Duration::from_secs(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn me() -> Holder {
        Holder {
            host: "c1".into(),
            machine: "m1".into(),
            boot: "b1".into(),
            pid_namespace: "4026531836".into(),
            pid: 100,
            started: 5,
        }
    }

    fn lease(holder: &Holder, expires_ms: i64) -> Lease {
        Lease {
            epoch: 3,
            holder: holder.to_stored(),
            address: "https://c1:6817".into(),
            expires_ms,
        }
    }

    #[test]
    fn a_lease_is_taken_when_free_expired_or_its_holder_is_gone() {
        let alive = |_, _| true;
        assert_eq!(claim(None, 0, &me(), alive), Claim::Free);
        let other_host = Holder {
            host: "c2".into(),
            ..me()
        };
        assert_eq!(
            claim(Some(&lease(&other_host, 1000)), 999, &me(), alive),
            Claim::Held { until: 1000 }
        );
        assert_eq!(
            claim(Some(&lease(&other_host, 1000)), 1000, &me(), alive),
            Claim::Expired
        );
        // On this machine, in this boot: the earlier process, gone or reused.
        let earlier = Holder { pid: 90, ..me() };
        assert_eq!(
            claim(Some(&lease(&earlier, 1000)), 0, &me(), |_, _| false),
            Claim::HolderGone
        );
        assert!(!claim(Some(&lease(&earlier, 1000)), 0, &me(), alive).may_take());
        // Another boot (a reboot, or a clone of this machine): waited out.
        let rebooted = Holder {
            boot: "b0".into(),
            ..me()
        };
        assert!(!claim(Some(&lease(&rebooted, 1000)), 0, &me(), |_, _| false).may_take());
        // A start time that could not be read proves nothing.
        let unread_start = Holder {
            pid: 90,
            started: 0,
            ..me()
        };
        assert!(!claim(Some(&lease(&unread_start, 1000)), 0, &me(), |_, _| false).may_take());
        // A holder another host wrote, dead or not, is waited out; one this
        // release cannot read too.
        assert!(!claim(Some(&lease(&other_host, 1000)), 0, &me(), |_, _| false).may_take());
        let odd = Lease {
            holder: "c1 m1 b1 x".into(),
            ..lease(&me(), 1000)
        };
        assert!(!claim(Some(&odd), 0, &me(), |_, _| false).may_take());
        // The same host name is not the same machine: another machine id,
        // or one unknown, is waited out whatever its boot and processes.
        for machine in ["m2", UNKNOWN, ""] {
            let twin = Holder {
                machine: machine.into(),
                boot: "b0".into(),
                ..me()
            };
            let stored = lease(&twin, 1000);
            assert!(
                !claim(Some(&stored), 0, &me(), |_, _| false).may_take(),
                "{machine}"
            );
        }
        // Another process namespace on this machine (a container): its
        // processes cannot be seen from here, so it is waited out.
        let contained = Holder {
            pid_namespace: "4026532000".into(),
            pid: 90,
            ..me()
        };
        assert!(!claim(Some(&lease(&contained, 1000)), 0, &me(), |_, _| false).may_take());
        // A boot that could not be read proves nothing either.
        let unread = Holder {
            boot: String::new(),
            ..me()
        };
        assert!(!claim(Some(&lease(&unread, 1000)), 0, &me(), |_, _| false).may_take());
    }

    #[test]
    fn nodes_refuse_calls_of_an_older_epoch() {
        assert_eq!(admit(0, None), Ok(0));
        assert_eq!(admit(3, Some(3)), Ok(3));
        assert_eq!(admit(3, Some(5)), Ok(5));
        assert_eq!(
            admit(3, Some(2)),
            Err(StaleEpoch {
                given: 2,
                highest: 3
            })
        );
        assert!(admit(1, None).is_err());
    }

    #[test]
    fn a_leader_behind_a_node_is_outranked() {
        assert_eq!(check_followed("n1", 0, 4), Ok(()));
        assert_eq!(check_followed("n1", 4, 4), Ok(()));
        let e = check_followed("n1", 7, 4).unwrap_err();
        assert!(matches!(&e, FollowedError::Outranked(o) if o.followed == 7));
        assert!(e.to_string().contains("raises the epoch past 7"), "{e}");
        let e = check_followed("n1", i64::MAX, 4).unwrap_err();
        assert!(matches!(e, FollowedError::Implausible { .. }), "{e}");
        assert!(check_followed("n1", 4 + MAX_EPOCH_LEAD, 4)
            .is_err_and(|e| matches!(e, FollowedError::Outranked(_))));
    }

    #[test]
    fn holders_read_back_as_written() {
        assert_eq!(Holder::parse(&me().to_stored()), Some(me()));
        assert_eq!(Holder::parse("a m b n 1"), None);
        assert_eq!(Holder::parse("a m b n 1 2 3"), None);
        assert_eq!(Holder::parse("a b 1 2"), None);
        let blank = Holder {
            machine: String::new(),
            ..me()
        };
        assert_eq!(Holder::parse(&blank.to_stored()).unwrap().machine, UNKNOWN);
    }

    #[test]
    fn timings_fit_the_node_timeout() {
        let secs = Duration::from_secs;
        let t = Timings::new(secs(6), secs(30)).unwrap();
        assert_eq!(t.renew_every(), secs(2));
        assert_eq!(t.poll(), secs(1));
        assert_eq!(t.takeover(), secs(7));
        assert!(t.step_down_after() < t.lease);
        assert!(t.step_down_after() > t.renew_every() * 2);
        assert!(matches!(
            Timings::new(secs(2), secs(30)),
            Err(TimingError::TooShort(_))
        ));
        let e = Timings::new(secs(12), secs(30)).unwrap_err();
        assert!(
            e.to_string().contains(
                "lower --leader-lease to at most 9 s or raise --node-timeout to at least 39 s"
            ),
            "{e}"
        );
        let e = Timings::new(secs(6), secs(3)).unwrap_err();
        assert!(
            e.to_string()
                .ends_with("raise --node-timeout to at least 21 s"),
            "{e}"
        );
        Timings::new(secs(12), secs(60)).unwrap();
        Timings::alone(secs(12)).unwrap();
        assert!(Timings::alone(secs(2)).is_err());
        Timings::alone(MAX_LEASE).unwrap();
        assert!(matches!(
            Timings::alone(secs(601)),
            Err(TimingError::TooLongLease(_))
        ));
    }
}
