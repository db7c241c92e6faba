//! `gnoded`: the node daemon on its own.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Parser;
use gsched_noded::{shepherd, NodeConfig};

#[derive(Parser)]
#[command(name = "gnoded", version, about = "gsched node daemon")]
struct Args {
    /// State directory (spool, cluster key).
    #[arg(long, env = "GSCHED_STATE_DIR")]
    state_dir: PathBuf,
    /// TOML file with the node settings (replaces the flags below).
    #[arg(long)]
    config: Option<PathBuf>,
    #[arg(long, default_value = "text", value_parser = ["text", "json"])]
    log_format: String,
    #[command(flatten)]
    node: NodeConfig,
}

fn main() -> Result<()> {
    shepherd::run_if_called_as_shepherd();
    let args = Args::parse();
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if args.log_format == "json" {
        b.json().init();
    } else {
        b.init();
    }
    let config = match &args.config {
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .with_context(|| format!("cannot read {}", p.display()))?;
            toml::from_str(&text).with_context(|| format!("invalid config file {}", p.display()))?
        }
        None => args.node,
    };
    let exe = shepherd::shepherd_program().context("cannot find the job shepherd program")?;
    tokio::runtime::Runtime::new()?.block_on(async move {
        gsched_noded::start(config, &args.state_dir, exe).await?;
        tokio::signal::ctrl_c().await?;
        Ok(())
    })
}
