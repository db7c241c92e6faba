//! What a launch pass does after a job that cannot start (Slurm's
//! `SchedulerType`): backfill lets later jobs start where they do not
//! delay the jobs that hold nodes; builtin starts jobs in strict priority
//! order, nothing after the first one that must wait.

use serde::{Deserialize, Serialize};

/// Slurm's `SchedulerType`, as gsched reads it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SchedulerType {
    /// `sched/backfill`: a job that cannot start holds nodes only where
    /// it must (on several nodes, or a node alone), and later jobs start
    /// anywhere else, or on those nodes if they will have ended by the
    /// time it is expected to start (EASY backfill).
    #[default]
    Backfill,
    /// `sched/builtin`: strict priority order: once a job cannot start,
    /// no later job starts in that pass (a job waiting for its drain has
    /// its instances and does not stop the pass).
    Builtin,
}

/// A scheduler type that does not exist.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown scheduler type '{0}' (known: backfill, builtin, or Slurm's sched/backfill, sched/builtin)")]
pub struct UnknownSchedulerType(pub String);

impl std::str::FromStr for SchedulerType {
    type Err = UnknownSchedulerType;
    fn from_str(s: &str) -> Result<SchedulerType, UnknownSchedulerType> {
        match s.trim().strip_prefix("sched/").unwrap_or(s.trim()) {
            "backfill" => Ok(SchedulerType::Backfill),
            "builtin" => Ok(SchedulerType::Builtin),
            _ => Err(UnknownSchedulerType(s.into())),
        }
    }
}

impl std::fmt::Display for SchedulerType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SchedulerType::Backfill => "backfill",
            SchedulerType::Builtin => "builtin",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slurms_names_and_gscheds_read_alike() {
        for (s, t) in [
            ("backfill", SchedulerType::Backfill),
            ("sched/backfill", SchedulerType::Backfill),
            ("builtin", SchedulerType::Builtin),
            ("sched/builtin", SchedulerType::Builtin),
        ] {
            assert_eq!(s.parse::<SchedulerType>().unwrap(), t);
        }
        let e = "sched/wiki".parse::<SchedulerType>().unwrap_err();
        assert!(e.to_string().contains("sched/wiki"), "{e}");
        assert_eq!(SchedulerType::default().to_string(), "backfill");
    }
}
