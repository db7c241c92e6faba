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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boottime_goes_on() {
        let a = boottime();
        std::thread::sleep(Duration::from_millis(5));
        assert!(boottime() >= a + Duration::from_millis(5));
    }
}
