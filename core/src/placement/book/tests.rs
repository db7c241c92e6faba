use super::*;
use crate::placement::{
    placement_policy, BlindPlacement, CasePlacement, ExclusivePlacement, MgbSmPlacement,
};
use crate::sm::KernelShape;
use proptest::prelude::*;

const G: u64 = 1 << 30;

fn book(sizes: &[u64]) -> TaskBook {
    TaskBook::new(
        Box::new(CasePlacement),
        sizes
            .iter()
            .enumerate()
            .map(|(i, s)| (format!("I{i}"), *s))
            .collect(),
    )
}

fn req(job: JobId, pid: u32, bytes: u64, warps: u64) -> TaskRequest {
    TaskRequest {
        job,
        pid,
        bytes,
        warps,
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

#[test]
fn fewest_warps_among_those_with_room() {
    let mut b = book(&[5 * G, 5 * G, 10 * G]);
    let a = placed(b.begin(req(1, 1, 3 * G, 100)));
    assert_eq!(a.instance, "I0");
    let c = placed(b.begin(req(2, 2, 3 * G, 10)));
    assert_eq!(c.instance, "I1", "I0 has warps in use");
    let d = placed(b.begin(req(3, 3, 3 * G, 10)));
    assert_eq!(d.instance, "I2", "I0 and I1 lack memory");
    // 4G fits only I2 (7G free); it has 10 warps, it is still the choice.
    let e = placed(b.begin(req(4, 4, 4 * G, 1)));
    assert_eq!(e.instance, "I2");
    assert_eq!(b.begin(req(5, 5, 4 * G, 1)).unwrap(), Begin::Waiting(5));
    let now = b.end(a.task).unwrap();
    assert_eq!(now.len(), 1);
    assert_eq!(now[0].instance, "I0");
    assert_eq!(now[0].job, 5);
}

#[test]
fn mgb_sm_treats_sm_slots_as_a_hard_limit() {
    let shaped = |job, blocks, block_warps| TaskRequest {
        shape: Some(KernelShape {
            blocks,
            block_warps,
        }),
        ..req(job, job as u32, G, 0)
    };
    let mut b = TaskBook::new(
        Box::new(MgbSmPlacement),
        vec![("I0".into(), 5 * G), ("I1".into(), 5 * G)],
    )
    .with_sms("I0", 2)
    .with_sms("I1", 2);
    // Six 16-warp blocks: three per SM, 48 of each SM's 64 warps.
    let first = placed(b.begin(shaped(1, 6, 16)));
    assert_eq!(first.instance, "I0");
    // Three more per SM do not fit I0's 16 free warps: first fit is I1.
    assert_eq!(placed(b.begin(shaped(2, 6, 16))).instance, "I1");
    // Memory is free everywhere, SM slots are not: it waits.
    assert!(matches!(
        b.begin(shaped(3, 6, 16)).unwrap(),
        Begin::Waiting(_)
    ));
    // One block per SM fits I0 now: it goes ahead of the waiting task,
    // which cannot use those slots yet.
    assert_eq!(placed(b.begin(shaped(4, 2, 16))).instance, "I0");
    let now = b.end(first.task).unwrap();
    let got: Vec<(JobId, String)> = now.iter().map(|p| (p.job, p.instance.clone())).collect();
    assert_eq!(got, vec![(3, "I0".to_string())]);
    assert!(placement_policy("mgb-sm").is_some());
}

#[test]
fn mgb_sm_sees_slots_split_across_sms() {
    let shaped = |job, blocks, block_warps| TaskRequest {
        shape: Some(KernelShape {
            blocks,
            block_warps,
        }),
        ..req(job, job as u32, G, 0)
    };
    let mut b =
        TaskBook::new(Box::new(MgbSmPlacement), vec![("I0".into(), 5 * G)]).with_sms("I0", 2);
    let first = placed(b.begin(shaped(1, 2, 20)));
    // 44 warps free on each SM, 88 in all: 72 warps in 24-warp blocks
    // would fit the total but only one such block fits an SM.
    assert!(matches!(
        b.begin(shaped(2, 3, 24)).unwrap(),
        Begin::Waiting(_)
    ));
    assert_eq!(b.instances()[0].sms.as_ref().unwrap().free_warps(), 88);
    let now = b.end(first.task).unwrap();
    assert_eq!(now.len(), 1);
    assert_eq!(now[0].job, 2);
}

#[test]
fn exclusive_tasks_go_only_to_their_jobs_instance() {
    let mut b = TaskBook::new(
        Box::new(ExclusivePlacement),
        vec![("I0".into(), 5 * G), ("I1".into(), 5 * G)],
    );
    // Job 1 holds nothing yet: it waits, though both instances are free.
    assert!(matches!(
        b.begin(req(1, 1, G, 1)).unwrap(),
        Begin::Waiting(_)
    ));
    let now = b.set_owner("I1", Some(1));
    assert_eq!((now[0].job, now[0].instance.as_str()), (1, "I1"));
    // Another job cannot use job 1's instance, even with memory free.
    assert!(matches!(
        b.begin(req(2, 2, G, 1)).unwrap(),
        Begin::Waiting(_)
    ));
    b.release_job(1);
    let now = b.set_owner("I1", Some(2));
    assert_eq!((now[0].job, now[0].instance.as_str()), (2, "I1"));
}

#[test]
fn blind_placement_deals_processes_round_robin_and_overflows() {
    let mut b = TaskBook::new(
        Box::new(BlindPlacement),
        vec![("I0".into(), 5 * G), ("I1".into(), 5 * G)],
    );
    assert_eq!(placed(b.begin(req(1, 1, 4 * G, 1))).instance, "I0");
    assert_eq!(placed(b.begin(req(2, 2, 4 * G, 1))).instance, "I1");
    // Both have 1 GiB free; the next process goes to I0 regardless.
    match b.begin(req(3, 3, 2 * G, 1)) {
        Err(PlacementError::Overflow {
            instance,
            free,
            want,
        }) => {
            assert_eq!((instance.as_str(), free, want), ("I0", G, 2 * G));
        }
        other => panic!("expected an overflow, got {other:?}"),
    }
    // Nothing was reserved beyond the instance.
    assert!(b
        .instances()
        .iter()
        .all(|i| i.reserved_bytes <= i.memory_bytes));
    assert_eq!(placed(b.begin(req(4, 4, G / 2, 1))).instance, "I0");
    assert_eq!(b.instances()[0].processes, 2);
    b.release_job(4);
    assert_eq!(b.instances()[0].processes, 1);
    assert!(placement_policy("blind").is_some());
    assert!(placement_policy("exclusive").is_some());
}

#[test]
fn restored_reservations_count() {
    let mut b = book(&[5 * G]);
    assert!(b.restore(40, &req(1, 9, 3 * G, 10), "I0"));
    assert!(!b.restore(40, &req(1, 9, G, 10), "I0"), "same id twice");
    assert!(
        !b.restore(41, &req(2, 9, 3 * G, 10), "I0"),
        "would over-reserve"
    );
    assert!(!b.restore(42, &req(2, 9, G, 10), "nowhere"));
    assert_eq!(b.pinned(1, 9), Some("I0"));
    assert!(matches!(
        b.begin(req(3, 3, 3 * G, 0)).unwrap(),
        Begin::Waiting(41)
    ));
    let now = b.end(40).unwrap();
    assert_eq!(now[0].job, 3);
}

#[test]
fn tasks_that_can_never_fit_fail_at_once() {
    let mut b = book(&[5 * G, 10 * G]);
    let e = b.begin(req(1, 1, 11 * G, 1)).unwrap_err();
    assert!(matches!(e, PlacementError::NeverFits { .. }));
    // A process pinned to the 5G instance cannot grow a task past it.
    let p = placed(b.begin(req(1, 1, 4 * G, 1)));
    assert_eq!(p.instance, "I0");
    let e = b.begin(req(1, 1, 6 * G, 1)).unwrap_err();
    assert!(matches!(e, PlacementError::NeverFitsPinned { .. }), "{e}");
}

#[test]
fn later_tasks_of_a_process_stay_on_its_instance() {
    let mut b = book(&[5 * G, 5 * G]);
    let first = placed(b.begin(req(1, 7, G, 1000)));
    assert_eq!(first.instance, "I0");
    let second = placed(b.begin(req(1, 7, G, 1)));
    assert_eq!(second.instance, "I0", "pinned despite more warps");
    assert_eq!(b.pinned(1, 7), Some("I0"));
    b.begin(req(1, 7, 4 * G, 1)).unwrap(); // waits for I0
    assert_eq!(b.waiting_len(), 1);
    let (released, now) = b.release_process(1, 7);
    assert_eq!(released.len(), 3);
    assert!(now.is_empty());
    assert_eq!(b.instances()[0].reserved_bytes, 0);
}

#[test]
fn closed_instances_get_nothing_and_drain() {
    let mut b = book(&[5 * G, 5 * G]);
    let t = placed(b.begin(req(1, 1, G, 1)));
    assert!(b.set_closed("I0", true).is_empty());
    assert_eq!(b.tasks_on("I0"), 1);
    let n = placed(b.begin(req(2, 2, G, 0)));
    assert_eq!(n.instance, "I1");
    b.end(t.task).unwrap();
    assert_eq!(b.tasks_on("I0"), 0, "drained");
    assert!(b.set_closed("I1", true).is_empty());
    assert!(matches!(
        b.begin(req(3, 3, G, 0)).unwrap(),
        Begin::Waiting(_)
    ));
    let now = b.set_closed("I0", false);
    assert_eq!(now.len(), 1);
    assert_eq!(now[0].instance, "I0");
}

#[test]
fn with_no_overtaking_newcomers_wait_behind_waiters_that_could_use_the_instance() {
    let mut b = book(&[4 * G]).with_max_overtakes(0);
    let big = placed(b.begin(req(1, 1, 3 * G, 0)));
    assert!(matches!(
        b.begin(req(2, 2, 2 * G, 0)).unwrap(),
        Begin::Waiting(_)
    ));
    // 1G would fit now, but the 2G waiter could use this instance: wait.
    assert!(matches!(
        b.begin(req(3, 3, G, 0)).unwrap(),
        Begin::Waiting(_)
    ));
    let now = b.end(big.task).unwrap();
    let jobs: Vec<JobId> = now.iter().map(|p| p.job).collect();
    assert_eq!(jobs, vec![2, 3]);
}

#[test]
fn a_task_that_fits_goes_ahead_of_one_that_does_not() {
    // The head-of-line blocking seen on an H100 (issue 17): a big task
    // waiting for memory held back smaller ones that fitted.
    let mut b = book(&[4 * G]);
    let big = placed(b.begin(req(1, 1, 3 * G, 0)));
    let waiting = b.begin(req(2, 2, 2 * G, 0)).unwrap();
    assert!(matches!(waiting, Begin::Waiting(_)));
    assert_eq!(placed(b.begin(req(3, 3, G, 0))).job, 3);
    // A process's own tasks stay in order, though.
    let mut b2 = book(&[4 * G]);
    placed(b2.begin(req(1, 1, 3 * G, 0)));
    assert!(matches!(
        b2.begin(req(2, 2, 2 * G, 0)).unwrap(),
        Begin::Waiting(_)
    ));
    assert!(matches!(
        b2.begin(req(2, 2, G / 2, 0)).unwrap(),
        Begin::Waiting(_)
    ));
    // The 3G task and the 1G one end: the 2G waiter is placed.
    b.end(big.task).unwrap();
    assert_eq!(b.waiting_len(), 0);
}

#[test]
fn aging_stops_a_stream_of_small_tasks_from_starving_a_big_one() {
    let mut b = book(&[4 * G]).with_max_overtakes(2);
    let first = placed(b.begin(req(1, 1, 3 * G, 0)));
    assert!(matches!(
        b.begin(req(2, 2, 2 * G, 0)).unwrap(),
        Begin::Waiting(_)
    ));
    // Two small ones go ahead of the 2G waiter; the third waits.
    let s1 = placed(b.begin(req(3, 3, G / 2, 0)));
    placed(b.begin(req(4, 4, G / 2, 0)));
    assert!(matches!(
        b.begin(req(5, 5, G / 4, 0)).unwrap(),
        Begin::Waiting(_)
    ));
    // Room at last: the big one goes first, then the small one behind it.
    let now = b.end(first.task).unwrap();
    let jobs: Vec<JobId> = now.iter().map(|p| p.job).collect();
    assert_eq!(jobs, vec![2, 5]);
    // Once placed, a task's count is gone with it.
    assert!(b.overtaken.is_empty(), "{:?}", b.overtaken);
    b.end(s1.task).unwrap();
}

#[test]
fn overtaking_within_the_queue_is_bounded_too() {
    let mut c = book(&[4 * G]).with_max_overtakes(1);
    let big = placed(c.begin(req(1, 1, 3 * G, 0)));
    let mid = placed(c.begin(req(9, 9, G, 0)));
    for (job, bytes) in [(2, 2 * G), (3, G / 2), (4, G / 2)] {
        assert!(matches!(
            c.begin(req(job, job as u32, bytes, 0)).unwrap(),
            Begin::Waiting(_)
        ));
    }
    // 1G free: one half goes ahead (the 2G task is overtaken once),
    // the next half waits for it.
    let now = c.end(mid.task).unwrap();
    assert_eq!(now.iter().map(|p| p.job).collect::<Vec<_>>(), vec![3]);
    let now = c.end(big.task).unwrap();
    assert_eq!(now.iter().map(|p| p.job).collect::<Vec<_>>(), vec![2, 4]);
}

#[test]
fn grow_only_into_free_memory_of_the_same_instance() {
    let mut b = book(&[4 * G, 8 * G]);
    let t = placed(b.begin(req(1, 1, 3 * G, 0)));
    assert_eq!(t.instance, "I0");
    b.grow(t.task, G).unwrap();
    let e = b.grow(t.task, 1).unwrap_err();
    assert!(matches!(e, PlacementError::Full { free: 0, .. }));
    assert_eq!(b.task(t.task).unwrap().bytes, 4 * G);
    b.set_warps(t.task, 64).unwrap();
    assert_eq!(b.instances()[0].warps, 64);
    let (gone, _) = b.release_job(1);
    assert_eq!(gone, vec![t.task]);
    assert_eq!(b.instances()[0].reserved_bytes, 0);
    assert_eq!(b.instances()[0].warps, 0);
}

#[test]
fn an_instance_whose_mps_is_down_binds_no_new_process_until_it_is_back() {
    let mut b = book(&[8 * G, 8 * G]);
    let first = placed(b.begin(req(1, 10, G, 0)));
    let on = first.instance.clone();
    let other = if on == "I0" { "I1" } else { "I0" };
    b.set_mps_down(&on, true);
    b.set_mps_down(other, true);
    // A new process waits; the one bound there may still grow its work.
    let waiting = b.begin(req(2, 20, G, 0)).unwrap();
    assert!(matches!(waiting, Begin::Waiting(_)), "{waiting:?}");
    assert_eq!(placed(b.begin(req(1, 10, G, 0))).instance, on);
    // The server is back: the waiting process is placed there.
    let now = b.set_mps_down(other, false);
    assert_eq!(now.len(), 1);
    assert_eq!(now[0].instance, other);
}

#[test]
fn retiring_instances_keep_their_processes_and_go_when_idle() {
    let mut b = book(&[4 * G, 4 * G]);
    let t = placed(b.begin(req(1, 1, G, 10)));
    assert_eq!(t.instance, "I0");
    b.set_retiring("I0", true);
    // A new process goes elsewhere, even to more warps.
    assert_eq!(placed(b.begin(req(2, 1, G, 100))).instance, "I1");
    assert_eq!(placed(b.begin(req(3, 1, G, 100))).instance, "I1");
    // The bound process's next task still goes to its instance.
    b.end(t.task).unwrap();
    assert!(!b.is_idle("I0"), "the process is still bound there");
    assert!(!b.remove_instance("I0"));
    let t2 = placed(b.begin(req(1, 1, 2 * G, 10)));
    assert_eq!(t2.instance, "I0");
    b.release_job(1);
    assert!(b.is_idle("I0"));
    // Removing it keeps the other instance's tasks and pins in place.
    assert!(b.remove_instance("I0"));
    assert!(!b.is_idle("I1"));
    assert_eq!(b.pinned(2, 1), Some("I1"));
    assert_eq!(b.instances()[0].reserved_bytes, 2 * G);
    // A task bigger than what is left waits; a new instance takes it.
    assert!(matches!(
        b.begin(req(4, 1, 3 * G, 0)).unwrap(),
        Begin::Waiting(_)
    ));
    let now = b.add_instance("I2", 8 * G, None, 1000);
    assert_eq!((now.len(), now[0].instance.as_str()), (1, "I2"));
    let (gone, _) = b.release_job(2);
    assert_eq!(gone.len(), 1);
    assert_eq!(b.instances()[0].reserved_bytes, G);
}

#[derive(Debug, Clone)]
enum Op {
    Begin {
        job: u64,
        pid: u32,
        gib: u64,
        warps: u64,
    },
    End(usize),
    ExitProcess(usize),
    EndJob(u64),
    Grow(usize, u64),
    Close(usize),
    Open(usize),
    /// The time of one of the rooms kept is up.
    EndKeep(usize),
}

type Check<'c> = dyn Fn(&TaskBook, &[Placed], &mut Vec<TaskId>) -> Result<(), TestCaseError> + 'c;

/// Ends every room kept (their time is up), checking what that placed.
fn end_keeps(
    b: &mut TaskBook,
    check: &Check<'_>,
    live: &mut Vec<TaskId>,
) -> Result<(), TestCaseError> {
    b.take_new_keeps();
    let kept: Vec<(JobId, u64)> = b.kept.iter().map(|(j, k)| (*j, k.seq)).collect();
    for (job, seq) in kept {
        let p = b.end_keep(job, seq);
        check(b, &p, live)?;
    }
    Ok(())
}

/// A job with room kept has no task, and its instance is open.
fn keeps_are_sound(b: &TaskBook) -> Result<(), TestCaseError> {
    for (job, k) in &b.kept {
        prop_assert_eq!(b.usage_of(*job).0, 0, "job {} has tasks and a keep", job);
        prop_assert!(!b.instances[k.instance].closed, "kept on a closed instance");
    }
    Ok(())
}

/// Rooms kept on instance `i`.
fn keeps_on(b: &TaskBook, i: usize) -> usize {
    b.kept.values().filter(|k| k.instance == i).count()
}

/// Opens instances `I0..In`, then ends every live task (and those placed
/// meanwhile) and every room kept, checking after each step: every waiting
/// task must have been placed by then.
fn drain(
    b: &mut TaskBook,
    n: usize,
    check: &Check<'_>,
    live: &mut Vec<TaskId>,
) -> Result<(), TestCaseError> {
    for i in 0..n {
        let p = b.set_closed(&format!("I{i}"), false);
        check(b, &p, live)?;
    }
    end_keeps(b, check, live)?;
    let mut rounds = 0;
    while let Some(id) = live.pop() {
        let p = b.end(id).unwrap();
        check(b, &p, live)?;
        end_keeps(b, check, live)?;
        rounds += 1;
        prop_assert!(rounds < 10_000);
    }
    prop_assert_eq!(b.waiting_len(), 0, "every waiting task was placed");
    Ok(())
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1u64..6, 0u32..3, 1u64..12, 0u64..200).prop_map(|(job, pid, gib, warps)| Op::Begin { job, pid, gib, warps }),
        3 => (0usize..64).prop_map(Op::End),
        1 => (0usize..64).prop_map(Op::ExitProcess),
        1 => (1u64..6).prop_map(Op::EndJob),
        1 => (0usize..64, 1u64..3).prop_map(|(i, g)| Op::Grow(i, g)),
        1 => (0usize..5).prop_map(Op::Close),
        1 => (0usize..5).prop_map(Op::Open),
        1 => (0usize..8).prop_map(Op::EndKeep),
    ]
}

proptest! {
    /// Random concurrent begins, ends, exits, growths (waiting where they
    /// do not fit) and isolations: no instance is ever over-reserved, no
    /// waiting growth is deadlocked, nothing is placed on a closed
    /// instance, no waiting task is overtaken more than the aging bound,
    /// rooms kept between processes (`keeping`) are only for jobs with no
    /// task, on open instances, and once everything active ends, every
    /// keep's time is up and every instance opens, every waiting task has
    /// been placed.
    #[test]
    fn never_over_reserved_and_waiters_are_placed(
        ops in prop::collection::vec(op(), 1..120),
        keeping in any::<bool>(),
    ) {
        let sizes = [5 * G, 5 * G, 5 * G, 10 * G, 10 * G];
        let mut b = book(&sizes).with_max_overtakes(3).with_keeping(keeping);
        let mut keeps: Vec<(JobId, u64)> = Vec::new();
        let mut live: Vec<TaskId> = Vec::new();
        let check = |b: &TaskBook, placed: &[Placed], live: &mut Vec<TaskId>| -> Result<(), TestCaseError> {
            for p in placed {
                let i = b.instances().iter().position(|i| i.uuid == p.instance).unwrap();
                prop_assert!(!b.instances()[i].closed, "placed on a closed instance");
                live.push(p.task);
            }
            for i in b.instances() {
                prop_assert!(i.reserved_bytes <= i.memory_bytes, "{} over-reserved", i.uuid);
            }
            // Aging: no waiting task is overtaken more than the bound.
            prop_assert!(b.overtaken.values().all(|&n| n <= 3), "{:?}", b.overtaken);
            keeps_are_sound(b)?;
            prop_assert!(b.overtaken.keys().all(|id| b.waiting.iter().any(|(w, _)| w == id)));
            Ok(())
        };
        for o in ops {
            let placed = match o {
                Op::Begin { job, pid, gib, warps } => match b.begin(req(job, pid, gib * G, warps)) {
                    Ok(Begin::Placed(p)) => vec![p],
                    Ok(Begin::Waiting(_)) => vec![],
                    Err(PlacementError::NeverFits { .. }) | Err(PlacementError::NeverFitsPinned { .. }) => {
                        prop_assert!(gib * G > 5 * G);
                        vec![]
                    }
                    Err(e) => return Err(TestCaseError::fail(e.to_string())),
                },
                Op::End(k) if !live.is_empty() => {
                    let id = live.remove(k % live.len());
                    b.end(id).unwrap()
                }
                Op::ExitProcess(k) if !live.is_empty() => {
                    let t = b.task(live[k % live.len()]).unwrap();
                    let (gone, now) = b.release_process(t.job, t.pid);
                    live.retain(|id| !gone.contains(id));
                    now
                }
                Op::EndJob(job) => {
                    let (gone, now) = b.release_job(job);
                    live.retain(|id| !gone.contains(id));
                    now
                }
                Op::Grow(k, g) if !live.is_empty() => {
                    // Growth that does not fit may wait for room.
                    let _ = b.grow_or_wait(live[k % live.len()], g * G, G);
                    vec![]
                }
                Op::Close(i) => b.set_closed(&format!("I{i}"), true),
                Op::Open(i) => b.set_closed(&format!("I{i}"), false),
                Op::EndKeep(k) if !keeps.is_empty() => {
                    // Possibly a keep already taken or replaced: nothing then.
                    let (job, seq) = keeps.remove(k % keeps.len());
                    b.end_keep(job, seq)
                }
                _ => vec![],
            };
            keeps.extend(b.take_new_keeps());
            check(&b, &placed, &mut live)?;
            // A waiting growth is only ever on an instance where some task
            // does not wait to grow (else nothing would free memory).
            for (t, _) in &b.growing {
                let i = b.active[t].instance;
                prop_assert!(b.active.iter().any(|(id, a)| a.instance == i
                    && !b.growing.iter().any(|(g, _)| g == id)), "growths deadlocked on {i}");
            }
            for (t, grown) in b.take_growth() {
                prop_assert!(!grown || b.task(t).is_some(), "grew a task that is gone");
            }
        }
        // Drain: open everything, end every task; waiters get placed and end too.
        drain(&mut b, sizes.len(), &check, &mut live)?;
        prop_assert!(b.instances().iter().all(|i| i.reserved_bytes == 0 && i.warps == 0));
        prop_assert!(b.growing.is_empty(), "growths left waiting");
    }
}

fn shared(job: JobId, pid: u32, bytes: u64, share: u32) -> TaskRequest {
    TaskRequest {
        share: Some(share),
        ..req(job, pid, bytes, 0)
    }
}

#[test]
fn the_compute_ceiling_stops_co_location_and_the_least_busy_instance_is_chosen() {
    let mut b = book(&[40 * G, 40 * G]).with_compute_ceiling(Some(1000));
    // Two busy processes go to different instances (least busy first).
    let a = placed(b.begin(shared(1, 1, G, 600)));
    let c = placed(b.begin(shared(2, 2, G, 600)));
    assert_ne!(a.instance, c.instance);
    assert_eq!(a.share, 600, "the demand is recorded with the placement");
    // Light ones fill both up to the ceiling, on the least busy one.
    placed(b.begin(shared(3, 3, G, 400)));
    placed(b.begin(shared(4, 4, G, 400)));
    assert!(b.instances().iter().all(|i| i.compute == 1000));
    // Memory is plentiful but compute is not: the next one waits.
    let Begin::Waiting(w) = b.begin(shared(5, 5, G, 100)).unwrap() else {
        panic!("placed past the ceiling")
    };
    // A process with a task running is not held back by its own demand.
    assert!(matches!(
        b.begin(shared(1, 1, G, 600)),
        Ok(Begin::Placed(_))
    ));
    // When compute is given back the waiter is placed.
    let now = b.end(c.task).unwrap();
    assert_eq!(now.len(), 1);
    assert_eq!(now[0].task, w);
    assert_eq!(now[0].instance, c.instance);
}

#[test]
fn an_empty_instance_takes_one_task_above_the_ceiling_and_small_instances_count_their_part() {
    let mut b = book(&[40 * G, 10 * G])
        .with_capacity("I1", 142)
        .with_compute_ceiling(Some(1000));
    // A 1g-sized instance is full with a task demanding a seventh of a GPU.
    let first = placed(b.begin(shared(1, 1, 11 * G, 1000)));
    assert_eq!(first.instance, "I0");
    let small = placed(b.begin(shared(2, 2, G, 142)));
    assert_eq!(small.instance, "I1");
    assert_eq!(b.instances()[1].compute_load(), 1000);
    // A demand above an instance counts as the whole instance.
    let mut c = book(&[10 * G])
        .with_capacity("I0", 142)
        .with_compute_ceiling(Some(2000));
    placed(c.begin(shared(1, 1, G, 900)));
    assert_eq!(c.instances()[0].compute, 142);
    placed(c.begin(shared(2, 2, G, 900)));
    assert!(matches!(c.begin(shared(3, 3, G, 1)), Ok(Begin::Waiting(_))));
}

#[test]
fn memory_blind_and_unceilinged_books_ignore_demands() {
    let mut b = book(&[40 * G]);
    for pid in 0..4 {
        placed(b.begin(shared(1, pid, G, 1000)));
    }
    let mut blind = TaskBook::new(Box::new(BlindPlacement), vec![("I0".into(), 40 * G)])
        .with_compute_ceiling(Some(1000));
    for pid in 0..4 {
        placed(blind.begin(shared(1, pid, G, 1000)));
    }
}

#[test]
fn only_a_memory_blind_book_lets_a_task_grow_past_its_instance() {
    let mut b = book(&[40 * G]);
    let t = placed(b.begin(shared(1, 1, 30 * G, 0))).task;
    assert!(matches!(
        b.grow(t, 20 * G),
        Err(PlacementError::Full { .. })
    ));
    let mut blind = TaskBook::new(Box::new(BlindPlacement), vec![("I0".into(), 40 * G)]);
    let t = placed(blind.begin(shared(1, 1, 30 * G, 0))).task;
    blind.grow(t, 20 * G).unwrap();
    assert_eq!(blind.task(t).unwrap().bytes, 50 * G);
}

#[test]
fn a_process_without_a_placement_closes_its_instance_to_new_processes() {
    let mut b = book(&[40 * G, 40 * G]);
    let first = placed(b.begin(shared(1, 10, G, 0)));
    let on = first.instance.clone();
    // Job 1's other processes, and gprobe's commands, count as placed;
    // job 2's process on the instance does not.
    let seen = [(10, 1), (11, 1), (20, 2)];
    assert_eq!(b.unplaced_on(&on, &seen), vec![(20, 2)]);
    b.set_bypassed(&on, true);
    let other = b
        .instances()
        .iter()
        .find(|i| i.uuid != on)
        .unwrap()
        .uuid
        .clone();
    b.set_closed(&other, true);
    // Job 1's bound process goes on; a new process waits.
    placed(b.begin(shared(1, 10, G, 0)));
    let waiting = match b.begin(shared(3, 30, G, 0)).unwrap() {
        Begin::Waiting(t) => t,
        p => panic!("placed beside a process without a placement: {p:?}"),
    };
    let now = b.set_bypassed(&on, false);
    assert_eq!(now.len(), 1);
    assert_eq!(
        (now[0].task, now[0].instance.as_str()),
        (waiting, on.as_str())
    );
}

#[test]
fn a_growth_that_does_not_fit_waits_for_memory_unless_nothing_could_free_it() {
    let mut b = book(&[40 * G]);
    let a = placed(b.begin(req(1, 1, 20 * G, 0))).task;
    let c = placed(b.begin(req(2, 2, 15 * G, 0))).task;
    // 5 GiB free: 8 does not fit, 4 (at least) does.
    assert_eq!(b.grow_or_wait(a, 8 * G, 4 * G), Ok(Growth::Grown(4 * G)));
    // More than the instance holds, even alone: refused at
    // once, not kept waiting.
    assert!(matches!(
        b.grow_or_wait(c, 30 * G, 30 * G),
        Err(PlacementError::Full { .. })
    ));
    // 1 GiB free: a waits to grow by 2.
    assert_eq!(b.grow_or_wait(a, 3 * G, 2 * G), Ok(Growth::Waiting));
    // While it waits, no new process is bound there, even one that fits.
    let waiting = match b.begin(req(3, 3, G / 2, 0)).unwrap() {
        Begin::Waiting(t) => t,
        p => panic!("placed ahead of a growth: {p:?}"),
    };
    // c waiting too would leave nothing to free memory: refused at once.
    assert!(matches!(
        b.grow_or_wait(c, 2 * G, 2 * G),
        Err(PlacementError::Full { .. })
    ));
    assert!(b.take_growth().is_empty());
    // c ends: a grows first, then the newcomer is placed in what is left.
    let placed_now = b.end(c).unwrap();
    assert_eq!(b.take_growth(), vec![(a, true)]);
    assert_eq!(b.task(a).unwrap().bytes, 26 * G);
    assert_eq!(placed_now.len(), 1);
    assert_eq!(placed_now[0].task, waiting);
}

#[test]
fn a_waiting_growth_is_refused_when_the_others_end_up_waiting_too() {
    let mut b = book(&[40 * G]);
    let a = placed(b.begin(req(1, 1, 20 * G, 0))).task;
    let c = placed(b.begin(req(2, 2, 19 * G, 0))).task;
    let d = placed(b.begin(req(3, 3, G, 0))).task;
    assert_eq!(b.grow_or_wait(a, 2 * G, 2 * G), Ok(Growth::Waiting));
    assert_eq!(b.grow_or_wait(c, 2 * G, 2 * G), Ok(Growth::Waiting));
    // d's end frees 1 GiB, not enough for either, and only waiting tasks
    // are left: the newest growth is refused, and c's end will let a grow.
    b.end(d).unwrap();
    assert_eq!(b.take_growth(), vec![(c, false)]);
    b.end(c).unwrap();
    assert_eq!(b.take_growth(), vec![(a, true)]);
    // A growth that waited too long is cancelled; nothing else changes.
    let f = placed(b.begin(req(5, 5, 17 * G, 0))).task;
    assert_eq!(b.grow_or_wait(f, 2 * G, 2 * G), Ok(Growth::Waiting));
    assert_eq!(b.cancel_growth(f), Some(vec![]));
    assert_eq!(b.cancel_growth(f), None);
    b.end(f).unwrap();
    assert!(b.take_growth().is_empty());
    // A task that ends while it waits is dropped from the growths.
    let e = placed(b.begin(req(4, 4, 17 * G, 0))).task;
    assert_eq!(b.grow_or_wait(e, 2 * G, 2 * G), Ok(Growth::Waiting));
    let (gone, _) = b.release_process(4, 4);
    assert_eq!(gone, vec![e]);
    assert_eq!(b.take_growth(), vec![(e, false)]);
}

#[derive(Debug, Clone)]
enum ComputeOp {
    Begin {
        gib: u64,
        share: u32,
    },
    End(usize),
    Close(usize),
    Open(usize),
    EndKeep(usize),
    /// A live task's process measures at most its demand so far (a rise
    /// may pass the ceiling: it is counted, not refused).
    Measure(usize, u32),
}

fn compute_op() -> impl Strategy<Value = ComputeOp> {
    prop_oneof![
        4 => (1u64..12, 1u32..1200).prop_map(|(gib, share)| ComputeOp::Begin { gib, share }),
        3 => (0usize..64).prop_map(ComputeOp::End),
        1 => (0usize..3).prop_map(ComputeOp::Close),
        1 => (0usize..3).prop_map(ComputeOp::Open),
        2 => (0usize..64, 1u32..1000).prop_map(|(k, share)| ComputeOp::Measure(k, share)),
        1 => (0usize..8).prop_map(ComputeOp::EndKeep),
    ]
}

proptest! {
    /// Processes of one task each (as the driver interception makes them)
    /// with random demands, on instances of different sizes: no instance
    /// is over its memory, none is over its compute ceiling unless one task
    /// (or one room kept for a job's next process) alone is on it, and once
    /// everything ends every waiter was placed. Some processes are the
    /// next of a job whose room may be kept.
    #[test]
    fn never_over_the_compute_ceiling(
        ops in prop::collection::vec(compute_op(), 1..150),
        ceiling in 500u32..2000,
        keeping in any::<bool>(),
    ) {
        let mut b = book(&[10 * G, 20 * G, 40 * G])
            .with_capacity("I0", 142)
            .with_capacity("I1", 285)
            .with_compute_ceiling(Some(ceiling))
            .with_keeping(keeping);
        let mut keeps: Vec<(JobId, u64)> = Vec::new();
        let mut live: Vec<TaskId> = Vec::new();
        let mut pid = 0;
        let check = |b: &TaskBook, placed: &[Placed], live: &mut Vec<TaskId>| -> Result<(), TestCaseError> {
            live.extend(placed.iter().map(|p| p.task));
            for i in b.instances() {
                prop_assert!(i.reserved_bytes <= i.memory_bytes, "{} over-reserved", i.uuid);
                let limit = i.capacity as u64 * ceiling as u64 / 1000;
                let k = b.instances().iter().position(|x| x.uuid == i.uuid).unwrap();
                prop_assert!(
                    i.compute as u64 <= limit || b.tasks_on(&i.uuid) as usize + keeps_on(b, k) == 1,
                    "{} demands {} over {limit}", i.uuid, i.compute
                );
            }
            keeps_are_sound(b)?;
            Ok(())
        };
        for o in ops {
            let placed = match o {
                ComputeOp::Begin { gib, share } => {
                    pid += 1;
                    // Every third process is the next of the job before.
                    let job = (pid - pid / 3) as u64;
                    match b.begin(shared(job, pid, gib * G, share)) {
                        Ok(Begin::Placed(p)) => vec![p],
                        Ok(Begin::Waiting(_)) => vec![],
                        Err(e) => {
                            prop_assert!(gib > 40, "{e}");
                            vec![]
                        }
                    }
                }
                ComputeOp::End(k) if !live.is_empty() => {
                    let id = live.remove(k % live.len());
                    b.end(id).unwrap()
                }
                ComputeOp::Close(i) => b.set_closed(&format!("I{i}"), true),
                ComputeOp::Open(i) => b.set_closed(&format!("I{i}"), false),
                ComputeOp::Measure(k, share) if !live.is_empty() => {
                    let t = b.task(live[k % live.len()]).unwrap();
                    b.set_process_demand(t.job, t.pid, share.min(t.share))
                }
                ComputeOp::EndKeep(k) if !keeps.is_empty() => {
                    let (job, seq) = keeps.remove(k % keeps.len());
                    b.end_keep(job, seq)
                }
                _ => vec![],
            };
            keeps.extend(b.take_new_keeps());
            check(&b, &placed, &mut live)?;
        }
        drain(&mut b, 3, &check, &mut live)?;
        prop_assert!(b.instances().iter().all(|i| i.compute == 0));
    }
}

#[test]
fn a_task_that_states_no_demand_counts_the_default_part_of_its_instance() {
    let mut b = book(&[10 * G])
        .with_capacity("I0", 142)
        .with_default_share(250)
        .with_compute_ceiling(Some(1000));
    // Four unknown processes fill a 1g-sized instance, as on a whole GPU.
    for pid in 0..4 {
        let p = placed(b.begin(req(1, pid, G, 0)));
        assert_eq!(p.share, 35, "a quarter of 142");
    }
    assert!(matches!(b.begin(req(1, 9, G, 0)), Ok(Begin::Waiting(_))));
}

#[test]
fn a_process_s_demand_is_set_as_measured_and_shared_among_its_tasks() {
    let mut b = book(&[40 * G])
        .with_compute_ceiling(Some(1000))
        .with_default_share(500);
    let first = b.begin(req(1, 10, G, 0)).unwrap();
    let second = b.begin(req(1, 10, G, 0)).unwrap();
    assert!(matches!(first, Begin::Placed(_)) && matches!(second, Begin::Placed(_)));
    // Its two tasks at 500 each fill the ceiling: another process waits.
    assert!(matches!(
        b.begin(req(2, 20, G, 0)).unwrap(),
        Begin::Waiting(_)
    ));
    // Measured at 300 in all: 150 each, room for the newcomer's 500.
    let placed = b.set_process_demand(1, 10, 300);
    assert_eq!(placed.len(), 1);
    assert_eq!(b.instances()[0].compute, 150 + 150 + 500);
    // A rise places nothing and is counted.
    assert!(b.set_process_demand(1, 10, 1000).is_empty());
    assert_eq!(b.instances()[0].compute, 500 + 500 + 500);
    assert!(
        b.set_process_demand(3, 30, 10).is_empty(),
        "no such process"
    );
}

#[test]
fn the_room_for_newcomers_is_the_compute_left_under_the_ceiling() {
    let room = |compute, default_demand| {
        Some(crate::wire::SharedRoom {
            compute,
            default_demand,
        })
    };
    let mut b = book(&[40 * G, 10 * G])
        .with_capacity("I1", 142)
        .with_compute_ceiling(Some(3000))
        .with_default_share(375);
    // Empty: three GPUs' time on the whole GPU, 426 on the slice; a
    // newcomer counts 3/8 of the whole GPU.
    assert_eq!(b.room_for_newcomers(), room(3000 + 426, 375));
    // A process measured busy all the time on the slice: 284 left there.
    let p = placed(b.begin(req(1, 1, G, 0)));
    assert_eq!(p.instance, "I1");
    b.set_process_demand(1, 1, 1000);
    assert_eq!(b.room_for_newcomers(), room(3000 + 284, 375));
    // A closed instance takes nobody.
    b.set_closed("I0", true);
    assert_eq!(b.room_for_newcomers(), room(284, 53));
    // Without a ceiling, memory alone decides: not modelled.
    assert_eq!(book(&[G]).room_for_newcomers(), None);
}
