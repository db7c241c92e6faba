//! The launch pass: which pending jobs start now, where, and what waits
//! with which reason; and when the jobs that wait are expected to start.

use std::collections::{BTreeSet, HashMap, HashSet};

use super::{
    node_sharing, queued, resources_of, states_of, Cluster, ClusterError, Effect, InstanceSlot,
    Node,
};
use crate::dependency::Verdict;
use crate::job::{JobId, JobState};
use crate::launch::{
    Decision, InstanceView, LaunchInput, LaunchPlan, NodeView, PendingReason, QueuedJob,
};

/// What a launch pass looks at, and what sits it out and why.
struct Selection {
    iso_ids: Vec<JobId>,
    shared_ids: Vec<JobId>,
    /// This pass's priority of each, where the policy orders the queues.
    priorities: HashMap<JobId, u64>,
    /// Shared jobs were left out for want of free workers.
    truncated: bool,
    /// The order preemption looks at waiting jobs in (when it is on).
    by_rank: Vec<JobId>,
    held: Vec<JobId>,
    /// Jobs whose `--begin` time has not come.
    not_yet: Vec<JobId>,
    /// Array tasks at their array's `%max`.
    throttled: Vec<JobId>,
    /// Jobs whose dependencies are not (or never will be) met.
    waiting: Vec<(JobId, Verdict)>,
    /// Jobs their QOS's or association's limits hold back, with the reason.
    over_qos: Vec<(JobId, &'static str)>,
}

impl Cluster {
    /// One launch pass of the policy; applies its decisions.
    pub fn schedule(&mut self, now: i64) -> Vec<Effect> {
        // MIG layouts are re-made for what waits before the launch policy
        // hands out instances (an isolated job then gets a right-sized
        // instance rather than an oversized one), and retiring instances
        // are launched onto by nobody.
        let mut effects = self.new_reshapes();
        // Jobs suspended for others go on before anything queued starts.
        effects.extend(self.resume_suspended(now));
        effects.extend(self.launch_queued(now));
        // A running shared job's task waiting for memory may make room.
        effects.extend(self.preempt_for_tasks(now));
        // Drains change with launches, and with ends when nothing is queued.
        effects.extend(self.drain_changes(now));
        self.note_reconfiguring();
        effects
    }

    /// The launch pass proper, in named steps: select what may start,
    /// let the policy plan, carry out its decisions, and give every job
    /// left waiting its reason.
    pub(super) fn launch_queued(&mut self, now: i64) -> Vec<Effect> {
        if self.isolated_queue.is_empty() && self.shared_queue.is_empty() {
            self.unexamined.clear();
            return Vec::new();
        }
        // With preemption, a full node may be made room on.
        let may_preempt =
            self.preempt_mode != crate::preempt::PreemptMode::Off && self.qos.in_use();
        if !may_preempt && self.no_free_worker() {
            return Vec::new();
        }
        self.unexamined.clear();
        let selection = self.select(now, may_preempt);
        let kept = self.kept_nodes(now);
        let mut plan = self.plan(&selection, &kept, now);
        if selection.truncated && plan.rest.is_none() {
            plan.rest = Some(PendingReason::Resources);
        }
        self.expected_starts = std::mem::take(&mut plan.expected_starts)
            .into_iter()
            .collect();
        let mut effects = self.carry_out(std::mem::take(&mut plan.decisions), now);
        self.give_reasons(plan, selection, now, &mut effects);
        effects
    }

    /// Every policy launches onto a free worker: when there is none, a pass
    /// would only repeat the reasons it gave before. Gives the jobs queued
    /// since then theirs, without walking the whole queue; `false` when a
    /// worker is free.
    fn no_free_worker(&mut self) -> bool {
        if self
            .nodes
            .values()
            .any(|n| n.accepts_launches() && (n.running.len() as u32) < n.worker_limit)
        {
            return false;
        }
        let reason = if self.nodes.values().any(|n| n.up) {
            PendingReason::Resources
        } else {
            PendingReason::NodeDown
        };
        for id in std::mem::take(&mut self.unexamined) {
            if self
                .jobs
                .get(&id)
                .is_some_and(|j| j.state == JobState::Pending)
            {
                self.set_reason(id, &reason.to_string());
            }
        }
        true
    }

    /// The jobs this pass considers, by priority: every eligible isolated
    /// one, and the eligible shared ones up to the free workers (each
    /// launch takes a worker: jobs past them cannot start in this pass;
    /// they get the pass's `rest` reason); and those that sit it out, why.
    fn select(&mut self, now: i64, may_preempt: bool) -> Selection {
        // Arrays at their `%max`: their pending tasks sit this pass out.
        let mut array_room = self.array_room();
        // Worked out when a job with a singleton dependency is first seen.
        let mut singletons: Option<HashMap<(&str, &str), JobId>> = None;
        let (mut throttled, mut waiting, mut held) = (Vec::new(), Vec::new(), Vec::new());
        let mut not_yet = Vec::new();
        let jobs = &self.jobs;
        let requeued = &self.requeued_runs;
        let mut eligible = |id: &JobId| -> bool {
            let job = &jobs[id];
            if requeued.contains_key(id) {
                return false;
            }
            if job.held {
                held.push(*id);
                return false;
            }
            if job.spec.begin.is_some_and(|t| t > now) {
                not_yet.push(*id);
                return false;
            }
            if let Some(d) = &job.spec.dependency {
                let earlier = d.singleton
                    && singletons
                        .get_or_insert_with(|| self.active_by_name())
                        .get(&(job.spec.user_name.as_str(), job.spec.name.as_str()))
                        .is_some_and(|first| first < id);
                match d.verdict(|dep| states_of(jobs, dep), earlier) {
                    Verdict::Ready => {}
                    v => {
                        waiting.push((*id, v));
                        return false;
                    }
                }
            }
            let Some(t) = job.spec.array_task.as_ref() else {
                return true;
            };
            match array_room.get_mut(&t.array_job_id) {
                Some(0) => {
                    throttled.push(*id);
                    false
                }
                Some(room) => {
                    *room -= 1;
                    true
                }
                None => true,
            }
        };
        let mut iso_ids: Vec<JobId> = self
            .isolated_queue
            .iter()
            .filter(|id| eligible(id))
            .copied()
            .collect();
        let free_workers: usize = self
            .nodes
            .values()
            .filter(|n| n.accepts_launches())
            .map(|n| n.worker_limit.saturating_sub(n.running.len() as u32) as usize)
            .sum();
        let truncated = self.shared_queue.len() > free_workers;
        let ordered = self.priority.orders();
        // In submission order the first ones are the ones to look at (a
        // window of them, reordered longest expected first); by priority,
        // every eligible job is weighed first.
        let window = free_workers.saturating_mul(super::longest_first::WINDOW_PER_WORKER);
        let mut shared_ids: Vec<JobId> = self
            .shared_queue
            .iter()
            .filter(|id| eligible(id))
            .take(if ordered { usize::MAX } else { window })
            .copied()
            .collect();
        if !ordered {
            self.longest_first(&mut shared_ids, now);
        }
        let mut priorities = HashMap::new();
        self.by_priority(&mut iso_ids, now, &mut priorities);
        self.by_priority(&mut shared_ids, now, &mut priorities);
        // Jobs their QOS's limits hold back sit this pass out.
        let over_qos = self.qos_filter([&mut iso_ids, &mut shared_ids]);
        // The order preemption looks at waiting jobs in (when it is on).
        let by_rank: Vec<JobId> = if may_preempt {
            iso_ids.iter().chain(shared_ids.iter()).copied().collect()
        } else {
            Vec::new()
        };
        shared_ids.truncate(free_workers);
        Selection {
            iso_ids,
            shared_ids,
            priorities,
            truncated,
            by_rank,
            held,
            not_yet,
            throttled,
            waiting,
            over_qos,
        }
    }

    /// What the launch policy makes of the selected jobs and the nodes.
    fn plan(&self, selection: &Selection, kept: &[(usize, JobId)], now: i64) -> LaunchPlan {
        let (iso_ids, shared_ids) = (&selection.iso_ids, &selection.shared_ids);
        let choices = self.node_choices(iso_ids.iter().chain(shared_ids.iter()));
        let view = |ids: &[JobId], shared: bool| -> Vec<QueuedJob<'_>> {
            ids.iter()
                .map(|id| {
                    let p = selection.priorities.get(id).copied().unwrap_or(0);
                    let job = &self.jobs[id];
                    // What a shared job's processes are expected to demand,
                    // for its admission (stated, else learned).
                    let share = shared
                        .then(|| job.spec.gpu.share.or_else(|| self.learned(*id).share))
                        .flatten();
                    queued(job, choices.get(id), p, share)
                })
                .collect()
        };
        let iso = view(iso_ids, false);
        let shared = view(shared_ids, true);
        // Who runs where matters to jobs that want a node alone.
        let with_users = iso.iter().chain(shared.iter()).any(|j| j.sharing.is_some());
        // When nodes empty matters to jobs that may hold nodes.
        let holding = with_users || iso.iter().chain(shared.iter()).any(|j| j.width > 1);
        let nodes = self.node_views(with_users, holding, !iso.is_empty(), now);
        let opted_out: HashSet<JobId> = match self.early_start_secs {
            Some(_) => iso_ids
                .iter()
                .filter(|id| self.jobs[id].intercept_off())
                .copied()
                .collect(),
            None => HashSet::new(),
        };
        self.policy.plan(&LaunchInput {
            now,
            reserved: kept,
            scheduler: self.scheduler_type,
            isolated: &iso,
            shared: &shared,
            nodes: &nodes,
            start_ahead: self.shared_start_ahead,
            early: self.early_start_secs.map(|secs| crate::launch::EarlyStart {
                until: now.saturating_add(secs),
                opted_out: &opted_out,
            }),
        })
    }

    /// The nodes as the launch policy sees them: who runs there only when
    /// a job wants a node alone (`with_users`), when they empty only when
    /// a job may hold nodes (`holding`), when instances free up only when
    /// an isolated job waits.
    fn node_views(
        &self,
        with_users: bool,
        holding: bool,
        isolated_waiting: bool,
        now: i64,
    ) -> Vec<NodeView<'_>> {
        self.nodes
            .values()
            .map(|n| {
                let (shared_waiting, shared_starting) = if self.shared_start_ahead.is_some() {
                    self.shared_unplaced(n, now)
                } else {
                    (0, 0)
                };
                self.node_view(
                    n,
                    with_users,
                    holding,
                    isolated_waiting,
                    now,
                    (shared_waiting, shared_starting),
                )
            })
            .collect()
    }

    fn node_view<'a>(
        &'a self,
        n: &'a Node,
        with_users: bool,
        holding: bool,
        isolated_waiting: bool,
        now: i64,
        (shared_waiting, shared_starting): (u32, u32),
    ) -> NodeView<'a> {
        NodeView {
            shared_waiting,
            shared_starting,
            shared_room: n.shared_room,
            host_mem_low: crate::launch::host_mem_low(
                n.mem_available_mib,
                n.memory_mib,
                self.host_mem_reserve_pct,
            ),
            name: &n.name,
            occupancy: self.occupancy(n, with_users),
            up: n.accepts_launches(),
            worker_limit: n.worker_limit,
            workers_used: n.running.len() as u32,
            // Only isolated jobs' placement asks for these two.
            shared_running: n.shared.len() as u32,
            total: n.total(),
            free: self.free_on(n),
            expected_empty: if holding {
                self.expected_empty(n, now)
            } else {
                None
            },
            instances: n
                .instances
                .iter()
                .map(|s| InstanceView {
                    instance: &s.instance,
                    isolated_owner: s.isolated_owner,
                    draining_for: s.draining_for,
                    active_tasks: s.active_tasks,
                    expected_free: if isolated_waiting {
                        self.expected_free(s)
                    } else {
                        None
                    },
                    retiring: s.retiring,
                })
                .collect(),
        }
    }

    /// Starts what the policy decided to start, and marks the instances it
    /// decided to drain.
    fn carry_out(&mut self, decisions: Vec<Decision>, now: i64) -> Vec<Effect> {
        let mut effects = Vec::new();
        for d in decisions {
            let (job, node, instances, early) = match d {
                Decision::Launch {
                    job,
                    node,
                    instances,
                } => (job, node, instances, false),
                Decision::EarlyStart {
                    job,
                    node,
                    instances,
                } => (job, node, instances, true),
                Decision::LaunchWide { job, nodes } => {
                    effects.extend(self.start_wide(job, nodes, now));
                    continue;
                }
                Decision::Drain {
                    job,
                    node,
                    instances,
                } => {
                    self.forget_drains_for(job);
                    for uuid in &instances {
                        if let Some(slot) = self.slot_mut(&node, uuid) {
                            slot.draining_for = Some(job);
                        }
                    }
                    continue;
                }
            };
            if self.start(job, &node, instances, now).is_ok() {
                let event = if early {
                    format!(
                        "started early on {node}: its GPU work waits until its instances are free"
                    )
                } else {
                    format!("started on {node}")
                };
                effects.push(Effect::Job { id: job, event });
                effects.push(Effect::Launch { job, node, early });
            }
        }
        effects
    }

    /// Every job the pass left pending gets its reason (the plan's, or why
    /// it sat the pass out); jobs waiting for resources may preempt.
    fn give_reasons(
        &mut self,
        plan: LaunchPlan,
        selection: Selection,
        now: i64,
        effects: &mut Vec<Effect>,
    ) {
        let mut named = BTreeSet::new();
        for (id, reason) in plan.waiting {
            named.insert(id);
            self.set_reason(id, &reason.to_string());
        }
        if let Some(rest) = plan.rest {
            let rest = rest.to_string();
            let ids: Vec<JobId> = self
                .isolated_queue
                .iter()
                .chain(self.shared_queue.iter())
                .filter(|id| !named.contains(id))
                .copied()
                .collect();
            for id in ids {
                self.set_reason(id, &rest);
            }
        }
        for id in selection.throttled {
            self.set_reason(id, "JobArrayTaskLimit");
        }
        for (id, reason) in selection.over_qos {
            self.set_reason(id, reason);
        }
        let waiting_for_resources: Vec<JobId> = selection
            .by_rank
            .into_iter()
            .filter(|id| {
                self.jobs.get(id).is_some_and(|j| {
                    j.state == JobState::Pending
                        && j.reason.as_deref() == Some(&PendingReason::Resources.to_string())
                })
            })
            .collect();
        effects.extend(self.preempt_for(&waiting_for_resources, now));
        for id in selection.held {
            self.set_reason(id, "JobHeldUser");
        }
        for id in selection.not_yet {
            self.set_reason(id, "BeginTime");
        }
        let ending: Vec<JobId> = self.requeued_runs.keys().copied().collect();
        for id in ending {
            self.set_reason(id, "BeginTime");
        }
        for (id, v) in selection.waiting {
            let reason = if v == Verdict::Never {
                "DependencyNeverSatisfied"
            } else {
                "Dependency"
            };
            self.set_reason(id, reason);
        }
    }

    /// For `singleton`: the lowest id of an active (pending or running)
    /// job per (user, name); worked out when a queued job asks for it.
    pub(super) fn active_by_name(&self) -> HashMap<(&str, &str), JobId> {
        let mut m = HashMap::new();
        let running = self.nodes.values().flat_map(|n| n.running.iter());
        for id in self
            .isolated_queue
            .iter()
            .chain(&self.shared_queue)
            .chain(running)
        {
            let s = &self.jobs[id].spec;
            let e = m
                .entry((s.user_name.as_str(), s.name.as_str()))
                .or_insert(*id);
            *e = (*e).min(*id);
        }
        m
    }

    /// How many more tasks each throttled array may start now.
    pub(super) fn array_room(&mut self) -> HashMap<JobId, u32> {
        if self.array_limits.is_empty() {
            return HashMap::new();
        }
        let mut running: HashMap<JobId, u32> = HashMap::new();
        let mut live: HashSet<JobId> = HashSet::new();
        for id in self.isolated_queue.iter().chain(&self.shared_queue) {
            if let Some(t) = &self.jobs[id].spec.array_task {
                live.insert(t.array_job_id);
            }
        }
        for n in self.nodes.values() {
            for id in &n.running {
                if let Some(t) = self.jobs.get(id).and_then(|j| j.spec.array_task.as_ref()) {
                    *running.entry(t.array_job_id).or_default() += 1;
                }
            }
        }
        // Arrays with nothing left to start no longer need a limit.
        self.array_limits.retain(|a, _| live.contains(a));
        self.array_limits
            .iter()
            .map(|(a, &m)| (*a, m.saturating_sub(running.get(a).copied().unwrap_or(0))))
            .collect()
    }

    pub(super) fn set_reason(&mut self, id: JobId, reason: &str) {
        if let Some(j) = self.jobs.get_mut(&id) {
            if j.reason.as_deref() != Some(reason) {
                j.reason = Some(reason.to_string());
            }
        }
    }

    pub(super) fn slot_mut(&mut self, node: &str, uuid: &str) -> Option<&mut InstanceSlot> {
        self.nodes
            .get_mut(node)?
            .instances
            .iter_mut()
            .find(|s| s.instance.uuid == uuid)
    }

    pub(super) fn start(
        &mut self,
        id: JobId,
        node: &str,
        instances: Vec<String>,
        now: i64,
    ) -> Result<(), ClusterError> {
        let job = self.jobs.get_mut(&id).ok_or(ClusterError::UnknownJob(id))?;
        job.transition(JobState::Running, now)?;
        job.node = Some(node.to_string());
        job.gpu_instances = instances.clone();
        let isolated = job.spec.isolated;
        let res = resources_of(job);
        if node_sharing(job).is_some() {
            self.sharing_jobs.insert(id);
        }
        self.queue_for(isolated).remove(&id);
        self.preemptions.remove(&id);
        // A new run: an earlier run lost with its node is settled no more.
        self.lost_runs.remove(&id);
        let n = self
            .nodes
            .get_mut(node)
            .ok_or_else(|| ClusterError::UnknownNode(node.into()))?;
        n.add_running(id, &res, !isolated);
        if !instances.is_empty() {
            // Started early on an instance another isolated job still
            // holds, it waits for it (drained for it) and takes it over
            // when that one ends.
            let mut waits_for = Vec::new();
            for slot in n
                .instances
                .iter_mut()
                .filter(|s| instances.contains(&s.instance.uuid))
            {
                match slot.isolated_owner {
                    Some(other) if other != id => waits_for.push(slot.instance.uuid.clone()),
                    _ => slot.isolated_owner = Some(id),
                }
            }
            // Neither it nor an instance it waited for elsewhere is drained
            // for it any more.
            self.forget_drains_for(id);
            if !waits_for.is_empty() {
                // Running, but its GPU work waits: say so where users look.
                if let Some(job) = self.jobs.get_mut(&id) {
                    job.reason = Some(super::early_start::WAITING_FOR_GPU.into());
                }
            }
            for uuid in waits_for {
                if let Some(slot) = self.slot_mut(node, &uuid) {
                    slot.draining_for = Some(id);
                }
            }
        }
        Ok(())
    }

    /// When pending job `id` is expected to start, where the latest launch
    /// pass could tell (it holds nodes whose jobs all have time limits).
    pub fn expected_start(&self, id: JobId) -> Option<i64> {
        let j = self.jobs.get(&id)?;
        (j.state == JobState::Pending)
            .then(|| self.expected_starts.get(&id).copied())
            .flatten()
    }

    /// When every job on `node`'s books will have ended by its time limit
    /// (`now` if none is there); `None` if one has no limit.
    pub(super) fn expected_empty(&self, node: &Node, now: i64) -> Option<i64> {
        node.running.iter().try_fold(now, |t, id| {
            let j = self.jobs.get(id)?;
            // Its limit leaves out the time it was suspended.
            let end = j
                .start_time?
                .saturating_add(j.spec.time_limit?.min(i64::MAX as u64) as i64)
                .saturating_add(j.suspended_secs(now));
            Some(t.max(end))
        })
    }

    /// The node choices (-w, -x) of the jobs `ids` that make one. One that
    /// no longer reads (accepted by an older version) allows no node: the
    /// job waits with ReqNodeNotAvail.
    pub(super) fn node_choices<'i>(
        &self,
        ids: impl Iterator<Item = &'i JobId>,
    ) -> HashMap<JobId, crate::allocation::NodeChoice> {
        ids.filter_map(|id| {
            let other = &self.jobs.get(id)?.spec.slurm.other;
            let tmp = other.contains_key("tmp");
            if !other.contains_key("nodelist") && !other.contains_key("exclude") && !tmp {
                return None;
            }
            let mut choice = crate::allocation::node_choice(other)
                .ok()
                .flatten()
                .unwrap_or_else(|| crate::allocation::NodeChoice {
                    only: (other.contains_key("nodelist") || other.contains_key("exclude"))
                        .then(Vec::new),
                    ..Default::default()
                });
            if tmp {
                // `--tmp`: only the nodes with that much temporary disk
                // (none, if the value no longer reads).
                let want = crate::allocation::tmp_mib(other).ok().flatten();
                let big: Vec<String> = self
                    .nodes
                    .values()
                    .filter(|n| want.is_some_and(|t| n.tmp_disk_mib >= t))
                    .filter(|n| choice.allows(&n.name))
                    .map(|n| n.name.clone())
                    .collect();
                choice.only = Some(big);
            }
            Some((*id, choice))
        })
        .collect()
    }

    /// Who runs on `node`, against `--exclusive` jobs: whether a job there
    /// holds it alone (or for its user), and, where `with_users` (some
    /// queued job asks for a node alone), the users of every job there.
    pub(super) fn occupancy(&self, node: &Node, with_users: bool) -> crate::launch::NodeOccupancy {
        let mut o = crate::launch::NodeOccupancy::default();
        if with_users {
            o.users = node
                .running
                .iter()
                .filter_map(|id| self.jobs.get(id))
                .map(|j| j.spec.uid)
                .collect();
        }
        for job in self
            .sharing_jobs
            .iter()
            .filter(|id| node.running.contains(id))
            .filter_map(|id| self.jobs.get(id))
        {
            match node_sharing(job) {
                Some(crate::launch::NodeSharing::Alone) => o.alone = true,
                Some(crate::launch::NodeSharing::UserOnly) => o.user_only = Some(job.spec.uid),
                None => {}
            }
        }
        o
    }
}
