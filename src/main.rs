//! `gsched`: the one-machine entry point.
//!
//! `gsched up` runs the controller and one node daemon in a single process,
//! with state under `--state-dir`.

mod bench;
mod db;
mod hw;
mod manuals;
mod mig;
mod sim;
mod site_config;
mod swarm;

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use gsched_ctld::store::Durability;
use gsched_ctld::CtldConfig;
use gsched_noded::{shepherd, NodeConfig};

#[derive(Parser)]
#[command(
    name = "gsched",
    version = gsched_core::version::VERSION_LINE,
    about = "Slurm-compatible batch scheduler that packs GPU jobs into MIG instances"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// Parsed once at start: the size of the largest variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// Run the controller and a node daemon for this machine in one process.
    Up(UpArgs),
    /// Measure the throughput of a running gsched.
    Bench(bench::BenchArgs),
    /// Show this machine's GPUs, MIG mode, profile table and instances as NVML sees them.
    Hw(hw::HwArgs),
    /// MIG layouts: `gsched mig plan` (offline), and `show`, `freeze`, `thaw`, `apply` on a running cluster.
    Mig(mig::MigArgs),
    /// Simulate a workload under a policy and a baseline (virtual clock).
    Sim(sim::SimArgs),
    /// Get a token for the REST API (for this user; an administrator may
    /// name another). Prints `SLURM_JWT=TOKEN`, as `scontrol token` does.
    Token {
        /// Seconds the token is valid (default 1800).
        #[arg(long)]
        lifetime: Option<u64>,
        /// The user to issue it for (administrators only).
        #[arg(long)]
        user: Option<String>,
        /// Print only the token.
        #[arg(long)]
        quiet: bool,
    },
    /// The site configuration file (/etc/gsched/gsched.toml): `check` one,
    /// or print the `example` with every key commented.
    Config {
        #[command(subcommand)]
        command: site_config::ConfigCommand,
    },
    /// The controller's database: `backup FILE`, consistent, while gctld
    /// runs.
    Db {
        #[command(subcommand)]
        command: db::DbCommand,
    },
    /// Write the manual pages of every command and daemon into DIR
    /// (man1/, man8/), as the packages ship them.
    #[command(hide = true)]
    Manuals { dir: PathBuf },
    /// Install Slurm's command names (sbatch, squeue, ...) into DIR; with DIR
    /// first on PATH, Slurm clients drive gsched (docs/slurm.md).
    SlurmShims {
        /// Directory to write the commands into (created if missing).
        #[arg(required_unless_present = "list")]
        dir: Option<PathBuf>,
        /// Print the command names, one per line, and install nothing.
        #[arg(long, conflicts_with = "dir")]
        list: bool,
    },
}

/// Links Slurm's command names in `dir` to this program.
fn install_shims(dir: &std::path::Path) -> Result<()> {
    let exe = std::env::current_exe()
        .and_then(|e| e.canonicalize())
        .context("cannot find this program's path")?;
    // The client alone where it stands beside this program, or where the
    // packages put it (/usr/lib/gsched beside /usr/bin): it starts in
    // about half the time (this one holds the daemons too).
    let beside = exe.with_file_name("gslurm");
    let packaged = exe
        .parent()
        .and_then(|bin| bin.parent())
        .map(|prefix| prefix.join("lib/gsched/gslurm"));
    let exe = std::iter::once(beside)
        .chain(packaged)
        .find(|client| client.is_file())
        .unwrap_or(exe);
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    for name in gsched_cli::slurm::COMMANDS {
        let link = dir.join(name);
        match std::fs::symlink_metadata(&link) {
            Ok(m) if m.file_type().is_symlink() => std::fs::remove_file(&link)
                .with_context(|| format!("cannot replace {}", link.display()))?,
            Ok(_) => anyhow::bail!(
                "{} exists and is not a link gsched made; remove it or choose another directory",
                link.display()
            ),
            Err(_) => {}
        }
        std::os::unix::fs::symlink(&exe, &link)
            .with_context(|| format!("cannot create {}", link.display()))?;
    }
    println!(
        "installed {} into {}; put it first on PATH: export PATH={}:$PATH",
        gsched_cli::slurm::COMMANDS.join(" "),
        dir.display(),
        dir.display()
    );
    Ok(())
}

#[derive(clap::Args)]
// A later flag overrides an earlier one (a wrapper's defaults, then yours).
#[command(args_override_self = true)]
struct UpArgs {
    /// State directory (database, spool, cluster key). Default: /var/lib/gsched
    /// for root, else $XDG_STATE_HOME/gsched, else ~/.local/state/gsched.
    #[arg(long, env = "GSCHED_STATE_DIR")]
    state_dir: Option<PathBuf>,
    /// Address of the REST API.
    #[arg(long, default_value = "127.0.0.1:6817")]
    listen: SocketAddr,
    /// Simulated GPUs for this node, e.g. `2xA100-40GB` or `1xA100-40GB:2g.10gb*2,1g.5gb*3`.
    #[arg(long)]
    sim_gpus: Option<String>,
    /// GPU config file (TOML): MIG layout and MPS per GPU.
    #[arg(long)]
    gpu_config: Option<PathBuf>,
    /// Jobs the node runs at once (default: 4 per compute slice of each instance).
    #[arg(long)]
    workers: Option<u32>,
    /// CPUs jobs may be given on this node (default: the cores gsched may
    /// run on).
    #[arg(long)]
    cpus: Option<u32>,
    /// Memory jobs may be given on this node, like Slurm's RealMemory
    /// (e.g. `16G`; default: the host's memory).
    #[arg(long)]
    real_memory: Option<String>,
    /// Cgroup settings (TOML; gsched's cgroup.conf): which limits are
    /// enforced. Default: all of them.
    #[arg(long)]
    cgroup_config: Option<PathBuf>,
    /// Name of this node (default: the host name).
    #[arg(long)]
    node_name: Option<String>,
    /// Seconds between SIGTERM and SIGKILL for cancelled and timed-out jobs.
    #[arg(long, default_value_t = 30)]
    kill_wait: u64,
    /// The most jobs held in memory, finished ones kept for --min-job-age
    /// included (Slurm's MaxJobCount).
    #[arg(long, default_value_t = gsched_core::cluster::DEFAULT_MAX_JOB_COUNT)]
    max_job_count: usize,
    /// The largest batch script accepted, in bytes (max_script_size).
    #[arg(long, default_value_t = gsched_core::cluster::DEFAULT_MAX_SCRIPT_BYTES)]
    max_script_size: usize,
    /// The most jobs of one user the controller holds, finished ones kept
    /// for --min-job-age included (0: no cap; root's own jobs not counted).
    #[arg(long, default_value_t = gsched_core::cluster::DEFAULT_MAX_JOBS_PER_USER)]
    max_jobs_per_user: usize,
    /// The most bytes of scripts, environments and arguments one user's
    /// jobs may hold in the controller (0: no cap; root's not counted).
    #[arg(long, default_value_t = gsched_core::cluster::DEFAULT_MAX_BYTES_PER_USER)]
    max_bytes_per_user: usize,
    /// Largest array index plus one (Slurm's MaxArraySize; up to
    /// 4,000,001). Every task is a job, held to --max-job-count.
    #[arg(long, default_value_t = gsched_core::array::DEFAULT_MAX_ARRAY_SIZE,
          value_parser = clap::value_parser!(u32).range(1..=gsched_core::array::MOST_MAX_ARRAY_SIZE as i64))]
    max_array_size: u32,
    /// Refuse jobs that would run as root (uid 0). `gsched up` runs root's
    /// own jobs by default (one machine, its administrator's commands);
    /// gnoded on a cluster node does not unless given --allow-root-jobs.
    #[arg(long)]
    disable_root_jobs: bool,
    /// The lowest uid whose jobs run (below it: system accounts).
    #[arg(long, default_value_t = gsched_core::job::DEFAULT_MIN_JOB_UID)]
    min_job_uid: u32,
    /// Seconds without a heartbeat before a node is marked down.
    #[arg(long, default_value_t = 30)]
    node_timeout: u64,
    /// Seconds between node heartbeats.
    #[arg(long, default_value_t = 5)]
    heartbeat_interval: u64,
    /// MIG re-partitioning of the nodes' MIG GPUs for what waits.
    #[arg(long, default_value = "none", value_name = "POLICY",
          help = gsched_core::repartition::repartition_help(),
          value_parser = gsched_core::repartition::parse_repartition)]
    repartition: String,
    /// Seconds a simulated GPU takes to change its MIG layout.
    #[arg(long, default_value_t = gsched_noded::config::DEFAULT_MIG_RECONFIG_SECS, value_name = "SECS")]
    mig_reconfig_secs: f64,
    /// Commit durability of the SQLite store: normal survives process
    /// crashes, full also power loss.
    #[arg(long, value_enum, default_value = "normal")]
    durability: Durability,
    /// Keep the controller's state in this PostgreSQL database instead of
    /// SQLite in the state directory (the URL as gctld's --database takes
    /// it; docs/install.md).
    #[arg(long, value_name = "URL")]
    database: Option<String>,
    /// The default partition.
    #[arg(long, default_value = "gpu")]
    partition: String,
    /// Other partitions jobs may name, comma separated (every node serves all).
    #[arg(long, value_delimiter = ',')]
    partitions: Vec<String>,
    /// Launch policy.
    #[arg(long, default_value = "case",
          value_parser = clap::builder::PossibleValuesParser::new(gsched_core::launch::LAUNCHES
              .iter()
              .map(|p| clap::builder::PossibleValue::new(p.name).help(p.about))))]
    launch_policy: String,
    /// Which pending job goes first: `basic` (first come, first served) or
    /// `multifactor` (weighted age, job size, fair share and QOS, less nice).
    #[arg(long, default_value = "basic", value_name = "TYPE",
          value_parser = clap::builder::PossibleValuesParser::new(gsched_core::priority::POLICIES
              .iter()
              .map(|p| clap::builder::PossibleValue::new(p.name).alias(p.slurm_name).help(p.about))))]
    priority_type: String,
    /// Weight of the age factor under `multifactor`.
    #[arg(long, default_value_t = gsched_core::priority::PriorityConfig::default().weight_age)]
    priority_weight_age: u32,
    /// Weight of the job-size factor under `multifactor`.
    #[arg(long, default_value_t = gsched_core::priority::PriorityConfig::default().weight_job_size)]
    priority_weight_job_size: u32,
    /// Seconds of waiting that give the whole age factor.
    #[arg(long, default_value_t = gsched_core::priority::PriorityConfig::default().max_age_secs)]
    priority_max_age: u64,
    /// Weight of the fair-share factor under `multifactor`.
    #[arg(long, default_value_t = gsched_core::priority::PriorityConfig::default().weight_fair_share)]
    priority_weight_fairshare: u32,
    /// Weight of the QOS factor under `multifactor`.
    #[arg(long, default_value_t = gsched_core::priority::PriorityConfig::default().weight_qos)]
    priority_weight_qos: u32,
    /// Weight of the partition factor under `multifactor`.
    #[arg(long, default_value_t = gsched_core::priority::PriorityConfig::default().weight_partition)]
    priority_weight_partition: u32,
    /// Each partition's job factor, `NAME=N,...` (Slurm's PriorityJobFactor).
    #[arg(long, default_value = "", value_name = "PARTITION=N,...")]
    partition_job_factors: String,
    /// Seconds in which recorded usage halves.
    #[arg(long, default_value_t = gsched_core::cluster::AccountingConfig::default().half_life_secs)]
    priority_decay_half_life: i64,
    /// What a job's use is billed in (`CPU=1.0,Mem=0.25G,GRES/gpu=2.0`).
    #[arg(long, default_value = "CPU=1.0", value_name = "WEIGHTS")]
    tres_billing_weights: String,
    /// What happens to jobs a higher QOS preempts: off, requeue, cancel or suspend (a QOS's PreemptMode overrides it).
    #[arg(long, default_value = "off", value_name = "MODE")]
    preempt_mode: String,
    /// backfill or builtin (strict priority order), Slurm's SchedulerType.
    #[arg(long, default_value = "backfill", value_name = "TYPE")]
    scheduler_type: String,
    /// Every job must run under one of its user's accounts (sacctmgr).
    #[arg(long)]
    enforce_associations: bool,
    /// The fair-share factor by Slurm's Fair Tree instead of the classic one.
    #[arg(long)]
    fair_tree: bool,
    /// Placement policy for shared tasks: `case` or `mgb-sm`.
    #[arg(long, default_value = "case")]
    placement_policy: String,
    /// How many times a waiting shared task may be overtaken by later ones
    /// that fit now (0: strict arrival order).
    #[arg(long, default_value_t = gsched_core::placement::DEFAULT_MAX_OVERTAKES)]
    max_overtakes: u32,
    /// How much compute the shared processes on one instance may demand
    /// together, as a ratio of it (`1`, `1.5`), or `off`.
    #[arg(long, default_value = gsched_core::compute::DEFAULT_COMPUTE_CEILING, value_name = "RATIO")]
    compute_ceiling: String,
    /// Seconds a shared job's GPU room stays kept for its next process
    /// after its last one ended; 0: not kept. At most 600.
    #[arg(long, default_value_t = (gsched_core::placement::DEFAULT_HOLD_BETWEEN_MS / 1000) as u32, value_name = "SECS")]
    hold_between_processes: u32,
    /// The compute demand of a shared job that states none and has no
    /// measured earlier run: a fraction of a GPU.
    #[arg(long, default_value = gsched_core::compute::DEFAULT_TASK_SHARE_SETTING, value_name = "SHARE")]
    default_gpu_share: String,
    /// Users who may act on every job, comma separated (root and the user
    /// running gsched always may).
    #[arg(long, value_delimiter = ',')]
    admins: Vec<String>,
    /// Seconds a finished job stays in memory (squeue, scontrol) before
    /// only accounting (sacct, gacct) shows it; 0 keeps them all (MinJobAge).
    #[arg(long, default_value_t = gsched_core::cluster::DEFAULT_MIN_JOB_AGE)]
    min_job_age: u64,
    /// Whether jobs that give neither --requeue nor --no-requeue go back to
    /// the queue when their node is lost (Slurm's JobRequeue).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    job_requeue: bool,
    /// How many seconds before its instances are expected free an isolated
    /// job may start (its GPU work waits until they are; 0: never).
    #[arg(long, default_value_t = 30, value_name = "SECS")]
    early_start_secs: u64,
    /// How many shared jobs may wait for a GPU placement on the node
    /// before no more start (or `off`; as gctld's --shared-start-ahead).
    #[arg(long, default_value = "2", value_name = "N|off",
          value_parser = |s: &str| gsched_core::launch::parse_start_ahead(s).map(|_| s.to_string()))]
    shared_start_ahead: String,
    /// The percent of the host's memory kept free of shared jobs that set
    /// none aside (0 to 90; as gctld's --host-mem-reserve).
    #[arg(long, default_value_t = gsched_core::launch::DEFAULT_HOST_MEM_RESERVE_PCT,
          value_parser = clap::value_parser!(u32).range(0..=gsched_core::launch::MOST_HOST_MEM_RESERVE_PCT as i64), value_name = "PCT")]
    host_mem_reserve: u32,
    /// Serve the API over TLS with this certificate chain (PEM); with --tls-key.
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM; no one else may read it).
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// The CA (PEM) that signed --tls-cert, for this machine's node and
    /// commands (default: the certificate itself, for a self-signed one).
    #[arg(long, requires = "tls_cert")]
    tls_ca: Option<PathBuf>,
    /// Serve plain HTTP on a --listen address other hosts can reach.
    #[arg(long)]
    allow_plain_http: bool,
    /// Log format.
    #[arg(long, default_value = "text", value_parser = ["text", "json"])]
    log_format: String,
}

fn default_state_dir() -> Result<PathBuf> {
    // SAFETY: getuid cannot fail.
    if unsafe { libc::getuid() } == 0 {
        // A root install serves every user: job users must reach the spool.
        return Ok(PathBuf::from("/var/lib/gsched"));
    }
    if let Some(x) = std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(x).join("gsched"));
    }
    let home = std::env::var_os("HOME")
        .context("neither XDG_STATE_HOME nor HOME is set; give --state-dir")?;
    Ok(PathBuf::from(home).join(".local/state/gsched"))
}

async fn up(args: UpArgs) -> Result<()> {
    let state_dir = match args.state_dir {
        Some(d) => d,
        None => default_state_dir()?,
    };
    let ctld = gsched_ctld::start(
        CtldConfig {
            config_file: None,
            listen: args.listen,
            cluster_name: "gsched".into(),
            partition: args.partition,
            partitions: args.partitions,
            node_timeout: args.node_timeout,
            launch_policy: args.launch_policy,
            priority_type: args.priority_type,
            priority_weight_age: args.priority_weight_age,
            priority_weight_job_size: args.priority_weight_job_size,
            priority_max_age: args.priority_max_age,
            priority_weight_fairshare: args.priority_weight_fairshare,
            priority_weight_qos: args.priority_weight_qos,
            priority_weight_partition: args.priority_weight_partition,
            partition_job_factors: args.partition_job_factors.clone(),
            priority_decay_half_life: args.priority_decay_half_life,
            tres_billing_weights: args.tres_billing_weights.clone(),
            enforce_associations: args.enforce_associations,
            fair_tree: args.fair_tree,
            preempt_mode: args.preempt_mode.clone(),
            scheduler_type: args.scheduler_type.clone(),
            durability: args.durability,
            database: args.database,
            admins: args.admins,
            min_job_age: args.min_job_age,
            max_job_count: args.max_job_count,
            max_script_size: args.max_script_size,
            max_jobs_per_user: args.max_jobs_per_user,
            max_bytes_per_user: args.max_bytes_per_user,
            max_array_size: args.max_array_size,
            job_requeue: args.job_requeue,
            early_start_secs: args.early_start_secs,
            shared_start_ahead: args.shared_start_ahead.clone(),
            host_mem_reserve: args.host_mem_reserve,
            repartition: args.repartition,
            tls_cert: args.tls_cert.clone(),
            tls_key: args.tls_key,
            allow_plain_http: args.allow_plain_http,
            ..CtldConfig::default()
        },
        &state_dir,
    )
    .await?;
    let exe = shepherd::shepherd_program().context("cannot find the job shepherd program")?;
    let node = gsched_noded::start(
        NodeConfig {
            name: args.node_name,
            controller: ctld.url.clone(),
            listen: "127.0.0.1:0".parse().expect("valid"),
            sim_gpus: args.sim_gpus,
            gpu_config: args.gpu_config,
            probe_lib: None,
            default_task_mem: "1G".into(),
            context_mem: None,
            placement_policy: args.placement_policy,
            max_overtakes: args.max_overtakes,
            compute_ceiling: args.compute_ceiling,
            hold_between_processes: args.hold_between_processes,
            default_gpu_share: args.default_gpu_share,
            workers: args.workers,
            cpus: args.cpus,
            real_memory: args.real_memory,
            cgroup_config: args.cgroup_config,
            cgroup: None,
            kill_wait: args.kill_wait,
            heartbeat_interval: args.heartbeat_interval,
            mig_reconfig_secs: args.mig_reconfig_secs,
            // One process: no partition can part the node from its
            // controller, so there is nothing to fence against.
            fence_timeout: Some(0),
            cluster_key_file: None,
            tls_cert: None,
            tls_key: None,
            tls_ca: args.tls_ca.or(args.tls_cert),
            allow_plain_http: false,
            advertise_url: None,
            min_job_uid: args.min_job_uid,
            allow_root_jobs: !args.disable_root_jobs,
        },
        &state_dir,
        exe,
    )
    .await?;
    tracing::info!(
        url = %ctld.url,
        socket = %ctld.socket.display(),
        node = %node.name,
        state_dir = %state_dir.display(),
        "gsched is up; commands on this host reach it through its local socket (GSCHED_URL={} finds it where it is published, else set GSCHED_SOCKET); elsewhere use a token from `gsched token`",
        ctld.url
    );
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let step_down = ctld.tenure.step_down.clone();
    let stepped_down = tokio::select! {
        _ = tokio::signal::ctrl_c() => None,
        _ = term.recv() => None,
        why = step_down.wait() => Some(why),
    };
    tracing::info!("shutting down; running jobs keep running and are adopted at the next start");
    node.shutdown().await;
    if let Some(why) = stepped_down {
        ctld.remove_sockets();
        anyhow::bail!("the controller stepped down: {why}");
    }
    ctld.stop().await;
    Ok(())
}

fn main() -> Result<()> {
    shepherd::run_if_called_as_shepherd();
    // Called by a Slurm command name (a shim link): be that command.
    if let Some(name) = std::env::args_os()
        .next()
        .map(PathBuf::from)
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .filter(|n| {
            gsched_cli::slurm::COMMANDS.contains(&n.as_str())
                || gsched_cli::slurm::DAEMONS.contains(&n.as_str())
        })
    {
        std::process::exit(gsched_cli::slurm::dispatch(
            &name,
            std::env::args().skip(1).collect(),
        ));
    }
    let cli = Cli::parse();
    match cli.command {
        Command::Up(args) => {
            gsched_daemon::init_logs(&args.log_format);
            gsched_daemon::island::prepare_daemon();
            tokio::runtime::Runtime::new()?.block_on(up(args))
        }
        Command::Bench(args) => bench::run(args),
        Command::Hw(args) => hw::run(args),
        Command::Mig(args) => mig::run(args),
        Command::Sim(args) => sim::run(args),
        Command::SlurmShims { list: true, .. } => {
            for name in gsched_cli::slurm::COMMANDS {
                println!("{name}");
            }
            Ok(())
        }
        Command::SlurmShims { dir, .. } => install_shims(&dir.context("give DIR or --list")?),
        Command::Config { command } => site_config::run(command),
        Command::Db { command } => db::run(command),
        Command::Manuals { dir } => {
            let pages = manuals::write_all(&dir)?;
            println!(
                "{} manual pages written under {}",
                pages.len(),
                dir.display()
            );
            Ok(())
        }
        Command::Token {
            lifetime,
            user,
            quiet,
        } => {
            let t = gsched_cli::client::Client::from_env()
                .issue_token(lifetime, user.as_deref())
                .context("no token issued")?;
            if quiet {
                println!("{}", t.token);
            } else {
                println!("SLURM_JWT={}", t.token);
            }
            Ok(())
        }
    }
}
