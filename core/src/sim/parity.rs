//! Parity between a live node and the simulator. The workload here runs
//! through the live daemons in `tests/parity.rs`; the tests below replay,
//! deterministically, the events gnoded's probe server sees for it through
//! a [`NodeBook`] built as gnoded builds it, and check that the simulator
//! makes the same placements in the same order.

#[cfg(test)]
use super::*;
use super::{simulate, Phase, Policy, SimJob};

/// Two 1g.5gb instances (4864 MiB): j1 and j2 take one each, j3 must wait
/// for j2, and j4, whose 1 GiB fits next to j1, goes ahead of the waiting
/// j3 (a task that fits is not held behind one that does not); when j2
/// ends, j3 is placed. (name, GiB, seconds), submitted 0.3 s apart. j1 runs
/// long enough, and j2 long enough, that a slow machine (late launches)
/// still finds them there when j3 and j4 come.
pub const JOBS: &[(&str, u64, f64)] = &[
    ("j1", 3, 12.0),
    ("j2", 3, 4.0),
    ("j3", 3, 1.0),
    ("j4", 1, 1.0),
];
/// The node of the parity workload.
pub const SPEC: &str = "1xA100-40GB:1g.5gb*2";

/// The simulator's placements of the parity workload: (job name,
/// instance UUID), in order.
pub fn simulated() -> Vec<(String, String)> {
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
            ..SimJob::default()
        })
        .collect();
    simulate(SPEC, Policy::Case, &jobs)
        .expect("the parity workload runs")
        .decisions
        .iter()
        .filter_map(|d| d.strip_prefix("place "))
        .filter_map(|d| d.split_once(" on "))
        .map(|(name, uuid)| (name.to_string(), uuid.to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::{parse_sim_spec, sim_instances};
    use crate::job::JobId;
    use crate::placement::{Begin, NodeBook, NodeEvent, Placed, TaskBook, TaskId, TaskRequest};
    use std::collections::BTreeMap;

    /// What a live node's probe server is told, in order: each job's process
    /// asks for its task when the job starts, and ends it when its GPU work is
    /// done.
    enum Live {
        Begin(usize),
        End(usize),
    }

    #[test]
    fn a_live_nodes_events_place_as_the_simulator_does() {
        let instances = sim_instances(NODE, &parse_sim_spec(SPEC).unwrap());
        let mut node = NodeBook::new(TaskBook::of_instances(
            crate::placement::placement_policy("case").unwrap(),
            &instances,
        ));
        let mut tasks: BTreeMap<usize, TaskId> = BTreeMap::new();
        let mut live = Vec::new();
        let place = |live: &mut Vec<(String, String)>, j: usize, p: &Placed| {
            live.push((JOBS[j].0.to_string(), p.instance.clone()));
        };
        // j1 0.0, j2 0.3, j3 0.6 (waits), j4 0.9 (goes ahead), j4 ends 1.9,
        // j2 ends 4.3 (j3 placed), j3 ends 5.3, j1 ends 12.0.
        let events = [
            (0, Live::Begin(0)),
            (300, Live::Begin(1)),
            (600, Live::Begin(2)),
            (900, Live::Begin(3)),
            (1_900, Live::End(3)),
            (4_300, Live::End(1)),
            (5_300, Live::End(2)),
            (12_000, Live::End(0)),
        ];
        for (now, e) in events {
            match e {
                Live::Begin(j) => {
                    let req = TaskRequest {
                        job: j as JobId + 1,
                        pid: 100 + j as u32,
                        bytes: JOBS[j].1 << 30,
                        warps: 500,
                        share: None,
                        shape: None,
                    };
                    match node.begin(req, now).unwrap() {
                        Begin::Placed(p) => {
                            place(&mut live, j, &p);
                            tasks.insert(j, p.task);
                        }
                        Begin::Waiting(t) => {
                            tasks.insert(j, t);
                        }
                    }
                }
                Live::End(j) => node.end(tasks[&j], now).unwrap(),
            }
            for ev in node.take_events() {
                if let NodeEvent::Placed(p) = ev {
                    place(&mut live, (p.job - 1) as usize, &p);
                }
            }
        }
        let uuid = |k: usize| instances[k].uuid.clone();
        let expected: Vec<(String, String)> = [("j1", 0), ("j2", 1), ("j4", 0), ("j3", 1)]
            .iter()
            .map(|(n, k)| (n.to_string(), uuid(*k)))
            .collect();
        assert_eq!(live, expected, "the scenario described above");
        assert_eq!(live, simulated(), "live node (left), simulator (right)");
    }

    /// An isolated job drains the instance it is given: the simulator's node
    /// closes it as gnoded does (the controller's drain set, then the hold),
    /// so a shared job that asks meanwhile waits for the isolated one to end
    /// instead of slipping in.
    #[test]
    fn a_drained_instance_takes_no_shared_task_until_the_isolated_job_ends() {
        let gpu = |secs| Phase::Gpu {
            mem_mib: 1024,
            slices: 1.0,
            secs,
        };
        let job = |name: &str, isolated, submit, secs| SimJob {
            name: name.into(),
            isolated,
            footprint_mib: 1024,
            submit,
            phases: vec![gpu(secs)],
            ..SimJob::default()
        };
        let jobs = vec![
            job("s1", false, 0.0, 4.0),
            job("iso", true, 1.0, 2.0),
            job("s2", false, 1.5, 1.0),
        ];
        let r = simulate("1xA100-40GB:7g.40gb*1", Policy::Case, &jobs).unwrap();
        let order: Vec<&str> = r
            .decisions
            .iter()
            .filter(|d| d.starts_with("place ") || d.starts_with("launch iso"))
            .map(|d| d.split(' ').nth(1).unwrap())
            .collect();
        assert_eq!(order, ["s1", "iso", "s2"], "{:?}", r.decisions);
        assert_eq!(r.completed, 3);
        // One after the other: s1 (4 s), then iso alone (2 s), then s2 (1 s).
        assert!(r.makespan >= 7.0 - 1e-9, "makespan {}", r.makespan);
    }
}
