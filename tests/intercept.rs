//! CUDA driver interception without a GPU: a fake `libcuda.so.1` (built
//! here from tests/fixtures/fake_cuda.c) stands in for the driver, and a
//! small program reaches it by link-time binding, `dlsym`, and
//! `cuGetProcAddress_v2`. gnoded preloads libgprobe.so into the job.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::Gsched;
use serde_json::Value;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn cc(args: &[&str]) {
    common::run_checked("cc", args, "a C compiler (cc)");
}

/// Builds the fake driver and the program; returns the program's path.
fn build(dir: &Path) -> PathBuf {
    let lib = dir.join("libcuda.so.1");
    let app = dir.join("cuda_app");
    cc(&[
        "-shared",
        "-fPIC",
        "-o",
        lib.to_str().unwrap(),
        fixture("fake_cuda.c").to_str().unwrap(),
    ]);
    cc(&[
        "-o",
        app.to_str().unwrap(),
        fixture("cuda_app.c").to_str().unwrap(),
        &format!("-L{}", dir.display()),
        "-l:libcuda.so.1",
        "-ldl",
        &format!("-Wl,-rpath,{}", dir.display()),
    ]);
    app
}

#[test]
fn unmodified_programs_are_placed_capped_and_measured() {
    // gnoded preloads the library found next to it.
    common::bin("libgprobe.so");
    let g = Gsched::start(&["--sim-gpus", "1xA100-40GB:1g.5gb"]);
    let app = build(g.work.path());
    let uuid = g.get("/api/v1/instances").unwrap()["instances"][0]["uuid"]
        .as_str()
        .unwrap()
        .to_string();
    for mode in ["link", "dlsym", "proc"] {
        let script = g.script(
            &format!("{mode}.sh"),
            &format!("#!/bin/sh\nexec {} {mode}\n", app.display()),
        );
        let out = format!("{mode}.out");
        // One states its compute demand (a tenth of the GPU, of which the
        // 1g.5gb instance offers 142 thousandths); the others learn theirs
        // from the run before: its one kernel took no time, so the least
        // demand there is. (The node's default for a job nothing is known
        // about is checked below, in the next test.)
        let (share, expected_share) = match mode {
            "link" => ("10%", 100),
            _ => ("", 1),
        };
        let mut args = vec!["-J", "cuda-app", "--gpu-mem", "1G", "-o", &out];
        if !share.is_empty() {
            args.extend(["--gpu-share", share]);
        }
        args.push(&script);
        let id = g.submit(&args);
        let job = g.wait_state(id, "COMPLETED", Duration::from_secs(30));
        let text = std::fs::read_to_string(g.work.path().join(&out)).unwrap();
        // stderr (the library's notes) interleaves with stdout.
        let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with("gprobe:")).collect();
        assert_eq!(lines[0], "GSCHED_TASK_MEM=1073741824", "{mode}: {text}");
        // Placed before the driver read its devices.
        assert_eq!(
            lines[1],
            format!("fake cuInit: CUDA_VISIBLE_DEVICES={uuid}"),
            "{mode}: {text}"
        );
        // The reservation, not the device, is what the program sees.
        assert_eq!(lines[2], "info free=1024 total=1024", "{mode}: {text}");
        // It stated 1G: that is its budget (the instance has 4864 MiB), so
        // growing past it is refused: the fake driver itself never runs
        // out.
        assert_eq!(
            lines[3], "allocated 1024 MiB then error 2",
            "{mode}: {text}"
        );
        assert_eq!(lines[4], "info free=0 total=1024", "{mode}: {text}");
        assert_eq!(
            lines[5], "after free: free=1024 total=1024",
            "{mode}: {text}"
        );
        assert!(
            text.contains(&format!(
                "gprobe: job {id}: allocation of 536870912 bytes refused"
            )),
            "{mode}: {text}"
        );
        // The peak went to the job's accounting.
        g.wait_until("the peak is recorded", Duration::from_secs(10), || {
            g.job(id)["gpu_mem_peak"].as_u64() == Some(1024)
        });
        // The kernel it launched (10 blocks of 64 threads: 20 warps)
        // reached its task record, not the 0 known at placement.
        let tasks = g.ended_tasks(&format!("?job={id}"), 1);
        assert_eq!(tasks[0]["warps"], 20, "{mode}: {tasks:?}");
        // Its compute demand reached the record too.
        assert_eq!(tasks[0]["share"], expected_share, "{mode}: {tasks:?}");
        let _ = job;
    }
    // A run that states 3G grows to its budget, and is refused there.
    let script = g.script(
        "three.sh",
        &format!("#!/bin/sh\nexec {} link\n", app.display()),
    );
    let id = g.submit(&[
        "-J",
        "cuda-app",
        "--gpu-mem",
        "3G",
        "-o",
        "three.out",
        &script,
    ]);
    g.wait_state(id, "COMPLETED", Duration::from_secs(30));
    let text = std::fs::read_to_string(g.work.path().join("three.out")).unwrap();
    assert!(text.contains("allocated 3072 MiB then error 2"), "{text}");
    g.wait_until("the peak is recorded", Duration::from_secs(10), || {
        g.job(id)["gpu_mem_peak"].as_u64() == Some(3072)
    });
    // A later run with no --gpu-mem starts from the learned peak (the
    // largest of the latest three runs), and may grow past it.
    let script = g.script(
        "again.sh",
        &format!("#!/bin/sh\nexec {} link\n", app.display()),
    );
    let id = g.submit(&["-J", "cuda-app", "-o", "again.out", &script]);
    g.wait_state(id, "COMPLETED", Duration::from_secs(30));
    let text = std::fs::read_to_string(g.work.path().join("again.out")).unwrap();
    assert!(
        text.starts_with(&format!("GSCHED_TASK_MEM={}\n", 3072u64 << 20)),
        "{text}"
    );
    assert!(text.contains("info free=3072 total=3072"), "{text}");
    assert!(text.contains("allocated 4608 MiB then error 2"), "{text}");
    // Opting out: no preload, the program sees the device as it is.
    let script = g.script(
        "out.sh",
        &format!(
            "#!/bin/sh\nGSCHED_INTERCEPT=0 exec {} link\n",
            app.display()
        ),
    );
    let id = g.submit(&["-o", "optout.out", &script]);
    g.wait_state(id, "COMPLETED", Duration::from_secs(30));
    let text = std::fs::read_to_string(g.work.path().join("optout.out")).unwrap();
    assert!(text.contains("info free=81920 total=81920"), "{text}");
}

#[test]
fn a_neighbour_cannot_take_reserved_memory() {
    // Two programs on one 4864 MiB instance: the first holds 3 GiB for 5 s;
    // the second, reserved 1 GiB (gnoded's default: it states none, so its
    // budget is the instance), allocates 512 MiB at a time until it
    // fails. It grows into what is left (1792 MiB), waits there until the
    // 3 GiB are released, then grows into them too; alone on the
    // instance, it fails when nothing is left (nothing would free more).
    let g = Gsched::start(&["--sim-gpus", "1xA100-40GB:1g.5gb"]);
    let app = build(g.work.path());
    let hold = g.script(
        "hold.sh",
        &format!(
            "#!/bin/sh\nexec {} run --mem 3G -- sleep 5\n",
            common::bin("gprobe").display()
        ),
    );
    let marker_job = g.submit(&["-o", "/dev/null", &hold]);
    g.wait_until("the 3 GiB task is placed", Duration::from_secs(20), || {
        !g.tasks("").is_empty()
    });
    let script = g.script("n.sh", &format!("#!/bin/sh\nexec {} link\n", app.display()));
    let id = g.submit(&["-o", "n.out", &script]);
    g.wait_state(id, "COMPLETED", Duration::from_secs(30));
    let text = std::fs::read_to_string(g.work.path().join("n.out")).unwrap();
    // 9 x 512 MiB = 4608 of 4864 MiB; the tenth does not fit.
    assert!(text.contains("allocated 4608 MiB then error 2"), "{text}");
    g.wait_state(marker_job, "COMPLETED", Duration::from_secs(30));
    // It waited for the 3 GiB: it never grew into them while reserved.
    let log = g.log();
    assert!(log.contains("task waits for memory to grow"), "{log}");
    assert!(log.contains("task grew after waiting"), "{log}");
    let hold_end = g.ended_tasks(&format!("?job={marker_job}"), 1)[0]["end_ms"]
        .as_i64()
        .unwrap();
    let mine = &g.ended_tasks(&format!("?job={id}"), 1)[0];
    assert!(mine["end_ms"].as_i64().unwrap() >= hold_end, "{mine}");
}

#[test]
fn a_learned_gpu_share_reaches_the_next_runs_task_record() {
    // The first run keeps its instance busy about half the time it is
    // placed (ten 100 ms kernels, 100 ms apart, on the fake driver); the
    // interception library samples its stream and reports it at exit. On
    // a 1g.5gb instance (142 thousandths of the GPU) that is a share of
    // about 71: the next run of the same job is placed with it, where a
    // job nothing is known about counts 142 * 3 / 8.
    let g = Gsched::start(&["--sim-gpus", "1xA100-40GB:1g.5gb"]);
    let app = build(g.work.path());
    let script = g.script(
        "busy.sh",
        &format!("#!/bin/sh\nexec {} link busy 10 100 100\n", app.display()),
    );
    let run = |out: &str| {
        let id = g.submit(&["-J", "busy-app", "--gpu-mem", "1G", "-o", out, &script]);
        g.wait_state(id, "COMPLETED", Duration::from_secs(30));
        id
    };
    let first = run("first.out");
    let tasks = g.ended_tasks(&format!("?job={first}"), 1);
    assert_eq!(
        tasks[0]["share"],
        142 * 375 / 1000,
        "nothing learned yet: {tasks:?}"
    );
    let usage = &g.job(first)["usage"];
    let (busy, placed) = (
        usage["gpu_busy_usec"].as_u64().unwrap_or(0),
        usage["gpu_placed_usec"].as_u64().unwrap_or(0),
    );
    // Busy is counted in a whole GPU's time: 1 s on a seventh of one.
    assert!(
        (100_000..=200_000).contains(&busy) && (1_900_000..=3_000_000).contains(&placed),
        "busy {busy} us of {placed} us placed: {usage}"
    );
    let second = run("second.out");
    let tasks = g.ended_tasks(&format!("?job={second}"), 1);
    let share = tasks[0]["share"].as_u64().unwrap();
    assert!(
        (50..=95).contains(&share),
        "learned share {share}: {tasks:?}"
    );
}

#[test]
fn a_first_run_measured_while_it_runs_lets_a_waiting_job_in() {
    // Under a compute ceiling of half the instance, a job nothing is known
    // about (3/8 of a 1g.5gb instance: 53 thousandths of the GPU) leaves
    // no room for a second one (limit 71). The first keeps its instance
    // busy a twentieth of the time (5 ms kernels, 95 ms apart, for 5 s);
    // its library reports that every second, its demand falls to about
    // 7, and the second job is placed while the first still runs.
    let g = Gsched::start(&[
        "--sim-gpus",
        "1xA100-40GB:1g.5gb",
        "--compute-ceiling",
        "0.5",
    ]);
    let app = build(g.work.path());
    let light = g.script(
        "light.sh",
        &format!("#!/bin/sh\nexec {} link busy 50 5 95\n", app.display()),
    );
    let short = g.script(
        "short.sh",
        &format!("#!/bin/sh\nexec {} link busy 2 5 95\n", app.display()),
    );
    let first = g.submit(&["-J", "light", "--gpu-mem", "1G", "-o", "light.out", &light]);
    g.wait_until(
        "the first job's task is placed",
        Duration::from_secs(20),
        || g.tasks(&format!("?job={first}")).len() == 1,
    );
    let second = g.submit(&["-J", "short", "--gpu-mem", "1G", "-o", "short.out", &short]);
    g.wait_state(second, "COMPLETED", Duration::from_secs(30));
    g.wait_state(first, "COMPLETED", Duration::from_secs(30));
    let a = &g.ended_tasks(&format!("?job={first}"), 1)[0];
    let b = &g.ended_tasks(&format!("?job={second}"), 1)[0];
    assert_eq!(
        a["share"],
        142 * 375 / 1000,
        "placed at the first guess: {a}"
    );
    assert!(
        b["end_ms"].as_i64().unwrap() < a["end_ms"].as_i64().unwrap(),
        "the second job ran beside the first: {a} {b}"
    );
    // The first job's busy time was measured whole, as before.
    let usage = &g.job(first)["usage"];
    assert!(usage["gpu_busy_usec"].as_u64().unwrap_or(0) > 0, "{usage}");
    let log = g.log();
    assert!(
        log.contains("task waits for memory or compute"),
        "the second waited at first: {log}"
    );
}

#[test]
fn shared_jobs_start_only_a_few_ahead_of_what_the_gpu_takes() {
    // One whole (simulated) GPU under a compute ceiling of 0.75: two jobs
    // nothing is known about (3/8 each) fit, and a job that keeps it busy
    // all the time (100 ms kernels back to back) is measured at the whole
    // GPU after a second, so it then runs alone. With one job allowed to
    // wait ahead, at most three of the eight run at once (two by the
    // room first seen, one ahead), where the node's workers and the 64
    // CPUs it says it has would start all eight.
    let mut args: Vec<String> = [
        "--sim-gpus",
        "1xA100-40GB",
        "--compute-ceiling",
        "0.75",
        "--shared-start-ahead",
        "1",
    ]
    .map(String::from)
    .to_vec();
    args.extend(common::spare_cpus());
    let g = Gsched::start(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let app = build(g.work.path());
    let busy = g.script(
        "busy.sh",
        &format!("#!/bin/sh\nexec {} link busy 12 100 0\n", app.display()),
    );
    let ids: Vec<u64> = (0..8)
        .map(|i| {
            g.submit(&[
                "-J",
                &format!("b{i}"),
                "--gpu-mem",
                "1G",
                "-o",
                "/dev/null",
                &busy,
            ])
        })
        .collect();
    let mut most = 0;
    let all_done = common::poll(Duration::from_secs(90), Duration::from_millis(200), || {
        let states: Vec<String> = ids
            .iter()
            .map(|&id| g.job(id)["job_state"].as_str().unwrap_or("").to_string())
            .collect();
        most = most.max(states.iter().filter(|s| *s == "RUNNING").count());
        states.iter().all(|s| s == "COMPLETED")
    });
    if !all_done {
        let states: Vec<Value> = ids.iter().map(|&id| g.job(id)).collect();
        panic!("not every job completed: {states:#?}\n{}", g.log());
    }
    assert!((1..=3).contains(&most), "{most} ran at once");
}

/// Job A holds the one GPU for `a_secs`; isolated job B, submitted once A
/// runs, writes when its script starts (`b.start`) and when its CUDA call
/// returned (`b.cuda`). Returns (A, B).
fn a_then_b_early(g: &Gsched, a_secs: u32) -> (u64, u64) {
    let app = build(g.work.path());
    let w = g.work.path().display().to_string();
    let a = g.script(
        "a.sh",
        &format!("#!/bin/sh\nsleep {a_secs}\ndate +%s%N > {w}/a.end\n"),
    );
    let first = g.submit(&["--isolated", "-t", "5", "-o", "a.out", &a]);
    g.wait_state(first, "RUNNING", Duration::from_secs(20));
    let b = g.script(
        "b.sh",
        &format!(
            "#!/bin/sh\ndate +%s%N > {w}/b.start\n{} link bench 1\ndate +%s%N > {w}/b.cuda\n",
            app.display()
        ),
    );
    let second = g.submit(&["--isolated", "-t", "5", "-o", "b.out", &b]);
    (first, second)
}

/// Once A and B completed: B started while A ran, and its CUDA call
/// returned only after A had ended.
fn check_b_waited_for_a(g: &Gsched, (first, second): (u64, u64)) {
    g.wait_state(second, "COMPLETED", Duration::from_secs(60));
    g.wait_state(first, "COMPLETED", Duration::from_secs(10));
    let read = |name: &str| -> u128 {
        let text = std::fs::read_to_string(g.work.path().join(name)).unwrap();
        text.trim().parse().unwrap()
    };
    let (a_end, b_start, b_cuda) = (read("a.end"), read("b.start"), read("b.cuda"));
    assert!(b_start < a_end, "B started while A ran");
    assert!(
        b_cuda > a_end,
        "B's CUDA work waited for A to end\n{}",
        g.log()
    );
}

#[test]
fn an_isolated_job_started_early_waits_for_the_gpu_at_its_first_cuda_call() {
    // One whole GPU. A holds it for 6 s; B, isolated too, starts early (A's
    // time limit ends within the early-start window): its script runs
    // while A does, but its first CUDA call returns only once A has ended
    // and the GPU is B's.
    common::bin("libgprobe.so");
    let g = Gsched::start(&["--sim-gpus", "1xH100-80GB", "--early-start-secs", "600"]);
    let uuid = g.get("/api/v1/instances").unwrap()["instances"][0]["uuid"]
        .as_str()
        .unwrap()
        .to_string();
    let jobs = a_then_b_early(&g, 6);
    check_b_waited_for_a(&g, jobs);
    let out = std::fs::read_to_string(g.work.path().join("b.out")).unwrap();
    assert!(
        out.contains(&format!("fake cuInit: CUDA_VISIBLE_DEVICES={uuid}")),
        "{out}"
    );
    let log = g.log();
    assert!(log.contains("started early"), "{log}");
    assert!(log.contains("its instances are free"), "{log}");
}

#[test]
fn a_job_started_early_waits_again_after_gsched_restarts() {
    // As above, but gsched is killed (-9) and started again while B waits
    // for the GPU: the jobs run on under their shepherds, the controller
    // keeps A as the holder and B as the job waiting for it, and the
    // restarted gnoded holds B back again until A has ended.
    common::bin("libgprobe.so");
    let mut g = Gsched::start(&["--sim-gpus", "1xH100-80GB", "--early-start-secs", "600"]);
    let jobs = a_then_b_early(&g, 10);
    let started = g.work.path().join("b.start");
    g.wait_until("B starts early", Duration::from_secs(20), || {
        started.exists()
    });
    g.restart();
    check_b_waited_for_a(&g, jobs);
    let log = g.log();
    assert!(
        log.contains("adopted while it waits for its instances"),
        "{log}"
    );
}

/// A script that waits for the file `go` in the work directory, then runs
/// `command` (the jobs of a test start together).
fn after_go(g: &Gsched, name: &str, command: &str) -> String {
    let w = g.work.path().display();
    g.script(
        &format!("{name}.sh"),
        &format!("#!/bin/sh\nwhile [ ! -e {w}/go ]; do sleep 0.05; done\n{command}\n"),
    )
}

/// Submits `script` as a shared job with a GPU time quota (`--gpu-share
/// share`) and a 1 GiB reservation, its output to `out`.
fn quota_job(g: &Gsched, share: &str, out: &str, script: &str) -> u64 {
    g.submit(&["--gpu-share", share, "--gpu-mem", "1G", "-o", out, script])
}

#[test]
fn gpu_time_quotas_divide_an_instance_by_requests() {
    // Two jobs on one whole (simulated) GPU, with GPU time quotas of 0.25
    // and 0.75: each runs 1 ms kernels back to back on the fake driver,
    // waiting for each, for 4 s (started together). A kernel is launched
    // only with a token, so how many ran is the time each was given.
    // Without quotas each would run as many as alone (the fake driver's
    // processes do not compete): together they ran about as many as one.
    let g = Gsched::start(&["--sim-gpus", "1xA100-40GB"]);
    let app = build(g.work.path());
    let script = after_go(&g, "spin", &format!("exec {} link spin 4", app.display()));
    let a = quota_job(&g, "0.25", "a.out", &script);
    let b = quota_job(&g, "75%:1", "b.out", &script);
    g.wait_state(a, "RUNNING", Duration::from_secs(20));
    g.wait_state(b, "RUNNING", Duration::from_secs(20));
    std::fs::write(g.work.path().join("go"), "").unwrap();
    g.wait_state(a, "COMPLETED", Duration::from_secs(30));
    g.wait_state(b, "COMPLETED", Duration::from_secs(30));
    let kernels = |out: &str| -> f64 {
        let text = std::fs::read_to_string(g.work.path().join(out)).unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix("kernels "))
            .unwrap_or_else(|| panic!("{out}: {text}"))
            .parse()
            .unwrap()
    };
    let (ka, kb) = (kernels("a.out"), kernels("b.out"));
    // Alone, one runs about 4 s / (1 ms and the polling) kernels.
    std::fs::remove_file(g.work.path().join("go")).unwrap();
    let alone = quota_job(&g, "0.25", "c.out", &script);
    g.wait_state(alone, "RUNNING", Duration::from_secs(20));
    std::fs::write(g.work.path().join("go"), "").unwrap();
    g.wait_state(alone, "COMPLETED", Duration::from_secs(30));
    let kc = kernels("c.out");
    let share = ka / (ka + kb);
    eprintln!("kernels: 0.25 ran {ka}, 0.75 ran {kb}, alone {kc}");
    assert!(
        (0.18..=0.32).contains(&share),
        "0.25 and 0.75 ran {ka} and {kb} kernels (alone: {kc})"
    );
    assert!(
        ka + kb < 1.3 * kc,
        "together they ran {ka} + {kb}, more than the one instance's time (alone: {kc})"
    );
    assert!(
        kc > 0.8 * (ka + kb),
        "alone it kept all the time: {kc} against {ka} + {kb}"
    );
    assert!(g.log().contains("token client left"), "{}", g.log());
}

#[test]
fn a_latency_critical_jobs_kernels_go_first() {
    // Two jobs at 0.5 each keep the (simulated) GPU's tokens busy with 1 ms
    // kernels back to back. A job that launches one 1 ms kernel every
    // 20 ms waits for a token each time when it is an ordinary job (the
    // holder finishes its quota, up to 100 ms, or is told to stop when
    // the waiting job ranks first), and not at all in a latency-critical
    // QOS: its kernel goes at once and the holder is told to stop.
    // (Three jobs at once: more CPUs than this machine may have.)
    let mut args = vec!["--sim-gpus".to_string(), "1xA100-40GB".to_string()];
    args.extend(common::spare_cpus());
    let g = Gsched::start(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let app = build(g.work.path());
    let added = g.req("POST", "/api/v1/qos").send_json(serde_json::json!({
        "op": "add",
        "qos": {"name": "serve", "latency_critical": true}
    }));
    assert!(added.is_ok(), "{added:?}");
    let spin = after_go(&g, "spin", &format!("exec {} link spin 6", app.display()));
    let lat = after_go(
        &g,
        "lat",
        &format!("sleep 0.5; exec {} link lat 100 20", app.display()),
    );
    let median = |qos: &[&str], out: &str| -> f64 {
        let _ = std::fs::remove_file(g.work.path().join("go"));
        let mut ids = Vec::new();
        for o in ["s1.out", "s2.out"] {
            ids.push(quota_job(&g, "0.5", o, &spin));
        }
        let mut args = vec!["--gpu-share", "0.1", "--gpu-mem", "1G", "-o", out];
        args.extend_from_slice(qos);
        args.push(&lat);
        ids.push(g.submit(&args));
        for &id in &ids {
            g.wait_state(id, "RUNNING", Duration::from_secs(20));
        }
        std::fs::write(g.work.path().join("go"), "").unwrap();
        for &id in &ids {
            g.wait_state(id, "COMPLETED", Duration::from_secs(30));
        }
        let text = std::fs::read_to_string(g.work.path().join(out)).unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix("latency p50 "))
            .unwrap_or_else(|| panic!("{out}: {text}"))
            .parse()
            .unwrap()
    };
    let ordinary = median(&[], "ordinary.out");
    let critical = median(&["--qos", "serve"], "critical.out");
    eprintln!("median latency: ordinary {ordinary} ms, latency-critical {critical} ms");
    assert!(
        critical < 6.0 && ordinary > 2.0 * critical,
        "ordinary {ordinary} ms, latency-critical {critical} ms"
    );
}

#[test]
fn gpu_time_quotas_hold_again_after_gsched_restarts() {
    // gsched is killed (-9) and started again while two quota'd jobs run:
    // their processes run on unheld meanwhile, open their token
    // connections again to the restarted gnoded (which restores their
    // placements), and are held again: the new gnoded counts the tokens
    // each held when it leaves. (They run 12 s; they reconnect within a
    // few seconds of the restart.)
    common::bin("libgprobe.so");
    let mut g = Gsched::start(&["--sim-gpus", "1xA100-40GB"]);
    let app = build(g.work.path());
    let script = after_go(&g, "spin", &format!("exec {} link spin 12", app.display()));
    let a = quota_job(&g, "0.25", "a.out", &script);
    let b = quota_job(&g, "0.75", "b.out", &script);
    g.wait_state(a, "RUNNING", Duration::from_secs(20));
    g.wait_state(b, "RUNNING", Duration::from_secs(20));
    std::fs::write(g.work.path().join("go"), "").unwrap();
    std::thread::sleep(Duration::from_secs(2));
    g.restart();
    g.wait_state(a, "COMPLETED", Duration::from_secs(40));
    g.wait_state(b, "COMPLETED", Duration::from_secs(40));
    let log = g.log();
    let since_restart = log.rsplit("gsched up").next().unwrap_or(&log);
    let left = since_restart.matches("token client left").count();
    assert_eq!(left, 2, "both held to tokens by the new gnoded: {log}");
}
