//! `gnoded`: the node daemon on its own.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{CommandFactory, FromArgMatches, Parser};
use gsched_noded::{shepherd, NodeConfig};

#[derive(Parser)]
#[command(name = "gnoded", version, about = "gsched node daemon")]
struct Args {
    /// State directory (spool, cluster key).
    #[arg(long, env = "GSCHED_STATE_DIR")]
    state_dir: PathBuf,
    /// TOML file with the settings below (snake_case names); then give none of them as flags.
    #[arg(long)]
    config: Option<PathBuf>,
    #[arg(long, default_value = "text", value_parser = ["text", "json"])]
    log_format: String,
    #[command(flatten)]
    node: NodeConfig,
}

fn main() -> Result<()> {
    shepherd::run_if_called_as_shepherd();
    let matches = Args::command().get_matches();
    let args = Args::from_arg_matches(&matches)?;
    gsched_daemon::init_logs(&args.log_format);
    let config = gsched_daemon::settings(&matches, args.config.as_deref(), args.node)?;
    let exe = shepherd::shepherd_program().context("cannot find the job shepherd program")?;
    tokio::runtime::Runtime::new()?.block_on(async move {
        gsched_noded::start(config, &args.state_dir, exe).await?;
        tokio::signal::ctrl_c().await?;
        Ok(())
    })
}
