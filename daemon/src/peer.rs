//! Sealed messages between the daemons: the cluster key never crosses the
//! wire, and nothing is sent to, or believed from, a peer that has not
//! proved it holds the key.
//!
//! Every request between gctld and gnoded (both ways) is sealed with an
//! AEAD (ChaCha20-Poly1305, `ring`) under a key derived from the cluster key
//! (HKDF-SHA256): its body is encrypted and authenticated together with the
//! method, the path and a timestamp, under a fresh random nonce. The
//! receiver opens it only inside a time window and only once (a replayed
//! request is refused); its answer is sealed under a second derived key,
//! bound to the request's nonce, method, path and status, and the sender
//! believes nothing it cannot open. A process that grabs a daemon's port
//! while it restarts therefore receives only ciphertext (no key, script,
//! environment or token) and cannot answer in the daemon's name.
//!
//! This holds with or without TLS; TLS between hosts still hides which
//! requests are made and protects users' tokens on the public API.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::body::Body as AxumBody;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use gsched_seal::aead_key;
use ring::aead::{Aad, LessSafeKey, Nonce, NONCE_LEN};
use ring::hkdf;

use crate::http::ApiError;

/// The header carrying a sealed request's version, time and nonce
/// (`1.<unix seconds>.<nonce hex>`), and marking a sealed answer.
pub const SEAL_HEADER: &str = "x-gsched-seal";
const VERSION: &str = "1";
/// How far a request's timestamp may be from the receiver's clock.
pub const WINDOW_SECS: i64 = 300;
/// Largest sealed body read (a launch carries a script and environment).
pub const MAX_BODY: usize = 64 << 20;
/// Most nonces remembered at once (requests within the window).
const MAX_REMEMBERED: usize = 1 << 20;

/// Why a sealed message was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    #[error("missing or wrong cluster key: the request is not sealed with it")]
    NotSealed,
    #[error("missing or wrong cluster key: the request does not open with it")]
    WrongKey,
    #[error("the request's time is {0} s away from this host's clock (at most {WINDOW_SECS} s: keep the hosts' clocks in step)")]
    OutOfWindow(i64),
    #[error("the request was seen before (a replay)")]
    Replayed,
    #[error(
        "the request was made before this daemon started (sent while it was away); it is not taken"
    )]
    BeforeStart,
    #[error("too many requests in the replay window")]
    Busy,
    #[error("the answer does not open with the cluster key: the peer did not prove it is a gsched daemon of this cluster")]
    UnprovenAnswer,
}

/// Which way requests go: each direction has its own pair of keys, so a
/// request to a node can never be taken for one to the controller (or
/// reflected back to its sender).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// gctld's requests to gnoded (launch, signal, drain, ...).
    ToNode,
    /// gnoded's requests to gctld (register, heartbeat, reports).
    ToController,
}

impl Direction {
    fn label(self) -> &'static [u8] {
        match self {
            Direction::ToNode => b"to node",
            Direction::ToController => b"to controller",
        }
    }
}

/// The two keys derived from the cluster key for one direction.
pub struct PeerKeys {
    request: LessSafeKey,
    reply: LessSafeKey,
}

impl std::fmt::Debug for PeerKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PeerKeys(..)")
    }
}

impl PeerKeys {
    pub fn new(cluster_key: &str, direction: Direction) -> PeerKeys {
        let prk = hkdf::Salt::new(hkdf::HKDF_SHA256, b"gsched peer seal")
            .extract(cluster_key.trim().as_bytes());
        let info = |what: &[u8]| [what, b" v1 ", direction.label()].concat();
        PeerKeys {
            request: aead_key(&prk, &info(b"request")),
            reply: aead_key(&prk, &info(b"reply")),
        }
    }
}

fn request_aad(method: &str, path: &str, time: i64) -> Vec<u8> {
    format!("gsched request\n{method}\n{path}\n{time}").into_bytes()
}

fn reply_aad(request_nonce: &[u8; NONCE_LEN], method: &str, path: &str, status: u16) -> Vec<u8> {
    format!(
        "gsched reply\n{}\n{method}\n{path}\n{status}",
        hex(request_nonce)
    )
    .into_bytes()
}

fn fresh_nonce() -> [u8; NONCE_LEN] {
    let mut nonce = [0u8; NONCE_LEN];
    getrandom::getrandom(&mut nonce).expect("the OS gives randomness for a nonce");
    nonce
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<[u8; NONCE_LEN]> {
    if s.len() != NONCE_LEN * 2 {
        return None;
    }
    let mut out = [0u8; NONCE_LEN];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// A request sealed for sending.
pub struct SealedRequest {
    pub header: String,
    pub body: Vec<u8>,
    pub nonce: [u8; NONCE_LEN],
}

impl PeerKeys {
    /// Seals `body` for `method path` at `now`.
    pub fn seal_request(&self, method: &str, path: &str, body: &[u8], now: i64) -> SealedRequest {
        let nonce = fresh_nonce();
        let mut sealed = body.to_vec();
        self.request
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(request_aad(method, path, now)),
                &mut sealed,
            )
            .expect("a body below 256 GiB seals");
        SealedRequest {
            header: format!("{VERSION}.{now}.{}", hex(&nonce)),
            body: sealed,
            nonce,
        }
    }

    /// Opens a request's body; returns it and the nonce its answer is
    /// bound to. Checks the time window and, through `seen`, replays.
    pub fn open_request(
        &self,
        header: Option<&str>,
        method: &str,
        path: &str,
        mut body: Vec<u8>,
        now: i64,
        seen: &ReplayGuard,
    ) -> Result<(Vec<u8>, [u8; NONCE_LEN]), SealError> {
        let (time, nonce) = check_header(header, now, seen)?;
        let n = self
            .request
            .open_in_place(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(request_aad(method, path, time)),
                &mut body,
            )
            .map_err(|_| SealError::WrongKey)?
            .len();
        seen.first_time(nonce, now)?;
        body.truncate(n);
        Ok((body, nonce))
    }

    /// Seals an answer to the request with `request_nonce`, under a fresh
    /// nonce of its own (returned for the answer's header).
    pub fn seal_reply(
        &self,
        request_nonce: [u8; NONCE_LEN],
        method: &str,
        path: &str,
        status: u16,
        body: &[u8],
    ) -> ([u8; NONCE_LEN], Vec<u8>) {
        let nonce = fresh_nonce();
        let mut sealed = body.to_vec();
        self.reply
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(reply_aad(&request_nonce, method, path, status)),
                &mut sealed,
            )
            .expect("a body below 256 GiB seals");
        (nonce, sealed)
    }

    /// Opens an answer sealed under `reply_nonce` to the request with
    /// `request_nonce`.
    pub fn open_reply(
        &self,
        request_nonce: [u8; NONCE_LEN],
        reply_nonce: [u8; NONCE_LEN],
        method: &str,
        path: &str,
        status: u16,
        mut body: Vec<u8>,
    ) -> Result<Vec<u8>, SealError> {
        let n = self
            .reply
            .open_in_place(
                Nonce::assume_unique_for_key(reply_nonce),
                Aad::from(reply_aad(&request_nonce, method, path, status)),
                &mut body,
            )
            .map_err(|_| SealError::UnprovenAnswer)?
            .len();
        body.truncate(n);
        Ok(body)
    }
}

/// Checks a request's seal header before its body is read: well formed,
/// within the window, and not older than this daemon (requests captured
/// while it was away are not taken after it restarts).
fn check_header(
    header: Option<&str>,
    now: i64,
    seen: &ReplayGuard,
) -> Result<(i64, [u8; NONCE_LEN]), SealError> {
    let (time, nonce) = parse_header(header.ok_or(SealError::NotSealed)?)?;
    if (time - now).abs() > WINDOW_SECS {
        return Err(SealError::OutOfWindow(time - now));
    }
    if time < seen.since {
        return Err(SealError::BeforeStart);
    }
    Ok((time, nonce))
}

fn parse_header(h: &str) -> Result<(i64, [u8; NONCE_LEN]), SealError> {
    let mut parts = h.trim().split('.');
    let (Some(VERSION), Some(time), Some(nonce), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(SealError::NotSealed);
    };
    let time = time.parse().map_err(|_| SealError::NotSealed)?;
    let nonce = unhex(nonce).ok_or(SealError::NotSealed)?;
    Ok((time, nonce))
}

/// The nonces of requests opened within the window: each is taken once.
/// Requests made before the guard was made (before this daemon started)
/// are not taken at all, so what a squatter captured while the daemon was
/// away cannot be replayed after it restarts.
pub struct ReplayGuard {
    seen: Mutex<HashMap<[u8; NONCE_LEN], i64>>,
    since: i64,
}

impl ReplayGuard {
    /// A guard taking requests made from `since` (unix seconds) on.
    pub fn since(since: i64) -> ReplayGuard {
        ReplayGuard {
            seen: Mutex::new(HashMap::new()),
            since,
        }
    }

    fn first_time(&self, nonce: [u8; NONCE_LEN], now: i64) -> Result<(), SealError> {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if seen.len() >= MAX_REMEMBERED {
            seen.retain(|_, t| now - *t <= 2 * WINDOW_SECS);
            if seen.len() >= MAX_REMEMBERED {
                return Err(SealError::Busy);
            }
        }
        if seen.insert(nonce, now).is_some() {
            return Err(SealError::Replayed);
        }
        Ok(())
    }
}

/// What the server side of a daemon's internal routes holds.
pub struct PeerAuth {
    pub keys: PeerKeys,
    pub seen: ReplayGuard,
}

impl PeerAuth {
    /// The receiving side of `direction`'s requests.
    pub fn new(cluster_key: &str, direction: Direction) -> Arc<PeerAuth> {
        Arc::new(PeerAuth {
            keys: PeerKeys::new(cluster_key, direction),
            seen: ReplayGuard::since(crate::unix_now()),
        })
    }
}

fn refuse(e: SealError) -> Response {
    let status = match e {
        SealError::Busy => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::UNAUTHORIZED,
    };
    ApiError::new(status, e.to_string()).into_response()
}

/// The layer in front of every daemon-to-daemon route (`axum::middleware::
/// from_fn_with_state`): opens the sealed request (refusing anything else,
/// with 401 before any handler runs), hands the handler the plain JSON, and
/// seals its answer.
pub async fn sealed(State(auth): State<Arc<PeerAuth>>, req: Request, next: Next) -> Response {
    let (mut parts, body) = req.into_parts();
    let method = parts.method.to_string();
    let path = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_default();
    let header = parts
        .headers
        .get(SEAL_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    // Nothing of an unsealed or stale request is read.
    if let Err(e) = check_header(header.as_deref(), crate::unix_now(), &auth.seen) {
        return refuse(e);
    }
    let Ok(bytes) = axum::body::to_bytes(body, MAX_BODY).await else {
        return ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "request body too large")
            .into_response();
    };
    let now = crate::unix_now();
    let (plain, nonce) = match auth.keys.open_request(
        header.as_deref(),
        &method,
        &path,
        bytes.to_vec(),
        now,
        &auth.seen,
    ) {
        Ok(x) => x,
        Err(e) => return refuse(e),
    };
    parts.headers.insert(
        axum::http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    parts.headers.remove(axum::http::header::CONTENT_LENGTH);
    let res = next
        .run(Request::from_parts(parts, AxumBody::from(plain)))
        .await;
    let (mut rparts, rbody) = res.into_parts();
    let Ok(rbytes) = axum::body::to_bytes(rbody, MAX_BODY).await else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    // A sealed answer always has a body (the tag): "No Content" becomes OK.
    if rparts.status == StatusCode::NO_CONTENT {
        rparts.status = StatusCode::OK;
    }
    let (reply_nonce, sealed) =
        auth.keys
            .seal_reply(nonce, &method, &path, rparts.status.as_u16(), &rbytes);
    rparts.headers.remove(axum::http::header::CONTENT_LENGTH);
    rparts.headers.insert(
        axum::http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    let marker = format!("{VERSION}.{}", hex(&reply_nonce));
    rparts.headers.insert(
        SEAL_HEADER,
        HeaderValue::from_str(&marker).expect("hex is a header value"),
    );
    Response::from_parts(rparts, AxumBody::from(sealed))
}

/// Why a sealed call did not give a proven answer.
#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    /// Nothing was sent: nothing listens there.
    #[error("cannot connect to {url}: {}", error_chain(source))]
    Connect { url: String, source: reqwest::Error },
    /// Sent, but no whole answer came back: it may or may not have been
    /// carried out.
    #[error("no answer from {url}: {}", error_chain(source))]
    NoAnswer { url: String, source: reqwest::Error },
    /// An answer came that the peer could not seal: whatever listens
    /// there does not hold the cluster key (a stranger on the port, or a
    /// daemon of another cluster). Its words are shown, not believed.
    #[error("{url} answered {status} without proving it holds the cluster key ({said})")]
    Unproven {
        url: String,
        status: StatusCode,
        said: String,
    },
}

/// An error with its causes, for the log.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

impl PeerError {
    /// Whether nothing was delivered (the request can be sent again
    /// without doubt).
    pub fn is_connect(&self) -> bool {
        matches!(self, PeerError::Connect { .. })
    }
}

/// A proven answer: its status and opened body.
#[derive(Debug)]
pub struct PeerReply {
    pub status: StatusCode,
    pub body: Vec<u8>,
}

impl PeerReply {
    pub fn is_success(&self) -> bool {
        self.status.is_success()
    }

    /// The body as JSON.
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_slice(&self.body)
    }

    /// The error text of a JSON error answer, or the status.
    pub fn error_text(&self) -> String {
        serde_json::from_slice::<gsched_core::wire::ErrorBody>(&self.body)
            .map(|b| b.error)
            .unwrap_or_else(|_| format!("answered {}", self.status))
    }
}

/// The sending side: an HTTP client that seals every request and believes
/// only answers sealed in return.
#[derive(Clone)]
pub struct PeerClient {
    http: reqwest::Client,
    keys: Arc<PeerKeys>,
}

impl PeerClient {
    /// The sending side of `direction`'s requests. `http` must not follow
    /// redirects ([`crate::tls::http_client`] does not).
    pub fn new(http: reqwest::Client, cluster_key: &str, direction: Direction) -> PeerClient {
        PeerClient {
            http,
            keys: Arc::new(PeerKeys::new(cluster_key, direction)),
        }
    }

    /// `POST url` with `body` as JSON.
    pub async fn post<T: serde::Serialize + ?Sized>(
        &self,
        url: &str,
        body: &T,
    ) -> Result<PeerReply, PeerError> {
        let json = serde_json::to_vec(body).expect("daemon messages serialize");
        self.call(Method::POST, url, &json, None).await
    }

    /// `GET url`, waiting at most `timeout`.
    pub async fn get(
        &self,
        url: &str,
        timeout: Option<std::time::Duration>,
    ) -> Result<PeerReply, PeerError> {
        self.call(Method::GET, url, b"", timeout).await
    }

    async fn call(
        &self,
        method: Method,
        url: &str,
        body: &[u8],
        timeout: Option<std::time::Duration>,
    ) -> Result<PeerReply, PeerError> {
        let parsed = reqwest::Url::parse(url).map_err(|_| PeerError::Unproven {
            url: url.to_string(),
            status: StatusCode::BAD_REQUEST,
            said: "not a URL".into(),
        })?;
        let path = match parsed.query() {
            Some(q) => format!("{}?{q}", parsed.path()),
            None => parsed.path().to_string(),
        };
        let sealed = self
            .keys
            .seal_request(method.as_str(), &path, body, crate::unix_now());
        let mut req = self
            .http
            .request(method.clone(), parsed)
            .header(SEAL_HEADER, &sealed.header)
            .header(axum::http::header::CONTENT_TYPE, "application/octet-stream")
            .body(sealed.body);
        if let Some(t) = timeout {
            req = req.timeout(t);
        }
        let res = req.send().await.map_err(|source| {
            if source.is_connect() {
                PeerError::Connect {
                    url: url.to_string(),
                    source,
                }
            } else {
                PeerError::NoAnswer {
                    url: url.to_string(),
                    source,
                }
            }
        })?;
        let status = res.status();
        let reply_nonce = res
            .headers()
            .get(SEAL_HEADER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix(VERSION)?.strip_prefix('.'))
            .and_then(unhex);
        let unproven = |said: String| PeerError::Unproven {
            url: url.to_string(),
            status,
            said,
        };
        // Not more than a sealed answer could be is read of any answer.
        if res.content_length().is_some_and(|n| n > MAX_BODY as u64) {
            return Err(unproven("an answer larger than any sealed one".into()));
        }
        let bytes = read_capped(res)
            .await
            .map_err(|source| PeerError::NoAnswer {
                url: url.to_string(),
                source,
            })?
            .ok_or_else(|| unproven("an answer larger than any sealed one".into()))?;
        let Some(reply_nonce) = reply_nonce else {
            return Err(unproven(
                serde_json::from_slice::<gsched_core::wire::ErrorBody>(&bytes)
                    .map(|b| b.error)
                    .unwrap_or_else(|_| "an answer that is not sealed".into()),
            ));
        };
        let body = self
            .keys
            .open_reply(
                sealed.nonce,
                reply_nonce,
                method.as_str(),
                &path,
                status.as_u16(),
                bytes,
            )
            .map_err(|_| unproven("an answer that does not open with the cluster key".into()))?;
        Ok(PeerReply { status, body })
    }
}

/// The answer's body, or `None` once it grows past [`MAX_BODY`].
async fn read_capped(mut res: reqwest::Response) -> Result<Option<Vec<u8>>, reqwest::Error> {
    let mut out = Vec::new();
    while let Some(chunk) = res.chunk().await? {
        if out.len() + chunk.len() > MAX_BODY {
            return Ok(None);
        }
        out.extend_from_slice(&chunk);
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_request_opens_once_with_the_same_key_only() {
        let keys = PeerKeys::new("0123456789abcdef", Direction::ToNode);
        let seen = ReplayGuard::since(900);
        let s = keys.seal_request("POST", "/v1/jobs", b"{\"script\":\"secret\"}", 1000);
        assert!(
            !s.body.windows(6).any(|w| w == b"secret"),
            "the body travels encrypted"
        );
        let (plain, nonce) = keys
            .open_request(
                Some(&s.header),
                "POST",
                "/v1/jobs",
                s.body.clone(),
                1010,
                &seen,
            )
            .unwrap();
        assert_eq!(plain, b"{\"script\":\"secret\"}");
        assert_eq!(nonce, s.nonce);
        // Replayed, another path, another key, out of window, unsealed.
        let open = |k: &PeerKeys, path: &str, now: i64, seen: &ReplayGuard| {
            k.open_request(Some(&s.header), "POST", path, s.body.clone(), now, seen)
                .map(|_| ())
        };
        assert_eq!(
            open(&keys, "/v1/jobs", 1010, &seen),
            Err(SealError::Replayed)
        );
        let fresh = ReplayGuard::since(900);
        assert_eq!(
            open(&keys, "/v1/drain", 1010, &fresh),
            Err(SealError::WrongKey)
        );
        let other = PeerKeys::new("another key", Direction::ToNode);
        assert_eq!(
            open(&other, "/v1/jobs", 1010, &fresh),
            Err(SealError::WrongKey)
        );
        let reflected = PeerKeys::new("0123456789abcdef", Direction::ToController);
        assert_eq!(
            open(&reflected, "/v1/jobs", 1010, &fresh),
            Err(SealError::WrongKey),
            "a request to a node is no request to the controller"
        );
        let restarted = ReplayGuard::since(1005);
        assert_eq!(
            open(&keys, "/v1/jobs", 1010, &restarted),
            Err(SealError::BeforeStart),
            "made before the daemon started"
        );
        assert_eq!(
            open(&keys, "/v1/jobs", 1000 + WINDOW_SECS + 1, &fresh),
            Err(SealError::OutOfWindow(-WINDOW_SECS - 1))
        );
        assert_eq!(
            keys.open_request(None, "POST", "/v1/jobs", s.body.clone(), 1000, &fresh),
            Err(SealError::NotSealed)
        );
    }

    #[test]
    fn an_answer_is_believed_only_for_its_own_request() {
        let keys = PeerKeys::new("k", Direction::ToController);
        let a = keys.seal_request("GET", "/x", b"", 5);
        let b = keys.seal_request("GET", "/x", b"", 5);
        let (n, reply) = keys.seal_reply(a.nonce, "GET", "/x", 200, b"{\"ok\":1}");
        assert_ne!(n, a.nonce, "an answer has a nonce of its own");
        assert_eq!(
            keys.open_reply(a.nonce, n, "GET", "/x", 200, reply.clone())
                .unwrap(),
            b"{\"ok\":1}"
        );
        assert_eq!(
            keys.open_reply(b.nonce, n, "GET", "/x", 200, reply.clone()),
            Err(SealError::UnprovenAnswer)
        );
        assert_eq!(
            keys.open_reply(a.nonce, n, "GET", "/x", 500, reply),
            Err(SealError::UnprovenAnswer),
            "the status is sealed too"
        );
        let stranger = PeerKeys::new("not the key", Direction::ToController);
        let (n, forged) = stranger.seal_reply(a.nonce, "GET", "/x", 200, b"{}");
        assert_eq!(
            keys.open_reply(a.nonce, n, "GET", "/x", 200, forged),
            Err(SealError::UnprovenAnswer)
        );
    }
}
