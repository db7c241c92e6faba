//! `sacct --json`: the jobs sacct selected, in the shape of Slurm's
//! data_parser accounting jobs (v0.0.44 `jobs`, as `sacct --json` prints
//! them): the fields gsched records, each in Slurm's form.

use anyhow::Result;
use gsched_core::job::{JobState, Step};
use gsched_core::wire::JobInfo;
use serde_json::{json, Value};

use super::data_parser::number;
use super::format::sacct_state;
use crate::client::Client;

/// Slurm's `exit_code`: SUCCESS, ERROR with its code, or SIGNALED.
fn exit_code(code: Option<i32>, signal: Option<i32>) -> Value {
    let status = match (code, signal) {
        (_, Some(s)) if s > 0 => "SIGNALED",
        (Some(0), _) | (None, None) => "SUCCESS",
        _ => "ERROR",
    };
    json!({
        "status": [status],
        "return_code": number(code.map(i64::from)),
        "signal": { "id": number(signal.map(i64::from)), "name": "" },
    })
}

fn step(j: &JobInfo, s: &Step) -> Value {
    json!({
        "step": { "id": format!("{}.{}", j.job_id, s.id), "name": s.name },
        "state": [s.state.as_str()],
        "exit_code": exit_code(s.exit_code, s.exit_signal),
        "tasks": { "count": s.ntasks },
        "time": {
            "start": number(Some(s.start_time)),
            "end": number(s.end_time),
            "elapsed": s.end_time.map_or(0, |e| e - s.start_time),
        },
    })
}

fn job(j: &JobInfo) -> Value {
    let state = sacct_state(j);
    let current = match j.job_state {
        JobState::Cancelled => "CANCELLED".to_string(),
        _ => state.clone(),
    };
    json!({
        "job_id": j.job_id,
        "name": j.name,
        "user": j.user_name,
        "account": j.slurm.account.clone().unwrap_or_default(),
        "partition": j.partition,
        "qos": j.slurm.qos.clone().unwrap_or_else(|| "normal".into()),
        "nodes": j.nodes,
        "working_directory": j.current_working_directory,
        "state": { "current": [current], "reason": j.state_reason.clone().unwrap_or_else(|| "None".into()) },
        "exit_code": exit_code(j.exit_code, j.exit_signal),
        "array": {
            "job_id": j.array.as_ref().map_or(0, |a| a.array_job_id),
            "task_id": number(j.array.as_ref().map(|a| i64::from(a.task_id))),
        },
        "time": {
            "submission": j.submit_time,
            "eligible": j.begin.map_or(j.submit_time, |b| b.max(j.submit_time)),
            "start": j.start_time.unwrap_or(0),
            "end": j.end_time.unwrap_or(0),
            "elapsed": j.elapsed,
            "suspended": j.suspended_secs,
            "limit": number(j.time_limit.map(|m| m as i64)),
        },
        "steps": j.steps.iter().map(|s| step(j, s)).collect::<Vec<_>>(),
    })
}

/// Prints `jobs` as `sacct --json` does; `command` is the command line.
pub fn print(jobs: &[JobInfo], client: &Client, command: &[String]) -> Result<i32> {
    let out = json!({
        "jobs": jobs.iter().map(job).collect::<Vec<_>>(),
        "meta": super::scontrol_data::meta(client, command)?,
        "errors": [],
        "warnings": [],
    });
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(0)
}
