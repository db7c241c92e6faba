//! Settings from the file's sections under the command line: defaults,
//! then each section in order, then the environment and flags, each
//! setting remembering where its value came from.

use std::fmt;
use std::path::PathBuf;

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use crate::file::{Section, SiteError};

/// Where a setting's value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Default,
    File {
        path: PathBuf,
        line: usize,
        section: String,
    },
    Environment(String),
    Flag(String),
    /// The name of the `[nodes.NAME]` section being shown.
    SectionName,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Default => f.write_str("default"),
            Source::File {
                path,
                line,
                section,
            } if section.is_empty() => write!(f, "{}:{line}", path.display()),
            Source::File {
                path,
                line,
                section,
            } => write!(f, "{}:{line} [{section}]", path.display()),
            Source::Environment(var) => write!(f, "environment {var}"),
            Source::Flag(flag) => write!(f, "flag {flag}"),
            Source::SectionName => f.write_str("the section's name"),
        }
    }
}

/// Settings with where each came from, in the settings' order.
#[derive(Debug, Clone)]
pub struct Layered<T> {
    pub value: T,
    pub sources: Vec<(String, Source)>,
}

impl<T> Layered<T> {
    /// Where `key` came from.
    pub fn source(&self, key: &str) -> Option<&Source> {
        self.sources.iter().find(|(k, _)| k == key).map(|(_, s)| s)
    }
}

/// Layers `sections` (earlier ones first; later ones win) under what the
/// command line gave: a setting given as a flag or through its
/// environment variable keeps that value. `from_flags` is what clap
/// parsed (defaults where nothing was given); its fields are named like
/// the arguments. Keys in `elsewhere` belong to other settings of the
/// same section and are skipped; any other key `T` does not have is an
/// error naming its line.
pub fn layer<T: Serialize + DeserializeOwned>(
    command: &clap::Command,
    matches: &clap::ArgMatches,
    from_flags: &T,
    sections: &[&Section],
    elsewhere: &[&str],
) -> Result<Layered<T>, SiteError> {
    let keys = keys_of(from_flags, sections)?;
    let sources = keys
        .into_iter()
        .map(|k| {
            let source = given_on_command_line(command, matches, &k);
            (k, source)
        })
        .collect();
    layer_over(from_flags, sources, sections, elsewhere)
}

/// The fields of `value` (a structure), by name.
fn keys_of<T: Serialize>(value: &T, sections: &[&Section]) -> Result<Vec<String>, SiteError> {
    match serde_json::to_value(value).map_err(|e| internal(sections, e))? {
        Value::Object(o) => Ok(o.keys().cloned().collect()),
        _ => Err(internal(sections, "settings are not a structure")),
    }
}

/// Layers `sections` over `base`, whose settings came from `sources`:
/// those from a flag or the environment keep their value. `layer` for
/// settings parsed by clap; a daemon reading its file again passes the
/// settings it was given on its command line as flags.
pub fn layer_over<T: Serialize + DeserializeOwned>(
    base: &T,
    mut sources: Vec<(String, Source)>,
    sections: &[&Section],
    elsewhere: &[&str],
) -> Result<Layered<T>, SiteError> {
    let Value::Object(mut object) =
        serde_json::to_value(base).map_err(|e| internal(sections, e))?
    else {
        return Err(internal(sections, "settings are not a structure"));
    };
    for section in sections {
        section.check_each::<T>(elsewhere)?;
        for entry in &section.entries {
            if elsewhere.contains(&entry.key.as_str()) {
                continue;
            }
            let Some((_, source)) = sources.iter_mut().find(|(k, _)| *k == entry.key) else {
                return Err(section.invalid(entry, "not a setting here".into()));
            };
            if matches!(source, Source::Flag(_) | Source::Environment(_)) {
                continue;
            }
            object.insert(entry.key.clone(), entry.value.clone());
            *source = Source::File {
                path: section.path.clone(),
                line: entry.line,
                section: section.name.clone(),
            };
        }
    }
    let value = serde_json::from_value(Value::Object(object)).map_err(|e| {
        // Each key read alone above; what is left is how they combine.
        let (path, section) = sections
            .last()
            .map(|s| (s.path.clone(), s.name.clone()))
            .unwrap_or_default();
        SiteError::Invalid {
            path,
            line: 0,
            section,
            key: "(settings together)".into(),
            message: e.to_string(),
        }
    })?;
    Ok(Layered { value, sources })
}

fn internal(sections: &[&Section], why: impl fmt::Display) -> SiteError {
    SiteError::Syntax {
        path: sections.first().map(|s| s.path.clone()).unwrap_or_default(),
        message: format!("internal: {why}"),
    }
}

/// Whether `key` was given as a flag or through its environment variable.
fn given_on_command_line(command: &clap::Command, matches: &clap::ArgMatches, key: &str) -> Source {
    let Some(arg) = command.get_arguments().find(|a| a.get_id() == key) else {
        return Source::Default;
    };
    match matches.value_source(key) {
        Some(clap::parser::ValueSource::CommandLine) => Source::Flag(match arg.get_long() {
            Some(long) => format!("--{long}"),
            None => key.to_string(),
        }),
        Some(clap::parser::ValueSource::EnvVariable) => Source::Environment(
            arg.get_env()
                .map(|e| e.to_string_lossy().into_owned())
                .unwrap_or_else(|| key.to_string()),
        ),
        _ => Source::Default,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::file::SiteFile;
    use clap::{CommandFactory, FromArgMatches, Parser};

    #[derive(Parser, Serialize, serde::Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    struct Daemon {
        #[arg(long, default_value_t = 30)]
        #[serde(default)]
        node_timeout: u64,
        #[arg(long, env = "GSCHED_SITE_TEST_LISTEN", default_value = "127.0.0.1:1")]
        #[serde(default)]
        listen: String,
        #[arg(long)]
        #[serde(default)]
        cpus: Option<u32>,
    }

    fn parse(args: &[&str]) -> (clap::Command, clap::ArgMatches, Daemon) {
        let command = Daemon::command();
        let matches = command.clone().try_get_matches_from(args).unwrap();
        let d = Daemon::from_arg_matches(&matches).unwrap();
        (command, matches, d)
    }

    fn site(text: &str) -> SiteFile {
        SiteFile::parse(std::path::Path::new("/g.toml"), text).unwrap()
    }

    #[test]
    fn flags_win_over_the_file_and_the_file_over_defaults() {
        let f = site(
            "[node]\nnode_timeout = 60\ncpus = 4\nlisten = \"0.0.0.0:2\"\n[nodes.a]\ncpus = 8\n",
        );
        let (cmd, m, d) = parse(&["d", "--listen", "1.2.3.4:5"]);
        let sections = [f.section("node").unwrap(), f.section("nodes.a").unwrap()];
        let l = layer(&cmd, &m, &d, &sections, &[]).unwrap();
        assert_eq!(l.value.node_timeout, 60);
        assert_eq!(
            l.value.cpus,
            Some(8),
            "the node's own section wins over [node]"
        );
        assert_eq!(l.value.listen, "1.2.3.4:5");
        assert_eq!(l.source("listen"), Some(&Source::Flag("--listen".into())));
        assert_eq!(l.source("cpus").unwrap().to_string(), "/g.toml:6 [nodes.a]");
        assert_eq!(
            l.source("node_timeout").unwrap().to_string(),
            "/g.toml:2 [node]"
        );
        let (cmd, m, d) = parse(&["d"]);
        let l = layer(&cmd, &m, &d, &[], &[]).unwrap();
        assert!(l.sources.iter().all(|(_, s)| *s == Source::Default));
    }

    #[test]
    fn unknown_keys_and_wrong_kinds_name_their_line() {
        let (cmd, m, d) = parse(&["d"]);
        let f = site("[node]\nnode_timeout = 60\nnode_timout = 3\n");
        let e = layer(&cmd, &m, &d, &[f.section("node").unwrap()], &[]).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("/g.toml:3: [node] node_timout: unknown field `node_timout`"),
            "{e}"
        );
        let f = site("[node]\nstate_dir = \"/x\"\nnode_timeout = -1\n");
        let e = layer(&cmd, &m, &d, &[f.section("node").unwrap()], &["state_dir"]).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("/g.toml:3: [node] node_timeout: invalid value"),
            "{e}"
        );
    }
}
