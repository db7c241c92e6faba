//! Jobs run as their submitter: a root node switches to the job's uid; an
//! unprivileged node refuses other users' jobs. These tests need root (CI
//! runs as root) and say so when skipped.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::Gsched;
use serde_json::json;

const T: Duration = Duration::from_secs(20);
const NOBODY: u32 = 65534;

fn is_root() -> bool {
    // SAFETY: getuid cannot fail.
    unsafe { libc::getuid() == 0 }
}

fn spec(dir: &str, uid: u32, user: &str, script: &str) -> serde_json::Value {
    json!({
        "name": "who", "script": script, "working_dir": dir,
        "user_name": user, "uid": uid, "gid": uid,
        "environment": {"PATH": "/usr/bin:/bin"}
    })
}

/// `program` run as nobody (uid and gid 65534, no other groups).
fn as_nobody(program: &std::path::Path) -> Command {
    let mut c = Command::new("setpriv");
    c.args([
        "--reuid",
        "65534",
        "--regid",
        "65534",
        "--clear-groups",
        "--",
    ])
    .arg(program);
    c
}

fn submit(url: &str, body: serde_json::Value) -> u64 {
    let r: serde_json::Value =
        common::api("POST", &format!("{url}/api/v1/jobs"), &common::token(url))
            .send_json(body)
            .unwrap()
            .into_json()
            .unwrap();
    r["job_id"].as_u64().unwrap()
}

#[test]
fn root_node_runs_the_job_as_its_user() {
    if !is_root() {
        eprintln!("skipped: needs root to switch users");
        return;
    }
    let g = Gsched::start(&[]);
    std::fs::set_permissions(g.work.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let dir = g.work.path().display().to_string();
    let id = submit(
        &g.url,
        spec(&dir, NOBODY, "nobody", "#!/bin/sh\nid -u\nid -g\n"),
    );
    g.wait_state(id, "COMPLETED", T);
    let out = std::fs::read_to_string(g.work.path().join(format!("slurm-{id}.out"))).unwrap();
    assert_eq!(out, format!("{NOBODY}\n{NOBODY}\n"));
    let meta = std::fs::metadata(g.work.path().join(format!("slurm-{id}.out"))).unwrap();
    assert_eq!(
        std::os::unix::fs::MetadataExt::uid(&meta),
        NOBODY,
        "output file belongs to the user"
    );

    // A working directory the user cannot enter fails the job with the reason.
    let private = tempfile::tempdir().unwrap();
    std::fs::set_permissions(private.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let id = submit(
        &g.url,
        spec(
            &private.path().display().to_string(),
            NOBODY,
            "nobody",
            "#!/bin/sh\ntrue\n",
        ),
    );
    let job = g.wait_state(id, "FAILED", T);
    let reason = job["state_reason"].as_str().unwrap();
    assert!(
        reason.starts_with("cannot change to working directory"),
        "{reason}"
    );
}

#[test]
fn unprivileged_node_refuses_other_users_jobs() {
    if !is_root() {
        eprintln!("skipped: needs root to start gsched as another user");
        return;
    }
    let state = tempfile::tempdir().unwrap();
    // Sticky, as /tmp is: nobody may create its state directory here, and
    // no one else may swap it (so nobody's commands trust its socket).
    std::fs::set_permissions(state.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    // Copies of the binaries that nobody can execute wherever the tree lives.
    for b in ["gsched", "gsched-shepherd"] {
        std::fs::copy(common::bin(b), state.path().join(b)).unwrap();
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let mut child = as_nobody(&state.path().join("gsched"))
        .args(["up", "--state-dir"])
        .arg(state.path().join("s"))
        .args(["--listen", &format!("127.0.0.1:{port}"), "--node-name", "n"])
        .env("HOME", state.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + T;
    while ureq::get(&format!("{url}/healthz"))
        .call()
        .ok()
        .and_then(|r| r.into_json::<serde_json::Value>().ok())
        .is_none_or(|h| h["nodes_up"] != 1)
    {
        assert!(
            std::time::Instant::now() < deadline,
            "gsched up as nobody did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // The controller's own user is its administrator; it submits for a
    // user its node (run by nobody) cannot serve. (Root's commands do not
    // trust a socket of nobody's, and only root may run jobs as root.)
    let user = common::users::TestUser::new();
    let out = as_nobody(&state.path().join("gsched"))
        .args(["token", "--quiet", "--lifetime", "600"])
        .env("GSCHED_URL", &url)
        .env("GSCHED_SOCKET", state.path().join("s/ctld.sock"))
        .env_remove("GSCHED_TOKEN")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", common::stderr(&out));
    let token = common::stdout(&out).trim().to_string();
    let mut body = spec("/tmp", user.uid, &user.name, "#!/bin/sh\ntrue\n");
    body["gid"] = serde_json::json!(user.gid);
    let r: serde_json::Value = common::api("POST", &format!("{url}/api/v1/jobs"), &token)
        .send_json(body)
        .unwrap()
        .into_json()
        .unwrap();
    let id = r["job_id"].as_u64().unwrap();
    let mut job = serde_json::Value::Null;
    while std::time::Instant::now() < deadline {
        job = common::api("GET", &format!("{url}/api/v1/jobs/{id}"), &token)
            .call()
            .unwrap()
            .into_json()
            .unwrap();
        if job["job_state"] == "FAILED" {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(job["job_state"], "FAILED", "{job}");
    assert_eq!(
        job["state_reason"],
        format!(
            "gnoded runs as uid 65534 and cannot run jobs of user {} (uid {}); run gnoded as root to serve several users",
            user.name, user.uid
        )
    );
}
