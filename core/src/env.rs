//! The environment a job starts with: the submitter's, plus `SLURM_*` and
//! `GSCHED_*` variables describing the job and its placement.

use std::collections::BTreeMap;

use crate::gpu::Instance;
use crate::job::Job;
use crate::probe::TASK_SHARE_ENV;

/// What earlier runs of the same job tell about a new one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Learned {
    /// The largest GPU memory peak of the latest [`crate::cluster::PEAK_WINDOW`] earlier
    /// runs, MiB.
    pub mib: Option<u64>,
    /// The GPU share of the latest earlier run that measured one.
    pub share: Option<u32>,
    /// The longest run time of the latest [`crate::cluster::PEAK_WINDOW`] earlier runs
    /// that have one, seconds: when a running job is expected to end.
    pub runtime_secs: Option<i64>,
}

/// Where the job runs, for the environment.
#[derive(Debug, Clone)]
pub struct Placement<'a> {
    pub node: &'a str,
    pub cluster: &'a str,
    pub partition: &'a str,
    /// The instances an isolated job holds, in its device order.
    pub instances: &'a [Instance],
    /// Controller URL, so tools inside the job can reach it.
    pub controller_url: &'a str,
}

/// Variables from the submitter that must not leak into the job: placement
/// is gsched's to decide.
const SCRUBBED: &[&str] = &[
    "CUDA_VISIBLE_DEVICES",
    "GPU_DEVICE_ORDINAL",
    "CUDA_MPS_PIPE_DIRECTORY",
    "CUDA_MPS_LOG_DIRECTORY",
];

/// Builds the job's environment.
/// The variable holding a token for the TCP API: set in every job, read by
/// gsched's commands (which also read Slurm's SLURM_JWT).
pub const TOKEN_ENV: &str = "GSCHED_TOKEN";
/// CA certificates (PEM) clients check an `https://` controller against.
pub const TLS_CA_ENV: &str = "GSCHED_TLS_CA";
/// A controller socket to use for a loopback `GSCHED_URL` (checked like
/// the rendezvous before use).
pub const SOCKET_ENV: &str = "GSCHED_SOCKET";
/// Where a controller running as root publishes its local socket for the
/// commands on its host (a directory only root can write).
pub const SYSTEM_RUN_DIR: &str = "/run/gsched";

/// The socket a controller listening on TCP `port` publishes in `run_dir`
/// (the system's, or a user's runtime directory), so a command given a
/// loopback URL finds it without asking the port, which any local user
/// could be holding while the controller restarts.
pub fn rendezvous_socket(run_dir: &std::path::Path, port: u16) -> std::path::PathBuf {
    run_dir.join(format!("ctld.{port}.sock"))
}

/// The submitter's `SLURM_*` variables a job keeps, as Slurm passes them
/// on: the commands' input variables that no job sets, so none of them
/// can describe another job (an enclosing job's `SLURM_NTASKS` or
/// `SLURM_ARRAY_TASK_ID` could, and is left out with every other).
pub const KEPT_SLURM_INPUTS: &[&str] = &[
    "SLURM_ACCOUNT",
    "SLURM_DEBUG",
    "SLURM_EXPORT_ENV",
    "SLURM_LABELIO",
    "SLURM_OVERCOMMIT",
    "SLURM_PARTITION",
    "SLURM_QOS",
    "SLURM_STDERRMODE",
    "SLURM_STDOUTMODE",
    "SLURM_TIMELIMIT",
    "SLURM_UNBUFFEREDIO",
    "SLURM_WORKING_DIR",
];

pub fn job_environment(job: &Job, at: &Placement<'_>) -> BTreeMap<String, String> {
    let spec = &job.spec;
    let mut env: BTreeMap<String, String> = spec
        .environment
        .iter()
        .filter(|(k, _)| {
            let slurm = k.starts_with("SLURM_") && !KEPT_SLURM_INPUTS.contains(&k.as_str());
            !slurm && !k.starts_with("GSCHED_") && !SCRUBBED.contains(&k.as_str())
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let id = job.id.to_string();
    let mut set = |k: &str, v: &str| {
        env.insert(k.to_string(), v.to_string());
    };
    set("SLURM_JOB_ID", &id);
    set("SLURM_JOBID", &id);
    set("SLURM_JOB_NAME", &spec.name);
    set("SLURM_JOB_USER", &spec.user_name);
    set("SLURM_JOB_UID", &spec.uid.to_string());
    set("SLURM_JOB_GID", &spec.gid.to_string());
    // The job's nodes (one before it has started, in tests) and this
    // node's place among them.
    let nodes: Vec<&str> = match job.nodes() {
        n if n.is_empty() => vec![at.node],
        n => n,
    };
    let width = nodes.len() as u32;
    let node_id = nodes.iter().position(|n| *n == at.node).unwrap_or(0);
    let spread = if width > 1 {
        crate::allocation::tasks_per_node(&spec.slurm, width)
    } else {
        vec![crate::allocation::tasks_on_node(&spec.slurm)]
    };
    // As Slurm: only when tasks were asked for (-n, --ntasks-per-node).
    let per_node = spec.slurm.other.get("ntasks-per-node");
    if spec.slurm.ntasks.is_some() || per_node.is_some() {
        let ntasks = spread.iter().sum::<u32>().to_string();
        set("SLURM_NTASKS", &ntasks);
        set("SLURM_NPROCS", &ntasks);
        set("SLURM_TASKS_PER_NODE", &repeated(&spread));
    }
    if let Some(n) = per_node {
        set("SLURM_NTASKS_PER_NODE", n);
    }
    if let Ok(r) = crate::resources::JobResources::of(&spec.slurm) {
        set("SLURM_CPUS_ON_NODE", &r.cpus.to_string());
        set(
            "SLURM_JOB_CPUS_PER_NODE",
            &repeated(&vec![r.cpus; width as usize]),
        );
    }
    match spec.slurm.open_mode.as_deref() {
        Some("append") => set("SLURM_OPEN_MODE", "a"),
        Some("truncate") => set("SLURM_OPEN_MODE", "t"),
        _ => {}
    }
    if let Some(c) = spec.slurm.cpus_per_task {
        set("SLURM_CPUS_PER_TASK", &c.to_string());
    }
    if let Some(t) = &spec.array_task {
        set("SLURM_ARRAY_JOB_ID", &t.array_job_id.to_string());
        set("SLURM_ARRAY_TASK_ID", &t.task_id.to_string());
        set("SLURM_ARRAY_TASK_MIN", &t.min.to_string());
        set("SLURM_ARRAY_TASK_MAX", &t.max.to_string());
        set("SLURM_ARRAY_TASK_STEP", &t.step.to_string());
        set("SLURM_ARRAY_TASK_COUNT", &t.count.to_string());
    }
    set("SLURM_PROCID", "0");
    set("SLURM_LOCALID", "0");
    set("SLURM_NODEID", &node_id.to_string());
    set("SLURM_JOB_NUM_NODES", &width.to_string());
    set("SLURM_NNODES", &width.to_string());
    let list = crate::hostlist::compress(&nodes);
    set("SLURM_JOB_NODELIST", &list);
    set("SLURM_NODELIST", &list);
    set("SLURMD_NODENAME", at.node);
    // No network topology is configured: Slurm's values for that case.
    set("SLURM_TOPOLOGY_ADDR", at.node);
    set("SLURM_TOPOLOGY_ADDR_PATTERN", "node");
    set("SLURM_SUBMIT_DIR", &spec.working_dir);
    set("SLURM_SUBMIT_HOST", &spec.submit_host);
    set("SLURM_CLUSTER_NAME", at.cluster);
    set("SLURM_JOB_PARTITION", at.partition);
    set("SLURM_RESTART_COUNT", &job.restarts.to_string());
    let umask = spec.umask.unwrap_or(crate::job::DEFAULT_UMASK);
    set("SLURM_UMASK", &format!("{umask:04o}"));
    if let Some(limit) = spec.time_limit {
        set("SLURM_JOB_TIME_LIMIT", &limit.div_ceil(60).to_string());
    }
    set("GSCHED_JOB_ID", &id);
    // Which run (launch) of the job this is: 1 for the first.
    set("GSCHED_JOB_RUN", &job.run.to_string());
    set("GSCHED_URL", at.controller_url);
    set("GSCHED_ISOLATED", if spec.isolated { "1" } else { "0" });
    add_devices(&mut env, job, at.instances);
    env
}

/// The command line that runs a task's `argv` with `SLURM_TASK_PID` set
/// to the task's own process id, as Slurm sets it: a shell sets it from
/// `$$` and replaces itself with the command (the same process, so the
/// same id). The command is found with the task's `PATH`, as it would be
/// without the shell.
pub fn with_task_pid(argv: &[String]) -> Vec<String> {
    let mut v: Vec<String> = vec![
        "/bin/sh".into(),
        "-c".into(),
        r#"SLURM_TASK_PID=$$; export SLURM_TASK_PID; exec "$0" "$@""#.into(),
    ];
    v.extend(argv.iter().cloned());
    v
}

/// The variable naming a step's task prolog for [`with_task_prolog`]
/// (`srun --task-prolog`).
pub const TASK_PROLOG_VAR: &str = "GSCHED_TASK_PROLOG";

/// Seconds a task epilog may run before it is killed (Slurm's too).
pub const TASK_EPILOG_SECS: u64 = 5;

/// As [`with_task_pid`], with the task's prolog (named by
/// [`TASK_PROLOG_VAR`]) run first, as Slurm runs it: in the task's process
/// and environment, without its input, its output read line by line
/// (`export NAME=VALUE` and `unset NAME` change the task's environment,
/// `print TEXT` writes TEXT to the task's output; anything else, and an
/// `export` or `unset` that does not read, is ignored); a prolog that
/// fails ends the task with status 1. Then the
/// shell replaces itself with the command, as without a prolog: the task
/// is the command's process, its status the command's.
pub fn with_task_prolog(argv: &[String]) -> Vec<String> {
    let script = format!(
        r#"SLURM_TASK_PID=$$; export SLURM_TASK_PID
gsched_prolog_out=$("${prolog}" < /dev/null) || exit 1
while IFS= read -r gsched_line; do
  case $gsched_line in
    "export "*) command export "${{gsched_line#export }}" 2> /dev/null || : ;;
    "unset "*) command unset "${{gsched_line#unset }}" 2> /dev/null || : ;;
    "print "*) printf '%s\n' "${{gsched_line#print }}" ;;
  esac
done <<GSCHED_PROLOG_END
$gsched_prolog_out
GSCHED_PROLOG_END
unset gsched_prolog_out gsched_line {prolog}
exec "$0" "$@""#,
        prolog = TASK_PROLOG_VAR,
    );
    let mut v: Vec<String> = vec!["/bin/sh".into(), "-c".into(), script];
    v.extend(argv.iter().cloned());
    v
}

/// Whether `program` would be found: as given where it names a path (a
/// `/` in it), else in one of `path`'s directories; `exists` says whether
/// a file is there.
pub fn finds_program(program: &str, path: &str, exists: impl Fn(&std::path::Path) -> bool) -> bool {
    if program.contains('/') {
        return exists(std::path::Path::new(program));
    }
    !program.is_empty()
        && path
            .split(':')
            .map(|d| if d.is_empty() { "." } else { d })
            .any(|d| exists(&std::path::Path::new(d).join(program)))
}

/// Per-node counts in Slurm's form: runs of one count as `N(xK)`, joined
/// by commas (`2(x2)`, `3,2`, `4(x2),1`).
pub fn repeated(counts: &[u32]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < counts.len() {
        let run = counts[i..].iter().take_while(|c| **c == counts[i]).count();
        parts.push(if run > 1 {
            format!("{}(x{run})", counts[i])
        } else {
            counts[i].to_string()
        });
        i += run;
    }
    parts.join(",")
}

/// The variables naming an isolated job's GPU instances, as Slurm sets
/// them: all of them in `CUDA_VISIBLE_DEVICES` (UUIDs; a CUDA process uses
/// only the first MIG instance it names, so a job on several MIG instances
/// runs one process per instance: [`task_devices`]), their GPUs' indices
/// in `SLURM_JOB_GPUS`. An MPS daemon's pipe is handed over only with a
/// single instance: one daemon serves one instance.
fn add_devices(env: &mut BTreeMap<String, String>, job: &Job, instances: &[Instance]) {
    let Some(first) = instances.first() else {
        return;
    };
    let mut set = |k: &str, v: &str| {
        env.insert(k.to_string(), v.to_string());
    };
    let join =
        |f: &dyn Fn(&Instance) -> String| instances.iter().map(f).collect::<Vec<_>>().join(",");
    let uuids = crate::gpu::uuid_list(instances);
    let indices = join(&|i| i.gpu_index.to_string());
    let count = instances.len().to_string();
    set("CUDA_VISIBLE_DEVICES", &uuids);
    set("GPU_DEVICE_ORDINAL", &uuids);
    set("SLURM_JOB_GPUS", &indices);
    set("SLURM_STEP_GPUS", &indices);
    set("SLURM_GPUS_ON_NODE", &count);
    set("SLURM_GPUS", &count);
    set("GSCHED_GPU_INSTANCE", &uuids);
    let other = &job.spec.slurm.other;
    for (option, var) in [
        ("gpus-per-task", "SLURM_GPUS_PER_TASK"),
        ("gpus-per-node", "SLURM_GPUS_PER_NODE"),
        ("gpu-bind", "SLURM_GPU_BIND"),
    ] {
        if let Some(v) = other.get(option) {
            set(var, v);
        }
    }
    if instances.iter().all(|i| i.profile == first.profile) {
        if let Some(p) = &first.profile {
            set("GSCHED_MIG_PROFILE", p);
        }
    }
    if let (1, Some(m)) = (instances.len(), &first.mps) {
        set("CUDA_MPS_PIPE_DIRECTORY", &m.pipe_dir);
        set("CUDA_MPS_LOG_DIRECTORY", &m.log_dir);
    }
}

/// The devices task `task` of `tasks` sees, given the job's devices
/// (`CUDA_VISIBLE_DEVICES`), its `--gpus-per-task` and its `--gpu-bind`:
/// with GPUs per task, its own consecutive ones; with `single:N`, one,
/// shared by N tasks in turn; otherwise all of them. `None` when the job's
/// devices are too few for that task.
pub fn task_devices(
    visible: &str,
    per_task: Option<u64>,
    bind: Option<crate::allocation::GpuBind>,
    task: u32,
) -> Option<String> {
    let devices: Vec<&str> = visible.split(',').filter(|d| !d.is_empty()).collect();
    let task = task as usize;
    let (from, n) = match (bind, per_task) {
        (Some(crate::allocation::GpuBind::Single(k)), _) => (task / k as usize, 1),
        (_, Some(g)) => (task * g as usize, g as usize),
        _ => return Some(visible.to_string()),
    };
    let end = from.checked_add(n)?;
    devices.get(from..end).map(|d| d.join(","))
}

/// How a node intercepts the CUDA driver of shared jobs.
#[derive(Debug, Clone)]
pub struct Interception<'a> {
    /// Path of `libgprobe.so`.
    pub lib: &'a str,
    /// Reservation for a job with no footprint of its own, bytes.
    pub default_bytes: u64,
    /// CUDA context memory reserved on top, bytes.
    pub context_bytes: u64,
}

/// Adds the interception variables to a job's environment. For a shared
/// job that holds no instance: its compute demand (`GSCHED_TASK_SHARE`,
/// thousandths of a GPU: its `--gpu-share`, else the share its earlier
/// runs measured; absent, the node's default counts); and unless it opted
/// out (`GSCHED_INTERCEPT=0`), `LD_PRELOAD` (the library first) and the
/// reservation: the job's stated footprint, else the peak of its earlier
/// runs, else the node's default.
pub fn add_interception(
    env: &mut BTreeMap<String, String>,
    job: &Job,
    holds_instance: bool,
    learned: Learned,
    with: &Interception<'_>,
) {
    if job.spec.isolated || holds_instance {
        return;
    }
    if let Some(share) = job.spec.gpu.share.or(learned.share) {
        env.insert(TASK_SHARE_ENV.into(), share.to_string());
    }
    if intercept_off(env) {
        return;
    }
    preload_first(env, with.lib);
    let bytes = job
        .spec
        .gpu
        .mem_mib
        .or(learned.mib)
        .map(|m| m * 1024 * 1024)
        .unwrap_or(with.default_bytes);
    env.insert("GSCHED_TASK_MEM".into(), bytes.to_string());
    env.insert("GSCHED_CONTEXT_MEM".into(), with.context_bytes.to_string());
}

/// Makes a job's environment hold its processes at their first CUDA call
/// until gnoded gives the job its instances (an isolated job started
/// early, see `wire::LaunchRequest::early`): the interception library is
/// preloaded first and [`crate::probe::GATE_ENV`] set. Returns false, and
/// changes nothing, when the job turned the interception off
/// (`GSCHED_INTERCEPT=0`): it cannot be held, so it must not start early.
pub fn add_gate(env: &mut BTreeMap<String, String>, lib: &str) -> bool {
    if intercept_off(env) {
        return false;
    }
    preload_first(env, lib);
    env.insert(crate::probe::GATE_ENV.into(), "1".into());
    true
}

pub use crate::job::intercept_off;

/// Puts `lib` first in `LD_PRELOAD`.
fn preload_first(env: &mut BTreeMap<String, String>, lib: &str) {
    let preload = match env.get("LD_PRELOAD") {
        Some(p) if !p.is_empty() => format!("{lib} {p}"),
        _ => lib.to_string(),
    };
    env.insert("LD_PRELOAD".into(), preload);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::{parse_sim_spec, sim_instances};
    use crate::job::{GpuRequest, JobSpec};

    fn job() -> Job {
        let mut environment = BTreeMap::new();
        environment.insert("HOME".into(), "/home/a".into());
        environment.insert("SLURM_JOB_ID".into(), "999".into());
        environment.insert("CUDA_VISIBLE_DEVICES".into(), "0,1".into());
        Job::new(
            12,
            JobSpec {
                name: "x".into(),
                script: "#!/bin/sh\n".into(),
                environment,
                working_dir: "/w".into(),
                user_name: "a".into(),
                uid: 5,
                gid: 6,
                submit_host: "login".into(),
                isolated: true,
                gpu: GpuRequest {
                    model: None,
                    mig_profile: Some("1g.5gb".into()),
                    mem_mib: None,
                    share: None,
                    share_limit: None,
                    count: None,
                },
                time_limit: Some(90),
                ..JobSpec::default()
            },
            0,
        )
    }

    #[test]
    fn tasks_learn_their_pid_through_a_shell_that_becomes_them() {
        let argv: Vec<String> = vec!["python3".into(), "a b.py".into()];
        let w = with_task_pid(&argv);
        assert_eq!(&w[..2], ["/bin/sh", "-c"]);
        assert!(w[2].contains("SLURM_TASK_PID=$$") && w[2].contains(r#"exec "$0" "$@""#));
        assert_eq!(&w[3..], argv.as_slice());
        let here = |p: &std::path::Path| p == std::path::Path::new("/usr/bin/python3");
        assert!(finds_program("python3", "/bin:/usr/bin", here));
        assert!(!finds_program("python3", "/bin", here));
        assert!(finds_program("/usr/bin/python3", "", here));
        assert!(!finds_program("", "/usr/bin", here));
    }

    #[test]
    fn per_node_counts_read_as_slurm_writes_them() {
        assert_eq!(repeated(&[2, 2]), "2(x2)");
        assert_eq!(repeated(&[3, 2]), "3,2");
        assert_eq!(repeated(&[4, 4, 1]), "4(x2),1");
        assert_eq!(repeated(&[1]), "1");
    }

    #[test]
    fn a_job_on_two_nodes_sees_both_and_its_place_on_each() {
        let mut j = job();
        j.spec.slurm.other.insert("nodes".into(), "2".into());
        j.spec
            .slurm
            .other
            .insert("ntasks-per-node".into(), "2".into());
        j.node = Some("n1".into());
        j.sisters = vec![crate::job::Sister {
            node: "n2".into(),
            instances: vec![],
        }];
        for (node, id) in [("n1", "0"), ("n2", "1")] {
            let env = job_environment(
                &j,
                &Placement {
                    node,
                    cluster: "c",
                    partition: "p",
                    instances: &[],
                    controller_url: "http://x",
                },
            );
            assert_eq!(env["SLURM_JOB_NODELIST"], "n[1-2]");
            assert_eq!(env["SLURM_JOB_NUM_NODES"], "2");
            assert_eq!(env["SLURM_NNODES"], "2");
            assert_eq!(env["SLURM_NTASKS"], "4");
            assert_eq!(env["SLURM_TASKS_PER_NODE"], "2(x2)");
            assert_eq!(env["SLURM_JOB_CPUS_PER_NODE"], "2(x2)");
            assert_eq!(env["SLURM_NODEID"], id);
            assert_eq!(env["SLURMD_NODENAME"], node);
        }
    }

    #[test]
    fn slurm_variables_and_gpu() {
        let inst = sim_instances("n1", &parse_sim_spec("1xA100-40GB:1g.5gb*2").unwrap());
        let at = Placement {
            node: "n1",
            cluster: "c",
            partition: "gpu",
            instances: std::slice::from_ref(&inst[1]),
            controller_url: "http://127.0.0.1:6817",
        };
        let env = job_environment(&job(), &at);
        assert_eq!(env["HOME"], "/home/a");
        assert_eq!(env["SLURM_JOB_ID"], "12");
        assert_eq!(env["SLURM_JOB_NODELIST"], "n1");
        assert_eq!(env["SLURM_SUBMIT_DIR"], "/w");
        assert_eq!(env["SLURM_JOB_TIME_LIMIT"], "2");
        // No task option: no task count (as Slurm); one CPU on the node.
        assert!(!env.contains_key("SLURM_NTASKS") && !env.contains_key("SLURM_TASKS_PER_NODE"));
        assert_eq!(env["SLURM_CPUS_ON_NODE"], "1");
        // The submitter's input variables stay; other SLURM_* ones do not.
        let mut from_shell = job();
        for (k, v) in [("SLURM_ACCOUNT", "QA"), ("SLURM_ARRAY_TASK_ID", "7")] {
            from_shell.spec.environment.insert(k.into(), v.into());
        }
        let env2 = job_environment(&from_shell, &at);
        assert_eq!(env2.get("SLURM_ACCOUNT").map(String::as_str), Some("QA"));
        assert!(!env2.contains_key("SLURM_ARRAY_TASK_ID"));
        let mut tasks = job();
        tasks.spec.slurm.ntasks = Some(3);
        tasks.spec.slurm.cpus_per_task = Some(2);
        let env3 = job_environment(&tasks, &at);
        assert_eq!(
            (
                env3["SLURM_NTASKS"].as_str(),
                env3["SLURM_TASKS_PER_NODE"].as_str(),
                env3["SLURM_CPUS_ON_NODE"].as_str()
            ),
            ("3", "3", "6")
        );
        assert_eq!(env["CUDA_VISIBLE_DEVICES"], inst[1].uuid);
        assert_eq!(env["SLURM_JOB_GPUS"], "0");
        assert_eq!(env["GSCHED_MIG_PROFILE"], "1g.5gb");
        assert_eq!(env["SLURM_GPUS_ON_NODE"], "1");
        assert_eq!(env["GPU_DEVICE_ORDINAL"], inst[1].uuid);
        assert!(!env.contains_key("CUDA_MPS_PIPE_DIRECTORY"));

        // An instance with an MPS daemon hands its pipe directory to the job.
        let mut with_mps = inst[1].clone();
        with_mps.mps = Some(crate::gpu::Mps {
            pipe_dir: "/var/lib/gsched/mps/n1/x/pipe".into(),
            log_dir: "/var/lib/gsched/mps/n1/x/log".into(),
            state: crate::gpu::MpsState::Running,
        });
        let env = job_environment(
            &job(),
            &Placement {
                instances: std::slice::from_ref(&with_mps),
                ..at
            },
        );
        assert_eq!(
            env["CUDA_MPS_PIPE_DIRECTORY"],
            "/var/lib/gsched/mps/n1/x/pipe"
        );
        assert_eq!(
            env["CUDA_MPS_LOG_DIRECTORY"],
            "/var/lib/gsched/mps/n1/x/log"
        );
    }

    #[test]
    fn several_instances_are_all_visible_and_split_per_task() {
        let inst = sim_instances("n1", &parse_sim_spec("2xH100-80GB").unwrap());
        let mut j = job();
        j.spec
            .slurm
            .other
            .insert("gpus-per-task".into(), "1".into());
        let at = Placement {
            node: "n1",
            cluster: "c",
            partition: "gpu",
            instances: &inst,
            controller_url: "u",
        };
        let env = job_environment(&j, &at);
        let both = format!("{},{}", inst[0].uuid, inst[1].uuid);
        assert_eq!(env["CUDA_VISIBLE_DEVICES"], both);
        assert_eq!(env["GPU_DEVICE_ORDINAL"], both);
        assert_eq!(env["SLURM_JOB_GPUS"], "0,1");
        assert_eq!(env["SLURM_GPUS_ON_NODE"], "2");
        assert_eq!(env["SLURM_GPUS_PER_TASK"], "1");
        assert!(!env.contains_key("GSCHED_MIG_PROFILE"));
        use crate::allocation::GpuBind;
        let d = "A,B,C,D";
        assert_eq!(task_devices(d, Some(1), None, 2).as_deref(), Some("C"));
        assert_eq!(task_devices(d, Some(2), None, 1).as_deref(), Some("C,D"));
        assert_eq!(task_devices(d, Some(2), None, 2), None);
        assert_eq!(task_devices(d, None, None, 7).as_deref(), Some(d));
        let single = Some(GpuBind::Single(2));
        assert_eq!(task_devices(d, None, single, 3).as_deref(), Some("B"));
        assert_eq!(
            task_devices(d, None, Some(GpuBind::All), 3).as_deref(),
            Some(d)
        );
        assert_eq!(task_devices(d, None, single, 8), None);
    }

    #[test]
    fn no_device_without_instance() {
        let at = Placement {
            node: "n1",
            cluster: "c",
            partition: "gpu",
            instances: &[],
            controller_url: "u",
        };
        let env = job_environment(&job(), &at);
        assert!(
            !env.contains_key("CUDA_VISIBLE_DEVICES"),
            "submitter's devices leaked"
        );
        assert!(!env.contains_key("SLURM_JOB_GPUS"));
    }

    #[test]
    fn interception_reservation_and_opt_outs() {
        let with = Interception {
            lib: "/l/libgprobe.so",
            default_bytes: 7,
            context_bytes: 3,
        };
        let mut j = job();
        j.spec.isolated = false;
        j.spec.gpu = GpuRequest::default();
        let mut env = BTreeMap::from([("LD_PRELOAD".to_string(), "/x.so".to_string())]);
        add_interception(&mut env, &j, false, Learned::default(), &with);
        assert_eq!(env["LD_PRELOAD"], "/l/libgprobe.so /x.so");
        assert_eq!(env["GSCHED_TASK_MEM"], "7");
        assert_eq!(env["GSCHED_CONTEXT_MEM"], "3");
        assert!(!env.contains_key("GSCHED_TASK_SHARE"), "the node's default");
        let mut env = BTreeMap::new();
        let learned = Learned {
            mib: Some(2),
            share: Some(300),
            ..Default::default()
        };
        add_interception(&mut env, &j, false, learned, &with);
        assert_eq!(env["GSCHED_TASK_MEM"], (2u64 << 20).to_string(), "learned");
        assert_eq!(env["GSCHED_TASK_SHARE"], "300", "learned");
        j.spec.gpu.mem_mib = Some(5);
        j.spec.gpu.share = Some(250);
        add_interception(&mut env, &j, false, learned, &with);
        assert_eq!(
            env["GSCHED_TASK_MEM"],
            (5u64 << 20).to_string(),
            "stated wins"
        );
        assert_eq!(env["GSCHED_TASK_SHARE"], "250", "stated wins");
        // An opted-out job's own probes still state its demand.
        let mut env = BTreeMap::from([("GSCHED_INTERCEPT".to_string(), "0".to_string())]);
        add_interception(&mut env, &j, false, learned, &with);
        assert_eq!(
            env.get("GSCHED_TASK_SHARE").map(String::as_str),
            Some("250")
        );
        assert!(!env.contains_key("LD_PRELOAD"));
        for (holds, opt_out, isolated) in [
            (true, false, false),
            (false, true, false),
            (false, false, true),
        ] {
            let mut k = j.clone();
            k.spec.isolated = isolated;
            let mut env = BTreeMap::new();
            if opt_out {
                env.insert("GSCHED_INTERCEPT".to_string(), "0".to_string());
            }
            add_interception(&mut env, &k, holds, Learned::default(), &with);
            assert_eq!(
                env.contains_key("GSCHED_TASK_SHARE"),
                opt_out,
                "{holds} {opt_out} {isolated}"
            );
            assert!(
                !env.contains_key("LD_PRELOAD"),
                "{holds} {opt_out} {isolated}"
            );
        }
    }

    #[test]
    fn a_job_started_early_is_held_at_its_first_cuda_call_unless_it_opted_out() {
        let mut env = BTreeMap::from([("LD_PRELOAD".to_string(), "/x.so".to_string())]);
        assert!(add_gate(&mut env, "/l/libgprobe.so"));
        assert_eq!(env["LD_PRELOAD"], "/l/libgprobe.so /x.so");
        assert_eq!(env[crate::probe::GATE_ENV], "1");
        let mut off = BTreeMap::from([("GSCHED_INTERCEPT".to_string(), "0".to_string())]);
        assert!(!add_gate(&mut off, "/l/libgprobe.so"));
        assert!(!off.contains_key("LD_PRELOAD") && !off.contains_key(crate::probe::GATE_ENV));
    }
}
