//! How srun sees its local tasks end: it waits for all of them, tells each
//! bad end as Slurm does (`srun: error: NODE: task 0: Segmentation fault`),
//! and kills the rest when `-K` (a task failed) or `-W SECS` (a task ended
//! that long ago) says so.

use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::{code_of, Args, LocalTasks};

/// What ends a step's remaining tasks early.
pub struct Ending {
    /// `-K`: a task that ends with a non-zero status (or a signal).
    pub kill_on_bad_exit: bool,
    /// `-W SECS`: this long after the first task ended.
    pub wait: Option<Duration>,
    /// The step, as `JOB.STEP`, for the messages.
    pub step: String,
}

impl Ending {
    pub fn of(a: &Args, job: u64, step: u32) -> Ending {
        Ending {
            kill_on_bad_exit: a.kill_on_bad_exit.unwrap_or(0) != 0,
            wait: a.wait.filter(|w| *w > 0).map(Duration::from_secs),
            step: format!("{job}.{step}"),
        }
    }
}

/// Waits for every task: the highest exit status, and a signal that ended
/// one.
pub fn wait_all(
    mut children: Vec<(u32, Child)>,
    node: &str,
    ending: &Ending,
) -> Result<(i32, Option<i32>)> {
    use std::os::unix::process::ExitStatusExt;
    let mut worst = 0;
    let mut signal = None;
    // Killed for -K: their ends are not told (the first bad one was).
    let mut killed_for_bad_exit = false;
    let mut first_end: Option<Instant> = None;
    let mut waited_out = false;
    while !children.is_empty() {
        let mut still = Vec::new();
        for (rank, mut c) in children {
            match c.try_wait().context("cannot wait for a task")? {
                Some(s) => {
                    if let Some(sig) = s.signal() {
                        signal = Some(sig);
                    }
                    if !killed_for_bad_exit {
                        tell_end(node, rank, s);
                    }
                    worst = worst.max(code_of(s));
                    first_end.get_or_insert_with(Instant::now);
                }
                None => still.push((rank, c)),
            }
        }
        children = still;
        if ending.kill_on_bad_exit && worst != 0 && !killed_for_bad_exit && !waited_out {
            killed_for_bad_exit = true;
            for (_, c) in &mut children {
                let _ = c.kill();
            }
        }
        let waited = first_end.is_some_and(|t| ending.wait.is_some_and(|w| t.elapsed() >= w));
        if waited && !waited_out && !killed_for_bad_exit && !children.is_empty() {
            waited_out = true;
            let secs = first_end.map_or(0, |t| t.elapsed().as_secs());
            eprintln!("srun: error: First task exited {secs}s ago");
            let running: Vec<u32> = children.iter().map(|(r, _)| *r).collect();
            eprintln!(
                "srun: StepId={} {}: running",
                ending.step,
                tasks_phrase(&running)
            );
            for (_, c) in &mut children {
                let _ = c.kill();
            }
        }
        if !children.is_empty() {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    Ok((worst, signal))
}

/// Runs `--task-epilog`'s program once for each of this node's tasks
/// (with its rank's variables, in its directory, without input or output),
/// all at once, after the tasks have ended; each is killed after
/// [`TASK_EPILOG_SECS`], as Slurm kills its task epilogs, and whatever it
/// left running in its process group when it ends.
pub fn run_epilogs(epilog: &str, tasks: &LocalTasks<'_>, chdir: Option<&str>) {
    use gsched_core::env::TASK_EPILOG_SECS;
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Stdio};
    let mut running: Vec<Child> = Vec::new();
    for (local, &rank) in tasks.ranks.iter().enumerate() {
        let mut cmd = Command::new(epilog);
        cmd.env("SLURM_PROCID", rank.to_string())
            .env("SLURM_LOCALID", local.to_string())
            .env("SLURM_NODEID", tasks.node_id.to_string())
            .envs(tasks.vars.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Its own group: killed with what it started.
            .process_group(0);
        if let Some(d) = chdir {
            cmd.current_dir(d);
        }
        match cmd.spawn() {
            Ok(c) => running.push(c),
            Err(e) => {
                eprintln!("srun: error: task {rank}: cannot run the task epilog {epilog}: {e}")
            }
        }
    }
    // Each leader is left unreaped until the end (WNOWAIT), so its group's
    // id stays its own: the groups are killed then, with whatever an
    // epilog left behind, and the leaders reaped.
    let exited = |c: &Child| -> bool {
        // SAFETY: waitid(2) on our own child, writing into a zeroed
        // siginfo we own; WNOWAIT leaves it to be reaped below.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let rc = unsafe {
            libc::waitid(
                libc::P_PID,
                c.id(),
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            )
        };
        rc != 0 || unsafe { info.si_pid() } != 0
    };
    let deadline = Instant::now() + Duration::from_secs(TASK_EPILOG_SECS);
    while Instant::now() < deadline && !running.iter().all(exited) {
        std::thread::sleep(Duration::from_millis(20));
    }
    for mut c in running {
        // SAFETY: kill(2) on the process group this srun made for it.
        unsafe { libc::kill(-(c.id() as i32), libc::SIGKILL) };
        let _ = c.wait();
    }
}

/// `task 3` or `tasks 0,2-9`.
pub(super) fn tasks_phrase(ranks: &[u32]) -> String {
    let mut sorted = ranks.to_vec();
    sorted.sort_unstable();
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let start = sorted[i];
        while i + 1 < sorted.len() && sorted[i + 1] == sorted[i] + 1 {
            i += 1;
        }
        parts.push(if sorted[i] == start {
            start.to_string()
        } else {
            format!("{start}-{}", sorted[i])
        });
        i += 1;
    }
    let noun = if ranks.len() == 1 { "task" } else { "tasks" };
    format!("{noun} {}", parts.join(","))
}

/// Slurm's line for a task that did not end well: `srun: error: NODE:
/// task 0: Segmentation fault` or `... Exited with exit code 3`.
fn tell_end(node: &str, rank: u32, s: ExitStatus) {
    use std::os::unix::process::ExitStatusExt;
    if let Some(sig) = s.signal() {
        // SAFETY: strsignal returns a static or thread-local string, read
        // at once.
        let name = unsafe {
            let p = libc::strsignal(sig);
            if p.is_null() {
                format!("signal {sig}")
            } else {
                std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned()
            }
        };
        let core = if s.core_dumped() {
            " (core dumped)"
        } else {
            ""
        };
        eprintln!("srun: error: {node}: task {rank}: {name}{core}");
    } else if let Some(c) = s.code().filter(|c| *c != 0) {
        eprintln!("srun: error: {node}: task {rank}: Exited with exit code {c}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_ranges_as_slurm_writes_them() {
        assert_eq!(tasks_phrase(&[7]), "task 7");
        assert_eq!(tasks_phrase(&[9, 0, 2, 3, 4, 5, 6, 7, 8]), "tasks 0,2-9");
    }
}
