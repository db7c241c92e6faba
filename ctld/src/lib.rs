//! gsched-ctld: the controller. Holds the queues and the job store, runs the
//! launch policy, serves the REST API, and keeps track of nodes.

// slurmrestd's job record is one large `json!`.
#![recursion_limit = "256"]

pub mod api;
pub mod auth;
pub mod command;
pub mod config;
pub mod controller;
pub mod dashboard;
pub mod node_client;
pub mod store;

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use gsched_core::cluster::Cluster;
use gsched_core::launch::launch_policy;
use gsched_daemon::listener::Bounded;
use gsched_daemon::tls::{self, Endpoint};
use tokio::net::TcpListener;

pub use config::CtldConfig;
pub use controller::Controller;

/// Open API connections one address (TCP) or uid (socket) may hold, all
/// clients together on each, and how long one may idle (docs/security.md).
pub const API_CONNECTIONS_PER_ADDRESS: usize = 256;
pub const API_CONNECTIONS_PER_UID: usize = 64;
pub const API_CONNECTIONS_TOTAL: usize = 1024;
pub const API_IDLE: std::time::Duration = std::time::Duration::from_secs(60);

/// A started controller: the address its API is bound to, and its socket.
pub struct Running {
    pub addr: std::net::SocketAddr,
    /// `http://ADDR`, or `https://ADDR` with TLS.
    pub url: String,
    pub socket: std::path::PathBuf,
    /// The socket published for loopback commands (`/run/gsched/...`).
    pub rendezvous: Option<std::path::PathBuf>,
    pub controller: Arc<Controller>,
}

impl Running {
    /// Removes the local sockets at shutdown, so no command finds a dead
    /// one (a crash leaves them; the next start replaces them).
    pub fn remove_sockets(&self) {
        for path in std::iter::once(&self.socket).chain(self.rendezvous.as_ref()) {
            if let Err(e) = std::fs::remove_file(path) {
                tracing::warn!(socket = %path.display(), error = %e, "cannot remove the local socket");
            }
        }
    }
}

/// Opens the store under `state_dir`, binds the API, and starts the loops.
pub async fn start(config: CtldConfig, state_dir: &Path) -> Result<Running> {
    gsched_daemon::state::prepare_dir(state_dir)?;
    let policy = launch_policy(&config.launch_policy)?;
    let priority = config.priority_policy().context("--priority-type")?;
    let key_path = config
        .cluster_key_file
        .clone()
        .unwrap_or_else(|| state_dir.join("cluster.key"));
    let key = gsched_daemon::key::load_or_create(&key_path)?;
    let token_key_path = config
        .token_key_file
        .clone()
        .unwrap_or_else(|| state_dir.join("jwt.key"));
    let token_key = gsched_daemon::key::load_or_create(&token_key_path)?;
    let authority = auth::Authority::new(
        token_key.as_bytes(),
        &config.admins,
        nix::unistd::geteuid().as_raw(),
        config.token_max_lifetime,
    );
    let socket_path = config
        .socket
        .clone()
        .unwrap_or_else(|| state_dir.join("ctld.sock"));
    let socket = bind_socket(&socket_path)?;
    let database = match &config.database {
        Some(url) => store::Database::postgres(url).context("--database")?,
        None => {
            let db = state_dir.join("ctld.db");
            // Created 0600 before SQLite opens it: its WAL and shared-memory
            // files take the database's mode. Looser existing files are
            // refused.
            gsched_daemon::state::private_file(&db)?;
            for side in ["ctld.db-wal", "ctld.db-shm"] {
                gsched_daemon::state::check_private_if_present(&state_dir.join(side))?;
            }
            store::Database::Sqlite(db)
        }
    };
    let keep_finished_since =
        gsched_core::cluster::kept_finished_since(controller::unix_now(), config.min_job_age);
    let (store, loaded) =
        store::Store::open(&database, config.durability, keep_finished_since).await?;
    tracing::info!(
        db = %database.shown(),
        jobs = loaded.jobs.len(),
        max_job_id = loaded.max_job_id,
        past_runs = loaded.past_runs.len(),
        nodes = loaded.nodes.len(),
        "store loaded"
    );
    let mut cluster = Cluster::restore(policy, loaded.jobs, loaded.nodes);
    cluster.restore_accounts(loaded.accounts);
    cluster.restore_history(loaded.max_job_id, loaded.past_runs);
    cluster.set_job_requeue(config.job_requeue);
    cluster.set_submission_caps(gsched_core::cluster::SubmissionCaps {
        max_job_count: config.max_job_count,
        max_script_bytes: config.max_script_size,
        max_jobs_per_user: match config.max_jobs_per_user {
            0 => usize::MAX,
            n => n,
        },
        max_bytes_per_user: match config.max_bytes_per_user {
            0 => usize::MAX,
            n => n,
        },
    });
    cluster.set_early_start(Some(config.early_start_secs));
    cluster.set_priority_policy(priority);
    cluster.set_preempt_mode(
        gsched_core::preempt::PreemptMode::parse(&config.preempt_mode)
            .map_err(|e| anyhow::anyhow!("--preempt-mode: {e}"))?,
    );
    cluster.set_scheduler_type(
        config
            .scheduler_type
            .parse()
            .map_err(|e| anyhow::anyhow!("--scheduler-type: {e}"))?,
    );
    cluster.set_accounting(config.accounting().map_err(|e| anyhow::anyhow!("{e}"))?);
    cluster.set_partition_factors(
        config
            .partition_factors()
            .map_err(|e| anyhow::anyhow!("{e}"))?,
    );
    let repartition = gsched_core::repartition::repartition_policy(&config.repartition)
        .map_err(|e| anyhow::anyhow!("--repartition: {e}"))?;
    cluster.set_repartition(repartition);
    // What no known node could ever run is refused (with re-partitioning,
    // what no layout of a node's MIG GPUs could give).
    cluster.set_refuse_unsatisfiable(true);
    let endpoint = Endpoint::from_flags(
        config.tls_cert.as_deref(),
        config.tls_key.as_deref(),
        config.listen,
        config.allow_plain_http,
    )?;
    let http = tls::http_client(config.tls_ca.as_deref())?;
    let listener = TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    let addr = listener.local_addr()?;
    let url = gsched_daemon::advertise::choose(
        config.advertise_url.as_deref(),
        endpoint.scheme(),
        addr,
        None,
        gsched_daemon::advertise::host_name().as_deref(),
    )?;
    let public_url = url.clone();
    let nodes: Arc<dyn node_client::NodeClient> =
        Arc::new(node_client::SealedNodes::new(http, &key));
    let controller = Controller::new(
        cluster,
        Arc::new(store),
        config,
        key,
        url,
        authority,
        socket_path.clone(),
        nodes,
    );
    tokio::spawn(Arc::clone(&controller).scheduler_loop());
    tokio::spawn(Arc::clone(&controller).liveness_loop());
    tokio::spawn(Arc::clone(&controller).utilization_loop());
    tokio::spawn(Arc::clone(&controller).retention_loop());
    let app = api::tcp_app(Arc::clone(&controller));
    let listener = Bounded::new(
        listener,
        API_CONNECTIONS_PER_ADDRESS,
        API_CONNECTIONS_TOTAL,
        API_IDLE,
    );
    // The local sockets first: a command that finds the port answering
    // finds them too (without them it would reach the port without its
    // caller's identity).
    serve_socket(socket, &controller);
    let rendezvous = publish_rendezvous(addr).map(|(listener, path)| {
        serve_socket(listener, &controller);
        path
    });
    endpoint.serve("API", listener, app);
    tracing::info!(%addr, socket = %socket_path.display(), "gctld listening");
    Ok(Running {
        addr,
        url: public_url,
        socket: socket_path,
        rendezvous,
        controller,
    })
}

/// Serves the socket API on `socket`.
fn serve_socket(socket: tokio::net::UnixListener, controller: &Arc<Controller>) {
    let local = api::socket_app(Arc::clone(controller))
        .into_make_service_with_connect_info::<api::PeerCred>();
    let socket = Bounded::new(
        socket,
        API_CONNECTIONS_PER_UID,
        API_CONNECTIONS_TOTAL,
        API_IDLE,
    );
    tokio::spawn(async move {
        if let Err(e) = axum::serve(socket, local).await {
            tracing::error!(error = %e, "socket API server stopped");
        }
    });
}

/// Publishes the local socket where commands given a loopback URL find it
/// without asking the port (`gsched_cli::local_socket`): for root
/// `/run/gsched/ctld.PORT.sock`, otherwise in `$XDG_RUNTIME_DIR/gsched`.
/// Only for a controller that loopback clients can reach (listening on a
/// loopback or wildcard address). Failing to publish is not fatal: local
/// commands then need `GSCHED_SOCKET` or `GSCHED_URL=unix:PATH`.
fn publish_rendezvous(
    addr: std::net::SocketAddr,
) -> Option<(tokio::net::UnixListener, std::path::PathBuf)> {
    if !(addr.ip().is_loopback() || addr.ip().is_unspecified()) {
        return None;
    }
    let dir = if nix::unistd::geteuid().is_root() {
        std::path::PathBuf::from(gsched_core::env::SYSTEM_RUN_DIR)
    } else {
        std::path::PathBuf::from(std::env::var_os("XDG_RUNTIME_DIR")?).join("gsched")
    };
    let path = gsched_core::env::rendezvous_socket(&dir, addr.port());
    let published = gsched_daemon::state::prepare_dir(&dir)
        .map_err(anyhow::Error::from)
        .and_then(|()| bind_socket(&path));
    match published {
        Ok(l) => {
            tracing::info!(socket = %path.display(), "local socket published for loopback commands");
            Some((l, path))
        }
        Err(e) => {
            tracing::warn!(
                error = %format!("{e:#}"),
                "cannot publish the local socket: commands on this host need GSCHED_SOCKET or GSCHED_URL=unix:PATH"
            );
            None
        }
    }
}

/// Binds the local socket, replacing a stale one a crash left behind;
/// everyone may connect (the kernel tells who did).
fn bind_socket(path: &Path) -> Result<tokio::net::UnixListener> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            anyhow::bail!(
                "{} exists and is not a socket; remove it or give another --socket",
                path.display()
            );
        }
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            anyhow::bail!(
                "another controller is serving {}; stop it first",
                path.display()
            );
        }
        std::fs::remove_file(path)
            .with_context(|| format!("cannot remove stale socket {}", path.display()))?;
    }
    let listener = tokio::net::UnixListener::bind(path)
        .with_context(|| format!("cannot listen on {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))
        .with_context(|| format!("cannot open {} to local users", path.display()))?;
    Ok(listener)
}
