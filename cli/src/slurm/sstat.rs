//! `sstat`: what running jobs use now (Slurm's sstat), from their cgroups'
//! counters as their nodes last sampled them.

use anyhow::{bail, Result};
use clap::Parser;
use gsched_core::job::JobState;
use gsched_core::units::{format_cpu_time, format_kib};
use gsched_core::wire::JobInfo;

use super::format::pad;
use super::ids::{fetch, parse_refs};
use crate::client::Client;

#[derive(Parser, Debug)]
#[command(
    name = "sstat",
    about = "Resource use of running gsched jobs (Slurm's sstat)"
)]
pub struct Args {
    /// Job ids (comma lists; repeatable).
    #[arg(short = 'j', long = "jobs", action = clap::ArgAction::Append, required = true)]
    pub jobs: Vec<String>,
    /// Fields to print, comma separated (e.g. JobID,MaxRSS,AveCPU).
    #[arg(short = 'o', long = "format", visible_alias = "fields")]
    pub format: Option<String>,
    /// Print all steps (gsched's jobs have their batch step).
    #[arg(short = 'a', long = "allsteps")]
    pub allsteps: bool,
    #[arg(short = 'n', long = "noheader")]
    pub noheader: bool,
    /// `|`-separated output with a trailing `|`.
    #[arg(short = 'p', long = "parsable")]
    pub parsable: bool,
    /// `|`-separated output.
    #[arg(short = 'P', long = "parsable2")]
    pub parsable2: bool,
}

/// Fields and their default widths.
const FIELDS: &[(&str, usize)] = &[
    ("JobID", 12),
    ("MaxVMSize", 10),
    ("MaxRSS", 10),
    ("AveRSS", 10),
    ("AveCPU", 10),
    ("MinCPU", 10),
    ("TotalCPU", 10),
    ("NTasks", 8),
];

const DEFAULT_FORMAT: &str = "JobID,MaxVMSize,MaxRSS,AveRSS,AveCPU,NTasks";

fn value(j: &JobInfo, field: &str) -> String {
    let u = j.usage.unwrap_or_default();
    match field {
        "JobID" => format!("{}.batch", j.display_id()),
        "MaxVMSize" => format_kib(u.max_vmsize),
        "MaxRSS" => format_kib(u.max_rss),
        "AveRSS" => format_kib(u.ave_rss),
        // One batch step, one task: its average is its total.
        "AveCPU" | "MinCPU" | "TotalCPU" => format_cpu_time(u.total_cpu_usec()),
        "NTasks" => "1".into(),
        _ => String::new(),
    }
}

pub fn main_with(args: Vec<String>) -> Result<i32> {
    let a: Args = super::parse("sstat", args)?;
    let mut cols: Vec<(&'static str, usize)> = Vec::new();
    for name in a.format.as_deref().unwrap_or(DEFAULT_FORMAT).split(',') {
        let name = name.trim();
        let Some(f) = FIELDS.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)) else {
            let known: Vec<&str> = FIELDS.iter().map(|(n, _)| *n).collect();
            bail!("invalid field '{name}' (known: {})", known.join(","));
        };
        cols.push(*f);
    }
    let refs = parse_refs(&a.jobs)?;
    let jobs = fetch(&Client::from_env(), &refs, &[("state", "all".into())])?;
    let running: Vec<&JobInfo> = jobs
        .iter()
        .filter(|j| j.job_state == JobState::Running)
        .collect();
    if running.is_empty() {
        bail!("no running job among {}", a.jobs.join(","));
    }
    let parsable = a.parsable || a.parsable2;
    let join = |cells: Vec<String>| -> String {
        if parsable {
            let mut s = cells.join("|");
            if a.parsable {
                s.push('|');
            }
            s
        } else {
            cells.join(" ")
        }
    };
    let mut out = String::new();
    if !a.noheader {
        let cells = |f: &dyn Fn(&(&str, usize)) -> String| cols.iter().map(f).collect();
        out += &join(cells(&|(n, w)| {
            if parsable {
                n.to_string()
            } else {
                pad(n, Some(*w), false)
            }
        }));
        out.push('\n');
        if !parsable {
            out += &join(cells(&|(_, w)| "-".repeat(*w)));
            out.push('\n');
        }
    }
    for j in running {
        let cells = cols
            .iter()
            .map(|(n, w)| {
                let v = value(j, n);
                if parsable {
                    v
                } else {
                    pad(&v, Some(*w), false)
                }
            })
            .collect();
        out += &join(cells);
        out.push('\n');
    }
    print!("{out}");
    Ok(0)
}
