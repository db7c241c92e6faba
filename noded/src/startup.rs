//! Starting gnoded: its parts built in dependency order (GPUs,
//! confinement, what is read from them, the launcher together with the
//! probe server and the MPS watch, reshaper, API, the link to the
//! controller), each from the flags and the parts before it. No part is
//! connected to another after it is built: the two that hold each other
//! (the launcher and the probe server, the launcher and the MPS watch) are
//! built together, the later one holding the launcher weakly, and the
//! reshaper's reports reach the link through a channel.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::{Context, Result};
use tokio::net::TcpListener;

use crate::launcher::{EndCheck, InterceptionLib, Launcher, LauncherPeers, LauncherSetup};
use crate::probe::{ProbeReaders, ProbeServer, ProbeSetup, ProbeSocket, TaskEvents};
use crate::{
    api, confine, context, every, fence, gpu, gpu_models, instance_id, link, memory_mib, mig_ids,
    mig_reconfig_delay, mps, probe, reshape, restore_reservations, watch_mps, MpsWatch, NodeConfig,
    Running, UNPLACED_CHECK,
};

/// Starts the node daemon. `shepherd_exe` is a binary that runs
/// [`shepherd::main`] when called with [`shepherd::SHEPHERD_ARG`].
pub async fn start(config: NodeConfig, state_dir: &Path, shepherd_exe: PathBuf) -> Result<Running> {
    gsched_daemon::state::prepare_dir(state_dir)?;
    let name = node_name(&config)?;
    let key = cluster_key(&config, state_dir)?;
    let Gpus {
        backend,
        settings: gpu_settings,
        instances,
        mps,
    } = start_gpus(&config, state_dir, &name).await?;
    let backend: Arc<dyn gpu::GpuBackend> = Arc::from(backend);
    let node_id = instance_id(state_dir)?;
    let (confine, cpus, memory_mib) = confine::start(
        &config,
        &confine::dir_name(&name, &node_id),
        memory_mib(),
        (!backend.is_simulated()).then(|| confine::NodeGpus {
            instances: instances.to_vec(),
            mig_ids: mig_ids(&*backend, &instances),
        }),
    )?;
    // The instances as the node registers them (re-partitions change them).
    let inventory = Arc::new(RwLock::new(instances.clone()));
    let Reading {
        probe: readers,
        context,
        interception,
        xids,
    } = start_reading(&config, &backend, &confine, &instances)?;
    let JobSide {
        launcher,
        probe: probe_server,
        watch,
        probe_listener,
        events,
        ended_rx,
    } = start_jobs(
        &config,
        state_dir,
        &name,
        shepherd_exe,
        &instances,
        JobParts {
            mps: mps.as_ref(),
            confine: &confine,
            inventory: &inventory,
            readers,
            interception,
            xids,
        },
    )?;
    let parts = Parts {
        backend,
        confine,
        launcher,
        probe: probe_server,
        inventory,
    };
    start_sampling(&parts, context, &instances);
    if let Some(w) = watch {
        watch_mps(
            w,
            Duration::from_secs(gpu_settings.mps_check_interval.max(1)),
        );
    }
    let ended = serve_probe_and_adopt(&parts, probe_listener).await?;
    let Parts {
        confine,
        launcher,
        probe: probe_server,
        ..
    } = &parts;
    let (endpoint, http) = tls_endpoint(&config)?;
    restore_reservations(
        &gsched_daemon::peer::PeerClient::new(
            http.clone(),
            &key,
            gsched_daemon::peer::Direction::ToController,
        ),
        &config.controllers(),
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
    let (reshape_tx, reshape_rx) = tokio::sync::mpsc::unbounded_channel();
    let reshaper = reshaper(
        &config,
        &name,
        &gpu_settings,
        mps.as_ref(),
        &parts,
        &instances,
    )?;
    let reshaper = Arc::new(reshaper.reporting_to(reshape_tx));
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
        tmp_disk_mib: crate::tmp_disk_mib(),
        instances,
        worker_limit: config.workers,
        running: Vec::new(),
        runs: Default::default(),
        ended: Vec::new(),
        fence_timeout_ms: config.fence_timeout.map(|s| s.saturating_mul(1000)),
        heartbeat_ms: config.heartbeat_interval.max(1).saturating_mul(1000),
        reshape_gpus: reshaper.reshapeable().iter().copied().collect(),
        reshape_keep,
        release: gsched_core::version::RELEASE.into(),
        protocol: gsched_core::version::PROTOCOL,
        followed_epoch: 0,
    };
    let link = link_to_controller(&config, &parts, identity, key, lease, http, mps.as_ref());
    tokio::spawn(Arc::clone(&link).report_reshapes(reshape_rx));
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

/// Serves the probe socket and adopts the jobs still running from before
/// a restart; answers the ends of those that ended meanwhile.
async fn serve_probe_and_adopt(
    parts: &Parts,
    probe_listener: tokio::net::UnixListener,
) -> Result<Vec<gsched_core::wire::JobEnded>> {
    tokio::spawn(Arc::clone(&parts.probe).serve(probe_listener));
    if !parts.backend.is_simulated() {
        // Processes that use an instance without a placement close it to
        // new shared processes while they run (NVML: off the async threads;
        // simulated GPUs run no process).
        let p = Arc::clone(&parts.probe);
        every(UNPLACED_CHECK, move || p.check_unplaced());
    }
    // Adopting waits for the cgroups of jobs that ended meanwhile to empty:
    // off the async threads.
    let ended = {
        let l = Arc::clone(&parts.launcher);
        tokio::task::spawn_blocking(move || l.adopt()).await
    }
    .context("adopting the running jobs failed")?;
    Ok(ended)
}

/// The launcher and, built with it and holding it weakly, the probe
/// server (not yet serving) and the MPS watch.
struct JobSide {
    launcher: Arc<Launcher>,
    probe: Arc<ProbeServer>,
    watch: Option<Arc<MpsWatch>>,
    probe_listener: tokio::net::UnixListener,
    /// The task events the probe server reports on.
    events: Arc<TaskEvents>,
    /// The ends of runs the launcher saw, for the link to report.
    ended_rx: tokio::sync::mpsc::UnboundedReceiver<gsched_core::wire::JobEnded>,
}

/// What the job side is built from, of the parts before it.
struct JobParts<'a> {
    mps: Option<&'a Arc<mps::MpsSupervisor>>,
    confine: &'a Arc<confine::Confinement>,
    inventory: &'a Arc<RwLock<Vec<gsched_core::gpu::Instance>>>,
    readers: ProbeReaders,
    interception: Option<InterceptionLib>,
    xids: Arc<gpu::xid::XidLog>,
}

fn start_jobs(
    config: &NodeConfig,
    state_dir: &Path,
    name: &str,
    shepherd_exe: PathBuf,
    instances: &[gsched_core::gpu::Instance],
    parts: JobParts<'_>,
) -> Result<JobSide> {
    let (ended_tx, ended_rx) = tokio::sync::mpsc::unbounded_channel();
    let events = Arc::new(TaskEvents::default());
    let (socket, probe_listener) =
        ProbeSocket::bind(state_dir.join("run").join(format!("{name}.probe.sock")))?;
    let book = task_book(config, instances)?;
    let hold_between_ms = config.hold_between_ms()?;
    let mps_dirs = instances
        .iter()
        .filter_map(|i| i.mps.as_ref().map(|m| (i.uuid.clone(), m.pipe_dir.clone())))
        .collect();
    let spool_root = state_dir.join("spool").join(name);
    let setup = LauncherSetup {
        node: name.to_string(),
        spool_root: spool_root.clone(),
        shepherd_exe,
        kill_wait: Duration::from_secs(config.kill_wait),
        uid_policy: gsched_core::job::JobUidPolicy {
            min_uid: config.min_job_uid,
            allow_root: config.allow_root_jobs,
        },
        ended: ended_tx,
        confine: Arc::clone(parts.confine),
        tls_ca: config.tls_ca.clone(),
        interception: parts.interception,
    };
    let mut parts_built = None;
    let launcher = Launcher::with_peers(setup, |me| {
        let probe = ProbeServer::new(
            socket,
            ProbeSetup {
                book,
                hold_between_ms,
                mps: mps_dirs,
                events: Arc::clone(&events),
                readers: parts.readers,
                steps: me.clone(),
            },
        );
        let watch = parts.mps.map(|sup| {
            Arc::new(MpsWatch {
                sup: Arc::clone(sup),
                probe: Arc::clone(&probe),
                launcher: me.clone(),
                confine: Arc::clone(parts.confine),
                recovering: Default::default(),
                xids: Arc::clone(&parts.xids),
                inventory: Arc::clone(parts.inventory),
            })
        });
        // A job hit by a fault ends within a moment of it, before the
        // watch's next look: its end looks at the servers' logs first.
        let end_check = watch.as_ref().map(|w| {
            let w = Arc::clone(w);
            Arc::new(move || {
                if w.handle_faults() {
                    w.close_while_down_or_recovering();
                }
            }) as EndCheck
        });
        parts_built = Some((Arc::clone(&probe), watch));
        LauncherPeers { probe, end_check }
    })
    .with_context(|| format!("cannot set up the spool directory {}", spool_root.display()))?;
    let (probe, watch) = parts_built.expect("the launcher builds its peers");
    Ok(JobSide {
        launcher,
        probe,
        watch,
        probe_listener,
        events,
        ended_rx,
    })
}

/// The daemon's parts started so far, as later parts need them.
struct Parts {
    backend: Arc<dyn gpu::GpuBackend>,
    confine: Arc<confine::Confinement>,
    launcher: Arc<Launcher>,
    probe: Arc<ProbeServer>,
    /// The instances as the node registers them (re-partitions change them).
    inventory: Arc<RwLock<Vec<gsched_core::gpu::Instance>>>,
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
        .then(|| {
            config
                .controllers()
                .first()
                .and_then(|c| gsched_daemon::advertise::routed_toward(c))
        })
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

/// The cluster key: `--cluster-key-file`, else `STATE_DIR/cluster.key`.
fn cluster_key(config: &NodeConfig, state_dir: &Path) -> Result<String> {
    let path = config
        .cluster_key_file
        .clone()
        .unwrap_or_else(|| state_dir.join("cluster.key"));
    gsched_daemon::key::read(&path)
}

/// The node API's endpoint (https with a certificate) and the client
/// that calls the controller (checking it against `--tls-ca`).
fn tls_endpoint(config: &NodeConfig) -> Result<(gsched_daemon::tls::Endpoint, reqwest::Client)> {
    let endpoint = gsched_daemon::tls::Endpoint::from_flags(
        config.tls_cert.as_deref(),
        config.tls_key.as_deref(),
        config.listen,
        config.allow_plain_http,
    )?;
    let http = gsched_daemon::tls::http_client(config.tls_ca.as_deref())?;
    Ok((endpoint, http))
}

/// The node's name: `--name`, else the host name.
fn node_name(config: &NodeConfig) -> Result<String> {
    match &config.name {
        Some(n) => Ok(n.clone()),
        None => host_name(),
    }
}

/// A node's name when it is given none: its host name.
pub(crate) fn host_name() -> Result<String> {
    Ok(nix::unistd::gethostname()
        .context("cannot read the host name; give --name")?
        .to_string_lossy()
        .into_owned())
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

/// What is read from the GPUs and the cgroups, for the probe server
/// (free memory, processes, busy time, context costs) and the launcher
/// (the interception library); the GPU meter runs from here on.
struct Reading {
    probe: ProbeReaders,
    context: Arc<context::ContextWatch>,
    interception: Option<InterceptionLib>,
    /// The driver's recent Xid errors (watched on real GPUs).
    xids: Arc<gpu::xid::XidLog>,
}

fn start_reading(
    config: &NodeConfig,
    backend: &Arc<dyn gpu::GpuBackend>,
    confine: &Arc<confine::Confinement>,
    instances: &[gsched_core::gpu::Instance],
) -> Result<Reading> {
    {
        let mut gpus: Vec<u32> = instances.iter().map(|i| i.gpu_index).collect();
        gpus.sort_unstable();
        gpus.dedup();
        gpu::meter::start(Arc::clone(backend), Arc::clone(confine), &gpus);
    }
    let xids = Arc::new(gpu::xid::XidLog::default());
    if !backend.is_simulated() {
        gpu::xid::watch(Arc::clone(&xids));
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
    let free = Arc::clone(backend);
    // Only jobs' processes hold a drain: not the MPS server, nor what runs
    // outside gsched.
    let (b, c) = (Arc::clone(backend), Arc::clone(confine));
    let busy = Arc::clone(confine);
    let probe = ProbeReaders {
        free_memory: Some(Arc::new(move |uuid: &str| free.free_bytes(uuid))),
        processes_on: Some(Arc::new(move |uuid: &str| {
            let pids = b.processes_on(uuid)?;
            Some(
                c.jobs_of(&pids)
                    .into_iter()
                    .map(|(p, j, _)| (p, j))
                    .collect(),
            )
        })),
        context: Some(Arc::clone(&context)),
        gpu_busy: Some(Arc::new(move |job, pid, used, placed| {
            busy.add_gpu_busy(job, pid, used, placed)
        })),
    };
    let probe_lib = match &config.probe_lib {
        Some(p) if p.is_file() => Some(p.clone()),
        Some(p) => anyhow::bail!("the probe library {} does not exist", p.display()),
        None => std::env::current_exe()
            .ok()
            .and_then(|e| crate::shepherd::beside_program(&e, "libgprobe.so")),
    };
    let interception = match probe_lib {
        Some(lib) => {
            tracing::info!(lib = %lib.display(), "CUDA programs of shared jobs run under the interception library");
            Some(InterceptionLib {
                lib,
                default_bytes: task_mem * 1024 * 1024,
                context: Arc::clone(&context),
            })
        }
        None => {
            tracing::warn!(
                "libgprobe.so not found next to this program or in ../lib/gsched/: CUDA programs of shared jobs are not intercepted (give --probe-lib)"
            );
            None
        }
    };
    Ok(Reading {
        probe,
        context,
        interception,
        xids,
    })
}

/// Samples the jobs' use of their cgroups, and (where the context cost is
/// learned) the processes placed on the GPUs.
fn start_sampling(
    parts: &Parts,
    context: Arc<context::ContextWatch>,
    instances: &[gsched_core::gpu::Instance],
) {
    {
        let l = Arc::clone(&parts.launcher);
        every(parts.confine.sample_interval(), move || l.sample_usage());
    }
    if context.learns() {
        let probe = Arc::clone(&parts.probe);
        context::start_sampling(
            context,
            Arc::clone(&parts.backend),
            move || probe.placed_processes(),
            gpu_models(instances),
        );
    }
}

/// The reshaper of the GPUs that may be re-partitioned.
fn reshaper(
    config: &NodeConfig,
    name: &str,
    gpu_settings: &gpu::layout::GpuSettings,
    mps: Option<&Arc<mps::MpsSupervisor>>,
    parts: &Parts,
    instances: &[gsched_core::gpu::Instance],
) -> Result<reshape::Reshaper> {
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
    Ok(match mps {
        Some(sup) => reshaper.with_mps(Arc::clone(sup), gpu_settings.mps_gpus()),
        None => reshaper,
    })
}
