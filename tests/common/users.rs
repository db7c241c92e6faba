//! Unprivileged users made for one test (`useradd`), removed with their
//! processes when dropped, also when the test fails.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use serde_json::json;

/// Skips the test (returning) unless it runs as root.
#[allow(unused_macros)]
macro_rules! needs_root {
    () => {
        if !$crate::common::users::is_root() {
            eprintln!("skipped: needs root to create users and run jobs as them");
            return;
        }
    };
}

/// Whether the tests run as root (needed to create users).
pub fn is_root() -> bool {
    // SAFETY: getuid cannot fail.
    unsafe { libc::getuid() == 0 }
}

/// An unprivileged user made for one test, removed (with its processes)
/// when dropped, also when the test fails.
pub struct TestUser {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
}

impl TestUser {
    pub fn new() -> TestUser {
        static N: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "gst{}x{}",
            std::process::id() % 100_000,
            N.fetch_add(1, Ordering::SeqCst)
        );
        let out = Command::new("useradd")
            .args(["-M", "-U", "-s", "/bin/sh", &name])
            .output()
            .expect("useradd runs");
        assert!(out.status.success(), "useradd {name}: {out:?}");
        let id = |flag: &str| -> u32 {
            let o = Command::new("id").args([flag, &name]).output().unwrap();
            String::from_utf8_lossy(&o.stdout).trim().parse().unwrap()
        };
        let (uid, gid) = (id("-u"), id("-g"));
        TestUser { name, uid, gid }
    }

    /// Runs `sh -c script` as this user.
    pub fn sh(&self, script: &str) -> Output {
        self.sh_cmd(script).output().unwrap()
    }

    pub fn sh_cmd(&self, script: &str) -> Command {
        let mut c = Command::new("setpriv");
        c.args([
            "--reuid",
            &self.uid.to_string(),
            "--regid",
            &self.gid.to_string(),
            "--init-groups",
            "--",
            "/bin/sh",
            "-c",
            script,
        ])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .current_dir("/");
        c
    }

    /// A job spec of this user's, for the API (an administrator submits on
    /// the user's behalf).
    pub fn spec(&self, dir: &Path, script: &str) -> serde_json::Value {
        json!({
            "name": "attack", "script": script, "working_dir": dir,
            "user_name": self.name, "uid": self.uid, "gid": self.gid,
            "environment": {"PATH": "/usr/bin:/bin"}
        })
    }
}

impl Drop for TestUser {
    fn drop(&mut self) {
        let _ = Command::new("pkill")
            .args(["-KILL", "-u", &self.name])
            .status();
        std::thread::sleep(Duration::from_millis(100));
        let _ = Command::new("userdel").arg(&self.name).output();
    }
}

/// A directory the user owns, for its job's output.
pub fn user_dir(u: &TestUser) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::chown(d.path(), Some(u.uid), Some(u.gid)).unwrap();
    d
}

/// A local user holding a loopback port (and maybe a unix socket) while a
/// daemon is away, recording whatever clients send (tests/fixtures/squatter.py).
pub struct Squatter {
    child: std::process::Child,
    pub out: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Squatter {
    /// Starts squatting `port` as `user` for `secs` seconds, also on the
    /// unix socket `unix` (inside the squatter's own directory) if given;
    /// returns once it listens.
    pub fn start(user: &TestUser, port: u16, unix: Option<&str>, secs: u32) -> Squatter {
        let dir = user_dir(user);
        let out = dir.path().join("captured");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/squatter.py");
        let mut args = vec![
            script.display().to_string(),
            port.to_string(),
            out.display().to_string(),
            secs.to_string(),
        ];
        if let Some(name) = unix {
            args.push(dir.path().join(name).display().to_string());
        }
        let mut cmd = user.sh_cmd("exec /usr/bin/python3 \"$@\"");
        cmd.arg("squatter").args(&args);
        let child = cmd.spawn().expect("start the squatter");
        let ready = out.with_extension("ready");
        for _ in 0..200 {
            if ready.exists() {
                break;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        assert!(
            ready.exists(),
            "the squatter did not start listening on {port}"
        );
        Squatter {
            child,
            out,
            _dir: dir,
        }
    }

    /// The unix socket path the squatter serves.
    pub fn unix_path(&self, name: &str) -> std::path::PathBuf {
        self._dir.path().join(name)
    }

    /// Everything clients sent so far.
    pub fn captured(&self) -> Vec<u8> {
        std::fs::read(&self.out).unwrap_or_default()
    }

    /// Whether `needle` was among what clients sent.
    pub fn saw(&self, needle: &str) -> bool {
        self.captured()
            .windows(needle.len())
            .any(|w| w == needle.as_bytes())
    }
}

impl Drop for Squatter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
