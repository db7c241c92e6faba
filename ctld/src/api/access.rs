//! Who is calling, on each transport: the token middleware of the TCP
//! API, the peer-credential middleware of the local socket, job ownership
//! checks, and the token and whoami endpoints.

use std::sync::Arc;

use axum::extract::connect_info::Connected;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::serve::IncomingStream;
use axum::{Extension, Json, Router};
use gsched_core::job::JobId;
use gsched_core::wire::ErrorBody;
use gsched_daemon::http::{ApiError, Body};
use serde::{Deserialize, Serialize};

use super::{router, unknown_job, Ctl, Who};
use crate::auth::{lookup_user, Caller, Via};
use crate::controller::{unix_now, Controller};

/// The kernel's word on who connected to the local socket: (uid, gid).
#[derive(Debug, Clone, Copy)]
pub struct PeerCred(Option<(u32, u32)>);

type SocketListener = gsched_daemon::listener::Bounded<tokio::net::UnixListener>;

impl Connected<IncomingStream<'_, SocketListener>> for PeerCred {
    fn connect_info(s: IncomingStream<'_, SocketListener>) -> PeerCred {
        PeerCred(
            s.io()
                .get_ref()
                .peer_cred()
                .ok()
                .map(|c| (c.uid(), c.gid())),
        )
    }
}

/// The API on TCP: every request but the exempt paths carries a token.
pub fn tcp_app(ctl: Arc<Controller>) -> Router {
    router(Arc::clone(&ctl)).layer(middleware::from_fn_with_state(ctl, token_auth))
}

/// The API on the local socket: the caller is the connecting user.
pub fn socket_app(ctl: Arc<Controller>) -> Router {
    router(Arc::clone(&ctl)).layer(middleware::from_fn_with_state(ctl, peer_auth))
}

/// Paths that never need a token: daemon-to-daemon calls (they carry the
/// cluster key) and the dashboard's static files (no data in them).
fn always_open(path: &str) -> bool {
    path.starts_with("/internal/")
        || path == "/"
        || path.starts_with("/ui/")
        || path == "/openapi.json"
}

fn exempt(path: &str, list: &[String]) -> bool {
    list.iter().any(|e| {
        if e.ends_with('/') {
            path.starts_with(e.as_str())
        } else {
            path == e
        }
    })
}

async fn token_auth(State(ctl): Ctl, mut req: Request, next: Next) -> Response {
    let path = req.uri().path();
    let caller = match ctl
        .auth
        .token_caller(req.headers())
        .and_then(|c| match c.job {
            Some(job) => ctl.check_job_token(job).map(|()| c),
            None => Ok(c),
        }) {
        Ok(c) => c,
        Err(_) if always_open(path) || exempt(path, &ctl.config.auth_exempt) => Caller::anonymous(),
        Err(e) => {
            tracing::info!(path, reason = %e, "request refused: not authenticated");
            let mut r = ApiError::from(e).into_response();
            r.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"gsched\""),
            );
            return r;
        }
    };
    req.extensions_mut().insert(caller);
    next.run(req).await
}

async fn peer_auth(
    State(ctl): Ctl,
    ConnectInfo(peer): ConnectInfo<PeerCred>,
    mut req: Request,
    next: Next,
) -> Response {
    let Some((uid, gid)) = peer.0 else {
        return ApiError(
            StatusCode::UNAUTHORIZED,
            "cannot read the credentials of the process on the local socket".into(),
        )
        .into_response();
    };
    req.extensions_mut()
        .insert(ctl.auth.socket_caller(uid, gid));
    next.run(req).await
}

/// 404 for an unknown job, 403 unless the caller owns it or is an admin.
pub fn check_owner_of(ctl: &Controller, caller: &Caller, id: JobId) -> Result<(), ApiError> {
    let c = ctl.lock();
    let j = c.job(id).ok_or_else(|| unknown_job(&id.to_string()))?;
    caller.check_owner(id, &j.spec.user_name, j.spec.uid)
}

/// `POST /api/v1/tokens`: a token for the caller, or (administrators)
/// for another user.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct TokenRequest {
    /// Seconds; default 1800 as `scontrol token`.
    #[serde(default)]
    lifetime: Option<u64>,
    /// Another user's token: administrators only.
    #[serde(default)]
    user: Option<String>,
}

/// A token issued.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct TokenIssued {
    token: String,
    user: String,
    /// Unix seconds.
    expires: i64,
}

/// Who the API takes the caller for.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct WhoAmI {
    user: String,
    uid: Option<u32>,
    admin: bool,
    /// When the caller's token expires (unix seconds).
    expires: Option<i64>,
    /// `socket`, `token` or `none`.
    via: String,
}

/// Issues a token: to the local socket's caller, or by an administrator
/// for anyone.
#[utoipa::path(post, path = "/api/v1/tokens", tag = "auth",
    request_body = TokenRequest,
    responses(
        (status = 200, description = "The token", body = TokenIssued),
        (status = 400, description = "Bad lifetime or unknown user", body = ErrorBody),
        (status = 403, description = "Not on the local socket and not an administrator, or another user's token asked by a non-administrator", body = ErrorBody),
        (status = 500, description = "The token could not be signed", body = ErrorBody)))]
pub(super) async fn issue_token(
    State(ctl): Ctl,
    Extension(caller): Who,
    Body(r): Body<TokenRequest>,
) -> Result<Json<TokenIssued>, ApiError> {
    let forbid = |m: &str| Err(ApiError(StatusCode::FORBIDDEN, m.into()));
    if caller.via != Via::Socket && !caller.admin {
        return forbid("tokens are issued on the controller host's local socket (`gsched token` there), or by an administrator");
    }
    let lifetime = r.lifetime.unwrap_or(1800);
    if lifetime == 0 || lifetime > ctl.auth.max_lifetime {
        return Err(ApiError(
            StatusCode::BAD_REQUEST,
            format!(
                "token lifetime must be 1 to {} seconds (token_max_lifetime), not {lifetime}",
                ctl.auth.max_lifetime
            ),
        ));
    }
    let (user, uid, gid) = match r.user {
        Some(u) if u != caller.user => {
            if !caller.admin {
                return forbid("only an administrator may get a token for another user");
            }
            let (uid, gid) = lookup_user(&u).ok_or_else(|| {
                ApiError(
                    StatusCode::BAD_REQUEST,
                    format!("user {u} is not known on the controller host"),
                )
            })?;
            if uid == 0 && caller.uid != Some(0) {
                return forbid("only root may get a token for root (uid 0)");
            }
            (u, Some(uid), Some(gid))
        }
        _ => (caller.user.clone(), caller.uid, caller.gid),
    };
    let (token, claims) = ctl
        .auth
        .issue(&user, uid, gid, lifetime, unix_now())
        .map_err(|e| ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    tracing::info!(user, lifetime, by = caller.user, "token issued");
    Ok(Json(TokenIssued {
        token,
        user,
        expires: claims.exp,
    }))
}

/// The caller as the API sees them.
#[utoipa::path(get, path = "/api/v1/whoami", tag = "auth",
    responses((status = 200, description = "The caller", body = WhoAmI)))]
pub(super) async fn whoami(Extension(caller): Who) -> Json<WhoAmI> {
    let via = match caller.via {
        Via::Socket => "socket",
        Via::Token => "token",
        Via::Anonymous => "none",
    };
    Json(WhoAmI {
        user: caller.user,
        uid: caller.uid,
        admin: caller.admin,
        expires: caller.expires,
        via: via.into(),
    })
}
