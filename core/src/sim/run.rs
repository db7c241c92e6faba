//! Building a simulated cluster, running its clock to the end, and what
//! the run measured.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

use super::engine::{node_name, spec_of, Progress, Run, Sim, Wake};
use super::{lower_bound, GroupStats, Policy, SimError, SimJob, SimOptions, SimOutcome, SimResult};
use crate::cluster::Cluster;
use crate::gpu::mig::MigPlacement;
use crate::gpu::{parse_sim_spec, sim_instances, Instance, SimGpu};
use crate::placement::{NodeBook, TaskBook};
use crate::wire::NodeRegistration;

/// Checks the jobs against the cluster and makes the simulation, with the
/// instances it starts with.
pub(super) fn build<'a>(
    spec: &str,
    policy: Policy,
    jobs: &'a [SimJob],
    options: &SimOptions,
) -> Result<(Sim<'a>, Vec<Instance>), SimError> {
    let gpus = parse_sim_spec(spec)?;
    let nodes = options.nodes.max(1);
    let repartition = match &options.repartition {
        Some(spec) if matches!(policy, Policy::Case | Policy::MgbSm) => {
            crate::repartition::repartition_policy(spec)?
        }
        _ => None,
    };
    if repartition.is_some() && nodes > 1 {
        return Err(SimError::RepartitionNodes(nodes));
    }
    let per_node = sim_instances(&node_name(0, nodes), &gpus);
    check_jobs(jobs, &gpus, &per_node, repartition.is_some(), nodes)?;
    let mut cluster = Cluster::new(
        crate::launch::launch_policy(policy.launch_name())
            .expect("a preset names a registered launch policy"),
    );
    cluster.set_scheduler_type(options.scheduler);
    cluster.set_shared_start_ahead(match options.shared_start_ahead {
        None => Some(crate::launch::DEFAULT_START_AHEAD),
        Some(u32::MAX) => None,
        Some(n) => Some(n),
    });
    let grace_secs = options.site.apply(&mut cluster, options.priority)?;
    // Where each instance sits, in `sim_instances` order.
    let layout: Vec<Option<(usize, MigPlacement)>> = gpus
        .iter()
        .enumerate()
        .flat_map(|(gi, g)| match &g.layout {
            None => vec![None],
            Some(l) => l.iter().map(|p| Some((gi, *p))).collect(),
        })
        .collect();
    debug_assert_eq!(layout.len(), per_node.len());
    let reshape_gpus: Vec<u32> = match repartition {
        Some(_) => layout
            .iter()
            .filter_map(|l| l.map(|(g, _)| g as u32))
            .collect::<std::collections::BTreeSet<u32>>()
            .into_iter()
            .collect(),
        None => Vec::new(),
    };
    cluster.set_repartition(repartition);
    let mut inst = Vec::new();
    let mut inst_node = Vec::new();
    let mut names = Vec::new();
    let mut books = Vec::new();
    for k in 0..nodes {
        let name = node_name(k, nodes);
        let here = sim_instances(&name, &gpus);
        cluster.register_node(
            &registration(&name, &here, policy, options, &reshape_gpus),
            0,
        );
        books.push(
            NodeBook::new(book(policy, options, &here)).holding_between(options.hold_between_ms),
        );
        inst_node.extend(std::iter::repeat_n(k, here.len()));
        inst.extend(here);
        names.push(name);
    }
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
    let mut order: Vec<usize> = (0..jobs.len()).collect();
    order.sort_by(|&a, &b| jobs[a].submit.total_cmp(&jobs[b].submit).then(a.cmp(&b)));
    let sim = Sim {
        policy,
        jobs,
        alive: vec![true; inst.len()],
        layout: layout.iter().cycle().take(inst.len()).copied().collect(),
        inst_node,
        gpus,
        reconfig_secs: options.reconfig_secs.max(0.0),
        retiring: Vec::new(),
        creating: Vec::new(),
        deferred: Vec::new(),
        reshapes: 0,
        sms_per_slice,
        gpu_slices,
        task_shares: options.task_shares,
        hold_per_process: options.hold_per_process,
        grace_secs,
        preempts: options.site.preempt_mode != crate::preempt::PreemptMode::Off,
        inst,
        cluster,
        tokens: Default::default(),
        names,
        books,
        starting: Vec::new(),
        state: vec![Progress::default(); jobs.len()],
        by_cid: BTreeMap::new(),
        running: Vec::new(),
        timers: BinaryHeap::new(),
        seq: 0,
        now: 0.0,
        order,
        next_submission: 0,
        oom: 0,
        mem_integral: 0.0,
        total_mem,
        series: Vec::new(),
        decisions: Vec::new(),
    };
    Ok((sim, initial))
}

/// Refuses jobs the cluster could never run.
fn check_jobs(
    jobs: &[SimJob],
    gpus: &[SimGpu],
    inst: &[Instance],
    repartitions: bool,
    nodes: usize,
) -> Result<(), SimError> {
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
    for j in jobs {
        if j.peak_mib() > biggest {
            return Err(SimError::TooBig(j.name.clone(), j.peak_mib()));
        }
        if j.nodes == 0 || j.gpus == 0 {
            return Err(SimError::BadJob(
                j.name.clone(),
                "nodes and gpus must be at least 1",
            ));
        }
        if j.time_limit.is_some_and(|t| !(t.is_finite() && t > 0.0)) {
            return Err(SimError::BadJob(
                j.name.clone(),
                "time_limit must be a number of seconds above 0",
            ));
        }
        if (j.nodes > 1 || j.gpus > 1) && !j.isolated {
            return Err(SimError::WideShared(j.name.clone()));
        }
        if let Some(share) = &j.gpu_share {
            crate::time_quota::TimeQuota::parse(share)
                .map_err(|e| SimError::Share(j.name.clone(), e))?;
            if j.isolated {
                return Err(SimError::Share(
                    j.name.clone(),
                    crate::time_quota::QuotaError::Isolated,
                ));
            }
        }
        if j.nodes as usize > nodes {
            return Err(SimError::TooWide(j.name.clone(), j.nodes, nodes));
        }
    }
    Ok(())
}

/// How simulated node `name` registers: as a live gnoded with `inst`.
fn registration(
    name: &str,
    inst: &[Instance],
    policy: Policy,
    options: &SimOptions,
    reshape_gpus: &[u32],
) -> NodeRegistration {
    let worker_limit = match policy {
        Policy::Case | Policy::MgbSm => options
            .workers_per_slice
            .map(|w| w * inst.iter().map(|i| i.compute_slices.max(1)).sum::<u32>()),
        Policy::Exclusive => Some(inst.len() as u32),
        Policy::Cg(r) => Some(r * inst.len() as u32),
    };
    NodeRegistration {
        instance_id: String::new(),
        name: name.into(),
        url: "sim://".into(),
        cpus: 1024,
        memory_mib: 1 << 30,
        tmp_disk_mib: 0,
        instances: inst.to_vec(),
        worker_limit,
        running: vec![],
        runs: Default::default(),
        ended: vec![],
        fence_timeout_ms: None,
        heartbeat_ms: 0,
        // The controller plans re-partitions of every MIG GPU, as for a
        // live node that offers them.
        reshape_keep: Default::default(),
        release: crate::version::RELEASE.into(),
        protocol: crate::version::PROTOCOL,
        followed_epoch: 0,
        reshape_gpus: reshape_gpus.to_vec(),
    }
}

/// A node's placement book under `policy`.
fn book(policy: Policy, options: &SimOptions, inst: &[Instance]) -> TaskBook {
    let placement = crate::placement::placement_policy(policy.placement_name())
        .expect("a preset names a registered placement policy");
    let mut book = TaskBook::of_instances(placement, inst);
    if let Some(n) = options.max_overtakes {
        book = book.with_max_overtakes(n);
    }
    book.with_compute_ceiling(options.compute_ceiling)
}

impl Sim<'_> {
    /// Submits the jobs due now; refused ones end there.
    fn submit_due(&mut self) -> bool {
        let mut submitted = false;
        while let Some(&j) = self.order.get(self.next_submission) {
            if self.jobs[j].submit > self.now {
                break;
            }
            match self.cluster.submit(spec_of(&self.jobs[j]), self.now as i64) {
                Ok((cid, _)) => {
                    self.state[j].cid = cid;
                    self.by_cid.insert(cid, j);
                }
                Err(e) => {
                    self.decisions
                        .push(format!("refused {}: {e}", self.jobs[j].name));
                    self.state[j].end = Some(self.now);
                    self.state[j].outcome = Some(SimOutcome::Refused);
                }
            }
            self.next_submission += 1;
            submitted = true;
        }
        submitted
    }

    /// When the next thing happens (infinite: nothing will).
    fn next_event(&self, rates: &[f64]) -> f64 {
        let gpu_next = self
            .running
            .iter()
            .zip(rates)
            .map(|(r, rate)| self.now + r.remaining / rate)
            .fold(f64::INFINITY, f64::min);
        let timer_next = self
            .timers
            .peek()
            .map(|Reverse((t, ..))| f64::from_bits(*t))
            .unwrap_or(f64::INFINITY);
        let sub_next = self
            .order
            .get(self.next_submission)
            .map(|&j| self.jobs[j].submit)
            .unwrap_or(f64::INFINITY);
        let create_next = self
            .creating
            .iter()
            .map(|c| c.at)
            .fold(f64::INFINITY, f64::min);
        let token_next = self
            .tokens
            .next_event(self.now_us())
            .map_or(f64::INFINITY, |us| us as f64 / 1e6);
        gpu_next
            .min(timer_next)
            .min(sub_next)
            .min(create_next)
            .min(token_next)
    }

    /// Runs the clock until nothing is left to happen.
    pub(super) fn run_to_end(&mut self) {
        loop {
            if self.submit_due() {
                self.schedule();
            }
            self.record_use();
            let rates = self.rates();
            let t = self.next_event(&rates);
            if !t.is_finite() {
                return;
            }
            let dt = (t - self.now).max(0.0);
            self.mem_integral += self.used_mem() as f64 * dt;
            for (r, rate) in self.running.iter_mut().zip(&rates) {
                r.remaining -= rate * dt;
            }
            self.now = t;
            let mut next_phase = self.gpu_tasks_done();
            let now = self.now_us();
            self.tokens.advance(now);
            // Timers due: CPU phases that finished, then time limits (a
            // job that ends as its limit comes has ended).
            let mut due = Vec::new();
            while let Some(Reverse((bits, _, j, generation, wake))) = self.timers.peek().copied() {
                if f64::from_bits(bits) > self.now {
                    break;
                }
                self.timers.pop();
                if wake == Wake::PhaseEnd {
                    // Not a phase of an earlier run (preempted, requeued).
                    if self.state[j].generation == generation {
                        next_phase.push(j);
                    }
                } else {
                    due.push((j, generation, wake));
                }
            }
            for j in next_phase {
                if !self.state[j].running {
                    continue;
                }
                self.state[j].phase += 1;
                self.advance(j);
            }
            for (j, generation, wake) in due {
                self.wake(j, generation, wake);
            }
            self.start_drained();
            self.create_due();
            self.schedule();
        }
    }

    /// Takes the GPU tasks that finished off the nodes: their jobs.
    fn gpu_tasks_done(&mut self) -> Vec<usize> {
        let mut done: Vec<Run> = Vec::new();
        let mut k = 0;
        while k < self.running.len() {
            if self.running[k].remaining <= 1e-9 {
                done.push(self.running.swap_remove(k));
            } else {
                k += 1;
            }
        }
        done.sort_by_key(|r| r.job);
        let mut jobs = Vec::new();
        for r in done {
            if r.gated {
                let now = self.now_us();
                self.tokens.task_done(r.inst, r.job as u64, now);
            }
            if let Some(task) = r.task {
                let now = self.now_ms();
                let node = self.inst_node[r.inst];
                if self.books[node].end(task, now).is_ok() {
                    self.carry_out();
                }
            }
            jobs.push(r.job);
        }
        jobs
    }
}

/// What the simulation measured.
pub(super) fn results(sim: Sim<'_>, initial: &[Instance]) -> Result<SimResult, SimError> {
    let jobs = sim.jobs;
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
    let outcomes: Vec<SimOutcome> = sim
        .state
        .iter()
        .map(|s| s.outcome.unwrap_or(SimOutcome::Completed))
        .collect();
    let completed: Vec<(usize, &Progress)> = sim
        .state
        .iter()
        .enumerate()
        .filter(|(j, _)| outcomes[*j] == SimOutcome::Completed)
        .collect();
    let n = completed.len().max(1) as f64;
    let turnaround = |j: usize, s: &Progress| s.end.unwrap_or(makespan) - jobs[j].submit;
    let mean = |f: &dyn Fn(usize, &Progress) -> f64| {
        completed.iter().map(|(j, s)| f(*j, s)).sum::<f64>() / n
    };
    let waits: Vec<Option<f64>> = sim
        .state
        .iter()
        .zip(jobs)
        .map(|(s, j)| s.start.map(|t| t - j.submit))
        .collect();
    let mean_turnaround = mean(&|j, s| turnaround(j, s));
    let mean_wait = mean(&|j, _| waits[j].unwrap_or(0.0));
    let antt = mean(&|j, s| turnaround(j, s) / jobs[j].alone_secs().max(1e-9));
    let stp = completed
        .iter()
        .map(|(j, s)| jobs[*j].alone_secs() / turnaround(*j, s).max(1e-9))
        .sum::<f64>();
    // The bound of the jobs that completed (crashed jobs did not need
    // their remaining work done).
    let done_jobs: Vec<SimJob> = completed.iter().map(|(j, _)| jobs[*j].clone()).collect();
    let lb = lower_bound(&done_jobs, initial);
    let count = |o: SimOutcome| outcomes.iter().filter(|x| **x == o).count();
    Ok(SimResult {
        policy: sim.policy.to_string(),
        jobs: jobs.len(),
        completed: completed.len(),
        oom_crashes: sim.oom,
        timeouts: count(SimOutcome::TimedOut),
        preemptions: sim.state.iter().map(|s| s.preempted as usize).sum(),
        refused: count(SimOutcome::Refused),
        groups: groups(jobs, &sim.state, &waits, &outcomes),
        makespan,
        throughput_per_hour: completed.len() as f64 / makespan * 3600.0,
        mean_turnaround,
        mean_wait,
        waits,
        turnarounds: sim
            .state
            .iter()
            .zip(jobs)
            .map(|(s, j)| s.end.map_or(0.0, |e| e - j.submit))
            .collect(),
        outcomes,
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

/// What names a job's group of one kind (`None`: in none).
type GroupKey<'a> = dyn Fn(&SimJob) -> Option<&str> + 'a;

/// Per account, user and QOS named by some job (none when no job names
/// one), and per size where some job has several GPUs or nodes: jobs,
/// waits and node time.
fn groups(
    jobs: &[SimJob],
    state: &[Progress],
    waits: &[Option<f64>],
    outcomes: &[SimOutcome],
) -> Vec<GroupStats> {
    let total: f64 = state.iter().map(|s| s.node_secs).sum::<f64>().max(1e-9);
    let mut out = Vec::new();
    let sized = jobs.iter().any(|j| j.nodes > 1 || j.gpus > 1);
    let size = |j: &SimJob| -> Option<&'static str> {
        sized.then_some(match (j.nodes, j.gpus) {
            (1, 1) => "one-gpu",
            (1, _) => "one-node",
            _ => "multi-node",
        })
    };
    let keys: [(&'static str, &GroupKey<'_>); 4] = [
        ("account", &|j| j.account.as_deref()),
        ("user", &|j| j.user.as_deref()),
        ("qos", &|j| j.qos.as_deref()),
        ("size", &|j| size(j)),
    ];
    for (kind, key) in keys {
        let mut by: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for (i, j) in jobs.iter().enumerate() {
            if let Some(k) = key(j) {
                by.entry(k).or_default().push(i);
            }
        }
        for (name, members) in by {
            let started: Vec<f64> = members.iter().filter_map(|i| waits[*i]).collect();
            out.push(GroupStats {
                kind,
                name: name.to_string(),
                jobs: members.len(),
                completed: members
                    .iter()
                    .filter(|i| outcomes[**i] == SimOutcome::Completed)
                    .count(),
                mean_wait: started.iter().sum::<f64>() / started.len().max(1) as f64,
                max_wait: started.iter().copied().fold(0.0, f64::max),
                mean_turnaround: {
                    let done: Vec<f64> = members
                        .iter()
                        .filter(|i| outcomes[**i] == SimOutcome::Completed)
                        .filter_map(|i| state[*i].end.map(|e| e - jobs[*i].submit))
                        .collect();
                    done.iter().sum::<f64>() / done.len().max(1) as f64
                },
                node_time_share: members.iter().map(|i| state[*i].node_secs).sum::<f64>() / total,
            });
        }
    }
    out
}
