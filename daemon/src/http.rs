//! JSON errors for the daemons' HTTP APIs.

use axum::extract::rejection::JsonRejection;
use axum::extract::FromRequest;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use gsched_core::wire::{keys_match, ErrorBody, CLUSTER_KEY_HEADER};

/// An error answer: `{"error": "..."}` with a status.
#[derive(Debug)]
pub struct ApiError(pub StatusCode, pub String);

impl ApiError {
    pub fn new(status: StatusCode, msg: impl Into<String>) -> ApiError {
        ApiError(status, msg.into())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, Json(ErrorBody { error: self.1 })).into_response()
    }
}

/// JSON body extractor whose rejections are JSON errors naming the problem.
pub struct Body<T>(pub T);

impl<S: Send + Sync, T: serde::de::DeserializeOwned> FromRequest<S> for Body<T> {
    type Rejection = ApiError;
    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, ApiError> {
        match Json::<T>::from_request(req, state).await {
            Ok(Json(v)) => Ok(Body(v)),
            Err(e) => Err(ApiError(StatusCode::BAD_REQUEST, rejection_text(&e))),
        }
    }
}

fn rejection_text(e: &JsonRejection) -> String {
    match e {
        JsonRejection::MissingJsonContentType(_) => {
            "send the body as JSON with Content-Type: application/json".into()
        }
        other => format!("invalid JSON body: {}", other.body_text()),
    }
}

/// Checks the cluster key header of a daemon-to-daemon request.
pub fn check_cluster_key(key: &str, headers: &HeaderMap) -> Result<(), ApiError> {
    let given = headers
        .get(CLUSTER_KEY_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if keys_match(given, key) {
        Ok(())
    } else {
        Err(ApiError(
            StatusCode::UNAUTHORIZED,
            "missing or wrong cluster key".into(),
        ))
    }
}
