use super::*;
use crate::placement::CasePlacement;
use proptest::prelude::*;

const G: u64 = 1 << 30;

fn node(sizes: &[u64]) -> NodeBook {
    NodeBook::new(TaskBook::new(
        Box::new(CasePlacement),
        sizes
            .iter()
            .enumerate()
            .map(|(i, s)| (format!("I{i}"), *s))
            .collect(),
    ))
}

fn req(job: JobId, pid: u32, bytes: u64) -> TaskRequest {
    TaskRequest {
        job,
        pid,
        bytes,
        warps: 0,
        share: None,
        shape: None,
    }
}

fn placed(b: Result<Begin, PlacementError>) -> Placed {
    match b.unwrap() {
        Begin::Placed(p) => p,
        other => panic!("not placed: {other:?}"),
    }
}

/// The tasks placed after waiting, in order.
fn placed_events(events: &[NodeEvent]) -> Vec<(JobId, String)> {
    events
        .iter()
        .filter_map(|e| match e {
            NodeEvent::Placed(p) => Some((p.job, p.instance.clone())),
            _ => None,
        })
        .collect()
}

fn records(events: &[NodeEvent]) -> Vec<TaskRecord> {
    events
        .iter()
        .filter_map(|e| match e {
            NodeEvent::Record(r) => Some(r.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn a_placement_and_its_end_each_make_a_record() {
    let mut n = node(&[4 * G]);
    let p = placed(n.begin(req(1, 10, G), 1_000));
    let ev = n.take_events();
    assert_eq!(records(&ev).len(), 1);
    assert_eq!(records(&ev)[0].begin_ms, 1_000);
    assert_eq!(records(&ev)[0].end_ms, None);
    n.end(p.task, 2_500).unwrap();
    let ev = n.take_events();
    assert!(ev.contains(&NodeEvent::Gone(p.task)));
    let r = records(&ev);
    assert_eq!((r[0].begin_ms, r[0].end_ms), (1_000, Some(2_500)));
    assert!(
        !n.settling("I0", 2_500),
        "an ended task leaves nothing behind"
    );
    assert!(n.end(p.task, 3_000).is_err(), "ended once");
}

#[test]
fn a_held_instance_takes_no_task_until_its_job_ends() {
    let mut n = node(&[4 * G]);
    let p = placed(n.begin(req(1, 10, G), 0));
    assert!(n.hold("I0", 7), "a shared task is still there");
    assert_eq!(n.holder("I0"), Some(7));
    assert_eq!(n.begin(req(2, 20, G), 1).unwrap(), Begin::Waiting(2));
    n.end(p.task, 2).unwrap();
    assert!(placed_events(&n.take_events()).is_empty(), "still held");
    assert!(!n.hold("I0", 7), "empty now: the isolated job may start");
    n.job_ended(7, 3);
    assert_eq!(placed_events(&n.take_events()), vec![(2, "I0".into())]);
    assert_eq!(n.holder("I0"), None);
}

#[test]
fn a_drained_instance_takes_only_the_jobs_it_is_open_to_until_it_is_held() {
    let mut n = node(&[4 * G]);
    let first = placed(n.begin(req(1, 10, G), 0));
    // Drained for an isolated job; job 2 is expected to end in time.
    let open = BTreeMap::from([("I0".to_string(), vec![2])]);
    assert!(n.set_drained(&["I0".into()], &open, 1, 0));
    let backfilled = placed(n.begin(req(2, 20, G), 1));
    assert_eq!(backfilled.instance, "I0");
    assert!(matches!(
        n.begin(req(3, 30, G), 1).unwrap(),
        Begin::Waiting(_)
    ));
    // A set that no longer lists job 2 shuts it out again.
    assert!(n.set_drained(&["I0".into()], &BTreeMap::new(), 2, 2));
    assert!(matches!(
        n.begin(req(2, 21, G), 2).unwrap(),
        Begin::Waiting(_)
    ));
    // Open to job 2 again; then the isolated job takes it (its launch
    // came before the set that says so): job 2's next process waits.
    assert!(n.set_drained(&["I0".into()], &open, 3, 3));
    let _ = n.take_events();
    n.end(first.task, 4).unwrap();
    n.end(backfilled.task, 4).unwrap();
    let _ = n.take_events();
    assert!(n.begin(req(2, 22, G), 5).is_ok());
    let _ = n.take_events();
    assert!(n.hold("I0", 9));
    assert!(matches!(
        n.begin(req(2, 23, G), 6).unwrap(),
        Begin::Waiting(_)
    ));
    // A late set still naming job 2 changes nothing while 9 holds it.
    assert!(n.set_drained(&["I0".into()], &open, 4, 7));
    assert!(placed_events(&n.take_events()).is_empty());
    assert!(matches!(
        n.begin(req(2, 24, G), 8).unwrap(),
        Begin::Waiting(_)
    ));
}

#[test]
fn an_instance_handed_from_one_isolated_job_to_the_next_stays_closed() {
    let mut n = node(&[4 * G]);
    n.hold("I0", 7);
    // The controller drains it for the next isolated job.
    assert!(n.set_drained(&["I0".into()], &BTreeMap::new(), 1, 0));
    assert_eq!(n.begin(req(2, 20, G), 1).unwrap(), Begin::Waiting(1));
    n.job_ended(7, 2);
    assert!(
        placed_events(&n.take_events()).is_empty(),
        "the drain keeps it closed between the two"
    );
    n.hold("I0", 8);
    assert!(n.set_drained(&[], &BTreeMap::new(), 2, 3));
    assert!(placed_events(&n.take_events()).is_empty(), "held by job 8");
    n.job_ended(8, 4);
    assert_eq!(placed_events(&n.take_events()), vec![(2, "I0".into())]);
}

#[test]
fn a_job_started_early_takes_the_instance_over_when_its_holder_ends() {
    let mut n = node(&[4 * G]);
    assert!(!n.hold("I0", 7));
    assert!(n.free_for("I0", 7));
    // Job 8 starts early: it waits, and job 7 keeps the instance.
    assert!(n.hold("I0", 8), "held by job 7");
    assert_eq!(n.holder("I0"), Some(7));
    assert!(!n.free_for("I0", 8));
    assert_eq!(n.begin(req(2, 20, G), 1).unwrap(), Begin::Waiting(1));
    n.job_ended(7, 2);
    assert_eq!(n.holder("I0"), Some(8), "handed over");
    assert!(n.free_for("I0", 8));
    assert!(
        placed_events(&n.take_events()).is_empty(),
        "closed to shared tasks between the two"
    );
    n.job_ended(8, 3);
    assert_eq!(placed_events(&n.take_events()), vec![(2, "I0".into())]);
}

#[test]
fn a_job_started_early_and_cancelled_takes_nothing_over() {
    let mut n = node(&[4 * G]);
    n.hold("I0", 7);
    assert!(n.hold("I0", 8));
    n.job_ended(8, 1);
    n.job_ended(7, 2);
    assert_eq!(n.holder("I0"), None);
    assert!(!n.tasks().instances()[0].closed);
}

#[test]
fn an_older_drain_set_changes_nothing_until_the_node_registers_again() {
    let mut n = node(&[4 * G, 4 * G]);
    assert!(n.set_drained(&["I0".into()], &BTreeMap::new(), 5, 0));
    assert!(
        !n.set_drained(&[], &BTreeMap::new(), 4, 1),
        "crossed on the way: older"
    );
    assert!(n.tasks().instances()[0].closed);
    n.reset_drain_seq();
    assert!(
        n.set_drained(&[], &BTreeMap::new(), 1, 2),
        "a restarted controller starts at 1"
    );
    assert!(!n.tasks().instances()[0].closed);
}

#[test]
fn a_process_that_dies_holding_memory_leaves_its_instance_settling() {
    let mut n = node(&[4 * G]);
    let _ = placed(n.begin(req(1, 10, 3 * G), 0));
    assert_eq!(n.begin(req(2, 20, 3 * G), 1).unwrap(), Begin::Waiting(2));
    assert_eq!(n.process_exited(1, 10, 1_000), 1);
    let ev = n.take_events();
    assert_eq!(placed_events(&ev), vec![(2, "I0".into())]);
    assert!(n.settling("I0", 1_000 + SETTLE_MS - 1));
    assert!(!n.settling("I0", 1_000 + SETTLE_MS));
    // The dead process is still named for a while (an MPS fault report).
    assert_eq!(n.bound_or_recent("I0", 2_000, None), vec![(2, 20), (1, 10)]);
    assert_eq!(
        n.bound_or_recent("I0", 1_000 + RECENTLY_GONE_MS + 1, None),
        vec![(2, 20)]
    );
    // A fault at 999 tore it down; one at 1_001 came after it had gone.
    assert_eq!(
        n.bound_or_recent("I0", 2_000, Some(999)),
        vec![(2, 20), (1, 10)]
    );
    assert_eq!(n.bound_or_recent("I0", 2_000, Some(1_001)), vec![(2, 20)]);
}

#[test]
fn a_reused_pid_is_named_once_for_its_current_process() {
    let mut n = node(&[4 * G]);
    let _ = placed(n.begin(req(1, 10, G), 0));
    n.process_exited(1, 10, 1);
    let _ = placed(n.begin(req(2, 10, G), 2));
    assert_eq!(n.bound_or_recent("I0", 3, None), vec![(2, 10)]);
}

#[test]
fn a_waiting_growth_is_answered_when_room_is_freed_and_its_record_grows() {
    let mut n = node(&[4 * G]);
    let a = placed(n.begin(req(1, 10, 2 * G), 0));
    let b = placed(n.begin(req(2, 20, 2 * G), 0));
    n.take_events();
    assert_eq!(n.grow(a.task, G, G).unwrap(), Growth::Waiting);
    n.end(b.task, 5).unwrap();
    let ev = n.take_events();
    assert!(ev.contains(&NodeEvent::Growth {
        task: a.task,
        grown: true,
        bytes: G
    }));
    n.end(a.task, 6).unwrap();
    let r = records(&n.take_events());
    assert_eq!(r[0].bytes, 3 * G, "the end record carries the grown size");
}

#[test]
fn a_growth_that_waited_too_long_is_cancelled_once() {
    let mut n = node(&[4 * G]);
    let a = placed(n.begin(req(1, 10, 2 * G), 0));
    let _b = placed(n.begin(req(2, 20, 2 * G), 0));
    assert_eq!(n.grow(a.task, G, G).unwrap(), Growth::Waiting);
    assert!(n.cancel_growth(a.task, 1));
    assert!(!n.cancel_growth(a.task, 2), "no longer waiting");
}

#[test]
fn a_restored_reservation_counts_and_a_dead_ones_record_is_closed() {
    let mut n = node(&[4 * G]);
    let rec = |task, pid| TaskRecord {
        job: 1,
        task,
        pid,
        instance: "I0".into(),
        bytes: 3 * G,
        warps: 0,
        share: 0,
        begin_ms: 100,
        end_ms: None,
    };
    assert!(n.restore(&rec(50, 10), true, 1_000));
    assert!(n.take_events().is_empty());
    assert_eq!(
        n.begin(req(2, 20, 3 * G), 1_001).unwrap(),
        Begin::Waiting(51)
    );
    assert!(!n.restore(&rec(60, 11), false, 1_002));
    let r = records(&n.take_events());
    assert_eq!((r[0].task, r[0].end_ms), (60, Some(1_002)));
    n.end(50, 2_000).unwrap();
    let r = records(&n.take_events());
    assert_eq!(r[0].begin_ms, 100, "the restored record keeps its begin");
}

#[test]
fn a_process_without_a_placement_closes_its_instance_but_the_holders_do_not() {
    let mut n = node(&[4 * G, 4 * G]);
    let seen = vec![(99, 5)];
    assert_eq!(n.note_processes("I0", seen.clone(), 0), Some(seen.clone()));
    assert_eq!(n.note_processes("I0", seen.clone(), 1), None, "no change");
    assert_eq!(placed(n.begin(req(2, 20, G), 2)).instance, "I1");
    assert_eq!(n.note_processes("I0", vec![], 3), Some(vec![]));
    n.hold("I1", 5);
    assert_eq!(n.note_processes("I1", seen, 4), None, "its own instance");
}

#[test]
fn an_instance_whose_mps_server_is_down_takes_nothing_until_it_is_back() {
    let mut n = node(&[4 * G]);
    assert!(n.set_mps_down("I0", true, 0));
    assert!(!n.set_mps_down("I0", true, 0));
    assert_eq!(n.begin(req(1, 10, G), 1).unwrap(), Begin::Waiting(1));
    assert!(n.set_mps_down("I0", false, 2));
    assert_eq!(placed_events(&n.take_events()), vec![(1, "I0".into())]);
}

#[test]
fn a_placed_task_nobody_waits_for_any_more_gives_its_place_back() {
    let mut n = node(&[4 * G]);
    let a = placed(n.begin(req(1, 10, 3 * G), 0));
    assert_eq!(n.begin(req(2, 20, 3 * G), 0).unwrap(), Begin::Waiting(2));
    assert_eq!(n.begin(req(3, 30, 3 * G), 0).unwrap(), Begin::Waiting(3));
    n.end(a.task, 1).unwrap();
    let ev = n.take_events();
    assert_eq!(placed_events(&ev), vec![(2, "I0".into())]);
    n.abandon(2, 2);
    assert_eq!(placed_events(&n.take_events()), vec![(3, "I0".into())]);
}

#[derive(Debug, Clone)]
enum Op {
    Begin { job: u64, pid: u32, gib: u64 },
    End(usize),
    Exit { job: u64, pid: u32 },
    Hold { inst: usize, job: u64 },
    JobEnded(u64),
    Drain(Vec<usize>),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1u64..6, 1u32..4, 1u64..4).prop_map(|(job, pid, gib)| Op::Begin { job, pid, gib }),
        3 => (0usize..16).prop_map(Op::End),
        1 => (1u64..6, 1u32..4).prop_map(|(job, pid)| Op::Exit { job, pid }),
        1 => (0usize..2, 100u64..103).prop_map(|(inst, job)| Op::Hold { inst, job }),
        1 => prop_oneof![1u64..6, 100u64..103].prop_map(Op::JobEnded),
        1 => proptest::collection::vec(0usize..2, 0..3).prop_map(Op::Drain),
    ]
}

proptest! {
    /// Whatever happens, no instance holds more than its memory, no shared
    /// task is placed on an instance that is held or drained, and every
    /// reservation's record ends once; with rooms kept between processes
    /// for `hold` ms too (each step is a millisecond).
    #[test]
    fn nothing_is_over_reserved_or_placed_on_a_closed_instance(
        ops in proptest::collection::vec(op(), 1..80),
        hold in 0i64..4,
    ) {
        let mut n = node(&[4 * G, 4 * G]).holding_between(hold);
        let mut keeps: Vec<(JobId, u64, i64)> = Vec::new();
        let mut active: Vec<TaskId> = Vec::new();
        let mut open_records = std::collections::HashSet::new();
        let mut seq = 0;
        let mut drained: Vec<String> = Vec::new();
        for (t, o) in ops.into_iter().enumerate() {
            let now = t as i64;
            match o {
                Op::Begin { job, pid, gib } => {
                    if let Ok(Begin::Placed(p)) = n.begin(req(job, pid, gib * G), now) {
                        active.push(p.task);
                    }
                }
                Op::End(k) if !active.is_empty() => {
                    let task = active.remove(k % active.len());
                    let _ = n.end(task, now);
                }
                Op::End(_) => {}
                Op::Exit { job, pid } => { n.process_exited(job, pid, now); }
                Op::Hold { inst, job } => { n.hold(&format!("I{inst}"), job); }
                Op::JobEnded(job) => n.job_ended(job, now),
                Op::Drain(set) => {
                    seq += 1;
                    drained = set.iter().map(|i| format!("I{i}")).collect();
                    n.set_drained(&drained, &BTreeMap::new(), seq, now);
                }
            }
            // Keeps whose time is up end after the step (so that what they
            // place is checked against the instances as the step left them).
            for &(job, seq, _) in keeps.iter().filter(|k| k.2 <= now) {
                n.end_keep(job, seq, now);
            }
            keeps.retain(|k| k.2 > now);
            for e in n.take_events() {
                match e {
                    NodeEvent::Placed(p) => {
                        prop_assert!(n.holder(&p.instance).is_none(), "placed on a held instance");
                        prop_assert!(!drained.contains(&p.instance), "placed on a drained instance");
                        active.push(p.task);
                    }
                    NodeEvent::Record(r) if r.end_ms.is_none() => {
                        prop_assert!(open_records.insert(r.task), "began twice");
                    }
                    NodeEvent::Record(r) => {
                        prop_assert!(open_records.remove(&r.task), "ended without a begin, or twice");
                    }
                    NodeEvent::Gone(task) => active.retain(|t| *t != task),
                    NodeEvent::Growth { .. } | NodeEvent::KeepUsed { .. } => {}
                    NodeEvent::KeepUntil { job, seq, at_ms } => {
                        prop_assert_eq!(at_ms, now + hold);
                        prop_assert!(hold > 0, "kept with no hold");
                        keeps.push((job, seq, at_ms));
                    }
                }
            }
            for i in n.tasks().instances() {
                prop_assert!(i.reserved_bytes <= i.memory_bytes);
                let held_or_drained = n.holder(&i.uuid).is_some() || drained.contains(&i.uuid);
                prop_assert_eq!(i.closed, held_or_drained);
            }
        }
    }
}

#[test]
fn a_job_that_stated_one_gib_cannot_reserve_every_instance() {
    use crate::placement::budget::{BudgetInput, MemBudget};
    // Five instances of 10 GiB; job 1 stated 1 GiB for its one task.
    let mut n = node(&[10 * G; 5]);
    let input = BudgetInput {
        stated_mib: Some(1024),
        ntasks: 1,
        ..BudgetInput::default()
    };
    n.set_budget(1, MemBudget::of(input, 10 * G, 0));
    let p = placed(n.begin(req(1, 10, G), 0));
    // More processes, each asking for a whole instance: refused, naming
    // the budget; the book keeps only the first task.
    for pid in 11..15 {
        let e = n.begin(req(1, pid, 10 * G), 0).unwrap_err();
        assert!(
            matches!(e, PlacementError::OverBudget { job: 1, .. }),
            "{e}"
        );
    }
    assert!(
        n.begin(req(1, 11, G / 2), 0).is_err(),
        "the job's 1 GiB is taken"
    );
    // Growing past it is refused too.
    assert!(n.grow(p.task, G, G).is_err());
    // Another user's job still finds every instance free but the first's
    // gibibyte.
    for pid in 20..25 {
        placed(n.begin(req(2, pid, 9 * G), 0));
    }
    // Once the job ends its budget goes with it.
    n.job_ended(1, 1);
    assert_eq!(n.tasks().reserved_by(1), 0);
}

#[test]
fn one_job_may_hold_a_bounded_number_of_tasks() {
    let mut n = node(&[G]);
    for pid in 0..MAX_TASKS_PER_JOB as u32 {
        placed(n.begin(req(1, pid, 0), 0));
    }
    let e = n.begin(req(1, 99_999, 0), 0).unwrap_err();
    assert!(
        matches!(e, PlacementError::TooManyTasks { job: 1, .. }),
        "{e}"
    );
    // Another job is not held by it.
    placed(n.begin(req(2, 1, 0), 0));
}

fn busy(busy_usec: u64, placed_usec: u64) -> crate::probe::BusyTime {
    crate::probe::BusyTime {
        busy_usec,
        placed_usec,
    }
}

/// A node whose one 40 GiB whole GPU takes tasks under the default
/// ceiling (3) and default share (3/8).
fn ceiling_node() -> NodeBook {
    NodeBook::new(
        TaskBook::new(Box::new(CasePlacement), vec![("I0".into(), 40 * G)])
            .with_compute_ceiling(Some(3000))
            .with_default_share(375),
    )
}

#[test]
fn a_measured_demand_below_the_guess_lets_waiting_tasks_in() {
    let mut n = ceiling_node();
    // Eight first runs fill the ceiling (8 x 375 = 3000); the ninth waits.
    for job in 1..=8 {
        placed(n.begin(req(job, 100 + job as u32, G), 0));
    }
    assert!(matches!(n.begin(req(9, 109, G), 0), Ok(Begin::Waiting(_))));
    n.take_events();
    // A process's first report starts its windows.
    for job in 1..=2 {
        assert!(n.busy_report(job, 100 + job as u32, busy(0, 0), 0));
    }
    // Half a second is no window: nothing changes.
    assert!(n.busy_report(1, 101, busy(10_000, 500_000), 500));
    assert!(placed_events(&n.take_events()).is_empty());
    // Its first second: busy a tenth of it. Its demand falls halfway,
    // from 375 to 238, and so does a second one's: 2726, no room yet for
    // another 375.
    assert!(n.busy_report(1, 101, busy(100_000, 1_000_000), 1_000));
    assert!(n.busy_report(2, 102, busy(100_000, 1_000_000), 1_000));
    assert!(placed_events(&n.take_events()).is_empty());
    // Another such second: 169 each, 2588, room for the ninth.
    assert!(n.busy_report(1, 101, busy(200_000, 2_000_000), 2_000));
    assert!(placed_events(&n.take_events()).is_empty());
    assert!(n.busy_report(2, 102, busy(200_000, 2_000_000), 2_000));
    assert_eq!(placed_events(&n.take_events()), vec![(9, "I0".to_string())]);
    assert_eq!(n.measured_demand(1), Some(169));
    // The job's next process starts from what its last one measured.
    n.process_exited(1, 101, 3_000);
    n.take_events();
    let again = placed(n.begin(req(1, 201, G), 3_000));
    assert_eq!(again.share, 169);
}

#[test]
fn a_measured_demand_above_the_guess_holds_newcomers_back() {
    let mut n = ceiling_node();
    for job in 1..=4 {
        placed(n.begin(req(job, 100 + job as u32, G), 0));
    }
    // Four at 375 leave room for four more; two of them measure busy all
    // the time (a whole GPU each): 2 x 1000 + 2 x 375 = 2750, so the next
    // newcomer (375) no longer fits under 3000.
    for job in 1..=2 {
        assert!(n.busy_report(job, 100 + job as u32, busy(0, 0), 0));
    }
    for job in 1..=2 {
        assert!(n.busy_report(job, 100 + job as u32, busy(1_000_000, 1_000_000), 1_000));
    }
    assert!(matches!(
        n.begin(req(5, 105, G), 1_000),
        Ok(Begin::Waiting(_))
    ));
    // A process with no task placed has nothing to measure.
    assert!(!n.busy_report(5, 105, busy(1_000_000, 1_000_000), 1_000));
    assert!(!n.busy_report(42, 1, busy(1_000_000, 1_000_000), 1_000));
}
