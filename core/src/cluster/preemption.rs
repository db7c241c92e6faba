//! Preemption by QOS in the controller (`preempt` decides which jobs): a
//! pending job waiting for resources whose QOS may preempt has running
//! jobs of those QOS on one node requeued (or cancelled), and the node is
//! kept for it until it starts there. One preemption at a time: the next
//! waits until the jobs preempted before have left their node's books.
//! A job whose QOS has a `GraceTime` is first sent SIGTERM and requeued or
//! cancelled when its grace ends, or when it ends by itself before.

use super::{resources_of, Cluster, Effect};
use crate::job::{JobId, JobState};
use crate::preempt::{victims, Candidate, Grace, PreemptMode, Room};

/// A node kept for a job that preempted others there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Preemption {
    pub nodes: Vec<String>,
    pub victims: Vec<JobId>,
    pub at: i64,
}

/// The reason of a job cancelled for another (its end is PREEMPTED).
pub(super) const PREEMPTED: &str = "Preempted";

/// How long a node stays kept for a job that has not started there.
const KEEP_SECS: i64 = 300;

impl Cluster {
    /// How preempted jobs end (`off`: no preemption).
    pub fn set_preempt_mode(&mut self, mode: PreemptMode) {
        self.preempt_mode = mode;
    }

    /// The nodes kept for jobs (by their index in the node map), after
    /// forgetting those whose job no longer waits or waited too long.
    pub(super) fn kept_nodes(&mut self, now: i64) -> Vec<(usize, JobId)> {
        let kept: Vec<JobId> = self
            .preemptions
            .keys()
            .copied()
            .filter(|id| self.keeps_nodes_for(*id, now))
            .collect();
        self.preemptions.retain(|id, _| kept.contains(id));
        self.preemptions
            .iter()
            .flat_map(|(id, p)| {
                p.nodes.iter().filter_map(|node| {
                    let ni = self.nodes.keys().position(|n| n == node)?;
                    Some((ni, *id))
                })
            })
            .collect()
    }

    /// Whether nodes are kept for job `id`: it preempted others, still
    /// waits, and has not waited too long since.
    pub(super) fn keeps_nodes_for(&self, id: JobId, now: i64) -> bool {
        self.preemptions.get(&id).is_some_and(|p| {
            self.jobs
                .get(&id)
                .is_some_and(|j| j.state == JobState::Pending)
                && now - p.at < KEEP_SECS
        })
    }

    /// For the first job of `waiting` (jobs waiting for resources, in the
    /// order the pass weighed them) whose QOS may preempt: preempts jobs
    /// on the node where the fewest make room, and keeps that node for
    /// it. Nothing while an earlier preemption's jobs are still on their
    /// node.
    pub(super) fn preempt_for(&mut self, waiting: &[JobId], now: i64) -> Vec<Effect> {
        if self.preempt_mode == PreemptMode::Off || !self.qos.in_use() {
            return vec![];
        }
        let mut effects = self.end_graces(now);
        // (A suspended victim stays on its node, its CPUs already free.)
        let in_flight = self.preemptions.values().any(|p| {
            p.victims.iter().any(|v| {
                p.nodes
                    .iter()
                    .filter_map(|node| self.nodes.get(node))
                    .any(|n| n.running.contains(v) && !n.suspended.contains(v))
            })
        });
        if in_flight {
            return effects;
        }
        for id in waiting {
            if self.preemptions.contains_key(id) {
                continue;
            }
            if let Some((nodes, chosen)) = self.choose_victims(*id) {
                effects.extend(self.preempt(*id, nodes, chosen, now));
                break;
            }
        }
        effects
    }

    /// Requeues or cancels the preempted jobs whose grace time is over.
    fn end_graces(&mut self, now: i64) -> Vec<Effect> {
        let over: Vec<JobId> = self
            .graced
            .iter()
            .filter(|(_, g)| g.until <= now)
            .map(|(id, _)| *id)
            .collect();
        let mut effects = Vec::new();
        for v in over {
            let g = self.leave_grace(v).expect("listed above");
            if self
                .jobs
                .get(&v)
                .is_some_and(|j| j.state == JobState::Running)
            {
                effects.extend(self.preempt_now(v, g.for_job, g.requeue, now));
            }
        }
        effects
    }

    /// A preempted job in its grace time ended by itself: it is requeued
    /// (or counts as cancelled) as its preemption would have done.
    /// `None` when the job was not in a grace time.
    pub(super) fn graced_ended(
        &mut self,
        id: JobId,
        ended: &crate::wire::JobEnded,
    ) -> Option<Vec<Effect>> {
        let g = self.leave_grace(id)?;
        let now = ended.end_time;
        let mut effects = self.release(id);
        if let Some(job) = self.jobs.get_mut(&id) {
            job.record_usage(ended.usage, &ended.steps);
        }
        if g.requeue {
            effects.extend(self.requeue_after_failure(
                id,
                now,
                "BeginTime",
                &format!(
                    "ended in its grace time; requeued (preempted for job {})",
                    g.for_job
                ),
            ));
        } else {
            let job = self.jobs.get_mut(&id).expect("graced jobs exist");
            let _ = job.transition(JobState::Preempted, now);
            job.reason = Some(PREEMPTED.into());
            effects.push(Effect::Job {
                id,
                event: format!("ended in its grace time; PREEMPTED (for job {})", g.for_job),
            });
            effects.extend(self.charge(id, now));
        }
        Some(effects)
    }

    /// Requeues or cancels preempted job `v` now. A cancelled one ends
    /// PREEMPTED: its reason says so until its node reports the end
    /// (kept with the job, so a controller restart in between keeps it).
    fn preempt_now(&mut self, v: JobId, for_job: JobId, requeue: bool, now: i64) -> Vec<Effect> {
        let mut effects = if requeue {
            self.requeue(v, now)
        } else {
            match self.jobs.get_mut(&v) {
                Some(job) if job.state == JobState::Running => {
                    job.reason = Some(PREEMPTED.into());
                    Ok(vec![self.stop_running(v)])
                }
                _ => Ok(vec![]),
            }
        }
        .unwrap_or_default();
        effects.push(Effect::Job {
            id: v,
            event: format!(
                "preempted for job {for_job} ({})",
                if requeue { "requeued" } else { "cancelled" }
            ),
        });
        effects
    }

    /// The nodes where preempting makes room for `id` at the least cost,
    /// and the jobs to preempt there: for a job on one node, the node
    /// where the fewest nodes' work is lost; for one on N nodes, the N
    /// cheapest of the nodes it fits on now (cost 0) or after preempting
    /// there (at least one of them).
    fn choose_victims(&self, id: JobId) -> Option<(Vec<String>, Vec<JobId>)> {
        let job = self.jobs.get(&id)?;
        let qos = self.qos.qos.get(job.spec.slurm.qos.as_deref()?)?;
        if qos.preempt.is_empty() {
            return None;
        }
        let width = crate::allocation::width_of(&job.spec.slurm) as usize;
        let res = resources_of(job);
        // The nodes it may run on (-w, -x, --tmp), as the launch pass
        // reads them.
        let choice = self.node_choices(std::iter::once(&id)).remove(&id);
        // The fewest nodes' work lost (a job on several nodes loses its
        // run on each).
        let cost = |v: &[JobId]| -> usize {
            v.iter()
                .map(|id| 1 + self.jobs.get(id).map_or(0, |j| j.sisters.len()))
                .sum()
        };
        let mut options: Vec<(usize, String, Vec<JobId>)> = self
            .nodes
            .values()
            .filter(|n| choice.as_ref().is_none_or(|c| c.allows(&n.name)))
            .filter_map(|n| {
                let v = self.node_victims(job, &res, qos, n, width > 1)?;
                Some((cost(&v), n.name.clone(), v))
            })
            .collect();
        options.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        if width == 1 {
            options.retain(|o| !o.2.is_empty());
        }
        if options.len() < width.max(1) {
            return None;
        }
        options.truncate(width.max(1));
        let victims: Vec<JobId> = options.iter().flat_map(|o| o.2.clone()).collect();
        if victims.is_empty() {
            return None;
        }
        let mut unique = victims.clone();
        unique.sort();
        unique.dedup();
        Some((options.into_iter().map(|o| o.1).collect(), unique))
    }

    /// The jobs of `qos`'s preemptable QOS to preempt on `n` so that `job`
    /// (its share of it, `res`) fits there: empty where it fits now and
    /// `fits_now` counts; `None` where nothing would do.
    fn node_victims(
        &self,
        job: &crate::job::Job,
        res: &crate::resources::JobResources,
        qos: &crate::qos::Qos,
        n: &super::Node,
        fits_now: bool,
    ) -> Option<Vec<JobId>> {
        if !n.accepts_launches() || !res.could_fit(&n.total()) {
            return None;
        }
        let candidates: Vec<Candidate> = n
            .running
            .iter()
            .filter_map(|v| self.jobs.get(v))
            .filter(|v| {
                v.state == JobState::Running
                    && !v.launching
                    && !v.cancelling()
                    && !v.is_suspended()
                    && !self.graced.contains_key(&v.id)
                    && v.runs_on(&n.name)
                    && v.spec
                        .slurm
                        .qos
                        .as_ref()
                        .is_some_and(|q| qos.preempt.contains(q))
                    && self.preempt_mode_of(v) != PreemptMode::Off
            })
            .map(|v| {
                let r = resources_of(v);
                Candidate {
                    id: v.id,
                    start: v.start_time.unwrap_or(0),
                    nodes: 1 + v.sisters.len() as u32,
                    cpus: r.cpus,
                    memory_mib: r.memory_mib(n.memory_mib),
                    instances: n
                        .instances
                        .iter()
                        .enumerate()
                        .filter(|(_, s)| s.isolated_owner == Some(v.id))
                        .map(|(i, _)| i)
                        .collect(),
                    ends: true,
                }
                .under(self.preempt_mode_of(v))
            })
            .collect();
        let free = self.free_on(n);
        let room = Room {
            free_cpus: free.cpus,
            free_memory_mib: free.memory_mib,
            free_workers: n.worker_limit.saturating_sub(n.running.len() as u32),
            free_instances: n
                .instances
                .iter()
                .map(|s| {
                    s.isolated_owner.is_none()
                        && s.draining_for.is_none()
                        && s.active_tasks == 0
                        && !s.retiring
                })
                .collect(),
            need_cpus: res.cpus,
            need_memory_mib: res.memory_mib(n.memory_mib),
            need_instances: if job.spec.isolated {
                job.spec.gpu.instances()
            } else {
                0
            },
            satisfies: n
                .instances
                .iter()
                .map(|s| s.instance.satisfies(&job.spec.gpu))
                .collect(),
        };
        if fits_now && room.fits_now() {
            return Some(Vec::new());
        }
        victims(&room, &candidates)
    }

    /// Preempts `chosen` for job `id` and keeps `nodes` for it.
    fn preempt(
        &mut self,
        id: JobId,
        nodes: Vec<String>,
        chosen: Vec<JobId>,
        now: i64,
    ) -> Vec<Effect> {
        let mut effects = self.preempt_jobs(id, &chosen, now);
        effects.push(Effect::Job {
            id,
            event: format!(
                "preempted job(s) {chosen:?} on {}; kept for it",
                crate::hostlist::compress(&nodes)
            ),
        });
        self.preemptions.insert(
            id,
            Preemption {
                nodes,
                victims: chosen,
                at: now,
            },
        );
        effects
    }

    /// How job `j` is preempted: its QOS's `PreemptMode`, else gctld's.
    pub(super) fn preempt_mode_of(&self, j: &crate::job::Job) -> PreemptMode {
        j.spec
            .slurm
            .qos
            .as_deref()
            .and_then(|q| self.qos.qos.get(q))
            .and_then(|q| q.preempt_mode)
            .unwrap_or(self.preempt_mode)
    }

    /// Suspends, requeues or cancels `chosen` for job `id`, each as its
    /// QOS says; requeued or cancelled after its QOS's grace time where it
    /// has one.
    pub(super) fn preempt_jobs(&mut self, id: JobId, chosen: &[JobId], now: i64) -> Vec<Effect> {
        let mut effects = Vec::new();
        for v in chosen {
            let mode = self.jobs.get(v).map(|j| self.preempt_mode_of(j));
            if mode == Some(PreemptMode::Suspend) {
                effects.extend(self.suspend_for(*v, id, now));
                continue;
            }
            let requeue = mode == Some(PreemptMode::Requeue)
                && self.jobs.get(v).is_some_and(|j| j.spec.requeues());
            let grace = self
                .jobs
                .get(v)
                .and_then(|j| j.spec.slurm.qos.as_deref())
                .and_then(|q| self.qos.qos.get(q))
                .and_then(|q| q.grace_time_secs)
                .filter(|&g| g > 0);
            let Some(grace) = grace else {
                effects.extend(self.preempt_now(*v, id, requeue, now));
                continue;
            };
            // Its grace time: SIGTERM now, the preemption when it is over.
            let vnode = self.jobs[v].node.clone().unwrap_or_default();
            effects.push(Effect::Signal {
                job: *v,
                node: vnode,
                signal: crate::cluster::SIGTERM,
                cancel: false,
                scope: crate::outcome::SignalScope::Full,
            });
            effects.push(Effect::Job {
                id: *v,
                event: format!(
                    "preempted for job {id}: SIGTERM, {} in {grace} s (GraceTime)",
                    if requeue { "requeued" } else { "cancelled" }
                ),
            });
            let g = Grace {
                since: now,
                until: now + grace as i64,
                requeue,
                for_job: id,
            };
            self.graced.insert(*v, g);
            if let Some(j) = self.jobs.get_mut(v) {
                j.grace = Some(g);
            }
        }
        effects
    }

    /// Job `id` leaves its grace time (its index and its own record).
    pub(super) fn leave_grace(&mut self, id: JobId) -> Option<Grace> {
        if let Some(j) = self.jobs.get_mut(&id) {
            j.grace = None;
        }
        self.graced.remove(&id)
    }

    /// A job restored in its grace time (a controller restart): its grace
    /// goes on, and the nodes it is on stay kept for the job it was
    /// preempted for (no second preemption, no second grace).
    pub(super) fn restore_grace(&mut self, job: &crate::job::Job) {
        let Some(g) = job.grace.filter(|_| job.state == JobState::Running) else {
            return;
        };
        self.graced.insert(job.id, g);
        let p = self.preemptions.entry(g.for_job).or_insert(Preemption {
            nodes: Vec::new(),
            victims: Vec::new(),
            at: g.since,
        });
        p.victims.push(job.id);
        for n in job.nodes() {
            if !p.nodes.iter().any(|k| k == n) {
                p.nodes.push(n.to_string());
            }
        }
    }
}

#[cfg(test)]
mod tests;
