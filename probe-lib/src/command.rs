//! `gprobe`'s command line (for the program and its manual page).

use clap::{Parser, Subcommand};

/// gprobe's command line.
#[derive(Parser, Debug)]
#[command(
    name = "gprobe",
    version = gsched_core::version::VERSION_LINE,
    about = "Run one task of a shared GPU job with its GPU footprint stated",
    long_about = "Run one task of a shared (non-isolated) GPU job with its GPU footprint \
                  stated: gnoded places it on a GPU instance where that much memory is free \
                  (waiting until there is one), and the command runs there with \
                  CUDA_VISIBLE_DEVICES (and CUDA_MPS_PIPE_DIRECTORY) set. Programs that \
                  cannot state their footprint are intercepted instead (libgprobe.so). Runs \
                  inside a gsched job only."
)]
pub struct GprobeArgs {
    #[command(subcommand)]
    pub command: GprobeCommand,
}

/// What gprobe does.
#[derive(Subcommand, Debug)]
pub enum GprobeCommand {
    /// Run COMMAND as one task: ask for a place, run it there, release the
    /// place, and exit with the command's status (128+N if killed by
    /// signal N).
    Run {
        /// GPU memory the command uses at most: bytes, or with a K, M, G or
        /// T suffix (binary multiples), e.g. 3G.
        #[arg(long, value_name = "SIZE", value_parser = parse_size)]
        mem: u64,
        /// The compute the command keeps busy, in warps (0: not said; the
        /// node's default share applies).
        #[arg(long, default_value_t = 0)]
        warps: u64,
        /// The command and its arguments, after `--`.
        #[arg(last = true, required = true, value_name = "COMMAND")]
        command: Vec<String>,
    },
    /// Time probe round trips (begin and end of a task) inside a job, and
    /// print their percentiles.
    Bench {
        /// How many round trips.
        #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
        count: u64,
        /// The footprint each asks for.
        #[arg(long, value_name = "SIZE", default_value = "1M", value_parser = parse_size)]
        mem: u64,
    },
}

/// A size in bytes, from `N` or `N[KMGT]`.
fn parse_size(text: &str) -> Result<u64, gsched_core::units::UnitError> {
    gsched_core::units::parse_mem_mib(text).map(|mib| mib * 1024 * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_takes_a_size_and_a_command() {
        let a =
            GprobeArgs::try_parse_from(["gprobe", "run", "--mem", "3G", "--", "python", "-c", "1"])
                .unwrap();
        match a.command {
            GprobeCommand::Run {
                mem,
                warps,
                command,
            } => {
                assert_eq!(mem, 3 << 30);
                assert_eq!(warps, 0);
                assert_eq!(command, ["python", "-c", "1"]);
            }
            other => panic!("{other:?}"),
        }
        let e =
            GprobeArgs::try_parse_from(["gprobe", "run", "--mem", "lots", "--", "x"]).unwrap_err();
        assert!(e.to_string().contains("lots"), "{e}");
        assert!(
            GprobeArgs::try_parse_from(["gprobe", "run", "--", "x"]).is_err(),
            "--mem is required"
        );
        assert!(
            GprobeArgs::try_parse_from(["gprobe", "run", "--mem", "1G"]).is_err(),
            "a command is required"
        );
        assert!(GprobeArgs::try_parse_from(["gprobe", "bench", "--count", "0"]).is_err());
    }
}
