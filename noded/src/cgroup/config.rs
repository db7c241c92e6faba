//! The node's cgroup settings (`--cgroup-config`, TOML), gsched's
//! `cgroup.conf`. Every limit is enforced unless turned off here.

use std::path::Path;

use gsched_core::resources::MemoryPolicy;
use serde::{Deserialize, Serialize};

/// Which cgroup backend to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Plugin {
    /// v2 where its controllers are available, else v1, else none.
    #[default]
    Auto,
    V1,
    V2,
    /// No cgroups: jobs are not confined (a loud warning at start).
    None,
}

/// The default per-job process cap: room for thousands of data-loader
/// workers and threads, far below a node's process table (4,194,304 on
/// 64-bit Linux, often 32,768 by default).
pub const DEFAULT_MAX_PROCESSES: u64 = 16_384;

/// The settings, with Slurm's `cgroup.conf` names where Slurm has one.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct CgroupConfig {
    pub plugin: Plugin,
    /// The directory under each hierarchy's root that holds gsched's cgroups.
    pub base: String,
    /// Limit each job to its memory request (ConstrainRAMSpace).
    pub constrain_ram_space: bool,
    /// Count swap against the limit (ConstrainSwapSpace).
    pub constrain_swap_space: bool,
    /// Run each job on its allocated cores only (ConstrainCores).
    pub constrain_cores: bool,
    /// Let each job open only the GPU devices it was given (ConstrainDevices).
    pub constrain_devices: bool,
    /// Percent of its memory request a job may use (AllowedRAMSpace).
    pub allowed_ram_space: f64,
    /// Percent of its memory request a job may use in swap beyond its RAM
    /// limit (AllowedSwapSpace).
    pub allowed_swap_space: f64,
    /// The lowest RAM limit a job gets, MB (MinRAMSpace).
    pub min_ram_space: u64,
    /// Seconds between samples of a running job's memory and processes
    /// (for AveRSS, MaxVMSize and sstat; JobAcctGatherFrequency).
    pub acct_gather_frequency: u64,
    /// The most processes and threads one job may have at once on a node
    /// (the pids controller's `pids.max`): a fork bomb in a job stops
    /// there instead of exhausting the node's process table.
    pub max_processes: u64,
}

impl Default for CgroupConfig {
    fn default() -> Self {
        CgroupConfig {
            plugin: Plugin::Auto,
            base: "gsched".into(),
            constrain_ram_space: true,
            constrain_swap_space: true,
            constrain_cores: true,
            constrain_devices: true,
            allowed_ram_space: 100.0,
            allowed_swap_space: 0.0,
            min_ram_space: gsched_core::resources::DEFAULT_MIN_RAM_MIB,
            acct_gather_frequency: 5,
            max_processes: DEFAULT_MAX_PROCESSES,
        }
    }
}

/// A cgroup config that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read cgroup config {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("cgroup config {path}: {source}")]
    Parse {
        path: String,
        source: toml::de::Error,
    },
    #[error("cgroup config {path}: {0}", path = .1)]
    Invalid(String, String),
}

/// A cgroup setting that cannot mean anything.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadSetting(pub String);

impl From<String> for BadSetting {
    fn from(why: String) -> Self {
        BadSetting(why)
    }
}

impl From<&str> for BadSetting {
    fn from(why: &str) -> Self {
        BadSetting(why.to_string())
    }
}

impl CgroupConfig {
    /// Every key with what it does, for the site file's commented example
    /// (a test keeps it equal to the fields).
    pub const KEYS: &'static [(&'static str, &'static str)] = &[
        ("plugin", "Which cgroup backend: auto (v2 where its controllers are available, else v1, else none), v1, v2, or none (jobs are not confined; a loud warning at start)."),
        ("base", "The directory under each hierarchy's root that holds gsched's cgroups."),
        ("constrain_ram_space", "Limit each job to its memory request (ConstrainRAMSpace)."),
        ("constrain_swap_space", "Count swap against the limit (ConstrainSwapSpace)."),
        ("constrain_cores", "Run each job on its allocated cores only (ConstrainCores)."),
        ("constrain_devices", "Let each job open only the GPU devices it was given (ConstrainDevices)."),
        ("allowed_ram_space", "Percent of its memory request a job may use (AllowedRAMSpace)."),
        ("allowed_swap_space", "Percent of its memory request a job may use in swap beyond its RAM limit (AllowedSwapSpace)."),
        ("min_ram_space", "The lowest RAM limit a job gets, MB (MinRAMSpace)."),
        ("acct_gather_frequency", "Seconds between samples of a running job's memory and processes, for AveRSS, MaxVMSize and sstat (JobAcctGatherFrequency)."),
        ("max_processes", "The most processes and threads one job may have at once on a node (pids.max): a fork bomb in a job stops there."),
    ];

    /// Reads and checks a config file.
    pub fn load(path: &Path) -> Result<CgroupConfig, ConfigError> {
        let p = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: p.clone(),
            source,
        })?;
        let c: CgroupConfig = toml::from_str(&text).map_err(|source| ConfigError::Parse {
            path: p.clone(),
            source,
        })?;
        c.check()
            .map_err(|why| ConfigError::Invalid(why.to_string(), p))?;
        Ok(c)
    }

    /// Refuses settings that cannot mean anything.
    pub fn check(&self) -> Result<(), BadSetting> {
        if !(self.allowed_ram_space > 0.0 && self.allowed_ram_space <= 1000.0) {
            return Err(BadSetting(format!(
                "allowed_ram_space = {} must be a percentage above 0 (at most 1000)",
                self.allowed_ram_space
            )));
        }
        if !(self.allowed_swap_space >= 0.0 && self.allowed_swap_space <= 1000.0) {
            return Err(BadSetting(format!(
                "allowed_swap_space = {} must be a percentage from 0 to 1000",
                self.allowed_swap_space
            )));
        }
        let base_ok = !self.base.is_empty()
            && self
                .base
                .split('/')
                .all(|c| !c.is_empty() && c != "." && c != "..")
            && !self.base.starts_with('/');
        if !base_ok {
            return Err(BadSetting(format!(
                "base = {:?} must be a relative path without . or .. (such as \"gsched\")",
                self.base
            )));
        }
        if self.max_processes < 16 {
            return Err(BadSetting(format!(
                "max_processes = {} leaves a job no room for its shell and a few processes (give at least 16)",
                self.max_processes
            )));
        }
        if self.acct_gather_frequency == 0 {
            return Err("acct_gather_frequency must be at least 1 second".into());
        }
        Ok(())
    }

    /// The memory policy core's limit arithmetic takes.
    pub fn memory_policy(&self) -> MemoryPolicy {
        MemoryPolicy {
            allowed_ram_percent: self.allowed_ram_space,
            allowed_swap_percent: self.allowed_swap_space,
            constrain_swap: self.constrain_swap_space,
            min_ram_mib: self.min_ram_space,
        }
    }
}

#[cfg(test)]
mod keys_tests {
    use super::CgroupConfig;

    #[test]
    fn every_field_is_described_once_in_order() {
        let serde_json::Value::Object(fields) =
            serde_json::to_value(CgroupConfig::default()).unwrap()
        else {
            panic!("a structure");
        };
        let described: Vec<&str> = CgroupConfig::KEYS.iter().map(|(k, _)| *k).collect();
        let mut names: Vec<&str> = fields.keys().map(String::as_str).collect();
        let mut sorted = described.clone();
        names.sort_unstable();
        sorted.sort_unstable();
        assert_eq!(names, sorted);
    }
}
