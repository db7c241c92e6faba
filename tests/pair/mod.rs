//! Two controllers on one PostgreSQL database (issue 40), each on a host of
//! its own (network namespaces, see `net`), with the database on a third
//! (TLS, verified) and gnoded on the rest; the faults the failover tests
//! and the two-controller chaos run inject. Jobs mark what really ran
//! (`net::Markers`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common;
use crate::net::{self, Markers, Net, Verdict};
use crate::postgres::{self, Network, PrivatePostgres};

/// The database's host, the controllers', and the first node's.
pub const DB: usize = 0;
pub const CONTROLLERS: [usize; 2] = [1, 2];
pub const FIRST_NODE: usize = 3;
pub const PORT: u16 = 6817;
/// The node timeout: nodes fence after two thirds of it, 20 s, well past
/// a takeover with the default lease (6 s and a poll).
pub const NODE_TIMEOUT: u64 = 30;

/// Two controllers, a database and `nodes` gnoded.
pub struct Pair {
    /// Stopped before the namespaces go (fields drop in this order).
    pub pg: PrivatePostgres,
    pub net: Net,
    dir: tempfile::TempDir,
    database: String,
    pub ctlds: BTreeMap<usize, Child>,
    nodes: BTreeMap<usize, Child>,
    token: OnceLock<String>,
}

impl Pair {
    pub fn up(nodes: usize) -> Pair {
        let net = Net::new(FIRST_NODE + nodes);
        // The test's own requests go from the database's host.
        net.enter(DB);
        let dir = tempfile::tempdir().unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        for h in CONTROLLERS {
            common::daemon_dir(&dir.path().join(format!("ctl{h}")));
        }
        common::daemon_dir(&dir.path().join("keys"));
        for i in 0..nodes {
            common::daemon_dir(&dir.path().join(format!("node{}", FIRST_NODE + i)));
        }
        // The database's certificate, for its address, from a CA of the
        // test's own.
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec![net.addr(DB)])
            .unwrap()
            .signed_by(&key, &ca, &ca_key)
            .unwrap();
        let pem = |name: &str, text: String| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            path.display().to_string()
        };
        let ca_file = pem("db-ca.pem", ca.pem());
        let cert_file = pem("db-cert.pem", cert.pem());
        let key_file = pem("db-key.pem", key.serialize_pem());
        let db_ns = net.ns(DB);
        let db_addr = net.addr(DB);
        let pg = PrivatePostgres::start_on(Some(Network {
            netns: &db_ns,
            addr: &db_addr,
            cert: &cert_file,
            key: &key_file,
            clients: "10.99.0.0/24",
        }));
        let socket = pg.socket_dir().display().to_string();
        pg.run("createdb", &["-h", &socket, "-U", "gsched", "gsched"]);
        let database = format!(
            "postgres://gsched@{db_addr}:{}/gsched?sslmode=verify-full&sslrootcert={ca_file}",
            postgres::PORT
        );
        let mut p = Pair {
            net,
            dir,
            pg,
            database,
            ctlds: BTreeMap::new(),
            nodes: BTreeMap::new(),
            token: OnceLock::new(),
        };
        p.start_ctld(CONTROLLERS[0]);
        p.wait_leader(None, Duration::from_secs(30));
        p.start_ctld(CONTROLLERS[1]);
        p.wait(
            "the second controller stands by",
            Duration::from_secs(30),
            |p| {
                p.role(CONTROLLERS[1])
                    .is_some_and(|(role, _)| role == "standby")
            },
        );
        for i in 0..nodes {
            p.start_node(FIRST_NODE + i);
        }
        p.wait("every node is up", Duration::from_secs(30), |p| {
            p.leader_health()
                .is_some_and(|h| h["nodes_up"].as_u64() == Some(nodes as u64))
        });
        p
    }

    pub fn url(&self, host: usize) -> String {
        format!("http://{}:{PORT}", self.net.addr(host))
    }

    pub fn urls(&self) -> String {
        CONTROLLERS.map(|h| self.url(h)).join(",")
    }

    pub fn log_file(&self, name: &str) -> std::fs::File {
        common::append_log(&self.dir.path().join(name))
    }

    pub fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(name)).unwrap_or_default()
    }

    pub fn start_ctld(&mut self, host: usize) {
        let keys = self.dir.path().join("keys");
        // A host name of its own: a controller on another host than its
        // predecessor waits out the lease (on the same host it would see
        // the predecessor's process gone and take over at once).
        let child = self
            .net
            .named_command(host, &format!("c{host}"), &common::bin("gctld"))
            .arg("--state-dir")
            .arg(self.dir.path().join(format!("ctl{host}")))
            .args(["--listen", &format!("{}:{PORT}", self.net.addr(host))])
            .args(["--allow-plain-http", "--min-job-age", "0"])
            .args(["--node-timeout", &NODE_TIMEOUT.to_string()])
            .args(["--database", &self.database])
            .args(["--controllers", &self.urls()])
            .arg("--cluster-key-file")
            .arg(keys.join("cluster.key"))
            .arg("--token-key-file")
            .arg(keys.join("jwt.key"))
            .stdin(Stdio::null())
            .stderr(self.log_file(&format!("ctl{host}.log")))
            .spawn()
            .unwrap();
        self.ctlds.insert(host, child);
    }

    pub fn start_node(&mut self, host: usize) {
        let name = format!("n{host}");
        let child = self
            .net
            .named_command(host, &name, &common::bin("gnoded"))
            .arg("--state-dir")
            .arg(self.dir.path().join(format!("node{host}")))
            .arg("--cluster-key-file")
            .arg(self.dir.path().join("keys/cluster.key"))
            .args(["--controller", &self.urls()])
            .args(["--listen", &format!("{}:6818", self.net.addr(host))])
            .args(["--name", &name])
            .args(["--allow-plain-http", "--heartbeat-interval", "1"])
            .arg("--allow-root-jobs")
            .args(["--kill-wait", "1", "--workers", "4"])
            .stdin(Stdio::null())
            .stderr(self.log_file(&format!("node{host}.log")))
            .spawn()
            .unwrap();
        self.nodes.insert(host, child);
    }

    /// kill -9 of the controller on `host`.
    pub fn kill_ctld(&mut self, host: usize) {
        let mut child = self.ctlds.remove(&host);
        common::kill_child(&mut child);
    }

    pub fn signal_ctld(&self, host: usize, signal: i32) {
        let pid = self.ctlds[&host].id() as i32;
        // SAFETY: kill(2) on a child this test started.
        unsafe { libc::kill(pid, signal) };
    }

    /// Whether the controller on `host` has exited (and how), reaping it.
    pub fn exited(&mut self, host: usize) -> Option<std::process::ExitStatus> {
        let status = self.ctlds.get_mut(&host)?.try_wait().unwrap()?;
        self.ctlds.remove(&host);
        Some(status)
    }

    /// What the controller on `host` says of itself: its role and epoch.
    pub fn role(&self, host: usize) -> Option<(String, i64)> {
        let answer = match ureq::get(&format!("{}/healthz", self.url(host)))
            .timeout(Duration::from_secs(2))
            .call()
        {
            Ok(r) => r,
            Err(ureq::Error::Status(_, r)) => r,
            Err(_) => return None,
        };
        let h: Value = answer.into_json().ok()?;
        Some((h["role"].as_str()?.to_string(), h["epoch"].as_i64()?))
    }

    pub fn leader(&self) -> Option<usize> {
        CONTROLLERS
            .into_iter()
            .find(|&h| self.role(h).is_some_and(|(role, _)| role == "leader"))
    }

    /// Waits until a controller other than `not` leads; which, and when.
    pub fn wait_leader(&self, not: Option<usize>, within: Duration) -> (usize, Instant) {
        let mut found = None;
        self.wait("a controller leads", within, |p| {
            found = p.leader().filter(|&h| Some(h) != not);
            found.is_some()
        });
        (found.unwrap(), Instant::now())
    }

    pub fn leader_health(&self) -> Option<Value> {
        net::healthz(&self.url(self.leader()?))
    }

    pub fn token(&self) -> &str {
        self.token.get_or_init(|| {
            let leader = self.leader().expect("a controller leads");
            let sock = format!(
                "unix:{}",
                self.dir
                    .path()
                    .join(format!("ctl{leader}/ctld.sock"))
                    .display()
            );
            common::token(&sock)
        })
    }

    pub fn markers(&self) -> PathBuf {
        self.dir.path().join("markers")
    }

    /// Submits a marker job running `ticks` fifth-seconds, not requeued
    /// (so it must run exactly once), to whichever controller leads,
    /// trying for up to 60 s; the id it was acknowledged with, if any.
    pub fn submit(&self, ticks: u32) -> Option<u64> {
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Some(id) = self.try_submit(ticks, false, Duration::from_secs(5)) {
                return Some(id);
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        None
    }

    /// One try at each controller in turn, each waited on for at most
    /// `patience`: the id the job was acknowledged with, if one was.
    pub fn try_submit(&self, ticks: u32, requeue: bool, patience: Duration) -> Option<u64> {
        let body = net::marker_job(&self.markers(), self.dir.path(), ticks, requeue);
        let token = self.token().to_string();
        CONTROLLERS.into_iter().find_map(|h| {
            let r = common::api("POST", &format!("{}/api/v1/jobs", self.url(h)), &token)
                .timeout(patience)
                .send_json(body.clone())
                .ok()?;
            r.into_json::<Value>().ok()?["job_id"].as_u64()
        })
    }

    /// `scontrol ping` given both controllers: its exit status and lines.
    pub fn scontrol_ping(&self) -> (i32, Vec<String>) {
        let shims = self.dir.path().join("shims");
        if !shims.join("scontrol").exists() {
            common::slurm::install_shims(&shims);
        }
        let out = std::process::Command::new(shims.join("scontrol"))
            .arg("ping")
            .env("GSCHED_URL", self.urls())
            .env_remove("GSCHED_TOKEN")
            .env_remove("SLURM_JWT")
            .output()
            .unwrap();
        let lines = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(String::from)
            .collect();
        (out.status.code().unwrap_or(-1), lines)
    }

    /// Every job the leader has, by id (`None`: none leads, or it did not
    /// answer).
    pub fn try_jobs(&self) -> Option<BTreeMap<u64, Value>> {
        let leader = self.leader()?;
        net::list_jobs(&self.url(leader), self.token()).ok()
    }

    /// Every job the leader has, by id.
    pub fn jobs(&self) -> BTreeMap<u64, Value> {
        self.try_jobs()
            .expect("a controller leads and lists its jobs")
    }

    /// kill -9 of the gnoded on `host`.
    pub fn kill_node(&mut self, host: usize) {
        let mut child = self.nodes.remove(&host);
        common::kill_child(&mut child);
    }

    /// Routes `host`'s packets to the database into a black hole (`cut`)
    /// or back.
    pub fn cut_from_database(&self, host: usize, cut: bool) {
        let blackhole = format!("{}/32", self.net.addr(DB));
        let verb = if cut { "add" } else { "del" };
        common::run_checked(
            "ip",
            &[
                "-n",
                &self.net.ns(host),
                "route",
                verb,
                "blackhole",
                &blackhole,
            ],
            "iproute2",
        );
    }

    pub fn wait(&self, what: &str, within: Duration, mut f: impl FnMut(&Pair) -> bool) {
        if !common::poll(within, Duration::from_millis(100), || f(self)) {
            panic!("timed out waiting until {what}\n{}", self.logs());
        }
    }

    pub fn logs(&self) -> String {
        let mut names: Vec<String> = CONTROLLERS.map(|h| format!("ctl{h}.log")).to_vec();
        let mut node_logs: Vec<String> = std::fs::read_dir(self.dir.path())
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("node") && n.ends_with(".log"))
            .collect();
        node_logs.sort();
        names.extend(node_logs);
        let mut out: String = names
            .iter()
            .map(|n| {
                let text = self.log(n);
                let tail: Vec<&str> = text.lines().rev().take(40).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                format!("--- {n} (last lines)\n{}\n", tail.join("\n"))
            })
            .collect();
        let db: Vec<String> = self
            .pg
            .log()
            .lines()
            .rev()
            .take(20)
            .map(String::from)
            .collect();
        out.push_str(&format!(
            "--- database (last lines)\n{}\n",
            db.into_iter().rev().collect::<Vec<_>>().join("\n")
        ));
        out
    }

    /// Waits until every acknowledged job is final, then judges what ran
    /// against what was recorded: nothing lost, nothing run twice, nothing
    /// misrecorded.
    pub fn judge(&self, acknowledged: &[u64], within: Duration) -> BTreeMap<u64, Value> {
        let mut jobs = BTreeMap::new();
        self.wait("every job reached a final state", within, |p| {
            jobs = p.jobs();
            jobs.values().all(net::is_final)
        });
        let missing: Vec<&u64> = acknowledged
            .iter()
            .filter(|id| !jobs.contains_key(id))
            .collect();
        assert!(
            missing.is_empty(),
            "acknowledged but lost: {missing:?}\n{}",
            self.logs()
        );
        let v = Verdict::judge(&jobs, &Markers::read(&self.markers()));
        let clean = v.ran_twice.is_empty() && v.lost.is_empty() && v.misrecorded.is_empty();
        assert!(clean, "{v:?}\n{}", self.logs());
        let not_completed: Vec<(u64, String)> = jobs
            .iter()
            .filter(|(_, j)| j["job_state"] != "COMPLETED")
            .map(|(id, j)| (*id, j["job_state"].to_string()))
            .collect();
        assert!(
            not_completed.is_empty(),
            "not COMPLETED: {not_completed:?}\n{}",
            self.logs()
        );
        let runs = Markers::read(&self.markers());
        for id in acknowledged {
            assert_eq!(runs.of(*id).len(), 1, "job {id} ran once\n{}", self.logs());
        }
        jobs
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        for (_, child) in std::mem::take(&mut self.ctlds) {
            common::kill_child(&mut Some(child));
        }
        for (_, child) in std::mem::take(&mut self.nodes) {
            common::kill_child(&mut Some(child));
        }
        common::kill_jobs_under(self.dir.path());
    }
}
