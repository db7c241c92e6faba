//! gsched-noded: the node daemon. Reports the node's GPU instances to the
//! controller, runs jobs under shepherds, enforces time limits, and reports
//! how jobs ended.

pub mod api;
pub mod cgroup;
pub mod command;
pub mod config;
pub mod confine;
pub mod context;
pub mod epoch;
pub mod fence;
pub mod gpu;
pub mod launcher;
pub mod link;
pub mod mps;
pub mod probe;
pub mod reshape;
pub mod shepherd;
pub mod spool;
mod startup;
pub mod tokens;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use gsched_core::job::JobId;
use gsched_core::outcome::GpuFault;
use tracing::{info, warn};

/// How often gnoded looks for job processes that use an instance without a
/// placement (see `ProbeServer::check_unplaced`).
const UNPLACED_CHECK: std::time::Duration = std::time::Duration::from_secs(2);

pub use config::NodeConfig;
pub use startup::start;

/// A started node daemon.
pub struct Running {
    pub addr: std::net::SocketAddr,
    pub name: String,
    /// MPS control daemons this node supervises.
    pub mps: Option<Arc<mps::MpsSupervisor>>,
    confine: Arc<confine::Confinement>,
}

impl Running {
    /// Stops what must not outlive the daemon: tells every MPS control
    /// daemon `quit`. Jobs keep running and are adopted at the next start.
    pub async fn shutdown(&self) {
        if let Some(m) = self.mps.clone() {
            let _ = tokio::task::spawn_blocking(move || m.quit_all()).await;
        }
        // Only if no job's cgroup is left in it (running jobs keep theirs).
        self.confine.cgroups().remove_node_dir();
    }
}

/// The size of the node's temporary file system (`/tmp`, Slurm's default
/// TmpFS), MiB; 0 if it cannot be read.
pub(crate) fn tmp_disk_mib() -> u64 {
    nix::sys::statvfs::statvfs("/tmp")
        .map(|s| s.blocks().saturating_mul(s.fragment_size()) / (1 << 20))
        .unwrap_or(0)
}

fn memory_mib() -> u64 {
    meminfo_mib("MemTotal:").unwrap_or(0)
}

/// The host memory the kernel says is available for new work without
/// swapping (MemAvailable), MiB, for the controller's admission of shared
/// jobs.
pub(crate) fn memory_available_mib() -> Option<u64> {
    meminfo_mib("MemAvailable:")
}

fn meminfo_mib(field: &str) -> Option<u64> {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map(|kb| kb / 1024)
}

/// The GPU and MIG instance ids of each MIG instance (for its device
/// rules).
pub(crate) fn mig_ids(
    backend: &dyn gpu::GpuBackend,
    instances: &[gsched_core::gpu::Instance],
) -> std::collections::HashMap<String, (u32, u32, u32)> {
    let gpus: std::collections::BTreeSet<u32> = instances.iter().map(|i| i.gpu_index).collect();
    let mut out = std::collections::HashMap::new();
    for g in gpus {
        for d in backend.mig_devices(g).unwrap_or_default() {
            out.insert(d.uuid, (g, d.gi_id, d.ci_id));
        }
    }
    out
}

/// Asks gctld for the reservations this node held when it stopped and puts
/// back those of processes still running. Without a controller (yet), the
/// node starts without them and says so.
async fn restore_reservations(
    peer: &gsched_daemon::peer::PeerClient,
    controllers: &[String],
    node: &str,
    probe: &Arc<probe::ProbeServer>,
    running: &[gsched_core::job::JobId],
) {
    if running.is_empty() {
        return;
    }
    // The first controller that answers for itself: the leader (a standby
    // proves nothing).
    let mut fetched = Err("no controller given".to_string());
    for controller in controllers {
        let url = format!("{controller}/internal/v1/nodes/{node}/tasks");
        fetched = async {
            let r = peer
                .get(&url, Some(Duration::from_secs(10)))
                .await
                .map_err(|e| e.to_string())?;
            if !r.is_success() {
                return Err(format!(
                    "the controller answered {}: {}",
                    r.status,
                    r.error_text()
                ));
            }
            r.json::<gsched_core::wire::OpenTasks>()
                .map_err(|e| e.to_string())
        }
        .await;
        if fetched.is_ok() {
            break;
        }
    }
    let open = match fetched {
        Ok(open) => open,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the reservations this node held from the controller; running jobs' GPU memory is not accounted until they end");
            return;
        }
    };
    // The controller sends this node's open records only; an ended one is
    // not restored whatever it says.
    let records: Vec<gsched_core::probe::TaskRecord> = open
        .tasks
        .into_iter()
        .filter(|t| t.end_ms.is_none())
        .collect();
    if !records.is_empty() {
        probe.restore(records, running);
    }
}

/// This node daemon's instance id: random, kept in `STATE_DIR/node.id`
/// (0600) so a restarted gnoded is the same instance, while another daemon
/// (another state directory, another host) claiming the same name is not.
fn instance_id(state_dir: &Path) -> Result<String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let path = state_dir.join("node.id");
    let valid = |s: &str| s.len() == 16 && s.bytes().all(|b| b.is_ascii_hexdigit());
    if let Ok(s) = std::fs::read_to_string(&path) {
        if valid(s.trim()) {
            return Ok(s.trim().to_string());
        }
    }
    let id = gsched_daemon::key::random_hex(8)?;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    writeln!(f, "{id}").with_context(|| format!("cannot write {}", path.display()))?;
    Ok(id)
}

/// What the MPS watch needs of the node.
struct MpsWatch {
    sup: Arc<mps::MpsSupervisor>,
    probe: Arc<probe::ProbeServer>,
    /// Weakly: the launcher holds this watch's end check.
    launcher: std::sync::Weak<launcher::Launcher>,
    confine: Arc<confine::Confinement>,
    /// Instances whose server is handling a fatal GPU error.
    recovering: std::sync::Mutex<gsched_core::mps_recovery::MpsRecovery>,
    /// The driver's recent Xid errors, and each instance's GPU.
    xids: Arc<gpu::xid::XidLog>,
    /// The node's instances (re-partitions change them): each one's GPU.
    inventory: Arc<std::sync::RwLock<Vec<gsched_core::gpu::Instance>>>,
}

impl MpsWatch {
    /// Restarts dead daemons, handles the fatal errors the servers logged,
    /// and tells the probe server which instances take no new process.
    fn check(&self) {
        self.sup.check();
        self.handle_faults();
        self.close_while_down_or_recovering();
    }

    /// Handles the fatal errors the servers logged since the last look;
    /// returns whether there were any.
    fn handle_faults(&self) -> bool {
        let faults = self.sup.faults();
        for (uuid, fault) in &faults {
            self.fault(uuid, fault);
        }
        !faults.is_empty()
    }

    /// Keeps shared work off instances whose server is down or recovering
    /// from a fault.
    fn close_while_down_or_recovering(&self) {
        let mut recovering = self.recovering.lock().unwrap_or_else(|e| e.into_inner());
        for uuid in recovering.exited(|p| spool::process_starttime(p as i32).is_some()) {
            info!(instance = %uuid, "every client the MPS server tore down has exited");
        }
        for (uuid, m) in self.sup.status() {
            let down = m.state == gsched_core::gpu::MpsState::Down;
            self.probe
                .set_mps_down(&uuid, recovering.closed(&uuid, down));
        }
    }

    /// The MPS server of `uuid` tore down its clients after a fatal GPU
    /// error: every job with a process among them ends with the fault.
    fn fault(&self, uuid: &str, fault: &mps::MpsFault) {
        // Torn-down clients may be gone by now: those bound there lately
        // name their jobs too. Where MPS lists none, only those bound now
        // are taken as hit.
        let bound = self.probe.bound_to(uuid);
        let mut owners: HashMap<u32, JobId> = self
            .probe
            .bound_or_recent(uuid, fault.at_ms)
            .iter()
            .map(|(j, p)| (*p, *j))
            .collect();
        // The process MPS named is looked for whenever it left: a culprit
        // that exits right after its fault must not slip out of it.
        if let Some(pid) = fault.named {
            if let std::collections::hash_map::Entry::Vacant(slot) = owners.entry(pid) {
                let named_job = self
                    .probe
                    .bound_or_recent(uuid, None)
                    .into_iter()
                    .find_map(|(job, p)| (p == pid).then_some(job));
                if let Some(job) = named_job {
                    slot.insert(job);
                }
            }
        }
        let unknown: Vec<u32> = fault
            .torn_down
            .iter()
            .chain(fault.named.iter())
            .copied()
            .filter(|p| !owners.contains_key(p))
            .collect();
        for (pid, job, _) in self.confine.jobs_of(&unknown) {
            owners.insert(pid, job);
        }
        let hit = GpuFault::jobs_hit(&fault.torn_down, &bound, &owners);
        let named = fault.named.map(|p| (p, owners.get(&p).copied()));
        let gpu = self
            .inventory
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .find(|i| i.uuid == uuid)
            .map(|i| i.gpu_index);
        let xids = gpu
            .map(|g| self.xids.recent(g, std::time::Instant::now()))
            .unwrap_or_default();
        warn!(
            instance = %uuid,
            jobs = ?hit,
            torn_down = ?fault.torn_down,
            named_pid = ?fault.named,
            ?xids,
            "the MPS server tore down every client after a fatal GPU error: the jobs hit end FAILED (requeued if requeueable and not named); no new shared work there until the torn-down processes exit"
        );
        if let Some(launcher) = self.launcher.upgrade() {
            for job in &hit {
                let record = GpuFault::of(*job, uuid, &hit, named, &xids);
                launcher.mark_gpu_fault(*job, &record, fault.at_ms);
            }
        }
        self.recovering
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .fault(uuid, &fault.torn_down);
    }
}

/// Checks the MPS daemons every `every` ([`MpsWatch::check`]): restarts
/// those that died, handles fatal GPU errors, and keeps shared work off an
/// instance while its daemon is down or it recovers from a fault.
fn watch_mps(watch: Arc<MpsWatch>, period: Duration) {
    watch.check();
    every(period, move || watch.check());
}

/// Runs `f` off the async threads every `period`, one run at a time.
pub(crate) fn every(period: Duration, f: impl Fn() + Send + Sync + 'static) {
    let f = Arc::new(f);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let f = Arc::clone(&f);
            let _ = tokio::task::spawn_blocking(move || f()).await;
        }
    });
}

/// `--mig-reconfig-secs` as a duration: 0 to 3600 seconds.
fn mig_reconfig_delay(secs: f64) -> Result<Duration> {
    if !(0.0..=3600.0).contains(&secs) {
        anyhow::bail!("--mig-reconfig-secs {secs}: expected seconds from 0 to 3600");
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Each GPU's index and model, once.
fn gpu_models(instances: &[gsched_core::gpu::Instance]) -> Vec<(u32, String)> {
    let mut out: Vec<(u32, String)> = instances
        .iter()
        .map(|i| (i.gpu_index, i.model.clone()))
        .collect();
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod reconfig_tests {
    #[test]
    fn the_reconfiguration_delay_is_checked() {
        assert_eq!(
            super::mig_reconfig_delay(0.5).unwrap(),
            std::time::Duration::from_millis(500)
        );
        for bad in [-1.0, f64::NAN, f64::INFINITY, 3601.0] {
            let e = super::mig_reconfig_delay(bad).unwrap_err().to_string();
            assert!(e.contains("--mig-reconfig-secs"), "{e}");
        }
    }
}
