//! `sprio`: the priority of pending jobs and the weighted factors it is
//! made of (Slurm's sprio), as the controller's `--priority-type` weighs
//! them. Under `basic` every factor is 0 and the priority is the job's
//! place in submission order.

use anyhow::Result;
use gsched_core::job::JobState;
use gsched_core::wire::JobInfo;

use super::format::pad;
use super::ids::{fetch, parse_refs};
use crate::client::Client;

#[derive(clap::Parser, Debug)]
#[command(
    name = "sprio",
    about = "Priorities of pending gsched jobs and their factors (Slurm's sprio)",
    disable_help_flag = true
)]
pub struct Args {
    #[arg(long, action = clap::ArgAction::Help)]
    pub help: Option<bool>,
    /// Job ids (comma lists; repeatable).
    #[arg(short = 'j', long = "jobs", action = clap::ArgAction::Append)]
    pub jobs: Vec<String>,
    /// Only this user's jobs.
    #[arg(short = 'u', long = "user")]
    pub user: Option<String>,
    /// Only jobs of these partitions (comma separated).
    #[arg(short = 'p', long = "partition")]
    pub partition: Option<String>,
    #[arg(short = 'h', long = "noheader")]
    pub noheader: bool,
    /// The long form: the job's user and QOS name too.
    #[arg(short = 'l', long = "long")]
    pub long: bool,
    /// The weight of each factor (the controller's PriorityWeight*
    /// settings; all 0 unless it runs `multifactor`).
    #[arg(short = 'w', long = "weights")]
    pub weights: bool,
    /// Clusters: only this one's name is known.
    #[arg(short = 'M', long = "cluster", visible_alias = "clusters")]
    pub cluster: Option<String>,
}

/// The columns: JOBID, PARTITION, then the numbers.
const COLUMNS: &[&str] = &[
    "PRIORITY",
    "SITE",
    "AGE",
    "FAIRSHARE",
    "JOBSIZE",
    "PARTITION",
    "QOS",
    "NICE",
];

/// One job's line (the job is pending).
fn line(j: &JobInfo) -> String {
    let p = j.priority.unwrap_or_default();
    let value = super::scontrol::priority(j);
    let numbers = [
        value as i64,
        0,
        p.age as i64,
        p.fair_share as i64,
        p.job_size as i64,
        p.partition as i64,
        p.qos as i64,
        j.nice,
    ];
    let mut out = format!(
        "{} {}",
        pad(&j.display_id(), Some(15), false),
        pad(&j.partition, Some(9), true)
    );
    for n in numbers {
        out.push(' ');
        out.push_str(&pad(&n.to_string(), Some(10), false));
    }
    out
}

fn header() -> String {
    let mut out = format!(
        "{} {}",
        pad("JOBID", Some(15), false),
        pad("PARTITION", Some(9), true)
    );
    for c in COLUMNS {
        out.push(' ');
        out.push_str(&pad(c, Some(10), false));
    }
    out
}

/// `-w`: the header and one `Weights` line.
fn weights(health: &serde_json::Value) -> String {
    let multifactor = health["priority_type"]
        .as_str()
        .is_some_and(|t| t.contains("multifactor"));
    let w = &health["priority_weights"];
    let weight = |k: &str| {
        if multifactor {
            w[k].as_u64().unwrap_or(0)
        } else {
            0
        }
    };
    let mut out = format!(
        "{} {}",
        pad("Weights", Some(15), false),
        pad("", Some(9), true)
    );
    // PRIORITY has no weight; SITE's is Slurm's fixed 1.
    let values = [
        String::new(),
        "1".into(),
        weight("weight_age").to_string(),
        weight("weight_fair_share").to_string(),
        weight("weight_job_size").to_string(),
        weight("weight_partition").to_string(),
        weight("weight_qos").to_string(),
        String::new(),
    ];
    for v in values {
        out.push(' ');
        out.push_str(&pad(&v, Some(10), false));
    }
    out
}

pub fn main_with(args: Vec<String>) -> Result<i32> {
    let a: Args = super::parse("sprio", args)?;
    let client = Client::from_env();
    if let Some(c) = &a.cluster {
        let health = client.health()?;
        let name = health["cluster_name"].as_str().unwrap_or("gsched");
        if let Some(other) = c.split(',').find(|x| *x != name) {
            anyhow::bail!("no cluster '{other}': this is cluster '{name}', the only one");
        }
    }
    if a.weights {
        if !a.noheader {
            println!("{}", header());
        }
        println!("{}", weights(&client.health()?));
        return Ok(0);
    }
    let refs = parse_refs(a.jobs.as_slice())?;
    let mut extra = vec![("state", JobState::Pending.as_str().to_string())];
    if let Some(u) = &a.user {
        extra.push(("user", u.clone()));
    }
    let mut jobs = fetch(&client, &refs, &extra)?;
    if let Some(p) = &a.partition {
        let parts: Vec<&str> = p.split(',').collect();
        jobs.retain(|j| parts.contains(&j.partition.as_str()));
    }
    jobs.sort_by_key(|j| j.job_id);
    if !a.noheader {
        let h = header();
        println!(
            "{}",
            if a.long {
                long_form(&h, "USER", "QOSNAME")
            } else {
                h
            }
        );
    }
    for j in &jobs {
        let l = line(j);
        if a.long {
            let qos = j.slurm.qos.clone().unwrap_or_else(|| "normal".into());
            println!("{}", long_form(&l, &j.user_name, &qos));
        } else {
            println!("{l}");
        }
    }
    Ok(0)
}

/// The long form of a line: the user after the partition, the QOS name
/// before the numbers' QOS column.
fn long_form(line: &str, user: &str, qos: &str) -> String {
    // JOBID (15) PARTITION (9), then the numbers.
    let (head, numbers) = line.split_at(line.len().min(26));
    format!(
        "{head} {} {}{numbers}",
        pad(user, Some(8), true),
        pad(qos, Some(10), true)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use gsched_core::job::{Job, JobSpec};
    use gsched_core::priority::Priority;

    #[test]
    fn the_options_parse_as_slurms() {
        use clap::CommandFactory;
        Args::command().debug_assert();
        let a: Args =
            crate::slurm::parse("sprio", vec!["-h".into(), "-j".into(), "4,5".into()]).unwrap();
        assert!(a.noheader);
        assert_eq!(a.jobs, ["4,5"]);
    }

    #[test]
    fn a_line_has_the_priority_and_its_factors() {
        let spec = JobSpec {
            nice: 50,
            ..JobSpec::default()
        };
        let info = JobInfo::new(&Job::new(7, spec, 0), "gpu", 0).weighed(Priority {
            value: 1450,
            age: 500,
            job_size: 1000,
            fair_share: 250,
            qos: 100,
            partition: 30,
            nice: 50,
        });
        let l = line(&info);
        let words: Vec<&str> = l.split_whitespace().collect();
        assert_eq!(
            words,
            ["7", "gpu", "1450", "0", "500", "250", "1000", "30", "100", "50"]
        );
        assert_eq!(
            header().split_whitespace().collect::<Vec<_>>(),
            [
                "JOBID",
                "PARTITION",
                "PRIORITY",
                "SITE",
                "AGE",
                "FAIRSHARE",
                "JOBSIZE",
                "PARTITION",
                "QOS",
                "NICE"
            ]
        );
    }
}
