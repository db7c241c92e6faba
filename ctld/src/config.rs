//! Controller settings: the `[controller]` section of the site file
//! (`gsched_site`) under the command-line flags.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;

use crate::store::Durability;

/// A controller setting that does not read, named by its flag.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingError {
    #[error("--partition-job-factors: {0}")]
    PartitionFactors(gsched_core::priority::PartitionFactorsError),
    #[error("--tres-billing-weights: {0}")]
    BillingWeights(gsched_core::fairshare::BillingWeightsError),
    #[error("--priority-decay-half-life={0}: must be at least 1 second")]
    HalfLife(i64),
}

/// gctld's settings. Every flag can also be given in the site file's
/// `[controller]` section (same names with underscores); flags win.
#[derive(Debug, Clone, clap::Args, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct CtldConfig {
    /// The `--config` file these settings were read from (none: the
    /// command line), for `scontrol reconfigure`.
    #[arg(skip)]
    #[serde(skip)]
    pub config_file: Option<PathBuf>,
    /// The settings given as flags or environment variables, which
    /// re-reading the file leaves as they are.
    #[arg(skip)]
    #[serde(skip)]
    pub fixed_settings: Vec<String>,
    /// Address of the REST API.
    #[arg(long, default_value = "127.0.0.1:6817", env = "GSCHED_LISTEN")]
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    /// Cluster name shown to jobs (SLURM_CLUSTER_NAME).
    #[arg(long, default_value = "gsched")]
    #[serde(default = "default_cluster")]
    pub cluster_name: String,
    /// The default partition (jobs that name none run in it).
    #[arg(long, default_value = "gpu")]
    #[serde(default = "default_partition")]
    pub partition: String,
    /// Other partitions jobs may name (`-p`), comma separated. Every node
    /// serves every partition.
    #[arg(long, value_delimiter = ',')]
    #[serde(default)]
    pub partitions: Vec<String>,
    /// Seconds without a heartbeat after which a node is marked down.
    #[arg(long, default_value_t = 30)]
    #[serde(default = "default_node_timeout")]
    pub node_timeout: u64,
    /// Launch policy.
    #[arg(long, default_value = "case",
          value_parser = clap::builder::PossibleValuesParser::new(gsched_core::launch::LAUNCHES
              .iter()
              .map(|p| clap::builder::PossibleValue::new(p.name).help(p.about))))]
    #[serde(default = "default_policy")]
    pub launch_policy: String,
    /// Which pending job goes first (Slurm's PriorityType).
    #[arg(long, default_value = "basic", value_name = "TYPE",
          value_parser = clap::builder::PossibleValuesParser::new(gsched_core::priority::POLICIES
              .iter()
              .map(|p| clap::builder::PossibleValue::new(p.name).alias(p.slurm_name).help(p.about))))]
    #[serde(default = "default_priority_type")]
    pub priority_type: String,
    /// Weight of the age factor under `multifactor` (PriorityWeightAge).
    #[arg(long, default_value_t = gsched_core::priority::PriorityConfig::default().weight_age)]
    #[serde(default = "default_weight_age")]
    pub priority_weight_age: u32,
    /// Weight of the job-size factor under `multifactor`
    /// (PriorityWeightJobSize).
    #[arg(long, default_value_t = gsched_core::priority::PriorityConfig::default().weight_job_size)]
    #[serde(default = "default_weight_job_size")]
    pub priority_weight_job_size: u32,
    /// Seconds of waiting that give the whole age factor (PriorityMaxAge).
    #[arg(long, default_value_t = gsched_core::priority::PriorityConfig::default().max_age_secs)]
    #[serde(default = "default_max_age")]
    pub priority_max_age: u64,
    /// Weight of the fair-share factor under `multifactor`
    /// (PriorityWeightFairshare).
    #[arg(long, default_value_t = gsched_core::priority::PriorityConfig::default().weight_fair_share)]
    #[serde(default = "default_weight_fair_share")]
    pub priority_weight_fairshare: u32,
    /// Weight of the QOS factor under `multifactor` (PriorityWeightQOS).
    #[arg(long, default_value_t = gsched_core::priority::PriorityConfig::default().weight_qos)]
    #[serde(default = "default_weight_qos")]
    pub priority_weight_qos: u32,
    /// Weight of the partition factor under `multifactor`
    /// (PriorityWeightPartition).
    #[arg(long, default_value_t = gsched_core::priority::PriorityConfig::default().weight_partition)]
    #[serde(default = "default_weight_partition")]
    pub priority_weight_partition: u32,
    /// Each partition's job factor, `NAME=N,...` (0 to 65533; Slurm's
    /// PartitionName=NAME PriorityJobFactor=N): a job's partition factor is
    /// its partition's over the largest.
    #[arg(long, default_value = "", value_name = "PARTITION=N,...")]
    #[serde(default)]
    pub partition_job_factors: String,
    /// Seconds in which recorded usage halves (PriorityDecayHalfLife).
    #[arg(long, default_value_t = gsched_core::cluster::AccountingConfig::default().half_life_secs)]
    #[serde(default = "default_half_life")]
    pub priority_decay_half_life: i64,
    /// What a job's use is billed in, per second held (TRESBillingWeights:
    /// `CPU=1.0,Mem=0.25G,GRES/gpu=2.0`).
    #[arg(long, default_value = "CPU=1.0", value_name = "WEIGHTS")]
    #[serde(default = "default_billing_weights")]
    pub tres_billing_weights: String,
    /// What happens to jobs a higher QOS preempts (`Preempt=` on the QOS):
    /// off, requeue, cancel or suspend (PreemptType=preempt/qos, PreemptMode).
    #[arg(long, default_value = "off", value_name = "MODE")]
    #[serde(default = "default_preempt_mode")]
    pub preempt_mode: String,
    /// backfill (a job that cannot start keeps only the nodes it holds
    /// from later jobs, EASY) or builtin (strict priority order), Slurm's
    /// SchedulerType; `sched/` may be given.
    #[arg(long, default_value = "backfill", value_name = "TYPE")]
    #[serde(default = "default_scheduler_type")]
    pub scheduler_type: String,
    /// Every job must run under one of its user's accounts (sacctmgr);
    /// otherwise users without any run uncharged
    /// (AccountingStorageEnforce=associations).
    #[arg(long)]
    #[serde(default)]
    pub enforce_associations: bool,
    /// The fair-share factor by Slurm's Fair Tree (usage counts at every
    /// level of the account tree; Slurm's default) instead of the classic
    /// `2^(-U/S)` of each association.
    #[arg(long)]
    #[serde(default)]
    pub fair_tree: bool,
    /// Seconds a controller's leadership lasts without renewal: a standby
    /// on the same database takes over within this and a poll (at most a
    /// second) after the leader dies; the leader renews every third of
    /// it. With standbys listed in --controllers, it must leave nodes time
    /// to find the new leader before they stop their jobs (checked against
    /// the node timeout at start).
    #[arg(long, default_value_t = 6, value_name = "SECS")]
    #[serde(default = "default_leader_lease")]
    pub leader_lease: u64,
    /// Where the store is: a PostgreSQL URL
    /// (postgres://USER@HOST:PORT/DB?sslmode=verify-full&sslrootcert=CA, or
    /// postgres:///DB?user=USER&host=/run/postgresql for its Unix socket; the
    /// password, if any, in root's ~/.pgpass). Unset: SQLite in
    /// STATE_DIR/ctld.db.
    #[arg(long, value_name = "URL")]
    #[serde(default)]
    pub database: Option<String>,
    /// Commit durability of the SQLite store: normal survives process
    /// crashes, full also power loss (PostgreSQL's follow its server's
    /// synchronous_commit).
    #[arg(long, value_enum, default_value = "normal")]
    #[serde(default = "default_durability")]
    pub durability: Durability,
    /// Cluster key file (0600). Default: STATE_DIR/cluster.key, created if missing.
    #[arg(long)]
    #[serde(default)]
    pub cluster_key_file: Option<PathBuf>,
    /// Users who may act on every job (root and the controller's own user
    /// always may), comma separated.
    #[arg(long, value_delimiter = ',')]
    #[serde(default)]
    pub admins: Vec<String>,
    /// Paths of the TCP API served without a token, comma separated; an
    /// entry ending in `/` covers everything under it.
    #[arg(long, value_delimiter = ',', default_value = "/healthz,/metrics")]
    #[serde(default = "default_auth_exempt")]
    pub auth_exempt: Vec<String>,
    /// Token signing key file (0600). Default: STATE_DIR/jwt.key, created if missing.
    #[arg(long)]
    #[serde(default)]
    pub token_key_file: Option<PathBuf>,
    /// Longest lifetime, in seconds, a token may be issued for.
    #[arg(long, default_value_t = 86400)]
    #[serde(default = "default_token_max_lifetime")]
    pub token_max_lifetime: u64,
    /// The local unix socket: the API without tokens, the caller known from
    /// its credentials. Default: STATE_DIR/ctld.sock.
    #[arg(long)]
    #[serde(default)]
    pub socket: Option<PathBuf>,
    /// Seconds a finished job stays in the controller's memory (squeue,
    /// scontrol show job) before only accounting (sacct, gacct) shows it,
    /// from the database; Slurm's MinJobAge. 0 keeps every finished job in
    /// memory.
    #[arg(long, default_value_t = gsched_core::cluster::DEFAULT_MIN_JOB_AGE)]
    #[serde(default = "default_min_job_age")]
    pub min_job_age: u64,
    /// The most jobs the controller holds in memory, finished ones kept
    /// for --min-job-age included (Slurm's MaxJobCount); submissions beyond
    /// it are refused until jobs leave.
    #[arg(long, default_value_t = gsched_core::cluster::DEFAULT_MAX_JOB_COUNT)]
    #[serde(default = "default_max_job_count")]
    pub max_job_count: usize,
    /// The largest batch script accepted, in bytes (Slurm's
    /// max_script_size).
    #[arg(long, default_value_t = gsched_core::cluster::DEFAULT_MAX_SCRIPT_BYTES)]
    #[serde(default = "default_max_script_size")]
    pub max_script_size: usize,
    /// The most jobs of one user the controller holds: queued, running,
    /// and finished ones kept for --min-job-age, as --max-job-count counts
    /// them (0: no cap; root's own jobs are not counted). QOS and
    /// association limits (MaxSubmitJobsPerUser, ...) may be stricter.
    #[arg(long, default_value_t = gsched_core::cluster::DEFAULT_MAX_JOBS_PER_USER)]
    #[serde(default = "default_max_jobs_per_user")]
    pub max_jobs_per_user: usize,
    /// The most bytes of scripts, environments and arguments one user's
    /// jobs may hold in the controller (0: no cap; root's not counted).
    #[arg(long, default_value_t = gsched_core::cluster::DEFAULT_MAX_BYTES_PER_USER)]
    #[serde(default = "default_max_bytes_per_user")]
    pub max_bytes_per_user: usize,
    /// Largest array index plus one (Slurm's MaxArraySize): `--array`
    /// indices from 0 to this less one. Every task of an array is a job of
    /// its own, held to --max-job-count and --max-jobs-per-user.
    #[arg(long, default_value_t = gsched_core::array::DEFAULT_MAX_ARRAY_SIZE,
          value_parser = clap::value_parser!(u32).range(1..=gsched_core::array::MOST_MAX_ARRAY_SIZE as i64))]
    #[serde(default = "default_max_array_size")]
    pub max_array_size: u32,
    /// Whether a job that gives neither --requeue nor --no-requeue goes back
    /// to the queue when its node is lost (Slurm's JobRequeue, on by
    /// default).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    #[serde(default = "default_job_requeue")]
    pub job_requeue: bool,
    /// How many times a requeueable job that a GPU fault tore down, but
    /// that MPS did not name, goes back to the queue; hit again after that,
    /// it fails (0 to 100; the job MPS names always fails).
    #[arg(long, default_value_t = gsched_core::outcome::DEFAULT_MAX_GPU_FAULT_REQUEUES,
          value_parser = clap::value_parser!(u32).range(0..=gsched_core::outcome::MOST_GPU_FAULT_REQUEUES as i64), value_name = "N")]
    #[serde(default = "default_max_gpu_fault_requeues")]
    pub max_gpu_fault_requeues: u32,
    /// How many seconds before its instances are expected free (from time
    /// limits and earlier runs) an isolated job may start: its processes
    /// start at once with no GPU and wait at their first CUDA call, through
    /// the interception library, until the instances are its own, so its
    /// start-up overlaps the work before it. 0 turns it off.
    #[arg(long, default_value_t = default_early_start_secs(), value_name = "SECS")]
    #[serde(default = "default_early_start_secs")]
    pub early_start_secs: u64,
    /// How many shared jobs may wait for a GPU placement on one node
    /// before no more start there: a shared job starts where its node's
    /// GPUs are expected to take it at once (by its stated or learned
    /// share under the node's compute ceiling), or while fewer than this
    /// many wait there, so that waiting jobs do not pile up holding cores
    /// and host memory. `off`: as many as workers allow.
    #[arg(long, default_value = "2", value_name = "N|off",
          value_parser = |s: &str| gsched_core::launch::parse_start_ahead(s).map(|_| s.to_string()))]
    #[serde(default = "default_shared_start_ahead")]
    pub shared_start_ahead: String,
    /// The percent of a node's host memory kept free of shared jobs that
    /// set none aside (no --mem): below it, as the node reports its
    /// available memory, only jobs with --mem start there (0 to 90; 0:
    /// off).
    #[arg(long, default_value_t = gsched_core::launch::DEFAULT_HOST_MEM_RESERVE_PCT,
          value_parser = clap::value_parser!(u32).range(0..=gsched_core::launch::MOST_HOST_MEM_RESERVE_PCT as i64), value_name = "PCT")]
    #[serde(default = "default_host_mem_reserve")]
    pub host_mem_reserve: u32,
    /// MIG re-partitioning of the nodes' MIG GPUs for what waits.
    #[arg(long, default_value = "none", value_name = "POLICY",
          help = gsched_core::repartition::repartition_help(),
          value_parser = gsched_core::repartition::parse_repartition)]
    #[serde(default = "default_repartition")]
    pub repartition: String,
    /// Serve the TCP API over TLS with this certificate chain (PEM, leaf
    /// first); with --tls-key.
    #[arg(long, requires = "tls_key")]
    #[serde(default)]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM; no one else may read it).
    #[arg(long, requires = "tls_cert")]
    #[serde(default)]
    pub tls_key: Option<PathBuf>,
    /// CA certificates (PEM) that nodes' certificates are checked against,
    /// for nodes that serve https.
    #[arg(long)]
    #[serde(default)]
    pub tls_ca: Option<PathBuf>,
    /// Serve plain HTTP on an address other hosts can reach (only for a
    /// network that only trusted hosts can reach; tokens and the cluster
    /// key cross it in clear).
    #[arg(long)]
    #[serde(default)]
    pub allow_plain_http: bool,
    /// The URL jobs and nodes are told to reach the controller at
    /// (GSCHED_URL in jobs). Default: the --listen address; for 0.0.0.0
    /// or ::, this host's name.
    #[arg(long)]
    #[serde(default)]
    pub advertise_url: Option<String>,
    /// Every controller of the cluster (this one and its standbys), comma
    /// separated, as jobs' GSCHED_URL lists them so that their commands
    /// find the leader (Slurm's SlurmctldHost list; `[cluster] controller`
    /// in the site file stands in). Default: this controller's URL.
    #[arg(long, value_name = "URL[,URL...]")]
    #[serde(default)]
    pub controllers: Option<String>,
}

impl Default for CtldConfig {
    fn default() -> CtldConfig {
        CtldConfig {
            config_file: None,
            fixed_settings: Vec::new(),
            listen: default_listen(),
            cluster_name: default_cluster(),
            partition: default_partition(),
            partitions: Vec::new(),
            node_timeout: default_node_timeout(),
            launch_policy: default_policy(),
            priority_type: default_priority_type(),
            priority_weight_age: default_weight_age(),
            priority_weight_job_size: default_weight_job_size(),
            priority_max_age: default_max_age(),
            priority_weight_fairshare: default_weight_fair_share(),
            priority_weight_qos: default_weight_qos(),
            priority_weight_partition: default_weight_partition(),
            partition_job_factors: String::new(),
            priority_decay_half_life: default_half_life(),
            tres_billing_weights: default_billing_weights(),
            enforce_associations: false,
            fair_tree: false,
            preempt_mode: default_preempt_mode(),
            scheduler_type: default_scheduler_type(),
            leader_lease: default_leader_lease(),
            database: None,
            durability: default_durability(),
            cluster_key_file: None,
            admins: Vec::new(),
            auth_exempt: default_auth_exempt(),
            token_key_file: None,
            token_max_lifetime: default_token_max_lifetime(),
            socket: None,
            min_job_age: default_min_job_age(),
            max_job_count: default_max_job_count(),
            max_jobs_per_user: default_max_jobs_per_user(),
            max_bytes_per_user: default_max_bytes_per_user(),
            max_array_size: default_max_array_size(),
            max_script_size: default_max_script_size(),
            job_requeue: default_job_requeue(),
            max_gpu_fault_requeues: default_max_gpu_fault_requeues(),
            early_start_secs: default_early_start_secs(),
            shared_start_ahead: default_shared_start_ahead(),
            host_mem_reserve: default_host_mem_reserve(),
            repartition: default_repartition(),
            tls_cert: None,
            tls_key: None,
            tls_ca: None,
            allow_plain_http: false,
            advertise_url: None,
            controllers: None,
        }
    }
}

impl CtldConfig {
    /// The priority policy these settings name.
    pub fn priority_policy(
        &self,
    ) -> Result<
        Box<dyn gsched_core::priority::PriorityPolicy>,
        gsched_core::priority::UnknownPriorityType,
    > {
        gsched_core::priority::priority_policy(&self.priority_type, self.priority_config())
    }

    /// The settings (by their names in the file) whose values differ in
    /// `other`.
    pub fn changed_settings(&self, other: &CtldConfig) -> Vec<String> {
        let (Ok(serde_json::Value::Object(a)), Ok(serde_json::Value::Object(b))) =
            (serde_json::to_value(self), serde_json::to_value(other))
        else {
            return vec!["(the settings cannot be compared)".into()];
        };
        a.iter()
            .filter(|(k, v)| b.get(*k) != Some(*v))
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// The `multifactor` settings (Slurm's `PriorityWeight*`).
    pub fn priority_config(&self) -> gsched_core::priority::PriorityConfig {
        gsched_core::priority::PriorityConfig {
            weight_age: self.priority_weight_age,
            weight_job_size: self.priority_weight_job_size,
            max_age_secs: self.priority_max_age,
            weight_fair_share: self.priority_weight_fairshare,
            weight_qos: self.priority_weight_qos,
            weight_partition: self.priority_weight_partition,
        }
    }

    /// The partitions' job factors, or why they do not read.
    pub fn partition_factors(
        &self,
    ) -> Result<gsched_core::priority::PartitionFactors, SettingError> {
        gsched_core::priority::PartitionFactors::parse(
            &self.partition_job_factors,
            &self.all_partitions(),
        )
        .map_err(SettingError::PartitionFactors)
    }

    /// How jobs are charged to their accounts, or why the settings do not
    /// read.
    pub fn accounting(&self) -> Result<gsched_core::cluster::AccountingConfig, SettingError> {
        let weights = gsched_core::fairshare::BillingWeights::parse(&self.tres_billing_weights)
            .map_err(SettingError::BillingWeights)?;
        if self.priority_decay_half_life <= 0 {
            return Err(SettingError::HalfLife(self.priority_decay_half_life));
        }
        Ok(gsched_core::cluster::AccountingConfig {
            enforce: self.enforce_associations,
            half_life_secs: self.priority_decay_half_life,
            weights,
            fair_tree: self.fair_tree,
            qos_rights: true,
        })
    }

    /// Every partition, the default first.
    pub fn all_partitions(&self) -> Vec<String> {
        let mut all = vec![self.partition.clone()];
        for p in &self.partitions {
            if !all.contains(p) {
                all.push(p.clone());
            }
        }
        all
    }
}

fn default_listen() -> SocketAddr {
    "127.0.0.1:6817".parse().expect("valid")
}
fn default_cluster() -> String {
    "gsched".into()
}
fn default_partition() -> String {
    "gpu".into()
}
fn default_shared_start_ahead() -> String {
    gsched_core::launch::DEFAULT_START_AHEAD.to_string()
}
fn default_host_mem_reserve() -> u32 {
    gsched_core::launch::DEFAULT_HOST_MEM_RESERVE_PCT
}
fn default_max_gpu_fault_requeues() -> u32 {
    gsched_core::outcome::DEFAULT_MAX_GPU_FAULT_REQUEUES
}

fn default_leader_lease() -> u64 {
    6
}
fn default_node_timeout() -> u64 {
    30
}
fn default_policy() -> String {
    "case".into()
}
fn default_weight_fair_share() -> u32 {
    gsched_core::priority::PriorityConfig::default().weight_fair_share
}

fn default_preempt_mode() -> String {
    "off".into()
}

fn default_scheduler_type() -> String {
    "backfill".into()
}

fn default_weight_qos() -> u32 {
    gsched_core::priority::PriorityConfig::default().weight_qos
}
fn default_weight_partition() -> u32 {
    gsched_core::priority::PriorityConfig::default().weight_partition
}

fn default_half_life() -> i64 {
    gsched_core::cluster::AccountingConfig::default().half_life_secs
}

fn default_billing_weights() -> String {
    "CPU=1.0".into()
}

fn default_priority_type() -> String {
    "basic".into()
}
fn default_weight_age() -> u32 {
    gsched_core::priority::PriorityConfig::default().weight_age
}
fn default_weight_job_size() -> u32 {
    gsched_core::priority::PriorityConfig::default().weight_job_size
}
fn default_max_age() -> u64 {
    gsched_core::priority::PriorityConfig::default().max_age_secs
}
fn default_auth_exempt() -> Vec<String> {
    vec!["/healthz".into(), "/metrics".into()]
}
fn default_token_max_lifetime() -> u64 {
    86400
}
fn default_repartition() -> String {
    "none".into()
}
fn default_job_requeue() -> bool {
    true
}
fn default_early_start_secs() -> u64 {
    30
}

fn default_max_job_count() -> usize {
    gsched_core::cluster::DEFAULT_MAX_JOB_COUNT
}
fn default_max_array_size() -> u32 {
    gsched_core::array::DEFAULT_MAX_ARRAY_SIZE
}

fn default_max_bytes_per_user() -> usize {
    gsched_core::cluster::DEFAULT_MAX_BYTES_PER_USER
}
fn default_max_jobs_per_user() -> usize {
    gsched_core::cluster::DEFAULT_MAX_JOBS_PER_USER
}
fn default_max_script_size() -> usize {
    gsched_core::cluster::DEFAULT_MAX_SCRIPT_BYTES
}
fn default_min_job_age() -> u64 {
    gsched_core::cluster::DEFAULT_MIN_JOB_AGE
}
fn default_durability() -> Durability {
    Durability::Normal
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changed_settings_are_named_as_in_the_file() {
        let running = CtldConfig::default();
        let same: CtldConfig = serde_json::from_str("{}").unwrap();
        assert!(running.changed_settings(&same).is_empty());
        let read: CtldConfig =
            serde_json::from_str(r#"{"min_job_age": 42, "partitions": ["debug"]}"#).unwrap();
        assert_eq!(
            running.changed_settings(&read),
            ["min_job_age", "partitions"],
            "the file's names, in the file's order of fields"
        );
        // Where the settings came from is not a setting.
        let from_file = CtldConfig {
            config_file: Some("/etc/gsched/gctld.toml".into()),
            ..CtldConfig::default()
        };
        assert!(running.changed_settings(&from_file).is_empty());
    }
}
