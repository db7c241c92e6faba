//! `scancel`: cancel jobs or array tasks, or signal them.

use anyhow::Result;
use clap::Parser;
use gsched_core::array::JobRef;
use gsched_core::outcome::{parse_signal, SignalScope};

use super::ids::{named, parse_refs};
use crate::client::Client;
use crate::identity::current_user;

#[derive(Parser, Debug)]
#[command(name = "scancel", about = "Cancel gsched jobs (Slurm's scancel)")]
pub struct Args {
    /// Send this signal instead of cancelling (`USR1`, `SIGUSR1`, `10`).
    #[arg(short = 's', long = "signal")]
    pub signal: Option<String>,
    /// Only my jobs (with no ids: all of them).
    #[arg(long)]
    pub me: bool,
    #[arg(short = 'u', long = "user")]
    pub user: Option<String>,
    #[arg(short = 'n', long = "name", visible_alias = "jobname")]
    pub name: Option<String>,
    /// With --signal: signal the batch shell and its children only, not
    /// the steps (without it the signal goes to the steps only).
    #[arg(short = 'b', long = "batch")]
    pub batch: bool,
    /// With --signal: signal the batch shell, its children and the steps.
    #[arg(short = 'f', long = "full")]
    pub full: bool,
    /// No messages about jobs that are gone.
    #[arg(short = 'Q', long = "quiet")]
    pub quiet: bool,
    /// Job ids: `N`, `A` (a whole array), `A_i`.
    pub ids: Vec<String>,
}

pub fn main_with(args: Vec<String>) -> Result<i32> {
    let a: Args = super::parse("scancel", args)?;
    if let Some(s) = &a.signal {
        parse_signal(s)?;
    }
    let refs = parse_refs(&a.ids)?;
    let user = if a.me {
        Some(current_user().0)
    } else {
        a.user.clone()
    };
    if refs.is_empty() && user.is_none() && a.name.is_none() {
        anyhow::bail!("No job identification provided");
    }
    // Slurm's scancel: a signal goes to the steps unless -b or -f.
    let scope = match (a.full, a.batch) {
        (true, _) => SignalScope::Full,
        (false, true) => SignalScope::Batch,
        (false, false) => SignalScope::Steps,
    };
    let client = Client::from_env();
    let mut q: Vec<(&str, String)> = vec![("state", "all".into())];
    if let Some(u) = &user {
        q.push(("user", u.clone()));
    }
    if let Some(n) = &a.name {
        q.push(("name", n.clone()));
    }
    let jobs = super::ids::fetch(&client, &refs, &q)?;
    let mut status = 0;
    for r in &refs {
        if !jobs.iter().any(|j| named(std::slice::from_ref(r), j)) {
            let id = match r {
                JobRef::Id(i) => i.to_string(),
                JobRef::Task(x, i) => format!("{x}_{i}"),
            };
            if !a.quiet {
                eprintln!(
                    "scancel: error: Kill job error on job id {id}: Invalid job id specified"
                );
            }
            status = 1;
        }
    }
    // Known jobs that already ended: nothing to do, silently.
    for j in jobs.iter().filter(|j| !j.job_state.is_final()) {
        if let Err(e) = client.cancel(&j.job_id.to_string(), a.signal.as_deref(), scope) {
            eprintln!(
                "scancel: error: Kill job error on job id {}: {e:#}",
                j.display_id()
            );
            status = 1;
        }
    }
    Ok(status)
}
