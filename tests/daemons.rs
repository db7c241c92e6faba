//! gctld and gnoded as separate processes: heartbeats, node loss, controller
//! restarts while the node keeps running, and the cluster key.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

const T: Duration = Duration::from_secs(20);

struct Pair {
    dir: tempfile::TempDir,
    port: u16,
    ctld: Option<Child>,
    noded: Option<Child>,
    token: std::sync::OnceLock<String>,
}

impl Pair {
    fn new() -> Pair {
        let dir = tempfile::tempdir().unwrap();
        for d in ["ctl", "node"] {
            common::daemon_dir(&dir.path().join(d));
        }
        Pair {
            dir,
            port: common::free_port(),
            ctld: None,
            noded: None,
            token: std::sync::OnceLock::new(),
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// A request with a token (the signing key survives restarts).
    fn api(&self, method: &str, path: &str) -> ureq::Request {
        let t = self.token.get_or_init(|| common::token(&self.url()));
        common::api(method, &format!("{}{path}", self.url()), t)
    }

    fn key(&self) -> PathBuf {
        self.dir.path().join("ctl/cluster.key")
    }

    fn log(&self, name: &str) -> std::fs::File {
        common::append_log(&self.dir.path().join(name))
    }

    fn start_ctld(&mut self) {
        // Long enough that gnoded does not fence itself (two thirds of
        // it) while a test restarts the controller.
        self.start_ctld_with(&["--node-timeout", "10"]);
    }

    fn start_ctld_with(&mut self, extra: &[&str]) {
        let child = Command::new(common::bin("gctld"))
            .arg("--state-dir")
            .arg(self.dir.path().join("ctl"))
            .args(["--listen", &format!("127.0.0.1:{}", self.port)])
            .args(extra)
            .stdin(Stdio::null())
            .stderr(self.log("ctld.log"))
            .spawn()
            .unwrap();
        self.ctld = Some(child);
        self.wait("gctld answers", || self.health().is_some());
    }

    fn start_noded(&mut self, key: &Path) {
        let child = Command::new(common::bin("gnoded"))
            .arg("--allow-root-jobs")
            .arg("--state-dir")
            .arg(self.dir.path().join("node"))
            .arg("--cluster-key-file")
            .arg(key)
            .args([
                "--controller",
                &self.url(),
                "--listen",
                "127.0.0.1:0",
                "--name",
                "n1",
            ])
            .args([
                "--heartbeat-interval",
                "1",
                "--kill-wait",
                "1",
                "--sim-gpus",
                "1xA30:1g.6gb*4",
            ])
            .stdin(Stdio::null())
            .stderr(self.log("noded.log"))
            .spawn()
            .unwrap();
        self.noded = Some(child);
    }

    /// gctld (with `ctld_args`) and one gnoded, the node up.
    fn up(ctld_args: &[&str]) -> Pair {
        let mut p = Pair::new();
        p.start_ctld_with(ctld_args);
        p.start_noded(&p.key());
        p.wait("the node is up", || {
            p.health().is_some_and(|h| h["nodes_up"] == 1)
        });
        p
    }

    /// GET `path` with a token, as JSON.
    fn get(&self, path: &str) -> Value {
        self.api("GET", path).call().unwrap().into_json().unwrap()
    }

    /// The first (only) node, as `/api/v1/nodes` lists it.
    fn node(&self) -> Value {
        self.get("/api/v1/nodes")["nodes"][0].clone()
    }

    /// Job `id`'s event log, as text.
    fn events(&self, id: u64) -> String {
        self.get(&format!("/api/v1/jobs/{id}/events")).to_string()
    }

    /// Submits a script that first touches a marker, then runs `rest`;
    /// returns once the node has really started it.
    fn submit_started(&self, marker: &str, rest: &str) -> u64 {
        let started = self.dir.path().join(marker);
        let id = self.submit(&format!("#!/bin/sh\ntouch {}\n{rest}", started.display()));
        self.wait(&format!("job {id} started"), || started.exists());
        id
    }

    fn health(&self) -> Option<Value> {
        ureq::get(&format!("{}/healthz", self.url()))
            .call()
            .ok()?
            .into_json()
            .ok()
    }

    fn wait(&self, what: &str, f: impl FnMut() -> bool) {
        if common::poll(T, Duration::from_millis(50), f) {
            return;
        }
        let logs: String = ["ctld.log", "noded.log"]
            .iter()
            .map(|l| std::fs::read_to_string(self.dir.path().join(l)).unwrap_or_default())
            .collect();
        panic!("timed out waiting until {what}\n{logs}");
    }

    fn job(&self, id: u64) -> Value {
        self.api("GET", &format!("/api/v1/jobs/{id}"))
            .call()
            .unwrap()
            .into_json()
            .unwrap()
    }

    fn wait_state(&self, id: u64, state: &str) -> Value {
        self.wait(&format!("job {id} is {state}"), || {
            self.job(id)["job_state"] == state
        });
        self.job(id)
    }

    fn submit(&self, script: &str) -> u64 {
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        let body = json!({
            "name": "d", "script": script, "working_dir": self.dir.path().display().to_string(),
            "user_name": "root", "uid": uid, "gid": gid, "environment": {"PATH": "/usr/bin:/bin"},
            // These tests follow a lost node's jobs to NODE_FAIL.
            "requeue": false
        });
        let r: Value = self
            .api("POST", "/api/v1/jobs")
            .send_json(body)
            .unwrap()
            .into_json()
            .unwrap();
        r["job_id"].as_u64().unwrap()
    }

    fn kill(child: &mut Option<Child>) {
        common::kill_child(child);
    }

    fn kill_jobs(&self) {
        common::kill_jobs_under(self.dir.path());
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        Pair::kill(&mut self.ctld);
        Pair::kill(&mut self.noded);
        self.kill_jobs();
    }
}

#[test]
fn a_silent_node_is_marked_down_and_its_jobs_end_node_fail() {
    let mut p = Pair::up(&["--node-timeout", "3"]);
    let key = p.key();
    // RUNNING means allocated; this waits until the node has really started it.
    let id = p.submit_started("started", "sleep 300\n");
    // The node dies with its jobs.
    Pair::kill(&mut p.noded);
    p.kill_jobs();
    let job = p.wait_state(id, "NODE_FAIL");
    assert_eq!(job["state_reason"], "NodeFail");
    assert_eq!(p.node()["state"], "DOWN");
    // New work waits for a node.
    let next = p.submit("#!/bin/sh\ntrue\n");
    p.wait(&format!("job {next} waits for a node"), || {
        p.job(next)["state_reason"] == "NodeDown"
    });
    // The node comes back and runs it.
    p.start_noded(&key);
    p.wait_state(next, "COMPLETED");
}

/// Issue 15, item 1: a launch that finds gnoded restarting puts that job
/// back in the queue; the node and its other jobs are untouched until its
/// lease (heartbeats) runs out.
#[test]
fn a_launch_refused_during_a_node_restart_requeues_only_that_job() {
    let mut p = Pair::up(&["--node-timeout", "20"]);
    let key = p.key();
    let long = p.submit_started("started", "sleep 300\n");
    // gnoded dies (its jobs live on) and a launch hits the closed port.
    Pair::kill(&mut p.noded);
    let next = p.submit("#!/bin/sh\ntrue\n");
    p.wait(
        "the launch failed and the job went back to the queue",
        || {
            p.events(next).contains("failed; back in the queue")
                && p.job(next)["job_state"] == "PENDING"
        },
    );
    assert_ne!(
        p.node()["state"],
        "DOWN",
        "one refused connection is not a dead node"
    );
    assert_eq!(p.job(long)["job_state"], "RUNNING");
    // gnoded is back: it adopts the long job, and the requeued one runs.
    p.start_noded(&key);
    p.wait_state(next, "COMPLETED");
    assert_eq!(p.job(long)["job_state"], "RUNNING");
    assert_eq!(p.job(long)["restart_cnt"], 0);
}

/// Issue 15, item 3: a job that completed while its node was out of reach
/// is recorded COMPLETED, with its real end time, once the node reports it.
#[test]
fn a_job_that_completed_during_an_outage_is_recorded_completed() {
    let p = Pair::up(&["--node-timeout", "3"]);
    let id = p.submit_started("started", "sleep 4\nexit 0\n");
    // gnoded freezes (no heartbeats); the job runs on and ends meanwhile.
    let pid = p.noded.as_ref().unwrap().id() as i32;
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    p.wait_state(id, "NODE_FAIL");
    std::thread::sleep(Duration::from_secs(5));
    unsafe { libc::kill(pid, libc::SIGCONT) };
    let job = p.wait_state(id, "COMPLETED");
    assert_eq!(job["exit_code"], 0);
    let (start, end) = (
        job["start_time"].as_i64().unwrap(),
        job["end_time"].as_i64().unwrap(),
    );
    assert!(
        (4..=6).contains(&(end - start)),
        "ran {}s: {job}",
        end - start
    );
    let events = p.events(id);
    assert!(events.contains("out of reach"), "{events}");
}

#[test]
fn controller_restart_keeps_the_node_and_learns_what_ended_meanwhile() {
    let mut p = Pair::up(&["--node-timeout", "10"]);
    let flag = p.dir.path().join("go");
    let ends = p.submit(&format!(
        "#!/bin/sh\nwhile [ ! -e {} ]; do sleep 0.1; done\nexit 5\n",
        flag.display()
    ));
    let started = p.dir.path().join("started");
    let runs = p.submit(&format!(
        "#!/bin/sh\ntouch {}\nsleep 300\n",
        started.display()
    ));
    p.wait_state(ends, "RUNNING");
    p.wait_state(runs, "RUNNING");
    p.wait("both jobs started", || {
        started.exists() && p.dir.path().join(format!("slurm-{ends}.out")).exists()
    });
    Pair::kill(&mut p.ctld);
    // While the controller is away, one job ends.
    std::fs::write(&flag, b"").unwrap();
    std::thread::sleep(Duration::from_millis(500));
    p.start_ctld();
    let job = p.wait_state(ends, "FAILED");
    assert_eq!(job["exit_code"], 5);
    // The other is still running, under the same node, and can be cancelled.
    p.wait("the node re-registered", || {
        p.health().is_some_and(|h| h["nodes_up"] == 1)
    });
    assert_eq!(p.job(runs)["job_state"], "RUNNING");
    p.api("DELETE", &format!("/api/v1/jobs/{runs}"))
        .call()
        .unwrap();
    p.wait_state(runs, "CANCELLED");
}

/// Issue 36, hole 2: a local user who holds a daemon's port while it
/// restarts collects nothing secret. Before, gnoded sent the cluster key
/// in a header with every heartbeat, and gctld sent launches (script,
/// environment, job token and the key) to whatever held the node's port.
#[test]
fn a_squatter_on_a_restarting_daemons_port_gets_neither_key_nor_job() {
    use common::users::{is_root, Squatter, TestUser};
    if !is_root() {
        eprintln!("skipped: needs root to create a user");
        return;
    }
    let attacker = TestUser::new();
    let mut p = Pair::up(&["--node-timeout", "30"]);
    let key = std::fs::read_to_string(p.key()).unwrap().trim().to_string();
    let node_url = p.node()["url"].as_str().unwrap().to_string();
    let node_port: u16 = node_url.rsplit(':').next().unwrap().parse().unwrap();
    // gctld away: the node's registrations and heartbeats go to the squatter.
    Pair::kill(&mut p.ctld);
    let squat = Squatter::start(&attacker, p.port, None, 30);
    p.wait("the node talks to the squatter", || {
        squat.captured().len() > 2000
    });
    assert!(
        !squat.saw(&key),
        "the node sent the cluster key to a squatter"
    );
    drop(squat);
    p.start_ctld_with(&["--node-timeout", "30"]);
    p.wait("the node is back", || {
        p.health().is_some_and(|h| h["nodes_up"] == 1)
    });
    // gnoded away: the controller's launch goes to the squatter.
    Pair::kill(&mut p.noded);
    let squat = Squatter::start(&attacker, node_port, None, 30);
    p.submit("#!/bin/sh\necho launch-secret-script\n");
    p.wait("the controller tries the squatter", || {
        squat.captured().len() > 500
    });
    std::thread::sleep(Duration::from_secs(1));
    for secret in [key.as_str(), "launch-secret-script", "PATH"] {
        assert!(
            !squat.saw(secret),
            "the controller sent {secret} to a squatter: {}",
            String::from_utf8_lossy(&squat.captured())
        );
    }
    let log = std::fs::read_to_string(p.dir.path().join("ctld.log")).unwrap_or_default();
    assert!(
        log.contains("without proving it holds the cluster key"),
        "the controller believed the squatter's answer: {log}"
    );
}

#[test]
fn a_node_with_the_wrong_key_is_not_accepted() {
    let mut p = Pair::new();
    p.start_ctld();
    let wrong = p.dir.path().join("wrong.key");
    std::fs::write(&wrong, "0123456789abcdef0123456789abcdef\n").unwrap();
    std::fs::set_permissions(&wrong, std::fs::Permissions::from_mode(0o600)).unwrap();
    p.start_noded(&wrong);
    let log = p.dir.path().join("noded.log");
    p.wait("gnoded reports the refusal", || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("missing or wrong cluster key")
    });
    assert_eq!(p.health().unwrap()["nodes_up"], 0);
}

#[test]
fn a_key_file_readable_by_others_is_refused() {
    let p = Pair::new();
    let key = p.dir.path().join("open.key");
    std::fs::write(&key, "0123456789abcdef0123456789abcdef\n").unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = Command::new(common::bin("gnoded"))
        .arg("--state-dir")
        .arg(p.dir.path().join("node"))
        .arg("--cluster-key-file")
        .arg(&key)
        .args(["--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "cluster key file {} can be read by other users (mode 644); run: chmod 600",
            key.display()
        )),
        "{err}"
    );
}

/// Issue 39: the site file drives gctld and the commands; flags win over
/// it; an unknown key stops the daemon naming its line; a file others
/// could change is refused; a flat file of the earlier kind still reads.
#[test]
fn the_site_file_drives_gctld_and_the_commands() {
    let mut p = Pair::new();
    let cfg = p.dir.path().join("gsched.toml");
    let site = format!(
        "[cluster]\ncontroller = \"http://127.0.0.1:{port}\"\n\n[controller]\nlisten = \"127.0.0.1:{port}\"\ncluster_name = \"fromfile\"\nnode_timeout = 7\n",
        port = p.port
    );
    std::fs::write(&cfg, &site).unwrap();
    let run = |extra: &[&str]| {
        let mut c = Command::new(common::bin("gctld"));
        c.arg("--state-dir")
            .arg(p.dir.path().join("ctl"))
            .arg("--config")
            .arg(&cfg)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        c
    };
    p.ctld = Some(run(&["--cluster-name", "fromflag"]).spawn().unwrap());
    p.wait("gctld listens where the file says", || p.health().is_some());
    assert_eq!(
        p.health().unwrap()["cluster_name"],
        "fromflag",
        "the flag wins"
    );
    // A command finds the controller through [cluster], as root through
    // its local socket.
    let out = Command::new(common::bin("gqueue"))
        .env("GSCHED_CONFIG", &cfg)
        .env_remove("GSCHED_URL")
        .env("GSCHED_RETRY_SECS", "0")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", common::stderr(&out));
    let elsewhere = Command::new(common::bin("gqueue"))
        .env("GSCHED_CONFIG", p.dir.path().join("missing.toml"))
        .env_remove("GSCHED_URL")
        .output()
        .unwrap();
    assert!(!elsewhere.status.success());
    assert!(
        common::stderr(&elsewhere).contains("cannot read the configuration file"),
        "{}",
        common::stderr(&elsewhere)
    );
    common::kill_child(&mut p.ctld);

    std::fs::write(&cfg, site.replace("node_timeout = 7", "node_timout = 7")).unwrap();
    let out = run(&[]).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "{}:7: [controller] node_timout: unknown field `node_timout`",
            cfg.display()
        )),
        "{err}"
    );

    std::fs::write(&cfg, &site).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&cfg, std::fs::Permissions::from_mode(0o666)).unwrap();
    let out = run(&[]).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("is not safe to read") && err.contains("chmod go-w"),
        "{err}"
    );
    std::fs::set_permissions(&cfg, std::fs::Permissions::from_mode(0o644)).unwrap();

    std::fs::write(
        &cfg,
        format!("listen = \"127.0.0.1:{}\"\nnode_timeout = 7\n", p.port),
    )
    .unwrap();
    p.ctld = Some(run(&[]).spawn().unwrap());
    p.wait("gctld reads a flat file of the earlier kind", || {
        p.health().is_some()
    });
}

/// Issue 15, item 7: a command started while the controller is down waits
/// for it (saying so once) instead of failing at once.
#[test]
fn commands_wait_out_a_restarting_controller() {
    let mut g = common::Gsched::start(&[]);
    g.kill9();
    let out_path = g.work.path().join("gqueue.out");
    let err_path = g.work.path().join("gqueue.err");
    let mut gqueue = Command::new(common::bin("gqueue"))
        .env("GSCHED_URL", &g.url)
        .env_remove("GSCHED_TOKEN")
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    g.restart();
    let status = gqueue.wait().unwrap();
    let err = std::fs::read_to_string(&err_path).unwrap();
    assert!(status.success(), "{err}");
    assert_eq!(err.matches("not answering").count(), 1, "{err}");
    // With no window, it fails at once, naming the controller.
    g.kill9();
    let out = Command::new(common::bin("gqueue"))
        .env("GSCHED_URL", &g.url)
        .env("GSCHED_RETRY_SECS", "0")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(common::stderr(&out).contains("cannot reach the gsched controller"));
}

/// Issue 15, item 5: a second gnoded that claims a live node's name is
/// refused, on both sides, and the first keeps the node.
#[test]
fn a_duplicate_node_name_does_not_take_over_the_node() {
    let p = Pair::up(&["--node-timeout", "20"]);
    let key = p.key();
    let url = p.node()["url"].clone();
    common::daemon_dir(&p.dir.path().join("node2"));
    let log2 = p.dir.path().join("noded2.log");
    let mut impostor = Command::new(common::bin("gnoded"))
        .arg("--allow-root-jobs")
        .arg("--state-dir")
        .arg(p.dir.path().join("node2"))
        .arg("--cluster-key-file")
        .arg(&key)
        .args([
            "--controller",
            &p.url(),
            "--listen",
            "127.0.0.1:0",
            "--name",
            "n1",
        ])
        .args(["--heartbeat-interval", "1", "--sim-gpus", "1xA30"])
        .stdin(Stdio::null())
        .stderr(std::fs::File::create(&log2).unwrap())
        .spawn()
        .unwrap();
    p.wait("the impostor is told why it is refused", || {
        std::fs::read_to_string(&log2).is_ok_and(|l| l.contains("held by another gnoded"))
    });
    let _ = impostor.kill();
    let _ = impostor.wait();
    let ctld_log = std::fs::read_to_string(p.dir.path().join("ctld.log")).unwrap();
    assert!(ctld_log.contains("registration refused"), "{ctld_log}");
    assert_eq!(p.node()["url"], url, "the first gnoded keeps the node");
    let id = p.submit("#!/bin/sh\ntrue\n");
    p.wait_state(id, "COMPLETED");
}
