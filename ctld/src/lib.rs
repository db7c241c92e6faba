//! gsched-ctld: the controller. Holds the queues and the job store, runs the
//! launch policy, serves the REST API, and keeps track of nodes.

pub mod api;
pub mod config;
pub mod controller;
pub mod store;

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use gsched_core::cluster::Cluster;
use gsched_core::launch::launch_policy;
use tokio::net::TcpListener;

pub use config::CtldConfig;
pub use controller::Controller;

/// A started controller: the address its API is bound to.
pub struct Running {
    pub addr: std::net::SocketAddr,
}

/// Opens the store under `state_dir`, binds the API, and starts the loops.
pub async fn start(config: CtldConfig, state_dir: &Path) -> Result<Running> {
    std::fs::create_dir_all(state_dir)
        .with_context(|| format!("cannot create state directory {}", state_dir.display()))?;
    let policy = launch_policy(&config.launch_policy)?;
    let key_path = config
        .cluster_key_file
        .clone()
        .unwrap_or_else(|| state_dir.join("cluster.key"));
    let key = gsched_daemon::key::load_or_create(&key_path)?;
    let db = state_dir.join("ctld.db");
    let (store, loaded) = store::Store::open(&db, config.durability).await?;
    tracing::info!(db = %db.display(), jobs = loaded.jobs.len(), nodes = loaded.nodes.len(), "store loaded");
    let cluster = Cluster::restore(policy, loaded.jobs, loaded.nodes);
    let listener = TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    let addr = listener.local_addr()?;
    let url = format!("http://{addr}");
    let controller = Controller::new(cluster, store, config, key, url);
    tokio::spawn(Arc::clone(&controller).scheduler_loop());
    tokio::spawn(Arc::clone(&controller).liveness_loop());
    let app = api::router(Arc::clone(&controller));
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "API server stopped");
        }
    });
    tracing::info!(%addr, "gctld listening");
    Ok(Running { addr })
}
