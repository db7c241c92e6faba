//! End to end: `gsched up` on loopback, driven through the CLI binaries.

mod common;

use std::time::Duration;

use common::{stderr, stdout, Gsched};

const T: Duration = Duration::from_secs(20);

#[test]
fn script_with_directives_runs_and_writes_its_output_file() {
    let g = Gsched::start(&["--sim-gpus", "1xA100-40GB"]);
    let script = g.script(
        "job.sh",
        "#!/bin/bash\n#SBATCH -J x\n#SBATCH -o out-%j.txt\necho \"name=$SLURM_JOB_NAME id=$SLURM_JOB_ID node=$SLURM_JOB_NODELIST arg=$1\"\necho err >&2\n",
    );
    let out = g.cli("gsub", &[&script, "first-arg"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let line = stdout(&out);
    assert!(line.starts_with("Submitted batch job "), "{line}");
    let id: u64 = line.trim().rsplit(' ').next().unwrap().parse().unwrap();
    let job = g.wait_state(id, "COMPLETED", T);
    assert_eq!(job["name"], "x");
    assert_eq!(job["exit_code"], 0);
    let path = g.work.path().join(format!("out-{id}.txt"));
    assert_eq!(job["standard_output"], path.display().to_string());
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(
        text,
        format!("name=x id={id} node=node1 arg=first-arg\nerr\n")
    );

    let acct = g.cli("gacct", &["-j", &id.to_string()]);
    let acct = stdout(&acct);
    assert!(acct.lines().nth(1).unwrap().contains("COMPLETED"), "{acct}");
}

#[test]
fn failing_script_ends_failed_with_its_exit_code() {
    let g = Gsched::start(&[]);
    let script = g.script("fail.sh", "#!/bin/sh\necho about to fail\nexit 7\n");
    let id = g.submit(&[&script]);
    let job = g.wait_state(id, "FAILED", T);
    assert_eq!(job["exit_code"], 7);
    assert_eq!(job["state_reason"], "NonZeroExitCode");
    let acct: serde_json::Value =
        serde_json::from_str(&stdout(&g.cli("gacct", &["--json", "-j", &id.to_string()]))).unwrap();
    assert_eq!(acct["jobs"][0]["job_state"], "FAILED");
    assert_eq!(acct["jobs"][0]["exit_code"], 7);
    // Default output file in the submit directory.
    let out = std::fs::read_to_string(g.work.path().join(format!("slurm-{id}.out"))).unwrap();
    assert_eq!(out, "about to fail\n");
}

#[test]
fn time_limit_ends_the_job_as_timeout() {
    let g = Gsched::start(&[]);
    let script = g.script("slow.sh", "#!/bin/sh\necho $$ > pid.txt\nsleep 60\n");
    let id = g.submit(&["-t", "0:01", &script]);
    let job = g.wait_state(id, "TIMEOUT", T);
    assert_eq!(job["state_reason"], "TimeLimit");
    assert!(
        job["elapsed"].as_i64().unwrap() >= 1,
        "ran its whole limit: {job}"
    );
    let pid: i32 = std::fs::read_to_string(g.work.path().join("pid.txt"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "job process {pid} still alive"
    );
}

#[test]
fn gcancel_ends_a_sleeping_job_cancelled_and_kills_its_processes() {
    let g = Gsched::start(&[]);
    let script = g.script(
        "sleep.sh",
        "#!/bin/sh\nsleep 300 &\necho $! > child.txt\nwait\n",
    );
    let id = g.submit(&[&script]);
    g.wait_state(id, "RUNNING", T);
    let child = g.work.path().join("child.txt");
    g.wait_until("the job wrote its child's pid", T, || child.exists());
    let out = g.cli("gcancel", &[&id.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    g.wait_state(id, "CANCELLED", T);
    let pid: i32 = std::fs::read_to_string(&child)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    g.wait_until("the background child is gone", T, || {
        !std::path::Path::new(&format!("/proc/{pid}")).exists()
    });

    // A finished job: silent success. An unknown one: Slurm's message, exit 1.
    assert!(g.cli("gcancel", &[&id.to_string()]).status.success());
    let out = g.cli("gcancel", &["424242"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out),
        "gcancel: error: Kill job error on job id 424242: Invalid job id specified\n"
    );
}

#[test]
fn gcancel_signal_reaches_the_job_without_cancelling_it() {
    let g = Gsched::start(&[]);
    let script = g.script(
        "trap.sh",
        "#!/bin/bash\ntrap 'echo got USR1 > sig.txt; exit 0' USR1\ntouch ready.txt\nwhile true; do sleep 0.1; done\n",
    );
    let id = g.submit(&[&script]);
    g.wait_until("the job is ready", T, || {
        g.work.path().join("ready.txt").exists()
    });
    let out = g.cli("gcancel", &["--signal", "USR1", &id.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    g.wait_state(id, "COMPLETED", T);
    assert_eq!(
        std::fs::read_to_string(g.work.path().join("sig.txt")).unwrap(),
        "got USR1\n"
    );
}

#[test]
fn queued_jobs_survive_kill9_and_none_runs_twice() {
    let mut g = Gsched::start(&["--workers", "1"]);
    let log = g.work.path().join("runs.log");
    let script = g.script(
        "once.sh",
        &format!(
            "#!/bin/sh\necho $SLURM_JOB_ID >> {}\nsleep 1\n",
            log.display()
        ),
    );
    let ids: Vec<u64> = (0..4).map(|_| g.submit(&[&script])).collect();
    g.wait_state(ids[0], "RUNNING", T);
    assert_eq!(g.job(ids[3])["job_state"], "PENDING");
    g.kill9();
    g.restart();
    for id in &ids {
        g.wait_state(*id, "COMPLETED", Duration::from_secs(30));
    }
    let runs = std::fs::read_to_string(&log).unwrap();
    let mut seen: Vec<&str> = runs.lines().collect();
    seen.sort();
    let mut want: Vec<String> = ids.iter().map(|i| i.to_string()).collect();
    want.sort();
    assert_eq!(seen, want, "every job ran exactly once");
    // Ids continue after the restart.
    let next = g.submit(&[&script]);
    assert_eq!(next, ids[3] + 1);
}

#[test]
fn running_job_lost_in_a_crash_ends_node_fail_or_is_requeued() {
    let mut g = Gsched::start(&[]);
    let script = g.script(
        "long.sh",
        "#!/bin/sh\necho start >> starts-$SLURM_JOB_ID.txt\nsleep 300\n",
    );
    let plain = g.submit(&["--no-requeue", &script]);
    // Requeued: as Slurm's JobRequeue=1, the default.
    let requeue = g.submit(&[&script]);
    g.wait_state(plain, "RUNNING", T);
    g.wait_state(requeue, "RUNNING", T);
    g.wait_until("both jobs started", T, || {
        g.work.path().join(format!("starts-{requeue}.txt")).exists()
            && g.work.path().join(format!("starts-{plain}.txt")).exists()
    });
    // The daemon dies, and the jobs' processes die with the machine.
    g.kill9();
    g.kill_jobs();
    g.restart();
    let lost = g.wait_state(plain, "NODE_FAIL", T);
    assert_eq!(lost["exit_code"], serde_json::Value::Null);
    let again = g.wait_state(requeue, "RUNNING", T);
    assert_eq!(again["restart_cnt"], 1);
    let starts = g.work.path().join(format!("starts-{requeue}.txt"));
    g.wait_until("the requeued job ran again", T, || {
        std::fs::read_to_string(&starts)
            .unwrap_or_default()
            .lines()
            .count()
            == 2
    });
    assert!(g.cli("gcancel", &[&requeue.to_string()]).status.success());
    g.wait_state(requeue, "CANCELLED", T);
}

#[test]
fn running_job_is_adopted_after_a_crash_and_keeps_its_outcome() {
    let mut g = Gsched::start(&[]);
    let script = g.script(
        "adopt.sh",
        "#!/bin/sh\ntouch started\nwhile [ ! -e go ]; do sleep 0.1; done\nexit 4\n",
    );
    let id = g.submit(&[&script]);
    g.wait_until("the job started", T, || {
        g.work.path().join("started").exists()
    });
    g.kill9();
    g.restart();
    assert_eq!(g.job(id)["job_state"], "RUNNING");
    std::fs::write(g.work.path().join("go"), b"").unwrap();
    let job = g.wait_state(id, "FAILED", T);
    assert_eq!(job["exit_code"], 4);
}

#[test]
fn isolated_job_sees_only_its_instance() {
    let g = Gsched::start(&["--sim-gpus", "1xA100-40GB:2g.10gb*2,1g.5gb*3"]);
    let info: serde_json::Value =
        serde_json::from_str(&stdout(&g.cli("ginfo", &["--json"]))).unwrap();
    let mems: Vec<u64> = info["instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["memory_mib"].as_u64().unwrap())
        .collect();
    assert_eq!(mems, vec![9856, 9856, 4864, 4864, 4864]);
    let script = g.script(
        "gpu.sh",
        "#!/bin/sh\necho \"$CUDA_VISIBLE_DEVICES $SLURM_JOB_GPUS\"\n",
    );
    let a = g.submit(&["--mig", "1g.5gb", &script]);
    let b = g.submit(&["--isolated", "--gpu-mem", "6G", &script]);
    let ja = g.wait_state(a, "COMPLETED", T);
    let jb = g.wait_state(b, "COMPLETED", T);
    let uuid = |j: &serde_json::Value| j["gpu_instance"].as_str().unwrap().to_string();
    let inst = |u: &str| {
        info["instances"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["uuid"] == u)
            .cloned()
            .unwrap()
    };
    assert_eq!(inst(&uuid(&ja))["profile"], "1g.5gb");
    assert_eq!(
        inst(&uuid(&jb))["profile"],
        "2g.10gb",
        "6G needs the smallest instance over 6 GiB"
    );
    let out = std::fs::read_to_string(g.work.path().join(format!("slurm-{a}.out"))).unwrap();
    assert_eq!(out, format!("{} 0\n", uuid(&ja)));
}

#[test]
fn bad_input_gets_a_clear_error_and_nothing_is_queued() {
    let g = Gsched::start(&[]);
    let cases: Vec<(Vec<&str>, Option<&str>, &str)> = vec![
        (vec!["--bogus", "x.sh"], None, "gsub: error: unexpected argument '--bogus' found\n"),
        (vec!["-t", "soon"], Some("#!/bin/sh\ntrue\n"), "gsub: error: invalid time limit 'soon': expected minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS or UNLIMITED\n"),
        (vec![], Some("echo no shebang\n"), "gsub: error: invalid job: this does not look like a batch script: the first line must start with #! followed by the path to an interpreter\n"),
        (vec![], Some("#!/bin/sh\n#SBATCH --time\ntrue\n"), "gsub: error: script line 2: a value is required for '--time <TIME>' but none was supplied\n"),
        (vec!["--gres=gpu:0"], Some("#!/bin/sh\ntrue\n"), "gsub: error: --gres=gpu:0: a GPU request of 0 is not a GPU request; leave the option out\n"),
        (vec!["--gpu-mem", "lots"], Some("#!/bin/sh\ntrue\n"), "gsub: error: invalid memory size 'lots': expected a number with an optional K, M, G or T suffix (e.g. 500M, 4G)\n"),
        (vec!["missing.sh"], None, "gsub: error: cannot read batch script missing.sh: No such file or directory (os error 2)\n"),
    ];
    for (args, stdin, want) in cases {
        let out = g.cli_in("gsub", &args, g.work.path(), stdin);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert_eq!(stderr(&out), want, "{args:?}");
        assert_eq!(stdout(&out), "");
    }
    let all: serde_json::Value = g.get("/api/v1/jobs?state=all").unwrap();
    assert_eq!(all["jobs"].as_array().unwrap().len(), 0);

    // The API answers malformed requests with JSON errors.
    let r = g
        .req("POST", "/api/v1/jobs")
        .set("content-type", "application/json")
        .send_string("{");
    match r {
        Err(ureq::Error::Status(400, resp)) => {
            let body: serde_json::Value = resp.into_json().unwrap();
            assert!(
                body["error"]
                    .as_str()
                    .unwrap()
                    .starts_with("invalid JSON body"),
                "{body}"
            );
        }
        other => panic!("expected 400, got {other:?}"),
    }
    match g.req("GET", "/api/v1/jobs/77").call() {
        Err(ureq::Error::Status(404, resp)) => {
            let body: serde_json::Value = resp.into_json().unwrap();
            assert_eq!(body["error"], "Invalid job id specified: 77");
        }
        other => panic!("expected 404, got {other:?}"),
    }
    match g.req("GET", "/api/v1/jobs?state=BOGUS").call() {
        Err(ureq::Error::Status(400, _)) => {}
        other => panic!("expected 400, got {other:?}"),
    }
    // The internal API wants the cluster key.
    match ureq::post(&format!("{}/internal/v1/jobs/ended", g.url))
        .send_json(serde_json::json!({"node": "node1", "ended": []}))
    {
        Err(ureq::Error::Status(401, _)) => {}
        other => panic!("expected 401, got {other:?}"),
    }
}

#[test]
fn gqueue_shows_pending_reason_and_filters() {
    let g = Gsched::start(&["--workers", "1"]);
    let script = g.script("q.sh", "#!/bin/sh\nsleep 30\n");
    let a = g.submit(&["-J", "first", &script]);
    let b = g.submit(&["-J", "second", &script]);
    g.wait_state(a, "RUNNING", T);
    g.wait_until("b has a reason", T, || {
        g.job(b)["state_reason"] == "Resources"
    });
    let q = stdout(&g.cli("gqueue", &[]));
    let lines: Vec<&str> = q.lines().collect();
    assert_eq!(lines.len(), 3, "{q}");
    assert!(
        lines[0]
            .trim_start()
            .starts_with("JOBID PARTITION     NAME     USER ST"),
        "{q}"
    );
    assert!(
        lines[1].contains(" R ") && lines[1].contains("node1"),
        "{q}"
    );
    assert!(
        lines[2].contains("PD") && lines[2].contains("(Resources)"),
        "{q}"
    );
    let only_b = stdout(&g.cli("gqueue", &["-h", "-j", &b.to_string()]));
    assert_eq!(only_b.lines().count(), 1);
    assert!(only_b.contains("second"));
    let by_name = stdout(&g.cli("gqueue", &["-h", "-n", "first"]));
    assert!(by_name.contains("first") && !by_name.contains("second"));
    let none = stdout(&g.cli("gqueue", &["-h", "-t", "COMPLETED"]));
    assert_eq!(none, "");
    g.cli("gcancel", &[&a.to_string(), &b.to_string()]);
    g.wait_state(b, "CANCELLED", T);
}

#[test]
fn a_job_is_adopted_even_if_the_crash_came_before_its_pid_file() {
    let mut g = Gsched::start(&["--workers", "2"]);
    let script = g.script(
        "window.sh",
        "#!/bin/sh\necho run >> runs.txt\ntouch started\nwhile [ ! -e go ]; do sleep 0.1; done\nexit 3\n",
    );
    let id = g.submit(&["--requeue", &script]);
    g.wait_until("the job started", T, || {
        g.work.path().join("started").exists()
    });
    g.kill9();
    // gnoded died between starting the shepherd and recording its pid.
    let pid_file = g
        .state
        .path()
        .join(format!("spool/node1/job-{id}/shepherd.pid"));
    std::fs::remove_file(&pid_file).unwrap();
    g.restart();
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        g.job(id)["job_state"],
        "RUNNING",
        "the job must be adopted, not requeued"
    );
    assert!(
        pid_file.exists(),
        "the adopted shepherd's pid is recorded again"
    );
    std::fs::write(g.work.path().join("go"), b"").unwrap();
    let job = g.wait_state(id, "FAILED", T);
    assert_eq!(job["exit_code"], 3);
    assert_eq!(job["restart_cnt"], 0);
    assert_eq!(
        std::fs::read_to_string(g.work.path().join("runs.txt")).unwrap(),
        "run\n",
        "ran exactly once"
    );
}
