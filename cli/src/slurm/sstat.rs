//! `sstat`: what running jobs use now (Slurm's sstat), from their cgroups'
//! counters as their nodes last sampled them.

use anyhow::{bail, Result};
use clap::Parser;
use gsched_core::job::{JobState, ResourceUsage};
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
    /// Print the fields --format takes, and exit.
    #[arg(short = 'e', long = "helpformat")]
    pub helpformat: bool,
    /// Job ids (comma lists; repeatable).
    #[arg(short = 'j', long = "jobs", action = clap::ArgAction::Append, required_unless_present = "helpformat")]
    pub jobs: Vec<String>,
    /// Fields to print, comma separated (e.g. JobID,MaxRSS,AveCPU).
    #[arg(short = 'o', long = "format", visible_alias = "fields")]
    pub format: Option<String>,
    /// Print all steps (the batch step and the running `srun` steps are
    /// printed either way).
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
    ("GPUTime", 10),
    ("NTasks", 8),
];

const DEFAULT_FORMAT: &str = "JobID,MaxVMSize,MaxRSS,AveRSS,AveCPU,NTasks";

/// One row: a running step of a job, what it has used so far and its
/// task count.
struct Row {
    id: String,
    usage: ResourceUsage,
    ntasks: u32,
}

/// The rows of running job `j`: its batch step and its running `srun` steps.
fn rows(j: &JobInfo) -> Vec<Row> {
    let mut out = vec![Row {
        id: format!("{}.batch", j.display_id()),
        usage: j.batch_usage.or(j.usage).unwrap_or_default(),
        ntasks: 1,
    }];
    out.extend(
        j.steps
            .iter()
            .filter(|s| s.end_time.is_none())
            .map(|s| Row {
                id: format!("{}.{}", j.display_id(), s.id),
                usage: s.usage.unwrap_or_default(),
                ntasks: s.ntasks,
            }),
    );
    out
}

fn value(r: &Row, field: &str) -> String {
    let u = &r.usage;
    match field {
        "JobID" => r.id.clone(),
        "MaxVMSize" => format_kib(u.max_vmsize),
        "MaxRSS" => format_kib(u.max_rss),
        "AveRSS" => format_kib(u.ave_rss),
        // A step's CPU time is counted for the step, not per task: its
        // average and minimum are given as its total over its tasks.
        "AveCPU" | "MinCPU" => format_cpu_time(u.total_cpu_usec() / u64::from(r.ntasks.max(1))),
        "TotalCPU" => format_cpu_time(u.total_cpu_usec()),
        "GPUTime" => u.gpu_time_usec.map(format_cpu_time).unwrap_or_default(),
        "NTasks" => r.ntasks.to_string(),
        _ => String::new(),
    }
}

pub fn main_with(args: Vec<String>) -> Result<i32> {
    let a: Args = super::parse("sstat", args)?;
    if a.helpformat {
        super::format::print_field_names(FIELDS.iter().map(|(f, _)| *f));
        return Ok(0);
    }
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
    for r in running.into_iter().flat_map(rows) {
        let cells = cols
            .iter()
            .map(|(n, w)| {
                let v = value(&r, n);
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
