//! A small cluster on one machine, each daemon on a host of its own: a
//! network namespace per host, joined by veth pairs to a bridge in a
//! "switch" namespace. Host 0 runs gctld; hosts 1.. run gnoded. A host is cut
//! off by taking its switch port down. Addresses (10.99.0.0/24) exist only
//! inside the test's namespaces; everything is removed on drop, also when
//! the test fails. Needs root and `ip` (CI runs as root).
//!
//! Jobs append run markers to a shared file (`Markers`), so a test knows
//! what really ran, where and when, whatever the controller recorded.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use serde_json::Value;

use crate::common;

const PREFIX: &str = "gst";

fn ip(args: &[&str]) {
    common::run_checked("ip", args, "the `ip` command (iproute2)");
}

/// Removes namespaces left by test processes that no longer exist.
fn remove_stale() {
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        let Some(rest) = name.strip_prefix(PREFIX) else {
            continue;
        };
        let pid: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
        if !pid.is_empty() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = Command::new("ip").args(["netns", "del", name]).status();
            let _ = std::fs::remove_dir_all(format!("/etc/netns/{name}"));
        }
    }
}

/// Hosts on one bridge.
pub struct Net {
    id: String,
    hosts: usize,
}

impl Net {
    pub fn new(hosts: usize) -> Net {
        static N: AtomicU32 = AtomicU32::new(0);
        assert!(
            unsafe { libc::geteuid() } == 0,
            "the network fault tests build network namespaces and must run as root (CI does)"
        );
        remove_stale();
        let id = format!(
            "{PREFIX}{}x{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        );
        let net = Net { id, hosts };
        net.write_hosts();
        let sw = net.switch();
        ip(&["netns", "add", &sw]);
        ip(&["-n", &sw, "link", "add", "br0", "type", "bridge"]);
        ip(&["-n", &sw, "link", "set", "br0", "up"]);
        for h in 0..hosts {
            let ns = net.ns(h);
            ip(&["netns", "add", &ns]);
            ip(&["-n", &ns, "link", "set", "lo", "up"]);
            let port = format!("p{h}");
            ip(&[
                "-n", &sw, "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns",
                &ns,
            ]);
            ip(&["-n", &sw, "link", "set", &port, "master", "br0"]);
            ip(&["-n", &sw, "link", "set", &port, "up"]);
            let addr = format!("{}/24", net.addr(h));
            ip(&["-n", &ns, "addr", "add", &addr, "dev", "eth0"]);
            ip(&["-n", &ns, "link", "set", "eth0", "up"]);
        }
        net
    }

    fn switch(&self) -> String {
        format!("{}s", self.id)
    }

    pub fn ns(&self, host: usize) -> String {
        format!("{}h{host}", self.id)
    }

    pub fn addr(&self, host: usize) -> String {
        format!("10.99.0.{}", host + 1)
    }

    /// Cuts `host` off the network (its switch port goes down).
    pub fn cut(&self, host: usize) {
        self.set_port(host, "down");
    }

    pub fn heal(&self, host: usize) {
        self.set_port(host, "up");
    }

    fn set_port(&self, host: usize, state: &str) {
        let port = format!("p{host}");
        ip(&["-n", &self.switch(), "link", "set", &port, state]);
    }

    /// `program` to be run on `host`.
    pub fn command(&self, host: usize, program: &Path) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns(host)]).arg(program);
        c
    }

    /// `program` to be run on `host` under host name `name` (a UTS
    /// namespace of its own), where every node's name resolves to its
    /// host's address (`ip netns exec` mounts `/etc/netns/NS/hosts` over
    /// `/etc/hosts`): what MPI needs of a cluster's hosts.
    pub fn named_command(&self, host: usize, name: &str, program: &Path) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns(host), "unshare", "--uts", "--"])
            .args([
                "sh",
                "-c",
                "hostname \"$1\" && shift && exec \"$@\"",
                "sh",
                name,
            ])
            .arg(program);
        c
    }

    /// Names host `i` (1..) `n{i}` in every host's `/etc/hosts`.
    fn write_hosts(&self) {
        let mut hosts = String::from("127.0.0.1 localhost\n");
        for h in 1..self.hosts {
            hosts.push_str(&format!("{} n{h}\n", self.addr(h)));
        }
        for h in 0..self.hosts {
            let dir = PathBuf::from(format!("/etc/netns/{}", self.ns(h)));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("hosts"), &hosts).unwrap();
        }
    }

    /// Moves the calling thread onto `host`'s network (only this thread:
    /// the test's own requests then go where the host's would).
    pub fn enter(&self, host: usize) {
        let f = std::fs::File::open(format!("/run/netns/{}", self.ns(host))).unwrap();
        let rc = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for h in 0..self.hosts {
            let _ = std::fs::remove_dir_all(format!("/etc/netns/{}", self.ns(h)));
            let _ = Command::new("ip")
                .args(["netns", "del", &self.ns(h)])
                .status();
        }
        let _ = Command::new("ip")
            .args(["netns", "del", &self.switch()])
            .status();
    }
}

/// gctld on host 0 and a gnoded on each other host.
pub struct Cluster {
    pub net: Net,
    pub dir: tempfile::TempDir,
    pub node_timeout: u64,
    ctld: Option<Child>,
    nodes: Vec<Option<Child>>,
    token: std::sync::OnceLock<String>,
    /// More options for every gnoded (`--sim-gpus ...`).
    node_args: Vec<String>,
}

pub const PORT: u16 = 6817;

impl Cluster {
    /// A controller with `--node-timeout node_timeout` and `nodes` nodes,
    /// all up.
    pub fn up(nodes: usize, node_timeout: u64) -> Cluster {
        Cluster::up_with(nodes, nodes, node_timeout)
    }

    /// Hosts for `nodes` nodes, of which the first `started` run gnoded.
    pub fn up_with(nodes: usize, started: usize, node_timeout: u64) -> Cluster {
        Cluster::up_with_node_args(nodes, started, node_timeout, &[])
    }

    /// [`Cluster::up_with`], every gnoded with `node_args` too.
    pub fn up_with_node_args(
        nodes: usize,
        started: usize,
        node_timeout: u64,
        node_args: &[&str],
    ) -> Cluster {
        let net = Net::new(nodes + 1);
        // The test's requests go from the controller's host.
        net.enter(0);
        let dir = tempfile::tempdir().unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        common::daemon_dir(&dir.path().join("ctl"));
        for i in 1..=nodes {
            common::daemon_dir(&dir.path().join(format!("node{i}")));
        }
        let mut c = Cluster {
            net,
            dir,
            node_timeout,
            ctld: None,
            nodes: (0..=nodes).map(|_| None).collect(),
            token: std::sync::OnceLock::new(),
            node_args: node_args.iter().map(|a| a.to_string()).collect(),
        };
        c.start_ctld();
        for i in 1..=started {
            c.start_node(i);
        }
        c.wait_nodes_up(started);
        c
    }

    pub fn wait_nodes_up(&self, n: usize) {
        self.wait(
            &format!("{n} nodes are up"),
            Duration::from_secs(30),
            || self.health().is_some_and(|h| h["nodes_up"] == n),
        );
    }

    /// Waits until `n` runs have marked their start.
    pub fn wait_started(&self, n: usize) {
        self.wait(
            &format!("{n} runs started"),
            Duration::from_secs(30),
            || Markers::read(&self.markers()).runs.len() >= n,
        );
    }

    /// The text gnoded of host `i` has logged.
    pub fn node_log(&self, i: usize) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("node{i}.log"))).unwrap_or_default()
    }

    pub fn url(&self) -> String {
        format!("http://{}:{PORT}", self.net.addr(0))
    }

    fn log(&self, name: &str) -> std::fs::File {
        common::append_log(&self.dir.path().join(name))
    }

    pub fn start_ctld(&mut self) {
        let child = self
            .net
            .command(0, &common::bin("gctld"))
            .arg("--state-dir")
            .arg(self.dir.path().join("ctl"))
            .args(["--listen", &format!("{}:{PORT}", self.net.addr(0))])
            .args(["--allow-plain-http", "--min-job-age", "0"])
            .args(["--node-timeout", &self.node_timeout.to_string()])
            .stdin(Stdio::null())
            .stderr(self.log("ctld.log"))
            .spawn()
            .unwrap();
        self.ctld = Some(child);
        self.wait("gctld answers", Duration::from_secs(30), || {
            self.health().is_some()
        });
    }

    /// Starts gnoded `n{i}` on host `i`.
    pub fn start_node(&mut self, i: usize) {
        let listen = format!("{}:6818", self.net.addr(i));
        self.start_node_as(i, &format!("n{i}"), &listen);
    }

    /// Starts a gnoded on host `i` under `name`, listening on `listen`.
    pub fn start_node_as(&mut self, i: usize, name: &str, listen: &str) {
        let child = self.node_command(i, name, listen).spawn().unwrap();
        self.nodes[i] = Some(child);
    }

    pub fn node_command(&self, i: usize, name: &str, listen: &str) -> Command {
        let mut cmd = self.net.named_command(i, name, &common::bin("gnoded"));
        cmd.arg("--state-dir")
            .arg(self.dir.path().join(format!("node{i}")))
            .arg("--cluster-key-file")
            .arg(self.dir.path().join("ctl/cluster.key"))
            .args([
                "--controller",
                &self.url(),
                "--listen",
                listen,
                "--name",
                name,
            ])
            .args(["--allow-plain-http", "--heartbeat-interval", "1"])
            // The tests submit as root, which a node refuses by default.
            .arg("--allow-root-jobs")
            .args(["--kill-wait", "1", "--workers", "4"])
            .args(&self.node_args)
            .stdin(Stdio::null())
            .stderr(self.log(&format!("node{i}.log")));
        cmd
    }

    fn kill(child: &mut Option<Child>) {
        common::kill_child(child);
    }

    /// kill -9 of gctld.
    pub fn kill_ctld(&mut self) {
        Cluster::kill(&mut self.ctld);
    }

    /// kill -9 of node `i`'s gnoded (its jobs live on).
    pub fn kill_node(&mut self, i: usize) {
        Cluster::kill(&mut self.nodes[i]);
    }

    pub fn health(&self) -> Option<Value> {
        healthz(&self.url())
    }

    /// A token for the test's user (root: an administrator).
    pub fn token(&self) -> &str {
        // Through the controller's socket (a file: no network between).
        let sock = format!("unix:{}", self.dir.path().join("ctl/ctld.sock").display());
        self.token.get_or_init(|| common::token(&sock))
    }

    fn api(&self, method: &str, path: &str) -> ureq::Request {
        let t = self.token();
        common::api(method, &format!("{}{path}", self.url()), t).timeout(Duration::from_secs(10))
    }

    pub fn get(&self, path: &str) -> Value {
        self.api("GET", path).call().unwrap().into_json().unwrap()
    }

    /// Every job the controller has, by id.
    pub fn jobs(&self) -> BTreeMap<u64, Value> {
        list_jobs(&self.url(), self.token()).unwrap()
    }

    /// Submits a marker job (see [`Markers::script`]) running `ticks`
    /// fifth-seconds, or an array of `tasks` of them; returns the id it was
    /// acknowledged with.
    pub fn submit(&self, ticks: u32, requeue: bool, tasks: Option<u32>) -> u64 {
        self.try_submit(ticks, requeue, tasks).unwrap()
    }

    /// [`Cluster::submit`], or why it was not acknowledged.
    pub fn try_submit(&self, ticks: u32, requeue: bool, tasks: Option<u32>) -> Result<u64, String> {
        let mut body = marker_job(&self.markers(), self.dir.path(), ticks, requeue);
        if let Some(n) = tasks {
            body["array"] = serde_json::json!({ "indices": (0..n).collect::<Vec<u32>>() });
        }
        let r: Value = self
            .api("POST", "/api/v1/jobs")
            .send_json(body)
            .map_err(|e| e.to_string())?
            .into_json()
            .map_err(|e| e.to_string())?;
        r["job_id"]
            .as_u64()
            .ok_or_else(|| format!("no job id in {r}"))
    }

    pub fn markers(&self) -> PathBuf {
        self.dir.path().join("markers")
    }

    pub fn wait(&self, what: &str, within: Duration, f: impl FnMut() -> bool) {
        if !common::poll(within, Duration::from_millis(100), f) {
            panic!("timed out waiting until {what}\n{}", self.logs());
        }
    }

    /// Waits until every job is final; returns them.
    pub fn settle(&self, within: Duration) -> BTreeMap<u64, Value> {
        let mut jobs = BTreeMap::new();
        self.wait("every job reached a final state", within, || {
            jobs = self.jobs();
            jobs.values().all(is_final)
        });
        jobs
    }

    pub fn logs(&self) -> String {
        let mut names = vec!["ctld.log".to_string()];
        names.extend((1..self.nodes.len()).map(|i| format!("node{i}.log")));
        names
            .iter()
            .map(|n| {
                let text = std::fs::read_to_string(self.dir.path().join(n)).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(40).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                format!("--- {n} (last lines)\n{}\n", tail.join("\n"))
            })
            .collect()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        Cluster::kill(&mut self.ctld);
        for n in &mut self.nodes {
            Cluster::kill(n);
        }
        common::kill_jobs_under(self.dir.path());
    }
}

/// `GET /healthz` of the controller at `url`, when it answers 200.
pub fn healthz(url: &str) -> Option<Value> {
    ureq::get(&format!("{url}/healthz"))
        .timeout(Duration::from_secs(2))
        .call()
        .ok()?
        .into_json()
        .ok()
}

/// Every job the controller at `url` has, by id, page by page (jobs that
/// left memory included).
pub fn list_jobs(url: &str, token: &str) -> Result<BTreeMap<u64, Value>, String> {
    let mut all = BTreeMap::new();
    let mut after = 0;
    loop {
        let v: Value = common::api(
            "GET",
            &format!("{url}/api/v1/jobs?state=all&history=true&limit=10000&after={after}"),
            token,
        )
        .timeout(Duration::from_secs(10))
        .call()
        .map_err(|e| e.to_string())?
        .into_json()
        .map_err(|e| e.to_string())?;
        for j in v["jobs"]
            .as_array()
            .ok_or_else(|| format!("no jobs in {v}"))?
        {
            all.insert(j["job_id"].as_u64().unwrap_or_default(), j.clone());
        }
        match v["next_after"].as_u64() {
            Some(n) => after = n,
            None => return Ok(all),
        }
    }
}

/// The submission of a marker job (see [`Markers::script`]) running
/// `ticks` fifth-seconds as the test's user, marking runs in `markers`.
pub fn marker_job(markers: &Path, dir: &Path, ticks: u32, requeue: bool) -> Value {
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    serde_json::json!({
        "name": format!("m{ticks}"),
        "script": Markers::script(markers, ticks),
        "working_dir": dir.display().to_string(),
        "user_name": "root", "uid": uid, "gid": gid,
        "environment": {"PATH": "/usr/bin:/bin"},
        "stdout": "/dev/null",
        "requeue": requeue,
    })
}

pub fn is_final(j: &Value) -> bool {
    !matches!(
        j["job_state"].as_str(),
        Some("PENDING" | "RUNNING" | "REQUEUED")
    )
}

/// One run of a job as its markers show it.
#[derive(Debug, Clone)]
pub struct Run {
    pub job: u64,
    pub run: u32,
    pub node: String,
    pub start: f64,
    /// The last time it was seen alive (its last tick or its end).
    pub last: f64,
    pub ended: bool,
}

/// What really ran: each job appends `start`, then a `tick` every 0.2 s,
/// then `end` to a shared file.
pub struct Markers {
    pub runs: Vec<Run>,
}

impl Markers {
    /// A script that runs for `ticks` fifth-seconds, marking as it goes.
    pub fn script(file: &Path, ticks: u32) -> String {
        let f = file.display();
        format!(
            "#!/bin/sh\n\
             id=\"$GSCHED_JOB_ID $GSCHED_JOB_RUN $SLURMD_NODENAME $(cat /proc/sys/kernel/random/boot_id)\"\n\
             echo \"start $id $(date +%s.%N)\" >> {f}\n\
             i=0\n\
             while [ $i -lt {ticks} ]; do sleep 0.2; echo \"tick $id $(date +%s.%N)\" >> {f}; i=$((i+1)); done\n\
             echo \"end $id $(date +%s.%N)\" >> {f}\n"
        )
    }

    pub fn read(file: &Path) -> Markers {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        let mut runs: BTreeMap<(u64, u32, String), Run> = BTreeMap::new();
        for line in text.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            let [kind, job, run, node, _boot, time] = f[..] else {
                continue;
            };
            let (Ok(job), Ok(run), Ok(time)) = (job.parse(), run.parse(), time.parse::<f64>())
            else {
                continue;
            };
            let r = runs.entry((job, run, node.to_string())).or_insert(Run {
                job,
                run,
                node: node.into(),
                start: time,
                last: time,
                ended: false,
            });
            r.start = r.start.min(time);
            r.last = r.last.max(time);
            r.ended |= kind == "end";
        }
        Markers {
            runs: runs.into_values().collect(),
        }
    }

    pub fn of(&self, job: u64) -> Vec<&Run> {
        self.runs.iter().filter(|r| r.job == job).collect()
    }
}

/// What went wrong, by kind, for a set of jobs and what really ran.
#[derive(Debug, Default, Clone)]
pub struct Verdict {
    pub acknowledged: usize,
    pub ran: usize,
    /// Two runs of one job alive at once (or one run launched twice).
    pub ran_twice: Vec<u64>,
    /// Never reached a final state.
    pub lost: Vec<u64>,
    /// COMPLETED without a finished run, NODE_FAIL with one (or without
    /// ever starting), or ended after running without any run marked.
    pub misrecorded: Vec<(u64, String)>,
    /// Ran to the end more than once, one after the other (a requeueable
    /// job whose completion the controller could not know of).
    pub completed_again: Vec<u64>,
}

impl Verdict {
    pub fn judge(jobs: &BTreeMap<u64, Value>, markers: &Markers) -> Verdict {
        let mut v = Verdict {
            acknowledged: jobs.len(),
            ..Verdict::default()
        };
        for (&id, j) in jobs {
            let mut runs = markers.of(id);
            runs.sort_by(|a, b| a.start.total_cmp(&b.start));
            if !runs.is_empty() {
                v.ran += 1;
            }
            let overlap = runs.windows(2).any(|w| w[1].start < w[0].last);
            let same_run_twice = runs.windows(2).any(|w| w[0].run == w[1].run);
            if overlap || same_run_twice {
                v.ran_twice.push(id);
            }
            if runs.iter().filter(|r| r.ended).count() > 1 {
                v.completed_again.push(id);
            }
            let state = j["job_state"].as_str().unwrap_or("?");
            let finished = runs.iter().any(|r| r.ended);
            let wrong = match state {
                "COMPLETED" if !finished => Some("COMPLETED but no run finished"),
                "NODE_FAIL" if finished => Some("NODE_FAIL but a run finished"),
                "NODE_FAIL" if runs.is_empty() => Some("NODE_FAIL but it never started"),
                "PENDING" | "RUNNING" | "REQUEUED" => {
                    v.lost.push(id);
                    None
                }
                _ => None,
            };
            if let Some(w) = wrong {
                v.misrecorded.push((id, w.into()));
            }
        }
        v
    }

    /// Panics, with the evidence, unless nothing went wrong.
    pub fn assert_clean(&self, cluster: &Cluster) {
        if self.ran_twice.is_empty() && self.lost.is_empty() && self.misrecorded.is_empty() {
            return;
        }
        let markers = Markers::read(&cluster.markers());
        let bad: Vec<u64> = self
            .ran_twice
            .iter()
            .chain(&self.lost)
            .chain(self.misrecorded.iter().map(|(id, _)| id))
            .copied()
            .collect();
        let mut evidence = String::new();
        for id in bad {
            let events = cluster
                .api("GET", &format!("/api/v1/jobs/{id}/events"))
                .call()
                .ok()
                .and_then(|r| r.into_string().ok())
                .unwrap_or_default();
            evidence.push_str(&format!(
                "job {id}: runs {:?}\n  events {events}\n",
                markers.of(id)
            ));
        }
        panic!("{self:?}\n{evidence}{}", cluster.logs());
    }
}
