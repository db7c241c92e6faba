//! The commands' `--json` output in Slurm's data_parser shapes (v0.0.44),
//! taken from the controller's slurmrestd endpoints, so that the commands
//! and the REST API answer from one source; and `scontrol show node`'s
//! text, read from the same node shape.

use anyhow::Result;
use serde_json::Value;

use crate::client::Client;

/// The data parser version the commands print.
pub const DATA_PARSER: &str = "v0.0.44";

/// A command line as Slurm's `meta.command` gives it: the command's name,
/// then its arguments.
pub fn command_line(name: &str, args: &[String]) -> Vec<String> {
    std::iter::once(name.to_string())
        .chain(args.iter().cloned())
        .collect()
}

/// data_parser's number: `{"set", "infinite", "number"}`, unset for `None`.
pub fn number(n: Option<impl Into<Value>>) -> Value {
    match n {
        Some(n) => serde_json::json!({ "set": true, "infinite": false, "number": n.into() }),
        None => serde_json::json!({ "set": false, "infinite": false, "number": 0 }),
    }
}

/// What `/slurm/v0.0.44/{what}` answers (`nodes`, `node/NAME`, `jobs`,
/// `job/ID`, `partitions`), printed as the command's `--json` output.
pub fn print_json(client: &Client, what: &str) -> Result<i32> {
    let v: Value = client.slurm_data(&format!("/slurm/{DATA_PARSER}/{what}"))?;
    println!("{}", serde_json::to_string_pretty(&v)?);
    Ok(0)
}

/// As [`print_json`], with `command` (the command line, as the user gave
/// it) in the answer's `meta.command`, as Slurm's commands put theirs.
pub fn print_json_for(client: &Client, what: &str, command: &[String]) -> Result<i32> {
    let mut v: Value = client.slurm_data(&format!("/slurm/{DATA_PARSER}/{what}"))?;
    v["meta"]["command"] = serde_json::json!(command);
    println!("{}", serde_json::to_string_pretty(&v)?);
    Ok(0)
}

/// `sinfo --json`: one entry per node of each partition, in data_parser's
/// `sinfo` shape, made from the controller's slurmrestd node and partition
/// answers (one source for both).
pub fn print_sinfo(client: &Client, command: &[String]) -> Result<i32> {
    let nodes: Value = client.slurm_data(&format!("/slurm/{DATA_PARSER}/nodes"))?;
    let parts: Value = client.slurm_data(&format!("/slurm/{DATA_PARSER}/partitions"))?;
    let mut entries = Vec::new();
    for p in parts["partitions"].as_array().into_iter().flatten() {
        let name = p["name"].as_str().unwrap_or_default();
        for n in nodes["nodes"].as_array().into_iter().flatten() {
            let serves = n["partitions"]
                .as_array()
                .is_some_and(|ps| ps.iter().any(|x| x == name));
            if serves {
                entries.push(sinfo_entry(n, p));
            }
        }
    }
    let mut meta = nodes["meta"].clone();
    meta["command"] = serde_json::json!(command);
    let out = serde_json::json!({
        "sinfo": entries,
        "meta": meta,
        "errors": [],
        "warnings": [],
    });
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(0)
}

fn sinfo_entry(n: &Value, partition: &Value) -> Value {
    let state = n["state"].clone();
    let busy = state
        .as_array()
        .is_some_and(|s| s.iter().any(|x| x == "ALLOCATED" || x == "MIXED"));
    serde_json::json!({
        "node": { "state": state },
        "nodes": {
            "allocated": u32::from(busy),
            "idle": u32::from(!busy),
            "other": 0,
            "total": 1,
            "hostnames": [n["hostname"].clone()],
            "addresses": [n["address"].clone()],
            "nodes": [n["name"].clone()],
        },
        "cpus": {
            "allocated": n["alloc_cpus"].clone(),
            "idle": n["alloc_idle_cpus"].clone(),
            "other": 0,
            "total": n["cpus"].clone(),
            "minimum": n["cpus"].clone(),
            "maximum": n["cpus"].clone(),
        },
        "memory": {
            "minimum": n["real_memory"].clone(),
            "maximum": n["real_memory"].clone(),
            "allocated": n["alloc_memory"].clone(),
            "free": n["free_mem"].clone(),
        },
        "gres": { "total": n["gres"].clone(), "used": n["gres_used"].clone() },
        "cluster": n["cluster_name"].clone(),
        "reason": { "description": n["reason"].clone() },
        "features": { "total": "", "active": "" },
        "partition": partition.clone(),
    })
}

/// `scontrol show node[s] [NAME]` as Slurm prints it, one block per node
/// (`-o`: one line per node).
pub fn print_nodes(client: &Client, name: Option<&str>, oneliner: bool) -> Result<i32> {
    let path = match name {
        Some(n) => format!("/slurm/{DATA_PARSER}/node/{n}"),
        None => format!("/slurm/{DATA_PARSER}/nodes"),
    };
    let v: Value = client.slurm_data(&path)?;
    for n in v["nodes"].as_array().into_iter().flatten() {
        let lines = node_lines(n);
        if oneliner {
            println!("{}", lines.join(" "));
        } else {
            println!("{}\n", lines.join("\n   "));
        }
    }
    Ok(0)
}

fn text(v: &Value) -> String {
    match v {
        Value::String(s) if s.is_empty() => "(null)".into(),
        Value::String(s) => s.clone(),
        Value::Array(a) => {
            a.iter()
                .map(text)
                .collect::<Vec<_>>()
                .join(if a.iter().all(Value::is_string) {
                    ","
                } else {
                    " "
                })
        }
        Value::Object(o) if o.contains_key("number") => {
            if o["set"] == Value::Bool(true) {
                o["number"].to_string()
            } else {
                "N/A".into()
            }
        }
        Value::Null => "(null)".into(),
        other => other.to_string(),
    }
}

/// A node's lines as `scontrol show node` prints them.
fn node_lines(n: &Value) -> Vec<String> {
    let state = n["state"]
        .as_array()
        .map(|s| {
            s.iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join("+")
        })
        .unwrap_or_default();
    vec![
        format!("NodeName={} Arch=x86_64 CoresPerSocket=1", text(&n["name"])),
        format!(
            "CPUAlloc={} CPUEfctv={} CPUTot={} CPULoad=N/A",
            text(&n["alloc_cpus"]),
            text(&n["cpus"]),
            text(&n["cpus"])
        ),
        format!("AvailableFeatures=(null)"),
        format!("ActiveFeatures=(null)"),
        format!("Gres={}", text(&n["gres"])),
        format!(
            "NodeAddr={} NodeHostName={} Version={}",
            text(&n["address"]),
            text(&n["hostname"]),
            text(&n["version"])
        ),
        format!(
            "RealMemory={} AllocMem={} FreeMem={} Sockets=1 Boards=1",
            text(&n["real_memory"]),
            text(&n["alloc_memory"]),
            text(&n["free_mem"])
        ),
        format!(
            "State={state} ThreadsPerCore=1 TmpDisk={} Weight=1",
            n["tmp_disk"].as_u64().unwrap_or(0)
        ),
        format!("Partitions={}", text(&n["partitions"])),
        format!("CfgTRES={}", text(&n["tres"])),
        format!("AllocTRES={}", text(&n["tres_used"])),
        format!("Reason={}", text(&n["reason"])),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_in_scontrols_words() {
        let n = serde_json::json!({
            "name": "n1", "hostname": "n1", "address": "10.0.0.1", "cpus": 8,
            "alloc_cpus": 2, "real_memory": 16384, "alloc_memory": 0,
            "free_mem": {"set": false, "infinite": false, "number": 0},
            "state": ["MIXED"], "partitions": ["gpu", "debug"], "gres": "gpu:1g.5gb:2(IDX:0-1)",
            "tres": "cpu=8", "tres_used": "cpu=2", "reason": "", "version": "0.1.0"});
        let l = node_lines(&n);
        assert_eq!(l[0], "NodeName=n1 Arch=x86_64 CoresPerSocket=1");
        assert_eq!(l[1], "CPUAlloc=2 CPUEfctv=8 CPUTot=8 CPULoad=N/A");
        assert!(l.contains(&"Partitions=gpu,debug".to_string()), "{l:?}");
        assert!(l.contains(&"State=MIXED ThreadsPerCore=1 TmpDisk=0 Weight=1".to_string()));
        assert!(l.contains(&"Reason=(null)".to_string()));
        assert!(l[6].contains("FreeMem=N/A"), "{l:?}");
    }
}
