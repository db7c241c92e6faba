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

mod reshape;
pub mod workload;

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

use crate::cluster::{Cluster, Effect};
use crate::gpu::{parse_sim_spec, sim_instances, Instance, SimGpu};
use crate::job::{GpuRequest, JobId, JobSpec};
use crate::launch::{CaseLaunch, ExclusiveLaunch, LaunchPolicy};
use crate::mig::MigPlacement;
use crate::outcome::{EndCause, ProcessOutcome};
use crate::placement::{
    Begin, BlindPlacement, CasePlacement, ExclusivePlacement, MgbSmPlacement, NodeBook, NodeEvent,
    Placed, PlacementError, TaskBook, TaskId, TaskRequest,
};
use crate::repartition::DemandRepartition;
use crate::sm::KernelShape;
use crate::wire::{InstanceUse, JobEnded, NodeRegistration};

pub use workload::{Phase, SimJob};

/// Slowdown per co-located neighbour (CASE measured a 2.2% mean kernel
/// slowdown from co-location; this is a little more, to stay conservative).
pub const INTERFERENCE: f64 = 0.03;

const NODE: &str = "sim";
const MIB: u64 = 1024 * 1024;

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
    /// Each job's time from submission to start (`None`: never started),
    /// in the order given.
    #[serde(skip)]
    pub waits: Vec<Option<f64>>,
    /// (time, memory utilization) at every change, for plots.
    #[serde(skip)]
    pub utilization: Vec<(f64, f64)>,
    /// The launch and placement decisions, in order (for parity checks).
    #[serde(skip)]
    pub decisions: Vec<String>,
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
}

struct Run {
    inst: usize,
    remaining: f64,
    slices: f64,
    mem: u64,
    job: usize,
    task: Option<TaskId>,
}

#[derive(Default, Clone)]
struct JobState {
    cid: JobId,
    phase: usize,
    instance: Option<usize>,
    started: bool,
    /// When it started (seconds).
    start: Option<f64>,
    end: Option<f64>,
    oom: bool,
    /// The reservation a job holds for its life (`hold_per_process`):
    /// (instance, MiB).
    held: Option<(usize, u64)>,
}

/// A re-partition waiting for its instances to empty.
struct Retiring {
    seq: u64,
    gpu: usize,
    retire: Vec<String>,
    create: Vec<MigPlacement>,
}

/// A re-partition whose old instances are gone: its new ones are ready
/// at `at`, when the order is reported done.
struct Creating {
    at: f64,
    seq: u64,
    gpu: usize,
    removed: Vec<String>,
    create: Vec<MigPlacement>,
}

struct Sim<'a> {
    policy: Policy,
    jobs: &'a [SimJob],
    /// Every instance that ever existed (indices stay valid); `alive` says
    /// which exist now, `layout` where each sits (MIG instances only).
    inst: Vec<Instance>,
    alive: Vec<bool>,
    layout: Vec<Option<(usize, MigPlacement)>>,
    gpus: Vec<SimGpu>,
    reconfig_secs: f64,
    retiring: Vec<Retiring>,
    /// Re-partitions making their new instances.
    creating: Vec<Creating>,
    /// Jobs whose GPU task fits no instance until those exist.
    deferred: Vec<usize>,
    reshapes: usize,
    cluster: Cluster,
    /// The node's placement state, driven as gnoded's probe server drives
    /// it.
    node: NodeBook,
    /// Isolated jobs launched onto instances that shared tasks still used:
    /// they start once those have left, as on a live node.
    starting: Vec<usize>,
    state: Vec<JobState>,
    by_cid: BTreeMap<JobId, usize>,
    running: Vec<Run>,
    timers: BinaryHeap<Reverse<(u64, u64, usize)>>,
    seq: u64,
    now: f64,
    hold_per_process: bool,
    /// SMs in one compute slice (of the smallest kind in the cluster).
    sms_per_slice: f64,
    /// Compute slices of a whole GPU (of the largest model).
    gpu_slices: f64,
    default_shares: bool,
    oom: usize,
    mem_integral: f64,
    total_mem: f64,
    series: Vec<(f64, f64)>,
    decisions: Vec<String>,
}

fn spec_of(j: &SimJob) -> JobSpec {
    JobSpec {
        name: j.name.clone(),
        script: "#!/bin/sh\n".into(),
        working_dir: "/".into(),
        user_name: j.user.clone().unwrap_or_else(|| "sim".into()),
        nice: j.nice,
        uid: 1,
        gid: 1,
        submit_host: "sim".into(),
        isolated: j.isolated,
        gpu: GpuRequest {
            model: None,
            mig_profile: None,
            mem_mib: Some(j.peak_mib().max(1)),
            share: None,
            share_limit: None,
            count: None,
        },
        ..JobSpec::default()
    }
}

impl Sim<'_> {
    fn used_mem(&self) -> u64 {
        let tasks: u64 = self
            .running
            .iter()
            .filter(|r| !self.jobs[r.job].isolated && self.state[r.job].held.is_none())
            .map(|r| r.mem)
            .sum::<u64>()
            + self
                .state
                .iter()
                .filter(|s| s.end.is_none())
                .filter_map(|s| s.held.map(|(_, mib)| mib))
                .sum::<u64>();
        let held: u64 = self
            .state
            .iter()
            .zip(self.jobs)
            .filter(|(s, j)| j.isolated && s.started && s.end.is_none())
            .map(|(_, j)| j.footprint_mib)
            .sum();
        tasks + held
    }

    fn record_use(&mut self) {
        let u = self.used_mem() as f64 / self.total_mem;
        if self
            .series
            .last()
            .is_none_or(|&(t, v)| t != self.now || v != u)
        {
            self.series.push((self.now, u));
        }
    }

    fn rates(&self) -> Vec<f64> {
        let mut demand = vec![0.0; self.inst.len()];
        let mut count = vec![0u32; self.inst.len()];
        for r in &self.running {
            let k = self.inst[r.inst].compute_slices.max(1) as f64;
            demand[r.inst] += r.slices.min(k) / k;
            count[r.inst] += 1;
        }
        self.running
            .iter()
            .map(|r| {
                let k = self.inst[r.inst].compute_slices.max(1) as f64;
                let speed = r.slices.min(k) / r.slices.min(1.0);
                let share = demand[r.inst].max(1.0);
                let interference = 1.0 + INTERFERENCE * (count[r.inst] - 1) as f64;
                speed / share / interference
            })
            .collect()
    }

    fn timer(&mut self, at: f64, job: usize) {
        self.seq += 1;
        self.timers.push(Reverse((at.to_bits(), self.seq, job)));
    }

    fn uuid_index(&self, uuid: &str) -> usize {
        self.inst
            .iter()
            .zip(&self.alive)
            .position(|(i, &alive)| alive && i.uuid == uuid)
            .expect("known instance")
    }

    /// Starts the job's current phase (or ends the job).
    fn advance(&mut self, j: usize) {
        let s = &self.state[j];
        let Some(phase) = self.jobs[j].phases.get(s.phase).cloned() else {
            self.finish(j, false);
            return;
        };
        match phase {
            Phase::Cpu { secs } => self.timer(self.now + secs, j),
            Phase::Gpu {
                mem_mib, slices, ..
            } => {
                // Isolated jobs run on the instance they hold; every other
                // GPU task goes through the placement policy.
                if let Some(i) = s.instance.filter(|_| self.jobs[j].isolated) {
                    self.run_task(j, i, None);
                    return;
                }
                // A process holding its reservation runs there.
                if let Some((i, _)) = s.held {
                    self.run_task(j, i, None);
                    return;
                }
                // The task's kernel: 256-thread blocks (8 warps), enough to
                // fill `slices` compute slices' SMs (8 such blocks fill an SM).
                let shape = KernelShape {
                    blocks: (slices * self.sms_per_slice * 8.0).ceil().max(1.0) as u64,
                    block_warps: 8,
                };
                let req = TaskRequest {
                    job: s.cid,
                    pid: 1,
                    bytes: mem_mib * MIB,
                    warps: shape.warps(),
                    share: (!self.default_shares).then(|| self.share_of(slices)),
                    shape: Some(shape),
                };
                let begun = self.node.begin(req, self.now_ms());
                self.carry_out();
                match begun {
                    Ok(Begin::Placed(p)) => self.placed(p),
                    Ok(Begin::Waiting(_)) => {}
                    Err(PlacementError::Overflow { instance, .. }) => {
                        // The allocation overflows the instance: the job crashes.
                        self.decisions
                            .push(format!("oom {} on {instance}", self.jobs[j].name));
                        self.finish(j, true);
                    }
                    Err(PlacementError::NeverFits { .. }) if !self.creating.is_empty() => {
                        // Instances are being re-made: ask again when they exist.
                        self.deferred.push(j);
                    }
                    Err(_) => self.finish(j, true),
                }
            }
        }
    }

    /// The compute demand of a task keeping `slices` compute slices busy:
    /// that part of a whole GPU, in thousandths (at least 1).
    fn share_of(&self, slices: f64) -> u32 {
        let share = slices / self.gpu_slices * crate::compute::WHOLE_GPU as f64;
        (share.round() as u32).clamp(1, crate::compute::WHOLE_GPU)
    }

    /// The virtual clock in milliseconds, the node book's time.
    fn now_ms(&self) -> i64 {
        (self.now * 1000.0) as i64
    }

    /// Carries out what the node's book decided: waiting tasks it placed
    /// start (records and answers have no one to go to here).
    fn carry_out(&mut self) {
        loop {
            let placed: Vec<Placed> = self
                .node
                .take_events()
                .into_iter()
                .filter_map(|e| match e {
                    NodeEvent::Placed(p) => Some(p),
                    _ => None,
                })
                .collect();
            if placed.is_empty() {
                return;
            }
            for p in placed {
                self.placed(p);
            }
        }
    }

    fn placed(&mut self, p: Placed) {
        let j = self.by_cid[&p.job];
        let i = self.uuid_index(&p.instance);
        self.decisions
            .push(format!("place {} on {}", self.jobs[j].name, p.instance));
        if self.hold_per_process {
            // Kept until the job ends (released with the job).
            self.state[j].held = Some((i, p.bytes / MIB));
            self.run_task(j, i, None);
        } else {
            self.run_task(j, i, Some(p.task));
        }
    }

    /// Starts job `j`'s current GPU phase on instance `i`.
    fn run_task(&mut self, j: usize, i: usize, task: Option<TaskId>) {
        if let Some(Phase::Gpu {
            mem_mib,
            slices,
            secs,
        }) = self.jobs[j].phases.get(self.state[j].phase)
        {
            self.running.push(Run {
                inst: i,
                remaining: *secs,
                slices: *slices,
                mem: *mem_mib,
                job: j,
                task,
            });
        }
    }

    fn finish(&mut self, j: usize, oom: bool) {
        let st = &mut self.state[j];
        st.end = Some(self.now);
        st.oom = oom;
        if oom {
            self.oom += 1;
        }
        let cid = st.cid;
        let instance = st.instance;
        let now = self.now_ms();
        self.node.job_ended(cid, now);
        if let (Policy::Exclusive, Some(i)) = (self.policy, instance) {
            let uuid = self.inst[i].uuid.clone();
            self.node.set_owner(&uuid, None, now);
        }
        self.carry_out();
        let run = self.cluster.job(cid).map_or(0, |j| j.run);
        let _ = self.cluster.job_ended(
            NODE,
            &JobEnded {
                job_id: cid,
                run,
                outcome: ProcessOutcome {
                    exit_code: Some(if oom { 1 } else { 0 }),
                    signal: None,
                    cause: EndCause::Exited,
                },
                end_time: self.now as i64,
                usage: None,
                steps: Default::default(),
            },
        );
    }

    /// Tells the controller state what the node sees, then launches.
    fn schedule(&mut self) {
        self.finish_reshapes();
        let book = self.node.tasks();
        let uses: BTreeMap<String, InstanceUse> = book
            .instances()
            .iter()
            .map(|i| {
                (
                    i.uuid.clone(),
                    InstanceUse {
                        tasks: book.tasks_on(&i.uuid),
                        processes: i.processes,
                        ..InstanceUse::default()
                    },
                )
            })
            .collect();
        let waiting = book.waiting_len() as u32;
        self.cluster.update_instance_use(NODE, &uses);
        self.cluster.set_tasks_waiting(NODE, waiting);
        let effects = self.cluster.schedule(self.now as i64);
        let now = self.now_ms();
        let mut launched = Vec::new();
        let mut reshapes = Vec::new();
        for e in effects {
            match e {
                Effect::Launch { job, .. } => {
                    // The simulated node has every launch at once.
                    let run = self.cluster.job(job).map_or(0, |j| j.run);
                    self.cluster.launch_confirmed(job, run);
                    launched.push(job);
                }
                // Under exclusive every job owns its instance (below);
                // nothing is drained for isolated jobs.
                Effect::Drain { instances, seq, .. } if self.policy != Policy::Exclusive => {
                    self.node.set_drained(&instances, seq, now);
                }
                Effect::Reshape { order, .. } => reshapes.push(order),
                _ => {}
            }
        }
        self.carry_out();
        for cid in launched {
            let j = self.by_cid[&cid];
            let insts = self
                .cluster
                .job(cid)
                .map(|x| x.gpu_instances.clone())
                .unwrap_or_default();
            let inst = insts.first().cloned();
            let index = inst.as_deref().map(|u| self.uuid_index(u));
            let mut busy = false;
            if let (Policy::Exclusive, Some(uuid)) = (self.policy, inst.as_deref()) {
                // Slurm: the job holds its instance for its whole life.
                self.node.set_owner(uuid, Some(cid), now);
            } else {
                // As gnoded does: the instances are closed to shared tasks,
                // and the job starts once none is left there.
                for uuid in &insts {
                    busy |= self.node.hold(uuid, cid);
                }
            }
            self.carry_out();
            self.decisions.push(format!(
                "launch {} {}",
                self.jobs[j].name,
                inst.as_deref().unwrap_or("-")
            ));
            let st = &mut self.state[j];
            st.instance = index;
            st.started = true;
            st.start.get_or_insert(self.now);
            if busy {
                self.starting.push(j);
            } else {
                self.advance(j);
            }
        }
        for order in reshapes {
            self.reshape_ordered(order);
        }
    }

    /// Starts the isolated jobs whose instances shared tasks have left.
    fn start_drained(&mut self) {
        let ready: Vec<usize> = self
            .starting
            .iter()
            .copied()
            .filter(|&j| {
                let cid = self.state[j].cid;
                self.cluster.job(cid).is_none_or(|x| {
                    x.gpu_instances
                        .iter()
                        .all(|u| self.node.tasks().tasks_on(u) == 0)
                })
            })
            .collect();
        self.starting.retain(|j| !ready.contains(j));
        for j in ready {
            self.advance(j);
        }
    }
}

/// Knobs of a simulated node beyond its policy.
#[derive(Debug, Clone, Copy, Default)]
pub struct SimOptions {
    /// Shared jobs run at once per compute slice under `case` and `mgb-sm`
    /// (default 4, the paper's: 4 per 1g, 8 per 2g instance).
    pub workers_per_slice: Option<u32>,
    /// A non-isolated job keeps its first task's reservation until it ends
    /// (one process that allocates once, as the driver interception
    /// reserves), instead of reserving for each GPU task.
    pub hold_per_process: bool,
    /// Re-partitions MIG GPUs by demand (under `case` and `mgb-sm`; the
    /// other policies keep the layout, as Slurm does).
    pub repartition: Option<DemandRepartition>,
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
    /// Whether each GPU task states its demand (its parallelism over its
    /// GPU's slices: what learning from earlier runs gives) or none, so
    /// the node's default part of its instance counts (what a first run,
    /// or any run under MPS, where no share can be learned, gets).
    pub default_shares: bool,
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
    let gpus = parse_sim_spec(spec)?;
    let inst = sim_instances(NODE, &gpus);
    // Where each instance sits, in `sim_instances` order.
    let layout: Vec<Option<(usize, MigPlacement)>> = gpus
        .iter()
        .enumerate()
        .flat_map(|(gi, g)| match &g.layout {
            None => vec![None],
            Some(l) => l.iter().map(|p| Some((gi, *p))).collect(),
        })
        .collect();
    debug_assert_eq!(layout.len(), inst.len());
    // Re-partitioning may make a MIG GPU's largest profile.
    let remade = |g: &SimGpu| {
        g.model
            .profiles
            .iter()
            .filter(|p| !p.name.contains('+'))
            .map(|p| p.memory_mib)
            .max()
            .unwrap_or(0)
    };
    let repartitions =
        options.repartition.is_some() && matches!(policy, Policy::Case | Policy::MgbSm);
    let biggest = inst
        .iter()
        .map(|i| i.memory_mib)
        .chain(
            gpus.iter()
                .filter(|g| repartitions && g.layout.is_some())
                .map(remade),
        )
        .max()
        .unwrap_or(0);
    if let Some(j) = jobs.iter().find(|j| j.peak_mib() > biggest) {
        return Err(SimError::TooBig(j.name.clone(), j.peak_mib()));
    }
    let launch: Box<dyn LaunchPolicy> = match policy {
        Policy::Exclusive => Box::new(ExclusiveLaunch),
        _ => Box::new(CaseLaunch),
    };
    let worker_limit = match policy {
        Policy::Case | Policy::MgbSm => options
            .workers_per_slice
            .map(|w| w * inst.iter().map(|i| i.compute_slices.max(1)).sum::<u32>()),
        Policy::Exclusive => Some(inst.len() as u32),
        Policy::Cg(r) => Some(r * inst.len() as u32),
    };
    let repartition = options
        .repartition
        .filter(|_| matches!(policy, Policy::Case | Policy::MgbSm));
    let mut cluster = Cluster::new(launch);
    if let Some(name) = options.priority {
        cluster.set_priority_policy(crate::priority::priority_policy(
            name,
            crate::priority::PriorityConfig::default(),
        )?);
    }
    cluster.register_node(
        &NodeRegistration {
            instance_id: String::new(),
            name: NODE.into(),
            url: "sim://".into(),
            cpus: 1024,
            memory_mib: 1 << 30,
            instances: inst.clone(),
            worker_limit,
            running: vec![],
            runs: Default::default(),
            ended: vec![],
            fence_timeout_ms: None,
            heartbeat_ms: 0,
            // The controller plans re-partitions of every MIG GPU, as
            // for a live node that offers them.
            reshape_keep: Default::default(),
            reshape_gpus: match repartition {
                Some(_) => layout
                    .iter()
                    .filter_map(|l| l.map(|(g, _)| g as u32))
                    .collect::<std::collections::BTreeSet<u32>>()
                    .into_iter()
                    .collect(),
                None => Vec::new(),
            },
        },
        0,
    );
    if let Some(p) = repartition {
        cluster.set_repartition(Some(Box::new(p)));
    }
    let placement: Box<dyn crate::placement::PlacementPolicy> = match policy {
        Policy::Case => Box::new(CasePlacement),
        Policy::MgbSm => Box::new(MgbSmPlacement),
        Policy::Exclusive => Box::new(ExclusivePlacement),
        Policy::Cg(_) => Box::new(BlindPlacement),
    };
    let mut book = TaskBook::of_instances(placement, &inst);
    if let Some(n) = options.max_overtakes {
        book = book.with_max_overtakes(n);
    }
    book = book.with_compute_ceiling(options.compute_ceiling);
    // A GPU's compute slices (of the largest model), for tasks' demands.
    let gpu_slices = inst
        .iter()
        .filter_map(|i| crate::gpu::model(&i.model))
        .map(|m| m.compute_slices)
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let sms_per_slice = inst
        .iter()
        .map(|i| i.sms as f64 / i.compute_slices.max(1) as f64)
        .fold(f64::INFINITY, f64::min);
    let total_mem = inst.iter().map(|i| i.memory_mib).sum::<u64>().max(1) as f64;
    let initial = inst.clone();
    let mut sim = Sim {
        policy,
        jobs,
        alive: vec![true; inst.len()],
        layout,
        gpus,
        reconfig_secs: options.reconfig_secs.max(0.0),
        retiring: Vec::new(),
        creating: Vec::new(),
        deferred: Vec::new(),
        reshapes: 0,
        sms_per_slice,
        gpu_slices,
        default_shares: options.default_shares,
        hold_per_process: options.hold_per_process,
        inst,
        cluster,
        node: NodeBook::new(book),
        starting: Vec::new(),
        state: vec![JobState::default(); jobs.len()],
        by_cid: BTreeMap::new(),
        running: Vec::new(),
        timers: BinaryHeap::new(),
        seq: 0,
        now: 0.0,
        oom: 0,
        mem_integral: 0.0,
        total_mem,
        series: Vec::new(),
        decisions: Vec::new(),
    };
    let mut order: Vec<usize> = (0..jobs.len()).collect();
    order.sort_by(|&a, &b| jobs[a].submit.total_cmp(&jobs[b].submit).then(a.cmp(&b)));
    let mut next_sub = 0;
    loop {
        // Submissions due now.
        let mut submitted = false;
        while next_sub < order.len() && jobs[order[next_sub]].submit <= sim.now {
            let j = order[next_sub];
            if let Ok((cid, _)) = sim.cluster.submit(spec_of(&jobs[j]), sim.now as i64) {
                sim.state[j].cid = cid;
                sim.by_cid.insert(cid, j);
            }
            next_sub += 1;
            submitted = true;
        }
        if submitted {
            sim.schedule();
        }
        sim.record_use();
        // The next thing to happen.
        let rates = sim.rates();
        let gpu_next = sim
            .running
            .iter()
            .zip(&rates)
            .map(|(r, rate)| sim.now + r.remaining / rate)
            .fold(f64::INFINITY, f64::min);
        let timer_next = sim
            .timers
            .peek()
            .map(|Reverse((t, _, _))| f64::from_bits(*t))
            .unwrap_or(f64::INFINITY);
        let sub_next = order
            .get(next_sub)
            .map(|&j| jobs[j].submit)
            .unwrap_or(f64::INFINITY);
        let create_next = sim
            .creating
            .iter()
            .map(|c| c.at)
            .fold(f64::INFINITY, f64::min);
        let t = gpu_next.min(timer_next).min(sub_next).min(create_next);
        if !t.is_finite() {
            break;
        }
        let dt = (t - sim.now).max(0.0);
        sim.mem_integral += sim.used_mem() as f64 * dt;
        for (r, rate) in sim.running.iter_mut().zip(&rates) {
            r.remaining -= rate * dt;
        }
        sim.now = t;
        // GPU tasks that finished.
        let mut done: Vec<Run> = Vec::new();
        let mut k = 0;
        while k < sim.running.len() {
            if sim.running[k].remaining <= 1e-9 {
                done.push(sim.running.swap_remove(k));
            } else {
                k += 1;
            }
        }
        done.sort_by_key(|r| r.job);
        let mut next_phase = Vec::new();
        for r in done {
            if let Some(task) = r.task {
                let now = sim.now_ms();
                if sim.node.end(task, now).is_ok() {
                    sim.carry_out();
                }
            }
            next_phase.push(r.job);
        }
        // CPU phases that finished.
        while let Some(Reverse((bits, _, j))) = sim.timers.peek().copied() {
            if f64::from_bits(bits) > sim.now {
                break;
            }
            sim.timers.pop();
            next_phase.push(j);
        }
        for j in next_phase {
            if sim.state[j].end.is_some() {
                continue;
            }
            sim.state[j].phase += 1;
            sim.advance(j);
        }
        sim.start_drained();
        sim.create_due();
        sim.schedule();
    }
    let unfinished = sim.state.iter().filter(|s| s.end.is_none()).count();
    if unfinished > 0 {
        return Err(SimError::Stuck(unfinished));
    }
    let makespan = sim
        .state
        .iter()
        .filter_map(|s| s.end)
        .fold(0.0, f64::max)
        .max(1e-9);
    let completed: Vec<(usize, &JobState)> = sim
        .state
        .iter()
        .enumerate()
        .filter(|(_, s)| !s.oom)
        .collect();
    let n = completed.len().max(1) as f64;
    let turnaround = |j: usize, s: &JobState| s.end.unwrap_or(makespan) - jobs[j].submit;
    let mean_turnaround = completed
        .iter()
        .map(|(j, s)| turnaround(*j, s))
        .sum::<f64>()
        / n;
    let waits: Vec<Option<f64>> = sim
        .state
        .iter()
        .zip(jobs)
        .map(|(s, j)| s.start.map(|t| t - j.submit))
        .collect();
    let mean_wait = completed
        .iter()
        .map(|(j, _)| waits[*j].unwrap_or(0.0))
        .sum::<f64>()
        / n;
    let antt = completed
        .iter()
        .map(|(j, s)| turnaround(*j, s) / jobs[*j].alone_secs().max(1e-9))
        .sum::<f64>()
        / n;
    let stp = completed
        .iter()
        .map(|(j, s)| jobs[*j].alone_secs() / turnaround(*j, s).max(1e-9))
        .sum::<f64>();
    // The bound of the jobs that completed (crashed jobs did not need
    // their remaining work done).
    let done_jobs: Vec<SimJob> = completed.iter().map(|(j, _)| jobs[*j].clone()).collect();
    let lb = lower_bound(&done_jobs, &initial);
    Ok(SimResult {
        policy: policy.to_string(),
        jobs: jobs.len(),
        completed: completed.len(),
        oom_crashes: sim.oom,
        makespan,
        throughput_per_hour: completed.len() as f64 / makespan * 3600.0,
        mean_turnaround,
        mean_wait,
        waits,
        memory_utilization: sim.mem_integral / (sim.total_mem * makespan),
        lower_bound: lb,
        packing_efficiency: lb / makespan,
        antt,
        stp,
        reshapes: sim.reshapes,
        utilization: sim.series,
        decisions: sim.decisions,
    })
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
    use crate::repartition::DemandRepartition;

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
    fn the_controllers_priority_policy_orders_the_queue_in_the_simulator_too() {
        // One whole GPU; three isolated jobs of 100 s, b and c submitted
        // together after a (the first waiting job reserves the GPU, so
        // one that comes later does not overtake it); c has nice -10000.
        let job = |name: &str, submit: f64, nice: i64| SimJob {
            name: name.into(),
            isolated: true,
            footprint_mib: 1024,
            submit,
            phases: vec![Phase::Gpu {
                mem_mib: 1024,
                slices: 1.0,
                secs: 100.0,
            }],
            user: Some("ann".into()),
            nice,
        };
        let jobs = [job("a", 0.0, 0), job("b", 1.0, 0), job("c", 1.0, -10_000)];
        for policy in [Policy::Case, Policy::Exclusive] {
            let run = |priority| {
                let options = SimOptions {
                    priority,
                    ..SimOptions::default()
                };
                simulate_with("1xA100-40GB", policy, &jobs, options).unwrap()
            };
            let waits = |r: &SimResult| -> Vec<f64> {
                r.waits.iter().map(|w| w.unwrap().round()).collect()
            };
            // First come, first served: c waits for a and b.
            let basic = run(None);
            assert_eq!(waits(&basic), vec![0.0, 99.0, 199.0], "{policy}");
            assert!((basic.mean_wait - 99.3).abs() < 1.0, "{}", basic.mean_wait);
            // Under multifactor, c's nice puts it before b (exclusive
            // too, which takes both queues as one).
            let multifactor = run(Some("multifactor"));
            assert_eq!(waits(&multifactor), vec![0.0, 199.0, 99.0], "{policy}");
        }
        // A name no policy has is refused.
        let bad = SimOptions {
            priority: Some("fifo"),
            ..SimOptions::default()
        };
        assert!(matches!(
            simulate_with("1xA100-40GB", Policy::Exclusive, &jobs, bad),
            Err(SimError::Priority(_))
        ));
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
            repartition: Some(DemandRepartition { max_pool_slices: 2 }),
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
            repartition: Some(DemandRepartition {
                max_pool_slices: pool,
            }),
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
            repartition: Some(DemandRepartition { max_pool_slices: 2 }),
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
}
