//! What a controller serves before it leads: the same listeners as the
//! leader, switched over to the full API once it wins the lease. A
//! standby answers every request with 503 naming the leader (`leader` in
//! the JSON body and the `X-Gsched-Leader` header), which commands and
//! nodes given several controllers use to go there; `/healthz` and
//! `/metrics` say its role and the epoch.

use std::sync::{Arc, OnceLock};

use axum::extract::Request;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use tower::ServiceExt;

use crate::leader::Role;

/// The header naming the leader in a standby's answers.
pub const LEADER_HEADER: &str = "x-gsched-leader";

/// A router that serves `slot`'s API once it is set, and a standby's
/// answers until then.
pub fn switch(slot: Arc<OnceLock<Router>>, role: Arc<Role>) -> Router {
    let standby = routes(role);
    Router::new().fallback(move |req: Request| {
        let app = slot.get().cloned().unwrap_or_else(|| standby.clone());
        async move {
            match app.oneshot(req).await {
                Ok(response) => response,
                Err(never) => match never {},
            }
        }
    })
}

fn routes(role: Arc<Role>) -> Router {
    let health = Arc::clone(&role);
    let metrics = Arc::clone(&role);
    Router::new()
        .route(
            "/healthz",
            get(move || async move { standby_health(&health) }),
        )
        .route(
            "/metrics",
            get(move || async move { standby_metrics(&metrics) }),
        )
        .fallback(move || async move { refused(&role) })
}

/// The fields of `/healthz` a standby has.
#[derive(serde::Serialize)]
struct StandbyHealth {
    status: &'static str,
    role: &'static str,
    leader: Option<String>,
    epoch: i64,
    release: &'static str,
    protocol: u32,
}

fn standby_health(role: &Role) -> Response {
    let body = StandbyHealth {
        status: "standby",
        role: "standby",
        leader: role.leader_address(),
        epoch: role.epoch(),
        release: gsched_core::version::RELEASE,
        protocol: gsched_core::version::PROTOCOL,
    };
    with_leader(
        role,
        (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response(),
    )
}

fn standby_metrics(role: &Role) -> Response {
    let text = format!(
        "# HELP gsched_controller_leader Whether this controller leads (1) or stands by (0).\n\
         # TYPE gsched_controller_leader gauge\n\
         gsched_controller_leader 0\n\
         # HELP gsched_controller_epoch The leadership epoch this controller leads in, or last saw.\n\
         # TYPE gsched_controller_epoch gauge\n\
         gsched_controller_epoch {}\n\
         # EOF\n",
        role.epoch()
    );
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

/// The standby's answer to everything else.
fn refused(role: &Role) -> Response {
    let error = match role.leader_address() {
        Some(leader) => format!(
            "this controller is a standby; the leader is {leader} (list every controller in GSCHED_URL, comma separated, and commands find it)"
        ),
        None => "this controller is a standby and no controller leads yet; try again shortly".into(),
    };
    let body = serde_json::json!({
        "error": error,
        "role": "standby",
        "leader": role.leader_address(),
    });
    let mut response = (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response();
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    with_leader(role, response)
}

fn with_leader(role: &Role, mut response: Response) -> Response {
    if let Some(value) = role
        .leader_address()
        .and_then(|a| HeaderValue::from_str(&a).ok())
    {
        response.headers_mut().insert(LEADER_HEADER, value);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;

    async fn call(app: &Router, path: &str) -> (StatusCode, Option<String>, serde_json::Value) {
        let response = app
            .clone()
            .oneshot(Request::get(path).body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let leader = response
            .headers()
            .get(LEADER_HEADER)
            .map(|v| v.to_str().unwrap().to_string());
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        let body = serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null);
        (status, leader, body)
    }

    #[tokio::test]
    async fn a_standby_names_the_leader_until_it_leads_itself() {
        let role = Arc::new(Role::default());
        let slot = Arc::new(OnceLock::new());
        let app = switch(Arc::clone(&slot), Arc::clone(&role));
        let (status, leader, body) = call(&app, "/api/v1/jobs").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(leader, None);
        assert!(body["error"]
            .as_str()
            .unwrap()
            .contains("no controller leads yet"));
        role.saw(Some(gsched_core::leadership::Lease {
            epoch: 4,
            holder: "c1 b 1 1".into(),
            address: "https://c1:6817".into(),
            expires_ms: 0,
        }));
        let (_, leader, body) = call(&app, "/api/v1/jobs").await;
        assert_eq!(leader.as_deref(), Some("https://c1:6817"));
        assert_eq!(body["leader"], "https://c1:6817");
        let (status, _, body) = call(&app, "/healthz").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            (body["role"].as_str(), body["epoch"].as_i64()),
            (Some("standby"), Some(4))
        );
        let led = Router::new().route("/api/v1/jobs", get(|| async { "the leader's" }));
        slot.set(led).unwrap();
        let response = app
            .clone()
            .oneshot(Request::get("/api/v1/jobs").body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    }
}
