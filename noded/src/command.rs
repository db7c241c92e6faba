//! gnoded's command line and where its settings come from: its flags over
//! the site file's `[nodes.NAME]` section (NAME: its `--name`, else its
//! host name), then `[node]`, then `[cluster]`'s `controller` and `tls_ca`. Used by `gnoded` itself,
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

/// The node's name: `--name`, else (from a flat file of the earlier kind)
/// its `name`, else the host name.
pub fn node_name(
    matches: &clap::ArgMatches,
    args: &GnodedArgs,
    file: Option<&SiteFile>,
) -> Option<String> {
    if matches.value_source("name").is_some() {
        return args.node.name.clone();
    }
    let from_flat_file = file
        .filter(|f| f.is_flat())
        .and_then(|f| f.section("node"))
        .and_then(|s| s.entries.iter().find(|e| e.key == "name"))
        .and_then(|e| e.value.as_str().map(str::to_string));
    from_flat_file.or_else(|| crate::startup::host_name().ok())
}

/// Refuses what a shared site file cannot mean: a `name` in `[node]`
/// (every node would take it) or in `[nodes.X]` other than X.
fn check_names(file: &SiteFile) -> anyhow::Result<()> {
    if file.is_flat() {
        return Ok(());
    }
    let sections = std::iter::once("node".to_string())
        .chain(file.node_names().into_iter().map(|n| format!("nodes.{n}")));
    for name in sections {
        let Some(section) = file.section(&name) else {
            continue;
        };
        for e in section.entries.iter().filter(|e| e.key == "name") {
            let own = name.strip_prefix("nodes.");
            if own.is_some() && e.value.as_str() == own {
                continue;
            }
            return Err(section
                .invalid(
                    e,
                    "a node's name is its --name or its host name; its own settings go in [nodes.NAME]"
                        .into(),
                )
                .into());
        }
    }
    Ok(())
}

/// The node's settings: defaults, the site file, then the flags; with its
/// cgroup settings (`--cgroup-config`, else the site file's `[cgroup]`).
pub fn load(
    command: &clap::Command,
    matches: &clap::ArgMatches,
    args: GnodedArgs,
    file: Option<&SiteFile>,
) -> anyhow::Result<Loaded<NodeConfig>> {
    if let Some(f) = file {
        check_names(f)?;
    }
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
    let cgroup_section = file.and_then(|f| f.section("cgroup"));
    if let (Some(path), Some(section)) = (&loaded.settings.value.cgroup_config, cgroup_section) {
        anyhow::bail!(
            "{}: both a [cgroup] section and cgroup_config = {} ({}): keep one",
            section.path.display(),
            path.display(),
            loaded
                .settings
                .source("cgroup_config")
                .map(|s| s.to_string())
                .unwrap_or_default()
        );
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, FromArgMatches};

    fn load_with(text: &str, name: &str) -> anyhow::Result<Loaded<NodeConfig>> {
        let file = SiteFile::parse(std::path::Path::new("/g.toml"), text).unwrap();
        let command = GnodedArgs::command();
        let matches = command
            .clone()
            .try_get_matches_from(["gnoded", "--name", name])
            .unwrap();
        let args = GnodedArgs::from_arg_matches(&matches).unwrap();
        load(&command, &matches, args, Some(&file))
    }

    #[test]
    fn a_nodes_section_applies_to_its_node_only() {
        let text = "[node]\ncpus = 4\n[nodes.n2]\ncpus = 8\n";
        assert_eq!(load_with(text, "n1").unwrap().settings.value.cpus, Some(4));
        assert_eq!(load_with(text, "n2").unwrap().settings.value.cpus, Some(8));
    }

    #[test]
    fn a_name_every_node_would_take_is_refused() {
        let e = load_with("[node]\nname = \"n1\"\n", "n1")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("/g.toml:2: [node] name: a node's name is its --name"),
            "{e}"
        );
        let e = load_with("[nodes.n2]\nname = \"n3\"\n", "n2")
            .unwrap_err()
            .to_string();
        assert!(e.contains("[nodes.n2] name"), "{e}");
        load_with("[nodes.n2]\nname = \"n2\"\n", "n2").unwrap();
        // A flat file of the earlier kind was one node's: its name stands.
        let flat = load_with("controller = \"http://c:6817\"\nname = \"n9\"\n", "n9").unwrap();
        assert_eq!(flat.settings.value.controller, "http://c:6817");
    }

    #[test]
    fn a_cgroup_section_and_a_cgroup_file_together_are_refused() {
        let e = load_with(
            "[node]\ncgroup_config = \"/etc/c.toml\"\n[cgroup]\nplugin = \"none\"\n",
            "n1",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("both a [cgroup] section and cgroup_config"),
            "{e}"
        );
        let c = load_with("[cgroup]\nplugin = \"none\"\n", "n1").unwrap();
        assert_eq!(
            c.settings.value.cgroup.unwrap().plugin,
            crate::cgroup::Plugin::None
        );
    }
}
