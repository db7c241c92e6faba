//! The controller's durable store: SQLite through sqlx, WAL mode.
//!
//! One writer task owns the connection. Callers enqueue batches of writes in
//! the order the state changed; the writer commits everything waiting in one
//! transaction (group commit) and then answers each caller, so a change is
//! acknowledged only once it is on disk.

use std::path::Path;
use std::str::FromStr;

use gsched_core::cluster::PastRun;
use gsched_core::cluster::{AdminState, InstanceSlot, Node, NodeAdmin};
use gsched_core::gpu::{Instance, Mps, MpsState};
use gsched_core::job::{Job, JobId, JobState};
use gsched_core::probe::TaskRecord;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};
use sqlx::{Connection, Row, SqliteConnection};
use tokio::sync::{mpsc, oneshot};

mod history;
mod port;
pub mod schema;
mod writes;

pub use history::JobQuery;
pub use port::{ControllerStore, StoreCall};

/// How hard commits push to disk.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Deserialize, serde::Serialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Durability {
    /// WAL with synchronous=NORMAL: survives any process crash (kill -9);
    /// an operating-system crash may lose the last transactions.
    Normal,
    /// WAL with synchronous=FULL: every commit is fsynced.
    Full,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot open the store at {path}: {source}")]
    Open { path: String, source: sqlx::Error },
    #[error("cannot apply migrations to {path}: {source}")]
    Migrate {
        path: String,
        source: sqlx::migrate::MigrateError,
    },
    #[error("the database {path} was written by a newer gsched (schema {database}; gsched {release} knows up to {known}): run that release or a later one, or restore the backup taken before the upgrade (backups/ beside the database; docs/install.md)", release = gsched_core::version::RELEASE)]
    Newer {
        path: String,
        database: i64,
        known: i64,
    },
    #[error("cannot back up {path} into {to} before migrating it (nothing was changed): {why}")]
    Backup {
        path: String,
        to: String,
        why: schema::BackupError,
    },
    #[error("stored job {id} is unreadable: {why}")]
    Corrupt { id: i64, why: String },
    #[error("store read failed: {0}")]
    Read(#[from] sqlx::Error),
    #[error("store write failed: {0}")]
    Write(#[source] sqlx::Error),
    #[error("the store writer has stopped")]
    Closed,
}

/// One change to persist.
#[derive(Debug, Clone)]
pub enum Write {
    /// A newly submitted job: the full row.
    NewJob(Box<Job>),
    /// A job's state, times and placement changed.
    JobState(Box<JobRuntime>),
    /// A pending job's spec changed (`scontrol update`): the columns that
    /// may (its script and environment never do).
    JobSpec(Box<Job>),
    /// A node and its instances.
    Node(Box<Node>),
    /// A task reservation began or ended (upsert by job and task).
    Task { node: String, record: TaskRecord },
    /// The accounts, associations and usage (JSON of `StoredFairShare`).
    Accounts(String),
    /// An entry in the append-only event log.
    Event {
        time: i64,
        job_id: Option<JobId>,
        node: Option<String>,
        kind: String,
        detail: Option<String>,
    },
}

/// The columns of a job that change after submission (copied without the
/// job's script and environment, which never change).
#[derive(Debug, Clone)]
pub struct JobRuntime {
    pub id: JobId,
    pub state: JobState,
    pub reason: Option<String>,
    pub exit_code: Option<i32>,
    pub exit_signal: Option<i32>,
    pub start_time: Option<i64>,
    pub end_time: Option<i64>,
    pub node: Option<String>,
    pub gpu_instances: Vec<String>,
    pub gpu_mem_peak: Option<u64>,
    pub restarts: u32,
    pub held: bool,
    pub steps: Vec<gsched_core::job::Step>,
    pub cancelled_by: Option<u32>,
    pub run: u32,
    pub launching: bool,
    pub usage: Option<gsched_core::job::ResourceUsage>,
    pub batch_usage: Option<gsched_core::job::ResourceUsage>,
    pub sisters: Vec<gsched_core::job::Sister>,
    pub suspension: Option<gsched_core::suspension::Suspension>,
    pub grace: Option<gsched_core::preempt::Grace>,
}

impl JobRuntime {
    pub fn of(job: &Job) -> JobRuntime {
        JobRuntime {
            id: job.id,
            state: job.state,
            reason: job.reason.clone(),
            exit_code: job.exit_code,
            exit_signal: job.exit_signal,
            start_time: job.start_time,
            end_time: job.end_time,
            node: job.node.clone(),
            gpu_instances: job.gpu_instances.clone(),
            gpu_mem_peak: job.gpu_mem_peak,
            restarts: job.restarts,
            held: job.held,
            steps: job.steps.clone(),
            cancelled_by: job.cancelled_by,
            run: job.run,
            launching: job.launching,
            usage: job.usage,
            batch_usage: job.batch_usage,
            sisters: job.sisters.clone(),
            suspension: job.suspension,
            grace: job.grace,
        }
    }
}

struct Batch {
    writes: Vec<Write>,
    done: oneshot::Sender<Result<(), sqlx::Error>>,
}

/// Handle to the writer task.
#[derive(Clone)]
pub struct Store {
    tx: mpsc::UnboundedSender<Batch>,
    /// For read-only queries beside the writer (WAL allows them).
    read_opts: SqliteConnectOptions,
}

/// What was stored when the controller starts.
pub struct Loaded {
    /// The jobs held in memory: those not finished, and the finished ones
    /// younger than the minimum age.
    pub jobs: Vec<Job>,
    pub nodes: Vec<Node>,
    /// The highest job id ever given.
    pub max_job_id: JobId,
    /// Footprints learned from finished jobs.
    pub past_runs: Vec<PastRun>,
    /// The accounts (sacctmgr) and their usage.
    pub accounts: gsched_core::cluster::StoredAccounting,
}

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations");

impl Store {
    /// Opens (creating if needed) the database, applies migrations, loads
    /// what the controller holds (finished jobs only if they ended at or
    /// after `keep_finished_since`, all when `None`), and starts the writer.
    pub async fn open(
        path: &Path,
        durability: Durability,
        keep_finished_since: Option<i64>,
    ) -> Result<(Store, Loaded), StoreError> {
        let shown = path.display().to_string();
        let opts = SqliteConnectOptions::from_str(&format!("sqlite://{shown}"))
            .map_err(|e| StoreError::Open {
                path: shown.clone(),
                source: e,
            })?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(match durability {
                Durability::Normal => SqliteSynchronous::Normal,
                Durability::Full => SqliteSynchronous::Full,
            })
            .foreign_keys(true)
            .busy_timeout(std::time::Duration::from_secs(10));
        let mut conn =
            SqliteConnection::connect_with(&opts)
                .await
                .map_err(|e| StoreError::Open {
                    path: shown.clone(),
                    source: e,
                })?;
        let backups = path.with_file_name("backups");
        schema::upgrade(&mut conn, path, &backups, gsched_daemon::unix_now()).await?;
        let loaded = load(&mut conn, keep_finished_since).await?;
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(writer(conn, rx));
        let read_opts = opts.read_only(true);
        Ok((Store { tx, read_opts }, loaded))
    }

    /// Enqueues writes now (keeping their order with other callers') and
    /// returns a future that resolves once they are committed.
    pub fn write(
        &self,
        writes: Vec<Write>,
    ) -> impl std::future::Future<Output = Result<(), StoreError>> {
        let (done, rx) = oneshot::channel();
        let sent = self.tx.send(Batch { writes, done }).is_ok();
        async move {
            if !sent {
                return Err(StoreError::Closed);
            }
            match rx.await {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) => Err(StoreError::Write(e)),
                Err(_) => Err(StoreError::Closed),
            }
        }
    }
}

impl Store {
    /// Recorded task reservations, oldest first, with their nodes: of one
    /// job if given, only those still held on `open_on` if given.
    pub async fn task_records(
        &self,
        job: Option<JobId>,
        open_on: Option<&str>,
    ) -> Result<Vec<(String, TaskRecord)>, sqlx::Error> {
        let mut conn = SqliteConnection::connect_with(&self.read_opts).await?;
        let rows = sqlx::query(
            "SELECT job_id, task, instance, mem_bytes, warps, gpu_share, begin_time, end_time, node, pid
               FROM task_reservations
              WHERE ($1 IS NULL OR job_id = $1) AND ($2 IS NULL OR (node = $2 AND end_time IS NULL))
              ORDER BY begin_time, id",
        )
        .bind(job.map(|j| j as i64))
        .bind(open_on)
        .fetch_all(&mut conn)
        .await?;
        rows.iter()
            .map(|r| {
                Ok((
                    r.try_get::<Option<String>, _>("node")?.unwrap_or_default(),
                    TaskRecord {
                        job: r.try_get::<i64, _>("job_id")? as JobId,
                        task: r.try_get::<i64, _>("task")? as u64,
                        pid: r.try_get::<Option<i64>, _>("pid")?.unwrap_or(0) as u32,
                        instance: r.try_get("instance")?,
                        bytes: r.try_get::<i64, _>("mem_bytes")? as u64,
                        warps: r.try_get::<i64, _>("warps")? as u64,
                        share: r.try_get::<i64, _>("gpu_share")?.clamp(0, u32::MAX as i64) as u32,
                        begin_ms: r.try_get("begin_time")?,
                        end_ms: r.try_get("end_time")?,
                    },
                ))
            })
            .collect()
    }
}

/// One line of a job's history, as the event log holds it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct JobEvent {
    pub time: i64,
    pub kind: String,
    pub node: Option<String>,
    pub detail: Option<String>,
}

impl Store {
    /// Finished jobs matching `query` with ids above `after`, by id, at
    /// most `limit` (what accounting reads once jobs have left memory).
    pub async fn finished_jobs(
        &self,
        query: &JobQuery,
        after: JobId,
        limit: u32,
    ) -> Result<Vec<Job>, StoreError> {
        let mut conn = SqliteConnection::connect_with(&self.read_opts).await?;
        history::finished_jobs(&mut conn, query, after, limit).await
    }

    /// A job's history, oldest first.
    pub async fn job_events(&self, job: JobId) -> Result<Vec<JobEvent>, sqlx::Error> {
        let mut conn = SqliteConnection::connect_with(&self.read_opts).await?;
        let rows = sqlx::query(
            "SELECT time, kind, node, detail FROM events WHERE job_id = $1 ORDER BY seq",
        )
        .bind(job as i64)
        .fetch_all(&mut conn)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(JobEvent {
                    time: r.try_get("time")?,
                    kind: r.try_get("kind")?,
                    node: r.try_get("node")?,
                    detail: r.try_get("detail")?,
                })
            })
            .collect()
    }
}

const MAX_GROUP: usize = 1024;

async fn writer(mut conn: SqliteConnection, mut rx: mpsc::UnboundedReceiver<Batch>) {
    while let Some(first) = rx.recv().await {
        let mut group = vec![first];
        while group.len() < MAX_GROUP {
            match rx.try_recv() {
                Ok(b) => group.push(b),
                Err(_) => break,
            }
        }
        match commit(&mut conn, &group).await {
            Ok(()) => {
                for b in group {
                    let _ = b.done.send(Ok(()));
                }
            }
            Err(e) => {
                // One bad batch must not fail the others it was grouped with:
                // retry each on its own.
                tracing::warn!(error = %e, batches = group.len(), "group commit failed; retrying batches one by one");
                for b in group {
                    let result = commit(&mut conn, std::slice::from_ref(&b)).await;
                    if let Err(e) = &result {
                        tracing::error!(error = %e, "store commit failed");
                    }
                    let _ = b.done.send(result);
                }
            }
        }
    }
}

async fn commit(conn: &mut SqliteConnection, group: &[Batch]) -> Result<(), sqlx::Error> {
    let mut tx = conn.begin().await?;
    for b in group {
        for w in &b.writes {
            writes::apply(&mut tx, w).await?;
        }
    }
    tx.commit().await
}

fn json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).expect("serializable")
}

async fn load(
    conn: &mut SqliteConnection,
    keep_finished_since: Option<i64>,
) -> Result<Loaded, StoreError> {
    let jobs = history::held_jobs(conn, keep_finished_since).await?;
    let max_job_id = history::max_job_id(conn).await?;
    let past_runs = history::past_runs(conn).await?;
    let mut nodes = Vec::new();
    for row in sqlx::query("SELECT * FROM nodes ORDER BY name")
        .fetch_all(&mut *conn)
        .await?
    {
        let name: String = row.try_get("name")?;
        let mut instances = Vec::new();
        for r in sqlx::query("SELECT * FROM gpu_instances WHERE node = $1 ORDER BY gpu_index, uuid")
            .bind(&name)
            .fetch_all(&mut *conn)
            .await?
        {
            instances.push(InstanceSlot::new(Instance {
                uuid: r.try_get("uuid")?,
                gpu_index: r.try_get::<i64, _>("gpu_index")? as u32,
                gpu_uuid: r.try_get("gpu_uuid")?,
                model: r.try_get("model")?,
                profile: r.try_get("profile")?,
                memory_mib: r.try_get::<i64, _>("memory_mib")? as u64,
                sms: r.try_get::<i64, _>("sms")? as u32,
                compute_slices: r.try_get::<i64, _>("compute_slices")? as u32,
                // Not kept: the node reports it again when it registers.
                link_domain: None,
                mig_start: None,
                mps: mps_of(&r)?,
            }));
        }
        let admin = match row.try_get::<Option<String>, _>("admin_state")? {
            None => None,
            Some(state) => Some(NodeAdmin {
                // A state this version does not know holds the node as a
                // drain would.
                state: AdminState::parse(&state).unwrap_or(AdminState::Drain),
                reason: row
                    .try_get::<Option<String>, _>("admin_reason")?
                    .unwrap_or_default(),
                by: row
                    .try_get::<Option<String>, _>("admin_by")?
                    .unwrap_or_default(),
                since: row.try_get::<Option<i64>, _>("admin_since")?.unwrap_or(0),
            }),
        };
        nodes.push(Node {
            name,
            admin,
            url: row.try_get("url")?,
            cpus: row.try_get::<i64, _>("cpus")? as u32,
            memory_mib: row.try_get::<i64, _>("memory_mib")? as u64,
            // Not stored: the node's next registration says it.
            tmp_disk_mib: 0,
            worker_limit: row.try_get::<i64, _>("worker_limit")? as u32,
            up: row.try_get("up")?,
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
            mig_frozen: row
                .try_get::<Option<String>, _>("mig_frozen")?
                .map(|s| s.split(',').filter_map(|g| g.trim().parse().ok()).collect())
                .unwrap_or_default(),
            waiting_tasks: Vec::new(),
            waiting_reports: 0,
            reshape_keep: Default::default(),
        });
    }
    let accounts = match sqlx::query("SELECT data FROM accounts WHERE id = 1")
        .fetch_optional(&mut *conn)
        .await?
    {
        Some(row) => serde_json::from_str(row.try_get::<&str, _>("data")?).map_err(|e| {
            StoreError::Corrupt {
                id: 0,
                why: format!("the accounts do not read: {e}"),
            }
        })?,
        None => Default::default(),
    };
    Ok(Loaded {
        jobs,
        nodes,
        max_job_id,
        past_runs,
        accounts,
    })
}

/// The `gpu_instance` column of a job: the UUIDs of its instances, joined
/// by commas (UUIDs have none); NULL for none.
fn instances_column(uuids: &[String]) -> Option<String> {
    (!uuids.is_empty()).then(|| uuids.join(","))
}

/// The instances a job's `gpu_instance` column names.
pub(crate) fn instances_of_column(column: Option<String>) -> Vec<String> {
    column
        .map(|c| {
            c.split(',')
                .filter(|u| !u.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// The MPS columns of a `gpu_instances` row.
fn mps_of(r: &sqlx::sqlite::SqliteRow) -> Result<Option<Mps>, sqlx::Error> {
    let Some(pipe_dir) = r.try_get::<Option<String>, _>("mps_pipe_dir")? else {
        return Ok(None);
    };
    let state = match r.try_get::<Option<String>, _>("mps_state")?.as_deref() {
        Some("running") => MpsState::Running,
        _ => MpsState::Down,
    };
    Ok(Some(Mps {
        pipe_dir,
        log_dir: r
            .try_get::<Option<String>, _>("mps_log_dir")?
            .unwrap_or_default(),
        state,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use gsched_core::job::{GpuRequest, JobSpec};

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

    #[tokio::test]
    async fn round_trip_and_event_log_is_append_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        {
            let (store, loaded) = Store::open(&path, Durability::Normal, None).await.unwrap();
            assert!(loaded.jobs.is_empty());
            let mut j = job(7);
            store
                .write(vec![Write::NewJob(Box::new(j.clone()))])
                .await
                .unwrap();
            j.transition(JobState::Running, 11).unwrap();
            j.node = Some("n1".into());
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
        let (store, loaded) = Store::open(&path, Durability::Full, None).await.unwrap();
        let mut expect = job(7);
        expect.transition(JobState::Running, 11).unwrap();
        expect.node = Some("n1".into());
        // Loaded without its script and environment, which the store
        // gives back on demand.
        let text = expect.take_text().unwrap();
        assert_eq!(loaded.jobs, vec![expect]);
        assert_eq!(store.job_text(7).await.unwrap(), Some(text));
        assert_eq!(store.job_text(8).await.unwrap(), None);

        let opts = SqliteConnectOptions::from_str(&format!("sqlite://{}", path.display())).unwrap();
        let mut c = SqliteConnection::connect_with(&opts).await.unwrap();
        let err = sqlx::query("DELETE FROM events")
            .execute(&mut c)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("append-only"), "{err}");
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

    #[tokio::test]
    async fn memory_holds_recent_jobs_and_the_store_answers_for_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        {
            let (store, _) = Store::open(&path, Durability::Normal, None).await.unwrap();
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
        let (store, loaded) = Store::open(&path, Durability::Normal, Some(500))
            .await
            .unwrap();
        let held: Vec<JobId> = loaded.jobs.iter().map(|j| j.id).collect();
        assert_eq!(
            held,
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
        let ids = |jobs: Vec<Job>| jobs.into_iter().map(|j| j.id).collect::<Vec<_>>();
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
        // The same filter decides for jobs in memory.
        for j in &loaded.jobs {
            assert_eq!(mine.matches(j), j.spec.user_name == "u");
        }
    }

    #[tokio::test]
    async fn failed_batch_reports_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = Store::open(&dir.path().join("s.db"), Durability::Normal, None)
            .await
            .unwrap();
        store
            .write(vec![Write::NewJob(Box::new(job(1)))])
            .await
            .unwrap();
        let dup = store.write(vec![Write::NewJob(Box::new(job(1)))]).await;
        assert!(matches!(dup, Err(StoreError::Write(_))));
        // The store keeps working after a failed batch.
        store
            .write(vec![Write::NewJob(Box::new(job(2)))])
            .await
            .unwrap();
    }
}
