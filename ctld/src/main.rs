//! `gctld`: the controller daemon on its own.

use anyhow::Result;
use clap::{CommandFactory, FromArgMatches, Parser};
use gsched_ctld::CtldConfig;
use gsched_daemon::DaemonArgs;

#[derive(Parser)]
#[command(name = "gctld", version, about = "gsched controller daemon")]
struct Args {
    #[command(flatten)]
    daemon: DaemonArgs,
    #[command(flatten)]
    ctld: CtldConfig,
    /// Print the REST API's OpenAPI document (as `GET /openapi.json`
    /// serves it) and exit.
    #[arg(long, exclusive = true)]
    print_openapi: bool,
}

#[tokio::main]
async fn main() -> Result<()> {
    let command = Args::command();
    let matches = command.clone().get_matches();
    // Alone on the command line (`exclusive`): nothing else is read.
    if matches.get_flag("print_openapi") {
        println!(
            "{}",
            serde_json::to_string_pretty(&gsched_ctld::api::document())?
        );
        return Ok(());
    }
    let args = Args::from_arg_matches(&matches)?;
    let d = args.daemon;
    gsched_daemon::init_logs(&d.log_format);
    gsched_daemon::island::prepare_daemon();
    let mut config = gsched_daemon::settings(&command, &matches, d.config.as_deref(), args.ctld)?;
    config.config_file = d.config.as_deref().map(std::path::absolute).transpose()?;
    gsched_ctld::start(config, &d.state_dir).await?;
    tokio::signal::ctrl_c().await?;
    Ok(())
}
