//! `srun` inside a job on several nodes: the controller lays the step's
//! tasks out on the job's nodes (`-N`, `-n`, `--ntasks-per-node`, `-w`
//! within the allocation) and gives a credential per node; the tasks on
//! this node start here as on one node, those on the others through each
//! node's gnoded, whose stream of output and exit statuses comes back
//! here (`--label`, `-o`/`-e` patterns, `-K`). Standard input goes to task
//! 0, which is always on the job's first node, this one. If srun goes
//! away, the connections close and the nodes kill their tasks.

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::sync::mpsc;

use anyhow::{bail, Context, Result};
use gsched_core::steps::{LayoutRequest, StepEvent, StepTasks};

use super::{Args, LocalTasks, StepShape};
use crate::client::{Client, StepNodeAnswer};
use crate::slurm::srun;

/// How a task ended: its status (code, or 128 + signal) and the signal.
type Ended = (i32, Option<i32>);

pub fn run(a: &Args, job: u64) -> Result<i32> {
    let layout = LayoutRequest {
        nodes: match &a.nodes {
            Some(n) => Some(
                n.split('-')
                    .next()
                    .and_then(|m| m.trim().parse().ok())
                    .filter(|m| *m >= 1)
                    .with_context(|| format!("-N {n}: expected a node count N or MIN-MAX"))?,
            ),
            None => None,
        },
        ntasks: a.ntasks,
        ntasks_per_node: a.ntasks_per_node,
        nodelist: a.nodelist.clone(),
    };
    if a.ntasks == Some(0) {
        bail!("-n 0: at least one task is needed");
    }
    let client = Client::from_env();
    let (step, nodes) = client
        .begin_wide_step(job, &a.command[0], &layout)
        .context("cannot begin the step")?;
    let here = std::env::var("SLURMD_NODENAME").unwrap_or_default();
    let names: Vec<String> = nodes.iter().map(|n| n.name.clone()).collect();
    let per_node: Vec<u32> = nodes.iter().map(|n| n.tasks.len() as u32).collect();
    let step_id = step.to_string();
    let vars = srun::step_vars(&StepShape {
        job,
        step_id: &step_id,
        ntasks: per_node.iter().sum(),
        nodes: &names,
        per_node: &per_node,
    });
    let mut confined = None;
    let (done_tx, done_rx) = mpsc::channel::<Ended>();
    let mut remote = 0;
    for n in nodes.iter().filter(|n| n.name != here) {
        remote += n.tasks.len();
        spawn_remote(a, job, step, n, &vars, done_tx.clone());
    }
    drop(done_tx);
    let local = nodes.iter().find(|n| n.name == here);
    let (children, labels) = match local {
        Some(n) => {
            confined = srun::step_cgroup(job, step).map(|c| (step, c));
            let open = |pattern: &str, rank: u32| srun::output_file(pattern, job, &here, rank);
            let tasks = LocalTasks {
                ranks: n.tasks.clone(),
                node_id: n.node_id,
                vars: &vars,
            };
            match srun::start_local(a, &tasks, &open) {
                Ok(started) => started,
                Err(e) => {
                    // The remote tasks go with this process's connections.
                    end_step(&client, job, step, &mut confined, 1, None);
                    return Err(e);
                }
            }
        }
        None => (Vec::new(), Vec::new()),
    };
    let kill_on_bad_exit = a.kill_on_bad_exit.unwrap_or(0) != 0;
    let (worst, signal) = wait(children, remote, &done_rx, kill_on_bad_exit)?;
    for l in labels {
        let _ = l.join();
    }
    end_step(&client, job, step, &mut confined, worst, signal);
    Ok(worst)
}

/// Records the step's end (and ends its cgroup here).
fn end_step(
    client: &Client,
    job: u64,
    step: u32,
    confined: &mut Option<(u32, gsched_probe::client::ProbeClient)>,
    worst: i32,
    signal: Option<i32>,
) {
    if let Some((n, c)) = confined.as_mut() {
        if let Err(e) = c.step_end(*n) {
            eprintln!("srun: warning: step {job}.{n}: {}", e.message);
        }
    }
    let code = if signal.is_some() { 0 } else { worst };
    let _ = client.end_step(job, step, code, signal);
}

/// Waits for the local children and the `remote` tasks' ends: the highest
/// status and a signal that ended one. With `kill_on_bad_exit`, the first
/// bad end kills the local tasks and stops waiting (srun's exit closes its
/// connections, and the nodes kill the rest).
fn wait(
    mut children: Vec<std::process::Child>,
    mut remote: usize,
    done: &mpsc::Receiver<Ended>,
    kill_on_bad_exit: bool,
) -> Result<Ended> {
    use std::os::unix::process::ExitStatusExt;
    let mut worst = 0;
    let mut signal = None;
    loop {
        let mut still = Vec::new();
        for mut c in children {
            match c.try_wait().context("cannot wait for a task")? {
                Some(s) => {
                    signal = s.signal().or(signal);
                    worst = worst.max(srun::code_of(s));
                }
                None => still.push(c),
            }
        }
        children = still;
        while remote > 0 {
            match done.try_recv() {
                Ok((code, sig)) => {
                    remote -= 1;
                    worst = worst.max(code);
                    signal = sig.or(signal);
                }
                Err(mpsc::TryRecvError::Empty) => break,
                Err(mpsc::TryRecvError::Disconnected) => {
                    // A node's stream ended without every status: failed.
                    remote = 0;
                    worst = worst.max(1);
                }
            }
        }
        if kill_on_bad_exit && worst != 0 {
            for c in &mut children {
                let _ = c.kill();
                let _ = c.wait();
            }
            return Ok((worst, signal));
        }
        if children.is_empty() && remote == 0 {
            return Ok((worst, signal));
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Starts the step's tasks on node `n` through its gnoded, in a thread that
/// writes their output here and sends each task's end to `done`.
fn spawn_remote(
    a: &Args,
    job: u64,
    step: u32,
    n: &StepNodeAnswer,
    vars: &[(String, String)],
    done: mpsc::Sender<Ended>,
) {
    let mut env: std::collections::BTreeMap<String, String> = std::env::vars().collect();
    env.extend(vars.iter().cloned());
    if let Some(c) = a.cpus_per_task {
        env.insert("SLURM_CPUS_PER_TASK".into(), c.to_string());
    }
    let per_task = a
        .gpus_per_task
        .clone()
        .or_else(|| std::env::var("SLURM_GPUS_PER_TASK").ok())
        .and_then(|v| gsched_core::allocation::gpu_count(&v));
    let bind = a
        .gpu_bind
        .clone()
        .or_else(|| std::env::var("SLURM_GPU_BIND").ok())
        .and_then(|v| match gsched_core::allocation::gpu_bind(&v) {
            Some(gsched_core::allocation::GpuBind::Single(k)) => Some(k),
            _ => None,
        });
    let req = StepTasks {
        job,
        run: srun::env_u64("GSCHED_JOB_RUN").unwrap_or(0) as u32,
        step,
        credential: n.credential.clone(),
        argv: a.command.clone(),
        env,
        node_id: n.node_id,
        tasks: n.tasks.clone(),
        gpus_per_task: per_task,
        gpu_bind_single: bind,
    };
    let url = format!("{}/v1/steps", n.url.trim_end_matches('/'));
    let sink = Sink {
        label: a.label,
        output: a.output.clone(),
        error: a.error.clone(),
        job,
        node: n.name.clone(),
        files: HashMap::new(),
        partial: HashMap::new(),
    };
    let count = n.tasks.len();
    let name = n.name.clone();
    let seal = n.seal.clone();
    std::thread::spawn(move || {
        let mut sink = sink;
        let mut ended = 0;
        // Sealed for that node alone: its port may be held by anyone.
        let seal = match gsched_seal::StepSeal::from_secret(&seal) {
            Ok(s) => s,
            Err(e) => return fail(&done, count, &format!("{name}: {e}")),
        };
        let (body, answer) = match serde_json::to_vec(&req) {
            Ok(plain) => {
                let (sealed, answer) = seal.seal_request(&plain);
                let body = serde_json::json!(gsched_core::steps::SealedStepTasks {
                    job: req.job,
                    run: req.run,
                    step: req.step,
                    sealed,
                });
                (body, answer)
            }
            Err(e) => return fail(&done, count, &format!("{name}: {e}")),
        };
        let reader = match crate::client::post_streaming(&url, &body) {
            Ok(r) => r,
            Err(e) => {
                return fail(
                    &done,
                    count,
                    &format!("cannot start tasks on {name}: {e:#}"),
                )
            }
        };
        for (seq, line) in std::io::BufReader::new(reader).lines().enumerate() {
            let Ok(line) = line else { break };
            // Only the node's own events, in order, are believed.
            let line = match answer.open_event(seq as u64, &line) {
                Ok(plain) => plain,
                Err(e) => {
                    eprintln!("srun: error: {name}: {e}");
                    break;
                }
            };
            match serde_json::from_slice::<StepEvent>(&line) {
                Ok(StepEvent::Stdout { task, data }) => sink.write(task, false, &data),
                Ok(StepEvent::Stderr { task, data }) => sink.write(task, true, &data),
                Ok(StepEvent::Exit { task, code, signal }) => {
                    sink.flush_task(task);
                    ended += 1;
                    let status = code.unwrap_or_else(|| 128 + signal.unwrap_or(0));
                    let _ = done.send((status, signal));
                }
                Ok(StepEvent::Tick) => {}
                Ok(StepEvent::Failed { why }) => {
                    eprintln!("srun: error: {name}: {why}");
                }
                Err(e) => eprintln!("srun: warning: {name}: unreadable event: {e}"),
            }
        }
        if ended < count {
            fail(
                &done,
                count - ended,
                &format!("{name}: the connection ended before every task did"),
            );
        }
    });
}

/// Reports `count` tasks as failed, saying why.
fn fail(done: &mpsc::Sender<Ended>, count: usize, why: &str) {
    eprintln!("srun: error: {why}");
    for _ in 0..count {
        let _ = done.send((1, None));
    }
}

/// Where a remote node's task output goes: its `-o`/`-e` files (opened
/// here, named for the task and its node), else srun's own output,
/// prefixed with the task's rank under `--label` (whole lines only).
struct Sink {
    label: bool,
    output: Option<String>,
    error: Option<String>,
    job: u64,
    node: String,
    files: HashMap<(u32, bool), std::fs::File>,
    partial: HashMap<(u32, bool), String>,
}

impl Sink {
    fn write(&mut self, task: u32, stderr: bool, data: &str) {
        let pattern = match (stderr, &self.error, &self.output) {
            (true, Some(e), _) => Some(e.clone()),
            (_, _, Some(o)) => Some(o.clone()),
            _ => None,
        };
        if let Some(p) = pattern {
            // stderr into the -o file when there is no -e: one file.
            let key = (task, stderr && self.error.is_some());
            if !self.files.contains_key(&key) {
                match srun::output_file(&p, self.job, &self.node, task) {
                    Ok(f) => {
                        self.files.insert(key, f);
                    }
                    Err(e) => {
                        eprintln!("srun: error: {e:#}");
                        return;
                    }
                }
            }
            if let Some(f) = self.files.get_mut(&key) {
                let _ = f.write_all(data.as_bytes());
            }
            return;
        }
        if !self.label {
            emit(stderr, data);
            return;
        }
        let buf = self.partial.entry((task, stderr)).or_default();
        buf.push_str(data);
        while let Some(at) = buf.find('\n') {
            let line: String = buf.drain(..=at).collect();
            emit(stderr, &format!("{task}: {line}"));
        }
    }

    /// Writes what is left of a task's last line.
    fn flush_task(&mut self, task: u32) {
        for stderr in [false, true] {
            if let Some(rest) = self
                .partial
                .remove(&(task, stderr))
                .filter(|r| !r.is_empty())
            {
                emit(stderr, &format!("{task}: {rest}\n"));
            }
        }
    }
}

fn emit(stderr: bool, text: &str) {
    let _ = if stderr {
        std::io::stderr().lock().write_all(text.as_bytes())
    } else {
        let mut out = std::io::stdout().lock();
        out.write_all(text.as_bytes()).and_then(|()| out.flush())
    };
}
