//! `gsched bench swarm` against a real gctld (issue 42, item 6): the swarm's
//! nodes register, send heartbeats, take launches and report ends through
//! the sealed protocol, and the controller records what they report.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

struct Ctld(std::process::Child);

impl Drop for Ctld {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_swarm_of_nodes_takes_launches_and_reports_ends_through_the_real_protocol() {
    let dir = common::state_dir();
    let state = dir.path().join("ctl");
    common::daemon_dir(&state);
    let url = format!("http://127.0.0.1:{}", common::free_port());
    let ctld = Ctld(
        Command::new(common::bin("gctld"))
            .arg("--state-dir")
            .arg(&state)
            .args(["--listen", url.trim_start_matches("http://")])
            .args(["--allow-plain-http", "--min-job-age", "600"])
            .stdin(Stdio::null())
            .stderr(common::append_log(&dir.path().join("ctld.log")))
            .spawn()
            .unwrap(),
    );
    assert!(
        common::poll(Duration::from_secs(30), Duration::from_millis(100), || {
            ureq::get(&format!("{url}/healthz")).call().is_ok()
        }),
        "gctld did not answer"
    );
    let out = Command::new(common::bin("gsched"))
        .args(["bench", "swarm", "--nodes", "20", "--heartbeat-secs", "1"])
        .arg("--cluster-key-file")
        .arg(state.join("cluster.key"))
        .args([
            "--duration-secs",
            "4",
            "--submit-rate",
            "10",
            "--job-secs",
            "0.5",
        ])
        .args(["--ctld-pid", &ctld.0.id().to_string(), "--json"])
        .env("GSCHED_URL", &url)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "swarm failed: {}",
        common::stderr(&out)
    );
    let r: Value = serde_json::from_str(&common::stdout(&out)).unwrap();
    let w = &r["window"];
    let submitted = w["submitted"].as_u64().unwrap();
    assert!(submitted >= 20, "{r}");
    // Every job went to a swarm node; nothing failed on the way.
    assert_eq!(w["never_launched"], 0, "{r}");
    assert_eq!(w["launch"]["n"].as_u64().unwrap(), submitted, "{r}");
    for k in ["heartbeat_failures", "end_report_failures", "registrations"] {
        assert_eq!(w[k], 0, "{k}: {r}");
    }
    assert_eq!(r["registration_failures"], 0, "{r}");
    // 20 nodes, one a second, for 4 s.
    assert!(w["heartbeats"].as_u64().unwrap() >= 20 * 2, "{r}");
    let ended = w["ends_reported"].as_u64().unwrap();
    assert!(ended >= submitted / 2, "{r}");
    assert!(w["controller"]["rss_mib"].as_f64().unwrap() > 0.0, "{r}");
    assert!(w["squeue"]["n"].as_u64().unwrap() > 0, "{r}");
    // The controller took the ends: so many jobs completed, each on a
    // swarm node.
    let token = common::token(&url);
    let jobs: Value = common::api("GET", &format!("{url}/api/v1/jobs?state=all"), &token)
        .call()
        .unwrap()
        .into_json()
        .unwrap();
    let completed: Vec<&Value> = jobs["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|j| j["job_state"] == "COMPLETED")
        .collect();
    assert!(
        completed.len() as u64 >= ended,
        "{} < {ended}",
        completed.len()
    );
    assert!(completed
        .iter()
        .all(|j| j["nodes"].as_str().unwrap().starts_with("swarm")));
}
