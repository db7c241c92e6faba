//! `gctld`: the controller daemon on its own.

use std::path::PathBuf;

use anyhow::Result;
use clap::{CommandFactory, FromArgMatches, Parser};
use gsched_ctld::CtldConfig;

#[derive(Parser)]
#[command(name = "gctld", version, about = "gsched controller daemon")]
struct Args {
    /// State directory (database, cluster key).
    #[arg(long, env = "GSCHED_STATE_DIR")]
    state_dir: PathBuf,
    /// TOML file with the settings below (snake_case names); then give none of them as flags.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Log format.
    #[arg(long, default_value = "text", value_parser = ["text", "json"])]
    log_format: String,
    #[command(flatten)]
    ctld: CtldConfig,
}

#[tokio::main]
async fn main() -> Result<()> {
    let matches = Args::command().get_matches();
    let args = Args::from_arg_matches(&matches)?;
    gsched_daemon::init_logs(&args.log_format);
    let config = gsched_daemon::settings(&matches, args.config.as_deref(), args.ctld)?;
    gsched_ctld::start(config, &args.state_dir).await?;
    tokio::signal::ctrl_c().await?;
    Ok(())
}
