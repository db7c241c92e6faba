//! The node API the controller calls: launch, signal and suspend jobs.

pub mod steps;

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use gsched_core::job::JobId;
use gsched_core::wire::{DrainRequest, LaunchRequest, SignalRequest, SuspendRequest};
use gsched_daemon::http::{ApiError, PeerBody};

use crate::launcher::{LaunchError, Launcher};

pub struct NodeApi {
    pub launcher: Arc<Launcher>,
    /// Where drain sets go (none without a probe server).
    pub probe: Option<Arc<crate::probe::ProbeServer>>,
    /// Carries out the controller's MIG re-partitions.
    pub reshaper: Arc<crate::reshape::Reshaper>,
    pub lease: Arc<crate::fence::NodeLease>,
    pub key: String,
    /// When this gnoded started (unix seconds): a step credential issued
    /// before is not taken (a sealed request captured while gnoded was
    /// away, replayed after it restarted).
    pub started_at: i64,
}

type St = State<Arc<NodeApi>>;

impl From<LaunchError> for ApiError {
    fn from(e: LaunchError) -> ApiError {
        let status = match e {
            LaunchError::Refused(_) => StatusCode::FORBIDDEN,
            LaunchError::AlreadyRunning(_) => StatusCode::CONFLICT,
            LaunchError::NotRunning(_) => StatusCode::NOT_FOUND,
            LaunchError::NoLease(_) => StatusCode::SERVICE_UNAVAILABLE,
            LaunchError::Io(_) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError::new(status, e.to_string())
    }
}

pub fn router(api: Arc<NodeApi>) -> Router {
    // What only the controller may ask: each request sealed with the
    // cluster key, each answer sealed back (`gsched_daemon::peer`).
    let controller_only = Router::new()
        .route("/v1/jobs", post(launch).get(list))
        .route("/v1/jobs/{id}/signal", post(signal))
        .route("/v1/jobs/{id}/suspend", post(suspend))
        .route("/v1/drain", post(drain))
        .route("/v1/reshape", post(reshape))
        // Inside the seal: the epoch is read from the sealed path.
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&api.lease),
            |axum::extract::State(lease): axum::extract::State<Arc<crate::fence::NodeLease>>,
             req: axum::extract::Request,
             next: axum::middleware::Next| async move {
                crate::epoch::check(&lease.leader, req, next).await
            },
        ))
        .layer(axum::middleware::from_fn_with_state(
            gsched_daemon::peer::PeerAuth::new(&api.key, gsched_daemon::peer::Direction::ToNode),
            gsched_daemon::peer::sealed,
        ));
    Router::new()
        .merge(controller_only)
        // Authenticated by the step credential, not the cluster key.
        .route("/v1/steps", post(steps::run))
        .with_state(api)
}

async fn launch(
    State(api): St,
    PeerBody(req): PeerBody<LaunchRequest>,
) -> Result<StatusCode, ApiError> {
    if !api.lease.accepts_launches() {
        // Fenced (or not yet registered): the controller may have given
        // this node up, so nothing new starts until it answers again.
        return Err(LaunchError::NoLease(
            "this node holds no lease: it has not reached the controller within its fence \
             timeout, or has not registered yet"
                .into(),
        )
        .into());
    }
    api.launcher.launch(&req)?;
    Ok(StatusCode::CREATED)
}

async fn signal(
    State(api): St,
    Path(id): Path<JobId>,
    PeerBody(req): PeerBody<SignalRequest>,
) -> Result<StatusCode, ApiError> {
    api.launcher.signal(id, &req)?;
    Ok(StatusCode::OK)
}

/// Stops or continues a job (`scontrol suspend|resume`, preemption).
async fn suspend(
    State(api): St,
    Path(id): Path<JobId>,
    PeerBody(req): PeerBody<SuspendRequest>,
) -> Result<StatusCode, ApiError> {
    // Stopping waits for the job's processes to stop: off the async threads.
    let launcher = Arc::clone(&api.launcher);
    tokio::task::spawn_blocking(move || launcher.suspend(id, &req))
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))??;
    Ok(StatusCode::OK)
}

async fn list(State(api): St) -> Result<Json<serde_json::Value>, ApiError> {
    Ok(Json(
        serde_json::json!({ "running": api.launcher.running_ids() }),
    ))
}

/// The controller's drain set: no new shared tasks on these instances.
async fn drain(
    State(api): St,
    PeerBody(req): PeerBody<DrainRequest>,
) -> Result<StatusCode, ApiError> {
    if let Some(p) = &api.probe {
        if !p.set_drained(&req.instances, &req.open_to, req.seq) {
            tracing::debug!(seq = req.seq, "an older drain set arrived late; ignored");
        }
    }
    Ok(StatusCode::NO_CONTENT)
}

/// The controller's re-partition of one GPU: accepted (carried out in the
/// background, reported when done) or refused with the reason.
async fn reshape(
    State(api): St,
    PeerBody(req): PeerBody<gsched_core::wire::ReshapeRequest>,
) -> Result<StatusCode, ApiError> {
    use crate::reshape::ReshapeError;
    match api.reshaper.accept(req) {
        Ok(()) => Ok(StatusCode::ACCEPTED),
        Err(e @ ReshapeError::Busy(_)) => Err(ApiError::new(StatusCode::CONFLICT, e.to_string())),
        Err(e) => Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            e.to_string(),
        )),
    }
}
