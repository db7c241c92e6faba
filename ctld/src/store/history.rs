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
    let Some(narrowed) = narrowed(c.reborrow(), query).await? else {
        return Ok(Vec::new());
    };
    let mut q = finished_query(c.engine(), "", query, narrowed, after, limit);
    let rows = q.build().fetch_all(c.reborrow()).await?;
    rows.iter().map(job_of).collect()
}

/// The most rows of a time window's side that [`narrowed`] reads: a wider
/// window is read by id as it is (most jobs are in it, so a page soon
/// fills).
const WINDOW_PROBE_ROWS: i64 = 20_000;

/// Which sides of a listing's time window a page reads through their
/// indexes rather than by id.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Narrowed {
    /// Through the index on end time (`active_since`).
    by_end: bool,
    /// Through the index on when jobs became active (`active_until`).
    by_start: bool,
}

/// A page walks ids in order, and a planner that takes that order cannot
/// tell how far it must walk to fill a page of a narrow time window (from
/// the first id on, for the last hour of a year). Each side of the window
/// is probed, through its index, for at most [`WINDOW_PROBE_ROWS`] rows
/// (whatever the page: a probe past `after` would walk the index from its
/// start): a side with no more is read through that index (the page's ids
/// come from it), a wider one by id. A job active since `t`
/// ended at or after it (or has no end); one active until `u` started
/// (or, not started, was submitted) at or before it. `None` when the
/// window holds no job at all.
async fn narrowed(mut c: ConnRef<'_>, query: &JobQuery) -> Result<Option<Narrowed>, StoreError> {
    let mut n = Narrowed::default();
    let sides = [
        (query.active_since, Side::End),
        (query.active_until, Side::Start),
    ];
    for (t, side) in sides {
        let Some(t) = t else {
            continue;
        };
        let (head, tail) = side.condition();
        let sql = format!(
            "SELECT count(*) AS n FROM (SELECT id FROM jobs WHERE {head}$1{tail} LIMIT $2) AS w"
        );
        let row = c
            .query(&sql)
            .bind(t)
            .bind(WINDOW_PROBE_ROWS + 1)
            .fetch_one(c.reborrow())
            .await?;
        match row.int("n")? {
            0 => return Ok(None),
            rows if rows <= WINDOW_PROBE_ROWS => match side {
                Side::End => n.by_end = true,
                Side::Start => n.by_start = true,
            },
            _ => {}
        }
    }
    Ok(Some(n))
}

/// A side of a time window, and its indexed condition.
#[derive(Debug, Clone, Copy)]
enum Side {
    End,
    Start,
}

impl Side {
    /// The condition, before and after its time.
    fn condition(self) -> (&'static str, &'static str) {
        match self {
            Side::End => ("(end_time >= ", " OR end_time IS NULL)"),
            Side::Start => ("coalesce(start_time, submit_time) <= ", ""),
        }
    }
}

/// The SQL of [`finished_jobs`], after `prefix` (`EXPLAIN ...`: tests).
fn finished_query<'a>(
    engine: super::sql::Engine,
    prefix: &str,
    query: &'a JobQuery,
    narrowed: Narrowed,
    after: JobId,
    limit: u32,
) -> Builder<'a> {
    let mut q = Builder::new(engine, &format!("{prefix}SELECT * FROM jobs WHERE id > "));
    q.push_bind(after as i64);
    let sides = [
        (narrowed.by_end, query.active_since, Side::End),
        (narrowed.by_start, query.active_until, Side::Start),
    ];
    for (through_index, t, side) in sides {
        if let (true, Some(t)) = (through_index, t) {
            let (head, tail) = side.condition();
            q.push(" AND id IN (SELECT id FROM jobs WHERE ")
                .push(head)
                .push_bind(t)
                .push(tail)
                .push(" AND id > ")
                .push_bind(after as i64)
                .push(")");
        }
    }
    q.push(" AND state IN ");
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

    /// Plans on a table of many finished jobs, analyzed as a site's may
    /// be: `sacct -j N` goes through the index of array tasks (migration
    /// 0023: an index of every row, mostly NULL, looked useless to the
    /// planner and it read every row), and a narrow time window through
    /// the indexes on end and start, not by id from the first on.
    #[tokio::test]
    async fn listings_go_through_the_indexes_on_an_analyzed_table() {
        use gsched_core::job::{Job, JobSpec, JobState};
        let dir = tempfile::tempdir().unwrap();
        let database = Database::Sqlite(dir.path().join("ctld.db"));
        // Made and migrated by a controller first, with one finished job.
        {
            let (store, _) = Store::open_alone(&database, Durability::Normal, None)
                .await
                .unwrap();
            let mut job = Job::new(1, JobSpec::default(), 10);
            job.transition(JobState::Running, 10).unwrap();
            job.transition(JobState::Completed, 11).unwrap();
            let write = super::super::Write::NewJob(Box::new(job));
            store.write(vec![write]).await.unwrap();
        }
        let opened = Store::connect(&database, Durability::Normal).await.unwrap();
        let mut conn = opened.into_conn();
        let mut c = conn.as_ref();
        // 25,000 copies (more than a window probe reads), none an array
        // task, ending one a second; analyzed.
        let copies =
            "WITH RECURSIVE k(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM k WHERE n < 25000)
            INSERT INTO jobs SELECT * FROM jobs WHERE id = 1";
        let columns: Vec<String> = c
            .query("SELECT name FROM pragma_table_info('jobs')")
            .fetch_all(c.reborrow())
            .await
            .unwrap()
            .iter()
            .map(|r| r.get("name").unwrap())
            .collect();
        let values: Vec<String> = columns
            .iter()
            .map(|col| match col.as_str() {
                "id" => "1 + n".to_string(),
                "submit_time" | "start_time" => "100 + n".to_string(),
                "end_time" => "101 + n".to_string(),
                other => other.to_string(),
            })
            .collect();
        let copies = copies.replace(
            "SELECT * FROM jobs WHERE id = 1",
            &format!("SELECT {} FROM k, jobs WHERE id = 1", values.join(", ")),
        );
        c.query(&copies).execute(c.reborrow()).await.unwrap();
        c.query("ANALYZE").execute(c.reborrow()).await.unwrap();
        let plan = |rows: Vec<super::Record>| -> Vec<String> {
            rows.iter().map(|r| r.get("detail").unwrap()).collect()
        };
        let open = super::Narrowed::default();
        let query = super::JobQuery {
            ids: Some(vec![7]),
            arrays: Some(vec![7]),
            ..Default::default()
        };
        let mut q = super::finished_query(c.engine(), "EXPLAIN QUERY PLAN ", &query, open, 0, 1000);
        let steps = plan(q.build().fetch_all(c.reborrow()).await.unwrap());
        assert!(
            steps.iter().any(|s| s.contains("jobs_by_array_task")),
            "{steps:?}"
        );
        // A narrow side of a window is read through its index; a side
        // wider than the probe, by id.
        let ends_late = super::JobQuery {
            active_since: Some(24_000),
            ..Default::default()
        };
        let began_early = super::JobQuery {
            active_until: Some(4_100),
            ..Default::default()
        };
        let by_end = super::Narrowed {
            by_end: true,
            by_start: false,
        };
        let by_start = super::Narrowed {
            by_end: false,
            by_start: true,
        };
        for (window, narrowed, index) in [
            (&ends_late, by_end, "jobs_by_end"),
            (&began_early, by_start, "jobs_by_active_from"),
        ] {
            assert_eq!(
                super::narrowed(c.reborrow(), window).await.unwrap(),
                Some(narrowed)
            );
            let mut q =
                super::finished_query(c.engine(), "EXPLAIN QUERY PLAN ", window, narrowed, 0, 1000);
            let steps = plan(q.build().fetch_all(c.reborrow()).await.unwrap());
            assert!(steps.iter().any(|s| s.contains(index)), "{steps:?}");
        }
        let wide = super::JobQuery {
            active_since: Some(0),
            ..Default::default()
        };
        assert_eq!(
            super::narrowed(c.reborrow(), &wide).await.unwrap(),
            Some(open)
        );
        let empty = super::JobQuery {
            active_since: Some(90_000),
            ..Default::default()
        };
        assert_eq!(super::narrowed(c.reborrow(), &empty).await.unwrap(), None);
    }
}
