//! The tasks of a step on this node when the job's batch script runs on
//! another (a job on several nodes, this node one of its sisters): `srun`
//! posts them with the controller's credential for this node
//! (`gsched_daemon::step_credential`); they start as the job's user, in
//! the step's cgroup below the job's, and their output and exit statuses
//! stream back on the response, one [`StepEvent`] per line. Who they run
//! as, where and in which cgroup comes from this node's own record of the
//! job (its spool), never from the request. If `srun` goes away, they are
//! killed.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;

use axum::body::Body as HttpBody;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use gsched_core::steps::{SealedStepTasks, StepEvent, StepTasks};
use gsched_daemon::http::{ApiError, Body};
use gsched_seal::StepSeal;
use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;
use tracing::{info, warn};

use super::NodeApi;
use crate::spool::ShepherdSpec;

/// The most tasks one step starts on one node.
const MAX_TASKS_PER_NODE: usize = 4096;

/// How often a step's stream carries a [`StepEvent::Tick`].
const TICK: std::time::Duration = std::time::Duration::from_secs(1);

/// Starts the step's tasks here and streams what they write and how they
/// end.
pub async fn run(State(api): State<Arc<NodeApi>>, Body(sealed): Body<SealedStepTasks>) -> Response {
    let launcher = &api.launcher;
    let node = launcher.node_name().to_string();
    // Sealed under the key of this step on this node, which only the
    // controller (and through it the job's owner) can have derived.
    let seal = StepSeal::for_step(&api.key, sealed.job, sealed.run, sealed.step, &node);
    let (req, answer) = match seal
        .open_request(&sealed.sealed)
        .map_err(|e| e.to_string())
        .and_then(|(plain, answer)| {
            serde_json::from_slice::<StepTasks>(&plain)
                .map(|r| (r, answer))
                .map_err(|e| e.to_string())
        }) {
        Ok((r, answer)) if (r.job, r.run, r.step) == (sealed.job, sealed.run, sealed.step) => {
            (r, answer)
        }
        Ok(_) => {
            return ApiError::new(StatusCode::FORBIDDEN, "the sealed step is for another step")
                .into_response()
        }
        Err(e) => return ApiError::new(StatusCode::FORBIDDEN, e).into_response(),
    };
    let claims = match gsched_daemon::step_credential::verify(
        &api.key,
        &req.credential,
        req.job,
        req.run,
        req.step,
        &node,
    ) {
        Ok(c) => c,
        Err(e) => return ApiError::new(StatusCode::FORBIDDEN, e.to_string()).into_response(),
    };
    // Issued before this gnoded started: a request sent while it was
    // away, which a squatter may have kept to replay (the node does not
    // remember across a restart which steps it started).
    if claims.issued_at() < api.started_at - gsched_daemon::step_credential::CLOCK_SLACK_SECS {
        return ApiError::new(
            StatusCode::FORBIDDEN,
            format!("the step credential was issued before gnoded on node {node} started; run srun again"),
        )
        .into_response();
    }
    if !launcher.is_running(req.job, req.run) {
        return ApiError::new(
            StatusCode::NOT_FOUND,
            format!(
                "run {} of job {} does not run on node {node}",
                req.run, req.job
            ),
        )
        .into_response();
    }
    if !launcher.first_start_of_step(req.job, req.run, req.step) {
        return ApiError::new(
            StatusCode::CONFLICT,
            format!(
                "step {}.{} already started on node {node}: a step credential starts its tasks once",
                req.job, req.step
            ),
        )
        .into_response();
    }
    let spool = launcher.spool(req.job);
    let spec = match spool.check_private().and_then(|()| spool.read_spec()) {
        Ok(s) if s.run == req.run => s,
        Ok(_) | Err(_) => {
            return ApiError::new(
                StatusCode::NOT_FOUND,
                format!(
                    "no record of job {} run {} on node {node}",
                    req.job, req.run
                ),
            )
            .into_response()
        }
    };
    if req.argv.is_empty() || req.tasks.is_empty() || req.tasks.len() > MAX_TASKS_PER_NODE {
        return ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!(
                "a step needs a command and from 1 to {MAX_TASKS_PER_NODE} tasks on a node (asked: {})",
                req.tasks.len()
            ),
        )
        .into_response();
    }
    let procs = match launcher.confinement().open_step(req.job, req.step) {
        Ok(p) => p,
        Err(e) => return ApiError::new(StatusCode::CONFLICT, e.to_string()).into_response(),
    };
    let (tx, rx) = mpsc::channel::<StepEvent>(256);
    tokio::spawn(start_and_watch(req, spec, procs, Arc::clone(launcher), tx));
    // Each event sealed with its number: srun believes only this node's.
    let lines =
        futures_util::stream::unfold((rx, answer, 0u64), |(mut rx, answer, seq)| async move {
            let e = rx.recv().await?;
            let plain = serde_json::to_vec(&e).expect("step events serialize");
            let mut line = answer.seal_event(seq, &plain).into_bytes();
            line.push(b'\n');
            Some((Ok::<_, std::io::Error>(line), (rx, answer, seq + 1)))
        });
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "application/x-ndjson")
        .body(HttpBody::from_stream(lines))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// Starts every task, forwards their output, reports their ends, then
/// ends the step's cgroup. Tasks are killed if the caller goes away.
async fn start_and_watch(
    req: StepTasks,
    spec: ShepherdSpec,
    procs: Vec<std::path::PathBuf>,
    launcher: Arc<crate::launcher::Launcher>,
    tx: mpsc::Sender<StepEvent>,
) {
    let confine = Arc::clone(launcher.confinement());
    let span = tracing::info_span!("step", job = req.job, step = req.step);
    let _g = span.enter();
    let mut children = Vec::new();
    let mut failed = None;
    match Prepared::new(&spec, &procs) {
        Err(why) => failed = Some(why.to_string()),
        Ok(prepared) => {
            let devices = task_devices(&req, &spec.env);
            for (local, rank) in req.tasks.iter().enumerate() {
                let env = gsched_core::steps::task_environment(
                    &req.env,
                    &spec.env,
                    req.node_id,
                    *rank,
                    local as u32,
                    devices
                        .as_ref()
                        .and_then(|d| d.get(local))
                        .map(String::as_str),
                );
                // Through a shell that gives it SLURM_TASK_PID (a missing
                // program ends the task 127, the shell saying why).
                let argv = gsched_core::env::with_task_pid(&req.argv);
                match prepared.spawn(&argv, &env, &spec.cwd) {
                    Ok(child) => children.push((*rank, child)),
                    Err(e) => {
                        failed = Some(format!("cannot start {} on this node: {e}", req.argv[0]));
                        break;
                    }
                }
            }
        }
    }
    drop(_g);
    if let Some(why) = failed {
        warn!(job = req.job, step = req.step, %why, "step tasks not started");
        for (_, c) in &mut children {
            let _ = c.start_kill();
        }
        let _ = tx.send(StepEvent::Failed { why }).await;
    }
    info!(
        job = req.job,
        step = req.step,
        tasks = children.len(),
        "step tasks started"
    );
    // Killed with the job (each task leads its own process group).
    let groups: Vec<i32> = children
        .iter()
        .filter_map(|(_, c)| c.id().map(|p| p as i32))
        .collect();
    for g in &groups {
        launcher.add_step_group(req.job, *g);
    }
    // A line now and then while the tasks run: writing it is how a
    // connection srun dropped is noticed (its tasks are then killed).
    let ticks = {
        let tx = tx.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(TICK).await;
                if tx.send(StepEvent::Tick).await.is_err() {
                    return;
                }
            }
        })
    };
    let mut waits = Vec::new();
    for (rank, mut child) in children {
        let out = child
            .stdout
            .take()
            .map(|o| forward(o, rank, false, tx.clone()));
        let err = child
            .stderr
            .take()
            .map(|e| forward(e, rank, true, tx.clone()));
        let tx = tx.clone();
        waits.push(tokio::spawn(async move {
            let status = tokio::select! {
                s = child.wait() => s.ok(),
                () = tx.closed() => {
                    // srun went away: its tasks go too.
                    let _ = child.start_kill();
                    child.wait().await.ok()
                }
            };
            for h in [out, err].into_iter().flatten() {
                let _ = h.await;
            }
            use std::os::unix::process::ExitStatusExt;
            let _ = tx
                .send(StepEvent::Exit {
                    task: rank,
                    code: status.and_then(|s| s.code()),
                    signal: status.and_then(|s| s.signal()),
                })
                .await;
        }));
    }
    drop(tx);
    for w in waits {
        let _ = w.await;
    }
    ticks.abort();
    for g in &groups {
        // Whatever a task left in its group goes with it.
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(*g),
            nix::sys::signal::Signal::SIGKILL,
        );
        launcher.remove_step_group(req.job, *g);
    }
    let (job, step) = (req.job, req.step);
    // Whatever the tasks left behind goes with the step's cgroup.
    let _ = tokio::task::spawn_blocking(move || {
        if let Err(e) = confine.end_step(job, step, 0) {
            warn!(job, step, error = %e, "cannot end the step's cgroup");
        }
    })
    .await;
}

/// Sends what a task writes, in pieces cut at UTF-8 character bounds.
fn forward(
    mut from: impl tokio::io::AsyncRead + Unpin + Send + 'static,
    task: u32,
    stderr: bool,
    tx: mpsc::Sender<StepEvent>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut buf = vec![0u8; 64 * 1024];
        let mut carry: Vec<u8> = Vec::new();
        loop {
            let n = match from.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            carry.extend_from_slice(&buf[..n]);
            let cut = match std::str::from_utf8(&carry) {
                Ok(_) => carry.len(),
                // An incomplete character at the end waits for the rest.
                Err(e) if e.error_len().is_none() => e.valid_up_to(),
                Err(_) => carry.len(),
            };
            let data = String::from_utf8_lossy(&carry[..cut]).into_owned();
            carry.drain(..cut);
            if send(&tx, task, stderr, data).await.is_err() {
                return;
            }
        }
        if !carry.is_empty() {
            let _ = send(
                &tx,
                task,
                stderr,
                String::from_utf8_lossy(&carry).into_owned(),
            )
            .await;
        }
    })
}

async fn send(
    tx: &mpsc::Sender<StepEvent>,
    task: u32,
    stderr: bool,
    data: String,
) -> Result<(), mpsc::error::SendError<StepEvent>> {
    tx.send(if stderr {
        StepEvent::Stderr { task, data }
    } else {
        StepEvent::Stdout { task, data }
    })
    .await
}

/// The devices each task here sees, where the step splits the node's
/// GPUs among its tasks; `None` when each sees all of them.
fn task_devices(req: &StepTasks, node_env: &BTreeMap<String, String>) -> Option<Vec<String>> {
    let visible = node_env.get("CUDA_VISIBLE_DEVICES")?;
    let bind = req
        .gpu_bind_single
        .map(gsched_core::allocation::GpuBind::Single);
    if req.gpus_per_task.is_none() && bind.is_none() {
        return None;
    }
    (0..req.tasks.len() as u32)
        .map(|t| gsched_core::env::task_devices(visible, req.gpus_per_task, bind, t))
        .collect()
}

/// The job's identity and cgroup, resolved before any task is started.
struct Prepared {
    /// The step's `cgroup.procs` files, open for writing.
    procs: Vec<OwnedFd>,
    identity: Option<(libc::uid_t, libc::gid_t, Vec<libc::gid_t>)>,
    umask: libc::mode_t,
    /// The submitter's limits (from the job's spool record).
    rlimits: gsched_core::rlimits::ResourceLimits,
}

/// Why a step's tasks could not be prepared on this node.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct StepSetupError(pub String);

impl From<String> for StepSetupError {
    fn from(why: String) -> Self {
        StepSetupError(why)
    }
}

impl From<&str> for StepSetupError {
    fn from(why: &str) -> Self {
        StepSetupError(why.to_string())
    }
}

impl Prepared {
    fn new(spec: &ShepherdSpec, procs: &[std::path::PathBuf]) -> Result<Prepared, StepSetupError> {
        let procs = procs
            .iter()
            .map(|p| {
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(p)
                    .map(OwnedFd::from)
                    .map_err(|e| {
                        StepSetupError(format!(
                            "cannot open the step's cgroup ({}): {e}",
                            p.display()
                        ))
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let identity = if spec.drop_privileges {
            if spec.uid == 0 {
                return Err(
                    "refusing to run a step's tasks as uid 0 for a job of another user".into(),
                );
            }
            let name = CString::new(spec.user_name.as_str())
                .map_err(|_| "the job's user name has a NUL byte".to_string())?;
            let gid = nix::unistd::Gid::from_raw(spec.gid);
            let groups = nix::unistd::getgrouplist(&name, gid).map_err(|e| {
                StepSetupError(format!("cannot read the groups of {}: {e}", spec.user_name))
            })?;
            Some((
                spec.uid,
                spec.gid,
                groups.iter().map(|g| g.as_raw()).collect(),
            ))
        } else {
            None
        };
        Ok(Prepared {
            procs,
            identity,
            umask: spec.umask as libc::mode_t,
            rlimits: spec.rlimits.clone(),
        })
    }

    /// Starts one task: into the step's cgroup while still root, then the
    /// job's groups, gid and uid (checked to stick), its umask and working
    /// directory, then the command.
    fn spawn(
        &self,
        argv: &[String],
        env: &BTreeMap<String, String>,
        cwd: &str,
    ) -> std::io::Result<tokio::process::Child> {
        let cwd = CString::new(cwd)
            .map_err(|_| std::io::Error::other("the working directory has a NUL byte"))?;
        let fds: Vec<i32> = self.procs.iter().map(|f| f.as_raw_fd()).collect();
        let identity = self.identity.clone();
        let umask = self.umask;
        let mut cmd = tokio::process::Command::new(&argv[0]);
        cmd.args(&argv[1..])
            .env_clear()
            .envs(env)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        let limits = gsched_daemon::island::prepare_limits(&self.rlimits);
        // SAFETY: between fork and exec the closure only makes system
        // calls (write, setgroups, setgid, setuid, umask, chdir) on memory
        // prepared before the fork; it allocates nothing.
        unsafe {
            cmd.pre_exec(move || {
                // A session of its own (so a process group too): no
                // terminal of gnoded's, no signals into gnoded's group.
                gsched_daemon::island::new_session().map_err(std::io::Error::from_raw_os_error)?;
                gsched_daemon::island::close_all_at_exec();
                gsched_daemon::island::apply_limits(&limits)
                    .map_err(std::io::Error::from_raw_os_error)?;
                for fd in &fds {
                    if libc::write(*fd, b"0".as_ptr().cast(), 1) != 1 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                if let Some((uid, gid, groups)) = &identity {
                    if libc::setgroups(groups.len() as _, groups.as_ptr()) != 0
                        || libc::setgid(*gid) != 0
                        || libc::setuid(*uid) != 0
                    {
                        return Err(std::io::Error::last_os_error());
                    }
                    // Never go on with a way back to root.
                    if libc::setuid(0) == 0 {
                        return Err(std::io::Error::from_raw_os_error(libc::EPERM));
                    }
                }
                libc::umask(umask);
                if libc::chdir(cwd.as_ptr()) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        cmd.spawn()
    }
}
