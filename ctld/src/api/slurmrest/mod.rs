//! slurmrestd-compatible endpoints, `/slurm/{v}/...` for data parser
//! versions v0.0.41 to v0.0.44 (one implementation): ping, jobs, job,
//! job submit and cancel, nodes, node, partitions. Authentication is the
//! API's (tokens as `X-SLURM-USER-TOKEN`/`X-SLURM-USER-NAME` or Bearer).

mod joblist;
mod shape;
mod submit;

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::auth::Caller;
use crate::controller::{unix_now, Controller, CtlError};

pub use shape::{gres, in_use, no_val};

/// The data parser versions served.
pub const VERSIONS: [&str; 4] = ["v0.0.41", "v0.0.42", "v0.0.43", "v0.0.44"];

type Ctl = State<Arc<Controller>>;
type Who = Extension<Caller>;

pub fn routes() -> Router<Arc<Controller>> {
    // slurmrestd answers with and without a trailing slash; its generated
    // clients call `/slurm/v0.0.44/jobs/`.
    let mut r = Router::new();
    for slash in ["", "/"] {
        r = r
            .route(&format!("/slurm/{{v}}/ping{slash}"), get(ping))
            .route(&format!("/slurm/{{v}}/jobs{slash}"), get(jobs))
            .route(
                &format!("/slurm/{{v}}/job/submit{slash}"),
                post(submit::submit),
            )
            .route(
                &format!("/slurm/{{v}}/job/{{id}}{slash}"),
                get(job).delete(cancel),
            )
            .route(&format!("/slurm/{{v}}/nodes{slash}"), get(nodes))
            .route(&format!("/slurm/{{v}}/node/{{name}}{slash}"), get(node))
            .route(&format!("/slurm/{{v}}/partitions{slash}"), get(partitions));
    }
    r
}

/// An error answer in slurmrestd's shape.
pub struct SlurmError {
    status: StatusCode,
    version: String,
    cluster: String,
    message: String,
    /// Slurm's error number, where one matches (e.g. 2017 invalid job id).
    number: i64,
}

impl IntoResponse for SlurmError {
    fn into_response(self) -> Response {
        let body = json!({
            "meta": shape::meta(&self.version, &self.cluster, ""),
            "errors": [{
                "error": self.message,
                "error_number": self.number,
                "description": self.message,
                "source": "gsched",
            }],
            "warnings": [],
        });
        (self.status, Json(body)).into_response()
    }
}

/// Per-request context: the version asked for, checked.
struct Req {
    version: String,
    cluster: String,
    user: String,
}

impl Req {
    fn new(ctl: &Controller, v: &str, caller: &Caller) -> Result<Req, SlurmError> {
        let r = Req {
            version: v.to_string(),
            cluster: ctl.config.cluster_name.clone(),
            user: caller.user.clone(),
        };
        if !VERSIONS.contains(&v) {
            return Err(r.error(
                StatusCode::NOT_FOUND,
                9000,
                format!(
                    "unsupported data parser version {v}; this server speaks {}",
                    VERSIONS.join(", ")
                ),
            ));
        }
        Ok(r)
    }

    fn error(&self, status: StatusCode, number: i64, message: String) -> SlurmError {
        SlurmError {
            status,
            version: self.version.clone(),
            cluster: self.cluster.clone(),
            message,
            number,
        }
    }

    fn ctl_error(&self, e: CtlError) -> SlurmError {
        let api: gsched_daemon::http::ApiError = e.into();
        self.error(api.0, slurm_errno(api.0), api.1)
    }

    fn api_error(&self, e: gsched_daemon::http::ApiError) -> SlurmError {
        self.error(e.0, slurm_errno(e.0), e.1)
    }

    /// A successful answer: `fields` plus meta, errors, warnings.
    fn ok(&self, mut fields: Value) -> Json<Value> {
        fields["meta"] = shape::meta(&self.version, &self.cluster, &self.user);
        fields["errors"] = json!([]);
        fields["warnings"] = json!([]);
        Json(fields)
    }
}

/// Slurm's numbers for the errors a client may test for.
fn slurm_errno(s: StatusCode) -> i64 {
    match s {
        StatusCode::NOT_FOUND => 2017,    // ESLURM_INVALID_JOB_ID
        StatusCode::FORBIDDEN => 2002,    // ESLURM_ACCESS_DENIED
        StatusCode::CONFLICT => 2021,     // ESLURM_ALREADY_DONE
        StatusCode::BAD_REQUEST => 2020,  // ESLURM_JOB_SCRIPT_MISSING-ish: bad request
        StatusCode::UNAUTHORIZED => 1007, // ESLURM_AUTH_CRED_INVALID-like
        _ => 1000,
    }
}

async fn ping(State(ctl): Ctl, Extension(caller): Who, Path(v): Path<String>) -> Response {
    let r = match Req::new(&ctl, &v, &caller) {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    let host = crate::auth::host_name();
    r.ok(json!({
        "pings": [{
            "hostname": host,
            "pinged": "UP",
            "responding": true,
            "latency": 0,
            "mode": "primary",
            "primary": true,
        }],
    }))
    .into_response()
}

#[derive(Deserialize, Default)]
struct Since {
    /// Unix seconds: only what changed at or after it.
    update_time: Option<i64>,
    /// Accepted as slurmrestd does; every job is shown.
    #[allow(dead_code)]
    flags: Option<String>,
}

async fn jobs(
    State(ctl): Ctl,
    Extension(caller): Who,
    Path(v): Path<String>,
    Query(q): Query<Since>,
) -> Result<Response, SlurmError> {
    let r = Req::new(&ctl, &v, &caller)?;
    Ok(joblist::answer(ctl, &r, q.update_time, None))
}

fn unknown_job(r: &Req, id: &str) -> SlurmError {
    r.error(
        StatusCode::NOT_FOUND,
        2017,
        format!("Invalid job id specified: {id}"),
    )
}

fn parse_id(r: &Req, id: &str) -> Result<u64, SlurmError> {
    id.parse::<u64>().map_err(|_| unknown_job(r, id))
}

async fn job(
    State(ctl): Ctl,
    Extension(caller): Who,
    Path((v, id)): Path<(String, String)>,
    Query(q): Query<Since>,
) -> Result<Response, SlurmError> {
    let r = Req::new(&ctl, &v, &caller)?;
    let jid = parse_id(&r, &id)?;
    if !ctl.has_job(jid) {
        return Err(unknown_job(&r, &id));
    }
    Ok(joblist::answer(ctl, &r, q.update_time, Some(jid)))
}

#[derive(Deserialize, Default)]
struct KillQuery {
    /// A signal name or number; default: cancel.
    signal: Option<String>,
    #[allow(dead_code)]
    flags: Option<String>,
}

async fn cancel(
    State(ctl): Ctl,
    Extension(caller): Who,
    Path((v, id)): Path<(String, String)>,
    Query(q): Query<KillQuery>,
) -> Result<Json<Value>, SlurmError> {
    let r = Req::new(&ctl, &v, &caller)?;
    let jid = parse_id(&r, &id)?;
    super::check_owner_of(&ctl, &caller, jid).map_err(|e| r.api_error(e))?;
    let signal = match q.signal.as_deref() {
        Some(s) => Some(
            gsched_core::outcome::parse_signal(s)
                .map_err(|e| r.error(StatusCode::BAD_REQUEST, 2020, e.to_string()))?,
        ),
        None => None,
    };
    ctl.cancel(jid, signal, caller.uid)
        .await
        .map_err(|e| r.ctl_error(e))?;
    // v0.0.42 and later list the jobs whose signalling failed: none here.
    Ok(r.ok(json!({ "status": [] })))
}

async fn nodes(
    State(ctl): Ctl,
    Extension(caller): Who,
    Path(v): Path<String>,
    Query(q): Query<Since>,
) -> Result<Json<Value>, SlurmError> {
    let r = Req::new(&ctl, &v, &caller)?;
    Ok(r.ok(nodes_json(&ctl, &r, None, q.update_time)))
}

fn nodes_json(ctl: &Controller, r: &Req, only: Option<&str>, since: Option<i64>) -> Value {
    let parts = ctl.config.all_partitions();
    let c = ctl.lock();
    let fresh = since.is_none_or(|t| ctl.nodes_changed_at() >= t);
    let list: Vec<Value> = c
        .nodes()
        .filter(|n| fresh && only.is_none_or(|o| o == n.name))
        .map(|n| shape::node(n, &parts, &r.cluster))
        .collect();
    json!({ "nodes": list, "last_update": no_val(Some(unix_now())) })
}

async fn node(
    State(ctl): Ctl,
    Extension(caller): Who,
    Path((v, name)): Path<(String, String)>,
) -> Result<Json<Value>, SlurmError> {
    let r = Req::new(&ctl, &v, &caller)?;
    let body = nodes_json(&ctl, &r, Some(&name), None);
    if body["nodes"].as_array().is_none_or(|a| a.is_empty()) {
        return Err(r.error(
            StatusCode::NOT_FOUND,
            2008,
            format!("Invalid node name specified: {name}"),
        ));
    }
    Ok(r.ok(body))
}

async fn partitions(
    State(ctl): Ctl,
    Extension(caller): Who,
    Path(v): Path<String>,
) -> Result<Json<Value>, SlurmError> {
    let r = Req::new(&ctl, &v, &caller)?;
    let c = ctl.lock();
    let nodes: Vec<&gsched_core::cluster::Node> = c.nodes().collect();
    let list: Vec<Value> = ctl
        .config
        .all_partitions()
        .iter()
        .enumerate()
        .map(|(i, p)| shape::partition(p, i == 0, &nodes, &r.cluster))
        .collect();
    Ok(r.ok(json!({ "partitions": list, "last_update": no_val(Some(unix_now())) })))
}
