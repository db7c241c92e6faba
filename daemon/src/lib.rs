//! gsched-daemon: what gctld, gnoded and `gsched up` share at their edges —
//! log setup, the wall clock, the cluster key file, and JSON HTTP errors.
//! Decisions stay in gsched-core.

pub mod advertise;
pub mod clock;
pub mod http;
pub mod island;
pub mod key;
pub mod limits;
pub mod listener;
pub mod local_peer;
pub mod peer;
pub mod process;
pub mod service;
pub mod settings;
pub mod state;
pub mod step_credential;
pub mod tls;

/// Unix seconds now: the clock the daemons pass into gsched-core.
pub fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// Logs to stderr as `text` or `json`, filtered by `RUST_LOG` (default info).
pub fn init_logs(format: &str) {
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    // Colour codes only on a terminal: a log file or journald gets plain
    // text.
    use std::io::IsTerminal;
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    if format == "json" {
        b.json().init();
    } else {
        b.init();
    }
}

pub use settings::{DaemonArgs, DaemonSettings};
