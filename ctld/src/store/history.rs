//! Reading jobs back: the ones the controller holds in memory at start, the
//! footprints of those it does not, and pages of finished jobs for
//! accounting (`sacct`, `gacct`) once they have left memory.

use std::collections::HashSet;

use super::sql::{Builder, ConnRef, Record};
use super::StoreError;
use gsched_core::cluster::PastRun;
use gsched_core::job::{GpuRequest, Job, JobId, JobSpec, JobState, JobText};

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

/// The jobs the controller holds at start: every job not finished, and the
/// finished ones that ended at or after `keep_finished_since` (all of them
/// when `None`), by id.
pub(super) async fn held_jobs(
    mut c: ConnRef<'_>,
    keep_finished_since: Option<i64>,
) -> Result<Vec<Job>, StoreError> {
    let mut q = Builder::new(c.engine(), "SELECT * FROM jobs");
    if let Some(since) = keep_finished_since {
        q.push(" WHERE state NOT IN ");
        q.push_list(final_states());
        q.push(" OR end_time >= ").push_bind(since);
    }
    q.push(" ORDER BY id");
    // Row by row: the rows of every job are never all held at once.
    let mut rows = q.build().fetch(c.reborrow());
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

/// A job's script and environment (`None`: no such job).
pub(super) async fn job_text(mut c: ConnRef<'_>, id: JobId) -> Result<Option<JobText>, StoreError> {
    let Some(row) = c
        .query("SELECT script, environment FROM jobs WHERE id = $1")
        .bind(id as i64)
        .fetch_optional(c.reborrow())
        .await?
    else {
        return Ok(None);
    };
    let environment =
        serde_json::from_str(row.get("environment")?).map_err(|e| StoreError::Corrupt {
            id: id as i64,
            why: format!("environment: {e}"),
        })?;
    Ok(Some(JobText {
        script: row.get("script")?,
        environment,
    }))
}

/// The highest job id ever given (0 when none).
pub(super) async fn max_job_id(mut c: ConnRef<'_>) -> Result<JobId, StoreError> {
    let max = c
        .query("SELECT max(id) AS max_id FROM jobs")
        .fetch_one(c.reborrow())
        .await?
        .opt_int("max_id")?;
    Ok(max.unwrap_or(0).max(0) as JobId)
}

/// The runs footprint learning needs: of finished jobs that started, the latest
/// [`PEAK_HISTORY`](gsched_core::cluster::PEAK_HISTORY) per user and job
/// name and per user and script.
pub(super) async fn past_runs(mut c: ConnRef<'_>) -> Result<Vec<PastRun>, StoreError> {
    let mut q = Builder::new(
        c.engine(),
        "SELECT id, user_name, name, script, gpu_mem_peak, usage, start_time, end_time FROM (
           SELECT id, user_name, name, script, gpu_mem_peak, usage, start_time, end_time,
             row_number() OVER (PARTITION BY user_name, name ORDER BY id DESC) AS by_name,
             row_number() OVER (PARTITION BY user_name, script ORDER BY id DESC) AS by_script
           FROM jobs WHERE (gpu_mem_peak IS NOT NULL OR start_time IS NOT NULL) AND state IN ",
    );
    q.push_list(final_states());
    q.push(") AS latest WHERE by_name <= ")
        .push_bind(gsched_core::cluster::PEAK_HISTORY as i64)
        .push(" OR by_script <= ")
        .push_bind(gsched_core::cluster::PEAK_HISTORY as i64)
        .push(" ORDER BY id");
    let rows = q.build().fetch_all(c.reborrow()).await?;
    rows.iter()
        .map(|r| {
            Ok(PastRun {
                id: r.int("id")? as JobId,
                user_name: r.get("user_name")?,
                name: r.get("name")?,
                script: r.get("script")?,
                gpu_mem_peak: r.opt_int("gpu_mem_peak")?.map(|m| m.max(0) as u64),
                // A usage that does not read only loses the learned share.
                gpu_share: match (
                    optional_json::<gsched_core::job::ResourceUsage>(r, "usage"),
                    r.opt_int("start_time")?,
                    r.opt_int("end_time")?,
                ) {
                    (Ok(Some(u)), Some(start), Some(end)) => u.gpu_share(end - start),
                    _ => None,
                },
                elapsed_secs: match (r.opt_int("start_time")?, r.opt_int("end_time")?) {
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
    mut c: ConnRef<'_>,
    query: &JobQuery,
    after: JobId,
    limit: u32,
) -> Result<Vec<Job>, StoreError> {
    let mut q = finished_query(c.engine(), "", query, after, limit);
    let rows = q.build().fetch_all(c.reborrow()).await?;
    rows.iter().map(job_of).collect()
}

/// The SQL of [`finished_jobs`], after `prefix` (`EXPLAIN ...`: tests).
fn finished_query<'a>(
    engine: super::sql::Engine,
    prefix: &str,
    query: &'a JobQuery,
    after: JobId,
    limit: u32,
) -> Builder<'a> {
    let mut q = Builder::new(engine, &format!("{prefix}SELECT * FROM jobs WHERE id > "));
    q.push_bind(after as i64).push(" AND state IN ");
    let finals: Vec<&str> = match &query.states {
        Some(s) => final_states()
            .filter(|f| s.iter().any(|w| w.as_str() == *f))
            .collect(),
        None => final_states().collect(),
    };
    q.push_list(finals);
    match (&query.ids, &query.arrays) {
        (None, None) => {}
        (ids, arrays) => {
            q.push(" AND (id IN ");
            q.push_list(ids.iter().flatten().map(|id| *id as i64));
            let array_job = q.engine().array_job_id();
            q.push(" OR ").push(array_job).push(" IN ");
            q.push_list(arrays.iter().flatten().map(|id| *id as i64));
            q.push(")");
        }
    }
    if let Some(users) = &query.users {
        q.push(" AND user_name IN ");
        q.push_list(users.iter().map(String::as_str));
    }
    if let Some(names) = &query.names {
        q.push(" AND name IN ");
        q.push_list(names.iter().map(String::as_str));
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
    q
}

/// A `jobs` row as a job.
fn job_of(row: &Record) -> Result<Job, StoreError> {
    let id: i64 = row.get("id")?;
    let corrupt = |why: String| StoreError::Corrupt { id, why };
    let mut spec: JobSpec =
        serde_json::from_str(row.get("spec")?).map_err(|e| corrupt(format!("spec: {e}")))?;
    spec.script = row.get("script")?;
    let gpu: GpuRequest = serde_json::from_str(row.get("gpu_request")?)
        .map_err(|e| corrupt(format!("gpu_request: {e}")))?;
    spec.gpu = gpu;
    let state: String = row.get("state")?;
    let state = JobState::parse(&state).map_err(|e| corrupt(e.to_string()))?;
    if Job::keeps_environment(state) {
        spec.environment = serde_json::from_str(row.get("environment")?)
            .map_err(|e| corrupt(format!("environment: {e}")))?;
    }
    Ok(Job {
        id: id as JobId,
        spec,
        state,
        reason: row.get("reason")?,
        exit_code: row.opt_i32("exit_code")?,
        exit_signal: row.opt_i32("exit_signal")?,
        submit_time: row.get("submit_time")?,
        start_time: row.get("start_time")?,
        end_time: row.get("end_time")?,
        node: row.get("node")?,
        gpu_instances: super::instances_of_column(row.get("gpu_instance")?),
        gpu_mem_peak: row.opt_int("gpu_mem_peak")?.map(|m| m as u64),
        restarts: row.int("restarts")? as u32,
        gpu_fault_requeues: row.int("gpu_fault_requeues")?.clamp(0, u32::MAX.into()) as u32,
        held: row.get("held")?,
        steps: serde_json::from_str(row.get("steps")?)
            .map_err(|e| corrupt(format!("steps: {e}")))?,
        cancelled_by: row.opt_int("cancelled_by")?.map(|u| u as u32),
        run: row.int("run")?.clamp(0, u32::MAX.into()) as u32,
        launching: row.get("launching")?,
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
    row: &Record,
    column: &str,
) -> Result<Option<T>, BadColumn> {
    let bad = |why: String| BadColumn {
        column: column.to_string(),
        why,
    };
    match row.get::<Option<String>>(column) {
        Ok(Some(u)) => serde_json::from_str(&u)
            .map(Some)
            .map_err(|e| bad(e.to_string())),
        Ok(None) => Ok(None),
        Err(e) => Err(bad(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Database, Durability, Store};

    /// The index on an array's id (migration 0021) is built on the very
    /// expression the queries use, so SQLite's planner takes it.
    #[tokio::test]
    async fn an_arrays_tasks_are_found_through_the_index() {
        let dir = tempfile::tempdir().unwrap();
        let database = Database::Sqlite(dir.path().join("ctld.db"));
        // Made and migrated by a controller first.
        drop(
            Store::open_alone(&database, Durability::Normal, None)
                .await
                .unwrap(),
        );
        let opened = Store::connect(&database, Durability::Normal).await.unwrap();
        let mut conn = opened.into_conn();
        let mut c = conn.as_ref();
        let sql = format!(
            "EXPLAIN QUERY PLAN SELECT id FROM jobs WHERE {} IN (7, 9)",
            c.engine().array_job_id()
        );
        let rows = c.query(&sql).fetch_all(c.reborrow()).await.unwrap();
        let plan: Vec<String> = rows.iter().map(|r| r.get("detail").unwrap()).collect();
        assert!(
            plan.iter().any(|step| step.contains("jobs_by_array")),
            "{plan:?}"
        );
        // And sacct -j's whole query (a job, or the tasks of an array).
        let query = super::JobQuery {
            ids: Some(vec![7]),
            arrays: Some(vec![7]),
            ..Default::default()
        };
        let mut q = super::finished_query(c.engine(), "EXPLAIN QUERY PLAN ", &query, 0, 1000);
        let rows = q.build().fetch_all(c.reborrow()).await.unwrap();
        let plan: Vec<String> = rows.iter().map(|r| r.get("detail").unwrap()).collect();
        assert!(
            plan.iter().any(|step| step.contains("jobs_by_array")),
            "{plan:?}"
        );
    }
}
