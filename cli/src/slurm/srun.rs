//! `srun`: inside a job, start its tasks (`-n`) with their `SLURM_PROCID`
//! and per-task output files; outside a job, submit the command as a job
//! and wait for it, as Slurm's srun does.

use std::process::{Command, ExitStatus, Stdio};

use anyhow::{bail, Context, Result};
use clap::Parser;
use gsched_core::pattern::{expand, PatternContext};

use crate::client::Client;

#[derive(Parser, Debug)]
#[command(name = "srun", about = "Run tasks of a gsched job (Slurm's srun)")]
pub struct Args {
    /// Number of tasks (default: the job's, SLURM_NTASKS).
    #[arg(short = 'n', long = "ntasks")]
    pub ntasks: Option<u32>,
    /// Nodes (gsched jobs run on one node: 1).
    #[arg(short = 'N', long = "nodes")]
    pub nodes: Option<String>,
    /// Do not buffer output (tasks write straight to their files).
    #[arg(short = 'u', long = "unbuffered")]
    pub unbuffered: bool,
    /// Output file pattern per task (`%j %J %A %a %t %u %x %N %%`).
    #[arg(short = 'o', long = "output")]
    pub output: Option<String>,
    /// Error file pattern per task.
    #[arg(short = 'e', long = "error")]
    pub error: Option<String>,
    #[arg(short = 'c', long = "cpus-per-task")]
    pub cpus_per_task: Option<u32>,
    /// Accepted; gsched does not bind tasks to CPUs.
    #[arg(long = "cpu-bind")]
    pub cpu_bind: Option<String>,
    /// Accepted inside a job (the job's GPU instances are its GPUs).
    #[arg(short = 'G', long = "gpus")]
    pub gpus: Option<String>,
    /// GPUs each task sees, from the job's (default: the job's
    /// SLURM_GPUS_PER_TASK).
    #[arg(long = "gpus-per-task")]
    pub gpus_per_task: Option<String>,
    /// none, closest, or single:N (N tasks per GPU); default: the job's.
    #[arg(long = "gpu-bind")]
    pub gpu_bind: Option<String>,
    #[arg(short = 'J', long = "job-name")]
    pub job_name: Option<String>,
    /// Prefix lines with the task number (accepted, not done).
    #[arg(short = 'l', long = "label")]
    pub label: bool,
    #[arg(short = 't', long = "time")]
    pub time: Option<String>,
    #[arg(short = 'p', long = "partition")]
    pub partition: Option<String>,
    /// The command and its arguments.
    #[arg(trailing_var_arg = true, required = true)]
    pub command: Vec<String>,
}

fn env_u64(k: &str) -> Option<u64> {
    std::env::var(k).ok().and_then(|v| v.parse().ok())
}

/// The exit status srun reports for a task: its code, or 128 + signal.
fn code_of(s: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0))
}

pub fn main_with(args: Vec<String>) -> Result<i32> {
    let a: Args = super::parse("srun", args)?;
    match env_u64("SLURM_JOB_ID") {
        Some(job) => run_tasks(&a, job),
        None => submit_and_wait(&a),
    }
}

/// Inside job `job`: start the tasks, wait for all, return the highest status.
fn run_tasks(a: &Args, job: u64) -> Result<i32> {
    if let Some(n) = &a.nodes {
        if n.split('-').next() != Some("1") {
            bail!("gsched runs a job on one node; -N {n} cannot be given");
        }
    }
    // The task count: -n, else the job's; when only SLURM_JOB_ID is left in
    // the environment, the controller's record of the job.
    let ntasks = match a.ntasks.or(env_u64("SLURM_NTASKS").map(|n| n as u32)) {
        Some(n) => n,
        None => Client::from_env()
            .jobs(&[("id", job.to_string()), ("state", "all".into())])
            .ok()
            .and_then(|j| {
                j.first()
                    .map(|j| gsched_core::allocation::tasks_on_node(&j.slurm))
            })
            .unwrap_or(1),
    };
    if ntasks == 0 {
        bail!("-n 0: at least one task is needed");
    }
    let user = std::env::var("SLURM_JOB_USER")
        .or_else(|_| std::env::var("USER"))
        .unwrap_or_default();
    let name = std::env::var("SLURM_JOB_NAME").unwrap_or_default();
    let node = std::env::var("SLURMD_NODENAME").unwrap_or_default();
    let array_job = env_u64("SLURM_ARRAY_JOB_ID");
    let array_task = env_u64("SLURM_ARRAY_TASK_ID").map(|t| t as u32);
    let append = std::env::var("SLURM_OPEN_MODE").as_deref() == Ok("a");
    let open = |pattern: &str, rank: u32| -> Result<std::fs::File> {
        let path = expand(
            pattern,
            &PatternContext {
                job_id: job,
                array_job_id: array_job,
                array_task_id: array_task,
                user: &user,
                name: &name,
                node: &node,
                task_rank: rank,
            },
        );
        std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .append(append)
            .truncate(!append)
            .open(&path)
            .with_context(|| format!("cannot open output file {path}"))
    };
    // The step is recorded for sacct (`ID.N`); without the controller the
    // tasks still run, as step 0.
    let client = Client::from_env();
    let step = client.begin_step(job, &a.command[0], ntasks).ok();
    let step_id = step.unwrap_or(0).to_string();
    // The step's own cgroup (below the job's): this process joins it, so
    // the tasks it starts are counted, and killed at the end, as the step.
    // Without the job's probe socket (a stripped environment) there is no
    // node daemon to ask, and the tasks run in the caller's cgroup.
    let mut confined = step.and_then(|n| Some((n, step_cgroup(job, n)?)));
    let ran = start_and_wait(a, ntasks, &step_id, job, &open);
    // The step ends however its tasks went (a task that could not start
    // too): its cgroup is counted and removed.
    if let Some((n, c)) = confined.as_mut() {
        if let Err(e) = c.step_end(*n) {
            eprintln!("srun: warning: step {job}.{n}: {}", e.message);
        }
    }
    // A step whose tasks could not all start ended FAILED.
    let (worst, signal) = ran.as_ref().map_or((1, None), |r| *r);
    if let Some(n) = step {
        let code = if signal.is_some() { 0 } else { worst };
        let _ = client.end_step(job, n, code, signal);
    }
    ran.map(|_| worst)
}

/// The devices each of `ntasks` tasks sees, where the job's GPUs are
/// split among them (`--gpus-per-task`, `--gpu-bind=single:N`, from srun's
/// options or the job's); `None` when every task sees all of the job's.
fn task_gpus(a: &Args, ntasks: u32) -> Result<Option<Vec<String>>> {
    use gsched_core::allocation::{gpu_bind, gpu_count};
    let Ok(visible) = std::env::var("CUDA_VISIBLE_DEVICES") else {
        return Ok(None);
    };
    let per_task = match a
        .gpus_per_task
        .clone()
        .or_else(|| std::env::var("SLURM_GPUS_PER_TASK").ok())
    {
        Some(v) => Some(gpu_count(&v).with_context(|| {
            format!("--gpus-per-task={v}: expected [TYPE:]N, a GPU count of at least 1")
        })?),
        None => None,
    };
    let bind = match a
        .gpu_bind
        .clone()
        .or_else(|| std::env::var("SLURM_GPU_BIND").ok())
    {
        Some(v) => Some(gpu_bind(&v).with_context(|| {
            format!("--gpu-bind={v}: gsched binds with none, closest or single:N")
        })?),
        None => None,
    };
    if per_task.is_none() && !matches!(bind, Some(gsched_core::allocation::GpuBind::Single(_))) {
        return Ok(None);
    }
    (0..ntasks)
        .map(|t| {
            gsched_core::env::task_devices(&visible, per_task, bind, t).with_context(|| {
                format!(
                    "task {t} of {ntasks} would need GPUs beyond the job's ({visible}); ask for fewer tasks or fewer GPUs per task"
                )
            })
        })
        .collect::<Result<Vec<_>>>()
        .map(Some)
}

/// Starts the `ntasks` tasks of a step and waits for them all: the highest
/// exit status, and a signal that ended one.
fn start_and_wait(
    a: &Args,
    ntasks: u32,
    step_id: &str,
    job: u64,
    open: &dyn Fn(&str, u32) -> Result<std::fs::File>,
) -> Result<(i32, Option<i32>)> {
    let devices = task_gpus(a, ntasks)?;
    let mut children = Vec::new();
    for rank in 0..ntasks {
        let mut cmd = Command::new(&a.command[0]);
        if let Some(d) = devices.as_ref().map(|d| &d[rank as usize]) {
            cmd.env("CUDA_VISIBLE_DEVICES", d)
                .env("GPU_DEVICE_ORDINAL", d);
        }
        cmd.args(&a.command[1..])
            .env("SLURM_PROCID", rank.to_string())
            .env("SLURM_LOCALID", rank.to_string())
            .env("SLURM_NODEID", "0")
            .env("SLURM_NTASKS", ntasks.to_string())
            .env("SLURM_NPROCS", ntasks.to_string())
            .env("SLURM_STEP_NUM_TASKS", ntasks.to_string())
            .env("SLURM_STEP_ID", step_id)
            .env("SLURM_STEPID", step_id)
            .env("SLURM_JOB_ID", job.to_string())
            .env("SLURM_JOBID", job.to_string());
        if let Some(c) = a.cpus_per_task {
            cmd.env("SLURM_CPUS_PER_TASK", c.to_string());
        }
        // Standard input goes to task 0.
        if rank > 0 {
            cmd.stdin(Stdio::null());
        }
        if let Some(p) = &a.output {
            let out = open(p, rank)?;
            if a.error.is_none() {
                cmd.stderr(out.try_clone()?);
            }
            cmd.stdout(out);
        }
        if let Some(p) = &a.error {
            cmd.stderr(open(p, rank)?);
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("cannot start {}", a.command[0]))?;
        children.push(child);
    }
    let mut worst = 0;
    let mut signal = None;
    for mut c in children {
        let s = c.wait().context("cannot wait for a task")?;
        use std::os::unix::process::ExitStatusExt;
        if let Some(sig) = s.signal() {
            signal = Some(sig);
        }
        worst = worst.max(code_of(s));
    }
    Ok((worst, signal))
}

/// The job's node daemon, to give step `step` a cgroup of its own: this
/// process joins it (`None`, with a warning, where that cannot be done).
fn step_cgroup(job: u64, step: u32) -> Option<gsched_probe::client::ProbeClient> {
    use gsched_core::probe::{JOB_KEY_ENV, PROBE_SOCK_ENV};
    let (sock, key) = (
        std::env::var(PROBE_SOCK_ENV).ok()?,
        std::env::var(JOB_KEY_ENV).ok()?,
    );
    let begun = gsched_probe::client::ProbeClient::connect(&sock, job, key)
        .and_then(|mut c| c.step_begin(step).map(|()| c));
    match begun {
        Ok(c) => Some(c),
        Err(e) => {
            eprintln!(
                "srun: warning: step {job}.{step} runs in the job's cgroup: {}",
                e.message
            );
            None
        }
    }
}

/// Outside a job: submit the command as a job, wait for its end, print its
/// output and return its exit code.
fn submit_and_wait(a: &Args) -> Result<i32> {
    let cwd = std::env::current_dir().context("cannot determine the current directory")?;
    let out = cwd.join(format!(".gsched-srun-{}.out", std::process::id()));
    let quoted: Vec<String> = a.command.iter().map(|w| shell_quote(w)).collect();
    let mut opts = crate::gsub::SubmitOptions {
        job_name: Some(a.job_name.clone().unwrap_or_else(|| a.command[0].clone())),
        output: Some(out.display().to_string()),
        time: a.time.clone(),
        partition: a.partition.clone(),
        ntasks: a.ntasks,
        cpus_per_task: a.cpus_per_task,
        gpus: a.gpus.clone(),
        // The controller refuses more than one node, with the reason.
        recorded: crate::gsub::RecordedOptions {
            nodes: a.nodes.clone(),
            ..Default::default()
        },
        ..Default::default()
    };
    // The job runs `srun CMD` itself, so that -n tasks start inside it.
    let mut inner = vec!["srun".to_string()];
    if let Some(n) = a.ntasks {
        inner.push(format!("-n{n}"));
    }
    inner.extend(quoted);
    opts.wrap = Some(inner.join(" "));
    let script = crate::gsub::wrap_script(opts.wrap.as_deref().unwrap_or(""));
    let spec = crate::gsub::build_spec(&opts, script, "srun", &cwd)?;
    let client = Client::from_env();
    let id = client.submit(&spec)?;
    let job = loop {
        let jobs = client.jobs(&[("id", id.to_string()), ("state", "all".into())])?;
        match jobs.into_iter().next() {
            Some(j) if j.job_state.is_final() => break j,
            _ => std::thread::sleep(std::time::Duration::from_millis(200)),
        }
    };
    if let Ok(text) = std::fs::read(&out) {
        use std::io::Write;
        let _ = std::io::stdout().write_all(&text);
        let _ = std::fs::remove_file(&out);
    }
    if job.job_state != gsched_core::job::JobState::Completed {
        eprintln!(
            "srun: error: job {id}: {}{}",
            job.job_state.as_str(),
            job.state_reason
                .map(|r| format!(" ({r})"))
                .unwrap_or_default()
        );
    }
    Ok(match (job.exit_code, job.exit_signal) {
        (_, Some(sig)) if sig > 0 => 128 + sig,
        (Some(c), _) => c,
        _ => 1,
    })
}

/// Quotes a word for `sh` when it needs it.
fn shell_quote(w: &str) -> String {
    if !w.is_empty()
        && w.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b))
    {
        w.to_string()
    } else {
        format!("'{}'", w.replace('\'', "'\\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_quoted_for_the_shell() {
        assert_eq!(shell_quote("python"), "python");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
        assert_eq!(shell_quote(""), "''");
    }
}
