//! The node's lease and its self-fencing (the rule is `gsched_core::fence`):
//! a watchdog kills every job once the controller has not answered for the
//! fence timeout, and launches are refused while the lease is not held.
//!
//! Times are read from `CLOCK_BOOTTIME`, which is monotonic and keeps
//! counting while the machine is suspended. The last renewal and the agreed
//! fence timeout are kept in `STATE_DIR/lease` (0600, in gnoded's private
//! state directory), so a restarted gnoded that adopts running jobs keeps
//! counting from the last renewal rather than from its own start.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gsched_core::fence::{Lease, LeaseCheck};
use tracing::{error, info, warn};

use crate::launcher::Launcher;

/// How often the watchdog looks at the lease.
const WATCH_EVERY: Duration = Duration::from_millis(100);

pub struct NodeLease {
    lease: Mutex<Lease>,
    file: PathBuf,
    /// The epoch of the leader this node follows: calls from older ones
    /// are refused.
    pub leader: crate::epoch::LeaderEpoch,
}

/// `CLOCK_BOOTTIME` now.
pub use gsched_daemon::clock::boottime as now;

impl NodeLease {
    /// The lease as the last gnoded on this state directory left it (none
    /// after a reboot: the clock restarted, and no job survived).
    pub fn open(state_dir: &Path) -> NodeLease {
        let file = state_dir.join("lease");
        let (renewed, fence) = read_lease_file(&file).unwrap_or((None, None));
        let renewed = renewed.filter(|r| *r <= now());
        let mut lease = Lease::new(renewed);
        lease.set_fence_after(fence);
        NodeLease {
            leader: Default::default(),
            lease: Mutex::new(lease),
            file,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Lease> {
        self.lease.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The fence timeout agreed at registration (`None`: never fence).
    pub fn set_fence_after(&self, fence: Option<Duration>) {
        let changed = {
            let mut l = self.lock();
            let changed = l.fence_after() != fence;
            l.set_fence_after(fence);
            changed
        };
        if changed {
            match fence {
                Some(d) => info!(fence_timeout = ?d, "this node kills its jobs after that long without the controller"),
                None => info!("this node does not fence itself (--fence-timeout 0): a job on a partitioned node can run twice"),
            }
        }
        self.save();
    }

    /// The controller answered a request sent at `sent_at`.
    pub fn renewed(&self, sent_at: Duration) {
        let had_run_out = {
            let mut l = self.lock();
            let out = l.ran_out(now());
            l.renewed(sent_at);
            out
        };
        if had_run_out {
            info!("the controller answers again: lease renewed, launches accepted");
        }
        self.save();
    }

    /// Whether a launch may be accepted now (`Lease::accepts_launches`).
    pub fn accepts_launches(&self) -> bool {
        self.lock().accepts_launches(now())
    }

    fn save(&self) {
        let (renewed, fence) = {
            let l = self.lock();
            (l.renewed_at(), l.fence_after())
        };
        let text = format!(
            "{} {}\n",
            renewed.map_or(-1, |d| d.as_nanos() as i128),
            fence.map_or(-1, |d| d.as_millis() as i128)
        );
        if let Err(e) = write_private(&self.file, &text) {
            warn!(file = %self.file.display(), error = %e, "cannot record the lease");
        }
    }

    /// Runs for the life of the daemon: kills every job once the lease has
    /// run out.
    pub async fn watch(self: Arc<Self>, launcher: Arc<Launcher>) {
        let mut tick = tokio::time::interval(WATCH_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if self.lock().check(now()) != LeaseCheck::FenceNow {
                continue;
            }
            let jobs = launcher.fence_all();
            error!(
                jobs,
                "no answer from the controller within the fence timeout: killed every job \
                 (the controller requeues or fails them once it declares this node down)"
            );
        }
    }
}

fn read_lease_file(path: &Path) -> Option<(Option<Duration>, Option<Duration>)> {
    let text = std::fs::read_to_string(path).ok()?;
    let mut parts = text.split_whitespace();
    let renewed: i128 = parts.next()?.parse().ok()?;
    let fence: i128 = parts.next()?.parse().ok()?;
    let renewed = u64::try_from(renewed).ok().map(Duration::from_nanos);
    let fence = u64::try_from(fence).ok().map(Duration::from_millis);
    Some((renewed, fence))
}

/// Replaces `path` with `text`: written to a fresh private file beside it
/// (never through a link), then renamed over it.
fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("new");
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)?;
    f.write_all(text.as_bytes())?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lease_survives_a_restart_of_gnoded() {
        let dir = tempfile::tempdir().unwrap();
        let l = NodeLease::open(dir.path());
        assert!(!l.accepts_launches(), "never renewed");
        l.set_fence_after(Some(Duration::from_secs(20)));
        let t = now();
        l.renewed(t);
        assert!(l.accepts_launches());
        let again = NodeLease::open(dir.path());
        assert_eq!(again.lock().renewed_at(), Some(t));
        assert!(
            !again.accepts_launches(),
            "a restarted gnoded takes launches only once it has registered"
        );
        assert_eq!(again.lock().fence_after(), Some(Duration::from_secs(20)));
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join("lease"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn a_renewal_from_the_future_is_not_believed() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("lease"), "99999999999999999999 20000\n").unwrap();
        let l = NodeLease::open(dir.path());
        assert_eq!(l.lock().renewed_at(), None);
        std::fs::write(dir.path().join("lease"), "garbage").unwrap();
        assert_eq!(NodeLease::open(dir.path()).lock().renewed_at(), None);
    }
}
