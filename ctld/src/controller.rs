//! The controller: a [`Cluster`] behind a lock, the store, and the loops that
//! launch jobs and watch nodes. Decisions are the cluster's; this module only
//! persists their effects and carries out their RPCs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gsched_core::cluster::{AdminState, Cluster, ClusterError, Effect, LaunchAnswer, LaunchNext};
use gsched_core::job::{JobId, JobSpec};
use gsched_core::probe::TaskReport;
use gsched_core::wire::{
    DrainRequest, Heartbeat, JobEndReport, LaunchRequest, NodeRegistration, RegistrationReply,
    SignalRequest, SuspendRequest,
};
use tokio::sync::Notify;
use tracing::{info, warn, Instrument};

use crate::auth::Authority;
use crate::config::CtldConfig;
use crate::store::{JobRuntime, Store, StoreError, Write};
use job_text::TextFetch;

mod job_text;
use gsched_daemon::peer::{Direction, PeerAuth, PeerClient};

pub use gsched_daemon::unix_now;

/// Errors of controller operations, mapped to HTTP statuses by the API.
#[derive(Debug, thiserror::Error)]
pub enum CtlError {
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    #[error(
        "Batch job submission failed: Invalid partition name specified: '{0}' (partitions: {1})"
    )]
    UnknownPartition(String, String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Fence(#[from] gsched_core::fence::FenceError),
}

/// No token outlives this (ten years), whatever the settings say.
pub const MAX_TOKEN_LIFETIME: u64 = 10 * 365 * 86400;

/// Seconds between utilization samples, and how many are kept (an hour).
pub const UTIL_INTERVAL: u64 = 10;
pub const UTIL_SAMPLES: usize = 360;

/// The cluster's GPU use at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct UtilSample {
    pub time: i64,
    pub memory_total_mib: u64,
    /// Held by isolated jobs or reserved by shared tasks.
    pub memory_reserved_mib: u64,
    /// In use as the GPUs report it (instances whose node can read it).
    pub memory_used_mib: u64,
    pub isolated_instances: u32,
    pub shared_tasks: u32,
    pub running_jobs: u32,
    pub pending_jobs: u32,
}

pub struct Controller {
    cluster: Mutex<Cluster>,
    pub store: Store,
    pub config: CtldConfig,
    pub key: String,
    /// Base URL clients and jobs use to reach this controller.
    pub url: String,
    /// Token signing and administrators.
    pub auth: Authority,
    /// The local unix socket's path.
    pub socket: std::path::PathBuf,
    /// Histograms for `/metrics`.
    pub metrics: crate::metrics::Metrics,
    /// Cluster-wide use over the last hour, oldest first.
    utilization: Mutex<std::collections::VecDeque<UtilSample>>,
    wake: Notify,
    /// When each job last changed since this controller started (for
    /// slurmrestd's `update_time`); earlier changes are read off the job.
    changed: Mutex<HashMap<JobId, i64>>,
    /// When any node last reported or changed.
    nodes_changed: std::sync::atomic::AtomicI64,
    last_seen: Mutex<HashMap<String, Instant>>,
    started: Instant,
    /// Sealed requests to the nodes (`gsched_daemon::peer`).
    peer: PeerClient,
    /// Opens the nodes' sealed requests to `/internal/...`.
    pub peer_auth: Arc<PeerAuth>,
}

impl Controller {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        cluster: Cluster,
        store: Store,
        config: CtldConfig,
        key: String,
        url: String,
        auth: Authority,
        socket: std::path::PathBuf,
        http: reqwest::Client,
    ) -> Arc<Controller> {
        Arc::new(Controller {
            cluster: Mutex::new(cluster),
            store,
            config,
            url,
            auth,
            socket,
            metrics: crate::metrics::Metrics::default(),
            utilization: Mutex::new(std::collections::VecDeque::new()),
            wake: Notify::new(),
            changed: Mutex::new(HashMap::new()),
            nodes_changed: std::sync::atomic::AtomicI64::new(unix_now()),
            last_seen: Mutex::new(HashMap::new()),
            started: Instant::now(),
            peer: PeerClient::new(http, &key, Direction::ToNode),
            peer_auth: PeerAuth::new(&key, Direction::ToController),
            key,
        })
    }

    /// A token for the job's own commands (srun steps, scontrol requeue,
    /// sbatch from inside the job) on nodes without the controller's
    /// socket: the job's user, bound to the job (refused once it ends, see
    /// [`Controller::check_job_token`]), valid at most an hour past its time
    /// limit (a week when it has none) and never longer than the maximum
    /// token lifetime.
    fn job_token(&self, job: &gsched_core::Job) -> Option<String> {
        // `time_limit` is in seconds.
        let life = job
            .spec
            .time_limit
            .map(|secs| secs.saturating_add(3600))
            .unwrap_or(7 * 86400);
        match self.auth.issue_for_job(&job.spec, job.id, life, unix_now()) {
            Ok((t, _)) => Some(t),
            Err(e) => {
                warn!(job = job.id, error = %e, "no token for the job");
                None
            }
        }
    }

    /// Refuses a job token once its job has ended (or is no longer known).
    /// A requeued job's token stays good: the old run may still be ending,
    /// and it acts for the same user on the same job.
    pub fn check_job_token(&self, job: JobId) -> Result<(), crate::auth::AuthError> {
        let c = self.lock();
        match c.job(job) {
            Some(j) if !j.state.is_final() => Ok(()),
            _ => Err(crate::auth::AuthError::JobEnded(job)),
        }
    }

    /// When `job` last changed, as far as this controller knows.
    pub fn changed_at(&self, job: &gsched_core::Job) -> i64 {
        let seen = self
            .changed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&job.id)
            .copied();
        seen.unwrap_or_else(|| {
            [
                job.submit_time,
                job.start_time.unwrap_or(0),
                job.end_time.unwrap_or(0),
            ]
            .into_iter()
            .max()
            .unwrap_or(0)
        })
    }

    /// When any node last reported or changed.
    pub fn nodes_changed_at(&self) -> i64 {
        self.nodes_changed
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    fn touch(&self, ids: impl IntoIterator<Item = JobId>, now: i64) {
        let mut m = self.changed.lock().unwrap_or_else(|p| p.into_inner());
        for id in ids {
            m.insert(id, now);
        }
    }

    fn touch_nodes(&self, now: i64) {
        self.nodes_changed
            .store(now, std::sync::atomic::Ordering::Relaxed);
    }

    /// The cluster state (a panicked holder's state is still used).
    pub fn lock(&self) -> std::sync::MutexGuard<'_, Cluster> {
        self.cluster.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the controller knows job `id`.
    pub fn has_job(&self, id: JobId) -> bool {
        self.lock().job(id).is_some()
    }

    /// Refuses a partition (list) naming one the controller does not have.
    fn check_partition(&self, partition: Option<&str>) -> Result<(), CtlError> {
        if let Some(p) = partition {
            let all = self.config.all_partitions();
            // Slurm takes a list: the job may run in any of them.
            if let Some(bad) = p.split(',').find(|x| !all.iter().any(|a| a == x)) {
                return Err(CtlError::UnknownPartition(bad.to_string(), all.join(", ")));
            }
        }
        Ok(())
    }

    /// `scontrol update JobId=...`: changes a pending job (see
    /// `Cluster::update_pending`); returns once it is on disk.
    pub async fn update_job(
        self: &Arc<Self>,
        id: JobId,
        update: &gsched_core::cluster::JobUpdate,
        admin: bool,
    ) -> Result<(), CtlError> {
        self.check_partition(update.partition.as_deref())?;
        self.operate(|c, _| c.update_pending(id, update, admin))
            .await
    }

    /// Accepts a job; returns once it is on disk.
    pub async fn submit(&self, spec: JobSpec) -> Result<JobId, CtlError> {
        self.check_partition(spec.partition.as_deref())?;
        let now = unix_now();
        let (id, ids, pending) = {
            let mut c = self.lock();
            let (id, effects) = c.submit(spec, now)?;
            if effects.is_empty() {
                // A retry of an accepted submission (same idempotency key).
                tracing::info!(job = id, "submission retried; answering with the same job");
                return Ok(id);
            }
            // One job, or every task of an array.
            let ids: Vec<JobId> = effects
                .iter()
                .filter_map(|e| match e {
                    Effect::Job { id, .. } => Some(*id),
                    _ => None,
                })
                .collect();
            let mut writes = Vec::with_capacity(2 * ids.len());
            for &j in &ids {
                // The script and environment go to the store and leave
                // memory: a launch (sent only after this write is
                // committed) and the script's readers fetch them there.
                let text = c.take_text(j);
                let mut job = c.job(j).expect("just submitted").clone();
                if let Some(text) = text {
                    job.put_text(text);
                }
                writes.push(Write::NewJob(Box::new(job)));
                writes.push(Write::Event {
                    time: now,
                    job_id: Some(j),
                    node: None,
                    kind: "submitted".into(),
                    detail: None,
                });
            }
            (id, ids, self.store.write(writes))
        };
        let ids_for_touch = ids.clone();
        if let Err(e) = pending.await {
            let mut c = self.lock();
            for j in ids {
                c.withdraw(j);
            }
            return Err(e.into());
        }
        self.touch(ids_for_touch, now);
        self.wake.notify_one();
        Ok(id)
    }

    /// Cancels a job (or signals it when `signal` is given); `by` is the
    /// uid that asked.
    pub async fn cancel(
        self: &Arc<Self>,
        id: JobId,
        signal: Option<i32>,
        by: Option<u32>,
    ) -> Result<(), CtlError> {
        self.operate(|c, now| match signal {
            Some(sig) => c.signal(id, sig),
            None => c.cancel(id, by, now),
        })
        .await
    }

    /// Runs one operation on the cluster, persists and carries out its
    /// effects, and wakes the launch loop.
    pub(crate) async fn operate(
        self: &Arc<Self>,
        op: impl FnOnce(&mut Cluster, i64) -> Result<Vec<Effect>, ClusterError>,
    ) -> Result<(), CtlError> {
        let effects = op(&mut self.lock(), unix_now())?;
        self.execute(effects).await?;
        self.wake.notify_one();
        Ok(())
    }

    /// `srun` inside job `id` starts step `name`; returns its number.
    pub async fn begin_step(
        self: &Arc<Self>,
        id: JobId,
        name: &str,
        ntasks: u32,
    ) -> Result<u32, CtlError> {
        let (step, effects) = self.lock().begin_step(id, name, ntasks, unix_now())?;
        self.execute(effects).await?;
        Ok(step)
    }

    /// A step (`srun`) begins inside job `id` with tasks on its nodes as
    /// `layout` asks: its number, and for each node of the step its tasks,
    /// the URL of its gnoded and a credential to start them there.
    pub async fn begin_wide_step(
        self: &Arc<Self>,
        id: JobId,
        name: &str,
        layout: &gsched_core::steps::LayoutRequest,
    ) -> Result<(u32, Vec<serde_json::Value>), CtlError> {
        let (nodes, run) = {
            let c = self.lock();
            let job = c
                .job(id)
                .ok_or(gsched_core::cluster::ClusterError::UnknownJob(id))?;
            let nodes = gsched_core::steps::layout(job, layout)
                .map_err(|e| gsched_core::cluster::ClusterError::Refused(format!("srun: {e}")))?;
            (nodes, job.run)
        };
        let ntasks = nodes.iter().map(|n| n.tasks.len() as u32).sum();
        let step = self.begin_step(id, name, ntasks).await?;
        let now = unix_now();
        let c = self.lock();
        let answer = nodes
            .into_iter()
            .map(|n| {
                let url = c.node(&n.name).map(|x| x.url.clone()).unwrap_or_default();
                let credential =
                    gsched_daemon::step_credential::sign(&self.key, id, run, step, &n.name, now);
                // What srun seals its request to the node with, and opens
                // the node's answers with: nothing goes out in clear.
                let seal = gsched_seal::secret(&self.key, id, run, step, &n.name);
                serde_json::json!({
                    "name": n.name,
                    "node_id": n.node_id,
                    "tasks": n.tasks,
                    "url": url,
                    "credential": credential,
                    "seal": seal,
                })
            })
            .collect();
        Ok((step, answer))
    }

    /// A step of job `id` ended.
    pub async fn end_step(
        self: &Arc<Self>,
        id: JobId,
        step: u32,
        exit_code: i32,
        signal: Option<i32>,
    ) -> Result<(), CtlError> {
        self.operate(|c, now| c.end_step(id, step, exit_code, signal, now))
            .await
    }

    /// `scontrol hold` / `scontrol release`.
    pub async fn set_held(self: &Arc<Self>, id: JobId, held: bool) -> Result<(), CtlError> {
        self.operate(|c, _| c.set_held(id, held)).await
    }

    /// An administrator drains, downs or resumes a node.
    pub async fn set_node_state(
        self: &Arc<Self>,
        name: &str,
        change: &gsched_core::cluster::NodeStateChange,
        by: &str,
    ) -> Result<(), CtlError> {
        info!(node = name, ?change, by, "node state set");
        self.operate(|c, now| c.set_node_state(name, change, by, now))
            .await
    }

    /// An administrator's MIG change on one of a node's GPUs.
    pub async fn change_mig(
        self: &Arc<Self>,
        name: &str,
        change: &gsched_core::wire::MigChange,
        by: &str,
    ) -> Result<(), CtlError> {
        info!(node = name, ?change, by, "MIG change");
        self.operate(|c, _| match (&change.layout, change.frozen) {
            (Some(layout), _) => c.order_layout(name, change.gpu, layout),
            (None, Some(frozen)) => c.set_mig_frozen(name, change.gpu, frozen),
            (None, None) => Ok(Vec::new()),
        })
        .await
    }

    /// `scontrol suspend` (`suspend`) or `scontrol resume`: the job is
    /// SUSPENDED (or RUNNING) when this returns; its nodes are asked to
    /// stop (or continue) it.
    pub async fn suspend(self: &Arc<Self>, id: JobId, suspend: bool) -> Result<(), CtlError> {
        self.operate(|c, now| {
            if suspend {
                c.suspend(id, now)
            } else {
                c.resume(id, now)
            }
        })
        .await
    }

    /// `scontrol requeue`: the job is PENDING again when this returns.
    pub async fn requeue(self: &Arc<Self>, id: JobId) -> Result<(), CtlError> {
        self.operate(|c, now| c.requeue(id, now)).await
    }

    /// A node registers: its fence timeout is checked against the node
    /// timeout (see `gsched_core::fence`) and the agreed one is returned.
    pub async fn register(
        self: &Arc<Self>,
        reg: NodeRegistration,
    ) -> Result<RegistrationReply, CtlError> {
        let timeout = Duration::from_secs(self.config.node_timeout.max(1));
        let fence = gsched_core::fence::agreed_fence_timeout(
            reg.fence_timeout_ms.map(Duration::from_millis),
            timeout,
            Duration::from_millis(reg.heartbeat_ms),
        )
        .inspect_err(|e| warn!(node = %reg.name, error = %e, "registration refused"))?;
        if fence.is_none() {
            warn!(node = %reg.name, "node does not fence itself: if it is cut off, its jobs may run on after they are requeued");
        }
        let reply = RegistrationReply {
            node_timeout_ms: timeout.as_millis() as u64,
            fence_timeout_ms: fence.map(|d| d.as_millis() as u64),
        };
        let effects = {
            let mut seen = self.last_seen.lock().unwrap_or_else(|p| p.into_inner());
            let alive = seen.get(&reg.name).is_some_and(|t| t.elapsed() < timeout);
            let mut c = self.lock();
            if let Err(e) = c.check_registration(&reg, alive) {
                warn!(node = %reg.name, instance = %reg.instance_id, error = %e, "registration refused");
                return Err(e.into());
            }
            info!(node = %reg.name, instance = %reg.instance_id, instances = reg.instances.len(),
                  running = reg.running.len(), ended = reg.ended.len(), "node registered");
            seen.insert(reg.name.clone(), Instant::now());
            c.register_node(&reg, unix_now())
        };
        self.execute(effects).await?;
        self.wake.notify_one();
        Ok(reply)
    }

    /// A node's heartbeat: renews its lease, takes its instances' use, and
    /// stops the runs it has that the controller does not own (returned as
    /// effects for the caller to carry out).
    pub fn heartbeat(&self, node: &str, hb: &Heartbeat) -> (bool, Vec<Effect>) {
        let (known, freed, effects) = {
            let mut c = self.lock();
            let known = c.is_registered_instance(node, &hb.instance_id);
            let mut freed = false;
            let mut effects = Vec::new();
            if known {
                if !hb.mps.is_empty() {
                    c.update_mps(node, &hb.mps);
                }
                freed = c.update_instance_use(node, &hb.instances);
                c.set_waiting_tasks(node, hb.waiting_tasks.clone());
                c.note_usage(node, &hb.usage, &hb.steps);
                freed |= c.node_heard(node);
                effects = c.reconcile_runs(node, &hb.running, &hb.runs);
                effects.extend(c.reconcile_suspensions(node, &hb.running, &hb.suspended));
            }
            (known, freed, effects)
        };
        if freed {
            self.wake.notify_one();
        }
        if known {
            if let (Some(rtt), Some(wait)) = (&hb.probe_round_trip, &hb.placement_wait) {
                self.metrics
                    .node_latency
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(node.to_string(), (rtt.clone(), wait.clone()));
            }
            self.touch_nodes(unix_now());
            self.last_seen
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(node.into(), Instant::now());
        }
        (known, effects)
    }

    /// Stores the task reservations and peaks a node reported.
    pub async fn tasks_reported(self: &Arc<Self>, report: TaskReport) -> Result<(), CtlError> {
        let (writes, effects) = {
            let mut c = self.lock();
            c.note_tasks_begun(&report.node, &report.records);
            let writes: Vec<Write> = report
                .records
                .into_iter()
                .filter(|r| c.job(r.job).is_some())
                .map(|record| Write::Task {
                    node: report.node.clone(),
                    record,
                })
                .collect();
            let effects: Vec<Effect> = report
                .peaks
                .iter()
                .flat_map(|(job, bytes)| c.record_peak(*job, *bytes))
                .collect();
            (writes, effects)
        };
        self.store.write(writes).await?;
        self.execute(effects).await?;
        Ok(())
    }

    pub async fn jobs_ended(self: &Arc<Self>, report: JobEndReport) -> Result<(), CtlError> {
        let mut effects = Vec::new();
        {
            let mut c = self.lock();
            for e in &report.ended {
                match c.job_ended(&report.node, e) {
                    Ok(mut fx) => effects.append(&mut fx),
                    // A repeated report (the node retried after a lost reply) is harmless.
                    Err(err) => {
                        warn!(job = e.job_id, node = %report.node, error = %err, "end report ignored")
                    }
                }
            }
        }
        self.execute(effects).await?;
        self.wake.notify_one();
        Ok(())
    }

    /// Persists the effects and then performs their RPCs. Rows are read fresh
    /// under the lock and enqueued before it is released, so the store always
    /// ends with the latest state of every job.
    pub async fn execute(self: &Arc<Self>, effects: Vec<Effect>) -> Result<(), StoreError> {
        if effects.is_empty() {
            return Ok(());
        }
        let now = unix_now();
        let mut rpcs = Vec::new();
        let pending = {
            let c = self.lock();
            let mut writes = Vec::new();
            for e in effects {
                match e {
                    Effect::Accounts => {
                        let stored = c.stored_accounts();
                        writes.push(Write::Accounts(
                            serde_json::to_string(&stored).expect("serializable"),
                        ));
                    }
                    Effect::JobSpec { id } => {
                        self.touch([id], now);
                        if let Some(j) = c.job(id) {
                            writes.push(Write::JobSpec(Box::new(j.clone())));
                        }
                    }
                    Effect::Job { id, event } => {
                        self.touch([id], now);
                        if let Some(j) = c.job(id) {
                            writes.push(Write::JobState(Box::new(JobRuntime::of(j))));
                            writes.push(Write::Event {
                                time: now,
                                job_id: Some(id),
                                node: j.node.clone(),
                                kind: j.state.as_str().to_string(),
                                detail: Some(event),
                            });
                        }
                    }
                    Effect::Node { name } => {
                        self.touch_nodes(now);
                        if let Some(n) = c.node(&name) {
                            writes.push(Write::Node(Box::new(n.clone())));
                            writes.push(Write::Event {
                                time: now,
                                job_id: None,
                                node: Some(name),
                                kind: match (n.up, n.admin.as_ref().map(|a| a.state)) {
                                    (false, _) | (true, Some(AdminState::Down)) => "NODE_DOWN",
                                    (true, Some(AdminState::Drain)) => "NODE_DRAIN",
                                    (true, None) => "NODE_UP",
                                }
                                .into(),
                                detail: n.admin.as_ref().map(|a| a.reason.clone()),
                            });
                        }
                    }
                    Effect::Launch { job, node, early } => {
                        let (Some(j), Some(n)) = (c.job(job), c.node(&node)) else {
                            continue;
                        };
                        // Once per job (a job on several nodes has a
                        // launch for each).
                        if let (Some(start), false) = (j.start_time, j.is_sister(&node)) {
                            self.metrics
                                .queue_wait
                                .observe((start - j.submit_time).max(0) as f64);
                        }
                        // Its batch node's instances, or a sister's.
                        let instances = j
                            .instances_on(&node)
                            .iter()
                            .filter_map(|u| {
                                n.instances
                                    .iter()
                                    .find(|s| &s.instance.uuid == u)
                                    .map(|s| s.instance.clone())
                            })
                            .collect();
                        let learned = c.learned(job);
                        let req = LaunchRequest {
                            job: j.clone(),
                            instances,
                            cluster: self.config.cluster_name.clone(),
                            partition: j
                                .spec
                                .partition
                                .clone()
                                .unwrap_or_else(|| self.config.partition.clone()),
                            controller_url: self.url.clone(),
                            learned_footprint_mib: learned.mib,
                            learned_gpu_share: learned.share,
                            job_token: self.job_token(j),
                            early,
                            time_quota: c.time_quota(j),
                            gpu_mem_cap_mib: c.gpu_mem_cap(j),
                        };
                        rpcs.push(Rpc::Launch {
                            url: n.url.clone(),
                            node: node.clone(),
                            req: Box::new(req),
                        });
                    }
                    Effect::Signal {
                        job,
                        node,
                        signal,
                        cancel,
                    } => {
                        if let Some(n) = c.node(&node) {
                            rpcs.push(Rpc::Signal {
                                url: n.url.clone(),
                                job,
                                req: SignalRequest {
                                    signal,
                                    cancel,
                                    run: None,
                                },
                            });
                        }
                    }
                    Effect::Reshape { node, order } => {
                        if let Some(n) = c.node(&node) {
                            writes.push(Write::Event {
                                time: now,
                                job_id: None,
                                node: Some(node.clone()),
                                kind: "RESHAPE".into(),
                                detail: Some(format!(
                                    "gpu {}: retire {} for {}",
                                    order.gpu,
                                    order.retire.join(","),
                                    order
                                        .create
                                        .iter()
                                        .map(|s| format!("{}@{}", s.profile, s.start))
                                        .collect::<Vec<_>>()
                                        .join(",")
                                )),
                            });
                            rpcs.push(Rpc::Reshape {
                                url: n.url.clone(),
                                node,
                                req: gsched_core::wire::ReshapeRequest {
                                    seq: order.seq,
                                    gpu: order.gpu,
                                    retire: order.retire,
                                    create: order.create,
                                },
                            });
                        }
                    }
                    Effect::Drain {
                        node,
                        instances,
                        seq,
                    } => {
                        if let Some(n) = c.node(&node) {
                            rpcs.push(Rpc::Drain {
                                url: n.url.clone(),
                                node,
                                req: gsched_core::wire::DrainRequest { instances, seq },
                            });
                        }
                    }
                    Effect::Suspend {
                        job,
                        node,
                        run,
                        suspend,
                    } => {
                        if let Some(n) = c.node(&node) {
                            rpcs.push(Rpc::Suspend {
                                url: n.url.clone(),
                                job,
                                req: SuspendRequest { run, suspend },
                            });
                        }
                    }
                    Effect::StopRun { job, node, run } => {
                        if let Some(n) = c.node(&node) {
                            writes.push(Write::Event {
                                time: now,
                                job_id: Some(job),
                                node: Some(node.clone()),
                                kind: "STOP_RUN".into(),
                                detail: Some(match run {
                                    Some(r) => format!("run {r} is not the controller's; killed"),
                                    None => "a run that is not the controller's; killed".into(),
                                }),
                            });
                            rpcs.push(Rpc::Signal {
                                url: n.url.clone(),
                                job,
                                req: SignalRequest {
                                    signal: nix::sys::signal::Signal::SIGKILL as i32,
                                    cancel: true,
                                    run,
                                },
                            });
                        }
                    }
                }
            }
            self.store.write(writes)
        };
        pending.await?;
        for rpc in rpcs {
            let this = Arc::clone(self);
            tokio::spawn(async move { this.send(rpc).await });
        }
        Ok(())
    }

    // Boxed: `send` and `execute` call each other, and a boxed `Send` future
    // breaks the cycle for the compiler.
    fn send(
        self: Arc<Self>,
        rpc: Rpc,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
        Box::pin(self.send_now(rpc))
    }

    async fn send_now(self: Arc<Self>, rpc: Rpc) {
        match rpc {
            Rpc::Launch { url, node, req } => self.send_launch(url, node, req).await,
            Rpc::Drain { url, node, req } => self.send_drain(url, node, req).await,
            Rpc::Reshape { url, node, req } => self.send_reshape(url, node, req).await,
            Rpc::Suspend { url, job, req } => {
                // Sent once: the node's heartbeats say whether it took it,
                // and `Cluster::reconcile_suspensions` asks again if not.
                let res = self
                    .peer
                    .post(&format!("{url}/v1/jobs/{job}/suspend"), &req)
                    .await;
                match res {
                    Ok(r) if r.is_success() => {}
                    Ok(r) => {
                        warn!(job, status = %r.status, suspend = req.suspend, "node did not suspend or resume the job")
                    }
                    Err(e) => {
                        warn!(job, error = %e, "node unreachable to suspend or resume the job")
                    }
                }
            }
            Rpc::Signal { url, job, req } => self.send_signal(url, job, req).await,
        }
    }

    /// Delivers a signal or a cancel until the node confirms it, as long as
    /// the job runs: a cancel that cannot reach its node (a flood of
    /// connections, a restart) is sent again with backoff, never dropped
    /// while `gcancel` said it was done. A signal can also overtake the
    /// launch it follows: the node then does not know the job yet (404),
    /// so that is tried again for a little while.
    async fn send_signal(&self, url: String, job: JobId, req: SignalRequest) {
        let running = || {
            self.lock()
                .job(job)
                .is_some_and(|j| j.state == gsched_core::JobState::Running)
        };
        let mut backoff = Duration::from_millis(250);
        let mut unknown = 0;
        loop {
            let res = self
                .peer
                .post(&format!("{url}/v1/jobs/{job}/signal"), &req)
                .await;
            match res {
                Ok(r) if r.is_success() => return,
                Ok(r) if r.status == reqwest::StatusCode::NOT_FOUND && unknown < 19 => {
                    unknown += 1;
                    if !running() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                Ok(r) => return warn!(job, status = %r.status, "node did not signal the job"),
                Err(e) => {
                    if !running() {
                        return;
                    }
                    warn!(job, error = %e, retry_in = ?backoff, "node unreachable for a signal; will send it again");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(10));
                }
            }
        }
    }

    /// Delivers a launch, sending it again while its delivery is in doubt
    /// (a launch is idempotent for its run); what each answer means is
    /// `Cluster::launch_answered`'s.
    async fn send_launch(self: Arc<Self>, url: String, node: String, mut req: Box<LaunchRequest>) {
        let (id, run) = (req.job.id, req.job.run);
        let span = tracing::info_span!(
            "launch",
            job = id,
            run,
            instance = gsched_core::gpu::uuid_list(&req.instances)
        );
        let missing = match self
            .fill_text(&node, &mut req)
            .instrument(span.clone())
            .await
        {
            TextFetch::Ready => None,
            TextFetch::Settled => return,
            TextFetch::Missing(why) => Some(why),
        };
        let mut backoff = Duration::from_millis(500);
        let mut in_doubt = false;
        let effects = loop {
            if in_doubt && !self.lock().awaits_launch_on(id, run, &node) {
                // Settled meanwhile (confirmed, requeued or expired).
                return;
            }
            let answer = match &missing {
                Some(why) => LaunchAnswer::Failed(why.clone()),
                None => self.launch_once(&url, &req).instrument(span.clone()).await,
            };
            span.in_scope(|| match &answer {
                LaunchAnswer::Taken => {}
                LaunchAnswer::InDoubt => {
                    warn!(retry_in = ?backoff, "launch in doubt; will send it again")
                }
                other => warn!(answer = ?other, in_doubt, "launch not taken"),
            });
            let next = self
                .lock()
                .launch_answered(id, run, &node, answer, in_doubt, unix_now());
            match next {
                LaunchNext::Done(effects) => break effects,
                LaunchNext::LeaveToNode => {
                    span.in_scope(|| {
                        warn!("the node's registration, heartbeats or lease decide this launch")
                    });
                    return;
                }
                LaunchNext::Retry => {
                    in_doubt = true;
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(10));
                }
            }
        };
        if let Err(e) = self.execute(effects).await {
            warn!(job = id, error = %e, "could not record the launch's outcome");
        }
        self.wake.notify_one();
    }

    /// One send of a launch, and what its answer says.
    async fn launch_once(&self, url: &str, req: &LaunchRequest) -> LaunchAnswer {
        let res = self.peer.post(&format!("{url}/v1/jobs"), req).await;
        let r = match res {
            Ok(r) if r.is_success() => return LaunchAnswer::Taken,
            Ok(r) => r,
            Err(e) if e.is_connect() => {
                warn!(error = %e, "node unreachable");
                return LaunchAnswer::NotDelivered;
            }
            Err(e) => {
                // No answer, or one from something that could not prove it
                // is the node (it got only ciphertext): the node may still
                // come back, so the launch stays in doubt and is resent.
                warn!(error = %e, "no proven answer to the launch");
                return LaunchAnswer::InDoubt;
            }
        };
        let status = r.status;
        let why = r.error_text();
        match status {
            reqwest::StatusCode::SERVICE_UNAVAILABLE | reqwest::StatusCode::CONFLICT => {
                LaunchAnswer::NotNow(why)
            }
            reqwest::StatusCode::FORBIDDEN => LaunchAnswer::Refused(why),
            _ => LaunchAnswer::Failed(why),
        }
    }

    /// Pushes a node's drain set, retrying while it is still the newest
    /// for that node (a newer one, or the node going down, ends it; a node
    /// that registers again is sent its set afresh).
    async fn send_drain(self: Arc<Self>, url: String, node: String, req: DrainRequest) {
        let mut backoff = Duration::from_millis(250);
        loop {
            let res = self.peer.post(&format!("{url}/v1/drain"), &req).await;
            let error = match res {
                Ok(r) if r.is_success() => return,
                Ok(r) => format!("node answered {}", r.status),
                Err(e) => e.to_string(),
            };
            warn!(node = %node, seq = req.seq, %error, "could not push the drain set; will retry");
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(5));
            if !self.lock().drain_is_current(&node, req.seq) {
                return;
            }
        }
    }

    /// Sends a reshape order to its node (a node answers a resend of an
    /// order it took as it did the first). One the node refuses is settled
    /// as undone (its instances are in use again); one that cannot reach
    /// the node is sent again while it is still in flight (a node that
    /// registers again forgets it).
    async fn send_reshape(
        self: Arc<Self>,
        url: String,
        node: String,
        req: gsched_core::wire::ReshapeRequest,
    ) {
        let mut backoff = Duration::from_millis(250);
        loop {
            let res = self.peer.post(&format!("{url}/v1/reshape"), &req).await;
            let refused = match res {
                Ok(r) if r.is_success() => return,
                Ok(r) if r.status.is_client_error() => {
                    Some(format!("node refused it: {}", r.error_text()))
                }
                Ok(r) => {
                    warn!(node = %node, seq = req.seq, status = %r.status, "could not send the reshape; will retry");
                    None
                }
                Err(e) => {
                    warn!(node = %node, seq = req.seq, error = %e, "could not send the reshape; will retry");
                    None
                }
            };
            if let Some(why) = refused {
                warn!(node = %node, seq = req.seq, %why, "reshape not done");
                let done = self.lock().reshape_done(&node, req.seq, &[], Vec::new());
                if let Ok(effects) = done {
                    if let Err(e) = self.execute(effects).await {
                        warn!(error = %e, "could not record the undone reshape");
                    }
                }
                return;
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(5));
            let in_flight = self
                .lock()
                .reshapes_on(&node)
                .iter()
                .any(|o| o.seq == req.seq);
            if !in_flight {
                return;
            }
        }
    }

    /// A node reports a reshape carried out (or stopped short).
    pub async fn reshaped(
        self: &Arc<Self>,
        report: gsched_core::wire::ReshapeReport,
    ) -> Result<(), CtlError> {
        if let Some(e) = &report.error {
            warn!(node = %report.node, seq = report.seq, error = %e, "a reshape stopped short");
        } else {
            info!(node = %report.node, seq = report.seq, removed = report.removed.len(), added = report.added.len(), "reshape done");
        }
        let effects =
            self.lock()
                .reshape_done(&report.node, report.seq, &report.removed, report.added)?;
        self.execute(effects).await?;
        self.wake.notify_one();
        Ok(())
    }

    /// The cluster's GPU use now.
    pub fn sample(&self, now: i64) -> UtilSample {
        let c = self.lock();
        let mut s = UtilSample {
            time: now,
            memory_total_mib: 0,
            memory_reserved_mib: 0,
            memory_used_mib: 0,
            isolated_instances: 0,
            shared_tasks: 0,
            running_jobs: c.running_count() as u32,
            pending_jobs: c.pending_count() as u32,
        };
        for n in c.nodes().filter(|n| n.up) {
            for i in &n.instances {
                s.memory_total_mib += i.instance.memory_mib;
                if i.holder().is_some() {
                    s.isolated_instances += 1;
                }
                s.memory_reserved_mib += i.held_bytes().div_ceil(1 << 20);
                s.memory_used_mib += i.used_bytes.unwrap_or(0).div_ceil(1 << 20);
                s.shared_tasks += i.active_tasks;
            }
        }
        s
    }

    /// The samples of the last hour, oldest first.
    pub fn utilization(&self) -> Vec<UtilSample> {
        self.utilization
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .copied()
            .collect()
    }

    /// Samples the cluster's use every UTIL_INTERVAL seconds.
    pub async fn utilization_loop(self: Arc<Self>) {
        let mut tick = tokio::time::interval(Duration::from_secs(UTIL_INTERVAL));
        loop {
            tick.tick().await;
            let s = self.sample(unix_now());
            let mut u = self.utilization.lock().unwrap_or_else(|p| p.into_inner());
            if u.len() == UTIL_SAMPLES {
                u.pop_front();
            }
            u.push_back(s);
        }
    }

    /// Lets finished jobs older than `min_job_age` leave memory (they stay in
    /// the database, where accounting reads them). Off when it is 0.
    pub async fn retention_loop(self: Arc<Self>) {
        let age = self.config.min_job_age;
        if age == 0 {
            return;
        }
        let mut tick = tokio::time::interval(Duration::from_secs((age / 2).clamp(1, 30)));
        loop {
            tick.tick().await;
            let gone = self.lock().purge_finished(unix_now(), age);
            if gone.is_empty() {
                continue;
            }
            let mut changed = self.changed.lock().unwrap_or_else(|p| p.into_inner());
            for id in &gone {
                changed.remove(id);
            }
            tracing::debug!(jobs = gone.len(), "finished jobs left memory");
        }
    }

    /// The launch loop: a pass whenever something changed, and at least once a second.
    pub async fn scheduler_loop(self: Arc<Self>) {
        loop {
            tokio::select! {
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
            let pass = Instant::now();
            let effects = self.lock().schedule(unix_now());
            self.metrics
                .scheduler_pass
                .observe(pass.elapsed().as_secs_f64());
            if let Err(e) = self.execute(effects).await {
                warn!(error = %e, "could not persist launch decisions");
            }
        }
    }

    /// Marks nodes down that stopped sending heartbeats, and loses the jobs of
    /// nodes that never came back after a controller restart.
    pub async fn liveness_loop(self: Arc<Self>) {
        let timeout = Duration::from_secs(self.config.node_timeout.max(1));
        let mut tick = tokio::time::interval((timeout / 3).max(Duration::from_millis(200)));
        loop {
            tick.tick().await;
            let stale: Vec<String> = {
                let seen = self.last_seen.lock().unwrap_or_else(|p| p.into_inner());
                let c = self.lock();
                c.nodes()
                    .filter(|n| n.up || !n.running.is_empty())
                    .filter(|n| {
                        seen.get(&n.name).copied().unwrap_or(self.started).elapsed() > timeout
                    })
                    .map(|n| n.name.clone())
                    .collect()
            };
            let expired = self
                .lock()
                .expire_launches(unix_now(), timeout.as_secs() as i64);
            if let Err(e) = self.execute(expired).await {
                warn!(error = %e, "could not persist expired launches");
            }
            for name in stale {
                warn!(node = %name, "node missed its heartbeats; marking it down");
                let effects = self.lock().node_down(&name, unix_now());
                if let Err(e) = self.execute(effects).await {
                    warn!(error = %e, "could not persist node failure");
                }
                self.wake.notify_one();
            }
        }
    }
}

enum Rpc {
    Launch {
        url: String,
        node: String,
        req: Box<LaunchRequest>,
    },
    Drain {
        url: String,
        node: String,
        req: DrainRequest,
    },
    Reshape {
        url: String,
        node: String,
        req: gsched_core::wire::ReshapeRequest,
    },
    Signal {
        url: String,
        job: JobId,
        req: SignalRequest,
    },
    Suspend {
        url: String,
        job: JobId,
        req: SuspendRequest,
    },
}
