//! `gsched sim`: policy against baseline on the same simulated workload.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use gsched_core::launch::SchedulerType;
use gsched_core::sim::queue_mix::{self, QueueMix};
use gsched_core::sim::workload::{generate, parse_trace, Footprints, Mix};
use gsched_core::sim::{
    compare, simulate_with, Comparison, Policy, SimJob, SimOptions, SimResult, SimSite,
};

#[derive(clap::Args)]
pub struct SimArgs {
    /// GPUs, as for --sim-gpus (the MIG paper's A30 setup: 4xA30:1g.6gb*4).
    #[arg(long, default_value = "4xA30:1g.6gb*4")]
    cluster: String,
    /// Isolated : non-isolated jobs.
    #[arg(long, default_value = "1:4")]
    mix: String,
    /// Jobs in the batch.
    #[arg(long, default_value_t = 128)]
    jobs: usize,
    /// Seed of the workload generator.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Non-isolated footprints: 1-6 (GB), 0.3-6, or 1-10 (the A100 pool).
    #[arg(long, default_value = "1-6", value_parser = ["1-6", "0.3-6", "1-10"])]
    footprints: String,
    /// Policy: case, exclusive, or cg:R.
    #[arg(long, default_value = "case")]
    policy: String,
    /// Baseline policy.
    #[arg(long, default_value = "exclusive")]
    baseline: String,
    /// Replay this trace (JSON or CSV; docs/simulator.md) instead of generating.
    #[arg(long, conflicts_with_all = ["mix", "sweep"])]
    trace: Option<PathBuf>,
    /// Share of a generated non-isolated job's time spent in GPU tasks
    /// (0 < F <= 1): its CPU phases are scaled to give it. Default: as
    /// drawn, about 0.74 (docs/simulator.md).
    #[arg(long, value_name = "F")]
    gpu_share: Option<f64>,
    /// The controller's priority policy, for the policy and the baseline
    /// alike (gctld's `--priority-type`; a trace's jobs may give `user`
    /// and `nice`).
    #[arg(long, default_value = "basic", value_name = "TYPE",
          value_parser = clap::builder::PossibleValuesParser::new(gsched_core::priority::POLICIES
              .iter()
              .map(|p| clap::builder::PossibleValue::new(p.name).alias(p.slurm_name).help(p.about))))]
    priority_type: String,
    /// The baseline's priority policy (default: --priority-type).
    #[arg(long, value_name = "TYPE",
          value_parser = clap::builder::PossibleValuesParser::new(gsched_core::priority::POLICIES
              .iter()
              .map(|p| clap::builder::PossibleValue::new(p.name).alias(p.slurm_name).help(p.about))))]
    baseline_priority_type: Option<String>,
    /// Nodes, each with the GPUs of --cluster.
    #[arg(long, default_value_t = 1, value_name = "N")]
    nodes: usize,
    /// The generated workload: `batch` (the CASE paper's, --mix) or
    /// `queue` (isolated jobs of mixed sizes with time limits, users in
    /// two accounts, QOS normal and high, arriving over time; --load).
    #[arg(long, default_value = "batch", value_parser = ["batch", "queue"])]
    workload: String,
    /// Offered load of the `queue` workload (its GPU time over the
    /// cluster's while it arrives).
    #[arg(long, default_value_t = 1.2, value_name = "F")]
    load: f64,
    /// Accounts, QOS, preemption mode and priority weights (JSON:
    /// docs/simulator.md), for the policy and, unless --baseline-site,
    /// the baseline.
    #[arg(long, value_name = "FILE")]
    site: Option<PathBuf>,
    /// The baseline's site (`none`: no accounts, QOS or preemption).
    #[arg(long, value_name = "FILE")]
    baseline_site: Option<PathBuf>,
    /// The controller's scheduler type (gctld's --scheduler-type):
    /// backfill or builtin (strict priority order).
    #[arg(long, default_value = "backfill", value_name = "TYPE")]
    scheduler_type: String,
    /// The baseline's scheduler type (default: --scheduler-type).
    #[arg(long, value_name = "TYPE")]
    baseline_scheduler_type: Option<String>,
    /// Shared jobs run at once per compute slice under the policy (case,
    /// mgb-sm); default 4, the paper's.
    #[arg(long, value_name = "N")]
    workers_per_slice: Option<u32>,
    /// How many times a waiting task may be overtaken by later ones that
    /// fit now (0: strict arrival order); default, gnoded's (8).
    #[arg(long, value_name = "N")]
    max_overtakes: Option<u32>,
    /// The node's compute ceiling (as gnoded's `--compute-ceiling`): the
    /// GPU tasks bound to an instance may together demand this much of it
    /// (each states its parallelism), or `off` (memory alone decides).
    #[arg(long, default_value = gsched_core::compute::DEFAULT_COMPUTE_CEILING, value_name = "RATIO")]
    compute_ceiling: String,
    /// What GPU tasks demand under the ceiling: `parallelism` (each states
    /// its own from the start, as a learned share would), `measured` (the
    /// node's default part of the instance until the task's first second
    /// is measured, then its own: a first run, as gnoded runs it) or
    /// `default` (the node's default part all along).
    #[arg(long, default_value = "parallelism", value_parser = gsched_core::sim::TaskShares::NAMES)]
    task_shares: String,
    /// How many shared jobs may wait for a GPU placement on a node before
    /// no more start there (as gctld's `--shared-start-ahead`), or `off`.
    #[arg(long, default_value = "2", value_name = "N|off",
          value_parser = |s: &str| gsched_core::launch::parse_start_ahead(s).map(|_| s.to_string()))]
    shared_start_ahead: String,
    /// How long a non-isolated job holds GPU memory: `task` (each GPU task
    /// reserves and releases its memory) or `process` (from its first GPU
    /// task until it ends, as one process under the driver interception).
    #[arg(long, default_value = "task", value_parser = ["task", "process"])]
    memory_hold: String,
    /// Seconds a job's room is kept for its next GPU task after one ends
    /// (as gnoded's `--hold-between-processes`); 0: not kept.
    #[arg(long, default_value_t = (gsched_core::placement::DEFAULT_HOLD_BETWEEN_MS / 1000) as u32,
          value_name = "SECS", value_parser = clap::value_parser!(u32).range(0..=600))]
    hold_between_processes: u32,
    /// MIG re-partitioning (the simulator's baselines keep the layout).
    #[arg(long, default_value = "none", value_name = "POLICY",
          help = gsched_core::repartition::repartition_help(),
          value_parser = gsched_core::repartition::parse_repartition)]
    repartition: String,
    /// Seconds from destroying MIG instances to their replacements being
    /// usable (an assumption: not measured, see docs/simulator.md).
    #[arg(long, default_value_t = 5.0, value_name = "S")]
    reconfig_secs: f64,
    /// Run every isolated:non-isolated ratio and print the papers' table.
    #[arg(long)]
    sweep: bool,
    /// Draw memory utilization over time (policy and baseline) as SVG.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

const RATIOS: &[(u32, u32)] = &[(1, 0), (4, 1), (2, 1), (1, 1), (1, 2), (1, 4), (0, 1)];

fn parse_mix(s: &str) -> Result<(u32, u32)> {
    let (a, b) = s
        .split_once(':')
        .with_context(|| format!("--mix '{s}': expected ISOLATED:NON_ISOLATED, e.g. 1:4"))?;
    let a: u32 = a
        .trim()
        .parse()
        .with_context(|| format!("--mix '{s}': '{a}' is not a number"))?;
    let b: u32 = b
        .trim()
        .parse()
        .with_context(|| format!("--mix '{s}': '{b}' is not a number"))?;
    if a + b == 0 {
        bail!("--mix '{s}': at least one side must be non-zero");
    }
    Ok((a, b))
}

fn footprints(s: &str) -> Footprints {
    match s {
        "0.3-6" => Footprints::ThreeHundredMbToSix,
        "1-10" => Footprints::OneToTen,
        _ => Footprints::OneToSix,
    }
}

/// The policy's and the baseline's options.
struct Pair {
    policy: SimOptions,
    baseline: SimOptions,
}

fn run_pair(
    cluster: &str,
    policy: Policy,
    baseline: Policy,
    jobs: &[SimJob],
    options: &Pair,
) -> Result<Comparison> {
    let p = simulate_with(cluster, policy, jobs, options.policy.clone())?;
    let b = simulate_with(cluster, baseline, jobs, options.baseline.clone())?;
    Ok(compare(p, b))
}

fn read_site(path: &std::path::Path) -> Result<SimSite> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read site {}", path.display()))?;
    SimSite::from_json(&text).with_context(|| format!("site {}", path.display()))
}

/// The options of the policy and of the baseline from the arguments: the
/// job model (memory hold) is shared; workers and re-partitioning are the
/// policy's; priority, scheduler type and site the baseline's own where
/// given.
fn options(a: &SimArgs) -> Result<Pair> {
    let priority = |name: &str| {
        let short = name.strip_prefix("priority/").unwrap_or(name);
        gsched_core::priority::names()
            .into_iter()
            .find(|n| *n == short)
    };
    let scheduler = |s: &str| -> Result<SchedulerType> {
        s.parse()
            .map_err(|e| anyhow::anyhow!("--scheduler-type: {e}"))
    };
    let site = match &a.site {
        Some(p) => read_site(p)?,
        None => SimSite::default(),
    };
    let policy = SimOptions {
        nodes: a.nodes,
        site: site.clone(),
        scheduler: scheduler(&a.scheduler_type)?,
        workers_per_slice: a.workers_per_slice,
        hold_per_process: a.memory_hold == "process",
        repartition: gsched_core::repartition::repartition_policy(&a.repartition)
            .map_err(|e| anyhow::anyhow!("--repartition: {e}"))?
            .map(|_| a.repartition.clone()),
        reconfig_secs: a.reconfig_secs,
        max_overtakes: a.max_overtakes,
        compute_ceiling: gsched_core::compute::parse_ceiling(&a.compute_ceiling)
            .map_err(|e| anyhow::anyhow!("--compute-ceiling: {e}"))?,
        shared_start_ahead: Some(
            gsched_core::launch::parse_start_ahead(&a.shared_start_ahead)
                .map_err(|e| anyhow::anyhow!("--shared-start-ahead: {e}"))?
                .unwrap_or(u32::MAX),
        ),
        task_shares: gsched_core::sim::TaskShares::from_name(&a.task_shares)
            .ok_or_else(|| anyhow::anyhow!("--task-shares: unknown '{}'", a.task_shares))?,
        priority: priority(&a.priority_type),
        hold_between_ms: i64::from(a.hold_between_processes) * 1000,
    };
    let baseline = SimOptions {
        workers_per_slice: None,
        repartition: None,
        site: match &a.baseline_site {
            Some(p) if p.as_os_str() == "none" => SimSite::default(),
            Some(p) => read_site(p)?,
            None => site,
        },
        scheduler: match &a.baseline_scheduler_type {
            Some(s) => scheduler(s)?,
            None => policy.scheduler,
        },
        priority: match &a.baseline_priority_type {
            Some(p) => priority(p),
            None => policy.priority,
        },
        ..policy.clone()
    };
    Ok(Pair { policy, baseline })
}

fn line(r: &SimResult) -> String {
    format!(
        "{:<10} makespan {:>8.1} s  throughput {:>7.1} jobs/h  mean turnaround {:>7.1} s  mean wait {:>7.1} s  memory utilization {:>5.1}%  OOM crashes {:>3}  packing efficiency {:.2}  ANTT {:.2}  STP {:.1}  MIG reshapes {}",
        r.policy,
        r.makespan,
        r.throughput_per_hour,
        r.mean_turnaround,
        r.mean_wait,
        r.memory_utilization * 100.0,
        r.oom_crashes,
        r.packing_efficiency,
        r.antt,
        r.stp,
        r.reshapes
    )
}

/// What the queue policies did, where they had something to do: the
/// settings, ends other than completion, and each account's, user's and
/// QOS's jobs.
fn print_queue(name: &str, r: &SimResult, o: &SimOptions) {
    if r.groups.is_empty() && r.timeouts + r.preemptions + r.refused == 0 {
        return;
    }
    println!(
        "{name} ({}, priority {}, scheduler {}, preempt {:?}): {} completed, {} timed out, {} preempted runs, {} refused; mean wait {:.0} s",
        r.policy,
        o.priority.unwrap_or("basic"),
        o.scheduler,
        o.site.preempt_mode,
        r.completed,
        r.timeouts,
        r.preemptions,
        r.refused,
        r.mean_wait
    );
    for g in &r.groups {
        println!(
            "  {:<8} {:<11} jobs {:>4}  completed {:>4}  mean wait {:>8.0} s  max wait {:>8.0} s  mean turnaround {:>8.1} s  node time {:>5.1}%",
            g.kind,
            g.name,
            g.jobs,
            g.completed,
            g.mean_wait,
            g.max_wait,
            g.mean_turnaround,
            g.node_time_share * 100.0
        );
    }
}

/// Memory utilization over time, policy and baseline, as a small SVG.
fn svg(c: &Comparison, title: &str) -> String {
    let (w, h, pad) = (800.0, 320.0, 40.0);
    let tmax = c.policy.makespan.max(c.baseline.makespan);
    let path = |series: &[(f64, f64)], end: f64| {
        let mut pts = Vec::new();
        let mut last = 0.0;
        for &(t, u) in series {
            if u != last {
                pts.push((t, last));
                pts.push((t, u));
                last = u;
            }
        }
        pts.push((end, last));
        pts.iter()
            .map(|(t, u)| {
                format!(
                    "{:.1},{:.1}",
                    pad + t / tmax * (w - 2.0 * pad),
                    h - pad - u * (h - 2.0 * pad)
                )
            })
            .collect::<Vec<_>>()
            .join(" ")
    };
    format!(
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="{pad}" y="20">{title}</text>
<line x1="{pad}" y1="{y0}" x2="{x1}" y2="{y0}" stroke="black"/>
<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{y0}" stroke="black"/>
<text x="{pad}" y="{yl}">0 s</text><text x="{xr}" y="{yl}">{tmax:.0} s</text>
<text x="4" y="{pad}">100%</text><text x="10" y="{y0}">0%</text>
<polyline fill="none" stroke="#1f77b4" stroke-width="1.5" points="{p}"/>
<polyline fill="none" stroke="#d62728" stroke-width="1.5" points="{b}"/>
<text x="{lx}" y="{pad}" fill="#1f77b4">{pn}: {pu:.1}% mean</text>
<text x="{lx}" y="{ly}" fill="#d62728">{bn}: {bu:.1}% mean</text>
</svg>
"##,
        y0 = h - pad,
        x1 = w - pad,
        yl = h - pad + 16.0,
        xr = w - pad - 40.0,
        p = path(&c.policy.utilization, c.policy.makespan),
        b = path(&c.baseline.utilization, c.baseline.makespan),
        lx = w - 260.0,
        ly = pad + 16.0,
        pn = c.policy.policy,
        bn = c.baseline.policy,
        pu = c.policy.memory_utilization * 100.0,
        bu = c.baseline.memory_utilization * 100.0,
    )
}

pub fn run(a: SimArgs) -> Result<()> {
    // A simulation's report piped into `head` stops quietly when the reader
    // goes, as other filters do, instead of panicking in `println!`. This
    // process runs no daemon, so dying of SIGPIPE loses nothing.
    // SAFETY: setting a signal's disposition to its default, before any
    // other thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    check_args(&a)?;
    let options = options(&a)?;
    let policy: Policy = a.policy.parse()?;
    let baseline: Policy = a.baseline.parse()?;
    if a.sweep {
        return sweep(&a, policy, baseline, &options);
    }
    let jobs = workload(&a)?;
    let c = run_pair(&a.cluster, policy, baseline, &jobs, &options)?;
    if let Some(p) = &a.plot {
        let title = format!(
            "GPU memory utilization, {} jobs on {} (mix {})",
            jobs.len(),
            a.cluster,
            a.mix
        );
        std::fs::write(p, svg(&c, &title))
            .with_context(|| format!("cannot write {}", p.display()))?;
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&c)?);
    } else {
        println!("{}", line(&c.policy));
        println!("{}", line(&c.baseline));
        for (name, r, o) in [
            ("policy", &c.policy, &options.policy),
            ("baseline", &c.baseline, &options.baseline),
        ] {
            print_queue(name, r, o);
        }
        println!(
            "throughput {:.2}x, turnaround {:.2}x, memory utilization {:.2}x; OOM crashes {} (baseline {})",
            c.throughput_ratio, c.turnaround_speedup, c.memory_utilization_ratio, c.oom_crashes, c.baseline_oom_crashes
        );
    }
    Ok(())
}

/// Refuses arguments no simulation can run with, naming the flag.
fn check_args(a: &SimArgs) -> Result<()> {
    if let Some(f) = a.gpu_share {
        if !(f > 0.0 && f <= 1.0) {
            bail!("--gpu-share {f}: must be above 0 and at most 1");
        }
    }
    if a.workers_per_slice == Some(0) {
        bail!("--workers-per-slice 0: at least one worker is needed");
    }
    if !(a.reconfig_secs >= 0.0 && a.reconfig_secs.is_finite()) {
        bail!(
            "--reconfig-secs {}: must be a number of seconds, 0 or more",
            a.reconfig_secs
        );
    }
    if a.nodes == 0 {
        bail!("--nodes 0: at least one node is needed");
    }
    if !(a.load > 0.0 && a.load.is_finite()) {
        bail!("--load {}: must be above 0", a.load);
    }
    Ok(())
}

/// `--sweep`: the two policies over every isolated:shared ratio.
fn sweep(a: &SimArgs, policy: Policy, baseline: Policy, options: &Pair) -> Result<()> {
    let mut rows = Vec::new();
    for &(i, s) in RATIOS {
        let jobs = mix_of(a, i, s);
        rows.push((
            (i, s),
            run_pair(&a.cluster, policy, baseline, &jobs, options)?,
        ));
    }
    let mixed: Vec<&Comparison> = rows
        .iter()
        .filter(|((i, s), _)| *i > 0 && *s > 0)
        .map(|(_, c)| c)
        .collect();
    let mean = |f: &dyn Fn(&Comparison) -> f64| {
        mixed.iter().map(|c| f(c)).sum::<f64>() / mixed.len() as f64
    };
    if a.json {
        let v: Vec<serde_json::Value> = rows
            .iter()
            .map(|((i, s), c)| serde_json::json!({"mix": format!("{i}:{s}"), "result": c}))
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "rows": v,
                "mixed_mean": {
                    "throughput_ratio": mean(&|c| c.throughput_ratio),
                    "turnaround_speedup": mean(&|c| c.turnaround_speedup),
                    "memory_utilization_ratio": mean(&|c| c.memory_utilization_ratio),
                }
            }))?
        );
    } else {
        println!(
            "{} vs {} on {}, {} jobs, footprints {} GB, seed {}, re-partitioning {}",
            policy, baseline, a.cluster, a.jobs, a.footprints, a.seed, a.repartition
        );
        println!(
            "mix    throughput  turnaround  memory-util  OOM(policy/baseline)  packing-eff  reshapes"
        );
        for ((i, s), c) in &rows {
            println!(
                "{:<6} {:>9.2}x {:>10.2}x {:>11.2}x {:>10}/{:<10} {:>10.2} {:>9}",
                format!("{i}:{s}"),
                c.throughput_ratio,
                c.turnaround_speedup,
                c.memory_utilization_ratio,
                c.oom_crashes,
                c.baseline_oom_crashes,
                c.packing_efficiency,
                c.policy.reshapes
            );
        }
        println!(
            "mean over the mixed ratios (4:1 .. 1:4): throughput {:.2}x, turnaround {:.2}x, memory utilization {:.2}x",
            mean(&|c| c.throughput_ratio),
            mean(&|c| c.turnaround_speedup),
            mean(&|c| c.memory_utilization_ratio)
        );
    }
    Ok(())
}

/// Generated jobs, `isolated`:`shared` of them, as the flags shape them.
fn mix_of(a: &SimArgs, isolated: u32, shared: u32) -> Vec<SimJob> {
    generate(&Mix {
        isolated,
        shared,
        jobs: a.jobs,
        footprints: footprints(&a.footprints),
        seed: a.seed,
        gpu_share: a.gpu_share,
    })
}

/// The jobs to simulate: a trace, the queue workload, or a generated mix.
fn workload(a: &SimArgs) -> Result<Vec<SimJob>> {
    Ok(match &a.trace {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read trace {}", path.display()))?;
            parse_trace(&text).with_context(|| format!("trace {}", path.display()))?
        }
        None if a.workload == "queue" => {
            let gpus = gsched_core::gpu::parse_sim_spec(&a.cluster)?;
            let per_node = gsched_core::gpu::sim_instances("sim", &gpus).len() as u32;
            queue_mix::generate(&QueueMix {
                jobs: a.jobs,
                seed: a.seed,
                nodes: a.nodes as u32,
                gpus_per_node: per_node,
                load: a.load,
            })
        }
        None => {
            let (i, s) = parse_mix(&a.mix)?;
            mix_of(a, i, s)
        }
    })
}
