//! Test harness: starts `gsched up` on a free loopback port with a
//! temporary state directory and drives it through the CLI binaries.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub mod slurm;
#[macro_use]
pub mod users;

pub struct Gsched {
    child: Option<Child>,
    pub url: String,
    pub listen: String,
    pub state: tempfile::TempDir,
    pub work: tempfile::TempDir,
    /// A token for the test's user (root in CI: an administrator).
    pub token: String,
    args: Vec<String>,
    /// Changes to the `gsched up` command before it starts (a terminal, an
    /// inherited descriptor).
    prepare: Option<Preparation>,
}

/// See [`Gsched::start_prepared`].
pub type Preparation = std::sync::Arc<dyn Fn(&mut Command) + Send + Sync>;

/// A token from the controller at `url`, as `gsched token` gets it on this
/// host (through the socket the controller's /healthz names).
pub fn token(url: &str) -> String {
    let out = Command::new(bin("gsched"))
        .args(["token", "--quiet", "--lifetime", "7200"])
        .env("GSCHED_URL", url)
        .env_remove("GSCHED_TOKEN")
        .env_remove("SLURM_JWT")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "gsched token failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// A request to `url` carrying `token`.
pub fn api(method: &str, url: &str, token: &str) -> ureq::Request {
    ureq::request(method, url).set("Authorization", &format!("Bearer {token}"))
}

/// Creates `dir` with the mode the daemons require of an existing state
/// directory (0711).
pub fn daemon_dir(dir: &Path) {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new().mode(0o711).create(dir).unwrap();
}

/// A temporary state directory with the mode the daemons require of an
/// existing one (0711: only its owner lists it; job users pass through).
pub fn state_dir() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let d = tempfile::tempdir().unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    d
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A binary of the workspace. `gctld` and `gnoded` belong to other packages,
/// which `cargo test` does not rebuild: `./scripts/test` builds them first.
pub fn bin(name: &str) -> PathBuf {
    let gsched = PathBuf::from(env!("CARGO_BIN_EXE_gsched"));
    let path = gsched.with_file_name(name);
    assert!(
        path.is_file(),
        "{} is missing: run `cargo build --workspace` (./scripts/test does)",
        path.display()
    );
    path
}

impl Gsched {
    /// Starts `gsched up` with a simulated node and short timers.
    pub fn start(extra: &[&str]) -> Gsched {
        Gsched::start_prepared(extra, None)
    }

    /// Starts `gsched up` as [`Gsched::start`] does, after `prepare` has
    /// changed its command.
    pub fn start_prepared(extra: &[&str], prepare: Option<Preparation>) -> Gsched {
        let listen = format!("127.0.0.1:{}", free_port());
        let mut g = Gsched {
            child: None,
            url: format!("http://{listen}"),
            listen,
            state: state_dir(),
            work: tempfile::tempdir().unwrap(),
            token: String::new(),
            args: extra.iter().map(|s| s.to_string()).collect(),
            prepare,
        };
        g.spawn();
        g.token = token(&g.url);
        g
    }

    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.state.path().join("up.log"))
            .unwrap();
        let mut cmd = Command::new(bin("gsched"));
        if let Some(p) = &self.prepare {
            p(&mut cmd);
        }
        let child = cmd
            .args(["up", "--state-dir"])
            .arg(self.state.path())
            .args([
                "--listen",
                &self.listen,
                "--kill-wait",
                "1",
                "--heartbeat-interval",
                "1",
                "--node-name",
                "node1",
            ])
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
        self.wait_until("the node registers", Duration::from_secs(20), || {
            self.get("/healthz")
                .is_some_and(|h| h["nodes_up"].as_u64() == Some(1))
        });
    }

    /// The `gsched up` process's pid.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("gsched is running").id()
    }

    /// SIGKILL the whole `gsched up` process, as a crash would.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }

    /// SIGTERM `gsched up`, as an administrator stops it, and wait for it
    /// to exit. Returns whether it exited successfully.
    pub fn terminate(&mut self) -> bool {
        let Some(mut c) = self.child.take() else {
            return false;
        };
        // SAFETY: plain kill(2) on the child this harness started.
        unsafe {
            libc::kill(c.id() as i32, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = c.try_wait().unwrap() {
                return status.success();
            }
            if Instant::now() >= deadline {
                c.kill().unwrap();
                c.wait().unwrap();
                panic!(
                    "gsched up did not stop within 60s of SIGTERM\nlog:\n{}",
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn restart(&mut self) {
        self.kill9();
        self.spawn();
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.state.path().join("up.log")).unwrap_or_default()
    }

    /// A request to this gsched's API with the test's token.
    pub fn req(&self, method: &str, path: &str) -> ureq::Request {
        api(method, &format!("{}{path}", self.url), &self.token)
    }

    pub fn get(&self, path: &str) -> Option<Value> {
        self.req("GET", path).call().ok()?.into_json().ok()
    }

    /// Runs a CLI binary in the work directory against this instance.
    pub fn cli(&self, name: &str, args: &[&str]) -> Output {
        self.cli_in(name, args, self.work.path(), None)
    }

    pub fn cli_in(&self, name: &str, args: &[&str], dir: &Path, stdin: Option<&str>) -> Output {
        self.run_program(&bin(name), args, dir, stdin, &[])
    }

    /// Runs `program` against this gsched (GSCHED_URL set, `env` added),
    /// feeding it `stdin` if given.
    pub fn run_program(
        &self,
        program: &Path,
        args: &[&str],
        dir: &Path,
        stdin: Option<&str>,
        env: &[(&str, String)],
    ) -> Output {
        let mut cmd = Command::new(program);
        cmd.args(args).current_dir(dir).env("GSCHED_URL", &self.url);
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        });
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        if let Some(input) = stdin {
            use std::io::Write;
            child
                .stdin
                .take()
                .unwrap()
                .write_all(input.as_bytes())
                .unwrap();
        }
        child.wait_with_output().unwrap()
    }

    /// Writes a script into the work directory.
    pub fn script(&self, name: &str, body: &str) -> String {
        let p = self.work.path().join(name);
        std::fs::write(&p, body).unwrap();
        p.display().to_string()
    }

    /// Submits with gsub; returns the job id.
    pub fn submit(&self, args: &[&str]) -> u64 {
        let mut all = vec!["--parsable"];
        all.extend_from_slice(args);
        let out = self.cli("gsub", &all);
        assert!(
            out.status.success(),
            "gsub failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout)
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }

    pub fn job(&self, id: u64) -> Value {
        self.get(&format!("/api/v1/jobs/{id}"))
            .unwrap_or(Value::Null)
    }

    pub fn wait_state(&self, id: u64, state: &str, within: Duration) -> Value {
        let mut last = Value::Null;
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            last = self.job(id);
            // RUNNING means started: a launch the node has not confirmed
            // yet (CONFIGURING) is not there yet. A job cancelled while
            // running is CANCELLED at once, but its processes are gone only
            // once it no longer shows completing: the tests wait for that.
            let launching = last["launching"] == true;
            let completing = last["completing"] == true;
            if last["job_state"] == state && !(state == "RUNNING" && launching) && !completing {
                return last;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "job {id} did not reach {state} within {within:?}; last seen: {last}\nlog:\n{}",
            self.log()
        );
    }

    pub fn wait_until(&self, what: &str, within: Duration, f: impl FnMut() -> bool) {
        if !poll(within, Duration::from_millis(50), f) {
            panic!("timed out waiting until {what}\nlog:\n{}", self.log());
        }
    }

    /// The recorded task reservations (`query`: e.g. `?job=3`, or "").
    pub fn tasks(&self, query: &str) -> Vec<Value> {
        self.get(&format!("/api/v1/tasks{query}"))
            .and_then(|v| v["tasks"].as_array().cloned())
            .unwrap_or_default()
    }

    /// Waits until `n` reservations matching `query` are recorded as ended
    /// (nodes report them in batches every 100 ms) and returns them.
    pub fn ended_tasks(&self, query: &str, n: usize) -> Vec<Value> {
        let mut tasks = Vec::new();
        self.wait_until(
            &format!("{n} reservations{query} are recorded as ended"),
            Duration::from_secs(20),
            || {
                tasks = self.tasks(query);
                tasks.len() == n && tasks.iter().all(|t| t["end_ms"].is_i64())
            },
        );
        tasks
    }

    /// Kills every job process group this instance started (shepherds are
    /// found by their command line, as gnoded finds them).
    pub fn kill_jobs(&self) {
        kill_jobs_under(self.state.path());
    }
}

impl Drop for Gsched {
    fn drop(&mut self) {
        self.kill9();
        self.kill_jobs();
    }
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// kill -9 of a daemon the test started, and its reaping.
pub fn kill_child(child: &mut Option<Child>) {
    if let Some(mut c) = child.take() {
        let _ = c.kill();
        let _ = c.wait();
    }
}

/// Kills every job left under `dir` (each shepherd's process group).
pub fn kill_jobs_under(dir: &Path) {
    for (pgid, _) in gsched_noded::spool::shepherds_under(dir) {
        // SAFETY: plain kill(2) on a process group a test started.
        unsafe { libc::kill(-pgid, libc::SIGKILL) };
    }
}

/// A daemon's log file, appended to across its restarts.
pub fn append_log(path: &Path) -> std::fs::File {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap()
}

/// `gsched up` flags for a node with CPUs to spare: 64 CPUs, cores not
/// confined. For tests of GPU packing, whose many jobs at once would
/// otherwise wait for this machine's few cores (CPUs are scheduled).
pub fn spare_cpus() -> Vec<String> {
    let config = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cgroup-spare-cpus.toml");
    std::fs::write(&config, "constrain_cores = false\n").unwrap();
    vec![
        "--cpus".into(),
        "64".into(),
        "--cgroup-config".into(),
        config.display().to_string(),
    ]
}

/// Runs `program` with `args`, panicking with its stderr unless it succeeds
/// (`needed` says what to install when it is missing).
pub fn run_checked(program: &str, args: &[&str], needed: &str) {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}; {needed} is needed"));
    assert!(
        out.status.success(),
        "{program} {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Calls `f` every `every` until it says yes (true) or `within` has passed
/// (false).
pub fn poll(within: Duration, every: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(every);
    }
    false
}
