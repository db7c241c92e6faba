//! `gsched bench`: throughput of a running gsched, measured from outside as a
//! client sees it (see docs/benchmarks.md for how the figures were taken).

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use gsched_core::job::JobSpec;

#[derive(clap::Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    what: What,
    /// Controller URL.
    #[arg(
        long,
        env = "GSCHED_URL",
        default_value = "http://127.0.0.1:6817",
        global = true
    )]
    url: String,
    /// Jobs to submit.
    #[arg(long, default_value_t = 10_000, global = true)]
    jobs: usize,
    /// Concurrent clients.
    #[arg(long, default_value_t = 4, global = true)]
    concurrency: usize,
}

#[derive(clap::Subcommand)]
enum What {
    /// Submissions per second through the REST API.
    Submit,
    /// Submissions per second through the `gsub` binary (one process each).
    Gsub {
        /// Path of gsub (default: next to this binary).
        #[arg(long)]
        gsub: Option<PathBuf>,
    },
    /// Trivial jobs (`true`) submitted and run to completion, per second.
    Exec,
    /// A real gctld under NODES node agents speaking gnoded's protocol,
    /// with jobs flowing: controller CPU and memory, listing, submission
    /// and launch latencies (docs/benchmarks.md, "A node swarm").
    Swarm(crate::swarm::SwarmArgs),
    /// Launch pass time (pure, no daemon): NODES nodes of GPUS A100s split
    /// in 7 x 1g.5gb, every worker busy, QUEUED jobs waiting (one in ten
    /// isolated); one job ends and a pass launches its successor.
    Launch {
        #[arg(long, default_value_t = 1)]
        nodes: usize,
        #[arg(long, default_value_t = 10)]
        gpus: usize,
        #[arg(long, default_value_t = 1000)]
        queued: usize,
        #[arg(long, default_value_t = 100)]
        rounds: usize,
        /// The priority policy ordering the queue (`basic`, `multifactor`).
        #[arg(long, default_value = "basic")]
        priority_type: String,
    },
    /// Submission time in the controller's core (pure, no daemon): QUEUED
    /// jobs of USERS users waiting, under a QOS `normal` with
    /// MaxSubmitJobsPerUser=MAX_SUBMIT (`none`: the QOS without it; `off`:
    /// no QOS at all); ROUNDS more submissions timed.
    Submissions {
        #[arg(long, default_value_t = 100_000)]
        queued: usize,
        #[arg(long, default_value_t = 100)]
        users: usize,
        #[arg(long, default_value = "1000000")]
        max_submit: String,
        #[arg(long, default_value_t = 1000)]
        rounds: usize,
    },
    /// CASE Algorithm 2 decision time (pure, no daemon): a task ending on a
    /// node with INSTANCES instances and WAITING queued tasks, and a begin.
    Placement {
        #[arg(long, default_value_t = 64)]
        instances: usize,
        #[arg(long, default_value_t = 1000)]
        waiting: usize,
        #[arg(long, default_value_t = 200)]
        rounds: usize,
    },
}

/// Times submissions to a controller core holding a long queue.
fn submissions(queued: usize, users: usize, max_submit: &str, rounds: usize) -> Result<()> {
    use gsched_core::cluster::Cluster;
    use gsched_core::qos::{Qos, QosChange};
    let mut c = Cluster::new(Box::new(gsched_core::launch::CaseLaunch));
    let qos = match max_submit {
        "off" => None,
        "none" => Some(None),
        n => Some(Some(
            n.parse::<u32>()
                .context("--max-submit: a number, none or off")?,
        )),
    };
    if let Some(max) = qos {
        c.change_qos(&QosChange::Add {
            qos: Qos {
                name: "normal".into(),
                max_submit_jobs_per_user: max,
                ..Default::default()
            },
        })
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    let spec = |i: usize| JobSpec {
        name: "bench".into(),
        script: "#!/bin/sh\ntrue\n".into(),
        working_dir: "/tmp".into(),
        user_name: format!("user{}", i % users),
        uid: 1000 + (i % users) as u32,
        gid: 1000,
        submit_host: "bench".into(),
        ..JobSpec::default()
    };
    for i in 0..queued {
        c.submit(spec(i), 1).map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    let mut times = Vec::with_capacity(rounds);
    for i in 0..rounds {
        let t = Instant::now();
        c.submit(spec(i), 2).map_err(|e| anyhow::anyhow!("{e}"))?;
        times.push(t.elapsed().as_nanos() as u64);
    }
    times.sort_unstable();
    let q = |f: f64| times[((times.len() - 1) as f64 * f).round() as usize] as f64 / 1e3;
    println!(
        "submissions: {queued} queued of {users} users, QOS {}",
        match qos {
            None => "none".to_string(),
            Some(None) => "normal without MaxSubmitJobsPerUser".to_string(),
            Some(Some(n)) => format!("normal with MaxSubmitJobsPerUser={n}"),
        }
    );
    println!(
        "  one submission: p50 {:.1} us, p99 {:.1} us, max {:.1} us ({rounds} rounds)",
        q(0.5),
        q(0.99),
        q(1.0)
    );
    Ok(())
}

/// Times launch passes on a full cluster with a long queue.
fn launch(nodes: usize, gpus: usize, queued: usize, rounds: usize, priority: &str) -> Result<()> {
    use gsched_core::cluster::{Cluster, Effect};
    use gsched_core::gpu::{parse_sim_spec, sim_instances};
    use gsched_core::job::GpuRequest;
    use gsched_core::launch::CaseLaunch;
    use gsched_core::outcome::{EndCause, ProcessOutcome};
    use gsched_core::wire::{JobEnded, NodeRegistration};
    let mut c = Cluster::new(Box::new(CaseLaunch));
    c.set_priority_policy(
        gsched_core::priority::priority_policy(priority, Default::default())
            .context("--priority-type")?,
    );
    let layout = parse_sim_spec(&format!("{gpus}xA100-40GB:1g.5gb*7")).expect("valid spec");
    for n in 0..nodes {
        let name = format!("n{n}");
        c.register_node(
            &NodeRegistration {
                name: name.clone(),
                instance_id: String::new(),
                url: String::new(),
                cpus: 4096,
                memory_mib: 1 << 20,
                tmp_disk_mib: 0,
                instances: sim_instances(&name, &layout),
                worker_limit: None,
                running: vec![],
                runs: Default::default(),
                ended: vec![],
                fence_timeout_ms: None,
                heartbeat_ms: 0,
                reshape_keep: Default::default(),
                release: gsched_core::version::RELEASE.into(),
                protocol: gsched_core::version::PROTOCOL,
                followed_epoch: 0,
                reshape_gpus: Vec::new(),
            },
            0,
        );
    }
    let mut spec = spec("/tmp");
    spec.gpu = GpuRequest::default();
    // Fill every worker with shared jobs.
    let workers = nodes * gpus * 7 * 4;
    for _ in 0..workers {
        let _ = c.submit(spec.clone(), 0);
    }
    let t = Instant::now();
    let fx = c.schedule(0);
    let fill = t.elapsed();
    let started = fx
        .iter()
        .filter(|e| matches!(e, Effect::Launch { .. }))
        .count();
    // The queue: one in ten isolated (4 GiB), the rest shared.
    for k in 0..queued {
        let mut s = spec.clone();
        if k % 10 == 0 {
            s.isolated = true;
            s.gpu = GpuRequest {
                model: None,
                mig_profile: None,
                mem_mib: Some(4096),
                ..GpuRequest::default()
            };
        }
        let _ = c.submit(s, 1);
    }
    let mut times = Vec::new();
    let mut next = 1u64;
    for r in 0..rounds {
        // End the oldest running job on some node.
        let node = format!("n{}", r % nodes);
        let Some(&id) = c.node(&node).and_then(|n| n.running.iter().next()) else {
            break;
        };
        let _ = c.job_ended(
            &node,
            &JobEnded {
                job_id: id,
                run: 0,
                outcome: ProcessOutcome {
                    exit_code: Some(0),
                    signal: None,
                    cause: EndCause::Exited,
                },
                end_time: 2,
                usage: None,
                steps: Default::default(),
            },
        );
        let t = Instant::now();
        let fx = c.schedule(2);
        times.push(t.elapsed().as_nanos() as u64);
        next += fx
            .iter()
            .filter(|e| matches!(e, Effect::Launch { .. }))
            .count() as u64;
    }
    times.sort_unstable();
    let q = |f: f64| times[((times.len() - 1) as f64 * f).round() as usize] as f64 / 1e6;
    println!(
        "launch: {nodes} nodes x {gpus} GPUs x 7 instances ({} instances, {workers} workers), {queued} queued, priority/{priority}",
        nodes * gpus * 7
    );
    println!(
        "  first pass: {started} jobs launched in {:.1} ms",
        fill.as_secs_f64() * 1e3
    );
    println!(
        "  one job ends, one pass: p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms ({} rounds, {} launched)",
        q(0.5),
        q(0.99),
        q(1.0),
        times.len(),
        next - 1
    );
    Ok(())
}

/// Times placement decisions on a full node with a long queue.
fn placement(instances: usize, waiting: usize, rounds: usize) {
    use gsched_core::placement::{Begin, CasePlacement, TaskBook, TaskRequest};
    const G: u64 = 1 << 30;
    let mut book = TaskBook::new(
        Box::new(CasePlacement),
        (0..instances)
            .map(|i| (format!("MIG-{i}"), 5 * G))
            .collect(),
    );
    // Fill every instance with one 4G task, then queue tasks that need 2G:
    // none fits until a 4G task ends.
    let mut active: Vec<u64> = Vec::new();
    for i in 0..instances {
        if let Ok(Begin::Placed(p)) = book.begin(TaskRequest {
            job: i as u64 + 1,
            pid: 1,
            bytes: 4 * G,
            warps: 64,
            share: None,
            shape: None,
        }) {
            active.push(p.task);
        }
    }
    for k in 0..waiting {
        let _ = book.begin(TaskRequest {
            job: 10_000 + k as u64,
            pid: 1,
            bytes: 2 * G,
            warps: 32,
            share: None,
            shape: None,
        });
    }
    let mut end_times = Vec::new();
    let mut begin_times = Vec::new();
    for r in 0..rounds {
        // One task ends: the queue is scanned and two waiters are placed.
        let id = active[r % active.len()];
        let t = Instant::now();
        let placed = book.end(id).unwrap_or_default();
        end_times.push(t.elapsed().as_nanos() as u64);
        // Refill: the placed ones end at once and a 4G task takes the room back.
        for p in placed {
            let _ = book.end(p.task);
        }
        let t = Instant::now();
        let b = book.begin(TaskRequest {
            job: 1_000_000 + r as u64,
            pid: 1,
            bytes: 4 * G,
            warps: 64,
            share: None,
            shape: None,
        });
        begin_times.push(t.elapsed().as_nanos() as u64);
        if let Ok(Begin::Placed(p)) = b {
            let k = r % active.len();
            active[k] = p.task;
        }
        while book.waiting_len() < waiting {
            let _ = book.begin(TaskRequest {
                job: 2_000_000 + r as u64 * 10_000 + book.waiting_len() as u64,
                pid: 1,
                bytes: 2 * G,
                warps: 32,
                share: None,
                shape: None,
            });
        }
    }
    let show = |name: &str, v: &mut Vec<u64>| {
        v.sort_unstable();
        let q = |f: f64| v[((v.len() - 1) as f64 * f).round() as usize] as f64 / 1000.0;
        println!(
            "{name}: p50 {:.1} us, p99 {:.1} us, max {:.1} us ({} rounds)",
            q(0.5),
            q(0.99),
            q(1.0),
            v.len()
        );
    };
    println!("placement with {instances} instances and {waiting} waiting tasks:");
    show("  end + retry of the queue", &mut end_times);
    show("  begin (queue non-empty)", &mut begin_times);
}

pub(crate) fn spec(dir: &str) -> JobSpec {
    let (user, uid, gid) = (
        std::env::var("USER").unwrap_or_else(|_| "root".into()),
        nix_uid(),
        nix_gid(),
    );
    JobSpec {
        name: "bench".into(),
        script: "#!/bin/sh\ntrue\n".into(),
        environment: [("PATH".to_string(), "/usr/bin:/bin".to_string())]
            .into_iter()
            .collect(),
        working_dir: dir.into(),
        user_name: user,
        uid,
        gid,
        submit_host: "bench".into(),
        stdout: Some("/dev/null".into()),
        ..JobSpec::default()
    }
}

fn nix_uid() -> u32 {
    // SAFETY: getuid cannot fail.
    unsafe { libc::getuid() }
}

fn nix_gid() -> u32 {
    // SAFETY: getgid cannot fail.
    unsafe { libc::getgid() }
}

/// Runs `n` tasks over `concurrency` threads; returns the elapsed time.
fn spread(
    n: usize,
    concurrency: usize,
    task: impl Fn() -> Result<()> + Send + Sync + 'static,
) -> Result<Duration> {
    let next = Arc::new(AtomicUsize::new(0));
    let task = Arc::new(task);
    let start = Instant::now();
    let handles: Vec<_> = (0..concurrency.max(1))
        .map(|_| {
            let (next, task) = (Arc::clone(&next), Arc::clone(&task));
            std::thread::spawn(move || -> Result<()> {
                while next.fetch_add(1, Ordering::Relaxed) < n {
                    task()?;
                }
                Ok(())
            })
        })
        .collect();
    for h in handles {
        h.join()
            .map_err(|_| anyhow::anyhow!("a bench thread panicked"))??;
    }
    Ok(start.elapsed())
}

fn health(agent: &ureq::Agent, url: &str) -> Result<serde_json::Value> {
    Ok(agent
        .get(&format!("{url}/healthz"))
        .call()
        .context("controller not reachable")?
        .into_json()?)
}

pub fn run(args: BenchArgs) -> Result<()> {
    let url = args.url.trim_end_matches('/').to_string();
    let agent = ureq::AgentBuilder::new()
        .max_idle_connections_per_host(args.concurrency.max(1))
        .build();
    let dir = std::env::temp_dir().display().to_string();
    let body = serde_json::to_value(spec(&dir))?;
    let post = {
        let (agent, url, body) = (agent.clone(), url.clone(), body.clone());
        // Only the REST submissions need one; fetched on first use.
        let token = std::sync::OnceLock::new();
        move || -> Result<()> {
            let token = match token.get() {
                Some(t) => t,
                None => {
                    let t = match gsched_cli::client::env_token() {
                        Some(t) => t,
                        None => {
                            gsched_cli::client::Client::new(&url)
                                .issue_token(Some(3600), None)
                                .context("cannot get a token for the REST submissions")?
                                .token
                        }
                    };
                    token.get_or_init(|| t)
                }
            };
            agent
                .post(&format!("{url}/api/v1/jobs"))
                .set("Authorization", &format!("Bearer {token}"))
                .send_json(body.clone())?;
            Ok(())
        }
    };
    match args.what {
        What::Swarm(swarm) => crate::swarm::run(&url, swarm)?,
        What::Launch {
            nodes,
            gpus,
            queued,
            rounds,
            priority_type,
        } => {
            launch(
                nodes.max(1),
                gpus.max(1),
                queued,
                rounds.max(1),
                &priority_type,
            )?;
        }
        What::Submissions {
            queued,
            users,
            max_submit,
            rounds,
        } => submissions(queued, users.max(1), &max_submit, rounds.max(1))?,
        What::Placement {
            instances,
            waiting,
            rounds,
        } => {
            placement(instances.max(1), waiting, rounds.max(1));
        }
        What::Submit => {
            let t = spread(args.jobs, args.concurrency, post)?;
            report("REST submissions", args.jobs, t);
        }
        What::Gsub { gsub } => {
            let gsub = match gsub {
                Some(p) => p,
                None => std::env::current_exe()?.with_file_name("gsub"),
            };
            let script = std::env::temp_dir().join("gsched-bench.sh");
            std::fs::write(&script, "#!/bin/sh\n#SBATCH -o /dev/null\ntrue\n")?;
            let url2 = url.clone();
            let t = spread(args.jobs, args.concurrency, move || {
                let out = std::process::Command::new(&gsub)
                    .arg("--parsable")
                    .arg(&script)
                    .env("GSCHED_URL", &url2)
                    .output()
                    .context("cannot run gsub")?;
                if !out.status.success() {
                    bail!("gsub failed: {}", String::from_utf8_lossy(&out.stderr));
                }
                Ok(())
            })?;
            report("gsub submissions", args.jobs, t);
        }
        What::Exec => {
            let h = health(&agent, &url)?;
            if h["pending"].as_u64() != Some(0) || h["running"].as_u64() != Some(0) {
                bail!("the controller is busy ({h}); run the exec benchmark on an idle gsched");
            }
            let start = Instant::now();
            spread(args.jobs, args.concurrency, post)?;
            let submitted = start.elapsed();
            loop {
                let h = health(&agent, &url)?;
                if h["pending"].as_u64() == Some(0) && h["running"].as_u64() == Some(0) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let t = start.elapsed();
            println!(
                "submitted {} jobs in {:.2} s",
                args.jobs,
                submitted.as_secs_f64()
            );
            report("jobs executed", args.jobs, t);
        }
    }
    Ok(())
}

fn report(what: &str, n: usize, t: Duration) {
    println!(
        "{what}: {n} in {:.2} s = {:.0}/s",
        t.as_secs_f64(),
        n as f64 / t.as_secs_f64()
    );
}
