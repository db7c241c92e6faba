//! Slurm's ways of printing times, states and padded fields.

use gsched_core::job::JobState;
use gsched_core::wire::JobInfo;

/// `-e`/`--helpformat`: the fields `--format` takes, four to a line as
/// Slurm's sacct and sstat print them.
pub fn print_field_names<'a>(names: impl Iterator<Item = &'a str>) {
    let names: Vec<&str> = names.collect();
    for line in names.chunks(4) {
        let cells: Vec<String> = line.iter().map(|n| format!("{n:<20}")).collect();
        println!("{}", cells.join("").trim_end());
    }
}

/// Seconds since the epoch.
pub fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// `[D-]HH:MM:SS`, as sacct's Elapsed.
pub fn elapsed_long(secs: i64) -> String {
    let s = secs.max(0);
    let (d, h, m, x) = (s / 86400, s / 3600 % 24, s / 60 % 60, s % 60);
    if d > 0 {
        format!("{d}-{h:02}:{m:02}:{x:02}")
    } else {
        format!("{h:02}:{m:02}:{x:02}")
    }
}

/// `M:SS`, `H:MM:SS` or `D-HH:MM:SS`, as squeue's TIME.
pub fn elapsed_short(secs: i64) -> String {
    let s = secs.max(0);
    let (d, h, m, x) = (s / 86400, s / 3600 % 24, s / 60 % 60, s % 60);
    if d > 0 {
        format!("{d}-{h:02}:{m:02}:{x:02}")
    } else if h > 0 {
        format!("{h}:{m:02}:{x:02}")
    } else {
        format!("{m}:{x:02}")
    }
}

/// A Unix time as sacct prints it (`2026-11-22T10:04:05`, local time), or
/// `Unknown`.
pub fn timestamp(t: Option<i64>) -> String {
    let Some(t) = t else {
        return "Unknown".into();
    };
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    let tt = t as libc::time_t;
    // SAFETY: localtime_r writes into the tm we own.
    if unsafe { libc::localtime_r(&tt, &mut tm) }.is_null() {
        return "Unknown".into();
    }
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec
    )
}

/// The state as sacct prints it: `CANCELLED by UID` for cancelled jobs,
/// SUSPENDED for a stopped one.
pub fn sacct_state(j: &JobInfo) -> String {
    match j.job_state {
        JobState::Cancelled => format!("CANCELLED by {}", j.cancelled_by.unwrap_or(j.user_id)),
        _ if j.suspended => "SUSPENDED".into(),
        s => s.as_str().to_string(),
    }
}

/// The states a `-t`/`-s` list asks for. SUSPENDED (`S`) is a RUNNING job
/// that is stopped in gsched: the controller is asked for RUNNING jobs and
/// [`StateFilter::matches`] tells them apart. Slurm's states gsched never
/// produces match no job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateFilter {
    pub states: Vec<JobState>,
    pub suspended: bool,
    /// COMPLETING (`CG`): jobs cancelled whose processes are not yet gone.
    pub completing: bool,
}

impl StateFilter {
    pub fn parse(list: &str) -> Result<StateFilter, gsched_core::job::UnknownState> {
        let mut f = StateFilter {
            states: Vec::new(),
            suspended: false,
            completing: false,
        };
        for st in list.split(',').map(str::trim).filter(|x| !x.is_empty()) {
            if st.eq_ignore_ascii_case("SUSPENDED") || st.eq_ignore_ascii_case("S") {
                f.suspended = true;
                continue;
            }
            if st.eq_ignore_ascii_case("COMPLETING") || st.eq_ignore_ascii_case("CG") {
                f.completing = true;
                continue;
            }
            match JobState::parse(st) {
                Ok(js) => f.states.push(js),
                Err(_) if is_other_slurm_state(st) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(f)
    }

    /// The states to ask the controller for.
    pub fn asked(&self) -> Vec<&'static str> {
        let mut v: Vec<&'static str> = self.states.iter().map(|s| s.as_str()).collect();
        if self.suspended && !self.states.contains(&JobState::Running) {
            v.push(JobState::Running.as_str());
        }
        if self.completing && !self.states.contains(&JobState::Cancelled) {
            v.push(JobState::Cancelled.as_str());
        }
        v
    }

    pub fn matches(&self, j: &JobInfo) -> bool {
        if j.completing {
            self.completing || self.states.contains(&JobState::Cancelled)
        } else if j.suspended && j.job_state == JobState::Running {
            self.suspended
        } else {
            self.states.contains(&j.job_state)
        }
    }
}

/// Slurm job states gsched never produces (long and compact names): a
/// filter naming them matches nothing rather than being an error.
pub fn is_other_slurm_state(s: &str) -> bool {
    const OTHER: &[&str] = &[
        "PREEMPTED",
        "PR",
        "BOOT_FAIL",
        "BF",
        "DEADLINE",
        "DL",
        "CONFIGURING",
        "CF",
        "RESIZING",
        "RS",
        "REVOKED",
        "RV",
        "SIGNALING",
        "SI",
        "SPECIAL_EXIT",
        "SE",
        "STAGE_OUT",
        "SO",
        "STOPPED",
        "ST",
        "REQUEUE_FED",
        "RF",
        "REQUEUE_HOLD",
        "RH",
        "RESV_DEL_HOLD",
        "RD",
    ];
    OTHER.iter().any(|o| o.eq_ignore_ascii_case(s.trim()))
}

/// `CODE:SIGNAL`, as sacct's ExitCode.
pub fn exit_code(j: &JobInfo) -> String {
    format!(
        "{}:{}",
        j.exit_code.unwrap_or(0),
        j.exit_signal.unwrap_or(0)
    )
}

/// Pads `value` to `width` (right-justified, or left with `left`); a value
/// longer than the width is cut, as Slurm does.
pub fn pad(value: &str, width: Option<usize>, left: bool) -> String {
    let Some(w) = width else {
        return value.to_string();
    };
    let v: String = value.chars().take(w).collect();
    if left {
        format!("{v:<w$}")
    } else {
        format!("{v:>w$}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_as_slurm_prints_them() {
        assert_eq!(elapsed_long(0), "00:00:00");
        assert_eq!(elapsed_long(3725), "01:02:05");
        assert_eq!(elapsed_long(90061), "1-01:01:01");
        assert_eq!(elapsed_short(5), "0:05");
        assert_eq!(elapsed_short(3725), "1:02:05");
        assert_eq!(elapsed_short(90061), "1-01:01:01");
        assert_eq!(timestamp(None), "Unknown");
        assert_eq!(pad("abc", Some(5), false), "  abc");
        assert_eq!(pad("abc", Some(5), true), "abc  ");
        assert_eq!(pad("abcdef", Some(3), true), "abc");
        assert_eq!(pad("abc", None, true), "abc");
    }
}
