//! The daemon-to-daemon endpoints (`/internal/v1/...`): node registration,
//! heartbeats, task reports and job endings, each checked against the
//! cluster key.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use gsched_core::probe::TaskReport;
use gsched_core::wire::{
    Heartbeat, HeartbeatReply, JobEndReport, NodeRegistration, RegistrationReply,
};
use gsched_daemon::http::{check_cluster_key, ApiError, PeerBody};

use super::Ctl;

pub(super) async fn register(
    State(ctl): Ctl,
    headers: HeaderMap,
    PeerBody(reg): PeerBody<NodeRegistration>,
) -> Result<Json<RegistrationReply>, ApiError> {
    check_cluster_key(&ctl.key, &headers)?;
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
    headers: HeaderMap,
    Path(name): Path<String>,
    PeerBody(hb): PeerBody<Heartbeat>,
) -> Result<Json<HeartbeatReply>, ApiError> {
    check_cluster_key(&ctl.key, &headers)?;
    let (known, effects) = ctl.heartbeat(&name, &hb);
    if !effects.is_empty() {
        let ctl = std::sync::Arc::clone(&ctl);
        tokio::spawn(async move {
            if let Err(e) = ctl.execute(effects).await {
                tracing::warn!(error = %e, "could not stop runs the controller does not own");
            }
        });
    }
    Ok(Json(HeartbeatReply { known }))
}

/// A node's report of a reshape it carried out.
pub(super) async fn reshaped(
    State(ctl): Ctl,
    headers: HeaderMap,
    PeerBody(report): PeerBody<gsched_core::wire::ReshapeReport>,
) -> Result<StatusCode, ApiError> {
    check_cluster_key(&ctl.key, &headers)?;
    ctl.reshaped(report).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub(super) async fn tasks_reported(
    State(ctl): Ctl,
    headers: HeaderMap,
    PeerBody(report): PeerBody<TaskReport>,
) -> Result<StatusCode, ApiError> {
    check_cluster_key(&ctl.key, &headers)?;
    ctl.tasks_reported(report).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The reservations a node holds open (for the node after its restart).
pub(super) async fn node_open_tasks(
    State(ctl): Ctl,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    check_cluster_key(&ctl.key, &headers)?;
    super::task_list(&ctl, None, Some(&name)).await
}

pub(super) async fn jobs_ended(
    State(ctl): Ctl,
    headers: HeaderMap,
    PeerBody(report): PeerBody<JobEndReport>,
) -> Result<StatusCode, ApiError> {
    check_cluster_key(&ctl.key, &headers)?;
    ctl.jobs_ended(report).await?;
    Ok(StatusCode::NO_CONTENT)
}
