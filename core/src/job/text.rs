//! What a job's text may hold and how large it may be: the checks
//! `JobSpec::validate` runs beyond the model's own (an escape sequence in
//! a comment must not reach an administrator's terminal; every
//! user-controlled size is bounded).

use super::{JobSpec, SpecError};

/// Largest environment (names and values together) a job may carry.
pub const MAX_ENVIRONMENT_BYTES: usize = 4 << 20;
/// Most arguments a batch script may be given.
pub const MAX_ARGUMENTS_BYTES: usize = 1 << 20;
/// Longest text option (comment, wckey, constraint, output path, ...).
pub const MAX_OPTION_BYTES: usize = 4096;

/// Characters that change what a terminal shows or does beyond the text
/// itself: control characters (ESC, CSI, BEL, ...) and Unicode's invisible
/// formatting characters (bidirectional overrides and isolates, zero-width
/// characters, the soft hyphen, the byte-order mark).
pub fn is_unprintable(c: char) -> bool {
    c.is_control()
        || matches!(c,
            '\u{00AD}' | '\u{061C}' | '\u{180E}'
            | '\u{200B}'..='\u{200F}'
            | '\u{2028}'..='\u{202E}'
            | '\u{2060}'..='\u{206F}'
            | '\u{FEFF}'
            | '\u{FFF9}'..='\u{FFFB}')
}

impl JobSpec {
    /// What the job keeps in the controller's memory that its user chose
    /// the size of: its script, environment and arguments, bytes.
    pub fn held_bytes(&self) -> usize {
        self.script.len() + self.environment_bytes() + self.argument_bytes()
    }

    fn environment_bytes(&self) -> usize {
        self.environment
            .iter()
            .map(|(k, v)| k.len() + v.len() + 2)
            .sum()
    }

    pub(super) fn argument_bytes(&self) -> usize {
        self.argv.iter().map(|a| a.len() + 1).sum()
    }

    /// Bounds what a user sends beyond the script (the script's bound is
    /// the controller's `max_script_size`).
    pub(super) fn check_sizes(&self) -> Result<(), SpecError> {
        let (env, args) = (self.environment_bytes(), self.argument_bytes());
        let options = [
            ("output file name", self.stdout.as_deref()),
            ("error file name", self.stderr.as_deref()),
            ("working directory", Some(self.working_dir.as_str())),
            ("comment", self.slurm.comment.as_deref()),
            ("wckey", self.slurm.wckey.as_deref()),
        ];
        let too_large = |what, size, max| SpecError::TooLarge { what, size, max };
        if env > MAX_ENVIRONMENT_BYTES {
            return Err(too_large("environment", env, MAX_ENVIRONMENT_BYTES));
        }
        if args > MAX_ARGUMENTS_BYTES {
            return Err(too_large("arguments", args, MAX_ARGUMENTS_BYTES));
        }
        for (what, v) in options {
            if let Some(v) = v.filter(|v| v.len() > MAX_OPTION_BYTES) {
                return Err(too_large(what, v.len(), MAX_OPTION_BYTES));
            }
        }
        for v in self.slurm.other.values() {
            if v.len() > MAX_OPTION_BYTES {
                return Err(too_large("option", v.len(), MAX_OPTION_BYTES));
            }
        }
        Ok(())
    }

    /// Refuses control and invisible formatting characters in everything
    /// administrators' tools print (squeue, sacct, scontrol): an escape
    /// sequence in a comment must not reach a terminal.
    pub(super) fn check_printable(&self) -> Result<(), SpecError> {
        let bad = |s: &str| s.chars().any(is_unprintable);
        let fields = [
            ("name", Some(self.name.as_str())),
            ("user name", Some(self.user_name.as_str())),
            ("working directory", Some(self.working_dir.as_str())),
            ("output file name", self.stdout.as_deref()),
            ("error file name", self.stderr.as_deref()),
            ("partition", self.partition.as_deref()),
            ("account", self.slurm.account.as_deref()),
            ("QOS", self.slurm.qos.as_deref()),
            ("comment", self.slurm.comment.as_deref()),
            ("wckey", self.slurm.wckey.as_deref()),
            ("command", self.slurm.command.as_deref()),
            ("submit host", Some(self.submit_host.as_str())),
        ];
        for (what, v) in fields {
            if v.is_some_and(bad) {
                return Err(SpecError::ControlCharacter(what));
            }
        }
        if self.slurm.other.iter().any(|(k, v)| bad(k) || bad(v)) {
            return Err(SpecError::ControlCharacter(
                "options (such as --constraint)",
            ));
        }
        if self.slurm.open_mode.as_deref().is_some_and(bad)
            || self.slurm.signal.as_deref().is_some_and(bad)
        {
            return Err(SpecError::ControlCharacter("options"));
        }
        Ok(())
    }
}
