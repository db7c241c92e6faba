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
    let MigCommand::Plan(a) = args.command;
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
