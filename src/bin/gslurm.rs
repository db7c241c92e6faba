//! Slurm's commands (sbatch, squeue, ...) for the links `gsched
//! slurm-shims` makes: the client alone, which starts in about half the
//! time of `gsched`, a binary that holds both daemons too
//! (docs/benchmarks.md, "Where a command's start-up goes").

fn main() {
    let name = std::env::args_os()
        .next()
        .map(std::path::PathBuf::from)
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_default();
    let known = gsched_cli::slurm::COMMANDS.contains(&name.as_str())
        || gsched_cli::slurm::DAEMONS.contains(&name.as_str());
    if !known {
        eprintln!(
            "gslurm: run it by a Slurm command's name ({}), through a link `gsched slurm-shims DIR` makes",
            gsched_cli::slurm::COMMANDS.join(", ")
        );
        std::process::exit(2);
    }
    std::process::exit(gsched_cli::slurm::dispatch(
        &name,
        std::env::args().skip(1).collect(),
    ));
}
