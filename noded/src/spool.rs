//! A job's spool directory: what the shepherd needs to run it, and what it
//! leaves behind for gnoded (pid, exit status, cancel/timeout markers).
//!
//! The directory and every file in it but the script belong to gnoded's
//! user (root on a multi-user node) and only it may write there: a job's
//! user can neither change what the shepherd reads (uid, script, flags)
//! nor plant links where root writes. The directory is 0711 when the job
//! runs as another user (who must reach the script to execute it), 0700
//! otherwise; the script is the user's, 0700.

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
    /// The run generation this launch is (reported back with its end).
    #[serde(default)]
    pub run: u32,
    /// Where the shepherd writes the script and what it executes.
    pub script: PathBuf,
    /// The script's text.
    pub script_body: String,
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
    /// The submitter's umask, for the files the job creates (`SLURM_UMASK`).
    #[serde(default = "default_umask")]
    pub umask: u32,
    /// The `cgroup.procs` files the script's process joins before it
    /// drops privileges (empty where jobs are not confined).
    #[serde(default)]
    pub cgroup_procs: Vec<PathBuf>,
    /// The cores the job holds on this node.
    #[serde(default)]
    pub cpus: Vec<u32>,
    /// The job's memory limit as its user gave it (`--mem=100M`), for the
    /// reason of an OUT_OF_MEMORY end.
    #[serde(default)]
    pub memory_limit: Option<String>,
    /// The instances an isolated job holds (UUIDs): held again, and
    /// closed to shared jobs, when gnoded adopts the job after a restart.
    /// (Specs written before jobs could hold several name one, as
    /// `instance`.)
    #[serde(default, alias = "instance", deserialize_with = "one_or_many")]
    pub instances: Vec<String>,
    /// The submitter's resource limits, applied under the node's hard
    /// limits before the script runs.
    #[serde(default)]
    pub rlimits: gsched_core::rlimits::ResourceLimits,
    /// What sets a shared job's GPU memory budget here
    /// (`gsched_core::placement::budget`), kept so an adopted job keeps it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_budget: Option<gsched_core::placement::budget::BudgetInput>,
}

/// A list of UUIDs, or one UUID (or null) as older specs wrote it.
fn one_or_many<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(Option<String>),
        Many(Vec<String>),
    }
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::One(one) => one.into_iter().collect(),
        OneOrMany::Many(many) => many,
    })
}

fn default_umask() -> u32 {
    gsched_core::job::DEFAULT_UMASK
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
    /// What the job's cgroup counted when it ended (see `crate::confine`).
    pub fn cgroup_path(&self) -> PathBuf {
        self.dir.join("cgroup.json")
    }
    /// A fatal GPU fault that hit the run (`gsched_core::outcome::GpuFault`).
    pub fn gpu_fault_path(&self) -> PathBuf {
        self.dir.join("gpu-fault.json")
    }
    /// The use of the job's `srun` steps that ended (kept across gnoded
    /// restarts while the job runs).
    pub fn steps_path(&self) -> PathBuf {
        self.dir.join("steps.json")
    }
    /// The run's suspensions (`gsched_core::suspension::Suspension`):
    /// whether it is stopped, and for how long it was.
    pub fn suspension_path(&self) -> PathBuf {
        self.dir.join("suspension.json")
    }

    /// The run's suspensions as recorded (none where nothing is).
    pub fn read_suspension(&self) -> gsched_core::suspension::Suspension {
        std::fs::read_to_string(self.suspension_path())
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_default()
    }

    fn marker(&self, what: &str) -> PathBuf {
        self.dir.join(what)
    }

    pub fn read_spec(&self) -> std::io::Result<ShepherdSpec> {
        let text = std::fs::read_to_string(self.spec_path())?;
        serde_json::from_str(&text).map_err(std::io::Error::other)
    }

    /// Checks that only this process's user can have written the directory
    /// and its launch spec (the shepherd's check before it trusts them).
    pub fn check_private(&self) -> std::io::Result<()> {
        use gsched_daemon::state::{check_owned, Kind};
        check_owned(&self.dir, Kind::OwnerWritten)
            .and_then(|()| check_owned(&self.spec_path(), Kind::OwnerWritten))
            .map_err(std::io::Error::other)
    }

    /// Writes `value` as JSON atomically (temporary file, then rename). Not
    /// fsynced: these files must survive a crash of gnoded, not of the
    /// machine (a rebooted machine has no running jobs to adopt).
    pub fn write_json<T: Serialize>(&self, path: &Path, value: &T) -> std::io::Result<()> {
        let tmp = path.with_extension("tmp");
        let mut f = create_private(&tmp)?;
        f.write_all(&serde_json::to_vec(value).map_err(std::io::Error::other)?)?;
        drop(f);
        std::fs::rename(&tmp, path)
    }

    pub fn read_status(&self) -> Option<ShepherdStatus> {
        let text = std::fs::read_to_string(self.status_path()).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// Records the shepherd's pid and its start time (to recognise it later).
    pub fn write_pid(&self, pid: i32, starttime: u64) -> std::io::Result<()> {
        create_private(&self.pid_path())?.write_all(format!("{pid} {starttime}\n").as_bytes())
    }

    pub fn read_pid(&self) -> Option<(i32, u64)> {
        let text = std::fs::read_to_string(self.pid_path()).ok()?;
        let mut it = text.split_whitespace();
        Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
    }

    /// Marks why gnoded is stopping the job, so the reason survives a restart.
    pub fn mark(&self, what: &str) {
        let _ = create_private(&self.marker(what));
    }

    pub fn is_marked(&self, what: &str) -> bool {
        std::fs::symlink_metadata(self.marker(what)).is_ok()
    }

    /// Marks the job, started early, as waiting for its instances (gnoded
    /// opens them to it when they are free, after a restart too). Unlike
    /// [`Self::mark`], a failure is the caller's to report: without the
    /// mark a restarted gnoded would not hold the job back.
    pub fn mark_gated(&self) -> std::io::Result<()> {
        create_private(&self.marker(GPU_GATE)).map(drop)
    }

    pub fn is_gated(&self) -> bool {
        self.is_marked(GPU_GATE)
    }

    pub fn clear_gated(&self) {
        let _ = std::fs::remove_file(self.marker(GPU_GATE));
    }

    /// Creates the spool directory afresh, owned by this process's user:
    /// 0711 when the job's user must reach its script, else 0700.
    pub fn create(&self, others_reach_script: bool) -> std::io::Result<()> {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        let mode = if others_reach_script { 0o711 } else { 0o700 };
        std::fs::DirBuilder::new().mode(mode).create(&self.dir)?;
        // Whatever the umask took away.
        std::fs::set_permissions(&self.dir, std::fs::Permissions::from_mode(mode))
    }

    /// Opens the shepherd's log (stdout and stderr of the shepherd itself).
    pub fn create_log(&self) -> std::io::Result<std::fs::File> {
        create_private(&self.log_path())
    }

    pub fn remove(&self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The marker of a job waiting for its instances ([`JobSpool::mark_gated`]).
const GPU_GATE: &str = "gpu-gate";

/// Creates (or truncates) a 0600 file, never through a symbolic link.
fn create_private(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

/// A directory above the spool that job users cannot pass through.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Unreachable(pub String);

impl From<String> for Unreachable {
    fn from(why: String) -> Self {
        Unreachable(why)
    }
}

impl From<&str> for Unreachable {
    fn from(why: &str) -> Self {
        Unreachable(why.to_string())
    }
}

/// Checks that users other than the owner can pass through every directory
/// above `dir` (a root gnoded runs jobs as their users, who must reach their
/// spool). Returns the first directory that blocks them.
pub fn check_reachable(dir: &Path) -> Result<(), Unreachable> {
    use std::os::unix::fs::PermissionsExt;
    for d in dir.ancestors() {
        if let Ok(meta) = std::fs::metadata(d) {
            let mode = meta.permissions().mode();
            if mode & 0o001 == 0 {
                return Err(Unreachable(format!(
                    "job users cannot reach the spool {}: {} has mode {:o}; run `chmod o+x {}` or choose another --state-dir",
                    dir.display(),
                    d.display(),
                    mode & 0o777,
                    d.display()
                )));
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
        if let Some(dir) = shepherd_dir_of(pid).filter(|d| d.starts_with(root)) {
            found.push((pid, dir));
        }
    }
    found
}

/// The argv[1] that makes a gsched binary act as a shepherd.
pub const SHEPHERD_ARG: &str = "__gsched_shepherd";

/// The spool directory a process was started as the shepherd of, from its
/// command line (`PROGRAM __gsched_shepherd DIR`).
fn shepherd_dir_of(pid: i32) -> Option<PathBuf> {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let mut args = cmdline.split(|b| *b == 0).skip(1);
    if args.next()? != SHEPHERD_ARG.as_bytes() {
        return None;
    }
    Some(PathBuf::from(std::ffi::OsStr::from_bytes(args.next()?)))
}

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

pub use gsched_daemon::process::process_starttime;
use gsched_daemon::process::stat_fields;

/// A process's process group (field 5 of `/proc/PID/stat`).
fn process_group(pid: i32) -> Option<i32> {
    stat_fields(pid)?.get(2)?.parse().ok()
}

/// A process's real, effective, saved and filesystem uids.
fn process_uids(pid: i32) -> Option<[u32; 4]> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix("Uid:"))?;
    let v: Vec<u32> = line
        .split_whitespace()
        .filter_map(|u| u.parse().ok())
        .collect();
    v.try_into().ok()
}

/// Whether `pid` is the shepherd of the job in `spool_dir`, before gnoded
/// adopts it and sends signals to its process group: it started at
/// `starttime`, runs with gnoded's uid (`uid`) in every slot (a job's
/// processes never do on a root node), leads its own process group, and
/// was started as a shepherd of that directory. Nothing a job's user can
/// write takes part in the answer.
pub fn is_shepherd_of(pid: i32, starttime: u64, spool_dir: &Path, uid: u32) -> bool {
    if pid <= 1 || process_starttime(pid) != Some(starttime) {
        return false;
    }
    if process_uids(pid) != Some([uid; 4]) || process_group(pid) != Some(pid) {
        return false;
    }
    shepherd_dir_of(pid).is_some_and(|d| d == spool_dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_spools_own_shepherd_is_recognised() {
        use std::os::unix::process::CommandExt;
        // A stand-in shepherd: `sh __gsched_shepherd DIR` runs the file
        // named __gsched_shepherd, so its command line has a shepherd's shape.
        let work = tempfile::tempdir().unwrap();
        std::fs::write(work.path().join(SHEPHERD_ARG), "sleep 30\n").unwrap();
        let spool = work.path().join("job-1");
        let spawn = |group: bool| {
            let mut c = std::process::Command::new("/bin/sh");
            c.arg(SHEPHERD_ARG).arg(&spool).current_dir(work.path());
            if group {
                c.process_group(0);
            }
            c.spawn().unwrap()
        };
        let me = nix::unistd::geteuid().as_raw();
        let mut leader = spawn(true);
        let pid = leader.id() as i32;
        let start = (0..100)
            .find_map(|_| {
                std::thread::sleep(std::time::Duration::from_millis(10));
                process_starttime(pid).filter(|_| shepherd_dir_of(pid).is_some())
            })
            .unwrap();
        assert!(is_shepherd_of(pid, start, &spool, me));
        // Another start time (a reused pid), another spool, another uid.
        assert!(!is_shepherd_of(pid, start + 1, &spool, me));
        assert!(!is_shepherd_of(pid, start, &work.path().join("job-2"), me));
        assert!(!is_shepherd_of(pid, start, &spool, me + 1));
        // Not leading its own process group.
        let mut member = spawn(false);
        let mpid = member.id() as i32;
        std::thread::sleep(std::time::Duration::from_millis(100));
        let mstart = process_starttime(mpid).unwrap();
        assert!(!is_shepherd_of(mpid, mstart, &spool, me));
        // This test process is not a shepherd at all.
        let own = std::process::id() as i32;
        assert!(!is_shepherd_of(
            own,
            process_starttime(own).unwrap(),
            &spool,
            me
        ));
        for c in [&mut leader, &mut member] {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }

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
        let err = check_reachable(&spool).unwrap_err().to_string();
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
