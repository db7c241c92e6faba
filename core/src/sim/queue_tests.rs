//! The controller's queue policies in the simulator: priority, time
//! limits, backfill against strict priority order, fair share, QOS limits,
//! preemption and GPU time quotas, each on a few jobs whose schedule is
//! worked out by hand.

use super::*;

/// An isolated job of `secs` on one GPU of one node.
fn job(name: &str, user: &str, submit: f64, secs: f64, limit: Option<f64>) -> SimJob {
    SimJob {
        name: name.into(),
        isolated: true,
        footprint_mib: 1024,
        submit,
        phases: vec![Phase::Gpu {
            mem_mib: 1024,
            slices: 1.0,
            secs,
        }],
        user: Some(user.into()),
        time_limit: limit,
        ..SimJob::default()
    }
}

fn waits(r: &SimResult) -> Vec<f64> {
    r.waits.iter().map(|w| w.unwrap_or(-1.0).round()).collect()
}

fn run(spec: &str, jobs: &[SimJob], options: SimOptions) -> SimResult {
    simulate_with(spec, Policy::Exclusive, jobs, options).unwrap()
}

#[test]
fn the_controllers_priority_policy_orders_the_queue_in_the_simulator_too() {
    // One whole GPU; three isolated jobs of 100 s, b and c submitted
    // together after a (the first waiting job reserves the GPU, so one
    // that comes later does not overtake it); c has nice -10000.
    let nice = |mut j: SimJob, nice: i64| {
        j.nice = nice;
        j
    };
    let jobs = [
        job("a", "ann", 0.0, 100.0, None),
        job("b", "ann", 1.0, 100.0, None),
        nice(job("c", "ann", 1.0, 100.0, None), -10_000),
    ];
    for policy in [Policy::Case, Policy::Exclusive] {
        let run = |priority| {
            let options = SimOptions {
                priority,
                ..SimOptions::default()
            };
            simulate_with("1xA100-40GB", policy, &jobs, options).unwrap()
        };
        // First come, first served: c waits for a and b.
        let basic = run(None);
        assert_eq!(waits(&basic), vec![0.0, 99.0, 199.0], "{policy}");
        assert!((basic.mean_wait - 99.3).abs() < 1.0, "{}", basic.mean_wait);
        // Under multifactor, c's nice puts it before b (exclusive too,
        // which takes both queues as one).
        let multifactor = run(Some("multifactor"));
        assert_eq!(waits(&multifactor), vec![0.0, 199.0, 99.0], "{policy}");
    }
    // A name no policy has is refused.
    let bad = SimOptions {
        priority: Some("fifo"),
        ..SimOptions::default()
    };
    assert!(matches!(
        simulate_with("1xA100-40GB", Policy::Exclusive, &jobs, bad),
        Err(SimError::Priority(_))
    ));
}

#[test]
fn a_job_past_its_time_limit_is_killed_there() {
    let jobs = [job("long", "ann", 0.0, 100.0, Some(50.0))];
    let r = run("1xA100-80GB", &jobs, SimOptions::default());
    assert_eq!(r.outcomes, vec![SimOutcome::TimedOut]);
    assert_eq!((r.timeouts, r.completed), (1, 0));
    assert!((r.makespan - 50.0).abs() < 1e-6, "{}", r.makespan);
}

#[test]
fn backfill_starts_a_short_job_before_a_wide_one_without_delaying_it() {
    // Two nodes of one GPU. `a` and `b` run (to 100 s and 300 s); `wide`
    // wants both nodes and holds them, expected to start at 300; `short`
    // (limit 60 s) fits in node 1's gap from 100 s.
    let mut wide = job("wide", "ann", 1.0, 100.0, Some(100.0));
    wide.nodes = 2;
    let jobs = [
        job("a", "ann", 0.0, 100.0, Some(100.0)),
        job("b", "ann", 0.0, 300.0, Some(300.0)),
        wide,
        job("short", "ann", 2.0, 50.0, Some(60.0)),
    ];
    for policy in [Policy::Exclusive, Policy::Case] {
        let options = |scheduler| SimOptions {
            nodes: 2,
            scheduler,
            ..SimOptions::default()
        };
        let sim = |o| simulate_with("1xA100-80GB", policy, &jobs, o).unwrap();
        let backfill = sim(options(SchedulerType::Backfill));
        assert_eq!(waits(&backfill), vec![0.0, 0.0, 299.0, 98.0], "{policy}");
        // Strict priority order: nothing passes the wide job.
        let builtin = sim(options(SchedulerType::Builtin));
        assert_eq!(waits(&builtin), vec![0.0, 0.0, 299.0, 398.0], "{policy}");
        assert_eq!(backfill.completed, 4);
    }
}

/// Two accounts of equal shares, ann in physics and cem in bio.
const ACCOUNTS: &str = r#"[
    {"op": "add_account", "name": "physics"},
    {"op": "add_account", "name": "bio"},
    {"op": "add_user", "user": "ann", "account": "physics", "default": true},
    {"op": "add_user", "user": "cem", "account": "bio", "default": true}
]"#;

#[test]
fn fair_share_puts_the_user_who_used_less_first() {
    // One GPU. ann's first job runs to 100 s; at 50 s ann and then cem
    // submit one more each.
    let jobs = [
        job("ann-1", "ann", 0.0, 100.0, None),
        job("ann-2", "ann", 50.0, 100.0, None),
        job("cem-1", "cem", 50.0, 100.0, None),
    ];
    let site = SimSite::from_json(&format!(r#"{{"accounts": {ACCOUNTS}}}"#)).unwrap();
    // First come, first served: ann's second job first.
    let basic = run("1xA100-80GB", &jobs, SimOptions::default());
    assert_eq!(waits(&basic), vec![0.0, 50.0, 150.0]);
    // Fair share: ann has used the GPU, cem has not.
    let fair = run(
        "1xA100-80GB",
        &jobs,
        SimOptions {
            site,
            priority: Some("multifactor"),
            ..SimOptions::default()
        },
    );
    assert_eq!(waits(&fair), vec![0.0, 150.0, 50.0]);
    let share = |r: &SimResult, name: &str| {
        r.groups
            .iter()
            .find(|g| g.kind == "account" && g.name == name)
            .map(|g| (g.jobs, g.mean_wait))
    };
    // Jobs name no account here; the groups are by user.
    assert_eq!(share(&fair, "physics"), None);
    assert!(fair
        .groups
        .iter()
        .any(|g| g.kind == "user" && g.name == "cem"));
}

/// QOS normal (with `limits`) and high, which preempts normal.
fn qos_site(limits: &str, mode: &str) -> SimSite {
    SimSite::from_json(&format!(
        r#"{{"preempt_mode": "{mode}", "qos": [
            {{"op": "add", "qos": {{"name": "normal" {limits}}}}},
            {{"op": "add", "qos": {{"name": "high", "priority": 10, "preempt": ["normal"]}}}}
        ]}}"#
    ))
    .unwrap()
}

fn with_qos(mut j: SimJob, qos: &str) -> SimJob {
    j.qos = Some(qos.into());
    j
}

#[test]
fn a_high_qos_job_preempts_and_the_victim_runs_again_or_ends_preempted() {
    let jobs = [
        with_qos(job("low", "ann", 0.0, 100.0, None), "normal"),
        with_qos(job("urgent", "cem", 10.0, 10.0, None), "high"),
    ];
    let options = |mode| SimOptions {
        site: qos_site("", mode),
        ..SimOptions::default()
    };
    // Requeued: it starts over once the urgent job is done.
    let requeue = run("1xA100-80GB", &jobs, options("requeue"));
    assert_eq!(waits(&requeue), vec![0.0, 0.0]);
    assert_eq!((requeue.preemptions, requeue.completed), (1, 2));
    assert!(
        (requeue.makespan - 120.0).abs() < 1e-6,
        "{}",
        requeue.makespan
    );
    // Cancelled: it ends there.
    let cancel = run("1xA100-80GB", &jobs, options("cancel"));
    assert_eq!(
        cancel.outcomes,
        vec![SimOutcome::Preempted, SimOutcome::Completed]
    );
    // Without preemption the urgent job waits for the GPU.
    let off = run("1xA100-80GB", &jobs, options("off"));
    assert_eq!(waits(&off), vec![0.0, 90.0]);
    assert_eq!(off.preemptions, 0);
    // Suspending frees no GPU: the urgent job waits as without.
    let suspend = run("1xA100-80GB", &jobs, options("suspend"));
    assert_eq!(waits(&suspend), vec![0.0, 90.0]);
    assert_eq!(suspend.preemptions, 0);
}

#[test]
fn a_job_suspended_for_cpus_stands_still_and_goes_on_when_the_urgent_one_ends() {
    let cpu = |name: &str, user: &str, submit, secs, cpus, qos: &str| SimJob {
        isolated: false,
        footprint_mib: 0,
        phases: vec![Phase::Cpu { secs }],
        cpus,
        time_limit: Some(200.0),
        qos: Some(qos.into()),
        ..job(name, user, submit, secs, None)
    };
    // The node's 1024 CPUs: 1000 to the low job, 100 more wanted.
    let jobs = [
        cpu("low", "ann", 0.0, 100.0, 1000, "normal"),
        cpu("urgent", "cem", 10.0, 10.0, 100, "high"),
    ];
    let options = SimOptions {
        site: qos_site("", "suspend"),
        ..SimOptions::default()
    };
    // Two instances: the GPU is not what the urgent job waits for.
    let r = run("1xA100-40GB:1g.5gb*2", &jobs, options);
    assert_eq!(waits(&r), vec![0.0, 0.0], "{:?}", r.decisions);
    assert_eq!(r.completed, 2);
    assert_eq!(r.timeouts, 0, "its limit stood still while it was stopped");
    // The low job: 100 s of work, 10 of them after 10 s stopped.
    let low = r.turnarounds[0].round();
    assert_eq!(low, 110.0, "{:?}", r.decisions);
    assert!(r.decisions.iter().any(|d| d == "suspend low"));
    assert!(r.decisions.iter().any(|d| d == "resume low"));
}

#[test]
fn qos_limits_hold_jobs_back_or_refuse_them() {
    // Two GPUs, two jobs of one user at once.
    let jobs = [
        with_qos(job("one", "ann", 0.0, 100.0, None), "normal"),
        with_qos(job("two", "ann", 0.0, 100.0, None), "normal"),
    ];
    let options = |limits| SimOptions {
        site: qos_site(limits, "off"),
        ..SimOptions::default()
    };
    let free = run("2xA100-80GB", &jobs, options(""));
    assert_eq!(waits(&free), vec![0.0, 0.0]);
    let one_at_a_time = run("2xA100-80GB", &jobs, options(r#", "max_jobs_per_user": 1"#));
    assert_eq!(waits(&one_at_a_time), vec![0.0, 100.0]);
    let one_submitted = run(
        "2xA100-80GB",
        &jobs,
        options(r#", "max_submit_jobs_per_user": 1"#),
    );
    assert_eq!(
        one_submitted.outcomes,
        vec![SimOutcome::Completed, SimOutcome::Refused]
    );
    assert_eq!(one_submitted.refused, 1);
}

#[test]
fn what_the_simulator_cannot_run_is_refused_by_name() {
    let mut shared = job("wide-shared", "ann", 0.0, 10.0, None);
    shared.isolated = false;
    shared.nodes = 2;
    let two = SimOptions {
        nodes: 2,
        ..SimOptions::default()
    };
    let e = simulate_with("1xA100-80GB", Policy::Case, &[shared], two.clone()).unwrap_err();
    assert!(e.to_string().contains("wide-shared"), "{e}");
    let mut wide = job("too-wide", "ann", 0.0, 10.0, None);
    wide.nodes = 3;
    let e = simulate_with("1xA100-80GB", Policy::Case, &[wide], two.clone()).unwrap_err();
    assert!(e.to_string().contains("has 2"), "{e}");
    let mut none = job("no-gpus", "ann", 0.0, 10.0, None);
    none.gpus = 0;
    let e = simulate_with("1xA100-80GB", Policy::Case, &[none], two.clone()).unwrap_err();
    assert!(e.to_string().contains("no-gpus"), "{e}");
    let never = job("never", "ann", 0.0, 10.0, Some(f64::NAN));
    let e = simulate_with("1xA100-80GB", Policy::Case, &[never], two).unwrap_err();
    assert!(e.to_string().contains("time_limit"), "{e}");
    let e = SimSite::from_json(r#"{"preempt": "requeue"}"#).unwrap_err();
    assert!(e.to_string().contains("preempt"), "{e}");
    let e = SimSite::from_json(r#"{"preempt_mode": "gang"}"#).unwrap_err();
    assert!(e.to_string().contains("gang"), "{e}");
}

/// QOS normal (at most 3 running jobs per user) and high (preempts
/// normal), two accounts of the queue workload's users.
const SITE: &str = r#"{
    "preempt_mode": "requeue",
    "accounts": [
        {"op": "add_account", "name": "physics"},
        {"op": "add_account", "name": "bio"},
        {"op": "add_user", "user": "ann", "account": "physics"},
        {"op": "add_user", "user": "bob", "account": "physics"},
        {"op": "add_user", "user": "cem", "account": "bio"},
        {"op": "add_user", "user": "dia", "account": "bio"}
    ],
    "qos": [
        {"op": "add", "qos": {"name": "normal", "max_jobs_per_user": 3}},
        {"op": "add", "qos": {"name": "high", "priority": 10, "preempt": ["normal"], "grace_time_secs": 30}}
    ]
}"#;

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(12))]

    /// Whatever the queue, with every queue policy on: every job ends
    /// exactly once (the simulation never stalls), no job runs twice at
    /// once (asserted where a job is launched), and what ended adds up.
    #[test]
    fn every_queued_job_ends_once_under_every_queue_policy(
        seed in 0u64..1000,
        builtin in proptest::bool::ANY,
        exclusive in proptest::bool::ANY,
    ) {
        let jobs = queue_mix::generate(&queue_mix::QueueMix {
            jobs: 40,
            seed,
            nodes: 3,
            gpus_per_node: 2,
            load: 1.5,
        });
        let options = SimOptions {
            nodes: 3,
            site: SimSite::from_json(SITE).unwrap(),
            priority: Some("multifactor"),
            scheduler: if builtin { SchedulerType::Builtin } else { SchedulerType::Backfill },
            ..SimOptions::default()
        };
        let policy = if exclusive { Policy::Exclusive } else { Policy::Case };
        let r = simulate_with("2xA100-80GB", policy, &jobs, options).unwrap();
        let ended = |o: SimOutcome| r.outcomes.iter().filter(|x| **x == o).count();
        proptest::prop_assert_eq!(
            r.completed + r.timeouts + ended(SimOutcome::Preempted) + r.refused,
            jobs.len()
        );
        proptest::prop_assert!(r.waits.iter().all(|w| w.is_some_and(|w| w >= 0.0)));
    }
}

/// A shared job of one GPU task filling a whole A100 (100 s alone there)
/// with `share` as its `--gpu-share`.
fn filling(name: &str, share: Option<&str>) -> SimJob {
    SimJob {
        name: name.into(),
        footprint_mib: 1024,
        phases: vec![Phase::Gpu {
            mem_mib: 1024,
            slices: 7.0,
            secs: 700.0,
        }],
        gpu_share: share.map(String::from),
        ..SimJob::default()
    }
}

#[test]
fn gpu_time_quotas_split_an_instance_by_their_requests() {
    let spec = "1xA100-80GB";
    // Without quotas the two share the GPU evenly: both end together.
    let plain = [filling("a", None), filling("b", None)];
    let r = simulate_with(spec, Policy::Case, &plain, SimOptions::default()).unwrap();
    assert!((r.makespan - 206.0).abs() < 1.0, "{}", r.makespan);
    // 0.3 and 0.7: b gets 0.7 of the time while both run (ends at about
    // 143 s), a the rest, then all of it (ends at about 200 s; taking
    // turns, they pay no co-location slowdown).
    let quota = [filling("a", Some("0.3")), filling("b", Some("0.7"))];
    let r = simulate_with(spec, Policy::Case, &quota, SimOptions::default()).unwrap();
    let turnaround = |k: usize| r.turnaround_of(k);
    assert!((turnaround(1) - 143.0).abs() < 7.0, "b {}", turnaround(1));
    assert!((turnaround(0) - 200.0).abs() < 4.0, "a {}", turnaround(0));
    // A quota on an isolated job is refused, as is one that does not read.
    let mut iso = filling("iso", Some("0.5"));
    iso.isolated = true;
    assert!(simulate_with(spec, Policy::Case, &[iso], SimOptions::default()).is_err());
    let bad = filling("bad", Some("0.5:0.2"));
    let e = simulate_with(spec, Policy::Case, &[bad], SimOptions::default()).unwrap_err();
    assert!(e.to_string().contains("bad"), "{e}");
}

#[test]
fn a_latency_critical_jobs_bursts_go_first() {
    // A batch job with a quota fills the GPU; the other job runs 10
    // bursts of 1 s (alone) between 5 s of CPU.
    let spec = "1xA100-80GB";
    let bursts = |qos: Option<&str>, share: Option<&str>| {
        let mut phases = Vec::new();
        for _ in 0..10 {
            phases.push(Phase::Cpu { secs: 5.0 });
            phases.push(Phase::Gpu {
                mem_mib: 512,
                slices: 7.0,
                secs: 7.0,
            });
        }
        SimJob {
            name: "infer".into(),
            footprint_mib: 512,
            submit: 1.0,
            phases,
            qos: qos.map(String::from),
            gpu_share: share.map(String::from),
            ..SimJob::default()
        }
    };
    let site = SimSite::from_json(
        r#"{"qos": [
            {"op": "add", "qos": {"name": "normal"}},
            {"op": "add", "qos": {"name": "lc", "gpu_share": {"request": 100, "limit": 1000}, "latency_critical": true}}
        ]}"#,
    )
    .unwrap();
    let options = SimOptions {
        site,
        ..SimOptions::default()
    };
    let run = |infer: SimJob| {
        let jobs = [filling("train", Some("0.5")), infer];
        let r = simulate_with(spec, Policy::Case, &jobs, options.clone()).unwrap();
        r.turnaround_of(1)
    };
    // Alone it takes 60 s; latency-critical, about that beside training.
    let lc = run(bursts(Some("lc"), None));
    assert!((lc - 60.0).abs() < 1.0, "latency-critical {lc}");
    // Sharing the GPU by demand, each burst takes twice as long.
    let plain = run(bursts(Some("normal"), None));
    assert!(plain > 69.0, "no quota {plain}");
}

#[test]
fn a_higher_qos_shared_jobs_waiting_task_preempts_shared_jobs_for_memory() {
    // A whole A100 (80 GB); two low shared jobs hold 35 GiB each for
    // 100 s; at 10 s a high shared job's task of 20 GiB does not fit.
    let shared = |name: &str, submit: f64, gib: u64, qos: &str| SimJob {
        name: name.into(),
        footprint_mib: gib * 1024,
        submit,
        phases: vec![Phase::Gpu {
            mem_mib: gib * 1024,
            slices: 1.0,
            secs: 100.0,
        }],
        qos: Some(qos.into()),
        ..SimJob::default()
    };
    let jobs = [
        shared("low-1", 0.0, 35, "normal"),
        shared("low-2", 1.0, 35, "normal"),
        shared("high", 10.0, 20, "high"),
    ];
    let run = |mode| {
        let options = SimOptions {
            site: qos_site("", mode),
            ..SimOptions::default()
        };
        simulate_with("1xA100-80GB", Policy::Case, &jobs, options).unwrap()
    };
    // Requeue: the younger low job goes; the high task runs at once.
    let on = run("requeue");
    assert_eq!(on.preemptions, 1);
    assert!(on.turnaround_of(2) < 110.0, "high {}", on.turnaround_of(2));
    assert_eq!(on.completed, 3, "the low job ran again");
    assert!(
        on.decisions.iter().any(|d| d == "kill low-2"),
        "{:?}",
        on.decisions
    );
    // Without preemption it waits for a low job to end.
    let off = run("off");
    assert_eq!(off.preemptions, 0);
    assert!(
        off.turnaround_of(2) > 180.0,
        "high {}",
        off.turnaround_of(2)
    );
}
