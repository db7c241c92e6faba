//! What users and administrators do to a job: steps begun and ended, hold and
//! release, requeue, cancel and signal.

use super::{Cluster, ClusterError, Effect, SIGTERM};
use crate::job::{JobId, JobState, Step};

impl Cluster {
    /// A step (`srun`) begins inside running job `id`: returns its number.
    pub fn begin_step(
        &mut self,
        id: JobId,
        name: &str,
        ntasks: u32,
        now: i64,
    ) -> Result<(u32, Vec<Effect>), ClusterError> {
        let job = self.jobs.get_mut(&id).ok_or(ClusterError::UnknownJob(id))?;
        if job.state != JobState::Running {
            return Err(ClusterError::NotRunning(id));
        }
        if job.steps.len() >= crate::job::MAX_STEPS {
            return Err(ClusterError::TooManySteps(id));
        }
        let step = job.steps.len() as u32;
        job.steps.push(Step {
            id: step,
            name: name.chars().take(crate::job::MAX_NAME_LEN).collect(),
            ntasks,
            start_time: now,
            end_time: None,
            state: JobState::Running,
            exit_code: None,
            exit_signal: None,
            usage: None,
        });
        Ok((
            step,
            vec![Effect::Job {
                id,
                event: format!("step {step} started"),
            }],
        ))
    }

    /// A step ended with the highest exit code (or a signal) of its tasks.
    pub fn end_step(
        &mut self,
        id: JobId,
        step: u32,
        exit_code: i32,
        signal: Option<i32>,
        now: i64,
    ) -> Result<Vec<Effect>, ClusterError> {
        let job = self.jobs.get_mut(&id).ok_or(ClusterError::UnknownJob(id))?;
        let s = job
            .steps
            .get_mut(step as usize)
            .filter(|s| s.end_time.is_none())
            .ok_or(ClusterError::NoSuchStep(id, step))?;
        s.end_time = Some(now);
        s.exit_code = Some(exit_code);
        s.exit_signal = signal.filter(|&x| x > 0);
        s.state = if exit_code == 0 && s.exit_signal.is_none() {
            JobState::Completed
        } else {
            JobState::Failed
        };
        Ok(vec![Effect::Job {
            id,
            event: format!("step {step} ended"),
        }])
    }

    /// Holds a pending job (`scontrol hold`) or releases it (`scontrol
    /// release`).
    pub fn set_held(&mut self, id: JobId, held: bool) -> Result<Vec<Effect>, ClusterError> {
        let job = self.jobs.get_mut(&id).ok_or(ClusterError::UnknownJob(id))?;
        if job.state != JobState::Pending {
            return Err(ClusterError::NotPending(id));
        }
        if job.held == held {
            return Ok(vec![]);
        }
        job.held = held;
        job.reason = held.then(|| "JobHeldUser".to_string());
        self.unexamined.push(id);
        Ok(vec![Effect::Job {
            id,
            event: if held { "held" } else { "released" }.into(),
        }])
    }

    /// Puts a running job back in the queue under the same id (`scontrol
    /// requeue`): PENDING at once, its processes stopped; it starts again
    /// once its node reports the old run ended.
    pub fn requeue(&mut self, id: JobId, now: i64) -> Result<Vec<Effect>, ClusterError> {
        let job = self.jobs.get_mut(&id).ok_or(ClusterError::UnknownJob(id))?;
        if job.state != JobState::Running || job.cancelling() {
            // One being cancelled is CANCELLED already, as users see it.
            return Err(ClusterError::NotRunning(id));
        }
        let node = job.node.clone().unwrap_or_default();
        job.transition(JobState::Requeued, now)?;
        job.transition(JobState::Pending, now)?;
        job.reason = Some("BeginTime".into());
        let isolated = job.spec.isolated;
        // Its sisters' share is stopped now; its batch node's when that
        // run reports its end.
        let stops = self.release_sisters(id);
        self.enqueue(id, isolated);
        self.requeued_runs.insert(id, node.clone());
        let mut effects = vec![
            Effect::Job {
                id,
                event: "requeued".into(),
            },
            Effect::Signal {
                job: id,
                node,
                signal: SIGTERM,
                cancel: true,
                scope: crate::outcome::SignalScope::Full,
            },
        ];
        effects.extend(stops);
        Ok(effects)
    }

    /// Cancels a job; `by` is the uid that asked (shown by sacct; the
    /// owner's when the caller has none). A queued job ends at once. A
    /// running one is CANCELLED at once as well, as Slurm marks it: its
    /// processes are signalled and, until its node reports them gone, it
    /// keeps its resources and is shown completing (`CG`, `Job::cancelling`).
    /// A finished job is left as it is.
    pub fn cancel(
        &mut self,
        id: JobId,
        by: Option<u32>,
        now: i64,
    ) -> Result<Vec<Effect>, ClusterError> {
        let job = self.jobs.get_mut(&id).ok_or(ClusterError::UnknownJob(id))?;
        if matches!(
            job.state,
            JobState::Pending | JobState::Requeued | JobState::Running
        ) {
            job.cancelled_by = Some(by.unwrap_or(job.spec.uid));
        }
        match job.state {
            JobState::Pending | JobState::Requeued => {
                job.transition(JobState::Cancelled, now)?;
                job.reason = None;
                let isolated = job.spec.isolated;
                self.queue_for(isolated).remove(&id);
                Ok(vec![Effect::Job {
                    id,
                    event: "cancelled while pending".into(),
                }])
            }
            JobState::Running => {
                // Out of a preemption grace time: it is cancelled instead.
                self.leave_grace(id);
                Ok(vec![
                    Effect::Job {
                        id,
                        event: "cancelled; completing until its processes end".into(),
                    },
                    self.stop_running(id),
                ])
            }
            _ => Ok(vec![]),
        }
    }

    /// The signal that ends running job `id` (SIGTERM to everything, then
    /// SIGKILL after the kill wait, on its node).
    pub(super) fn stop_running(&self, id: JobId) -> Effect {
        Effect::Signal {
            job: id,
            node: self.jobs[&id].node.clone().unwrap_or_default(),
            signal: SIGTERM,
            cancel: true,
            scope: crate::outcome::SignalScope::Full,
        }
    }

    /// Sends a signal to the processes of a running job that `scope`
    /// names, without cancelling it.
    pub fn signal(
        &mut self,
        id: JobId,
        signal: i32,
        scope: crate::outcome::SignalScope,
    ) -> Result<Vec<Effect>, ClusterError> {
        let job = self.jobs.get(&id).ok_or(ClusterError::UnknownJob(id))?;
        if job.state != JobState::Running {
            return Err(ClusterError::NotRunning(id));
        }
        let node = job.node.clone().unwrap_or_default();
        Ok(vec![Effect::Signal {
            job: id,
            node,
            signal,
            cancel: false,
            scope,
        }])
    }
}
