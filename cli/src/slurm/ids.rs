//! Turning the job ids users give (`N`, `A`, `A_i`, comma lists) into the
//! controller's jobs.

use anyhow::{bail, Result};
use gsched_core::array::{collapsed, JobRef};
use gsched_core::job::JobState;
use gsched_core::wire::JobInfo;

use crate::client::Client;

/// Parses comma lists of ids (`12,13_4`), refusing what is not an id.
pub fn parse_refs(lists: &[String]) -> Result<Vec<JobRef>> {
    let mut out = Vec::new();
    for item in lists.iter().flat_map(|l| l.split(',')) {
        let item = item.trim();
        if item.is_empty() {
            continue;
        }
        match JobRef::parse(item) {
            Some(r) => out.push(r),
            None => bail!("Invalid job id: {item}"),
        }
    }
    Ok(out)
}

/// The jobs the references name (an array id names every task), in any
/// state, plus extra query filters.
pub fn fetch(
    client: &Client,
    refs: &[JobRef],
    extra: &[(&'static str, String)],
) -> Result<Vec<JobInfo>> {
    let mut q: Vec<(&str, String)> = extra.to_vec();
    if !refs.is_empty() {
        let ids: Vec<String> = refs
            .iter()
            .map(|r| match r {
                JobRef::Id(i) | JobRef::Task(i, _) => i.to_string(),
            })
            .collect();
        q.push(("id", ids.join(",")));
        q.push(("array", ids.join(",")));
    }
    let jobs = client.jobs(&q)?;
    Ok(jobs.into_iter().filter(|j| named(refs, j)).collect())
}

/// Groups jobs (sorted by id) as Slurm lists them: each job alone, except
/// that consecutive pending tasks of one array are one group, whose id is
/// the collapsed `A_[3-9%4]` (`None` for a job alone).
pub fn group_pending_arrays(jobs: &[JobInfo]) -> Vec<(&JobInfo, Option<String>)> {
    let pending_task = |j: &JobInfo| {
        j.array
            .as_ref()
            .filter(|_| j.job_state == JobState::Pending)
            .map(|t| (t.array_job_id, t.task_id))
    };
    let mut out: Vec<(&JobInfo, Option<String>)> = Vec::new();
    let mut k = 0;
    while k < jobs.len() {
        let j = &jobs[k];
        let mut n = k + 1;
        if let Some((array, first)) = pending_task(j) {
            let mut idx = vec![first];
            while let Some(i) = jobs
                .get(n)
                .and_then(pending_task)
                .filter(|(a, _)| *a == array)
                .map(|(_, i)| i)
            {
                idx.push(i);
                n += 1;
            }
            if idx.len() > 1 {
                let max = j.array.as_ref().and_then(|t| t.max_running);
                out.push((j, Some(collapsed(array, &idx, max))));
                k = n;
                continue;
            }
        }
        out.push((j, None));
        k += 1;
    }
    out
}

/// Whether `j` is one of the jobs `refs` name (all jobs when empty).
pub fn named(refs: &[JobRef], j: &JobInfo) -> bool {
    refs.is_empty()
        || refs.iter().any(|r| match (r, &j.array) {
            (JobRef::Id(i), Some(t)) => t.array_job_id == *i || j.job_id == *i,
            (JobRef::Id(i), None) => j.job_id == *i,
            (JobRef::Task(a, x), Some(t)) => t.array_job_id == *a && t.task_id == *x,
            (JobRef::Task(..), None) => false,
        })
}
