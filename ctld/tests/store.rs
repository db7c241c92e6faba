//! The store's test suite, run on both engines: SQLite in a temporary
//! directory and a private PostgreSQL that the test starts (support/). Each
//! case gets a new empty database; the same assertions hold on both.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use gsched_core::array::ArrayTask;
use gsched_core::cluster::{AdminState, InstanceSlot, Node, NodeAdmin};
use gsched_core::job::{GpuRequest, Job, JobId, JobSpec, JobState};
use gsched_core::probe::TaskRecord;
use gsched_ctld::store::{
    Database, Durability, JobQuery, JobRuntime, StepDown, Store, StoreError, Write,
};

mod support;
use support::postgres::PrivatePostgres;

type Case = fn(Database) -> Pin<Box<dyn Future<Output = ()>>>;

/// Every case of the suite, by name.
const CASES: &[(&str, Case)] = &[
    ("round_trip_and_an_append_only_log", |db| {
        Box::pin(round_trip_and_an_append_only_log(db))
    }),
    ("memory_holds_recent_jobs_and_the_store_the_rest", |db| {
        Box::pin(memory_holds_recent_jobs_and_the_store_the_rest(db))
    }),
    ("a_failed_batch_fails_alone", |db| {
        Box::pin(a_failed_batch_fails_alone(db))
    }),
    ("nodes_tasks_accounts_and_events_round_trip", |db| {
        Box::pin(nodes_tasks_accounts_and_events_round_trip(db))
    }),
    ("array_tasks_are_found_by_their_array", |db| {
        Box::pin(array_tasks_are_found_by_their_array(db))
    }),
    (
        "finished_listings_equal_a_naive_filter_of_generated_jobs",
        |db| Box::pin(finished_listings_equal_a_naive_filter_of_generated_jobs(db)),
    ),
    ("a_takeover_fences_the_old_leader", |db| {
        Box::pin(a_takeover_fences_the_old_leader(db))
    }),
];

#[tokio::test]
async fn the_store_suite_on_sqlite() {
    for (name, case) in CASES {
        eprintln!("sqlite: {name}");
        let dir = tempfile::tempdir().unwrap();
        case(Database::Sqlite(dir.path().join("ctld.db"))).await;
    }
}

#[tokio::test]
async fn the_store_suite_on_postgres() {
    let pg = PrivatePostgres::start();
    for (i, (name, case)) in CASES.iter().enumerate() {
        eprintln!("postgres: {name}");
        let url = pg.new_database(&format!("case{i}")).await;
        case(Database::postgres(&url).expect("the private server's URL")).await;
    }
}

/// The database restarted between two commits: the writer finds its
/// connection broken before the next commit, opens it again and commits
/// anew (nothing of it can have been committed), without stepping down.
#[tokio::test]
async fn a_connection_broken_before_a_commit_is_opened_again() {
    let pg = PrivatePostgres::start();
    let url = pg.new_database("restarted").await;
    let db = Database::postgres(&url).unwrap();
    let mut opened = Store::connect(&db, Durability::Normal).await.unwrap();
    let (seen, _) = opened.lease().await.unwrap();
    let term = opened
        .take(seen.as_ref(), "c1 m b n 1 1", "https://c1", 60_000)
        .await
        .unwrap()
        .unwrap();
    let step_down = StepDown::default();
    let (store, _) = opened.open(term, None, step_down.clone()).await.unwrap();
    store
        .write(vec![Write::NewJob(Box::new(job(1)))])
        .await
        .unwrap();
    pg.restart();
    store
        .write(vec![Write::NewJob(Box::new(job(2)))])
        .await
        .expect("committed on a new connection");
    assert!(!step_down.said(), "no step-down for a commit never sent");
    let (_, loaded) = Store::open_alone(&db, Durability::Normal, None)
        .await
        .unwrap();
    assert_eq!(ids(loaded.jobs), [1, 2]);
}

fn job(id: JobId) -> Job {
    let mut environment = std::collections::BTreeMap::new();
    environment.insert("A".to_string(), "b c".to_string());
    Job::new(
        id,
        JobSpec {
            name: "n'; DROP TABLE jobs; --".into(),
            script: "#!/bin/sh\necho 'hi'\n".into(),
            argv: vec!["x".into()],
            environment,
            working_dir: "/tmp".into(),
            user_name: "u".into(),
            uid: 1,
            gid: 2,
            submit_host: "h".into(),
            isolated: true,
            gpu: GpuRequest {
                model: None,
                mig_profile: Some("1g.5gb".into()),
                mem_mib: None,
                share: None,
                share_limit: None,
                count: None,
            },
            time_limit: Some(60),
            stdout: Some("o-%j".into()),
            requeue: Some(true),
            partition: Some("gpu".into()),
            ..JobSpec::default()
        },
        10,
    )
}

/// A job `id` that ended (COMPLETED) at `end`, with a GPU peak.
fn finished(id: JobId, end: i64, user: &str) -> Job {
    let mut j = job(id);
    j.spec.user_name = user.into();
    j.transition(JobState::Running, end - 1).unwrap();
    j.transition(JobState::Completed, end).unwrap();
    j.gpu_mem_peak = Some(100 * id);
    j
}

fn ids(jobs: Vec<Job>) -> Vec<JobId> {
    jobs.into_iter().map(|j| j.id).collect()
}

/// Runs `sql` on the database directly (not through the store).
async fn raw(db: &Database, sql: &str) -> Result<(), sqlx::Error> {
    use sqlx::Connection;
    match db {
        Database::Sqlite(path) => {
            let opts = sqlx::sqlite::SqliteConnectOptions::new().filename(path);
            let mut c = sqlx::SqliteConnection::connect_with(&opts).await?;
            sqlx::query(sql).execute(&mut c).await.map(drop)
        }
        Database::Postgres(options, _) => {
            let mut c = sqlx::PgConnection::connect_with(options).await?;
            sqlx::query(sql).execute(&mut c).await.map(drop)
        }
    }
}

async fn round_trip_and_an_append_only_log(db: Database) {
    {
        let (store, loaded) = Store::open_alone(&db, Durability::Normal, None)
            .await
            .unwrap();
        assert!(loaded.jobs.is_empty());
        let mut j = job(7);
        j.exit_code = Some(-3);
        store
            .write(vec![Write::NewJob(Box::new(j.clone()))])
            .await
            .unwrap();
        j.transition(JobState::Running, 11).unwrap();
        j.node = Some("n1".into());
        j.held = true;
        j.launching = true;
        j.run = 4;
        j.gpu_fault_requeues = 2;
        store
            .write(vec![
                Write::JobState(Box::new(JobRuntime::of(&j))),
                Write::Event {
                    time: 11,
                    job_id: Some(7),
                    node: None,
                    kind: "start".into(),
                    detail: None,
                },
            ])
            .await
            .unwrap();
    }
    let (store, loaded) = Store::open_alone(&db, Durability::Normal, None)
        .await
        .unwrap();
    let mut expect = job(7);
    expect.exit_code = Some(-3);
    expect.transition(JobState::Running, 11).unwrap();
    expect.node = Some("n1".into());
    expect.held = true;
    expect.launching = true;
    expect.run = 4;
    expect.gpu_fault_requeues = 2;
    // Loaded without its script and environment, which the store gives
    // back on demand.
    let text = expect.take_text().unwrap();
    assert_eq!(loaded.jobs, vec![expect]);
    assert_eq!(loaded.max_job_id, 7);
    assert_eq!(store.job_text(7).await.unwrap(), Some(text));
    assert_eq!(store.job_text(8).await.unwrap(), None);
    for sql in ["DELETE FROM events", "UPDATE events SET kind = 'x'"] {
        let err = raw(&db, sql).await.unwrap_err();
        assert!(err.to_string().contains("append-only"), "{sql}: {err}");
    }
}

async fn memory_holds_recent_jobs_and_the_store_the_rest(db: Database) {
    {
        let (store, _) = Store::open_alone(&db, Durability::Normal, None)
            .await
            .unwrap();
        let jobs = vec![
            finished(1, 100, "u"),
            finished(2, 200, "v"),
            finished(3, 900, "u"),
            job(4),
        ];
        let writes = jobs
            .into_iter()
            .map(|j| Write::NewJob(Box::new(j)))
            .collect();
        store.write(writes).await.unwrap();
    }
    let (store, loaded) = Store::open_alone(&db, Durability::Normal, Some(500))
        .await
        .unwrap();
    assert_eq!(
        ids(loaded.jobs.clone()),
        vec![3, 4],
        "the recent finished job and the pending one"
    );
    assert_eq!(loaded.max_job_id, 4);
    let peaks: Vec<(JobId, Option<u64>, Option<i64>)> = loaded
        .past_runs
        .iter()
        .map(|p| (p.id, p.gpu_mem_peak, p.elapsed_secs))
        .collect();
    assert_eq!(
        peaks,
        vec![
            (1, Some(100), Some(1)),
            (2, Some(200), Some(1)),
            (3, Some(300), Some(1))
        ]
    );
    let all = JobQuery::default();
    assert_eq!(
        ids(store.finished_jobs(&all, 0, 10).await.unwrap()),
        [1, 2, 3]
    );
    assert_eq!(ids(store.finished_jobs(&all, 1, 1).await.unwrap()), [2]);
    let mine = JobQuery {
        users: Some(vec!["u".into()]),
        ..JobQuery::default()
    };
    assert_eq!(
        ids(store.finished_jobs(&mine, 0, 10).await.unwrap()),
        [1, 3]
    );
    let window = JobQuery {
        active_since: Some(150),
        active_until: Some(500),
        ..JobQuery::default()
    };
    assert_eq!(ids(store.finished_jobs(&window, 0, 10).await.unwrap()), [2]);
    let named = JobQuery {
        ids: Some(vec![3]),
        states: Some([JobState::Failed].into_iter().collect()),
        ..JobQuery::default()
    };
    assert!(store.finished_jobs(&named, 0, 10).await.unwrap().is_empty());
    let none = JobQuery {
        users: Some(Vec::new()),
        ..JobQuery::default()
    };
    assert!(store.finished_jobs(&none, 0, 10).await.unwrap().is_empty());
    // The same filter decides for jobs in memory.
    for j in &loaded.jobs {
        assert_eq!(mine.matches(j), j.spec.user_name == "u");
    }
}

async fn a_failed_batch_fails_alone(db: Database) {
    let (store, _) = Store::open_alone(&db, Durability::Normal, None)
        .await
        .unwrap();
    store
        .write(vec![Write::NewJob(Box::new(job(1)))])
        .await
        .unwrap();
    // Grouped with a good batch: the duplicate fails, the other commits.
    let dup = store.write(vec![Write::NewJob(Box::new(job(1)))]);
    let good = store.write(vec![Write::NewJob(Box::new(job(2)))]);
    assert!(matches!(dup.await, Err(StoreError::Write(_))));
    good.await.unwrap();
    store
        .write(vec![Write::NewJob(Box::new(job(3)))])
        .await
        .unwrap();
    drop(store);
    let (_, loaded) = Store::open_alone(&db, Durability::Normal, None)
        .await
        .unwrap();
    assert_eq!(ids(loaded.jobs), [1, 2, 3]);
}

fn node() -> Node {
    let gpus = gsched_core::gpu::parse_sim_spec("1xA100-40GB").unwrap();
    let instances = gsched_core::gpu::sim_instances("n1", &gpus)
        .into_iter()
        .map(|mut i| {
            // Not stored: the node reports them when it registers.
            i.link_domain = None;
            i.mig_start = None;
            InstanceSlot::new(i)
        })
        .collect();
    Node {
        name: "n1".into(),
        admin: Some(NodeAdmin {
            state: AdminState::Drain,
            reason: "fan".into(),
            by: "root".into(),
            since: 55,
        }),
        url: "https://n1:6818".into(),
        cpus: 8,
        memory_mib: 16384,
        tmp_disk_mib: 0,
        worker_limit: 8,
        up: true,
        instances,
        running: Default::default(),
        taken: (0, 0),
        suspended: Default::default(),
        shared: Default::default(),
        unconfirmed: false,
        instance_id: String::new(),
        drain_sent: None,
        drain_seq: 0,
        reshape_gpus: Default::default(),
        mig_frozen: [0].into_iter().collect(),
        waiting_tasks: Vec::new(),
        waiting_reports: 0,
        waiting_jobs: Default::default(),
        reshape_keep: Default::default(),
        shared_room: None,
        mem_available_mib: None,
    }
}

fn task(task: u64, bytes: u64, end_ms: Option<i64>) -> TaskRecord {
    TaskRecord {
        job: 1,
        task,
        pid: 4242,
        instance: "MIG-x".into(),
        bytes,
        warps: 64,
        share: 250,
        begin_ms: 1_000 + task as i64,
        end_ms,
    }
}

async fn nodes_tasks_accounts_and_events_round_trip(db: Database) {
    let n = node();
    {
        let (store, _) = Store::open_alone(&db, Durability::Normal, None)
            .await
            .unwrap();
        store
            .write(vec![
                Write::NewJob(Box::new(job(1))),
                Write::Node(Box::new(n.clone())),
                Write::Accounts("{}".into()),
                Write::Task {
                    node: "n1".into(),
                    record: task(0, 500, None),
                },
                Write::Task {
                    node: "n1".into(),
                    record: task(1, 700, None),
                },
            ])
            .await
            .unwrap();
        // The same task again: its largest footprint and its end kept.
        store
            .write(vec![
                Write::Task {
                    node: "n1".into(),
                    record: task(0, 300, Some(2_000)),
                },
                Write::Event {
                    time: 20,
                    job_id: Some(1),
                    node: Some("n1".into()),
                    kind: "RUNNING".into(),
                    detail: Some("started".into()),
                },
                Write::Event {
                    time: 21,
                    job_id: Some(1),
                    node: None,
                    kind: "COMPLETED".into(),
                    detail: None,
                },
            ])
            .await
            .unwrap();
        // Written again with fewer instances: the ones gone are gone.
        let mut fewer = n.clone();
        fewer.instances.truncate(0);
        fewer.admin = None;
        store
            .write(vec![Write::Node(Box::new(fewer))])
            .await
            .unwrap();
        store
            .write(vec![Write::Node(Box::new(n.clone()))])
            .await
            .unwrap();
    }
    let (store, loaded) = Store::open_alone(&db, Durability::Normal, None)
        .await
        .unwrap();
    assert_eq!(loaded.nodes, vec![n]);
    let tasks = store.task_records(Some(1), None).await.unwrap();
    assert_eq!(
        tasks,
        vec![
            ("n1".to_string(), task(0, 500, Some(2_000))),
            ("n1".to_string(), task(1, 700, None)),
        ]
    );
    let open = store.task_records(None, Some("n1")).await.unwrap();
    assert_eq!(open, vec![("n1".to_string(), task(1, 700, None))]);
    assert!(store.task_records(Some(2), None).await.unwrap().is_empty());
    let events = store.job_events(1).await.unwrap();
    let kinds: Vec<(i64, &str, Option<&str>)> = events
        .iter()
        .map(|e| (e.time, e.kind.as_str(), e.node.as_deref()))
        .collect();
    assert_eq!(
        kinds,
        [(20, "RUNNING", Some("n1")), (21, "COMPLETED", None)]
    );
}

async fn array_tasks_are_found_by_their_array(db: Database) {
    let (store, _) = Store::open_alone(&db, Durability::Normal, None)
        .await
        .unwrap();
    let mut writes = Vec::new();
    for (id, array) in [(10, Some(10)), (11, Some(10)), (12, None), (13, Some(12))] {
        let mut j = finished(id, 100, "u");
        j.spec.array_task = array.map(|array_job_id| ArrayTask {
            array_job_id,
            task_id: id as u32,
            min: 0,
            max: 3,
            step: 1,
            count: 4,
            max_running: None,
        });
        writes.push(Write::NewJob(Box::new(j)));
    }
    store.write(writes).await.unwrap();
    let of = |ids: Option<Vec<JobId>>, arrays: Option<Vec<JobId>>| JobQuery {
        ids,
        arrays,
        ..JobQuery::default()
    };
    let found = |q: JobQuery| {
        let store = store.clone();
        async move { ids(store.finished_jobs(&q, 0, 100).await.unwrap()) }
    };
    assert_eq!(found(of(None, Some(vec![10]))).await, [10, 11]);
    assert_eq!(found(of(Some(vec![12]), Some(vec![12]))).await, [12, 13]);
    assert_eq!(
        found(of(Some(vec![]), Some(vec![]))).await,
        Vec::<JobId>::new()
    );
}

/// A small deterministic generator (the suite needs no seed to replay).
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }

    /// Some of `items` (each with probability one half), or `None` (every
    /// one) a third of the time.
    fn some_of<T: Clone>(&mut self, items: &[T]) -> Option<Vec<T>> {
        if self.below(3) == 0 {
            return None;
        }
        Some(
            items
                .iter()
                .filter(|_| self.below(2) == 0)
                .cloned()
                .collect(),
        )
    }
}

/// The finished-job listing, paged at random sizes, returns exactly the
/// final jobs that `JobQuery::matches` (the filter of jobs in memory)
/// accepts, in id order, for random filters over generated jobs.
async fn finished_listings_equal_a_naive_filter_of_generated_jobs(db: Database) {
    let (store, _) = Store::open_alone(&db, Durability::Normal, None)
        .await
        .unwrap();
    let mut g = Lcg(42);
    let users = ["u", "v", "w"];
    let names = ["a", "b"];
    let ends = [
        JobState::Completed,
        JobState::Failed,
        JobState::Cancelled,
        JobState::Timeout,
    ];
    let mut jobs = Vec::new();
    for id in 1..=240u64 {
        let start = 1_000 + g.below(1_000) as i64;
        let mut j = job(id);
        j.spec.user_name = users[g.below(3) as usize].into();
        j.spec.name = names[g.below(2) as usize].into();
        if g.below(4) == 0 {
            let array_job_id = id - g.below(3).min(id - 1);
            j.spec.array_task = Some(ArrayTask {
                array_job_id,
                task_id: (id - array_job_id) as u32,
                min: 0,
                max: 2,
                step: 1,
                count: 3,
                max_running: None,
            });
        }
        // A few still pending or running: never listed as finished.
        match g.below(10) {
            0 => {}
            1 => j.transition(JobState::Running, start).unwrap(),
            _ => {
                j.transition(JobState::Running, start).unwrap();
                let end = ends[g.below(4) as usize];
                j.transition(end, start + g.below(500) as i64).unwrap();
            }
        }
        jobs.push(j);
    }
    let writes = jobs
        .iter()
        .map(|j| Write::NewJob(Box::new(j.clone())))
        .collect();
    store.write(writes).await.unwrap();
    for _ in 0..60 {
        let ids_named: Vec<JobId> = (0..g.below(4)).map(|_| 1 + g.below(240)).collect();
        let by_id = g.below(4) == 0;
        let q = JobQuery {
            states: g.some_of(&ends).map(|s| s.into_iter().collect()),
            users: g.some_of(&users.map(String::from)),
            names: g.some_of(&names.map(String::from)),
            ids: by_id.then(|| ids_named.clone()),
            arrays: (by_id && g.below(2) == 0).then(|| ids_named.clone()),
            active_since: (g.below(2) == 0).then(|| 1_000 + g.below(1_500) as i64),
            active_until: (g.below(2) == 0).then(|| 1_000 + g.below(1_500) as i64),
        };
        let expected: Vec<JobId> = jobs
            .iter()
            .filter(|j| j.state.is_final() && q.matches(j))
            .map(|j| j.id)
            .collect();
        let page = 1 + g.below(40) as u32;
        let (mut got, mut after) = (Vec::new(), 0);
        loop {
            let found = ids(store.finished_jobs(&q, after, page).await.unwrap());
            let full = found.len() == page as usize;
            after = found.last().copied().unwrap_or(after);
            got.extend(found);
            if !full {
                break;
            }
        }
        assert_eq!(got, expected, "{q:?}, pages of {page}");
    }
}

async fn a_takeover_fences_the_old_leader(db: Database) {
    // The first controller: the lease is free.
    let mut first = Store::connect(&db, Durability::Normal).await.unwrap();
    let (seen, now_ms) = first.lease().await.unwrap();
    assert_eq!(seen, None);
    assert!(
        now_ms > 1_600_000_000_000,
        "the database's clock in ms: {now_ms}"
    );
    let term = first
        .take(None, "c1 boot 1 1", "https://c1:6817", 60_000)
        .await
        .unwrap()
        .unwrap();
    // Epochs are the database's clock at the takeover (or the last and one).
    assert!(term.epoch >= now_ms, "{} from {now_ms}", term.epoch);
    let mut first_renewer = first.renewer();
    let first_down = StepDown::default();
    let (old, _) = first
        .open(term.clone(), None, first_down.clone())
        .await
        .unwrap();
    old.write(vec![Write::NewJob(Box::new(job(1)))])
        .await
        .unwrap();
    assert!(first_renewer.renew(&term, 60_000).await.unwrap());

    // Two standbys that saw the same lease: one wins, with the next epoch.
    let mut second = Store::connect(&db, Durability::Normal).await.unwrap();
    let mut third = Store::connect(&db, Durability::Normal).await.unwrap();
    let (seen, _) = second.lease().await.unwrap();
    let seen = seen.unwrap();
    assert_eq!(
        (seen.epoch, seen.address.as_str()),
        (term.epoch, "https://c1:6817")
    );
    let won = second
        .take(Some(&seen), "c2 boot 2 2", "https://c2:6817", 60_000)
        .await
        .unwrap()
        .unwrap();
    assert!(won.epoch > term.epoch);
    assert_eq!(
        third
            .take(Some(&seen), "c3 boot 3 3", "https://c3:6817", 60_000)
            .await
            .unwrap(),
        None
    );

    // The old leader can no longer write or renew, and is told to step down.
    let e = old
        .write(vec![Write::NewJob(Box::new(job(2)))])
        .await
        .unwrap_err();
    assert!(
        matches!(e, StoreError::Fenced { epoch } if epoch == term.epoch),
        "{e}"
    );
    assert!(first_down.said());
    assert!(!first_renewer.renew(&term, 60_000).await.unwrap());
    assert!(matches!(
        old.write(Vec::new()).await,
        Err(StoreError::Fenced { .. } | StoreError::Closed)
    ));

    // The new leader loads what was acknowledged, and writes.
    let (new, loaded) = second
        .open(won.clone(), None, StepDown::default())
        .await
        .unwrap();
    assert_eq!(ids(loaded.jobs), [1]);
    new.write(vec![Write::NewJob(Box::new(job(3)))])
        .await
        .unwrap();
    // Given up with no grace, by a leader a node has seen past (the
    // database went back in time): the lease names no holder, has run out,
    // and its epoch is raised past the node's, so the next leader leads
    // above it.
    let raised = won.epoch + 10_000_000_000;
    let resigner = Store::connect(&db, Durability::Normal).await.unwrap();
    assert!(resigner
        .renewer()
        .resign(&won, raised, Duration::ZERO)
        .await
        .unwrap());
    let (seen, now_ms) = third.lease().await.unwrap();
    let seen = seen.unwrap();
    assert!(seen.expires_ms <= now_ms, "given up");
    assert_eq!((seen.epoch, seen.holder.as_str()), (raised, ""));
    let next = third
        .take(Some(&seen), "c3 m b n 3 1", "https://c3", 60_000)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(next.epoch, raised + 1);
    // One that is not its own any more is left alone.
    let mut renewer = resigner.renewer();
    assert!(!renewer.resign(&won, raised, Duration::ZERO).await.unwrap());
    // Given up with a grace: it runs out then, not at once, and a renewal
    // still on its way cannot keep it.
    assert!(renewer
        .resign(&next, next.epoch, Duration::from_secs(30))
        .await
        .unwrap());
    let (seen, now_ms) = third.lease().await.unwrap();
    let seen = seen.unwrap();
    assert!(seen.expires_ms > now_ms && seen.expires_ms <= now_ms + 30_000);
    assert!(!renewer.renew(&next, 60_000).await.unwrap());
}
