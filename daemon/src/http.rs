//! JSON errors for the daemons' HTTP APIs.

use axum::extract::rejection::JsonRejection;
use axum::extract::FromRequest;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use gsched_core::wire::ErrorBody;

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

/// JSON body extractor for the public API: a field the body names that
/// the request type does not know is refused, with its path (`"held"`,
/// `"gpu.sahre"`), rather than silently ignored (`"held": true` must not
/// run a job unheld). Rejections are JSON errors naming the problem.
pub struct Body<T>(pub T);

impl<S: Send + Sync, T: serde::de::DeserializeOwned> FromRequest<S> for Body<T> {
    type Rejection = ApiError;
    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, ApiError> {
        let Json(value) = Json::<serde_json::Value>::from_request(req, state)
            .await
            .map_err(|e| ApiError(StatusCode::BAD_REQUEST, rejection_text(&e)))?;
        strict_from_value(value)
            .map(Body)
            .map_err(|e| ApiError(StatusCode::BAD_REQUEST, e.to_string()))
    }
}

/// A request body that does not read, or names fields the API does not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadBody(pub String);

impl From<String> for BadBody {
    fn from(why: String) -> Self {
        BadBody(why)
    }
}

impl From<&str> for BadBody {
    fn from(why: &str) -> Self {
        BadBody(why.to_string())
    }
}

/// Deserializes `value` as `T`, refusing fields `T` does not know.
pub fn strict_from_value<T: serde::de::DeserializeOwned>(
    value: serde_json::Value,
) -> Result<T, BadBody> {
    let mut unknown = Vec::new();
    let parsed: Result<T, _> = serde_ignored::deserialize(value, |path| {
        unknown.push(path.to_string());
    });
    let parsed = parsed.map_err(|e| BadBody(format!("invalid JSON body: {e}")))?;
    if unknown.is_empty() {
        Ok(parsed)
    } else {
        Err(BadBody(format!(
            "unknown field{} in the request body: {} (see the API reference, docs/api.md)",
            if unknown.len() == 1 { "" } else { "s" },
            unknown.join(", ")
        )))
    }
}

/// JSON body extractor for messages between the daemons: fields a newer
/// peer added are ignored, so a controller and its nodes one version apart
/// still understand each other (the messages are authenticated first).
pub struct PeerBody<T>(pub T);

impl<S: Send + Sync, T: serde::de::DeserializeOwned> FromRequest<S> for PeerBody<T> {
    type Rejection = ApiError;
    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, ApiError> {
        match Json::<T>::from_request(req, state).await {
            Ok(Json(v)) => Ok(PeerBody(v)),
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
