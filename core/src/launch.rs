//! Launch policies: which queued jobs start now, and where.
//!
//! [`CaseLaunch`] is CASE Algorithm 1 (`shared/case-algorithms.md`): isolated
//! jobs first, each on the best-fitting free instance that satisfies its
//! request, drained of non-isolated tasks first; then non-isolated jobs,
//! launched without a device while the node has workers free.

use std::collections::HashSet;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::gpu::Instance;
use crate::job::{GpuRequest, JobId};
use crate::resources::{JobResources, NodeResources};

mod admission;
mod case;
mod exclusive;
mod instance_set;
mod most_free;
mod node_sharing;
mod scheduler_type;
mod wide;

pub use admission::{
    host_mem_low, parse_start_ahead, StartAheadError, DEFAULT_HOST_MEM_RESERVE_PCT,
    DEFAULT_START_AHEAD, MOST_HOST_MEM_RESERVE_PCT, MOST_START_AHEAD, SETUP_SECS,
    STUCK_WAITING_SECS,
};
pub use case::CaseLaunch;
pub use exclusive::ExclusiveLaunch;
use node_sharing::Occupancies;
pub use node_sharing::{NodeOccupancy, NodeSharing};
pub use scheduler_type::{SchedulerType, UnknownSchedulerType};

/// A queued job as the launch policy sees it.
#[derive(Debug, Clone, Copy)]
pub struct QueuedJob<'a> {
    pub id: JobId,
    pub gpu: &'a GpuRequest,
    /// The CPUs and memory it takes on its node.
    pub resources: JobResources,
    /// The nodes it may run on (`-w`, `-x`); any when `None`.
    pub nodes: Option<&'a crate::allocation::NodeChoice>,
    /// Its user, and how it shares its node (`--exclusive[=user]`).
    pub uid: u32,
    pub sharing: Option<NodeSharing>,
    /// How many nodes it runs on (`-N`); 1 for most.
    pub width: u32,
    /// Its time limit, seconds: a job with one may start on a node held
    /// for another if it will have ended by the time that one could start
    /// (backfill).
    pub time_limit: Option<i64>,
    /// The GPU share its processes are expected to demand (stated, else
    /// learned from earlier runs; thousandths of a GPU), for a shared
    /// job's admission; `None`: not known.
    pub share: Option<u32>,
    /// Its priority this pass, where the priority policy orders the
    /// queues (0 where it does not): the isolated and shared queues come
    /// each in that order; a policy that takes both as one (`exclusive`)
    /// merges them by it.
    pub priority: u64,
}

impl QueuedJob<'_> {
    /// Whether, started at `now`, it will have ended by `until` (its time
    /// limit says so; without one, never).
    fn ends_by(&self, now: i64, until: i64) -> bool {
        self.time_limit
            .is_some_and(|l| now.saturating_add(l) <= until)
    }

    /// Whether it may run on `node` (its `-w`/`-x`).
    fn may_use(&self, node: &NodeView<'_>) -> bool {
        self.nodes.is_none_or(|c| c.allows(node.name))
    }

    /// Whether it may start on `node` now: its `-w`/`-x`, and who runs
    /// there as of this pass, `occupancy` (`--exclusive`,
    /// [`node_sharing::admits`]).
    #[inline]
    fn may_join(&self, node: &NodeView<'_>, occupancy: &Occupancies, ni: usize) -> bool {
        self.may_use(node) && occupancy.admits(ni, self)
    }
}

/// An instance and what currently holds it.
#[derive(Debug, Clone, Copy)]
pub struct InstanceView<'a> {
    pub instance: &'a Instance,
    /// The isolated job running there.
    pub isolated_owner: Option<JobId>,
    /// The isolated job this instance is being drained for.
    pub draining_for: Option<JobId>,
    /// Non-isolated tasks with reservations on it.
    pub active_tasks: u32,
    /// When what holds it now (its isolated job, or its non-isolated
    /// tasks) is expected to have left, unix seconds, where known (time
    /// limits).
    pub expected_free: Option<i64>,
    /// Being re-partitioned: not to be given to an isolated job.
    pub retiring: bool,
}

/// A node as the launch policy sees it.
#[derive(Debug, Clone)]
pub struct NodeView<'a> {
    pub name: &'a str,
    pub up: bool,
    pub worker_limit: u32,
    pub workers_used: u32,
    /// Non-isolated jobs running there: their tasks may be waiting for an
    /// instance that frees up.
    pub shared_running: u32,
    /// The node's CPUs and memory, and what running jobs leave free.
    pub total: NodeResources,
    pub free: NodeResources,
    pub instances: Vec<InstanceView<'a>>,
    /// Who runs there, against `--exclusive` jobs.
    pub occupancy: NodeOccupancy,
    /// When every job running there will have ended, by their time limits
    /// (unix seconds; now if none runs); `None` where one has no limit, or
    /// where no queued job holds nodes (not worked out then).
    pub expected_empty: Option<i64>,
    /// Shared jobs there with tasks waiting for a GPU placement (the
    /// node's last report), and those started in the last
    /// [`SETUP_SECS`] with no GPU reservation yet (on their way).
    pub shared_waiting: u32,
    pub shared_starting: u32,
    /// What its instances could still take of new shared processes, as it
    /// last said (`None`: not bounded that way).
    pub shared_room: Option<crate::wire::SharedRoom>,
    /// Its available host memory is below the reserve: shared jobs that
    /// set no memory aside do not start there.
    pub host_mem_low: bool,
}

impl NodeView<'_> {
    /// Whether a job could ever run here (the node is big enough).
    fn could_run(&self, job: &QueuedJob<'_>) -> bool {
        job.may_use(self) && job.resources.could_fit(&self.total)
    }
}

/// Why a job that fits in no node's free resources now waits: for
/// resources, or for a node that does not exist.
fn unfit_reason(nodes: &[NodeView<'_>], job: &QueuedJob<'_>) -> PendingReason {
    if nodes.iter().any(|n| n.up && n.could_run(job)) {
        PendingReason::Resources
    } else {
        PendingReason::ReqNodeNotAvail
    }
}

/// The state a launch pass decides on. Queues are in priority order.
#[derive(Debug, Clone, Copy, Default)]
pub struct LaunchInput<'a> {
    pub isolated: &'a [QueuedJob<'a>],
    pub shared: &'a [QueuedJob<'a>],
    pub nodes: &'a [NodeView<'a>],
    /// Whether isolated jobs may start early, and until when; `None`: never.
    pub early: Option<EarlyStart<'a>>,
    /// Unix seconds: when the pass is (for time limits against holds).
    pub now: i64,
    /// Nodes (by index) kept for one job: jobs were preempted there to
    /// make room for it (`preempt`); no other job starts there.
    pub reserved: &'a [(usize, JobId)],
    /// Backfill, or strict priority order.
    pub scheduler: SchedulerType,
    /// How many shared jobs may wait for a GPU placement on a node before
    /// no more start there ([`admission`]); `None`: no such limit.
    pub start_ahead: Option<u32>,
}

impl LaunchInput<'_> {
    /// A job could not start: in strict priority order, no later job of
    /// the pass starts anywhere.
    fn after_waiting(&self, occupancy: &mut Occupancies) {
        if self.scheduler == SchedulerType::Builtin {
            occupancy.hold_all();
        }
    }
}

/// Which isolated jobs may start while their instances are still in use:
/// those whose instances are all expected free by `until` (unix seconds;
/// [`InstanceView::expected_free`]), except the `opted_out` (a job that
/// turned the interception off cannot be held at its first CUDA call).
/// The node starts such a job's processes at once, with no GPU device, and
/// lets them use their instances when they are free: the job's start-up
/// (interpreter, imports, data loading) overlaps the work before it.
#[derive(Debug, Clone, Copy)]
pub struct EarlyStart<'a> {
    pub until: i64,
    pub opted_out: &'a HashSet<JobId>,
}

impl EarlyStart<'_> {
    /// Whether `job` may start early on `set` of `node`'s instances.
    fn allows(&self, job: JobId, node: &NodeView<'_>, set: &[usize]) -> bool {
        !self.opted_out.contains(&job)
            && set.iter().all(|ii| {
                node.instances[*ii]
                    .expected_free
                    .is_some_and(|t| t <= self.until)
            })
    }
}

/// Why a job is still pending, in Slurm's words where Slurm has one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PendingReason {
    /// Waiting for workers or an instance to free up.
    Resources,
    /// Its instance is being drained of non-isolated tasks.
    Draining,
    /// No up node has an instance that could ever satisfy the request.
    ReqNodeNotAvail,
    /// No node is up.
    NodeDown,
}

impl fmt::Display for PendingReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PendingReason::Resources => "Resources",
            PendingReason::Draining => "Resources",
            PendingReason::ReqNodeNotAvail => "ReqNodeNotAvail",
            PendingReason::NodeDown => "NodeDown",
        })
    }
}

/// One decision of a launch pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Start `job` on `node`, holding `instances` (isolated: one or
    /// more) or no device (none).
    Launch {
        job: JobId,
        node: String,
        instances: Vec<String>,
    },
    /// Start isolated `job` on `node` now, although `instances` are still
    /// in use (expected free soon, [`EarlyStart`]): closed to new
    /// non-isolated tasks, they become the job's once what is there has
    /// left; until then its processes wait at their first CUDA call.
    EarlyStart {
        job: JobId,
        node: String,
        instances: Vec<String>,
    },
    /// Start `job` on several nodes: the first runs its batch script, each
    /// holds the instances named with it.
    LaunchWide {
        job: JobId,
        nodes: Vec<(String, Vec<String>)>,
    },
    /// Stop placing non-isolated tasks on `instances`: `job` will start
    /// there once they are all free (the whole set held for it).
    Drain {
        job: JobId,
        node: String,
        instances: Vec<String>,
    },
}

/// What a launch pass decided.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LaunchPlan {
    pub decisions: Vec<Decision>,
    /// Jobs examined and left pending, with the reason.
    pub waiting: Vec<(JobId, PendingReason)>,
    /// The reason for every queued job not named above, if the pass stopped early.
    pub rest: Option<PendingReason>,
    /// When jobs that hold nodes are expected to start (unix seconds), where
    /// the time limits of what runs there say (`squeue --start`).
    pub expected_starts: Vec<(JobId, i64)>,
}

/// A launch policy: one type per policy, chosen by name in config.
pub trait LaunchPolicy: Send + Sync {
    fn name(&self) -> &'static str;
    fn plan(&self, input: &LaunchInput<'_>) -> LaunchPlan;
}

/// A policy name that does not exist.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown launch policy '{name}' (known: {known})")]
pub struct UnknownPolicy {
    pub name: String,
    /// The names that exist, comma-separated.
    pub known: String,
}

/// A launch policy as settings name it.
pub struct LaunchEntry {
    pub name: &'static str,
    /// One line for `--help`.
    pub about: &'static str,
    pub build: fn() -> Box<dyn LaunchPolicy>,
}

/// Every launch policy, the default first: one file each
/// (`launch/case.rs`, `launch/exclusive.rs`), one line here.
pub const LAUNCHES: &[LaunchEntry] = &[
    LaunchEntry {
        name: "case",
        about: "CASE Algorithm 1: isolated jobs on their best instance, drained first; shared jobs on the node with the most free workers",
        build: || Box::new(CaseLaunch),
    },
    LaunchEntry {
        name: "exclusive",
        about: "Slurm's: a whole instance per job, isolated or not",
        build: || Box::new(ExclusiveLaunch),
    },
];

/// The names [`launch_policy`] knows.
pub fn launch_names() -> Vec<&'static str> {
    LAUNCHES.iter().map(|p| p.name).collect()
}

/// Builds the launch policy named in config.
pub fn launch_policy(name: &str) -> Result<Box<dyn LaunchPolicy>, UnknownPolicy> {
    LAUNCHES
        .iter()
        .find(|p| p.name == name)
        .map(|p| (p.build)())
        .ok_or_else(|| UnknownPolicy {
            name: name.to_string(),
            known: launch_names().join(", "),
        })
}

/// The UUIDs of instances `set` of `node`.
fn uuids(node: &NodeView<'_>, set: &[usize]) -> Vec<String> {
    set.iter()
        .map(|ii| node.instances[*ii].instance.uuid.clone())
        .collect()
}

/// [`CaseLaunch`]'s pass as a job on several nodes sees it.
struct WidePass<'p> {
    free: &'p mut Vec<u32>,
    room: &'p mut Vec<NodeResources>,
    claimed: &'p mut HashSet<(usize, usize)>,
    occupancy: &'p mut Occupancies,
    /// Whether a job on several nodes already holds nodes in this pass.
    held: &'p mut bool,
    /// Strict priority order: a job that cannot start stops the pass.
    strict: bool,
}

impl WidePass<'_> {
    /// Starts `job` (on several nodes, `count` instances on each) if it
    /// can now, else holds nodes for it (the first in the pass) and notes
    /// why it waits. Returns the workers it took.
    fn place(
        &mut self,
        nodes: &[NodeView<'_>],
        job: &QueuedJob<'_>,
        count: usize,
        plan: &mut LaunchPlan,
    ) -> u64 {
        let picked = wide::choose(
            nodes,
            job,
            count,
            |ni, n| {
                n.up && self.free[ni] > 0
                    && job.may_join(n, self.occupancy, ni)
                    && job.resources.fits(&self.room[ni], &n.total)
            },
            // Free now, even if drained for a job queued after it (that
            // one could not start on a node this one holds: neither
            // would ever start).
            |ni, ii, v| {
                !self.claimed.contains(&(ni, ii))
                    && v.instance.satisfies(job.gpu)
                    && v.isolated_owner.is_none()
                    && !v.retiring
            },
        );
        let Some(picked) = picked else {
            if !*self.held {
                if let Some(t) = wide::hold(self.occupancy, nodes, job, count) {
                    plan.expected_starts.push((job.id, t));
                }
                *self.held = true;
            }
            if self.strict {
                self.occupancy.hold_all();
            }
            plan.waiting
                .push((job.id, wide::waiting_reason(nodes, job, count)));
            return 0;
        };
        let mut chosen = Vec::new();
        for (ni, set) in &picked {
            let node = &nodes[*ni];
            self.claimed.extend(set.iter().map(|ii| (*ni, *ii)));
            self.free[*ni] -= 1;
            self.room[*ni].take(&job.resources, &node.total);
            self.occupancy.note_start(*ni, job);
            chosen.push((node.name.to_string(), uuids(node, set)));
        }
        plan.decisions.push(Decision::LaunchWide {
            job: job.id,
            nodes: chosen,
        });
        picked.len() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::{parse_sim_spec, sim_instances};
    use proptest::prelude::*;
    use std::collections::HashMap;

    const ONE_CPU: JobResources = JobResources {
        cpus: 1,
        memory: crate::resources::MemoryRequest::Unspecified,
    };
    const BIG: NodeResources = NodeResources {
        cpus: 1024,
        memory_mib: 1 << 20,
    };

    fn req(profile: Option<&str>, mem: Option<u64>) -> GpuRequest {
        GpuRequest {
            model: None,
            mig_profile: profile.map(String::from),
            mem_mib: mem,
            share: None,
            share_limit: None,
            count: None,
        }
    }

    /// Node "n" with `instances`, room to spare and a shared job running.
    fn one_node(
        instances: Vec<InstanceView<'_>>,
        worker_limit: u32,
        workers_used: u32,
    ) -> NodeView<'_> {
        NodeView {
            shared_waiting: 0,
            shared_starting: 0,
            shared_room: None,
            host_mem_low: false,
            expected_empty: None,
            name: "n",
            occupancy: Default::default(),
            up: true,
            worker_limit,
            workers_used,
            shared_running: 1,
            total: BIG,
            free: BIG,
            instances,
        }
    }

    fn views(inst: &[Instance]) -> Vec<InstanceView<'_>> {
        inst.iter()
            .map(|i| InstanceView {
                instance: i,
                isolated_owner: None,
                draining_for: None,
                active_tasks: 0,
                expected_free: None,
                retiring: false,
            })
            .collect()
    }

    #[test]
    fn cpus_and_memory_are_consumed() {
        use crate::resources::MemoryRequest::{Mib, Unspecified};
        let inst = sim_instances("n1", &parse_sim_spec("1xA100-40GB").unwrap());
        let total = NodeResources {
            cpus: 4,
            memory_mib: 1000,
        };
        let nodes = vec![NodeView {
            shared_waiting: 0,
            shared_starting: 0,
            shared_room: None,
            host_mem_low: false,
            expected_empty: None,
            name: "n1",
            occupancy: Default::default(),
            up: true,
            worker_limit: 16,
            workers_used: 0,
            shared_running: 1,
            total,
            free: total,
            instances: views(&inst),
        }];
        let none = GpuRequest::default();
        let job = |id, cpus, memory| QueuedJob {
            share: None,
            id,
            gpu: &none,
            uid: 0,
            sharing: None,
            width: 1,
            time_limit: None,
            resources: JobResources { cpus, memory },
            nodes: None,
            priority: 0,
        };
        // Two jobs that each take every CPU never run together; a job
        // larger than any node can never run.
        let shared = [
            job(1, 4, Unspecified),
            job(2, 4, Unspecified),
            job(3, 8, Unspecified),
            job(4, 1, Mib(600)),
        ];
        for policy in [&CaseLaunch as &dyn LaunchPolicy, &ExclusiveLaunch] {
            let plan = policy.plan(&LaunchInput {
                start_ahead: None,
                now: 0,
                reserved: &[],
                scheduler: Default::default(),
                early: None,
                isolated: &[],
                shared: &shared,
                nodes: &nodes,
            });
            let launched: Vec<JobId> = plan
                .decisions
                .iter()
                .filter_map(|d| match d {
                    Decision::Launch { job, .. } => Some(*job),
                    Decision::Drain { .. }
                    | Decision::EarlyStart { .. }
                    | Decision::LaunchWide { .. } => None,
                })
                .collect();
            assert_eq!(launched, [1], "{}", policy.name());
            assert!(plan.waiting.contains(&(2, PendingReason::Resources)));
            assert!(plan.waiting.contains(&(3, PendingReason::ReqNodeNotAvail)));
        }
        // Memory: the second 600 MiB job waits for the first.
        let shared = [
            job(5, 1, Mib(600)),
            job(6, 1, Mib(600)),
            job(7, 1, Unspecified),
        ];
        let plan = CaseLaunch.plan(&LaunchInput {
            start_ahead: None,
            now: 0,
            reserved: &[],
            scheduler: Default::default(),
            early: None,
            isolated: &[],
            shared: &shared,
            nodes: &nodes,
        });
        assert_eq!(plan.decisions.len(), 2);
        assert_eq!(plan.waiting, vec![(6, PendingReason::Resources)]);
    }

    #[test]
    fn isolated_first_best_fit_then_shared() {
        let inst = sim_instances(
            "n1",
            &parse_sim_spec("1xA100-40GB:2g.10gb*2,1g.5gb*3").unwrap(),
        );
        let nodes = vec![NodeView {
            shared_waiting: 0,
            shared_starting: 0,
            shared_room: None,
            host_mem_low: false,
            expected_empty: None,
            name: "n1",
            occupancy: Default::default(),
            up: true,
            worker_limit: 3,
            workers_used: 0,
            shared_running: 1,
            total: BIG,
            free: BIG,
            instances: views(&inst),
        }];
        let small = req(None, Some(4000));
        let prof = req(Some("2g.10gb"), None);
        let none = GpuRequest::default();
        let iso = [
            QueuedJob {
                share: None,
                id: 1,
                gpu: &small,
                uid: 0,
                sharing: None,
                width: 1,
                time_limit: None,
                resources: ONE_CPU,
                nodes: None,
                priority: 0,
            },
            QueuedJob {
                share: None,
                id: 2,
                gpu: &prof,
                uid: 0,
                sharing: None,
                width: 1,
                time_limit: None,
                resources: ONE_CPU,
                nodes: None,
                priority: 0,
            },
        ];
        let shared = [
            QueuedJob {
                share: None,
                id: 3,
                gpu: &none,
                uid: 0,
                sharing: None,
                width: 1,
                time_limit: None,
                resources: ONE_CPU,
                nodes: None,
                priority: 0,
            },
            QueuedJob {
                share: None,
                id: 4,
                gpu: &none,
                uid: 0,
                sharing: None,
                width: 1,
                time_limit: None,
                resources: ONE_CPU,
                nodes: None,
                priority: 0,
            },
        ];
        let plan = CaseLaunch.plan(&LaunchInput {
            start_ahead: None,
            now: 0,
            reserved: &[],
            scheduler: Default::default(),
            early: None,
            isolated: &iso,
            shared: &shared,
            nodes: &nodes,
        });
        assert_eq!(
            plan.decisions,
            vec![
                Decision::Launch {
                    job: 1,
                    node: "n1".into(),
                    instances: vec![inst[2].uuid.clone()]
                },
                Decision::Launch {
                    job: 2,
                    node: "n1".into(),
                    instances: vec![inst[0].uuid.clone()]
                },
                Decision::Launch {
                    job: 3,
                    node: "n1".into(),
                    instances: vec![]
                },
            ]
        );
        assert_eq!(plan.rest, Some(PendingReason::Resources));
    }

    #[test]
    fn busy_instance_is_drained_not_shared() {
        let inst = sim_instances("n1", &parse_sim_spec("1xA100-40GB:1g.5gb").unwrap());
        let mut v = views(&inst);
        v[0].active_tasks = 2;
        let nodes = vec![NodeView {
            shared_waiting: 0,
            shared_starting: 0,
            shared_room: None,
            host_mem_low: false,
            expected_empty: None,
            name: "n1",
            occupancy: Default::default(),
            up: true,
            worker_limit: 4,
            workers_used: 1,
            shared_running: 1,
            total: BIG,
            free: BIG,
            instances: v,
        }];
        let r = req(Some("1g.5gb"), None);
        let iso = [
            QueuedJob {
                share: None,
                id: 7,
                gpu: &r,
                uid: 0,
                sharing: None,
                width: 1,
                time_limit: None,
                resources: ONE_CPU,
                nodes: None,
                priority: 0,
            },
            QueuedJob {
                share: None,
                id: 8,
                gpu: &r,
                uid: 0,
                sharing: None,
                width: 1,
                time_limit: None,
                resources: ONE_CPU,
                nodes: None,
                priority: 0,
            },
        ];
        let plan = CaseLaunch.plan(&LaunchInput {
            start_ahead: None,
            now: 0,
            reserved: &[],
            scheduler: Default::default(),
            early: None,
            isolated: &iso,
            shared: &[],
            nodes: &nodes,
        });
        assert_eq!(
            plan.decisions,
            vec![Decision::Drain {
                job: 7,
                node: "n1".into(),
                instances: vec![inst[0].uuid.clone()]
            }]
        );
        assert_eq!(
            plan.waiting,
            vec![(7, PendingReason::Draining), (8, PendingReason::Resources)]
        );

        // Once drained, job 7 (and only job 7) gets it.
        let mut v = views(&inst);
        v[0].draining_for = Some(7);
        let nodes = vec![NodeView {
            shared_waiting: 0,
            shared_starting: 0,
            shared_room: None,
            host_mem_low: false,
            expected_empty: None,
            name: "n1",
            occupancy: Default::default(),
            up: true,
            worker_limit: 4,
            workers_used: 0,
            shared_running: 1,
            total: BIG,
            free: BIG,
            instances: v,
        }];
        let iso = [
            QueuedJob {
                share: None,
                id: 8,
                gpu: &r,
                uid: 0,
                sharing: None,
                width: 1,
                time_limit: None,
                resources: ONE_CPU,
                nodes: None,
                priority: 0,
            },
            QueuedJob {
                share: None,
                id: 7,
                gpu: &r,
                uid: 0,
                sharing: None,
                width: 1,
                time_limit: None,
                resources: ONE_CPU,
                nodes: None,
                priority: 0,
            },
        ];
        let plan = CaseLaunch.plan(&LaunchInput {
            start_ahead: None,
            now: 0,
            reserved: &[],
            scheduler: Default::default(),
            early: None,
            isolated: &iso,
            shared: &[],
            nodes: &nodes,
        });
        assert_eq!(
            plan.decisions,
            vec![Decision::Launch {
                job: 7,
                node: "n1".into(),
                instances: vec![inst[0].uuid.clone()]
            }]
        );
    }

    #[test]
    fn an_instance_held_by_an_isolated_job_is_taken_next_then_the_first_free() {
        let inst = sim_instances("n", &parse_sim_spec("2xA100-40GB").unwrap());
        let r = req(None, None);
        let job = |id| QueuedJob {
            share: None,
            id,
            gpu: &r,
            uid: 0,
            sharing: None,
            width: 1,
            time_limit: None,
            resources: ONE_CPU,
            nodes: None,
            priority: 0,
        };
        let plan_for = |v: Vec<InstanceView<'_>>| {
            CaseLaunch.plan(&LaunchInput {
                start_ahead: None,
                now: 0,
                reserved: &[],
                scheduler: Default::default(),
                early: None,
                isolated: &[job(7)],
                shared: &[],
                nodes: &[one_node(v, 8, 1)],
            })
        };
        let drained = |p: &LaunchPlan| match &p.decisions[..] {
            [Decision::Drain {
                job: 7, instances, ..
            }] if instances.len() == 1 => instances[0].clone(),
            d => panic!("{d:?}"),
        };
        // One GPU, held by isolated job 3: job 7 takes it next, so that
        // no shared task fills it when job 3 ends.
        let mut v = views(&inst[..1]);
        v[0].isolated_owner = Some(3);
        let p = plan_for(v.clone());
        assert_eq!(drained(&p), inst[0].uuid);
        assert_eq!(p.waiting, vec![(7, PendingReason::Draining)]);
        // With no shared job on the node there is nothing to keep out:
        // job 7 waits for whichever instance frees first, as before.
        let mut alone = one_node(v, 8, 1);
        alone.shared_running = 0;
        let p = CaseLaunch.plan(&LaunchInput {
            start_ahead: None,
            now: 0,
            reserved: &[],
            scheduler: Default::default(),
            early: None,
            isolated: &[job(7)],
            shared: &[],
            nodes: &[alone],
        });
        assert!(p.decisions.is_empty(), "{p:?}");
        // Both must be waited for: the one expected free first.
        let mut v = views(&inst);
        v[0].isolated_owner = Some(3);
        v[0].expected_free = Some(500);
        v[1].active_tasks = 2;
        v[1].expected_free = Some(200);
        assert_eq!(drained(&plan_for(v.clone())), inst[1].uuid);
        v[1].expected_free = None;
        assert_eq!(
            drained(&plan_for(v.clone())),
            inst[0].uuid,
            "unknown goes last"
        );
        // One free now wins over both.
        v[1].active_tasks = 0;
        assert!(matches!(
            &plan_for(v).decisions[..],
            [Decision::Launch { job: 7, instances, .. }] if *instances == [inst[1].uuid.clone()]
        ));
    }

    #[test]
    fn an_isolated_job_starts_early_only_where_its_instance_is_free_soon() {
        let inst = sim_instances("n", &parse_sim_spec("1xA100-40GB").unwrap());
        let r = req(None, None);
        let job = |id| QueuedJob {
            share: None,
            id,
            gpu: &r,
            uid: 0,
            sharing: None,
            width: 1,
            time_limit: None,
            resources: ONE_CPU,
            nodes: None,
            priority: 0,
        };
        let none = HashSet::new();
        let opted_out = HashSet::from([7]);
        let plan = |v: Vec<InstanceView<'_>>, workers_used, until, out| {
            CaseLaunch.plan(&LaunchInput {
                start_ahead: None,
                now: 0,
                reserved: &[],
                scheduler: Default::default(),
                isolated: &[job(7)],
                shared: &[],
                nodes: &[one_node(v, 2, workers_used)],
                early: Some(EarlyStart {
                    until,
                    opted_out: out,
                }),
            })
        };
        let mut v = views(&inst);
        v[0].isolated_owner = Some(3);
        v[0].expected_free = Some(100);
        let p = plan(v.clone(), 1, 120, &none);
        assert!(
            matches!(&p.decisions[..], [Decision::EarlyStart { job: 7, instances, .. }] if *instances == [inst[0].uuid.clone()]),
            "{p:?}"
        );
        assert!(p.waiting.is_empty(), "it runs: {p:?}");
        // With no shared job on the node too.
        let mut lone = one_node(v.clone(), 2, 1);
        lone.shared_running = 0;
        let p = CaseLaunch.plan(&LaunchInput {
            start_ahead: None,
            now: 0,
            reserved: &[],
            scheduler: Default::default(),
            isolated: &[job(7)],
            shared: &[],
            nodes: &[lone],
            early: Some(EarlyStart {
                until: 120,
                opted_out: &none,
            }),
        });
        assert!(
            matches!(&p.decisions[..], [Decision::EarlyStart { job: 7, .. }]),
            "{p:?}"
        );
        // Free later than the window, or when: drained for it as before.
        for (free, until) in [(Some(200), 120), (None, 120)] {
            v[0].expected_free = free;
            let p = plan(v.clone(), 1, until, &none);
            assert!(
                matches!(&p.decisions[..], [Decision::Drain { job: 7, .. }]),
                "{p:?}"
            );
        }
        // A job that turned the interception off cannot be held: it waits.
        v[0].expected_free = Some(100);
        let p = plan(v.clone(), 1, 120, &opted_out);
        assert!(
            matches!(&p.decisions[..], [Decision::Drain { job: 7, .. }]),
            "{p:?}"
        );
        // It takes a worker: with none free it does not even drain.
        let p = plan(v.clone(), 2, 120, &none);
        assert!(p.decisions.is_empty(), "{p:?}");
        // Shared tasks expected to leave soon count the same.
        v[0].isolated_owner = None;
        v[0].active_tasks = 3;
        let p = plan(v, 1, 120, &none);
        assert!(
            matches!(&p.decisions[..], [Decision::EarlyStart { job: 7, .. }]),
            "{p:?}"
        );
    }

    #[test]
    fn impossible_request_and_down_nodes() {
        let inst = sim_instances("n1", &parse_sim_spec("1xA30:1g.6gb*4").unwrap());
        let nodes = vec![NodeView {
            shared_waiting: 0,
            shared_starting: 0,
            shared_room: None,
            host_mem_low: false,
            expected_empty: None,
            name: "n1",
            occupancy: Default::default(),
            up: true,
            worker_limit: 16,
            workers_used: 0,
            shared_running: 1,
            total: BIG,
            free: BIG,
            instances: views(&inst),
        }];
        let r = req(None, Some(20_000));
        let iso = [QueuedJob {
            share: None,
            id: 1,
            gpu: &r,
            uid: 0,
            sharing: None,
            width: 1,
            time_limit: None,
            resources: ONE_CPU,
            nodes: None,
            priority: 0,
        }];
        let plan = CaseLaunch.plan(&LaunchInput {
            start_ahead: None,
            now: 0,
            reserved: &[],
            scheduler: Default::default(),
            early: None,
            isolated: &iso,
            shared: &[],
            nodes: &nodes,
        });
        assert_eq!(plan.waiting, vec![(1, PendingReason::ReqNodeNotAvail)]);
        let down = vec![NodeView {
            expected_empty: None,
            occupancy: Default::default(),
            up: false,
            ..nodes[0].clone()
        }];
        let plan = CaseLaunch.plan(&LaunchInput {
            start_ahead: None,
            now: 0,
            reserved: &[],
            scheduler: Default::default(),
            early: None,
            isolated: &iso,
            shared: &[],
            nodes: &down,
        });
        assert_eq!(plan.rest, Some(PendingReason::NodeDown));
        assert!(plan.decisions.is_empty());
    }

    #[test]
    fn jobs_run_only_where_their_node_choice_allows() {
        use crate::allocation::NodeChoice;
        let i1 = sim_instances("n1", &parse_sim_spec("1xA100-40GB").unwrap());
        let i2 = sim_instances("n2", &parse_sim_spec("1xA100-40GB").unwrap());
        let node = |name, inst| NodeView {
            shared_waiting: 0,
            shared_starting: 0,
            shared_room: None,
            host_mem_low: false,
            expected_empty: None,
            name,
            occupancy: Default::default(),
            up: true,
            worker_limit: 16,
            workers_used: 0,
            shared_running: 0,
            total: BIG,
            free: BIG,
            instances: views(inst),
        };
        let nodes = vec![node("n1", &i1), node("n2", &i2)];
        let only = |n: &str| NodeChoice {
            only: Some(vec![n.into()]),
            ..Default::default()
        };
        let (w2, x2, nosuch) = (
            only("n2"),
            NodeChoice {
                except: Some(crate::hostlist::Hostlist::parse("n2").unwrap()),
                ..Default::default()
            },
            only("n9"),
        );
        let none = GpuRequest::default();
        let job = |id, nodes| QueuedJob {
            share: None,
            id,
            gpu: &none,
            uid: 0,
            sharing: None,
            width: 1,
            time_limit: None,
            resources: ONE_CPU,
            nodes,
            priority: 0,
        };
        let where_ = |p: &LaunchPlan, id: JobId| {
            p.decisions.iter().find_map(|d| match d {
                Decision::Launch { job, node, .. } if *job == id => Some(node.clone()),
                _ => None,
            })
        };
        for policy in [&CaseLaunch as &dyn LaunchPolicy, &ExclusiveLaunch] {
            // Isolated: -w n2 goes to n2 (n1 would be chosen first).
            let iso = [job(1, Some(&w2))];
            let shared = [job(2, Some(&x2)), job(3, Some(&nosuch))];
            let p = policy.plan(&LaunchInput {
                start_ahead: None,
                now: 0,
                reserved: &[],
                scheduler: Default::default(),
                early: None,
                isolated: &iso,
                shared: &shared,
                nodes: &nodes,
            });
            assert_eq!(where_(&p, 1).as_deref(), Some("n2"), "{}", policy.name());
            assert_eq!(where_(&p, 2).as_deref(), Some("n1"), "{}", policy.name());
            // A node that is not there: never, with Slurm's reason.
            assert_eq!(where_(&p, 3), None);
            assert!(
                p.waiting.contains(&(3, PendingReason::ReqNodeNotAvail)),
                "{}: {p:?}",
                policy.name()
            );
        }
    }

    #[test]
    fn policy_by_name() {
        assert_eq!(launch_policy("case").unwrap().name(), "case");
        assert_eq!(launch_policy("exclusive").unwrap().name(), "exclusive");
        assert_eq!(
            launch_policy("fifo").err().unwrap().to_string(),
            "unknown launch policy 'fifo' (known: case, exclusive)"
        );
    }

    /// A tiny deterministic driver: plan, apply, finish jobs, repeat.
    #[derive(Debug, Clone)]
    struct Sim {
        inst: Vec<Instance>,
        owner: Vec<Option<JobId>>,
        draining: Vec<Option<JobId>>,
        tasks: Vec<u32>,
        running: Vec<(JobId, Vec<usize>)>,
        done: HashMap<JobId, u32>,
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]
        /// Random jobs on the CASE A100 layout, some isolated ones asking for
        /// several instances: each gets what it asked for, an instance never holds
        /// two jobs nor shares with tasks, workers never exceed the limit, and
        /// every job finishes exactly once.
        #[test]
        fn every_job_finishes_once_and_isolation_holds(
            jobs in proptest::collection::vec((any::<bool>(), 0u8..6), 1..40),
            limit in 1u32..6,
            finish_order in proptest::collection::vec(any::<usize>(), 200),
            busy in proptest::collection::vec(0u32..3, 5),
        ) {
            let inst = sim_instances("n", &parse_sim_spec("1xA100-40GB:2g.10gb*2,1g.5gb*3").unwrap());
            let reqs: Vec<GpuRequest> = jobs.iter().map(|(_, k)| match k {
                0 => req(Some("1g.5gb"), None),
                1 => req(Some("2g.10gb"), None),
                2 => req(None, Some(9000)),
                3 => req(None, Some(100)),
                // Several instances (isolated jobs only).
                4 => GpuRequest { count: Some(2), ..req(Some("1g.5gb"), None) },
                _ => GpuRequest { count: Some(3), ..req(None, Some(100)) },
            }).collect();
            let mut s = Sim {
                owner: vec![None; inst.len()],
                draining: vec![None; inst.len()],
                tasks: busy.clone(),
                running: vec![],
                done: HashMap::new(),
                inst,
            };
            let mut pending: Vec<usize> = (0..jobs.len()).collect();
            let mut step = 0;
            while !pending.is_empty() || !s.running.is_empty() {
                step += 1;
                prop_assert!(step < 2000, "no progress");
                let iso: Vec<QueuedJob> = pending.iter().filter(|&&j| jobs[j].0)
                    .map(|&j| QueuedJob { id: j as JobId, gpu: &reqs[j], uid: 0, sharing: None, resources: ONE_CPU, nodes: None, width: 1, time_limit: None, priority: 0, share: None }).collect();
                let sh: Vec<QueuedJob> = pending.iter().filter(|&&j| !jobs[j].0)
                    .map(|&j| QueuedJob { id: j as JobId, gpu: &reqs[j], uid: 0, sharing: None, resources: ONE_CPU, nodes: None, width: 1, time_limit: None, priority: 0, share: None }).collect();
                let nodes = vec![NodeView {
                    shared_waiting: 0,
                    shared_starting: 0,
                    shared_room: None,
                    host_mem_low: false,
                    expected_empty: None,
                    name: "n", occupancy: Default::default(), up: true, worker_limit: limit,
                    workers_used: s.running.len() as u32,
                    shared_running: 1,
            total: BIG,
            free: BIG,
                    instances: s.inst.iter().enumerate().map(|(i, inst)| InstanceView {
                        instance: inst, isolated_owner: s.owner[i],
                        draining_for: s.draining[i], active_tasks: s.tasks[i], retiring: false,
                        expected_free: None,
                    }).collect(),
                }];
                let plan = CaseLaunch.plan(&LaunchInput { now: 0, reserved: &[], scheduler: Default::default(), start_ahead: None, early: None, isolated: &iso, shared: &sh, nodes: &nodes });
                for d in plan.decisions {
                    match d {
                        Decision::Launch { job, instances, .. } => {
                            let idx: Vec<usize> = instances.iter()
                                .map(|u| s.inst.iter().position(|i| &i.uuid == u).unwrap()).collect();
                            let want = if jobs[job as usize].0 { reqs[job as usize].instances() } else { 0 };
                            prop_assert_eq!(idx.len(), want, "instances given are those asked for");
                            for &i in &idx {
                                prop_assert!(s.owner[i].is_none(), "instance held twice");
                                prop_assert_eq!(s.tasks[i], 0, "isolated job shares with tasks");
                                prop_assert!(s.draining[i].is_none() || s.draining[i] == Some(job));
                                prop_assert!(s.inst[i].satisfies(&reqs[job as usize]));
                                s.owner[i] = Some(job);
                            }
                            for d in s.draining.iter_mut().filter(|d| **d == Some(job)) {
                                *d = None;
                            }
                            pending.retain(|&p| p as JobId != job);
                            s.running.push((job, idx));
                        }
                        Decision::EarlyStart { .. } => prop_assert!(false, "early starts are off"),
                        Decision::LaunchWide { .. } => prop_assert!(false, "every job is on one node"),
                        Decision::Drain { job, instances, .. } => {
                            for d in s.draining.iter_mut().filter(|d| **d == Some(job)) {
                                *d = None;
                            }
                            for u in &instances {
                                let i = s.inst.iter().position(|x| &x.uuid == u).unwrap();
                                prop_assert!(s.owner[i] != Some(job));
                                prop_assert!(s.draining[i].is_none());
                                s.draining[i] = Some(job);
                            }
                        }
                    }
                }
                prop_assert!(s.running.len() as u32 <= limit);
                // Background tasks on draining instances end over time.
                for i in 0..s.tasks.len() {
                    if s.draining[i].is_some() && s.tasks[i] > 0 {
                        s.tasks[i] -= 1;
                    }
                }
                if !s.running.is_empty() {
                    let k = finish_order[step % finish_order.len()] % s.running.len();
                    let (job, idx) = s.running.remove(k);
                    for i in idx { s.owner[i] = None; }
                    *s.done.entry(job).or_default() += 1;
                } else if plan.rest.is_none() && plan.waiting.iter().all(|(_, r)| *r == PendingReason::ReqNodeNotAvail) {
                    // Only impossible requests remain.
                    break;
                }
            }
            for (j, _) in jobs.iter().enumerate() {
                prop_assert_eq!(s.done.get(&(j as JobId)).copied().unwrap_or(0), 1, "job {} finished wrong number of times", j);
            }
        }
    }
}
