//! An instance whose MPS server is handling a fatal GPU error: MPS tears
//! down every client there and refuses new ones until all of those have
//! exited (seen on an H100: docs/hardware.md). While it recovers, the node
//! binds no new shared process there, as while its MPS server is down.
//! Also when a fault happened, as far as the node may believe its log
//! ([`fault_time`]), and whether a job's script had ended before it
//! ([`ended_before`]).

use std::collections::BTreeMap;

/// The instances recovering from a fatal GPU error, with the client
/// processes their MPS server tore down.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct MpsRecovery {
    torn_down: BTreeMap<String, Vec<u32>>,
}

impl MpsRecovery {
    /// The MPS server of `uuid` tore down `pids` (a later fault there adds
    /// its own).
    pub fn fault(&mut self, uuid: &str, pids: &[u32]) {
        let left = self.torn_down.entry(uuid.to_string()).or_default();
        for p in pids {
            if !left.contains(p) {
                left.push(*p);
            }
        }
    }

    /// Forgets the torn-down processes that are gone (`alive` says which
    /// are not); returns the instances whose recovery ended with that.
    pub fn exited(&mut self, alive: impl Fn(u32) -> bool) -> Vec<String> {
        let mut ended = Vec::new();
        self.torn_down.retain(|uuid, pids| {
            pids.retain(|p| alive(*p));
            if pids.is_empty() {
                ended.push(uuid.clone());
            }
            !pids.is_empty()
        });
        ended
    }

    /// Whether a new shared process may not be bound to `uuid`: its MPS
    /// server is down, or it is recovering from a fatal GPU error.
    pub fn closed(&self, uuid: &str, server_down: bool) -> bool {
        server_down || self.torn_down.contains_key(uuid)
    }
}

/// How far before the previous read of its log a fault's logged time may
/// be and still be believed (the two clocks' reading, a line written
/// just before that read).
const FAULT_TIME_SLACK_MS: i64 = 2_000;

/// A fault's time as its log line says it, believed only between the
/// previous read of the log (less the slack) and `now`: a time zone the
/// server read differently, a daylight-saving hour read twice, a clock
/// stepped meanwhile would otherwise misplace it, and a fault placed too
/// late spares its victims. Otherwise the earliest it can have been (the
/// previous read), or unknown (the first read): every process that was
/// there then counts as hit.
pub fn fault_time(logged: Option<i64>, read_before: Option<i64>, now: i64) -> Option<i64> {
    let lowest = read_before.map(|t| t - FAULT_TIME_SLACK_MS);
    match logged {
        Some(t) if t <= now && lowest.is_none_or(|l| t >= l) => Some(t),
        _ => read_before,
    }
}

/// Whether a script that ended within second `end_time` (unix seconds,
/// as the shepherd records it) ended before `fault_ms` (unix ms).
pub fn ended_before(end_time: i64, fault_ms: i64) -> bool {
    end_time.saturating_add(1).saturating_mul(1000) <= fault_ms
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_instance_recovers_once_every_torn_down_process_is_gone() {
        let mut r = MpsRecovery::default();
        assert!(!r.closed("GPU-a", false));
        assert!(r.closed("GPU-a", true), "a server that is down");
        r.fault("GPU-a", &[474, 494]);
        r.fault("GPU-b", &[]);
        assert!(r.closed("GPU-a", false));
        // A fault that tore down nothing leaves nothing to wait for.
        assert_eq!(r.exited(|_| true), vec!["GPU-b".to_string()]);
        assert!(r.exited(|p| p == 494).is_empty(), "494 still runs");
        assert!(r.closed("GPU-a", false));
        assert_eq!(r.exited(|_| false), vec!["GPU-a".to_string()]);
        assert!(!r.closed("GPU-a", false));
    }

    #[test]
    fn a_faults_logged_time_is_believed_only_between_two_reads() {
        assert_eq!(fault_time(Some(5_000), Some(4_000), 6_000), Some(5_000));
        assert_eq!(
            fault_time(Some(2_500), Some(4_000), 6_000),
            Some(2_500),
            "slack"
        );
        // Read an hour late (DST, another time zone) or early: the
        // earliest it can have been.
        assert_eq!(fault_time(Some(3_605_000), Some(4_000), 6_000), Some(4_000));
        assert_eq!(fault_time(Some(1_000), Some(4_000), 6_000), Some(4_000));
        assert_eq!(fault_time(None, Some(4_000), 6_000), Some(4_000));
        // The first read: only a time not after now is taken.
        assert_eq!(fault_time(Some(5_000), None, 6_000), Some(5_000));
        assert_eq!(fault_time(Some(7_000), None, 6_000), None);
    }

    #[test]
    fn a_script_ended_before_a_fault_only_when_its_whole_second_was_before() {
        assert!(ended_before(100, 101_000));
        assert!(
            !ended_before(100, 100_999),
            "within its second: cannot tell"
        );
        assert!(!ended_before(100, 99_000));
        assert!(!ended_before(i64::MAX, 0));
    }
}
