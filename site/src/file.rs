//! Reading the site file: its sections and the line of every key.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;
use toml_edit::{ImDocument, Item};

/// Where the site file is when nothing else names one.
pub const DEFAULT_PATH: &str = "/etc/gsched/gsched.toml";

/// The environment variable that names another site file (empty: none).
pub const CONFIG_ENV: &str = "GSCHED_CONFIG";

/// The sections a site file may have.
pub const SECTIONS: [&str; 5] = ["cluster", "controller", "node", "nodes", "cgroup"];

/// A site file that cannot be used; every message names the file, and the
/// line where there is one.
#[derive(Debug, thiserror::Error)]
pub enum SiteError {
    #[error("cannot read the configuration file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Syntax { path: PathBuf, message: String },
    #[error("the configuration file {path} is not safe to read: {source}")]
    Untrusted {
        path: PathBuf,
        source: crate::trust::Untrusted,
    },
    #[error("{path}:{line}: unknown section `{key}` (a site file has [cluster], [controller], [node], [nodes.NAME] and [cgroup])")]
    UnknownSection {
        path: PathBuf,
        line: usize,
        key: String,
    },
    #[error("{path}:{line}: `{key}` must be a section ([{key}])")]
    NotASection {
        path: PathBuf,
        line: usize,
        key: String,
    },
    #[error("{path}:{line}: [{section}] {key}: {message}")]
    Invalid {
        path: PathBuf,
        line: usize,
        section: String,
        key: String,
        message: String,
    },
}

/// One `key = value` of a section, with its line (1-based).
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub key: String,
    pub value: Value,
    pub line: usize,
}

/// A section's entries in the file's order, named as in the file
/// (`controller`, `nodes.gpu01`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Section {
    pub name: String,
    pub path: PathBuf,
    pub entries: Vec<Entry>,
}

/// A read site file.
#[derive(Debug, Clone)]
pub struct SiteFile {
    pub path: PathBuf,
    sections: BTreeMap<String, Section>,
    /// A file of the earlier per-daemon kind: flat keys, no sections.
    flat: Option<Section>,
}

impl SiteFile {
    /// Where the site file is: `explicit` (a daemon's `--config`, which
    /// must exist), else `GSCHED_CONFIG` (must exist; empty: no file), else
    /// `/etc/gsched/gsched.toml` when it exists. `None`: no file, defaults.
    pub fn locate_path(explicit: Option<&Path>) -> Result<Option<PathBuf>, SiteError> {
        Ok(Some(match explicit {
            Some(p) => p.to_path_buf(),
            None => match std::env::var_os(CONFIG_ENV) {
                Some(v) if v.is_empty() => return Ok(None),
                Some(v) => PathBuf::from(v),
                None => {
                    let default = Path::new(DEFAULT_PATH);
                    match std::fs::symlink_metadata(default) {
                        Ok(_) => default.to_path_buf(),
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                        Err(source) => {
                            return Err(SiteError::Read {
                                path: default.to_path_buf(),
                                source,
                            })
                        }
                    }
                }
            },
        }))
    }

    /// The site file (`locate_path`), read as it is: for a command run by
    /// an ordinary user, who decides only for themselves.
    pub fn locate(explicit: Option<&Path>) -> Result<Option<SiteFile>, SiteError> {
        SiteFile::locate_path(explicit)?
            .map(|p| SiteFile::read(&p))
            .transpose()
    }

    /// The site file (`locate_path`), read only if no one but root or the
    /// caller could have written it (`trust`): for the daemons and root.
    pub fn locate_trusted(explicit: Option<&Path>) -> Result<Option<SiteFile>, SiteError> {
        SiteFile::locate_path(explicit)?
            .map(|p| SiteFile::read_trusted(&p))
            .transpose()
    }

    /// Reads and checks the file at `path`.
    pub fn read(path: &Path) -> Result<SiteFile, SiteError> {
        let text = std::fs::read_to_string(path).map_err(|source| SiteError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        SiteFile::parse(path, &text)
    }

    /// Reads the file at `path` once `trust` finds that no one but root
    /// or the caller could have written it or swapped it.
    pub fn read_trusted(path: &Path) -> Result<SiteFile, SiteError> {
        if let Err(source) = std::fs::metadata(path) {
            return Err(SiteError::Read {
                path: path.to_path_buf(),
                source,
            });
        }
        let text = crate::trust::read(path).map_err(|source| SiteError::Untrusted {
            path: path.to_path_buf(),
            source,
        })?;
        SiteFile::parse(path, &text)
    }

    /// Reads a file's text (`path` names it in errors).
    pub fn parse(path: &Path, text: &str) -> Result<SiteFile, SiteError> {
        let doc = ImDocument::parse(text).map_err(|e| SiteError::Syntax {
            path: path.to_path_buf(),
            message: e.to_string().trim_end().to_string(),
        })?;
        let line_of = |span: Option<std::ops::Range<usize>>| {
            span.map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1)
                .unwrap_or(0)
        };
        let root = doc.as_table();
        // A flat file of the earlier kind has keys only; its `controller`
        // (gnoded's URL) is a string, never a section.
        let any_section = root
            .iter()
            .any(|(k, item)| SECTIONS.contains(&k) && item.is_table_like());
        if !any_section && !root.is_empty() {
            // The earlier per-daemon file: its keys are one daemon's.
            let flat = section_of(
                path,
                "",
                root.iter().map(|(k, item)| {
                    let span = root.key(k).and_then(|key| key.span());
                    (k, item, line_of(span))
                }),
            );
            return Ok(SiteFile {
                path: path.to_path_buf(),
                sections: BTreeMap::new(),
                flat: Some(flat),
            });
        }
        let mut sections = BTreeMap::new();
        for (name, item) in root.iter() {
            let line = line_of(root.key(name).and_then(|k| k.span()));
            if !SECTIONS.contains(&name) {
                return Err(SiteError::UnknownSection {
                    path: path.to_path_buf(),
                    line,
                    key: name.to_string(),
                });
            }
            let table = item.as_table_like().ok_or_else(|| SiteError::NotASection {
                path: path.to_path_buf(),
                line,
                key: name.to_string(),
            })?;
            if name == "nodes" {
                for (node, item) in table.iter() {
                    let line = line_of(table.key(node).and_then(|k| k.span()));
                    let nested = item.as_table_like().ok_or_else(|| SiteError::NotASection {
                        path: path.to_path_buf(),
                        line,
                        key: format!("nodes.{node}"),
                    })?;
                    let name = format!("nodes.{node}");
                    let s = section_of(
                        path,
                        &name,
                        nested.iter().map(|(k, item)| {
                            (k, item, line_of(nested.key(k).and_then(|key| key.span())))
                        }),
                    );
                    sections.insert(name, s);
                }
                continue;
            }
            let s = section_of(
                path,
                name,
                table
                    .iter()
                    .map(|(k, item)| (k, item, line_of(table.key(k).and_then(|key| key.span())))),
            );
            sections.insert(name.to_string(), s);
        }
        Ok(SiteFile {
            path: path.to_path_buf(),
            sections,
            flat: None,
        })
    }

    /// A section (`controller`, `nodes.gpu01`); for a flat file of the
    /// earlier kind, its keys are the daemon's (`controller` or `node`).
    pub fn section(&self, name: &str) -> Option<&Section> {
        match &self.flat {
            Some(flat) if name == "controller" || name == "node" => Some(flat),
            Some(_) => None,
            None => self.sections.get(name),
        }
    }

    /// The nodes that have a `[nodes.NAME]` section.
    pub fn node_names(&self) -> Vec<&str> {
        self.sections
            .keys()
            .filter_map(|k| k.strip_prefix("nodes."))
            .collect()
    }

    /// Whether the file is of the earlier per-daemon kind (no sections).
    pub fn is_flat(&self) -> bool {
        self.flat.is_some()
    }

    /// A section read as `T` (every field with a default): each key is
    /// checked alone first, so an error names its line.
    pub fn read_section<T: serde::de::DeserializeOwned + Default>(
        &self,
        name: &str,
    ) -> Result<T, SiteError> {
        let Some(section) = self.section(name) else {
            return Ok(T::default());
        };
        section.check_each::<T>(&[])?;
        let object: serde_json::Map<String, Value> = section
            .entries
            .iter()
            .map(|e| (e.key.clone(), e.value.clone()))
            .collect();
        serde_json::from_value(Value::Object(object)).map_err(|e| SiteError::Invalid {
            path: section.path.clone(),
            line: section.entries.first().map_or(0, |e| e.line),
            section: section.name.clone(),
            key: "(section)".into(),
            message: e.to_string(),
        })
    }
}

impl Section {
    /// Checks each entry alone against `T` (whose fields all have
    /// defaults), skipping the keys in `elsewhere`: an unknown key or a
    /// value of the wrong kind is named with its line.
    pub fn check_each<T: serde::de::DeserializeOwned>(
        &self,
        elsewhere: &[&str],
    ) -> Result<(), SiteError> {
        for e in &self.entries {
            if elsewhere.contains(&e.key.as_str()) {
                continue;
            }
            let alone = Value::Object([(e.key.clone(), e.value.clone())].into_iter().collect());
            if let Err(why) = serde_json::from_value::<T>(alone) {
                return Err(self.invalid(e, why.to_string()));
            }
        }
        Ok(())
    }

    /// An error about `entry` of this section.
    pub fn invalid(&self, entry: &Entry, message: String) -> SiteError {
        SiteError::Invalid {
            path: self.path.clone(),
            line: entry.line,
            section: if self.name.is_empty() {
                "(top level)".into()
            } else {
                self.name.clone()
            },
            key: entry.key.clone(),
            message,
        }
    }
}

fn section_of<'a>(
    path: &Path,
    name: &str,
    items: impl Iterator<Item = (&'a str, &'a Item, usize)>,
) -> Section {
    Section {
        name: name.to_string(),
        path: path.to_path_buf(),
        entries: items
            .map(|(k, item, line)| Entry {
                key: k.to_string(),
                value: item_json(item),
                line,
            })
            .collect(),
    }
}

fn item_json(item: &Item) -> Value {
    match item {
        Item::None => Value::Null,
        Item::Value(v) => value_json(v),
        Item::Table(t) => Value::Object(
            t.iter()
                .map(|(k, v)| (k.to_string(), item_json(v)))
                .collect(),
        ),
        Item::ArrayOfTables(a) => Value::Array(
            a.iter()
                .map(|t| {
                    Value::Object(
                        t.iter()
                            .map(|(k, v)| (k.to_string(), item_json(v)))
                            .collect(),
                    )
                })
                .collect(),
        ),
    }
}

fn value_json(v: &toml_edit::Value) -> Value {
    use toml_edit::Value as V;
    match v {
        V::String(s) => Value::String(s.value().clone()),
        V::Integer(i) => Value::from(*i.value()),
        V::Float(f) => serde_json::Number::from_f64(*f.value())
            .map(Value::Number)
            .unwrap_or(Value::Null),
        V::Boolean(b) => Value::Bool(*b.value()),
        V::Datetime(d) => Value::String(d.value().to_string()),
        V::Array(a) => Value::Array(a.iter().map(value_json).collect()),
        V::InlineTable(t) => Value::Object(
            t.iter()
                .map(|(k, v)| (k.to_string(), value_json(v)))
                .collect(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<SiteFile, SiteError> {
        SiteFile::parse(Path::new("/etc/gsched/gsched.toml"), text)
    }

    #[test]
    fn sections_and_lines_are_read() {
        let f = parse(
            "# site\n[cluster]\ncontroller = \"https://ctl:6817\"\n\n[controller]\nnode_timeout = 60\npartitions = [\"a\", \"b\"]\n[nodes.gpu01]\ncpus = 8\n[nodes]\ngpu02 = { cpus = 4 }\n",
        )
        .unwrap();
        let c = f.section("controller").unwrap();
        assert_eq!(
            c.entries,
            [
                Entry {
                    key: "node_timeout".into(),
                    value: 60.into(),
                    line: 6
                },
                Entry {
                    key: "partitions".into(),
                    value: serde_json::json!(["a", "b"]),
                    line: 7
                },
            ]
        );
        assert_eq!(f.section("cluster").unwrap().entries[0].line, 3);
        assert_eq!(f.section("nodes.gpu01").unwrap().entries[0].line, 9);
        assert_eq!(
            f.section("nodes.gpu02").unwrap().entries[0].value,
            serde_json::json!(4)
        );
        assert_eq!(f.node_names(), ["gpu01", "gpu02"]);
        assert!(f.section("node").is_none());
        assert!(!f.is_flat());
    }

    #[test]
    fn an_unknown_section_is_named_with_its_line() {
        let e = parse("[cluster]\n\n[controler]\nlisten = \"x\"\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "/etc/gsched/gsched.toml:3: unknown section `controler` (a site file has [cluster], [controller], [node], [nodes.NAME] and [cgroup])"
        );
        let e = parse("[cluster]\nnode = 3\n[controller]\n").map(|_| ());
        assert!(
            e.is_ok(),
            "keys inside a section are the section's to check"
        );
        let e = parse("node = 3\n[controller]\n").unwrap_err();
        assert!(
            e.to_string().contains(":1: `node` must be a section"),
            "{e}"
        );
    }

    #[test]
    fn bad_syntax_names_the_file_and_line() {
        let e = parse("[controller]\nlisten = \n").unwrap_err();
        let text = e.to_string();
        assert!(text.starts_with("/etc/gsched/gsched.toml: "), "{text}");
        assert!(text.contains("line 2"), "{text}");
    }

    #[test]
    fn a_flat_node_file_with_its_controller_url_is_of_the_earlier_kind() {
        let f = parse("controller = \"https://ctl:6817\"\nname = \"n1\"\n").unwrap();
        assert!(f.is_flat());
        assert_eq!(f.section("node").unwrap().entries[0].key, "controller");
    }

    #[test]
    fn a_flat_file_of_the_earlier_kind_is_the_daemons_section() {
        let f = parse("listen = \"0.0.0.0:6817\"\nnode_timeout = 60\n").unwrap();
        assert!(f.is_flat());
        assert_eq!(f.section("controller").unwrap().entries.len(), 2);
        assert_eq!(f.section("node").unwrap().entries.len(), 2);
        assert!(f.section("cluster").is_none());
    }

    #[derive(serde::Deserialize, Default, Debug)]
    #[serde(deny_unknown_fields, default)]
    struct Small {
        size: u32,
        name: String,
    }

    #[test]
    fn a_section_is_read_with_each_key_checked_alone() {
        let f = parse("[cgroup]\nsize = 3\nname = \"x\"\n").unwrap();
        let s: Small = f.read_section("cgroup").unwrap();
        assert_eq!((s.size, s.name.as_str()), (3, "x"));
        let f = parse("[cgroup]\nsize = 3\nsise = 4\n").unwrap();
        let e = f.read_section::<Small>("cgroup").unwrap_err().to_string();
        assert!(
            e.starts_with("/etc/gsched/gsched.toml:3: [cgroup] sise: unknown field `sise`"),
            "{e}"
        );
        let f = parse("[cgroup]\nsize = \"big\"\n").unwrap();
        let e = f.read_section::<Small>("cgroup").unwrap_err().to_string();
        assert!(
            e.contains(":2: [cgroup] size: invalid type: string \"big\""),
            "{e}"
        );
        let none: Small = parse("[cluster]\n")
            .unwrap()
            .read_section("cgroup")
            .unwrap();
        assert_eq!(none.size, 0);
    }

    #[test]
    fn locate_prefers_the_explicit_file_then_the_environment() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("g.toml");
        std::fs::write(&p, "[cluster]\n").unwrap();
        assert!(SiteFile::locate(Some(&p)).unwrap().is_some());
        let missing = dir.path().join("none.toml");
        let e = SiteFile::locate(Some(&missing)).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!(
                "cannot read the configuration file {}",
                missing.display()
            )),
            "{e}"
        );
    }
}
