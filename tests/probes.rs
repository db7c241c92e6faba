//! Probed tasks end to end: gnoded places them with CASE Algorithm 2 on
//! simulated MIG instances, makes later ones wait for memory, and records
//! every reservation in gctld's store.

mod common;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use common::{bin, Gsched};
use serde_json::Value;

/// Replays the recorded reservations in time order and returns the most
/// bytes ever reserved at once on each instance.
fn peak_reserved(tasks: &[Value]) -> BTreeMap<String, u64> {
    let mut events: Vec<(i64, i64, String, i64)> = Vec::new(); // (time, order, instance, delta)
    for t in tasks {
        let inst = t["instance"].as_str().unwrap().to_string();
        let bytes = t["bytes"].as_i64().unwrap();
        events.push((t["begin_ms"].as_i64().unwrap(), 1, inst.clone(), bytes));
        let end = t["end_ms"].as_i64().expect("every reservation ended");
        // At equal times an end comes first: gnoded releases, then places.
        events.push((end, 0, inst, -bytes));
    }
    events.sort();
    let mut now: BTreeMap<String, i64> = BTreeMap::new();
    let mut peak: BTreeMap<String, u64> = BTreeMap::new();
    for (_, _, inst, d) in events {
        let v = now.entry(inst.clone()).or_default();
        *v += d;
        let p = peak.entry(inst).or_default();
        *p = (*p).max(*v as u64);
    }
    peak
}

#[test]
fn twenty_probed_jobs_are_packed_without_over_reserving() {
    // Twenty jobs at once: CPUs to spare.
    let mut args = vec!["--sim-gpus".to_string(), "1xA100-40GB:1g.5gb*7".to_string()];
    args.extend(common::spare_cpus());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let g = Gsched::start(&args);
    let script = g.script(
        "probe.sh",
        &format!(
            "#!/bin/sh\nexec {} run --mem 3G -- sh -c 'echo \"on $CUDA_VISIBLE_DEVICES\"; sleep 1'\n",
            bin("gprobe").display()
        ),
    );
    let ids: Vec<u64> = (0..20)
        .map(|_| g.submit(&["-o", "/dev/null", &script]))
        .collect();
    for id in &ids {
        g.wait_state(*id, "COMPLETED", Duration::from_secs(60));
    }
    let tasks = g.ended_tasks("", 20);
    let mut jobs: Vec<u64> = tasks.iter().map(|t| t["job"].as_u64().unwrap()).collect();
    jobs.sort();
    assert_eq!(jobs, ids, "one reservation per job");
    let peak = peak_reserved(&tasks);
    assert_eq!(peak.len(), 7, "all seven instances were used: {peak:?}");
    for (inst, bytes) in &peak {
        assert!(
            *bytes <= 4864 * 1024 * 1024,
            "{inst} over-reserved: {bytes}"
        );
        assert_eq!(*bytes, 3 << 30, "{inst}: one 3G task at a time");
    }
    // Some tasks had to wait: 20 tasks, 7 places, about 1 s each.
    let first = tasks
        .iter()
        .map(|t| t["begin_ms"].as_i64().unwrap())
        .min()
        .unwrap();
    let last = tasks
        .iter()
        .map(|t| t["begin_ms"].as_i64().unwrap())
        .max()
        .unwrap();
    assert!(
        last - first >= 1500,
        "later tasks waited for memory ({} ms)",
        last - first
    );
}

#[test]
fn the_c_api_places_a_task_and_sets_the_device() {
    let g = Gsched::start(&["--sim-gpus", "1xA100-40GB:2g.10gb,1g.5gb"]);
    let src = g.work.path().join("probe.c");
    std::fs::write(
        &src,
        r#"
#include <stdio.h>
#include <stdlib.h>
#include "gprobe.h"
int main(void) {
    if (gprobe_init() != 0) { printf("init: %s\n", gprobe_last_error()); return 1; }
    int64_t t = gprobe_task_begin(6ULL << 30, 128);
    if (t <= 0) { printf("begin: %lld %s\n", (long long)t, gprobe_last_error()); return 1; }
    printf("device %s\n", getenv("CUDA_VISIBLE_DEVICES"));
    int64_t u = case_task_begin(1ULL << 30, 32);   /* same process: same instance */
    printf("second %s\n", u > 0 ? "placed" : gprobe_last_error());
    int64_t huge = gprobe_task_begin(100ULL << 30, 1);
    printf("huge %lld %s\n", (long long)huge, gprobe_last_error());
    printf("end %d %d\n", gprobe_task_end(t), case_task_end(u));
    printf("bad %d\n", gprobe_task_end(12345));
    return case_destroy();
}
"#,
    )
    .unwrap();
    let exe = g.work.path().join("probe");
    let libdir = bin("gsched").parent().unwrap().to_path_buf();
    let out = Command::new("cc")
        .arg(&src)
        .arg("-I")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/probe-lib/include"))
        .arg("-L")
        .arg(&libdir)
        .arg("-lgprobe")
        .arg(format!("-Wl,-rpath,{}", libdir.display()))
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let script = g.script("c.sh", &format!("#!/bin/sh\nexec {}\n", exe.display()));
    let id = g.submit(&["-o", "c.out", &script]);
    g.wait_state(id, "COMPLETED", Duration::from_secs(20));
    let text = std::fs::read_to_string(g.work.path().join("c.out")).unwrap();
    let big = g.get("/api/v1/instances").unwrap()["instances"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["profile"] == "2g.10gb")
        .unwrap()["uuid"]
        .as_str()
        .unwrap()
        .to_string();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], format!("device {big}"), "{text}");
    assert_eq!(lines[1], "second placed", "{text}");
    assert!(lines[2].starts_with("huge -3 "), "{text}");
    assert!(
        lines[2].contains("can never be placed") || lines[2].contains("bound to instance"),
        "{text}"
    );
    assert_eq!(lines[3], "end 0 0", "{text}");
    assert_eq!(lines[4], "bad -5", "{text}");
}

#[test]
fn an_isolated_job_waits_for_shared_tasks_to_leave_its_instance() {
    let g = Gsched::start(&["--sim-gpus", "1xA100-40GB:1g.5gb"]);
    let marker = g.work.path().join("shared-running");
    let shared = g.script(
        "shared.sh",
        &format!(
            "#!/bin/sh\nexec {} run --mem 1G -- sh -c 'touch {}; sleep 3'\n",
            bin("gprobe").display(),
            marker.display()
        ),
    );
    let s = g.submit(&["-o", "/dev/null", &shared]);
    g.wait_until("the shared task runs", Duration::from_secs(20), || {
        marker.exists()
    });
    let iso = g.script("iso.sh", "#!/bin/sh\ndate +%s%3N\n");
    let i = g.submit(&["--mig", "1g.5gb", "-o", "iso.out", &iso]);
    let shared_job = g.wait_state(s, "COMPLETED", Duration::from_secs(30));
    g.wait_state(i, "COMPLETED", Duration::from_secs(30));
    let tasks = g.ended_tasks(&format!("?job={s}"), 1);
    let task_end = tasks[0]["end_ms"].as_i64().unwrap();
    let iso_started: i64 = std::fs::read_to_string(g.work.path().join("iso.out"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        iso_started >= task_end,
        "isolated job started at {iso_started}, shared task ended at {task_end}; {shared_job}"
    );
}

/// An isolated job waiting for an instance another isolated job holds takes
/// it next: shared tasks waiting there are not placed in between (which
/// would make it wait for them, the GPU mostly idle, in a drain).
#[test]
fn an_isolated_job_takes_the_instance_next_when_the_isolated_job_there_ends() {
    let mut args = vec!["--sim-gpus".to_string(), "1xA100-40GB:1g.5gb".to_string()];
    args.extend(common::spare_cpus());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let g = Gsched::start(&args);
    let marker = g.work.path().join("a-running");
    let a = g.script(
        "a.sh",
        &format!("#!/bin/sh\ntouch {}\nsleep 4\n", marker.display()),
    );
    let ja = g.submit(&["--mig", "1g.5gb", "-o", "/dev/null", &a]);
    g.wait_until("isolated job a runs", Duration::from_secs(20), || {
        marker.exists()
    });
    let shared = g.script(
        "s.sh",
        &format!(
            "#!/bin/sh\nexec {} run --mem 1G -- true\n",
            bin("gprobe").display()
        ),
    );
    let js = g.submit(&["-o", "/dev/null", &shared]);
    g.wait_until("the shared task waits", Duration::from_secs(20), || {
        g.log().contains("task waits for memory or compute")
    });
    let b = g.script("b.sh", "#!/bin/sh\nsleep 1\ndate +%s%3N\n");
    let jb = g.submit(&["--mig", "1g.5gb", "-o", "b.out", &b]);
    for j in [ja, jb, js] {
        g.wait_state(j, "COMPLETED", Duration::from_secs(40));
    }
    let b_ended: i64 = std::fs::read_to_string(g.work.path().join("b.out"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let task = &g.ended_tasks(&format!("?job={js}"), 1)[0];
    assert!(
        task["begin_ms"].as_i64().unwrap() >= b_ended,
        "the shared task was placed at {} before isolated job b ended at {b_ended}\n{}",
        task["begin_ms"],
        g.log()
    );
}

#[test]
fn reservations_survive_a_node_restart() {
    let mut g = Gsched::start(&["--sim-gpus", "1xA100-40GB:1g.5gb"]);
    let marker = g.work.path().join("a-running");
    let a = g.script(
        "a.sh",
        &format!(
            "#!/bin/sh\nexec {} run --mem 3G -- sh -c 'touch {}; sleep 4'\n",
            bin("gprobe").display(),
            marker.display()
        ),
    );
    let ja = g.submit(&["-o", "/dev/null", &a]);
    g.wait_until("job a holds 3 GiB", Duration::from_secs(20), || {
        marker.exists() && g.tasks("").len() == 1
    });
    // gsched dies; job a keeps running and keeps its memory.
    g.restart();
    let b = g.script(
        "b.sh",
        &format!(
            "#!/bin/sh\nexec {} run --mem 3G -- true\n",
            bin("gprobe").display()
        ),
    );
    let jb = g.submit(&["-o", "/dev/null", &b]);
    g.wait_state(ja, "COMPLETED", Duration::from_secs(30));
    g.wait_state(jb, "COMPLETED", Duration::from_secs(30));
    let tasks = g.ended_tasks("", 2);
    let of = |job: u64| tasks.iter().find(|t| t["job"] == job).unwrap().clone();
    let (ta, tb) = (of(ja), of(jb));
    assert!(
        tb["begin_ms"].as_i64() >= ta["end_ms"].as_i64(),
        "b was placed before a released its memory: {ta} {tb}\n{}",
        g.log()
    );
    assert!(g.log().contains("reservation restored"), "{}", g.log());
}

#[test]
fn an_isolated_jobs_instance_stays_closed_to_shared_tasks_across_a_node_restart() {
    let mut g = Gsched::start(&["--sim-gpus", "1xA100-40GB:1g.5gb"]);
    let marker = g.work.path().join("iso-running");
    let iso = g.script(
        "iso.sh",
        &format!(
            "#!/bin/sh\ntouch {}\nsleep 4\ndate +%s%3N\n",
            marker.display()
        ),
    );
    let i = g.submit(&["--mig", "1g.5gb", "-o", "iso.out", &iso]);
    g.wait_until("the isolated job runs", Duration::from_secs(20), || {
        marker.exists()
    });
    // gsched dies; the isolated job runs on and keeps its instance.
    g.restart();
    let shared = g.script(
        "shared.sh",
        &format!(
            "#!/bin/sh\nexec {} run --mem 1G -- true\n",
            bin("gprobe").display()
        ),
    );
    let s = g.submit(&["-o", "/dev/null", &shared]);
    g.wait_state(i, "COMPLETED", Duration::from_secs(30));
    g.wait_state(s, "COMPLETED", Duration::from_secs(30));
    let iso_ended: i64 = std::fs::read_to_string(g.work.path().join("iso.out"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let task = &g.ended_tasks(&format!("?job={s}"), 1)[0];
    assert!(
        task["begin_ms"].as_i64().unwrap() >= iso_ended,
        "the shared task was placed at {} on the instance the isolated job held until {iso_ended}\n{}",
        task["begin_ms"],
        g.log()
    );
}

#[test]
fn gprobe_refuses_bad_input_with_a_reason() {
    let run = |args: &[&str], env: &[(&str, &str)]| {
        let mut c = std::process::Command::new(bin("gprobe"));
        c.args(args).env_remove("GSCHED_PROBE_SOCK");
        for (k, v) in env {
            c.env(k, v);
        }
        c.output().unwrap()
    };
    // Usage errors: clap's exit status 2, naming the argument.
    for (args, want) in [
        (vec!["launch"], "unrecognized subcommand 'launch'"),
        (vec!["run", "--", "true"], "--mem <SIZE>"),
        (
            vec!["run", "--mem", "lots", "--", "true"],
            "invalid memory size 'lots'",
        ),
        (
            vec!["run", "--mem", "1G", "--warps", "x", "--", "true"],
            "invalid value 'x' for '--warps <WARPS>'",
        ),
        (vec!["run", "--mem", "1G"], "<COMMAND>"),
    ] {
        let out = run(&args, &[]);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.starts_with("error: ") && err.contains(want),
            "{args:?}: {err}"
        );
    }
    // Outside a job: exit status 1, said by gprobe.
    let out = run(&["run", "--mem", "1G", "--", "true"], &[]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("gprobe: ") && err.contains("not inside a gsched job"),
        "{err}"
    );
    // A socket that is not there: said, not hung.
    let out = run(
        &["run", "--mem", "1G", "--", "true"],
        &[
            ("GSCHED_PROBE_SOCK", "/nonexistent/p.sock"),
            ("GSCHED_JOB_ID", "1"),
            ("GSCHED_JOB_KEY", "k"),
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot reach gnoded's probe socket"));
}
