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
    let running = gsched_ctld::start(loaded.settings.value, &state_dir).await?;
    let controller = std::sync::Arc::clone(&running.controller);
    gsched_daemon::service::feed_watchdog(move || controller.alive());
    gsched_daemon::service::serve_until_stopped().await?;
    tracing::info!("stopping");
    running.remove_sockets();
    Ok(())
}
