//! `srun` outside a job: it submits a job that runs `srun CMD` itself (so
//! that the tasks start inside it, on each of its nodes), then follows it,
//! copying the tasks' standard output and error to its own, as they are
//! written, and exits with the job's status.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use gsched_core::job::JobState;
use gsched_core::wire::JobInfo;

use super::{shell_quote, Args};
use crate::client::Client;

/// The job's options from srun's (those that shape a new job).
fn submission(a: &Args, cwd: &Path, out: &Path, err: &Path) -> crate::gsub::SubmitOptions {
    let mut other = crate::gsub::RecordedOptions {
        nodes: a.nodes.clone(),
        nodelist: a.nodelist.clone(),
        ntasks_per_node: a.ntasks_per_node.map(|n| n.to_string()),
        mem: a.mem.clone(),
        mincpus: a.mincpus.map(|n| n.to_string()),
        tmp: a.tmp.clone(),
        ..Default::default()
    };
    if a.overcommit {
        other.overcommit = Some(String::new());
    }
    crate::gsub::SubmitOptions {
        job_name: Some(a.job_name.clone().unwrap_or_else(|| a.command[0].clone())),
        output: Some(out.display().to_string()),
        error: Some(err.display().to_string()),
        time: a.time.clone(),
        partition: a.partition.clone(),
        ntasks: a.ntasks,
        cpus_per_task: a.cpus_per_task,
        gpus: a.gpus.clone(),
        hold: a.hold,
        export: a.export.clone(),
        begin: a.begin.clone(),
        account: a.account.clone(),
        qos: a.qos.clone(),
        chdir: Some(
            a.chdir
                .as_ref()
                .map(|d| cwd.join(d).display().to_string())
                .unwrap_or_else(|| cwd.display().to_string()),
        ),
        recorded: other,
        ..Default::default()
    }
}

/// This srun's own path, for the job to run it by (the job's environment
/// may have no PATH: `--export=NONE`); `srun` when it cannot be told.
fn own_path() -> String {
    let called = std::env::args().next().unwrap_or_else(|| "srun".into());
    if called.contains('/') {
        return std::path::absolute(&called)
            .map(|p| p.display().to_string())
            .unwrap_or(called);
    }
    std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .map(|d| Path::new(d).join(&called))
        .find(|p| p.is_file())
        .map(|p| p.display().to_string())
        .unwrap_or(called)
}

/// The `srun` the job runs: the task options, then the command.
fn inner_command(a: &Args) -> String {
    let mut inner = vec![shell_quote(&own_path())];
    if let Some(n) = a.ntasks {
        inner.push(format!("-n{n}"));
    }
    if a.label {
        inner.push("-l".into());
    }
    if a.overcommit {
        inner.push("-O".into());
    }
    // Where the tasks read and write: the job's srun opens these on the
    // node, in the job's working directory (srun's own, or --chdir).
    for (flag, value) in [("-i", &a.input), ("-o", &a.output), ("-e", &a.error)] {
        if let Some(v) = value {
            inner.push(flag.into());
            inner.push(shell_quote(v));
        }
    }
    for (flag, value) in [
        ("--task-prolog", &a.task_prolog),
        ("--task-epilog", &a.task_epilog),
    ] {
        if let Some(v) = value {
            let path = std::path::absolute(v).unwrap_or_else(|_| v.into());
            inner.push(format!(
                "{flag}={}",
                shell_quote(&path.display().to_string())
            ));
        }
    }
    if a.verbose > 0 {
        inner.push(format!("-{}", "v".repeat(a.verbose as usize)));
    }
    if let Some(w) = a.wait {
        inner.push(format!("-W{w}"));
    }
    if let Some(k) = a.kill_on_bad_exit.filter(|k| *k != 0) {
        inner.push(format!("--kill-on-bad-exit={k}"));
    }
    inner.extend(a.command.iter().map(|w| shell_quote(w)));
    inner.join(" ")
}

pub(super) fn submit_and_wait(a: &Args) -> Result<i32> {
    if a.hold && a.immediate.is_some() {
        bail!("Unable to allocate resources: a held job cannot start immediately (--hold with --immediate)");
    }
    let cwd = std::env::current_dir().context("cannot determine the current directory")?;
    let out = cwd.join(format!(".gsched-srun-{}.out", std::process::id()));
    let err = cwd.join(format!(".gsched-srun-{}.err", std::process::id()));
    let mut opts = submission(a, &cwd, &out, &err);
    opts.wrap = Some(inner_command(a));
    let script = crate::gsub::wrap_script(opts.wrap.as_deref().unwrap_or(""));
    let spec = crate::gsub::build_spec(&opts, script, "srun", &cwd)?;
    let client = Client::from_env();
    let id = client.submit(&spec)?;
    let result = follow(a, &client, id, &out, &err);
    let _ = std::fs::remove_file(&out);
    let _ = std::fs::remove_file(&err);
    result
}

/// Ctrl-C's (SIGINT's) received and not yet handled.
static INTERRUPTS: AtomicUsize = AtomicUsize::new(0);

extern "C" fn count_interrupt(_: libc::c_int) {
    INTERRUPTS.fetch_add(1, Ordering::SeqCst);
}

/// Counts SIGINTs from now on, for [`follow`] to handle.
fn catch_interrupts() -> Result<()> {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
    let action = SigAction::new(
        SigHandler::Handler(count_interrupt),
        SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    // SAFETY: the handler only adds to an atomic counter.
    unsafe { sigaction(Signal::SIGINT, &action) }.context("cannot catch SIGINT")?;
    Ok(())
}

/// What a Ctrl-C does, as in Slurm's srun: the first reports the tasks'
/// state, a second within a second (or the first, with
/// `--quit-on-interrupt`) kills them.
struct Interrupts {
    quit_at_once: bool,
    last: Option<Instant>,
    /// srun killed the job (its end is then told as the tasks').
    killed: bool,
}

impl Interrupts {
    fn handle(&mut self, client: &Client, id: u64, job: &JobInfo) -> Result<()> {
        if INTERRUPTS.swap(0, Ordering::SeqCst) == 0 || self.killed {
            return Ok(());
        }
        if job.job_state == JobState::Pending {
            // Nothing runs yet: the job is given back, as Slurm's srun
            // gives back an allocation it is waiting for.
            eprintln!("srun: interrupt: job {id} cancelled while it waited");
            client.cancel(
                &id.to_string(),
                None,
                gsched_core::outcome::SignalScope::Full,
            )?;
            return Ok(());
        }
        let again = self
            .last
            .is_some_and(|t| t.elapsed() < Duration::from_secs(1));
        if self.quit_at_once || again {
            eprintln!("srun: forcing job termination");
            client.cancel(
                &id.to_string(),
                Some("KILL"),
                gsched_core::outcome::SignalScope::Full,
            )?;
            self.killed = true;
            return Ok(());
        }
        self.last = Some(Instant::now());
        eprintln!("srun: interrupt (one more within 1 sec to abort)");
        let state = match job.job_state {
            JobState::Pending => "pending",
            _ => "running",
        };
        eprintln!("srun: StepId={id}.0 {}: {state}", all_tasks(job));
        Ok(())
    }
}

/// `task 0` or `tasks 0-N`: every task of the job's step.
fn all_tasks(job: &JobInfo) -> String {
    let ranks: Vec<u32> = (0..job.slurm.ntasks.unwrap_or(1).max(1)).collect();
    super::ending::tasks_phrase(&ranks)
}

/// Follows job `id` to its end, copying its output as it comes.
fn follow(a: &Args, client: &Client, id: u64, out: &Path, err: &Path) -> Result<i32> {
    let give_up = a
        .immediate
        .map(|secs| Instant::now() + Duration::from_secs(secs));
    let (mut shown_out, mut shown_err) = (0u64, 0u64);
    let mut said = Said::Nothing;
    catch_interrupts()?;
    let mut interrupts = Interrupts {
        quit_at_once: a.quit_on_interrupt,
        last: None,
        killed: false,
    };
    let job = loop {
        let jobs = client.jobs(&[("id", id.to_string()), ("state", "all".into())])?;
        let Some(now) = jobs.into_iter().next() else {
            bail!("job {id} is no longer known to the controller");
        };
        said = said.tell(id, &now, a.verbose);
        // Standard error first: what the job's srun says before its tasks
        // start (`launching StepId=...`) comes before what they write.
        shown_err = copy_new(err, shown_err, &mut std::io::stderr());
        shown_out = copy_new(out, shown_out, &mut std::io::stdout());
        if now.job_state.is_final() {
            break now;
        }
        interrupts.handle(client, id, &now)?;
        let pending = now.job_state == JobState::Pending;
        if pending && give_up.is_some_and(|t| Instant::now() >= t) {
            client.cancel(
                &id.to_string(),
                None,
                gsched_core::outcome::SignalScope::Full,
            )?;
            eprintln!("srun: error: Unable to allocate resources: Requested nodes are busy");
            eprintln!("srun: job {id} cancelled: it did not start within --immediate's time");
            return Ok(1);
        }
        std::thread::sleep(Duration::from_millis(if pending { 100 } else { 200 }));
    };
    copy_new(err, shown_err, &mut std::io::stderr());
    copy_new(out, shown_out, &mut std::io::stdout());
    if interrupts.killed {
        // The tasks died of the SIGKILL srun had sent them.
        eprintln!("srun: error: {}: {}: Killed", job.nodes, all_tasks(&job));
        return Ok(exit_status(&job));
    }
    if job.job_state == JobState::Cancelled {
        eprintln!(
            "srun: Job step aborted: job {id} was cancelled{}",
            job.cancelled_by
                .map(|u| format!(" by uid {u}"))
                .unwrap_or_default()
        );
        eprintln!(
            "srun: error: *** STEP {id}.0 ON {} CANCELLED ***",
            job.nodes
        );
        return Ok(exit_status(&job));
    }
    // A task's own failure was told by the job's srun (`task 0: Exited
    // with exit code 3`); anything else that ended it is told here.
    let told = job.job_state == JobState::Completed
        || job.job_state == JobState::Failed
            && job.state_reason.as_deref() == Some("NonZeroExitCode");
    if !told {
        eprintln!(
            "srun: error: job {id}: {}{}",
            job.job_state.as_str(),
            job.state_reason
                .as_deref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default()
        );
    }
    Ok(exit_status(&job))
}

/// What srun has told of its job so far, as Slurm's srun tells it: that
/// it waits (when it must), that it got its resources, and with `-v` where.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Said {
    Nothing,
    Waiting,
    Started,
}

impl Said {
    fn tell(self, id: u64, job: &JobInfo, verbose: u8) -> Said {
        match (self, job.job_state) {
            (Said::Nothing, JobState::Pending) => {
                eprintln!("srun: job {id} queued and waiting for resources");
                Said::Waiting
            }
            (Said::Nothing | Said::Waiting, _) if job.job_state != JobState::Pending => {
                if self == Said::Waiting && job.start_time.is_some() {
                    eprintln!("srun: job {id} has been allocated resources");
                }
                if verbose > 0 {
                    eprintln!(
                        "srun: jobid {id}: nodes({}):`{}', cpu counts: {}(x1)",
                        job.num_nodes.max(1),
                        job.nodes,
                        job.slurm.ntasks.unwrap_or(1) * job.slurm.cpus_per_task.unwrap_or(1)
                    );
                }
                Said::Started
            }
            (said, _) => said,
        }
    }
}

/// The status a command waiting for a job exits with: the job's exit
/// code, 128 + the signal that ended it, or 1 when it has neither; never
/// 0 for a job that did not complete (one failed by its node, cancelled,
/// timed out), whatever its script returned.
pub(crate) fn exit_status(job: &JobInfo) -> i32 {
    let status = match (job.exit_code, job.exit_signal) {
        (_, Some(sig)) if sig > 0 => 128 + sig,
        (Some(c), _) => c,
        _ => 1,
    };
    if status == 0 && job.job_state != gsched_core::JobState::Completed {
        return 1;
    }
    status
}

/// Writes to `to` what file `path` holds past byte `from`; returns the
/// new end.
fn copy_new(path: &Path, from: u64, to: &mut dyn std::io::Write) -> u64 {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut f) = std::fs::File::open(path) else {
        return from;
    };
    if f.seek(SeekFrom::Start(from)).is_err() {
        return from;
    }
    let mut buf = Vec::new();
    let _ = f.read_to_end(&mut buf);
    let _ = to.write_all(&buf);
    let _ = to.flush();
    from + buf.len() as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use gsched_core::{Job, JobSpec, JobState};

    fn ended(state: JobState, code: Option<i32>, signal: Option<i32>) -> JobInfo {
        let mut job = Job::new(7, JobSpec::default(), 0);
        job.state = state;
        job.exit_code = code;
        job.exit_signal = signal;
        JobInfo::new(&job, "main", 0)
    }

    #[test]
    fn a_job_that_did_not_complete_never_exits_zero() {
        assert_eq!(exit_status(&ended(JobState::Completed, Some(0), None)), 0);
        assert_eq!(exit_status(&ended(JobState::Failed, Some(3), None)), 3);
        assert_eq!(exit_status(&ended(JobState::Failed, None, Some(9))), 137);
        assert_eq!(exit_status(&ended(JobState::Failed, Some(0), None)), 1);
        assert_eq!(exit_status(&ended(JobState::NodeFail, Some(0), None)), 1);
        assert_eq!(exit_status(&ended(JobState::Completed, None, None)), 1);
    }
}
