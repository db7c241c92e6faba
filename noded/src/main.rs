//! `gnoded`: the node daemon on its own.

use anyhow::{Context, Result};
use clap::{CommandFactory, FromArgMatches, Parser};
use gsched_daemon::DaemonArgs;
use gsched_noded::{shepherd, NodeConfig};

#[derive(Parser)]
#[command(name = "gnoded", version, about = "gsched node daemon")]
struct Args {
    #[command(flatten)]
    daemon: DaemonArgs,
    #[command(flatten)]
    node: NodeConfig,
}

fn main() -> Result<()> {
    shepherd::run_if_called_as_shepherd();
    let command = Args::command();
    let matches = command.clone().get_matches();
    let args = Args::from_arg_matches(&matches)?;
    let d = args.daemon;
    gsched_daemon::init_logs(&d.log_format);
    gsched_daemon::island::prepare_daemon();
    let config = gsched_daemon::settings(&command, &matches, d.config.as_deref(), args.node)?;
    let exe = shepherd::shepherd_program().context("cannot find the job shepherd program")?;
    tokio::runtime::Runtime::new()?.block_on(async move {
        let node = gsched_noded::start(config, &d.state_dir, exe).await?;
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        node.shutdown().await;
        Ok(())
    })
}
