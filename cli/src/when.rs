//! Slurm's time forms (`--begin`, `sacct -S/-E`), read in local time:
//! `now[{+|-}COUNT[seconds|minutes|hours|days|weeks]]`, `today`,
//! `tomorrow`, `midnight`, `noon`, `elevenses` (11:00), `fika` (15:00),
//! `teatime` (16:00), `HH:MM[:SS][AM|PM]` (the next such time),
//! `YYYY-MM-DD[THH:MM[:SS]]`, `MMDD[YY]`, `MM/DD[/YY]` and `MM.DD[.YY]`,
//! each date optionally followed by `-HH:MM[:SS]`.

use anyhow::{bail, Result};

/// Local calendar time, as `mktime` reads it.
#[derive(Clone, Copy)]
struct Local {
    year: i32,
    month: i32,
    day: i32,
    hour: i32,
    minute: i32,
    second: i32,
}

fn local(t: i64) -> Local {
    // SAFETY: localtime_r writes into the tm we own.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    let tt = t as libc::time_t;
    unsafe { libc::localtime_r(&tt, &mut tm) };
    Local {
        year: tm.tm_year + 1900,
        month: tm.tm_mon + 1,
        day: tm.tm_mday,
        hour: tm.tm_hour,
        minute: tm.tm_min,
        second: tm.tm_sec,
    }
}

fn seconds(l: Local) -> Option<i64> {
    // SAFETY: mktime reads and normalizes the tm we own.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    tm.tm_year = l.year - 1900;
    tm.tm_mon = l.month - 1;
    tm.tm_mday = l.day;
    tm.tm_hour = l.hour;
    tm.tm_min = l.minute;
    tm.tm_sec = l.second;
    tm.tm_isdst = -1;
    let s = unsafe { libc::mktime(&mut tm) };
    (s != -1).then_some(s as i64)
}

/// `HH:MM[:SS][AM|PM]`.
fn clock(s: &str) -> Option<(i32, i32, i32)> {
    let upper = s.to_ascii_uppercase();
    let (body, half) = match upper.strip_suffix("AM").or(upper.strip_suffix("PM")) {
        Some(b) => (b.trim().to_string(), Some(upper.ends_with("PM"))),
        None => (upper.clone(), None),
    };
    let parts: Vec<i32> = body
        .split(':')
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    let (mut h, m, sec) = match parts.as_slice() {
        [h, m] => (*h, *m, 0),
        [h, m, s] => (*h, *m, *s),
        _ => return None,
    };
    match half {
        Some(_) if !(1..=12).contains(&h) => return None,
        Some(pm) => h = h % 12 + if pm { 12 } else { 0 },
        None => {}
    }
    ((0..24).contains(&h) && (0..60).contains(&m) && (0..61).contains(&sec)).then_some((h, m, sec))
}

/// A date: `YYYY-MM-DD`, `MMDD[YY]`, `MM/DD[/YY]`, `MM.DD[.YY]`.
fn date(s: &str, now: Local) -> Option<(i32, i32, i32)> {
    let year = |y: Option<&str>| -> Option<i32> {
        match y {
            None => Some(now.year),
            Some(y) if y.len() == 2 => y.parse::<i32>().ok().map(|y| 2000 + y),
            Some(y) if y.len() == 4 => y.parse().ok(),
            _ => None,
        }
    };
    let (y, m, d) = if s.len() == 10 && s.as_bytes()[4] == b'-' {
        let p: Vec<&str> = s.split('-').collect();
        (p[0].parse().ok()?, p[1].parse().ok()?, p[2].parse().ok()?)
    } else if let Some(sep) = ['/', '.'].into_iter().find(|c| s.contains(*c)) {
        let p: Vec<&str> = s.split(sep).collect();
        if !(2..=3).contains(&p.len()) {
            return None;
        }
        (
            year(p.get(2).copied())?,
            p[0].parse().ok()?,
            p[1].parse().ok()?,
        )
    } else if (s.len() == 4 || s.len() == 6) && s.bytes().all(|b| b.is_ascii_digit()) {
        (
            year(s.get(4..))?,
            s[0..2].parse().ok()?,
            s[2..4].parse().ok()?,
        )
    } else {
        return None;
    };
    ((1..=12).contains(&m) && (1..=31).contains(&d)).then_some((y, m, d))
}

/// `now+N[units]` or `now-N[units]`: `now` moved by N.
fn relative(rest: &str, now: i64) -> Option<i64> {
    if rest.is_empty() {
        return Some(now);
    }
    let sign = match rest.as_bytes()[0] {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    let rest = &rest[1..];
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    let n: i64 = digits.parse().ok()?;
    let unit = match &rest[digits.len()..] {
        "" | "s" | "sec" | "second" | "seconds" => 1,
        "m" | "min" | "minute" | "minutes" => 60,
        "h" | "hour" | "hours" => 3600,
        "d" | "day" | "days" => 86400,
        "w" | "week" | "weeks" => 604800,
        _ => return None,
    };
    Some(now + sign * n * unit)
}

/// Parses `s` as Slurm does, `now` being the current unix time.
pub fn parse(s: &str, now: i64) -> Result<i64> {
    let invalid = || {
        anyhow::anyhow!(
            "invalid time specification '{s}' (e.g. now+1hour, 16:00, tomorrow, 2026-12-24T08:00)"
        )
    };
    let word = s.trim().to_ascii_lowercase();
    let today = local(now);
    let at = |day_offset: i32, h: i32, m: i32, sec: i32| {
        seconds(Local {
            day: today.day + day_offset,
            hour: h,
            minute: m,
            second: sec,
            ..today
        })
    };
    // A named hour: today's, or tomorrow's once it has passed.
    let next = |h: i32, m: i32, sec: i32| {
        let t = at(0, h, m, sec)?;
        if t > now {
            Some(t)
        } else {
            at(1, h, m, sec)
        }
    };
    let t = match word.as_str() {
        w if w.starts_with("now") => relative(&w[3..], now),
        "today" => at(0, 0, 0, 0),
        "tomorrow" => at(1, 0, 0, 0),
        "midnight" => next(0, 0, 0),
        "noon" => next(12, 0, 0),
        "elevenses" => next(11, 0, 0),
        "fika" => next(15, 0, 0),
        "teatime" => next(16, 0, 0),
        w => match clock(w) {
            Some((h, m, sec)) => next(h, m, sec),
            None => {
                let (d, time) = match w.split_once('t') {
                    Some((d, t)) => (d, Some(t)),
                    None => match w.rsplit_once('-') {
                        Some((d, t)) if t.contains(':') => (d, Some(t)),
                        _ => (w, None),
                    },
                };
                let (y, mo, da) = date(d, today).ok_or_else(invalid)?;
                let (h, mi, se) = match time {
                    Some(t) => clock(t).ok_or_else(invalid)?,
                    None => (0, 0, 0),
                };
                seconds(Local {
                    year: y,
                    month: mo,
                    day: da,
                    hour: h,
                    minute: mi,
                    second: se,
                })
            }
        },
    };
    match t {
        Some(t) => Ok(t),
        None => bail!(invalid()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slurms_forms() {
        let now = seconds(Local {
            year: 2026,
            month: 11,
            day: 28,
            hour: 12,
            minute: 30,
            second: 0,
        })
        .unwrap();
        assert_eq!(parse("now", now).unwrap(), now);
        assert_eq!(parse("now+1hour", now).unwrap(), now + 3600);
        assert_eq!(parse("now+90", now).unwrap(), now + 90);
        assert_eq!(parse("now-2days", now).unwrap(), now - 2 * 86400);
        let at = |d, h, m| {
            seconds(Local {
                year: 2026,
                month: 11,
                day: d,
                hour: h,
                minute: m,
                second: 0,
            })
            .unwrap()
        };
        assert_eq!(parse("16:00", now).unwrap(), at(28, 16, 0));
        assert_eq!(parse("4:00PM", now).unwrap(), at(28, 16, 0));
        assert_eq!(
            parse("10:00", now).unwrap(),
            at(29, 10, 0),
            "passed: tomorrow"
        );
        assert_eq!(parse("midnight", now).unwrap(), at(29, 0, 0));
        assert_eq!(parse("teatime", now).unwrap(), at(28, 16, 0));
        assert_eq!(parse("tomorrow", now).unwrap(), at(29, 0, 0));
        assert_eq!(parse("2026-11-30", now).unwrap(), at(30, 0, 0));
        assert_eq!(parse("2026-11-30T08:15", now).unwrap(), at(30, 8, 15));
        assert_eq!(parse("11/30", now).unwrap(), at(30, 0, 0));
        assert_eq!(parse("113026", now).unwrap(), at(30, 0, 0));
        assert_eq!(parse("11.30.26-08:15", now).unwrap(), at(30, 8, 15));
        for bad in ["soon", "now+1fortnight", "25:00", "13/45", "2026-13-01", ""] {
            let e = parse(bad, now).unwrap_err().to_string();
            assert!(e.starts_with("invalid time specification"), "{bad}: {e}");
        }
    }
}
