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
pub mod leader;
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

/// A controller serving its API: a standby's answers until it leads (see
/// [`Serving::lead`]), then the full API.
pub struct Serving {
    pub addr: std::net::SocketAddr,
    /// `http://ADDR`, or `https://ADDR` with TLS: the address it advertises.
    pub url: String,
    pub socket: std::path::PathBuf,
    /// The socket published for loopback commands (`/run/gsched/...`).
    pub rendezvous: Option<std::path::PathBuf>,
    /// Leadership as this controller serves it.
    pub role: Arc<leader::Role>,
    /// The controller once it leads.
    pub controller: Arc<std::sync::OnceLock<Arc<Controller>>>,
    config: CtldConfig,
    keys: Keys,
    database: store::Database,
    tcp_app: Arc<std::sync::OnceLock<axum::Router>>,
    socket_app: Arc<std::sync::OnceLock<axum::Router>>,
    http: reqwest::Client,
    /// The API listener's caps: the total grows with the nodes.
    connection_limits: Arc<gsched_daemon::limits::ConnectionLimits<String>>,
}

/// A controller that leads.
pub struct Running {
    pub addr: std::net::SocketAddr,
    pub url: String,
    pub socket: std::path::PathBuf,
    pub rendezvous: Option<std::path::PathBuf>,
    pub controller: Arc<Controller>,
    pub tenure: Arc<leader::Tenure>,
    term: store::Term,
    renewer: store::Renewer,
}

impl Serving {
    /// Removes the local sockets at shutdown, so no command finds a dead
    /// one (a crash leaves them; the next start replaces them).
    pub fn remove_sockets(&self) {
        remove_sockets(&self.socket, self.rendezvous.as_ref());
    }
}

impl Running {
    pub fn remove_sockets(&self) {
        remove_sockets(&self.socket, self.rendezvous.as_ref());
    }

    /// A clean stop, or a step-down: gives the lease up so that a standby
    /// takes over after the handover grace rather than the whole lease
    /// (raising the epoch past any a node has followed), and removes the
    /// local sockets.
    pub async fn stop(self) {
        self.remove_sockets();
        leader::resign(self.renewer, &self.term, &self.tenure).await;
    }
}

/// Removes the local sockets (a stopping controller's).
pub fn remove_sockets(socket: &Path, rendezvous: Option<&std::path::PathBuf>) {
    for path in std::iter::once(socket).chain(rendezvous.map(|p| p.as_path())) {
        if let Err(e) = std::fs::remove_file(path) {
            tracing::warn!(socket = %path.display(), error = %e, "cannot remove the local socket");
        }
    }
}

/// The controller's keys: the cluster key (nodes) and the token authority.
struct Keys {
    cluster: String,
    authority: auth::Authority,
}

impl Keys {
    fn load(config: &CtldConfig, state_dir: &Path) -> Result<Keys> {
        let key_path = config
            .cluster_key_file
            .clone()
            .unwrap_or_else(|| state_dir.join("cluster.key"));
        let cluster = gsched_daemon::key::load_or_create(&key_path)?;
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
        Ok(Keys { cluster, authority })
    }
}

/// Where the store is: `--database`, else SQLite in the state directory
/// (created 0600 before SQLite opens it: its WAL and shared-memory files
/// take the database's mode; looser existing files are refused).
fn database(config: &CtldConfig, state_dir: &Path) -> Result<store::Database> {
    if let Some(url) = &config.database {
        return store::Database::postgres(url).context("--database");
    }
    let db = state_dir.join("ctld.db");
    gsched_daemon::state::private_file(&db)?;
    for side in ["ctld.db-wal", "ctld.db-shm"] {
        gsched_daemon::state::check_private_if_present(&state_dir.join(side))?;
    }
    Ok(store::Database::Sqlite(db))
}

/// Opens the store under `state_dir` (or `--database`), binds the API, and
/// leads once it wins the lease: [`serve`] then [`Serving::lead`].
pub async fn start(config: CtldConfig, state_dir: &Path) -> Result<Running> {
    serve(config, state_dir).await?.lead().await
}

/// Checks the settings, binds the API and the local sockets, and serves a
/// standby's answers on them until [`Serving::lead`] switches them over.
pub async fn serve(config: CtldConfig, state_dir: &Path) -> Result<Serving> {
    gsched_daemon::state::prepare_dir(state_dir)?;
    command::check(&config)?;
    leader_timings(&config)?;
    let keys = Keys::load(&config, state_dir)?;
    let database = database(&config, state_dir)?;
    let socket_path = config
        .socket
        .clone()
        .unwrap_or_else(|| state_dir.join("ctld.sock"));
    let socket = bind_socket(&socket_path)?;
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
    let role = Arc::new(leader::Role::default());
    let tcp_app = Arc::new(std::sync::OnceLock::new());
    let socket_app = Arc::new(std::sync::OnceLock::new());
    let listener = Bounded::new(
        listener,
        API_CONNECTIONS_PER_ADDRESS,
        API_CONNECTIONS_TOTAL,
        API_IDLE,
    );
    let connection_limits = listener.limits();
    // The local sockets first: a command that finds the port answering
    // finds them too (without them it would reach the port without its
    // caller's identity).
    let local = api::standby::switch(Arc::clone(&socket_app), Arc::clone(&role));
    serve_socket(socket, local.clone());
    let rendezvous = publish_rendezvous(addr).map(|(listener, path)| {
        serve_socket(listener, local);
        path
    });
    endpoint.serve(
        "API",
        listener,
        api::standby::switch(Arc::clone(&tcp_app), Arc::clone(&role)),
    );
    tracing::info!(%addr, socket = %socket_path.display(), "gctld listening");
    Ok(Serving {
        addr,
        url,
        socket: socket_path,
        rendezvous,
        role,
        controller: Arc::new(std::sync::OnceLock::new()),
        config,
        keys,
        database,
        tcp_app,
        socket_app,
        http,
        connection_limits,
    })
}

/// The leader lease's timings; with standbys (`--controllers` lists more
/// than one), checked against the node timeout.
fn leader_timings(config: &CtldConfig) -> Result<gsched_core::leadership::Timings> {
    use gsched_core::leadership::Timings;
    let lease = std::time::Duration::from_secs(config.leader_lease);
    let standbys = config
        .controllers
        .as_deref()
        .is_some_and(|c| c.split(',').filter(|u| !u.trim().is_empty()).count() > 1);
    let timings = if standbys {
        Timings::new(
            lease,
            std::time::Duration::from_secs(config.node_timeout.max(1)),
        )
    } else {
        Timings::alone(lease)
    };
    timings.map_err(|e| anyhow::anyhow!("leader_lease: {e}"))
}

impl Serving {
    /// Waits as a standby until this controller wins the lease, then loads
    /// the store, starts the loops and switches the API over.
    pub async fn lead(self) -> Result<Running> {
        let config = &self.config;
        let timings = leader_timings(config)?;
        let database = self.database.with_session_limits(timings.lease);
        let mut opened = store::Store::connect(&database, config.durability).await?;
        let (term, taken) = leader::campaign(
            &mut opened,
            &leader::this_holder(),
            &self.url,
            timings,
            &self.role,
        )
        .await?;
        let tenure = leader::lead(&self.role, term.clone(), taken, timings, opened.renewer());
        let on_failure = (opened.renewer(), term.clone(), Arc::clone(&tenure));
        let taken = self.take_office(opened, term, tenure).await;
        if let Err(e) = &taken {
            // Won but cannot lead: give the lease up rather than hold it
            // unused until it runs out.
            let (renewer, term, tenure) = on_failure;
            tenure.step_down.now(format!("cannot start leading: {e:#}"));
            leader::resign(renewer, &term, &tenure).await;
        }
        taken
    }

    /// Loads the store, starts the loops and switches the API over.
    async fn take_office(
        self,
        opened: store::Opened,
        term: store::Term,
        tenure: Arc<leader::Tenure>,
    ) -> Result<Running> {
        let renewer = opened.renewer();
        let config = &self.config;
        let keep_finished_since =
            gsched_core::cluster::kept_finished_since(controller::unix_now(), config.min_job_age);
        let (store, loaded) = opened
            .open(term.clone(), keep_finished_since, tenure.step_down.clone())
            .await?;
        tracing::info!(
            db = %self.database.shown(),
            epoch = term.epoch,
            jobs = loaded.jobs.len(),
            max_job_id = loaded.max_job_id,
            past_runs = loaded.past_runs.len(),
            nodes = loaded.nodes.len(),
            "store loaded"
        );
        let cluster = restore_cluster(config, loaded)?;
        let nodes: Arc<dyn node_client::NodeClient> = Arc::new(node_client::SealedNodes::new(
            self.http.clone(),
            &self.keys.cluster,
            term.epoch,
        ));
        let controller = Controller::new(
            cluster,
            Arc::new(store),
            self.config.clone(),
            self.keys.cluster.clone(),
            self.url.clone(),
            self.keys.authority,
            self.socket.clone(),
            nodes,
        );
        controller.set_tenure(Arc::clone(&tenure));
        tokio::spawn(Arc::clone(&controller).scheduler_loop());
        tokio::spawn(Arc::clone(&controller).liveness_loop());
        tokio::spawn(Arc::clone(&controller).utilization_loop());
        tokio::spawn(Arc::clone(&controller).retention_loop());
        tokio::spawn(connection_cap_loop(
            Arc::clone(&controller),
            Arc::clone(&self.connection_limits),
        ));
        let _ = self
            .socket_app
            .set(api::socket_app(Arc::clone(&controller)));
        let _ = self.tcp_app.set(api::tcp_app(Arc::clone(&controller)));
        let _ = self.controller.set(Arc::clone(&controller));
        Ok(Running {
            addr: self.addr,
            url: self.url,
            socket: self.socket,
            rendezvous: self.rendezvous,
            controller,
            tenure,
            term,
            renewer,
        })
    }
}

/// Keeps the API's total connection cap above the nodes: every gnoded
/// keeps a connection open to its controller, and a cap below their
/// number closed them in turn (each heartbeat then opened a new one, and
/// some failed on one closed under them). Looked at every few seconds;
/// see [`api_connection_cap`].
async fn connection_cap_loop(
    ctl: Arc<Controller>,
    limits: Arc<gsched_daemon::limits::ConnectionLimits<String>>,
) {
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(2));
    let mut warned = false;
    loop {
        tick.tick().await;
        let nodes = ctl.lock().nodes().count();
        let nofile = gsched_daemon::island::raise_open_file_limit();
        let (cap, clamped) = api_connection_cap(nodes, nofile);
        if clamped && !std::mem::replace(&mut warned, true) {
            tracing::warn!(
                nodes,
                cap,
                open_file_limit = nofile,
                "the API's connection cap is held to half the open-file limit, below one \
                 connection per node: raise LimitNOFILE (nodes' idle connections are closed in turn)"
            );
        }
        limits.set_total(cap);
    }
}

/// The API's total connection cap with `nodes` nodes known:
/// [`API_CONNECTIONS_TOTAL`] plus one per node, but at most half the
/// open-file limit `nofile` (the other half for the controller's own
/// connections to its nodes, its store and its sockets) and never below
/// [`API_CONNECTIONS_TOTAL`]. Whether the open-file limit held it down.
fn api_connection_cap(nodes: usize, nofile: Option<u64>) -> (usize, bool) {
    let wanted = API_CONNECTIONS_TOTAL.saturating_add(nodes);
    let room = nofile.map_or(usize::MAX, |n| usize::try_from(n / 2).unwrap_or(usize::MAX));
    let cap = wanted.min(room.max(API_CONNECTIONS_TOTAL));
    (cap, cap < wanted)
}

/// The cluster as the store left it, with the settings' policies.
fn restore_cluster(config: &CtldConfig, loaded: store::Loaded) -> Result<Cluster> {
    let policy = launch_policy(&config.launch_policy)?;
    let priority = config.priority_policy().context("--priority-type")?;
    let mut cluster = Cluster::restore(policy, loaded.jobs, loaded.nodes);
    cluster.restore_accounts(loaded.accounts);
    cluster.restore_history(loaded.max_job_id, loaded.past_runs);
    cluster.set_job_requeue(config.job_requeue);
    cluster.set_max_gpu_fault_requeues(config.max_gpu_fault_requeues);
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
        max_array_size: config.max_array_size,
    });
    cluster.set_early_start(Some(config.early_start_secs));
    // Checked at start (command::check).
    cluster.set_shared_start_ahead(
        gsched_core::launch::parse_start_ahead(&config.shared_start_ahead)
            .unwrap_or(Some(gsched_core::launch::DEFAULT_START_AHEAD)),
    );
    cluster.set_host_mem_reserve(config.host_mem_reserve);
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
    Ok(cluster)
}

/// Serves the socket API (`app`, with the caller's credentials) on `socket`.
fn serve_socket(socket: tokio::net::UnixListener, app: axum::Router) {
    let local = app.into_make_service_with_connect_info::<api::PeerCred>();
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

#[cfg(test)]
mod connection_cap_tests {
    use super::{api_connection_cap, API_CONNECTIONS_TOTAL};

    #[test]
    fn the_cap_follows_the_nodes_within_half_the_open_file_limit() {
        let base = API_CONNECTIONS_TOTAL;
        assert_eq!(api_connection_cap(0, Some(65_536)), (base, false));
        assert_eq!(
            api_connection_cap(10_000, Some(65_536)),
            (base + 10_000, false)
        );
        assert_eq!(api_connection_cap(40_000, Some(65_536)), (32_768, true));
        // A low limit never takes the cap under its base.
        assert_eq!(api_connection_cap(10_000, Some(1_024)), (base, true));
        assert_eq!(api_connection_cap(10_000, None), (base + 10_000, false));
        assert_eq!(api_connection_cap(usize::MAX, None), (usize::MAX, false));
    }
}
