//! The daemon-to-daemon endpoints (`/internal/v1/...`): node registration,
//! heartbeats, task reports and job endings. One layer opens each request
//! sealed with the cluster key and seals the answer
//! (`gsched_daemon::peer`); no handler sees an unproven request.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use gsched_core::probe::TaskReport;
use gsched_core::wire::{
    Heartbeat, HeartbeatReply, JobEndReport, NodeRegistration, OpenTasks, RegistrationReply,
};
use gsched_daemon::http::{ApiError, PeerBody};

use super::Ctl;

/// The internal routes, behind the seal layer.
pub(super) fn routes(
    ctl: std::sync::Arc<crate::controller::Controller>,
) -> axum::Router<std::sync::Arc<crate::controller::Controller>> {
    use axum::routing::{get, post};
    axum::Router::new()
        .route("/internal/v1/tasks", post(tasks_reported))
        .route("/internal/v1/nodes/register", post(register))
        .route("/internal/v1/nodes/reshaped", post(reshaped))
        .route("/internal/v1/nodes/{name}/heartbeat", post(heartbeat))
        .route("/internal/v1/nodes/{name}/tasks", get(node_open_tasks))
        .route("/internal/v1/jobs/ended", post(jobs_ended))
        .layer(axum::middleware::from_fn_with_state(
            std::sync::Arc::clone(&ctl.peer_auth),
            gsched_daemon::peer::sealed,
        ))
}

pub(super) async fn register(
    State(ctl): Ctl,
    PeerBody(reg): PeerBody<NodeRegistration>,
) -> Result<Json<RegistrationReply>, ApiError> {
    if reg.name.is_empty()
        || reg.name.len() > 255
        || reg
            .name
            .chars()
            .any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(ApiError(
            StatusCode::BAD_REQUEST,
            format!("invalid node name '{}'", reg.name),
        ));
    }
    Ok(Json(ctl.register(reg).await?))
}

pub(super) async fn heartbeat(
    State(ctl): Ctl,
    Path(name): Path<String>,
    PeerBody(hb): PeerBody<Heartbeat>,
) -> Result<Json<HeartbeatReply>, ApiError> {
    let (known, effects) = ctl.heartbeat(&name, &hb);
    if !effects.is_empty() {
        let ctl = std::sync::Arc::clone(&ctl);
        tokio::spawn(async move {
            if let Err(e) = ctl.execute(effects).await {
                tracing::warn!(error = %e, "could not carry out what a heartbeat asked (stopping runs the controller does not own, recording reasons)");
            }
        });
    }
    Ok(Json(HeartbeatReply { known }))
}

/// A node's report of a reshape it carried out.
pub(super) async fn reshaped(
    State(ctl): Ctl,
    PeerBody(report): PeerBody<gsched_core::wire::ReshapeReport>,
) -> Result<StatusCode, ApiError> {
    ctl.reshaped(report).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub(super) async fn tasks_reported(
    State(ctl): Ctl,
    PeerBody(report): PeerBody<TaskReport>,
) -> Result<StatusCode, ApiError> {
    ctl.tasks_reported(report).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The reservations a node holds open (for the node after its restart).
pub(super) async fn node_open_tasks(
    State(ctl): Ctl,
    Path(name): Path<String>,
) -> Result<Json<OpenTasks>, ApiError> {
    let rows = ctl
        .store
        .task_records(None, Some(&name))
        .await
        .map_err(|e| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("cannot read task records: {e}"),
            )
        })?;
    Ok(Json(OpenTasks {
        tasks: rows.into_iter().map(|(_, r)| r).collect(),
    }))
}

pub(super) async fn jobs_ended(
    State(ctl): Ctl,
    PeerBody(report): PeerBody<JobEndReport>,
) -> Result<StatusCode, ApiError> {
    ctl.jobs_ended(report).await?;
    Ok(StatusCode::NO_CONTENT)
}
