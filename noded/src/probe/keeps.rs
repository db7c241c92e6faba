//! Ends the rooms kept for jobs' next processes when their time is up
//! (`gsched_core::placement::NodeEvent::KeepUntil`): one task per server,
//! asleep until the earliest keep is due or a new one is made.

use std::sync::{Arc, Weak};
use std::time::Duration;

use super::{now_ms, ProbeServer};

impl ProbeServer {
    /// Starts the task; it stops once the server is gone.
    pub(super) fn spawn_keep_ender(self: &Arc<Self>) {
        let server: Weak<ProbeServer> = Arc::downgrade(self);
        let wake = Arc::clone(&self.keep_wake);
        self.runtime.spawn(async move {
            loop {
                // Registered before the look, so a keep made meanwhile wakes it.
                let notified = wake.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                let next = match server.upgrade() {
                    Some(this) => this.end_due_keeps(),
                    None => return,
                };
                match next {
                    Some(at_ms) => {
                        let wait =
                            Duration::from_millis((at_ms - now_ms()).clamp(0, 60_000) as u64);
                        tokio::select! {
                            _ = tokio::time::sleep(wait) => {}
                            _ = &mut notified => {}
                        }
                    }
                    // Nothing kept: a minute at most, then a look whether
                    // the server is still there.
                    None => {
                        let _ = tokio::time::timeout(Duration::from_secs(60), notified).await;
                    }
                }
            }
        });
    }

    /// Ends the keeps that are due, places what waited for their room, and
    /// returns when the next one is due.
    fn end_due_keeps(&self) -> Option<i64> {
        let mut st = self.lock();
        let now = now_ms();
        // A keep due further ahead than any hold was made before the clock
        // was set back: it is due now.
        let latest = now.saturating_add(st.node.hold_between_ms());
        let mut ended = false;
        while let Some(&(at, job, seq)) = st.keeps.first() {
            if at > now && at <= latest {
                break;
            }
            st.keeps.pop_first();
            st.node.end_keep(job, seq, now);
            ended = true;
        }
        let next = st.keeps.first().map(|k| k.0);
        if ended {
            self.dispatch(&mut st);
            drop(st);
            self.changed.notify_waiters();
        }
        next
    }
}
