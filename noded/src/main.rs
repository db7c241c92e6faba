//! `gnoded`: the node daemon on its own.

use anyhow::{Context, Result};
use clap::{CommandFactory, FromArgMatches};
use gsched_noded::command::GnodedArgs;
use gsched_noded::shepherd;

fn main() -> Result<()> {
    shepherd::run_if_called_as_shepherd();
    let command = GnodedArgs::command();
    let matches = command.clone().get_matches();
    let args = GnodedArgs::from_arg_matches(&matches)?;
    let file = gsched_daemon::settings::site_file(&args.daemon)?;
    let loaded = gsched_noded::command::load(&command, &matches, args, file.as_ref())?;
    gsched_daemon::init_logs(loaded.daemon.value.log_format.as_str());
    gsched_daemon::island::prepare_daemon();
    if let Some(f) = &loaded.file {
        tracing::info!(file = %f.display(), "settings read from the site file");
    }
    let state_dir = loaded.daemon.value.state_dir();
    let exe = shepherd::shepherd_program().context("cannot find the job shepherd program")?;
    tokio::runtime::Runtime::new()?.block_on(async move {
        let node = gsched_noded::start(loaded.settings.value, &state_dir, exe).await?;
        gsched_daemon::service::feed_watchdog(|| {});
        gsched_daemon::service::serve_until_stopped().await?;
        node.shutdown().await;
        Ok(())
    })
}
