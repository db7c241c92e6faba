//! gsched-daemon: what gctld, gnoded and `gsched up` share at their edges —
//! log setup, the wall clock, the cluster key file, and JSON HTTP errors.
//! Decisions stay in gsched-core.

pub mod advertise;
pub mod http;
pub mod island;
pub mod key;
pub mod limits;
pub mod listener;
pub mod local_peer;
pub mod peer;
pub mod state;
pub mod step_credential;
pub mod tls;

/// Unix seconds now: the clock the daemons pass into gsched-core.
pub fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// Logs to stderr as `text` or `json`, filtered by `RUST_LOG` (default info).
pub fn init_logs(format: &str) {
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    // Colour codes only on a terminal: a log file or journald gets plain
    // text.
    use std::io::IsTerminal;
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    if format == "json" {
        b.json().init();
    } else {
        b.init();
    }
}

/// Reads a daemon's TOML config file.
pub fn read_config<T: serde::de::DeserializeOwned>(path: &std::path::Path) -> anyhow::Result<T> {
    use anyhow::Context;
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    toml::from_str(&text).with_context(|| format!("invalid config file {}", path.display()))
}

/// The flags every daemon has besides its settings.
#[derive(Debug, Clone, clap::Args)]
pub struct DaemonArgs {
    /// State directory (database, spool, cluster key).
    #[arg(long, env = "GSCHED_STATE_DIR")]
    pub state_dir: std::path::PathBuf,
    /// TOML file with the settings (snake_case names); then give none of them as flags.
    #[arg(long)]
    pub config: Option<std::path::PathBuf>,
    /// Log format.
    #[arg(long, default_value = "text", value_parser = ["text", "json"])]
    pub log_format: String,
}

/// A daemon's settings: from `--config FILE` when it is given, else from the
/// flags. A setting given both ways is refused rather than silently merged;
/// only `--state-dir`, `--config` and `--log-format` go with `--config`.
pub fn settings<T: serde::de::DeserializeOwned>(
    command: &clap::Command,
    matches: &clap::ArgMatches,
    config: Option<&std::path::Path>,
    from_flags: T,
) -> anyhow::Result<T> {
    let Some(path) = config else {
        return Ok(from_flags);
    };
    let given: Vec<String> = matches
        .ids()
        .map(|id| id.as_str())
        .filter(|id| !["state_dir", "config", "log_format"].contains(id))
        // Flattened argument groups have ids too; only arguments are flags.
        .filter(|id| command.get_arguments().any(|a| a.get_id() == id))
        .filter(|id| matches.value_source(id) == Some(clap::parser::ValueSource::CommandLine))
        .map(|id| format!("--{}", id.replace('_', "-")))
        .collect();
    if !given.is_empty() {
        anyhow::bail!(
            "settings come from {} with --config; also given as flags: {}",
            path.display(),
            given.join(", ")
        );
    }
    read_config(path)
}
