//! Run generations: which run of a job a node's report is about. Every
//! launch is a new run (`Job::run`); a report about an earlier run changes
//! nothing, a run a node still has but the controller no longer owns is
//! stopped, and a run lost with its node that the node later reports ended
//! on its own is recorded as it really ended.

use std::collections::BTreeMap;

use super::{Cluster, Effect};
use crate::job::{JobId, JobState};
use crate::outcome::EndCause;
use crate::wire::JobEnded;

/// A run the controller gave up on when its node was declared down.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct LostRun {
    pub node: String,
    pub run: u32,
    pub start_time: Option<i64>,
}

impl Cluster {
    /// Remembers the run of `id` as lost with its node (before the job is
    /// requeued or failed).
    pub(super) fn note_lost_run(&mut self, id: JobId) {
        let Some(j) = self.jobs.get(&id) else { return };
        if let Some(node) = &j.node {
            self.lost_runs.insert(
                id,
                LostRun {
                    node: node.clone(),
                    run: j.run,
                    start_time: j.start_time,
                },
            );
        }
    }

    /// Whether `ended` is about an earlier run than the job's current one
    /// (run 0: a node that predates generations, taken as current).
    pub(super) fn is_stale(&self, ended: &JobEnded) -> bool {
        ended.run != 0
            && self
                .jobs
                .get(&ended.job_id)
                .is_some_and(|j| ended.run != j.run)
    }

    /// A run lost with its node ended on its own, as the node reports once
    /// it is back: the job, NODE_FAIL or requeued and not started again,
    /// gets the end it really had. `None` when the report is not about
    /// such a run.
    pub(super) fn late_end(&mut self, node: &str, ended: &JobEnded) -> Option<Vec<Effect>> {
        let id = ended.job_id;
        let lost = self.lost_runs.get(&id)?;
        let job = self.jobs.get(&id)?;
        let same_run = lost.node == node && lost.run == job.run;
        let reported = ended.run == 0 || ended.run == lost.run;
        if !same_run || !reported || ended.outcome.cause.is_node_failure() {
            return None;
        }
        if ended.outcome.cause == EndCause::Cancelled {
            // Killed by the stop the controller sent when the node came
            // back (see `reconcile_runs`): not the job's own end.
            self.lost_runs.remove(&id);
            return None;
        }
        let requeued = job.state == JobState::Pending;
        if job.state != JobState::NodeFail && !requeued {
            return None;
        }
        let lost = self.lost_runs.remove(&id).expect("checked");
        if requeued {
            self.isolated_queue.remove(&id);
            self.shared_queue.remove(&id);
        }
        let (state, reason) = ended.outcome.final_state();
        let job = self.jobs.get_mut(&id).expect("checked");
        job.settle_lost_run(state, lost.start_time, ended.end_time, requeued);
        job.node = Some(lost.node);
        job.reason = reason;
        (job.exit_code, job.exit_signal) = ended.outcome.recorded_exit();
        Some(vec![Effect::Job {
            id,
            event: format!(
                "run {} ended {state} on {node} while the node was out of reach; recorded as it ended",
                lost.run
            ),
        }])
    }

    /// What a node says it runs (`running`, with each one's run when it
    /// knows it): runs the controller no longer owns are stopped. A job
    /// that is pending again does not start before its old run's end is
    /// reported.
    pub fn reconcile_runs(
        &mut self,
        node: &str,
        running: &[JobId],
        runs: &BTreeMap<JobId, u32>,
    ) -> Vec<Effect> {
        let mut effects = Vec::new();
        for &id in running {
            let run = runs.get(&id).copied();
            let Some(job) = self.jobs.get(&id) else {
                effects.push(Effect::StopRun {
                    job: id,
                    node: node.into(),
                    run,
                });
                continue;
            };
            let current = run.is_none_or(|r| r == job.run);
            let here = job.runs_on(node);
            let lost = self.lost_runs.get(&id).is_some_and(|l| l.node == node);
            let owned = current
                && !lost
                && ((here && (job.state == JobState::Running || job.state.is_final()))
                    || self.requeued_runs.get(&id).is_some_and(|n| n == node));
            if owned {
                // Running (its launch confirmed by this report), ending
                // after a requeue, or being stopped by the usual path
                // (cancel, time limit): not this function's to stop.
                let run = run.unwrap_or(job.run);
                effects.extend(self.launch_confirmed(id, run));
                continue;
            }
            if current && job.state == JobState::Pending {
                // Requeued after its node was lost, and not started again:
                // it waits for this run's end.
                self.lost_runs.remove(&id);
                self.requeued_runs.insert(id, node.into());
                let (res, shared) = (super::resources_of(job), !job.spec.isolated);
                if let Some(n) = self.nodes.get_mut(node) {
                    n.add_running(id, &res, shared);
                }
                if self.jobs.get(&id).and_then(super::node_sharing).is_some() {
                    self.sharing_jobs.insert(id);
                }
            }
            // NODE_FAIL: the run stays remembered as lost. If this stop
            // kills it, its end comes back Cancelled and is not the job's;
            // if it had already ended on its own (the node's report of it
            // was still on its way), it comes back as it ended and is
            // recorded (`late_end`).
            effects.push(Effect::StopRun {
                job: id,
                node: node.into(),
                run,
            });
        }
        effects
    }
}

#[cfg(test)]
mod tests;
