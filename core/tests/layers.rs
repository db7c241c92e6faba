//! The core's layering, checked on its source: every top-level module
//! belongs to a layer, imports only from its own layer or below, and no
//! two modules import each other through any chain. A new module must be
//! placed in `LAYERS`; an import that goes up fails here, naming it.
//!
//! The layers, bottom first: the job's identity and plain units; the
//! hardware (GPU catalog, MIG, SMs, compute shares); the job model; the
//! protocol (node messages, API views, probe messages, job environment);
//! the policies; the controller state; the simulator.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const LAYERS: &[(&str, &[&str])] = &[
    (
        "base",
        &[
            "job_state",
            "slurm_options",
            "units",
            "hostlist",
            "rlimits",
            "histogram",
            "version",
        ],
    ),
    (
        "hardware",
        &[
            "gpu",
            "sm",
            "compute",
            "devices",
            "context",
            "gpu_time",
            "mps_recovery",
            "fence",
        ],
    ),
    (
        "model",
        &[
            "array",
            "dependency",
            "outcome",
            "preempt",
            "suspension",
            "time_quota",
            "tres",
            "allocation",
            "resources",
            "job",
            "pattern",
            "steps",
            "leadership",
        ],
    ),
    ("proto", &["probe", "wire", "views", "env"]),
    (
        "policy",
        &[
            "launch",
            "placement",
            "priority",
            "repartition",
            "fairshare",
            "fair_tree",
            "qos",
            "qos_rights",
        ],
    ),
    ("state", &["cluster"]),
    ("sim", &["sim"]),
];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The top-level modules: `x.rs` and the folder `x/` count as one.
fn modules() -> BTreeSet<String> {
    std::fs::read_dir(src())
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            match name.strip_suffix(".rs") {
                Some("lib") => None,
                Some(m) => Some(m.to_string()),
                None => Some(name),
            }
        })
        .collect()
}

/// Every source file of module `m`, tests left out.
fn files_of(m: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let file = src().join(format!("{m}.rs"));
    if file.exists() {
        out.push(file);
    }
    let mut dirs = vec![src().join(m)];
    while let Some(d) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") && !is_test_file(&p) {
                out.push(p);
            }
        }
    }
    out
}

fn is_test_file(p: &Path) -> bool {
    let name = p.file_name().unwrap().to_string_lossy();
    name == "tests.rs"
        || name == "proptests.rs"
        || name == "testkit.rs"
        || name.ends_with("_tests.rs")
}

/// The code of a file without its comments, string literals and
/// `#[cfg(test)]` modules.
fn code_of(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '/' if chars.peek() == Some(&'/') => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            '"' => {
                while let Some(c) = chars.next() {
                    match c {
                        '\\' => {
                            chars.next();
                        }
                        '"' => break,
                        _ => {}
                    }
                }
                out.push_str("\"\"");
            }
            _ => out.push(c),
        }
    }
    for test_module in [
        "#[cfg(test)]\nmod tests {",
        "#[cfg(test)]\npub(crate) mod tests {",
    ] {
        if let Some(i) = out.find(test_module) {
            out.truncate(i);
        }
    }
    out
}

/// Which top-level modules `m` imports (`crate::x`, grouped or not).
fn imports(m: &str, all: &BTreeSet<String>) -> BTreeSet<String> {
    let word = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let mut found = BTreeSet::new();
    for f in files_of(m) {
        let code = code_of(&std::fs::read_to_string(&f).unwrap());
        let mut rest = code.as_str();
        while let Some(i) = rest.find("crate::") {
            rest = &rest[i + "crate::".len()..];
            let names: Vec<String> = match rest.strip_prefix('{') {
                Some(group) => {
                    let end = group.find('}').unwrap_or(group.len());
                    group[..end].split(',').map(|p| word(p.trim())).collect()
                }
                None => vec![word(rest)],
            };
            found.extend(names.into_iter().filter(|n| all.contains(n) && n != m));
        }
    }
    found
}

#[test]
fn every_module_imports_only_from_its_layer_or_below() {
    let all = modules();
    let layer_of: BTreeMap<&str, usize> = LAYERS
        .iter()
        .enumerate()
        .flat_map(|(i, (_, ms))| ms.iter().map(move |m| (*m, i)))
        .collect();
    let unplaced: Vec<&String> = all
        .iter()
        .filter(|m| !layer_of.contains_key(m.as_str()))
        .collect();
    assert!(
        unplaced.is_empty(),
        "modules in no layer of core/tests/layers.rs: {unplaced:?}"
    );
    let mut upward = Vec::new();
    for m in &all {
        let from = layer_of[m.as_str()];
        for to in imports(m, &all) {
            let at = layer_of[to.as_str()];
            if at > from {
                upward.push(format!(
                    "{m} ({}) imports {to} ({})",
                    LAYERS[from].0, LAYERS[at].0
                ));
            }
        }
    }
    assert!(
        upward.is_empty(),
        "imports that go up a layer:\n{}",
        upward.join("\n")
    );
}

/// Depth-first search for an import chain that comes back to a module on
/// `path`; returns the chain.
fn cycle_from(
    m: &str,
    edges: &BTreeMap<String, BTreeSet<String>>,
    path: &mut Vec<String>,
    done: &mut BTreeSet<String>,
) -> Option<Vec<String>> {
    if let Some(i) = path.iter().position(|p| p == m) {
        let mut cycle = path[i..].to_vec();
        cycle.push(m.to_string());
        return Some(cycle);
    }
    if done.contains(m) {
        return None;
    }
    path.push(m.to_string());
    for to in &edges[m] {
        if let Some(c) = cycle_from(to, edges, path, done) {
            return Some(c);
        }
    }
    path.pop();
    done.insert(m.to_string());
    None
}

#[test]
fn no_two_modules_import_each_other_through_any_chain() {
    let all = modules();
    let edges: BTreeMap<String, BTreeSet<String>> =
        all.iter().map(|m| (m.clone(), imports(m, &all))).collect();
    let mut done = BTreeSet::new();
    for m in &all {
        if let Some(cycle) = cycle_from(m, &edges, &mut Vec::new(), &mut done) {
            panic!("core modules import each other: {}", cycle.join(" -> "));
        }
    }
}

#[test]
fn the_import_reader_sees_grouped_inline_and_commented_imports_as_they_are() {
    let code = code_of(
        "use crate::{job::Job, gpu};\n// crate::sim\nlet s = \"crate::cluster\";\nx(crate::wire::Y);\n#[cfg(test)]\nmod tests {\n use crate::sim;\n}\n",
    );
    assert!(code.contains("crate::{job::Job, gpu}") && code.contains("crate::wire::Y"));
    assert!(!code.contains("crate::sim") && !code.contains("crate::cluster"));
}
