//! The job shepherd: a small process between gnoded and the batch script.
//!
//! gnoded starts it (as `gsched-shepherd __gsched_shepherd <spool-dir>`, or
//! its own binary with the same arguments) as the leader of a new process
//! group; it switches to the job's user, opens the output files, runs the
//! script in its own process group, waits, and writes the exit status into
//! the spool. Because it outlives gnoded, a restarted gnoded can adopt running
//! jobs and still learn how they ended.

use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};

use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};

use crate::spool::{JobSpool, ShepherdSpec, ShepherdStatus};

/// The argv[1] that makes a gsched binary act as a shepherd.
pub const SHEPHERD_ARG: &str = "__gsched_shepherd";

/// The small dedicated shepherd binary, installed next to the daemons.
pub const SHEPHERD_BIN: &str = "gsched-shepherd";

/// The program to start shepherds with: `gsched-shepherd` next to this
/// executable if it is there (cheap to start), else this executable itself.
pub fn shepherd_program() -> std::io::Result<std::path::PathBuf> {
    let me = std::env::current_exe()?;
    let small = me.with_file_name(SHEPHERD_BIN);
    Ok(if small.is_file() { small } else { me })
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
    let spec = match spool.read_spec() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("shepherd: cannot read {}: {e}", spool.spec_path().display());
            return 2;
        }
    };
    let status = run(&spec);
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

fn run(spec: &ShepherdSpec) -> ShepherdStatus {
    if spec.drop_privileges {
        if let Err(e) = become_user(spec) {
            return failed(e);
        }
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
    if let Err(e) = std::env::set_current_dir(&spec.cwd) {
        return failed(format!(
            "cannot change to working directory {}: {e}",
            spec.cwd
        ));
    }
    let open = |path: &str| {
        OpenOptions::new()
            .create(true)
            .write(true)
            .append(spec.append)
            .truncate(!spec.append)
            .mode(0o644)
            .open(path)
            .map_err(|e| format!("cannot open output file {path}: {e}"))
    };
    let out = match open(&spec.stdout) {
        Ok(f) => f,
        Err(e) => return failed(e),
    };
    let err = if spec.stderr == spec.stdout {
        out.try_clone()
            .map_err(|e| format!("cannot duplicate output file: {e}"))
    } else {
        open(&spec.stderr)
    };
    let err = match err {
        Ok(f) => f,
        Err(e) => return failed(e),
    };
    let child = Command::new(&spec.script)
        .args(&spec.argv)
        .env_clear()
        .envs(&spec.env)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => return failed(format!("cannot execute the batch script: {e}")),
    };
    match child.wait() {
        Ok(st) => ShepherdStatus {
            exit_code: st.code(),
            signal: st.signal(),
            error: None,
            end_time: gsched_daemon::unix_now(),
        },
        Err(e) => failed(format!("lost track of the batch script: {e}")),
    }
}

fn become_user(spec: &ShepherdSpec) -> Result<(), String> {
    use nix::unistd::{initgroups, setgid, setuid, Gid, Uid};
    let name = std::ffi::CString::new(spec.user_name.as_str())
        .map_err(|_| "user name has a NUL byte".to_string())?;
    let gid = Gid::from_raw(spec.gid);
    initgroups(&name, gid)
        .map_err(|e| format!("cannot set the groups of {}: {e}", spec.user_name))?;
    setgid(gid).map_err(|e| format!("cannot switch to gid {}: {e}", spec.gid))?;
    setuid(Uid::from_raw(spec.uid))
        .map_err(|e| format!("cannot switch to uid {}: {e}", spec.uid))?;
    Ok(())
}
