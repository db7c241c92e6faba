//! The REST API end to end (issue 8): authentication (tokens in both header
//! forms, bad, expired and forged tokens, the local socket), what users may
//! see and change, every public endpoint, Prometheus metrics, the OpenAPI
//! document, and the slurmrestd shapes.

mod common;

use std::time::Duration;

use common::{api, bin, Gsched};
use serde_json::{json, Value};

const T: Duration = Duration::from_secs(20);

/// Status and JSON body of a request, whatever the status.
fn call(req: ureq::Request, body: Option<Value>) -> (u16, Value, Option<String>) {
    let res = match body {
        Some(b) => req.send_json(b),
        None => req.call(),
    };
    let r = match res {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("transport error: {e}"),
    };
    let status = r.status();
    let www = r.header("www-authenticate").map(str::to_string);
    let text = r.into_string().unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
        www,
    )
}

fn token_for(g: &Gsched, user: &str, lifetime: &str) -> String {
    let out = g.cli(
        "gsched",
        &["token", "--quiet", "--user", user, "--lifetime", lifetime],
    );
    assert!(out.status.success(), "{}", common::stderr(&out));
    common::stdout(&out).trim().to_string()
}

fn is_root() -> bool {
    // SAFETY: getuid cannot fail.
    unsafe { libc::getuid() == 0 }
}

#[test]
fn tokens_are_required_checked_and_explained() {
    let g = Gsched::start(&[]);
    let url = |p: &str| format!("{}{p}", g.url);
    // No token: 401 with a reason and a challenge; the open paths answer.
    let (s, b, www) = call(ureq::get(&url("/api/v1/jobs")), None);
    assert_eq!(s, 401);
    assert!(b["error"].as_str().unwrap().contains("gsched token"), "{b}");
    assert_eq!(www.as_deref(), Some("Bearer realm=\"gsched\""));
    for open in ["/healthz", "/metrics", "/openapi.json", "/", "/ui/app.js"] {
        assert_eq!(call(ureq::get(&url(open)), None).0, 200, "{open}");
    }
    // The token in either form.
    let t = g.token.clone();
    let bearer = call(api("GET", &url("/api/v1/whoami"), &t), None);
    assert_eq!(bearer.0, 200);
    assert_eq!(bearer.1["via"], "token");
    let slurm = call(
        ureq::get(&url("/api/v1/whoami")).set("X-SLURM-USER-TOKEN", &t),
        None,
    );
    assert_eq!(slurm.1["user"], bearer.1["user"]);
    // Both forms, forged, tampered, expired, malformed: 401 with why.
    let (s, b, _) = call(
        api("GET", &url("/api/v1/jobs"), &t).set("X-SLURM-USER-TOKEN", &t),
        None,
    );
    assert_eq!(s, 401);
    assert!(b["error"].as_str().unwrap().contains("not both"), "{b}");
    // One signature character changed, away from the end (the last
    // character of an HS256 signature carries padding bits: only some
    // values decode at all).
    let mut forged: Vec<char> = t.chars().collect();
    let k = forged.len() - 5;
    forged[k] = if forged[k] == 'A' { 'B' } else { 'A' };
    let forged: String = forged.into_iter().collect();
    let (s, b, _) = call(api("GET", &url("/api/v1/jobs"), &forged), None);
    assert_eq!(s, 401);
    assert!(b["error"].as_str().unwrap().contains("signature"), "{b}");
    let (s, b, _) = call(api("GET", &url("/api/v1/jobs"), "not-a-token"), None);
    assert_eq!(s, 401);
    assert!(
        b["error"].as_str().unwrap().contains("not a gsched token"),
        "{b}"
    );
    let short = common::stdout(&g.cli("gsched", &["token", "--quiet", "--lifetime", "1"]))
        .trim()
        .to_string();
    assert_eq!(call(api("GET", &url("/api/v1/jobs"), &short), None).0, 200);
    std::thread::sleep(Duration::from_millis(2100));
    let (s, b, _) = call(api("GET", &url("/api/v1/jobs"), &short), None);
    assert_eq!(s, 401);
    assert!(b["error"].as_str().unwrap().contains("expired"), "{b}");
    // A lifetime over the maximum is refused, naming the limit.
    let out = g.cli("gsched", &["token", "--lifetime", "99999999"]);
    assert!(!out.status.success());
    assert!(
        common::stderr(&out).contains("token_max_lifetime"),
        "{}",
        common::stderr(&out)
    );
    // scontrol token prints SLURM_JWT=...
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(bin("gsched"), dir.path().join("scontrol")).unwrap();
    let out = g.run_program(
        &dir.path().join("scontrol"),
        &["token", "lifespan=60"],
        g.work.path(),
        None,
        &[],
    );
    assert!(common::stdout(&out).starts_with("SLURM_JWT=ey"), "{out:?}");
}

#[test]
fn users_see_all_jobs_but_change_only_their_own() {
    if !is_root() {
        eprintln!("skipped: needs root (an administrator) to issue another user's token");
        return;
    }
    let g = Gsched::start(&[]);
    let url = |p: &str| format!("{}{p}", g.url);
    let script = g.script("long.sh", "#!/bin/sh\nexport SECRET=hunter2\nsleep 30\n");
    let id = g.submit(&["-o", "/dev/null", &script]);
    g.wait_state(id, "RUNNING", T);
    let nobody = token_for(&g, "nobody", "600");
    let who = call(api("GET", &url("/api/v1/whoami"), &nobody), None).1;
    assert_eq!(who["user"], "nobody");
    assert_eq!(who["admin"], false);
    // Sees the job, not its script or environment.
    let (s, j, _) = call(
        api("GET", &url(&format!("/api/v1/jobs/{id}")), &nobody),
        None,
    );
    assert_eq!(s, 200);
    assert!(!j.to_string().contains("hunter2"), "{j}");
    assert!(j.get("environment").is_none());
    let (s, b, _) = call(
        api("GET", &url(&format!("/api/v1/jobs/{id}/script")), &nobody),
        None,
    );
    assert_eq!(s, 403);
    assert!(
        b["error"].as_str().unwrap().contains("belongs to root"),
        "{b}"
    );
    let listed = call(api("GET", &url("/slurm/v0.0.44/jobs"), &nobody), None).1;
    assert!(!listed.to_string().contains("hunter2"), "{listed}");
    // May not cancel, hold, requeue, suspend, resume or add steps to it,
    // through either API.
    for (m, p) in [
        ("DELETE", format!("/api/v1/jobs/{id}")),
        ("POST", format!("/api/v1/jobs/{id}/requeue")),
        ("POST", format!("/api/v1/jobs/{id}/hold")),
        ("POST", format!("/api/v1/jobs/{id}/suspend")),
        ("POST", format!("/api/v1/jobs/{id}/resume")),
        ("DELETE", format!("/slurm/v0.0.44/job/{id}")),
    ] {
        let (s, b, _) = call(api(m, &url(&p), &nobody), Some(json!({})));
        assert_eq!(s, 403, "{m} {p}: {b}");
    }
    let (s, _, _) = call(
        api("POST", &url(&format!("/api/v1/jobs/{id}/steps")), &nobody),
        Some(json!({"name": "x"})),
    );
    assert_eq!(s, 403);
    // May not submit as someone else, nor mint tokens over TCP.
    let spec = json!({"name": "x", "script": "#!/bin/sh\n", "working_dir": "/tmp",
        "user_name": "root", "uid": 0, "gid": 0});
    let (s, b, _) = call(api("POST", &url("/api/v1/jobs"), &nobody), Some(spec));
    assert_eq!(s, 403);
    assert!(
        b["error"]
            .as_str()
            .unwrap()
            .contains("only an administrator"),
        "{b}"
    );
    let (s, _, _) = call(
        api("POST", &url("/api/v1/tokens"), &nobody),
        Some(json!({})),
    );
    assert_eq!(s, 403);
    // A token may not claim another name.
    let (s, b, _) = call(
        ureq::get(&url("/api/v1/jobs"))
            .set("X-SLURM-USER-TOKEN", &nobody)
            .set("X-SLURM-USER-NAME", "root"),
        None,
    );
    assert_eq!(s, 401);
    assert!(b["error"].as_str().unwrap().contains("not root"), "{b}");
    assert_eq!(g.job(id)["job_state"], "RUNNING");
    // The owner (an administrator here) may.
    assert_eq!(
        call(g.req("DELETE", &format!("/api/v1/jobs/{id}")), None).0,
        200
    );
    g.wait_state(id, "CANCELLED", T);
    // A job of nobody's, cancelled by root: sacct's "CANCELLED by" names root.
    let spec = json!({"name": "theirs", "script": "#!/bin/sh\nsleep 30\n", "working_dir": "/tmp",
        "user_name": "", "uid": 0, "gid": 0, "stdout": "/dev/null"});
    let (s, b, _) = call(api("POST", &url("/api/v1/jobs"), &nobody), Some(spec));
    assert_eq!(s, 201, "{b}");
    let theirs = b["job_id"].as_u64().unwrap();
    assert_eq!(g.job(theirs)["user_name"], "nobody");
    assert_eq!(g.job(theirs)["user_id"], 65534);
    assert_eq!(
        call(g.req("DELETE", &format!("/api/v1/jobs/{theirs}")), None).0,
        200
    );
    let done = g.wait_state(theirs, "CANCELLED", T);
    assert_eq!(done["cancelled_by"], 0, "{done}");
    let out = g.cli("gacct", &["-j", &theirs.to_string(), "--json"]);
    assert!(
        common::stdout(&out).contains("\"cancelled_by\": 0")
            || common::stdout(&out).contains("\"cancelled_by\":0"),
        "{out:?}"
    );
}

#[test]
fn jobs_carry_a_token_of_their_user() {
    let g = Gsched::start(&[]);
    let script = g.script(
        "tok.sh",
        "#!/bin/sh\nprintf %s \"$GSCHED_TOKEN\" > token.tmp\nmv token.tmp token.txt\nsleep 60\n",
    );
    let id = g.submit(&["-o", "/dev/null", "-t", "2", &script]);
    let path = g.work.path().join("token.txt");
    g.wait_until("the job writes its token", T, || path.exists());
    let t = std::fs::read_to_string(&path).unwrap();
    let who = call(api("GET", &format!("{}/api/v1/whoami", g.url), &t), None).1;
    assert_eq!(who["user"], g.job(id)["user_name"]);
    assert_eq!(who["via"], "token");
    // Valid an hour past the 2-minute limit, counted from the start.
    let start = g.job(id)["start_time"].as_i64().unwrap();
    let life = who["expires"].as_i64().unwrap() - start;
    assert!((3720..3725).contains(&life), "token lifetime {life} s");
    // Good only while the job runs (tests/security.rs tries it after).
    g.cli("gcancel", &[&id.to_string()]);
    g.wait_state(id, "CANCELLED", T);
    let (status, _, _) = call(api("GET", &format!("{}/api/v1/whoami", g.url), &t), None);
    assert_eq!(status, 401);
}

#[test]
fn endpoints_answer_and_metrics_are_scraped() {
    let g = Gsched::start(&["--sim-gpus", "1xA100-40GB:2g.10gb*2,1g.5gb*3"]);
    let probe = g.script(
        "probe.sh",
        &format!(
            "#!/bin/sh\nexec {} run --mem 1G -- sleep 30\n",
            bin("gprobe").display()
        ),
    );
    let iso = g.script("iso.sh", "#!/bin/sh\nsleep 30\n");
    // The isolated job first, so the shared task goes elsewhere.
    let isolated = g.submit(&["-o", "/dev/null", "--isolated", "--mig", "1g.5gb", &iso]);
    g.wait_state(isolated, "RUNNING", T);
    let shared = g.submit(&["-o", "/dev/null", &probe]);
    g.wait_state(shared, "RUNNING", T);
    g.wait_until("the shared task's reservation shows", T, || {
        g.get("/api/v1/instances").is_some_and(|v| {
            v["instances"].as_array().unwrap().iter().any(|i| {
                i["reservations"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|r| r["job_id"] == shared && r["memory_mib"] == 1024)
            })
        })
    });
    // Job detail endpoints.
    let events = g.get(&format!("/api/v1/jobs/{shared}/events")).unwrap();
    let kinds: Vec<&str> = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds.first(), Some(&"submitted"), "{events}");
    assert!(kinds.contains(&"RUNNING"), "{events}");
    let script = g.get(&format!("/api/v1/jobs/{shared}/script")).unwrap();
    assert!(script["script"].as_str().unwrap().contains("gprobe"));
    let util = g.get("/api/v1/utilization").unwrap();
    let now = util["samples"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(now["isolated_instances"], 1, "{util}");
    assert!(
        now["memory_reserved_mib"].as_u64().unwrap() >= 4864 + 1024,
        "{util}"
    );
    // Metrics, as Prometheus scrapes them (no token).
    let text = ureq::get(&format!("{}/metrics", g.url))
        .call()
        .unwrap()
        .into_string()
        .unwrap();
    for want in [
        "gsched_jobs{state=\"RUNNING\",queue=\"shared\"} 1",
        "gsched_jobs{state=\"RUNNING\",queue=\"isolated\"} 1",
        "gsched_instance_isolated{node=\"node1\"",
        "gsched_instance_memory_reserved_bytes{",
        "gsched_instance_warps_in_use{",
        "gsched_oom_events_total 0",
        "gsched_queue_wait_seconds_count 2",
        "gsched_scheduler_pass_seconds_bucket",
        "gsched_probe_round_trip_seconds_count{node=\"node1\"} ",
        "gsched_placement_wait_seconds_bucket{le=",
        "# EOF",
    ] {
        assert!(text.contains(want), "/metrics lacks {want}:\n{text}");
    }
    assert!(
        text.contains(&format!(
            "gsched_instance_memory_reserved_bytes{{node=\"node1\",gpu=\"0\",instance=\"{}\"",
            g.job(isolated)["gpu_instance"].as_str().unwrap()
        )),
        "{text}"
    );
    // The OpenAPI document describes every public path the server answers.
    let doc: Value = ureq::get(&format!("{}/openapi.json", g.url))
        .call()
        .unwrap()
        .into_json()
        .unwrap();
    let paths = doc["paths"].as_object().unwrap();
    for p in [
        "/api/v1/jobs",
        "/api/v1/jobs/{id}",
        "/api/v1/jobs/{id}/script",
        "/api/v1/jobs/{id}/events",
        "/api/v1/jobs/{id}/suspend",
        "/api/v1/jobs/{id}/resume",
        "/api/v1/nodes/{name}/state",
        "/api/v1/nodes/{name}/mig",
        "/api/v1/tokens",
        "/api/v1/accounts",
        "/api/v1/instances",
        "/api/v1/utilization",
        "/metrics",
        "/slurm/{version}/jobs",
        "/slurm/{version}/job/submit",
        "/slurm/{version}/job/{job_id}",
        "/slurm/{version}/nodes",
        "/slurm/{version}/node/{node_name}",
        "/slurm/{version}/partitions",
        "/slurm/{version}/ping",
    ] {
        assert!(paths.contains_key(p), "openapi.json lacks {p}");
    }
    for p in paths.keys().filter(|p| !p.contains('{')) {
        let (s, b, _) = call(g.req("GET", p), None);
        assert_ne!(
            b["error"].as_str(),
            Some("no such endpoint; see docs/api.md"),
            "{p} is documented but not served ({s})"
        );
    }
}

#[test]
fn slurmrestd_shapes_and_errors() {
    let g = Gsched::start(&["--sim-gpus", "1xA100-40GB:2g.10gb*2,1g.5gb*3"]);
    let url = |p: &str| format!("{}{p}", g.url);
    let body = json!({"script": "#!/bin/sh\nsleep 30\n", "job": {
        "name": "rest", "current_working_directory": g.work.path().display().to_string(),
        "environment": ["PATH=/usr/bin:/bin"], "time_limit": 3,
        "standard_output": "/dev/null", "tres_per_job": "gres/gpu:2g.10gb:1", "x_unknown": 1}});
    let (s, sub, _) = call(g.req("POST", "/slurm/v0.0.41/job/submit"), Some(body));
    assert_eq!(s, 200, "{sub}");
    let id = sub["job_id"].as_u64().unwrap();
    assert_eq!(sub["result"]["job_id"], id);
    assert!(sub["warnings"][0]["description"]
        .as_str()
        .unwrap()
        .contains("x_unknown"));
    g.wait_state(id, "RUNNING", T);
    for v in ["v0.0.41", "v0.0.42", "v0.0.43", "v0.0.44"] {
        let (s, b, _) = call(g.req("GET", &format!("/slurm/{v}/job/{id}")), None);
        assert_eq!(s, 200);
        let j = &b["jobs"][0];
        assert_eq!(j["job_state"], json!(["RUNNING"]));
        assert_eq!(
            j["time_limit"],
            json!({"set": true, "infinite": false, "number": 3})
        );
        assert_eq!(j["gres_detail"], json!(["gpu:2g.10gb:1"]));
        assert_eq!(
            b["meta"]["plugin"]["data_parser"],
            format!("data_parser/{v}")
        );
        assert_eq!(b["errors"], json!([]));
    }
    let nodes = g.get("/slurm/v0.0.44/nodes/").unwrap();
    assert_eq!(
        nodes["nodes"][0]["gres"],
        "gpu:2g.10gb:2(IDX:0-1),gpu:1g.5gb:3(IDX:2-4)"
    );
    assert!(nodes["nodes"][0]["gres_used"]
        .as_str()
        .unwrap()
        .starts_with("gpu:2g.10gb:1(IDX:"));
    let later = g
        .get(&format!(
            "/slurm/v0.0.44/jobs?update_time={}",
            gsched_daemon::unix_now() + 100
        ))
        .unwrap();
    assert_eq!(later["jobs"], json!([]));
    let (s, b, _) = call(g.req("GET", "/slurm/v0.0.44/job/999"), None);
    assert_eq!(s, 404);
    assert_eq!(b["errors"][0]["error_number"], 2017);
    let (s, b, _) = call(
        g.req("POST", "/slurm/v0.0.44/job/submit"),
        Some(
            json!({"script": "#!/bin/sh\n", "job": {"current_working_directory": "/tmp", "environment": "PATH=/bin"}}),
        ),
    );
    assert_eq!(s, 400);
    assert!(b["errors"][0]["error"]
        .as_str()
        .unwrap()
        .contains("job.environment"));
    // Unauthenticated slurmrestd requests: 401.
    assert_eq!(call(ureq::get(&url("/slurm/v0.0.44/jobs")), None).0, 401);
    let (s, _, _) = call(g.req("DELETE", &format!("/slurm/v0.0.44/job/{id}")), None);
    assert_eq!(s, 200);
    g.wait_state(id, "CANCELLED", T);
}
