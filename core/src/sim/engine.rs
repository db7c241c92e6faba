//! The simulator's state and what happens to a job on its nodes: its
//! phases and its GPU tasks through each node's [`NodeBook`], on the
//! virtual clock. Its launch is in `passes.rs`, its end in `ends.rs`.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

use super::tokens::Tokens;
use super::{Phase, Policy, SimJob, SimOutcome, INTERFERENCE, NODE};
use crate::cluster::Cluster;
use crate::gpu::mig::MigPlacement;
use crate::gpu::{Instance, SimGpu};
use crate::job::{GpuRequest, JobId, JobSpec};
use crate::placement::{Begin, NodeBook, NodeEvent, Placed, PlacementError, TaskId, TaskRequest};
use crate::sm::KernelShape;

pub(super) const MIB: u64 = 1024 * 1024;

/// The name of node `k` of `n` (`sim` when it is the only one, as a
/// live node's traces name it).
pub(super) fn node_name(k: usize, n: usize) -> String {
    if n == 1 {
        NODE.to_string()
    } else {
        format!("{NODE}{}", k + 1)
    }
}

/// A GPU task in progress.
pub(super) struct Run {
    pub inst: usize,
    pub remaining: f64,
    pub slices: f64,
    pub mem: u64,
    pub job: usize,
    pub task: Option<TaskId>,
    /// Held to a GPU time quota: it runs only while its process holds a
    /// token ([`Tokens`]).
    pub gated: bool,
}

/// What a timer does when it is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Wake {
    /// The job's CPU phase ends.
    PhaseEnd,
    /// The job's time limit is reached: its node kills it.
    TimeLimit,
    /// Only a launch pass (a grace time ends).
    Pass,
    /// The job's GPU task has run a measurement window: its process
    /// reports its busy time (`TaskShares::Measured`).
    Measure,
    /// The room kept for the job's next GPU task on node `node` (keep
    /// `seq`) is given back.
    KeepEnd { node: usize, seq: u64 },
}

/// A timer: (when, order, job, the job's run generation, what).
pub(super) type Timer = Reverse<(u64, u64, usize, u32, Wake)>;

/// One job's progress.
#[derive(Default, Clone)]
pub(super) struct Progress {
    pub cid: JobId,
    pub phase: usize,
    pub instance: Option<usize>,
    /// Its batch node and the others of its run (nodes' indices).
    pub nodes: Vec<usize>,
    /// A run is live (launched, neither ended nor killed).
    pub running: bool,
    /// When its first run started (seconds).
    pub start: Option<f64>,
    /// When its current run started.
    pub run_start: f64,
    pub end: Option<f64>,
    pub outcome: Option<SimOutcome>,
    /// The reservation a job holds for its life (`hold_per_process`):
    /// (instance, MiB).
    pub held: Option<(usize, u64)>,
    /// Its run generation: timers of earlier runs are stale.
    pub generation: u32,
    /// Node-seconds of its runs (width times run time), for shares.
    pub node_secs: f64,
    /// Runs ended for another job (preemption).
    pub preempted: u32,
    /// When its run was suspended, while it is (`suspend.rs`).
    pub suspended_at: Option<f64>,
    /// When its CPU phase ends, while it is in one.
    pub phase_due: Option<f64>,
    /// When its run reaches its time limit.
    pub limit_due: Option<f64>,
}

impl Progress {
    /// Its batch node (the first of its run; node 0 before it runs).
    pub fn node(&self) -> usize {
        self.nodes.first().copied().unwrap_or(0)
    }
}

/// A re-partition waiting for its instances to empty.
pub(super) struct Retiring {
    pub seq: u64,
    pub gpu: usize,
    pub retire: Vec<String>,
    pub create: Vec<MigPlacement>,
}

/// A re-partition whose old instances are gone: its new ones are ready
/// at `at`, when the order is reported done.
pub(super) struct Creating {
    pub at: f64,
    pub seq: u64,
    pub gpu: usize,
    pub removed: Vec<String>,
    pub create: Vec<MigPlacement>,
}

pub(super) struct Sim<'a> {
    pub policy: Policy,
    pub jobs: &'a [SimJob],
    /// Every instance that ever existed (indices stay valid); `alive` says
    /// which exist now, `layout` where each sits (MIG instances only),
    /// `inst_node` on which node.
    pub inst: Vec<Instance>,
    pub alive: Vec<bool>,
    pub layout: Vec<Option<(usize, MigPlacement)>>,
    pub inst_node: Vec<usize>,
    pub gpus: Vec<SimGpu>,
    pub reconfig_secs: f64,
    pub retiring: Vec<Retiring>,
    /// Re-partitions making their new instances.
    pub creating: Vec<Creating>,
    /// Jobs whose GPU task fits no instance until those exist.
    pub deferred: Vec<usize>,
    pub reshapes: usize,
    pub cluster: Cluster,
    /// The instances' token schedulers (GPU time quotas).
    pub tokens: Tokens,
    /// Each node's name and placement state, driven as gnoded's probe
    /// server drives it.
    pub names: Vec<String>,
    pub books: Vec<NodeBook>,
    /// Isolated jobs launched onto instances that shared tasks still used:
    /// they start once those have left, as on a live node.
    pub starting: Vec<usize>,
    pub state: Vec<Progress>,
    pub by_cid: BTreeMap<JobId, usize>,
    pub running: Vec<Run>,
    pub timers: BinaryHeap<Timer>,
    pub seq: u64,
    pub now: f64,
    /// Jobs by submission time, and how many were submitted.
    pub order: Vec<usize>,
    pub next_submission: usize,
    pub hold_per_process: bool,
    /// SMs in one compute slice (of the smallest kind in the cluster).
    pub sms_per_slice: f64,
    /// Compute slices of a whole GPU (of the largest model).
    pub gpu_slices: f64,
    pub task_shares: super::TaskShares,
    /// The longest grace time of any QOS: a preempted job in its grace
    /// time is looked at again then.
    pub grace_secs: f64,
    /// The controller may preempt: a task that started waiting during a
    /// pass is reported at once (gnoded's next heartbeat), not at the next
    /// event.
    pub preempts: bool,
    pub oom: usize,
    pub mem_integral: f64,
    pub total_mem: f64,
    pub series: Vec<(f64, f64)>,
    pub decisions: Vec<String>,
}

pub(super) fn spec_of(j: &SimJob) -> JobSpec {
    let mut spec = JobSpec {
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
            count: (j.gpus > 1).then_some(j.gpus),
        },
        time_limit: j.time_limit.map(|s| s.ceil().max(1.0) as u64),
        ..JobSpec::default()
    };
    if let Some(q) = j
        .gpu_share
        .as_deref()
        .and_then(|s| crate::time_quota::TimeQuota::parse(s).ok())
    {
        spec.gpu.share = Some(q.request);
        spec.gpu.share_limit = Some(q.limit);
    }
    spec.slurm.account = j.account.clone();
    spec.slurm.qos = j.qos.clone();
    spec.slurm.cpus_per_task = (j.cpus > 1).then_some(j.cpus);
    if j.nodes > 1 {
        spec.slurm.other.insert("nodes".into(), j.nodes.to_string());
    }
    if j.exclusive {
        spec.slurm.other.insert("exclusive".into(), String::new());
    }
    spec
}

impl Sim<'_> {
    pub fn used_mem(&self) -> u64 {
        let tasks: u64 = self
            .running
            .iter()
            .filter(|r| !self.jobs[r.job].isolated && self.state[r.job].held.is_none())
            .map(|r| r.mem)
            .sum::<u64>()
            + self
                .state
                .iter()
                .filter(|s| s.running)
                .filter_map(|s| s.held.map(|(_, mib)| mib))
                .sum::<u64>();
        // An isolated job holds its footprint on each of its instances.
        let held: u64 = self
            .state
            .iter()
            .zip(self.jobs)
            .filter(|(s, j)| j.isolated && s.running)
            .map(|(s, j)| j.footprint_mib * (s.nodes.len().max(1) as u64) * j.gpus as u64)
            .sum();
        tasks + held
    }

    pub fn record_use(&mut self) {
        let u = self.used_mem() as f64 / self.total_mem;
        if self
            .series
            .last()
            .is_none_or(|&(t, v)| t != self.now || v != u)
        {
            self.series.push((self.now, u));
        }
    }

    /// Whether run `r` progresses now (not held back by its quota).
    fn active(&self, r: &Run) -> bool {
        self.state[r.job].suspended_at.is_none()
            && (!r.gated || self.tokens.holds(r.inst, r.job as u64))
    }

    pub fn rates(&self) -> Vec<f64> {
        let mut demand = vec![0.0; self.inst.len()];
        let mut count = vec![0u32; self.inst.len()];
        for r in self.running.iter().filter(|r| self.active(r)) {
            let k = self.inst[r.inst].compute_slices.max(1) as f64;
            demand[r.inst] += r.slices.min(k) / k;
            count[r.inst] += 1;
        }
        self.running
            .iter()
            .map(|r| {
                if !self.active(r) {
                    return 0.0;
                }
                let k = self.inst[r.inst].compute_slices.max(1) as f64;
                let speed = r.slices.min(k) / r.slices.min(1.0);
                let share = demand[r.inst].max(1.0);
                let interference = 1.0 + INTERFERENCE * (count[r.inst] - 1) as f64;
                speed / share / interference
            })
            .collect()
    }

    pub fn timer(&mut self, at: f64, job: usize, wake: Wake) {
        self.seq += 1;
        let generation = self.state[job].generation;
        self.timers
            .push(Reverse((at.to_bits(), self.seq, job, generation, wake)));
    }

    pub fn uuid_index(&self, uuid: &str) -> usize {
        self.inst
            .iter()
            .zip(&self.alive)
            .position(|(i, &alive)| alive && i.uuid == uuid)
            .expect("known instance")
    }

    pub(super) fn node_index(&self, name: &str) -> Option<usize> {
        self.names.iter().position(|n| n == name)
    }

    /// Starts the job's current phase (or ends the job).
    pub fn advance(&mut self, j: usize) {
        self.state[j].phase_due = None;
        let s = &self.state[j];
        let Some(phase) = self.jobs[j].phases.get(s.phase).cloned() else {
            self.complete(j, false);
            return;
        };
        match phase {
            Phase::Cpu { secs } => {
                self.state[j].phase_due = Some(self.now + secs);
                self.timer(self.now + secs, j, Wake::PhaseEnd);
            }
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
                    share: (self.task_shares == super::TaskShares::Stated)
                        .then(|| self.share_of(slices)),
                    shape: Some(shape),
                };
                let node = s.node();
                let now = self.now_ms();
                let begun = self.books[node].begin(req, now);
                self.carry_out();
                match begun {
                    Ok(Begin::Placed(p)) => self.placed(p),
                    Ok(Begin::Waiting(_)) => {}
                    Err(PlacementError::Overflow { instance, .. }) => {
                        // The allocation overflows the instance: the job crashes.
                        self.decisions
                            .push(format!("oom {} on {instance}", self.jobs[j].name));
                        self.complete(j, true);
                    }
                    Err(PlacementError::NeverFits { .. }) if !self.creating.is_empty() => {
                        // Instances are being re-made: ask again when they exist.
                        self.deferred.push(j);
                    }
                    Err(_) => self.complete(j, true),
                }
            }
        }
    }

    /// The compute demand of a task keeping `slices` compute slices busy:
    /// that part of a whole GPU, in thousandths (at least 1).
    pub(super) fn share_of(&self, slices: f64) -> u32 {
        let share = slices / self.gpu_slices * crate::compute::WHOLE_GPU as f64;
        (share.round() as u32).clamp(1, crate::compute::WHOLE_GPU)
    }

    /// The virtual clock in milliseconds, the node book's time.
    pub fn now_ms(&self) -> i64 {
        (self.now * 1000.0) as i64
    }

    /// The virtual clock in microseconds, the token schedulers' time.
    pub fn now_us(&self) -> u64 {
        (self.now * 1e6).round() as u64
    }

    /// Job `j`'s GPU time quota on instance `i` (scaled to the instance,
    /// as gnoded scales it), if it has one.
    fn quota_on(&self, j: usize, i: usize) -> Option<crate::time_quota::TimeQuota> {
        let job = self.cluster.job(self.state[j].cid)?;
        let quota = self.cluster.time_quota(job)?;
        let uuid = &self.inst[i].uuid;
        let capacity = self.books[self.inst_node[i]]
            .tasks()
            .instances()
            .iter()
            .find(|x| &x.uuid == uuid)
            .map_or(crate::compute::WHOLE_GPU, |x| x.capacity);
        Some(quota.of_instance(capacity))
    }

    /// Carries out what the nodes' books decided: waiting tasks they
    /// placed start (records and answers have no one to go to here).
    pub fn carry_out(&mut self) {
        loop {
            let mut placed: Vec<Placed> = Vec::new();
            let mut keeps = Vec::new();
            for (node, book) in self.books.iter_mut().enumerate() {
                for e in book.take_events() {
                    match e {
                        NodeEvent::Placed(p) => placed.push(p),
                        NodeEvent::KeepUntil { job, seq, at_ms } => {
                            keeps.push((node, job, seq, at_ms))
                        }
                        _ => {}
                    }
                }
            }
            for (node, job, seq, at_ms) in keeps {
                if let Some(&j) = self.by_cid.get(&job) {
                    self.timer(at_ms as f64 / 1000.0, j, Wake::KeepEnd { node, seq });
                }
            }
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
        if self.task_shares == super::TaskShares::Measured {
            // The process's first report (its sampler's start) begins its
            // windows; the next, a window later, measures it.
            let (cid, now) = (self.state[j].cid, self.now_ms());
            let start = crate::probe::BusyTime {
                busy_usec: 0,
                placed_usec: 0,
            };
            self.books[self.inst_node[i]].busy_report(cid, 1, start, now);
            let window = crate::compute::MEASURE_WINDOW_USEC as f64 / 1e6;
            self.timer(self.now + window, j, Wake::Measure);
        }
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
            let (remaining, slices, mem) = (*secs, *slices, *mem_mib);
            let quota = self.quota_on(j, i);
            if let Some(q) = quota {
                let (now, cid) = (self.now_us(), self.state[j].cid);
                self.tokens.start(i, j as u64, cid, q, now);
            }
            self.running.push(Run {
                inst: i,
                remaining,
                slices,
                mem,
                job: j,
                task,
                gated: quota.is_some(),
            });
        }
    }
}
