//! Job priority: which pending job goes first (Slurm's `PriorityType`).
//! One type per policy, each in its own file, registered in [`POLICIES`],
//! from which config names and `--help` are derived. A policy only weighs
//! jobs; the controller orders its queues by the result and `sprio`,
//! `squeue %Q` and `scontrol show job` show it.

use serde::{Deserialize, Serialize};

use crate::job::Job;

mod basic;
mod multifactor;

pub use basic::Basic;
pub use multifactor::Multifactor;

/// The largest priority a job gets (Slurm's, for a 32-bit priority less
/// its reserved top values).
pub const TOP: u64 = 4_294_901_759;

pub use crate::job::NICE_LIMIT;

/// What a policy weighs a job against.
#[derive(Debug, Clone, Copy)]
pub struct PriorityContext<'a> {
    /// Unix seconds.
    pub now: i64,
    /// The CPUs of the nodes that are up (the job-size factor's whole).
    pub cluster_cpus: u32,
    /// The accounts and their usage, where accounting is in use, with the
    /// usage's half-life (seconds): the fair-share factor.
    pub fair_share: Option<(&'a crate::fairshare::FairShare, i64)>,
    /// Each association's Fair Tree factor, where that algorithm is used
    /// (`crate::fair_tree`; worked out once per pass).
    pub fair_tree: Option<&'a std::collections::BTreeMap<(String, String), f64>>,
    /// The QOS, where any exist: the QOS factor.
    pub qos: Option<&'a crate::qos::QosTable>,
    /// The partitions' job factors, where any is set: the partition
    /// factor.
    pub partitions: Option<&'a PartitionFactors>,
}

/// Each partition's `PriorityJobFactor` (Slurm's partition setting): a
/// job's partition factor is its partition's over the largest. A job that
/// names no partition is in the default one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PartitionFactors {
    pub default: String,
    pub job_factors: std::collections::BTreeMap<String, u32>,
}

/// Slurm's bound on a partition's `PriorityJobFactor`.
pub const MAX_PARTITION_JOB_FACTOR: u32 = 65533;

/// Partition job factors that do not read, or name an unknown partition.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PartitionFactorsError(pub String);

impl From<String> for PartitionFactorsError {
    fn from(why: String) -> Self {
        PartitionFactorsError(why)
    }
}

impl PartitionFactors {
    /// Reads `NAME=N[,NAME=N]` for the partitions `known` (the default
    /// first); a partition it does not name has 0.
    pub fn parse(list: &str, known: &[String]) -> Result<PartitionFactors, PartitionFactorsError> {
        let mut job_factors = std::collections::BTreeMap::new();
        for item in list.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (name, n) = item
                .split_once('=')
                .ok_or_else(|| PartitionFactorsError(format!("'{item}': expected PARTITION=N")))?;
            let name = name.trim();
            if !known.iter().any(|k| k == name) {
                return Err(PartitionFactorsError(format!(
                    "'{name}' is not a partition (known: {})",
                    known.join(", ")
                )));
            }
            let n: u32 = n
                .trim()
                .parse()
                .ok()
                .filter(|n| *n <= MAX_PARTITION_JOB_FACTOR)
                .ok_or_else(|| {
                    format!("{item}: the job factor is a whole number from 0 to {MAX_PARTITION_JOB_FACTOR}")
                })?;
            job_factors.insert(name.to_string(), n);
        }
        Ok(PartitionFactors {
            default: known.first().cloned().unwrap_or_default(),
            job_factors,
        })
    }

    /// Whether any partition has a factor above 0.
    pub fn in_use(&self) -> bool {
        self.job_factors.values().any(|n| *n > 0)
    }

    /// The factor (0 to 1) of a job in `partition` (`None`: the default).
    pub fn factor(&self, partition: Option<&str>) -> f64 {
        let top = self.job_factors.values().copied().max().unwrap_or(0);
        if top == 0 {
            return 0.0;
        }
        let name = partition.unwrap_or(&self.default);
        f64::from(self.job_factors.get(name).copied().unwrap_or(0)) / f64::from(top)
    }
}

impl PriorityContext<'_> {
    /// `job`'s fair-share factor (0 where it is charged to no account).
    pub fn fair_share_of(&self, job: &Job) -> f64 {
        match (self.fair_share, job.spec.slurm.account.as_deref()) {
            (Some(_), Some(a)) if self.fair_tree.is_some() => self
                .fair_tree
                .and_then(|t| t.get(&(job.spec.user_name.clone(), a.to_string())))
                .copied()
                .unwrap_or(0.0),
            (Some((f, half_life)), Some(a)) if f.in_use() => {
                f.factor(&job.spec.user_name, a, self.now, half_life)
            }
            _ => 0.0,
        }
    }

    /// `job`'s QOS factor (0 without one).
    pub fn qos_of(&self, job: &Job) -> f64 {
        self.qos
            .map_or(0.0, |q| q.factor(job.spec.slurm.qos.as_deref()))
    }

    /// `job`'s partition factor (0 where no partition has a job factor).
    pub fn partition_of(&self, job: &Job) -> f64 {
        self.partitions
            .map_or(0.0, |p| p.factor(job.spec.partition.as_deref()))
    }
}

pub use crate::wire::Priority;

/// The settings of `multifactor` (Slurm's `PriorityWeight*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PriorityConfig {
    /// Weight of the age factor (time waiting, up to `max_age_secs`).
    pub weight_age: u32,
    /// Weight of the job-size factor (share of the cluster's CPUs asked
    /// for: larger jobs go first, as Slurm's default `PriorityFavorSmall=NO`).
    pub weight_job_size: u32,
    /// Waiting this long gives the whole age factor (Slurm's
    /// `PriorityMaxAge`, 7 days by default).
    pub max_age_secs: u64,
    /// Weight of the fair-share factor (the job's association's usage
    /// against its shares: `fairshare`).
    #[serde(default = "default_weight")]
    pub weight_fair_share: u32,
    /// Weight of the QOS factor (the job's QOS's priority over the
    /// highest).
    #[serde(default = "default_weight")]
    pub weight_qos: u32,
    /// Weight of the partition factor (the job's partition's job factor
    /// over the largest).
    #[serde(default = "default_weight")]
    pub weight_partition: u32,
}

fn default_weight() -> u32 {
    1000
}

impl Default for PriorityConfig {
    fn default() -> Self {
        PriorityConfig {
            weight_age: 1000,
            weight_job_size: 1000,
            max_age_secs: 7 * 24 * 3600,
            weight_fair_share: 1000,
            weight_qos: 1000,
            weight_partition: 1000,
        }
    }
}

/// A priority policy: one type per policy, chosen by name in config.
pub trait PriorityPolicy: Send + Sync {
    fn name(&self) -> &'static str;
    /// Whether the pending queues are ordered by priority (`false`: by
    /// submission, as the job ids are, at no cost per pass).
    fn orders(&self) -> bool;
    /// `job`'s priority now (a held job's is 0 whatever the policy says:
    /// the caller sees to that).
    fn priority(&self, job: &Job, ctx: &PriorityContext<'_>) -> Priority;
}

/// One registered policy.
pub struct PolicyEntry {
    pub name: &'static str,
    /// Slurm's name for it (`PriorityType=priority/NAME`), taken too.
    pub slurm_name: &'static str,
    pub about: &'static str,
    build: fn(PriorityConfig) -> Box<dyn PriorityPolicy>,
}

/// Every priority policy, the default first.
pub const POLICIES: &[PolicyEntry] = &[
    PolicyEntry {
        name: "basic",
        slurm_name: "priority/basic",
        about: "first come, first served (Slurm's priority/basic)",
        build: |_| Box::new(Basic),
    },
    PolicyEntry {
        name: "multifactor",
        slurm_name: "priority/multifactor",
        about: "weighted age, job size, fair share, partition and QOS, less the job's nice (Slurm's priority/multifactor)",
        build: |c| Box::new(Multifactor(c)),
    },
];

/// A policy name that does not exist.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown priority type '{0}' (known: {known})", known = names().join(", "))]
pub struct UnknownPriorityType(pub String);

/// The registered names, the default first.
pub fn names() -> Vec<&'static str> {
    POLICIES.iter().map(|p| p.name).collect()
}

/// Builds the policy named in config (`priority/NAME` as Slurm writes it
/// is read too).
pub fn priority_policy(
    name: &str,
    config: PriorityConfig,
) -> Result<Box<dyn PriorityPolicy>, UnknownPriorityType> {
    let short = name.strip_prefix("priority/").unwrap_or(name);
    POLICIES
        .iter()
        .find(|p| p.name == short)
        .map(|p| (p.build)(config))
        .ok_or_else(|| UnknownPriorityType(name.into()))
}

/// A nice value out of range, or one only an administrator may give.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NiceError(pub String);

impl From<String> for NiceError {
    fn from(why: String) -> Self {
        NiceError(why)
    }
}

/// Checks who gives a nice value (`admin`: an administrator): a negative
/// one raises the job above others, so only administrators may (its bounds
/// are checked with the rest of the spec, `JobSpec::validate`).
pub fn check_nice(nice: i64, admin: bool) -> Result<(), NiceError> {
    if nice < 0 && !admin {
        return Err(NiceError(format!(
            "Access/permission denied: only an administrator may give a negative nice ({nice}); you may raise it"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partitions_factor_is_its_job_factor_over_the_largest() {
        let known = vec!["gpu".to_string(), "debug".into(), "long".into()];
        let p = PartitionFactors::parse("debug=100, gpu=25", &known).unwrap();
        assert!(p.in_use());
        assert_eq!(p.factor(Some("debug")), 1.0);
        assert_eq!(p.factor(None), 0.25, "the default partition's");
        assert_eq!(p.factor(Some("long")), 0.0);
        assert!(!PartitionFactors::parse("", &known).unwrap().in_use());
        assert_eq!(
            PartitionFactors::parse("", &known).unwrap().factor(None),
            0.0
        );
        let e = PartitionFactors::parse("scratch=1", &known)
            .unwrap_err()
            .to_string();
        assert!(e.contains("'scratch' is not a partition"), "{e}");
        let e = PartitionFactors::parse("debug=70000", &known)
            .unwrap_err()
            .to_string();
        assert!(e.contains("65533"), "{e}");
        assert!(PartitionFactors::parse("debug", &known)
            .unwrap_err()
            .to_string()
            .contains("PARTITION=N"));
    }

    #[test]
    fn policies_are_found_by_name_and_unknown_ones_named() {
        assert_eq!(
            priority_policy("basic", PriorityConfig::default())
                .unwrap()
                .name(),
            "basic"
        );
        let m = priority_policy("priority/multifactor", PriorityConfig::default()).unwrap();
        assert_eq!(m.name(), "multifactor");
        let e = priority_policy("fairshare", PriorityConfig::default())
            .err()
            .unwrap();
        assert_eq!(
            e.to_string(),
            "unknown priority type 'fairshare' (known: basic, multifactor)"
        );
    }

    #[test]
    fn a_negative_nice_is_for_administrators_only() {
        assert!(check_nice(100, false).is_ok());
        assert!(check_nice(-5, true).is_ok());
        assert!(check_nice(-5, false)
            .unwrap_err()
            .to_string()
            .contains("administrator"));
    }
}
