//! `/api/v1/jobs/...`: submit, show, change, cancel, hold, requeue,
//! suspend a job, read its script and history, and begin or end its steps.
//! Each handler's `#[utoipa::path]` is its entry in the OpenAPI document.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use gsched_core::cluster::JobUpdate;
use gsched_core::job::{JobId, JobSpec};
use gsched_core::outcome::{parse_signal, SignalScope};
use gsched_core::steps::{LayoutRequest, StepNodeAnswer};
use gsched_core::wire::{ErrorBody, JobInfo, Submitted};
use gsched_daemon::http::{ApiError, Body};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::{admin_only, check_owner_of, unknown_job, Ctl, Who};
use crate::auth::Caller;
use crate::controller::{unix_now, Controller};
use crate::store::JobEvent;

/// The header a client may send to make a submission safe to retry.
pub const IDEMPOTENCY_HEADER: &str = "idempotency-key";

/// A job's state after an operation on it.
#[derive(Debug, Serialize, ToSchema)]
pub struct JobStateReply {
    pub job_id: JobId,
    /// Slurm's state name (`CANCELLED`, `PENDING`, `SUSPENDED`, ...).
    pub job_state: String,
}

/// A job's batch script and arguments.
#[derive(Debug, Serialize, ToSchema)]
pub struct JobScript {
    pub job_id: JobId,
    pub script: String,
    pub argv: Vec<String>,
}

/// A job's history from the event log.
#[derive(Debug, Serialize, ToSchema)]
pub struct JobEvents {
    pub job_id: JobId,
    pub events: Vec<JobEvent>,
}

/// Whether a job is held now.
#[derive(Debug, Serialize, ToSchema)]
pub struct HeldReply {
    pub job_id: JobId,
    pub held: bool,
}

/// A step begun; `nodes` where `srun` asked for a layout.
#[derive(Debug, Serialize, ToSchema)]
pub struct StepBegun {
    pub job_id: JobId,
    pub step_id: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nodes: Option<Vec<StepNodeAnswer>>,
}

/// A step ended.
#[derive(Debug, Serialize, ToSchema)]
pub struct StepEnded {
    pub job_id: JobId,
    pub step_id: u32,
}

/// `POST /api/v1/jobs/{id}/steps`: `srun` begins a step.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StepBegin {
    name: String,
    #[serde(default = "one")]
    #[schema(default = 1)]
    ntasks: u32,
    /// Asked by `srun` in a job on several nodes: where the step's tasks
    /// run, answered with each node's URL and step credential.
    #[serde(default)]
    layout: Option<LayoutRequest>,
}

fn one() -> u32 {
    1
}

/// `POST /api/v1/jobs/{id}/steps/{step}/end`: a step's outcome.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StepEnd {
    exit_code: i32,
    #[serde(default)]
    signal: Option<i32>,
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct CancelQuery {
    /// A signal name or number (`USR1`, `SIGTERM`, `9`); without it the
    /// job is cancelled.
    signal: Option<String>,
    /// Which processes the signal goes to: `full` (every one, the
    /// default), `batch` (the batch shell and its children) or `steps`
    /// (the `srun` steps; scancel's default).
    scope: Option<SignalScope>,
}

/// Submits a job (`sbatch`, `gsub`). An `Idempotency-Key` header (or the
/// spec's `idempotency_key`) makes a retried submission answer with the
/// first one's id.
#[utoipa::path(post, path = "/api/v1/jobs", tag = "jobs",
    request_body = JobSpec,
    params(("Idempotency-Key" = Option<String>, Header, description = "Makes a retried submission safe")),
    responses(
        (status = 201, description = "Accepted", body = Submitted),
        (status = 400, description = "Bad request: the error names the problem", body = ErrorBody),
        (status = 403, description = "A right the caller lacks (another user's job, negative nice)", body = ErrorBody),
        (status = 413, description = "Script and environment over the size limit", body = ErrorBody),
        (status = 503, description = "The queue is full, or the store is unavailable", body = ErrorBody)))]
pub(super) async fn submit(
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
fn owned_job(ctl: &Controller, caller: &Caller, id: &str) -> Result<JobId, ApiError> {
    let jid: JobId = id.parse().map_err(|_| unknown_job(id))?;
    check_owner_of(ctl, caller, jid)?;
    Ok(jid)
}

/// One job, with its priority and expected start.
#[utoipa::path(get, path = "/api/v1/jobs/{id}", tag = "jobs",
    params(("id" = u64, Path, description = "Job id")),
    responses(
        (status = 200, description = "The job", body = JobInfo),
        (status = 404, description = "Unknown job", body = ErrorBody)))]
pub(super) async fn get_job(
    State(ctl): Ctl,
    Path(id): Path<String>,
) -> Result<Json<JobInfo>, ApiError> {
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
#[utoipa::path(get, path = "/api/v1/jobs/{id}/script", tag = "jobs",
    params(("id" = u64, Path, description = "Job id")),
    responses(
        (status = 200, description = "The script", body = JobScript),
        (status = 403, description = "Not the job's owner or an administrator", body = ErrorBody),
        (status = 404, description = "Unknown job", body = ErrorBody),
        (status = 503, description = "The store cannot be read", body = ErrorBody)))]
pub(super) async fn job_script(
    State(ctl): Ctl,
    Extension(caller): Who,
    Path(id): Path<String>,
) -> Result<Json<JobScript>, ApiError> {
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
    Ok(Json(JobScript {
        job_id: jid,
        script: text.script,
        argv,
    }))
}

/// The job's history from the event log (submitted, started, ended, ...),
/// also for a job that has left the controller's memory.
#[utoipa::path(get, path = "/api/v1/jobs/{id}/events", tag = "jobs",
    params(("id" = u64, Path, description = "Job id")),
    responses(
        (status = 200, description = "The job's events, oldest first", body = JobEvents),
        (status = 404, description = "Unknown job", body = ErrorBody),
        (status = 500, description = "The event log cannot be read", body = ErrorBody)))]
pub(super) async fn job_events(
    State(ctl): Ctl,
    Path(id): Path<String>,
) -> Result<Json<JobEvents>, ApiError> {
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
    Ok(Json(JobEvents {
        job_id: jid,
        events,
    }))
}

/// Cancels a job (`scancel`), or sends its processes a signal.
#[utoipa::path(delete, path = "/api/v1/jobs/{id}", tag = "jobs",
    params(("id" = u64, Path, description = "Job id"), CancelQuery),
    responses(
        (status = 200, description = "The job's state now", body = JobStateReply),
        (status = 400, description = "Bad request: the error names the problem", body = ErrorBody),
        (status = 403, description = "Not the job's owner or an administrator", body = ErrorBody),
        (status = 404, description = "Unknown job", body = ErrorBody),
        (status = 409, description = "A signal for a job that is not running, or a job already ended", body = ErrorBody)))]
pub(super) async fn cancel_job(
    State(ctl): Ctl,
    Extension(caller): Who,
    Path(id): Path<String>,
    Query(q): Query<CancelQuery>,
) -> Result<Json<JobStateReply>, ApiError> {
    let jid = owned_job(&ctl, &caller, &id)?;
    let signal = match &q.signal {
        Some(s) => Some((
            parse_signal(s).map_err(|e| ApiError(StatusCode::BAD_REQUEST, e.to_string()))?,
            q.scope.unwrap_or_default(),
        )),
        None => None,
    };
    ctl.cancel(jid, signal, caller.uid).await?;
    let c = ctl.lock();
    let state = c.job(jid).map(|j| j.state.as_str()).unwrap_or("UNKNOWN");
    Ok(Json(JobStateReply {
        job_id: jid,
        job_state: state.to_string(),
    }))
}

/// Puts a running job back in the queue (`scontrol requeue`).
#[utoipa::path(post, path = "/api/v1/jobs/{id}/requeue", tag = "jobs",
    params(("id" = u64, Path, description = "Job id")),
    responses(
        (status = 200, description = "Requeued", body = JobStateReply),
        (status = 403, description = "Not the job's owner or an administrator", body = ErrorBody),
        (status = 404, description = "Unknown job", body = ErrorBody),
        (status = 409, description = "The job is not running", body = ErrorBody)))]
pub(super) async fn requeue_job(
    State(ctl): Ctl,
    Extension(caller): Who,
    Path(id): Path<String>,
) -> Result<Json<JobStateReply>, ApiError> {
    let jid = owned_job(&ctl, &caller, &id)?;
    ctl.requeue(jid).await?;
    Ok(Json(JobStateReply {
        job_id: jid,
        job_state: "PENDING".into(),
    }))
}

/// Stops a running job's processes (`scontrol suspend`; administrators).
#[utoipa::path(post, path = "/api/v1/jobs/{id}/suspend", tag = "jobs",
    params(("id" = u64, Path, description = "Job id")),
    responses(
        (status = 200, description = "Suspended", body = JobStateReply),
        (status = 403, description = "Not an administrator", body = ErrorBody),
        (status = 404, description = "Unknown job", body = ErrorBody),
        (status = 409, description = "The job is not running", body = ErrorBody)))]
pub(super) async fn suspend_job(
    State(ctl): Ctl,
    Extension(caller): Who,
    Path(id): Path<String>,
) -> Result<Json<JobStateReply>, ApiError> {
    suspend_or_resume(&ctl, &caller, &id, true).await
}

/// Continues a suspended job (`scontrol resume`; administrators).
#[utoipa::path(post, path = "/api/v1/jobs/{id}/resume", tag = "jobs",
    params(("id" = u64, Path, description = "Job id")),
    responses(
        (status = 200, description = "Running again", body = JobStateReply),
        (status = 403, description = "Not an administrator", body = ErrorBody),
        (status = 404, description = "Unknown job", body = ErrorBody),
        (status = 409, description = "The job is not suspended", body = ErrorBody)))]
pub(super) async fn resume_job(
    State(ctl): Ctl,
    Extension(caller): Who,
    Path(id): Path<String>,
) -> Result<Json<JobStateReply>, ApiError> {
    suspend_or_resume(&ctl, &caller, &id, false).await
}

/// `scontrol suspend|resume`: an administrator's only, as in Slurm (a
/// user who could stop jobs and start them again could run past others).
async fn suspend_or_resume(
    ctl: &Arc<Controller>,
    caller: &Caller,
    id: &str,
    suspend: bool,
) -> Result<Json<JobStateReply>, ApiError> {
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
    Ok(Json(JobStateReply {
        job_id: jid,
        job_state: state.to_string(),
    }))
}

/// `srun` begins a step inside a running job.
#[utoipa::path(post, path = "/api/v1/jobs/{id}/steps", tag = "steps",
    params(("id" = u64, Path, description = "Job id")),
    request_body = StepBegin,
    responses(
        (status = 200, description = "The step's number, and where its tasks run", body = StepBegun),
        (status = 400, description = "A layout the allocation cannot hold", body = ErrorBody),
        (status = 403, description = "Not the job's owner or an administrator", body = ErrorBody),
        (status = 404, description = "Unknown job", body = ErrorBody),
        (status = 409, description = "The job is not running", body = ErrorBody)))]
pub(super) async fn begin_step(
    State(ctl): Ctl,
    Extension(caller): Who,
    Path(id): Path<String>,
    Body(b): Body<StepBegin>,
) -> Result<Json<StepBegun>, ApiError> {
    let jid = owned_job(&ctl, &caller, &id)?;
    let Some(layout) = b.layout else {
        let step = ctl.begin_step(jid, &b.name, b.ntasks).await?;
        return Ok(Json(StepBegun {
            job_id: jid,
            step_id: step,
            nodes: None,
        }));
    };
    let (step, nodes) = ctl.begin_wide_step(jid, &b.name, &layout).await?;
    Ok(Json(StepBegun {
        job_id: jid,
        step_id: step,
        nodes: Some(nodes),
    }))
}

/// A step's tasks ended.
#[utoipa::path(post, path = "/api/v1/jobs/{id}/steps/{step}/end", tag = "steps",
    params(("id" = u64, Path, description = "Job id"), ("step" = u32, Path, description = "Step number")),
    request_body = StepEnd,
    responses(
        (status = 200, description = "Recorded", body = StepEnded),
        (status = 400, description = "Bad request: the error names the problem", body = ErrorBody),
        (status = 403, description = "Not the job's owner or an administrator", body = ErrorBody),
        (status = 404, description = "Unknown job or step", body = ErrorBody),
        (status = 409, description = "The job is not running", body = ErrorBody)))]
pub(super) async fn end_step(
    State(ctl): Ctl,
    Extension(caller): Who,
    Path((id, step)): Path<(String, u32)>,
    Body(b): Body<StepEnd>,
) -> Result<Json<StepEnded>, ApiError> {
    let jid = owned_job(&ctl, &caller, &id)?;
    ctl.end_step(jid, step, b.exit_code, b.signal).await?;
    Ok(Json(StepEnded {
        job_id: jid,
        step_id: step,
    }))
}

/// `scontrol update JobId=...`: changes a pending job, for its owner (who
/// may only lower its time limit) or an administrator.
#[utoipa::path(patch, path = "/api/v1/jobs/{id}", tag = "jobs",
    params(("id" = u64, Path, description = "Job id")),
    request_body = JobUpdate,
    responses(
        (status = 200, description = "The job as changed", body = JobInfo),
        (status = 400, description = "Bad request: the error names the problem", body = ErrorBody),
        (status = 403, description = "Not the job's owner or an administrator", body = ErrorBody),
        (status = 404, description = "Unknown job", body = ErrorBody),
        (status = 409, description = "The job is not pending", body = ErrorBody)))]
pub(super) async fn update_job(
    State(ctl): Ctl,
    Extension(caller): Who,
    Path(id): Path<String>,
    Body(update): Body<JobUpdate>,
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

/// Holds a pending job (`scontrol hold`).
#[utoipa::path(post, path = "/api/v1/jobs/{id}/hold", tag = "jobs",
    params(("id" = u64, Path, description = "Job id")),
    responses(
        (status = 200, description = "Held", body = HeldReply),
        (status = 403, description = "Not the job's owner or an administrator", body = ErrorBody),
        (status = 404, description = "Unknown job", body = ErrorBody),
        (status = 409, description = "The job is not pending", body = ErrorBody)))]
pub(super) async fn hold_job(
    State(ctl): Ctl,
    Extension(caller): Who,
    Path(id): Path<String>,
) -> Result<Json<HeldReply>, ApiError> {
    set_held(&ctl, &caller, &id, true).await
}

/// Releases a held job (`scontrol release`).
#[utoipa::path(post, path = "/api/v1/jobs/{id}/release", tag = "jobs",
    params(("id" = u64, Path, description = "Job id")),
    responses(
        (status = 200, description = "Released", body = HeldReply),
        (status = 403, description = "Not the job's owner or an administrator", body = ErrorBody),
        (status = 404, description = "Unknown job", body = ErrorBody),
        (status = 409, description = "The job is not pending", body = ErrorBody)))]
pub(super) async fn release_job(
    State(ctl): Ctl,
    Extension(caller): Who,
    Path(id): Path<String>,
) -> Result<Json<HeldReply>, ApiError> {
    set_held(&ctl, &caller, &id, false).await
}

async fn set_held(
    ctl: &Arc<Controller>,
    caller: &Caller,
    id: &str,
    held: bool,
) -> Result<Json<HeldReply>, ApiError> {
    let jid = owned_job(ctl, caller, id)?;
    ctl.set_held(jid, held).await?;
    Ok(Json(HeldReply { job_id: jid, held }))
}
