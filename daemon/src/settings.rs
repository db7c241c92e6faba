//! A daemon's settings: the site file's sections under its command line.

use std::path::{Path, PathBuf};

use anyhow::Context;
use gsched_site::{Layered, Section, SiteFile, Source};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// Where both daemons keep their state unless told otherwise (as `gsched
/// up` does for root).
pub const DEFAULT_STATE_DIR: &str = "/var/lib/gsched";

/// The flags every daemon has besides its settings.
#[derive(Debug, Clone, clap::Args)]
pub struct DaemonArgs {
    /// State directory (database, spool, cluster key); `state_dir` in the
    /// site file. Default: /var/lib/gsched.
    #[arg(long, env = "GSCHED_STATE_DIR")]
    pub state_dir: Option<PathBuf>,
    /// The site configuration file (TOML; docs/install.md). Default:
    /// $GSCHED_CONFIG (empty: none), else /etc/gsched/gsched.toml when it
    /// exists. Flags win over it.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Log format (`log_format` in the site file).
    #[arg(long, value_enum, default_value = "text")]
    pub log_format: LogFormat,
}

/// How a daemon writes its log lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Lines of text (journald adds its own time stamps).
    Text,
    /// One JSON object per line, with the job, run and instance ids as
    /// fields, for a log shipper.
    Json,
}

impl LogFormat {
    /// The name `init_logs` takes.
    pub fn as_str(self) -> &'static str {
        match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        }
    }
}

/// What a daemon's section may say besides the daemon's own settings.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DaemonSettings {
    #[serde(default)]
    pub state_dir: Option<PathBuf>,
    #[serde(default = "default_log_format")]
    pub log_format: LogFormat,
}

fn default_log_format() -> LogFormat {
    LogFormat::Text
}

const DAEMON_KEYS: [&str; 2] = ["state_dir", "log_format"];

impl DaemonSettings {
    /// The state directory to use.
    pub fn state_dir(&self) -> PathBuf {
        self.state_dir
            .clone()
            .unwrap_or_else(|| PathBuf::from(DEFAULT_STATE_DIR))
    }
}

/// Which `[cluster]` keys stand in for which of a daemon's settings
/// (beneath its own section): `(cluster key, setting)`.
pub type ClusterDefaults = &'static [(&'static str, &'static str)];

/// A daemon's settings, read.
#[derive(Debug, Clone)]
pub struct Loaded<T> {
    pub daemon: Layered<DaemonSettings>,
    pub settings: Layered<T>,
    /// The site file read, if any.
    pub file: Option<PathBuf>,
}

impl<T> Loaded<T> {
    /// The settings given as flags or through the environment (which a
    /// re-read of the file leaves as they are).
    pub fn fixed_keys(&self) -> Vec<String> {
        self.settings
            .sources
            .iter()
            .filter(|(_, s)| matches!(s, Source::Flag(_) | Source::Environment(_)))
            .map(|(k, _)| k.clone())
            .collect()
    }
}

/// The sections a daemon reads, lowest first: the `[cluster]` keys that
/// stand in for its settings, then `sections` in order.
pub fn daemon_sections(
    file: &SiteFile,
    cluster: ClusterDefaults,
    sections: &[String],
) -> Vec<Section> {
    let mut out = Vec::new();
    if let Some(c) = file.section("cluster") {
        let entries = c
            .entries
            .iter()
            .filter_map(|e| {
                cluster
                    .iter()
                    .find(|(from, _)| *from == e.key)
                    .map(|(_, to)| {
                        let mut e = e.clone();
                        e.key = to.to_string();
                        e
                    })
            })
            .collect();
        out.push(Section {
            entries,
            ..c.clone()
        });
    }
    out.extend(sections.iter().filter_map(|s| file.section(s)).cloned());
    out
}

/// The site file a daemon reads (`--config`, `GSCHED_CONFIG`, or
/// `/etc/gsched/gsched.toml`), once it is known that no one but root or
/// the daemon's user could have written it (`state::check_trusted_file`).
pub fn site_file(args: &DaemonArgs) -> anyhow::Result<Option<SiteFile>> {
    Ok(SiteFile::locate_trusted(args.config.as_deref())?)
}

/// Reads a daemon's settings from `file` (`site_file`): defaults, then
/// the file's `[cluster]` stand-ins and `sections`, then the environment
/// and flags.
pub fn load_from<T: Serialize + DeserializeOwned>(
    command: &clap::Command,
    matches: &clap::ArgMatches,
    args: &DaemonArgs,
    from_flags: T,
    file: Option<&SiteFile>,
    cluster: ClusterDefaults,
    sections: &[String],
) -> anyhow::Result<Loaded<T>> {
    let layers = match file {
        Some(f) => daemon_sections(f, cluster, sections),
        None => Vec::new(),
    };
    let refs: Vec<&Section> = layers.iter().collect();
    let settings_keys = keys_of(&from_flags);
    let settings_keys: Vec<&str> = settings_keys.iter().map(String::as_str).collect();
    let daemon_flags = DaemonSettings {
        state_dir: args.state_dir.clone(),
        log_format: args.log_format,
    };
    if let Some(f) = file {
        // [cluster] is the commands' too: an unknown key there is an error
        // here as well, not a setting quietly lost.
        f.read_section::<gsched_site::ClusterSettings>("cluster")?;
    }
    // The daemon's own settings first: an unknown key is named against
    // them, not against `state_dir` and `log_format`.
    let settings = gsched_site::layer(command, matches, &from_flags, &refs, &DAEMON_KEYS)?;
    let daemon = gsched_site::layer(command, matches, &daemon_flags, &refs, &settings_keys)?;
    Ok(Loaded {
        daemon,
        settings,
        file: file.map(|f| f.path.clone()),
    })
}

/// Reads the site file again for a running daemon: `running`'s values
/// for the `fixed` keys (given as flags), the file's where it has them,
/// `defaults` elsewhere.
pub fn reread<T: Serialize + DeserializeOwned>(
    path: &Path,
    cluster: ClusterDefaults,
    sections: &[String],
    defaults: &T,
    running: &T,
    fixed: &[String],
) -> anyhow::Result<T> {
    let file = SiteFile::read_trusted(path)?;
    let layers = daemon_sections(&file, cluster, sections);
    let refs: Vec<&Section> = layers.iter().collect();
    // The defaults, with what the command line gave as it runs.
    let (serde_json::Value::Object(mut base), serde_json::Value::Object(now)) = (
        serde_json::to_value(defaults)?,
        serde_json::to_value(running)?,
    ) else {
        anyhow::bail!("settings are not a structure");
    };
    let mut sources = Vec::new();
    for key in keys_of(defaults) {
        let source = if fixed.contains(&key) {
            if let Some(v) = now.get(&key) {
                base.insert(key.clone(), v.clone());
            }
            Source::Flag(format!("--{}", key.replace('_', "-")))
        } else {
            Source::Default
        };
        sources.push((key, source));
    }
    let base: T = serde_json::from_value(serde_json::Value::Object(base))?;
    let layered = gsched_site::layer_over(&base, sources, &refs, &DAEMON_KEYS)
        .with_context(|| format!("the settings of {} do not go together", path.display()))?;
    Ok(layered.value)
}

fn keys_of<T: Serialize>(value: &T) -> Vec<String> {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::Object(o)) => o.keys().cloned().collect(),
        _ => Vec::new(),
    }
}

/// The effective settings of one section as TOML lines, each followed by
/// where it came from.
pub fn describe(title: &str, value: &serde_json::Value, sources: &[(String, Source)]) -> String {
    let mut out = format!("[{title}]\n");
    for (key, source) in sources {
        let v = value.get(key).unwrap_or(&serde_json::Value::Null);
        match gsched_site::example::toml_text(v) {
            Some(text) => out.push_str(&format!("{key} = {text}    # {source}\n")),
            None => out.push_str(&format!("# {key} is not set    # {source}\n")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, FromArgMatches, Parser};

    #[derive(Parser, Debug)]
    struct Node {
        #[command(flatten)]
        daemon: DaemonArgs,
        #[command(flatten)]
        node: NodeSettings,
    }

    #[derive(Debug, Clone, clap::Args, Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct NodeSettings {
        #[arg(long, default_value = "http://127.0.0.1:6817")]
        #[serde(default)]
        controller: String,
        #[arg(long)]
        #[serde(default)]
        cpus: Option<u32>,
    }

    const CLUSTER: ClusterDefaults = &[("controller", "controller")];

    /// gnoded-like settings from `argv` and `file`'s `sections`.
    fn node_settings(
        argv: &[&str],
        file: &SiteFile,
        sections: &[&str],
    ) -> anyhow::Result<Loaded<NodeSettings>> {
        let command = Node::command();
        let matches = command.clone().try_get_matches_from(argv).unwrap();
        let parsed = Node::from_arg_matches(&matches).unwrap();
        let sections: Vec<String> = sections.iter().map(|s| s.to_string()).collect();
        load_from(
            &command,
            &matches,
            &parsed.daemon,
            parsed.node,
            Some(file),
            CLUSTER,
            &sections,
        )
    }

    #[test]
    fn cluster_keys_stand_in_beneath_the_section_and_daemon_keys_are_apart() {
        let file = SiteFile::parse(
            Path::new("/g.toml"),
            "[cluster]\ncontroller = \"https://ctl:6817\"\ntls_ca = \"/ca.pem\"\n[node]\nstate_dir = \"/srv/g\"\ncpus = 3\n[nodes.n2]\ncpus = 5\n",
        )
        .unwrap();
        let sections = ["node", "nodes.n2"];
        let l = node_settings(&["gnoded"], &file, &sections).unwrap();
        assert_eq!(l.settings.value.controller, "https://ctl:6817");
        assert_eq!(l.settings.value.cpus, Some(5));
        assert_eq!(l.daemon.value.state_dir(), PathBuf::from("/srv/g"));
        assert_eq!(
            l.settings.source("controller").unwrap().to_string(),
            "/g.toml:2 [cluster]"
        );
        assert!(l.fixed_keys().is_empty());

        let argv = ["gnoded", "--cpus", "9", "--state-dir", "/x"];
        let l = node_settings(&argv, &file, &sections).unwrap();
        assert_eq!(l.settings.value.cpus, Some(9));
        assert_eq!(l.daemon.value.state_dir(), PathBuf::from("/x"));
        assert_eq!(l.fixed_keys(), ["cpus"]);
    }

    #[test]
    fn unknown_keys_are_named_against_the_daemons_settings_and_cluster_typos_refused() {
        let load = |text: &str| {
            let file = SiteFile::parse(Path::new("/g.toml"), text).unwrap();
            node_settings(&["gnoded"], &file, &["node"])
                .map(|_| ())
                .unwrap_err()
                .to_string()
        };
        let e = load("[node]\ncpu = 3\n");
        assert!(
            e.contains("unknown field `cpu`, expected `controller` or `cpus`"),
            "{e}"
        );
        let e = load("[cluster]\ntls-ca = \"/ca.pem\"\n");
        assert!(
            e.starts_with("/g.toml:2: [cluster] tls-ca: unknown field"),
            "{e}"
        );
        let e = load("[node]\nlog_format = \"JSON\"\n");
        assert!(e.contains("log_format: unknown variant `JSON`"), "{e}");
    }

    #[test]
    fn a_reread_takes_the_file_and_keeps_what_flags_gave() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        // Explicit modes: another test here runs under umask 0.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let path = dir.path().join("gsched.toml");
        std::fs::write(&path, "[node]\ncontroller = \"http://file:1\"\ncpus = 3\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let defaults = NodeSettings {
            controller: "http://127.0.0.1:6817".into(),
            cpus: None,
        };
        let running = NodeSettings {
            controller: "http://old:1".into(),
            cpus: Some(9),
        };
        let read = reread(
            &path,
            CLUSTER,
            &["node".into()],
            &defaults,
            &running,
            &["cpus".into()],
        )
        .unwrap();
        assert_eq!(read.controller, "http://file:1", "the file's value");
        assert_eq!(read.cpus, Some(9), "given as a flag: kept");
        std::fs::write(&path, "[node]\ncpu = 3\n").unwrap();
        let e = reread(&path, CLUSTER, &["node".into()], &defaults, &running, &[]).unwrap_err();
        assert!(format!("{e:#}").contains("unknown field `cpu`"), "{e:#}");
    }
}
