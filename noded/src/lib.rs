//! gsched-noded: the node daemon. Reports the node's GPU instances to the
//! controller, runs jobs under shepherds, enforces time limits, and reports
//! how jobs ended.

pub mod api;
pub mod backend;
pub mod config;
pub mod launcher;
pub mod link;
pub mod shepherd;
pub mod spool;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use tokio::net::TcpListener;

pub use config::NodeConfig;

/// A started node daemon.
pub struct Running {
    pub addr: std::net::SocketAddr,
    pub name: String,
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

/// Starts the node daemon. `shepherd_exe` is a binary that runs
/// [`shepherd::main`] when called with [`shepherd::SHEPHERD_ARG`].
pub async fn start(config: NodeConfig, state_dir: &Path, shepherd_exe: PathBuf) -> Result<Running> {
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
    let backend = backend::select(&name, config.sim_gpus.as_deref())?;
    tracing::info!(node = %name, "GPU backend: {}", backend.describe());
    let (ended_tx, ended_rx) = tokio::sync::mpsc::unbounded_channel();
    let spool_root = state_dir.join("spool").join(&name);
    let launcher = launcher::Launcher::new(
        name.clone(),
        spool_root.clone(),
        shepherd_exe,
        Duration::from_secs(config.kill_wait),
        ended_tx,
    )
    .with_context(|| format!("cannot set up the spool directory {}", spool_root.display()))?;
    let ended = launcher.adopt();
    let listener = TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    let addr = listener.local_addr()?;
    let app = api::router(Arc::new(api::NodeApi {
        launcher: Arc::clone(&launcher),
        key: key.clone(),
    }));
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "node API stopped");
        }
    });
    let identity = gsched_core::wire::NodeRegistration {
        name: name.clone(),
        url: format!("http://{addr}"),
        cpus: std::thread::available_parallelism()
            .map(|n| n.get() as u32)
            .unwrap_or(1),
        memory_mib: memory_mib(),
        instances: backend.instances(),
        worker_limit: config.workers,
        running: Vec::new(),
        ended: Vec::new(),
    };
    let link = Arc::new(link::ControllerLink::new(
        identity,
        config.controller.clone(),
        key,
        Duration::from_secs(config.heartbeat_interval.max(1)),
        Arc::clone(&launcher),
    ));
    tokio::spawn(link.run(ended_rx, ended));
    tracing::info!(%addr, node = %name, "gnoded listening");
    Ok(Running { addr, name })
}
