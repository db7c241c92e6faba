//! Slurm's commands over gsched (`gsched slurm-shims DIR`): `sbatch`,
//! `squeue`, `scancel`, `sacct`, `sinfo`, `srun`, `scontrol`, `sprio`,
//! `sacctmgr`, `sshare`. They share gsub's option parser and the controller's job
//! model; what they print follows Slurm's (docs/slurm.md).

pub mod data_parser;
pub mod format;
pub mod ids;
pub mod sacct;
pub mod sacct_json;
pub mod sacctmgr;
pub mod salloc;
pub mod scancel;
pub mod scontrol;
pub mod scontrol_data;
pub mod sinfo;
pub mod sprio;
pub mod squeue;
pub mod srun;
pub mod sshare;
pub mod sstat;
pub mod update;
pub mod usage;

/// The command names a shim directory holds.
pub const COMMANDS: &[&str] = &[
    "sbatch", "squeue", "scancel", "sacct", "sstat", "sinfo", "srun", "salloc", "scontrol",
    "sprio", "sacctmgr", "sshare",
];

/// The Slurm release whose commands these are, as `-V`/`--version` and
/// `scontrol show config` give it (gsched's own version is `gsched
/// --version`).
pub const SLURM_VERSION: &str = "25.11.0";

/// Slurm's daemons: gsched has none of them (gctld and gnoded stand in),
/// but tools ask their versions (`slurmctld -V`); called by these names,
/// gsched answers that and refuses anything else.
pub const DAEMONS: &[&str] = &["slurmctld", "slurmd", "slurmdbd", "slurmrestd"];

/// Runs Slurm command `name` with `args`; returns its exit status.
/// Errors are printed as Slurm does (`prog: error: ...`).
pub fn dispatch(name: &str, args: Vec<String>) -> i32 {
    crate::end_quietly_when_the_reader_goes();
    // `-V`/`--version` first on the line, as every Slurm command takes it
    // (after a program's name it is the program's: `srun prog -V`).
    if matches!(args.first().map(String::as_str), Some("-V" | "--version")) {
        println!("slurm {SLURM_VERSION}");
        return 0;
    }
    // `--usage` and `--help` in Slurm's forms, where the command has them.
    let shown = match args.first().map(String::as_str) {
        Some("--usage") => usage::usage(name),
        Some("--help") => usage::help(name),
        _ => None,
    };
    if let Some(text) = shown {
        print!("{text}");
        return 0;
    }
    // Otherwise `--usage`, which every Slurm command takes, is the help.
    let args = if args.first().map(String::as_str) == Some("--usage") {
        std::iter::once("--help".to_string())
            .chain(args.into_iter().skip(1))
            .collect()
    } else {
        args
    };
    if DAEMONS.contains(&name) {
        eprintln!(
            "{name}: error: gsched has no {name}: its controller is gctld and its node daemon gnoded (`gsched up` runs both); only `{name} -V` is answered"
        );
        return 1;
    }
    let result = match name {
        "sbatch" => crate::input_env::from_environment(crate::input_env::Reader::Sbatch)
            .and_then(|environment| crate::gsub::submit_main("sbatch", args, environment)),
        "squeue" => squeue::main_with(args),
        "scancel" => scancel::main_with(args),
        "sacct" => sacct::main_with(args),
        "sstat" => sstat::main_with(args),
        "sinfo" => sinfo::main_with(args),
        "srun" => srun::main_with(args),
        "salloc" => salloc::main_with(args),
        "scontrol" => scontrol::main_with(args),
        "sprio" => sprio::main_with(args),
        "sacctmgr" => sacctmgr::main_with(args),
        "sshare" => sshare::main_with(args),
        other => Err(anyhow::anyhow!("unknown Slurm command '{other}'")),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("{name}: error: {e:#}");
            1
        }
    }
}

/// Parses a command line with clap, printing help or version and exiting as
/// clap does, or turning an error into Slurm's one-line form.
pub fn parse<T: clap::Parser>(prog: &str, args: Vec<String>) -> anyhow::Result<T> {
    match T::try_parse_from(std::iter::once(prog.to_string()).chain(args)) {
        Ok(t) => Ok(t),
        Err(e)
            if matches!(
                e.kind(),
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion
            ) =>
        {
            e.exit()
        }
        Err(e) => Err(anyhow::anyhow!("{}", crate::gsub::clap_message(&e))),
    }
}
