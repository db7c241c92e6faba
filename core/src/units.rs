//! Slurm's units: memory sizes and time limits, parsing and printing.

/// Longest time limit accepted, in seconds (ten years; UNLIMITED is `None`).
/// Every later sum of a start time and a limit stays far from overflowing.
pub const MAX_TIME_LIMIT_SECS: u64 = 10 * 365 * 86400;

/// A size or time that could not be parsed; the message says what is accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnitError {
    #[error("invalid memory size '{0}': expected a number with an optional K, M, G or T suffix (e.g. 500M, 4G)")]
    Memory(String),
    #[error("invalid time limit '{0}': expected minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS or UNLIMITED")]
    Time(String),
    #[error("time limit '{0}' is longer than ten years; give UNLIMITED for no limit")]
    TimeTooLong(String),
}

/// Parses a memory size into MiB, the way Slurm does: a plain number is MB
/// (MiB), suffixes K, M, G, T are binary multiples, a trailing `B` is allowed.
/// Kilobyte amounts round up to whole MiB.
pub fn parse_mem_mib(s: &str) -> Result<u64, UnitError> {
    let err = || UnitError::Memory(s.to_string());
    let t = s.trim();
    let t = t
        .strip_suffix(['B', 'b'])
        .filter(|r| r.ends_with(|c: char| c.is_ascii_alphabetic()))
        .unwrap_or(t);
    let (num, unit) = match t.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => t.split_at(i),
        None => (t, ""),
    };
    if num.is_empty() {
        return Err(err());
    }
    let n: u64 = num.parse().map_err(|_| err())?;
    let mib = match unit.to_ascii_uppercase().as_str() {
        "" | "M" => Some(n),
        "K" => Some(n.div_ceil(1024)),
        "G" => n.checked_mul(1024),
        "T" => n.checked_mul(1024 * 1024),
        _ => None,
    };
    mib.ok_or_else(err)
}

/// Parses a Slurm time limit into seconds; `Ok(None)` is UNLIMITED.
///
/// Forms: `M`, `M:S`, `H:M:S`, `D-H`, `D-H:M`, `D-H:M:S`, and
/// `UNLIMITED`/`INFINITE`. Hours may exceed 24 in `H:M:S`.
pub fn parse_time_limit(s: &str) -> Result<Option<u64>, UnitError> {
    let err = || UnitError::Time(s.to_string());
    let t = s.trim();
    if t.eq_ignore_ascii_case("unlimited") || t.eq_ignore_ascii_case("infinite") {
        return Ok(None);
    }
    let num = |p: &str| -> Result<u64, UnitError> {
        if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
            return Err(err());
        }
        p.parse::<u64>().map_err(|_| err())
    };
    let (days, rest) = match t.split_once('-') {
        Some((d, r)) => (Some(num(d)?), r),
        None => (None, t),
    };
    let parts: Vec<&str> = rest.split(':').collect();
    // Checked: an overflowing limit is refused, never wrapped.
    let sum = |terms: &[(u64, u64)]| -> Option<u64> {
        terms.iter().try_fold(0u64, |acc, (n, unit)| {
            acc.checked_add(n.checked_mul(*unit)?)
        })
    };
    let secs = match (days, parts.as_slice()) {
        (None, [m]) => sum(&[(num(m)?, 60)]),
        (None, [m, s]) => sum(&[(num(m)?, 60), (num(s)?, 1)]),
        (None, [h, m, s]) => sum(&[(num(h)?, 3600), (num(m)?, 60), (num(s)?, 1)]),
        (Some(d), [h]) => sum(&[(d, 86400), (num(h)?, 3600)]),
        (Some(d), [h, m]) => sum(&[(d, 86400), (num(h)?, 3600), (num(m)?, 60)]),
        (Some(d), [h, m, s]) => sum(&[(d, 86400), (num(h)?, 3600), (num(m)?, 60), (num(s)?, 1)]),
        _ => return Err(err()),
    };
    match secs {
        Some(s) if s <= MAX_TIME_LIMIT_SECS => Ok(Some(s)),
        _ => Err(UnitError::TimeTooLong(s.to_string())),
    }
}

/// squeue's `%M` style: `M:SS`, `H:MM:SS`, `D-HH:MM:SS`.
pub fn format_duration_short(secs: i64) -> String {
    let secs = secs.max(0);
    let (d, h, m, s) = (secs / 86400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
    if d > 0 {
        format!("{d}-{h:02}:{m:02}:{s:02}")
    } else if h > 0 {
        format!("{h}:{m:02}:{s:02}")
    } else {
        format!("{m}:{s:02}")
    }
}

/// sacct's `Elapsed` style: `HH:MM:SS`, or `D-HH:MM:SS` past a day.
pub fn format_duration_long(secs: i64) -> String {
    let secs = secs.max(0);
    let (d, h, m, s) = (secs / 86400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
    if d > 0 {
        format!("{d}-{h:02}:{m:02}:{s:02}")
    } else {
        format!("{h:02}:{m:02}:{s:02}")
    }
}

/// A byte count the way sacct prints memory by default: KiB with `K`
/// (`307200K`), `0` for none.
pub fn format_kib(bytes: u64) -> String {
    if bytes == 0 {
        "0".into()
    } else {
        format!("{}K", bytes.div_ceil(1024))
    }
}

/// A CPU time the way sacct prints TotalCPU: `MM:SS.mmm` under an hour,
/// `HH:MM:SS` under a day, else `D-HH:MM:SS`.
pub fn format_cpu_time(usec: u64) -> String {
    let secs = usec / 1_000_000;
    let (d, h, m, s) = (secs / 86400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
    if secs < 3600 {
        format!("{m:02}:{s:02}.{:03}", usec / 1000 % 1000)
    } else if d == 0 {
        format!("{h:02}:{m:02}:{s:02}")
    } else {
        format!("{d}-{h:02}:{m:02}:{s:02}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_units() {
        assert_eq!(parse_mem_mib("100"), Ok(100));
        assert_eq!(parse_mem_mib("100M"), Ok(100));
        assert_eq!(parse_mem_mib("100MB"), Ok(100));
        assert_eq!(parse_mem_mib("4G"), Ok(4096));
        assert_eq!(parse_mem_mib("4gb"), Ok(4096));
        assert_eq!(parse_mem_mib("1T"), Ok(1024 * 1024));
        assert_eq!(parse_mem_mib("1500K"), Ok(2));
        for bad in ["", "G", "4X", "4.5G", "-1", "4GG", "B"] {
            assert!(parse_mem_mib(bad).is_err(), "{bad} accepted");
        }
        assert!(parse_mem_mib("99999999999999999T").is_err());
    }

    #[test]
    fn time_units() {
        assert_eq!(parse_time_limit("10"), Ok(Some(600)));
        assert_eq!(parse_time_limit("10:30"), Ok(Some(630)));
        assert_eq!(parse_time_limit("30:00:05"), Ok(Some(30 * 3600 + 5)));
        assert_eq!(parse_time_limit("2-3"), Ok(Some(2 * 86400 + 3 * 3600)));
        assert_eq!(
            parse_time_limit("2-3:04"),
            Ok(Some(2 * 86400 + 3 * 3600 + 240))
        );
        assert_eq!(parse_time_limit("1-0:0:1"), Ok(Some(86401)));
        assert_eq!(parse_time_limit("UNLIMITED"), Ok(None));
        assert_eq!(parse_time_limit("infinite"), Ok(None));
        // Overflowing or absurd limits are refused, never wrapped.
        for huge in [
            "307445734561825861",
            "18446744073709551615:59",
            "99999999-0",
            "5256001",
        ] {
            assert_eq!(
                parse_time_limit(huge),
                Err(UnitError::TimeTooLong(huge.into())),
                "{huge}"
            );
        }
        assert_eq!(parse_time_limit("5256000"), Ok(Some(5_256_000 * 60)));
        for bad in ["", "1:2:3:4", "a", "1-", "-1", "1-2-3", "1:", "1h"] {
            assert!(parse_time_limit(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn durations_print_like_slurm() {
        assert_eq!(format_duration_short(5), "0:05");
        assert_eq!(format_duration_short(3725), "1:02:05");
        assert_eq!(format_duration_short(90061), "1-01:01:01");
        assert_eq!(format_duration_long(5), "00:00:05");
        assert_eq!(format_duration_long(90061), "1-01:01:01");
    }

    #[test]
    fn usage_formats() {
        assert_eq!(format_kib(0), "0");
        assert_eq!(format_kib(300 << 20), "307200K");
        assert_eq!(format_kib(1), "1K");
        assert_eq!(format_cpu_time(1_234_567), "00:01.234");
        assert_eq!(format_cpu_time(3_725_000_000), "01:02:05");
        assert_eq!(format_cpu_time(90_000_000_000), "1-01:00:00");
    }
}
