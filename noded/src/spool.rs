//! A job's spool directory: what the shepherd needs to run it, and what it
//! leaves behind for gnoded (pid, exit status, cancel/timeout markers).

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use gsched_core::job::JobId;
use serde::{Deserialize, Serialize};

/// Everything the shepherd needs, written by gnoded before it starts one.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ShepherdSpec {
    pub job_id: JobId,
    pub script: PathBuf,
    pub argv: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub cwd: String,
    pub stdout: String,
    pub stderr: String,
    pub uid: u32,
    pub gid: u32,
    pub user_name: String,
    /// Switch to `uid`/`gid` before running (gnoded runs as root).
    pub drop_privileges: bool,
    /// Unix seconds when the job started, and its limit: gnoded re-arms the
    /// time limit from these when it adopts a running job after a restart.
    pub start_time: i64,
    pub time_limit: Option<u64>,
    /// Append to the output files instead of truncating them
    /// (`--open-mode=append`).
    #[serde(default)]
    pub append: bool,
    /// `--signal`: send this signal this many seconds before the time
    /// limit, to the batch shell only or to the whole job.
    #[serde(default)]
    pub warn_signal: Option<gsched_core::job::WarnSignal>,
}

/// What the shepherd records when the script ends (or could not start).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShepherdStatus {
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// Set when the script could not be started at all.
    pub error: Option<String>,
    pub end_time: i64,
}

/// The files of one job's spool directory.
#[derive(Debug, Clone)]
pub struct JobSpool {
    pub dir: PathBuf,
}

impl JobSpool {
    pub fn new(root: &Path, job: JobId) -> JobSpool {
        JobSpool {
            dir: root.join(format!("job-{job}")),
        }
    }

    /// The job id of a spool directory name (`job-12`).
    pub fn job_of(dir: &Path) -> Option<JobId> {
        dir.file_name()?
            .to_str()?
            .strip_prefix("job-")?
            .parse()
            .ok()
    }

    pub fn spec_path(&self) -> PathBuf {
        self.dir.join("launch.json")
    }
    pub fn script_path(&self) -> PathBuf {
        self.dir.join("script")
    }
    pub fn pid_path(&self) -> PathBuf {
        self.dir.join("shepherd.pid")
    }
    pub fn status_path(&self) -> PathBuf {
        self.dir.join("status.json")
    }
    pub fn log_path(&self) -> PathBuf {
        self.dir.join("shepherd.log")
    }
    fn marker(&self, what: &str) -> PathBuf {
        self.dir.join(what)
    }

    pub fn read_spec(&self) -> std::io::Result<ShepherdSpec> {
        let text = std::fs::read_to_string(self.spec_path())?;
        serde_json::from_str(&text).map_err(std::io::Error::other)
    }

    /// Writes `value` as JSON atomically (temporary file, then rename). Not
    /// fsynced: these files must survive a crash of gnoded, not of the
    /// machine (a rebooted machine has no running jobs to adopt).
    pub fn write_json<T: Serialize>(&self, path: &Path, value: &T) -> std::io::Result<()> {
        let tmp = path.with_extension("tmp");
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&serde_json::to_vec(value).map_err(std::io::Error::other)?)?;
        std::fs::rename(&tmp, path)
    }

    pub fn read_status(&self) -> Option<ShepherdStatus> {
        let text = std::fs::read_to_string(self.status_path()).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// Records the shepherd's pid and its start time (to recognise it later).
    pub fn write_pid(&self, pid: i32, starttime: u64) -> std::io::Result<()> {
        std::fs::write(self.pid_path(), format!("{pid} {starttime}\n"))
    }

    pub fn read_pid(&self) -> Option<(i32, u64)> {
        let text = std::fs::read_to_string(self.pid_path()).ok()?;
        let mut it = text.split_whitespace();
        Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
    }

    /// Marks why gnoded is stopping the job, so the reason survives a restart.
    pub fn mark(&self, what: &str) {
        let _ = std::fs::write(self.marker(what), b"");
    }

    pub fn is_marked(&self, what: &str) -> bool {
        self.marker(what).exists()
    }

    pub fn remove(&self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Checks that users other than the owner can pass through every directory
/// above `dir` (a root gnoded runs jobs as their users, who must reach their
/// spool). Returns the first directory that blocks them.
pub fn check_reachable(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    for d in dir.ancestors() {
        if let Ok(meta) = std::fs::metadata(d) {
            let mode = meta.permissions().mode();
            if mode & 0o001 == 0 {
                return Err(format!(
                    "job users cannot reach the spool {}: {} has mode {:o}; run `chmod o+x {}` or choose another --state-dir",
                    dir.display(),
                    d.display(),
                    mode & 0o777,
                    d.display()
                ));
            }
        }
    }
    Ok(())
}

/// Shepherd processes whose spool directory lies under `root`, found through
/// `/proc` (their command line names the directory): `(pid, spool dir)`.
/// This finds a shepherd even if gnoded died before writing its pid file.
pub fn shepherds_under(root: &Path) -> Vec<(i32, PathBuf)> {
    let mut found = Vec::new();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in procs.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        if args.len() >= 3 && args[1] == crate::shepherd::SHEPHERD_ARG.as_bytes() {
            let dir = PathBuf::from(std::ffi::OsStr::from_bytes(args[2]));
            if dir.starts_with(root) {
                found.push((pid, dir));
            }
        }
    }
    found
}

/// Start time of a process in clock ticks since boot (field 22 of
/// `/proc/PID/stat`), which tells a process apart from a later one that
/// reuses its pid.
/// A pidfd for `pid`: readable once the process has exited.
pub fn pidfd_open(pid: i32) -> std::io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: plain syscall; on success it returns a new file descriptor we own.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor returned by the kernel.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) })
}

pub fn process_starttime(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces: skip past its ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_starttime_is_readable_and_stable() {
        let me = std::process::id() as i32;
        let a = process_starttime(me).unwrap();
        assert_eq!(process_starttime(me), Some(a));
        assert_eq!(process_starttime(i32::MAX), None);
    }

    #[test]
    fn unreachable_spool_is_named() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let private = dir.path().join("private");
        std::fs::create_dir(&private).unwrap();
        std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let spool = private.join("spool");
        let err = check_reachable(&spool).unwrap_err();
        assert!(
            err.contains(&format!("{} has mode 700", private.display())),
            "{err}"
        );
        std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o711)).unwrap();
        assert_eq!(check_reachable(&spool), Ok(()));
    }

    #[test]
    fn spool_files_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let s = JobSpool::new(dir.path(), 12);
        std::fs::create_dir_all(&s.dir).unwrap();
        assert_eq!(JobSpool::job_of(&s.dir), Some(12));
        s.write_pid(42, 7).unwrap();
        assert_eq!(s.read_pid(), Some((42, 7)));
        let st = ShepherdStatus {
            exit_code: Some(3),
            signal: None,
            error: None,
            end_time: 9,
        };
        s.write_json(&s.status_path(), &st).unwrap();
        assert_eq!(s.read_status(), Some(st));
        assert!(!s.is_marked("cancelled"));
        s.mark("cancelled");
        assert!(s.is_marked("cancelled"));
    }
}
