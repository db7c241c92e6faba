//! Admission of shared jobs by what their node can take now: a shared job
//! is started where its first GPU process is expected to be placed soon,
//! or while few enough jobs there already wait for a placement; and not
//! where the host is short of memory unless it set its own aside.
//!
//! A shared job started long before the GPU can take it does its host
//! setup and then waits at its first CUDA call, holding a core and its
//! host memory. Starting a few ahead (`start_ahead` per node) overlaps
//! their setup with others' GPU work; starting every job a worker allows
//! only piles them up.

use super::NodeView;
use crate::resources::{JobResources, MemoryRequest};

/// How many shared jobs may wait for a GPU placement on one node, by
/// default, before no more are started there (`--shared-start-ahead`).
pub const DEFAULT_START_AHEAD: u32 = 2;

/// The most `--shared-start-ahead` may be.
pub const MOST_START_AHEAD: u32 = 1024;

/// How long after its start a shared job with no GPU reservation yet
/// counts as on its way to one (its host setup), seconds.
pub const SETUP_SECS: i64 = 15;

/// A shared job whose process has waited this long (seconds) for a
/// placement no longer counts as waiting ahead of the jobs not yet
/// started: a task bigger than any free instance, or an instance a
/// bypassing job holds, cannot keep others from starting for good, and
/// while the GPU takes nothing at most `start_ahead` more jobs start there
/// in each such stretch.
pub const STUCK_WAITING_SECS: i64 = 120;

/// The default share of a node's host memory kept free of shared jobs
/// that set none aside (`--host-mem-reserve`), percent.
pub const DEFAULT_HOST_MEM_RESERVE_PCT: u32 = 10;

/// What one node admits during a launch pass.
#[derive(Debug, Clone, Copy)]
pub(super) struct Admission {
    /// Compute its instances are expected to take at once, thousandths
    /// of a GPU, after the jobs on their way there; `None`: not bounded
    /// that way.
    room: Option<u32>,
    /// What a job of no known share counts.
    default_demand: u32,
    /// Shared jobs expected to wait for a placement there.
    waiting: u32,
    ahead: Option<u32>,
    host_mem_low: bool,
}

impl Admission {
    pub(super) fn of(node: &NodeView<'_>, ahead: Option<u32>) -> Admission {
        let mut a = Admission {
            room: node.shared_room.map(|r| r.compute),
            default_demand: node.shared_room.map_or(1, |r| r.default_demand.max(1)),
            waiting: node.shared_waiting,
            ahead,
            host_mem_low: node.host_mem_low,
        };
        // Jobs on their way to their first GPU call take the room first.
        for _ in 0..node.shared_starting {
            a.started(None);
        }
        a
    }

    fn demand(&self, share: Option<u32>) -> u32 {
        share.unwrap_or(self.default_demand).max(1)
    }

    /// Whether a shared job asking for `resources`, whose processes are
    /// expected to demand `share` (stated or learned; `None`: not known),
    /// may start here now.
    pub(super) fn admits(&self, resources: &JobResources, share: Option<u32>) -> bool {
        if self.host_mem_low && resources.memory == MemoryRequest::Unspecified {
            return false;
        }
        match (self.room, self.ahead) {
            (Some(room), Some(ahead)) => room >= self.demand(share) || self.waiting < ahead,
            _ => true,
        }
    }

    /// A shared job was started here: it takes the room, or waits.
    pub(super) fn started(&mut self, share: Option<u32>) {
        let demand = self.demand(share);
        match self.room.as_mut() {
            Some(r) if *r >= demand => *r -= demand,
            _ => self.waiting += 1,
        }
    }
}

/// The most `--host-mem-reserve` may be, percent.
pub const MOST_HOST_MEM_RESERVE_PCT: u32 = 90;

/// A `--shared-start-ahead` that does not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("shared start-ahead '{0}' must be a number of jobs from 0 to {MOST_START_AHEAD}, or off")]
pub struct StartAheadError(pub String);

/// Reads `--shared-start-ahead`: a number of jobs (0 to
/// [`MOST_START_AHEAD`]) or `off` (`None`: as many as workers allow).
pub fn parse_start_ahead(text: &str) -> Result<Option<u32>, StartAheadError> {
    let t = text.trim();
    if t.eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    match t.parse::<u32>() {
        Ok(n) if n <= MOST_START_AHEAD => Ok(Some(n)),
        _ => Err(StartAheadError(text.into())),
    }
}

/// Whether a node with `available_mib` of host memory available, of
/// `total_mib`, is below a reserve of `reserve_pct` percent.
pub fn host_mem_low(available_mib: Option<u64>, total_mib: u64, reserve_pct: u32) -> bool {
    available_mib
        .is_some_and(|a| a.saturating_mul(100) < total_mib.saturating_mul(reserve_pct as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admission(room: Option<u32>, waiting: u32, starting: u32, ahead: Option<u32>) -> Admission {
        let mut a = Admission {
            room,
            default_demand: 375,
            waiting,
            ahead,
            host_mem_low: false,
        };
        for _ in 0..starting {
            a.started(None);
        }
        a
    }

    const ANY: JobResources = JobResources {
        cpus: 1,
        memory: MemoryRequest::Unspecified,
    };

    #[test]
    fn jobs_start_while_the_gpu_takes_them_then_a_few_ahead() {
        // Room for three at the default demand, two ahead: five start.
        let mut a = admission(Some(3 * 375), 0, 0, Some(2));
        for _ in 0..5 {
            assert!(a.admits(&ANY, None));
            a.started(None);
        }
        assert!(!a.admits(&ANY, None));
        // Jobs known to demand little fit where the guess would not.
        let mut a = admission(Some(375), 0, 0, Some(0));
        for _ in 0..5 {
            assert!(a.admits(&ANY, Some(75)));
            a.started(Some(75));
        }
        assert!(!a.admits(&ANY, Some(75)));
    }

    #[test]
    fn jobs_on_their_way_take_the_room_first() {
        // Room for two, but three started moments ago: one of them will
        // wait, so only one more starts ahead.
        let mut a = admission(Some(2 * 375), 0, 3, Some(2));
        assert!(a.admits(&ANY, None));
        a.started(None);
        assert!(!a.admits(&ANY, None));
        // Two already waiting: none (jobs waiting too long are not
        // counted: `Cluster::shared_unplaced`).
        assert!(!admission(Some(0), 2, 0, Some(2)).admits(&ANY, None));
        // Unbounded room or no limit: as before.
        assert!(admission(None, 50, 0, Some(2)).admits(&ANY, None));
        assert!(admission(Some(0), 50, 0, None).admits(&ANY, None));
    }

    #[test]
    fn the_start_ahead_is_a_count_or_off() {
        assert_eq!(parse_start_ahead("2"), Ok(Some(2)));
        assert_eq!(parse_start_ahead(" OFF "), Ok(None));
        assert_eq!(parse_start_ahead("0"), Ok(Some(0)));
        assert!(parse_start_ahead("1025")
            .unwrap_err()
            .to_string()
            .contains("'1025'"));
        assert!(parse_start_ahead("-1").is_err());
        assert!(parse_start_ahead("lots").is_err());
    }

    #[test]
    fn a_host_short_of_memory_takes_only_jobs_that_set_memory_aside() {
        assert!(host_mem_low(Some(9), 100, 10));
        assert!(!host_mem_low(Some(10), 100, 10));
        assert!(!host_mem_low(None, 100, 10), "not said: not low");
        assert!(!host_mem_low(Some(0), 100, 0), "no reserve");
        let mut a = admission(None, 0, 0, None);
        a.host_mem_low = true;
        assert!(!a.admits(&ANY, None));
        let set_aside = JobResources {
            cpus: 1,
            memory: MemoryRequest::Mib(512),
        };
        assert!(a.admits(&set_aside, None));
    }
}
