//! Two controllers on one PostgreSQL database (issue 40), each on a host of
//! its own (network namespaces, see `net`), with the database on a third
//! (TLS, verified) and gnoded on the rest. One leads through the lease;
//! faults are injected into the leader, the database and the standby while
//! jobs are submitted and run. Jobs mark what really ran; every scenario
//! then checks that every acknowledged job reached a final state, none ran
//! twice, and the records match the markers.
//!
//! Needs root and PostgreSQL's server programs (scripts/test installs
//! them). The scenarios run one at a time: they depend on lease and fence
//! timing, which a loaded 2-core machine would stretch.

mod common;
mod net;
#[allow(dead_code)]
#[path = "../ctld/tests/support/postgres.rs"]
mod postgres;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use net::{Markers, Net, Verdict};
use postgres::{Network, PrivatePostgres};
use serde_json::Value;

fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// The database's host, the controllers', and the first node's.
const DB: usize = 0;
const CONTROLLERS: [usize; 2] = [1, 2];
const FIRST_NODE: usize = 3;
const PORT: u16 = 6817;
/// The node timeout: nodes fence after two thirds of it, 20 s, well past
/// a takeover with the default lease (6 s and a poll).
const NODE_TIMEOUT: u64 = 30;

/// Two controllers, a database and `nodes` gnoded.
struct Pair {
    /// Stopped before the namespaces go (fields drop in this order).
    pg: PrivatePostgres,
    net: Net,
    dir: tempfile::TempDir,
    database: String,
    ctlds: BTreeMap<usize, Child>,
    nodes: Vec<Child>,
    token: OnceLock<String>,
}

impl Pair {
    fn up(nodes: usize) -> Pair {
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
            nodes: Vec::new(),
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

    fn url(&self, host: usize) -> String {
        format!("http://{}:{PORT}", self.net.addr(host))
    }

    fn urls(&self) -> String {
        CONTROLLERS.map(|h| self.url(h)).join(",")
    }

    fn log_file(&self, name: &str) -> std::fs::File {
        common::append_log(&self.dir.path().join(name))
    }

    fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(name)).unwrap_or_default()
    }

    fn start_ctld(&mut self, host: usize) {
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

    fn start_node(&mut self, host: usize) {
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
        self.nodes.push(child);
    }

    /// kill -9 of the controller on `host`.
    fn kill_ctld(&mut self, host: usize) {
        let mut child = self.ctlds.remove(&host);
        common::kill_child(&mut child);
    }

    fn signal_ctld(&self, host: usize, signal: i32) {
        let pid = self.ctlds[&host].id() as i32;
        // SAFETY: kill(2) on a child this test started.
        unsafe { libc::kill(pid, signal) };
    }

    /// Whether the controller on `host` has exited (and how), reaping it.
    fn exited(&mut self, host: usize) -> Option<std::process::ExitStatus> {
        let status = self.ctlds.get_mut(&host)?.try_wait().unwrap()?;
        self.ctlds.remove(&host);
        Some(status)
    }

    /// What the controller on `host` says of itself: its role and epoch.
    fn role(&self, host: usize) -> Option<(String, i64)> {
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

    fn leader(&self) -> Option<usize> {
        CONTROLLERS
            .into_iter()
            .find(|&h| self.role(h).is_some_and(|(role, _)| role == "leader"))
    }

    /// Waits until a controller other than `not` leads; which, and when.
    fn wait_leader(&self, not: Option<usize>, within: Duration) -> (usize, Instant) {
        let mut found = None;
        self.wait("a controller leads", within, |p| {
            found = p.leader().filter(|&h| Some(h) != not);
            found.is_some()
        });
        (found.unwrap(), Instant::now())
    }

    fn leader_health(&self) -> Option<Value> {
        let h = self.leader()?;
        ureq::get(&format!("{}/healthz", self.url(h)))
            .timeout(Duration::from_secs(2))
            .call()
            .ok()?
            .into_json()
            .ok()
    }

    fn token(&self) -> &str {
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

    fn markers(&self) -> PathBuf {
        self.dir.path().join("markers")
    }

    /// Submits a marker job running `ticks` fifth-seconds, not requeued
    /// (so it must run exactly once), to whichever controller leads,
    /// trying for up to 60 s; the id it was acknowledged with, if any.
    fn submit(&self, ticks: u32) -> Option<u64> {
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        let body = serde_json::json!({
            "name": format!("m{ticks}"),
            "script": Markers::script(&self.markers(), ticks),
            "working_dir": self.dir.path().display().to_string(),
            "user_name": "root", "uid": uid, "gid": gid,
            "environment": {"PATH": "/usr/bin:/bin"},
            "stdout": "/dev/null",
            "requeue": false,
        });
        let token = self.token().to_string();
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            for h in CONTROLLERS {
                let r = common::api("POST", &format!("{}/api/v1/jobs", self.url(h)), &token)
                    .timeout(Duration::from_secs(5))
                    .send_json(body.clone());
                if let Ok(r) = r {
                    let v: Value = r.into_json().unwrap();
                    return v["job_id"].as_u64();
                }
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        None
    }

    /// Every job the leader has, by id.
    fn jobs(&self) -> BTreeMap<u64, Value> {
        let leader = self.leader().expect("a controller leads");
        let mut all = BTreeMap::new();
        let mut after = 0;
        loop {
            let v: Value = common::api(
                "GET",
                &format!(
                    "{}/api/v1/jobs?state=all&history=true&limit=10000&after={after}",
                    self.url(leader)
                ),
                self.token(),
            )
            .timeout(Duration::from_secs(10))
            .call()
            .unwrap()
            .into_json()
            .unwrap();
            for j in v["jobs"].as_array().unwrap() {
                all.insert(j["job_id"].as_u64().unwrap(), j.clone());
            }
            match v["next_after"].as_u64() {
                Some(n) => after = n,
                None => return all,
            }
        }
    }

    fn wait(&self, what: &str, within: Duration, mut f: impl FnMut(&Pair) -> bool) {
        if !common::poll(within, Duration::from_millis(100), || f(self)) {
            panic!("timed out waiting until {what}\n{}", self.logs());
        }
    }

    fn logs(&self) -> String {
        let mut names: Vec<String> = CONTROLLERS.map(|h| format!("ctl{h}.log")).to_vec();
        names.extend((0..self.nodes.len()).map(|i| format!("node{}.log", FIRST_NODE + i)));
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
    fn judge(&self, acknowledged: &[u64], within: Duration) -> BTreeMap<u64, Value> {
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
        for child in std::mem::take(&mut self.nodes) {
            common::kill_child(&mut Some(child));
        }
        common::kill_jobs_under(self.dir.path());
    }
}

/// Submits `n` jobs of 2 to 10 s; their ids.
fn stream(p: &Pair, n: u32) -> Vec<u64> {
    (0..n)
        .map(|i| {
            p.submit(10 + (i % 5) * 10)
                .expect("acknowledged within 60 s")
        })
        .collect()
}

/// kill -9 of the leader while jobs run and more are submitted: the standby
/// takes over within the lease and a poll (measured), nodes move to it,
/// running jobs keep running, and every acknowledged job runs once.
#[test]
fn the_leader_killed_during_submissions_is_replaced_and_nothing_is_lost() {
    let _s = serial();
    let mut p = Pair::up(2);
    let (first, _) = p.wait_leader(None, Duration::from_secs(10));
    let mut ids = stream(&p, 12);
    p.wait("jobs run", Duration::from_secs(30), |p| {
        !Markers::read(&p.markers()).runs.is_empty()
    });
    let killed = Instant::now();
    p.kill_ctld(first);
    // Submissions go on: they wait for the new leader.
    ids.extend(stream(&p, 8));
    let (second, at) = p.wait_leader(Some(first), Duration::from_secs(30));
    let took = at.saturating_duration_since(killed);
    eprintln!(
        "failover: the standby led {:.1} s after kill -9 of the leader",
        took.as_secs_f64()
    );
    assert!(
        took < Duration::from_secs(15),
        "took {took:?}\n{}",
        p.logs()
    );
    assert_ne!(first, second);
    ids.extend(stream(&p, 8));
    // The old leader comes back as a standby.
    p.start_ctld(first);
    p.wait("the old leader stands by", Duration::from_secs(30), |p| {
        p.role(first).is_some_and(|(role, _)| role == "standby")
    });
    p.judge(&ids, Duration::from_secs(180));
}

/// The leader stopped (SIGSTOP) past the takeover, then continued: it finds
/// its lease gone, calls no node and writes nothing, and steps down.
#[test]
fn a_leader_paused_past_its_lease_steps_down_without_acting() {
    let _s = serial();
    let mut p = Pair::up(2);
    let (first, _) = p.wait_leader(None, Duration::from_secs(10));
    let mut ids = stream(&p, 8);
    p.signal_ctld(first, libc::SIGSTOP);
    let (second, _) = p.wait_leader(Some(first), Duration::from_secs(30));
    ids.extend(stream(&p, 8));
    p.wait("the new leader launched", Duration::from_secs(30), |p| {
        Markers::read(&p.markers()).runs.len() >= 10
    });
    p.signal_ctld(first, libc::SIGCONT);
    p.wait(
        "the old leader stepped down",
        Duration::from_secs(20),
        |p| p.log(&format!("ctl{first}.log")).contains("stepping down"),
    );
    let mut status = None;
    for _ in 0..100 {
        status = p.exited(first);
        if status.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        status.is_some_and(|s| !s.success()),
        "the old leader exits with a failure: {status:?}\n{}",
        p.logs()
    );
    assert_eq!(p.leader(), Some(second));
    p.judge(&ids, Duration::from_secs(180));
}

/// The leader cut off from the database but not from the nodes: it cannot
/// renew, steps down before its lease runs out, and the standby leads.
#[test]
fn a_leader_cut_off_from_the_database_steps_down_and_the_standby_leads() {
    let _s = serial();
    let mut p = Pair::up(2);
    let (first, _) = p.wait_leader(None, Duration::from_secs(10));
    let mut ids = stream(&p, 8);
    let blackhole = format!("{}/32", p.net.addr(DB));
    common::run_checked(
        "ip",
        &[
            "-n",
            &p.net.ns(first),
            "route",
            "add",
            "blackhole",
            &blackhole,
        ],
        "iproute2",
    );
    let (second, _) = p.wait_leader(Some(first), Duration::from_secs(30));
    p.wait(
        "the old leader stepped down",
        Duration::from_secs(20),
        |p| p.log(&format!("ctl{first}.log")).contains("stepping down"),
    );
    ids.extend(stream(&p, 8));
    common::run_checked(
        "ip",
        &[
            "-n",
            &p.net.ns(first),
            "route",
            "del",
            "blackhole",
            &blackhole,
        ],
        "iproute2",
    );
    // Started again, as its service manager would: a standby now.
    p.wait("the old leader exited", Duration::from_secs(20), |p| {
        p.ctlds[&first].id() > 0
            && std::fs::read_to_string(format!("/proc/{}/stat", p.ctlds[&first].id()))
                .map_or(true, |s| s.contains(" Z "))
    });
    let _ = p.exited(first);
    p.start_ctld(first);
    p.wait("the old leader stands by", Duration::from_secs(30), |p| {
        p.role(first).is_some_and(|(role, _)| role == "standby")
    });
    assert_eq!(p.leader(), Some(second));
    p.judge(&ids, Duration::from_secs(180));
}

/// The database restarted under a running cluster: the leader opens its
/// connections again (or steps down for a commit it cannot be sure of,
/// and the standby leads); nothing is lost.
#[test]
fn a_database_restart_loses_nothing() {
    let _s = serial();
    let mut p = Pair::up(2);
    let mut ids = stream(&p, 8);
    p.pg.restart();
    ids.extend(stream(&p, 8));
    for h in CONTROLLERS {
        if p.exited(h).is_some() {
            p.start_ctld(h);
        }
    }
    p.wait_leader(None, Duration::from_secs(30));
    ids.extend(stream(&p, 4));
    p.judge(&ids, Duration::from_secs(180));
}

/// The standby killed and started again: the leader goes on undisturbed.
#[test]
fn a_standby_restarted_changes_nothing() {
    let _s = serial();
    let mut p = Pair::up(2);
    let (leader, _) = p.wait_leader(None, Duration::from_secs(10));
    let standby = CONTROLLERS.into_iter().find(|&h| h != leader).unwrap();
    let epoch = p.role(leader).unwrap().1;
    let mut ids = stream(&p, 6);
    p.kill_ctld(standby);
    ids.extend(stream(&p, 6));
    p.start_ctld(standby);
    p.wait("the standby is back", Duration::from_secs(30), |p| {
        p.role(standby).is_some_and(|(role, _)| role == "standby")
    });
    ids.extend(stream(&p, 6));
    assert_eq!(p.role(leader), Some(("leader".into(), epoch)));
    p.judge(&ids, Duration::from_secs(180));
}
