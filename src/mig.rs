//! `gsched mig plan`: a legal MIG placement for a layout, from the tables.

use gsched_core::gpu::{model, MODELS};
use gsched_core::mig::{parse_profiles, plan, MigPlacement};

#[derive(clap::Args)]
pub struct MigArgs {
    #[command(subcommand)]
    command: MigCommand,
}

#[derive(clap::Subcommand)]
enum MigCommand {
    /// Print where each instance of a layout goes (profile, start slice,
    /// size), or why the layout cannot exist (exit status 1).
    Plan(PlanArgs),
    /// Show nodes' MIG GPUs: each instance by placement and what it does,
    /// frozen GPUs, reshapes under way.
    Show {
        /// The node (default: every node).
        node: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Keep the re-partitioning policy off a GPU's layout (administrators).
    Freeze { node: String, gpu: u32 },
    /// Let the re-partitioning policy change a GPU's layout again.
    Thaw { node: String, gpu: u32 },
    /// Re-make a GPU's layout (administrators): instances the layout keeps
    /// in place stay, the others go once nothing uses them.
    Apply {
        node: String,
        gpu: u32,
        /// Profiles, comma-separated; `PROFILE*N` repeats.
        layout: String,
    },
}

#[derive(clap::Args)]
struct PlanArgs {
    /// GPU model: A30, A100-40GB, A100-80GB, H100-80GB or H200.
    #[arg(long)]
    model: String,
    /// Profiles, comma-separated or as several arguments; `PROFILE*N` repeats.
    #[arg(required = true, value_name = "PROFILE[,PROFILE...]")]
    layout: Vec<String>,
    /// Print JSON: [{"profile", "start", "size"}, ...].
    #[arg(long)]
    json: bool,
}

/// The placement as a table, one instance per line in layout order.
pub fn format(placed: &[MigPlacement]) -> String {
    let mut out = String::from("PROFILE      START  SIZE\n");
    for p in placed {
        out.push_str(&format!(
            "{:<12} {:>5} {:>5}\n",
            p.profile.name,
            p.start,
            p.size()
        ));
    }
    out
}

pub fn run(args: MigArgs) -> anyhow::Result<()> {
    use gsched_core::wire::MigChange;
    let client = gsched_cli::client::Client::from_env();
    let change = |node: &str, change: MigChange| -> anyhow::Result<()> {
        let info = client.change_mig(node, &change)?;
        print!("{}", format_node(&info));
        Ok(())
    };
    let a = match args.command {
        MigCommand::Plan(a) => a,
        MigCommand::Show { node, json } => return show(&client, node, json),
        MigCommand::Freeze { node, gpu } => {
            let c = MigChange {
                gpu,
                frozen: Some(true),
                layout: None,
            };
            return change(&node, c);
        }
        MigCommand::Thaw { node, gpu } => {
            let c = MigChange {
                gpu,
                frozen: Some(false),
                layout: None,
            };
            return change(&node, c);
        }
        MigCommand::Apply { node, gpu, layout } => {
            let c = MigChange {
                gpu,
                frozen: None,
                layout: Some(layout),
            };
            return change(&node, c);
        }
    };
    let Some(m) = model(&a.model) else {
        let known: Vec<&str> = MODELS.iter().map(|m| m.name).collect();
        eprintln!(
            "gsched: unknown GPU model '{}' (known: {})",
            a.model,
            known.join(", ")
        );
        std::process::exit(1);
    };
    let placed = parse_profiles(m, &a.layout.join(",")).and_then(|p| plan(m, &p));
    match placed {
        Ok(placed) if a.json => {
            let v: Vec<serde_json::Value> = placed
                .iter()
                .map(|p| serde_json::json!({"profile": p.profile.name, "start": p.start, "size": p.size()}))
                .collect();
            println!("{}", serde_json::to_string_pretty(&v)?);
        }
        Ok(placed) => print!("{}", format(&placed)),
        Err(e) => {
            eprintln!("gsched: {e}");
            std::process::exit(1);
        }
    }
    Ok(())
}

/// Every node's MIG GPUs (or `node`'s), as a table or JSON.
fn show(
    client: &gsched_cli::client::Client,
    node: Option<String>,
    json: bool,
) -> anyhow::Result<()> {
    let names: Vec<String> = match node {
        Some(n) => vec![n],
        None => client.nodes()?.into_iter().map(|n| n.name).collect(),
    };
    let mut all = Vec::new();
    for n in names {
        all.push(client.mig(&n)?);
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&all)?);
    } else {
        for info in &all {
            print!("{}", format_node(info));
        }
    }
    Ok(())
}

/// One node's MIG GPUs as a table: a line per instance, by placement.
pub fn format_node(info: &gsched_core::wire::MigNodeInfo) -> String {
    let mut out = String::new();
    for g in &info.gpus {
        let how = match (g.reshapeable, g.frozen) {
            (false, _) => "layout fixed",
            (true, true) => "frozen",
            (true, false) => "re-partitioned on demand",
        };
        out.push_str(&format!(
            "{} GPU {} {} ({how})\n",
            info.node, g.index, g.model
        ));
        out.push_str("  START  PROFILE      STATE      INSTANCE\n");
        for i in &g.instances {
            out.push_str(&format!(
                "  {:>5}  {:<12} {:<10} {}\n",
                i.start.map_or("-".into(), |s| s.to_string()),
                i.profile.as_deref().unwrap_or("whole GPU"),
                i.state,
                i.uuid
            ));
        }
        for r in &g.reshaping {
            let made: Vec<String> = r
                .create
                .iter()
                .map(|c| format!("{}@{}", c.profile, c.start))
                .collect();
            out.push_str(&format!(
                "  reshape {} under way: retiring {}, making {}\n",
                r.seq,
                r.retire.len(),
                if made.is_empty() {
                    "nothing".into()
                } else {
                    made.join(",")
                }
            ));
        }
    }
    out
}
