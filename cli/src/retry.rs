//! Waiting out a controller that cannot be connected to (restarting):
//! backoff within a window, with one line on standard error.

use std::time::{Duration, Instant};

/// The window when `GSCHED_RETRY_SECS` does not say (seconds).
pub const DEFAULT_WINDOW_SECS: u64 = 60;

#[derive(Clone)]
pub struct Retry {
    deadline: Instant,
    next: Duration,
    said: bool,
}

impl Retry {
    pub fn new(window: Duration) -> Retry {
        Retry {
            deadline: Instant::now() + window,
            next: Duration::from_millis(250),
            said: false,
        }
    }

    /// The window from `GSCHED_RETRY_SECS` (0: no retries); a value that
    /// is not a number of seconds is said and the default used.
    pub fn from_env() -> Retry {
        let secs = match std::env::var("GSCHED_RETRY_SECS") {
            Ok(v) => v.trim().parse().unwrap_or_else(|_| {
                eprintln!(
                    "gsched: GSCHED_RETRY_SECS={v:?} is not a number of seconds; using {DEFAULT_WINDOW_SECS}"
                );
                DEFAULT_WINDOW_SECS
            }),
            Err(_) => DEFAULT_WINDOW_SECS,
        };
        Retry::new(Duration::from_secs(secs))
    }

    /// As [`Retry::wait`], without saying anything, from a short first
    /// wait (25 to 75 ms, spread so that many callers do not come back
    /// together), for a controller that is there but busy.
    pub fn wait_quietly(&mut self) -> bool {
        let now = Instant::now();
        if now >= self.deadline {
            return false;
        }
        if !self.said {
            // The first quiet wait: short, and spread by the process id.
            self.said = true;
            self.next = Duration::from_millis(25 + u64::from(std::process::id() % 50));
        }
        std::thread::sleep(self.next.min(self.deadline - now));
        self.next = (self.next * 2).min(Duration::from_secs(1));
        true
    }

    /// Sleeps before the next try and returns true, or returns false when
    /// the window is over.
    pub fn wait(&mut self, what: &str) -> bool {
        let now = Instant::now();
        if now >= self.deadline {
            return false;
        }
        if !self.said {
            let left = self.deadline - now;
            eprintln!(
                "gsched: the controller at {what} is not answering; trying again for up to {}s",
                left.as_secs().max(1)
            );
            self.said = true;
        }
        std::thread::sleep(self.next.min(self.deadline - now));
        self.next = (self.next * 2).min(Duration::from_secs(4));
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_back_off_and_stop_at_the_window() {
        let mut r = Retry::new(Duration::from_millis(600));
        let mut waits = Vec::new();
        while r.wait("x") {
            waits.push(r.next);
        }
        assert!(waits.len() >= 2, "{waits:?}");
        assert!(waits.windows(2).all(|w| w[0] <= w[1]), "{waits:?}");
        assert!(!Retry::new(Duration::ZERO).wait("x"));
    }
}
