//! slurmrestd-compatible endpoints, `/slurm/{version}/...` for data parser
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
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use gsched_core::outcome::{parse_signal, SignalScope};

use crate::auth::Caller;
use crate::controller::{unix_now, Controller, CtlError};

pub use shape::{gres, in_use, no_val};
use shape::{
    Envelope, SlurmErrorEntry, SlurmJob, SlurmNode, SlurmNumber, SlurmPartition, SlurmResponse,
};

/// The data parser versions served.
pub const VERSIONS: [&str; 4] = ["v0.0.41", "v0.0.42", "v0.0.43", "v0.0.44"];

type Ctl = State<Arc<Controller>>;
type Who = Extension<Caller>;

/// The endpoints as the OpenAPI document describes them.
pub fn routes() -> OpenApiRouter<Arc<Controller>> {
    OpenApiRouter::new()
        .routes(routes!(ping))
        .routes(routes!(jobs))
        .routes(routes!(submit::submit))
        .routes(routes!(job, cancel))
        .routes(routes!(nodes))
        .routes(routes!(node))
        .routes(routes!(partitions))
}

/// The same endpoints with a trailing slash: slurmrestd answers both, and
/// its generated clients call `/slurm/v0.0.44/jobs/`.
pub fn slash_routes() -> Router<Arc<Controller>> {
    Router::new()
        .route("/slurm/{version}/ping/", get(ping))
        .route("/slurm/{version}/jobs/", get(jobs))
        .route("/slurm/{version}/job/submit/", post(submit::submit))
        .route("/slurm/{version}/job/{job_id}/", get(job).delete(cancel))
        .route("/slurm/{version}/nodes/", get(nodes))
        .route("/slurm/{version}/node/{node_name}/", get(node))
        .route("/slurm/{version}/partitions/", get(partitions))
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
        let body = SlurmResponse {
            envelope: Envelope {
                meta: shape::meta(&self.version, &self.cluster, ""),
                errors: vec![SlurmErrorEntry {
                    error: self.message.clone(),
                    error_number: self.number,
                    description: self.message,
                    source: "gsched".into(),
                }],
                warnings: Vec::new(),
            },
        };
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

    /// The envelope of a successful answer: meta, no errors, no warnings.
    fn envelope(&self) -> Envelope {
        Envelope {
            meta: shape::meta(&self.version, &self.cluster, &self.user),
            errors: Vec::new(),
            warnings: Vec::new(),
        }
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

/// One controller's answer to a ping.
#[derive(Debug, Serialize, ToSchema)]
pub struct Ping {
    hostname: String,
    pinged: String,
    responding: bool,
    latency: u64,
    mode: String,
    primary: bool,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct PingAnswer {
    pings: Vec<Ping>,
    #[serde(flatten)]
    envelope: Envelope,
}

/// The list of jobs; `jobs` is streamed a chunk at a time (`joblist`).
#[derive(Debug, Serialize, ToSchema)]
pub struct JobsAnswer {
    jobs: Vec<SlurmJob>,
    #[serde(flatten)]
    rest: joblist::JobsTail,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct NodesAnswer {
    nodes: Vec<SlurmNode>,
    last_update: SlurmNumber,
    #[serde(flatten)]
    envelope: Envelope,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct PartitionsAnswer {
    partitions: Vec<SlurmPartition>,
    last_update: SlurmNumber,
    #[serde(flatten)]
    envelope: Envelope,
}

/// A cancel's answer: v0.0.42 and later list the jobs whose signalling
/// failed in `status` (never any here).
#[derive(Debug, Serialize, ToSchema)]
pub struct KillAnswer {
    #[schema(value_type = Vec<Object>)]
    status: Vec<serde_json::Value>,
    #[serde(flatten)]
    envelope: Envelope,
}

/// Whether the controller answers (`scontrol ping`).
#[utoipa::path(get, path = "/slurm/{version}/ping", tag = "slurmrestd", operation_id = "slurm_ping",
    params(Version),
    responses(
        (status = 200, description = "The controller answers", body = PingAnswer),
        (status = "default", description = "slurmrestd-shaped error: errors[] says why", body = SlurmResponse)))]
async fn ping(State(ctl): Ctl, Extension(caller): Who, Path(v): Path<String>) -> Response {
    let r = match Req::new(&ctl, &v, &caller) {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    Json(PingAnswer {
        pings: vec![Ping {
            hostname: crate::auth::host_name(),
            pinged: "UP".into(),
            responding: true,
            latency: 0,
            mode: "primary".into(),
            primary: true,
        }],
        envelope: r.envelope(),
    })
    .into_response()
}

/// The data parser version of a slurmrestd path.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
struct Version {
    /// slurmrestd data parser version: v0.0.41, v0.0.42, v0.0.43 or
    /// v0.0.44 (one implementation answers all four).
    #[allow(dead_code)]
    version: String,
}

#[derive(Deserialize, Default, IntoParams)]
#[into_params(parameter_in = Query)]
struct Since {
    /// Unix seconds: only what changed at or after it.
    update_time: Option<i64>,
    /// Accepted as slurmrestd does; every job is shown.
    #[allow(dead_code)]
    flags: Option<String>,
}

/// Every job in the controller's memory (`squeue` through slurmrestd).
#[utoipa::path(get, path = "/slurm/{version}/jobs", tag = "slurmrestd", operation_id = "slurm_jobs",
    params(Version, Since),
    responses(
        (status = 200, description = "The jobs", body = JobsAnswer),
        (status = "default", description = "slurmrestd-shaped error: errors[] says why", body = SlurmResponse)))]
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

/// One job, in a list of one.
#[utoipa::path(get, path = "/slurm/{version}/job/{job_id}", tag = "slurmrestd", operation_id = "slurm_job",
    params(Version, ("job_id" = u64, Path, description = "Job id"), Since),
    responses(
        (status = 200, description = "The job", body = JobsAnswer),
        (status = "default", description = "slurmrestd-shaped error: errors[] says why (2017: unknown job)", body = SlurmResponse)))]
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

#[derive(Deserialize, Default, IntoParams)]
#[into_params(parameter_in = Query)]
struct KillQuery {
    /// A signal name or number; default: cancel.
    signal: Option<String>,
    /// slurmrestd's kill flags, comma-separated: a signal goes to the
    /// job's steps only, unless `BATCH_JOB` (the batch shell only) or
    /// `FULL_JOB` (every process) says otherwise, as Slurm's scancel.
    flags: Option<String>,
}

impl KillQuery {
    fn scope(&self) -> SignalScope {
        let flags: Vec<&str> = self
            .flags
            .as_deref()
            .unwrap_or("")
            .split(',')
            .map(str::trim)
            .collect();
        if flags.contains(&"FULL_JOB") {
            SignalScope::Full
        } else if flags.contains(&"BATCH_JOB") {
            SignalScope::Batch
        } else {
            SignalScope::Steps
        }
    }
}

/// Cancels a job, or sends it a signal (`scancel`).
#[utoipa::path(delete, path = "/slurm/{version}/job/{job_id}", tag = "slurmrestd", operation_id = "slurm_cancel",
    params(Version, ("job_id" = u64, Path, description = "Job id"), KillQuery),
    responses(
        (status = 200, description = "Done", body = KillAnswer),
        (status = "default", description = "slurmrestd-shaped error: errors[] says why", body = SlurmResponse)))]
async fn cancel(
    State(ctl): Ctl,
    Extension(caller): Who,
    Path((v, id)): Path<(String, String)>,
    Query(q): Query<KillQuery>,
) -> Result<Json<KillAnswer>, SlurmError> {
    let r = Req::new(&ctl, &v, &caller)?;
    let jid = parse_id(&r, &id)?;
    super::check_owner_of(&ctl, &caller, jid).map_err(|e| r.api_error(e))?;
    let signal = match q.signal.as_deref() {
        Some(s) => Some((
            parse_signal(s).map_err(|e| r.error(StatusCode::BAD_REQUEST, 2020, e.to_string()))?,
            q.scope(),
        )),
        None => None,
    };
    ctl.cancel(jid, signal, caller.uid)
        .await
        .map_err(|e| r.ctl_error(e))?;
    Ok(Json(KillAnswer {
        status: Vec::new(),
        envelope: r.envelope(),
    }))
}

/// Every node (`sinfo` through slurmrestd).
#[utoipa::path(get, path = "/slurm/{version}/nodes", tag = "slurmrestd", operation_id = "slurm_nodes",
    params(Version, Since),
    responses(
        (status = 200, description = "The nodes", body = NodesAnswer),
        (status = "default", description = "slurmrestd-shaped error: errors[] says why", body = SlurmResponse)))]
async fn nodes(
    State(ctl): Ctl,
    Extension(caller): Who,
    Path(v): Path<String>,
    Query(q): Query<Since>,
) -> Result<Json<NodesAnswer>, SlurmError> {
    let r = Req::new(&ctl, &v, &caller)?;
    Ok(Json(nodes_answer(&ctl, &r, None, q.update_time)))
}

fn nodes_answer(ctl: &Controller, r: &Req, only: Option<&str>, since: Option<i64>) -> NodesAnswer {
    let parts = ctl.config.all_partitions();
    let c = ctl.lock();
    let fresh = since.is_none_or(|t| ctl.nodes_changed_at() >= t);
    let nodes = c
        .nodes()
        .filter(|n| fresh && only.is_none_or(|o| o == n.name))
        .map(|n| shape::node(n, &parts, &r.cluster))
        .collect();
    NodesAnswer {
        nodes,
        last_update: no_val(Some(unix_now())),
        envelope: r.envelope(),
    }
}

/// One node, in a list of one.
#[utoipa::path(get, path = "/slurm/{version}/node/{node_name}", tag = "slurmrestd", operation_id = "slurm_node",
    params(Version, ("node_name" = String, Path, description = "Node name")),
    responses(
        (status = 200, description = "The node", body = NodesAnswer),
        (status = "default", description = "slurmrestd-shaped error: errors[] says why (2008: unknown node)", body = SlurmResponse)))]
async fn node(
    State(ctl): Ctl,
    Extension(caller): Who,
    Path((v, name)): Path<(String, String)>,
) -> Result<Json<NodesAnswer>, SlurmError> {
    let r = Req::new(&ctl, &v, &caller)?;
    let answer = nodes_answer(&ctl, &r, Some(&name), None);
    if answer.nodes.is_empty() {
        return Err(r.error(
            StatusCode::NOT_FOUND,
            2008,
            format!("Invalid node name specified: {name}"),
        ));
    }
    Ok(Json(answer))
}

/// Every partition (`sinfo -s` through slurmrestd).
#[utoipa::path(get, path = "/slurm/{version}/partitions", tag = "slurmrestd", operation_id = "slurm_partitions",
    params(Version),
    responses(
        (status = 200, description = "The partitions", body = PartitionsAnswer),
        (status = "default", description = "slurmrestd-shaped error: errors[] says why", body = SlurmResponse)))]
async fn partitions(
    State(ctl): Ctl,
    Extension(caller): Who,
    Path(v): Path<String>,
) -> Result<Json<PartitionsAnswer>, SlurmError> {
    let r = Req::new(&ctl, &v, &caller)?;
    let c = ctl.lock();
    let nodes: Vec<&gsched_core::cluster::Node> = c.nodes().collect();
    let partitions = ctl
        .config
        .all_partitions()
        .iter()
        .enumerate()
        .map(|(i, p)| shape::partition(p, i == 0, &nodes, &r.cluster))
        .collect();
    Ok(Json(PartitionsAnswer {
        partitions,
        last_update: no_val(Some(unix_now())),
        envelope: r.envelope(),
    }))
}
