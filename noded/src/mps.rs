//! MPS control daemons: one `nvidia-cuda-mps-control -d` per instance whose
//! GPU layout says `mps = true`, each with its own pipe and log directory and
//! `CUDA_VISIBLE_DEVICES` set to the instance. gnoded finds a daemon it
//! started (or one left from its previous run) through /proc, restarts it
//! when it dies, and tells it `quit` on shutdown. It also reads each
//! server's log for fatal GPU errors: MPS handles one by tearing down every
//! client of the instance ([`parse_faults`]).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use std::os::unix::ffi::OsStrExt;

use anyhow::{bail, Context, Result};
use gsched_core::gpu::{Mps, MpsState};
use tracing::{info, warn};

use crate::spool::process_starttime;

/// The MPS server's log, in an instance's log directory.
const SERVER_LOG: &str = "server.log";

/// Default control program, looked up on PATH.
pub const MPS_CONTROL: &str = "nvidia-cuda-mps-control";

/// Longest pipe directory: `nvidia-cuda-mps-control -d` fails to start
/// when the directory's path is 88 characters or longer (it puts unix
/// sockets with longer names in it; seen on an H100, issue 17).
const MAX_PIPE_DIR: usize = 87;

/// The directory name of an instance's MPS files: the last group of its
/// UUID (12 hex digits, unique among a node's GPUs and MIG instances), so
/// the pipe path stays short; the whole UUID where it has no such group.
pub fn short_name(uuid: &str) -> &str {
    match uuid.rsplit_once('-') {
        Some((_, tail)) if tail.len() >= 8 && tail.bytes().all(|b| b.is_ascii_hexdigit()) => tail,
        _ => uuid,
    }
}

/// The pipe directory of each instance under `root`, checked against
/// the limit; an error says what is too long and what to do.
pub fn pipe_dirs(root: &Path, instances: &[String]) -> Result<Vec<PathBuf>> {
    let mut seen = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    for uuid in instances {
        let name = short_name(uuid);
        if !seen.insert(name) {
            bail!("two instances of this node share the MPS directory name {name} ({uuid})");
        }
        let pipe_dir = root.join(name).join("pipe");
        let len = pipe_dir.as_os_str().len();
        if len > MAX_PIPE_DIR {
            bail!(
                "the MPS pipe directory {} is {len} characters long; nvidia-cuda-mps-control needs fewer than {}: give gnoded a shorter state directory (--state-dir)",
                pipe_dir.display(),
                MAX_PIPE_DIR + 1
            );
        }
        out.push(pipe_dir);
    }
    Ok(out)
}

/// The MPS control daemons of this node.
pub struct MpsSupervisor {
    control: PathBuf,
    /// Where the daemons' directories are.
    root: PathBuf,
    servers: Mutex<Vec<MpsServer>>,
    /// Set by [`MpsSupervisor::quit_all`]: no daemon is (re)started after
    /// it, so a check running during shutdown cannot leave one behind.
    quitting: std::sync::atomic::AtomicBool,
}

struct MpsServer {
    instance: String,
    pipe_dir: PathBuf,
    log_dir: PathBuf,
    daemon: Option<(i32, u64)>,
    /// How much of the server's log has been read.
    log_read: u64,
    /// Why the log could not be read, when that was last logged (said
    /// once, not at every check).
    log_error: Option<String>,
    /// When the log was last read (unix ms): a fault found now happened
    /// after that.
    log_read_ms: Option<i64>,
}

/// A fatal GPU error an instance's MPS server handled, from its log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MpsFault {
    /// The process MPS reported the error in (on an H100 it named a
    /// neighbour of the process whose kernel faulted: it cannot tell).
    pub named: Option<u32>,
    /// Every client process it tore down.
    pub torn_down: Vec<u32>,
    /// When the server began handling it (its log's local time, as unix
    /// ms), if the line's time reads.
    pub at_ms: Option<i64>,
}

/// The time a server log line begins with, `[2026-11-24 08:06:42.661
/// Server 511] ...`, as unix ms (local time).
fn line_time_ms(line: &str) -> Option<i64> {
    let mut words = line.strip_prefix('[')?.split_whitespace();
    let text = format!("{} {}", words.next()?, words.next()?);
    gsched_daemon::clock::local_text_ms(&text)
}

/// The number after `key` in `text`.
fn number_after(text: &str, key: &str) -> Option<u32> {
    let rest = &text[text.find(key)? + key.len()..];
    let end = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    rest[..end].parse().ok()
}

/// The fatal GPU errors in an MPS server log, as the server logs them
/// (recorded on an H100, driver 580: `Client {PID: N, Context: 1}
/// encountered a fatal GPU error.`, `Server is handling a fatal GPU
/// error.`, one `Client {PID: N, Context ID: 1} on device 0 to be torn
/// down` per client, and the list of processes with a sticky error).
pub fn parse_faults(text: &str) -> Vec<MpsFault> {
    let mut faults: Vec<MpsFault> = Vec::new();
    let mut named = None;
    let mut sticky_list = false;
    for line in text.lines() {
        // `[2026-11-24 08:06:42.661 Server   511] message`
        let msg = line.split_once("] ").map_or(line, |(_, m)| m).trim();
        let bare_pid = msg.parse::<u32>().ok();
        if sticky_list {
            if let (Some(pid), Some(f)) = (bare_pid, faults.last_mut()) {
                if !f.torn_down.contains(&pid) {
                    f.torn_down.push(pid);
                }
                continue;
            }
            sticky_list = false;
        }
        if msg.ends_with("encountered a fatal GPU error.") {
            named = number_after(msg, "PID: ");
        } else if msg.starts_with("Server is handling a fatal GPU error") {
            faults.push(MpsFault {
                named: named.take(),
                torn_down: Vec::new(),
                at_ms: line_time_ms(line),
            });
        } else if msg.contains("to be torn down") || msg.contains("will be torn down") {
            let pid = number_after(msg, "PID: ").or_else(|| number_after(msg, "process "));
            if let (Some(pid), Some(f)) = (pid, faults.last_mut()) {
                if !f.torn_down.contains(&pid) {
                    f.torn_down.push(pid);
                }
            }
        } else if msg.starts_with("The following client process have a sticky error set") {
            sticky_list = true;
        }
    }
    faults
}

/// Most of a server log read in one check.
const LOG_READ_LIMIT: u64 = 1 << 20;

/// Reads `path` from `from` to its last complete line: the text and where
/// it ends. A file shorter than `from` was started anew: read from 0. The
/// log decides which jobs fail, so it is read only when this daemon's user
/// owns it and no one else may write it (an MPS server started for a job's
/// user, or a user's own file, is not believed); a link is not followed.
fn read_log_from(path: &Path, from: u64) -> std::io::Result<(String, u64)> {
    use std::io::{Read, Seek};
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(path)?;
    let meta = f.metadata()?;
    if meta.uid() != nix::unistd::geteuid().as_raw() || meta.mode() & 0o022 != 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!(
                "owned by uid {} with mode {:o}: only a log of this daemon's user that no one else may write is believed",
                meta.uid(),
                meta.mode() & 0o7777
            ),
        ));
    }
    let len = meta.len();
    let from = if len < from { 0 } else { from };
    f.seek(std::io::SeekFrom::Start(from))?;
    let mut buf = Vec::new();
    f.take(LOG_READ_LIMIT).read_to_end(&mut buf)?;
    let whole = buf.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    buf.truncate(whole);
    Ok((
        String::from_utf8_lossy(&buf).into_owned(),
        from + whole as u64,
    ))
}

/// The first file called `name` in the directories of `PATH`.
pub fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// Finds the control program: a configured path, else `nvidia-cuda-mps-control` on PATH.
pub fn control_program(configured: Option<&Path>) -> Result<PathBuf> {
    if let Some(p) = configured {
        if !p.is_file() {
            bail!("the MPS control program {} does not exist", p.display());
        }
        return Ok(p.to_path_buf());
    }
    find_on_path(MPS_CONTROL).with_context(|| {
            format!("a GPU layout asks for MPS but {MPS_CONTROL} is not on PATH; install the NVIDIA driver utilities or set mps_control in the GPU config")
        })
}

/// The daemon started with `control -d` for `pipe_dir`, found through
/// /proc: its arguments name the control program and `-d`, and its
/// environment names the pipe directory.
fn find_daemon(control: &Path, pipe_dir: &Path) -> Option<(i32, u64)> {
    let prog = control.file_name()?;
    let want = format!("CUDA_MPS_PIPE_DIRECTORY={}", pipe_dir.display());
    let mut found: Option<(i32, u64)> = None;
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        let names_prog = args
            .iter()
            .take(2)
            .any(|a| Path::new(std::ffi::OsStr::from_bytes(a)).file_name() == Some(prog));
        if !names_prog || !args.contains(&&b"-d"[..]) {
            continue;
        }
        let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        if !environ.split(|b| *b == 0).any(|v| v == want.as_bytes()) {
            continue;
        }
        let Some(start) = process_starttime(pid).filter(|s| alive(Some((pid, *s)))) else {
            continue;
        };
        // A forked daemon may have a parent still exiting: take the newest.
        if found.is_none_or(|(_, s)| start >= s) {
            found = Some((pid, start));
        }
    }
    found
}

/// Whether the process is the one that started at `start` and not a zombie.
fn alive(daemon: Option<(i32, u64)>) -> bool {
    let Some((pid, start)) = daemon else {
        return false;
    };
    let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.get(s.rfind(')')? + 2..)
                .map(|r| r.starts_with(['Z', 'X']))
        })
        .unwrap_or(true);
    !zombie && process_starttime(pid) == Some(start)
}

/// Runs `cmd` to completion, killing it after `limit`.
fn run_bounded(
    mut cmd: Command,
    input: Option<&str>,
    limit: Duration,
) -> Result<std::process::ExitStatus> {
    cmd.stdin(if input.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::null())
    .stderr(Stdio::null());
    let mut child = cmd.spawn()?;
    if let (Some(text), Some(mut stdin)) = (input, child.stdin.take()) {
        stdin.write_all(text.as_bytes())?;
    }
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!("did not finish within {}s", limit.as_secs());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl MpsServer {
    /// The server of `uuid` with its pipe directory, its daemon started
    /// (or adopted) where it can be.
    fn started(control: &Path, uuid: &str, pipe_dir: PathBuf) -> MpsServer {
        let log_dir = pipe_dir.with_file_name("log");
        // Faults logged before this start are not this run's to report.
        let log_read = std::fs::symlink_metadata(log_dir.join(SERVER_LOG))
            .map(|m| m.len())
            .unwrap_or(0);
        let mut s = MpsServer {
            instance: uuid.to_string(),
            pipe_dir,
            log_dir,
            daemon: None,
            log_read,
            log_error: None,
            log_read_ms: None,
        };
        if let Err(e) = s.ensure_started(control) {
            warn!(instance = %uuid, error = format!("{e:#}"), "MPS control daemon did not start; will retry");
        }
        s
    }

    /// Its directories and whether its daemon runs.
    fn status(&self) -> Mps {
        Mps {
            pipe_dir: self.pipe_dir.display().to_string(),
            log_dir: self.log_dir.display().to_string(),
            state: if alive(self.daemon) {
                MpsState::Running
            } else {
                MpsState::Down
            },
        }
    }

    /// The MPS control program's whole environment: where to find its
    /// programs and libraries, and its instance's directories. Nothing
    /// else of gnoded's (such as systemd's `NOTIFY_SOCKET`) reaches it or
    /// the servers it starts for jobs' users.
    fn env(&self, cmd: &mut Command) {
        cmd.env_clear();
        for kept in ["PATH", "LD_LIBRARY_PATH"] {
            if let Some(v) = std::env::var_os(kept) {
                cmd.env(kept, v);
            }
        }
        cmd.env("CUDA_MPS_PIPE_DIRECTORY", &self.pipe_dir)
            .env("CUDA_MPS_LOG_DIRECTORY", &self.log_dir)
            .env("CUDA_VISIBLE_DEVICES", &self.instance);
    }

    /// Starts the daemon unless one for this pipe directory already runs.
    fn ensure_started(&mut self, control: &Path) -> Result<()> {
        if alive(self.daemon) {
            return Ok(());
        }
        if let Some(d) = find_daemon(control, &self.pipe_dir) {
            info!(instance = %self.instance, pid = d.0, "MPS control daemon already running; adopted");
            self.daemon = Some(d);
            return Ok(());
        }
        for dir in [&self.pipe_dir, &self.log_dir] {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            // Job users must reach the pipe directory; the log is readable.
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))?;
        }
        let mut cmd = Command::new(control);
        cmd.arg("-d");
        self.env(&mut cmd);
        // Not a job process, but nothing of gnoded's reaches it (and
        // through it the jobs' clients): a session of its own, no
        // controlling terminal, only descriptors 0-2.
        // SAFETY: the hook calls only async-signal-safe functions
        // (setsid, close_range or fcntl).
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
                gsched_daemon::island::new_session().map_err(std::io::Error::from_raw_os_error)?;
                gsched_daemon::island::close_all_at_exec();
                Ok(())
            });
        }
        let status = run_bounded(cmd, None, Duration::from_secs(15))
            .with_context(|| format!("cannot run {} -d", control.display()))?;
        if !status.success() {
            bail!(
                "{} -d failed ({status}); see {}",
                control.display(),
                self.log_dir.join("control.log").display()
            );
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            if let Some(d) = find_daemon(control, &self.pipe_dir) {
                info!(instance = %self.instance, pid = d.0, pipe_dir = %self.pipe_dir.display(), "MPS control daemon started");
                self.daemon = Some(d);
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!("{} -d exited but no daemon is running", control.display());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn quit(&mut self, control: &Path) {
        if !alive(self.daemon) {
            self.daemon = find_daemon(control, &self.pipe_dir);
        }
        let Some((pid, _)) = self.daemon else {
            return;
        };
        let mut cmd = Command::new(control);
        self.env(&mut cmd);
        if let Err(e) = run_bounded(cmd, Some("quit\n"), Duration::from_secs(10)) {
            warn!(instance = %self.instance, error = %e, "cannot send quit to the MPS control daemon");
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while alive(self.daemon) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        if alive(self.daemon) {
            warn!(instance = %self.instance, pid, "MPS control daemon ignored quit; sending SIGTERM");
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            );
        } else {
            info!(instance = %self.instance, pid, "MPS control daemon stopped");
        }
        self.daemon = None;
    }
}

impl MpsSupervisor {
    /// Starts (or adopts) one daemon per instance in `instances`, with
    /// directories under `root`. A daemon that cannot start is logged and
    /// retried by [`MpsSupervisor::check`]; its instance reports MPS down.
    pub fn start(control: PathBuf, root: &Path, instances: &[String]) -> Result<MpsSupervisor> {
        let mut servers = Vec::new();
        for (uuid, pipe_dir) in instances.iter().zip(pipe_dirs(root, instances)?) {
            servers.push(MpsServer::started(&control, uuid, pipe_dir));
        }
        Ok(MpsSupervisor {
            control,
            root: root.to_path_buf(),
            servers: Mutex::new(servers),
            quitting: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Starts (or adopts) a daemon for an instance made after start (a MIG
    /// re-partition); returns its directories and state. One that cannot
    /// start is retried by [`MpsSupervisor::check`], as at start.
    pub fn add(&self, uuid: &str) -> Result<Mps> {
        let mut servers = self.servers.lock().unwrap_or_else(|e| e.into_inner());
        if self.quitting.load(std::sync::atomic::Ordering::SeqCst) {
            bail!("gnoded is shutting down: no MPS daemon is started");
        }
        let mut names: Vec<String> = servers
            .iter()
            .map(|s| s.instance.clone())
            .filter(|i| i != uuid)
            .collect();
        names.push(uuid.to_string());
        let pipe_dir = pipe_dirs(&self.root, &names)?
            .pop()
            .context("no pipe directory")?;
        servers.retain(|s| s.instance != uuid);
        let s = MpsServer::started(&self.control, uuid, pipe_dir);
        let mps = s.status();
        servers.push(s);
        Ok(mps)
    }

    /// Tells the daemon of an instance about to be destroyed `quit`, and
    /// forgets it.
    pub fn remove(&self, uuid: &str) {
        let mut servers = self.servers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(k) = servers.iter().position(|s| s.instance == uuid) {
            let mut s = servers.remove(k);
            s.quit(&self.control);
        }
    }

    /// Restarts daemons that died. Returns how many were (re)started: none
    /// once [`MpsSupervisor::quit_all`] has begun.
    pub fn check(&self) -> usize {
        let mut servers = self.servers.lock().unwrap_or_else(|e| e.into_inner());
        if self.quitting.load(std::sync::atomic::Ordering::SeqCst) {
            return 0;
        }
        let mut started = 0;
        for s in servers.iter_mut() {
            if alive(s.daemon) {
                continue;
            }
            warn!(instance = %s.instance, "MPS control daemon is not running; restarting it");
            s.daemon = None;
            match s.ensure_started(&self.control) {
                Ok(()) => started += 1,
                Err(e) => {
                    warn!(instance = %s.instance, error = format!("{e:#}"), "MPS restart failed")
                }
            }
        }
        started
    }

    /// The fatal GPU errors each instance's MPS server logged since the
    /// last call.
    pub fn faults(&self) -> Vec<(String, MpsFault)> {
        let mut servers = self.servers.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = Vec::new();
        for s in servers.iter_mut() {
            let path = s.log_dir.join(SERVER_LOG);
            let now = crate::probe::now_ms();
            match read_log_from(&path, s.log_read) {
                Ok((text, end)) => {
                    s.log_read = end;
                    s.log_error = None;
                    let read_before = s.log_read_ms.replace(now);
                    out.extend(parse_faults(&text).into_iter().map(|mut f| {
                        f.at_ms = gsched_core::mps_recovery::fault_time(f.at_ms, read_before, now);
                        (s.instance.clone(), f)
                    }));
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    let why = e.to_string();
                    if s.log_error.as_ref() != Some(&why) {
                        warn!(instance = %s.instance, path = %path.display(), error = %why, "cannot read the MPS server log: its fatal GPU errors are not seen");
                        s.log_error = Some(why);
                    }
                }
            }
        }
        out
    }

    /// Each supervised instance's MPS directories and state.
    pub fn status(&self) -> BTreeMap<String, Mps> {
        let servers = self.servers.lock().unwrap_or_else(|e| e.into_inner());
        servers
            .iter()
            .map(|s| (s.instance.clone(), s.status()))
            .collect()
    }

    /// The daemon's pid for `instance`, if it runs.
    pub fn pid(&self, instance: &str) -> Option<i32> {
        let servers = self.servers.lock().unwrap_or_else(|e| e.into_inner());
        servers
            .iter()
            .find(|s| s.instance == instance && alive(s.daemon))
            .and_then(|s| s.daemon.map(|d| d.0))
    }

    /// Tells every daemon `quit` and waits for it to go; none is started
    /// again after this.
    pub fn quit_all(&self) {
        let mut servers = self.servers.lock().unwrap_or_else(|e| e.into_inner());
        self.quitting
            .store(true, std::sync::atomic::Ordering::SeqCst);
        for s in servers.iter_mut() {
            s.quit(&self.control);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/fake-mps-control")
    }

    #[test]
    fn lifecycle_with_a_fake_control_program() {
        let dir = tempfile::tempdir().unwrap();
        let inst = vec!["MIG-test-a".to_string(), "MIG-test-b".to_string()];
        let sup = MpsSupervisor::start(fake(), dir.path(), &inst).unwrap();
        let st = sup.status();
        assert!(st.values().all(|m| m.state == MpsState::Running), "{st:?}");
        let a = sup.pid("MIG-test-a").unwrap();
        let b = sup.pid("MIG-test-b").unwrap();
        assert_ne!(a, b, "one daemon per instance");
        let log = std::fs::read_to_string(dir.path().join("MIG-test-a/log/control.log")).unwrap();
        assert!(log.contains("started for MIG-test-a"), "{log}");

        // A second supervisor (gnoded restarted) adopts instead of starting twice.
        let again = MpsSupervisor::start(fake(), dir.path(), &inst[..1]).unwrap();
        assert_eq!(again.pid("MIG-test-a"), Some(a));
        drop(again);

        // A dead daemon is noticed and restarted.
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(a),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while process_starttime(a).is_some() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(sup.status()["MIG-test-a"].state, MpsState::Down);
        assert_eq!(sup.check(), 1);
        let a2 = sup.pid("MIG-test-a").unwrap();
        assert_ne!(a, a2);
        assert_eq!(sup.check(), 0);

        // Shutdown says quit; the daemons are gone.
        sup.quit_all();
        assert!(find_daemon(&fake(), &dir.path().join("MIG-test-a/pipe")).is_none());
        assert!(find_daemon(&fake(), &dir.path().join("MIG-test-b/pipe")).is_none());
        let log = std::fs::read_to_string(dir.path().join("MIG-test-b/log/control.log")).unwrap();
        assert!(log.lines().any(|l| l == "quit"), "{log}");
        assert!(sup.status().values().all(|m| m.state == MpsState::Down));
        // A check during shutdown (the periodic one, or a job's end) does
        // not start them again: one did, and outlived gsched.
        assert_eq!(sup.check(), 0);
        assert!(find_daemon(&fake(), &dir.path().join("MIG-test-a/pipe")).is_none());
    }

    #[test]
    fn pipe_directories_are_short_or_refused_with_the_way_out() {
        let mig = "MIG-1d2c3b4a-5e6f-5a7b-8c9d-0123456789ab";
        let gpu = "GPU-b2971d38-0083-3112-3e14-fa18288f4820";
        assert_eq!(short_name(mig), "0123456789ab");
        assert_eq!(short_name(gpu), "fa18288f4820");
        assert_eq!(short_name("MIG-test-a"), "MIG-test-a");
        // A state directory as deep as the one MPS failed under (a pipe
        // path of 88 characters or more with the full UUID) now fits.
        let root = Path::new("/tmp/gsched-bench/state-abcdefgh/mps/node1");
        let dirs = pipe_dirs(root, &[mig.into(), gpu.into()]).unwrap();
        assert_eq!(dirs[0], root.join("0123456789ab/pipe"));
        assert!(dirs.iter().all(|d| d.as_os_str().len() < 88));
        assert!(root.join(mig).join("pipe").as_os_str().len() >= 88);
        // Too deep even so: refused, naming the path, its length and the fix.
        let deep =
            Path::new("/var/lib/a-very-long-site-specific-prefix/gsched/state/mps/gpu-node-0001");
        let e = pipe_dirs(deep, &[mig.into()]).unwrap_err().to_string();
        assert!(
            e.contains("characters long") && e.contains("--state-dir"),
            "{e}"
        );
        // Two instances that would share a directory: refused.
        let twin = "MIG-ffffffff-5e6f-5a7b-8c9d-0123456789ab";
        assert!(pipe_dirs(root, &[mig.into(), twin.into()]).is_err());
    }

    /// What the MPS server logged on an H100 when a client read out of
    /// bounds (docs/hardware/2026-11-24-h100-mps-fault/check.log): it
    /// named the victim, 474, not the faulting process, 494.
    const H100_LOG: &str = "\
[2026-11-24 08:06:42.270 Server   511] Status of client {PID: 494, Context ID: 1} is ACTIVE
[2026-11-24 08:06:42.661 Server   511] Client {PID: 474, Context: 1} encountered a fatal GPU error.
[2026-11-24 08:06:42.661 Server   511] Server is handling a fatal GPU error.
[2026-11-24 08:06:42.661 Server   511] Client {PID: 474, Context ID: 1} on device 0 to be torn down
[2026-11-24 08:06:42.661 Server   511] Client {PID: 494, Context ID: 1} on device 0 to be torn down
[2026-11-24 08:06:42.661 Server   511] All clients belonging to error trigging process 474 will be torn down
[2026-11-24 08:06:42.661 Server   511] Client {PID: 474, Context ID: 1} on the error-trigging process 474 to be torn down
[2026-11-24 08:06:42.661 Server   511] The following devices will be reset:
[2026-11-24 08:06:42.661 Server   511] 0
[2026-11-24 08:06:42.661 Server   511] The following client process have a sticky error set:
[2026-11-24 08:06:42.661 Server   511] 474
[2026-11-24 08:06:42.661 Server   511] 494
[2026-11-24 08:06:42.960 Server   511] Server failed to recevie command with status 806, assuming client {PID: 494, Context ID: 1} exit
";

    #[test]
    fn fatal_errors_are_read_from_the_server_log() {
        assert_eq!(
            parse_faults(H100_LOG),
            vec![MpsFault {
                named: Some(474),
                torn_down: vec![474, 494],
                at_ms: gsched_daemon::clock::local_text_ms("2026-11-24 08:06:42.661"),
            }]
        );
        assert!(parse_faults("[x Server 1] Server has started\n").is_empty());
        // The log is read where the last read stopped, whole lines only.
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join(SERVER_LOG);
        std::fs::write(&log, &H100_LOG[..200]).unwrap();
        let (first, at) = read_log_from(&log, 0).unwrap();
        assert!(first.ends_with('\n') && at as usize == first.len());
        std::fs::write(&log, H100_LOG).unwrap();
        let (rest, end) = read_log_from(&log, at).unwrap();
        assert_eq!(format!("{first}{rest}"), H100_LOG);
        assert_eq!(end as usize, H100_LOG.len());
        // A log started anew is read from its start; a link is not followed.
        std::fs::write(&log, "short\n").unwrap();
        assert_eq!(read_log_from(&log, end).unwrap().0, "short\n");
        let link = dir.path().join("link.log");
        std::os::unix::fs::symlink(&log, &link).unwrap();
        assert!(read_log_from(&link, 0).is_err());
        // A log others may write is not believed.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&log, std::fs::Permissions::from_mode(0o666)).unwrap();
        let e = read_log_from(&log, 0).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied, "{e}");
    }

    #[test]
    fn a_failing_control_program_leaves_the_instance_down() {
        let dir = tempfile::tempdir().unwrap();
        let sup = MpsSupervisor::start("/bin/false".into(), dir.path(), &["GPU-x".into()]).unwrap();
        assert_eq!(sup.status()["GPU-x"].state, MpsState::Down);
        assert_eq!(sup.check(), 0);
        assert!(control_program(Some(Path::new("/nonexistent/mps"))).is_err());
    }
}
