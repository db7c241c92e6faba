//! `gctld`: the controller daemon on its own.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Parser;
use gsched_ctld::CtldConfig;

#[derive(Parser)]
#[command(name = "gctld", version, about = "gsched controller daemon")]
struct Args {
    /// State directory (database, cluster key).
    #[arg(long, env = "GSCHED_STATE_DIR")]
    state_dir: PathBuf,
    /// TOML file with the settings below; flags given on the command line win.
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
    let args = Args::parse();
    init_logs(&args.log_format);
    let config = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            let from_file: CtldConfig = toml::from_str(&text)
                .with_context(|| format!("invalid config file {}", path.display()))?;
            merge(from_file, args.ctld)
        }
        None => args.ctld,
    };
    gsched_ctld::start(config, &args.state_dir).await?;
    tokio::signal::ctrl_c().await?;
    Ok(())
}

/// The file's settings, overridden by flags that differ from their defaults.
fn merge(file: CtldConfig, flags: CtldConfig) -> CtldConfig {
    let d = <Args as clap::Parser>::parse_from(["gctld", "--state-dir", "/"]).ctld;
    CtldConfig {
        listen: if flags.listen != d.listen {
            flags.listen
        } else {
            file.listen
        },
        cluster_name: if flags.cluster_name != d.cluster_name {
            flags.cluster_name
        } else {
            file.cluster_name
        },
        partition: if flags.partition != d.partition {
            flags.partition
        } else {
            file.partition
        },
        node_timeout: if flags.node_timeout != d.node_timeout {
            flags.node_timeout
        } else {
            file.node_timeout
        },
        launch_policy: if flags.launch_policy != d.launch_policy {
            flags.launch_policy
        } else {
            file.launch_policy
        },
        durability: if flags.durability != d.durability {
            flags.durability
        } else {
            file.durability
        },
        cluster_key_file: flags.cluster_key_file.or(file.cluster_key_file),
    }
}

fn init_logs(format: &str) {
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if format == "json" {
        b.json().init();
    } else {
        b.init();
    }
}
