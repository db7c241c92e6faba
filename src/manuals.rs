//! Manual pages for every command and daemon, written from their clap
//! definitions (`gsched manuals DIR`, run by `scripts/package`), so the
//! pages and the programs never differ.

use std::path::Path;

use anyhow::{Context, Result};
use clap::CommandFactory;

/// Writes `man1/` (commands) and `man8/` (daemons, and the shepherd
/// gnoded starts) under `dir`; returns the pages written.
pub fn write_all(dir: &Path) -> Result<Vec<String>> {
    let date = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .map(manual_date)
        .unwrap_or_default();
    let commands: Vec<(clap::Command, &str)> = vec![
        (crate::Cli::command(), "1"),
        (gsched_cli::gsub::SubmitOptions::command(), "1"),
        (gsched_cli::gqueue::Args::command(), "1"),
        (gsched_cli::gcancel::Args::command(), "1"),
        (gsched_cli::ginfo::Args::command(), "1"),
        (gsched_cli::gacct::Args::command(), "1"),
        (gsched_probe::command::GprobeArgs::command(), "1"),
        (gsched_ctld::command::GctldArgs::command(), "8"),
        (gsched_noded::command::GnodedArgs::command(), "8"),
        (shepherd_command(), "8"),
    ];
    let mut written = Vec::new();
    for (command, section) in commands {
        let out = dir.join(format!("man{section}"));
        std::fs::create_dir_all(&out)
            .with_context(|| format!("cannot create {}", out.display()))?;
        written.extend(write_tree(command, section, &date, &out)?);
    }
    Ok(written)
}

/// A page for `command` and one for each of its subcommands
/// (`gsched-config-check.1`), as `man gsched config check` finds them.
fn write_tree(
    command: clap::Command,
    section: &str,
    date: &str,
    out: &Path,
) -> Result<Vec<String>> {
    let mut command = command;
    command.build();
    let mut written = Vec::new();
    write_one(
        &command,
        command.get_name(),
        section,
        date,
        out,
        &mut written,
    )?;
    Ok(written)
}

fn write_one(
    command: &clap::Command,
    name: &str,
    section: &str,
    date: &str,
    out: &Path,
    written: &mut Vec<String>,
) -> Result<()> {
    if command.is_hide_set() {
        return Ok(());
    }
    let page = command
        .clone()
        .name(name.to_string())
        .display_name(name.to_string());
    let man = clap_mangen::Man::new(page)
        .section(section)
        .date(date)
        .source(format!("gsched {}", gsched_core::version::RELEASE))
        .manual(if section == "8" {
            "gsched administration"
        } else {
            "gsched commands"
        });
    let file = out.join(format!("{name}.{section}"));
    let mut buffer = Vec::new();
    man.render(&mut buffer)?;
    std::fs::write(&file, buffer).with_context(|| format!("cannot write {}", file.display()))?;
    written.push(format!("{name}.{section}"));
    for sub in command.get_subcommands() {
        if sub.get_name() == "help" {
            continue;
        }
        write_one(
            sub,
            &format!("{name}-{}", sub.get_name()),
            section,
            date,
            out,
            written,
        )?;
    }
    Ok(())
}

/// The shepherd takes no options; its page says what it is.
fn shepherd_command() -> clap::Command {
    clap::Command::new("gsched-shepherd")
        .version(gsched_core::version::VERSION_LINE)
        .about("The process that runs one job for gnoded")
        .long_about(
            "gnoded starts one gsched-shepherd per job (from /usr/lib/gsched/, or next to \
             gnoded): it puts the job in its own session with no controlling terminal, its \
             cgroup and its user's limits, runs it as its user with only descriptors 0-2, \
             waits for it, and records how it ended in the job's spool directory, so a job \
             outlives a restart of gnoded. It is not a command to run by hand.",
        )
}

/// `YYYY-MM-DD` of a Unix time, in UTC (for reproducible pages).
fn manual_date(secs: i64) -> String {
    // SAFETY: gmtime_r writes only into the tm we own.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    let t = secs as libc::time_t;
    if unsafe { libc::gmtime_r(&t, &mut tm) }.is_null() {
        return String::new();
    }
    format!(
        "{:04}-{:02}-{:02}",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_civil() {
        assert_eq!(manual_date(0), "1970-01-01");
        assert_eq!(manual_date(1_795_824_000), "2026-11-28");
        assert_eq!(manual_date(951_782_400), "2000-02-29");
    }

    #[test]
    fn every_command_and_daemon_gets_a_page() {
        let dir = tempfile::tempdir().unwrap();
        let pages = write_all(dir.path()).unwrap();
        for page in [
            "gsched.1",
            "gsched-up.1",
            "gsched-config-check.1",
            "gsched-db-backup.1",
            "gsub.1",
            "gqueue.1",
            "gcancel.1",
            "ginfo.1",
            "gacct.1",
            "gprobe.1",
            "gprobe-run.1",
            "gctld.8",
            "gnoded.8",
            "gsched-shepherd.8",
        ] {
            assert!(
                pages.iter().any(|p| p == page),
                "{page} missing from {pages:?}"
            );
        }
        assert!(
            !pages.iter().any(|p| p.starts_with("gsched-manuals")),
            "the hidden command has none"
        );
        let gctld = std::fs::read_to_string(dir.path().join("man8/gctld.8")).unwrap();
        assert!(gctld.contains("node\\-timeout"), "options are listed");
        assert!(
            gctld.contains(gsched_core::version::RELEASE),
            "the release is named"
        );
    }
}
