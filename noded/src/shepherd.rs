//! The job shepherd: a small process between gnoded and the batch script.
//!
//! gnoded starts it (as `gsched-shepherd __gsched_shepherd <spool-dir>`, or
//! its own binary with the same arguments) as the leader of a new process
//! group. The shepherd keeps gnoded's identity (root on a multi-user node)
//! for its whole life; only the script's process becomes the job's user:
//!
//! 1. it reads the launch spec from the spool, a directory only gnoded's
//!    user can write (checked again here, so a spool a user could have
//!    touched is never trusted);
//! 2. it writes the script into the spool itself, so no other process can
//!    hold the file open for writing when it is executed (no "Text file
//!    busy"), and hands the file to the job's user;
//! 3. it forks; the child joins the job's cgroup (gnoded made it), drops to the job's uid, gid and groups, takes the
//!    submitter's umask, changes to the working directory and opens the
//!    output files *as the user* (root never opens a path a user chose),
//!    then executes the script;
//! 4. it waits, and writes the exit status into the root-owned spool.
//!
//! Because it outlives gnoded, a restarted gnoded can adopt running jobs and
//! still learn how they ended.

use std::ffi::CString;
use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::{ForkResult, Gid, Pid, Uid};

use crate::spool::{JobSpool, ShepherdSpec, ShepherdStatus};

pub use crate::spool::SHEPHERD_ARG;

/// The small dedicated shepherd binary, installed next to the daemons.
pub const SHEPHERD_BIN: &str = "gsched-shepherd";

/// The program to start shepherds with: `gsched-shepherd` next to this
/// executable or in `../lib/gsched/` beside it (the packages' place) if it
/// is there (cheap to start), else this executable itself.
pub fn shepherd_program() -> std::io::Result<std::path::PathBuf> {
    let me = std::env::current_exe()?;
    Ok(beside_program(&me, SHEPHERD_BIN).unwrap_or(me))
}

/// `name` next to the program `exe`, else in `../lib/gsched/` beside it
/// (`/usr/sbin/gnoded` finds `/usr/lib/gsched/NAME`), if it is a file.
pub fn beside_program(exe: &Path, name: &str) -> Option<std::path::PathBuf> {
    let dir = exe.parent()?;
    [dir.join(name), dir.join("../lib/gsched").join(name)]
        .into_iter()
        .find(|p| p.is_file())
}

/// For a binary's `main`: runs the shepherd if called as one, and exits.
pub fn run_if_called_as_shepherd() {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if argv.len() == 3 && argv[1] == SHEPHERD_ARG {
        std::process::exit(main(Path::new(&argv[2])));
    }
}

extern "C" fn ignore(_: libc::c_int) {}

/// Runs the shepherd; returns the process exit code.
pub fn main(spool_dir: &Path) -> i32 {
    let spool = JobSpool {
        dir: spool_dir.to_path_buf(),
    };
    let spec = match spool.check_private().and_then(|()| spool.read_spec()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("shepherd: cannot read {}: {e}", spool.spec_path().display());
            return 2;
        }
    };
    let status = run(&spool, &spec);
    if let Err(e) = spool.write_json(&spool.status_path(), &status) {
        eprintln!("shepherd: cannot write exit status: {e}");
        return 2;
    }
    0
}

fn failed(why: String) -> ShepherdStatus {
    ShepherdStatus {
        exit_code: None,
        signal: None,
        error: Some(why),
        end_time: gsched_daemon::unix_now(),
    }
}

/// The job's identity, resolved before the fork.
struct Identity {
    uid: Uid,
    gid: Gid,
    groups: Vec<Gid>,
}

/// Why the shepherd could not set a job up (reported as the job's launch failure).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SetupFailed(pub String);

impl From<String> for SetupFailed {
    fn from(why: String) -> Self {
        SetupFailed(why)
    }
}

impl From<&str> for SetupFailed {
    fn from(why: &str) -> Self {
        SetupFailed(why.to_string())
    }
}

fn identity(spec: &ShepherdSpec) -> Result<Option<Identity>, SetupFailed> {
    if !spec.drop_privileges {
        return Ok(None);
    }
    if spec.uid == 0 {
        return Err("refusing to drop privileges to uid 0".into());
    }
    let name = CString::new(spec.user_name.as_str())
        .map_err(|_| "user name has a NUL byte".to_string())?;
    let gid = Gid::from_raw(spec.gid);
    let groups = nix::unistd::getgrouplist(&name, gid)
        .map_err(|e| SetupFailed(format!("cannot read the groups of {}: {e}", spec.user_name)))?;
    Ok(Some(Identity {
        uid: Uid::from_raw(spec.uid),
        gid,
        groups,
    }))
}

fn run(spool: &JobSpool, spec: &ShepherdSpec) -> ShepherdStatus {
    let who = match identity(spec) {
        Ok(w) => w,
        Err(e) => return failed(e.to_string()),
    };
    if let Err(e) = write_script(spool, spec, who.as_ref()) {
        return failed(e.to_string());
    }
    // Signals sent to the job's process group must not kill the shepherd:
    // catch them with a no-op handler (the script gets default handling, as
    // handlers do not survive exec).
    let action = SigAction::new(
        SigHandler::Handler(ignore),
        SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    for sig in [
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
        Signal::SIGQUIT,
        Signal::SIGUSR1,
        Signal::SIGUSR2,
        Signal::SIGALRM,
    ] {
        // SAFETY: the handler does nothing, which is async-signal-safe.
        let _ = unsafe { sigaction(sig, &action) };
    }
    let exec = match Exec::prepare(spec) {
        Ok(e) => e,
        Err(e) => return failed(e.to_string()),
    };
    let limits = gsched_daemon::island::prepare_limits(&spec.rlimits);
    let (err_read, err_write) = match nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC) {
        Ok(p) => p,
        Err(e) => return failed(format!("cannot create a pipe: {e}")),
    };
    // SAFETY: the shepherd is single-threaded, so the child may run any code
    // until it executes the script or exits.
    match unsafe { nix::unistd::fork() } {
        Err(e) => failed(format!("cannot fork: {e}")),
        Ok(ForkResult::Child) => {
            drop(err_read);
            let why = child(spec, who.as_ref(), &exec, &limits);
            let mut pipe = std::fs::File::from(err_write);
            let _ = pipe.write_all(why.as_bytes());
            // SAFETY: leaves the child without running the parent's exit
            // handlers or flushing its buffers twice.
            unsafe { libc::_exit(127) }
        }
        Ok(ForkResult::Parent { child }) => {
            drop(err_write);
            parent(child, err_read)
        }
    }
}

/// Writes the script into the spool (a fresh file: never one that exists,
/// never through a link) and gives it to the job's user.
fn write_script(
    spool: &JobSpool,
    spec: &ShepherdSpec,
    who: Option<&Identity>,
) -> Result<(), SetupFailed> {
    let path = spool.script_path();
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o700)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
        .map_err(|e| {
            SetupFailed(format!(
                "cannot write the batch script {}: {e}",
                path.display()
            ))
        })?;
    f.write_all(spec.script_body.as_bytes()).map_err(|e| {
        SetupFailed(format!(
            "cannot write the batch script {}: {e}",
            path.display()
        ))
    })?;
    if let Some(w) = who {
        nix::unistd::fchown(f.as_raw_fd(), Some(w.uid), Some(w.gid)).map_err(|e| {
            SetupFailed(format!(
                "cannot hand the batch script to the job's user: {e}"
            ))
        })?;
    }
    // Closed here, before the fork: nothing holds it open for writing when
    // it is executed.
    drop(f);
    Ok(())
}

/// What the child executes, converted before the fork.
struct Exec {
    program: CString,
    argv: Vec<CString>,
    env: Vec<CString>,
}

impl Exec {
    fn prepare(spec: &ShepherdSpec) -> Result<Exec, SetupFailed> {
        let c = |what: &str, s: &str| {
            CString::new(s).map_err(|_| SetupFailed(format!("the job's {what} has a NUL byte")))
        };
        let program = c("script path", &spec.script.display().to_string())?;
        let mut argv = vec![program.clone()];
        for a in &spec.argv {
            argv.push(c("arguments", a)?);
        }
        let mut env = Vec::with_capacity(spec.env.len());
        for (k, v) in &spec.env {
            env.push(c("environment", &format!("{k}={v}"))?);
        }
        Ok(Exec { program, argv, env })
    }
}

/// In the forked child: take the submitter's limits, become the user, open
/// the output files as the user, execute the script with descriptors 0-2
/// only. Returns why it could not (only on failure). (The session is the
/// shepherd's own, without a controlling terminal: gnoded started it with
/// `setsid`.)
fn child(
    spec: &ShepherdSpec,
    who: Option<&Identity>,
    exec: &Exec,
    limits: &[gsched_daemon::island::PreparedLimit],
) -> String {
    // Into the job's cgroup first, while still root: everything the script
    // starts is in it from its first instruction.
    for procs in &spec.cgroup_procs {
        if let Err(e) = std::fs::write(procs, "0") {
            return format!("cannot enter the job's cgroup ({}): {e}", procs.display());
        }
    }
    if let Err(errno) = gsched_daemon::island::apply_limits(limits) {
        return format!(
            "cannot apply the submitter's resource limits: {}",
            std::io::Error::from_raw_os_error(errno)
        );
    }
    if let Some(w) = who {
        if let Err(e) = nix::unistd::setgroups(&w.groups) {
            return format!("cannot set the groups of {}: {e}", spec.user_name);
        }
        if let Err(e) = nix::unistd::setgid(w.gid) {
            return format!("cannot switch to gid {}: {e}", spec.gid);
        }
        if let Err(e) = nix::unistd::setuid(w.uid) {
            return format!("cannot switch to uid {}: {e}", spec.uid);
        }
        // Never go on with a way back to root.
        if nix::unistd::setuid(Uid::from_raw(0)).is_ok() {
            return "dropping privileges did not stick".into();
        }
    }
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(
        spec.umask as libc::mode_t,
    ));
    // Default handling and an empty mask for the script.
    let _ = nix::sys::signal::sigprocmask(
        nix::sys::signal::SigmaskHow::SIG_SETMASK,
        Some(&SigSet::empty()),
        None,
    );
    if let Err(e) = std::env::set_current_dir(&spec.cwd) {
        return format!("cannot change to working directory {}: {e}", spec.cwd);
    }
    let open = |path: &str| -> Result<OwnedFd, String> {
        OpenOptions::new()
            .create(true)
            .write(true)
            .append(spec.append)
            .truncate(!spec.append)
            .mode(0o666)
            .open(path)
            .map(OwnedFd::from)
            .map_err(|e| format!("cannot open output file {path}: {e}"))
    };
    let out = match open(&spec.stdout) {
        Ok(f) => f,
        Err(e) => return e,
    };
    let err = if spec.stderr == spec.stdout {
        None
    } else {
        match open(&spec.stderr) {
            Ok(f) => Some(f),
            Err(e) => return e,
        }
    };
    let null = match std::fs::File::open("/dev/null") {
        Ok(f) => f,
        Err(e) => return format!("cannot open /dev/null: {e}"),
    };
    let err_fd = err.as_ref().unwrap_or(&out).as_raw_fd();
    for (from, to) in [(null.as_raw_fd(), 0), (out.as_raw_fd(), 1), (err_fd, 2)] {
        // SAFETY: plain dup2 on descriptors this process owns.
        if unsafe { libc::dup2(from, to) } < 0 {
            return format!(
                "cannot set up the job's standard streams: {}",
                std::io::Error::last_os_error()
            );
        }
    }
    // Nothing but 0-2 crosses into the job: not the error pipe (close on
    // exec already), not whatever gnoded inherited and passed on.
    gsched_daemon::island::close_all_at_exec();
    match nix::unistd::execve(&exec.program, &exec.argv, &exec.env) {
        Err(e) => format!("cannot execute the batch script: {e}"),
        Ok(never) => match never {},
    }
}

/// In the shepherd: learn whether the script started, then wait for it.
fn parent(child: Pid, err_read: OwnedFd) -> ShepherdStatus {
    let mut why = String::new();
    let _ = std::fs::File::from(err_read).read_to_string(&mut why);
    loop {
        match waitpid(child, None) {
            Ok(_) if !why.is_empty() => return failed(why),
            Ok(WaitStatus::Exited(_, code)) => {
                return ShepherdStatus {
                    exit_code: Some(code),
                    signal: None,
                    error: None,
                    end_time: gsched_daemon::unix_now(),
                }
            }
            Ok(WaitStatus::Signaled(_, sig, _)) => {
                return ShepherdStatus {
                    exit_code: None,
                    signal: Some(sig as i32),
                    error: None,
                    end_time: gsched_daemon::unix_now(),
                }
            }
            Ok(_) | Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return failed(format!("lost track of the batch script: {e}")),
        }
    }
}
