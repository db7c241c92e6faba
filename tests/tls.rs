//! TLS between hosts (issue 14): gctld and gnoded as separate processes,
//! each serving https with a certificate from a CA made in the test, the
//! node reaching the controller and the controller the node over TLS, and
//! the commands (outside and inside the job) trusting that CA. Plain HTTP
//! off loopback is refused.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const T: Duration = Duration::from_secs(30);

/// PEM files of a CA and of a certificate it signed for 127.0.0.1.
struct Pki {
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

fn make_pki(dir: &Path, name: &str) -> Pki {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, format!("{name} test CA"));
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])
        .unwrap()
        .signed_by(&key, &ca, &ca_key)
        .unwrap();
    let pki = Pki {
        ca: dir.join(format!("{name}-ca.pem")),
        cert: dir.join(format!("{name}-cert.pem")),
        key: dir.join(format!("{name}-key.pem")),
    };
    std::fs::write(&pki.ca, ca.pem()).unwrap();
    std::fs::write(&pki.cert, cert.pem()).unwrap();
    std::fs::write(&pki.key, key.serialize_pem()).unwrap();
    std::fs::set_permissions(&pki.key, std::fs::Permissions::from_mode(0o600)).unwrap();
    pki
}

struct Cluster {
    dir: tempfile::TempDir,
    pki: Pki,
    port: u16,
    children: Vec<Child>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        for (pgid, _) in gsched_noded::spool::shepherds_under(&self.dir.path().join("node")) {
            // SAFETY: plain kill(2) on a process group this test started.
            unsafe {
                libc::kill(-pgid, libc::SIGKILL);
            }
        }
    }
}

impl Cluster {
    fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    fn log(&self, name: &str) -> std::fs::File {
        std::fs::File::create(self.dir.path().join(name)).unwrap()
    }

    fn logs(&self) -> String {
        ["ctld.log", "noded.log"]
            .iter()
            .map(|l| std::fs::read_to_string(self.dir.path().join(l)).unwrap_or_default())
            .collect()
    }

    fn start() -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        for d in ["ctl", "node"] {
            common::daemon_dir(&dir.path().join(d));
        }
        let pki = make_pki(dir.path(), "site");
        // Job users read the CA (GSCHED_TLS_CA) and pass through to it.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut c = Cluster {
            dir,
            pki,
            port: common::free_port(),
            children: Vec::new(),
        };
        let tls = |cmd: &mut Command, pki: &Pki| {
            cmd.arg("--tls-cert")
                .arg(&pki.cert)
                .arg("--tls-key")
                .arg(&pki.key)
                .arg("--tls-ca")
                .arg(&pki.ca);
        };
        let mut ctld = Command::new(common::bin("gctld"));
        ctld.arg("--state-dir")
            .arg(c.dir.path().join("ctl"))
            .args(["--listen", &format!("127.0.0.1:{}", c.port)]);
        tls(&mut ctld, &c.pki);
        let child = ctld
            .stdin(Stdio::null())
            .stderr(c.log("ctld.log"))
            .spawn()
            .unwrap();
        c.children.push(child);
        c.wait("gctld answers over TLS", |c| c.health().is_some());
        let mut noded = Command::new(common::bin("gnoded"));
        noded
            .arg("--allow-root-jobs")
            .arg("--state-dir")
            .arg(c.dir.path().join("node"))
            .arg("--cluster-key-file")
            .arg(c.dir.path().join("ctl/cluster.key"))
            .args(["--controller", &c.url(), "--listen", "127.0.0.1:0"])
            .args([
                "--name",
                "n1",
                "--heartbeat-interval",
                "1",
                "--kill-wait",
                "1",
            ])
            .args(["--sim-gpus", "1xA30:1g.6gb*4"]);
        tls(&mut noded, &c.pki);
        let child = noded
            .stdin(Stdio::null())
            .stderr(c.log("noded.log"))
            .spawn()
            .unwrap();
        c.children.push(child);
        c.wait("the node registers over TLS", |c| {
            c.health().is_some_and(|h| h["nodes_up"] == 1)
        });
        c
    }

    fn agent(&self, ca: &Path) -> ureq::Agent {
        ureq::AgentBuilder::new()
            .tls_config(gsched_cli::tls::client_config(ca).unwrap())
            .build()
    }

    fn health(&self) -> Option<Value> {
        self.agent(&self.pki.ca)
            .get(&format!("{}/healthz", self.url()))
            .call()
            .ok()?
            .into_json()
            .ok()
    }

    fn wait(&self, what: &str, f: impl Fn(&Cluster) -> bool) {
        let deadline = Instant::now() + T;
        while Instant::now() < deadline {
            if f(self) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("timed out waiting until {what}\n{}", self.logs());
    }

    /// Runs a command of the workspace against the controller, over TCP
    /// with `token`, trusting `ca`.
    fn cli(&self, name: &str, args: &[&str], token: &str, ca: &Path) -> Output {
        Command::new(common::bin(name))
            .args(args)
            .current_dir(self.dir.path())
            .env("GSCHED_URL", self.url())
            .env("GSCHED_TOKEN", token)
            .env("GSCHED_TLS_CA", ca)
            .output()
            .unwrap()
    }
}

#[test]
fn controller_node_and_commands_talk_tls() {
    let c = Cluster::start();
    // A token through the local socket (found through /healthz over TLS).
    let out = Command::new(common::bin("gsched"))
        .args(["token", "--quiet"])
        .env("GSCHED_URL", c.url())
        .env("GSCHED_TLS_CA", &c.pki.ca)
        .env_remove("GSCHED_TOKEN")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", common::stderr(&out));
    let token = common::stdout(&out).trim().to_string();
    // The job asks the controller about itself from inside, over TLS with
    // the CA gnoded hands it.
    let script = c.dir.path().join("job.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\necho \"ca=$GSCHED_TLS_CA url=$GSCHED_URL\"\n{} -j \"$SLURM_JOB_ID\"\n",
            common::bin("gacct").display()
        ),
    )
    .unwrap();
    let out = c.cli(
        "gsub",
        &["--parsable", "-o", "job.out", script.to_str().unwrap()],
        &token,
        &c.pki.ca,
    );
    assert!(
        out.status.success(),
        "{}\n{}",
        common::stderr(&out),
        c.logs()
    );
    let id: u64 = common::stdout(&out).trim().parse().unwrap();
    let state = |c: &Cluster| -> String {
        let out = c.cli(
            "gacct",
            &["--json", "-j", &id.to_string()],
            &token,
            &c.pki.ca,
        );
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        v["jobs"][0]["job_state"].as_str().unwrap_or("").to_string()
    };
    c.wait("the job completes (launch and end report over TLS)", |c| {
        state(c) == "COMPLETED"
    });
    let output = std::fs::read_to_string(c.dir.path().join("job.out")).unwrap();
    assert!(
        output.contains(&format!("ca={} url={}", c.pki.ca.display(), c.url())),
        "{output}"
    );
    // gacct inside the job saw the job running.
    assert!(
        output.lines().any(|l| {
            l.split_whitespace().next() == Some(id.to_string().as_str()) && l.contains("RUNNING")
        }),
        "gacct inside the job: {output}"
    );

    // A client trusting another CA is refused at the handshake.
    let other = make_pki(c.dir.path(), "other");
    let out = c.cli("gqueue", &[], &token, &other.ca);
    assert!(!out.status.success());
    let err = common::stderr(&out);
    assert!(
        err.contains("cannot reach") && err.contains("certificate"),
        "{err}"
    );
    // A CA file that is not one is named.
    let out = c.cli("gqueue", &[], &token, &c.pki.key);
    assert!(
        common::stderr(&out).contains("GSCHED_TLS_CA"),
        "{}",
        common::stderr(&out)
    );
    // Plain HTTP to the TLS port gets no answer.
    let plain = ureq::get(&format!("http://127.0.0.1:{}/healthz", c.port)).call();
    assert!(plain.is_err());
}

#[test]
fn plain_http_off_loopback_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    common::daemon_dir(&dir.path().join("ctl"));
    let out = Command::new(common::bin("gctld"))
        .arg("--state-dir")
        .arg(dir.path().join("ctl"))
        .args(["--listen", &format!("0.0.0.0:{}", common::free_port())])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = common::stderr(&out);
    assert!(
        err.contains("--tls-cert") && err.contains("0.0.0.0"),
        "{err}"
    );
    // A key others may read is refused, with the fix.
    let pki = make_pki(dir.path(), "loose");
    std::fs::set_permissions(&pki.key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = Command::new(common::bin("gctld"))
        .arg("--state-dir")
        .arg(dir.path().join("ctl"))
        .args(["--listen", &format!("127.0.0.1:{}", common::free_port())])
        .arg("--tls-cert")
        .arg(&pki.cert)
        .arg("--tls-key")
        .arg(&pki.key)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        common::stderr(&out).contains("chmod 600"),
        "{}",
        common::stderr(&out)
    );
}

#[test]
fn gsched_up_serves_tls_with_a_self_signed_certificate() {
    let dir = tempfile::tempdir().unwrap();
    common::daemon_dir(&dir.path().join("state"));
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let (cert_path, key_path) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert_path, cert.pem()).unwrap();
    std::fs::write(&key_path, key.serialize_pem()).unwrap();
    std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let port = common::free_port();
    let log = std::fs::File::create(dir.path().join("up.log")).unwrap();
    let mut up = Command::new(common::bin("gsched"))
        .arg("up")
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--node-name", "n1", "--sim-gpus", "1xA30"])
        .arg("--tls-cert")
        .arg(&cert_path)
        .arg("--tls-key")
        .arg(&key_path)
        .stdin(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let agent = ureq::AgentBuilder::new()
        .tls_config(gsched_cli::tls::client_config(&cert_path).unwrap())
        .build();
    let deadline = Instant::now() + T;
    let mut up_nodes = None;
    while Instant::now() < deadline && up_nodes != Some(1) {
        up_nodes = agent
            .get(&format!("https://127.0.0.1:{port}/healthz"))
            .call()
            .ok()
            .and_then(|r| r.into_json::<Value>().ok())
            .and_then(|h| h["nodes_up"].as_u64());
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = up.kill();
    let _ = up.wait();
    assert_eq!(
        up_nodes,
        Some(1),
        "the local node reaches the controller over TLS\n{}",
        std::fs::read_to_string(dir.path().join("up.log")).unwrap_or_default()
    );
}
