//! Node leases and self-fencing: the rule that keeps a job from running on
//! a node the controller has given up on.
//!
//! A node holds a lease while its heartbeats reach the controller. It counts
//! from the moment it *sent* the last heartbeat (or registration) the
//! controller answered; the controller counts from the moment it *received*
//! one, which is later. The node kills its jobs when its lease has not been
//! renewed for the fence timeout; the controller declares the node down only
//! after the longer node timeout. So by the time the controller requeues a
//! job, the node has stopped it, provided the margin between the two covers
//! the time the kill takes, the clocks' difference in rate, and any stall of
//! gnoded itself (see [`margin`]). Times here are readings of a monotonic
//! clock that keeps counting through suspend (the caller's `CLOCK_BOOTTIME`),
//! passed in as durations: this module reads no clock.

use std::time::Duration;

/// The least time the controller waits beyond a node's fence timeout: a
/// tenth of the node timeout, and never under a second.
pub fn margin(node_timeout: Duration) -> Duration {
    (node_timeout / 10).max(Duration::from_secs(1))
}

/// The fence timeout of a node that does not choose one: two thirds of the
/// controller's node timeout.
pub fn default_fence_timeout(node_timeout: Duration) -> Duration {
    node_timeout * 2 / 3
}

/// A fence timeout that does not fit the controller's node timeout or the
/// node's heartbeat interval.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FenceError {
    #[error(
        "gnoded would stop its jobs only after {fence:?} without the controller, but the \
         controller declares a node down and requeues its jobs after {node_timeout:?}; the \
         fence timeout must be at most {max:?} (the node timeout less a margin of {margin:?}): \
         lower gnoded's --fence-timeout or raise gctld's --node-timeout"
    )]
    TooLong {
        fence: Duration,
        node_timeout: Duration,
        max: Duration,
        margin: Duration,
    },
    #[error(
        "gnoded's fence timeout {fence:?} is under two heartbeat intervals ({heartbeat:?} \
         each): one late heartbeat would make the node kill its jobs; raise --fence-timeout \
         or shorten --heartbeat-interval"
    )]
    TooShort {
        fence: Duration,
        heartbeat: Duration,
    },
}

/// Checks a node's fence timeout against the controller's node timeout and
/// the node's heartbeat interval.
pub fn check_fence_timeout(
    fence: Duration,
    node_timeout: Duration,
    heartbeat: Duration,
) -> Result<(), FenceError> {
    let margin = margin(node_timeout);
    let max = node_timeout.saturating_sub(margin);
    if fence > max {
        return Err(FenceError::TooLong {
            fence,
            node_timeout,
            max,
            margin,
        });
    }
    if fence < heartbeat * 2 {
        return Err(FenceError::TooShort { fence, heartbeat });
    }
    Ok(())
}

/// The fence timeout a node is told to use at registration: its own
/// (`requested`; zero is "never fence") once checked, or the default for the
/// controller's node timeout. `Ok(None)`: the node does not fence.
pub fn agreed_fence_timeout(
    requested: Option<Duration>,
    node_timeout: Duration,
    heartbeat: Duration,
) -> Result<Option<Duration>, FenceError> {
    match requested {
        Some(d) if d.is_zero() => Ok(None),
        Some(d) => check_fence_timeout(d, node_timeout, heartbeat).map(|()| Some(d)),
        None => {
            let d = default_fence_timeout(node_timeout);
            // A heartbeat interval too long for the default is said the same way.
            check_fence_timeout(d, node_timeout, heartbeat).map(|()| Some(d))
        }
    }
}

/// A node's lease, as the node keeps it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Lease {
    /// When the last request the controller answered was sent.
    renewed_at: Option<Duration>,
    /// How long the lease lasts; `None`: the node never fences.
    fence_after: Option<Duration>,
    /// The node has fenced itself since the lease was last renewed.
    fenced: bool,
    /// Renewed since this gnoded started (not only read back from an
    /// earlier one): until then no launch is taken, so the registration's
    /// list of runs is the whole truth about the node.
    renewed_since_start: bool,
}

/// What a node must do about its lease now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseCheck {
    /// Renewed within the fence timeout (or the node does not fence).
    Held,
    /// Run out just now: kill every job.
    FenceNow,
    /// Run out, and the jobs were killed already.
    Fenced,
    /// Never renewed since gnoded started (nothing to count from).
    NeverHeld,
}

impl Lease {
    /// A lease last renewed at `renewed_at` (read back from the node's state
    /// at start; `None` when there is nothing to read).
    pub fn new(renewed_at: Option<Duration>) -> Lease {
        Lease {
            renewed_at,
            fence_after: None,
            fenced: false,
            renewed_since_start: false,
        }
    }

    /// The fence timeout agreed at registration.
    pub fn set_fence_after(&mut self, fence_after: Option<Duration>) {
        self.fence_after = fence_after;
    }

    pub fn fence_after(&self) -> Option<Duration> {
        self.fence_after
    }

    /// The controller answered a request sent at `sent_at`. An answer to an
    /// older request never moves the lease back.
    pub fn renewed(&mut self, sent_at: Duration) {
        if self.renewed_at.is_none_or(|r| sent_at >= r) {
            self.renewed_at = Some(sent_at);
        }
        self.fenced = false;
        self.renewed_since_start = true;
    }

    pub fn renewed_at(&self) -> Option<Duration> {
        self.renewed_at
    }

    /// Where the lease stands at `now`; the first check after it ran out
    /// says [`LeaseCheck::FenceNow`], later ones [`LeaseCheck::Fenced`].
    pub fn check(&mut self, now: Duration) -> LeaseCheck {
        let state = self.state(now);
        if state == LeaseCheck::FenceNow {
            self.fenced = true;
        }
        state
    }

    /// Where the lease stands at `now`, changing nothing.
    pub fn state(&self, now: Duration) -> LeaseCheck {
        let Some(at) = self.renewed_at else {
            return LeaseCheck::NeverHeld;
        };
        match self.fence_after {
            Some(limit) if now.saturating_sub(at) >= limit => {
                if self.fenced {
                    LeaseCheck::Fenced
                } else {
                    LeaseCheck::FenceNow
                }
            }
            _ => LeaseCheck::Held,
        }
    }

    /// Whether a launch may be accepted at `now`: only under a live lease
    /// renewed since this gnoded started (a node that does not fence: once
    /// it has registered).
    pub fn accepts_launches(&self, now: Duration) -> bool {
        self.renewed_since_start && self.state(now) == LeaseCheck::Held
    }

    /// Whether the lease had run out (the node fenced or must fence).
    pub fn ran_out(&self, now: Duration) -> bool {
        matches!(self.state(now), LeaseCheck::FenceNow | LeaseCheck::Fenced)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn the_fence_timeout_must_leave_the_margin() {
        // Defaults: node timeout 30 s, heartbeat 5 s, fence 20 s.
        assert_eq!(default_fence_timeout(s(30)), s(20));
        assert_eq!(agreed_fence_timeout(None, s(30), s(5)), Ok(Some(s(20))));
        assert_eq!(margin(s(30)), s(3));
        assert!(check_fence_timeout(s(27), s(30), s(5)).is_ok());
        let e = check_fence_timeout(s(28), s(30), s(5)).unwrap_err();
        assert!(e.to_string().contains("--node-timeout"), "{e}");
        let e = check_fence_timeout(s(9), s(30), s(5)).unwrap_err();
        assert!(e.to_string().contains("--heartbeat-interval"), "{e}");
        assert_eq!(agreed_fence_timeout(Some(s(0)), s(30), s(5)), Ok(None));
        // Short timeouts keep a margin of a second.
        assert_eq!(margin(s(4)), s(1));
        assert!(check_fence_timeout(s(4), s(4), s(1)).is_err());
        assert!(check_fence_timeout(s(3), s(4), s(1)).is_ok());
    }

    #[test]
    fn a_lease_fences_once_when_it_runs_out_and_renewal_lifts_it() {
        let mut l = Lease::new(None);
        assert_eq!(l.check(s(100)), LeaseCheck::NeverHeld);
        assert!(!l.accepts_launches(s(100)));
        l.set_fence_after(Some(s(20)));
        l.renewed(s(100));
        assert_eq!(l.check(s(119)), LeaseCheck::Held);
        assert!(l.accepts_launches(s(119)));
        assert_eq!(l.check(s(120)), LeaseCheck::FenceNow);
        assert_eq!(l.check(s(121)), LeaseCheck::Fenced);
        assert!(!l.accepts_launches(s(121)));
        // A late answer to an old request does not move the lease back.
        l.renewed(s(130));
        l.renewed(s(125));
        assert_eq!(l.renewed_at(), Some(s(130)));
        assert_eq!(l.check(s(140)), LeaseCheck::Held);
    }

    #[test]
    fn a_lease_read_back_at_start_is_counted_but_takes_no_launch() {
        let mut l = Lease::new(Some(s(100)));
        l.set_fence_after(Some(s(20)));
        assert_eq!(l.state(s(110)), LeaseCheck::Held, "counted for fencing");
        assert!(
            !l.accepts_launches(s(110)),
            "not before this gnoded registers"
        );
        assert_eq!(l.check(s(120)), LeaseCheck::FenceNow);
        l.renewed(s(125));
        assert!(l.accepts_launches(s(126)));
    }

    #[test]
    fn a_node_that_does_not_fence_holds_its_lease_once_registered() {
        let mut l = Lease::new(Some(s(5)));
        l.set_fence_after(None);
        assert_eq!(l.check(s(10_000)), LeaseCheck::Held);
        l.renewed(s(6));
        assert!(l.accepts_launches(s(10_000)));
    }
}
