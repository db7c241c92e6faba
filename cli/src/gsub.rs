//! `gsub`: submit a batch script.

use std::collections::BTreeMap;
use std::io::Read;

use anyhow::{bail, Context, Result};
use clap::Parser;
use gsched_core::job::{GpuRequest, JobSpec, SlurmOptions};
use gsched_core::units::{parse_mem_mib, parse_time_limit};

use crate::client::Client;
use crate::directives;
use crate::identity::{current_user, hostname};

/// Options of a submission, from the command line or from directives.
#[derive(Parser, Debug, Clone, Default)]
#[command(
    name = "gsub",
    version = gsched_core::version::VERSION_LINE,
    about = "Submit a batch script to gsched",
    disable_help_flag = false
)]
pub struct SubmitOptions {
    /// Give the job a GPU instance of its own (needs --mig or --gpu-mem).
    #[arg(long)]
    pub isolated: bool,
    /// GPU memory footprint (e.g. 4G): the instance size for an isolated job,
    /// the reservation hint for a shared one.
    #[arg(long, value_name = "SIZE")]
    pub gpu_mem: Option<String>,
    /// A shared job's share of its GPU's time, REQ[:LIMIT]: fractions of
    /// one GPU (0.25, or 25%). gnoded co-locates shared processes only
    /// while their shares fit under its compute ceiling, and holds the
    /// job's processes to a GPU time quota: at least REQ when they have
    /// work, at most LIMIT (default 1). Without it, a job's earlier runs or
    /// the node's default count for placement, and no quota holds it.
    #[arg(long, value_name = "SHARE")]
    pub gpu_share: Option<String>,
    /// MIG profile of the isolated instance (e.g. 1g.5gb); implies --isolated.
    #[arg(long, value_name = "PROFILE")]
    pub mig: Option<String>,
    /// Slurm's GPU request: `gpu[:TYPE][:N]`, N isolated instances on the
    /// job's node (of that MIG profile or GPU model, if given); implies
    /// --isolated.
    #[arg(long, value_name = "gpu[:TYPE][:N]")]
    pub gres: Option<String>,
    /// Slurm's GPU count: `[TYPE:]N`, like --gres; implies --isolated.
    #[arg(short = 'G', long, value_name = "[TYPE:]N")]
    pub gpus: Option<String>,
    /// Job name (default: the script's file name).
    #[arg(short = 'J', long = "job-name")]
    pub job_name: Option<String>,
    /// Output file pattern (default slurm-%j.out).
    #[arg(short = 'o', long)]
    pub output: Option<String>,
    /// Error file pattern (default: the output file).
    #[arg(short = 'e', long)]
    pub error: Option<String>,
    /// Time limit: minutes, MM:SS, HH:MM:SS, D-HH[:MM[:SS]] or UNLIMITED.
    #[arg(short = 't', long)]
    pub time: Option<String>,
    /// Working directory of the job (default: the current directory).
    #[arg(short = 'D', long)]
    pub chdir: Option<String>,
    /// Put the job back in the queue if its node fails.
    #[arg(long)]
    pub requeue: bool,
    /// Do not requeue the job if its node fails. Without either option the
    /// controller's default holds (requeue, as Slurm's JobRequeue=1).
    #[arg(long, conflicts_with = "requeue")]
    pub no_requeue: bool,
    /// Print only the job id.
    #[arg(long)]
    pub parsable: bool,
    /// Partition.
    #[arg(short = 'p', long)]
    pub partition: Option<String>,
    /// Job array: indices `0-9`, `1,3,5`, `0-15:4`, with `%N` running at once.
    #[arg(short = 'a', long, value_name = "INDICES[%MAX]")]
    pub array: Option<String>,
    /// A command to run as the whole script (`#!/bin/sh` and CMD).
    #[arg(long, value_name = "CMD")]
    pub wrap: Option<String>,
    /// Account to charge (recorded).
    #[arg(short = 'A', long)]
    pub account: Option<String>,
    /// Quality of service (recorded).
    #[arg(long)]
    pub qos: Option<String>,
    /// Comment (recorded; shown by sacct).
    #[arg(long)]
    pub comment: Option<String>,
    /// Workload characterization key (recorded).
    #[arg(long)]
    pub wckey: Option<String>,
    /// Number of tasks: `srun`'s default count and SLURM_NTASKS.
    #[arg(short = 'n', long)]
    pub ntasks: Option<u32>,
    /// CPUs per task (SLURM_CPUS_PER_TASK).
    #[arg(short = 'c', long)]
    pub cpus_per_task: Option<u32>,
    /// `append` or `truncate` the output files.
    #[arg(long, value_parser = ["append", "truncate"])]
    pub open_mode: Option<String>,
    /// Signal SIG at SECS seconds before the time limit (`[B:]SIG[@SECS]`).
    #[arg(long, value_name = "[B:]SIG[@SECS]")]
    pub signal: Option<String>,
    /// Environment to pass: ALL (default), NONE, or a list of names and NAME=VALUE.
    #[arg(long)]
    pub export: Option<String>,
    /// Submit the job held: it waits for `scontrol release`.
    #[arg(short = 'H', long)]
    pub hold: bool,
    /// Do not exit until the job has ended (its processes gone); exit with
    /// its exit code (128 + a signal that ended it).
    #[arg(short = 'W', long)]
    pub wait: bool,
    /// Start no earlier than this time (`now+1hour`, `16:00`, `tomorrow`,
    /// `2026-12-24T08:00`, ...); pending with reason BeginTime until then.
    #[arg(short = 'b', long, value_name = "time")]
    pub begin: Option<String>,
    /// Lower the job's priority by N (100 if no N is given), under
    /// `--priority-type multifactor`; only administrators may give a
    /// negative N.
    #[arg(long, value_name = "N", num_args = 0..=1, default_missing_value = "100", allow_negative_numbers = true)]
    pub nice: Option<i64>,
    /// Clusters (only this one exists); `--parsable` then prints `ID;CLUSTER`.
    #[arg(short = 'M', long)]
    pub clusters: Option<String>,
    #[command(flatten)]
    pub recorded: RecordedOptions,
    /// The script (standard input if none) and its arguments.
    #[arg(trailing_var_arg = true, value_name = "SCRIPT [ARGS]")]
    pub script: Vec<String>,
}

/// Slurm options accepted and recorded as given (docs/slurm.md says what
/// gsched does with each).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct RecordedOptions {
    #[arg(short = 'C', long, hide = true)]
    pub constraint: Option<String>,
    #[arg(long, hide = true)]
    pub mem: Option<String>,
    #[arg(long, hide = true)]
    pub mem_per_cpu: Option<String>,
    #[arg(long, hide = true)]
    pub mem_per_gpu: Option<String>,
    #[arg(short = 'N', long, hide = true)]
    pub nodes: Option<String>,
    #[arg(long, hide = true)]
    pub ntasks_per_node: Option<String>,
    #[arg(long, hide = true)]
    pub ntasks_per_gpu: Option<String>,
    #[arg(long, hide = true)]
    pub cpus_per_gpu: Option<String>,
    #[arg(long, hide = true)]
    pub gpus_per_node: Option<String>,
    #[arg(long, hide = true)]
    pub gpus_per_task: Option<String>,
    #[arg(long, hide = true)]
    pub gpus_per_socket: Option<String>,
    #[arg(long, hide = true)]
    pub gpu_bind: Option<String>,
    #[arg(short = 'x', long, hide = true)]
    pub exclude: Option<String>,
    #[arg(short = 'w', long, hide = true)]
    pub nodelist: Option<String>,
    #[arg(long, hide = true, num_args = 0..=1, default_missing_value = "exclusive")]
    pub exclusive: Option<String>,
    #[arg(short = 'd', long, hide = true)]
    pub dependency: Option<String>,
    #[arg(long, hide = true)]
    pub reservation: Option<String>,
    #[arg(long, hide = true)]
    pub mail_type: Option<String>,
    #[arg(long, hide = true)]
    pub mail_user: Option<String>,
    /// At least this many CPUs on each of the job's nodes.
    #[arg(long, hide = true)]
    pub mincpus: Option<String>,
    /// At least this much temporary disk (`/tmp`) on each of its nodes.
    #[arg(long, hide = true)]
    pub tmp: Option<String>,
    /// `-O`: CPUs as if one task ran per node (tasks may outnumber them).
    #[arg(
        short = 'O',
        long,
        hide = true,
        num_args = 0,
        default_missing_value = "yes"
    )]
    pub overcommit: Option<String>,
    /// Refused with the reason (see `build_spec`).
    #[arg(long, hide = true)]
    pub tres_bind: Option<String>,
}

impl RecordedOptions {
    fn over(self, under: RecordedOptions) -> RecordedOptions {
        macro_rules! pick {
            ($($f:ident),*) => { RecordedOptions { $($f: self.$f.or(under.$f)),* } };
        }
        pick!(
            constraint,
            mem,
            mem_per_cpu,
            mem_per_gpu,
            nodes,
            ntasks_per_node,
            ntasks_per_gpu,
            cpus_per_gpu,
            gpus_per_node,
            gpus_per_task,
            gpus_per_socket,
            gpu_bind,
            exclude,
            nodelist,
            exclusive,
            dependency,
            reservation,
            mail_type,
            mail_user,
            mincpus,
            tmp,
            overcommit,
            tres_bind
        )
    }

    /// The options given, by their long names (GPUs per node or per task
    /// also become the job's GPU request; kept for `srun`'s split).
    fn given(&self) -> BTreeMap<String, String> {
        let mut m = BTreeMap::new();
        macro_rules! put {
            ($($f:ident => $n:literal),*) => { $( if let Some(v) = &self.$f { m.insert($n.to_string(), v.clone()); } )* };
        }
        put!(
            constraint => "constraint",
            mem => "mem",
            mem_per_cpu => "mem-per-cpu",
            mem_per_gpu => "mem-per-gpu",
            nodes => "nodes",
            ntasks_per_node => "ntasks-per-node",
            ntasks_per_gpu => "ntasks-per-gpu",
            cpus_per_gpu => "cpus-per-gpu",
            gpus_per_node => "gpus-per-node",
            gpus_per_task => "gpus-per-task",
            gpus_per_socket => "gpus-per-socket",
            gpu_bind => "gpu-bind",
            exclude => "exclude",
            nodelist => "nodelist",
            exclusive => "exclusive",
            dependency => "dependency",
            reservation => "reservation",
            mail_type => "mail-type",
            mail_user => "mail-user",
            mincpus => "mincpus",
            tmp => "tmp",
            overcommit => "overcommit"
        );
        m
    }
}

impl SubmitOptions {
    /// These options, with `under` filling in what these leave unset
    /// (command line over directives).
    pub fn over(self, under: SubmitOptions) -> SubmitOptions {
        SubmitOptions {
            isolated: self.isolated || under.isolated,
            gpu_mem: self.gpu_mem.or(under.gpu_mem),
            gpu_share: self.gpu_share.or(under.gpu_share),
            mig: self.mig.or(under.mig),
            gres: self.gres.or(under.gres),
            gpus: self.gpus.or(under.gpus),
            job_name: self.job_name.or(under.job_name),
            output: self.output.or(under.output),
            error: self.error.or(under.error),
            time: self.time.or(under.time),
            chdir: self.chdir.or(under.chdir),
            requeue: !self.no_requeue && (self.requeue || under.requeue),
            no_requeue: self.no_requeue || (under.no_requeue && !self.requeue),
            parsable: self.parsable || under.parsable,
            partition: self.partition.or(under.partition),
            array: self.array.or(under.array),
            wrap: self.wrap.or(under.wrap),
            account: self.account.or(under.account),
            qos: self.qos.or(under.qos),
            comment: self.comment.or(under.comment),
            wckey: self.wckey.or(under.wckey),
            ntasks: self.ntasks.or(under.ntasks),
            cpus_per_task: self.cpus_per_task.or(under.cpus_per_task),
            open_mode: self.open_mode.or(under.open_mode),
            signal: self.signal.or(under.signal),
            export: self.export.or(under.export),
            clusters: self.clusters.or(under.clusters),
            hold: self.hold || under.hold,
            wait: self.wait || under.wait,
            begin: self.begin.or(under.begin),
            nice: self.nice.or(under.nice),
            recorded: self.recorded.over(under.recorded),
            script: self.script,
        }
    }
}

/// Reads the options in a script's directives.
pub fn directive_options(script: &str) -> Result<SubmitOptions> {
    let mut all = SubmitOptions::default();
    for (line, words) in directives::extract(script)? {
        let parsed =
            SubmitOptions::try_parse_from(std::iter::once("gsub".to_string()).chain(words))
                .map_err(|e| anyhow::anyhow!("script line {line}: {}", clap_message(&e)))?;
        if !parsed.script.is_empty() {
            bail!(
                "script line {line}: unexpected argument '{}' in a directive",
                parsed.script[0]
            );
        }
        // Later directives win over earlier ones.
        all = parsed.over(all);
    }
    Ok(all)
}

/// The first line of a clap error, without its "error: " prefix.
pub fn clap_message(e: &clap::Error) -> String {
    let text = e.to_string();
    let first = text.lines().next().unwrap_or("").trim();
    first.strip_prefix("error: ").unwrap_or(first).to_string()
}

/// Reads a Slurm GPU request (`--gres=gpu[:TYPE][:N]` or
/// `--gpus=[TYPE:]N`): the type it names, if any (a MIG profile, or a GPU
/// model such as `h100`), and the count N (1 when not given).
pub fn parse_gpu_request(option: &str, value: &str) -> Result<(Option<String>, u32)> {
    let rest = if option == "--gres" {
        let mut parts = value.splitn(2, ':');
        let kind = parts.next().unwrap_or("");
        if kind != "gpu" {
            bail!("--gres={value}: gsched knows only the gpu resource (e.g. --gres=gpu:1g.5gb:1)");
        }
        parts.next().unwrap_or("")
    } else {
        value
    };
    let fields: Vec<&str> = if rest.is_empty() {
        Vec::new()
    } else {
        rest.split(':').collect()
    };
    let (profile, count) = match fields.as_slice() {
        [] => (None, "1"),
        [one] if one.bytes().all(|b| b.is_ascii_digit()) => (None, *one),
        [one] => (Some(*one), "1"),
        [p, n] => (Some(*p), *n),
        _ => bail!(
            "{option}={value}: expected {}",
            if option == "--gres" {
                "gpu[:TYPE][:N]"
            } else {
                "[TYPE:]N"
            }
        ),
    };
    let count = match count.parse::<u32>() {
        Ok(0) => {
            bail!("{option}={value}: a GPU request of 0 is not a GPU request; leave the option out")
        }
        Ok(n) => n,
        Err(_) => bail!("{option}={value}: '{count}' is not a GPU count"),
    };
    if let Some(p) = profile {
        if !gsched_core::gpu::is_profile_name(p) && !gsched_core::gpu::is_gpu_type(p) {
            bail!("{option}={value}: '{p}' is not a MIG profile (e.g. 1g.5gb, 3g.40gb) or a GPU model (e.g. h100, a100-80gb)");
        }
    }
    Ok((profile.map(str::to_string), count))
}

/// What --mig, --gres, --gpus, --gpus-per-node and --gpus-per-task ask
/// for together: the GPU type (MIG profile or model), which must agree,
/// and how many instances for the job (per task: times its tasks), which
/// must agree too. `None` when no GPU is asked for.
fn requested_gpus(opts: &SubmitOptions) -> Result<Option<(Option<String>, u32)>> {
    let mut kind: Option<(String, String)> = opts.mig.clone().map(|p| ("--mig".into(), p));
    let mut count: Option<(&str, u32)> = None;
    let tasks = gsched_core::allocation::tasks_on_node(&gsched_core::job::SlurmOptions {
        ntasks: opts.ntasks,
        other: opts
            .recorded
            .ntasks_per_node
            .iter()
            .map(|n| ("ntasks-per-node".to_string(), n.clone()))
            .collect(),
        ..Default::default()
    });
    for (opt, val) in [
        ("--gres", &opts.gres),
        ("--gpus", &opts.gpus),
        ("--gpus-per-node", &opts.recorded.gpus_per_node),
        ("--gpus-per-task", &opts.recorded.gpus_per_task),
    ] {
        let Some(v) = val else { continue };
        let (p, mut n) = parse_gpu_request(opt, v)?;
        if opt == "--gpus-per-task" {
            n = n.saturating_mul(tasks);
        }
        match count {
            Some((o, m)) if m != n => {
                bail!("{o} asks for {m} GPU instances but {opt}={v} for {n}; give one count")
            }
            _ => count = Some((opt, n)),
        }
        if let Some(p) = p {
            match &kind {
                Some((o, q)) if !q.eq_ignore_ascii_case(&p) => {
                    bail!("{o} asks for {q} but {opt} for {p}; give one GPU type")
                }
                _ => kind = Some((opt.into(), p)),
            }
        }
    }
    let kind = kind.map(|(_, p)| p);
    Ok(match count {
        Some((_, n)) => Some((kind, n)),
        None => kind.map(|k| (Some(k), 1)),
    })
}

/// Builds the job spec from merged options.
pub fn build_spec(
    opts: &SubmitOptions,
    script: String,
    default_name: &str,
    cwd: &std::path::Path,
) -> Result<JobSpec> {
    if let Some(b) = &opts.recorded.tres_bind {
        bail!(
            "--tres-bind={b}: gsched decides which GPU or MIG instance each task runs in (a shared job's tasks are packed by their measured footprint); binding tasks to GPUs by map or mask is not supported (docs/slurm.md)"
        );
    }
    // The footprint hint: --gpu-mem, or Slurm's --mem-per-gpu.
    let mem = match opts.gpu_mem.as_ref().or(opts.recorded.mem_per_gpu.as_ref()) {
        Some(m) => Some(parse_mem_mib(m)?),
        None => None,
    };
    let quota = match &opts.gpu_share {
        Some(s) => Some(gsched_core::time_quota::TimeQuota::parse(s).context("--gpu-share")?),
        None => None,
    };
    let share = quota.map(|q| q.request);
    let share_limit = quota.map(|q| q.limit);
    for (name, value) in [
        ("--mem", &opts.recorded.mem),
        ("--mem-per-cpu", &opts.recorded.mem_per_cpu),
    ] {
        if let Some(v) = value {
            parse_mem_mib(v).with_context(|| format!("{name}={v}"))?;
        }
    }
    let array = match &opts.array {
        Some(a) => Some(gsched_core::array::ArrayRequest::parse(a)?),
        None => None,
    };
    if let Some(sig) = &opts.signal {
        gsched_core::job::WarnSignal::parse(sig)?;
    }
    let environment = exported_environment(opts.export.as_deref())?;
    let dependency = match &opts.recorded.dependency {
        Some(d) => Some(gsched_core::dependency::Dependency::parse(d)?),
        None => None,
    };
    let time_limit = match &opts.time {
        Some(t) => parse_time_limit(t)?,
        None => None,
    };
    let working_dir = match &opts.chdir {
        Some(d) if d.starts_with('/') => d.clone(),
        Some(d) => cwd.join(d).display().to_string(),
        None => cwd.display().to_string(),
    };
    let (user_name, uid, gid) = current_user();
    if let Some(m) = opts
        .mig
        .as_deref()
        .filter(|m| !gsched_core::gpu::is_profile_name(m))
    {
        bail!("--mig={m}: not a MIG profile name (e.g. 1g.5gb, 3g.40gb)");
    }
    // The type asked for (a MIG profile, or a GPU model) and how many.
    let requested = requested_gpus(opts)?;
    if let (Some(g), Some(n)) = (&opts.gpus, &opts.recorded.nodes) {
        // Slurm's --gpus counts the whole job's; gsched gives each node of
        // a job on several the same GPUs, so it asks per node.
        if n.split('-')
            .next()
            .and_then(|m| m.trim().parse::<u32>().ok())
            .is_some_and(|m| m > 1)
        {
            bail!(
                "--gpus={g} with --nodes={n}: gsched gives a job on several nodes the same GPUs on each; ask for them per node (--gpus-per-node or --gres=gpu:N)"
            );
        }
    }
    let (profile, model) = match requested.as_ref().and_then(|r| r.0.clone()) {
        Some(t) if gsched_core::gpu::is_profile_name(&t) => (Some(t), None),
        Some(t) => (None, Some(t.to_ascii_lowercase())),
        None => (None, None),
    };
    let count = requested.as_ref().map(|r| r.1).filter(|n| *n != 1);
    let wants_gpu = requested.is_some();
    Ok(JobSpec {
        name: opts
            .job_name
            .clone()
            .unwrap_or_else(|| default_name.to_string()),
        script,
        argv: opts.script.iter().skip(1).cloned().collect(),
        environment,
        working_dir,
        user_name,
        uid,
        gid,
        submit_host: hostname(),
        isolated: opts.isolated || profile.is_some() || wants_gpu,
        gpu: GpuRequest {
            model,
            mig_profile: profile,
            mem_mib: mem,
            share,
            share_limit,
            count,
        },
        time_limit,
        stdout: opts.output.clone(),
        stderr: opts.error.clone(),
        // Neither: the controller's default (Slurm's JobRequeue).
        requeue: match (opts.requeue, opts.no_requeue) {
            (true, _) => Some(true),
            (_, true) => Some(false),
            _ => None,
        },
        partition: opts.partition.clone(),
        array,
        dependency,
        hold: opts.hold,
        begin: match &opts.begin {
            Some(b) => {
                Some(crate::when::parse(b, crate::slurm::format::unix_now()).context("--begin")?)
            }
            None => None,
        },
        nice: opts.nice.unwrap_or(0),
        umask: Some(current_umask()),
        rlimits: current_limits(),
        idempotency_key: Some(submission_key()),
        slurm: SlurmOptions {
            // Slurm keeps account names in lower case.
            account: opts.account.as_ref().map(|a| a.to_lowercase()),
            qos: opts.qos.clone(),
            comment: opts.comment.clone(),
            wckey: opts.wckey.clone(),
            ntasks: opts.ntasks,
            cpus_per_task: opts.cpus_per_task,
            open_mode: opts.open_mode.clone(),
            signal: opts.signal.clone(),
            command: None,
            other: opts.recorded.given(),
        },
        ..JobSpec::default()
    })
}

/// A fresh random key for one submission, so that retrying it after a
/// lost answer cannot make a second job.
pub fn submission_key() -> String {
    let mut bytes = [0u8; 16];
    if getrandom::getrandom(&mut bytes).is_err() {
        // No randomness: pid and time still tell this submission apart.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        return format!("{}-{t}", std::process::id());
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// This process's resource limits, which the job's processes get (under
/// the node's hard limits), as Slurm's PropagateResourceLimits carries
/// them.
pub fn current_limits() -> gsched_core::rlimits::ResourceLimits {
    let of = |v: libc::rlim_t| (v != libc::RLIM_INFINITY).then_some(v);
    let mut out = gsched_core::rlimits::ResourceLimits::new();
    for (name, resource) in gsched_core::rlimits::LIMITS {
        let mut l = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes into the struct it is given.
        if unsafe { libc::getrlimit(resource as libc::__rlimit_resource_t, &mut l) } == 0 {
            out.insert(
                name.to_string(),
                gsched_core::rlimits::Limit {
                    soft: of(l.rlim_cur),
                    hard: of(l.rlim_max),
                },
            );
        }
    }
    out
}

/// This process's umask, which the job's files are created with (as
/// sbatch passes `SLURM_UMASK`): read from /proc, where reading it does not
/// change it.
pub fn current_umask() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let line = s.lines().find_map(|l| l.strip_prefix("Umask:"))?;
            u32::from_str_radix(line.trim(), 8).ok()
        })
        .unwrap_or_else(|| {
            // SAFETY: umask cannot fail; the old mask is put back at once
            // (the commands are single-threaded).
            let old = unsafe { libc::umask(0o022) };
            unsafe { libc::umask(old) };
            old as u32
        })
}

/// The environment a job starts with under `--export`: ALL (default),
/// NONE, or a comma list of names (taken from here) and NAME=VALUE pairs,
/// with ALL in the list adding everything else.
pub fn exported_environment(export: Option<&str>) -> Result<BTreeMap<String, String>> {
    let here: BTreeMap<String, String> = std::env::vars().collect();
    let Some(list) = export else {
        return Ok(here);
    };
    let mut env = BTreeMap::new();
    for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        match item {
            "ALL" => env.extend(here.clone()),
            "NONE" | "NIL" => {}
            _ => match item.split_once('=') {
                Some((k, v)) if !k.is_empty() => {
                    env.insert(k.to_string(), v.to_string());
                }
                Some(_) => bail!("--export={list}: '{item}' has no variable name"),
                None => {
                    if let Some(v) = here.get(item) {
                        env.insert(item.to_string(), v.clone());
                    }
                }
            },
        }
    }
    Ok(env)
}

/// `gsub` with the given arguments (without the program name).
pub fn main_with(args: Vec<String>) -> Result<()> {
    match submit_main("gsub", args, SubmitOptions::default())? {
        0 => Ok(()),
        // `-W`: the job's exit code is gsub's.
        code => std::process::exit(code),
    }
}

/// The body of a script given with `--wrap` (as sbatch writes it).
pub fn wrap_script(cmd: &str) -> String {
    format!("#!/bin/sh\n# This script was created by sbatch --wrap.\n\n{cmd}\n")
}

/// `gsub` or `sbatch` (`prog`): parse, read the script, submit, print the
/// id. `environment`: the options Slurm's input variables give (sbatch's
/// `SBATCH_*`), below the command line and above the script's directives.
pub fn submit_main(prog: &str, args: Vec<String>, environment: SubmitOptions) -> Result<i32> {
    let cli = match SubmitOptions::try_parse_from(std::iter::once(prog.to_string()).chain(args)) {
        Ok(c) => c,
        Err(e)
            if matches!(
                e.kind(),
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion
            ) =>
        {
            e.exit()
        }
        Err(e) => bail!("{}", clap_message(&e)),
    };
    let (script, default_name) = match (&cli.wrap, cli.script.first()) {
        (Some(_), Some(arg)) => {
            bail!("script arguments are not permitted with the --wrap option (got '{arg}')")
        }
        (Some(cmd), None) => (wrap_script(cmd).into_bytes(), "wrap".to_string()),
        (None, Some(path)) if path != "-" && path != "/dev/stdin" => {
            let text =
                std::fs::read(path).with_context(|| format!("cannot read batch script {path}"))?;
            let name = std::path::Path::new(path)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| path.clone());
            (text, name)
        }
        (None, _) => {
            let mut text = Vec::new();
            std::io::stdin()
                .read_to_end(&mut text)
                .context("cannot read the batch script from standard input")?;
            (text, "sbatch".to_string())
        }
    };
    let script = String::from_utf8(script).context("the batch script is not valid UTF-8")?;
    let cwd = std::env::current_dir().context("cannot determine the current directory")?;
    let command = match &cli.wrap {
        Some(_) => None,
        None => cli
            .script
            .first()
            .map(|p| cwd.join(p).display().to_string()),
    };
    // Slurm's order: the command line, then SBATCH_* variables, then the
    // script's directives.
    let opts = cli.over(environment.over(directive_options(&script)?));
    let mut spec = build_spec(&opts, script, &default_name, &cwd)?;
    spec.slurm.command = command;
    let client = Client::from_env();
    if let Some(a) = &opts.array {
        // The controller's MaxArraySize: an array past it is refused here
        // in its words, not as a request too large to send.
        let max = client
            .health()
            .ok()
            .and_then(|h| h["max_array_size"].as_u64())
            .and_then(|m| u32::try_from(m).ok())
            .unwrap_or(gsched_core::array::DEFAULT_MAX_ARRAY_SIZE);
        gsched_core::array::ArrayRequest::parse_within(a, max)?;
    }
    let id = client.submit(&spec)?;
    match (opts.parsable, &opts.clusters) {
        (true, Some(c)) => println!("{id};{c}"),
        (true, None) => println!("{id}"),
        (false, _) => println!("Submitted batch job {id}"),
    }
    if !opts.wait {
        return Ok(0);
    }
    use std::io::Write;
    let _ = std::io::stdout().flush();
    // `-W`: until the job (every task of an array) has ended and its
    // processes are gone; the highest status, as Slurm's.
    let mut query = vec![
        ("state", "all".to_string()),
        ("history", "true".to_string()),
    ];
    if spec.array.is_some() {
        query.push(("array", id.to_string()));
    } else {
        query.push(("id", id.to_string()));
    }
    loop {
        let jobs = client.jobs(&query)?;
        if jobs.is_empty() {
            bail!("job {id} is no longer known to the controller");
        }
        if jobs.iter().all(|j| j.job_state.is_final() && !j.completing) {
            return Ok(jobs
                .iter()
                .map(crate::slurm::srun::exit_status)
                .max()
                .unwrap_or(0));
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> SubmitOptions {
        SubmitOptions::try_parse_from(std::iter::once("gsub").chain(args.iter().copied())).unwrap()
    }

    #[test]
    fn command_line_wins_over_directives() {
        let script = "#!/bin/sh\n#SBATCH -J fromscript -o d.out\n#SBATCH --time=5 --requeue\n#GSCHED --gpu-mem 4G\ntrue\n";
        let d = directive_options(script).unwrap();
        assert_eq!(d.job_name.as_deref(), Some("fromscript"));
        let merged = parse(&["-J", "cli", "--no-requeue", "s.sh", "-J", "arg"]).over(d);
        assert_eq!(merged.job_name.as_deref(), Some("cli"));
        assert_eq!(merged.output.as_deref(), Some("d.out"));
        assert_eq!(merged.time.as_deref(), Some("5"));
        assert_eq!(merged.gpu_mem.as_deref(), Some("4G"));
        assert!(!merged.requeue);
        assert_eq!(merged.script, vec!["s.sh", "-J", "arg"]);
    }

    #[test]
    fn bad_directives_name_the_line() {
        let e = directive_options("#!/bin/sh\n#SBATCH --bogus\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "script line 2: unexpected argument '--bogus' found"
        );
        let e = directive_options("#!/bin/sh\n\n#SBATCH -J\n").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("script line 3: a value is required"),
            "{e}"
        );
        let e = directive_options("#!/bin/sh\n#SBATCH stray\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "script line 2: unexpected argument 'stray' in a directive"
        );
    }

    #[test]
    fn spec_from_options() {
        let o = parse(&[
            "--mig",
            "1g.5gb",
            "-t",
            "1:30",
            "-D",
            "sub",
            "--gpu-mem",
            "2G",
            "x.sh",
            "a1",
        ]);
        let s = build_spec(
            &o,
            "#!/bin/sh\n".into(),
            "x.sh",
            std::path::Path::new("/home/u"),
        )
        .unwrap();
        assert!(s.isolated);
        assert_eq!(s.gpu.mig_profile.as_deref(), Some("1g.5gb"));
        assert!(s.isolated);
        assert_eq!(s.gpu.mem_mib, Some(2048));
        assert_eq!(s.time_limit, Some(90));
        assert_eq!(s.working_dir, "/home/u/sub");
        assert_eq!(s.argv, vec!["a1"]);
        assert_eq!(s.name, "x.sh");
        let bad = parse(&["-t", "soon"]);
        let e = build_spec(&bad, String::new(), "n", std::path::Path::new("/")).unwrap_err();
        assert!(
            e.to_string().starts_with("invalid time limit 'soon'"),
            "{e}"
        );
    }

    #[test]
    fn slurm_gpu_requests() {
        let read = |o: &str, v: &str| parse_gpu_request(o, v).unwrap();
        let typed = |t: &str, n: u32| (Some(t.to_string()), n);
        assert_eq!(read("--gres", "gpu:1g.5gb:1"), typed("1g.5gb", 1));
        assert_eq!(read("--gres", "gpu:3g.40gb"), typed("3g.40gb", 1));
        assert_eq!(read("--gres", "gpu:1"), (None, 1));
        assert_eq!(read("--gres", "gpu"), (None, 1));
        assert_eq!(read("--gres", "gpu:2"), (None, 2));
        assert_eq!(read("--gres", "gpu:h100:4"), typed("h100", 4));
        assert_eq!(read("--gpus", "2g.10gb:1"), typed("2g.10gb", 1));
        assert_eq!(read("--gpus", "1"), (None, 1));
        assert_eq!(read("--gpus", "3"), (None, 3));
        let e = parse_gpu_request("--gres", "gpu:0")
            .unwrap_err()
            .to_string();
        assert!(e.contains("of 0"), "{e}");
        let e = parse_gpu_request("--gres", "nic:1")
            .unwrap_err()
            .to_string();
        assert!(e.contains("only the gpu resource"), "{e}");
        // A model name is a type too; something that is neither is not.
        assert_eq!(read("--gpus", "a100:1"), typed("a100", 1));
        let e = parse_gpu_request("--gpus", "a/100:1")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("not a MIG profile") && e.contains("GPU model"),
            "{e}"
        );
        assert!(parse_gpu_request("--gres", "gpu:1g.5gb:x").is_err());
        assert!(parse_gpu_request("--gres", "gpu:a:b:c").is_err());

        let opts = |args: &[&str]| {
            SubmitOptions::try_parse_from(std::iter::once("gsub").chain(args.iter().copied()))
                .unwrap()
        };
        let cwd = std::path::Path::new("/tmp");
        let s = build_spec(
            &opts(&["--gres=gpu:1g.5gb:1", "x.sh"]),
            "true".into(),
            "x",
            cwd,
        )
        .unwrap();
        assert!(s.isolated);
        assert_eq!(s.gpu.mig_profile.as_deref(), Some("1g.5gb"));
        let s = build_spec(&opts(&["--gpus=1", "x.sh"]), "true".into(), "x", cwd).unwrap();
        assert!(s.isolated && s.gpu.mig_profile.is_none());
        let s = build_spec(
            &opts(&["--gres=gpu:H100:1", "x.sh"]),
            "true".into(),
            "x",
            cwd,
        )
        .unwrap();
        assert!(s.isolated && s.gpu.mig_profile.is_none());
        assert_eq!(s.gpu.model.as_deref(), Some("h100"));
        let e = build_spec(
            &opts(&["--mig", "1g.5gb", "--gres=gpu:2g.10gb:1", "x.sh"]),
            "true".into(),
            "x",
            cwd,
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            e,
            "--mig asks for 1g.5gb but --gres for 2g.10gb; give one GPU type"
        );
        // Several: per node, per task times the tasks; counts must agree.
        let spec = |args: &[&str]| build_spec(&opts(args), "true".into(), "x", cwd);
        let s = spec(&["--gres=gpu:2", "x.sh"]).unwrap();
        assert!(s.isolated && s.gpu.count == Some(2));
        let s = spec(&["--gpus-per-node=2", "x.sh"]).unwrap();
        assert_eq!(s.gpu.count, Some(2));
        let s = spec(&["--gpus-per-task=1", "-n", "4", "x.sh"]).unwrap();
        assert_eq!(s.gpu.count, Some(4));
        let s = spec(&["--gpus-per-task=2", "--ntasks-per-node=2", "x.sh"]).unwrap();
        assert_eq!(s.gpu.count, Some(4));
        let e = spec(&["--gres=gpu:2", "--gpus-per-task=1", "-n", "3", "x.sh"])
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "--gres asks for 2 GPU instances but --gpus-per-task=1 for 3; give one count"
        );
    }
}
