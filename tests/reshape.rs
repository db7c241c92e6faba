//! Live MIG re-partitioning (issue 19, item 2) on simulated GPUs: an A100
//! laid out as seven 1g.5gb instances, an isolated job asking for a
//! 3g.20gb instance, and `--repartition demand`: the controller orders a
//! reshape, gnoded retires idle instances, destroys them, creates the
//! 3g.20gb one (after the configured reconfiguration delay) and reports it;
//! the job runs there. A shared job running on another instance keeps
//! running throughout, and its instance is never touched.

mod common;

use std::time::Duration;

use common::{bin, Gsched};
use serde_json::Value;

const T: Duration = Duration::from_secs(60);

/// `gsched up` on simulated GPUs with `extra` flags, and CPUs to spare
/// (each job takes one; this machine may have two).
fn start(extra: &[&str]) -> Gsched {
    let spare = common::spare_cpus();
    let mut args = extra.to_vec();
    args.extend(spare.iter().map(String::as_str));
    Gsched::start(&args)
}

fn instances(g: &Gsched) -> Vec<Value> {
    g.get("/api/v1/instances").unwrap()["instances"]
        .as_array()
        .unwrap()
        .clone()
}

#[test]
fn an_isolated_job_gets_a_profile_made_for_it_while_shared_work_runs_on() {
    let g = start(&[
        "--sim-gpus",
        "1xA100-40GB:1g.5gb*7",
        "--repartition",
        "demand",
        "--mig-reconfig-secs",
        "0.5",
    ]);
    let before = instances(&g);
    assert_eq!(before.len(), 7);
    assert!(before.iter().all(|i| i["profile"] == "1g.5gb"));

    // A shared job holds a task on one instance for a while.
    let shared = g.script(
        "shared.sh",
        &format!(
            "#!/bin/sh\nexec {} run --mem 1G -- sleep 6\n",
            bin("gprobe").display()
        ),
    );
    let sid = g.submit(&["-J", "shared", "-o", "/dev/null", &shared]);
    g.wait_until("the shared task is placed", T, || {
        instances(&g).iter().any(|i| i["active_tasks"] == 1)
    });
    let busy = instances(&g)
        .into_iter()
        .find(|i| i["active_tasks"] == 1)
        .unwrap()["uuid"]
        .as_str()
        .unwrap()
        .to_string();

    // An isolated job asks for a profile no instance has: it is accepted
    // (a reshape can make it), not refused.
    let iso = g.script(
        "iso.sh",
        "#!/bin/sh\necho \"$CUDA_VISIBLE_DEVICES\" > \"$SLURM_SUBMIT_DIR/iso.out\"\n",
    );
    let iid = g.submit(&["--isolated", "--gres=gpu:3g.20gb:1", "-J", "iso", &iso]);
    let done = g.wait_state(iid, "COMPLETED", T);
    let got = done["gpu_instances"][0].as_str().unwrap().to_string();

    let after = instances(&g);
    let made = after
        .iter()
        .find(|i| i["uuid"] == got.as_str())
        .expect("the job's instance is listed");
    assert_eq!(made["profile"], "3g.20gb", "{made}");
    assert!(made["mig_start"].as_u64().is_some(), "{made}");
    // The layout is legal; what else was merged (the policy pools idle
    // instances while shared work waits) is the policy's choice.
    assert_legal(&after);
    // The shared job's instance was never retired, and the job ran on to
    // its end.
    assert!(
        after.iter().any(|i| i["uuid"] == busy.as_str()),
        "{after:?}"
    );
    let s = g.wait_state(sid, "COMPLETED", T);
    assert_eq!(s["exit_code"], 0);
    assert!(
        g.log().contains("reshape done"),
        "the controller heard the report"
    );
}

/// The MIG instances listed overlap nowhere on their GPU: each one's
/// memory slices (from its placement and profile) are its own.
fn assert_legal(instances: &[Value]) {
    let model = gsched_core::gpu::model("A100-40GB").unwrap();
    let mut used = 0u32;
    for i in instances {
        let p = model.profile(i["profile"].as_str().unwrap()).unwrap();
        let start = i["mig_start"].as_u64().expect("placement reported") as u32;
        let mask = ((1u32 << p.memory_slices) - 1) << start;
        assert_eq!(used & mask, 0, "overlapping instances: {instances:?}");
        used |= mask;
    }
}

#[test]
fn a_restart_in_the_middle_of_a_reshape_leaves_a_legal_layout_and_the_job_runs() {
    let mut g = start(&[
        "--sim-gpus",
        "1xA100-40GB:1g.5gb*7",
        "--repartition",
        "demand",
        "--mig-reconfig-secs",
        "3",
    ]);
    let iso = g.script(
        "iso.sh",
        "#!/bin/sh
true
",
    );
    let id = g.submit(&["--isolated", "--gres=gpu:3g.20gb:1", "-J", "iso", &iso]);
    // Killed between destroying the old instances and making the new one
    // (the reconfiguration takes 3 s).
    g.wait_until("a retired instance is destroyed", T, || {
        g.log().contains("instance destroyed")
    });
    assert!(
        !g.log().contains("instance created"),
        "too late to interrupt"
    );
    g.restart();
    let after = instances(&g);
    assert!(!after.is_empty());
    assert_legal(&after);
    // The job was never started; it runs once a reshape is done.
    let done = g.wait_state(id, "COMPLETED", T);
    assert_eq!(done["restart_cnt"], 0, "{done}");
    let now = instances(&g);
    assert_legal(&now);
    let got = done["gpu_instances"][0].as_str().unwrap();
    assert!(
        now.iter()
            .any(|i| i["uuid"] == got && i["profile"] == "3g.20gb"),
        "{now:?}"
    );
}

#[test]
fn without_repartitioning_a_profile_no_layout_has_is_refused() {
    let g = start(&["--sim-gpus", "1xA100-40GB:1g.5gb*7"]);
    let iso = g.script("iso.sh", "#!/bin/sh\ntrue\n");
    let out = g.cli("gsub", &["--isolated", "--gres=gpu:3g.20gb:1", &iso]);
    assert!(!out.status.success());
    assert!(
        common::stderr(&out).contains("Requested node configuration is not available"),
        "{}",
        common::stderr(&out)
    );
}

#[test]
fn a_gpu_served_by_mps_gets_servers_for_its_new_instances_and_quits_the_old() {
    let fake =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fake-mps-control");
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("gpus.toml");
    std::fs::write(
        &config,
        format!(
            "mps_control = \"{}\"\nmps_check_interval = 1\n[[gpu]]\nindex = 0\nmps = true\n",
            fake.display()
        ),
    )
    .unwrap();
    let config = config.display().to_string();
    let mut g = start(&[
        "--sim-gpus",
        "1xA100-40GB:1g.5gb*7",
        "--gpu-config",
        &config,
        "--repartition",
        "demand",
        "--mig-reconfig-secs",
        "0.2",
    ]);
    let log_dir = |i: &Value| i["mps"]["log_dir"].as_str().unwrap().to_string();
    let before = instances(&g);
    assert!(
        before.iter().all(|i| i["mps"]["state"] == "running"),
        "{before:?}"
    );
    let iso = g.script("iso.sh", "#!/bin/sh\ntrue\n");
    let id = g.submit(&["--isolated", "--gres=gpu:3g.20gb:1", "-J", "iso", &iso]);
    let done = g.wait_state(id, "COMPLETED", T);
    let got = done["gpu_instances"][0].as_str().unwrap();
    let after = instances(&g);
    let made = after.iter().find(|i| i["uuid"] == got).unwrap();
    assert_eq!(made["mps"]["state"], "running", "{made}");
    let log = std::fs::read_to_string(format!("{}/control.log", log_dir(made))).unwrap();
    assert!(log.contains(&format!("started for {got}")), "{log}");
    // Each retired instance's server was told to quit.
    let gone: Vec<&Value> = before
        .iter()
        .filter(|b| !after.iter().any(|a| a["uuid"] == b["uuid"]))
        .collect();
    assert!(!gone.is_empty());
    for b in gone {
        let log = std::fs::read_to_string(format!("{}/control.log", log_dir(b))).unwrap();
        assert!(log.lines().any(|l| l == "quit"), "{}: {log}", b["uuid"]);
    }
    // A clean stop quits the daemons it started since, too.
    assert!(g.terminate());
    let log = std::fs::read_to_string(format!("{}/control.log", log_dir(made))).unwrap();
    assert!(log.lines().any(|l| l == "quit"), "{log}");
}

#[test]
fn an_administrator_applies_freezes_and_shows_a_layout() {
    let mut g = start(&[
        "--sim-gpus",
        "1xA100-40GB:1g.5gb*7",
        "--repartition",
        "demand",
        "--mig-reconfig-secs",
        "0.2",
    ]);
    let show = |g: &Gsched| -> Value {
        let out = g.cli("gsched", &["mig", "show", "--json"]);
        assert!(out.status.success(), "{}", common::stderr(&out));
        serde_json::from_str::<Value>(&common::stdout(&out)).unwrap()[0]["gpus"][0].clone()
    };
    assert_eq!(show(&g)["frozen"], false);
    assert_eq!(show(&g)["reshapeable"], true);

    // A layout that cannot exist is refused, naming why; nothing changes.
    let out = g.cli(
        "gsched",
        &["mig", "apply", "node1", "0", "3g.20gb,3g.20gb,3g.20gb"],
    );
    assert!(!out.status.success());
    assert!(
        common::stderr(&out).contains("3g.20gb"),
        "{}",
        common::stderr(&out)
    );

    let out = g.cli(
        "gsched",
        &["mig", "apply", "node1", "0", "3g.20gb,1g.5gb*4"],
    );
    assert!(out.status.success(), "{}", common::stderr(&out));
    assert!(
        common::stdout(&out).contains("reshape"),
        "{}",
        common::stdout(&out)
    );
    g.wait_until("the layout is applied", T, || {
        let gpu = show(&g);
        gpu["reshaping"].as_array().unwrap().is_empty()
            && gpu["instances"]
                .as_array()
                .unwrap()
                .iter()
                .any(|i| i["profile"] == "3g.20gb" && i["start"] == 4)
    });
    let text = common::stdout(&g.cli("gsched", &["mig", "show", "node1"]));
    assert!(text.contains("re-partitioned on demand"), "{text}");
    assert_eq!(text.matches("1g.5gb").count(), 4, "{text}");

    // Frozen, the policy leaves the GPU alone: a job needing a 2g.10gb
    // waits; thawed, the GPU is re-made for it and it runs.
    let out = g.cli("gsched", &["mig", "freeze", "node1", "0"]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    assert_eq!(show(&g)["frozen"], true);
    let iso = g.script("iso.sh", "#!/bin/sh\ntrue\n");
    let id = g.submit(&["--isolated", "--gres=gpu:2g.10gb:1", "-J", "iso", &iso]);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(g.job(id)["job_state"], "PENDING");
    assert!(show(&g)["reshaping"].as_array().unwrap().is_empty());
    // Only an administrator changes a layout.
    let user = common::api("POST", &format!("{}/api/v1/tokens", g.url), &g.token)
        .send_json(serde_json::json!({"user": "nobody"}))
        .unwrap()
        .into_json::<Value>()
        .unwrap()["token"]
        .as_str()
        .unwrap()
        .to_string();
    let r = common::api("POST", &format!("{}/api/v1/nodes/node1/mig", g.url), &user)
        .send_json(serde_json::json!({"gpu": 0, "frozen": false}));
    match r {
        Err(ureq::Error::Status(403, _)) => {}
        other => panic!("a user thawed a GPU: {other:?}"),
    }
    assert_eq!(show(&g)["frozen"], true);
    let out = g.cli("gsched", &["mig", "thaw", "node1", "0"]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    g.wait_state(id, "COMPLETED", T);
    // A freeze is kept across a restart.
    assert!(g
        .cli("gsched", &["mig", "freeze", "node1", "0"])
        .status
        .success());
    g.restart();
    assert_eq!(show(&g)["frozen"], true);
}

#[test]
fn a_gpu_fixed_in_gpus_toml_is_not_re_partitioned() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("gpus.toml");
    std::fs::write(&config, "[[gpu]]\nindex = 0\nrepartition = \"fixed\"\n").unwrap();
    let config = config.display().to_string();
    let g = start(&[
        "--sim-gpus",
        "1xA100-40GB:1g.5gb*7",
        "--gpu-config",
        &config,
        "--repartition",
        "demand",
    ]);
    let text = common::stdout(&g.cli("gsched", &["mig", "show", "node1"]));
    assert!(text.contains("layout fixed"), "{text}");
    let out = g.cli("gsched", &["mig", "apply", "node1", "0", "7g.40gb"]);
    assert!(!out.status.success());
    assert!(
        common::stderr(&out).contains("does not re-partition GPU 0"),
        "{}",
        common::stderr(&out)
    );
    // Nothing on the node could ever make a 3g.20gb: refused at submission.
    let iso = g.script("iso.sh", "#!/bin/sh\ntrue\n");
    let out = g.cli("gsub", &["--isolated", "--gres=gpu:3g.20gb:1", &iso]);
    assert!(!out.status.success(), "{}", common::stdout(&out));
}
