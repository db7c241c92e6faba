//! gsched-noded: the node daemon. Reports the node's GPU instances to the
//! controller, runs jobs under shepherds, enforces time limits, and reports
//! how jobs ended.

pub mod api;
pub mod cgroup;
pub mod config;
pub mod confine;
pub mod context;
pub mod fence;
pub mod gpu;
pub mod launcher;
pub mod link;
pub mod mps;
pub mod probe;
pub mod reshape;
pub mod shepherd;
pub mod spool;
pub mod steps;
pub mod tokens;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use gsched_core::job::JobId;
use gsched_core::outcome::GpuFault;
use tokio::net::TcpListener;
use tracing::{info, warn};

/// How often gnoded looks for job processes that use an instance without a
/// placement (see `ProbeServer::check_unplaced`).
const UNPLACED_CHECK: std::time::Duration = std::time::Duration::from_secs(2);

pub use config::NodeConfig;

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

fn memory_mib() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map(|kb| kb / 1024)
        .unwrap_or(0)
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
    controller: &str,
    node: &str,
    probe: &Arc<probe::ProbeServer>,
    running: &[gsched_core::job::JobId],
) {
    if running.is_empty() {
        return;
    }
    let url = format!(
        "{}/internal/v1/nodes/{node}/tasks",
        controller.trim_end_matches('/')
    );
    let fetched = async {
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
        r.json::<serde_json::Value>().map_err(|e| e.to_string())
    }
    .await;
    let v = match fetched {
        Ok(v) => v,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the reservations this node held from the controller; running jobs' GPU memory is not accounted until they end");
            return;
        }
    };
    let records: Vec<gsched_core::probe::TaskRecord> = v["tasks"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|t| t["node"] == node && t["end_ms"].is_null())
                .filter_map(|t| serde_json::from_value(t.clone()).ok())
                .collect()
        })
        .unwrap_or_default();
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
    launcher: Arc<launcher::Launcher>,
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
            .bound_or_recent(uuid)
            .iter()
            .map(|(j, p)| (*p, *j))
            .collect();
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
        for job in &hit {
            self.launcher
                .mark_gpu_fault(*job, &GpuFault::of(*job, uuid, &hit, named, &xids));
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
fn watch_mps(watch: MpsWatch, every: Duration) {
    let watch = Arc::new(watch);
    watch.check();
    {
        // A job hit by a fault ends within a moment of it, before the next
        // check: its end looks at the servers' logs first.
        let w = Arc::clone(&watch);
        watch.launcher.set_end_check(Arc::new(move || {
            if w.handle_faults() {
                w.close_while_down_or_recovering();
            }
        }));
    }
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let w = Arc::clone(&watch);
            let _ = tokio::task::spawn_blocking(move || w.check()).await;
        }
    });
}

/// Starts the node daemon. `shepherd_exe` is a binary that runs
/// [`shepherd::main`] when called with [`shepherd::SHEPHERD_ARG`].
pub async fn start(config: NodeConfig, state_dir: &Path, shepherd_exe: PathBuf) -> Result<Running> {
    gsched_daemon::state::prepare_dir(state_dir)?;
    let name = match &config.name {
        Some(n) => n.clone(),
        None => nix::unistd::gethostname()
            .context("cannot read the host name; give --name")?
            .to_string_lossy()
            .into_owned(),
    };
    let key_path = config
        .cluster_key_file
        .clone()
        .unwrap_or_else(|| state_dir.join("cluster.key"));
    let key = gsched_daemon::key::read(&key_path)?;
    let gpu_settings = match &config.gpu_config {
        Some(p) => gpu::layout::GpuSettings::read(p)?,
        None => gpu::layout::GpuSettings::default(),
    };
    let backend = gpu::select(
        &name,
        config.sim_gpus.as_deref(),
        gpu_settings.allow_mig_reconfigure,
    )?;
    gpu::layout::apply(&*backend, &gpu_settings)?;
    let mut instances = gpu::inventory(&*backend)?;
    tracing::info!(node = %name, "GPU backend: {}", backend.describe());
    let mps_gpus = gpu_settings.mps_gpus();
    let mps = if mps_gpus.is_empty() {
        None
    } else {
        let control = mps::control_program(gpu_settings.mps_control.as_deref())?;
        let served: Vec<String> = instances
            .iter()
            .filter(|i| mps_gpus.contains(&i.gpu_index))
            .map(|i| i.uuid.clone())
            .collect();
        let root = state_dir.join("mps").join(&name);
        let sup =
            tokio::task::spawn_blocking(move || mps::MpsSupervisor::start(control, &root, &served))
                .await??;
        let sup = Arc::new(sup);
        let status = sup.status();
        for i in &mut instances {
            i.mps = status.get(&i.uuid).cloned();
        }
        Some(sup)
    };
    for i in &instances {
        tracing::info!(
            node = %name,
            instance = %i.uuid,
            gpu = i.gpu_index,
            profile = i.profile.as_deref().unwrap_or("whole GPU"),
            memory_mib = i.memory_mib,
            mps = i.mps.as_ref().map(|m| m.state.as_str()).unwrap_or("off"),
            "serving instance"
        );
    }
    let (ended_tx, ended_rx) = tokio::sync::mpsc::unbounded_channel();
    let spool_root = state_dir.join("spool").join(&name);
    let launcher = launcher::Launcher::new(
        name.clone(),
        spool_root.clone(),
        shepherd_exe,
        Duration::from_secs(config.kill_wait),
        gsched_core::job::JobUidPolicy {
            min_uid: config.min_job_uid,
            allow_root: config.allow_root_jobs,
        },
        ended_tx,
    )
    .with_context(|| format!("cannot set up the spool directory {}", spool_root.display()))?;
    let node_id = instance_id(state_dir)?;
    let (confine, cpus, memory_mib) = confine::start(
        &config,
        &confine::dir_name(&name, &node_id),
        memory_mib(),
        (!backend.is_simulated()).then(|| confine::NodeGpus {
            instances: instances.clone(),
            mig_ids: mig_ids(&*backend, &instances),
        }),
    )?;
    launcher.set_confinement(Arc::clone(&confine));
    {
        let (l, every) = (Arc::clone(&launcher), confine.sample_interval());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let l = Arc::clone(&l);
                let _ = tokio::task::spawn_blocking(move || l.sample_usage()).await;
            }
        });
    }
    let events = Arc::new(probe::TaskEvents::default());
    let placement = gsched_core::placement::placement_policy(&config.placement_policy)
        .with_context(|| {
            format!(
                "unknown --placement-policy '{}' (known: {})",
                config.placement_policy,
                gsched_core::placement::PLACEMENT_POLICIES.join(", ")
            )
        })?;
    let compute_ceiling = gsched_core::compute::parse_ceiling(&config.compute_ceiling)
        .map_err(|e| anyhow::anyhow!("--compute-ceiling: {e}"))?;
    let default_share = gsched_core::compute::parse_share(&config.default_gpu_share)
        .with_context(|| format!("invalid --default-gpu-share '{}'", config.default_gpu_share))?;
    let book = gsched_core::placement::TaskBook::of_instances(placement, &instances)
        .starting_at(probe::now_ms() as u64 * 1024)
        .with_max_overtakes(config.max_overtakes)
        .with_compute_ceiling(compute_ceiling)
        .with_default_share(default_share);
    let mps_dirs = instances
        .iter()
        .filter_map(|i| i.mps.as_ref().map(|m| (i.uuid.clone(), m.pipe_dir.clone())))
        .collect();
    let sock = state_dir.join("run").join(format!("{name}.probe.sock"));
    let (probe_server, probe_listener) =
        probe::ProbeServer::bind(sock, book, mps_dirs, Arc::clone(&events))?;
    launcher.set_probe(Arc::clone(&probe_server));
    // The instances as the node registers them (re-partitions change them).
    let inventory = Arc::new(std::sync::RwLock::new(instances.clone()));
    let xids = Arc::new(gpu::xid::XidLog::default());
    if !backend.is_simulated() {
        gpu::xid::watch(Arc::clone(&xids));
    }
    if let Some(sup) = &mps {
        watch_mps(
            MpsWatch {
                sup: Arc::clone(sup),
                probe: Arc::clone(&probe_server),
                launcher: Arc::clone(&launcher),
                confine: Arc::clone(&confine),
                recovering: Default::default(),
                xids,
                inventory: Arc::clone(&inventory),
            },
            Duration::from_secs(gpu_settings.mps_check_interval.max(1)),
        );
    }
    {
        let steps: Arc<dyn probe::StepControl> = Arc::clone(&launcher) as _;
        probe_server.set_steps(Arc::downgrade(&steps));
    }
    let backend: Arc<dyn gpu::GpuBackend> = Arc::from(backend);
    {
        let mut gpus: Vec<u32> = instances.iter().map(|i| i.gpu_index).collect();
        gpus.sort_unstable();
        gpus.dedup();
        gpu::meter::start(Arc::clone(&backend), Arc::clone(&confine), &gpus);
    }
    {
        let b = Arc::clone(&backend);
        probe_server.set_free_memory(Arc::new(move |uuid: &str| b.free_bytes(uuid)));
        // Only jobs' processes hold a drain: not the MPS server, nor what
        // runs outside gsched.
        let (b, c) = (Arc::clone(&backend), Arc::clone(&confine));
        probe_server.set_processes_on(Arc::new(move |uuid: &str| {
            let pids = b.processes_on(uuid)?;
            Some(
                c.jobs_of(&pids)
                    .into_iter()
                    .map(|(p, j, _)| (p, j))
                    .collect(),
            )
        }));
    }
    let task_mem = gsched_core::units::parse_mem_mib(&config.default_task_mem)
        .with_context(|| format!("invalid --default-task-mem '{}'", config.default_task_mem))?;
    let context = Arc::new(context::ContextWatch::new(match &config.context_mem {
        Some(s) => context::ContextMem::Fixed(
            gsched_core::units::parse_mem_mib(s)
                .with_context(|| format!("invalid --context-mem '{s}'"))?,
        ),
        None if backend.is_simulated() => context::ContextMem::Fixed(0),
        None => context::ContextMem::Learned {
            default_mib: gsched_core::context::DEFAULT_CONTEXT_MIB,
        },
    }));
    probe_server.set_context(Arc::clone(&context));
    {
        let c = Arc::clone(&confine);
        probe_server.set_gpu_busy(Arc::new(move |job, pid, busy, placed| {
            c.add_gpu_busy(job, pid, busy, placed)
        }));
    }
    if context.learns() {
        context::start_sampling(
            Arc::clone(&context),
            Arc::clone(&backend),
            Arc::clone(&probe_server),
            gpu_models(&instances),
        );
    }
    let probe_lib = match &config.probe_lib {
        Some(p) if p.is_file() => Some(p.clone()),
        Some(p) => anyhow::bail!("the probe library {} does not exist", p.display()),
        None => std::env::current_exe()
            .ok()
            .and_then(|e| e.parent().map(|d| d.join("libgprobe.so")))
            .filter(|p| p.is_file()),
    };
    match probe_lib {
        Some(p) => {
            tracing::info!(lib = %p.display(), "CUDA programs of shared jobs run under the interception library");
            launcher.set_interception(p, task_mem * 1024 * 1024, context);
        }
        None => tracing::warn!(
            "libgprobe.so not found next to this program: CUDA programs of shared jobs are not intercepted (give --probe-lib)"
        ),
    }
    tokio::spawn(Arc::clone(&probe_server).serve(probe_listener));
    if !backend.is_simulated() {
        // Processes that use an instance without a placement close it to
        // new shared processes while they run (NVML: off the async threads;
        // simulated GPUs run no process).
        let p = Arc::clone(&probe_server);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(UNPLACED_CHECK);
            loop {
                tick.tick().await;
                let p = Arc::clone(&p);
                let _ = tokio::task::spawn_blocking(move || p.check_unplaced()).await;
            }
        });
    }
    // Adopting waits for the cgroups of jobs that ended meanwhile to empty:
    // off the async threads.
    let ended = {
        let l = Arc::clone(&launcher);
        tokio::task::spawn_blocking(move || l.adopt())
            .await
            .context("adopting the running jobs failed")?
    };
    let endpoint = gsched_daemon::tls::Endpoint::from_flags(
        config.tls_cert.as_deref(),
        config.tls_key.as_deref(),
        config.listen,
        config.allow_plain_http,
    )?;
    let http = gsched_daemon::tls::http_client(config.tls_ca.as_deref())?;
    if let Some(ca) = &config.tls_ca {
        launcher.set_tls_ca(ca.clone());
    }
    restore_reservations(
        &gsched_daemon::peer::PeerClient::new(
            http.clone(),
            &key,
            gsched_daemon::peer::Direction::ToController,
        ),
        &config.controller,
        &name,
        &probe_server,
        &launcher.running_ids(),
    )
    .await;
    let listener = TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    let addr = listener.local_addr()?;
    let lease = Arc::new(fence::NodeLease::open(state_dir));
    tokio::spawn(Arc::clone(&lease).watch(Arc::clone(&launcher)));
    let reshape_keep = gpu_settings.keep_bounds(|gpu| {
        instances
            .iter()
            .find(|i| i.gpu_index == gpu && i.profile.is_some())
            .and_then(|i| gsched_core::gpu::model(&i.model))
    })?;
    let reshaper = reshape::Reshaper::new(
        name.clone(),
        Arc::clone(&backend),
        Arc::clone(&probe_server),
        Arc::clone(&confine),
        Arc::clone(&inventory),
        reshape::reshapeable_gpus(
            &instances,
            backend.is_simulated() || gpu_settings.allow_mig_reconfigure,
        )
        .difference(&gpu_settings.fixed_gpus())
        .copied()
        .collect(),
        mig_reconfig_delay(config.mig_reconfig_secs)?,
    );
    let reshaper = match &mps {
        Some(sup) => reshaper.with_mps(Arc::clone(sup), mps_gpus.clone()),
        None => reshaper,
    };
    let reshaper = Arc::new(reshaper);
    let app = api::router(Arc::new(api::NodeApi {
        launcher: Arc::clone(&launcher),
        probe: Some(Arc::clone(&probe_server)),
        reshaper: Arc::clone(&reshaper),
        lease: Arc::clone(&lease),
        key: key.clone(),
        started_at: gsched_daemon::unix_now(),
    }));
    // Only the controller calls a node: a few connections are plenty.
    let listener =
        gsched_daemon::listener::Bounded::new(listener, 64, 256, Duration::from_secs(60));
    let routed = addr
        .ip()
        .is_unspecified()
        .then(|| gsched_daemon::advertise::routed_toward(&config.controller))
        .flatten();
    let url = gsched_daemon::advertise::choose(
        config.advertise_url.as_deref(),
        endpoint.scheme(),
        addr,
        routed,
        gsched_daemon::advertise::host_name().as_deref(),
    )?;
    endpoint.serve("node API", listener, app);
    let identity = gsched_core::wire::NodeRegistration {
        name: name.clone(),
        instance_id: node_id,
        url: url.clone(),
        cpus,
        memory_mib,
        instances,
        worker_limit: config.workers,
        running: Vec::new(),
        runs: Default::default(),
        ended: Vec::new(),
        fence_timeout_ms: config.fence_timeout.map(|s| s.saturating_mul(1000)),
        heartbeat_ms: config.heartbeat_interval.max(1).saturating_mul(1000),
        reshape_gpus: reshaper.reshapeable().iter().copied().collect(),
        reshape_keep,
    };
    let mut link = link::ControllerLink::new(
        identity,
        config.controller.clone(),
        key,
        Duration::from_secs(config.heartbeat_interval.max(1)),
        Arc::clone(&launcher),
        lease,
        http,
    );
    if let Some(m) = &mps {
        link = link.with_mps(Arc::clone(m));
    }
    let link = Arc::new(link.with_probe(probe_server).with_inventory(inventory));
    {
        let l = Arc::clone(&link);
        reshaper.set_report(Arc::new(move |r| {
            tokio::spawn(Arc::clone(&l).report_reshape(r));
        }));
    }
    tokio::spawn(Arc::clone(&link).report_tasks(events));
    tokio::spawn(link.run(ended_rx, ended));
    tracing::info!(%addr, %url, node = %name, "gnoded listening");
    Ok(Running {
        addr,
        name,
        mps,
        confine,
    })
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
