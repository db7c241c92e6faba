//! `srun`: inside a job, start its tasks (`-n`) with their `SLURM_PROCID`
//! and per-task output files; outside a job, submit the command as a job
//! and wait for it, as Slurm's srun does.

mod ending;
mod new_job;
mod wide;

pub(super) use ending::{wait_all, Ending};
pub(crate) use new_job::exit_status;

use std::collections::BTreeMap;
use std::process::{Child, Command, ExitStatus, Stdio};

use anyhow::{bail, Context, Result};
use clap::Parser;
use gsched_core::pattern::{expand, PatternContext};

use crate::client::Client;

#[derive(Parser, Debug)]
#[command(
    name = "srun",
    about = "Run tasks of a gsched job (Slurm's srun)",
    args_override_self = true
)]
pub struct Args {
    /// Number of tasks (default: the job's, SLURM_NTASKS).
    #[arg(short = 'n', long = "ntasks")]
    pub ntasks: Option<u32>,
    /// Nodes: inside a job, of its allocation (the first N); outside, the
    /// job's (`N` or `MIN-MAX`).
    #[arg(short = 'N', long = "nodes", value_name = "N")]
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
    #[arg(short = 'G', long = "gpus", value_name = "n")]
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
    /// Prefix each line a task writes with its number (`0: `).
    #[arg(short = 'l', long = "label")]
    pub label: bool,
    /// When a task ends with a non-zero status, kill the others (`-K`,
    /// `--kill-on-bad-exit[=1]`; `=0` turns it off).
    #[arg(short = 'K', long = "kill-on-bad-exit", num_args = 0..=1, require_equals = true, default_missing_value = "1", value_name = "0|1")]
    pub kill_on_bad_exit: Option<u8>,
    /// Nodes to run on: inside a job, of its allocation.
    #[arg(short = 'w', long = "nodelist")]
    pub nodelist: Option<String>,
    /// Tasks on each node.
    #[arg(long = "ntasks-per-node")]
    pub ntasks_per_node: Option<u32>,
    /// `none` (the only one): gsched runs no PMI server; Open MPI's
    /// `mpirun` needs none (it passes `--mpi=none` itself).
    #[arg(long = "mpi")]
    pub mpi: Option<String>,
    #[arg(short = 't', long = "time")]
    pub time: Option<String>,
    #[arg(short = 'p', long = "partition")]
    pub partition: Option<String>,
    /// Say what srun does: the job's id, and where it runs.
    #[arg(short = 'v', long = "verbose", action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// A new job only: give up, cancelling it, unless it starts within
    /// this many seconds (default 1).
    #[arg(short = 'I', long = "immediate", num_args = 0..=1, require_equals = true, default_missing_value = "1", value_name = "secs")]
    pub immediate: Option<u64>,
    /// A new job only: start it no earlier than this time (sbatch's
    /// forms: `now+60`, `16:00`, `tomorrow`, ...).
    #[arg(short = 'b', long = "begin", value_name = "time")]
    pub begin: Option<String>,
    /// A new job only: submit it held (it starts after `scontrol release`).
    #[arg(short = 'H', long = "hold")]
    pub hold: bool,
    /// A new job only: its QOS.
    #[arg(short = 'q', long = "qos", value_name = "qos")]
    pub qos: Option<String>,
    /// A new job only: the account charged.
    #[arg(short = 'A', long = "account", value_name = "name")]
    pub account: Option<String>,
    /// A new job only: memory per node (`--mem` of sbatch).
    #[arg(long = "mem", value_name = "MB")]
    pub mem: Option<String>,
    /// A new job only: at least this many CPUs on its node.
    #[arg(long = "mincpus", value_name = "n")]
    pub mincpus: Option<u32>,
    /// A new job only: at least this much temporary disk (`/tmp`, MB or
    /// with K, M, G, T) on its node.
    #[arg(long = "tmp", value_name = "MB")]
    pub tmp: Option<String>,
    /// More tasks than CPUs: a new job takes CPUs as if one task ran on
    /// each node (inside a job, a step's tasks may always outnumber its
    /// CPUs here).
    #[arg(short = 'O', long = "overcommit")]
    pub overcommit: bool,
    /// The step shares the job's resources with its other steps, which
    /// every step here does (Slurm's default is exclusive steps).
    #[arg(long = "overlap")]
    pub overlap: bool,
    /// The tasks' environment: ALL (default), NONE, or a comma list of
    /// names (taken from here) and NAME=VALUE pairs, ALL in it adding the
    /// rest; Slurm's SLURM_* variables are always given.
    #[arg(long = "export", value_name = "[ALL,]vars|NONE")]
    pub export: Option<String>,
    /// Every task's standard input from this file (`%t`, `%j`, ... as
    /// for --output; `none`: nothing); default: srun's own, to task 0.
    #[arg(short = 'i', long = "input", value_name = "filename")]
    pub input: Option<String>,
    /// A new job: one Ctrl-C kills its tasks (without it, the first
    /// reports their state and a second within a second kills them).
    #[arg(long = "quit-on-interrupt")]
    pub quit_on_interrupt: bool,
    /// Once a task has ended, wait at most this many seconds for the
    /// others, then kill them (0: wait for all, the default).
    #[arg(short = 'W', long = "wait", value_name = "seconds")]
    pub wait: Option<u64>,
    /// A program run before each task, in its process and environment:
    /// its output lines `export NAME=VALUE`, `unset NAME` and `print TEXT`
    /// change the task's environment or print to its output.
    #[arg(long = "task-prolog", value_name = "executable")]
    pub task_prolog: Option<String>,
    /// A program run after each task ends (killed after 5 seconds; its
    /// output is discarded).
    #[arg(long = "task-epilog", value_name = "executable")]
    pub task_epilog: Option<String>,
    /// The tasks' working directory (relative: to srun's own).
    #[arg(short = 'D', long = "chdir", value_name = "path")]
    pub chdir: Option<String>,
    /// The command and its arguments.
    #[arg(trailing_var_arg = true, required = true)]
    pub command: Vec<String>,
}

pub(super) fn env_u64(k: &str) -> Option<u64> {
    std::env::var(k).ok().and_then(|v| v.parse().ok())
}

/// The exit status srun reports for a task: its code, or 128 + signal.
pub(super) fn code_of(s: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0))
}

pub fn main_with(args: Vec<String>) -> Result<i32> {
    // Outside a job, SLURM_* input variables give options; the command
    // line's own come after them and win.
    let args = match env_u64("SLURM_JOB_ID") {
        Some(_) => args,
        None => {
            let mut all = crate::input_env::srun_arguments(|k| std::env::var(k).ok());
            all.extend(args);
            all
        }
    };
    let a: Args = super::parse("srun", args)?;
    if let Some(m) = a.mpi.as_deref().filter(|m| *m != "none") {
        bail!(
            "--mpi={m}: gsched runs no PMI server (pmi2, PMIx); start MPI programs with mpirun inside the allocation, or give --mpi=none"
        );
    }
    if a.verbose > 0 {
        tell_options(&a);
    }
    match env_u64("SLURM_JOB_ID") {
        Some(job) => {
            refuse_new_job_options(&a)?;
            if a.verbose > 0 {
                eprintln!("srun: jobid {job}: a step of the job (SLURM_JOB_ID)");
            }
            run_tasks(&a, job)
        }
        None => new_job::submit_and_wait(&a),
    }
}

/// `-v`: the options in force, as Slurm's srun lists them.
fn tell_options(a: &Args) {
    let rule = "srun: -------------------- --------------------";
    eprintln!("srun: defined options\n{rule}");
    let mut rows = vec![("verbose", a.verbose.to_string())];
    if let Some(n) = a.ntasks {
        rows.push(("ntasks", n.to_string()));
    }
    if let Some(n) = &a.nodes {
        rows.push(("nodes", n.clone()));
    }
    if let Some(d) = &a.chdir {
        rows.push(("chdir", d.clone()));
    }
    if let Some(t) = &a.time {
        rows.push(("time", t.clone()));
    }
    for (k, v) in rows {
        eprintln!("srun: {k:<20}: {v}");
    }
    eprintln!("{rule}\nsrun: end of defined options");
}

/// Inside a job, the options that only shape a new job are errors, not
/// silently dropped (a step runs in its job's allocation).
fn refuse_new_job_options(a: &Args) -> Result<()> {
    let given = [
        ("--hold", a.hold),
        ("--begin", a.begin.is_some()),
        ("--qos", a.qos.is_some()),
        ("--account", a.account.is_some()),
        ("--mem", a.mem.is_some()),
        ("--mincpus", a.mincpus.is_some()),
        ("--tmp", a.tmp.is_some()),
    ];
    match given.iter().find(|(_, set)| *set) {
        Some((option, _)) => bail!(
            "{option} shapes a new job; inside job {} a step runs in the job's allocation",
            std::env::var("SLURM_JOB_ID").unwrap_or_default()
        ),
        None => Ok(()),
    }
}

/// Inside job `job`: start the tasks, wait for all, return the highest status.
fn run_tasks(a: &Args, job: u64) -> Result<i32> {
    if env_u64("SLURM_JOB_NUM_NODES").unwrap_or(1) > 1 {
        // Tasks on the job's other nodes too: their nodes' gnoded starts
        // them, which takes none of these yet.
        let unsupported = [
            ("--task-prolog", a.task_prolog.is_some()),
            ("--task-epilog", a.task_epilog.is_some()),
            ("--export", a.export.is_some()),
            ("--chdir", a.chdir.is_some()),
            ("--wait", a.wait.is_some()),
            ("--input", a.input.is_some()),
        ];
        if let Some((option, _)) = unsupported.iter().find(|(_, given)| *given) {
            bail!("{option} is not supported for a step of a job on several nodes yet (docs/slurm.md)");
        }
        return wide::run(a, job);
    }
    if let Some(n) = &a.nodes {
        if n.split('-').next() != Some("1") {
            bail!("-N {n}: the job's allocation has one node");
        }
    }
    if let Some(w) = &a.nodelist {
        let here = std::env::var("SLURMD_NODENAME").unwrap_or_default();
        let names = gsched_core::hostlist::expand(w)?;
        if names != [here.clone()] {
            bail!("-w {w}: the job's allocation is node {here} alone");
        }
    }
    // The task count: -n (or --ntasks-per-node, the job having one node),
    // else the job's; when only SLURM_JOB_ID is left in the environment,
    // the controller's record of the job.
    let ntasks = match a
        .ntasks
        .or(a.ntasks_per_node)
        .or(env_u64("SLURM_NTASKS").map(|n| n as u32))
    {
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
    let node = std::env::var("SLURMD_NODENAME").unwrap_or_default();
    let open = |pattern: &str, rank: u32| output_file(pattern, job, &node, rank);
    // The step is recorded for sacct (`ID.N`); without the controller the
    // tasks still run, as step 0.
    let client = Client::from_env();
    let step = client.begin_step(job, &a.command[0], ntasks).ok();
    let step_id = step.unwrap_or(0).to_string();
    if a.verbose > 0 {
        let ranks: Vec<String> = (0..ntasks).map(|r| r.to_string()).collect();
        eprintln!(
            "srun: launching StepId={job}.{step_id} on host {node}, {ntasks} tasks: {}",
            ranks.join(",")
        );
    }
    // The step's own cgroup (below the job's): this process joins it, so
    // the tasks it starts are counted, and killed at the end, as the step.
    // Without the job's probe socket (a stripped environment) there is no
    // node daemon to ask, and the tasks run in the caller's cgroup.
    let mut confined = step.and_then(|n| Some((n, step_cgroup(job, n)?)));
    let vars = step_vars(&StepShape {
        job,
        step_id: &step_id,
        ntasks,
        nodes: std::slice::from_ref(&node),
        per_node: &[ntasks],
    });
    let local = LocalTasks {
        ranks: (0..ntasks).collect(),
        node_id: 0,
        vars: &vars,
    };
    let ran = start_local(a, &local, &open).and_then(|(children, labels)| {
        let tasks: Vec<(u32, Child)> = local.ranks.iter().copied().zip(children).collect();
        let ended = wait_all(tasks, &node, &Ending::of(a, job, step.unwrap_or(0)));
        for l in labels {
            let _ = l.join();
        }
        ended
    });
    // The tasks' epilog, once they have ended (the tasks that started).
    if let (Ok(_), Ok(Some(epilog))) = (&ran, task_script("--task-epilog", &a.task_epilog)) {
        ending::run_epilogs(&epilog, &local, a.chdir.as_deref());
    }
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

/// Opens (as the caller, on this node) the file `pattern` names for task
/// `rank` of job `job` running on `node`.
pub(super) fn output_file(pattern: &str, job: u64, node: &str, rank: u32) -> Result<std::fs::File> {
    if pattern == "none" {
        // Slurm's `none`: the stream is thrown away.
        return std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/null")
            .context("cannot open /dev/null");
    }
    let append = std::env::var("SLURM_OPEN_MODE").as_deref() == Ok("a");
    let path = task_file_path(pattern, job, node, rank);
    // Tasks whose pattern names the same file share it (opened, and
    // truncated, once), as in Slurm: `-o out.txt` collects every task's.
    static OPENED: std::sync::Mutex<BTreeMap<String, std::fs::File>> =
        std::sync::Mutex::new(BTreeMap::new());
    let mut opened = OPENED.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(f) = opened.get(&path) {
        return f
            .try_clone()
            .with_context(|| format!("cannot share output file {path}"));
    }
    let f = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .append(append)
        .truncate(!append)
        .open(&path)
        .with_context(|| format!("cannot open output file {path}"))?;
    opened.insert(path, f.try_clone().context("cannot share an output file")?);
    Ok(f)
}

/// The path `pattern` (`%j %J %A %a %t %u %x %N %%`) names for task
/// `rank` of job `job` on `node`: its output, error or input file.
fn task_file_path(pattern: &str, job: u64, node: &str, rank: u32) -> String {
    let user = std::env::var("SLURM_JOB_USER")
        .or_else(|_| std::env::var("USER"))
        .unwrap_or_default();
    let name = std::env::var("SLURM_JOB_NAME").unwrap_or_default();
    expand(
        pattern,
        &PatternContext {
            job_id: job,
            array_job_id: env_u64("SLURM_ARRAY_JOB_ID"),
            array_task_id: env_u64("SLURM_ARRAY_TASK_ID").map(|t| t as u32),
            user: &user,
            name: &name,
            node,
            task_rank: rank,
        },
    )
}

/// A step's shape, for the variables every task of it gets.
pub(super) struct StepShape<'a> {
    pub job: u64,
    pub step_id: &'a str,
    pub ntasks: u32,
    /// The step's nodes and the tasks on each.
    pub nodes: &'a [String],
    pub per_node: &'a [u32],
}

/// The address of srun's host, as the controller's network sees it: the
/// local address a datagram to the controller would leave from (nothing
/// is sent); the host name's address, or loopback, without one.
fn launch_address() -> String {
    use std::net::{ToSocketAddrs, UdpSocket};
    let controller = crate::client::controller_url()
        .ok()
        .and_then(|u| {
            let rest = u.split("://").nth(1)?.to_string();
            Some(rest.split('/').next()?.to_string())
        })
        .and_then(|authority| authority.to_socket_addrs().ok()?.next());
    let via_route = controller.and_then(|to| {
        let any = if to.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" };
        let s = UdpSocket::bind(any).ok()?;
        s.connect(to).ok()?;
        Some(s.local_addr().ok()?.ip())
    });
    via_route
        .or_else(|| {
            let host = crate::identity::hostname();
            (host.as_str(), 0)
                .to_socket_addrs()
                .ok()?
                .next()
                .map(|a| a.ip())
        })
        .map(|ip| ip.to_string())
        .unwrap_or_else(|| "127.0.0.1".into())
}

/// The step's variables (the same for each of its tasks, on every node).
pub(super) fn step_vars(s: &StepShape<'_>) -> Vec<(String, String)> {
    let n = s.ntasks.to_string();
    let job = s.job.to_string();
    let launched_from = launch_address();
    [
        ("SLURM_NTASKS", n.clone()),
        ("SLURM_NPROCS", n.clone()),
        ("SLURM_STEP_NUM_TASKS", n),
        ("SLURM_STEP_ID", s.step_id.to_string()),
        ("SLURM_STEPID", s.step_id.to_string()),
        ("SLURM_STEP_NUM_NODES", s.nodes.len().to_string()),
        (
            "SLURM_STEP_TASKS_PER_NODE",
            gsched_core::env::repeated(s.per_node),
        ),
        (
            "SLURM_STEP_NODELIST",
            gsched_core::hostlist::compress(s.nodes),
        ),
        ("SLURM_JOB_ID", job.clone()),
        ("SLURM_JOBID", job),
        // Where srun runs (it talks to its tasks through pipes and the
        // node daemons: there is no SLURM_SRUN_COMM_PORT).
        ("SLURM_LAUNCH_NODE_IPADDR", launched_from.clone()),
        ("SLURM_SRUN_COMM_HOST", launched_from),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// The tasks of a step on srun's own node: their ranks (the i-th has
/// `SLURM_LOCALID` i), the node's place among the job's nodes, the step's
/// variables.
pub(super) struct LocalTasks<'a> {
    pub ranks: Vec<u32>,
    pub node_id: u32,
    pub vars: &'a [(String, String)],
}

/// The devices each of `ntasks` tasks sees, where the job's GPUs are
/// split among them (`--gpus-per-task`, `--gpu-bind=single:N`, from srun's
/// options or the job's); `None` when every task sees all of the job's.
fn task_gpus(a: &Args, ntasks: u32) -> Result<Option<Vec<String>>> {
    use gsched_core::allocation::{gpu_bind, gpu_count};
    let Ok(visible) = std::env::var("CUDA_VISIBLE_DEVICES") else {
        return Ok(None);
    };
    // srun's own option, else the job's.
    let given = |o: &Option<String>, var: &str| o.clone().or_else(|| std::env::var(var).ok());
    let per_task = match given(&a.gpus_per_task, "SLURM_GPUS_PER_TASK") {
        Some(v) => Some(gpu_count(&v).with_context(|| {
            format!("--gpus-per-task={v}: expected [TYPE:]N, a GPU count of at least 1")
        })?),
        None => None,
    };
    let bind = match given(&a.gpu_bind, "SLURM_GPU_BIND") {
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

/// `--task-prolog` or `--task-epilog`'s program: an absolute path to a
/// file that exists.
pub(super) fn task_script(option: &str, given: &Option<String>) -> Result<Option<String>> {
    let Some(p) = given else {
        return Ok(None);
    };
    let path = std::path::absolute(p).with_context(|| format!("{option}={p}"))?;
    if !path.is_file() {
        bail!("{option}={p}: no such file");
    }
    Ok(Some(path.display().to_string()))
}

/// Starts the step's tasks on this node: the children, and the threads
/// copying their labelled output.
pub(super) fn start_local(
    a: &Args,
    tasks: &LocalTasks<'_>,
    open: &dyn Fn(&str, u32) -> Result<std::fs::File>,
) -> Result<(Vec<Child>, Vec<std::thread::JoinHandle<()>>)> {
    let devices = task_gpus(a, tasks.ranks.len() as u32)?;
    // Each task runs through a shell that gives it SLURM_TASK_PID: the
    // program is looked for first, so that a missing one fails the step
    // at once, as a failed start does.
    let path = std::env::var("PATH").unwrap_or_default();
    if !gsched_core::env::finds_program(&a.command[0], &path, |p| p.is_file()) {
        bail!(
            "Unable to run executable {}: No such file or directory (not in PATH)",
            a.command[0]
        );
    }
    let prolog = task_script("--task-prolog", &a.task_prolog)?;
    task_script("--task-epilog", &a.task_epilog)?;
    let argv = match prolog {
        None => gsched_core::env::with_task_pid(&a.command),
        Some(_) => gsched_core::env::with_task_prolog(&a.command),
    };
    // --export: the tasks' environment, with the job's SLURM_* and
    // GSCHED_* variables always there.
    let exported = match &a.export {
        Some(x) => {
            let mut env = crate::gsub::exported_environment(Some(x))?;
            env.extend(
                std::env::vars()
                    .filter(|(k, _)| k.starts_with("SLURM") || k.starts_with("GSCHED_")),
            );
            Some(env)
        }
        None => None,
    };
    let mut children: Vec<Child> = Vec::new();
    let mut labels = Vec::new();
    for (local, &rank) in tasks.ranks.iter().enumerate() {
        let mut cmd = Command::new(&argv[0]);
        if let Some(env) = &exported {
            cmd.env_clear().envs(env);
        }
        if let Some(d) = devices.as_ref().map(|d| &d[local]) {
            cmd.env("CUDA_VISIBLE_DEVICES", d)
                .env("GPU_DEVICE_ORDINAL", d);
        }
        if let Some(d) = &a.chdir {
            cmd.current_dir(d);
        }
        if let Some(p) = &prolog {
            cmd.env(gsched_core::env::TASK_PROLOG_VAR, p);
        }
        cmd.args(&argv[1..])
            .env("SLURM_PROCID", rank.to_string())
            .env("SLURM_LOCALID", local.to_string())
            .env("SLURM_NODEID", tasks.node_id.to_string())
            .envs(tasks.vars.iter().map(|(k, v)| (k, v)));
        if let Some(c) = a.cpus_per_task {
            cmd.env("SLURM_CPUS_PER_TASK", c.to_string());
        }
        // Standard input goes to task 0, or `-i FILE` to every task.
        match a.input.as_deref() {
            Some("none") => {
                cmd.stdin(Stdio::null());
            }
            Some(p) => {
                let job = env_u64("SLURM_JOB_ID").unwrap_or(0);
                let node = std::env::var("SLURMD_NODENAME").unwrap_or_default();
                let path = task_file_path(p, job, &node, rank);
                let f = std::fs::File::open(&path)
                    .with_context(|| format!("cannot open input file {path}"))?;
                cmd.stdin(f);
            }
            None if rank > 0 => {
                cmd.stdin(Stdio::null());
            }
            None => {}
        }
        if let Some(p) = &a.output {
            let out = open(p, rank)?;
            if a.error.is_none() {
                cmd.stderr(out.try_clone()?);
            }
            cmd.stdout(out);
        } else if a.label {
            cmd.stdout(Stdio::piped());
        }
        if let Some(p) = &a.error {
            cmd.stderr(open(p, rank)?);
        } else if a.label && a.output.is_none() {
            cmd.stderr(Stdio::piped());
        }
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                for c in &mut children {
                    let _ = c.kill();
                }
                return Err(e).with_context(|| {
                    format!("task {rank}: Unable to run executable {}", a.command[0])
                });
            }
        };
        if let Some(out) = child.stdout.take() {
            labels.push(label_lines(out, rank, false));
        }
        if let Some(err) = child.stderr.take() {
            labels.push(label_lines(err, rank, true));
        }
        children.push(child);
    }
    Ok((children, labels))
}

/// Copies a task's output to srun's own, each line prefixed with the
/// task's number (`srun --label`).
fn label_lines(
    from: impl std::io::Read + Send + 'static,
    rank: u32,
    stderr: bool,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        use std::io::{BufRead, Write};
        let mut lines = std::io::BufReader::new(from);
        let mut line = Vec::new();
        loop {
            line.clear();
            match lines.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {
                    let mut text = format!("{rank}: ").into_bytes();
                    text.extend_from_slice(&line);
                    if !text.ends_with(b"\n") {
                        text.push(b'\n');
                    }
                    // One write per line, so lines of tasks do not mix.
                    let _ = if stderr {
                        std::io::stderr().lock().write_all(&text)
                    } else {
                        std::io::stdout().lock().write_all(&text)
                    };
                }
            }
        }
    })
}

/// The job's node daemon, to give step `step` a cgroup of its own: this
/// process joins it (`None`, with a warning, where that cannot be done).
pub(super) fn step_cgroup(job: u64, step: u32) -> Option<gsched_probe::client::ProbeClient> {
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
/// Quotes a word for `sh` when it needs it.
pub(super) fn shell_quote(w: &str) -> String {
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
