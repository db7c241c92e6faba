//! Slurm's input environment variables: `SBATCH_*` for sbatch, `SALLOC_*`
//! for salloc, `SLURM_*` for srun outside a job (gsched's own gsub reads
//! none). Each gives an option as the command line would;
//! Slurm ranks them below the command line and above the script's
//! `#SBATCH` directives, and so does gsched. Only the variables whose
//! option gsched's submission parser takes are read (docs/slurm.md lists
//! them); the others mean nothing here, as any unknown variable.

use anyhow::Result;
use clap::Parser;

use crate::gsub::{clap_message, SubmitOptions};

/// Which command reads the environment.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Reader {
    Sbatch,
    Salloc,
}

impl Reader {
    fn prefix(self) -> &'static str {
        match self {
            Reader::Sbatch => "SBATCH_",
            Reader::Salloc => "SALLOC_",
        }
    }
}

/// How a variable turns into an option.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Form {
    /// `--option=VALUE`.
    Value,
    /// `--option`, when the variable is set at all (Slurm's flags).
    Flag,
}

/// (variable after its prefix, long option, form, sbatch only).
const VARIABLES: &[(&str, &str, Form, bool)] = &[
    ("ACCOUNT", "account", Form::Value, false),
    ("ARRAY_INX", "array", Form::Value, true),
    ("CLUSTERS", "clusters", Form::Value, false),
    ("CONSTRAINT", "constraint", Form::Value, false),
    ("CPUS_PER_GPU", "cpus-per-gpu", Form::Value, false),
    ("ERROR", "error", Form::Value, true),
    ("EXPORT", "export", Form::Value, true),
    ("GPU_BIND", "gpu-bind", Form::Value, false),
    ("GPUS", "gpus", Form::Value, false),
    ("GPUS_PER_NODE", "gpus-per-node", Form::Value, false),
    ("GPUS_PER_TASK", "gpus-per-task", Form::Value, false),
    ("GRES", "gres", Form::Value, false),
    ("JOB_NAME", "job-name", Form::Value, true),
    ("MEM_PER_CPU", "mem-per-cpu", Form::Value, false),
    ("MEM_PER_GPU", "mem-per-gpu", Form::Value, false),
    ("MEM_PER_NODE", "mem", Form::Value, false),
    ("NO_REQUEUE", "no-requeue", Form::Flag, true),
    ("OPEN_MODE", "open-mode", Form::Value, true),
    ("OUTPUT", "output", Form::Value, true),
    ("PARTITION", "partition", Form::Value, false),
    ("QOS", "qos", Form::Value, false),
    ("REQUEUE", "requeue", Form::Flag, true),
    ("RESERVATION", "reservation", Form::Value, false),
    ("SIGNAL", "signal", Form::Value, false),
    ("TIMELIMIT", "time", Form::Value, false),
    ("WAIT", "wait", Form::Flag, true),
    ("WCKEY", "wckey", Form::Value, false),
];

/// srun's input variables outside a job (inside one, Slurm's output
/// variables of the same names describe the job, and srun takes its
/// allocation instead): (variable, srun's option, form).
const SRUN_VARIABLES: &[(&str, &str, Form)] = &[
    ("SLURM_ACCOUNT", "account", Form::Value),
    ("SLURM_CPUS_PER_TASK", "cpus-per-task", Form::Value),
    ("SLURM_EXPORT_ENV", "export", Form::Value),
    ("SLURM_JOB_NAME", "job-name", Form::Value),
    ("SLURM_LABELIO", "label", Form::Flag),
    ("SLURM_NNODES", "nodes", Form::Value),
    ("SLURM_NPROCS", "ntasks", Form::Value),
    ("SLURM_NTASKS", "ntasks", Form::Value),
    ("SLURM_OVERCOMMIT", "overcommit", Form::Flag),
    ("SLURM_PARTITION", "partition", Form::Value),
    ("SLURM_QOS", "qos", Form::Value),
    ("SLURM_STDERRMODE", "error", Form::Value),
    ("SLURM_STDOUTMODE", "output", Form::Value),
    ("SLURM_TIMELIMIT", "time", Form::Value),
    ("SLURM_UNBUFFEREDIO", "unbuffered", Form::Flag),
    ("SLURM_WORKING_DIR", "chdir", Form::Value),
];

/// srun's options from its input variables, to go before the command
/// line's (which override them), read with `var`.
pub fn srun_arguments(var: impl Fn(&str) -> Option<String>) -> Vec<String> {
    let mut args = Vec::new();
    for (variable, option, form) in SRUN_VARIABLES {
        match (var(variable), form) {
            (Some(_), Form::Flag) => args.push(format!("--{option}")),
            (Some(v), Form::Value) if !v.is_empty() => args.push(format!("--{option}={v}")),
            _ => {}
        }
    }
    args
}

/// The variables `reader` reads, with the option each gives.
pub fn variables(reader: Reader) -> Vec<(String, &'static str)> {
    VARIABLES
        .iter()
        .filter(|(_, _, _, batch)| reader == Reader::Sbatch || !batch)
        .map(|(name, option, _, _)| (format!("{}{name}", reader.prefix()), *option))
        .collect()
}

/// The options `reader`'s variables give, read with `var` (the process
/// environment in use). A bad value is an error naming the variable.
pub fn options(reader: Reader, var: impl Fn(&str) -> Option<String>) -> Result<SubmitOptions> {
    let mut all = SubmitOptions::default();
    for (name, option, form, batch) in VARIABLES {
        if *batch && reader != Reader::Sbatch {
            continue;
        }
        let variable = format!("{}{name}", reader.prefix());
        let Some(value) = var(&variable) else {
            continue;
        };
        let arg = match form {
            Form::Flag => format!("--{option}"),
            Form::Value if value.is_empty() => continue,
            Form::Value => format!("--{option}={value}"),
        };
        let parsed = SubmitOptions::try_parse_from([reader.prefix().to_ascii_lowercase(), arg])
            .map_err(|e| anyhow::anyhow!("{variable}={value}: {}", clap_message(&e)))?;
        all = parsed.over(all);
    }
    Ok(all)
}

/// [`options`] from the process's environment.
pub fn from_environment(reader: Reader) -> Result<SubmitOptions> {
    options(reader, |k| std::env::var(k).ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn every_variable_names_an_option_the_parser_takes() {
        let cmd = SubmitOptions::command();
        for (_, option, _, _) in VARIABLES {
            assert!(
                cmd.get_arguments().any(|a| a.get_long() == Some(option)),
                "--{option}"
            );
        }
    }

    #[test]
    fn srun_variables_name_options_srun_takes() {
        let cmd = crate::slurm::srun::Args::command();
        for (_, option, _) in SRUN_VARIABLES {
            assert!(
                cmd.get_arguments().any(|a| a.get_long() == Some(option)),
                "--{option}"
            );
        }
        let args = srun_arguments(|k| match k {
            "SLURM_ACCOUNT" => Some("acct".into()),
            "SLURM_LABELIO" => Some("1".into()),
            _ => None,
        });
        assert_eq!(args, ["--account=acct", "--label"]);
    }

    #[test]
    fn variables_give_options_and_bad_values_name_the_variable() {
        let env = |k: &str| match k {
            "SBATCH_OUTPUT" => Some("out.%j".to_string()),
            "SBATCH_TIMELIMIT" => Some("10".to_string()),
            "SBATCH_REQUEUE" => Some(String::new()),
            "SALLOC_PARTITION" => Some("gpu".to_string()),
            _ => None,
        };
        let o = options(Reader::Sbatch, env).unwrap();
        assert_eq!(o.output.as_deref(), Some("out.%j"));
        assert_eq!(o.time.as_deref(), Some("10"));
        assert!(o.requeue);
        assert_eq!(o.partition, None, "SALLOC_ is salloc's");
        let s = options(Reader::Salloc, env).unwrap();
        assert_eq!(s.partition.as_deref(), Some("gpu"));
        let bad = options(Reader::Sbatch, |k| {
            (k == "SBATCH_OPEN_MODE").then(|| "sideways".to_string())
        })
        .unwrap_err()
        .to_string();
        assert!(bad.starts_with("SBATCH_OPEN_MODE=sideways: "), "{bad}");
    }
}
