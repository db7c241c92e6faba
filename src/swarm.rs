//! `gsched bench swarm`: a real gctld under a swarm of nodes (issue 42,
//! item 6). NODES node agents run in this process, each speaking gnoded's
//! protocol to the controller, sealed with the cluster key: registration,
//! a heartbeat every interval with its running jobs, launches answered,
//! ends reported. While jobs flow (submitted through the REST API at a
//! steady rate, each "running" a fixed time on the node it was launched
//! to), the benchmark measures the controller from outside: its CPU and
//! memory (from /proc, given its pid), the latency of `squeue`'s listing
//! and of submissions, how long a launch takes to arrive, heartbeat
//! answers, and the scheduler's pass time (its `/metrics`).

mod nodes;

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use gsched_core::job::JobId;
use gsched_core::wire::NodeRegistration;

use nodes::Swarm;

#[derive(clap::Args, Clone)]
pub struct SwarmArgs {
    /// Nodes in the swarm.
    #[arg(long, default_value_t = 1000)]
    nodes: usize,
    /// The GPUs of every node (`--sim-gpus` syntax).
    #[arg(long, default_value = "8xH100-80GB")]
    gpus: String,
    /// Seconds between a node's heartbeats (gnoded's default: 5).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=3600))]
    heartbeat_secs: u64,
    /// The controller's cluster key file.
    #[arg(long)]
    cluster_key_file: PathBuf,
    /// Where the swarm's node API listens (every node's URL is
    /// http://ADDR/n/NAME).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: String,
    /// Seconds of the measured window, once every node has registered.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    duration_secs: u64,
    /// Jobs submitted per second during the window.
    #[arg(long, default_value_t = 20.0)]
    submit_rate: f64,
    /// Seconds each job runs on its node.
    #[arg(long, default_value_t = 10.0)]
    job_secs: f64,
    /// Milliseconds between two `squeue` listings timed.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(10..=60_000))]
    list_every_ms: u64,
    /// The controller's process id, for its CPU time and memory.
    #[arg(long)]
    ctld_pid: Option<u32>,
    /// Prefix of the nodes' names (letters, digits, `-` and `_`; at most
    /// 32).
    #[arg(long, default_value = "swarm", value_parser = node_prefix)]
    prefix: String,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

fn node_prefix(s: &str) -> Result<String, String> {
    if (1..=32).contains(&s.len())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        Ok(s.to_string())
    } else {
        Err("1 to 32 letters, digits, '-' or '_'".into())
    }
}

/// CPU seconds (user + system) and memory of a process, from /proc.
#[derive(Debug, Clone, Copy, Default)]
struct ProcSample {
    cpu_secs: f64,
    rss_mib: f64,
    hwm_mib: f64,
}

fn proc_sample(pid: &str) -> Result<ProcSample> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("cannot read /proc/{pid}/stat: is the process running?"))?;
    // Fields after the command name, which may hold spaces: ") S ppid ...".
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .context("unreadable /proc stat")?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let field = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 of stat, 12 and 13 here.
    let cpu_secs = (field(11) + field(12)) / ticks;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("cannot read /proc/{pid}/status"))?;
    let kib = |key: &str| {
        status
            .lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    Ok(ProcSample {
        cpu_secs,
        rss_mib: kib("VmRSS:") / 1024.0,
        hwm_mib: kib("VmHWM:") / 1024.0,
    })
}

/// What one read of `/metrics` gave: the scheduler's pass count and
/// seconds so far, the size of the text and how long it took to read.
struct Scrape {
    passes: f64,
    pass_secs: f64,
    bytes: usize,
    secs: f64,
}

fn scrape(agent: &ureq::Agent, url: &str) -> Result<Scrape> {
    use std::io::BufRead;
    let sent = Instant::now();
    let reader = agent
        .get(&format!("{url}/metrics"))
        .call()
        .context("cannot read the controller's /metrics")?
        .into_reader();
    let (mut passes, mut pass_secs, mut bytes) = (0.0, 0.0, 0);
    let value = |l: &str| {
        l.split_whitespace()
            .nth(1)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // Streamed: with thousands of nodes the text runs to tens of MB.
    for line in std::io::BufReader::new(reader).lines() {
        let line = line.context("reading /metrics")?;
        bytes += line.len() + 1;
        if line.starts_with("gsched_scheduler_pass_seconds_count") {
            passes = value(&line);
        } else if line.starts_with("gsched_scheduler_pass_seconds_sum") {
            pass_secs = value(&line);
        }
    }
    Ok(Scrape {
        passes,
        pass_secs,
        bytes,
        secs: sent.elapsed().as_secs_f64(),
    })
}

/// The q-quantile of `v` (nearest rank), `None` when empty.
fn quantile(v: &mut [f64], q: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    Some(v[rank - 1])
}

fn ms(v: Option<f64>) -> serde_json::Value {
    v.map_or(serde_json::Value::Null, |s| {
        serde_json::json!((s * 1e5).round() / 100.0)
    })
}

/// p50 and p99 of `v` in ms, and how many.
fn latency(v: &mut [f64]) -> serde_json::Value {
    serde_json::json!({
        "n": v.len(),
        "p50_ms": ms(quantile(v, 0.5)),
        "p99_ms": ms(quantile(v, 0.99)),
    })
}

pub fn run(url: &str, args: SwarmArgs) -> Result<()> {
    if args.nodes == 0 || args.nodes > 100_000 {
        bail!("--nodes must be 1 to 100000");
    }
    if !(args.submit_rate > 0.0 && args.submit_rate <= 10_000.0) {
        bail!("--submit-rate must be above 0 and at most 10000 jobs per second");
    }
    if !(args.job_secs >= 0.0 && args.job_secs <= 86_400.0) {
        bail!("--job-secs must be 0 to 86400");
    }
    let gpus = gsched_core::gpu::parse_sim_spec(&args.gpus)
        .with_context(|| format!("--gpus {}", args.gpus))?;
    let key = gsched_daemon::key::read(&args.cluster_key_file)?;
    let token = match gsched_cli::client::env_token() {
        Some(t) => t,
        None => {
            gsched_cli::client::Client::new(url)
                .issue_token(Some(3600), None)
                .context("cannot get a token for the REST calls")?
                .token
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let (swarm, receivers) = Swarm::new(
        args.nodes,
        &args.prefix,
        url,
        &key,
        Duration::from_secs(args.heartbeat_secs),
        Duration::from_secs_f64(args.job_secs),
    )?;
    let listener = rt
        .block_on(tokio::net::TcpListener::bind(&args.listen))
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let addr = listener.local_addr()?;
    let router = nodes::router(Arc::clone(&swarm), &key);
    rt.spawn(async move { axum::serve(listener, router).await });
    let ctld_before = args
        .ctld_pid
        .map(|p| proc_sample(&p.to_string()))
        .transpose()?;
    let started = Instant::now();
    for (i, rx) in receivers.into_iter().enumerate() {
        let name = swarm.names[i].clone();
        let reg = NodeRegistration {
            instance_id: format!("{name}-{}", std::process::id()),
            url: format!("http://{addr}/n/{name}"),
            cpus: 64,
            memory_mib: 512 * 1024,
            tmp_disk_mib: 100 * 1024,
            instances: gsched_core::gpu::sim_instances(&name, &gpus),
            worker_limit: None,
            running: Vec::new(),
            runs: Default::default(),
            ended: Vec::new(),
            fence_timeout_ms: None,
            heartbeat_ms: args.heartbeat_secs * 1000,
            reshape_gpus: Vec::new(),
            reshape_keep: Default::default(),
            release: gsched_core::version::RELEASE.into(),
            protocol: gsched_core::version::PROTOCOL,
            followed_epoch: 0,
            name,
        };
        let delay = swarm.heartbeat.mul_f64(i as f64 / args.nodes as f64);
        rt.spawn(nodes::agent(Arc::clone(&swarm), i, reg, rx, delay));
    }
    // Every node registered (at most a minute past one interval).
    let deadline = swarm.heartbeat + Duration::from_secs(60);
    while swarm.counts.nodes_registered.load(Ordering::Relaxed) < args.nodes as u64 {
        if started.elapsed() > deadline {
            bail!(
                "only {} of {} nodes registered within {:?}",
                swarm.counts.nodes_registered.load(Ordering::Relaxed),
                args.nodes,
                deadline
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let registration_secs = started.elapsed().as_secs_f64();
    let ctld_registered = args
        .ctld_pid
        .map(|p| proc_sample(&p.to_string()))
        .transpose()?;
    let registration_cpu = ctld_before
        .zip(ctld_registered)
        .map(|(a, b)| ((b.cpu_secs - a.cpu_secs) / registration_secs * 1000.0).round() / 1000.0);
    // One interval for the first heartbeats of all to pass.
    std::thread::sleep(swarm.heartbeat);
    let window = measure(url, &token, &args, &swarm)?;
    let report = serde_json::json!({
        "nodes": args.nodes,
        "gpus_per_node": args.gpus,
        "heartbeat_secs": args.heartbeat_secs,
        "registration_secs": (registration_secs * 100.0).round() / 100.0,
        "registration_controller_cpu_cores": registration_cpu,
        "registration_failures": swarm.counts.registration_failures.load(Ordering::Relaxed),
        "calls_waiting_over_1s_for_a_connection": swarm.counts.waited_over_1s.load(Ordering::Relaxed),
        "window": window,
        "failures": swarm.failures.lock().unwrap_or_else(|p| p.into_inner()).clone(),
    });
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_report(&report);
    }
    rt.shutdown_background();
    Ok(())
}

/// The measured window: jobs submitted at the rate, listings timed, the
/// controller sampled at both ends.
fn measure(
    url: &str,
    token: &str,
    args: &SwarmArgs,
    swarm: &Arc<Swarm>,
) -> Result<serde_json::Value> {
    let agent = ureq::AgentBuilder::new().build();
    let pid = args.ctld_pid.map(|p| p.to_string());
    // The scrape first: at thousands of nodes it is tens of MB of the
    // controller's work, which must not fall into the window's CPU.
    let metrics0 = scrape(&agent, url)?;
    let ctld0 = pid.as_deref().map(proc_sample).transpose()?;
    let self0 = proc_sample("self")?;
    let counts0 = Tally::of(swarm);
    swarm
        .heartbeat_secs
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clear();
    let t0 = Instant::now();
    let duration = Duration::from_secs(args.duration_secs);
    let submitted: Arc<Mutex<Vec<(JobId, Instant)>>> = Arc::default();
    let submit_secs: Arc<Mutex<Vec<f64>>> = Arc::default();
    let submitter = {
        let (url, token) = (url.to_string(), token.to_string());
        let (submitted, submit_secs) = (Arc::clone(&submitted), Arc::clone(&submit_secs));
        let every = Duration::from_secs_f64(1.0 / args.submit_rate);
        std::thread::spawn(move || -> Result<()> {
            let client = gsched_cli::client::Client::with_token(&url, Some(token));
            let spec = crate::bench::spec(&std::env::temp_dir().display().to_string());
            let mut next = Instant::now();
            while t0.elapsed() < duration {
                let sent = Instant::now();
                let id = client.submit(&spec).context("submission refused")?;
                submit_secs
                    .lock()
                    .unwrap()
                    .push(sent.elapsed().as_secs_f64());
                submitted.lock().unwrap().push((id, sent));
                next += every;
                if let Some(wait) = next.checked_duration_since(Instant::now()) {
                    std::thread::sleep(wait);
                }
            }
            Ok(())
        })
    };
    let client = gsched_cli::client::Client::with_token(url, Some(token.to_string()));
    let mut list_secs = Vec::new();
    let mut listed = 0usize;
    while t0.elapsed() < duration {
        let sent = Instant::now();
        listed = client.jobs(&[]).context("listing jobs")?.len();
        list_secs.push(sent.elapsed().as_secs_f64());
        std::thread::sleep(Duration::from_millis(args.list_every_ms));
    }
    submitter
        .join()
        .map_err(|_| anyhow::anyhow!("the submitting thread panicked"))??;
    let wall = t0.elapsed().as_secs_f64();
    let ctld1 = pid.as_deref().map(proc_sample).transpose()?;
    let self1 = proc_sample("self")?;
    let counts1 = Tally::of(swarm);
    let metrics1 = scrape(&agent, url)?;
    let subs = submitted.lock().unwrap().clone();
    // The last jobs' launches, a little past the window (a backlog left
    // out would flatter the p99): at most 30 s.
    let grace = Instant::now();
    while grace.elapsed() < Duration::from_secs(30) {
        let launched = swarm.launched_at.lock().unwrap();
        if subs.iter().all(|(id, _)| launched.contains_key(id)) {
            break;
        }
        drop(launched);
        std::thread::sleep(Duration::from_millis(50));
    }
    let launched = swarm.launched_at.lock().unwrap().clone();
    let mut launch_secs: Vec<f64> = subs
        .iter()
        .filter_map(|(id, sent)| {
            launched
                .get(id)
                .map(|at| at.duration_since(*sent).as_secs_f64())
        })
        .collect();
    let never_launched = subs.len() - launch_secs.len();
    let mut hb = swarm.heartbeat_secs.lock().unwrap().clone();
    let passes = metrics1.passes - metrics0.passes;
    Ok(serde_json::json!({
        "secs": (wall * 100.0).round() / 100.0,
        "controller": ctld0.zip(ctld1).map(|(a, b)| serde_json::json!({
            "cpu_cores": ((b.cpu_secs - a.cpu_secs) / wall * 1000.0).round() / 1000.0,
            "rss_mib": b.rss_mib.round(),
            "peak_rss_mib": b.hwm_mib.round(),
        })),
        "swarm_cpu_cores": ((self1.cpu_secs - self0.cpu_secs) / wall * 1000.0).round() / 1000.0,
        "submitted": subs.len(),
        "submit": latency(&mut submit_secs.lock().unwrap()),
        "launch": latency(&mut launch_secs),
        "never_launched": never_launched,
        "squeue": latency(&mut list_secs),
        "jobs_listed_last": listed,
        "heartbeat": latency(&mut hb),
        "scheduler_passes": passes,
        "scheduler_pass_mean_ms": if passes > 0.0 {
            serde_json::json!(((metrics1.pass_secs - metrics0.pass_secs) / passes * 1e5).round() / 100.0)
        } else { serde_json::Value::Null },
        "metrics_bytes": metrics1.bytes,
        "metrics_read_ms": (metrics1.secs * 1e5).round() / 100.0,
        "heartbeats": counts1.heartbeats - counts0.heartbeats,
        "heartbeat_failures": counts1.heartbeat_failures - counts0.heartbeat_failures,
        "launches": counts1.launches - counts0.launches,
        "cancels": counts1.cancels - counts0.cancels,
        "ends_reported": counts1.ends_reported - counts0.ends_reported,
        "end_report_failures": counts1.end_report_failures - counts0.end_report_failures,
        "registrations": counts1.registrations - counts0.registrations,
    }))
}

/// The swarm's counts at one moment.
struct Tally {
    heartbeats: u64,
    heartbeat_failures: u64,
    launches: u64,
    cancels: u64,
    ends_reported: u64,
    end_report_failures: u64,
    registrations: u64,
}

impl Tally {
    fn of(swarm: &Swarm) -> Tally {
        let c = &swarm.counts;
        Tally {
            heartbeats: c.heartbeats.load(Ordering::Relaxed),
            heartbeat_failures: c.heartbeat_failures.load(Ordering::Relaxed),
            launches: c.launches.load(Ordering::Relaxed),
            cancels: c.cancels.load(Ordering::Relaxed),
            ends_reported: c.ends_reported.load(Ordering::Relaxed),
            end_report_failures: c.end_report_failures.load(Ordering::Relaxed),
            registrations: c.registered.load(Ordering::Relaxed),
        }
    }
}

fn print_report(r: &serde_json::Value) {
    let w = &r["window"];
    println!(
        "swarm: {} nodes ({}), heartbeat every {} s; all registered in {} s (controller {} cores)",
        r["nodes"],
        r["gpus_per_node"],
        r["heartbeat_secs"],
        r["registration_secs"],
        r["registration_controller_cpu_cores"]
    );
    println!("window: {} s", w["secs"]);
    if w["controller"].is_object() {
        let c = &w["controller"];
        println!(
            "controller: {} cores, RSS {} MiB (peak {} MiB)",
            c["cpu_cores"], c["rss_mib"], c["peak_rss_mib"]
        );
    }
    println!("swarm itself: {} cores", w["swarm_cpu_cores"]);
    for (what, key) in [
        ("squeue listing", "squeue"),
        ("submission", "submit"),
        ("submit to launch", "launch"),
        ("heartbeat answer", "heartbeat"),
    ] {
        let l = &w[key];
        println!(
            "{what}: n={} p50 {} ms, p99 {} ms",
            l["n"], l["p50_ms"], l["p99_ms"]
        );
    }
    println!(
        "scheduler passes: {} (mean {} ms); submitted {}, launched {}, never launched {}, ended {}",
        w["scheduler_passes"],
        w["scheduler_pass_mean_ms"],
        w["submitted"],
        w["launches"],
        w["never_launched"],
        w["ends_reported"]
    );
    println!(
        "failures: heartbeats {}, end reports {}; registrations in the window {}",
        w["heartbeat_failures"], w["end_report_failures"], w["registrations"]
    );
    if let Some(f) = r["failures"].as_object() {
        for (why, n) in f {
            println!("  {n} x {why}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{proc_sample, quantile};

    #[test]
    fn quantiles_are_nearest_rank() {
        let mut v = vec![5.0, 1.0, 3.0, 2.0, 4.0];
        assert_eq!(quantile(&mut v, 0.5), Some(3.0));
        assert_eq!(quantile(&mut v, 0.99), Some(5.0));
        assert_eq!(quantile(&mut v, 0.0), Some(1.0));
        assert_eq!(quantile(&mut [], 0.5), None);
    }

    #[test]
    fn a_process_s_cpu_and_memory_are_read_from_proc() {
        let a = proc_sample("self").unwrap();
        let spin = std::time::Instant::now();
        while spin.elapsed() < std::time::Duration::from_millis(50) {}
        let b = proc_sample("self").unwrap();
        assert!(b.cpu_secs >= a.cpu_secs);
        assert!(a.rss_mib > 0.0 && a.hwm_mib >= a.rss_mib);
        assert!(proc_sample("0").is_err());
    }
}
