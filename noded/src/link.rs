//! The node's side of the controller protocol: registration, heartbeats, and
//! reports of ended jobs, retried until the controller has them.

use std::sync::Arc;
use std::time::Duration;

use gsched_core::wire::{
    Heartbeat, HeartbeatReply, JobEndReport, JobEnded, NodeRegistration, RegistrationReply,
};
use tokio::sync::mpsc;
use tracing::{info, warn};

use crate::fence::NodeLease;
use crate::launcher::Launcher;
use crate::mps::MpsSupervisor;

pub struct ControllerLink {
    /// What the node tells the controller about itself; `running` and
    /// `ended` are filled in at each registration.
    pub identity: NodeRegistration,
    /// The controllers, in the order given (`--controller URL1,URL2`): one
    /// leads, the others stand by.
    controllers: Vec<String>,
    /// The one calls go to; the next is tried when it cannot be reached
    /// or cannot prove it holds the cluster key (a standby answers
    /// unsealed, naming the leader).
    current: std::sync::atomic::AtomicUsize,
    /// Set when calls moved to another controller: the node registers
    /// with it before anything else.
    moved: std::sync::atomic::AtomicBool,
    pub heartbeat: Duration,
    pub launcher: Arc<Launcher>,
    /// Renewed by every registration and heartbeat the controller answers.
    pub lease: Arc<NodeLease>,
    /// The node's MPS daemons, whose state goes with every message.
    pub mps: Option<Arc<MpsSupervisor>>,
    /// The probe server, whose per-instance use goes with heartbeats.
    pub probe: Option<Arc<crate::probe::ProbeServer>>,
    /// The node's instances now (re-partitions change them): what a
    /// registration reports.
    inventory: Option<Arc<std::sync::RwLock<Vec<gsched_core::gpu::Instance>>>>,
    /// Sealed requests to the controller (`gsched_daemon::peer`).
    peer: gsched_daemon::peer::PeerClient,
}

/// Why the controller did not take a call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ControllerError {
    pub message: String,
    /// The controller answered and said no (4xx), as opposed to not
    /// answering: asking again at once would get the same answer.
    pub refused: bool,
}

impl From<String> for ControllerError {
    fn from(message: String) -> Self {
        ControllerError {
            message,
            refused: false,
        }
    }
}

impl From<&str> for ControllerError {
    fn from(why: &str) -> Self {
        ControllerError::from(why.to_string())
    }
}

impl ControllerLink {
    pub fn new(
        identity: NodeRegistration,
        controller: String,
        key: String,
        heartbeat: Duration,
        launcher: Arc<Launcher>,
        lease: Arc<NodeLease>,
        http: reqwest::Client,
    ) -> Self {
        ControllerLink {
            identity,
            controllers: crate::config::controller_list(&controller),
            current: Default::default(),
            moved: Default::default(),
            heartbeat,
            launcher,
            lease,
            mps: None,
            probe: None,
            inventory: None,
            peer: gsched_daemon::peer::PeerClient::new(
                http,
                &key,
                gsched_daemon::peer::Direction::ToController,
            ),
        }
    }

    /// Registers the instances `inventory` holds at the time.
    pub fn with_inventory(
        mut self,
        inventory: Arc<std::sync::RwLock<Vec<gsched_core::gpu::Instance>>>,
    ) -> Self {
        self.inventory = Some(inventory);
        self
    }

    /// Reports each reshape that comes from the reshaper, each on its own
    /// (a report being retried does not hold up the next).
    pub async fn report_reshapes(
        self: Arc<Self>,
        mut reports: tokio::sync::mpsc::UnboundedReceiver<gsched_core::wire::ReshapeReport>,
    ) {
        while let Some(report) = reports.recv().await {
            tokio::spawn(Arc::clone(&self).report_reshape(report));
        }
    }

    /// Tells the controller what a reshape did, until it has heard it (or
    /// the node registers again, which reports the instances anyway).
    pub async fn report_reshape(self: Arc<Self>, report: gsched_core::wire::ReshapeReport) {
        let mut backoff = Duration::from_millis(250);
        for _ in 0..20 {
            match self.post("/internal/v1/nodes/reshaped", &report).await {
                Ok(_) => return,
                Err(e) => {
                    warn!(seq = report.seq, error = %e, "could not report a reshape; will retry");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
            }
        }
        warn!(
            seq = report.seq,
            "gave up reporting a reshape; the next registration reports the instances"
        );
    }

    /// The controller calls go to now.
    pub fn controller(&self) -> &str {
        let i = self.current.load(std::sync::atomic::Ordering::SeqCst);
        &self.controllers[i % self.controllers.len()]
    }

    /// Moves calls on from controller `from` to the next in the list
    /// (unless another call moved them already).
    fn move_on(&self, from: usize) {
        use std::sync::atomic::Ordering;
        let next = (from + 1) % self.controllers.len();
        if next != from
            && self
                .current
                .compare_exchange(from, next, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        {
            self.moved.store(true, Ordering::SeqCst);
            info!(controller = %self.controllers[next], "trying the next controller");
        }
    }

    /// One sealed request; only a proven, successful answer is `Ok`. A
    /// controller that cannot be reached or proves nothing (a standby) is
    /// left for the next one in the list.
    async fn post<T: serde::Serialize>(
        &self,
        path: &str,
        body: &T,
    ) -> Result<gsched_daemon::peer::PeerReply, ControllerError> {
        let at = self.current.load(std::sync::atomic::Ordering::SeqCst) % self.controllers.len();
        let base = &self.controllers[at];
        let r = match self.peer.post(&format!("{base}{path}"), body).await {
            Ok(r) => r,
            Err(e) => {
                self.move_on(at);
                return Err(ControllerError::from(format!("controller {base}: {e}")));
            }
        };
        if r.is_success() {
            Ok(r)
        } else {
            Err(ControllerError {
                message: format!("controller answered {}: {}", r.status, r.error_text()),
                refused: (400..500).contains(&r.status.as_u16()),
            })
        }
    }

    /// Reports shared-task use with every heartbeat.
    pub fn with_probe(mut self, probe: Arc<crate::probe::ProbeServer>) -> Self {
        self.probe = Some(probe);
        self
    }

    /// Sends reservation records and process peaks to the controller, in
    /// batches, retrying until it has them.
    pub async fn report_tasks(self: Arc<Self>, events: Arc<crate::probe::TaskEvents>) {
        use crate::probe::TaskEvent;
        use gsched_core::probe::TaskReport;
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let batch = events.take();
            if batch.is_empty() {
                continue;
            }
            let mut report = TaskReport {
                node: self.identity.name.clone(),
                ..Default::default()
            };
            for e in batch {
                match e {
                    TaskEvent::Record(r) => report.records.push(r),
                    TaskEvent::Peak(job, bytes) => report.peaks.push((job, bytes)),
                }
            }
            loop {
                match self.post("/internal/v1/tasks", &report).await {
                    Ok(_) => break,
                    Err(e) => {
                        warn!(error = %e, records = report.records.len(), "could not report task reservations; will retry");
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                }
            }
        }
    }

    /// Reports MPS state with every heartbeat and registration.
    pub fn with_mps(mut self, mps: Arc<MpsSupervisor>) -> Self {
        self.mps = Some(mps);
        self
    }

    fn mps_states(&self) -> std::collections::BTreeMap<String, gsched_core::gpu::MpsState> {
        self.mps
            .as_ref()
            .map(|m| m.status().into_iter().map(|(k, v)| (k, v.state)).collect())
            .unwrap_or_default()
    }

    async fn register(&self, ended: &[JobEnded]) -> Result<(), ControllerError> {
        let runs = self.launcher.running_runs();
        let mut reg = NodeRegistration {
            running: runs.keys().copied().collect(),
            runs,
            ended: ended.to_vec(),
            followed_epoch: self.lease.leader.highest(),
            ..self.identity.clone()
        };
        if let Some(inv) = &self.inventory {
            reg.instances = inv.read().unwrap_or_else(|p| p.into_inner()).clone();
        }
        if let Some(mps) = &self.mps {
            let now = mps.status();
            for i in &mut reg.instances {
                if let Some(m) = now.get(&i.uuid) {
                    i.mps = Some(m.clone());
                }
            }
        }
        let sent = crate::fence::now();
        if let Some(p) = &self.probe {
            // The controller pushes its drain sets afresh after this.
            p.reset_drain_seq();
        }
        let r = self.post("/internal/v1/nodes/register", &reg).await?;
        let reply: RegistrationReply = r.json().map_err(|e| {
            ControllerError::from(format!(
                "the controller's registration answer is unreadable: {e}"
            ))
        })?;
        if !reply.release.is_empty() {
            tracing::info!(release = %reply.release, epoch = reply.epoch, "the controller's release");
        }
        self.lease.leader.learn(reply.epoch);
        self.lease
            .set_fence_after(reply.fence_timeout_ms.map(Duration::from_millis));
        self.lease.renewed(sent);
        Ok(())
    }

    fn acknowledged(&self, ended: &mut Vec<JobEnded>, n: usize) {
        for e in ended.drain(..n) {
            self.launcher.forget(&e);
        }
    }

    /// Runs for the life of the daemon.
    pub async fn run(
        self: Arc<Self>,
        mut ended_rx: mpsc::UnboundedReceiver<JobEnded>,
        mut pending: Vec<JobEnded>,
    ) {
        let mut registered = false;
        // Doubles while the controller refuses the registration (this
        // node's release, its fence timeout: an administrator must act),
        // up to 30 s; a controller that does not answer is asked every
        // second, so a restarted one has its nodes back at once.
        let mut retry = Duration::from_secs(1);
        let mut tick = tokio::time::interval(self.heartbeat);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            while let Ok(e) = ended_rx.try_recv() {
                pending.push(e);
            }
            if self.moved.swap(false, std::sync::atomic::Ordering::SeqCst) {
                registered = false;
            }
            if !registered {
                match self.register(&pending).await {
                    Ok(()) => {
                        info!(controller = %self.controller(), "registered with the controller");
                        registered = true;
                        retry = Duration::from_secs(1);
                        let n = pending.len();
                        self.acknowledged(&mut pending, n);
                    }
                    Err(e) => {
                        warn!(error = %e, retry_secs = retry.as_secs(), "registration failed; retrying");
                        tokio::time::sleep(retry).await;
                        retry = if e.refused {
                            (retry * 2).min(Duration::from_secs(30))
                        } else {
                            Duration::from_secs(1)
                        };
                        continue;
                    }
                }
            }
            if !pending.is_empty() {
                let report = JobEndReport {
                    node: self.identity.name.clone(),
                    ended: pending.clone(),
                };
                match self.post("/internal/v1/jobs/ended", &report).await {
                    Ok(_) => {
                        let n = report.ended.len();
                        self.acknowledged(&mut pending, n);
                    }
                    Err(e) => {
                        warn!(error = %e, jobs = pending.len(), "could not report ended jobs; will retry");
                        tokio::time::sleep(Duration::from_millis(500)).await;
                        registered = false;
                        continue;
                    }
                }
            }
            tokio::select! {
                Some(e) = ended_rx.recv() => pending.push(e),
                _ = tick.tick() => {
                    let latency = self.probe.as_ref().map(|p| p.latency());
                    // One snapshot: each job with its run.
                    let runs = self.launcher.running_runs();
                    let waiting_tasks = self.probe.as_ref().map(|p| p.waiting_tasks()).unwrap_or_default();
                    let hb = Heartbeat {
                        instance_id: self.identity.instance_id.clone(),
                        running: runs.keys().copied().collect(),
                        runs,
                        suspended: self.launcher.suspended_ids(),
                        mps: self.mps_states(),
                        instances: self.probe.as_ref().map(|p| p.usage()).unwrap_or_default(),
                        tasks_waiting: waiting_tasks.len() as u32,
                        waiting_tasks,
                        probe_round_trip: latency.as_ref().map(|l| l.0.clone()),
                        placement_wait: latency.map(|l| l.1),
                        usage: self.launcher.usage_so_far(),
                        steps: self.launcher.steps_so_far(),
                        shared_room: self.probe.as_ref().and_then(|p| p.room_for_newcomers()),
                        mem_available_mib: crate::memory_available_mib(),
                    };
                    let path = format!("/internal/v1/nodes/{}/heartbeat", self.identity.name);
                    let sent = crate::fence::now();
                    match self.post(&path, &hb).await {
                        Ok(r) => match r.json::<HeartbeatReply>() {
                            Ok(HeartbeatReply { known: true }) => {
                                self.lease.renewed(sent);
                            }
                            _ => {
                                info!("controller does not know this node; registering again");
                                registered = false;
                            }
                        },
                        Err(e) => warn!(error = %e, "heartbeat failed"),
                    }
                }
            }
        }
    }
}
