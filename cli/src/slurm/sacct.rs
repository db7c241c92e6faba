//! `sacct`: accounting of jobs and their steps, in Slurm's formats.

use anyhow::{bail, Result};
use clap::Parser;
use gsched_core::job::{JobState, ResourceUsage, Step};
use gsched_core::resources::{JobResources, MemoryRequest};
use gsched_core::units::{format_cpu_time, format_kib};
use gsched_core::wire::JobInfo;

use super::format::{elapsed_long, exit_code, pad, sacct_state, timestamp};
use super::ids::{fetch, group_pending_arrays, parse_refs};
use crate::client::Client;
use crate::identity::current_user;

#[derive(Parser, Debug)]
#[command(
    name = "sacct",
    about = "Accounting data of gsched jobs (Slurm's sacct)"
)]
pub struct Args {
    /// Print the fields --format takes, and exit.
    #[arg(short = 'e', long = "helpformat")]
    pub helpformat: bool,
    /// Job ids (repeatable, comma lists; `A` is every task of array A).
    #[arg(short = 'j', long = "jobs", action = clap::ArgAction::Append)]
    pub jobs: Vec<String>,
    /// Only the jobs, not their steps.
    #[arg(short = 'X', long = "allocations")]
    pub allocations: bool,
    #[arg(short = 'n', long = "noheader")]
    pub noheader: bool,
    /// Fields joined by `|`, no trailing `|`.
    #[arg(short = 'P', long = "parsable2")]
    pub parsable2: bool,
    /// Fields joined by `|`, with a trailing `|`.
    #[arg(short = 'p', long = "parsable")]
    pub parsable: bool,
    /// Fields, comma separated, each with an optional `%WIDTH` (`%-WIDTH`).
    #[arg(short = 'o', long = "format")]
    pub format: Option<String>,
    /// Jobs that ran after this time (`now`, `now-1hour`, `YYYY-MM-DD[THH:MM[:SS]]`).
    #[arg(short = 'S', long = "starttime")]
    pub starttime: Option<String>,
    /// Jobs that ran before this time.
    #[arg(short = 'E', long = "endtime")]
    pub endtime: Option<String>,
    /// Only jobs with these names.
    #[arg(long = "name")]
    pub name: Option<String>,
    /// Only these users' jobs.
    #[arg(short = 'u', long = "user")]
    pub user: Option<String>,
    /// Every user's jobs.
    #[arg(short = 'a', long = "allusers")]
    pub allusers: bool,
    /// The jobs as Slurm's data_parser prints them (its accounting jobs
    /// shape, with the fields gsched records).
    #[arg(long)]
    pub json: bool,
    /// Only jobs charged to these accounts (comma list).
    #[arg(short = 'A', long = "accounts")]
    pub accounts: Option<String>,
    /// Only jobs in these states.
    #[arg(short = 's', long = "state")]
    pub state: Option<String>,
    /// Clusters (only this one exists).
    #[arg(short = 'M', long = "clusters")]
    pub clusters: Option<String>,
}

/// A field sacct can print: canonical name, default width (negative: left).
const FIELDS: &[(&str, i32)] = &[
    ("JobID", -12),
    ("JobIDRaw", 12),
    ("JobName", 10),
    ("Partition", 10),
    ("Account", 10),
    ("AllocCPUS", 10),
    ("State", 10),
    ("ExitCode", 8),
    ("NodeList", 15),
    ("Reason", 20),
    ("Comment", 15),
    ("Elapsed", 10),
    ("Suspended", 10),
    ("TotalCPU", 10),
    ("NNodes", 8),
    ("NCPUS", 10),
    ("MaxRSS", 10),
    ("AveRSS", 10),
    ("MaxVMSize", 10),
    ("UserCPU", 10),
    ("SystemCPU", 10),
    ("GPUTime", 10),
    ("ReqMem", 10),
    ("Start", 19),
    ("End", 19),
    ("Submit", 19),
    ("User", 9),
    ("UID", 6),
    ("Timelimit", 10),
    ("WCKey", 10),
    ("QOS", 10),
    ("Cluster", 10),
    ("WorkDir", 20),
];

const DEFAULT_FORMAT: &str = "JobID,JobName,Partition,Account,AllocCPUS,State,ExitCode";

/// One column: canonical name, width, left-justified.
#[derive(Debug, Clone, PartialEq)]
pub struct Column {
    pub name: &'static str,
    pub width: Option<usize>,
    pub left: bool,
}

/// Parses `-o JobID,State%20,jobname%-5` (names case-insensitive).
pub fn parse_format(spec: &str) -> Result<Vec<Column>> {
    let mut cols = Vec::new();
    for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (name, width) = match item.split_once('%') {
            Some((n, w)) => (n, Some(w)),
            None => (item, None),
        };
        let key = if name.eq_ignore_ascii_case("JobIdRaw") {
            "JobIDRaw"
        } else {
            name
        };
        let Some(&(canon, default)) = FIELDS.iter().find(|(f, _)| f.eq_ignore_ascii_case(key))
        else {
            bail!("Invalid field requested: \"{name}\"");
        };
        let (width, left) = match width {
            Some(w) => {
                let left = w.starts_with('-');
                let n: usize = w
                    .trim_start_matches('-')
                    .parse()
                    .map_err(|_| anyhow::anyhow!("Invalid field width in \"{item}\""))?;
                (n, left)
            }
            None => (default.unsigned_abs() as usize, default < 0),
        };
        cols.push(Column {
            name: canon,
            width: Some(width),
            left,
        });
    }
    Ok(cols)
}

/// A row: the job itself, or one of its steps.
enum Row<'a> {
    Job(&'a JobInfo),
    Batch(&'a JobInfo),
    Step(&'a JobInfo, &'a Step),
    /// Pending tasks of one array, collapsed (`A_[3-9%4]`).
    Pending(&'a JobInfo, String),
}

fn value(row: &Row<'_>, field: &str) -> String {
    if let Row::Step(j, s) = row {
        return step_value(j, s, field);
    }
    let (j, id) = match row {
        Row::Job(j) => (*j, j.display_id()),
        Row::Batch(j) => (*j, format!("{}.batch", j.display_id())),
        Row::Pending(j, id) => (*j, id.clone()),
        Row::Step(..) => unreachable!("handled above"),
    };
    let batch = matches!(row, Row::Batch(_));
    let started = j.start_time.is_some();
    let cpus = resources(j).map_or(1, |r| r.cpus);
    // The batch row shows the batch step's own cgroup where the node
    // counted it, else the job's (nodes without step cgroups).
    let usage = if batch {
        j.batch_usage.as_ref().or(j.usage.as_ref())
    } else {
        j.usage.as_ref()
    };
    if let Some(v) = usage_value(usage, field, batch) {
        return v;
    }
    match field {
        "JobID" => id,
        "JobIDRaw" => {
            if batch {
                format!("{}.batch", j.job_id)
            } else {
                j.job_id.to_string()
            }
        }
        "JobName" => {
            if batch {
                "batch".into()
            } else {
                j.name.clone()
            }
        }
        "Partition" if !batch => j.partition.clone(),
        "Partition" => String::new(),
        "Account" => j.slurm.account.clone().unwrap_or_default(),
        "AllocCPUS" | "NCPUS" => {
            if started {
                cpus.to_string()
            } else {
                "0".into()
            }
        }
        "State" => sacct_state(j),
        "ExitCode" => exit_code(j),
        "NodeList" => {
            if j.nodes.is_empty() {
                "None assigned".into()
            } else {
                j.nodes.clone()
            }
        }
        "Reason" => j.state_reason.clone().unwrap_or_else(|| "None".into()),
        "Comment" => j.slurm.comment.clone().unwrap_or_default(),
        "Elapsed" => elapsed_long(j.elapsed),
        "Suspended" => elapsed_long(j.suspended_secs),
        "NNodes" => {
            if started {
                j.num_nodes.to_string()
            } else {
                "0".into()
            }
        }
        "ReqMem" => match resources(j).map(|r| r.memory) {
            Some(MemoryRequest::Mib(m)) => format!("{m}M"),
            Some(MemoryRequest::WholeNode) => "0".into(),
            _ => String::new(),
        },
        "Start" => timestamp(j.start_time),
        "End" => timestamp(j.end_time),
        "Submit" => timestamp(Some(j.submit_time)),
        "User" if !batch => j.user_name.clone(),
        "UID" if !batch => j.user_id.to_string(),
        "User" | "UID" => String::new(),
        "Timelimit" => match j.time_limit {
            Some(m) => elapsed_long(m as i64 * 60),
            None => "UNLIMITED".into(),
        },
        "WCKey" => j.slurm.wckey.clone().unwrap_or_default(),
        "QOS" => j.slurm.qos.clone().unwrap_or_default(),
        "Cluster" => "gsched".into(),
        "WorkDir" => j.current_working_directory.clone(),
        _ => String::new(),
    }
}

/// A field of a step's row (`ID.N`).
fn step_value(j: &JobInfo, s: &Step, field: &str) -> String {
    let now = super::format::unix_now();
    if let Some(v) = usage_value(s.usage.as_ref(), field, true) {
        return v;
    }
    match field {
        "JobID" => format!("{}.{}", j.display_id(), s.id),
        "JobIDRaw" => format!("{}.{}", j.job_id, s.id),
        "JobName" => s.name.clone(),
        "State" => match s.state {
            JobState::Cancelled => format!("CANCELLED by {}", j.cancelled_by.unwrap_or(j.user_id)),
            st => st.as_str().to_string(),
        },
        "ExitCode" => format!(
            "{}:{}",
            s.exit_code.unwrap_or(0),
            s.exit_signal.unwrap_or(0)
        ),
        "Elapsed" => elapsed_long(s.end_time.unwrap_or(now) - s.start_time),
        "Start" => timestamp(Some(s.start_time)),
        "End" => timestamp(s.end_time),
        "Submit" => timestamp(Some(s.start_time)),
        "NCPUS" | "AllocCPUS" => s.ntasks.to_string(),
        "NNodes" => "1".into(),
        "NodeList" => j.nodes.clone(),
        "Account" => j.slurm.account.clone().unwrap_or_default(),
        "Cluster" => "gsched".into(),
        _ => String::new(),
    }
}

/// The CPUs and memory the job asked for.
fn resources(j: &JobInfo) -> Option<JobResources> {
    let spec = gsched_core::job::JobSpec {
        slurm: j.slurm.clone(),
        ..Default::default()
    };
    JobResources::of(&spec.slurm).ok()
}

/// The usage fields from a job's or step's cgroup counters: CPU and GPU
/// times on every row, memory on step rows (as Slurm, where memory is per
/// step). `None` for other fields.
pub fn usage_value(u: Option<&ResourceUsage>, field: &str, step_row: bool) -> Option<String> {
    let v = |f: &dyn Fn(&ResourceUsage) -> String| u.map(f).unwrap_or_default();
    Some(match field {
        "TotalCPU" => v(&|u| format_cpu_time(u.total_cpu_usec())),
        "UserCPU" => v(&|u| format_cpu_time(u.user_cpu_usec)),
        "SystemCPU" => v(&|u| format_cpu_time(u.system_cpu_usec)),
        "GPUTime" => v(&|u| u.gpu_time_usec.map(format_cpu_time).unwrap_or_default()),
        "MaxRSS" | "AveRSS" | "MaxVMSize" if !step_row => String::new(),
        "MaxRSS" => v(&|u| format_kib(u.max_rss)),
        "AveRSS" => v(&|u| format_kib(u.ave_rss)),
        "MaxVMSize" => v(&|u| format_kib(u.max_vmsize)),
        _ => return None,
    })
}

/// Midnight today, local time (sacct's default start without -j).
fn midnight(now: i64) -> i64 {
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    let t = now as libc::time_t;
    // SAFETY: both calls work on values we own.
    unsafe {
        libc::localtime_r(&t, &mut tm);
        tm.tm_hour = 0;
        tm.tm_min = 0;
        tm.tm_sec = 0;
        tm.tm_isdst = -1;
        libc::mktime(&mut tm) as i64
    }
}

pub fn main_with(args: Vec<String>) -> Result<i32> {
    let command = super::data_parser::command_line("sacct", &args);
    let a: Args = super::parse("sacct", args)?;
    if a.helpformat {
        super::format::print_field_names(FIELDS.iter().map(|(f, _)| *f));
        return Ok(0);
    }
    let cols = parse_format(a.format.as_deref().unwrap_or(DEFAULT_FORMAT))?;
    let refs = parse_refs(&a.jobs)?;
    let now = super::format::unix_now();
    // Accounting: finished jobs that left the controller's memory too.
    let mut extra: Vec<(&'static str, String)> =
        vec![("state", "all".into()), ("history", "true".into())];
    if let Some(n) = &a.name {
        extra.push(("name", n.clone()));
    }
    if let Some(u) = &a.user {
        extra.push(("user", u.clone()));
    } else if !a.allusers && refs.is_empty() {
        extra.push(("user", current_user().0));
    }
    // Without -j, jobs since midnight (or -S); -E bounds the other end.
    let start = match &a.starttime {
        Some(s) => Some(crate::when::parse(s, now)?),
        None if refs.is_empty() => Some(midnight(now)),
        None => None,
    };
    let end = a
        .endtime
        .as_deref()
        .map(|s| crate::when::parse(s, now))
        .transpose()?;
    extra.extend(start.map(|s| ("since", s.to_string())));
    extra.extend(end.map(|e| ("until", e.to_string())));
    let client = Client::from_env();
    let mut jobs = fetch(&client, &refs, &extra)?;
    if let Some(list) = &a.accounts {
        let wanted: Vec<String> = list.split(',').map(|x| x.trim().to_lowercase()).collect();
        jobs.retain(|j| {
            j.slurm
                .account
                .as_ref()
                .is_some_and(|acct| wanted.contains(&acct.to_lowercase()))
        });
    }
    if let Some(states) = &a.state {
        let wanted = super::format::StateFilter::parse(states)?;
        jobs.retain(|j| wanted.matches(j));
    }
    jobs.retain(|j| {
        let ran_until = j.end_time.unwrap_or(now);
        let from = j.start_time.unwrap_or(j.submit_time);
        start.is_none_or(|s| ran_until >= s) && end.is_none_or(|e| from <= e)
    });
    jobs.sort_by_key(|j| j.job_id);
    if a.json {
        return super::sacct_json::print(&jobs, &client, &command);
    }
    let mut rows: Vec<Row<'_>> = Vec::new();
    for (j, collapsed) in group_pending_arrays(&jobs) {
        if let Some(id) = collapsed {
            rows.push(Row::Pending(j, id));
            continue;
        }
        rows.push(Row::Job(j));
        if !a.allocations && j.start_time.is_some() {
            rows.push(Row::Batch(j));
            rows.extend(j.steps.iter().map(|s| Row::Step(j, s)));
        }
    }
    let parsable = a.parsable || a.parsable2;
    let line = |values: Vec<String>| -> String {
        if parsable {
            let mut s = values.join("|");
            if a.parsable {
                s.push('|');
            }
            s
        } else {
            let mut s = values.join(" ");
            s.push(' ');
            s
        }
    };
    let cell = |c: &Column, v: &str| {
        if parsable {
            v.to_string()
        } else {
            pad(v, c.width, c.left)
        }
    };
    let mut out = String::new();
    if !a.noheader {
        out.push_str(&line(cols.iter().map(|c| cell(c, c.name)).collect()));
        out.push('\n');
        if !parsable {
            out.push_str(&line(
                cols.iter()
                    .map(|c| "-".repeat(c.width.unwrap_or(c.name.len())))
                    .collect(),
            ));
            out.push('\n');
        }
    }
    for r in &rows {
        out.push_str(&line(
            cols.iter().map(|c| cell(c, &value(r, c.name))).collect(),
        ));
        out.push('\n');
    }
    print!("{out}");
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_parse_like_sacct() {
        let c = parse_format("jobid,State%20,jobname%-5,JobIdRaw").unwrap();
        assert_eq!(c[0].name, "JobID");
        assert_eq!((c[0].width, c[0].left), (Some(12), true));
        assert_eq!(
            (c[1].name, c[1].width, c[1].left),
            ("State", Some(20), false)
        );
        assert_eq!(
            (c[2].name, c[2].width, c[2].left),
            ("JobName", Some(5), true)
        );
        assert_eq!(c[3].name, "JobIDRaw");
        assert_eq!(
            parse_format("JobID,Bogus").unwrap_err().to_string(),
            "Invalid field requested: \"Bogus\""
        );
    }

    #[test]
    fn relative_times() {
        assert_eq!(crate::when::parse("now", 1000).unwrap(), 1000);
        assert_eq!(
            crate::when::parse("now-2hours", 10_000).unwrap(),
            10_000 - 7200
        );
        assert!(crate::when::parse("yesterday", 0).is_err());
        assert!(crate::when::parse("2026-13", 0).is_err());
    }
}
