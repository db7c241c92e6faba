//! Starting gnoded: its parts built in dependency order (GPUs, launcher
//! and confinement, probe server, reshaper, API, the link to the
//! controller), each from the flags and the parts before it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use tokio::net::TcpListener;

use crate::{
    api, confine, context, every, fence, gpu, gpu_models, instance_id, launcher, link, memory_mib,
    mig_ids, mig_reconfig_delay, mps, probe, reshape, restore_reservations, watch_mps, MpsWatch,
    NodeConfig, Running, UNPLACED_CHECK,
};

/// Starts the node daemon. `shepherd_exe` is a binary that runs
/// [`shepherd::main`] when called with [`shepherd::SHEPHERD_ARG`].
/// Built in dependency order: GPUs, launcher and confinement, probe
/// server, reshaper, API, and the link to the controller.
pub async fn start(config: NodeConfig, state_dir: &Path, shepherd_exe: PathBuf) -> Result<Running> {
    gsched_daemon::state::prepare_dir(state_dir)?;
    let name = node_name(&config)?;
    let key_path = config
        .cluster_key_file
        .clone()
        .unwrap_or_else(|| state_dir.join("cluster.key"));
    let key = gsched_daemon::key::read(&key_path)?;
    let Gpus {
        backend,
        settings: gpu_settings,
        instances,
        mps,
    } = start_gpus(&config, state_dir, &name).await?;
    let JobSide {
        launcher,
        confine,
        cpus,
        memory_mib,
        node_id,
        ended_rx,
    } = start_jobs(
        &config,
        state_dir,
        &name,
        shepherd_exe,
        &*backend,
        &instances,
    )?;
    let (probe_server, probe_listener, events) =
        start_probe(&config, state_dir, &name, &instances, &launcher)?;
    // The instances as the node registers them (re-partitions change them).
    let inventory = Arc::new(std::sync::RwLock::new(instances.clone()));
    let parts = Parts {
        backend: Arc::from(backend),
        confine,
        launcher,
        probe: probe_server,
        inventory,
    };
    connect_probe(&config, &parts, &instances)?;
    watch_gpu_faults(&parts, mps.as_ref(), &gpu_settings);
    let Parts {
        backend,
        confine,
        launcher,
        probe: probe_server,
        ..
    } = &parts;
    tokio::spawn(Arc::clone(probe_server).serve(probe_listener));
    if !backend.is_simulated() {
        // Processes that use an instance without a placement close it to
        // new shared processes while they run (NVML: off the async threads;
        // simulated GPUs run no process).
        let p = Arc::clone(probe_server);
        every(UNPLACED_CHECK, move || p.check_unplaced());
    }
    // Adopting waits for the cgroups of jobs that ended meanwhile to empty:
    // off the async threads.
    let ended = {
        let l = Arc::clone(launcher);
        tokio::task::spawn_blocking(move || l.adopt()).await
    }
    .context("adopting the running jobs failed")?;
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
        probe_server,
        &launcher.running_ids(),
    )
    .await;
    let listener = TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    let addr = listener.local_addr()?;
    let lease = Arc::new(fence::NodeLease::open(state_dir));
    tokio::spawn(Arc::clone(&lease).watch(Arc::clone(launcher)));
    let reshape_keep = reshape_keep(&gpu_settings, &instances)?;
    let reshaper = reshaper(
        &config,
        &name,
        &gpu_settings,
        mps.as_ref(),
        &parts,
        &instances,
    )?;
    let app = api::router(Arc::new(api::NodeApi {
        launcher: Arc::clone(launcher),
        probe: Some(Arc::clone(probe_server)),
        reshaper: Arc::clone(&reshaper),
        lease: Arc::clone(&lease),
        key: key.clone(),
        started_at: gsched_daemon::unix_now(),
    }));
    let url = advertised_url(&config, &endpoint, addr)?;
    // Only the controller calls a node: a few connections are plenty.
    let listener =
        gsched_daemon::listener::Bounded::new(listener, 64, 256, Duration::from_secs(60));
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
    let link = link_to_controller(&config, &parts, identity, key, lease, http, mps.as_ref());
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
        confine: Arc::clone(confine),
    })
}

/// The daemon's parts started so far, as later parts need them.
struct Parts {
    backend: Arc<dyn gpu::GpuBackend>,
    confine: Arc<confine::Confinement>,
    launcher: Arc<launcher::Launcher>,
    probe: Arc<probe::ProbeServer>,
    /// The instances as the node registers them (re-partitions change them).
    inventory: Arc<std::sync::RwLock<Vec<gsched_core::gpu::Instance>>>,
}

/// The launcher and the confinement of jobs (cgroups), and what the
/// node registers of its CPUs and memory.
struct JobSide {
    launcher: Arc<launcher::Launcher>,
    confine: Arc<confine::Confinement>,
    cpus: u32,
    memory_mib: u64,
    /// This start of gnoded (`instance_id`).
    node_id: String,
    /// The ends of runs the launcher saw, for the link to report.
    ended_rx: tokio::sync::mpsc::UnboundedReceiver<gsched_core::wire::JobEnded>,
}

/// Starts the launcher and the confinement of jobs, and samples the jobs'
/// use of their cgroups.
fn start_jobs(
    config: &NodeConfig,
    state_dir: &Path,
    name: &str,
    shepherd_exe: PathBuf,
    backend: &dyn gpu::GpuBackend,
    instances: &[gsched_core::gpu::Instance],
) -> Result<JobSide> {
    let (ended_tx, ended_rx) = tokio::sync::mpsc::unbounded_channel();
    let spool_root = state_dir.join("spool").join(name);
    let launcher = launcher::Launcher::new(
        name.to_string(),
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
        config,
        &confine::dir_name(name, &node_id),
        memory_mib(),
        (!backend.is_simulated()).then(|| confine::NodeGpus {
            instances: instances.to_vec(),
            mig_ids: mig_ids(backend, instances),
        }),
    )?;
    launcher.set_confinement(Arc::clone(&confine));
    {
        let l = Arc::clone(&launcher);
        every(confine.sample_interval(), move || l.sample_usage());
    }
    Ok(JobSide {
        launcher,
        confine,
        cpus,
        memory_mib,
        node_id,
        ended_rx,
    })
}

/// Watches the GPUs for faults (Xid events) and the MPS control daemons
/// for failures, recovering what it can.
fn watch_gpu_faults(
    parts: &Parts,
    mps: Option<&Arc<mps::MpsSupervisor>>,
    gpu_settings: &gpu::layout::GpuSettings,
) {
    let xids = Arc::new(gpu::xid::XidLog::default());
    if !parts.backend.is_simulated() {
        gpu::xid::watch(Arc::clone(&xids));
    }
    if let Some(sup) = mps {
        watch_mps(
            MpsWatch {
                sup: Arc::clone(sup),
                probe: Arc::clone(&parts.probe),
                launcher: Arc::clone(&parts.launcher),
                confine: Arc::clone(&parts.confine),
                recovering: Default::default(),
                xids,
                inventory: Arc::clone(&parts.inventory),
            },
            Duration::from_secs(gpu_settings.mps_check_interval.max(1)),
        );
    }
}

/// The URL the node registers with: `--advertise-url`, else its listening
/// address (for a wildcard, the address routed toward the controller, or
/// the host's name).
fn advertised_url(
    config: &NodeConfig,
    endpoint: &gsched_daemon::tls::Endpoint,
    addr: std::net::SocketAddr,
) -> Result<String> {
    let routed = addr
        .ip()
        .is_unspecified()
        .then(|| gsched_daemon::advertise::routed_toward(&config.controller))
        .flatten();
    Ok(gsched_daemon::advertise::choose(
        config.advertise_url.as_deref(),
        endpoint.scheme(),
        addr,
        routed,
        gsched_daemon::advertise::host_name().as_deref(),
    )?)
}

/// Per GPU, the instances re-partitioning must leave (from the site's
/// layout settings).
fn reshape_keep(
    gpu_settings: &gpu::layout::GpuSettings,
    instances: &[gsched_core::gpu::Instance],
) -> Result<std::collections::BTreeMap<u32, Vec<(String, u32)>>> {
    gpu_settings.keep_bounds(|gpu| {
        instances
            .iter()
            .find(|i| i.gpu_index == gpu && i.profile.is_some())
            .and_then(|i| gsched_core::gpu::model(&i.model))
    })
}

/// The link that registers the node, sends its heartbeats and reports
/// what ended.
fn link_to_controller(
    config: &NodeConfig,
    parts: &Parts,
    identity: gsched_core::wire::NodeRegistration,
    key: String,
    lease: Arc<fence::NodeLease>,
    http: reqwest::Client,
    mps: Option<&Arc<mps::MpsSupervisor>>,
) -> Arc<link::ControllerLink> {
    let mut link = link::ControllerLink::new(
        identity,
        config.controller.clone(),
        key,
        Duration::from_secs(config.heartbeat_interval.max(1)),
        Arc::clone(&parts.launcher),
        lease,
        http,
    );
    if let Some(m) = mps {
        link = link.with_mps(Arc::clone(m));
    }
    Arc::new(
        link.with_probe(Arc::clone(&parts.probe))
            .with_inventory(Arc::clone(&parts.inventory)),
    )
}

/// The probe server of the node's shared tasks (not yet serving), and
/// the channel of task events it reports on.
fn start_probe(
    config: &NodeConfig,
    state_dir: &Path,
    name: &str,
    instances: &[gsched_core::gpu::Instance],
    launcher: &Arc<launcher::Launcher>,
) -> Result<(
    Arc<probe::ProbeServer>,
    tokio::net::UnixListener,
    Arc<probe::TaskEvents>,
)> {
    let events = Arc::new(probe::TaskEvents::default());
    let sock = state_dir.join("run").join(format!("{name}.probe.sock"));
    let mps_dirs = instances
        .iter()
        .filter_map(|i| i.mps.as_ref().map(|m| (i.uuid.clone(), m.pipe_dir.clone())))
        .collect();
    let (probe_server, probe_listener) = probe::ProbeServer::bind(
        sock,
        task_book(config, instances)?,
        mps_dirs,
        Arc::clone(&events),
    )?;
    launcher.set_probe(Arc::clone(&probe_server));
    {
        let steps: Arc<dyn probe::StepControl> = Arc::clone(launcher) as _;
        probe_server.set_steps(Arc::downgrade(&steps));
    }
    Ok((probe_server, probe_listener, events))
}

/// The node's name: `--name`, else the host name.
fn node_name(config: &NodeConfig) -> Result<String> {
    Ok(match &config.name {
        Some(n) => n.clone(),
        None => nix::unistd::gethostname()
            .context("cannot read the host name; give --name")?
            .to_string_lossy()
            .into_owned(),
    })
}

/// The node's GPUs as gnoded serves them.
struct Gpus {
    backend: Box<dyn gpu::GpuBackend>,
    settings: gpu::layout::GpuSettings,
    instances: Vec<gsched_core::gpu::Instance>,
    mps: Option<Arc<mps::MpsSupervisor>>,
}

/// Opens the GPU backend, applies the site's layout, takes the inventory
/// and starts MPS where the settings ask for it.
async fn start_gpus(config: &NodeConfig, state_dir: &Path, name: &str) -> Result<Gpus> {
    let gpu_settings = match &config.gpu_config {
        Some(p) => gpu::layout::GpuSettings::read(p)?,
        None => gpu::layout::GpuSettings::default(),
    };
    let backend = gpu::select(
        name,
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
        let root = state_dir.join("mps").join(name);
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
    Ok(Gpus {
        backend,
        settings: gpu_settings,
        instances,
        mps,
    })
}

/// The book of shared tasks, with the placement policy and compute
/// settings the flags name.
fn task_book(
    config: &NodeConfig,
    instances: &[gsched_core::gpu::Instance],
) -> Result<gsched_core::placement::TaskBook> {
    let placement = gsched_core::placement::placement_policy(&config.placement_policy)
        .with_context(|| {
            format!(
                "unknown --placement-policy '{}' (known: {})",
                config.placement_policy,
                gsched_core::placement::placement_names().join(", ")
            )
        })?;
    let compute_ceiling = gsched_core::compute::parse_ceiling(&config.compute_ceiling)
        .map_err(|e| anyhow::anyhow!("--compute-ceiling: {e}"))?;
    let default_share = gsched_core::compute::parse_share(&config.default_gpu_share)
        .with_context(|| format!("invalid --default-gpu-share '{}'", config.default_gpu_share))?;
    Ok(
        gsched_core::placement::TaskBook::of_instances(placement, instances)
            .starting_at(probe::now_ms() as u64 * 1024)
            .with_max_overtakes(config.max_overtakes)
            .with_compute_ceiling(compute_ceiling)
            .with_default_share(default_share),
    )
}

/// Gives the probe server what it reads from the GPUs and the cgroups
/// (free memory, processes, busy time, context costs), and the launcher
/// the interception library.
fn connect_probe(
    config: &NodeConfig,
    parts: &Parts,
    instances: &[gsched_core::gpu::Instance],
) -> Result<()> {
    let Parts {
        backend,
        confine,
        launcher,
        probe: probe_server,
        ..
    } = parts;
    {
        let mut gpus: Vec<u32> = instances.iter().map(|i| i.gpu_index).collect();
        gpus.sort_unstable();
        gpus.dedup();
        gpu::meter::start(Arc::clone(backend), Arc::clone(confine), &gpus);
    }
    {
        let b = Arc::clone(backend);
        probe_server.set_free_memory(Arc::new(move |uuid: &str| b.free_bytes(uuid)));
        // Only jobs' processes hold a drain: not the MPS server, nor what
        // runs outside gsched.
        let (b, c) = (Arc::clone(backend), Arc::clone(confine));
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
        let c = Arc::clone(confine);
        probe_server.set_gpu_busy(Arc::new(move |job, pid, busy, placed| {
            c.add_gpu_busy(job, pid, busy, placed)
        }));
    }
    if context.learns() {
        let probe = Arc::clone(probe_server);
        context::start_sampling(
            Arc::clone(&context),
            Arc::clone(backend),
            move || probe.placed_processes(),
            gpu_models(instances),
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
    Ok(())
}

/// The reshaper of the GPUs that may be re-partitioned.
fn reshaper(
    config: &NodeConfig,
    name: &str,
    gpu_settings: &gpu::layout::GpuSettings,
    mps: Option<&Arc<mps::MpsSupervisor>>,
    parts: &Parts,
    instances: &[gsched_core::gpu::Instance],
) -> Result<Arc<reshape::Reshaper>> {
    let Parts {
        backend,
        confine,
        probe: probe_server,
        inventory,
        ..
    } = parts;
    let reshaper = reshape::Reshaper::new(
        name.to_string(),
        Arc::clone(backend),
        Arc::clone(probe_server),
        Arc::clone(confine),
        Arc::clone(inventory),
        reshape::reshapeable_gpus(
            instances,
            backend.is_simulated() || gpu_settings.allow_mig_reconfigure,
        )
        .difference(&gpu_settings.fixed_gpus())
        .copied()
        .collect(),
        mig_reconfig_delay(config.mig_reconfig_secs)?,
    );
    let reshaper = match mps {
        Some(sup) => reshaper.with_mps(Arc::clone(sup), gpu_settings.mps_gpus()),
        None => reshaper,
    };
    Ok(Arc::new(reshaper))
}
