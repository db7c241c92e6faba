//! `scontrol`: `show job`, `show config`, `show partition`; the rest of
//! Slurm's scontrol answers that it is not supported (docs/slurm.md).

use anyhow::{bail, Context, Result};
use gsched_core::job::JobState;
use gsched_core::wire::JobInfo;

use super::data_parser;
use super::format::{elapsed_long, timestamp};
use super::ids::{fetch, parse_refs};
use crate::client::{ApiError, Client};

/// The priority `scontrol show job` and `squeue %Q` show: the
/// controller's (its `--priority-type`); for a job it no longer holds in
/// memory, first come, first served as priority/basic numbers it. 0 while
/// held.
pub fn priority(j: &JobInfo) -> u64 {
    if j.held {
        return 0;
    }
    match j.priority {
        Some(p) => p.value,
        None => gsched_core::priority::TOP
            .saturating_sub(j.job_id.saturating_sub(1))
            .max(1),
    }
}

/// `scontrol show job`'s text for one job, in Slurm 22.05's layout (the
/// fields gsched has).
pub fn show_job(j: &JobInfo) -> String {
    let null = |v: Option<&str>| v.filter(|v| !v.is_empty()).unwrap_or("(null)").to_string();
    let other = |k: &str| j.slurm.other.get(k).map(String::as_str);
    let array = match &j.array {
        Some(t) => format!(" ArrayJobId={} ArrayTaskId={}", t.array_job_id, t.task_id),
        None => String::new(),
    };
    let reason = match j.job_state {
        JobState::Pending => j.state_reason.clone().unwrap_or_else(|| "None".into()),
        _ => "None".into(),
    };
    let width = j.num_nodes.max(1);
    let spread = if width > 1 {
        gsched_core::allocation::tasks_per_node(&j.slurm, width)
    } else {
        vec![gsched_core::allocation::tasks_on_node(&j.slurm)]
    };
    let tasks: u32 = spread.iter().sum();
    let per_task = j.slurm.cpus_per_task.unwrap_or(1);
    let cpus = tasks * per_task;
    let mut tres = format!("cpu={cpus},node={width}");
    if j.isolated {
        tres.push_str(&format!(
            ",gres/gpu={}",
            j.gpu_request.instances() * width as usize
        ));
    }
    let gres = if j.isolated {
        j.gpu_request.tres()
    } else {
        "(null)".into()
    };
    let lines = [
        format!("JobId={} JobName={}{array}", j.job_id, j.name),
        format!(
            "   UserId={}({}) GroupId={}({}) MCS_label=N/A",
            j.user_name,
            j.user_id,
            crate::identity::group_name(j.group_id),
            j.group_id
        ),
        format!(
            "   Priority={} Nice={} Account={} QOS={}",
            priority(j),
            j.nice,
            null(j.slurm.account.as_deref()),
            j.slurm.qos.as_deref().unwrap_or("normal")
        ),
        format!(
            "   JobState={} Reason={reason} Dependency={}",
            j.state_name(),
            null(j.dependency.as_deref())
        ),
        format!(
            "   Requeue={} Restarts={} BatchFlag=1 Reboot=0 ExitCode={}:{}",
            u8::from(j.requeue),
            j.restart_cnt,
            j.exit_code.unwrap_or(0),
            j.exit_signal.unwrap_or(0)
        ),
        format!(
            "   RunTime={} TimeLimit={} TimeMin=N/A",
            elapsed_long(j.elapsed),
            j.time_limit
                .map(|m| elapsed_long(m as i64 * 60))
                .unwrap_or_else(|| "UNLIMITED".into())
        ),
        format!(
            "   SubmitTime={} EligibleTime={}",
            timestamp(Some(j.submit_time)),
            timestamp(Some(j.begin.map_or(j.submit_time, |b| b.max(j.submit_time))))
        ),
        format!(
            "   StartTime={} EndTime={} Deadline=N/A",
            timestamp(j.start_time),
            timestamp(j.end_time)
        ),
        format!("   Partition={}", j.partition),
        format!(
            "   ReqNodeList={} ExcNodeList={}",
            null(other("nodelist")),
            null(other("exclude"))
        ),
        format!("   NodeList={}", null(Some(&j.nodes))),
        format!(
            "   BatchHost={}",
            null(
                gsched_core::hostlist::expand(&j.nodes)
                    .ok()
                    .and_then(|n| n.into_iter().next())
                    .as_deref()
            )
        ),
        format!(
            "   NumNodes={} NumCPUs={cpus} NumTasks={tasks} CPUs/Task={per_task} ReqB:S:C:T=0:0:*:*",
            j.num_nodes
        ),
        format!("   TRES={tres}"),
        format!(
            "   MinCPUsNode={per_task} MinMemoryNode={} MinTmpDiskNode=0",
            other("mem").unwrap_or("0")
        ),
        format!(
            "   Features={} DelayBoot=00:00:00",
            null(other("constraint"))
        ),
        "   OverSubscribe=OK Contiguous=0 Licenses=(null) Network=(null)".to_string(),
        format!("   Command={}", null(j.slurm.command.as_deref())),
        format!("   WorkDir={}", j.current_working_directory),
        format!("   Comment={}", null(j.slurm.comment.as_deref())),
        format!("   StdErr={}", j.standard_error),
        "   StdIn=/dev/null".to_string(),
        format!("   StdOut={}", j.standard_output),
        format!("   TresPerNode={gres}"),
    ];
    lines.join("\n") + "\n\n"
}

/// The controller's host and port, from its URL (`http://HOST:PORT`): what
/// Slurm calls SlurmctldHost and SlurmctldPort.
fn controller_address(base: &str) -> (String, String) {
    let rest = base.split("://").nth(1).unwrap_or(base);
    let authority = rest.split('/').next().unwrap_or(rest);
    match authority.rsplit_once(':') {
        Some((host, port)) => (host.trim_matches(['[', ']']).to_string(), port.to_string()),
        None => (authority.to_string(), "6817".to_string()),
    }
}

/// `scontrol ping`, as Slurm's: each controller listed in `GSCHED_URL`
/// (or the site file), whether it answers, and its role. Exit status 1
/// when no controller leads.
fn ping(client: &Client) -> Result<i32> {
    let roles: Vec<(String, Option<bool>)> = client
        .roles()
        .into_iter()
        .map(|(base, role)| (base, role.ok().map(|r| r.leads)))
        .collect();
    let (lines, led) = ping_lines(&roles);
    for line in lines {
        println!("{line}");
    }
    Ok(if led { 0 } else { 1 })
}

/// `scontrol ping`'s lines for the controllers in their listed order, each
/// `None` when it does not answer, else whether it leads: the leader is
/// `primary` (the first listed while none leads), the others `backup`
/// (`backup1`, `backup2`, ... with more than two) in their order. Also
/// whether one leads.
fn ping_lines(roles: &[(String, Option<bool>)]) -> (Vec<String>, bool) {
    let leader = roles.iter().position(|(_, r)| *r == Some(true));
    let mut backups = 0;
    let lines = roles
        .iter()
        .enumerate()
        .map(|(i, (base, role))| {
            let (host, _) = controller_address(base);
            let mode = if leader.unwrap_or(0) == i {
                "primary".to_string()
            } else {
                backups += 1;
                match roles.len() {
                    2 => "backup".to_string(),
                    _ => format!("backup{backups}"),
                }
            };
            let state = if role.is_some() { "UP" } else { "DOWN" };
            format!("Slurmctld({mode}) at {host} is {state}")
        })
        .collect();
    (lines, leader.is_some())
}

/// `scontrol show config`'s lines (the settings clients read).
pub fn show_config(health: &serde_json::Value, base: &str) -> String {
    let (host, port) = controller_address(base);
    let cluster = health["cluster_name"].as_str().unwrap_or("gsched");
    let policy = health["launch_policy"].as_str().unwrap_or("case");
    let min_job_age = health["min_job_age"]
        .as_u64()
        .unwrap_or(gsched_core::cluster::DEFAULT_MIN_JOB_AGE);
    let rows = [
        ("ClusterName", cluster.to_string()),
        (
            "MaxArraySize",
            health["max_array_size"]
                .as_u64()
                .unwrap_or(gsched_core::array::DEFAULT_MAX_ARRAY_SIZE.into())
                .to_string(),
        ),
        ("MinJobAge", format!("{min_job_age} sec")),
        ("SchedulerType", format!("gsched/{policy}")),
        ("SlurmctldHost[0]", host),
        ("SlurmctldPort", port),
        ("SLURM_VERSION", super::SLURM_VERSION.into()),
        ("KillWait", "30 sec".into()),
    ];
    let mut out = format!(
        "Configuration data as of {}\n",
        timestamp(Some(super::format::unix_now()))
    );
    for (k, v) in rows {
        out.push_str(&format!("{k:<23}= {v}\n"));
    }
    out
}

/// A record's block as it is, or (`-o`) on one line.
fn one_or_more_lines(block: String, oneliner: bool) -> String {
    if !oneliner {
        return block;
    }
    let fields: Vec<&str> = block.split_whitespace().collect();
    format!("{}\n", fields.join(" "))
}

/// The jobs the given ids (`N`, `A`, `A_i`) name, in any state; an error
/// as Slurm words it when none exists.
fn named_jobs(client: &Client, ids: &[&str]) -> Result<Vec<JobInfo>> {
    let list: Vec<String> = ids.iter().map(|s| s.to_string()).collect();
    let jobs = fetch(client, &parse_refs(&list)?, &[("state", "all".into())])?;
    if jobs.is_empty() {
        bail!("Invalid job id specified");
    }
    Ok(jobs)
}

/// `scontrol show hostnames LIST`: one host name per line.
fn print_hostnames(list: &str) -> Result<i32> {
    // An empty list names no host: nothing to print, as Slurm's.
    if matches!(list.trim(), "" | "[]") {
        return Ok(0);
    }
    for name in gsched_core::hostlist::expand(list)? {
        println!("{name}");
    }
    Ok(0)
}

/// The commands gsched's scontrol carries out.
const SUPPORTED: &str = "show job [ID], show node [NAME], show config, show partition, show step [JOB[.STEP]], show licenses, show reservations, show hostnames [LIST], show hostlist LIST, ping, version, reconfigure, requeue ID, hold ID, release ID, suspend ID, resume ID, update NodeName=.. State=.., update JobId=.. FIELD=..";

/// `scontrol --help`, in Slurm's form, with what gsched's scontrol takes.
const HELP: &str = "\
scontrol [<OPTION>] [<COMMAND>]
    Valid <OPTION> values are:
     -d or --details: show details (gsched always shows those it has)
     --json: produce JSON output (data_parser v0.0.44)
     -o or --oneliner: print each record on one line
     -Q or --quiet: accepted; changes nothing here
     -V or --version: report the Slurm release these commands follow

    Valid <COMMAND> values are:
     hold <job_list>          hold the pending jobs
     ping                     print the status of the controller
     reconfigure              read the controller's configuration file again
                              (it says which settings a restart would apply)
     release <job_list>       release the held jobs
     requeue <job_list>       requeue the running jobs
     resume <job_list>        resume the suspended jobs (administrators)
     show <ENTITY> [<ID>]     display the state of the entity: job, node,
                              partition, step, config, licenses,
                              reservations, hostnames, hostlist
     suspend <job_list>       suspend the running jobs (administrators)
     token [lifespan=S] [username=U]  print a token for the REST API
     update <SPECIFICATIONS>  update job (JobId=...) or node (NodeName=...)
     version                  print the Slurm release these commands follow
";

/// scontrol's options, wherever they stand on the line.
#[derive(Default)]
struct Options {
    /// `--json`: Slurm's data_parser output.
    json: bool,
    /// `-o`/`--oneliner`: one line per record.
    oneliner: bool,
}

/// Takes scontrol's options out of `args`: `--json`, `-o`, and those that
/// change nothing here: `-d` (the details gsched has are always shown),
/// `-a` (every partition is always shown), `-F` (gsched has no future
/// nodes), `-Q`, `-v`. `--yaml` is refused.
fn options(args: &[String]) -> Result<(Options, Vec<&str>)> {
    let mut o = Options::default();
    let mut words = Vec::new();
    for a in args {
        match a.as_str() {
            "--json" => o.json = true,
            "--yaml" => bail!("--yaml is not supported by gsched's scontrol; use --json"),
            "-o" | "--oneliner" => o.oneliner = true,
            "-d" | "-dd" | "--details" | "-a" | "--all" | "-F" | "--future" | "-Q" | "--quiet"
            | "-v" | "--verbose" => {}
            w => words.push(w),
        }
    }
    Ok((o, words))
}

/// `scontrol --json ...`: the entities with a data_parser shape (`None`
/// for the others, which answer in text). `meta.command` is the line.
fn json_answer(client: &Client, args: &[String], words: &[&str]) -> Option<Result<i32>> {
    use super::scontrol_data::{empty_json, ping_json, steps_json};
    let command = super::data_parser::command_line("scontrol", args);
    let json = |what: &str| data_parser::print_json_for(client, what, &command);
    Some(match words {
        ["show", "node" | "nodes"] => json("nodes"),
        ["show", "node" | "nodes", name] => json(&format!("node/{name}")),
        ["show", "job" | "jobs"] => json("jobs"),
        ["show", "job" | "jobs", id] => json(&format!("job/{id}")),
        ["show", "partition" | "partitions"] => json("partitions"),
        ["ping"] => ping_json(client, &command),
        ["show", "step" | "steps", rest @ ..] if rest.len() <= 1 => {
            steps_json(client, rest.first().copied(), &command)
        }
        ["show", "license" | "licenses"] => empty_json(client, "licenses", &command),
        ["show", "reservation" | "reservations"] => empty_json(client, "reservations", &command),
        _ => return None,
    })
}

pub fn main_with(args: Vec<String>) -> Result<i32> {
    let (opts, words) = options(&args)?;
    let client = Client::from_env();
    if opts.json {
        if let Some(answered) = json_answer(&client, &args, &words) {
            return answered;
        }
    }
    match words.as_slice() {
        ["--help" | "-h" | "help"] => {
            print!("{HELP}");
            Ok(0)
        }
        ["reconfigure" | "reconfig"] => {
            let answer = client.reconfigure()?;
            println!("{}", answer["message"].as_str().unwrap_or_default());
            Ok(0)
        }
        ["show", "node" | "nodes"] => data_parser::print_nodes(&client, None, opts.oneliner),
        ["show", "node" | "nodes", name] => {
            data_parser::print_nodes(&client, Some(name), opts.oneliner)
        }
        ["show", "config"] | ["show", "conf"] => {
            print!("{}", show_config(&client.health()?, client.base()));
            Ok(0)
        }
        ["show", "job"] | ["show", "jobs"] => {
            let mut jobs = client.jobs(&[("state", "all".into())])?;
            jobs.sort_by_key(|j| j.job_id);
            for j in &jobs {
                print!("{}", one_or_more_lines(show_job(j), opts.oneliner));
            }
            Ok(0)
        }
        ["show", "job", id] | ["show", "jobs", id] => {
            let jobs = named_jobs(&client, &[id])?;
            for j in &jobs {
                print!("{}", one_or_more_lines(show_job(j), opts.oneliner));
            }
            Ok(0)
        }
        ["token", opts @ ..] => {
            // scontrol token [lifespan=SECONDS] [username=NAME]
            let mut lifespan = None;
            let mut user = None;
            for o in opts {
                match o.split_once('=') {
                    Some((k, v)) if k.eq_ignore_ascii_case("lifespan") => {
                        lifespan = Some(v.parse::<u64>().map_err(|_| {
                            anyhow::anyhow!("Invalid lifespan: {v} (seconds expected)")
                        })?)
                    }
                    Some((k, v)) if k.eq_ignore_ascii_case("username") => user = Some(v),
                    _ => bail!("Invalid token option: {o} (lifespan=SECONDS or username=NAME)"),
                }
            }
            let t = client.issue_token(lifespan, user)?;
            println!("SLURM_JWT={}", t.token);
            Ok(0)
        }
        ["requeue", ids @ ..] if !ids.is_empty() => {
            let jobs = named_jobs(&client, ids)?;
            for j in &jobs {
                client.requeue(j.job_id).map_err(|e| match e.downcast_ref::<ApiError>() {
                    Some(a) if a.status == 409 => anyhow::anyhow!(
                        "Requeue of job {} failed: Job is pending execution or finished ({})",
                        j.display_id(),
                        j.job_state.as_str()
                    ),
                    _ => e,
                })?;
            }
            Ok(0)
        }
        [op @ ("hold" | "release" | "uhold"), ids @ ..] if !ids.is_empty() => {
            let jobs = named_jobs(&client, ids)?;
            for j in &jobs {
                client
                    .set_held(j.job_id, *op != "release")
                    .map_err(|e| match e.downcast_ref::<ApiError>() {
                        Some(a) if a.status == 409 => anyhow::anyhow!(
                            "Job {} is not pending ({}): only pending jobs are held or released",
                            j.display_id(),
                            j.job_state.as_str()
                        ),
                        _ => e,
                    })?;
            }
            Ok(0)
        }
        [op @ ("suspend" | "resume"), ids @ ..] if !ids.is_empty() => {
            // An administrator's (the controller refuses anyone else).
            let jobs = named_jobs(&client, ids)?;
            for j in &jobs {
                client.suspend(j.job_id, *op == "suspend")?;
            }
            Ok(0)
        }
        ["update", words @ ..] if !words.is_empty() => super::update::update(&client, words),
        ["ping"] => ping(&client),
        ["show", "step" | "steps", rest @ ..] if rest.len() <= 1 => {
            super::scontrol_data::print_steps(&client, rest.first().copied(), opts.oneliner)
        }
        ["show", "license" | "licenses"] => {
            println!("No licenses configured");
            Ok(0)
        }
        ["show", "reservation" | "reservations"] => {
            println!("No reservations in the system");
            Ok(0)
        }
        ["version"] => {
            println!("slurm {}", super::SLURM_VERSION);
            Ok(0)
        }
        ["show", "hostnames"] | ["show", "hostname"] => {
            let list = std::env::var("SLURM_JOB_NODELIST")
                .context("no hostlist given and SLURM_JOB_NODELIST is not set")?;
            print_hostnames(&list)
        }
        ["show", "hostnames", list] | ["show", "hostname", list] => print_hostnames(list),
        ["show", "hostlist", list] | ["show", "hostlistsorted", list] => {
            let names = gsched_core::hostlist::expand(list)?;
            println!("{}", gsched_core::hostlist::compress(&names));
            Ok(0)
        }
        ["show", "partition"] | ["show", "partitions"] => {
            let h = client.health()?;
            let default = h["partition"].as_str().unwrap_or("gpu");
            let all: Vec<&str> = h["partitions"]
                .as_array()
                .map(|v| v.iter().filter_map(|p| p.as_str()).collect())
                .unwrap_or_else(|| vec![default]);
            for p in all {
                let d = if p == default { "YES" } else { "NO" };
                print!("PartitionName={p}\n   Default={d} State=UP MaxTime=UNLIMITED\n\n");
            }
            Ok(0)
        }
        [] => bail!("no command given (supported: {SUPPORTED})"),
        [cmd, ..] => bail!(
            "'{cmd}' is not supported by gsched's scontrol (supported: {SUPPORTED}); see docs/slurm.md"
        ),
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn ping_names_the_leader_primary_and_the_others_backups() {
        let c = |host: &str, role| (format!("http://{host}:6817"), role);
        let (lines, led) = ping_lines(&[c("c1", None), c("c2", Some(true))]);
        assert!(led);
        assert_eq!(
            lines,
            [
                "Slurmctld(backup) at c1 is DOWN",
                "Slurmctld(primary) at c2 is UP"
            ]
        );
        let (lines, led) = ping_lines(&[c("c1", Some(false)), c("c2", None), c("c3", None)]);
        assert!(!led);
        assert_eq!(
            lines,
            [
                "Slurmctld(primary) at c1 is UP",
                "Slurmctld(backup1) at c2 is DOWN",
                "Slurmctld(backup2) at c3 is DOWN"
            ]
        );
        let (lines, led) = ping_lines(&[c("c1", Some(true))]);
        assert!(led);
        assert_eq!(lines, ["Slurmctld(primary) at c1 is UP"]);
    }

    use super::*;

    #[test]
    fn the_controller_address_comes_from_its_url() {
        let a = |u: &str| controller_address(u);
        assert_eq!(a("http://h1:6817"), ("h1".into(), "6817".into()));
        assert_eq!(a("https://[::1]:9/x"), ("::1".into(), "9".into()));
        assert_eq!(a("http://h2"), ("h2".into(), "6817".into()));
    }

    #[test]
    fn config_lines_clients_read() {
        let c = show_config(
            &serde_json::json!({"cluster_name": "c1"}),
            "http://ctl.example:6820",
        );
        assert!(c.contains("\nMinJobAge              = 300 sec\n"), "{c}");
        assert!(
            c.contains("\nSlurmctldHost[0]       = ctl.example\n"),
            "{c}"
        );
        assert!(c.contains("\nSlurmctldPort          = 6820\n"), "{c}");
        assert!(c.contains("\nSLURM_VERSION          = 25.11.0\n"), "{c}");
        assert!(c.contains("\nMaxArraySize           = 1001\n"), "{c}");
        assert!(c.contains("\nClusterName            = c1\n"), "{c}");
    }
}
