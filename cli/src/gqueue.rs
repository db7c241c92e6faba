//! `gqueue`: the queue, like squeue, with the GPU instance.

use anyhow::Result;
use clap::Parser;
use gsched_core::job::JobState;
use gsched_core::units::format_duration_short;
use gsched_core::wire::JobInfo;

use crate::client::Client;
use crate::identity::current_user;
use crate::table::{cell, row};

#[derive(Parser, Debug)]
#[command(
    name = "gqueue",
    version = gsched_core::version::VERSION_LINE,
    about = "Show queued and running jobs",
    disable_help_flag = true
)]
pub struct Args {
    /// Print help (-h is --noheader, as in squeue).
    #[arg(long, action = clap::ArgAction::Help)]
    pub help: Option<bool>,
    /// States to show (comma list, long or short names, or `all`).
    #[arg(short = 't', long = "states")]
    pub states: Option<String>,
    /// Only these users' jobs (comma list).
    #[arg(short = 'u', long = "user")]
    pub user: Option<String>,
    /// Only my jobs.
    #[arg(long)]
    pub me: bool,
    /// Only these job ids (comma list).
    #[arg(short = 'j', long = "jobs")]
    pub jobs: Option<String>,
    /// Only jobs with these names (comma list).
    #[arg(short = 'n', long = "name")]
    pub name: Option<String>,
    /// No header line.
    #[arg(short = 'h', long = "noheader")]
    pub noheader: bool,
    /// Print JSON (the REST API's job objects).
    #[arg(long)]
    pub json: bool,
}

/// The query parameters for these filters.
pub fn query(
    states: Option<String>,
    user: Option<String>,
    me: bool,
    ids: Option<String>,
    name: Option<String>,
) -> Vec<(&'static str, String)> {
    let mut q = Vec::new();
    if let Some(s) = states {
        q.push(("state", s));
    }
    let user = if me { Some(current_user().0) } else { user };
    if let Some(u) = user {
        q.push(("user", u));
    }
    if let Some(j) = ids {
        q.push(("id", j));
    }
    if let Some(n) = name {
        q.push(("name", n));
    }
    q
}

/// NODELIST(REASON): the node when running, `(reason)` while pending.
pub fn nodelist_reason(j: &JobInfo) -> String {
    match j.job_state {
        JobState::Pending | JobState::Requeued => {
            format!("({})", j.state_reason.as_deref().unwrap_or("None"))
        }
        _ => j.nodes.clone(),
    }
}

pub fn format(jobs: &[JobInfo], header: bool) -> String {
    let mut out = String::new();
    let line = |c: [String; 9]| row(&c) + "\n";
    if header {
        out += &line([
            cell("JOBID", 18),
            cell("PARTITION", 9),
            cell("NAME", 8),
            cell("USER", 8),
            cell("ST", 2),
            cell("TIME", 10),
            cell("NODES", 6),
            cell("NODELIST(REASON)", -16),
            "GPU".into(),
        ]);
    }
    for j in jobs {
        out += &line([
            cell(&j.job_id.to_string(), 18),
            cell(&j.partition, 9),
            cell(&j.name, 8),
            cell(&j.user_name, 8),
            cell(j.state_compact(), 2),
            cell(&format_duration_short(j.elapsed), 10),
            cell("1", 6),
            cell(&nodelist_reason(j), -16),
            j.gpu_instance.clone().unwrap_or_default(),
        ]);
    }
    out
}

pub fn main_with(args: Vec<String>) -> Result<()> {
    let a = Args::try_parse_from(std::iter::once("gqueue".to_string()).chain(args))
        .unwrap_or_else(|e| e.exit());
    let jobs = Client::from_env().jobs(&query(a.states, a.user, a.me, a.jobs, a.name))?;
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({ "jobs": jobs }))?
        );
    } else {
        print!("{}", format(&jobs, !a.noheader));
    }
    Ok(())
}
