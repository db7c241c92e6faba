//! The node API the controller calls: launch and signal jobs.

use std::sync::Arc;

use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use gsched_core::job::JobId;
use gsched_core::wire::{keys_match, ErrorBody, LaunchRequest, SignalRequest, CLUSTER_KEY_HEADER};

use crate::launcher::{LaunchError, Launcher};

pub struct NodeApi {
    pub launcher: Arc<Launcher>,
    pub key: String,
}

type St = State<Arc<NodeApi>>;

fn err(status: StatusCode, msg: impl Into<String>) -> Response {
    (status, Json(ErrorBody { error: msg.into() })).into_response()
}

fn authorized(api: &NodeApi, h: &HeaderMap) -> bool {
    let given = h
        .get(CLUSTER_KEY_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    keys_match(given, &api.key)
}

fn unauthorized() -> Response {
    err(StatusCode::UNAUTHORIZED, "missing or wrong cluster key")
}

fn launch_error(e: LaunchError) -> Response {
    let status = match e {
        LaunchError::Refused(_) => StatusCode::FORBIDDEN,
        LaunchError::AlreadyRunning(_) => StatusCode::CONFLICT,
        LaunchError::NotRunning(_) => StatusCode::NOT_FOUND,
        LaunchError::Io(_) => StatusCode::INTERNAL_SERVER_ERROR,
    };
    err(status, e.to_string())
}

pub fn router(api: Arc<NodeApi>) -> Router {
    Router::new()
        .route("/v1/jobs", post(launch).get(list))
        .route("/v1/jobs/{id}/signal", post(signal))
        .with_state(api)
}

async fn launch(
    State(api): St,
    h: HeaderMap,
    body: Result<Json<LaunchRequest>, JsonRejection>,
) -> Response {
    if !authorized(&api, &h) {
        return unauthorized();
    }
    let Json(req) = match body {
        Ok(b) => b,
        Err(e) => {
            return err(
                StatusCode::BAD_REQUEST,
                format!("invalid launch request: {}", e.body_text()),
            )
        }
    };
    match api.launcher.launch(&req) {
        Ok(()) => StatusCode::CREATED.into_response(),
        Err(e) => launch_error(e),
    }
}

async fn signal(
    State(api): St,
    h: HeaderMap,
    Path(id): Path<JobId>,
    body: Result<Json<SignalRequest>, JsonRejection>,
) -> Response {
    if !authorized(&api, &h) {
        return unauthorized();
    }
    let Json(req) = match body {
        Ok(b) => b,
        Err(e) => {
            return err(
                StatusCode::BAD_REQUEST,
                format!("invalid signal request: {}", e.body_text()),
            )
        }
    };
    match api.launcher.signal(id, &req) {
        Ok(()) => StatusCode::OK.into_response(),
        Err(e) => launch_error(e),
    }
}

async fn list(State(api): St, h: HeaderMap) -> Response {
    if !authorized(&api, &h) {
        return unauthorized();
    }
    Json(serde_json::json!({ "running": api.launcher.running_ids() })).into_response()
}
