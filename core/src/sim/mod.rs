//! The simulator: the same launch and placement code the daemons run
//! ([`Cluster`] with a [`crate::launch::LaunchPolicy`], [`TaskBook`] with a
//! [`crate::placement::PlacementPolicy`]), driven by a virtual clock over
//! simulated jobs. Pure: no I/O, no wall clock.
//!
//! The compute model (docs/simulator.md): a GPU task with parallelism `s`
//! (compute slices it keeps busy) on an instance of `k` slices demands
//! `d = min(s, k) / k` of it and runs at speed `min(s, k) / min(s, 1)`
//! relative to its alone time on one slice. When the demands of the tasks on
//! an instance add up to `D > 1`, every task there slows by `D`; and every
//! co-located task pays a fixed interference of [`INTERFERENCE`] per
//! neighbour. CPU phases take their time.

mod ends;
mod engine;
mod passes;
pub mod queue_mix;
#[cfg(test)]
mod queue_tests;
mod reshape;
mod run;
mod site;
mod suspend;
mod tokens;
pub mod workload;

use crate::gpu::Instance;
use crate::launch::SchedulerType;

pub use site::SimSite;
pub use workload::{Phase, SimJob};

/// Slowdown per co-located neighbour (CASE measured a 2.2% mean kernel
/// slowdown from co-location; this is a little more, to stay conservative).
pub const INTERFERENCE: f64 = 0.03;

const NODE: &str = "sim";

/// A policy pair by name: `case`, `exclusive`, or `cg:R`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// CASE Algorithm 1 launches, Algorithm 2 placements.
    Case,
    /// Slurm: one job per instance for its lifetime.
    Exclusive,
    /// Up to R jobs per instance, placed round robin, blind to memory.
    Cg(u32),
    /// CASE launches, MGB Algorithm 2 placements (memory and warps hard).
    MgbSm,
}

/// A policy name that does not exist.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown policy '{0}' (known: case, exclusive, cg:R, mgb-sm)")]
pub struct UnknownSimPolicy(pub String);

impl Policy {
    /// The launch policy of this preset, by its name in
    /// [`crate::launch::LAUNCHES`].
    pub fn launch_name(self) -> &'static str {
        match self {
            Policy::Exclusive => "exclusive",
            Policy::Case | Policy::MgbSm | Policy::Cg(_) => "case",
        }
    }

    /// The placement policy of this preset, by its name in
    /// [`crate::placement::PLACEMENTS`].
    pub fn placement_name(self) -> &'static str {
        match self {
            Policy::Case => "case",
            Policy::MgbSm => "mgb-sm",
            Policy::Exclusive => "exclusive",
            Policy::Cg(_) => "blind",
        }
    }
}

impl std::str::FromStr for Policy {
    type Err = UnknownSimPolicy;
    fn from_str(s: &str) -> Result<Policy, UnknownSimPolicy> {
        match s {
            "case" => Ok(Policy::Case),
            "exclusive" => Ok(Policy::Exclusive),
            "mgb-sm" => Ok(Policy::MgbSm),
            _ => s
                .strip_prefix("cg:")
                .and_then(|r| r.parse::<u32>().ok())
                .filter(|r| *r > 0)
                .map(Policy::Cg)
                .ok_or_else(|| UnknownSimPolicy(s.into())),
        }
    }
}

impl std::fmt::Display for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Policy::Case => f.write_str("case"),
            Policy::Exclusive => f.write_str("exclusive"),
            Policy::Cg(r) => write!(f, "cg:{r}"),
            Policy::MgbSm => f.write_str("mgb-sm"),
        }
    }
}

/// What a simulation measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SimResult {
    pub policy: String,
    pub jobs: usize,
    pub completed: usize,
    pub oom_crashes: usize,
    /// Time the last job ended, seconds.
    pub makespan: f64,
    /// Completed jobs per hour.
    pub throughput_per_hour: f64,
    pub mean_turnaround: f64,
    /// Time-averaged GPU memory in use over total GPU memory.
    pub memory_utilization: f64,
    /// Lower bound on the makespan of the completed jobs (see [`lower_bound`]).
    pub lower_bound: f64,
    pub packing_efficiency: f64,
    pub antt: f64,
    pub stp: f64,
    /// MIG re-partitions carried out (instances destroyed and created).
    pub reshapes: usize,
    /// Mean time from submission to start of the completed jobs, seconds.
    pub mean_wait: f64,
    /// Jobs killed at their time limit.
    pub timeouts: usize,
    /// Runs ended to make room for another job (requeued or cancelled).
    pub preemptions: usize,
    /// Submissions the controller refused (QOS `MaxSubmitJobsPerUser`,
    /// an account the user has no association with).
    pub refused: usize,
    /// Per account, user, QOS and size: jobs, waits, node time.
    pub groups: Vec<GroupStats>,
    /// Each job's time from submission to start (`None`: never started),
    /// in the order given.
    #[serde(skip)]
    pub waits: Vec<Option<f64>>,
    /// How each job ended, in the order given.
    #[serde(skip)]
    pub outcomes: Vec<SimOutcome>,
    /// Each job's time from submission to its end, in the order given.
    #[serde(skip)]
    pub turnarounds: Vec<f64>,
    /// (time, memory utilization) at every change, for plots.
    #[serde(skip)]
    pub utilization: Vec<(f64, f64)>,
    /// The launch and placement decisions, in order (for parity checks).
    #[serde(skip)]
    pub decisions: Vec<String>,
}

impl SimResult {
    /// Job `k`'s time from submission to its end (0 for one that never
    /// ran), seconds.
    pub fn turnaround_of(&self, k: usize) -> f64 {
        self.turnarounds.get(k).copied().unwrap_or(0.0)
    }
}

/// How a simulated job ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SimOutcome {
    Completed,
    /// Its memory overflowed its instance (or fit none).
    OutOfMemory,
    /// Killed at its time limit.
    TimedOut,
    /// Cancelled to make room for another job (`PreemptMode=cancel`).
    Preempted,
    /// Refused at submission.
    Refused,
}

/// The jobs of one account, user or QOS.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct GroupStats {
    /// `account`, `user`, `qos` or `size` (`one-gpu`, `one-node`:
    /// several GPUs of one node, `multi-node`).
    pub kind: &'static str,
    pub name: String,
    pub jobs: usize,
    pub completed: usize,
    /// Mean and largest time from submission to first start of its jobs
    /// that started, seconds.
    pub mean_wait: f64,
    pub max_wait: f64,
    /// Mean time from submission to end of its completed jobs, seconds.
    pub mean_turnaround: f64,
    /// Its part of all jobs' node time (run time times nodes).
    pub node_time_share: f64,
}

/// A lower bound on any schedule's makespan: the longest job alone (from
/// its submission), or all GPU work spread perfectly over every compute
/// slice, whichever is larger.
pub fn lower_bound(jobs: &[SimJob], instances: &[Instance]) -> f64 {
    let longest = jobs
        .iter()
        .map(|j| j.submit + j.alone_secs())
        .fold(0.0, f64::max);
    let slices: f64 = instances.iter().map(|i| i.compute_slices as f64).sum();
    let work: f64 = jobs
        .iter()
        .flat_map(|j| j.phases.iter())
        .map(|p| match p {
            Phase::Gpu { slices, secs, .. } => secs * slices.min(1.0),
            Phase::Cpu { .. } => 0.0,
        })
        .sum();
    longest.max(work / slices.max(1.0))
}

/// A simulation that cannot run.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error(transparent)]
    Cluster(#[from] crate::gpu::SimSpecError),
    #[error(
        "job '{0}' needs {1} MiB, more than any instance has (or, re-partitioning, could have)"
    )]
    TooBig(String, u64),
    #[error("the simulation stopped with {0} jobs unfinished (nothing left to happen)")]
    Stuck(usize),
    #[error(transparent)]
    Priority(#[from] crate::priority::UnknownPriorityType),
    #[error("job '{0}' asks for several nodes or GPUs: only isolated jobs do in the simulator")]
    WideShared(String),
    #[error("job '{0}' asks for {1} nodes; the simulated cluster has {2}")]
    TooWide(String, u32, usize),
    #[error("MIG re-partitioning is simulated on one node only (asked for {0})")]
    RepartitionNodes(usize),
    #[error(transparent)]
    Repartition(#[from] crate::repartition::RepartitionError),
    #[error("the site's {0}")]
    Site(String),
    #[error("job '{0}': {1}")]
    Share(String, crate::time_quota::QuotaError),
    #[error("job '{0}': {1}")]
    BadJob(String, &'static str),
}

/// Knobs of a simulated cluster beyond its policy.
#[derive(Debug, Clone, Default)]
pub struct SimOptions {
    /// Nodes, each with the GPUs of the spec (0 or 1: one).
    pub nodes: usize,
    /// Accounts, QOS, preemption and priority weights (as a site sets
    /// them with `sacctmgr` and gctld's flags).
    pub site: SimSite,
    /// Backfill (the default) or strict priority order.
    pub scheduler: SchedulerType,
    /// Shared jobs run at once per compute slice under `case` and `mgb-sm`
    /// (default 4, the paper's: 4 per 1g, 8 per 2g instance).
    pub workers_per_slice: Option<u32>,
    /// A non-isolated job keeps its first task's reservation until it ends
    /// (one process that allocates once, as the driver interception
    /// reserves), instead of reserving for each GPU task.
    pub hold_per_process: bool,
    /// Re-partitions MIG GPUs by demand (under `case` and `mgb-sm`; the
    /// other policies keep the layout, as Slurm does).
    /// `--repartition`'s value (`demand:2`): a registered policy.
    pub repartition: Option<String>,
    /// Seconds from destroying instances to their replacements being
    /// usable (MIG create, compute instance, MPS daemon).
    pub reconfig_secs: f64,
    /// How often a waiting task may be overtaken (`None`: the node's
    /// default, `placement::DEFAULT_MAX_OVERTAKES`).
    pub max_overtakes: Option<u32>,
    /// The node's compute ceiling, thousandths of an instance's capacity
    /// ([`TaskBook::with_compute_ceiling`]; `None`: memory alone).
    pub compute_ceiling: Option<u32>,
    /// The controller's priority policy (a name of
    /// [`crate::priority::POLICIES`]); `None`: the default (`basic`).
    pub priority: Option<&'static str>,
    /// What each GPU task's demand is known as ([`TaskShares`]).
    pub task_shares: TaskShares,
    /// How many shared jobs may wait for a GPU placement on a node before
    /// no more start there (gctld's `--shared-start-ahead`): `None` its
    /// default, `u32::MAX` no limit.
    pub shared_start_ahead: Option<u32>,
    /// How long a job's room is kept for its next GPU task after one ends
    /// (ms; gnoded's `--hold-between-processes`; 0: not kept).
    pub hold_between_ms: i64,
}

/// What a simulated GPU task's compute demand is known as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TaskShares {
    /// Its parallelism over its GPU's slices, from the start: what a share
    /// learned from earlier runs gives.
    #[default]
    Stated,
    /// The node's default part of its instance until its first
    /// measurement window closes ([`crate::compute::MEASURE_WINDOW_USEC`]),
    /// then its parallelism, reported as gnoded's interception library
    /// reports busy time: a first run as gnoded now runs it.
    Measured,
    /// The node's default part of its instance all along (a first run with
    /// no measurement while it runs).
    Default,
}

impl TaskShares {
    /// The names `gsched sim --task-shares` takes.
    pub const NAMES: [&'static str; 3] = ["parallelism", "measured", "default"];

    pub fn from_name(name: &str) -> Option<TaskShares> {
        match name {
            "parallelism" => Some(TaskShares::Stated),
            "measured" => Some(TaskShares::Measured),
            "default" => Some(TaskShares::Default),
            _ => None,
        }
    }
}

/// Runs `jobs` on the cluster `spec` (a `--sim-gpus` spec) under `policy`.
pub fn simulate(spec: &str, policy: Policy, jobs: &[SimJob]) -> Result<SimResult, SimError> {
    simulate_with(spec, policy, jobs, SimOptions::default())
}

/// [`simulate`] with [`SimOptions`].
pub fn simulate_with(
    spec: &str,
    policy: Policy,
    jobs: &[SimJob],
    options: SimOptions,
) -> Result<SimResult, SimError> {
    let (mut sim, initial) = run::build(spec, policy, jobs, &options)?;
    sim.run_to_end();
    run::results(sim, &initial)
}

/// Policy against baseline on the same jobs, as `gsched sim` reports it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Comparison {
    pub throughput_ratio: f64,
    pub turnaround_speedup: f64,
    pub memory_utilization_ratio: f64,
    pub oom_crashes: usize,
    pub baseline_oom_crashes: usize,
    pub packing_efficiency: f64,
    pub antt: f64,
    pub stp: f64,
    pub policy: SimResult,
    pub baseline: SimResult,
}

pub fn compare(policy: SimResult, baseline: SimResult) -> Comparison {
    Comparison {
        throughput_ratio: policy.throughput_per_hour / baseline.throughput_per_hour.max(1e-12),
        turnaround_speedup: baseline.mean_turnaround / policy.mean_turnaround.max(1e-12),
        memory_utilization_ratio: policy.memory_utilization
            / baseline.memory_utilization.max(1e-12),
        oom_crashes: policy.oom_crashes,
        baseline_oom_crashes: baseline.oom_crashes,
        packing_efficiency: policy.packing_efficiency,
        antt: policy.antt,
        stp: policy.stp,
        policy,
        baseline,
    }
}

pub mod parity;

#[cfg(test)]
mod tests {
    use super::workload::{generate, Footprints, Mix};
    use super::*;

    const A30: &str = "4xA30:1g.6gb*4";

    fn mix(i: u32, s: u32, jobs: usize) -> Vec<SimJob> {
        generate(&Mix {
            isolated: i,
            shared: s,
            jobs,
            footprints: Footprints::OneToSix,
            seed: 1,
            gpu_share: None,
        })
    }

    #[test]
    fn every_job_finishes_and_case_never_crashes() {
        let jobs = mix(1, 4, 64);
        for p in [Policy::Case, Policy::Exclusive, Policy::MgbSm] {
            let r = simulate(A30, p, &jobs).unwrap();
            assert_eq!(r.completed, 64, "{p}");
            assert_eq!(r.oom_crashes, 0, "{p}");
            assert!(
                r.packing_efficiency > 0.0 && r.packing_efficiency <= 1.0 + 1e-9,
                "{p}: {}",
                r.packing_efficiency
            );
            assert!(
                r.memory_utilization > 0.0 && r.memory_utilization <= 1.0,
                "{p}"
            );
        }
    }

    #[test]
    fn exclusive_runs_one_job_per_instance_and_alone_time_is_its_floor() {
        // One job alone on one instance takes exactly its alone time.
        let jobs = mix(0, 1, 1);
        let r = simulate("1xA30:1g.6gb", Policy::Exclusive, &jobs).unwrap();
        assert!(
            (r.makespan - jobs[0].alone_secs()).abs() < 1e-6,
            "{} vs {}",
            r.makespan,
            jobs[0].alone_secs()
        );
        assert!((r.antt - 1.0).abs() < 1e-6);
    }

    #[test]
    fn memory_blind_sharing_crashes_and_case_does_not() {
        let jobs = mix(0, 1, 64);
        let cg = simulate(A30, Policy::Cg(4), &jobs).unwrap();
        assert!(
            cg.oom_crashes > 0,
            "cg:4 packs 4 jobs of 1-6 GB into 6 GB instances"
        );
        let case = simulate(A30, Policy::Case, &jobs).unwrap();
        assert_eq!(case.oom_crashes, 0);
    }

    #[test]
    fn memory_held_per_process_counts_for_longer_and_never_overflows() {
        let jobs = mix(0, 1, 32);
        let per = |hold_per_process| SimOptions {
            hold_per_process,
            ..SimOptions::default()
        };
        let task = simulate_with(A30, Policy::Exclusive, &jobs, per(false)).unwrap();
        let held = simulate_with(A30, Policy::Exclusive, &jobs, per(true)).unwrap();
        // Exclusive runs the same schedule; held memory also covers the
        // CPU phases between a job's GPU tasks.
        assert!((task.makespan - held.makespan).abs() < 1e-6);
        assert!(held.memory_utilization > task.memory_utilization);
        let case = simulate_with(A30, Policy::Case, &jobs, per(true)).unwrap();
        assert_eq!((case.completed, case.oom_crashes), (32, 0));
        assert!(case.memory_utilization <= 1.0);
    }

    #[test]
    fn a_measured_share_packs_a_first_run_nearly_as_a_learned_one_does() {
        // 24 shared jobs that keep half a slice of an A100's seven busy
        // (a share of 71), 1 GiB, 10 s: under the ceiling of 3, the
        // default guess (3/8) packs eight at a time; measured after their
        // first second (halfway down from the guess per window), every
        // job is placed within a few (the simulator gives 28.9 s against
        // 36.3 s, and 29.0 s knowing from the start).
        let jobs: Vec<SimJob> = (0..24)
            .map(|i| SimJob {
                name: format!("s{i}"),
                footprint_mib: 1024,
                phases: vec![Phase::Gpu {
                    mem_mib: 1024,
                    slices: 0.5,
                    secs: 10.0,
                }],
                ..SimJob::default()
            })
            .collect();
        let with = |task_shares| SimOptions {
            compute_ceiling: Some(3000),
            task_shares,
            ..SimOptions::default()
        };
        let run = |t| simulate_with("1xA100-80GB", Policy::Case, &jobs, with(t)).unwrap();
        let (default, measured, stated) = (
            run(TaskShares::Default),
            run(TaskShares::Measured),
            run(TaskShares::Stated),
        );
        for r in [&default, &measured, &stated] {
            assert_eq!((r.completed, r.oom_crashes), (24, 0));
        }
        assert!(
            measured.makespan < default.makespan * 0.9,
            "measured {} against default {}",
            measured.makespan,
            default.makespan
        );
        // The first second at the guess costs little against knowing.
        assert!(measured.makespan <= stated.makespan + 2.0);
    }

    #[test]
    fn shared_jobs_start_a_few_ahead_of_what_the_gpu_takes() {
        // 30 jobs that set up for 3 s on the host, then keep half an A100
        // slice busy for 10 s. Nothing is known of them: at the default
        // share eight run on the GPU at once, and the node has 28 workers.
        let jobs: Vec<SimJob> = (0..30)
            .map(|i| SimJob {
                name: format!("s{i}"),
                footprint_mib: 1024,
                phases: vec![
                    Phase::Cpu { secs: 3.0 },
                    Phase::Gpu {
                        mem_mib: 1024,
                        slices: 0.5,
                        secs: 10.0,
                    },
                ],
                ..SimJob::default()
            })
            .collect();
        let with = |shared_start_ahead| SimOptions {
            compute_ceiling: Some(3000),
            task_shares: TaskShares::Default,
            shared_start_ahead,
            ..SimOptions::default()
        };
        let most_at_once = |r: &SimResult| {
            let spans: Vec<(f64, f64)> = r
                .waits
                .iter()
                .zip(&r.turnarounds)
                .map(|(w, t)| (w.unwrap(), *t))
                .collect();
            spans
                .iter()
                .map(|&(s, _)| spans.iter().filter(|&&(a, b)| a <= s && s < b).count())
                .max()
                .unwrap()
        };
        let run = |o| simulate_with("1xA100-80GB", Policy::Case, &jobs, o).unwrap();
        let (every, ahead) = (run(with(Some(u32::MAX))), run(with(None)));
        assert_eq!((every.completed, ahead.completed), (30, 30));
        assert_eq!(most_at_once(&every), 28, "as many as workers allow");
        assert!(most_at_once(&ahead) <= 8 + 2, "{}", most_at_once(&ahead));
        // Here every batch of eight ends at once, the worst case for a few
        // ahead: 56.3 s against 50.8 s (1, 3, 4 and 6 ahead: 59.3, 53.5,
        // 53.5 and 50.8 s).
        assert!(
            ahead.makespan <= every.makespan * 1.15,
            "{} against {}",
            ahead.makespan,
            every.makespan
        );
    }

    #[test]
    fn a_pipeline_keeps_its_room_between_its_gpu_programs() {
        // One 80 GiB GPU. A pipeline runs three GPU programs of 40 GiB
        // with half a second of host work between them; six
        // jobs of 40 GiB, as long as one of its programs, wait beside it. Without a hold, the room its
        // first program gives back goes to a waiting job, and its next
        // program waits for the one after that.
        let gpu = |mem_mib: u64, secs: f64| Phase::Gpu {
            mem_mib,
            slices: 3.0,
            secs,
        };
        let mut jobs = vec![SimJob {
            name: "pipeline".into(),
            footprint_mib: 40 * 1024,
            phases: vec![
                gpu(40 * 1024, 10.0),
                Phase::Cpu { secs: 0.5 },
                gpu(40 * 1024, 10.0),
                Phase::Cpu { secs: 0.5 },
                gpu(40 * 1024, 10.0),
            ],
            ..SimJob::default()
        }];
        jobs.extend((0..6).map(|i| SimJob {
            name: format!("other{i}"),
            footprint_mib: 40 * 1024,
            submit: 0.1,
            phases: vec![gpu(40 * 1024, 10.0)],
            ..SimJob::default()
        }));
        let with = |hold_between_ms| SimOptions {
            hold_between_ms,
            ..SimOptions::default()
        };
        let run = |o| simulate_with("1xA100-80GB", Policy::Case, &jobs, o).unwrap();
        let (none, held) = (run(with(0)), run(with(3_000)));
        assert_eq!((none.completed, held.completed), (7, 7));
        // Held: its programs follow each other (11.3 s: each takes 3.4 s on
        // three slices); not held, each later one waits for a job that took
        // its room (17.7 s).
        let (a, b) = (none.turnaround_of(0), held.turnaround_of(0));
        assert!(b < 12.0, "held: the pipeline took {b} s");
        assert!(a > b + 5.0, "not held: {a} s, held: {b} s");
        // The other jobs lose no more than the pipeline gains.
        assert!(
            held.makespan <= none.makespan + 0.5,
            "{} against {}",
            held.makespan,
            none.makespan
        );
    }

    #[test]
    fn short_shared_jobs_backfill_an_instance_drained_for_an_isolated_job() {
        // Two 3g.40gb slices, each taken by a long shared job of 30 GiB
        // (100 s of GPU, limit 120 s). An isolated job asks for a slice:
        // one is drained for it until its long job ends. Six short shared
        // jobs of 8 GiB (10 s, limit 90 s: it counts from their start, waits
        // for the GPU included) come next: one fits beside each
        // long job, and those beside the drained one end long before it is
        // free, so they may run there too.
        let gpu = |name: &str, mem_mib: u64, secs: f64, limit: f64, submit: f64| SimJob {
            name: name.into(),
            footprint_mib: mem_mib,
            submit,
            time_limit: Some(limit),
            phases: vec![Phase::Gpu {
                mem_mib,
                slices: 1.0,
                secs,
            }],
            ..SimJob::default()
        };
        let mut jobs = vec![
            gpu("long1", 30 * 1024, 100.0, 120.0, 0.0),
            gpu("long2", 30 * 1024, 100.0, 120.0, 0.0),
            SimJob {
                isolated: true,
                ..gpu("iso", 20 * 1024, 10.0, 30.0, 1.0)
            },
        ];
        jobs.extend((0..6).map(|i| gpu(&format!("short{i}"), 8 * 1024, 10.0, 90.0, 2.0)));
        let r = simulate("1xA100-80GB:3g.40gb*2", Policy::Case, &jobs).unwrap();
        assert_eq!((r.completed, r.oom_crashes, r.timeouts), (9, 0, 0));
        // The isolated job is not delayed: it starts when a long job ends.
        let iso_start = 1.0 + r.waits[2].unwrap();
        assert!(iso_start <= 100.0 + 2.0, "started at {iso_start}");
        // Two at a time, not one: the six are done at 32.9 s (63.8 s with
        // nothing backfilled); their limits (92 s) end before the drain's
        // (120 s), which is what lets them in. The long job beside them
        // shares the slice's
        // compute, so it ends (and the isolated job starts) 0.3 s later.
        let shorts_end = (3..9).map(|k| r.turnaround_of(k) + 2.0).fold(0.0, f64::max);
        assert!(shorts_end < 45.0, "the short jobs ended at {shorts_end}");
    }

    #[test]
    fn more_workers_per_slice_start_more_jobs_at_once() {
        let jobs = mix(0, 1, 64);
        let with = |w| SimOptions {
            workers_per_slice: Some(w),
            ..SimOptions::default()
        };
        let one = simulate_with(A30, Policy::Case, &jobs, with(1)).unwrap();
        let exclusive = simulate(A30, Policy::Exclusive, &jobs).unwrap();
        // One shared job per 1g instance cannot overlap anything: no faster
        // than Slurm's one job per instance.
        assert!(one.makespan >= exclusive.makespan * 0.99);
        let four = simulate_with(A30, Policy::Case, &jobs, with(4)).unwrap();
        assert!(four.makespan < one.makespan);
    }

    #[test]
    fn repartitioning_merges_idle_slices_for_shared_work_and_keeps_layouts_legal() {
        let demand = |secs| SimOptions {
            repartition: Some("demand:2".into()),
            reconfig_secs: secs,
            ..SimOptions::default()
        };
        let jobs = mix(0, 1, 64);
        let fixed = simulate(A30, Policy::Case, &jobs).unwrap();
        let merged = simulate_with(A30, Policy::Case, &jobs, demand(5.0)).unwrap();
        assert_eq!((merged.completed, merged.oom_crashes), (64, 0));
        // All idle at the start with only shared work queued: every GPU's
        // four 1g.6gb become two 2g.12gb.
        let reshapes: Vec<&String> = merged
            .decisions
            .iter()
            .filter(|d| d.starts_with("reshape"))
            .collect();
        assert_eq!(merged.reshapes, 8, "{reshapes:?}");
        assert!(reshapes
            .iter()
            .all(|d| d.ends_with("-> 2g.12gb@0") || d.ends_with("-> 2g.12gb@2")));
        // Nothing is placed before the new instances exist.
        let first = merged
            .decisions
            .iter()
            .position(|d| d.starts_with("place"))
            .unwrap();
        assert!(first > reshapes.len());
        assert!(merged.makespan < fixed.makespan);
        // Baselines keep their layout.
        let exclusive = simulate_with(A30, Policy::Exclusive, &jobs, demand(5.0)).unwrap();
        assert_eq!(exclusive.reshapes, 0);
        // With isolated jobs queued the layout is left for them.
        let iso = mix(1, 0, 32);
        let r = simulate_with(A30, Policy::Case, &iso, demand(5.0)).unwrap();
        assert_eq!((r.completed, r.reshapes), (32, 0));
    }

    #[test]
    fn repartitioning_finishes_every_job_without_crashes() {
        let opts = |pool| SimOptions {
            repartition: Some(format!("demand:{pool}")),
            reconfig_secs: 5.0,
            ..SimOptions::default()
        };
        let a100 = "1xA100-40GB:2g.10gb*2,1g.5gb*3";
        for seed in 1..4 {
            for (i, s) in [(4, 1), (1, 1), (1, 4), (0, 1), (1, 0)] {
                for footprints in [Footprints::OneToSix, Footprints::OneToTen] {
                    let jobs = generate(&Mix {
                        isolated: i,
                        shared: s,
                        jobs: 24,
                        footprints,
                        seed,
                        gpu_share: None,
                    });
                    for pool in [2, 7] {
                        let r = simulate_with(a100, Policy::Case, &jobs, opts(pool)).unwrap();
                        assert_eq!((r.completed, r.oom_crashes), (24, 0), "{seed} {i}:{s}");
                    }
                }
            }
        }
    }

    #[test]
    fn repartitioning_splits_idle_instances_for_isolated_jobs() {
        let jobs = mix(1, 0, 16);
        let opts = SimOptions {
            repartition: Some("demand:2".into()),
            reconfig_secs: 1.0,
            ..SimOptions::default()
        };
        // Two 2g.12gb per A30: each isolated job (~2 GB) would hold a whole
        // 2g instance; split, twice as many run at once.
        let spec = "4xA30:2g.12gb*2";
        let fixed = simulate(spec, Policy::Case, &jobs).unwrap();
        let split = simulate_with(spec, Policy::Case, &jobs, opts).unwrap();
        assert_eq!(split.completed, 16);
        assert_eq!(split.reshapes, 8);
        assert!(split.makespan < fixed.makespan * 0.7);
    }

    #[test]
    fn runs_are_deterministic() {
        let jobs = mix(1, 1, 32);
        let a = simulate(A30, Policy::Case, &jobs).unwrap();
        let b = simulate(A30, Policy::Case, &jobs).unwrap();
        assert_eq!(a.decisions, b.decisions);
        assert_eq!(a.makespan, b.makespan);
    }

    #[test]
    fn policy_names() {
        assert_eq!("cg:4".parse::<Policy>().unwrap(), Policy::Cg(4));
        assert!("cg:0".parse::<Policy>().is_err());
        assert!("slurm".parse::<Policy>().is_err());
    }

    #[test]
    fn every_preset_is_made_of_registered_policies() {
        for p in [
            Policy::Case,
            Policy::Exclusive,
            Policy::Cg(4),
            Policy::MgbSm,
        ] {
            assert!(crate::launch::launch_policy(p.launch_name()).is_ok(), "{p}");
            assert!(
                crate::placement::placement_policy(p.placement_name()).is_some(),
                "{p}"
            );
        }
    }
}
