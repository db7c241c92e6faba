//! The site file with every key commented out at its default, written from
//! the settings' own definitions (clap's help and the defaults), so the
//! shipped file never drifts from the programs.

use std::fmt::Write;

use serde_json::Value;

/// One section of the example: `[name]`, then for every argument of
/// `command` that is a key of `defaults`, its help as comments (with the
/// flag that overrides it when `flags`) and `#key = default`. `about`
/// opens the section.
pub fn section(
    name: &str,
    about: &str,
    command: &clap::Command,
    defaults: &Value,
    flags: bool,
) -> String {
    let mut out = format!("{}[{name}]\n", comment(about, ""));
    let Value::Object(defaults) = defaults else {
        return out;
    };
    for arg in command.get_arguments() {
        let key = arg.get_id().as_str();
        let Some(value) = defaults.get(key) else {
            continue;
        };
        let help = arg
            .get_long_help()
            .or_else(|| arg.get_help())
            .map(|h| h.to_string())
            .unwrap_or_default();
        out.push('\n');
        out.push_str(&comment(&help, ""));
        if let Some(long) = arg.get_long().filter(|_| flags) {
            let _ = writeln!(out, "# (flag --{long})");
        }
        out.push_str(&key_line(key, value));
    }
    out
}

/// A section whose keys are described by a table instead of clap.
pub fn described_section(
    name: &str,
    about: &str,
    keys: &[(&str, &str)],
    defaults: &Value,
) -> String {
    let mut out = format!("{}[{name}]\n", comment(about, ""));
    for (key, help) in keys {
        out.push('\n');
        out.push_str(&comment(help, ""));
        out.push_str(&key_line(key, defaults.get(key).unwrap_or(&Value::Null)));
    }
    out
}

fn key_line(key: &str, value: &Value) -> String {
    match toml_text(value) {
        Some(text) => format!("#{key} = {text}\n"),
        None => format!("#{key} =    (not set by default)\n"),
    }
}

/// Help text as `# ` lines, wrapped near 76 columns.
pub fn comment(text: &str, indent: &str) -> String {
    let mut out = String::new();
    for paragraph in text.split("\n\n") {
        let mut line = String::new();
        for word in paragraph.split_whitespace() {
            if !line.is_empty() && line.len() + word.len() + 1 > 76 {
                let _ = writeln!(out, "{indent}# {line}");
                line.clear();
            }
            if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(word);
        }
        if !line.is_empty() {
            let _ = writeln!(out, "{indent}# {line}");
        }
    }
    out
}

/// A default as TOML (`None` for a setting without one).
pub fn toml_text(value: &Value) -> Option<String> {
    Some(match value {
        Value::Null => return None,
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => toml_edit::Value::from(s.as_str())
            .to_string()
            .trim()
            .to_string(),
        Value::Array(items) => format!(
            "[{}]",
            items
                .iter()
                .filter_map(toml_text)
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Value::Object(map) => format!(
            "{{ {} }}",
            map.iter()
                .filter_map(|(k, v)| toml_text(v).map(|t| format!("{k} = {t}")))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    #[derive(Parser, serde::Serialize)]
    struct Settings {
        /// How long to wait, in seconds, before the node is marked down.
        #[arg(long, default_value_t = 30)]
        node_timeout: u64,
        /// Other partitions.
        #[arg(long)]
        partitions: Vec<String>,
        /// CPUs.
        #[arg(long)]
        cpus: Option<u32>,
    }

    #[test]
    fn every_key_is_commented_with_its_help_and_default() {
        let defaults =
            serde_json::json!({"node_timeout": 30, "partitions": ["a \"b\""], "cpus": null});
        let text = section(
            "controller",
            "gctld's settings.",
            &Settings::command(),
            &defaults,
            true,
        );
        assert_eq!(
            text,
            "# gctld's settings.\n[controller]\n\n# How long to wait, in seconds, before the node is marked down\n# (flag --node-timeout)\n#node_timeout = 30\n\n# Other partitions\n# (flag --partitions)\n#partitions = ['a \"b\"']\n\n# CPUs\n# (flag --cpus)\n#cpus =    (not set by default)\n"
        );
        // Uncommented, the lines read back as the defaults.
        let uncommented: String = text
            .lines()
            .filter(|l| l.starts_with('#') && l.contains(" = ") && !l.contains("not set"))
            .map(|l| format!("{}\n", &l[1..]))
            .collect();
        let doc: toml_edit::ImDocument<String> = uncommented.parse().unwrap();
        assert_eq!(doc.get("node_timeout").unwrap().as_integer(), Some(30));
        assert_eq!(
            doc.get("partitions")
                .unwrap()
                .as_array()
                .unwrap()
                .get(0)
                .unwrap()
                .as_str(),
            Some("a \"b\"")
        );
    }
}
