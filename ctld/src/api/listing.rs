//! `GET /api/v1/jobs`: the jobs in the controller's memory (what squeue and
//! scontrol see), and with `history=true` also the finished jobs that have
//! left it, from the database (what sacct and gacct see). Answers come in
//! pages by job id, so no listing holds more than a page at once.

use std::collections::{BTreeMap, HashSet};

use axum::extract::Query;
use axum::http::StatusCode;
use axum::Json;
use gsched_core::job::{Job, JobId, JobState};
use gsched_core::wire::{ErrorBody, JobInfo, JobList};
use gsched_daemon::http::ApiError;
use serde::Deserialize;

use super::Ctl;
use crate::controller::unix_now;
use crate::store::JobQuery;

/// Jobs per page when the client names no `limit`, and the most it may.
pub const DEFAULT_PAGE: u32 = 1000;
pub const MAX_PAGE: u32 = 10_000;

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct JobFilter {
    /// Job states, comma-separated (`PENDING,RUNNING`), or `all`; default:
    /// every state that is not final.
    state: Option<String>,
    /// User names, comma-separated.
    user: Option<String>,
    /// Job names, comma-separated.
    name: Option<String>,
    /// Job ids, comma-separated.
    id: Option<String>,
    /// Array ids: every task of these arrays (with `id`: either matches).
    array: Option<String>,
    /// Also finished jobs no longer in memory, from the database.
    #[serde(default)]
    history: bool,
    /// Only jobs not ended before this (unix seconds).
    since: Option<i64>,
    /// Only jobs started (or submitted) at or before this.
    until: Option<i64>,
    /// Only ids above this: the previous page's `next_after`.
    after: Option<JobId>,
    /// Jobs per page: 1 to 10,000, default 1,000.
    #[param(minimum = 1, maximum = 10000)]
    limit: Option<u32>,
}

fn parse_list<T>(
    s: &Option<String>,
    what: &str,
    f: impl Fn(&str) -> Option<T>,
) -> Result<Option<Vec<T>>, ApiError> {
    let Some(s) = s else { return Ok(None) };
    s.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| {
            f(p.trim())
                .ok_or_else(|| ApiError(StatusCode::BAD_REQUEST, format!("invalid {what} '{p}'")))
        })
        .collect::<Result<Vec<T>, _>>()
        .map(Some)
}

impl JobFilter {
    fn query(&self) -> Result<JobQuery, ApiError> {
        // Default like squeue: jobs not yet finished. `all` shows every job.
        let states: Option<HashSet<JobState>> = match self.state.as_deref() {
            Some(s) if s.eq_ignore_ascii_case("all") => None,
            Some(_) => Some(
                parse_list(&self.state, "job state", |p| JobState::parse(p).ok())?
                    .unwrap_or_default()
                    .into_iter()
                    .collect(),
            ),
            None => Some(
                JobState::ALL
                    .into_iter()
                    .filter(|s| !s.is_final())
                    .collect(),
            ),
        };
        Ok(JobQuery {
            states,
            users: parse_list(&self.user, "user", |p| Some(p.to_string()))?,
            names: parse_list(&self.name, "name", |p| Some(p.to_string()))?,
            ids: parse_list(&self.id, "job id", |p| p.parse::<JobId>().ok())?,
            arrays: parse_list(&self.array, "array id", |p| p.parse::<JobId>().ok())?,
            active_since: self.since,
            active_until: self.until,
        })
    }

    fn limit(&self) -> Result<u32, ApiError> {
        match self.limit {
            None => Ok(DEFAULT_PAGE),
            Some(n @ 1..=MAX_PAGE) => Ok(n),
            Some(n) => Err(ApiError(
                StatusCode::BAD_REQUEST,
                format!("invalid limit {n}: give 1 to {MAX_PAGE} jobs per page"),
            )),
        }
    }
}

/// Jobs, by id, a page at a time (`squeue`, `sacct`, `gqueue`).
#[utoipa::path(get, path = "/api/v1/jobs", tag = "jobs",
    params(JobFilter),
    responses(
        (status = 200, description = "A page of jobs; `next_after` asks for the next", body = JobList),
        (status = 400, description = "Bad filter: the error names it", body = ErrorBody),
        (status = 503, description = "The store cannot be read (history)", body = ErrorBody)))]
pub async fn list_jobs(
    axum::extract::State(ctl): Ctl,
    Query(f): Query<JobFilter>,
) -> Result<Json<JobList>, ApiError> {
    let query = f.query()?;
    let limit = f.limit()?;
    let after = f.after.unwrap_or(0);
    // The database first (no lock is held across the read): finished jobs
    // it has. Those still in memory are taken from memory below.
    let stored = if f.history {
        ctl.store
            .finished_jobs(&query, after, limit)
            .await
            .map_err(|e| {
                ApiError(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("cannot read finished jobs from the database: {e}"),
                )
            })?
    } else {
        Vec::new()
    };
    // A full page from the database ends where it ends: jobs in memory past
    // it belong to a later page.
    let horizon = match stored.last() {
        Some(j) if stored.len() == limit as usize => j.id,
        _ => JobId::MAX,
    };
    let now = unix_now();
    let c = ctl.lock();
    let weigher = c.weigher(now);
    let mut page: BTreeMap<JobId, JobInfo> = BTreeMap::new();
    let mut keep = |j: &Job| {
        if j.id <= horizon && query.matches(j) {
            page.insert(
                j.id,
                JobInfo::new(j, &ctl.config.partition, now)
                    .weighed(weigher.priority_of(j))
                    .expecting(c.expected_start(j.id)),
            );
        }
    };
    match (&query.ids, &query.arrays) {
        (None, None) => c
            .jobs_after(after)
            .take_while(|j| j.id <= horizon)
            .filter(|j| query.matches(j))
            .take(limit as usize)
            .for_each(&mut keep),
        (ids, arrays) => {
            for id in ids.iter().flatten().filter(|&&id| id > after) {
                c.job(*id).into_iter().for_each(&mut keep);
            }
            for a in arrays.iter().flatten() {
                c.job_or_array(*a)
                    .filter(|j| j.id > after)
                    .for_each(&mut keep);
            }
        }
    }
    for j in stored.iter().filter(|j| c.job(j.id).is_none()) {
        keep(j);
    }
    drop(c);
    let jobs: Vec<JobInfo> = page.into_values().take(limit as usize).collect();
    let next_after = (jobs.len() == limit as usize)
        .then(|| jobs.last().map(|j| j.job_id))
        .flatten();
    Ok(Json(JobList { jobs, next_after }))
}
