//! `gsched sim` from the command line: the report's keys, and clear errors.

mod common;

use std::process::Command;

use common::{bin, stderr, stdout};

fn sim(args: &[&str]) -> std::process::Output {
    Command::new(bin("gsched"))
        .arg("sim")
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn the_a30_comparison_reports_its_keys_without_crashes() {
    let out = sim(&[
        "--cluster",
        "4xA30:1g.6gb*4",
        "--mix",
        "1:4",
        "--jobs",
        "128",
        "--seed",
        "1",
        "--policy",
        "case",
        "--baseline",
        "exclusive",
        "--json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for key in [
        "throughput_ratio",
        "turnaround_speedup",
        "memory_utilization_ratio",
        "oom_crashes",
        "baseline_oom_crashes",
        "packing_efficiency",
        "antt",
        "stp",
    ] {
        assert!(v.get(key).is_some(), "missing {key}: {v}");
    }
    assert_eq!(v["oom_crashes"], 0);
    assert!(v["throughput_ratio"].as_f64().unwrap() > 1.0, "{v}");
    assert_eq!(v["policy"]["completed"], 128);
}

#[test]
fn sweep_plot_trace_and_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let out = sim(&["--sweep", "--jobs", "16", "--policy", "cg:4"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let rows = text
        .lines()
        .filter(|l| {
            l.split_whitespace()
                .next()
                .and_then(|w| w.split_once(':'))
                .is_some_and(|(a, b)| a.parse::<u32>().is_ok() && b.parse::<u32>().is_ok())
        })
        .count();
    assert_eq!(rows, 7, "{text}");
    assert!(text.contains("mean over the mixed ratios"), "{text}");

    let svg = dir.path().join("m.svg");
    let out = sim(&["--jobs", "8", "--plot", svg.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(std::fs::read_to_string(&svg).unwrap().starts_with("<svg"));

    let trace = dir.path().join("t.csv");
    std::fs::write(&trace, "job,isolated,submit,kind,secs,mem_mib,slices\na,0,0,gpu,5,3000,0.5\nb,0,0,gpu,5,3000,0.5\n").unwrap();
    let out = sim(&[
        "--cluster",
        "1xA30:1g.6gb",
        "--trace",
        trace.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    // Two 3000 MiB tasks cannot share a 5952 MiB instance: no gain.
    assert!(
        stdout(&out).contains("throughput 1.00x"),
        "{}",
        stdout(&out)
    );

    for (args, want) in [
        (vec!["--mix", "1-4"], "expected ISOLATED:NON_ISOLATED"),
        (vec!["--policy", "slurm"], "unknown policy 'slurm'"),
        (vec!["--cluster", "2xB200"], "unknown GPU model 'B200'"),
    ] {
        let out = sim(&args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(stderr(&out).contains(want), "{args:?}: {}", stderr(&out));
    }
    std::fs::write(
        &trace,
        "job,isolated,submit,kind,secs,mem_mib,slices\na,0,0,tpu,5,3000,0.5\n",
    )
    .unwrap();
    let out = sim(&["--trace", trace.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("line 2: kind must be cpu or gpu, not 'tpu'"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn the_queue_workload_runs_with_a_site_and_bad_sites_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let site = dir.path().join("site.json");
    std::fs::write(
        &site,
        r#"{"preempt_mode": "requeue", "qos": [
            {"op": "add", "qos": {"name": "normal"}},
            {"op": "add", "qos": {"name": "high", "priority": 100, "preempt": ["normal"]}}
        ]}"#,
    )
    .unwrap();
    let queue = [
        "--workload",
        "queue",
        "--cluster",
        "2xA100-80GB",
        "--nodes",
        "3",
        "--jobs",
        "60",
        "--policy",
        "exclusive",
        "--baseline",
        "exclusive",
    ];
    let mut args = queue.to_vec();
    args.extend([
        "--site",
        site.to_str().unwrap(),
        "--baseline-site",
        "none",
        "--priority-type",
        "multifactor",
        "--baseline-scheduler-type",
        "sched/builtin",
        "--json",
    ]);
    let out = sim(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let groups = v["policy"]["groups"].as_array().unwrap();
    for (kind, name) in [("qos", "high"), ("size", "multi-node"), ("user", "ann")] {
        assert!(
            groups
                .iter()
                .any(|g| g["kind"] == kind && g["name"] == name),
            "{kind} {name}: {groups:?}"
        );
    }
    let ended = |r: &serde_json::Value| {
        ["completed", "timeouts", "refused"]
            .iter()
            .map(|k| r[k].as_u64().unwrap())
            .sum::<u64>()
    };
    assert_eq!(ended(&v["policy"]), 60, "{v}");
    assert_eq!(ended(&v["baseline"]), 60, "{v}");
    // A misspelt key names itself and the file; so does a scheduler type.
    std::fs::write(&site, r#"{"preempt_mod": "requeue"}"#).unwrap();
    let mut args = queue.to_vec();
    args.extend(["--site", site.to_str().unwrap()]);
    let out = sim(&args);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("preempt_mod") && err.contains("site.json"),
        "{err}"
    );
    let mut args = queue.to_vec();
    args.extend(["--scheduler-type", "sched/wiki"]);
    let err = stderr(&sim(&args));
    assert!(err.contains("sched/wiki"), "{err}");
}
