//! `gacct`: accounting of finished and running jobs.

use anyhow::Result;
use clap::Parser;
use gsched_core::units::format_duration_long;
use gsched_core::wire::JobInfo;

use crate::client::Client;
use crate::gqueue::query;
use crate::table::{cell, row};

#[derive(Parser, Debug)]
#[command(name = "gacct", version = gsched_core::version::VERSION_LINE, about = "Show finished and running jobs")]
pub struct Args {
    /// Only these job ids (comma list; may be repeated).
    #[arg(short = 'j', long = "jobs")]
    pub jobs: Vec<String>,
    /// Only these users' jobs (comma list).
    #[arg(short = 'u', long = "user")]
    pub user: Option<String>,
    /// Only these states (comma list).
    #[arg(short = 's', long = "state")]
    pub state: Option<String>,
    /// No header line.
    #[arg(short = 'n', long = "noheader")]
    pub noheader: bool,
    /// Print JSON (the REST API's job objects).
    #[arg(long)]
    pub json: bool,
}

/// Slurm's `ExitCode` field: `code:signal`.
pub fn exit_code(j: &JobInfo) -> String {
    format!(
        "{}:{}",
        j.exit_code.unwrap_or(0),
        j.exit_signal.unwrap_or(0)
    )
}

pub fn format(jobs: &[JobInfo], header: bool) -> String {
    let mut out = String::new();
    if header {
        out += &(row(&[
            cell("JobID", -12),
            cell("JobName", -10),
            cell("State", -13),
            cell("ExitCode", 8),
            cell("Elapsed", 10),
            cell("NodeList", -10),
            cell("GPUMemPeak", 10),
            cell("MaxRSS", 10),
            cell("TotalCPU", 10),
            cell("GPUTime", 10),
            cell("Reason", -20),
            "GPUInstance".into(),
        ]) + "\n");
    }
    for j in jobs {
        out += &(row(&[
            cell(&j.job_id.to_string(), -12),
            cell(&j.name, -10),
            cell(j.job_state.as_str(), -13),
            cell(&exit_code(j), 8),
            cell(&format_duration_long(j.elapsed), 10),
            cell(&j.nodes, -10),
            cell(
                &j.gpu_mem_peak.map(|m| format!("{m}M")).unwrap_or_default(),
                10,
            ),
            cell(
                &j.usage
                    .map(|u| gsched_core::units::format_kib(u.max_rss))
                    .unwrap_or_default(),
                10,
            ),
            cell(
                &j.usage
                    .map(|u| gsched_core::units::format_cpu_time(u.total_cpu_usec()))
                    .unwrap_or_default(),
                10,
            ),
            cell(
                &j.usage
                    .and_then(|u| u.gpu_time_usec)
                    .map(gsched_core::units::format_cpu_time)
                    .unwrap_or_default(),
                10,
            ),
            cell(j.state_reason.as_deref().unwrap_or(""), -20),
            j.gpu_instance.clone().unwrap_or_default(),
        ]) + "\n");
    }
    out
}

pub fn main_with(args: Vec<String>) -> Result<()> {
    let a = Args::try_parse_from(std::iter::once("gacct".to_string()).chain(args))
        .unwrap_or_else(|e| e.exit());
    let ids = if a.jobs.is_empty() {
        None
    } else {
        Some(a.jobs.join(","))
    };
    let states = Some(a.state.unwrap_or_else(|| "all".into()));
    let mut q = query(states, a.user, false, ids, None);
    // Accounting: finished jobs that left the controller's memory too.
    q.push(("history", "true".into()));
    let jobs = Client::from_env().jobs(&q)?;
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
