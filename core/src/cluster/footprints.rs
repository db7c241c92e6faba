//! Footprint learning: the GPU memory peaks, the GPU shares (compute
//! demand, [`crate::compute`]) and the run times of earlier runs of "the
//! same job" (same user, and the same job name or the same script), kept
//! per key so a new job's footprint is found without walking the job
//! history, and kept for jobs that have left the controller's memory.
//! Every run that started is listed (an isolated job reports no peak, but
//! its run time tells when its instance will be free).

use std::collections::{BTreeMap, HashMap};

use crate::job::{script_hash, Job, JobId};

/// What makes two jobs of one user "the same job" for footprint learning.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key {
    Name(String),
    Script(u64),
}

type UserKey = (String, Key);

/// Earlier runs remembered per key.
pub const PEAK_HISTORY: usize = 8;

/// How many of the latest earlier runs a learned footprint covers: their
/// largest peak. A footprint grows at once with a run that peaks higher,
/// and shrinks only when this many runs in a row peaked lower, so one
/// light run does not leave the next heavy one short.
pub const PEAK_WINDOW: usize = 3;

/// A finished run, as the store keeps it for jobs no longer held in
/// memory (read back when the controller starts).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PastRun {
    pub id: JobId,
    pub user_name: String,
    pub name: String,
    pub script: String,
    /// Its GPU memory peak, MiB, where its processes reported one.
    pub gpu_mem_peak: Option<u64>,
    /// The share of a GPU it kept busy (thousandths), where measured.
    pub gpu_share: Option<u32>,
    /// How long it ran (seconds), where it started and ended.
    pub elapsed_secs: Option<i64>,
}

pub use crate::env::Learned;

/// What is learned from a job that left memory, and the keys it is
/// listed under.
#[derive(Debug, Clone)]
struct Retired {
    mib: Option<u64>,
    share: Option<u32>,
    elapsed: Option<i64>,
    keys: [UserKey; 2],
}

#[derive(Debug, Default)]
pub(super) struct Footprints {
    /// Jobs with a recorded peak or a run, per key, oldest first (at most
    /// [`PEAK_HISTORY`]).
    by_key: HashMap<UserKey, Vec<JobId>>,
    /// Peaks of listed jobs that are no longer in memory.
    retired: HashMap<JobId, Retired>,
}

/// How long a finished run ran, seconds.
fn elapsed_of(job: &Job) -> Option<i64> {
    Some(job.end_time? - job.start_time?).filter(|&e| e >= 0)
}

fn keys(user_name: &str, name: &str, script_hash: u64) -> [UserKey; 2] {
    [
        (user_name.to_string(), Key::Name(name.to_string())),
        (user_name.to_string(), Key::Script(script_hash)),
    ]
}

fn job_keys(job: &Job) -> [UserKey; 2] {
    keys(&job.spec.user_name, &job.spec.name, job.script_hash())
}

impl Footprints {
    /// Lists `job` under its keys if there is something to learn from it:
    /// a peak, or a run (finished or not: only finished ones are read).
    pub(super) fn note(&mut self, job: &Job) {
        if job.gpu_mem_peak.is_none() && job.start_time.is_none() {
            return;
        }
        self.list(job.id, job_keys(job));
    }

    fn list(&mut self, id: JobId, keys: [UserKey; 2]) {
        for key in keys {
            let ids = self.by_key.entry(key).or_default();
            if ids.contains(&id) {
                continue;
            }
            ids.push(id);
            ids.sort_unstable();
            if ids.len() > PEAK_HISTORY {
                let evicted = ids.remove(0);
                self.forget_if_unlisted(evicted);
            }
        }
    }

    /// Drops a retired peak no key lists any more.
    fn forget_if_unlisted(&mut self, id: JobId) {
        let Some(r) = self.retired.get(&id) else {
            return;
        };
        let listed = r
            .keys
            .iter()
            .any(|k| self.by_key.get(k).is_some_and(|ids| ids.contains(&id)));
        if !listed {
            self.retired.remove(&id);
        }
    }

    /// `job` leaves memory: its peak stays while a key lists it.
    pub(super) fn retire(&mut self, job: &Job) {
        let mib = job.gpu_mem_peak;
        let keys = job_keys(job);
        let listed = keys
            .iter()
            .any(|k| self.by_key.get(k).is_some_and(|ids| ids.contains(&job.id)));
        if listed {
            let share = job.gpu_share();
            let elapsed = elapsed_of(job);
            self.retired.insert(
                job.id,
                Retired {
                    mib,
                    share,
                    elapsed,
                    keys,
                },
            );
        }
    }

    /// A finished run read back from the store.
    pub(super) fn remember(&mut self, past: PastRun) {
        let keys = keys(&past.user_name, &past.name, script_hash(&past.script));
        self.retired.insert(
            past.id,
            Retired {
                mib: past.gpu_mem_peak,
                share: past.gpu_share,
                elapsed: past.elapsed_secs,
                keys: keys.clone(),
            },
        );
        self.list(past.id, keys);
        self.forget_if_unlisted(past.id);
    }

    /// The largest peak (MiB) of the latest [`PEAK_WINDOW`] earlier
    /// finished runs of the same job that reported one, the share of the
    /// latest that measured one, and the longest run time of the latest
    /// [`PEAK_WINDOW`] that ran.
    pub(super) fn learned(&self, job: &Job, jobs: &BTreeMap<JobId, Job>) -> Learned {
        let keys = job_keys(job);
        type Run = (JobId, Option<u64>, Option<u32>, Option<i64>);
        let mut runs: Vec<Run> = keys
            .iter()
            .filter_map(|k| self.by_key.get(k))
            .flatten()
            .copied()
            .filter(|&id| id < job.id)
            .filter_map(|id| match jobs.get(&id) {
                // The script key is a hash: confirm the match where the
                // script is at hand.
                Some(o) => (o.state.is_final()
                    && o.spec.user_name == job.spec.user_name
                    && (o.spec.name == job.spec.name || o.same_script(job)))
                .then(|| (id, o.gpu_mem_peak, o.gpu_share(), elapsed_of(o))),
                None => self
                    .retired
                    .get(&id)
                    .map(|r| (id, r.mib, r.share, r.elapsed)),
            })
            .collect();
        // Newest first; a run listed under both keys counts once.
        runs.sort_unstable_by_key(|r| std::cmp::Reverse(r.0));
        runs.dedup_by_key(|r| r.0);
        Learned {
            mib: runs.iter().filter_map(|r| r.1).take(PEAK_WINDOW).max(),
            share: runs.iter().find_map(|r| r.2),
            runtime_secs: runs.iter().filter_map(|r| r.3).take(PEAK_WINDOW).max(),
        }
    }

    /// How many peaks of jobs no longer in memory are kept (bounded by the
    /// keys' history).
    pub(super) fn retired_count(&self) -> usize {
        self.retired.len()
    }
}
