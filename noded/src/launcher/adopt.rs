//! After a restart of gnoded: the runs its spool holds are adopted (still
//! running) or reported as they ended; an acknowledged end is forgotten.

use std::sync::Arc;
use std::time::Duration;

use gsched_core::probe::JOB_KEY_ENV;
use gsched_core::time_quota::{TimeQuota, TIME_QUOTA_ENV};
use gsched_core::wire::JobEnded;
use gsched_daemon::unix_now;
use tracing::info;

use super::{ended_from_spool, read_json, record_finished, Launcher, RunningJob, REMEMBERED_RUNS};
use crate::spool::{is_shepherd_of, pidfd_open, process_starttime, JobSpool};

impl Launcher {
    /// Looks at the spool after a restart: adopts jobs whose shepherd still
    /// runs and returns how the others ended.
    pub fn adopt(self: &Arc<Self>) -> Vec<JobEnded> {
        let mut ended = Vec::new();
        let Ok(dir) = std::fs::read_dir(&self.spool_root) else {
            return ended;
        };
        // Shepherds by their command line, for jobs whose pid file was never
        // written (gnoded died between starting the shepherd and writing it).
        let by_cmdline = crate::spool::shepherds_under(&self.spool_root);
        let mut gated = Vec::new();
        for entry in dir.flatten() {
            let Some(job) = JobSpool::job_of(&entry.path()) else {
                continue;
            };
            let spool = self.spool(job);
            // Only a process proven to be this spool's shepherd is adopted
            // and, later, signalled (see spool::is_shepherd_of).
            let candidates = spool.read_pid().into_iter().chain(
                by_cmdline
                    .iter()
                    .filter(|(_, d)| *d == spool.dir)
                    .filter_map(|(pid, _)| Some((*pid, process_starttime(*pid)?))),
            );
            let found = candidates
                .filter_map(|(pid, start)| {
                    let fd = pidfd_open(pid).ok()?;
                    is_shepherd_of(pid, start, &spool.dir, self.my_uid).then_some((pid, fd))
                })
                .next();
            match found {
                Some((pid, fd)) => {
                    if let Some(start) = process_starttime(pid) {
                        let _ = spool.write_pid(pid, start);
                    }
                    let spec = spool.read_spec().ok();
                    // What it has left of its limit, as if it ran now
                    // (a stopped one's limit waits for it to go on).
                    let left = spec.as_ref().and_then(|s| {
                        let limit = i64::try_from(s.time_limit?).unwrap_or(i64::MAX);
                        let mut gone = spool.read_suspension();
                        gone.resume(unix_now());
                        let left = gsched_core::suspension::time_left(
                            s.start_time,
                            limit,
                            &gone,
                            unix_now(),
                        )?;
                        Some(Duration::from_secs(left as u64))
                    });
                    let run = spec.as_ref().map_or(0, |s| s.run);
                    if let Some(s) = &spec {
                        self.confinement().adopt(job, &s.cpus, &s.instances);
                    }
                    if let Some(ended) = read_json(&spool.steps_path()) {
                        self.confinement().adopt_steps(job, ended);
                    }
                    // Stopped before the restart: it stays so, its cores
                    // free, its limit paused.
                    let suspension = spool.read_suspension();
                    if suspension.is_suspended() {
                        self.confinement().park(job);
                    }
                    self.jobs().insert(
                        job,
                        RunningJob {
                            pgid: Some(pid),
                            run,
                            suspension,
                        },
                    );
                    if let (Some(probe), Some(spec)) = (self.probe.as_ref(), &spec) {
                        // The job keeps its key across gnoded restarts.
                        let key = spec.env.get(JOB_KEY_ENV).cloned();
                        // Its quota, as given at its launch (gnoded's own
                        // spool, not the job's).
                        let quota = spec
                            .env
                            .get(TIME_QUOTA_ENV)
                            .and_then(|q| TimeQuota::from_env(q));
                        let _ = probe.register_job(job, spec.uid, key, quota, spec.gpu_budget);
                        if spool.is_gated() {
                            // Started early and still waiting: it takes its
                            // instances after the jobs that hold them.
                            gated.push((job, run, spec.instances.clone()));
                        } else {
                            // An isolated job's instance stays closed to
                            // shared tasks.
                            for uuid in &spec.instances {
                                probe.hold(uuid, job);
                            }
                        }
                    }
                    info!(job, pid, "adopted running job");
                    let warn = spec.and_then(|s| s.warn_signal);
                    self.track(job, pid, fd, left, warn);
                }
                None => {
                    // It ended while gnoded was away: what is left of it in
                    // its cgroup goes now.
                    if !spool.cgroup_path().exists() {
                        record_finished(&spool, &self.confinement().finish(job));
                    }
                    ended.push(ended_from_spool(job, &spool))
                }
            }
        }
        if let Some(probe) = self.probe.as_ref() {
            for (job, run, instances) in gated {
                probe.close_gate(job);
                for uuid in &instances {
                    probe.hold(uuid, job);
                }
                info!(job, "adopted while it waits for its instances");
                self.open_when_free(job, run, instances.clone(), instances);
            }
        }
        ended
    }

    /// Removes the spool of a job whose end the controller acknowledged,
    /// unless the spool now belongs to a later run of the job (requeued and
    /// launched again, running or ended with another end time).
    pub fn forget(&self, ended: &JobEnded) {
        let setting_up = self.setting_up();
        if setting_up.contains(&ended.job_id) || self.jobs().contains_key(&ended.job_id) {
            return;
        }
        let spool = self.spool(ended.job_id);
        let later_run = spool
            .read_status()
            .is_some_and(|s| s.end_time != ended.end_time);
        if !later_run {
            spool.remove();
            let mut runs = self.finished_runs.lock().unwrap_or_else(|p| p.into_inner());
            if runs.len() == REMEMBERED_RUNS {
                runs.pop_front();
            }
            runs.push_back((ended.job_id, ended.run));
        }
    }
}
