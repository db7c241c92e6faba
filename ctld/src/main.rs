//! `gctld`: the controller daemon on its own.

use anyhow::Result;
use clap::{CommandFactory, FromArgMatches};
use gsched_ctld::command::GctldArgs;

#[tokio::main]
async fn main() -> Result<()> {
    let command = GctldArgs::command();
    let matches = command.clone().get_matches();
    // Alone on the command line (`exclusive`): nothing else is read.
    if matches.get_flag("print_openapi") {
        println!(
            "{}",
            serde_json::to_string_pretty(&gsched_ctld::api::document())?
        );
        return Ok(());
    }
    let args = GctldArgs::from_arg_matches(&matches)?;
    let file = gsched_daemon::settings::site_file(&args.daemon)?;
    let loaded = gsched_ctld::command::load(&command, &matches, args, file.as_ref())?;
    gsched_daemon::init_logs(loaded.daemon.value.log_format.as_str());
    gsched_daemon::island::prepare_daemon();
    if let Some(f) = &loaded.file {
        tracing::info!(file = %f.display(), "settings read from the site file");
    }
    let state_dir = loaded.daemon.value.state_dir();
    let serving = gsched_ctld::serve(loaded.settings.value, &state_dir).await?;
    let led = std::sync::Arc::clone(&serving.controller);
    gsched_daemon::service::feed_watchdog(move || {
        if let Some(controller) = led.get() {
            controller.alive();
        }
    });
    let mut stop = std::pin::pin!(gsched_daemon::service::stop_requested()?);
    // Ready once serving: a standby may wait for the lease indefinitely.
    gsched_daemon::service::ready("serving (standby until it leads)");
    let socket = serving.socket.clone();
    let rendezvous = serving.rendezvous.clone();
    let running = tokio::select! {
        running = serving.lead() => running?,
        () = &mut stop => {
            gsched_daemon::service::stopping();
            tracing::info!("stopping (a standby)");
            gsched_ctld::remove_sockets(&socket, rendezvous.as_ref());
            return Ok(());
        }
    };
    gsched_daemon::service::ready("serving as the leader");
    let step_down = running.tenure.step_down.clone();
    tokio::select! {
        () = &mut stop => {
            gsched_daemon::service::stopping();
            tracing::info!("stopping");
            running.stop().await;
            Ok(())
        }
        why = step_down.wait() => {
            tracing::error!(reason = %why, "stepping down");
            running.stop().await;
            anyhow::bail!("stepping down: {why}")
        }
    }
}
