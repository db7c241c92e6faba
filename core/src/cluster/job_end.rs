//! A run ends: as its node reports it, or lost with its node; what it held
//! is released, and it is requeued where it may be.

use std::collections::BTreeMap;

use super::{preemption, resources_of, Cluster, ClusterError, Effect};
use crate::job::{JobId, JobState};
use crate::resources::{JobResources, MemoryRequest};
use crate::wire::JobEnded;

impl Cluster {
    /// Takes a job off its nodes' books (instances and workers). A job on
    /// several nodes has its run stopped on its sisters: the effects.
    #[must_use]
    pub(super) fn release(&mut self, id: JobId) -> Vec<Effect> {
        let Some(node) = self.jobs.get(&id).and_then(|j| j.node.clone()) else {
            return vec![];
        };
        let mut effects = self.release_on(&node, id);
        effects.extend(self.release_sisters(id));
        effects
    }

    /// Takes job `id` off node `node`'s books (a requeued job's old run:
    /// the job itself no longer names the node). An instance it held that
    /// a job started early waited for is handed over: the effects say so
    /// for a job that then waits no more.
    #[must_use]
    pub(super) fn release_on(&mut self, node: &str, id: JobId) -> Vec<Effect> {
        self.sharing_jobs.remove(&id);
        // A job on a node's books is in memory (running, or pending while
        // its old run ends); were it not, its id still leaves the books.
        let res = self.jobs.get(&id).map_or(
            JobResources {
                cpus: 0,
                memory: MemoryRequest::Unspecified,
            },
            resources_of,
        );
        let mut handed_to = Vec::new();
        if let Some(n) = self.nodes.get_mut(node) {
            n.remove_running(id, &res);
            let running = &n.running;
            for s in &mut n.instances {
                if s.draining_for == Some(id) {
                    s.draining_for = None;
                }
                if s.isolated_owner == Some(id) {
                    // Handed to the job started early for it, if one waits.
                    s.isolated_owner = s.draining_for.filter(|j| running.contains(j));
                    if let Some(next) = s.isolated_owner {
                        s.draining_for = None;
                        handed_to.push(next);
                    }
                }
            }
        }
        handed_to
            .into_iter()
            .filter(|next| self.stop_waiting_for_gpu(node, *next))
            .map(|id| Effect::Job {
                id,
                event: format!("holds its instances on {node}: its GPU work may begin"),
            })
            .collect()
    }

    /// A job started early that holds every instance it waited for on
    /// `node` no longer shows that it waits; whether its reason changed.
    fn stop_waiting_for_gpu(&mut self, node: &str, id: JobId) -> bool {
        let still_waits = self
            .nodes
            .get(node)
            .is_some_and(|n| n.instances.iter().any(|s| s.draining_for == Some(id)));
        match self.jobs.get_mut(&id) {
            Some(job)
                if !still_waits
                    && job.reason.as_deref() == Some(super::early_start::WAITING_FOR_GPU) =>
            {
                job.reason = None;
                true
            }
            _ => false,
        }
    }

    /// A job's processes ended on `node`.
    pub fn job_ended(&mut self, node: &str, ended: &JobEnded) -> Result<Vec<Effect>, ClusterError> {
        let id = ended.job_id;
        if self.is_stale(ended) {
            // An earlier run's end: logged, and nothing changes.
            return Ok(vec![Effect::Job {
                id,
                event: format!(
                    "end of run {} on {node} ignored: run {} is current",
                    ended.run, self.jobs[&id].run
                ),
            }]);
        }
        if self.requeued_runs.get(&id).is_some_and(|n| n == node) {
            // The run a requeue stopped: free its worker and instance; the
            // job itself is already pending again.
            self.requeued_runs.remove(&id);
            let mut effects = vec![Effect::Job {
                id,
                event: "previous run ended".into(),
            }];
            effects.extend(self.release_on(node, id));
            return Ok(effects);
        }
        let job = self.jobs.get(&id).ok_or(ClusterError::UnknownJob(id))?;
        if job.is_sister(node) {
            return Ok(self.sister_ended(node, ended));
        }
        if job.cancelling() && self.graced.contains_key(&id) {
            // Cancelled in its grace time: it ends CANCELLED below, and
            // its grace with it.
            self.leave_grace(id);
        }
        let job = &self.jobs[&id];
        let graced = self.graced.contains_key(&id)
            && job.state == JobState::Running
            && !job.cancelling()
            && job.node.as_deref() == Some(node)
            && !ended.outcome.cause.is_node_failure();
        if graced {
            if let Some(effects) = self.graced_ended(id, ended) {
                return Ok(effects);
            }
        }
        let job = &self.jobs[&id];
        if job.state != JobState::Running {
            return self
                .late_end(node, ended)
                .ok_or(ClusterError::NotRunning(id));
        }
        if job.node.as_deref() != Some(node) {
            return Err(ClusterError::WrongNode {
                job: id,
                node: node.into(),
            });
        }
        let cancelling = job.cancelling();
        if ended.outcome.cause.is_node_failure() {
            return Ok(self.lose(id, ended.end_time));
        }
        let mut fault_reason = None;
        if let crate::outcome::EndCause::GpuFault(f) = &ended.outcome.cause {
            let (requeueable, so_far) = (job.spec.requeues(), job.gpu_fault_requeues);
            if f.requeues(requeueable, so_far, self.max_gpu_fault_requeues) && !cancelling {
                if let Some(j) = self.jobs.get_mut(&id) {
                    j.gpu_fault_requeues += 1;
                }
                let mut effects = self.release(id);
                effects.extend(self.requeue_after_failure(
                    id,
                    ended.end_time,
                    "GpuFaultRequeued",
                    "requeued after a GPU fault",
                ));
                return Ok(effects);
            }
            fault_reason = Some(f.failed_reason(requeueable, so_far));
        }
        let (mut state, mut reason) = ended.outcome.final_state();
        if fault_reason.is_some() {
            reason = fault_reason;
        }
        if cancelling {
            // Shown CANCELLED since the user asked; it stays so, even if
            // its processes ended on their own meanwhile.
            (state, reason) = (JobState::Cancelled, None);
        } else if state == JobState::Cancelled
            && job.reason.as_deref() == Some(preemption::PREEMPTED)
        {
            // Cancelled to make room for another job.
            (state, reason) = (JobState::Preempted, Some(preemption::PREEMPTED.into()));
        }
        let stops = self.release(id);
        let job = self.jobs.get_mut(&id).expect("checked above");
        job.transition(state, ended.end_time)?;
        job.reason = reason;
        (job.exit_code, job.exit_signal) = ended.outcome.recorded_exit();
        job.record_usage(ended.usage, &ended.steps);
        // Its run time tells when the next run's instance will be free.
        self.footprints.note(job);
        let mut effects = vec![Effect::Job {
            id,
            event: format!("ended {state}"),
        }];
        effects.extend(stops);
        effects.extend(self.charge(id, ended.end_time));
        Ok(effects)
    }

    /// Takes what a node's running jobs have used so far (sstat). Only for
    /// jobs running there; never persisted before the job ends.
    pub fn note_usage(
        &mut self,
        node: &str,
        usage: &BTreeMap<JobId, crate::job::ResourceUsage>,
        steps: &BTreeMap<JobId, crate::job::StepUsage>,
    ) {
        let none = crate::job::StepUsage::default();
        for id in usage.keys().chain(steps.keys()) {
            if let Some(job) = self
                .jobs
                .get_mut(id)
                .filter(|j| j.state == JobState::Running && j.node.as_deref() == Some(node))
            {
                job.record_usage(usage.get(id).copied(), steps.get(id).unwrap_or(&none));
            }
        }
    }

    /// A running job (its resources released) goes back to the queue after
    /// a failure it did not cause.
    pub(super) fn requeue_after_failure(
        &mut self,
        id: JobId,
        now: i64,
        reason: &str,
        event: &str,
    ) -> Vec<Effect> {
        let job = self.jobs.get_mut(&id).expect("caller checked");
        job.transition(JobState::Requeued, now)
            .expect("running job");
        job.transition(JobState::Pending, now)
            .expect("requeued job");
        // A job cancelled never comes back here; one stored by an older
        // version might: its next run must not look cancelled.
        job.cancelled_by = None;
        job.reason = Some(reason.into());
        let isolated = job.spec.isolated;
        self.enqueue(id, isolated);
        vec![Effect::Job {
            id,
            event: event.into(),
        }]
    }

    /// A running job's processes are gone: NODE_FAIL, or back to the queue
    /// if it asked for requeue.
    pub(super) fn lose(&mut self, id: JobId, now: i64) -> Vec<Effect> {
        if let Some(node) = self.requeued_runs.remove(&id) {
            // Already pending again: only its old run was lost, and with
            // it what it held on its node.
            return self.release_on(&node, id);
        }
        let mut effects = self.release(id);
        self.note_lost_run(id);
        // What it ran until now counts, as for any end.
        effects.extend(self.charge(id, now));
        let job = self.jobs.get_mut(&id).expect("caller checked");
        if job.cancelling() {
            // Already shown CANCELLED: its processes are gone with the node.
            job.end_cancelled(now);
            effects.push(Effect::Job {
                id,
                event: "ended CANCELLED (its node was lost while it completed)".into(),
            });
        } else if job.spec.requeues() {
            effects.extend(self.requeue_after_failure(
                id,
                now,
                "NodeFailRequeued",
                "requeued after node failure",
            ));
        } else {
            job.transition(JobState::NodeFail, now)
                .expect("running job");
            job.reason = Some("NodeFail".into());
            effects.push(Effect::Job {
                id,
                event: "ended NODE_FAIL".into(),
            });
        }
        effects
    }
}
