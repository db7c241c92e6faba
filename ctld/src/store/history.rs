//! Reading jobs back: the ones the controller holds in memory at start, the
//! footprints of those it does not, and pages of finished jobs for
//! accounting (`sacct`, `gacct`) once they have left memory.

use std::collections::HashSet;

use gsched_core::cluster::PastRun;
use gsched_core::job::{GpuRequest, Job, JobId, JobSpec, JobState, JobText};
use sqlx::sqlite::SqliteRow;
use sqlx::{Connection, QueryBuilder, Row, Sqlite, SqliteConnection};

use super::StoreError;

/// Which jobs a listing wants. Unset fields match every job.
#[derive(Debug, Clone, Default)]
pub struct JobQuery {
    pub states: Option<HashSet<JobState>>,
    pub users: Option<Vec<String>>,
    pub names: Option<Vec<String>>,
    /// With `arrays`: a job matches if either does.
    pub ids: Option<Vec<JobId>>,
    /// Every task of these arrays.
    pub arrays: Option<Vec<JobId>>,
    /// Only jobs not ended before this (unix seconds).
    pub active_since: Option<i64>,
    /// Only jobs started (or, not started, submitted) at or before this.
    pub active_until: Option<i64>,
}

impl JobQuery {
    /// Whether `job` is wanted (the same test as the SQL of
    /// [`finished_jobs`], for jobs in memory).
    pub fn matches(&self, j: &Job) -> bool {
        let by_id = match (&self.ids, &self.arrays) {
            (None, None) => true,
            (ids, arrays) => {
                ids.as_ref().is_some_and(|i| i.contains(&j.id))
                    || arrays.as_ref().is_some_and(|a| {
                        j.spec
                            .array_task
                            .as_ref()
                            .is_some_and(|t| a.contains(&t.array_job_id))
                    })
            }
        };
        by_id
            // One being cancelled is still RUNNING inside, CANCELLED to users.
            && self.states.as_ref().is_none_or(|s| {
                s.contains(&j.state) || j.cancelling() && s.contains(&JobState::Cancelled)
            })
            && self
                .users
                .as_ref()
                .is_none_or(|u| u.contains(&j.spec.user_name))
            && self.names.as_ref().is_none_or(|n| n.contains(&j.spec.name))
            && self
                .active_since
                .is_none_or(|t| j.end_time.is_none_or(|e| e >= t))
            && self
                .active_until
                .is_none_or(|t| j.start_time.unwrap_or(j.submit_time) <= t)
    }
}

/// The final states, as stored.
fn final_states() -> impl Iterator<Item = &'static str> {
    JobState::ALL
        .into_iter()
        .filter(|s| s.is_final())
        .map(JobState::as_str)
}

fn push_list<'a, T: 'a>(
    q: &mut QueryBuilder<'a, Sqlite>,
    items: impl IntoIterator<Item = T>,
    bind: impl Fn(&mut QueryBuilder<'a, Sqlite>, T),
) {
    q.push("(");
    let mut first = true;
    for item in items {
        if !first {
            q.push(", ");
        }
        first = false;
        bind(q, item);
    }
    if first {
        // An empty list matches nothing.
        q.push("NULL");
    }
    q.push(")");
}

/// The jobs the controller holds at start: every job not finished, and the
/// finished ones that ended at or after `keep_finished_since` (all of them
/// when `None`), by id.
pub(super) async fn held_jobs(
    conn: &mut SqliteConnection,
    keep_finished_since: Option<i64>,
) -> Result<Vec<Job>, StoreError> {
    let mut q = QueryBuilder::<Sqlite>::new("SELECT * FROM jobs");
    if let Some(since) = keep_finished_since {
        q.push(" WHERE state NOT IN ");
        push_list(&mut q, final_states(), |q, s| {
            q.push_bind(s);
        });
        q.push(" OR end_time >= ").push_bind(since);
    }
    q.push(" ORDER BY id");
    // Row by row: the rows of every job are never all held at once.
    let mut rows = q.build().fetch(&mut *conn);
    let mut jobs = Vec::new();
    while let Some(row) = futures_util::TryStreamExt::try_next(&mut rows).await? {
        let mut job = job_of(&row)?;
        // The script and environment stay in the store until a launch or
        // a reader asks for them (`Store::job_text`).
        job.take_text();
        jobs.push(job);
    }
    Ok(jobs)
}

impl super::Store {
    /// A job's script and environment (`None`: no such job).
    pub async fn job_text(&self, id: JobId) -> Result<Option<JobText>, StoreError> {
        let mut conn = SqliteConnection::connect_with(&self.read_opts).await?;
        let Some(row) = sqlx::query("SELECT script, environment FROM jobs WHERE id = $1")
            .bind(id as i64)
            .fetch_optional(&mut conn)
            .await?
        else {
            return Ok(None);
        };
        let environment =
            serde_json::from_str(row.try_get("environment")?).map_err(|e| StoreError::Corrupt {
                id: id as i64,
                why: format!("environment: {e}"),
            })?;
        Ok(Some(JobText {
            script: row.try_get("script")?,
            environment,
        }))
    }
}

/// The highest job id ever given (0 when none).
pub(super) async fn max_job_id(conn: &mut SqliteConnection) -> Result<JobId, StoreError> {
    let max: Option<i64> = sqlx::query_scalar("SELECT max(id) FROM jobs")
        .fetch_one(&mut *conn)
        .await?;
    Ok(max.unwrap_or(0).max(0) as JobId)
}

/// The runs footprint learning needs: of finished jobs that started, the latest
/// [`PEAK_HISTORY`](gsched_core::cluster::PEAK_HISTORY) per user and job
/// name and per user and script.
pub(super) async fn past_runs(conn: &mut SqliteConnection) -> Result<Vec<PastRun>, StoreError> {
    let mut q = QueryBuilder::<Sqlite>::new(
        "SELECT id, user_name, name, script, gpu_mem_peak, usage, start_time, end_time FROM (
           SELECT id, user_name, name, script, gpu_mem_peak, usage, start_time, end_time,
             row_number() OVER (PARTITION BY user_name, name ORDER BY id DESC) AS by_name,
             row_number() OVER (PARTITION BY user_name, script ORDER BY id DESC) AS by_script
           FROM jobs WHERE (gpu_mem_peak IS NOT NULL OR start_time IS NOT NULL) AND state IN ",
    );
    push_list(&mut q, final_states(), |q, s| {
        q.push_bind(s);
    });
    q.push(") AS latest WHERE by_name <= ")
        .push_bind(gsched_core::cluster::PEAK_HISTORY as i64)
        .push(" OR by_script <= ")
        .push_bind(gsched_core::cluster::PEAK_HISTORY as i64)
        .push(" ORDER BY id");
    let rows = q.build().fetch_all(&mut *conn).await?;
    rows.iter()
        .map(|r| {
            Ok(PastRun {
                id: r.try_get::<i64, _>("id")? as JobId,
                user_name: r.try_get("user_name")?,
                name: r.try_get("name")?,
                script: r.try_get("script")?,
                gpu_mem_peak: r
                    .try_get::<Option<i64>, _>("gpu_mem_peak")?
                    .map(|m| m.max(0) as u64),
                // A usage that does not read only loses the learned share.
                gpu_share: match (
                    optional_json::<gsched_core::job::ResourceUsage>(r, "usage"),
                    r.try_get::<Option<i64>, _>("start_time")?,
                    r.try_get::<Option<i64>, _>("end_time")?,
                ) {
                    (Ok(Some(u)), Some(start), Some(end)) => u.gpu_share(end - start),
                    _ => None,
                },
                elapsed_secs: match (
                    r.try_get::<Option<i64>, _>("start_time")?,
                    r.try_get::<Option<i64>, _>("end_time")?,
                ) {
                    (Some(start), Some(end)) if end >= start => Some(end - start),
                    _ => None,
                },
            })
        })
        .collect()
}

/// Finished jobs matching `query` with ids above `after`, by id, at most
/// `limit`.
pub(super) async fn finished_jobs(
    conn: &mut SqliteConnection,
    query: &JobQuery,
    after: JobId,
    limit: u32,
) -> Result<Vec<Job>, StoreError> {
    let mut q = QueryBuilder::<Sqlite>::new("SELECT * FROM jobs WHERE id > ");
    q.push_bind(after as i64).push(" AND state IN ");
    let finals: Vec<&str> = match &query.states {
        Some(s) => final_states()
            .filter(|f| s.iter().any(|w| w.as_str() == *f))
            .collect(),
        None => final_states().collect(),
    };
    push_list(&mut q, finals, |q, s| {
        q.push_bind(s);
    });
    match (&query.ids, &query.arrays) {
        (None, None) => {}
        (ids, arrays) => {
            q.push(" AND (id IN ");
            push_list(&mut q, ids.iter().flatten(), |q, id| {
                q.push_bind(*id as i64);
            });
            q.push(" OR json_extract(spec, '$.array_task.array_job_id') IN ");
            push_list(&mut q, arrays.iter().flatten(), |q, id| {
                q.push_bind(*id as i64);
            });
            q.push(")");
        }
    }
    if let Some(users) = &query.users {
        q.push(" AND user_name IN ");
        push_list(&mut q, users, |q, u| {
            q.push_bind(u.as_str());
        });
    }
    if let Some(names) = &query.names {
        q.push(" AND name IN ");
        push_list(&mut q, names, |q, n| {
            q.push_bind(n.as_str());
        });
    }
    if let Some(t) = query.active_since {
        q.push(" AND (end_time IS NULL OR end_time >= ")
            .push_bind(t)
            .push(")");
    }
    if let Some(t) = query.active_until {
        q.push(" AND coalesce(start_time, submit_time) <= ")
            .push_bind(t);
    }
    q.push(" ORDER BY id LIMIT ").push_bind(i64::from(limit));
    let rows = q.build().fetch_all(&mut *conn).await?;
    rows.iter().map(job_of).collect()
}

/// A `jobs` row as a job.
fn job_of(row: &SqliteRow) -> Result<Job, StoreError> {
    let id: i64 = row.try_get("id")?;
    let corrupt = |why: String| StoreError::Corrupt { id, why };
    let mut spec: JobSpec =
        serde_json::from_str(row.try_get("spec")?).map_err(|e| corrupt(format!("spec: {e}")))?;
    spec.script = row.try_get("script")?;
    let gpu: GpuRequest = serde_json::from_str(row.try_get("gpu_request")?)
        .map_err(|e| corrupt(format!("gpu_request: {e}")))?;
    spec.gpu = gpu;
    let state: String = row.try_get("state")?;
    let state = JobState::parse(&state).map_err(|e| corrupt(e.to_string()))?;
    if Job::keeps_environment(state) {
        spec.environment = serde_json::from_str(row.try_get("environment")?)
            .map_err(|e| corrupt(format!("environment: {e}")))?;
    }
    Ok(Job {
        id: id as JobId,
        spec,
        state,
        reason: row.try_get("reason")?,
        exit_code: row.try_get("exit_code")?,
        exit_signal: row.try_get("exit_signal")?,
        submit_time: row.try_get("submit_time")?,
        start_time: row.try_get("start_time")?,
        end_time: row.try_get("end_time")?,
        node: row.try_get("node")?,
        gpu_instances: super::instances_of_column(row.try_get("gpu_instance")?),
        gpu_mem_peak: row
            .try_get::<Option<i64>, _>("gpu_mem_peak")?
            .map(|m| m as u64),
        restarts: row.try_get::<i64, _>("restarts")? as u32,
        held: row.try_get("held")?,
        steps: serde_json::from_str(row.try_get("steps")?)
            .map_err(|e| corrupt(format!("steps: {e}")))?,
        cancelled_by: row
            .try_get::<Option<i64>, _>("cancelled_by")?
            .map(|u| u as u32),
        run: row.try_get::<i64, _>("run")?.clamp(0, u32::MAX.into()) as u32,
        launching: row.try_get("launching")?,
        usage: optional_json(row, "usage").map_err(|e| corrupt(e.to_string()))?,
        batch_usage: optional_json(row, "batch_usage").map_err(|e| corrupt(e.to_string()))?,
        sisters: optional_json(row, "sisters")
            .map_err(|e| corrupt(e.to_string()))?
            .unwrap_or_default(),
        suspension: optional_json(row, "suspension").map_err(|e| corrupt(e.to_string()))?,
        grace: optional_json(row, "grace").map_err(|e| corrupt(e.to_string()))?,
        stored_text: None,
    })
}

/// A nullable JSON column that does not read.
#[derive(Debug, thiserror::Error)]
#[error("{column}: {why}")]
struct BadColumn {
    column: String,
    why: String,
}

/// A nullable JSON column.
fn optional_json<T: serde::de::DeserializeOwned>(
    row: &sqlx::sqlite::SqliteRow,
    column: &str,
) -> Result<Option<T>, BadColumn> {
    let bad = |why: String| BadColumn {
        column: column.to_string(),
        why,
    };
    match row.try_get::<Option<String>, _>(column) {
        Ok(Some(u)) => serde_json::from_str(&u)
            .map(Some)
            .map_err(|e| bad(e.to_string())),
        Ok(None) => Ok(None),
        Err(e) => Err(bad(e.to_string())),
    }
}
