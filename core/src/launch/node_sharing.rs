//! `--exclusive` (a node to the job alone) and `--exclusive=user` (a node
//! shared only with the same user's jobs): which nodes a job is admitted
//! to, given who runs there now.

use super::{NodeView, QueuedJob};

pub use crate::allocation::NodeSharing;

/// What holds a node now against jobs that would join it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeOccupancy {
    /// The users (uids) of the jobs running there.
    pub users: Vec<u32>,
    /// A running job has it alone.
    pub alone: bool,
    /// Running jobs share it only with these users' jobs (`--exclusive=user`).
    pub user_only: Option<u32>,
}

/// Whether `job` may join a node occupied as `o`.
pub fn admits(o: &NodeOccupancy, job: &QueuedJob<'_>) -> bool {
    if o.alone || o.user_only.is_some_and(|u| u != job.uid) {
        return false;
    }
    match job.sharing {
        None => true,
        Some(NodeSharing::Alone) => o.users.is_empty(),
        Some(NodeSharing::UserOnly) => o.users.iter().all(|u| *u == job.uid),
    }
}

/// Each node's occupancy through one launch pass, by node index.
pub(super) struct Occupancies {
    nodes: Vec<NodeOccupancy>,
    /// Some node is held alone or for a user: jobs without `--exclusive`
    /// must look (until then they need not, which keeps a pass over
    /// thousands of nodes as fast as without the option).
    held: bool,
    /// Nodes held in this pass for a job that could not start yet (one
    /// wanting a node alone, or on several nodes): `Some(until)`, when it
    /// is expected to start there, where time limits say.
    holds: Vec<Option<Option<i64>>>,
    /// Nodes kept for one job (preemption made room there for it).
    kept_for: Vec<Option<crate::job::JobId>>,
    now: i64,
}

impl Occupancies {
    /// The nodes' occupancy at the start of a pass at `now`.
    pub(super) fn of(
        nodes: &[NodeView<'_>],
        now: i64,
        reserved: &[(usize, crate::job::JobId)],
    ) -> Occupancies {
        let occupied: Vec<NodeOccupancy> = nodes.iter().map(|n| n.occupancy.clone()).collect();
        let mut kept_for = vec![None; nodes.len()];
        for (ni, job) in reserved.iter().filter(|(ni, _)| *ni < nodes.len()) {
            kept_for[*ni] = Some(*job);
        }
        let held =
            !reserved.is_empty() || occupied.iter().any(|o| o.alone || o.user_only.is_some());
        Occupancies {
            nodes: occupied,
            held,
            holds: vec![None; nodes.len()],
            kept_for,
            now,
        }
    }

    /// Whether `job` may join node `ni` now ([`admits`]): where the node is
    /// held for another job, only if it will have ended by the time that
    /// one is expected to start there (backfill).
    #[inline]
    pub(super) fn admits(&self, ni: usize, job: &QueuedJob<'_>) -> bool {
        match self.kept_for[ni] {
            Some(k) if k != job.id => return false,
            // Emptied for it: no other job's hold keeps it out.
            Some(_) => return admits(&self.nodes[ni], job),
            None => {}
        }
        if let Some(until) = self.holds[ni] {
            if !until.is_some_and(|t| job.ends_by(self.now, t)) {
                return false;
            }
        }
        self.admits_anywhere(job) || admits(&self.nodes[ni], job)
    }

    /// Whether `job` may join any node, as far as who runs there goes:
    /// it does not want one alone, and no node is held.
    #[inline]
    pub(super) fn admits_anywhere(&self, job: &QueuedJob<'_>) -> bool {
        !self.held && job.sharing.is_none()
    }

    /// `job` started on node `ni` in this pass: a job with the node alone
    /// (or for its user) leaves nothing of it to later jobs of the pass, and
    /// a later job wanting a node alone does not take one started on in it.
    pub(super) fn note_start(&mut self, ni: usize, job: &QueuedJob<'_>) {
        let o = &mut self.nodes[ni];
        o.users.push(job.uid);
        match job.sharing {
            Some(NodeSharing::Alone) => o.alone = true,
            Some(NodeSharing::UserOnly) => o.user_only = Some(job.uid),
            None => return,
        }
        self.held = true;
    }

    /// Keeps node `ni` from every later job of the pass that will not have
    /// ended by `until` (all of them where it is unknown): held for a job
    /// expected to start there then.
    pub(super) fn hold_node(&mut self, ni: usize, until: Option<i64>) {
        self.holds[ni] = Some(until);
        self.held = true;
    }

    /// Keeps every node from every later job of the pass (strict priority
    /// order: a job before them could not start).
    pub(super) fn hold_all(&mut self) {
        self.holds.iter_mut().for_each(|h| *h = Some(None));
        self.held = true;
    }

    /// A job wanting a node alone (or for its user) that could not start
    /// in this pass keeps the node that will empty first (by time limits,
    /// else fewest jobs) from later jobs of the pass, so a stream of other
    /// jobs cannot starve it; a node held alone still takes jobs that will
    /// have ended by then (backfill). Returns when it is expected to start
    /// there, where known.
    pub(super) fn hold_for(&mut self, job: &QueuedJob<'_>, nodes: &[NodeView<'_>]) -> Option<i64> {
        let sharing = job.sharing?;
        let best = nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.up && n.could_run(job))
            .min_by_key(|(ni, n)| {
                (
                    n.expected_empty.unwrap_or(i64::MAX),
                    self.nodes[*ni].users.len(),
                )
            });
        let (ni, n) = best?;
        match sharing {
            NodeSharing::Alone => {
                self.hold_node(ni, n.expected_empty);
                return n.expected_empty;
            }
            NodeSharing::UserOnly => self.nodes[ni].user_only = Some(job.uid),
        }
        self.held = true;
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::GpuRequest;
    use crate::launch::{
        CaseLaunch, Decision, ExclusiveLaunch, LaunchInput, LaunchPolicy, PendingReason,
    };
    use crate::resources::{JobResources, MemoryRequest, NodeResources};

    fn node(name: &str, occupancy: NodeOccupancy) -> NodeView<'_> {
        let big = NodeResources {
            cpus: 64,
            memory_mib: 1 << 20,
        };
        NodeView {
            shared_waiting: 0,
            shared_starting: 0,
            shared_room: None,
            host_mem_low: false,
            expected_empty: None,
            name,
            up: true,
            worker_limit: 8,
            workers_used: occupancy.users.len() as u32,
            shared_running: occupancy.users.len() as u32,
            total: big,
            free: big,
            instances: Vec::new(),
            occupancy,
        }
    }

    fn job(id: u64, uid: u32, sharing: Option<NodeSharing>, gpu: &GpuRequest) -> QueuedJob<'_> {
        QueuedJob {
            share: None,
            id,
            gpu,
            resources: JobResources {
                cpus: 1,
                memory: MemoryRequest::Unspecified,
            },
            nodes: None,
            uid,
            sharing,
            width: 1,
            time_limit: None,
            priority: 0,
        }
    }

    #[test]
    fn who_may_join_a_node() {
        let g = GpuRequest::default();
        let used_by = |users: &[u32]| NodeOccupancy {
            users: users.to_vec(),
            ..Default::default()
        };
        let alone = job(1, 7, Some(NodeSharing::Alone), &g);
        let mine = job(2, 7, Some(NodeSharing::UserOnly), &g);
        let plain = job(3, 8, None, &g);
        assert!(admits(&used_by(&[]), &alone));
        assert!(!admits(&used_by(&[7]), &alone));
        assert!(admits(&used_by(&[7, 7]), &mine));
        assert!(!admits(&used_by(&[7, 8]), &mine));
        assert!(admits(&used_by(&[7]), &plain));
        let held = |alone, user_only| NodeOccupancy {
            users: vec![7],
            alone,
            user_only,
        };
        assert!(!admits(&held(true, None), &plain));
        assert!(!admits(&held(false, Some(7)), &plain));
        assert!(admits(&held(false, Some(7)), &job(4, 7, None, &g)));
    }

    #[test]
    fn a_job_alone_is_not_joined_in_the_same_pass_and_is_not_starved() {
        let g = GpuRequest::default();
        let free = [node("n1", NodeOccupancy::default())];
        let shared = [job(1, 7, Some(NodeSharing::Alone), &g), job(2, 8, None, &g)];
        let p = CaseLaunch.plan(&LaunchInput {
            start_ahead: None,
            now: 0,
            reserved: &[],
            scheduler: Default::default(),
            early: None,
            isolated: &[],
            shared: &shared,
            nodes: &free,
        });
        let launched: Vec<u64> = p
            .decisions
            .iter()
            .filter_map(|d| match d {
                Decision::Launch { job, .. } => Some(*job),
                _ => None,
            })
            .collect();
        assert_eq!(launched, [1], "{p:?}");
        assert!(p.waiting.contains(&(2, PendingReason::Resources)), "{p:?}");
        // A node in use: the job alone waits with Resources, and the node
        // is kept from the jobs behind it (they would starve it).
        let busy = [node(
            "n1",
            NodeOccupancy {
                users: vec![8],
                ..Default::default()
            },
        )];
        let p = CaseLaunch.plan(&LaunchInput {
            start_ahead: None,
            now: 0,
            reserved: &[],
            scheduler: Default::default(),
            early: None,
            isolated: &[],
            shared: &shared,
            nodes: &busy,
        });
        assert!(p.decisions.is_empty(), "{p:?}");
        assert!(p.waiting.contains(&(1, PendingReason::Resources)));
        assert!(p.waiting.contains(&(2, PendingReason::Resources)));
        // Two nodes, one busy: the job alone takes the idle one.
        let two = [busy[0].clone(), node("n2", NodeOccupancy::default())];
        let p = ExclusiveLaunch.plan(&LaunchInput {
            start_ahead: None,
            now: 0,
            reserved: &[],
            scheduler: Default::default(),
            early: None,
            isolated: &[],
            shared: &shared[..1],
            nodes: &two,
        });
        // (ExclusiveLaunch needs an instance per job: these nodes have
        // none, so it waits; CaseLaunch runs it on n2.)
        assert!(p.decisions.is_empty());
        let p = CaseLaunch.plan(&LaunchInput {
            start_ahead: None,
            now: 0,
            reserved: &[],
            scheduler: Default::default(),
            early: None,
            isolated: &[],
            shared: &shared[..1],
            nodes: &two,
        });
        assert!(
            matches!(&p.decisions[..], [Decision::Launch { node, .. }] if node == "n2"),
            "{p:?}"
        );
    }
}
