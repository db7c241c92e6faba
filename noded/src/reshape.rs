//! Carrying out the controller's MIG re-partitions (issue 19). A reshape
//! order names one GPU, the instances to retire and the placements to
//! create. The instances retire at once (the node binds no new process to
//! them: [`gsched_core::placement::NodeBook::set_retiring`]); once nothing
//! uses them (no task, no bound process, no isolated job, no process the
//! GPU reports there) they are destroyed, the new ones created through the
//! backend, and the node's books, inventory and device rules follow; the
//! controller gets a [`ReshapeReport`]. MIG mode is never changed, and an
//! instance with a process on it is never destroyed.
//!
//! Where the GPU's instances run MPS servers, a retired instance's server
//! is told `quit` once no shared process is left there, before the
//! instance is destroyed, and each new instance gets one.
//!
//! Only GPUs in MIG mode whose layout the backend may change (simulated
//! GPUs, or NVML with `allow_mig_reconfigure`) are offered to the
//! controller for re-partitioning ([`Reshaper::reshapeable`]); an order
//! for another is refused. A
//! restarted gnoded applies its `gpus.toml` layout again (the simulated
//! backend starts from its configured layout), registers what exists, and
//! the controller forgets the orders it had sent.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use gsched_core::gpu::Instance;
use gsched_core::wire::{ReshapeReport, ReshapeRequest};
use tracing::info;

use crate::gpu::GpuBackend;
use crate::probe::ProbeServer;

/// How long a retiring instance may take to empty before the reshape is
/// given up (its instances are used again).
const EMPTY_WITHIN: Duration = Duration::from_secs(600);

/// How often a reshape looks whether its instances are empty.
const EMPTY_POLL: Duration = Duration::from_millis(200);

pub struct Reshaper {
    node: String,
    backend: Arc<dyn GpuBackend>,
    probe: Arc<ProbeServer>,
    confine: Arc<crate::confine::Confinement>,
    /// The node's instances as it registers them.
    inventory: Arc<RwLock<Vec<Instance>>>,
    reshapeable: BTreeSet<u32>,
    /// The node's MPS daemons, and the GPUs whose instances have one.
    mps: Option<(Arc<crate::mps::MpsSupervisor>, BTreeSet<u32>)>,
    /// How long the simulated backend takes to reconfigure a GPU.
    sim_delay: Duration,
    /// Reshapes under way (by order number) and the instances they retire.
    running: Mutex<std::collections::BTreeMap<u64, Vec<String>>>,
    /// Where each reshape's report goes (the controller link).
    reports: Option<tokio::sync::mpsc::UnboundedSender<ReshapeReport>>,
}

/// Why an order is refused.
#[derive(Debug, thiserror::Error)]
pub enum ReshapeError {
    #[error("GPU {0} is not re-partitioned by this node (not in MIG mode, or MIG changes not allowed in gpus.toml)")]
    NotReshapeable(u32),
    #[error("instance {0} is being re-partitioned by another order")]
    Busy(String),
    #[error("instance {0} is not one of GPU {1}'s")]
    UnknownInstance(String, u32),
    #[error("MIG profile {0} does not exist on GPU {1}")]
    UnknownProfile(String, u32),
    #[error("a reshape retires or creates at least one instance")]
    Empty,
}

/// Why a re-partition stopped short.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ReshapeStopped(pub String);

impl From<String> for ReshapeStopped {
    fn from(why: String) -> Self {
        ReshapeStopped(why)
    }
}

impl From<&str> for ReshapeStopped {
    fn from(why: &str) -> Self {
        ReshapeStopped(why.to_string())
    }
}

impl Reshaper {
    pub fn new(
        node: String,
        backend: Arc<dyn GpuBackend>,
        probe: Arc<ProbeServer>,
        confine: Arc<crate::confine::Confinement>,
        inventory: Arc<RwLock<Vec<Instance>>>,
        reshapeable: BTreeSet<u32>,
        sim_delay: Duration,
    ) -> Reshaper {
        Reshaper {
            node,
            backend,
            probe,
            confine,
            inventory,
            reshapeable,
            mps: None,
            sim_delay,
            running: Mutex::new(Default::default()),
            reports: None,
        }
    }

    /// Sends each reshape's report to `reports`.
    pub fn reporting_to(
        mut self,
        reports: tokio::sync::mpsc::UnboundedSender<ReshapeReport>,
    ) -> Self {
        self.reports = Some(reports);
        self
    }

    /// Gives the instances of `gpus` MPS daemons from `sup`.
    pub fn with_mps(mut self, sup: Arc<crate::mps::MpsSupervisor>, gpus: BTreeSet<u32>) -> Self {
        self.mps = Some((sup, gpus));
        self
    }

    /// The MPS daemons, where GPU `gpu`'s instances have them.
    fn mps_of(&self, gpu: u32) -> Option<&crate::mps::MpsSupervisor> {
        self.mps
            .as_ref()
            .filter(|(_, gpus)| gpus.contains(&gpu))
            .map(|(s, _)| s.as_ref())
    }

    /// The GPUs this node re-partitions when asked.
    pub fn reshapeable(&self) -> &BTreeSet<u32> {
        &self.reshapeable
    }

    /// Takes an order: checks it, retires its instances and carries it out
    /// in the background.
    pub fn accept(self: &Arc<Self>, req: ReshapeRequest) -> Result<(), ReshapeError> {
        if self.lock_running().contains_key(&req.seq) {
            // A resend of an order under way (its first answer was lost).
            return Ok(());
        }
        if !self.reshapeable.contains(&req.gpu) {
            return Err(ReshapeError::NotReshapeable(req.gpu));
        }
        if req.retire.is_empty() && req.create.is_empty() {
            return Err(ReshapeError::Empty);
        }
        {
            let inv = self.inventory.read().unwrap_or_else(|p| p.into_inner());
            for uuid in &req.retire {
                if !inv
                    .iter()
                    .any(|i| &i.uuid == uuid && i.gpu_index == req.gpu)
                {
                    return Err(ReshapeError::UnknownInstance(uuid.clone(), req.gpu));
                }
            }
            let model = inv
                .iter()
                .find(|i| i.gpu_index == req.gpu)
                .and_then(|i| gsched_core::gpu::model(&i.model));
            for s in &req.create {
                if model.and_then(|m| m.profile(&s.profile)).is_none() {
                    return Err(ReshapeError::UnknownProfile(s.profile.clone(), req.gpu));
                }
            }
        }
        {
            let mut running = self.lock_running();
            if let Some(u) = req
                .retire
                .iter()
                .find(|u| running.values().any(|r| r.contains(u)))
            {
                return Err(ReshapeError::Busy(u.clone()));
            }
            running.insert(req.seq, req.retire.clone());
        }
        for uuid in &req.retire {
            self.probe.set_retiring(uuid, true);
        }
        info!(node = %self.node, seq = req.seq, gpu = req.gpu, retire = ?req.retire, "reshape accepted: its instances take no new work");
        let this = Arc::clone(self);
        tokio::spawn(async move {
            let seq = req.seq;
            let report = this.carry_out(req).await;
            this.lock_running().remove(&seq);
            if let Some(r) = &this.reports {
                let _ = r.send(report);
            }
        });
        Ok(())
    }

    fn lock_running(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::BTreeMap<u64, Vec<String>>> {
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn carry_out(self: &Arc<Self>, req: ReshapeRequest) -> ReshapeReport {
        let mut report = ReshapeReport {
            node: self.node.clone(),
            seq: req.seq,
            removed: Vec::new(),
            added: Vec::new(),
            error: None,
        };
        let start = std::time::Instant::now();
        let emptied = self
            .wait_until(start, || self.books_empty(&req.retire))
            .await
            && {
                // No shared process is left: their MPS servers may go.
                self.quit_mps(req.gpu, &req.retire).await;
                self.wait_gpu_empty(start, &req.retire).await
            };
        if !emptied {
            self.restart_mps(req.gpu, &req.retire).await;
            for uuid in &req.retire {
                self.probe.set_retiring(uuid, false);
            }
            report.error = Some(format!(
                "the instances were still in use after {} s; the reshape was given up",
                EMPTY_WITHIN.as_secs()
            ));
            return report;
        }
        let (this, seq) = (Arc::clone(self), req.seq);
        let done = tokio::task::spawn_blocking(move || {
            if let Err(e) = this.remake(&req, &mut report) {
                // What was not destroyed is in use again.
                for u in req.retire.iter().filter(|u| !report.removed.contains(u)) {
                    this.probe.set_retiring(u, false);
                }
                report.error = Some(e.to_string());
            }
            report
        })
        .await;
        done.unwrap_or_else(|e| ReshapeReport {
            node: self.node.clone(),
            seq,
            removed: Vec::new(),
            added: Vec::new(),
            error: Some(format!("the reshape task failed: {e}")),
        })
    }

    /// Waits until `done` says so, up to [`EMPTY_WITHIN`] after `start`.
    async fn wait_until(&self, start: std::time::Instant, mut done: impl FnMut() -> bool) -> bool {
        loop {
            if done() {
                return true;
            }
            if start.elapsed() > EMPTY_WITHIN {
                return false;
            }
            tokio::time::sleep(EMPTY_POLL).await;
        }
    }

    /// No task, bound process or isolated job on `uuids` in the books.
    fn books_empty(&self, uuids: &[String]) -> bool {
        uuids.iter().all(|u| self.probe.idle(u))
    }

    /// Waits, up to [`EMPTY_WITHIN`] after `start`, until the GPU reports no
    /// process on `uuids` (NVML: off the async threads).
    async fn wait_gpu_empty(&self, start: std::time::Instant, uuids: &[String]) -> bool {
        loop {
            let (b, us) = (Arc::clone(&self.backend), uuids.to_vec());
            let empty = tokio::task::spawn_blocking(move || {
                !us.iter()
                    .any(|u| b.processes_on(u).is_some_and(|p| !p.is_empty()))
            })
            .await
            .unwrap_or(false);
            if empty {
                return true;
            }
            if start.elapsed() > EMPTY_WITHIN {
                return false;
            }
            tokio::time::sleep(EMPTY_POLL).await;
        }
    }

    /// Quits the MPS servers of instances about to go.
    async fn quit_mps(self: &Arc<Self>, gpu: u32, uuids: &[String]) {
        if self.mps_of(gpu).is_none() {
            return;
        }
        let (this, us) = (Arc::clone(self), uuids.to_vec());
        let _ = tokio::task::spawn_blocking(move || {
            for u in &us {
                this.probe.set_mps_pipe(u, None);
                if let Some(sup) = this.mps_of(gpu) {
                    sup.remove(u);
                }
            }
        })
        .await;
    }

    /// Gives instances that stay (a reshape given up) their MPS servers
    /// back.
    async fn restart_mps(self: &Arc<Self>, gpu: u32, uuids: &[String]) {
        if self.mps_of(gpu).is_none() {
            return;
        }
        let (this, us) = (Arc::clone(self), uuids.to_vec());
        let _ = tokio::task::spawn_blocking(move || {
            for u in &us {
                this.start_mps(gpu, u);
            }
        })
        .await;
    }

    /// Starts the MPS server of instance `uuid` of `gpu` where its GPU has
    /// them; its pipe goes to the probe server. Returns its state.
    fn start_mps(&self, gpu: u32, uuid: &str) -> Option<gsched_core::gpu::Mps> {
        let sup = self.mps_of(gpu)?;
        match sup.add(uuid) {
            Ok(m) => {
                self.probe.set_mps_pipe(uuid, Some(m.pipe_dir.clone()));
                Some(m)
            }
            Err(e) => {
                tracing::warn!(instance = %uuid, error = format!("{e:#}"), "no MPS server for the instance");
                None
            }
        }
    }

    /// Destroys the retired instances and creates the new ones (blocking
    /// backend calls), recording in `report` what was done; says why it
    /// stopped short, if it did.
    fn remake(
        &self,
        req: &ReshapeRequest,
        report: &mut ReshapeReport,
    ) -> Result<(), ReshapeStopped> {
        let devices = self
            .backend
            .mig_devices(req.gpu)
            .map_err(|e| ReshapeStopped(format!("cannot list GPU {}'s instances: {e}", req.gpu)))?;
        for uuid in &req.retire {
            let Some(d) = devices.iter().find(|d| &d.uuid == uuid) else {
                return Err(ReshapeStopped(format!("instance {uuid} is gone")));
            };
            self.backend
                .destroy_instance(req.gpu, d.gi_id)
                .map_err(|e| ReshapeStopped(format!("cannot destroy {uuid}: {e}")))?;
            self.probe.remove_instance(uuid);
            self.inventory_change(|inv| inv.retain(|i| &i.uuid != uuid));
            report.removed.push(uuid.clone());
            info!(node = %self.node, instance = %uuid, "instance destroyed");
        }
        if self.backend.is_simulated() {
            // What a real GPU takes to reconfigure, on the simulated one.
            std::thread::sleep(self.sim_delay);
        }
        for slot in &req.create {
            let made = self
                .backend
                .create_instance(req.gpu, &slot.profile, slot.start)
                .map_err(|e| {
                    ReshapeStopped(format!(
                        "cannot create {} at {}: {e}",
                        slot.profile, slot.start
                    ))
                })?;
            let mut instance = self.instance_of(req.gpu, &made).ok_or_else(|| {
                ReshapeStopped(format!("GPU {} is not in the inventory", req.gpu))
            })?;
            // Its MPS server first: no process is placed there without it.
            instance.mps = self.start_mps(req.gpu, &instance.uuid);
            self.probe.add_instance(&instance);
            self.inventory_change(|inv| inv.push(instance.clone()));
            info!(node = %self.node, instance = %instance.uuid, profile = %slot.profile, start = slot.start, "instance created");
            report.added.push(instance);
        }
        self.refresh_device_rules();
        Ok(())
    }

    /// The inventory entry of a MIG device just made on `gpu`, from its
    /// GPU's other entries (model, UUID, link domain).
    fn instance_of(&self, gpu: u32, d: &crate::gpu::MigDevice) -> Option<Instance> {
        let inv = self.inventory.read().unwrap_or_else(|p| p.into_inner());
        let any = inv
            .iter()
            .find(|i| i.gpu_index == gpu)
            .cloned()
            .or_else(|| {
                // Every instance of the GPU was retired: ask the backend.
                let g = self
                    .backend
                    .gpus()
                    .ok()?
                    .into_iter()
                    .find(|g| g.index == gpu)?;
                Some(Instance {
                    uuid: String::new(),
                    gpu_index: gpu,
                    gpu_uuid: g.uuid.clone(),
                    model: g.model.clone().unwrap_or(g.name),
                    profile: None,
                    memory_mib: 0,
                    sms: 0,
                    compute_slices: 0,
                    link_domain: g.link_domain,
                    mig_start: None,
                    mps: None,
                })
            })?;
        Some(Instance {
            uuid: d.uuid.clone(),
            profile: Some(d.profile.clone()),
            memory_mib: d.memory_total_mib,
            sms: d.sms,
            compute_slices: d.slices,
            mig_start: Some(d.start),
            mps: None,
            ..any
        })
    }

    fn inventory_change(&self, f: impl FnOnce(&mut Vec<Instance>)) {
        f(&mut self.inventory.write().unwrap_or_else(|p| p.into_inner()));
    }

    /// Device rules name real instances by their ids: give them the new
    /// inventory (simulated GPUs have no device files).
    fn refresh_device_rules(&self) {
        if self.backend.is_simulated() {
            return;
        }
        let instances = self
            .inventory
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let mig_ids = crate::mig_ids(&*self.backend, &instances);
        self.confine
            .set_gpus(Some(crate::confine::NodeGpus { instances, mig_ids }));
    }
}

/// Which of the inventory's GPUs may be re-partitioned: MIG instances
/// there (with their placement known), and a backend that may change them.
pub fn reshapeable_gpus(instances: &[Instance], may_change: bool) -> BTreeSet<u32> {
    if !may_change {
        return BTreeSet::new();
    }
    instances
        .iter()
        .filter(|i| i.profile.is_some() && i.mig_start.is_some())
        .map(|i| i.gpu_index)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::simulated::SimulatedGpus;
    use gsched_core::probe::TaskRecord;
    use gsched_core::wire::MigSlot;

    /// A node with one simulated A100 as seven 1g.5gb instances, its
    /// probe server and reshaper (no delay); reports land in `reports`.
    struct Node {
        _dir: tempfile::TempDir,
        probe: Arc<ProbeServer>,
        reshaper: Arc<Reshaper>,
        backend: Arc<dyn GpuBackend>,
        reports: Arc<Mutex<Vec<ReshapeReport>>>,
    }

    fn node() -> Node {
        let dir = tempfile::tempdir().unwrap();
        let sim = SimulatedGpus::new("n1", "1xA100-40GB:1g.5gb*7").unwrap();
        let backend: Arc<dyn GpuBackend> = Arc::new(sim);
        let instances = crate::gpu::inventory(&*backend).unwrap();
        let book = gsched_core::placement::TaskBook::of_instances(
            gsched_core::placement::placement_policy("case").unwrap(),
            &instances,
        );
        let (probe, _listener) = ProbeServer::bind(
            dir.path().join("p.sock"),
            book,
            Default::default(),
            Arc::new(crate::probe::TaskEvents::default()),
        )
        .unwrap();
        let reshapeable = reshapeable_gpus(&instances, true);
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let reports = Arc::new(Mutex::new(Vec::new()));
        let r = Arc::clone(&reports);
        tokio::spawn(async move {
            while let Some(rep) = rx.recv().await {
                r.lock().unwrap().push(rep);
            }
        });
        let reshaper = Arc::new(
            Reshaper::new(
                "n1".into(),
                Arc::clone(&backend),
                Arc::clone(&probe),
                Arc::new(crate::confine::Confinement::unconfined()),
                Arc::new(RwLock::new(instances)),
                reshapeable,
                Duration::ZERO,
            )
            .reporting_to(tx),
        );
        Node {
            _dir: dir,
            probe,
            reshaper,
            backend,
            reports,
        }
    }

    fn uuids(b: &dyn GpuBackend) -> Vec<String> {
        b.mig_devices(0)
            .unwrap()
            .into_iter()
            .map(|d| d.uuid)
            .collect()
    }

    fn order(retire: &[String]) -> ReshapeRequest {
        ReshapeRequest {
            seq: 1,
            gpu: 0,
            retire: retire.to_vec(),
            create: vec![MigSlot {
                profile: "3g.20gb".into(),
                start: 4,
            }],
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_instance_in_use_is_never_destroyed_under_its_task() {
        let n = node();
        let all = uuids(&*n.backend);
        // The instances at slices 4, 5 and 6; a task of this test's own
        // process holds the one at 5.
        let retire: Vec<String> = all[4..7].to_vec();
        let me = std::process::id();
        n.probe.restore(
            vec![TaskRecord {
                job: 9,
                task: 1,
                pid: me,
                instance: retire[1].clone(),
                bytes: 1 << 30,
                warps: 0,
                share: 0,
                begin_ms: 0,
                end_ms: None,
            }],
            &[9],
        );
        n.reshaper.accept(order(&retire)).unwrap();
        n.reshaper
            .accept(order(&retire))
            .expect("a resend of the order under way is taken as the first was");
        let other = ReshapeRequest {
            seq: 2,
            ..order(&retire[..1])
        };
        assert!(
            matches!(n.reshaper.accept(other), Err(ReshapeError::Busy(u)) if u == retire[0]),
            "an instance is in one reshape at a time"
        );
        tokio::time::sleep(Duration::from_millis(800)).await;
        assert_eq!(uuids(&*n.backend), all, "nothing destroyed while in use");
        assert!(n.reports.lock().unwrap().is_empty());
        // The task's job ends: the reshape goes through.
        n.probe.job_ended(9);
        for _ in 0..50 {
            if !n.reports.lock().unwrap().is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let reports = n.reports.lock().unwrap().clone();
        assert_eq!(reports.len(), 1);
        let r = &reports[0];
        assert_eq!(r.error, None);
        assert_eq!(r.removed, retire);
        assert_eq!(r.added.len(), 1);
        assert_eq!(r.added[0].profile.as_deref(), Some("3g.20gb"));
        assert_eq!(r.added[0].mig_start, Some(4));
        let now = uuids(&*n.backend);
        assert_eq!(now.len(), 5);
        assert!(now.contains(&r.added[0].uuid));
        assert!(n.probe.idle(&r.added[0].uuid), "in the books, open");
    }

    #[test]
    fn orders_the_node_cannot_carry_out_are_refused() {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let _g = rt.enter();
        let n = node();
        let all = uuids(&*n.backend);
        let other_gpu = ReshapeRequest {
            gpu: 1,
            ..order(&all[4..7])
        };
        assert!(matches!(
            n.reshaper.accept(other_gpu),
            Err(ReshapeError::NotReshapeable(1))
        ));
        assert!(matches!(
            n.reshaper.accept(order(&["MIG-nope".to_string()])),
            Err(ReshapeError::UnknownInstance(..))
        ));
        let bad_profile = ReshapeRequest {
            create: vec![MigSlot {
                profile: "9g.99gb".into(),
                start: 0,
            }],
            ..order(&all[4..7])
        };
        assert!(matches!(
            n.reshaper.accept(bad_profile),
            Err(ReshapeError::UnknownProfile(..))
        ));
        let nothing = ReshapeRequest {
            create: Vec::new(),
            ..order(&[])
        };
        assert!(matches!(
            n.reshaper.accept(nothing),
            Err(ReshapeError::Empty)
        ));
        // Backends that may not change layouts offer nothing.
        let inv = crate::gpu::inventory(&*n.backend).unwrap();
        assert!(reshapeable_gpus(&inv, false).is_empty());
    }
}
