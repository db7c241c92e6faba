//! The Slurm options a job carries beyond gsched's own (account, QOS,
//! tasks, `--constraint`, ...), which the layers above the job model read.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Slurm options a job carries beyond gsched's own: recorded at submit,
/// shown by `sacct`/`squeue`/`scontrol`, and acted on where docs/slurm.md
/// says so.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SlurmOptions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qos: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wckey: Option<String>,
    /// Tasks of the job (`-n`): `srun`'s default count, `SLURM_NTASKS`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ntasks: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus_per_task: Option<u32>,
    /// `append` or `truncate` for the output files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_mode: Option<String>,
    /// `--signal=[B:]SIG[@SECS]` as given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<String>,
    /// The batch script's path as submitted (scontrol's `Command=`);
    /// `None` for `--wrap` or a script read from standard input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// Other options accepted and recorded as given (`--constraint`, ...).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub other: BTreeMap<String, String>,
}

impl SlurmOptions {
    pub fn is_empty(&self) -> bool {
        *self == SlurmOptions::default()
    }
}
