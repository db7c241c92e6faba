//! Suspended jobs in the controller (`crate::suspension` says what a
//! suspension is): an administrator's `scontrol suspend`/`resume`, and
//! preemption by a QOS whose jobs are suspended. A suspended job stays on
//! its nodes' books (its memory, instances and worker); its CPUs are free
//! there. A job suspended for another runs again once that one has ended
//! (or never started in its keep time) and its CPUs are free on all its
//! nodes (until then no new job starts on the CPUs it waits for); one an
//! administrator suspended waits for `scontrol resume`.
//! Every node of the job is asked to stop or continue it (an
//! [`Effect::Suspend`]), and asked again while its heartbeats say
//! otherwise.

use std::collections::BTreeMap;

use super::{resources_of, Cluster, ClusterError, Effect};
use crate::job::{JobId, JobState};

impl Cluster {
    /// `scontrol suspend`: stops running job `id` until `resume`.
    pub fn suspend(&mut self, id: JobId, now: i64) -> Result<Vec<Effect>, ClusterError> {
        self.check_suspendable(id, true)?;
        let mut effects = self.set_suspended(id, true, None, now);
        effects.push(Effect::Job {
            id,
            event: "suspended".into(),
        });
        Ok(effects)
    }

    /// `scontrol resume`: a suspended job runs again (whoever suspended
    /// it). Its CPUs must be free on its nodes.
    pub fn resume(&mut self, id: JobId, now: i64) -> Result<Vec<Effect>, ClusterError> {
        self.check_suspendable(id, false)?;
        if let Some(node) = self.cpus_short(id) {
            return Err(ClusterError::NoRoomToResume(id, node));
        }
        let mut effects = self.set_suspended(id, false, None, now);
        effects.push(Effect::Job {
            id,
            event: "resumed".into(),
        });
        Ok(effects)
    }

    fn check_suspendable(&self, id: JobId, suspend: bool) -> Result<(), ClusterError> {
        let job = self.jobs.get(&id).ok_or(ClusterError::UnknownJob(id))?;
        // One being cancelled is not frozen: its processes are to end.
        if job.state != JobState::Running || suspend && job.cancelling() {
            return Err(ClusterError::NotRunning(id));
        }
        if job.launching {
            return Err(ClusterError::Launching(id));
        }
        match (suspend, job.is_suspended()) {
            (true, true) => Err(ClusterError::AlreadySuspended(id)),
            (false, false) => Err(ClusterError::NotSuspended(id)),
            _ => Ok(()),
        }
    }

    /// Suspends running job `v` for job `for_job` (preemption).
    pub(super) fn suspend_for(&mut self, v: JobId, for_job: JobId, now: i64) -> Vec<Effect> {
        if self.check_suspendable(v, true).is_err() {
            return vec![];
        }
        let mut effects = self.set_suspended(v, true, Some(for_job), now);
        effects.push(Effect::Job {
            id: v,
            event: format!("preempted for job {for_job} (suspended)"),
        });
        effects
    }

    /// Stops (or continues) job `id` on every node it runs on: its CPUs
    /// leave (or rejoin) those nodes' books.
    fn set_suspended(
        &mut self,
        id: JobId,
        suspend: bool,
        for_job: Option<JobId>,
        now: i64,
    ) -> Vec<Effect> {
        let job = self.jobs.get_mut(&id).expect("checked by the caller");
        let s = job.suspension.get_or_insert_with(Default::default);
        if suspend {
            s.suspend(now, for_job);
        } else {
            s.resume(now);
        }
        let run = job.run;
        let nodes: Vec<String> = job.nodes().into_iter().map(String::from).collect();
        let res = resources_of(job);
        nodes
            .into_iter()
            .map(|node| {
                if let Some(n) = self.nodes.get_mut(&node) {
                    n.set_suspended(id, &res, suspend);
                }
                Effect::Suspend {
                    job: id,
                    node,
                    run,
                    suspend,
                }
            })
            .collect()
    }

    /// The first of job `id`'s nodes where its CPUs are not free now
    /// (other jobs took them while it was suspended).
    fn cpus_short(&self, id: JobId) -> Option<String> {
        let job = self.jobs.get(&id)?;
        let cpus = resources_of(job).cpus;
        job.nodes()
            .into_iter()
            .find(|name| self.nodes.get(*name).is_none_or(|n| n.free().cpus < cpus))
            .map(String::from)
    }

    /// Resumes the jobs suspended for another job once that one no longer
    /// runs or waits on nodes kept for it, where their CPUs are free: the
    /// longest suspended first.
    pub(super) fn resume_suspended(&mut self, now: i64) -> Vec<Effect> {
        // The nodes' books list them: no walk over every job.
        let suspended: std::collections::BTreeSet<JobId> = self
            .nodes
            .values()
            .flat_map(|n| n.suspended.iter().copied())
            .collect();
        let mut due: Vec<(i64, JobId)> = suspended
            .iter()
            .filter_map(|id| self.jobs.get(id))
            .filter(|j| j.is_suspended())
            .filter_map(|j| {
                let s = j.suspension?;
                let for_job = s.for_job?;
                let preemptor_busy = self.keeps_nodes_for(for_job, now)
                    || self
                        .jobs
                        .get(&for_job)
                        .is_some_and(|p| p.state == JobState::Running);
                (!preemptor_busy).then_some((s.since?, j.id))
            })
            .collect();
        due.sort();
        let mut effects = Vec::new();
        let mut resuming: BTreeMap<String, u32> = BTreeMap::new();
        for (_, id) in due {
            if self.cpus_short(id).is_some() {
                // Jobs started meanwhile hold its CPUs: as they free, nothing
                // new starts on them (it would wait for ever behind small
                // jobs).
                let job = &self.jobs[&id];
                let cpus = resources_of(job).cpus;
                for n in job.nodes() {
                    *resuming.entry(n.to_string()).or_default() += cpus;
                }
                continue;
            }
            effects.extend(self.set_suspended(id, false, None, now));
            effects.push(Effect::Job {
                id,
                event: "resumed (the job it was suspended for has ended)".into(),
            });
        }
        self.resuming = resuming;
        effects
    }

    /// CPUs on `node` kept for suspended jobs waiting to go on.
    pub(super) fn resuming_on(&self, node: &str) -> u32 {
        self.resuming.get(node).copied().unwrap_or(0)
    }

    /// What a node says it holds stopped (`suspended`, of the runs it
    /// reported): where that is not what the controller decided, the node
    /// is asked again (a request lost on the way, or a node restarted
    /// before it acted).
    pub fn reconcile_suspensions(
        &self,
        node: &str,
        running: &[JobId],
        suspended: &[JobId],
    ) -> Vec<Effect> {
        running
            .iter()
            .filter_map(|id| self.jobs.get(id))
            .filter(|j| j.state == JobState::Running && !j.launching && j.runs_on(node))
            .filter(|j| j.is_suspended() != suspended.contains(&j.id))
            .map(|j| Effect::Suspend {
                job: j.id,
                node: node.into(),
                run: j.run,
                suspend: j.is_suspended(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;
