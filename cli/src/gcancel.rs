//! `gcancel`: cancel jobs, or send them a signal.

use anyhow::Result;
use clap::Parser;
use gsched_core::outcome::{parse_signal, SignalScope};

use crate::client::{ApiError, Client};

#[derive(Parser, Debug)]
#[command(name = "gcancel", version = gsched_core::version::VERSION_LINE, about = "Cancel jobs or send them a signal")]
pub struct Args {
    /// Send this signal instead of cancelling (e.g. USR1, SIGTERM, 10).
    #[arg(short = 's', long)]
    pub signal: Option<String>,
    /// Job ids.
    #[arg(required = true)]
    pub ids: Vec<String>,
}

pub fn main_with(args: Vec<String>) -> Result<()> {
    let a = Args::try_parse_from(std::iter::once("gcancel".to_string()).chain(args))
        .unwrap_or_else(|e| e.exit());
    if let Some(s) = &a.signal {
        parse_signal(s)?;
    }
    let client = Client::from_env();
    let mut failed = 0;
    for id in &a.ids {
        // gcancel signals every process of the job.
        match client.cancel(id, a.signal.as_deref(), SignalScope::Full) {
            Ok(()) => {}
            Err(e) => {
                failed += 1;
                match e.downcast_ref::<ApiError>() {
                    Some(api) if api.status == 404 => {
                        eprintln!("gcancel: error: Kill job error on job id {id}: Invalid job id specified")
                    }
                    _ => eprintln!("gcancel: error: job {id}: {e:#}"),
                }
            }
        }
    }
    if failed > 0 {
        // The messages are printed; exit 1 without another line.
        std::process::exit(1);
    }
    Ok(())
}
