//! `gsched config check` and `gsched config example`: the site file
//! checked as both daemons and the commands read it, and the shipped file
//! with every key commented, written from the programs' own definitions.

use std::path::PathBuf;

use anyhow::Result;
use clap::{Args, CommandFactory, FromArgMatches, Subcommand};
use gsched_ctld::command::GctldArgs;
use gsched_daemon::settings::describe;
use gsched_noded::command::GnodedArgs;
use gsched_site::{ClusterSettings, SiteFile};

#[derive(Subcommand)]
pub enum ConfigCommand {
    /// Check a site file as gctld, gnoded (on this host and on each
    /// [nodes.NAME]) and the commands read it, and print the effective
    /// settings with where each came from (default, FILE:LINE, environment,
    /// flag). Exits 1 naming the first problem.
    Check(CheckArgs),
    /// Print the site file with every key commented out at its default
    /// (the packages install it as /etc/gsched/gsched.toml).
    Example,
}

#[derive(Args)]
pub struct CheckArgs {
    /// The file (default: $GSCHED_CONFIG, else /etc/gsched/gsched.toml).
    file: Option<PathBuf>,
}

pub fn run(command: ConfigCommand) -> Result<()> {
    match command {
        ConfigCommand::Example => {
            print!("{}", example());
            Ok(())
        }
        ConfigCommand::Check(args) => {
            let file = match &args.file {
                Some(p) => Some(SiteFile::read(p)?),
                None => SiteFile::locate(None)?,
            };
            if let Some(f) = &file {
                // As the daemons check it before they read it.
                gsched_site::trust::check(&f.path).map_err(|e| {
                    anyhow::anyhow!("{}: the daemons would refuse it: {e}", f.path.display())
                })?;
            }
            print!("{}", check(file.as_ref())?);
            Ok(())
        }
    }
}

/// The report of `gsched config check`, or the first problem.
pub fn check(file: Option<&SiteFile>) -> Result<String> {
    let mut out = match file {
        Some(f) if f.is_flat() => format!(
            "# {}: an earlier per-daemon file (no sections): its keys are the daemon's it is given to with --config\n",
            f.path.display()
        ),
        Some(f) => format!("# {}: valid\n", f.path.display()),
        None => format!(
            "# no site file ({} unset, {} absent): defaults\n",
            gsched_site::CONFIG_ENV,
            gsched_site::DEFAULT_PATH
        ),
    };
    out.push_str("# Effective settings; after each, where it came from (this shell's\n# environment included, which a service's may not have).\n\n");
    if let Some(f) = file.filter(|f| f.is_flat()) {
        return Ok(out + &flat_report(f)?);
    }
    out.push_str(&cluster_report(file)?);
    let command = GctldArgs::command();
    let matches = command.clone().try_get_matches_from(["gctld"])?;
    let args = GctldArgs::from_arg_matches(&matches)?;
    let ctld = gsched_ctld::command::load(&command, &matches, args, file)?;
    out.push('\n');
    out.push_str(&daemon_report("controller", &ctld.daemon, &ctld.settings)?);
    let mut nodes: Vec<Option<String>> = vec![None];
    if let Some(f) = file {
        nodes.extend(f.node_names().into_iter().map(|n| Some(n.to_string())));
    }
    for name in nodes {
        let command = GnodedArgs::command();
        let mut argv = vec!["gnoded".to_string()];
        if let Some(n) = &name {
            argv.extend(["--name".to_string(), n.clone()]);
        }
        let matches = command.clone().try_get_matches_from(argv)?;
        let args = GnodedArgs::from_arg_matches(&matches)?;
        let mut node = gsched_noded::command::load(&command, &matches, args, file)?;
        let title = match &name {
            Some(n) => format!("nodes.{n}"),
            None => "node".into(),
        };
        out.push('\n');
        if name.is_none() {
            out.push_str(&format!(
                "# as gnoded on this host reads it (node name {})\n",
                node.settings.value.name.as_deref().unwrap_or("?")
            ));
        } else {
            out.push_str("# every setting of this node, [node] included\n");
            if let Some((_, source)) = node.settings.sources.iter_mut().find(|(k, _)| k == "name") {
                *source = gsched_site::Source::SectionName;
            }
        }
        out.push_str(&daemon_report(&title, &node.daemon, &node.settings)?);
    }
    let cgroup: gsched_noded::cgroup::CgroupConfig = match file {
        Some(f) => f.read_section("cgroup")?,
        None => Default::default(),
    };
    cgroup
        .check()
        .map_err(|e| anyhow::anyhow!("[cgroup]: {e}"))?;
    let entries = file.and_then(|f| f.section("cgroup"));
    let sources: Vec<(String, gsched_site::Source)> = gsched_noded::cgroup::CgroupConfig::KEYS
        .iter()
        .map(|(key, _)| {
            let source = entries
                .and_then(|s| s.entries.iter().find(|e| e.key == *key).map(|e| (s, e)))
                .map_or(gsched_site::Source::Default, |(s, e)| {
                    gsched_site::Source::File {
                        path: s.path.clone(),
                        line: e.line,
                        section: s.name.clone(),
                    }
                });
            (key.to_string(), source)
        })
        .collect();
    out.push_str("\n# for nodes not given --cgroup-config\n");
    out.push_str(&describe(
        "cgroup",
        &serde_json::to_value(&cgroup)?,
        &sources,
    ));
    Ok(out)
}

/// A flat file of the earlier kind is one daemon's: said as whichever
/// reads it.
fn flat_report(file: &SiteFile) -> Result<String> {
    let command = GctldArgs::command();
    let matches = command.clone().try_get_matches_from(["gctld"])?;
    let args = GctldArgs::from_arg_matches(&matches)?;
    let as_controller = gsched_ctld::command::load(&command, &matches, args, Some(file));
    if let Ok(ctld) = &as_controller {
        return daemon_report("controller", &ctld.daemon, &ctld.settings)
            .map(|r| format!("# read as gctld's file\n{r}"));
    }
    let command = GnodedArgs::command();
    let matches = command.clone().try_get_matches_from(["gnoded"])?;
    let args = GnodedArgs::from_arg_matches(&matches)?;
    match gsched_noded::command::load(&command, &matches, args, Some(file)) {
        Ok(node) => daemon_report("node", &node.daemon, &node.settings)
            .map(|r| format!("# read as gnoded's file\n{r}")),
        Err(as_node) => anyhow::bail!(
            "{}: neither daemon reads it: as gctld's: {:#}; as gnoded's: {as_node:#}",
            file.path.display(),
            as_controller
                .err()
                .map(|e| format!("{e:#}"))
                .unwrap_or_default()
        ),
    }
}

fn cluster_report(file: Option<&SiteFile>) -> Result<String> {
    let command = ClusterSettings::augment_args(clap::Command::new("cluster"));
    let matches = command.clone().try_get_matches_from(["cluster"])?;
    let defaults = ClusterSettings::default();
    let sections: Vec<&gsched_site::Section> = file
        .and_then(|f| f.section("cluster"))
        .into_iter()
        .collect();
    let layered = gsched_site::layer(&command, &matches, &defaults, &sections, &[])?;
    let mut out = describe(
        "cluster",
        &serde_json::to_value(&layered.value)?,
        &layered.sources,
    );
    for var in ["GSCHED_URL", gsched_core::env::TLS_CA_ENV] {
        if let Ok(v) = std::env::var(var) {
            out.push_str(&format!("# {var}={v} overrides it for commands run here\n"));
        }
    }
    Ok(out)
}

fn daemon_report<T: serde::Serialize>(
    title: &str,
    daemon: &gsched_site::Layered<gsched_daemon::DaemonSettings>,
    settings: &gsched_site::Layered<T>,
) -> Result<String> {
    let mut value = serde_json::to_value(&settings.value)?;
    let mut sources = daemon.sources.clone();
    if let (serde_json::Value::Object(v), serde_json::Value::Object(d)) =
        (&mut value, serde_json::to_value(&daemon.value)?)
    {
        v.extend(d);
    }
    // The daemon's state directory shown as it is used.
    if let serde_json::Value::Object(v) = &mut value {
        v.insert(
            "state_dir".into(),
            daemon.value.state_dir().display().to_string().into(),
        );
    }
    sources.extend(settings.sources.iter().cloned());
    Ok(describe(title, &value, &sources))
}

/// The site file with every key commented out at its default.
pub fn example() -> String {
    let no_env = |c: clap::Command| c.mut_args(|a| a.env(None));
    let ctld_command = no_env(GctldArgs::command());
    let ctld_matches = ctld_command
        .clone()
        .try_get_matches_from(["gctld"])
        .expect("gctld parses with no arguments");
    let ctld = GctldArgs::from_arg_matches(&ctld_matches).expect("defaults");
    let node_command = no_env(GnodedArgs::command());
    let node_matches = node_command
        .clone()
        .try_get_matches_from(["gnoded"])
        .expect("gnoded parses with no arguments");
    let node = GnodedArgs::from_arg_matches(&node_matches).expect("defaults");
    let with_daemon_keys = |mut v: serde_json::Value| {
        if let serde_json::Value::Object(o) = &mut v {
            o.insert(
                "state_dir".into(),
                gsched_daemon::settings::DEFAULT_STATE_DIR.into(),
            );
            o.insert("log_format".into(), "text".into());
        }
        v
    };
    let ctld_defaults = with_daemon_keys(serde_json::to_value(&ctld.ctld).expect("serializes"));
    let node_defaults = with_daemon_keys(serde_json::to_value(&node.node).expect("serializes"));
    let cluster_command = ClusterSettings::augment_args(clap::Command::new("cluster"));
    let mut out = String::from(EXAMPLE_HEADER);
    out.push('\n');
    out.push_str(&gsched_site::example::section(
        "cluster",
        "What nodes and commands need to reach the controller.",
        &cluster_command,
        &serde_json::to_value(ClusterSettings::default()).expect("serializes"),
        false,
    ));
    out.push('\n');
    out.push_str(&gsched_site::example::section(
        "controller",
        "gctld's settings (gctld(8)). tls_ca defaults to [cluster] tls_ca.",
        &ctld_command,
        &ctld_defaults,
        true,
    ));
    out.push('\n');
    out.push_str(&gsched_site::example::section(
        "node",
        "gnoded's settings on every node (gnoded(8)). controller and tls_ca default to [cluster]'s.",
        &node_command,
        &node_defaults,
        true,
    ));
    out.push('\n');
    out.push_str(NODES_EXAMPLE);
    out.push('\n');
    out.push_str(&gsched_site::example::described_section(
        "cgroup",
        "The nodes' cgroup settings (Slurm's cgroup.conf); a node given --cgroup-config reads that file instead.",
        gsched_noded::cgroup::CgroupConfig::KEYS,
        &serde_json::to_value(gsched_noded::cgroup::CgroupConfig::default()).expect("serializes"),
    ));
    out
}

const EXAMPLE_HEADER: &str = "\
# /etc/gsched/gsched.toml: the gsched site configuration (docs/install.md).
#
# Read by gctld, by gnoded on every node and by the commands (gsub, gqueue,
# the Slurm commands, ...). A daemon's flags override what is here; a key
# this release does not know is an error naming its line. Check a file
# with `gsched config check FILE`; `gsched config example` writes this one.
#
# Every key is shown commented out at its default.
";

const NODES_EXAMPLE: &str = "\
# What differs on one node, by its name (--name, else its host name): any
# key of [node]. For example:
#
#[nodes.gpu01]
#sim_gpus = \"2xA100-40GB\"
#cpus = 64
#gpu_config = \"/etc/gsched/gpus-gpu01.toml\"
";

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// Every commented key line, uncommented.
    fn uncommented(example: &str) -> String {
        example
            .lines()
            .filter_map(|l| {
                if l.starts_with('[') {
                    return Some(format!("{l}\n"));
                }
                if l.starts_with("#[") {
                    return Some(format!("{}\n", &l[1..]));
                }
                let rest = l.strip_prefix('#')?;
                (rest.contains(" = ")
                    && !rest.starts_with(' ')
                    && !rest.contains("not set by default"))
                .then(|| format!("{rest}\n"))
            })
            .collect()
    }

    #[test]
    fn the_example_uncommented_is_a_valid_file_of_the_defaults() {
        let text = uncommented(&example());
        assert!(
            text.contains("[controller]\n") && text.contains("node_timeout = 30\n"),
            "{text}"
        );
        let file = SiteFile::parse(Path::new("/etc/gsched/gsched.toml"), &text).unwrap();
        let report = check(Some(&file)).unwrap();
        assert!(
            report.contains("node_timeout = 30    # /etc/gsched/gsched.toml:"),
            "{report}"
        );
        assert!(report.contains("[nodes.gpu01]"), "{report}");
        assert!(
            report.contains("sim_gpus = \"2xA100-40GB\"    # /etc/gsched/gsched.toml:"),
            "{report}"
        );
    }

    #[test]
    fn every_setting_of_both_daemons_is_in_the_example() {
        let text = example();
        for command in [GctldArgs::command(), GnodedArgs::command()] {
            for arg in command.get_arguments() {
                let id = arg.get_id().as_str();
                if ["config", "print_openapi", "help", "version"].contains(&id) {
                    continue;
                }
                assert!(
                    text.contains(&format!("\n#{id} =")),
                    "{id} missing from the example"
                );
            }
        }
        for (key, _) in gsched_noded::cgroup::CgroupConfig::KEYS {
            assert!(text.contains(&format!("\n#{key} =")), "{key}");
        }
    }

    #[test]
    fn a_bad_key_is_named_with_its_line() {
        let file = SiteFile::parse(
            Path::new("/etc/gsched/gsched.toml"),
            "[controller]\nnode_timeout = 60\n\n[node]\nheartbeat_intervl = 5\n",
        )
        .unwrap();
        let e = format!("{:#}", check(Some(&file)).unwrap_err());
        assert!(
            e.contains("/etc/gsched/gsched.toml:5: [node] heartbeat_intervl: unknown field `heartbeat_intervl`"),
            "{e}"
        );
    }
}
