//! The GPU layer end to end on simulated GPUs: inventory in ginfo and the
//! REST API, MIG layouts from the GPU config, isolated placement by profile,
//! and MPS control daemons (a fake control program stands in for NVIDIA's).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{bin, stderr, stdout, Gsched};
use serde_json::Value;

fn fake_mps_control() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fake-mps-control")
}

/// A GPU config in `dir` giving GPU 0 an MPS daemon of the fake control
/// program, checked every second.
fn fake_mps_config(dir: &Path) -> PathBuf {
    let config = dir.join("gpus.toml");
    std::fs::write(
        &config,
        format!(
            "mps_control = \"{}\"\nmps_check_interval = 1\n[[gpu]]\nindex = 0\nmps = true\n",
            fake_mps_control().display()
        ),
    )
    .unwrap();
    config
}

fn instances(g: &Gsched) -> Vec<Value> {
    g.get("/api/v1/instances").unwrap()["instances"]
        .as_array()
        .unwrap()
        .clone()
}

/// Pid of the control daemon serving `pipe_dir`, found as gnoded finds it.
fn daemon_for(pipe_dir: &str) -> Option<i32> {
    let want = format!("CUDA_MPS_PIPE_DIRECTORY={pipe_dir}");
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: i32 = e.file_name().to_str()?.parse().ok()?;
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let zombie = stat[stat.rfind(')')? + 2..].starts_with('Z');
        let is_daemon = cmd.split(|b| *b == 0).any(|a| a == b"-d")
            && env.split(|b| *b == 0).any(|v| v == want.as_bytes());
        (is_daemon && !zombie).then_some(pid)
    })
}

#[test]
fn ginfo_lists_the_case_paper_layout() {
    let g = Gsched::start(&["--sim-gpus", "1xA100-40GB:2g.10gb*2,1g.5gb*3"]);
    let out = g.cli("ginfo", &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let rows: Vec<&str> = text.lines().filter(|l| l.contains("MIG-")).collect();
    assert_eq!(rows.len(), 5, "{text}");
    assert_eq!(
        rows.iter().filter(|l| l.contains("0/9856 MiB")).count(),
        2,
        "{text}"
    );
    assert_eq!(
        rows.iter().filter(|l| l.contains("0/4864 MiB")).count(),
        3,
        "{text}"
    );
    let json: Value = serde_json::from_str(&stdout(&g.cli("ginfo", &["--json"]))).unwrap();
    let mut mem: Vec<u64> = json["instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["memory_mib"].as_u64().unwrap())
        .collect();
    mem.sort();
    assert_eq!(mem, vec![4864, 4864, 4864, 9856, 9856]);
    assert_eq!(instances(&g).len(), 5);
}

#[test]
fn isolated_jobs_get_the_profile_they_ask_for_and_its_mps_daemon() {
    let work = tempfile::tempdir().unwrap();
    let config = fake_mps_config(work.path());
    let mut g = Gsched::start(&[
        "--sim-gpus",
        "1xA100-40GB:2g.10gb,1g.5gb",
        "--gpu-config",
        config.to_str().unwrap(),
    ]);
    let inst = instances(&g);
    assert_eq!(inst.len(), 2);
    assert!(
        inst.iter().all(|i| i["mps"]["state"] == "running"),
        "{inst:?}"
    );
    let small = inst
        .iter()
        .find(|i| i["profile"] == "1g.5gb")
        .unwrap()
        .clone();
    let pipe = small["mps"]["pipe_dir"].as_str().unwrap().to_string();
    let ginfo = stdout(&g.cli("ginfo", &[]));
    assert_eq!(ginfo.matches(" running ").count(), 2, "{ginfo}");

    // --gres=gpu:PROFILE:1 selects that profile; the job gets the device and the pipe.
    let script = g.script(
        "env.sh",
        "#!/bin/sh\necho \"dev=$CUDA_VISIBLE_DEVICES pipe=$CUDA_MPS_PIPE_DIRECTORY gpus=$SLURM_GPUS_ON_NODE ord=$GPU_DEVICE_ORDINAL\"\n",
    );
    let id = g.submit(&["--gres=gpu:1g.5gb:1", "-o", "env.out", &script]);
    g.wait_state(id, "COMPLETED", Duration::from_secs(20));
    let out = std::fs::read_to_string(g.work.path().join("env.out")).unwrap();
    let uuid = small["uuid"].as_str().unwrap();
    assert_eq!(
        out.trim(),
        format!("dev={uuid} pipe={pipe} gpus=1 ord={uuid}")
    );

    // --isolated --gpu-mem picks the smallest instance that fits.
    let id = g.submit(&["--isolated", "--gpu-mem", "6G", "-o", "big.out", &script]);
    g.wait_state(id, "COMPLETED", Duration::from_secs(20));
    let out = std::fs::read_to_string(g.work.path().join("big.out")).unwrap();
    let big = inst.iter().find(|i| i["profile"] == "2g.10gb").unwrap();
    assert!(
        out.starts_with(&format!("dev={} ", big["uuid"].as_str().unwrap())),
        "{out}"
    );

    // A daemon that dies is restarted, and the controller hears of it.
    let first = daemon_for(&pipe).expect("daemon runs");
    // SAFETY: kill(2) on the fake daemon this test's node started.
    unsafe {
        libc::kill(first, libc::SIGKILL);
    }
    g.wait_until(
        "the MPS daemon is restarted",
        Duration::from_secs(20),
        || daemon_for(&pipe).is_some_and(|p| p != first),
    );
    g.wait_until(
        "the controller sees MPS running",
        Duration::from_secs(10),
        || instances(&g).iter().all(|i| i["mps"]["state"] == "running"),
    );
    assert!(g
        .log()
        .contains("MPS control daemon is not running; restarting it"));

    // Shutdown tells every daemon quit.
    let pipes: Vec<String> = inst
        .iter()
        .map(|i| i["mps"]["pipe_dir"].as_str().unwrap().to_string())
        .collect();
    assert!(g.terminate());
    for p in &pipes {
        assert_eq!(daemon_for(p), None, "daemon for {p} still runs");
        let log = std::fs::read_to_string(Path::new(p).with_file_name("log").join("control.log"))
            .unwrap();
        assert!(log.lines().any(|l| l == "quit"), "{log}");
    }
}

#[test]
fn the_gpu_config_layout_is_made_and_impossible_ones_are_refused() {
    let work = tempfile::tempdir().unwrap();
    let config = work.path().join("gpus.toml");
    std::fs::write(
        &config,
        "allow_mig_reconfigure = true\n[[gpu]]\nindex = 0\nmig = [\"3g.20gb\", \"2g.10gb\", \"1g.5gb\", \"1g.5gb\"]\n",
    )
    .unwrap();
    let g = Gsched::start(&[
        "--sim-gpus",
        "1xA100-40GB:mig",
        "--gpu-config",
        config.to_str().unwrap(),
    ]);
    let mut profiles: Vec<String> = instances(&g)
        .iter()
        .map(|i| i["profile"].as_str().unwrap().to_string())
        .collect();
    profiles.sort();
    assert_eq!(profiles, vec!["1g.5gb", "1g.5gb", "2g.10gb", "3g.20gb"]);
    drop(g);

    std::fs::write(
        &config,
        "allow_mig_reconfigure = true\n[[gpu]]\nindex = 0\nmig = [\"3g.20gb\", \"3g.20gb\", \"1g.5gb\"]\n",
    )
    .unwrap();
    let state = common::state_dir();
    let mut child = Command::new(bin("gsched"))
        .args([
            "up",
            "--listen",
            "127.0.0.1:0",
            "--sim-gpus",
            "1xA100-40GB:mig",
            "--gpu-config",
        ])
        .arg(&config)
        .arg("--state-dir")
        .arg(state.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("gsched up started with an impossible layout");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let err = stderr(&child.wait_with_output().unwrap());
    assert!(!status.success());
    assert!(
        err.contains(
            "3g.20gb,3g.20gb,1g.5gb is not possible on A100-40GB: no free memory slice for 1g.5gb"
        ),
        "{err}"
    );
}

#[test]
fn mig_plan_and_hw_commands() {
    let run = |args: &[&str]| Command::new(bin("gsched")).args(args).output().unwrap();
    let out = run(&["mig", "plan", "--model", "A100-40GB", "2g.10gb*2,1g.5gb*3"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "PROFILE      START  SIZE\n2g.10gb          0     2\n2g.10gb          2     2\n1g.5gb           4     1\n1g.5gb           5     1\n1g.5gb           6     1\n"
    );
    let out = run(&[
        "mig",
        "plan",
        "--model",
        "A100-40GB",
        "3g.20gb,3g.20gb,1g.5gb",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out),
        "gsched: 3g.20gb,3g.20gb,1g.5gb is not possible on A100-40GB: no free memory slice for 1g.5gb\n"
    );
    let out = run(&["mig", "plan", "--model", "B300", "1g.5gb"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("unknown GPU model 'B300'"));

    // Without NVML (CI), hw says so and succeeds; with a GPU it reports it.
    let out = run(&["hw"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.starts_with("No NVIDIA GPU to show") || text.starts_with("NVML: driver"),
        "{text}"
    );
    assert!(text.contains("nvidia-cuda-mps-control: "), "{text}");
    let json: Value = serde_json::from_slice(&run(&["hw", "--json"]).stdout).unwrap();
    assert!(json["nvml"].is_boolean());
}

#[test]
fn shared_work_waits_while_its_instances_mps_server_is_down() {
    let work = tempfile::tempdir().unwrap();
    // The fake control program, unable to start a daemon until `mps-ok`
    // exists (the daemon is found by its program's path, so it is a copy).
    let flag = work.path().join("mps-ok");
    let control = work.path().join("mps-control");
    let fake = std::fs::read_to_string(fake_mps_control()).unwrap();
    let (shebang, body) = fake.split_once('\n').unwrap();
    std::fs::write(
        &control,
        format!(
            "{shebang}\n[ -e {} ] || {{ echo 'cannot start' >&2; exit 1; }}\n{body}",
            flag.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(
        &control,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let config = work.path().join("gpus.toml");
    std::fs::write(
        &config,
        format!(
            "mps_control = \"{}\"\nmps_check_interval = 1\n[[gpu]]\nindex = 0\nmps = true\n",
            control.display()
        ),
    )
    .unwrap();
    let g = Gsched::start(&[
        "--sim-gpus",
        "1xA100-40GB:3g.20gb",
        "--gpu-config",
        config.to_str().unwrap(),
    ]);
    assert!(instances(&g).iter().all(|i| i["mps"]["state"] == "down"));
    let script = g.script(
        "probe.sh",
        &format!(
            "#!/bin/sh\nexec {} run --mem 1G -- sh -c 'echo \"placed on $CUDA_VISIBLE_DEVICES pipe=$CUDA_MPS_PIPE_DIRECTORY\"'\n",
            bin("gprobe").display()
        ),
    );
    let id = g.submit(&["-o", "probe.out", &script]);
    g.wait_state(id, "RUNNING", Duration::from_secs(20));
    g.wait_until(
        "the log to say the instance takes no shared work",
        Duration::from_secs(10),
        || g.log().contains("MPS server is down: no new shared work"),
    );
    // Two checks later it still waits: no placement without MPS.
    std::thread::sleep(Duration::from_secs(2));
    let out = g.work.path().join("probe.out");
    assert!(
        !std::fs::read_to_string(&out)
            .unwrap_or_default()
            .contains("placed"),
        "placed while MPS was down"
    );
    assert_eq!(g.job(id)["job_state"], "RUNNING");
    // The daemon can start: it is started, and the task is placed with its pipe.
    std::fs::write(&flag, "").unwrap();
    g.wait_state(id, "COMPLETED", Duration::from_secs(20));
    let text = std::fs::read_to_string(&out).unwrap();
    let pipe = instances(&g)[0]["mps"]["pipe_dir"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(text.contains(&format!("pipe={pipe}")), "{text}");
    assert!(g.log().contains("MPS server is back"));
}

#[test]
fn a_fatal_gpu_error_under_mps_fails_every_job_it_tore_down() {
    let work = tempfile::tempdir().unwrap();
    let config = fake_mps_config(work.path());
    let mut args = vec![
        "--sim-gpus".to_string(),
        "1xA100-40GB:3g.20gb".into(),
        "--gpu-config".into(),
        config.display().to_string(),
    ];
    args.extend(common::spare_cpus());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let g = Gsched::start(&args);
    g.wait_until("the MPS daemon runs", Duration::from_secs(10), || {
        instances(&g).iter().all(|i| i["mps"]["state"] == "running")
    });
    let script = g.script(
        "task.sh",
        &format!(
            "#!/bin/sh\nexec {} run --mem 1G -- sleep 4\n",
            bin("gprobe").display()
        ),
    );
    // Three shared jobs on the instance; the second asked not to be
    // requeued, the last is requeued (the default, as Slurm's JobRequeue).
    let named = g.submit(&["-o", "/dev/null", &script]);
    let other = g.submit(&["--no-requeue", "-o", "/dev/null", &script]);
    let requeueable = g.submit(&["-o", "/dev/null", &script]);
    let mut pids = Vec::new();
    g.wait_until("three tasks are placed", Duration::from_secs(20), || {
        let tasks = g.tasks("");
        pids = [named, other, requeueable]
            .iter()
            .map(|j| {
                tasks
                    .iter()
                    .find(|t| t["job"] == *j && t["end_ms"].is_null())
                    .and_then(|t| t["pid"].as_u64())
            })
            .collect::<Option<Vec<u64>>>()
            .unwrap_or_default();
        pids.len() == 3
    });
    // The fake server reports a fatal error in the first job's process and
    // tears down all three, as the real one does (docs/hardware.md).
    let inst = &instances(&g)[0];
    let fault = format!("fault {} {} {}\n", pids[0], pids[1], pids[2]);
    let mut sent = std::process::Command::new(fake_mps_control())
        .env(
            "CUDA_MPS_PIPE_DIRECTORY",
            inst["mps"]["pipe_dir"].as_str().unwrap(),
        )
        .env(
            "CUDA_MPS_LOG_DIRECTORY",
            inst["mps"]["log_dir"].as_str().unwrap(),
        )
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    sent.stdin
        .take()
        .unwrap()
        .write_all(fault.as_bytes())
        .unwrap();
    assert!(sent.wait().unwrap().success());
    g.wait_until(
        "the node reports the fault",
        Duration::from_secs(10),
        || {
            g.log()
                .contains("tore down every client after a fatal GPU error")
        },
    );
    // Their processes were killed and their jobs ended at once, before the
    // node's next look at the log: the jobs the fault hit failed with it.
    for (id, role) in [(named, "named"), (other, "torn down")] {
        let job = g.wait_state(id, "FAILED", Duration::from_secs(20));
        let reason = job["state_reason"].as_str().unwrap_or_default();
        assert!(reason.contains("GPU fault"), "{role}: {job}");
        assert!(
            reason.contains(&format!("process {} of job {named}", pids[0])),
            "{role}: {reason}"
        );
        assert!(
            reason.contains(&format!("jobs hit: {named}, {other}, {requeueable}")),
            "{role}: {reason}"
        );
    }
    // The requeueable one was put back in the queue and ran again, clean.
    g.wait_until(
        "the requeued job ran again",
        Duration::from_secs(30),
        || {
            let j = g.job(requeueable);
            j["job_state"] == "COMPLETED" && j["restart_cnt"].as_u64() >= Some(1)
        },
    );
    g.wait_until(
        "the instance takes new clients once the torn-down ones exited",
        Duration::from_secs(10),
        || {
            g.log()
                .contains("every client the MPS server tore down has exited")
        },
    );
}
