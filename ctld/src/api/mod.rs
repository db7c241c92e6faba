//! The REST API: `/api/v1/...` for clients (authenticated in `access`),
//! `/internal/v1/...` for gnoded (`internal`), and the routes of the
//! slurmrestd endpoints, the dashboard, metrics and the OpenAPI document.

mod access;
mod accounts;
mod internal;
mod listing;
pub mod slurmrest;

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use gsched_core::cluster::ClusterError;
use gsched_core::job::{JobId, JobSpec};
use gsched_core::outcome::parse_signal;
use gsched_core::wire::{InstanceInfo, JobInfo, NodeInfo, Submitted};
use gsched_daemon::http::{ApiError, Body};
use serde::Deserialize;

use crate::auth::Caller;
use crate::controller::{unix_now, Controller, CtlError};

pub use access::{check_owner_of, socket_app, tcp_app, PeerCred};

pub(crate) type Ctl = State<Arc<Controller>>;
pub(crate) type Who = Extension<Caller>;

impl From<CtlError> for ApiError {
    fn from(e: CtlError) -> ApiError {
        let status = match &e {
            CtlError::Cluster(ClusterError::UnknownJob(_)) => StatusCode::NOT_FOUND,
            CtlError::Cluster(ClusterError::UnknownNode(_)) => StatusCode::NOT_FOUND,
            CtlError::Cluster(ClusterError::NotRunning(_)) => StatusCode::CONFLICT,
            CtlError::Cluster(ClusterError::NotPending(_)) => StatusCode::CONFLICT,
            CtlError::Cluster(ClusterError::NoSuchStep(..)) => StatusCode::NOT_FOUND,
            CtlError::Cluster(ClusterError::Spec(_)) => StatusCode::BAD_REQUEST,
            CtlError::Cluster(ClusterError::Refused(_)) => StatusCode::BAD_REQUEST,
            CtlError::Cluster(ClusterError::ScriptTooLarge { .. }) => StatusCode::PAYLOAD_TOO_LARGE,
            CtlError::Cluster(ClusterError::TooManyJobs(_)) => StatusCode::SERVICE_UNAVAILABLE,
            CtlError::UnknownPartition(..) => StatusCode::BAD_REQUEST,
            CtlError::Fence(_) => StatusCode::BAD_REQUEST,
            CtlError::Cluster(ClusterError::DependencyOnUnknownJob(_)) => StatusCode::BAD_REQUEST,
            CtlError::Cluster(_) => StatusCode::CONFLICT,
            CtlError::Store(_) => StatusCode::SERVICE_UNAVAILABLE,
        };
        ApiError(status, e.to_string())
    }
}

pub(crate) fn router(ctl: Arc<Controller>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .route("/openapi.json", get(openapi))
        .route("/api/v1/tokens", post(access::issue_token))
        .route("/api/v1/whoami", get(access::whoami))
        .route("/api/v1/jobs", post(submit).get(listing::list_jobs))
        .route(
            "/api/v1/jobs/{id}",
            get(get_job).delete(cancel_job).patch(update_job),
        )
        .route("/api/v1/jobs/{id}/script", get(job_script))
        .route("/api/v1/jobs/{id}/events", get(job_events))
        .route("/api/v1/jobs/{id}/requeue", post(requeue_job))
        .route("/api/v1/jobs/{id}/hold", post(hold_job))
        .route("/api/v1/jobs/{id}/suspend", post(suspend_job))
        .route("/api/v1/jobs/{id}/resume", post(resume_job))
        .route("/api/v1/jobs/{id}/steps", post(begin_step))
        .route("/api/v1/jobs/{id}/steps/{step}/end", post(end_step))
        .route("/api/v1/jobs/{id}/release", post(release_job))
        .route(
            "/api/v1/accounts",
            get(accounts::list).post(accounts::change),
        )
        .route("/api/v1/qos", post(accounts::change_qos))
        .route("/api/v1/nodes", get(list_nodes))
        .route("/api/v1/nodes/{name}/state", post(set_node_state))
        .route(
            "/api/v1/nodes/{name}/mig",
            get(node_mig).post(change_node_mig),
        )
        .route("/api/v1/instances", get(list_instances))
        .route("/api/v1/utilization", get(utilization))
        .route("/api/v1/tasks", get(list_tasks))
        .merge(internal::routes(Arc::clone(&ctl)))
        .merge(slurmrest::routes())
        .merge(crate::dashboard::routes())
        .fallback(|| async {
            ApiError(
                StatusCode::NOT_FOUND,
                "no such endpoint; see docs/api.md".into(),
            )
        })
        .with_state(ctl)
}

async fn healthz(State(ctl): Ctl) -> Json<serde_json::Value> {
    let c = ctl.lock();
    Json(serde_json::json!({
        "status": "ok",
        "pending": c.pending_count(),
        "running": c.running_count(),
        "nodes_up": c.nodes().filter(|n| n.up).count(),
        "launch_policy": c.policy_name(),
        "cluster_name": ctl.config.cluster_name,
        "partition": ctl.config.partition,
        "partitions": ctl.config.all_partitions(),
        "auth": "jwt",
        "socket": ctl.socket.display().to_string(),
        "min_job_age": ctl.config.min_job_age,
    }))
}

/// The OpenAPI document of the public API (`/api/v1` and `/slurm`).
pub const OPENAPI: &str = include_str!("../openapi.json");

async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI).into_response()
}

async fn metrics(State(ctl): Ctl) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        crate::controller::metrics::render(&ctl),
    )
        .into_response()
}

/// The header a client may send to make a submission safe to retry.
pub const IDEMPOTENCY_HEADER: &str = "idempotency-key";

async fn submit(
    State(ctl): Ctl,
    Extension(caller): Who,
    headers: axum::http::HeaderMap,
    Body(mut spec): Body<JobSpec>,
) -> Result<(StatusCode, Json<Submitted>), ApiError> {
    caller.stamp_owner(&mut spec)?;
    gsched_core::priority::check_nice(spec.nice, caller.admin)
        .map_err(|e| ApiError(StatusCode::FORBIDDEN, e.to_string()))?;
    if let Some(h) = headers.get(IDEMPOTENCY_HEADER) {
        let key = h.to_str().map_err(|_| {
            ApiError(
                StatusCode::BAD_REQUEST,
                "the Idempotency-Key header is not text".into(),
            )
        })?;
        if spec.idempotency_key.as_deref().is_some_and(|k| k != key) {
            return Err(ApiError(
                StatusCode::BAD_REQUEST,
                "the Idempotency-Key header and the job's idempotency_key differ".into(),
            ));
        }
        spec.idempotency_key = Some(key.to_string());
    }
    let job_id = ctl.submit(spec).await?;
    Ok((StatusCode::CREATED, Json(Submitted { job_id })))
}

/// The job `id` names, if it exists and the caller may change it.
/// Refuses anyone but an administrator to do `action` ("change QOS").
pub(crate) fn admin_only(caller: &Caller, action: &str) -> Result<(), ApiError> {
    if caller.admin {
        return Ok(());
    }
    Err(ApiError(
        StatusCode::FORBIDDEN,
        format!(
            "Access/permission denied: only an administrator may {action} ({} is not one)",
            caller.user
        ),
    ))
}

fn owned_job(ctl: &Controller, caller: &Caller, id: &str) -> Result<JobId, ApiError> {
    let jid: JobId = id.parse().map_err(|_| unknown_job(id))?;
    check_owner_of(ctl, caller, jid)?;
    Ok(jid)
}

pub(crate) fn unknown_job(id: &str) -> ApiError {
    ApiError(
        StatusCode::NOT_FOUND,
        format!("Invalid job id specified: {id}"),
    )
}

async fn get_job(State(ctl): Ctl, Path(id): Path<String>) -> Result<Json<JobInfo>, ApiError> {
    let jid: JobId = id.parse().map_err(|_| unknown_job(&id))?;
    let c = ctl.lock();
    let j = c.job(jid).ok_or_else(|| unknown_job(&id))?;
    let now = unix_now();
    Ok(Json(
        JobInfo::new(j, &ctl.config.partition, now)
            .weighed(c.priority_of(j, now))
            .expecting(c.expected_start(j.id)),
    ))
}

/// The batch script, for its owner and administrators only.
async fn job_script(
    State(ctl): Ctl,
    Extension(caller): Who,
    Path(id): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let jid = owned_job(&ctl, &caller, &id)?;
    let argv = {
        let c = ctl.lock();
        c.job(jid)
            .ok_or_else(|| unknown_job(&id))?
            .spec
            .argv
            .clone()
    };
    let text = ctl
        .job_text(jid)
        .await
        .map_err(ApiError::from)?
        .ok_or_else(|| unknown_job(&id))?;
    Ok(Json(serde_json::json!({
        "job_id": jid, "script": text.script, "argv": argv,
    })))
}

/// The job's history from the event log (submitted, started, ended, ...).
async fn job_events(
    State(ctl): Ctl,
    Path(id): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let jid: JobId = id.parse().map_err(|_| unknown_job(&id))?;
    let events = ctl.store.job_events(jid).await.map_err(|e| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot read the event log: {e}"),
        )
    })?;
    // A job that left memory still has its log.
    if events.is_empty() && !ctl.has_job(jid) {
        return Err(unknown_job(&id));
    }
    Ok(Json(serde_json::json!({ "job_id": jid, "events": events })))
}

#[derive(Deserialize)]
pub struct CancelQuery {
    signal: Option<String>,
}

async fn cancel_job(
    State(ctl): Ctl,
    Extension(caller): Who,
    Path(id): Path<String>,
    Query(q): Query<CancelQuery>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let jid = owned_job(&ctl, &caller, &id)?;
    let signal = match &q.signal {
        Some(s) => {
            Some(parse_signal(s).map_err(|e| ApiError(StatusCode::BAD_REQUEST, e.to_string()))?)
        }
        None => None,
    };
    ctl.cancel(jid, signal, caller.uid).await?;
    let c = ctl.lock();
    let state = c.job(jid).map(|j| j.state.as_str()).unwrap_or("UNKNOWN");
    Ok(Json(
        serde_json::json!({ "job_id": jid, "job_state": state }),
    ))
}

async fn requeue_job(
    State(ctl): Ctl,
    Extension(caller): Who,
    Path(id): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let jid = owned_job(&ctl, &caller, &id)?;
    ctl.requeue(jid).await?;
    Ok(Json(
        serde_json::json!({ "job_id": jid, "job_state": "PENDING" }),
    ))
}

async fn suspend_job(
    State(ctl): Ctl,
    Extension(caller): Who,
    Path(id): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    suspend_or_resume(&ctl, &caller, &id, true).await
}

async fn resume_job(
    State(ctl): Ctl,
    Extension(caller): Who,
    Path(id): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    suspend_or_resume(&ctl, &caller, &id, false).await
}

/// `scontrol suspend|resume`: an administrator's only, as in Slurm (a
/// user who could stop jobs and start them again could run past others).
async fn suspend_or_resume(
    ctl: &Arc<Controller>,
    caller: &Caller,
    id: &str,
    suspend: bool,
) -> Result<Json<serde_json::Value>, ApiError> {
    let jid: JobId = id.parse().map_err(|_| unknown_job(id))?;
    admin_only(
        caller,
        if suspend {
            "suspend jobs"
        } else {
            "resume jobs"
        },
    )?;
    // An unknown job is the controller's UnknownJob: 404.
    ctl.suspend(jid, suspend).await?;
    let c = ctl.lock();
    let state = c.job(jid).map(|j| j.state_name()).unwrap_or("UNKNOWN");
    Ok(Json(
        serde_json::json!({ "job_id": jid, "job_state": state }),
    ))
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct StepBegin {
    name: String,
    #[serde(default = "one")]
    ntasks: u32,
    /// Asked by `srun` in a job on several nodes: where the step's tasks
    /// run, answered with each node's URL and step credential.
    #[serde(default)]
    layout: Option<gsched_core::steps::LayoutRequest>,
}

fn one() -> u32 {
    1
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct StepEnd {
    exit_code: i32,
    #[serde(default)]
    signal: Option<i32>,
}

async fn begin_step(
    State(ctl): Ctl,
    Extension(caller): Who,
    Path(id): Path<String>,
    Body(b): Body<StepBegin>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let jid = owned_job(&ctl, &caller, &id)?;
    let Some(layout) = b.layout else {
        let step = ctl.begin_step(jid, &b.name, b.ntasks).await?;
        return Ok(Json(serde_json::json!({ "job_id": jid, "step_id": step })));
    };
    let (step, nodes) = ctl.begin_wide_step(jid, &b.name, &layout).await?;
    Ok(Json(
        serde_json::json!({ "job_id": jid, "step_id": step, "nodes": nodes }),
    ))
}

async fn end_step(
    State(ctl): Ctl,
    Extension(caller): Who,
    Path((id, step)): Path<(String, u32)>,
    Body(b): Body<StepEnd>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let jid = owned_job(&ctl, &caller, &id)?;
    ctl.end_step(jid, step, b.exit_code, b.signal).await?;
    Ok(Json(serde_json::json!({ "job_id": jid, "step_id": step })))
}

/// `scontrol update JobId=...`: changes a pending job, for its owner (who
/// may only lower its time limit) or an administrator.
async fn update_job(
    State(ctl): Ctl,
    Extension(caller): Who,
    Path(id): Path<String>,
    Body(update): Body<gsched_core::cluster::JobUpdate>,
) -> Result<Json<JobInfo>, ApiError> {
    let jid = owned_job(&ctl, &caller, &id)?;
    ctl.update_job(jid, &update, caller.admin).await?;
    let c = ctl.lock();
    let j = c.job(jid).ok_or_else(|| unknown_job(&id))?;
    let now = unix_now();
    Ok(Json(
        JobInfo::new(j, &ctl.config.partition, now)
            .weighed(c.priority_of(j, now))
            .expecting(c.expected_start(j.id)),
    ))
}

async fn hold_job(
    State(ctl): Ctl,
    Extension(caller): Who,
    Path(id): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    set_held(&ctl, &caller, &id, true).await
}

async fn release_job(
    State(ctl): Ctl,
    Extension(caller): Who,
    Path(id): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    set_held(&ctl, &caller, &id, false).await
}

async fn set_held(
    ctl: &Arc<Controller>,
    caller: &Caller,
    id: &str,
    held: bool,
) -> Result<Json<serde_json::Value>, ApiError> {
    let jid = owned_job(ctl, caller, id)?;
    ctl.set_held(jid, held).await?;
    Ok(Json(serde_json::json!({ "job_id": jid, "held": held })))
}

/// `scontrol update NodeName=... State=DRAIN|DOWN|RESUME Reason=...`:
/// administrators only.
async fn set_node_state(
    State(ctl): Ctl,
    Extension(caller): Who,
    Path(name): Path<String>,
    Body(change): Body<gsched_core::cluster::NodeStateChange>,
) -> Result<Json<serde_json::Value>, ApiError> {
    admin_only(&caller, &format!("change node {name}'s state"))?;
    ctl.set_node_state(&name, &change, &caller.user).await?;
    let c = ctl.lock();
    let node = c.node(&name).map(NodeInfo::new);
    Ok(Json(serde_json::json!({ "node": node })))
}

/// A node's MIG GPUs: layouts, states, frozen, reshapes under way.
async fn node_mig(
    State(ctl): Ctl,
    Path(name): Path<String>,
) -> Result<Json<gsched_core::wire::MigNodeInfo>, ApiError> {
    ctl.lock()
        .mig_info(&name)
        .map(Json)
        .ok_or_else(|| ApiError(StatusCode::NOT_FOUND, format!("unknown node '{name}'")))
}

/// An administrator freezes, thaws or lays out one of a node's GPUs.
async fn change_node_mig(
    State(ctl): Ctl,
    Extension(caller): Who,
    Path(name): Path<String>,
    Body(change): Body<gsched_core::wire::MigChange>,
) -> Result<Json<gsched_core::wire::MigNodeInfo>, ApiError> {
    admin_only(&caller, &format!("change node {name}'s MIG layout"))?;
    if change.frozen.is_some() == change.layout.is_some() {
        return Err(ApiError(
            StatusCode::BAD_REQUEST,
            "give either \"frozen\" or \"layout\"".into(),
        ));
    }
    ctl.change_mig(&name, &change, &caller.user).await?;
    node_mig(State(ctl), Path(name)).await
}

async fn list_nodes(State(ctl): Ctl) -> Json<serde_json::Value> {
    let c = ctl.lock();
    let nodes: Vec<NodeInfo> = c.nodes().map(NodeInfo::new).collect();
    Json(serde_json::json!({ "nodes": nodes }))
}

/// Cluster-wide GPU use over the last hour, and now.
async fn utilization(State(ctl): Ctl) -> Json<serde_json::Value> {
    let mut samples = ctl.utilization();
    samples.push(ctl.sample(unix_now()));
    Json(serde_json::json!({
        "interval_s": crate::controller::UTIL_INTERVAL,
        "samples": samples,
    }))
}

async fn list_instances(State(ctl): Ctl) -> Json<serde_json::Value> {
    let c = ctl.lock();
    let inst: Vec<InstanceInfo> = c
        .nodes()
        .flat_map(|n| {
            n.instances
                .iter()
                .map(|s| InstanceInfo::new(&n.name, s).with_drain_end(c.drain_expected_end(s)))
                .collect::<Vec<_>>()
        })
        .collect();
    Json(serde_json::json!({ "instances": inst }))
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct TaskQuery {
    job: Option<JobId>,
}

async fn list_tasks(
    State(ctl): Ctl,
    Query(q): Query<TaskQuery>,
) -> Result<Json<serde_json::Value>, ApiError> {
    task_list(&ctl, q.job, None).await
}

/// `{"tasks": [record + "node", ...]}` for `Store::task_records`.
async fn task_list(
    ctl: &Controller,
    job: Option<JobId>,
    open_on: Option<&str>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let rows = ctl.store.task_records(job, open_on).await.map_err(|e| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot read task records: {e}"),
        )
    })?;
    let tasks: Vec<serde_json::Value> = rows
        .into_iter()
        .map(|(node, r)| {
            let mut v = serde_json::to_value(&r).unwrap_or_default();
            v["node"] = node.into();
            v
        })
        .collect();
    Ok(Json(serde_json::json!({ "tasks": tasks })))
}
