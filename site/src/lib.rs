//! gsched-site: the site's one configuration file,
//! `/etc/gsched/gsched.toml`, read by both daemons and by the commands.
//!
//! ```toml
//! [cluster]       # what nodes and commands need: the controller's URL, its CA
//! [controller]    # gctld's settings (the names of its flags, in snake_case)
//! [node]          # gnoded's settings on every node
//! [nodes.gpu01]   # what differs on node gpu01
//! [cgroup]        # the nodes' cgroup settings (gsched's cgroup.conf)
//! ```
//!
//! Flags and their environment variables win over the file; unknown keys
//! are refused with their line. `gsched config check` prints the effective
//! settings and where each came from.

pub mod example;
pub mod file;
pub mod merge;
pub mod trust;

pub use file::{Section, SiteError, SiteFile, CONFIG_ENV, DEFAULT_PATH};
pub use merge::{layer, layer_over, Layered, Source};

use serde::{Deserialize, Serialize};

/// `[cluster]`: what nodes and commands need to reach the controller.
#[derive(Debug, Clone, Default, PartialEq, clap::Args, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterSettings {
    /// The controller's URL, for nodes and for commands run outside jobs
    /// (`GSCHED_URL` overrides it for commands; inside jobs it is set);
    /// with standby controllers, every controller's, comma separated
    /// (Slurm's SlurmctldHost list). Default: http://127.0.0.1:6817.
    #[arg(long = "controller-url", value_name = "URL[,URL...]")]
    pub controller: Option<String>,
    /// CA certificates (PEM) that the controller's and nodes' certificates
    /// are checked against, for https (`GSCHED_TLS_CA` overrides it for
    /// commands). Readable by every user: it holds only certificates.
    #[arg(long = "cluster-tls-ca", value_name = "FILE")]
    pub tls_ca: Option<std::path::PathBuf>,
}

/// The `[cluster]` settings of the site file, for commands: no file gives
/// the defaults. Root's commands read it only when no one else could have
/// written it (`trust`), as the daemons do.
pub fn cluster_settings() -> Result<ClusterSettings, SiteError> {
    // SAFETY: geteuid cannot fail.
    let file = if unsafe { libc::geteuid() } == 0 {
        SiteFile::locate_trusted(None)?
    } else {
        SiteFile::locate(None)?
    };
    match file {
        Some(file) => file.read_section("cluster"),
        None => Ok(ClusterSettings::default()),
    }
}
