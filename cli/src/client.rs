//! A small blocking client of the controller's REST API.

use std::io::Read;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, bail, Result};
use gsched_core::env::{TLS_CA_ENV, TOKEN_ENV};
use gsched_core::job::{JobId, JobSpec};
use gsched_core::wire::{ErrorBody, InstanceInfo, JobInfo, JobList, NodeInfo, Submitted};
use serde::Deserialize;

pub use gsched_core::steps::StepNodeAnswer;

mod endpoint;
use endpoint::{Endpoint, Route, Transport};

/// Default controller URL when `GSCHED_URL` is not set.
pub const DEFAULT_URL: &str = "http://127.0.0.1:6817";

/// The controller could not be reached, or the connection broke before
/// its answer was read: the request may or may not have been carried out.
#[derive(Debug)]
pub struct Unreachable(pub String);

/// Nothing was sent: the controller could not be connected to.
#[derive(Debug)]
struct NotConnected(String);

impl std::fmt::Display for NotConnected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NotConnected {}

/// Whether the connection was refused (nothing listens: the controller
/// is not there, e.g. restarting), as opposed to a failure after it was
/// reached (TLS, a reset, a timeout).
fn connection_refused(t: &ureq::Transport) -> bool {
    io_kind(t) == Some(std::io::ErrorKind::ConnectionRefused)
}

/// The kind of the I/O error under a transport error, if one is.
fn io_kind(t: &ureq::Transport) -> Option<std::io::ErrorKind> {
    let mut source = std::error::Error::source(t);
    while let Some(e) = source {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            return Some(io.kind());
        }
        source = e.source();
    }
    None
}

/// Whether an I/O error means the connection was closed before any answer:
/// a controller at its connection cap closes a client's newest when all of
/// that client's others are busy (gsched_daemon::listener).
fn closed_unanswered(kind: std::io::ErrorKind) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        kind,
        ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof
    )
}

/// The connection was closed before an answer came, as a controller busy
/// with the caller's other connections does: a read (GET) is tried again.
#[derive(Debug)]
struct ClosedUnanswered(String);

impl std::fmt::Display for ClosedUnanswered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ClosedUnanswered {}

impl std::fmt::Display for Unreachable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Unreachable {}

/// The controllers a command may ask (`GSCHED_URL=URL1,URL2`: one leads,
/// the others stand by), and the one it asks now.
pub struct Client {
    controllers: Vec<Endpoint>,
    current: std::sync::atomic::AtomicUsize,
}

/// What a controller said of itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControllerRole {
    /// It leads (else it stands by).
    pub leads: bool,
    /// The epoch it leads in (0 from a standby or an older controller).
    pub epoch: i64,
}

/// A standby answered: it names the leader, if it knows it.
#[derive(Debug)]
struct Standby {
    leader: Option<String>,
    message: String,
}

impl std::fmt::Display for Standby {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Standby {}

/// An error the controller answered with.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    pub status: u16,
    pub message: String,
}

/// A token from the environment: GSCHED_TOKEN (set in every job), else
/// Slurm's SLURM_JWT.
pub fn env_token() -> Option<String> {
    [TOKEN_ENV, "SLURM_JWT"]
        .iter()
        .filter_map(|k| std::env::var(k).ok())
        .map(|t| t.trim().to_string())
        .find(|t| !t.is_empty())
}

/// The site file's `[cluster]` settings, read once (`gsched_site`).
fn site_cluster(
) -> Result<&'static gsched_site::ClusterSettings, std::sync::Arc<gsched_site::SiteError>> {
    type Read = Result<gsched_site::ClusterSettings, std::sync::Arc<gsched_site::SiteError>>;
    static READ: std::sync::OnceLock<Read> = std::sync::OnceLock::new();
    READ.get_or_init(|| gsched_site::cluster_settings().map_err(std::sync::Arc::new))
        .as_ref()
        .map_err(std::sync::Arc::clone)
}

/// The controller's URL: `GSCHED_URL`, else `controller` in the site
/// file's `[cluster]`, else the default.
pub fn controller_url() -> Result<String> {
    if let Some(url) = std::env::var("GSCHED_URL").ok().filter(|u| !u.is_empty()) {
        return Ok(url);
    }
    let site = site_cluster().map_err(|e| anyhow!("{e}"))?;
    Ok(site
        .controller
        .clone()
        .unwrap_or_else(|| DEFAULT_URL.into()))
}

/// The CA certificates https peers are checked against: `GSCHED_TLS_CA`,
/// else `tls_ca` in the site file's `[cluster]`; none: the public roots.
pub fn tls_ca() -> Result<Option<PathBuf>> {
    if let Some(ca) = std::env::var_os(TLS_CA_ENV).filter(|v| !v.is_empty()) {
        return Ok(Some(PathBuf::from(ca)));
    }
    if std::env::var("GSCHED_URL").is_ok_and(|u| !u.is_empty()) {
        // Inside a job, or pointed elsewhere on purpose: the site file's
        // CA belongs to the site file's controller.
        return Ok(None);
    }
    Ok(site_cluster().map_err(|e| anyhow!("{e}"))?.tls_ca.clone())
}

impl Client {
    /// The controller named by `GSCHED_URL` (`http://HOST:PORT`, or
    /// `unix:PATH` for its socket; several, comma separated, for a leader
    /// and its standbys), else by the site file, else the default. A
    /// plain-HTTP loopback controller is reached through its local socket
    /// (`local_socket`), so local commands need no token and never send
    /// one to the port.
    pub fn from_env() -> Client {
        match controller_url() {
            Ok(base) => Client::with_token(&base, env_token()),
            Err(e) => Client::of(vec![Endpoint {
                base: DEFAULT_URL.into(),
                transport: Transport::Unusable(format!("{e:#}")),
            }]),
        }
    }

    fn of(controllers: Vec<Endpoint>) -> Client {
        Client {
            controllers,
            current: Default::default(),
        }
    }

    /// The address of the controller asked now, as given
    /// (`http://host:port`, `unix:PATH`).
    pub fn base(&self) -> &str {
        &self.at().base
    }

    pub fn new(base: &str) -> Client {
        Client::with_token(base, None)
    }

    /// The controllers `bases` names (comma separated), asked with `token`.
    pub fn with_token(bases: &str, token: Option<String>) -> Client {
        let mut controllers: Vec<Endpoint> = bases
            .split(',')
            .map(str::trim)
            .filter(|b| !b.is_empty())
            .map(|b| Endpoint::with_token(b, token.clone()))
            .collect();
        if controllers.is_empty() {
            controllers.push(Endpoint::with_token(bases, token));
        }
        Client::of(controllers)
    }

    /// Whether requests go through the local socket.
    pub fn via_socket(&self) -> bool {
        matches!(self.at().route(false), Ok(Route::Unix(_)))
    }

    /// Each controller's address, for `scontrol ping`.
    pub fn controller_bases(&self) -> Vec<String> {
        self.controllers.iter().map(|c| c.base.clone()).collect()
    }

    /// Each controller's role, asked once each (`scontrol ping`): its
    /// address, and `leader` or `standby` with the epoch, or why it did
    /// not answer.
    pub fn roles(&self) -> Vec<(String, Result<ControllerRole>)> {
        self.controllers
            .iter()
            .map(|c| {
                let role =
                    match self.request_once::<serde_json::Value>(c, "GET", "/healthz", &[], None) {
                        Ok(health) => Ok(ControllerRole {
                            leads: health["role"].as_str().is_none_or(|r| r == "leader"),
                            epoch: health["epoch"].as_i64().unwrap_or(0),
                        }),
                        Err(e) if e.is::<Standby>() => Ok(ControllerRole {
                            leads: false,
                            epoch: 0,
                        }),
                        Err(e) => Err(e),
                    };
                (c.base.clone(), role)
            })
            .collect()
    }

    fn at(&self) -> &Endpoint {
        let i = self.current.load(std::sync::atomic::Ordering::Relaxed);
        &self.controllers[i % self.controllers.len()]
    }

    /// Moves on from the controller asked: to the leader a standby named,
    /// if it is one of ours, else to the next. True while there are others
    /// to ask in this round.
    fn move_on(&self, leader: Option<&str>, tried: &mut usize) -> bool {
        use std::sync::atomic::Ordering;
        let n = self.controllers.len();
        if n < 2 {
            return false;
        }
        let now = self.current.load(Ordering::Relaxed) % n;
        let named = leader.and_then(|l| {
            let l = l.trim_end_matches('/');
            self.controllers
                .iter()
                .position(|c| c.base.trim_end_matches('/') == l)
        });
        let next = named.filter(|&i| i != now).unwrap_or((now + 1) % n);
        self.current.store(next, Ordering::Relaxed);
        *tried += 1;
        *tried < n
    }

    /// One request; `path` starts with `/`. While the controller cannot be
    /// connected to at all (restarting), or only a standby answers, the
    /// others listed are asked, and then all again with backoff for the
    /// retry window (`GSCHED_RETRY_SECS`, default 60; Slurm's clients wait
    /// out a restarting slurmctld the same way), saying so once.
    fn request<T: for<'de> Deserialize<'de>>(
        &self,
        method: &str,
        path: &str,
        query: &[(&str, String)],
        body: Option<&serde_json::Value>,
    ) -> Result<T> {
        let mut retry = crate::retry::Retry::from_env();
        let mut busy = retry.clone();
        let mut tried = 0;
        loop {
            let at = self.at();
            match self.request_once(at, method, path, query, body) {
                Err(e) if e.is::<NotConnected>() || e.is::<Standby>() => {
                    let leader = e.downcast_ref::<Standby>().and_then(|s| s.leader.clone());
                    if self.move_on(leader.as_deref(), &mut tried) {
                        continue;
                    }
                    tried = 0;
                    if retry.wait(&at.base) {
                        continue;
                    }
                    return Err(match e.downcast::<NotConnected>() {
                        Ok(NotConnected(why)) => at.unreachable(why),
                        Err(e) => e,
                    });
                }
                // Reading changes nothing: a read cut off unanswered is
                // asked again (a write might have been done, and is not).
                Err(e) if e.is::<ClosedUnanswered>() && method == "GET" && busy.wait_quietly() => {}
                Err(e) => {
                    return Err(match e.downcast::<ClosedUnanswered>() {
                        Ok(ClosedUnanswered(why)) => at.unreachable(why),
                        Err(e) => e,
                    })
                }
                Ok(v) => return Ok(v),
            }
        }
    }

    fn request_once<T: for<'de> Deserialize<'de>>(
        &self,
        at: &Endpoint,
        method: &str,
        path: &str,
        query: &[(&str, String)],
        body: Option<&serde_json::Value>,
    ) -> Result<T> {
        let (status, bytes) = match at.route(body.is_some())? {
            Route::Http(agent, token) => {
                let mut req = agent.request(method, &format!("{}{path}", at.base));
                for (k, v) in query {
                    req = req.query(k, v);
                }
                if let Some(t) = token {
                    req = req.set("Authorization", &format!("Bearer {t}"));
                }
                let res = match body {
                    Some(b) => req.send_json(b),
                    None => req.call(),
                };
                let r = match res {
                    Ok(r) => r,
                    Err(ureq::Error::Status(_, r)) => r,
                    Err(ureq::Error::Transport(t)) if connection_refused(&t) => {
                        return Err(NotConnected(t.to_string()).into())
                    }
                    Err(ureq::Error::Transport(t))
                        if io_kind(&t).is_some_and(closed_unanswered) =>
                    {
                        return Err(ClosedUnanswered(t.to_string()).into())
                    }
                    Err(ureq::Error::Transport(t)) => return Err(at.unreachable(t)),
                };
                let status = r.status();
                let mut bytes = Vec::new();
                r.into_reader()
                    .take(64 << 20)
                    .read_to_end(&mut bytes)
                    .map_err(|e| at.unreachable(e))?;
                (status, bytes)
            }
            Route::Unix(sock) => {
                let sock = sock.as_path();
                let target = format!("{path}{}", encode_query(query));
                let body = body.map(|b| b.to_string().into_bytes());
                crate::unix_http::request(sock, method, &target, body.as_deref()).map_err(
                    |e| -> anyhow::Error {
                        let why = format!("{}: {e}", sock.display());
                        match e.kind() {
                            // Nothing was sent: the controller is not there.
                            std::io::ErrorKind::ConnectionRefused
                            | std::io::ErrorKind::NotFound => NotConnected(why).into(),
                            k if closed_unanswered(k) => ClosedUnanswered(why).into(),
                            _ => at.unreachable(why),
                        }
                    },
                )?
            }
        };
        if status == 503 {
            if let Ok(answer) = serde_json::from_slice::<StandbyAnswer>(&bytes) {
                if answer.role == "standby" {
                    return Err(Standby {
                        leader: answer.leader,
                        message: answer.error,
                    }
                    .into());
                }
            }
        }
        if (200..300).contains(&status) {
            return serde_json::from_slice(&bytes)
                .map_err(|e| anyhow!("the controller answered with bad JSON: {e}"));
        }
        let message = serde_json::from_slice::<ErrorBody>(&bytes)
            .map(|b| b.error)
            .unwrap_or_else(|_| format!("controller answered HTTP {status}"));
        Err(ApiError { status, message }.into())
    }
}

/// A standby's 503: its role, its message, and the leader it names (if
/// it knows one).
#[derive(Deserialize)]
struct StandbyAnswer {
    #[serde(default)]
    role: String,
    /// Absent from a standby's `/healthz`, which says its role only.
    #[serde(default)]
    error: String,
    #[serde(default)]
    leader: Option<String>,
}

impl Client {
    /// What a slurmrestd-compatible endpoint (`/slurm/v0.0.44/nodes`)
    /// answers, as JSON.
    pub fn slurm_data(&self, path: &str) -> Result<serde_json::Value> {
        self.get(path)
    }

    fn get<T: for<'de> Deserialize<'de>>(&self, path: &str) -> Result<T> {
        self.request("GET", path, &[], None)
    }

    fn post(&self, path: &str, body: &serde_json::Value) -> Result<serde_json::Value> {
        self.request("POST", path, &[], Some(body))
    }

    /// A token for the caller (or, for an administrator, for `user`).
    pub fn issue_token(&self, lifetime: Option<u64>, user: Option<&str>) -> Result<Token> {
        let v = self.post(
            "/api/v1/tokens",
            &serde_json::json!({ "lifetime": lifetime, "user": user }),
        )?;
        Ok(serde_json::from_value(v)?)
    }

    /// Submits a job. A spec with an idempotency key is sent again when
    /// the controller could not be reached or the answer was lost (twice,
    /// after 0.5 s and 1 s): the controller answers a retry with the job
    /// the first attempt made, so nothing runs twice.
    pub fn submit(&self, spec: &JobSpec) -> Result<JobId> {
        let body = serde_json::to_value(spec)?;
        let retry = spec.idempotency_key.is_some();
        let mut waits = [500, 1000]
            .into_iter()
            .map(std::time::Duration::from_millis);
        loop {
            match self.request::<Submitted>("POST", "/api/v1/jobs", &[], Some(&body)) {
                Err(e) if retry && e.is::<Unreachable>() => match waits.next() {
                    Some(wait) => std::thread::sleep(wait),
                    None => return Err(e),
                },
                r => return r.map(|s| s.job_id),
            }
        }
    }

    /// Jobs matching the query parameters (`state`, `user`, `name`, `id`).
    /// Every page of the answer, in id order.
    pub fn jobs(&self, query: &[(&str, String)]) -> Result<Vec<JobInfo>> {
        let mut all = Vec::new();
        let mut q: Vec<(&str, String)> = query.to_vec();
        loop {
            let page = self.request::<JobList>("GET", "/api/v1/jobs", &q, None)?;
            all.extend(page.jobs);
            let Some(after) = page.next_after else {
                return Ok(all);
            };
            q.retain(|(k, _)| *k != "after");
            q.push(("after", after.to_string()));
        }
    }

    /// Cancels a job, or sends `signal` to the processes `scope` names.
    pub fn cancel(
        &self,
        id: &str,
        signal: Option<&str>,
        scope: gsched_core::outcome::SignalScope,
    ) -> Result<()> {
        let mut query: Vec<(&str, String)> = Vec::new();
        if let Some(s) = signal {
            query.push(("signal", s.to_string()));
            let scope = serde_json::to_value(scope)?;
            query.push(("scope", scope.as_str().unwrap_or("full").to_string()));
        }
        self.request::<serde_json::Value>("DELETE", &format!("/api/v1/jobs/{id}"), &query, None)
            .map(|_| ())
    }

    /// The controller's `/healthz` answer: status, cluster name, default
    /// partition, launch policy.
    pub fn health(&self) -> Result<serde_json::Value> {
        self.get("/healthz")
    }

    /// Asks the controller to read its configuration file again
    /// (`scontrol reconfigure`; administrators).
    pub fn reconfigure(&self) -> Result<serde_json::Value> {
        self.post("/api/v1/reconfigure", &serde_json::json!({}))
    }

    /// Records the start of a step of running job `id`; returns its number.
    pub fn begin_step(&self, id: JobId, name: &str, ntasks: u32) -> Result<u32> {
        let v = self.post(
            &format!("/api/v1/jobs/{id}/steps"),
            &serde_json::json!({ "name": name, "ntasks": ntasks }),
        )?;
        v["step_id"]
            .as_u64()
            .map(|s| s as u32)
            .ok_or_else(|| anyhow!("the controller gave no step id"))
    }

    /// Begins a step of job `id` with tasks on its nodes as `layout`
    /// asks: its number and, per node, where its tasks go.
    pub fn begin_wide_step(
        &self,
        id: JobId,
        name: &str,
        layout: &gsched_core::steps::LayoutRequest,
    ) -> Result<(u32, Vec<StepNodeAnswer>)> {
        let v = self.post(
            &format!("/api/v1/jobs/{id}/steps"),
            &serde_json::json!({ "name": name, "layout": layout }),
        )?;
        let step = v["step_id"]
            .as_u64()
            .map(|s| s as u32)
            .ok_or_else(|| anyhow!("the controller gave no step id"))?;
        let nodes = serde_json::from_value(v["nodes"].clone())
            .map_err(|e| anyhow!("the controller's step layout does not read: {e}"))?;
        Ok((step, nodes))
    }

    /// The accounts, associations and `sshare`'s lines.
    pub fn accounts(&self) -> Result<serde_json::Value> {
        self.request("GET", "/api/v1/accounts", &[], None)
    }

    /// An administrator's change to the accounts (`sacctmgr`).
    pub fn change_accounts(
        &self,
        change: &gsched_core::fairshare::AccountChange,
    ) -> Result<serde_json::Value> {
        self.post("/api/v1/accounts", &serde_json::to_value(change)?)
    }

    /// An administrator's change to the QOS (`sacctmgr ... qos`).
    pub fn change_qos(&self, change: &gsched_core::qos::QosChange) -> Result<serde_json::Value> {
        self.post("/api/v1/qos", &serde_json::to_value(change)?)
    }

    /// Records the end of a step.
    pub fn end_step(
        &self,
        id: JobId,
        step: u32,
        exit_code: i32,
        signal: Option<i32>,
    ) -> Result<()> {
        self.post(
            &format!("/api/v1/jobs/{id}/steps/{step}/end"),
            &serde_json::json!({ "exit_code": exit_code, "signal": signal }),
        )
        .map(|_| ())
    }

    /// Holds (`true`) or releases a pending job.
    /// Changes a pending job (`scontrol update JobId=...`).
    pub fn update_job(&self, id: JobId, update: &gsched_core::cluster::JobUpdate) -> Result<()> {
        let body = serde_json::to_value(update)?;
        self.request::<serde_json::Value>("PATCH", &format!("/api/v1/jobs/{id}"), &[], Some(&body))
            .map(|_| ())
    }

    /// Drains, downs or resumes a node (administrators only).
    pub fn set_node_state(
        &self,
        name: &str,
        change: &gsched_core::cluster::NodeStateChange,
    ) -> Result<()> {
        let body = serde_json::to_value(change)?;
        self.post(&format!("/api/v1/nodes/{name}/state"), &body)
            .map(|_| ())
    }

    pub fn set_held(&self, id: JobId, held: bool) -> Result<()> {
        let op = if held { "hold" } else { "release" };
        self.post(&format!("/api/v1/jobs/{id}/{op}"), &serde_json::json!({}))
            .map(|_| ())
    }

    /// Stops a running job (`suspend`) or lets a suspended one go on (an
    /// administrator's).
    pub fn suspend(&self, id: JobId, suspend: bool) -> Result<()> {
        let op = if suspend { "suspend" } else { "resume" };
        self.post(&format!("/api/v1/jobs/{id}/{op}"), &serde_json::json!({}))
            .map(|_| ())
    }

    /// Puts a running job back in the queue under its id.
    pub fn requeue(&self, id: JobId) -> Result<()> {
        self.post(
            &format!("/api/v1/jobs/{id}/requeue"),
            &serde_json::json!({}),
        )
        .map(|_| ())
    }

    pub fn nodes(&self) -> Result<Vec<NodeInfo>> {
        #[derive(Deserialize)]
        struct Nodes {
            nodes: Vec<NodeInfo>,
        }
        Ok(self.get::<Nodes>("/api/v1/nodes")?.nodes)
    }

    /// A node's MIG GPUs: layouts, states, frozen, reshapes under way.
    pub fn mig(&self, node: &str) -> Result<gsched_core::wire::MigNodeInfo> {
        self.get(&format!("/api/v1/nodes/{node}/mig"))
    }

    /// Freezes, thaws or lays out one of a node's GPUs (administrators).
    pub fn change_mig(
        &self,
        node: &str,
        change: &gsched_core::wire::MigChange,
    ) -> Result<gsched_core::wire::MigNodeInfo> {
        let v = self.post(
            &format!("/api/v1/nodes/{node}/mig"),
            &serde_json::to_value(change)?,
        )?;
        Ok(serde_json::from_value(v)?)
    }

    pub fn instances(&self) -> Result<Vec<InstanceInfo>> {
        #[derive(Deserialize)]
        struct Instances {
            instances: Vec<InstanceInfo>,
        }
        Ok(self.get::<Instances>("/api/v1/instances")?.instances)
    }
}

/// A token the controller issued.
#[derive(Debug, Clone, Deserialize)]
pub struct Token {
    pub token: String,
    pub user: String,
    /// Unix seconds.
    pub expires: i64,
}

/// `?k=v&...`, percent-encoded.
fn encode_query(query: &[(&str, String)]) -> String {
    if query.is_empty() {
        return String::new();
    }
    let enc = |s: &str| -> String {
        s.bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect()
    };
    let parts: Vec<String> = query
        .iter()
        .map(|(k, v)| format!("{}={}", enc(k), enc(v)))
        .collect();
    format!("?{}", parts.join("&"))
}

/// Posts `body` to `url` (a node's gnoded) and returns the response to read
/// as it streams: no time limit on the whole exchange (a step runs as long
/// as its tasks), only on connecting. Checks `https://` against
/// `GSCHED_TLS_CA` as the controller's client does.
pub fn post_streaming(url: &str, body: &serde_json::Value) -> Result<Box<dyn Read + Send>> {
    let mut agent = ureq::AgentBuilder::new().timeout_connect(Duration::from_secs(10));
    if let Some(ca) = tls_ca()? {
        agent = agent.tls_config(
            crate::tls::client_config(&ca)
                .map_err(|e| anyhow!("{} ({TLS_CA_ENV}): {e}", ca.display()))?,
        );
    }
    match agent.build().post(url).send_json(body) {
        Ok(r) => Ok(Box::new(r.into_reader())),
        Err(ureq::Error::Status(code, r)) => {
            let text = r.into_string().unwrap_or_default();
            let why = serde_json::from_str::<ErrorBody>(&text)
                .map(|e| e.error)
                .unwrap_or(text);
            bail!("{url}: {code}: {why}")
        }
        Err(e) => bail!("{url}: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_standby_is_told_by_its_role_on_every_503() {
        let health = r#"{"status":"standby","role":"standby","leader":"http://c1:6817","epoch":3}"#;
        let a: StandbyAnswer = serde_json::from_str(health).unwrap();
        assert_eq!(
            (a.role.as_str(), a.leader.as_deref()),
            ("standby", Some("http://c1:6817"))
        );
        let refused = r#"{"error":"this controller is a standby","role":"standby","leader":null}"#;
        let a: StandbyAnswer = serde_json::from_str(refused).unwrap();
        assert_eq!((a.role.as_str(), a.leader), ("standby", None));
        let busy: StandbyAnswer = serde_json::from_str(r#"{"error":"too many jobs"}"#).unwrap();
        assert_eq!(busy.role, "", "a leader's 503 is not a standby's");
    }

    #[test]
    fn loopback_urls_are_recognised() {
        let p = endpoint::loopback_port;
        assert_eq!(p("http://127.0.0.1:6817"), Some(6817));
        assert_eq!(p("http://127.3.2.1:6817/"), Some(6817), "all of 127/8");
        assert_eq!(p("http://localhost:6817"), Some(6817));
        assert_eq!(p("http://[::1]:6817"), Some(6817));
        assert_eq!(p("http://[::1]"), Some(80));
        assert_eq!(p("HTTP://LOCALHOST:6817"), Some(6817));
        assert_eq!(p("http://127.1:6817"), Some(6817));
        assert_eq!(p("http://0.0.0.0:6817"), Some(6817));
        assert_eq!(p("http://u@127.0.0.1:6817?x"), Some(6817));
        assert_eq!(p("http://[::ffff:127.0.0.1]:6817"), Some(6817));
        assert_eq!(p("https://127.0.0.1:6817"), Some(6817));
        assert_eq!(p("http://ctl.example.org:6817"), None);
        assert_eq!(p("http://10.0.0.5:6817"), None);
    }

    #[test]
    fn queries_are_encoded() {
        assert_eq!(encode_query(&[]), "");
        assert_eq!(
            encode_query(&[
                ("state", "PENDING,RUNNING".into()),
                ("name", "a b&c".into())
            ]),
            "?state=PENDING%2CRUNNING&name=a%20b%26c"
        );
    }
}
