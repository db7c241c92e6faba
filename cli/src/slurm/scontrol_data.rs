//! `scontrol` answers beyond jobs, nodes and partitions: `ping --json`,
//! `show steps` (text and `--json`), and the `--json` forms of the
//! entities gsched has none of (licenses, reservations: an empty list, as
//! Slurm answers when none is configured).

use anyhow::Result;
use gsched_core::job::{JobState, Step};
use gsched_core::wire::JobInfo;
use serde_json::{json, Value};

use super::data_parser::{number, print_json_for, DATA_PARSER};
use super::format::timestamp;
use crate::client::Client;

/// `scontrol --json ping`: slurmrestd's ping answer.
pub fn ping_json(client: &Client, command: &[String]) -> Result<i32> {
    print_json_for(client, "ping", command)
}

/// The `meta` of Slurm's answers, taken from the controller's own.
pub(super) fn meta(client: &Client, command: &[String]) -> Result<Value> {
    let ping: Value = client.slurm_data(&format!("/slurm/{DATA_PARSER}/ping"))?;
    let mut meta = ping["meta"].clone();
    meta["command"] = json!(command);
    Ok(meta)
}

/// `{"<what>": [], ...}`: an entity gsched has none of.
pub fn empty_json(client: &Client, what: &str, command: &[String]) -> Result<i32> {
    let out = json!({
        what: [],
        "meta": meta(client, command)?,
        "errors": [],
        "warnings": [],
    });
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(0)
}

/// The running steps of running jobs; `which`: `JOB` or `JOB.STEP`.
fn running_steps(client: &Client, which: Option<&str>) -> Result<Vec<(JobInfo, Step)>> {
    let (job, step) = match which {
        None => (None, None),
        Some(w) => {
            let (j, s) = w.split_once('.').unwrap_or((w, ""));
            let job: u64 = j
                .parse()
                .map_err(|_| anyhow::anyhow!("Invalid job step id: {w}"))?;
            let step = match s {
                "" => None,
                s => Some(
                    s.parse::<u32>()
                        .map_err(|_| anyhow::anyhow!("Invalid job step id: {w}"))?,
                ),
            };
            (Some(job), step)
        }
    };
    let mut query = vec![("state", "RUNNING".to_string())];
    if let Some(j) = job {
        query.push(("id", j.to_string()));
    }
    let mut out = Vec::new();
    for j in client.jobs(&query)? {
        for s in &j.steps {
            if s.state == JobState::Running && step.is_none_or(|n| n == s.id) {
                out.push((j.clone(), s.clone()));
            }
        }
    }
    Ok(out)
}

/// `scontrol show steps [JOB[.STEP]]` in Slurm's words.
pub fn print_steps(client: &Client, which: Option<&str>, oneliner: bool) -> Result<i32> {
    let steps = running_steps(client, which)?;
    if steps.is_empty() {
        println!("No job steps in the system");
        return Ok(0);
    }
    for (j, s) in steps {
        let limit = j
            .time_limit
            .map(|m| super::format::elapsed_long(m as i64 * 60))
            .unwrap_or_else(|| "UNLIMITED".into());
        let lines = [
            format!(
                "StepId={}.{} UserId={} StartTime={} TimeLimit={limit}",
                j.job_id,
                s.id,
                j.user_id,
                timestamp(Some(s.start_time))
            ),
            format!(
                "State={} Partition={} NodeList={}",
                s.state, j.partition, j.nodes
            ),
            format!(
                "Nodes={} Tasks={} Name={}",
                j.num_nodes.max(1),
                s.ntasks,
                s.name
            ),
        ];
        if oneliner {
            println!("{}", lines.join(" "));
        } else {
            println!("{}\n", lines.join("\n   "));
        }
    }
    Ok(0)
}

/// `scontrol --json show steps [JOB[.STEP]]`: data_parser's `steps`.
pub fn steps_json(client: &Client, which: Option<&str>, command: &[String]) -> Result<i32> {
    let steps: Vec<Value> = running_steps(client, which)?
        .into_iter()
        .map(|(j, s)| {
            json!({
                "job_id": j.job_id,
                "step_id": { "job_id": j.job_id, "step_id": s.id },
                "name": s.name,
                "state": [s.state.as_str()],
                "partition": j.partition,
                "node_list": j.nodes,
                "tasks": s.ntasks,
                "user_id": j.user_id,
                "start_time": number(Some(s.start_time)),
                "time_limit": match j.time_limit {
                    Some(m) => number(Some(m)),
                    None => json!({ "set": false, "infinite": true, "number": 0 }),
                },
            })
        })
        .collect();
    let out = json!({
        "steps": steps,
        "meta": meta(client, command)?,
        "errors": [],
        "warnings": [],
    });
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(0)
}
