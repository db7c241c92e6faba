//! `scontrol update`: `NodeName=LIST State=DRAIN|DOWN|RESUME Reason=...`
//! (administrators) and `JobId=ID TimeLimit=/Name=/Partition=/Dependency=/Nice=`
//! on pending jobs (their owners, who may only lower a time limit and give
//! no negative nice, and administrators).

use anyhow::{bail, Context, Result};
use gsched_core::cluster::{JobUpdate, NodeStateChange};
use gsched_core::dependency::Dependency;

use super::ids::parse_refs;
use crate::client::{ApiError, Client};

/// `KEY=VALUE` words, keys lower-cased; a word without `=` is refused.
fn pairs<'a>(words: &[&'a str]) -> Result<Vec<(String, &'a str)>> {
    words
        .iter()
        .map(|w| match w.split_once('=') {
            Some((k, v)) => Ok((k.to_ascii_lowercase(), v)),
            None => bail!("Invalid input: {w} (expected KEY=VALUE)"),
        })
        .collect()
}

/// Runs `scontrol update WORDS`.
pub fn update(client: &Client, words: &[&str]) -> Result<i32> {
    let kv = pairs(words)?;
    match kv.first().map(|(k, _)| k.as_str()) {
        Some("nodename") => update_nodes(client, &kv),
        Some("jobid") => update_job(client, &kv),
        _ => bail!("give NodeName=LIST State=DRAIN|DOWN|RESUME Reason=... or JobId=ID with TimeLimit=, Name=, Partition=, Dependency= or Nice= first"),
    }
}

/// What `State=` and `Reason=` ask of a node.
pub fn node_change(kv: &[(String, &str)]) -> Result<NodeStateChange> {
    let mut state = None;
    let mut reason = None;
    for (k, v) in &kv[1..] {
        match k.as_str() {
            "state" => state = Some(v.to_ascii_lowercase()),
            "reason" => reason = Some(v.to_string()),
            other => {
                bail!("Update of node {other} is not supported by gsched (State= and Reason= are)")
            }
        }
    }
    let reason = reason.unwrap_or_default();
    Ok(match state.as_deref() {
        Some("drain") => NodeStateChange::Drain { reason },
        Some("down") => NodeStateChange::Down { reason },
        Some("resume" | "undrain" | "idle") => NodeStateChange::Resume,
        Some(s) => bail!("Invalid node state specified: {s} (gsched takes DRAIN, DOWN or RESUME)"),
        None => bail!("give the node's new State= (DRAIN, DOWN or RESUME)"),
    })
}

fn update_nodes(client: &Client, kv: &[(String, &str)]) -> Result<i32> {
    let change = node_change(kv)?;
    let names = gsched_core::hostlist::expand(kv[0].1)?;
    for name in names {
        client
            .set_node_state(&name, &change)
            .map_err(|e| refused(e, 404, &format!("Invalid node name specified ({name})")))?;
    }
    Ok(0)
}

/// An update the controller refused, in Slurm's words: `status` means
/// `what`; 403 is Slurm's access error; anything else as it came.
fn refused(e: anyhow::Error, status: u16, what: &str) -> anyhow::Error {
    match e.downcast_ref::<ApiError>() {
        Some(a) if a.status == status => anyhow::anyhow!("slurm_update error: {what}"),
        Some(a) if a.status == 403 => anyhow::anyhow!(
            "slurm_update error: Access/permission denied ({})",
            a.message
        ),
        _ => e,
    }
}

/// What `TimeLimit=`, `Name=`, `Partition=`, `Dependency=` and `Nice=` ask.
pub fn job_update(kv: &[(String, &str)]) -> Result<JobUpdate> {
    let mut u = JobUpdate::default();
    for (k, v) in &kv[1..] {
        match k.as_str() {
            "timelimit" => {
                u.time_limit = Some(
                    gsched_core::units::parse_time_limit(v)
                        .with_context(|| format!("TimeLimit={v}"))?,
                )
            }
            "name" | "jobname" => u.name = Some(v.to_string()),
            "partition" => u.partition = Some(v.to_string()),
            "dependency" => {
                u.dependency = Some(if v.is_empty() {
                    None
                } else {
                    Some(Dependency::parse(v).with_context(|| format!("Dependency={v}"))?)
                })
            }
            "nice" => {
                u.nice = Some(
                    v.parse()
                        .with_context(|| format!("Nice={v}: not a whole number"))?,
                )
            }
            "priority" => bail!(
                "Priority=: gsched sets no priority by hand (change Nice= instead); nothing was changed"
            ),
            other => bail!(
                "Update of {other} is not supported by gsched (TimeLimit=, Name=, Partition=, Dependency= and Nice= are)"
            ),
        }
    }
    if u.is_empty() {
        bail!("nothing to change: give TimeLimit=, Name=, Partition=, Dependency= or Nice=");
    }
    Ok(u)
}

fn update_job(client: &Client, kv: &[(String, &str)]) -> Result<i32> {
    let update = job_update(kv)?;
    let refs = parse_refs(&[kv[0].1.to_string()])?;
    let jobs = super::ids::fetch(client, &refs, &[("state", "all".into())])?;
    if jobs.is_empty() {
        bail!("slurm_update error: Invalid job id specified");
    }
    for j in &jobs {
        let late = format!(
            "Job is no longer pending execution (job {} is {})",
            j.display_id(),
            j.job_state.as_str()
        );
        client
            .update_job(j.job_id, &update)
            .map_err(|e| refused(e, 409, &late))?;
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(words: &[&'static str]) -> Vec<(String, &'static str)> {
        pairs(words).unwrap()
    }

    #[test]
    fn node_states_need_a_known_state() {
        let c = node_change(&kv(&["NodeName=n1", "State=DRAIN", "Reason=bad fan"])).unwrap();
        assert_eq!(
            c,
            NodeStateChange::Drain {
                reason: "bad fan".into()
            }
        );
        assert_eq!(
            node_change(&kv(&["nodename=n1", "state=resume"])).unwrap(),
            NodeStateChange::Resume
        );
        assert!(node_change(&kv(&["NodeName=n1", "State=FUTURE"])).is_err());
        assert!(node_change(&kv(&["NodeName=n1"])).is_err());
        assert!(node_change(&kv(&["NodeName=n1", "Weight=3"])).is_err());
        assert!(pairs(&["NodeName=n1", "DRAIN"]).is_err());
    }

    #[test]
    fn job_fields_are_read_and_others_refused() {
        let u = job_update(&kv(&["JobId=4", "TimeLimit=10", "Name=x", "Dependency="])).unwrap();
        assert_eq!(u.time_limit, Some(Some(600)));
        assert_eq!(u.name.as_deref(), Some("x"));
        assert_eq!(u.dependency, Some(None));
        let u = job_update(&kv(&["JobId=4", "TimeLimit=UNLIMITED"])).unwrap();
        assert_eq!(u.time_limit, Some(None));
        assert_eq!(
            job_update(&kv(&["JobId=4", "Nice=10"])).unwrap().nice,
            Some(10)
        );
        assert_eq!(
            job_update(&kv(&["JobId=4", "nice=-5"])).unwrap().nice,
            Some(-5)
        );
        assert!(job_update(&kv(&["JobId=4", "Nice=lots"])).is_err());
        let e = job_update(&kv(&["JobId=4", "Priority=10"]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("Nice="), "{e}");
        assert!(job_update(&kv(&["JobId=4"])).is_err());
        assert!(job_update(&kv(&["JobId=4", "TimeLimit=soon"])).is_err());
    }
}
