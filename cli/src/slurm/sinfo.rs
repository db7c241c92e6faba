//! `sinfo`: partitions and nodes in Slurm's formats.

use anyhow::Result;
use clap::Parser;
use gsched_core::wire::NodeInfo;

use super::squeue::{parse_format, render, Piece};
use crate::client::Client;

#[derive(Parser, Debug)]
#[command(
    name = "sinfo",
    about = "gsched partitions and nodes (Slurm's sinfo)",
    disable_help_flag = true
)]
pub struct Args {
    #[arg(long, action = clap::ArgAction::Help)]
    pub help: Option<bool>,
    #[arg(short = 'h', long = "noheader")]
    pub noheader: bool,
    /// Node-oriented: one line per node.
    #[arg(short = 'N', long = "Node")]
    pub nodes: bool,
    /// Output format (`%P %a %l %D %t %T %N %c %m %d %G`).
    #[arg(short = 'o', long = "format")]
    pub format: Option<String>,
    /// Output fields by name (`NodeList,StateCompact:.8`; each 20 wide by
    /// default): Partition, PartitionName, Available, Time, Nodes,
    /// StateCompact, StateLong, NodeList, CPUs, Memory, Gres.
    #[arg(short = 'O', long = "Format", conflicts_with = "format")]
    pub long_format: Option<String>,
    #[arg(short = 'p', long = "partition")]
    pub partition: Option<String>,
    /// Why nodes are down or drained, by whom and since when.
    #[arg(short = 'R', long = "list-reasons")]
    pub reasons: bool,
    /// Only nodes in these states (comma list, `&` for all of them; `all`;
    /// names as `--helpstate` lists them, or a prefix of one).
    #[arg(short = 't', long = "states")]
    pub states: Option<String>,
    /// The node state names `--states` takes, one per line.
    #[arg(long = "helpstate")]
    pub helpstate: bool,
    /// Nodes by partition as Slurm's data_parser prints them.
    #[arg(long)]
    pub json: bool,
}

/// Slurm's node state names, long and compact, in the order Slurm tries
/// them; `--states` takes either, or a prefix of either. gsched's nodes are
/// IDLE, MIXED, ALLOCATED, DRAINING, DRAINED or DOWN (`NO_RESPOND` when no
/// administrator set them down); the others match no node here.
const NODE_STATES: &[(&str, &str)] = &[
    ("UNKNOWN", "UNK"),
    ("DOWN", "DOWN"),
    ("IDLE", "IDLE"),
    ("ALLOCATED", "ALLOC"),
    ("ERROR", "ERR"),
    ("MIXED", "MIX"),
    ("FUTURE", "FUTR"),
    ("BLOCKED", "BLOCK"),
    ("PLANNED", "PLND"),
    ("DRAIN", "DRAIN"),
    ("DRAINED", "DRAINED"),
    ("RESERVED", "RESV"),
    ("DRAINING", "DRNG"),
    ("COMPLETING", "COMP"),
    ("NO_RESPOND", "NO_RESPOND"),
    ("POWERING_DOWN", "POWRING_DN"),
    ("POWERED_DOWN", "POWERED_DN"),
    ("POWER_DOWN", "POW_DN"),
    ("POWERING_UP", "POW_UP"),
    ("FAIL", "FAIL"),
    ("MAINT", "MAINT"),
    ("REBOOT_REQUESTED", "BOOT"),
    ("REBOOT_ISSUED", "BOOT^"),
    ("CLOUD", "CLOUD"),
];

/// A `--states` list: the states asked for, and whether a node must be in
/// all of them (`&`) rather than one.
#[derive(Debug, PartialEq)]
struct StateList {
    states: Vec<&'static str>,
    all: bool,
}

impl StateList {
    /// Parses as Slurm does; `None` for `all`.
    fn parse(list: &str) -> Result<Option<StateList>> {
        if list.trim().eq_ignore_ascii_case("all") {
            return Ok(None);
        }
        let mut states = Vec::new();
        for word in list.split([',', '&']).map(str::trim) {
            let prefix = |name: &str| {
                !word.is_empty()
                    && name.len() >= word.len()
                    && name[..word.len()].eq_ignore_ascii_case(word)
            };
            match NODE_STATES
                .iter()
                .find(|(long, short)| prefix(long) || prefix(short))
            {
                Some((long, _)) => states.push(*long),
                None => anyhow::bail!("Bad state string: \"{word}\""),
            }
        }
        Ok(Some(StateList {
            states,
            all: list.contains('&'),
        }))
    }

    fn matches(&self, n: &NodeInfo) -> bool {
        let is = |state: &str| match state {
            "DRAIN" => matches!(n.state.as_str(), "DRAINED" | "DRAINING"),
            "NO_RESPOND" => n.state == "DOWN" && n.admin.is_none(),
            other => n.state == other,
        };
        if self.all {
            self.states.iter().all(|s| is(s))
        } else {
            self.states.iter().any(|s| is(s))
        }
    }
}

/// sinfo's `-O` names and the `-o` letters they stand for.
const LONG_FIELDS: &[(&str, char)] = &[
    ("Partition", 'P'),
    ("PartitionName", 'P'),
    ("Available", 'a'),
    ("Time", 'l'),
    ("Nodes", 'D'),
    ("StateCompact", 't'),
    ("StateLong", 'T'),
    ("NodeList", 'N'),
    ("CPUs", 'c'),
    ("Memory", 'm'),
    ("Disk", 'd'),
    ("Gres", 'G'),
];

const DEFAULT: &str = "%9P %.5a %.10l %.6D %.6t %N";
const NODE_DEFAULT: &str = "%N %.6D %9P %6t";

fn header(c: char) -> Option<&'static str> {
    Some(match c {
        'P' | 'R' => "PARTITION",
        'a' => "AVAIL",
        'l' => "TIMELIMIT",
        'D' => "NODES",
        't' | 'T' => "STATE",
        'N' => "NODELIST",
        'c' => "CPUS",
        'G' => "GRES",
        'm' => "MEMORY",
        'd' => "TMP_DISK",
        _ => return None,
    })
}

/// sinfo's short state: `down*` for a node not responding, `down` for one
/// an administrator set down.
fn short_state(n: &NodeInfo) -> String {
    match n.state.as_str() {
        "IDLE" => "idle",
        "MIXED" => "mix",
        "ALLOCATED" => "alloc",
        "DRAINED" => "drain",
        "DRAINING" => "drng",
        "DOWN" if n.admin.is_some() => "down",
        "DOWN" => "down*",
        other => return other.to_ascii_lowercase(),
    }
    .into()
}

/// `sinfo -R`: the nodes down or drained, grouped by reason.
fn reasons(nodes: &[NodeInfo], noheader: bool) -> String {
    let mut out = String::new();
    if !noheader {
        out.push_str(&format!(
            "{:<20} {:<9} {:<19} {}\n",
            "REASON", "USER", "TIMESTAMP", "NODELIST"
        ));
    }
    let mut groups: Vec<((String, String, String), Vec<String>)> = Vec::new();
    for n in nodes {
        let key = match (&n.admin, n.state.as_str()) {
            (Some(a), _) => (
                a.reason.clone(),
                a.by.clone(),
                super::format::timestamp(Some(a.since)),
            ),
            (None, "DOWN") => ("Not responding".into(), "gsched".into(), "Unknown".into()),
            _ => continue,
        };
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, names)) => names.push(n.name.clone()),
            None => groups.push((key, vec![n.name.clone()])),
        }
    }
    for ((reason, user, time), names) in groups {
        let reason: String = reason.chars().take(20).collect();
        let list = gsched_core::hostlist::compress(&names);
        out.push_str(&format!("{reason:<20} {user:<9} {time:<19} {list}\n"));
    }
    out
}

pub fn main_with(args: Vec<String>) -> Result<i32> {
    let command = super::data_parser::command_line("sinfo", &args);
    let a: Args = super::parse("sinfo", args)?;
    if a.json {
        if a.states.is_some() || a.partition.is_some() {
            anyhow::bail!("--json lists every node of every partition: -t and -p are not applied to it; leave them out");
        }
        return super::data_parser::print_sinfo(&Client::from_env(), &command);
    }
    if a.helpstate {
        for (long, _) in NODE_STATES {
            println!("{}", long.to_ascii_lowercase());
        }
        return Ok(0);
    }
    let wanted = match &a.states {
        Some(list) => StateList::parse(list)?,
        None => None,
    };
    let fmt = a
        .format
        .clone()
        .unwrap_or_else(|| if a.nodes { NODE_DEFAULT } else { DEFAULT }.into());
    let pieces = match &a.long_format {
        Some(spec) => super::squeue::parse_long_format(spec, LONG_FIELDS)?,
        None => parse_format(&fmt.replace("%R", "%P"), |c| header(c).is_some())
            .map_err(|e| anyhow::anyhow!("Invalid node format specification '{fmt}': {e}"))?,
    };
    let client = Client::from_env();
    let mut nodes: Vec<NodeInfo> = client.nodes()?;
    if let Some(w) = &wanted {
        nodes.retain(|n| w.matches(n));
    }
    if a.reasons {
        print!("{}", reasons(&nodes, a.noheader));
        return Ok(0);
    }
    // One partition, the default, holds every node.
    let health = client.health()?;
    let default = health["partition"].as_str().unwrap_or("gpu").to_string();
    let mut partitions: Vec<String> = health["partitions"]
        .as_array()
        .map(|v| {
            v.iter()
                .filter_map(|p| p.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_else(|| vec![default.clone()]);
    if let Some(p) = &a.partition {
        let wanted: Vec<&str> = p.split(',').collect();
        partitions.retain(|x| wanted.contains(&x.as_str()));
    }
    let mut out = String::new();
    if !a.noheader {
        out.push_str(&render(&pieces, |c| header(c).unwrap_or("").to_string()));
        out.push('\n');
    }
    let groups: Vec<Vec<&NodeInfo>> = if a.nodes {
        nodes.iter().map(|n| vec![n]).collect()
    } else {
        // Nodes grouped by state, as sinfo does.
        let mut g: Vec<(String, Vec<&NodeInfo>)> = Vec::new();
        for n in &nodes {
            let state = short_state(n);
            match g.iter_mut().find(|(s, _)| *s == state) {
                Some((_, v)) => v.push(n),
                None => g.push((state, vec![n])),
            }
        }
        g.into_iter().map(|(_, v)| v).collect()
    };
    for partition in &partitions {
        let shown = if *partition == default {
            format!("{partition}*")
        } else {
            partition.clone()
        };
        for group in &groups {
            out.push_str(&row(&pieces, group, &shown));
            out.push('\n');
        }
    }
    print!("{out}");
    Ok(0)
}

/// One line: `group` of nodes in the partition shown as `shown`.
fn row(pieces: &[Piece], group: &[&NodeInfo], shown: &str) -> String {
    let first = group[0];
    let names: Vec<String> = group.iter().map(|n| n.name.clone()).collect();
    render(pieces, |c| match c {
        'P' => shown.to_string(),
        'a' => "up".into(),
        'l' => "infinite".into(),
        'D' => group.len().to_string(),
        't' => short_state(first),
        'T' => first.state.to_ascii_lowercase(),
        'N' => gsched_core::hostlist::compress(&names),
        'c' => first.cpus.to_string(),
        'm' => first.memory_mib.to_string(),
        'd' => first.tmp_disk_mib.to_string(),
        'G' => "(null)".into(),
        _ => String::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_parse_as_slurm_parses_them() {
        assert_eq!(StateList::parse("all").unwrap(), None);
        let l = StateList::parse("reboot,BOOT,idle,drng").unwrap().unwrap();
        assert_eq!(
            l.states,
            ["REBOOT_REQUESTED", "REBOOT_REQUESTED", "IDLE", "DRAINING"]
        );
        for bad in ["NOTASTATE", "npc", "perfctrs", "idle,"] {
            let e = StateList::parse(bad).unwrap_err().to_string();
            assert!(e.starts_with("Bad state string"), "{bad}: {e}");
        }
    }
}
