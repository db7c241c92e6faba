//! The controller: a [`Cluster`] behind a lock, the store, and the loops that
//! launch jobs and watch nodes. Decisions are the cluster's; this module only
//! persists their effects and carries out their RPCs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gsched_core::cluster::{Cluster, ClusterError, Effect};
use gsched_core::job::{JobId, JobSpec};
use gsched_core::probe::TaskReport;
use gsched_core::wire::{Heartbeat, JobEndReport, NodeRegistration, RegistrationReply};
use gsched_daemon::peer::{Direction, PeerAuth};
use tokio::sync::Notify;
use tracing::{info, warn};

use crate::auth::Authority;
use crate::config::CtldConfig;
use crate::node_client::NodeClient;
use crate::store::{ControllerStore, StoreError, Write};
use node_rpc::Rpc;

mod effects;
mod job_text;
mod loops;
pub mod metrics;
mod node_rpc;
#[cfg(test)]
pub(crate) mod tests;

pub use loops::{UtilSample, UTIL_INTERVAL, UTIL_SAMPLES};

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
    #[error(transparent)]
    Version(#[from] gsched_core::version::VersionMismatch),
    #[error(transparent)]
    Followed(#[from] gsched_core::leadership::FollowedError),
}

pub struct Controller {
    cluster: Mutex<Cluster>,
    pub store: Arc<dyn ControllerStore>,
    pub config: CtldConfig,
    pub key: String,
    /// Base URL clients and jobs use to reach this controller.
    pub url: String,
    /// Token signing and administrators.
    pub auth: Authority,
    /// The local unix socket's path.
    pub socket: std::path::PathBuf,
    /// Histograms for `/metrics`.
    pub metrics: metrics::Metrics,
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
    /// The calls to the nodes (sealed requests, or a test's fake nodes).
    nodes: Arc<dyn NodeClient>,
    /// Opens the nodes' sealed requests to `/internal/...`.
    pub peer_auth: Arc<PeerAuth>,
    /// This controller's leadership (none: alone on its store, tests).
    tenure: std::sync::OnceLock<Arc<crate::leader::Tenure>>,
}

impl Controller {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        cluster: Cluster,
        store: Arc<dyn ControllerStore>,
        config: CtldConfig,
        key: String,
        url: String,
        auth: Authority,
        socket: std::path::PathBuf,
        nodes: Arc<dyn NodeClient>,
    ) -> Arc<Controller> {
        Arc::new(Controller {
            cluster: Mutex::new(cluster),
            store,
            config,
            url,
            auth,
            socket,
            metrics: metrics::Metrics::default(),
            utilization: Mutex::new(std::collections::VecDeque::new()),
            wake: Notify::new(),
            changed: Mutex::new(HashMap::new()),
            nodes_changed: std::sync::atomic::AtomicI64::new(unix_now()),
            last_seen: Mutex::new(HashMap::new()),
            started: Instant::now(),
            nodes,
            peer_auth: PeerAuth::new(&key, Direction::ToController),
            key,
            tenure: std::sync::OnceLock::new(),
        })
    }

    /// Sets the leadership this controller acts under (once).
    pub fn set_tenure(&self, tenure: Arc<crate::leader::Tenure>) {
        let _ = self.tenure.set(tenure);
    }

    /// The epoch this controller leads in (0: alone on its store).
    pub fn epoch(&self) -> i64 {
        self.tenure.get().map_or(0, |t| t.epoch)
    }

    /// Whether this controller may still act as the leader (see
    /// [`crate::leader::Tenure::acting`]); always, alone on its store.
    pub fn acting(&self) -> bool {
        self.tenure.get().is_none_or(|t| t.acting())
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

    /// Refuses a job token once its job has ended, or was cancelled (its
    /// processes, while they are being ended, act for no one), or is no
    /// longer known. A requeued job's token stays good: the old run may
    /// still be ending, and it acts for the same user on the same job.
    pub fn check_job_token(&self, job: JobId) -> Result<(), crate::auth::AuthError> {
        let c = self.lock();
        match c.job(job) {
            Some(j) if !j.shown_state().is_final() => Ok(()),
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

    /// Returns once the cluster state can be taken: what the service
    /// watchdog asks (a wedged controller never returns).
    pub fn alive(&self) {
        drop(self.lock());
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
    pub async fn submit(self: &Arc<Self>, spec: JobSpec) -> Result<JobId, CtlError> {
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
                    Effect::Submitted { id } => Some(*id),
                    _ => None,
                })
                .collect();
            (id, ids, self.carry_all(&mut c, effects, now))
        };
        if let Err(e) = self.finish(pending).await {
            let mut c = self.lock();
            let mut changed = self.changed.lock().unwrap_or_else(|p| p.into_inner());
            for j in ids {
                c.withdraw(j);
                changed.remove(&j);
            }
            return Err(e.into());
        }
        self.wake.notify_one();
        Ok(id)
    }

    /// Cancels a job (or signals it when `signal` is given); `by` is the
    /// uid that asked.
    pub async fn cancel(
        self: &Arc<Self>,
        id: JobId,
        signal: Option<(i32, gsched_core::outcome::SignalScope)>,
        by: Option<u32>,
    ) -> Result<(), CtlError> {
        self.operate(|c, now| match signal {
            Some((sig, scope)) => c.signal(id, sig, scope),
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
    ) -> Result<(u32, Vec<gsched_core::steps::StepNodeAnswer>), CtlError> {
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
                gsched_core::steps::StepNodeAnswer {
                    name: n.name,
                    node_id: n.node_id,
                    tasks: n.tasks,
                    url,
                    credential,
                    seal,
                }
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
        let node = format!("node {}", reg.name);
        gsched_core::version::Release::stated(&reg.release)
            .and_then(|peer| {
                use gsched_core::version::{check_peer, check_protocol, Release, PROTOCOL};
                check_peer(Release::this(), "the controller", peer, &node)?;
                check_protocol(PROTOCOL, "the controller", reg.protocol, &node)
            })
            .inspect_err(|e| warn!(node = %reg.name, error = %e, "registration refused"))?;
        let fence = gsched_core::fence::agreed_fence_timeout(
            reg.fence_timeout_ms.map(Duration::from_millis),
            timeout,
            Duration::from_millis(reg.heartbeat_ms),
        )
        .inspect_err(|e| warn!(node = %reg.name, error = %e, "registration refused"))?;
        if let Some(tenure) = self.tenure.get() {
            use gsched_core::leadership::FollowedError;
            gsched_core::leadership::check_followed(&reg.name, reg.followed_epoch, tenure.epoch)
                .inspect_err(|e| match e {
                    FollowedError::Outranked(o) => tenure.outranked(o),
                    FollowedError::Implausible { .. } => {
                        warn!(node = %reg.name, error = %e, "registration refused")
                    }
                })?;
        }
        if fence.is_none() {
            warn!(node = %reg.name, "node does not fence itself: if it is cut off, its jobs may run on after they are requeued");
        }
        let reply = RegistrationReply {
            node_timeout_ms: timeout.as_millis() as u64,
            fence_timeout_ms: fence.map(|d| d.as_millis() as u64),
            release: gsched_core::version::RELEASE.into(),
            epoch: self.epoch(),
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

    /// A node's heartbeat: renews its lease, takes its instances' use, its
    /// waiting tasks and its room for shared jobs, and stops the runs it
    /// has that the controller does not own. Returns the effects for the
    /// caller to carry out: those stops, and the reasons of shared jobs
    /// that began or stopped waiting for a placement.
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
                effects.extend(c.set_waiting_tasks(node, hb.waiting_tasks.clone(), unix_now()));
                freed |= c.set_host_room(node, hb.shared_room, hb.mem_available_mib);
                c.note_usage(node, &hb.usage, &hb.steps);
                freed |= c.node_heard(node);
                effects.extend(c.reconcile_runs(node, &hb.running, &hb.runs));
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
}
