//! `ginfo`: nodes and their GPU instances.

use anyhow::Result;
use clap::Parser;
use gsched_core::wire::{InstanceInfo, NodeInfo};

use crate::client::Client;
use crate::slurm::format::timestamp;
use crate::table::{cell, row};

#[derive(Parser, Debug)]
#[command(name = "ginfo", version = gsched_core::version::VERSION_LINE, about = "Show nodes and GPU instances")]
pub struct Args {
    /// Print JSON: {"nodes": [...], "instances": [...]}.
    #[arg(long)]
    pub json: bool,
}

pub fn format(nodes: &[NodeInfo], instances: &[InstanceInfo]) -> String {
    let mut out = String::new();
    out += &(row(&[
        cell("NODE", -12),
        cell("STATE", -9),
        cell("CPUS", 4),
        cell("WORKERS", 9),
        cell("INSTANCES", 9),
        "JOBS".into(),
    ]) + "\n");
    for n in nodes {
        let jobs: Vec<String> = n.running_jobs.iter().map(|j| j.to_string()).collect();
        out += &(row(&[
            cell(&n.name, -12),
            cell(&n.state, -9),
            cell(&n.cpus.to_string(), 4),
            cell(&format!("{}/{}", n.workers_used, n.worker_limit), 9),
            cell(&n.gpu_instances.to_string(), 9),
            jobs.join(","),
        ]) + "\n");
    }
    out += "\n";
    out += &(row(&[
        cell("NODE", -12),
        cell("GPU", 3),
        cell("PROFILE", -10),
        cell("MEM_RESERVED/TOTAL", 19),
        cell("SMS", 4),
        cell("ISOLATED", 8),
        cell("DRAIN", -32),
        cell("TASKS", 5),
        cell("MPS", -7),
        "UUID".into(),
    ]) + "\n");
    for i in instances {
        out += &(row(&[
            cell(&i.node, -12),
            cell(&i.gpu_index.to_string(), 3),
            cell(i.profile.as_deref().unwrap_or("whole-gpu"), -10),
            cell(
                &format!("{}/{} MiB", i.memory_reserved_mib, i.memory_mib),
                19,
            ),
            cell(&i.sms.to_string(), 4),
            cell(
                &i.isolated_owner
                    .map(|j| j.to_string())
                    .unwrap_or_else(|| "-".into()),
                8,
            ),
            cell(&drain(i), -32),
            cell(&i.active_tasks.to_string(), 5),
            cell(i.mps.as_ref().map(|m| m.state.as_str()).unwrap_or("-"), -7),
            i.uuid.clone(),
        ]) + "\n");
    }
    out
}

/// An instance's drain for an isolated job: `for 12 until 2026-11-24T14:05:31` (when
/// the shared jobs on it are expected to have ended: time limits, or their
/// earlier runs), `for 12 (end unknown)`, or `-`.
fn drain(i: &InstanceInfo) -> String {
    match (i.draining_for, i.drain_expected_end) {
        (None, _) => "-".into(),
        (Some(j), Some(end)) => format!("for {j} until {}", timestamp(Some(end))),
        (Some(j), None) => format!("for {j} (end unknown)"),
    }
}

pub fn main_with(args: Vec<String>) -> Result<()> {
    let a = Args::try_parse_from(std::iter::once("ginfo".to_string()).chain(args))
        .unwrap_or_else(|e| e.exit());
    let c = Client::from_env();
    let (nodes, instances) = (c.nodes()?, c.instances()?);
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(
                &serde_json::json!({ "nodes": nodes, "instances": instances })
            )?
        );
    } else {
        print!("{}", format(&nodes, &instances));
    }
    Ok(())
}
