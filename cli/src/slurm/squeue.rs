//! `squeue`: the queue in Slurm's formats.

use anyhow::{bail, Result};
use clap::Parser;
use gsched_core::job::JobState;
use gsched_core::wire::JobInfo;

use super::format::{elapsed_short, pad};
use super::ids::{fetch, group_pending_arrays, parse_refs};
use crate::client::Client;
use crate::identity::current_user;

#[derive(Parser, Debug)]
#[command(
    name = "squeue",
    about = "Queued and running gsched jobs (Slurm's squeue)",
    disable_help_flag = true
)]
pub struct Args {
    #[arg(long, action = clap::ArgAction::Help)]
    pub help: Option<bool>,
    #[arg(short = 'h', long = "noheader")]
    pub noheader: bool,
    /// Output format (`%i %t %T %j %u %M %L %D %C %m %b %R %P %N %Q`).
    #[arg(short = 'o', long = "format")]
    pub format: Option<String>,
    /// Output fields by name (`JobID,Name:30,State:.10`; each 20 wide by
    /// default): JobID, Partition, Name, UserName, StateCompact, State,
    /// TimeUsed, TimeLeft, TimeLimit, NumNodes, NumCPUs, MinMemory,
    /// ReasonList, Reason, NodeList, Priority, Account, QOS, Comment,
    /// StartTime, tres-per-node.
    #[arg(short = 'O', long = "Format", conflicts_with = "format")]
    pub long_format: Option<String>,
    /// States (comma list, or `all`).
    #[arg(short = 't', long = "states")]
    pub states: Option<String>,
    #[arg(short = 'u', long = "user")]
    pub user: Option<String>,
    #[arg(long)]
    pub me: bool,
    #[arg(short = 'p', long = "partition")]
    pub partition: Option<String>,
    /// Job ids (comma list; `A_i` for an array task).
    #[arg(short = 'j', long = "jobs")]
    pub jobs: Option<String>,
    #[arg(short = 'n', long = "name")]
    pub name: Option<String>,
    /// Only the job ids and states (JOBID and STATE).
    #[arg(long)]
    pub only_job_state: bool,
    /// Clusters (only this one exists).
    #[arg(short = 'M', long = "clusters")]
    pub clusters: Option<String>,
    /// One line per array task (pending tasks are not collapsed).
    #[arg(short = 'r', long = "array")]
    pub array: bool,
    /// Pending jobs with their expected start times (`N/A` where not
    /// known: only a job holding nodes whose jobs all have time limits has
    /// one).
    #[arg(long)]
    pub start: bool,
    /// The jobs as Slurm's data_parser prints them (slurmrestd's shape).
    #[arg(long)]
    pub json: bool,
}

const START_FORMAT: &str = "%.18i %.9P %.8j %.8u %.2t %.19S %.6D %R";

const DEFAULT_FORMAT: &str = "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R";

/// One piece of a format: literal text or a field with width and side.
#[derive(Debug, Clone, PartialEq)]
pub enum Piece {
    Text(String),
    Field {
        letter: char,
        width: Option<usize>,
        right: bool,
    },
}

/// Parses a `-o` format of squeue or sinfo: `%[.][width]letter`, other
/// text kept; `known` says which letters the command has.
pub fn parse_format(spec: &str, known: impl Fn(char) -> bool) -> Result<Vec<Piece>> {
    let mut out = Vec::new();
    let mut text = String::new();
    let mut chars = spec.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            text.push(c);
            continue;
        }
        if chars.peek() == Some(&'%') {
            chars.next();
            text.push('%');
            continue;
        }
        let right = chars.peek() == Some(&'.');
        if right {
            chars.next();
        }
        let mut digits = String::new();
        while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
            digits.push(*d);
            chars.next();
        }
        let Some(letter) = chars.next() else {
            bail!("Invalid format specification: {spec}");
        };
        if !known(letter) {
            bail!("Invalid format specification: %{letter}");
        }
        if !text.is_empty() {
            out.push(Piece::Text(std::mem::take(&mut text)));
        }
        out.push(Piece::Field {
            letter,
            width: digits.parse().ok(),
            right,
        });
    }
    if !text.is_empty() {
        out.push(Piece::Text(text));
    }
    Ok(out)
}

/// Parses a `-O/--Format` list (`Name[:[.]WIDTH][SUFFIX],...`, names
/// case-insensitive): each name is one of `fields` (long name, the `-o`
/// letter it stands for); a field is 20 wide unless given, padded on the
/// right (`.`: on the left), and followed by its suffix.
pub fn parse_long_format(spec: &str, fields: &[(&str, char)]) -> Result<Vec<Piece>> {
    let mut out = Vec::new();
    for item in spec.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let (name, rest) = item.split_once(':').unwrap_or((item, ""));
        let Some((_, letter)) = fields.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)) else {
            bail!("Invalid job format specification: {name}");
        };
        let right = rest.starts_with('.');
        let rest = rest.strip_prefix('.').unwrap_or(rest);
        let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
        let width = if digits.is_empty() {
            20
        } else {
            digits.parse().unwrap_or(20)
        };
        out.push(Piece::Field {
            letter: *letter,
            width: Some(width),
            right,
        });
        let suffix = &rest[digits.len()..];
        if !suffix.is_empty() {
            out.push(Piece::Text(suffix.to_string()));
        }
    }
    if out.is_empty() {
        bail!("Invalid job format specification: {spec}");
    }
    Ok(out)
}

/// squeue's `-O` names and the `-o` letters they stand for.
const LONG_FIELDS: &[(&str, char)] = &[
    ("JobID", 'i'),
    ("JobArrayID", 'i'),
    ("Partition", 'P'),
    ("Name", 'j'),
    ("UserName", 'u'),
    ("StateCompact", 't'),
    ("State", 'T'),
    ("TimeUsed", 'M'),
    ("TimeLeft", 'L'),
    ("TimeLimit", 'l'),
    ("NumNodes", 'D'),
    ("NumCPUs", 'C'),
    ("MinMemory", 'm'),
    ("tres-per-node", 'b'),
    ("ReasonList", 'R'),
    ("Reason", 'r'),
    ("NodeList", 'N'),
    ("Priority", 'Q'),
    ("Account", 'a'),
    ("QOS", 'q'),
    ("Comment", 'k'),
    ("StartTime", 'S'),
];

fn header(letter: char) -> Option<&'static str> {
    Some(match letter {
        'i' => "JOBID",
        't' => "ST",
        'T' => "STATE",
        'j' => "NAME",
        'u' => "USER",
        'M' => "TIME",
        'L' => "TIME_LEFT",
        'D' => "NODES",
        'C' => "CPUS",
        'm' => "MIN_MEMORY",
        'b' => "TRES_PER_NODE",
        'R' => "NODELIST(REASON)",
        'P' => "PARTITION",
        'Q' => "PRIORITY",
        'N' => "NODELIST",
        'A' => "JOBID",
        'a' => "ACCOUNT",
        'q' => "QOS",
        'l' => "TIME_LIMIT",
        'r' => "REASON",
        'k' => "COMMENT",
        'S' => "START_TIME",
        _ => return None,
    })
}

fn value(j: &JobInfo, id: &str, letter: char) -> String {
    let running = j.job_state == JobState::Running;
    match letter {
        'i' => id.to_string(),
        'A' => j.job_id.to_string(),
        't' => j.state_compact().into(),
        'T' => j.state_name().into(),
        'j' => j.name.clone(),
        'u' => j.user_name.clone(),
        'M' => elapsed_short(j.elapsed),
        'L' => match j.time_limit {
            Some(m) if running => elapsed_short(m as i64 * 60 - j.elapsed),
            Some(m) => elapsed_short(m as i64 * 60),
            None => "UNLIMITED".into(),
        },
        'l' => match j.time_limit {
            Some(m) => elapsed_short(m as i64 * 60),
            None => "UNLIMITED".into(),
        },
        'D' => j.num_nodes.max(1).to_string(),
        'S' => match (j.job_state, j.start_time, j.expected_start) {
            (JobState::Pending, _, Some(t)) => super::format::timestamp(Some(t)),
            (JobState::Pending, _, None) | (_, None, _) => "N/A".into(),
            (_, Some(t), _) => super::format::timestamp(Some(t)),
        },
        'C' => (j.slurm.ntasks.unwrap_or(1) * j.slurm.cpus_per_task.unwrap_or(1)).to_string(),
        'm' => j
            .slurm
            .other
            .get("mem")
            .cloned()
            .unwrap_or_else(|| "0".into()),
        'b' => gres(j),
        'R' => {
            if running || j.job_state.is_final() {
                j.nodes.clone()
            } else {
                format!("({})", j.state_reason.as_deref().unwrap_or("None"))
            }
        }
        'r' => j.state_reason.clone().unwrap_or_else(|| "None".into()),
        'P' => j.partition.clone(),
        'Q' => super::scontrol::priority(j).to_string(),
        'N' => j.nodes.clone(),
        'a' => j.slurm.account.clone().unwrap_or_default(),
        'q' => j.slurm.qos.clone().unwrap_or_else(|| "normal".into()),
        'k' => j.slurm.comment.clone().unwrap_or_default(),
        _ => String::new(),
    }
}

/// `gres/gpu:TYPE:N` for isolated jobs, `N/A` otherwise.
fn gres(j: &JobInfo) -> String {
    if !j.isolated {
        return "N/A".into();
    }
    let n = j.gpu_request.instances();
    match j.gpu_request.kind() {
        Some(k) => format!("gres/gpu:{k}:{n}"),
        None => format!("gres/gpu:{n}"),
    }
}

/// One line of a parsed format, each field's value from `f`.
pub fn render(pieces: &[Piece], f: impl Fn(char) -> String) -> String {
    let mut s = String::new();
    for p in pieces {
        match p {
            Piece::Text(t) => s.push_str(t),
            Piece::Field {
                letter,
                width,
                right,
            } => s.push_str(&pad(&f(*letter), *width, !right)),
        }
    }
    s
}

pub fn main_with(args: Vec<String>) -> Result<i32> {
    let command = super::data_parser::command_line("squeue", &args);
    let a: Args = super::parse("squeue", args)?;
    if a.json {
        let filtered = a.states.is_some()
            || a.user.is_some()
            || a.me
            || a.partition.is_some()
            || a.jobs.is_some()
            || a.name.is_some();
        if filtered {
            bail!("--json lists every active job: -t, -u, --me, -p, -j and -n are not applied to it; leave them out");
        }
        return super::data_parser::print_json_for(&Client::from_env(), "jobs", &command);
    }
    let fmt = if a.only_job_state {
        "%i %T".to_string()
    } else if a.start {
        a.format.clone().unwrap_or_else(|| START_FORMAT.into())
    } else {
        a.format.clone().unwrap_or_else(|| DEFAULT_FORMAT.into())
    };
    let pieces = match &a.long_format {
        Some(spec) => parse_long_format(spec, LONG_FIELDS)?,
        _ => parse_format(&fmt, |l| header(l).is_some())?,
    };
    let refs = parse_refs(a.jobs.as_slice())?;
    let mut extra: Vec<(&'static str, String)> = Vec::new();
    let mut wanted = None;
    match a.states.as_deref() {
        Some(s) if s.split(',').any(|x| x.eq_ignore_ascii_case("all")) => {
            extra.push(("state", "all".into()));
        }
        Some(s) => {
            let filter = super::format::StateFilter::parse(s)?;
            let ours = filter.asked();
            wanted = Some(filter);
            if ours.is_empty() {
                if !a.noheader {
                    println!(
                        "{}",
                        render(&pieces, |l| header(l).unwrap_or("").to_string())
                    );
                }
                return Ok(0);
            }
            extra.push(("state", ours.join(",")));
        }
        // --start: the pending ones, whose start is to come.
        None if a.start => extra.push(("state", "PENDING".into())),
        // Like Slurm: jobs still pending or running.
        None => extra.push(("state", "PENDING,RUNNING,REQUEUED".into())),
    }
    let user = if a.me {
        Some(current_user().0)
    } else {
        a.user.clone()
    };
    if let Some(u) = user {
        extra.push(("user", u));
    }
    if let Some(n) = &a.name {
        extra.push(("name", n.clone()));
    }
    let client = Client::from_env();
    let mut jobs = fetch(&client, &refs, &extra)?;
    if jobs.is_empty()
        && !refs.is_empty()
        && fetch(&client, &refs, &[("state", "all".into())])?.is_empty()
    {
        // Slurm: a job id it does not know is an error, not an empty list.
        bail!("slurm_load_jobs error: Invalid job id specified");
    }
    if let Some(p) = &a.partition {
        let parts: Vec<&str> = p.split(',').collect();
        jobs.retain(|j| parts.contains(&j.partition.as_str()));
    }
    if let Some(w) = &wanted {
        jobs.retain(|j| w.matches(j));
    }
    jobs.sort_by_key(|j| j.job_id);
    let mut out = String::new();
    if !a.noheader {
        out.push_str(&render(&pieces, |l| header(l).unwrap_or("").to_string()));
        out.push('\n');
    }
    let rows: Vec<(&JobInfo, Option<String>)> = if a.array {
        jobs.iter().map(|j| (j, None)).collect()
    } else {
        group_pending_arrays(&jobs)
    };
    for (j, collapsed) in rows {
        let id = collapsed.unwrap_or_else(|| j.display_id());
        out.push_str(&render(&pieces, |l| value(j, &id, l)));
        out.push('\n');
    }
    print!("{out}");
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_formats_name_fields_with_widths() {
        let p = parse_long_format("JobID,name:30,State:.10|", LONG_FIELDS).unwrap();
        assert_eq!(
            p,
            vec![
                Piece::Field {
                    letter: 'i',
                    width: Some(20),
                    right: false
                },
                Piece::Field {
                    letter: 'j',
                    width: Some(30),
                    right: false
                },
                Piece::Field {
                    letter: 'T',
                    width: Some(10),
                    right: true
                },
                Piece::Text("|".into()),
            ]
        );
        let e = parse_long_format("JobID,Bogus", LONG_FIELDS).unwrap_err();
        assert_eq!(e.to_string(), "Invalid job format specification: Bogus");
    }

    #[test]
    fn formats_keep_text_and_widths() {
        let p = parse_format("%.18i|%t %j%%", |l| header(l).is_some()).unwrap();
        assert_eq!(
            p,
            vec![
                Piece::Field {
                    letter: 'i',
                    width: Some(18),
                    right: true
                },
                Piece::Text("|".into()),
                Piece::Field {
                    letter: 't',
                    width: None,
                    right: false
                },
                Piece::Text(" ".into()),
                Piece::Field {
                    letter: 'j',
                    width: None,
                    right: false
                },
                Piece::Text("%".into()),
            ]
        );
        let h = render(
            &parse_format(DEFAULT_FORMAT, |l| header(l).is_some()).unwrap(),
            |l| header(l).unwrap().to_string(),
        );
        assert_eq!(
            h,
            "             JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)"
        );
        assert!(parse_format("%Z", |l| header(l).is_some()).is_err());
    }
}
