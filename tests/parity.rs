//! Parity: the same small workload through the live daemons (simulated
//! GPUs, `gprobe run` jobs) and through the simulator makes the same
//! launch and placement decisions.

mod common;

use std::time::Duration;

use common::{bin, Gsched};
use gsched_core::sim::{simulate, Phase, Policy, SimJob};

/// (name, GiB, seconds). Two 1g.5gb instances (4864 MiB): j1 and j2 take
/// one each, j3 must wait for j2, and j4, whose 1 GiB fits next to j1,
/// goes ahead of the waiting j3 (a task that fits is not held behind one
/// that does not); when j2 ends, j3 is placed. j1 runs long enough, and j2
/// long enough, that a slow machine (late launches) still finds them there
/// when j3 and j4 come: only j2 ending before j4 asks would change the
/// decisions.
const JOBS: &[(&str, u64, f64)] = &[
    ("j1", 3, 12.0),
    ("j2", 3, 4.0),
    ("j3", 3, 1.0),
    ("j4", 1, 1.0),
];
const SPEC: &str = "1xA100-40GB:1g.5gb*2";

fn simulated() -> Vec<(String, usize)> {
    let jobs: Vec<SimJob> = JOBS
        .iter()
        .enumerate()
        .map(|(k, (name, gib, secs))| SimJob {
            name: name.to_string(),
            isolated: false,
            footprint_mib: gib * 1024,
            submit: k as f64 * 0.3,
            phases: vec![Phase::Gpu {
                mem_mib: gib * 1024,
                slices: 0.5,
                secs: *secs,
            }],
        })
        .collect();
    let r = simulate(SPEC, Policy::Case, &jobs).unwrap();
    let uuids: Vec<String> =
        gsched_core::gpu::sim_instances("sim", &gsched_core::gpu::parse_sim_spec(SPEC).unwrap())
            .into_iter()
            .map(|i| i.uuid)
            .collect();
    r.decisions
        .iter()
        .filter_map(|d| d.strip_prefix("place "))
        .map(|d| {
            let (name, uuid) = d.split_once(" on ").unwrap();
            (
                name.to_string(),
                uuids.iter().position(|u| u == uuid).unwrap(),
            )
        })
        .collect()
}

#[test]
fn live_daemons_and_simulator_decide_alike() {
    let want = simulated();
    let expected: Vec<(String, usize)> = [("j1", 0), ("j2", 1), ("j4", 0), ("j3", 1)]
        .iter()
        .map(|(n, i)| (n.to_string(), *i))
        .collect();
    assert_eq!(want, expected, "the scenario described above");

    // The simulator's node has CPUs to spare: so must this one.
    let mut args = vec!["--sim-gpus".to_string(), SPEC.to_string()];
    args.extend(common::spare_cpus());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let g = Gsched::start(&args);
    let uuids: Vec<String> = g.get("/api/v1/instances").unwrap()["instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["uuid"].as_str().unwrap().to_string())
        .collect();
    let mut ids = Vec::new();
    for (name, gib, secs) in JOBS {
        let script = g.script(
            &format!("{name}.sh"),
            &format!(
                "#!/bin/sh\nexec {} run --mem {gib}G --warps 500 -- sleep {secs}\n",
                bin("gprobe").display()
            ),
        );
        ids.push(g.submit(&["-J", name, "-o", "/dev/null", &script]));
        std::thread::sleep(Duration::from_millis(300));
    }
    for id in &ids {
        g.wait_state(*id, "COMPLETED", Duration::from_secs(60));
    }
    let mut tasks = g.ended_tasks("", 4);
    tasks.sort_by_key(|t| (t["begin_ms"].as_i64().unwrap(), t["task"].as_u64().unwrap()));
    let got: Vec<(String, usize)> = tasks
        .iter()
        .map(|t| {
            let job = t["job"].as_u64().unwrap();
            let name = JOBS[ids.iter().position(|i| *i == job).unwrap()]
                .0
                .to_string();
            let inst = uuids
                .iter()
                .position(|u| u == t["instance"].as_str().unwrap())
                .unwrap();
            (name, inst)
        })
        .collect();
    assert_eq!(
        got, want,
        "live placements (left) against the simulator's (right)"
    );
    // The live launches followed submission order, as the simulator's did.
    let mut starts: Vec<(i64, u64)> = ids
        .iter()
        .map(|id| (g.job(*id)["start_time"].as_i64().unwrap_or(0), *id))
        .collect();
    starts.sort();
    assert!(starts
        .windows(2)
        .all(|w| w[0].1 < w[1].1 || w[0].0 == w[1].0));
}
