//! Submission: a checked spec becomes one job, or one job per array index,
//! queued; a submission that could not be stored is withdrawn.

use super::{Cluster, ClusterError, Effect};
use crate::array::ArrayTask;
use crate::job::{Job, JobId, JobSpec, JobState};

impl Cluster {
    /// Accepts a job. It is queued at once; the caller persists it before
    /// acknowledging, and withdraws it with [`Cluster::withdraw`] if that fails.
    pub fn submit(
        &mut self,
        mut spec: JobSpec,
        now: i64,
    ) -> Result<(JobId, Vec<Effect>), ClusterError> {
        spec.validate()?;
        spec.requeue.get_or_insert(self.job_requeue);
        if let Some(&id) = spec
            .idempotency_key
            .as_ref()
            .and_then(|k| self.submissions.get(&(spec.uid, k.clone())))
        {
            // A retry of a submission already accepted: the same job.
            return Ok((id, Vec::new()));
        }
        self.check_caps(&spec)?;
        self.check_satisfiable(&spec)?;
        self.choose_account(&mut spec)?;
        self.choose_qos(&mut spec)?;
        self.apply_max_wall(&mut spec);
        if let Some(d) = &spec.dependency {
            self.check_dependency(spec.uid, d)?;
        }
        let key = spec.idempotency_key.clone().map(|k| (spec.uid, k));
        let (id, effects) = self.add_submission(spec, now);
        if let Some(key) = key {
            self.submissions.insert(key, id);
        }
        Ok((id, effects))
    }

    /// Adds a checked submission: one job, or every task of an array (the
    /// id returned is the array's).
    pub(super) fn add_submission(&mut self, spec: JobSpec, now: i64) -> (JobId, Vec<Effect>) {
        let Some(array) = spec.array.clone() else {
            let id = self.add_job(spec, now);
            return (id, vec![Effect::Submitted { id }]);
        };
        // An array: one job per index, numbered on from the first, whose
        // id is the array's (as Slurm does).
        let first = self.next_id;
        let mut effects = Vec::with_capacity(array.indices.len());
        for &index in &array.indices {
            let mut task = spec.clone();
            task.array = None;
            task.array_task = Some(ArrayTask {
                array_job_id: first,
                task_id: index,
                min: array.indices[0],
                max: *array.indices.last().expect("an array has indices"),
                step: array.step(),
                count: array.indices.len() as u32,
                max_running: array.max_running,
            });
            if let Some(m) = array.max_running {
                self.array_limits.insert(first, m);
            }
            let id = self.add_job(task, now);
            effects.push(Effect::Submitted { id });
        }
        (first, effects)
    }

    pub(super) fn add_job(&mut self, spec: JobSpec, now: i64) -> JobId {
        let id = self.next_id;
        self.next_id += 1;
        let job = Job::new(id, spec, now);
        self.enqueue(id, job.spec.isolated);
        self.jobs_by_user
            .add(&job.spec.user_name, id, job.spec.held_bytes());
        self.jobs.insert(id, job);
        id
    }

    /// Removes a job that could not be persisted. Only a pending job that
    /// nothing else has touched can be withdrawn.
    pub fn withdraw(&mut self, id: JobId) {
        if self
            .jobs
            .get(&id)
            .is_some_and(|j| j.state == JobState::Pending)
        {
            self.isolated_queue.remove(&id);
            self.shared_queue.remove(&id);
            if let Some(j) = self.jobs.remove(&id) {
                self.jobs_by_user.remove(&j.spec.user_name, id);
                if let Some(k) = j.spec.idempotency_key {
                    self.submissions.remove(&(j.spec.uid, k));
                }
            }
        }
    }
}
