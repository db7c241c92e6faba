//! `--usage` and `--help` in Slurm's forms, made from each command's clap
//! definition, so they list exactly the options the command takes and
//! never drift from it.

use clap::{Arg, Command, CommandFactory};

/// How a command's help is laid out in Slurm.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Layout {
    /// `Usage: squeue [OPTIONS]`, the options, then `Help options:`.
    Options,
    /// `Usage: sacct [<OPTION>]`, `Valid <OPTION> values are:`, each
    /// option as `-A, --accounts:` with its text below.
    ValidOptions,
}

struct Form {
    command: Command,
    layout: Layout,
    /// What follows the options in `--usage` (`executable [args...]`).
    operands: &'static str,
    /// A line after the options in `--help`.
    note: &'static str,
}

fn form(name: &str) -> Option<Form> {
    let (command, layout, operands, note) = match name {
        "sbatch" => (
            crate::gsub::SubmitOptions::command(),
            Layout::Options,
            "executable [args...]",
            "",
        ),
        "salloc" => (
            crate::gsub::SubmitOptions::command(),
            Layout::Options,
            "[command [args...]]",
            "",
        ),
        "srun" => (
            super::srun::Args::command(),
            Layout::Options,
            "executable [args...]",
            "",
        ),
        "squeue" => (super::squeue::Args::command(), Layout::Options, "", ""),
        "sinfo" => (super::sinfo::Args::command(), Layout::Options, "", ""),
        "sprio" => (super::sprio::Args::command(), Layout::Options, "", ""),
        "sshare" => (super::sshare::Args::command(), Layout::Options, "", ""),
        "scancel" => (
            super::scancel::Args::command(),
            Layout::Options,
            "[job_id[_array_id][.step_id]]",
            "",
        ),
        "sacct" => (
            super::sacct::Args::command(),
            Layout::ValidOptions,
            "",
            "valid start/end time formats are...\n\
             \x20   HH:MM[:SS][AM|PM], MMDD[YY][-HH:MM[:SS]], MM.DD[.YY][-HH:MM[:SS]],\n\
             \x20   MM/DD[/YY][-HH:MM[:SS]], YYYY-MM-DD[THH:MM[:SS]], now[{+|-}COUNT[seconds|minutes|hours|days|weeks]]",
        ),
        "sstat" => (
            super::sstat::Args::command(),
            Layout::ValidOptions,
            "",
            "",
        ),
        _ => return None,
    };
    Some(Form {
        command,
        layout,
        operands,
        note,
    })
}

/// The options `--usage` and `--help` list: every visible flag, `--help`
/// and `--version` left for the help section.
fn options(cmd: &Command) -> Vec<&Arg> {
    cmd.get_arguments()
        .filter(|a| !a.is_positional() && !a.is_hide_set())
        .filter(|a| !matches!(a.get_id().as_str(), "help" | "version" | "usage"))
        .collect()
}

/// The name of an option's value, as Slurm writes it (`time`, `N`).
fn value_name(a: &Arg) -> Option<String> {
    if !a.get_action().takes_values() {
        return None;
    }
    let id = a.get_id().as_str();
    Some(match a.get_value_names().and_then(|v| v.first()) {
        // clap's default is the field's name in capitals: Slurm writes
        // `--time=time`.
        Some(v) if v.as_str() == id.to_uppercase() => id.to_string(),
        Some(v) => v.to_string(),
        None => a
            .get_long()
            .unwrap_or(a.get_id().as_str())
            .replace('-', "_")
            .to_string(),
    })
}

/// One option in a usage line: `[-t time]`, `[--mem=size]`, `[-l]`.
fn usage_item(a: &Arg) -> String {
    let value = value_name(a);
    match (a.get_short(), a.get_long(), value) {
        (Some(s), _, Some(v)) => format!("[-{s} {v}]"),
        (Some(s), _, None) => format!("[-{s}]"),
        (None, Some(l), Some(v)) => format!("[--{l}={v}]"),
        (None, Some(l), None) => format!("[--{l}]"),
        (None, None, _) => String::new(),
    }
}

/// `Usage: NAME [-a] [-b value] ... OPERANDS`, wrapped as Slurm wraps it.
fn usage_text(name: &str, f: &Form) -> String {
    let indent = " ".repeat("Usage: ".len() + name.len() + 1);
    let mut out = format!("Usage: {name}");
    let mut width = out.len();
    let items = options(&f.command).into_iter().map(usage_item);
    for item in items.chain((!f.operands.is_empty()).then(|| f.operands.to_string())) {
        if width + 1 + item.len() > 79 {
            out.push('\n');
            out.push_str(&indent);
            out.push_str(&item);
            width = indent.len() + item.len();
        } else {
            out.push(' ');
            out.push_str(&item);
            width += 1 + item.len();
        }
    }
    out.push('\n');
    out
}

/// `-t, --time=time` or `    --mem=size`.
fn flag_names(a: &Arg) -> String {
    let value = value_name(a).map(|v| format!("={v}")).unwrap_or_default();
    match (a.get_short(), a.get_long()) {
        (Some(s), Some(l)) => format!("-{s}, --{l}{value}"),
        (Some(s), None) => format!("-{s}{}", value.replacen('=', " ", 1)),
        (None, Some(l)) => format!("    --{l}{value}"),
        (None, None) => String::new(),
    }
}

fn help_text(name: &str, f: &Form) -> String {
    let mut out = String::new();
    let about = |a: &Arg| {
        a.get_help()
            .map(|h| h.to_string().replace('\n', " "))
            .unwrap_or_default()
    };
    match f.layout {
        Layout::Options => {
            out.push_str(&format!("Usage: {name} [OPTIONS] {}\n", f.operands));
            let rows: Vec<(String, String)> = options(&f.command)
                .into_iter()
                .map(|a| (flag_names(a), about(a)))
                .collect();
            let w = rows.iter().map(|(n, _)| n.len()).max().unwrap_or(0).min(32);
            for (names, text) in rows {
                if names.len() > w {
                    out.push_str(&format!("  {names}\n  {:w$}  {text}\n", ""));
                } else {
                    out.push_str(&format!("  {names:w$}  {text}\n"));
                }
            }
        }
        Layout::ValidOptions => {
            out.push_str(&format!(
                "{name} [<OPTION>]\n    Valid <OPTION> values are:\n"
            ));
            for a in options(&f.command) {
                let names = flag_names(a);
                let names = names.split('=').next().unwrap_or_default().trim_start();
                out.push_str(&format!("     {names}:\n\t           {}\n", about(a)));
            }
        }
    }
    if !f.note.is_empty() {
        out.push_str(&format!("\n{}\n", f.note));
    }
    out.push_str(&format!(
        "\nHelp options:\n      --help     show this help message\n      --usage    display brief usage message\n\
         \nOther options:\n  -V, --version  display the Slurm release these commands follow\n\
         \ngsched's {name}: docs/slurm.md says what each option does here.\n"
    ));
    out
}

/// Slurm's `--usage` text for command `name`, when it has one here.
pub fn usage(name: &str) -> Option<String> {
    if name == "sstat" {
        return Some("Usage: sstat [options] -j <job(.stepid)>\n\tUse --help for help\n".into());
    }
    if name == "scontrol" {
        // Its options stand anywhere; `scontrol --help` lists the commands.
        return Some(
            "Usage: scontrol [-a] [-d] [--json] [-o] [-Q] [-v] [-V] [COMMAND]\n\tUse --help for the commands\n"
                .into(),
        );
    }
    form(name).map(|f| usage_text(name, &f))
}

/// Slurm's `--help` text for command `name`, when it has one here.
pub fn help(name: &str) -> Option<String> {
    form(name).map(|f| help_text(name, &f))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_lists_every_visible_option_and_the_operands() {
        let u = usage("scancel").unwrap();
        assert!(u.starts_with("Usage: scancel [-"), "{u}");
        assert!(
            u.trim_end().ends_with("[job_id[_array_id][.step_id]]"),
            "{u}"
        );
        assert!(u.contains("[-s signal]"), "{u}");
        let s = usage("sbatch").unwrap();
        assert!(s.trim_end().ends_with("executable [args...]"), "{s}");
        // Every line but the first is the usage's continuation.
        assert!(
            s.lines().skip(1).all(|l| l.starts_with("              ")),
            "{s}"
        );
    }

    #[test]
    fn help_has_slurms_layouts() {
        let h = help("squeue").unwrap();
        assert!(h.starts_with("Usage: squeue [OPTIONS"), "{h}");
        assert!(h.contains("Help options:"), "{h}");
        assert!(h.contains("-t, --states="), "{h}");
        let s = help("sacct").unwrap();
        assert!(
            s.starts_with("sacct [<OPTION>]\n    Valid <OPTION> values are:"),
            "{s}"
        );
        assert!(s.contains("     -j, --jobs:\n"), "{s}");
        assert!(s.contains("valid start/end time formats are..."), "{s}");
        assert!(help("scontrol").is_none());
    }
}
