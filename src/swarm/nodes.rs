//! The swarm's nodes: one HTTP server answering the controller's sealed
//! calls for every node (each node's URL is `http://ADDR/n/NAME`), and one
//! task per node that registers, sends heartbeats and reports ended jobs,
//! as gnoded's `link` does. Jobs run nowhere: a launched job "runs" for
//! the swarm's job time, then its end is reported (exit 0), or at once
//! when the controller cancels it.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use gsched_core::job::JobId;
use gsched_core::outcome::{EndCause, ProcessOutcome};
use gsched_core::wire::{
    Heartbeat, HeartbeatReply, JobEndReport, JobEnded, LaunchRequest, NodeRegistration,
    SignalRequest,
};
use gsched_daemon::peer::{Direction, PeerAuth, PeerClient};
use tokio::sync::mpsc;

/// What every node of the swarm shares.
pub struct Swarm {
    pub controller: String,
    pub heartbeat: Duration,
    pub job_time: Duration,
    pub names: Vec<String>,
    index: HashMap<String, usize>,
    nodes: Vec<Mutex<BTreeMap<JobId, u32>>>,
    ended: Vec<mpsc::UnboundedSender<JobEnded>>,
    peer: PeerClient,
    /// When each launch arrived (first arrival of a run only).
    pub launched_at: Mutex<HashMap<JobId, Instant>>,
    pub counts: Counts,
    /// Seconds each heartbeat took to be answered.
    pub heartbeat_secs: Mutex<Vec<f64>>,
    /// Why calls to the controller failed: each reason (its first 120
    /// characters) with how often.
    pub failures: Mutex<BTreeMap<String, u64>>,
    /// Calls in flight at once (see [`IN_FLIGHT`]).
    in_flight: tokio::sync::Semaphore,
}

/// The swarm's calls to the controller in flight at once. Every node of
/// the swarm calls from this host as root: one client to the controller's
/// listener, held to its connections per address
/// (`gsched_ctld::API_CONNECTIONS_PER_ADDRESS`, 256). Past them the
/// listener closes the client's idle connections and refuses more, which
/// real nodes, each from its own address, never meet. So the swarm sends
/// its nodes' calls through fewer connections: it loads the controller
/// with 10,000 nodes' calls, not with their 10,000 connections.
pub const IN_FLIGHT: usize = gsched_ctld::API_CONNECTIONS_PER_ADDRESS * 3 / 4;

/// Calls made and answered, over the swarm's life.
#[derive(Default)]
pub struct Counts {
    /// Nodes registered at least once.
    pub nodes_registered: AtomicU64,
    /// Registrations answered, first ones and later ones.
    pub registered: AtomicU64,
    pub registration_failures: AtomicU64,
    pub heartbeats: AtomicU64,
    pub heartbeat_failures: AtomicU64,
    pub launches: AtomicU64,
    pub cancels: AtomicU64,
    pub ends_reported: AtomicU64,
    pub end_report_failures: AtomicU64,
    /// Calls that waited over a second for a free connection of the
    /// swarm's own (the latencies leave that wait out).
    pub waited_over_1s: AtomicU64,
}

impl Swarm {
    /// `n` nodes named `PREFIX00001`...; `url` is where the node API of
    /// this process is reached, `key` the cluster key.
    pub fn new(
        n: usize,
        prefix: &str,
        controller: &str,
        key: &str,
        heartbeat: Duration,
        job_time: Duration,
    ) -> anyhow::Result<(Arc<Swarm>, Vec<mpsc::UnboundedReceiver<JobEnded>>)> {
        let names: Vec<String> = (1..=n).map(|i| format!("{prefix}{i:05}")).collect();
        let (ended, receivers): (Vec<_>, Vec<_>) =
            (0..n).map(|_| mpsc::unbounded_channel()).unzip();
        // As many connections kept as calls go at once (`IN_FLIGHT`).
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(30))
            .pool_max_idle_per_host(IN_FLIGHT)
            // Under gctld's 60 s idle close, as the daemons' own clients.
            .pool_idle_timeout(Duration::from_secs(30))
            .build()?;
        let swarm = Swarm {
            controller: controller.trim_end_matches('/').to_string(),
            heartbeat,
            job_time,
            index: names
                .iter()
                .enumerate()
                .map(|(i, n)| (n.clone(), i))
                .collect(),
            nodes: (0..n).map(|_| Mutex::new(BTreeMap::new())).collect(),
            names,
            ended,
            peer: PeerClient::new(http, key, Direction::ToController),
            launched_at: Mutex::new(HashMap::new()),
            counts: Counts::default(),
            heartbeat_secs: Mutex::new(Vec::new()),
            failures: Mutex::new(BTreeMap::new()),
            in_flight: tokio::sync::Semaphore::new(IN_FLIGHT),
        };
        Ok((Arc::new(swarm), receivers))
    }

    fn runs(&self, node: usize) -> BTreeMap<JobId, u32> {
        self.nodes[node]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Ends run `run` of `job` on `node` if it is still there.
    fn end(&self, node: usize, job: JobId, run: u32, cause: EndCause) {
        let had = {
            let mut runs = self.nodes[node].lock().unwrap_or_else(|p| p.into_inner());
            if runs.get(&job) == Some(&run) {
                runs.remove(&job);
                true
            } else {
                false
            }
        };
        if had {
            let cancelled = matches!(cause, EndCause::Cancelled);
            let _ = self.ended[node].send(JobEnded {
                job_id: job,
                run,
                outcome: ProcessOutcome {
                    exit_code: (!cancelled).then_some(0),
                    signal: cancelled.then_some(libc::SIGTERM),
                    cause,
                },
                end_time: unix_now(),
                usage: None,
                steps: Default::default(),
            });
        }
    }

    /// One sealed call; the seconds it took once sent (waits for a free
    /// connection of the swarm's own left out) come back with it.
    async fn post<T: serde::Serialize>(
        &self,
        path: &str,
        body: &T,
    ) -> (Result<gsched_daemon::peer::PeerReply, String>, f64) {
        let url = format!("{}{path}", self.controller);
        let asked = Instant::now();
        let Ok(_permit) = self.in_flight.acquire().await else {
            return (Err("the swarm is closing".into()), 0.0);
        };
        if asked.elapsed() > Duration::from_secs(1) {
            self.counts.waited_over_1s.fetch_add(1, Ordering::Relaxed);
        }
        let sent = Instant::now();
        let answer = self.peer.post(&url, body).await;
        let secs = sent.elapsed().as_secs_f64();
        (self.checked(&url, answer), secs)
    }

    fn checked(
        &self,
        url: &str,
        answer: Result<gsched_daemon::peer::PeerReply, gsched_daemon::peer::PeerError>,
    ) -> Result<gsched_daemon::peer::PeerReply, String> {
        let failed = match answer {
            Ok(r) if r.is_success() => return Ok(r),
            Ok(r) => format!("{}: {}", r.status, r.error_text()),
            Err(e) => gsched_daemon::peer::error_chain(&e),
        };
        // The node's name out of the reason, so that reasons tally.
        let reason: String = failed
            .replace(url, "the controller")
            .chars()
            .take(120)
            .collect();
        *self
            .failures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(reason)
            .or_default() += 1;
        Err(failed)
    }
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

type Shared = State<Arc<Swarm>>;

/// The node API of every node, behind the cluster key's seal (as gnoded's).
pub fn router(swarm: Arc<Swarm>, key: &str) -> Router {
    Router::new()
        .route("/n/{node}/v1/jobs", post(launch))
        .route("/n/{node}/v1/jobs/{id}/signal", post(signal))
        .route("/n/{node}/v1/jobs/{id}/suspend", post(accepted))
        .route("/n/{node}/v1/drain", post(accepted))
        .route("/n/{node}/v1/reshape", post(no_reshape))
        .layer(axum::middleware::from_fn_with_state(
            PeerAuth::new(key, Direction::ToNode),
            gsched_daemon::peer::sealed,
        ))
        .with_state(swarm)
}

fn node_of(swarm: &Swarm, name: &str) -> Result<usize, (StatusCode, String)> {
    swarm
        .index
        .get(name)
        .copied()
        .ok_or((StatusCode::NOT_FOUND, format!("no swarm node {name}")))
}

async fn launch(
    State(swarm): Shared,
    Path(node): Path<String>,
    Json(req): Json<LaunchRequest>,
) -> Result<StatusCode, (StatusCode, String)> {
    let i = node_of(&swarm, &node)?;
    let (job, run) = (req.job.id, req.job.run);
    let fresh = swarm.nodes[i]
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(job, run)
        != Some(run);
    if fresh {
        swarm.counts.launches.fetch_add(1, Ordering::Relaxed);
        swarm
            .launched_at
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(job)
            .or_insert_with(Instant::now);
        let s = Arc::clone(&swarm);
        tokio::spawn(async move {
            tokio::time::sleep(s.job_time).await;
            s.end(i, job, run, EndCause::Exited);
        });
    }
    Ok(StatusCode::CREATED)
}

async fn signal(
    State(swarm): Shared,
    Path((node, job)): Path<(String, JobId)>,
    Json(req): Json<SignalRequest>,
) -> Result<StatusCode, (StatusCode, String)> {
    let i = node_of(&swarm, &node)?;
    if req.cancel {
        let run = swarm.runs(i).get(&job).copied();
        if let Some(run) = run.filter(|r| req.run.is_none_or(|want| want == *r)) {
            swarm.counts.cancels.fetch_add(1, Ordering::Relaxed);
            swarm.end(i, job, run, EndCause::Cancelled);
        }
    }
    Ok(StatusCode::OK)
}

async fn accepted() -> StatusCode {
    StatusCode::OK
}

async fn no_reshape() -> (StatusCode, String) {
    (
        StatusCode::BAD_REQUEST,
        "swarm nodes have no GPUs to re-partition".into(),
    )
}

/// Node `i`'s life: registers (again whenever the controller forgets it),
/// reports ended jobs as they come, sends a heartbeat every interval.
/// Starts after `delay`, so that the swarm's heartbeats spread over the
/// interval as independent nodes' do.
pub async fn agent(
    swarm: Arc<Swarm>,
    i: usize,
    registration: NodeRegistration,
    mut ended_rx: mpsc::UnboundedReceiver<JobEnded>,
    delay: Duration,
) {
    tokio::time::sleep(delay).await;
    let mut registered = false;
    let mut ever_registered = false;
    let mut pending: Vec<JobEnded> = Vec::new();
    let mut tick = tokio::time::interval(swarm.heartbeat);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        if !registered {
            let runs = swarm.runs(i);
            let reg = NodeRegistration {
                running: runs.keys().copied().collect(),
                runs,
                ended: pending.clone(),
                ..registration.clone()
            };
            match swarm.post("/internal/v1/nodes/register", &reg).await.0 {
                Ok(_) => {
                    registered = true;
                    pending.clear();
                    swarm.counts.registered.fetch_add(1, Ordering::Relaxed);
                    if !std::mem::replace(&mut ever_registered, true) {
                        swarm
                            .counts
                            .nodes_registered
                            .fetch_add(1, Ordering::Relaxed);
                    }
                }
                Err(_) => {
                    swarm
                        .counts
                        .registration_failures
                        .fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            }
        }
        while let Ok(e) = ended_rx.try_recv() {
            pending.push(e);
        }
        if !pending.is_empty() {
            let report = JobEndReport {
                node: swarm.names[i].clone(),
                ended: pending.clone(),
            };
            match swarm.post("/internal/v1/jobs/ended", &report).await.0 {
                Ok(_) => {
                    swarm
                        .counts
                        .ends_reported
                        .fetch_add(pending.len() as u64, Ordering::Relaxed);
                    pending.clear();
                }
                Err(_) => {
                    swarm
                        .counts
                        .end_report_failures
                        .fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    // As gnoded: register again, the ends with it (a node
                    // that only retried its report sent no heartbeats).
                    registered = false;
                    continue;
                }
            }
        }
        tokio::select! {
            Some(e) = ended_rx.recv() => pending.push(e),
            _ = tick.tick() => {
                registered = heartbeat(&swarm, i, &registration.instance_id).await;
            }
        }
    }
}

/// One heartbeat; `false` when the controller does not know the node.
async fn heartbeat(swarm: &Swarm, i: usize, instance_id: &str) -> bool {
    let runs = swarm.runs(i);
    let hb = Heartbeat {
        instance_id: instance_id.to_string(),
        running: runs.keys().copied().collect(),
        runs,
        ..Heartbeat::default()
    };
    let path = format!("/internal/v1/nodes/{}/heartbeat", swarm.names[i]);
    let (answer, secs) = swarm.post(&path, &hb).await;
    // Failed ones too: a heartbeat that timed out belongs in the p99.
    swarm
        .heartbeat_secs
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(secs);
    match answer {
        Ok(r) => {
            swarm.counts.heartbeats.fetch_add(1, Ordering::Relaxed);
            matches!(
                r.json::<HeartbeatReply>(),
                Ok(HeartbeatReply { known: true })
            )
        }
        Err(_) => {
            swarm
                .counts
                .heartbeat_failures
                .fetch_add(1, Ordering::Relaxed);
            true
        }
    }
}
