//! The controller's durable store: SQLite (WAL mode) in the state
//! directory, or PostgreSQL for sites (`--database`), through sqlx; one
//! SQL text for both ([`sql`]).
//!
//! One writer task owns the connection. Callers enqueue batches of writes in
//! the order the state changed; the writer commits everything waiting in one
//! transaction (group commit) and then answers each caller, so a change is
//! acknowledged only once it is on disk.

use gsched_core::cluster::{Node, PastRun};
use gsched_core::job::{Job, JobId, JobState, JobText};
use gsched_core::probe::TaskRecord;
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgPool, Postgres};
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{Connection, SqliteConnection};
use tokio::sync::{mpsc, oneshot};

mod database;
mod history;
mod lease;
mod load;
mod opening;
mod port;
pub mod schema;
mod sql;
mod writer;
mod writes;

pub use database::{Database, DatabaseError};
pub use lease::Term;
pub(crate) use load::instances_of_column;
use load::{instances_column, json};
pub use opening::{Opened, Renewer, StepDown};
use sql::ConnRef;

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
    #[error("the connection to the database is lost ({0}); this controller steps down")]
    Lost(String),
    #[error("another controller has taken over the database (epoch {epoch} is no longer this one's): this one steps down")]
    Fenced { epoch: i64 },
    #[error("the database {path} cannot be led: {why}")]
    Leadership { path: String, why: String },
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
    pub gpu_fault_requeues: u32,
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
            gpu_fault_requeues: job.gpu_fault_requeues,
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

/// Handle to the writer task, and the way to the database for reads.
#[derive(Clone)]
pub struct Store {
    tx: mpsc::UnboundedSender<writer::Batch>,
    reader: Reader,
}

/// How reads reach the database beside the writer.
#[derive(Clone)]
enum Reader {
    /// A read-only connection per read (WAL lets them read beside the
    /// writer).
    Sqlite(Box<SqliteConnectOptions>),
    /// A few pooled connections.
    Postgres(PgPool),
}

/// A connection for one read.
enum ReadConn {
    Sqlite(SqliteConnection),
    Postgres(PoolConnection<Postgres>),
}

impl ReadConn {
    fn as_ref(&mut self) -> ConnRef<'_> {
        match self {
            ReadConn::Sqlite(c) => ConnRef::Sqlite(c),
            ReadConn::Postgres(c) => ConnRef::Postgres(c),
        }
    }
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
static PG_MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/postgres");

impl Store {
    /// Enqueues writes now (keeping their order with other callers') and
    /// returns a future that resolves once they are committed.
    pub fn write(
        &self,
        writes: Vec<Write>,
    ) -> impl std::future::Future<Output = Result<(), StoreError>> {
        let (done, rx) = oneshot::channel();
        let sent = self.tx.send(writer::Batch { writes, done }).is_ok();
        async move {
            if !sent {
                return Err(StoreError::Closed);
            }
            rx.await.unwrap_or(Err(StoreError::Closed))
        }
    }

    /// A connection for one read.
    async fn read(&self) -> Result<ReadConn, sqlx::Error> {
        Ok(match &self.reader {
            Reader::Sqlite(opts) => ReadConn::Sqlite(SqliteConnection::connect_with(opts).await?),
            Reader::Postgres(pool) => ReadConn::Postgres(pool.acquire().await?),
        })
    }

    /// A job's script and environment (`None`: no such job).
    pub async fn job_text(&self, id: JobId) -> Result<Option<JobText>, StoreError> {
        let mut conn = self.read().await?;
        history::job_text(conn.as_ref(), id).await
    }

    /// Recorded task reservations, oldest first, with their nodes: of one
    /// job if given, only those still held on `open_on` if given.
    pub async fn task_records(
        &self,
        job: Option<JobId>,
        open_on: Option<&str>,
    ) -> Result<Vec<(String, TaskRecord)>, sqlx::Error> {
        let mut conn = self.read().await?;
        let mut c = conn.as_ref();
        let rows = c
            .query(
                "SELECT job_id, task, instance, mem_bytes, warps, gpu_share, begin_time, end_time, node, pid
                   FROM task_reservations
                  WHERE ($1 IS NULL OR job_id = $1) AND ($2 IS NULL OR (node = $2 AND end_time IS NULL))
                  ORDER BY begin_time, id",
            )
            .bind(job.map(|j| j as i64))
            .bind(open_on)
            .fetch_all(c.reborrow())
            .await?;
        rows.iter()
            .map(|r| {
                Ok((
                    r.get::<Option<String>>("node")?.unwrap_or_default(),
                    TaskRecord {
                        job: r.int("job_id")? as JobId,
                        task: r.int("task")? as u64,
                        pid: r.opt_int("pid")?.unwrap_or(0) as u32,
                        instance: r.get("instance")?,
                        bytes: r.int("mem_bytes")? as u64,
                        warps: r.int("warps")? as u64,
                        share: r.int("gpu_share")?.clamp(0, u32::MAX as i64) as u32,
                        begin_ms: r.int("begin_time")?,
                        end_ms: r.opt_int("end_time")?,
                    },
                ))
            })
            .collect()
    }

    /// Finished jobs matching `query` with ids above `after`, by id, at
    /// most `limit` (what accounting reads once jobs have left memory).
    pub async fn finished_jobs(
        &self,
        query: &JobQuery,
        after: JobId,
        limit: u32,
    ) -> Result<Vec<Job>, StoreError> {
        let mut conn = self.read().await?;
        history::finished_jobs(conn.as_ref(), query, after, limit).await
    }

    /// A job's history, oldest first.
    pub async fn job_events(&self, job: JobId) -> Result<Vec<JobEvent>, sqlx::Error> {
        let mut conn = self.read().await?;
        let mut c = conn.as_ref();
        let rows = c
            .query("SELECT time, kind, node, detail FROM events WHERE job_id = $1 ORDER BY seq")
            .bind(job as i64)
            .fetch_all(c.reborrow())
            .await?;
        rows.iter()
            .map(|r| {
                Ok(JobEvent {
                    time: r.int("time")?,
                    kind: r.get("kind")?,
                    node: r.get("node")?,
                    detail: r.get("detail")?,
                })
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
