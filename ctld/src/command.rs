//! gctld's command line and where its settings come from: its flags over
//! the site file's `[controller]` section (and `[cluster]`'s `tls_ca`).
//! Used by `gctld` itself, `gsched config check` and the manual pages.

use clap::Parser;
use gsched_daemon::settings::{ClusterDefaults, Loaded};
use gsched_daemon::DaemonArgs;

use crate::CtldConfig;

/// `[cluster]` keys that stand in for the controller's settings.
pub const CLUSTER_DEFAULTS: ClusterDefaults =
    &[("tls_ca", "tls_ca"), ("controller", "controllers")];

/// The site file's section of the controller.
pub const SECTION: &str = "controller";

/// gctld's command line.
#[derive(Parser)]
#[command(
    name = "gctld",
    version = gsched_core::version::VERSION_LINE,
    about = "gsched controller daemon",
    long_about = "gsched controller daemon: keeps the queue, the accounting database and the \
                  nodes' leases, and serves the REST API and the local socket. Its settings \
                  come from the [controller] section of the site file \
                  (/etc/gsched/gsched.toml), which its flags override."
)]
pub struct GctldArgs {
    #[command(flatten)]
    pub daemon: DaemonArgs,
    #[command(flatten)]
    pub ctld: CtldConfig,
    /// Print the REST API's OpenAPI document (as `GET /openapi.json`
    /// serves it) and exit.
    #[arg(long, exclusive = true)]
    pub print_openapi: bool,
}

/// The controller's settings: defaults, the site file, then the flags.
pub fn load(
    command: &clap::Command,
    matches: &clap::ArgMatches,
    args: GctldArgs,
    file: Option<&gsched_site::SiteFile>,
) -> anyhow::Result<Loaded<CtldConfig>> {
    let mut loaded = gsched_daemon::settings::load_from(
        command,
        matches,
        &args.daemon,
        args.ctld,
        file,
        CLUSTER_DEFAULTS,
        &[SECTION.to_string()],
    )?;
    loaded.settings.value.config_file = loaded.file.clone();
    loaded.settings.value.fixed_settings = loaded.fixed_keys();
    check(&loaded.settings.value)?;
    Ok(loaded)
}

/// Checks what the settings' types cannot: names of policies, weights.
pub fn check(config: &CtldConfig) -> anyhow::Result<()> {
    gsched_core::launch::launch_policy(&config.launch_policy)
        .map_err(|e| anyhow::anyhow!("launch_policy: {e}"))?;
    config
        .scheduler_type
        .parse::<gsched_core::launch::SchedulerType>()
        .map_err(|e| anyhow::anyhow!("scheduler_type: {e}"))?;
    config
        .priority_policy()
        .map_err(|e| anyhow::anyhow!("priority_type: {e}"))?;
    config.accounting().map_err(|e| anyhow::anyhow!("{e}"))?;
    config
        .partition_factors()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    gsched_core::preempt::PreemptMode::parse(&config.preempt_mode)
        .map_err(|e| anyhow::anyhow!("preempt_mode: {e}"))?;
    gsched_core::repartition::repartition_policy(&config.repartition)
        .map_err(|e| anyhow::anyhow!("repartition: {e}"))?;
    if config.max_gpu_fault_requeues > gsched_core::outcome::MOST_GPU_FAULT_REQUEUES {
        anyhow::bail!(
            "max_gpu_fault_requeues: {} is above the most taken, {}",
            config.max_gpu_fault_requeues,
            gsched_core::outcome::MOST_GPU_FAULT_REQUEUES
        );
    }
    gsched_core::launch::parse_start_ahead(&config.shared_start_ahead)
        .map_err(|e| anyhow::anyhow!("shared_start_ahead: {e}"))?;
    let most_array = gsched_core::array::MOST_MAX_ARRAY_SIZE;
    if !(1..=most_array).contains(&config.max_array_size) {
        anyhow::bail!(
            "max_array_size: {} is not from 1 to {most_array} (Slurm's MaxArraySize)",
            config.max_array_size
        );
    }
    if config.host_mem_reserve > gsched_core::launch::MOST_HOST_MEM_RESERVE_PCT {
        anyhow::bail!(
            "host_mem_reserve: {}% is above the most taken, {}%",
            config.host_mem_reserve,
            gsched_core::launch::MOST_HOST_MEM_RESERVE_PCT
        );
    }
    if let Some(url) = &config.database {
        crate::store::Database::postgres(url).map_err(|e| anyhow::anyhow!("database: {e}"))?;
        if config.durability == crate::store::Durability::Full {
            anyhow::bail!("durability: `full` is the SQLite store's; a PostgreSQL store's commits follow the server's synchronous_commit (on by default, as durable as `full`)");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gpu_fault_requeue_limit_past_the_most_is_refused_at_start() {
        check(&CtldConfig::default()).unwrap();
        let config = CtldConfig {
            max_gpu_fault_requeues: 101,
            ..CtldConfig::default()
        };
        let e = check(&config).unwrap_err().to_string();
        assert!(
            e.contains("max_gpu_fault_requeues: 101 is above the most taken, 100"),
            "{e}"
        );
    }
}
