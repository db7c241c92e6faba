//! `POST /slurm/{version}/job/submit`: slurmrestd's job description read into a
//! gsched job, with errors that name the field.

use std::collections::BTreeMap;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use gsched_core::array::ArrayRequest;
use gsched_core::dependency::Dependency;
use gsched_core::job::{GpuRequest, JobSpec, SlurmOptions};
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use super::shape::{Envelope, SlurmResponse, SlurmWarning};
use super::{Ctl, Req, SlurmError, Who};

/// Fields of `job` read here; others are accepted with a warning.
const KNOWN: &[&str] = &[
    "script",
    "name",
    "partition",
    "current_working_directory",
    "environment",
    "time_limit",
    "standard_output",
    "standard_error",
    "standard_input",
    "account",
    "qos",
    "comment",
    "wckey",
    "array",
    "dependency",
    "hold",
    "requeue",
    "tasks",
    "cpus_per_task",
    "argv",
    "tres_per_job",
    "tres_per_node",
    "tres_per_task",
    "user_id",
    "group_id",
    "nodes",
    "minimum_nodes",
    "maximum_nodes",
    "open_mode",
];

/// A number given plainly or as `{"set", "infinite", "number"}`; `Ok(None)`
/// for unset or infinite.
fn number(field: &str, v: &Value) -> Result<Option<i64>, BadSubmission> {
    match v {
        Value::Null => Ok(None),
        Value::Number(n) => n
            .as_i64()
            .map(Some)
            .ok_or_else(|| BadSubmission(format!("job.{field} must be a whole number"))),
        Value::Object(o) => {
            if o.get("infinite").and_then(Value::as_bool) == Some(true)
                || o.get("set").and_then(Value::as_bool) == Some(false)
            {
                return Ok(None);
            }
            o.get("number")
                .and_then(Value::as_i64)
                .map(Some)
                .ok_or_else(|| BadSubmission(format!("job.{field}.number must be a whole number")))
        }
        _ => Err(
            format!("job.{field} must be a number or {{\"set\", \"infinite\", \"number\"}}").into(),
        ),
    }
}

fn text(field: &str, v: Option<&Value>) -> Result<Option<String>, BadSubmission> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(format!("job.{field} must be a string").into()),
    }
}

/// `gres/gpu[:TYPE][:N]` (or `gpu:...`): GPU instances of the job's own,
/// so an isolated job: the type (MIG profile or GPU model) when one is
/// named, and the count N (1 when not given).
fn gpu_request(tres: &str) -> Result<Option<(Option<String>, u32)>, BadSubmission> {
    let mut found = None;
    for part in tres.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let g = part.strip_prefix("gres/").unwrap_or(part);
        if ["cpu=", "mem=", "node=", "billing="]
            .iter()
            .any(|p| g.starts_with(p))
        {
            continue;
        }
        // `gres/gpu=2` (slurmrestd's TRES form) or `gres/gpu:2`.
        let (g, eq_count) = match g.split_once('=') {
            Some((a, n)) => (a, Some(n)),
            None => (g, None),
        };
        let Some(rest) = g.strip_prefix("gpu") else {
            return Err(format!(
                "tres {part}: gsched knows only the gpu resource (gres/gpu[:PROFILE][:N])"
            )
            .into());
        };
        let fields: Vec<&str> = rest.trim_start_matches(':').split(':').collect();
        let profile = fields
            .iter()
            .find(|f| !f.is_empty() && f.parse::<u32>().is_err())
            .map(|p| p.to_string());
        let count =
            match eq_count.or_else(|| fields.iter().copied().find(|f| f.parse::<u32>().is_ok())) {
                None => 1,
                Some(n) => match n.trim().parse::<u32>() {
                    Ok(0) => {
                        return Err(format!(
                            "tres {part}: a GPU count of 0 is not a GPU request; leave it out"
                        )
                        .into())
                    }
                    Ok(n) => n,
                    Err(_) => return Err(format!("tres {part}: '{n}' is not a GPU count").into()),
                },
            };
        found = Some((profile, count));
    }
    Ok(found)
}

/// The node count a submission asks for (`nodes`, a count or `MIN-MAX`,
/// or `minimum_nodes`), as the recorded `--nodes` option, read as
/// sbatch's is.
fn node_count(
    obj: &serde_json::Map<String, Value>,
) -> Result<Option<(String, String)>, BadSubmission> {
    let nodes = match obj.get("nodes") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(v) => number("nodes", v)?.map(|n| n.to_string()),
    };
    let nodes = match nodes {
        Some(n) => Some(n),
        None => match obj.get("minimum_nodes") {
            Some(v) => number("minimum_nodes", v)?.map(|n| n.to_string()),
            None => None,
        },
    };
    Ok(nodes.map(|n| ("nodes".to_string(), n)))
}

/// A slurmrestd submission gsched cannot take, and why (the message its
/// user reads).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadSubmission(pub String);

impl From<String> for BadSubmission {
    fn from(why: String) -> Self {
        BadSubmission(why)
    }
}

impl From<&str> for BadSubmission {
    fn from(why: &str) -> Self {
        BadSubmission(why.to_string())
    }
}

/// The job object of a submission: `job`, or the one entry of `jobs`.
fn the_job(body: &Value) -> Result<&Value, BadSubmission> {
    match body.get("job") {
        Some(Value::Object(_)) => Ok(&body["job"]),
        Some(_) => Err("job must be an object".into()),
        None => match body.get("jobs").and_then(Value::as_array) {
            Some(list) if list.len() == 1 => Ok(&list[0]),
            Some(_) => Err("gsched takes one job per submission (no heterogeneous jobs)".into()),
            None => Err("the body needs a job object: {\"script\": ..., \"job\": {...}}".into()),
        },
    }
}

/// `job.environment` (a list of `NAME=value`); absent, PATH only, with a
/// warning.
fn environment_of(
    obj: &serde_json::Map<String, Value>,
    warnings: &mut Vec<String>,
) -> Result<BTreeMap<String, String>, BadSubmission> {
    let mut environment = BTreeMap::new();
    match obj.get("environment") {
        None | Some(Value::Null) => {
            warnings.push("job.environment was not given; the job starts with PATH only".into());
            environment.insert("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into());
        }
        Some(Value::Array(list)) => {
            for e in list {
                let s = e
                    .as_str()
                    .ok_or("job.environment must be a list of \"NAME=value\" strings")?;
                let (k, v) = s.split_once('=').ok_or_else(|| {
                    BadSubmission(format!("job.environment entry {s:?} is not NAME=value"))
                })?;
                environment.insert(k.to_string(), v.to_string());
            }
        }
        Some(_) => return Err("job.environment must be a list of \"NAME=value\" strings".into()),
    }
    Ok(environment)
}

/// `job.argv`: a list of strings.
fn argv_of(obj: &serde_json::Map<String, Value>) -> Result<Vec<String>, BadSubmission> {
    match obj.get("argv") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(a)) => Ok(a
            .iter()
            .map(|x| {
                x.as_str()
                    .map(str::to_string)
                    .ok_or("job.argv must be a list of strings")
            })
            .collect::<Result<_, _>>()?),
        Some(_) => Err("job.argv must be a list of strings".into()),
    }
}

/// The GPUs a job asks for (type and count) from its `tres_per_*`, and
/// its `--gpus-per-task` where it asked per task.
type GpuAsk = (Option<(Option<String>, u32)>, Option<String>);

fn gpus_of(
    obj: &serde_json::Map<String, Value>,
    tasks: Option<u32>,
) -> Result<GpuAsk, BadSubmission> {
    let mut gpu = None;
    let mut gpus_per_task = None;
    for f in ["tres_per_job", "tres_per_node", "tres_per_task"] {
        if let Some(t) = text(f, obj.get(f))? {
            if let Some((kind, n)) = gpu_request(&t)? {
                // Per task: that many for each of the job's tasks, all on
                // its one node.
                let count = if f == "tres_per_task" {
                    gpus_per_task = Some(n.to_string());
                    n.saturating_mul(tasks.unwrap_or(1).max(1))
                } else {
                    n
                };
                gpu = Some((kind, count));
            }
        }
    }
    Ok((gpu, gpus_per_task))
}

/// The gsched job a slurmrestd submission describes, and its warnings.
/// Array indices must be below `max_array_size` (the controller's
/// MaxArraySize: a larger array is refused before it is made).
pub fn job_spec_within(
    body: &Value,
    max_array_size: u32,
) -> Result<(JobSpec, Vec<String>), BadSubmission> {
    let job = the_job(body)?;
    let obj = job.as_object().ok_or("job must be an object")?;
    let mut warnings: Vec<String> = obj
        .keys()
        .filter(|k| !KNOWN.contains(&k.as_str()))
        .map(|k| format!("job.{k} is not supported by gsched and was ignored"))
        .collect();
    let script = text("script", body.get("script"))?
        .or(text("script", obj.get("script"))?)
        .filter(|s| !s.trim().is_empty())
        .ok_or("the batch script is missing (script)")?;
    if !script.starts_with("#!") {
        return Err("the batch script must start with #! (e.g. #!/bin/bash)".into());
    }
    let cwd = text(
        "current_working_directory",
        obj.get("current_working_directory"),
    )?
    .ok_or("job.current_working_directory is required")?;
    if !cwd.starts_with('/') {
        return Err(
            format!("job.current_working_directory must be an absolute path, not {cwd}").into(),
        );
    }
    let environment = environment_of(obj, &mut warnings)?;
    let minutes = match obj.get("time_limit") {
        Some(v) => number("time_limit", v)?,
        None => None,
    };
    if minutes.is_some_and(|m| m <= 0) {
        return Err("job.time_limit must be at least 1 minute".into());
    }
    let small = |field: &str| -> Result<Option<u32>, BadSubmission> {
        match obj.get(field) {
            Some(v) => number(field, v)?
                .map(|n| {
                    u32::try_from(n).map_err(|_| format!("job.{field} is out of range").into())
                })
                .transpose(),
            None => Ok(None),
        }
    };
    let flag = |field: &str| -> Result<bool, BadSubmission> {
        match obj.get(field) {
            None | Some(Value::Null) => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(_) => Err(format!("job.{field} must be true or false").into()),
        }
    };
    let (gpu, gpus_per_task) = gpus_of(obj, small("tasks")?)?;
    let argv = argv_of(obj)?;
    let array = text("array", obj.get("array"))?
        .map(|a| {
            ArrayRequest::parse_within(&a, max_array_size)
                .map_err(|e| BadSubmission(format!("job.array: {e}")))
        })
        .transpose()?;
    let dependency = text("dependency", obj.get("dependency"))?
        .filter(|d| !d.is_empty())
        .map(|d| Dependency::parse(&d).map_err(|e| BadSubmission(format!("job.dependency: {e}"))))
        .transpose()?;
    let spec = JobSpec {
        name: text("name", obj.get("name"))?.unwrap_or_else(|| "sbatch".into()),
        script,
        argv,
        environment,
        working_dir: cwd,
        uid: 0,
        gid: 0,
        submit_host: "slurmrestd".into(),
        isolated: gpu.is_some(),
        gpu: GpuRequest {
            // The type named: a MIG profile, else a GPU model (`h100`).
            model: gpu
                .clone()
                .and_then(|g| g.0)
                .filter(|t| !gsched_core::gpu::is_profile_name(t))
                .map(|t| t.to_ascii_lowercase()),
            mig_profile: gpu
                .clone()
                .and_then(|g| g.0)
                .filter(|t| gsched_core::gpu::is_profile_name(t)),
            mem_mib: None,
            share: None,
            share_limit: None,
            count: gpu.map(|g| g.1).filter(|n| *n != 1),
        },
        time_limit: minutes.map(|m| m as u64 * 60),
        stdout: text("standard_output", obj.get("standard_output"))?,
        stderr: text("standard_error", obj.get("standard_error"))?,
        // Absent: the controller's default (JobRequeue).
        requeue: match obj.get("requeue") {
            None | Some(Value::Null) => None,
            Some(_) => Some(flag("requeue")?),
        },
        partition: text("partition", obj.get("partition"))?,
        array,
        hold: flag("hold")?,
        dependency,
        slurm: SlurmOptions {
            command: None,
            account: text("account", obj.get("account"))?,
            qos: text("qos", obj.get("qos"))?,
            comment: text("comment", obj.get("comment"))?,
            wckey: text("wckey", obj.get("wckey"))?,
            ntasks: small("tasks")?,
            cpus_per_task: small("cpus_per_task")?,
            open_mode: text("open_mode", obj.get("open_mode"))?,
            signal: None,
            other: node_count(obj)?
                .into_iter()
                .chain(gpus_per_task.map(|g| ("gpus-per-task".to_string(), g)))
                .collect(),
        },
        ..JobSpec::default()
    };
    Ok((spec, warnings))
}

/// v0.0.41's `result` block, kept for its clients.
#[derive(Debug, Serialize, ToSchema)]
pub struct SubmitResult {
    job_id: u64,
    step_id: String,
    error_code: i32,
    error: String,
    job_submit_user_msg: String,
}

/// A submission accepted; `warnings` name the fields gsched ignored.
#[derive(Debug, Serialize, ToSchema)]
pub struct SubmitAnswer {
    job_id: u64,
    step_id: String,
    job_submit_user_msg: String,
    result: SubmitResult,
    #[serde(flatten)]
    envelope: Envelope,
}

/// Submits a batch job (`sbatch` through slurmrestd): `{"script", "job":
/// {...}}` as slurmrestd's `job_submit_req`.
#[utoipa::path(post, path = "/slurm/{version}/job/submit", tag = "slurmrestd", operation_id = "slurm_submit",
    params(super::Version),
    request_body(content = Object, description = "slurmrestd's job_submit_req: script and job (job_desc_msg)"),
    responses(
        (status = 200, description = "Accepted", body = SubmitAnswer),
        (status = "default", description = "slurmrestd-shaped error: errors[] says why", body = SlurmResponse)))]
pub async fn submit(
    State(ctl): Ctl,
    Extension(caller): Who,
    Path(v): Path<String>,
    body: axum::body::Bytes,
) -> Result<Json<SubmitAnswer>, SlurmError> {
    let r = Req::new(&ctl, &v, &caller)?;
    let bad = |m: String| r.error(StatusCode::BAD_REQUEST, 2020, m);
    let body: Value =
        serde_json::from_slice(&body).map_err(|e| bad(format!("invalid JSON body: {e}")))?;
    let (mut spec, warnings) =
        job_spec_within(&body, ctl.config.max_array_size).map_err(|e| bad(e.to_string()))?;
    // The job is the caller's; a numeric user_id naming someone else is
    // refused the same way.
    if let Some(uid) = body["job"]["user_id"]
        .as_str()
        .and_then(|u| u.parse::<u32>().ok())
    {
        spec.uid = uid;
    }
    caller.stamp_owner(&mut spec).map_err(|e| r.api_error(e))?;
    let id = ctl.submit(spec).await.map_err(|e| r.ctl_error(e))?;
    let mut envelope = r.envelope();
    envelope.warnings = warnings
        .into_iter()
        .map(|w| SlurmWarning {
            description: w,
            source: "gsched".into(),
        })
        .collect();
    Ok(Json(SubmitAnswer {
        job_id: id,
        step_id: "batch".into(),
        job_submit_user_msg: String::new(),
        result: SubmitResult {
            job_id: id,
            step_id: "batch".into(),
            error_code: 0,
            error: "No error".into(),
            job_submit_user_msg: String::new(),
        },
        envelope,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job_spec(body: &Value) -> Result<(JobSpec, Vec<String>), BadSubmission> {
        job_spec_within(body, gsched_core::array::MOST_MAX_ARRAY_SIZE)
    }
    use serde_json::json;

    #[test]
    fn a_slurmrestd_body_becomes_a_job() {
        let body = json!({
            "script": "#!/bin/sh\necho hi\n",
            "job": {
                "name": "x", "partition": "gpu", "current_working_directory": "/tmp",
                "environment": ["PATH=/bin", "A=b=c"],
                "time_limit": {"set": true, "infinite": false, "number": 5},
                "tres_per_job": "cpu=2,gres/gpu:1g.5gb:1", "array": "1-3%1",
                "tasks": 2, "bogus": 1,
            }
        });
        let (s, w) = job_spec(&body).unwrap();
        assert_eq!(s.name, "x");
        assert_eq!(s.time_limit, Some(300));
        assert_eq!(s.environment["A"], "b=c");
        assert!(s.isolated);
        assert_eq!(s.gpu.mig_profile.as_deref(), Some("1g.5gb"));
        assert_eq!(s.slurm.ntasks, Some(2));
        let (h, _) = job_spec(&json!({"script": "#!/bin/sh\n", "job": {
            "current_working_directory": "/", "environment": [],
            "tres_per_node": "gres/gpu:h100:1"}}))
        .unwrap();
        assert_eq!(h.gpu.model.as_deref(), Some("h100"));
        // One per task with several tasks: one instance per task.
        let (t, _) = job_spec(&json!({"script": "#!/bin/sh\n", "job": {
            "current_working_directory": "/", "environment": [], "tasks": 2,
            "tres_per_task": "gres/gpu:1"}}))
        .unwrap();
        assert_eq!(t.gpu.count, Some(2));
        assert_eq!(t.slurm.other["gpus-per-task"], "1");
        t.validate().unwrap();
        let (n, _) = job_spec(&json!({"script": "#!/bin/sh\n", "job": {
            "current_working_directory": "/", "environment": [],
            "tres_per_job": "gres/gpu=4"}}))
        .unwrap();
        assert_eq!(n.gpu.count, Some(4));
        let e = job_spec(&json!({"script": "#!/bin/sh\n", "job": {
            "current_working_directory": "/", "environment": [],
            "tres_per_job": "gres/gpu:0"}}))
        .unwrap_err()
        .to_string();
        assert!(e.contains("count of 0"), "{e}");
        assert!(h.gpu.mig_profile.is_none() && h.isolated);
        h.validate().unwrap();
        assert!(s.array.is_some());
        assert_eq!(
            w,
            vec!["job.bogus is not supported by gsched and was ignored"]
        );
        let (plain, _) = job_spec(&json!({"script": "#!/bin/sh\n", "job": {
            "current_working_directory": "/", "environment": [], "time_limit": 2}}))
        .unwrap();
        assert_eq!(plain.time_limit, Some(120));
        assert!(!plain.isolated);
        // The node count is recorded as sbatch's --nodes.
        for nodes in [
            json!({"nodes": "2-4"}),
            json!({"minimum_nodes": 2}),
            json!({"nodes": 2}),
        ] {
            let mut job = json!({"current_working_directory": "/", "environment": []});
            job.as_object_mut()
                .unwrap()
                .extend(nodes.as_object().unwrap().clone());
            let (s, _) = job_spec(&json!({"script": "#!/bin/sh\n", "job": job})).unwrap();
            s.validate().unwrap();
            assert_eq!(gsched_core::allocation::width(&s.slurm), Ok(2), "{nodes}");
        }
        let (one, _) = job_spec(&json!({"script": "#!/bin/sh\n", "job": {
            "current_working_directory": "/", "environment": [], "nodes": 1}}))
        .unwrap();
        one.validate().unwrap();
    }

    #[test]
    fn bad_bodies_name_the_field() {
        let err = |b: Value| job_spec(&b).unwrap_err().to_string().to_string();
        assert!(err(json!({})).contains("needs a job object"));
        assert!(
            err(json!({"job": {"current_working_directory": "/"}})).contains("script is missing")
        );
        assert!(
            err(json!({"script": "echo", "job": {"current_working_directory": "/"}}))
                .contains("#!")
        );
        assert!(err(json!({"script": "#!/bin/sh", "job": {}}))
            .contains("current_working_directory is required"));
        assert!(err(json!({"script": "#!/bin/sh", "job": {"current_working_directory": "/", "environment": "A=1"}})).contains("job.environment"));
        assert!(err(json!({"script": "#!/bin/sh", "job": {"current_working_directory": "/", "time_limit": "5"}})).contains("job.time_limit"));
        assert!(err(json!({"script": "#!/bin/sh", "job": {"current_working_directory": "/", "tres_per_job": "gres/fpga:1"}})).contains("gpu resource"));
        assert!(err(
            json!({"script": "#!/bin/sh", "job": {"current_working_directory": "/", "array": "x"}})
        )
        .contains("job.array"));
    }
}
