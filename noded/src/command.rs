//! gnoded's command line and where its settings come from: its flags over
//! the site file's `[nodes.NAME]` section, then `[node]`, then
//! `[cluster]`'s `controller` and `tls_ca`. Used by `gnoded` itself,
//! `gsched config check` and the manual pages.

use clap::Parser;
use gsched_daemon::settings::{ClusterDefaults, Loaded};
use gsched_daemon::DaemonArgs;
use gsched_site::SiteFile;

use crate::cgroup::CgroupConfig;
use crate::NodeConfig;

/// `[cluster]` keys that stand in for the node's settings.
pub const CLUSTER_DEFAULTS: ClusterDefaults = &[("controller", "controller"), ("tls_ca", "tls_ca")];

/// gnoded's command line.
#[derive(Parser)]
#[command(
    name = "gnoded",
    version = gsched_core::version::VERSION_LINE,
    about = "gsched node daemon",
    long_about = "gsched node daemon: registers the node's CPUs, memory and GPUs (MIG \
                  instances, MPS) with the controller, runs its jobs as their users in their \
                  own sessions and cgroups, and packs shared jobs' CUDA processes into \
                  instances. Its settings come from the [node] and [nodes.NAME] sections of \
                  the site file (/etc/gsched/gsched.toml), which its flags override."
)]
pub struct GnodedArgs {
    #[command(flatten)]
    pub daemon: DaemonArgs,
    #[command(flatten)]
    pub node: NodeConfig,
}

/// The node's name: `--name`, else `name` in `[node]`, else the host name.
pub fn node_name(
    matches: &clap::ArgMatches,
    args: &GnodedArgs,
    file: Option<&SiteFile>,
) -> Option<String> {
    if matches.value_source("name").is_some() {
        return args.node.name.clone();
    }
    let from_file = file
        .and_then(|f| f.section("node"))
        .and_then(|s| s.entries.iter().find(|e| e.key == "name"))
        .and_then(|e| e.value.as_str().map(str::to_string));
    from_file.or_else(|| {
        nix::unistd::gethostname()
            .ok()
            .map(|h| h.to_string_lossy().into_owned())
    })
}

/// The node's settings: defaults, the site file, then the flags; with its
/// cgroup settings (`--cgroup-config`, else the site file's `[cgroup]`).
pub fn load(
    command: &clap::Command,
    matches: &clap::ArgMatches,
    args: GnodedArgs,
    file: Option<&SiteFile>,
) -> anyhow::Result<Loaded<NodeConfig>> {
    let name = node_name(matches, &args, file);
    let mut sections = vec!["node".to_string()];
    if let Some(n) = &name {
        sections.push(format!("nodes.{n}"));
    }
    let mut loaded = gsched_daemon::settings::load_from(
        command,
        matches,
        &args.daemon,
        args.node,
        file,
        CLUSTER_DEFAULTS,
        &sections,
    )?;
    if loaded.settings.value.name.is_none() {
        loaded.settings.value.name = name;
    }
    loaded.settings.value.cgroup = match (&loaded.settings.value.cgroup_config, file) {
        (Some(path), _) => Some(CgroupConfig::load(path)?),
        (None, Some(f)) => {
            let c: CgroupConfig = f.read_section("cgroup")?;
            c.check()
                .map_err(|e| anyhow::anyhow!("{}: [cgroup] {e}", f.path.display()))?;
            Some(c)
        }
        (None, None) => None,
    };
    Ok(loaded)
}
