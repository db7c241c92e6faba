//! Preemption for a shared job's task (SwitchFlow's task level): a
//! running shared job whose QOS may preempt others (`Preempt=`), with a GPU
//! task waiting on its node for memory, has shared jobs of those QOS on
//! one instance requeued or cancelled (as jobs are preempted, grace time
//! included) so that the task fits there once they have left. The
//! instance is the one the task's process is bound to, else the one where
//! the fewest jobs make room; the youngest go first. The node places the
//! task itself when the memory is free. One such preemption per job at a
//! time: the next waits until its victims have left and the node has
//! reported its waiting tasks since.

use super::{Cluster, Effect};
use crate::job::{JobId, JobState};
use crate::preempt::{task_victims, PreemptMode, TaskCandidate};
use crate::wire::WaitingTask;

const MIB: u64 = 1024 * 1024;

/// Jobs preempted on a node for a waiting task of one job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct TaskPreemption {
    pub node: String,
    pub victims: Vec<JobId>,
    /// The node's report count when the victims had all left.
    pub gone_at: Option<u64>,
}

impl Cluster {
    /// For the first waiting task (on any node, first in line first) of a
    /// job whose QOS may preempt: preempts the shared jobs that make room
    /// for it on one instance. At most one such preemption per pass.
    pub(super) fn preempt_for_tasks(&mut self, now: i64) -> Vec<Effect> {
        if self.preempt_mode == PreemptMode::Off || !self.qos.in_use() {
            return vec![];
        }
        self.settle_task_preemptions();
        let waiting: Vec<(String, WaitingTask)> = self
            .nodes
            .values()
            .filter(|n| n.up)
            .flat_map(|n| n.waiting_tasks.iter().map(|t| (n.name.clone(), t.clone())))
            .collect();
        for (node, task) in waiting {
            if self.task_preemptions.contains_key(&task.job) {
                continue;
            }
            let Some(victims) = self.task_victims_for(&node, &task) else {
                continue;
            };
            let mut effects = self.preempt_jobs(task.job, &victims, now);
            effects.push(Effect::Job {
                id: task.job,
                event: format!(
                    "preempted job(s) {victims:?} on {node} for its task of {} MiB",
                    task.bytes.div_ceil(MIB)
                ),
            });
            self.task_preemptions.insert(
                task.job,
                TaskPreemption {
                    node,
                    victims,
                    gone_at: None,
                },
            );
            return effects;
        }
        vec![]
    }

    /// Notes when earlier task preemptions' victims have left, and forgets
    /// those the node has reported on since (its task was placed, or is
    /// looked at anew), and those whose job no longer runs.
    fn settle_task_preemptions(&mut self) {
        let nodes = &self.nodes;
        let jobs = &self.jobs;
        self.task_preemptions.retain(|id, p| {
            let Some(n) = nodes.get(&p.node) else {
                return false;
            };
            if jobs.get(id).is_none_or(|j| j.state != JobState::Running) {
                return false;
            }
            match p.gone_at {
                Some(at) => n.waiting_reports <= at,
                None => {
                    if !p.victims.iter().any(|v| n.running.contains(v)) {
                        p.gone_at = Some(n.waiting_reports);
                    }
                    true
                }
            }
        });
    }

    /// The jobs to preempt on `node` so that `task` fits: on the instance
    /// its process is bound to, else where the fewest are needed; `None`
    /// when its job may not preempt or nothing would make room.
    fn task_victims_for(&self, node: &str, task: &WaitingTask) -> Option<Vec<JobId>> {
        let job = self.jobs.get(&task.job)?;
        if job.state != JobState::Running || job.spec.isolated || job.node.as_deref() != Some(node)
        {
            return None;
        }
        let qos = self.qos.qos.get(job.spec.slurm.qos.as_deref()?)?;
        if qos.preempt.is_empty() {
            return None;
        }
        let n = self.nodes.get(node)?;
        let mut best: Option<Vec<JobId>> = None;
        for slot in &n.instances {
            if task
                .instance
                .as_deref()
                .is_some_and(|u| u != slot.instance.uuid)
                || slot.isolated_owner.is_some()
                || slot.draining_for.is_some()
                || slot.retiring
            {
                continue;
            }
            let memory = slot.instance.memory_mib * MIB;
            let candidates: Vec<TaskCandidate> = slot
                .job_bytes
                .iter()
                .filter(|(v, _)| **v != task.job)
                .filter_map(|(v, bytes)| {
                    let vj = self.jobs.get(v)?;
                    let preemptable = vj.state == JobState::Running
                        && !vj.launching
                        && !vj.cancelling()
                        && !vj.spec.isolated
                        && !self.graced.contains_key(v)
                        // A suspended job keeps its GPU memory.
                        && matches!(
                            self.preempt_mode_of(vj),
                            PreemptMode::Requeue | PreemptMode::Cancel
                        )
                        && vj
                            .spec
                            .slurm
                            .qos
                            .as_ref()
                            .is_some_and(|q| qos.preempt.contains(q));
                    preemptable.then(|| TaskCandidate {
                        id: *v,
                        start: vj.start_time.unwrap_or(0),
                        bytes: *bytes,
                    })
                })
                .collect();
            let free = memory.saturating_sub(slot.reserved_bytes);
            if let Some(v) = task_victims(free, task.bytes, &candidates) {
                if best.as_ref().is_none_or(|b| v.len() < b.len()) {
                    best = Some(v);
                }
            }
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use crate::cluster::testkit::{add_qos, cluster, launch, spec};
    use crate::cluster::{Effect, JobState};
    use crate::preempt::PreemptMode;
    use crate::wire::{InstanceUse, WaitingTask};

    const GIB: u64 = 1 << 30;

    /// n1 (two 1g.5gb instances) with QOS low and high (high may preempt
    /// low); three shared low jobs and a shared high one running. Returns
    /// the cluster, the low jobs and the high one.
    fn shared_jobs(mode: PreemptMode) -> (crate::cluster::Cluster, Vec<u64>, u64) {
        let mut c = cluster();
        c.set_preempt_mode(mode);
        add_qos(&mut c, "low", &[]);
        add_qos(&mut c, "high", &["low"]);
        let mut ids = Vec::new();
        for (k, qos) in ["low", "low", "low", "high"].iter().enumerate() {
            let mut s = spec(qos, true);
            s.slurm.qos = Some(qos.to_string());
            let (id, _) = c.submit(s, k as i64).unwrap();
            assert_eq!(launch(&mut c, k as i64), [id]);
            ids.push(id);
        }
        let high = ids.pop().unwrap();
        (c, ids, high)
    }

    /// The node's report: on its first instance the low jobs hold 2, 1
    /// and 1 GiB; the high job's task of `need` waits, bound there.
    fn report(c: &mut crate::cluster::Cluster, low: &[u64], high: u64, need: u64) {
        let uuid = c.node("n1").unwrap().instances[0].instance.uuid.clone();
        let jobs: std::collections::BTreeMap<u64, u64> =
            [(low[0], 2 * GIB), (low[1], GIB), (low[2], GIB)].into();
        let uses = [(
            uuid.clone(),
            InstanceUse {
                tasks: 3,
                reserved_bytes: 4 * GIB,
                jobs,
                processes: 3,
                ..InstanceUse::default()
            },
        )]
        .into();
        c.update_instance_use("n1", &uses);
        c.set_waiting_tasks(
            "n1",
            vec![WaitingTask {
                job: high,
                bytes: need,
                instance: Some(uuid),
            }],
            0,
        );
    }

    fn signalled(fx: &[Effect]) -> Vec<u64> {
        fx.iter()
            .filter_map(|e| match e {
                Effect::Signal {
                    job, cancel: true, ..
                } => Some(*job),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_waiting_task_of_a_higher_qos_preempts_the_youngest_jobs_that_make_room() {
        let (mut c, low, high) = shared_jobs(PreemptMode::Requeue);
        // The 1g.5gb instance has 4.75 GiB: 0.75 free; 2 GiB needed: the
        // youngest low job (1 GiB) alone is not enough, the two youngest are.
        report(&mut c, &low, high, 2 * GIB);
        let fx = c.schedule(10);
        let mut hit = signalled(&fx);
        hit.sort();
        assert_eq!(hit, vec![low[1], low[2]], "{fx:?}");
        assert_eq!(c.job(low[2]).unwrap().state, JobState::Pending);
        assert_eq!(c.job(low[0]).unwrap().state, JobState::Running);
        // Nothing more while the same report stands.
        assert!(signalled(&c.schedule(11)).is_empty());
        // A task that fits, or a job whose QOS may not preempt: nothing.
        let (mut c, low, high) = shared_jobs(PreemptMode::Requeue);
        report(&mut c, &low, high, GIB / 2);
        assert!(signalled(&c.schedule(10)).is_empty());
        let (mut c, low, _) = shared_jobs(PreemptMode::Requeue);
        report(&mut c, &low, low[0], 2 * GIB);
        assert!(signalled(&c.schedule(10)).is_empty());
        let (mut c, low, high) = shared_jobs(PreemptMode::Off);
        report(&mut c, &low, high, 2 * GIB);
        assert!(signalled(&c.schedule(10)).is_empty());
    }
}
