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
}

fn spec(dir: &str) -> JobSpec {
    let (user, uid, gid) = (
        std::env::var("USER").unwrap_or_else(|_| "root".into()),
        nix_uid(),
        nix_gid(),
    );
    JobSpec {
        name: "bench".into(),
        script: "#!/bin/sh\ntrue\n".into(),
        argv: vec![],
        environment: [("PATH".to_string(), "/usr/bin:/bin".to_string())]
            .into_iter()
            .collect(),
        working_dir: dir.into(),
        user_name: user,
        uid,
        gid,
        submit_host: "bench".into(),
        isolated: false,
        gpu: Default::default(),
        time_limit: None,
        stdout: Some("/dev/null".into()),
        stderr: None,
        requeue: false,
        partition: None,
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
        move || -> Result<()> {
            agent
                .post(&format!("{url}/api/v1/jobs"))
                .send_json(body.clone())?;
            Ok(())
        }
    };
    match args.what {
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
