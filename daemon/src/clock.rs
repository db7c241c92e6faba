//! The clock the daemons time leases by.

use std::time::Duration;

/// `CLOCK_BOOTTIME` now: monotonic, and unlike `Instant` (`CLOCK_MONOTONIC`)
/// it keeps counting while the machine is suspended or its virtual machine
/// paused, so a lease timed by it never looks younger than it is.
pub fn boottime() -> Duration {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME)
        .map(Duration::from)
        .unwrap_or_default()
}

/// Unix milliseconds of a local wall-clock time as logs write it,
/// `YYYY-MM-DD HH:MM:SS[.mmm]` (the machine's time zone, as `mktime` reads
/// it); `None` for text that is not one.
pub fn local_text_ms(text: &str) -> Option<i64> {
    let (date, time) = text.trim().split_once(' ')?;
    let mut d = date.splitn(3, '-').map(|p| p.parse::<i32>().ok());
    let (year, month, day) = (d.next()??, d.next()??, d.next()??);
    let (hms, millis) = match time.split_once('.') {
        Some((hms, frac)) => {
            let digits: String = frac.chars().take(3).collect();
            let scale = 10i64.pow(3 - digits.len() as u32);
            (hms, digits.parse::<i64>().ok()? * scale)
        }
        None => (time, 0),
    };
    let mut t = hms.splitn(3, ':').map(|p| p.parse::<i32>().ok());
    let (hour, minute, second) = (t.next()??, t.next()??, t.next()??);
    let valid = (1..=12).contains(&month)
        && (1..=31).contains(&day)
        && (0..24).contains(&hour)
        && (0..60).contains(&minute)
        && (0..=60).contains(&second);
    if !valid {
        return None;
    }
    // SAFETY: mktime reads and normalizes the tm this function owns.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    tm.tm_year = year - 1900;
    tm.tm_mon = month - 1;
    tm.tm_mday = day;
    tm.tm_hour = hour;
    tm.tm_min = minute;
    tm.tm_sec = second;
    tm.tm_isdst = -1;
    // SAFETY: as above; mktime only reads and normalizes that tm.
    let secs = unsafe { libc::mktime(&mut tm) };
    (secs != -1).then(|| secs * 1000 + millis)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_times_read_in_local_time() {
        let a = local_text_ms("2026-11-24 08:06:42.661").unwrap();
        let b = local_text_ms("2026-11-24 08:06:43").unwrap();
        assert_eq!(b - a, 339);
        assert_eq!(local_text_ms("2026-11-24 08:06:42.6").unwrap() - a, -61);
        for bad in [
            "",
            "2026-11-24",
            "2026-13-01 00:00:00",
            "x 08:06:42",
            "2026-11-24 25:00:00",
        ] {
            assert_eq!(local_text_ms(bad), None, "{bad}");
        }
    }

    #[test]
    fn boottime_goes_on() {
        let a = boottime();
        std::thread::sleep(Duration::from_millis(5));
        assert!(boottime() >= a + Duration::from_millis(5));
    }
}
