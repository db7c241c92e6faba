//! Node daemon settings.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;

/// gnoded's settings; also read from the site file's `[node]` and
/// `[nodes.NAME]` sections (same names with underscores); flags win.
#[derive(Debug, Clone, clap::Args, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct NodeConfig {
    /// The cgroup settings, read at start from `--cgroup-config` or the
    /// site file's `[cgroup]` (none: every limit enforced).
    #[arg(skip)]
    #[serde(skip)]
    pub cgroup: Option<crate::cgroup::CgroupConfig>,
    /// Node name (default: the host name).
    #[arg(long)]
    #[serde(default)]
    pub name: Option<String>,
    /// The controller's URL; with a standby, every controller's, comma
    /// separated (Slurm's SlurmctldHost list): calls go to the one that
    /// leads.
    #[arg(
        long,
        default_value = "http://127.0.0.1:6817",
        value_name = "URL[,URL...]"
    )]
    #[serde(default = "default_controller")]
    pub controller: String,
    /// Address of the node API the controller calls.
    #[arg(long, default_value = "127.0.0.1:6818")]
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    /// Simulated GPUs, e.g. `2xA100-40GB` or `1xA100-40GB:2g.10gb*2,1g.5gb*3`.
    #[arg(long)]
    #[serde(default)]
    pub sim_gpus: Option<String>,
    /// GPU config file (TOML): MIG layouts and MPS per GPU; see docs/user-guide.md.
    #[arg(long)]
    #[serde(default)]
    pub gpu_config: Option<PathBuf>,
    /// `libgprobe.so`, preloaded into non-isolated jobs to intercept the CUDA
    /// driver (default: next to this program, else ../lib/gsched/ beside
    /// it, where the packages put it).
    #[arg(long)]
    #[serde(default)]
    pub probe_lib: Option<PathBuf>,
    /// GPU memory reserved for a shared job's CUDA process when neither the
    /// job (`--gpu-mem`) nor its earlier runs give a footprint.
    #[arg(long, default_value = "1G")]
    #[serde(default = "default_task_mem")]
    pub default_task_mem: String,
    /// GPU memory a CUDA context takes beyond its allocations, reserved on
    /// top of each intercepted process's footprint. Default: learned on
    /// real GPUs from the processes placed here (the driver's per-process
    /// memory less what each allocated; 640M until measured), 0 on
    /// simulated ones. Giving it fixes it.
    #[arg(long)]
    #[serde(default)]
    pub context_mem: Option<String>,
    /// How shared tasks are placed on instances (docs/simulator.md).
    #[arg(long, default_value = "case",
          value_parser = clap::builder::PossibleValuesParser::new(gsched_core::placement::PLACEMENTS
              .iter()
              .map(|p| clap::builder::PossibleValue::new(p.name).help(p.about))))]
    #[serde(default = "default_placement_policy")]
    pub placement_policy: String,
    /// How many times a waiting shared task may be overtaken by later
    /// ones that fit now before nothing more goes ahead of it (0: strict
    /// arrival order).
    #[arg(long, default_value_t = gsched_core::placement::DEFAULT_MAX_OVERTAKES)]
    #[serde(default = "default_max_overtakes")]
    pub max_overtakes: u32,
    /// How much compute the shared processes bound to one instance may
    /// demand together, as a ratio of the instance (`1`, `1.5`, `150%`), or
    /// `off` (memory alone decides). An instance with nothing on it takes
    /// any one process.
    #[arg(long, default_value = gsched_core::compute::DEFAULT_COMPUTE_CEILING, value_name = "RATIO")]
    #[serde(default = "default_compute_ceiling")]
    pub compute_ceiling: String,
    /// Seconds a shared job's GPU memory and compute stay kept for its next
    /// process after its last one ended (a script running GPU programs one
    /// after another keeps its place); 0: not kept. At most 600.
    #[arg(long, default_value_t = default_hold_between_processes(), value_name = "SECS")]
    #[serde(default = "default_hold_between_processes")]
    pub hold_between_processes: u32,
    /// The compute demand of a shared job that states none (`--gpu-share`)
    /// and has no earlier run that measured one: a fraction of a GPU.
    #[arg(long, default_value = gsched_core::compute::DEFAULT_TASK_SHARE_SETTING, value_name = "SHARE")]
    #[serde(default = "default_gpu_share")]
    pub default_gpu_share: String,
    /// CPUs jobs may be given (default: the cores this daemon may run on).
    /// With core confinement on, at most that many.
    #[arg(long)]
    #[serde(default)]
    pub cpus: Option<u32>,
    /// Memory jobs may be given, like Slurm's RealMemory (e.g. `120G`;
    /// default: the host's memory).
    #[arg(long)]
    #[serde(default)]
    pub real_memory: Option<String>,
    /// Cgroup settings file (TOML; gsched's cgroup.conf): which limits are
    /// enforced; see docs/user-guide.md. Default: the site file's [cgroup]
    /// section, else enforce everything.
    #[arg(long)]
    #[serde(default)]
    pub cgroup_config: Option<PathBuf>,
    /// Jobs run at once (default: 4 per compute slice of each instance, or the CPU count).
    #[arg(long)]
    #[serde(default)]
    pub workers: Option<u32>,
    /// Seconds between SIGTERM and SIGKILL when a job is cancelled or times out.
    #[arg(long, default_value_t = 30)]
    #[serde(default = "default_kill_wait")]
    pub kill_wait: u64,
    /// Seconds between heartbeats.
    #[arg(long, default_value_t = 5)]
    #[serde(default = "default_heartbeat")]
    pub heartbeat_interval: u64,
    /// Seconds a simulated GPU takes to change its MIG layout when the
    /// controller re-partitions it (real GPUs take what they take).
    #[arg(long, default_value_t = DEFAULT_MIG_RECONFIG_SECS, value_name = "SECS")]
    #[serde(default = "default_mig_reconfig")]
    pub mig_reconfig_secs: f64,
    /// Seconds without an answer from the controller after which the node
    /// kills its jobs (self-fencing), so they never run on after the
    /// controller has requeued them elsewhere. Must be below gctld's
    /// --node-timeout by a margin (a tenth of it, at least 1 s); default two
    /// thirds of it. 0: never fence (jobs of a partitioned node may then
    /// run twice).
    #[arg(long)]
    #[serde(default)]
    pub fence_timeout: Option<u64>,
    /// Cluster key file (0600); default STATE_DIR/cluster.key.
    #[arg(long)]
    #[serde(default)]
    pub cluster_key_file: Option<PathBuf>,
    /// Serve the node API over TLS with this certificate chain (PEM, leaf
    /// first); with --tls-key.
    #[arg(long, requires = "tls_key")]
    #[serde(default)]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM; no one else may read it).
    #[arg(long, requires = "tls_cert")]
    #[serde(default)]
    pub tls_key: Option<PathBuf>,
    /// CA certificates (PEM) the controller's certificate is checked
    /// against (for an https --controller); jobs get it as GSCHED_TLS_CA,
    /// so it must be readable by job users.
    #[arg(long)]
    #[serde(default)]
    pub tls_ca: Option<PathBuf>,
    /// Serve plain HTTP on an address other hosts can reach (only for a
    /// network that only trusted hosts can reach).
    #[arg(long)]
    #[serde(default)]
    pub allow_plain_http: bool,
    /// The URL the controller reaches this node at. Default: the --listen
    /// address; for 0.0.0.0 or ::, this host's address toward the
    /// controller.
    #[arg(long)]
    #[serde(default)]
    pub advertise_url: Option<String>,
    /// The lowest uid whose jobs this node runs (below it: system
    /// accounts); jobs of gnoded's own user are always run.
    #[arg(long, default_value_t = gsched_core::job::DEFAULT_MIN_JOB_UID)]
    #[serde(default = "default_min_job_uid")]
    pub min_job_uid: u32,
    /// Run jobs as root (uid 0). Off by default: a node runs root's jobs
    /// only where the site says so (Slurm's DisableRootJobs=NO).
    #[arg(long)]
    #[serde(default)]
    pub allow_root_jobs: bool,
}

fn default_min_job_uid() -> u32 {
    gsched_core::job::DEFAULT_MIN_JOB_UID
}

fn default_controller() -> String {
    "http://127.0.0.1:6817".into()
}
fn default_listen() -> SocketAddr {
    "127.0.0.1:6818".parse().expect("valid")
}
fn default_task_mem() -> String {
    "1G".into()
}
fn default_compute_ceiling() -> String {
    gsched_core::compute::DEFAULT_COMPUTE_CEILING.into()
}
fn default_gpu_share() -> String {
    gsched_core::compute::DEFAULT_TASK_SHARE_SETTING.into()
}
fn default_hold_between_processes() -> u32 {
    (gsched_core::placement::DEFAULT_HOLD_BETWEEN_MS / 1000) as u32
}
fn default_max_overtakes() -> u32 {
    gsched_core::placement::DEFAULT_MAX_OVERTAKES
}

fn default_placement_policy() -> String {
    "case".into()
}
fn default_kill_wait() -> u64 {
    30
}
fn default_heartbeat() -> u64 {
    5
}
/// The reconfiguration time the simulator assumes (`gsched sim
/// --reconfig-secs`), for the simulated backend (docs/simulator.md).
pub const DEFAULT_MIG_RECONFIG_SECS: f64 = 5.0;
fn default_mig_reconfig() -> f64 {
    DEFAULT_MIG_RECONFIG_SECS
}

/// The controllers of a `--controller` value: URLs separated by commas,
/// without trailing slashes (at least one entry, possibly empty).
pub fn controller_list(given: &str) -> Vec<String> {
    let list: Vec<String> = given
        .split(',')
        .map(|u| u.trim().trim_end_matches('/').to_string())
        .filter(|u| !u.is_empty())
        .collect();
    if list.is_empty() {
        vec![String::new()]
    } else {
        list
    }
}

/// The longest `--hold-between-processes` (seconds): a keep holds GPU
/// memory no other job may use meanwhile.
pub const MOST_HOLD_BETWEEN_SECS: u32 = 600;

impl NodeConfig {
    /// The controllers `controller` lists.
    pub fn controllers(&self) -> Vec<String> {
        controller_list(&self.controller)
    }

    /// `--hold-between-processes` in milliseconds, refused over
    /// [`MOST_HOLD_BETWEEN_SECS`].
    pub fn hold_between_ms(&self) -> anyhow::Result<i64> {
        hold_between_ms(self.hold_between_processes)
    }
}

fn hold_between_ms(secs: u32) -> anyhow::Result<i64> {
    if secs > MOST_HOLD_BETWEEN_SECS {
        anyhow::bail!("--hold-between-processes {secs} is over {MOST_HOLD_BETWEEN_SECS} seconds");
    }
    Ok(i64::from(secs) * 1000)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_hold_between_processes_is_bounded() {
        assert_eq!(super::hold_between_ms(0).unwrap(), 0);
        assert_eq!(super::hold_between_ms(600).unwrap(), 600_000);
        let e = super::hold_between_ms(601).unwrap_err().to_string();
        assert!(
            e.contains("--hold-between-processes 601 is over 600"),
            "{e}"
        );
    }
}
