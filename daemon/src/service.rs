//! Telling the service manager (systemd, `Type=notify`) that a daemon is
//! ready, still alive, or stopping. Outside systemd (no `NOTIFY_SOCKET`)
//! every call does nothing.
//!
//! `NOTIFY_SOCKET` stays in the daemon's environment, but jobs never see
//! it: their environment is built from nothing (`env_clear`), and the
//! units say `NotifyAccess=main`, so only the daemon itself is heard.

use std::time::Duration;

use sd_notify::NotifyState;

/// The daemon is serving: systemd starts what waits for it.
pub fn ready(status: &str) {
    if let Err(e) = sd_notify::notify(&[NotifyState::Ready, NotifyState::Status(status)]) {
        tracing::warn!(error = %e, "cannot tell the service manager that the daemon is ready");
    }
}

/// The daemon is shutting down.
pub fn stopping() {
    let _ = sd_notify::notify(&[NotifyState::Stopping]);
}

/// Says the daemon serves, waits for SIGINT or SIGTERM (systemd's stop),
/// and says it is stopping: the end of both daemons' `main`.
pub async fn serve_until_stopped() -> std::io::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    ready("serving");
    tokio::select! {
        _ = interrupt.recv() => {}
        _ = term.recv() => {}
    }
    stopping();
    Ok(())
}

/// Resolves at SIGINT or SIGTERM (systemd's stop); for daemons that say
/// they are ready themselves ([`ready`], [`stopping`]).
pub fn stop_requested() -> std::io::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = interrupt.recv() => {}
            _ = term.recv() => {}
        }
    })
}

/// When the unit has `WatchdogSec=`, feeds the watchdog at half its period
/// for as long as `alive` returns (it should take what a wedged daemon
/// would never get, e.g. the controller's state lock): a daemon stuck
/// there stops feeding it and systemd restarts it.
pub fn feed_watchdog<F>(alive: F)
where
    F: Fn() + Send + Sync + 'static,
{
    let Some(period) = sd_notify::watchdog_enabled() else {
        return;
    };
    let alive = std::sync::Arc::new(alive);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval((period / 2).max(Duration::from_millis(100)));
        loop {
            tick.tick().await;
            let check = std::sync::Arc::clone(&alive);
            if tokio::task::spawn_blocking(move || check()).await.is_err() {
                tracing::error!(
                    "the watchdog check failed; not telling systemd the daemon is alive"
                );
                continue;
            }
            let _ = sd_notify::notify(&[NotifyState::Watchdog]);
        }
    });
}
