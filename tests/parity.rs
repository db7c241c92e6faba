//! Parity: the same small workload through the live daemons (simulated
//! GPUs, `gprobe run` jobs) and through the simulator makes the same
//! launch and placement decisions.

mod common;

use std::time::Duration;

use common::{bin, Gsched};

use gsched_core::sim::parity::{JOBS, SPEC};

/// The simulator's placements, with instances by their index in the node.
fn simulated() -> Vec<(String, usize)> {
    let uuids: Vec<String> =
        gsched_core::gpu::sim_instances("sim", &gsched_core::gpu::parse_sim_spec(SPEC).unwrap())
            .into_iter()
            .map(|i| i.uuid)
            .collect();
    gsched_core::sim::parity::simulated()
        .into_iter()
        .map(|(name, uuid)| (name, uuids.iter().position(|u| *u == uuid).unwrap()))
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
