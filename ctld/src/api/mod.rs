//! The REST API: `/api/v1/...` for clients (authenticated in `access`),
//! `/internal/v1/...` for gnoded (`internal`), and the routes of the
//! slurmrestd endpoints, the dashboard, metrics and the OpenAPI document.

mod access;
mod accounts;
#[cfg(test)]
mod conformance;
mod doc;
mod internal;
mod jobs;
mod listing;
mod nodes;
mod reconfigure;
pub mod slurmrest;
pub mod standby;

use std::sync::{Arc, OnceLock};

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json, Router};
use gsched_core::cluster::ClusterError;
use gsched_daemon::http::ApiError;
use serde::Serialize;
use utoipa::{OpenApi, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::auth::Caller;
use crate::controller::{Controller, CtlError};

pub use access::{check_owner_of, socket_app, tcp_app, PeerCred};
pub use jobs::IDEMPOTENCY_HEADER;

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
            CtlError::Version(_) => StatusCode::CONFLICT,
            CtlError::Followed(_) => StatusCode::SERVICE_UNAVAILABLE,
            CtlError::Cluster(ClusterError::DependencyOnUnknownJob(_)) => StatusCode::BAD_REQUEST,
            CtlError::Cluster(_) => StatusCode::CONFLICT,
            CtlError::Store(_) => StatusCode::SERVICE_UNAVAILABLE,
        };
        ApiError(status, e.to_string())
    }
}

/// gsched's own API and the slurmrestd endpoints, each route registered
/// with its `#[utoipa::path]` so that the OpenAPI document lists exactly
/// what is served.
fn documented() -> OpenApiRouter<Arc<Controller>> {
    OpenApiRouter::with_openapi(doc::ApiDoc::openapi())
        .routes(routes!(healthz))
        .routes(routes!(metrics))
        .routes(routes!(openapi))
        .routes(routes!(access::issue_token))
        .routes(routes!(access::whoami))
        .routes(routes!(jobs::submit, listing::list_jobs))
        .routes(routes!(jobs::get_job, jobs::cancel_job, jobs::update_job))
        .routes(routes!(jobs::job_script))
        .routes(routes!(jobs::job_events))
        .routes(routes!(jobs::requeue_job))
        .routes(routes!(jobs::hold_job))
        .routes(routes!(jobs::suspend_job))
        .routes(routes!(jobs::resume_job))
        .routes(routes!(jobs::begin_step))
        .routes(routes!(jobs::end_step))
        .routes(routes!(jobs::release_job))
        .routes(routes!(accounts::list, accounts::change))
        .routes(routes!(accounts::change_qos))
        .routes(routes!(nodes::list_nodes))
        .routes(routes!(nodes::set_node_state))
        .routes(routes!(nodes::node_mig, nodes::change_node_mig))
        .routes(routes!(nodes::list_instances))
        .routes(routes!(nodes::utilization))
        .routes(routes!(nodes::list_tasks))
        .routes(routes!(reconfigure::reconfigure))
        .merge(slurmrest::routes())
}

/// The OpenAPI document of the public API (`/api/v1` and `/slurm`),
/// generated from the routes and the types they take and answer with.
pub fn document() -> serde_json::Value {
    let doc = documented().split_for_parts().1;
    let mut doc = serde_json::to_value(doc).expect("an OpenAPI document serializes");
    doc::tidy(&mut doc);
    doc
}

pub(crate) fn router(ctl: Arc<Controller>) -> Router {
    let (api, _) = documented().split_for_parts();
    api.merge(internal::routes(Arc::clone(&ctl)))
        .merge(slurmrest::slash_routes())
        .merge(crate::dashboard::routes())
        .fallback(|| async {
            ApiError(
                StatusCode::NOT_FOUND,
                "no such endpoint; see docs/api.md".into(),
            )
        })
        .with_state(ctl)
}

/// What the controller is and holds, for probes and the dashboard.
#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    /// Always `ok` when the controller answers.
    pub status: String,
    pub pending: usize,
    pub running: usize,
    pub nodes_up: usize,
    pub launch_policy: String,
    pub cluster_name: String,
    /// The default partition.
    pub partition: String,
    pub partitions: Vec<String>,
    /// How the TCP API authenticates: `jwt`.
    pub auth: String,
    /// The local socket, served without tokens.
    pub socket: String,
    /// Seconds a finished job stays in memory.
    pub min_job_age: u64,
    /// Largest array index plus one (MaxArraySize).
    pub max_array_size: u32,
    /// The priority policy's name (`basic`, `multifactor`).
    pub priority_type: String,
    /// The weights `multifactor` gives each factor (sprio -w).
    pub priority_weights: gsched_core::priority::PriorityConfig,
    /// The controller's gsched release (`0.2.0`).
    pub release: String,
    /// The protocol it speaks.
    pub protocol: u32,
    /// `leader` (a standby answers 503 with `standby`).
    pub role: String,
    /// The leadership epoch it leads in.
    pub epoch: i64,
}

/// The controller's health; no token needed.
#[utoipa::path(get, path = "/healthz", tag = "meta", security(()),
    responses((status = 200, description = "The controller answers", body = Health)))]
async fn healthz(State(ctl): Ctl) -> Json<Health> {
    let c = ctl.lock();
    Json(Health {
        status: "ok".into(),
        pending: c.pending_count(),
        running: c.running_count(),
        nodes_up: c.nodes().filter(|n| n.up).count(),
        launch_policy: c.policy_name().to_string(),
        cluster_name: ctl.config.cluster_name.clone(),
        partition: ctl.config.partition.clone(),
        partitions: ctl.config.all_partitions(),
        auth: "jwt".into(),
        socket: ctl.socket.display().to_string(),
        min_job_age: ctl.config.min_job_age,
        max_array_size: ctl.config.max_array_size,
        priority_type: ctl.config.priority_type.clone(),
        priority_weights: ctl.config.priority_config(),
        release: gsched_core::version::RELEASE.into(),
        protocol: gsched_core::version::PROTOCOL,
        role: "leader".into(),
        epoch: ctl.epoch(),
    })
}

/// This document; no token needed.
#[utoipa::path(get, path = "/openapi.json", tag = "meta", security(()),
    responses((status = 200, description = "The OpenAPI 3.1 document", content_type = "application/json")))]
async fn openapi() -> Response {
    static TEXT: OnceLock<String> = OnceLock::new();
    let text = TEXT.get_or_init(|| {
        serde_json::to_string_pretty(&document()).expect("a JSON value serializes")
    });
    ([(header::CONTENT_TYPE, "application/json")], text.as_str()).into_response()
}

/// Prometheus metrics; no token needed.
#[utoipa::path(get, path = "/metrics", tag = "meta", security(()),
    responses((status = 200, description = "OpenMetrics text", content_type = "application/openmetrics-text")))]
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

pub(crate) fn unknown_job(id: &str) -> ApiError {
    ApiError(
        StatusCode::NOT_FOUND,
        format!("Invalid job id specified: {id}"),
    )
}
