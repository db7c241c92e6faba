//! What nodes report between launches: the use of their instances, tasks
//! begun and waiting, GPU memory peaks, MPS and re-partitioning progress.

use std::collections::{HashMap, HashSet};

use super::{Cluster, ClusterError, Effect, InstanceSlot, Node};
use crate::gpu::Instance;
use crate::job::JobId;

/// How many times a job's `WaitingForGpu` reason may change on one node:
/// a job whose processes keep coming and going would otherwise write an
/// event every few heartbeats for its whole run.
pub const MOST_WAITING_CHANGES: u32 = 8;

/// Of the shared jobs on a node (not stored): since when each has had a
/// task waiting for a placement, without a break in the node's reports,
/// and how often its `WaitingForGpu` reason changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WaitingJobs {
    since: HashMap<JobId, i64>,
    changes: HashMap<JobId, u32>,
}

impl Cluster {
    /// Records the shared-task use a node reported. Returns whether an
    /// instance drained for an isolated job became free (a launch may follow).
    pub fn update_instance_use(
        &mut self,
        node: &str,
        uses: &std::collections::BTreeMap<String, crate::wire::InstanceUse>,
    ) -> bool {
        let Some(n) = self.nodes.get_mut(node) else {
            return false;
        };
        let mut freed = false;
        for slot in &mut n.instances {
            let u = uses.get(&slot.instance.uuid).cloned().unwrap_or_default();
            freed |= slot.draining_for.is_some() && slot.active_tasks > 0 && u.tasks == 0;
            slot.active_tasks = u.tasks;
            slot.reserved_bytes = u.reserved_bytes;
            slot.warps = u.warps;
            slot.job_bytes = u.jobs;
            slot.used_bytes = u.used_bytes;
            slot.processes = u.processes;
        }
        freed
    }

    /// What `node` last said about room for new shared processes and its
    /// available host memory (MiB).
    /// Returns whether the room grew (a launch pass may start more).
    pub fn set_host_room(
        &mut self,
        node: &str,
        shared_room: Option<crate::wire::SharedRoom>,
        mem_available_mib: Option<u64>,
    ) -> bool {
        let Some(n) = self.nodes.get_mut(node) else {
            return false;
        };
        let grew = match (n.shared_room, shared_room) {
            (Some(before), Some(now)) => now.compute > before.compute,
            (None, None) => false,
            _ => true,
        };
        n.shared_room = shared_room;
        n.mem_available_mib = mem_available_mib;
        grew
    }

    /// The shared tasks waiting for a place on `node`, as it last said at
    /// `now`. A shared job running there alone (on one node) shows reason
    /// `WaitingForGpu` once two reports in a row say one of its tasks
    /// waits (a wait shorter than a heartbeat is not worth a write), and
    /// none once none does; each change is returned as an effect to
    /// record, at most [`MOST_WAITING_CHANGES`] per job and node.
    pub fn set_waiting_tasks(
        &mut self,
        node: &str,
        waiting: Vec<crate::wire::WaitingTask>,
        now: i64,
    ) -> Vec<Effect> {
        use super::early_start::WAITING_FOR_GPU;
        let Some(n) = self.nodes.get_mut(node) else {
            return Vec::new();
        };
        let before: HashSet<JobId> = n.waiting_tasks.iter().map(|w| w.job).collect();
        n.waiting_tasks = waiting;
        n.waiting_reports += 1;
        let now_waiting: HashSet<JobId> = n.waiting_tasks.iter().map(|w| w.job).collect();
        let waits: HashSet<JobId> = now_waiting.intersection(&before).copied().collect();
        let log = &mut n.waiting_jobs;
        log.since.retain(|j, _| now_waiting.contains(j));
        for j in &now_waiting {
            log.since.entry(*j).or_insert(now);
        }
        log.changes.retain(|j, _| n.shared.contains(j));
        let mut effects = Vec::new();
        for id in &n.shared {
            let Some(job) = self.jobs.get_mut(id) else {
                continue;
            };
            // A job on several nodes is told about by none of them alone.
            if job.state != crate::job::JobState::Running || !job.sisters.is_empty() {
                continue;
            }
            let shows = job.reason.as_deref() == Some(WAITING_FOR_GPU);
            if shows && now_waiting.contains(id) {
                continue;
            }
            let changes = log.changes.entry(*id).or_default();
            let event = match (waits.contains(id), shows) {
                // Not over another reason (a suspended job's), and not
                // again and again for a job whose tasks come and go.
                (true, false) if job.reason.is_none() && *changes < MOST_WAITING_CHANGES => {
                    job.reason = Some(WAITING_FOR_GPU.into());
                    format!("waits on {node} for a GPU placement")
                }
                (false, true) => {
                    job.reason = None;
                    format!("placed on a GPU instance of {node}")
                }
                _ => continue,
            };
            *changes += 1;
            effects.push(Effect::Job { id: *id, event });
        }
        effects
    }

    /// Notes reservations a node reported as begun (task records arrive
    /// every 100 ms; heartbeats only every few seconds): an instance the
    /// controller thought idle is marked busy at once, so an isolated job
    /// is not sent there to wait for a drain while an idle instance is
    /// free; and the room its instances had for new shared processes is
    /// less by the demand the task was placed with, so that a job placed
    /// since is not counted as on its way there too. The next heartbeat
    /// replaces these counts with the node's own.
    pub fn note_tasks_begun(&mut self, node: &str, records: &[crate::probe::TaskRecord]) {
        let Some(n) = self.nodes.get_mut(node) else {
            return;
        };
        for r in records.iter().filter(|r| r.end_ms.is_none()) {
            let Some(slot) = n
                .instances
                .iter_mut()
                .find(|s| s.instance.uuid == r.instance)
            else {
                continue;
            };
            if let std::collections::btree_map::Entry::Vacant(e) = slot.job_bytes.entry(r.job) {
                e.insert(r.bytes);
                slot.reserved_bytes += r.bytes;
                slot.active_tasks = slot.active_tasks.max(1);
                if let Some(room) = n.shared_room.as_mut() {
                    room.compute = room.compute.saturating_sub(r.share);
                }
            }
        }
    }

    /// A process of `job` reported its peak GPU memory; the job keeps the
    /// largest (MiB).
    pub fn record_peak(&mut self, job: JobId, bytes: u64) -> Vec<Effect> {
        let Some(j) = self.jobs.get_mut(&job) else {
            return Vec::new();
        };
        let mib = bytes.div_ceil(1024 * 1024);
        if j.gpu_mem_peak.is_some_and(|p| p >= mib) {
            return Vec::new();
        }
        j.gpu_mem_peak = Some(mib);
        self.footprints.note(j);
        vec![Effect::Job {
            id: job,
            event: "gpu_peak".into(),
        }]
    }

    /// Marks a node's instance as being re-partitioned (no isolated job is
    /// given it) or back in use. Returns whether the instance exists.
    pub fn set_retiring(&mut self, node: &str, uuid: &str, retiring: bool) -> bool {
        let slot = self
            .nodes
            .get_mut(node)
            .and_then(|n| n.instances.iter_mut().find(|s| s.instance.uuid == uuid));
        match slot {
            Some(s) => {
                s.retiring = retiring;
                true
            }
            None => false,
        }
    }

    /// Replaces instances of a node after a re-partition: `remove` go (each
    /// must be free of isolated jobs), `add` come. Refused, changing
    /// nothing, if the node is unknown or an instance to remove is unknown
    /// or held.
    pub fn reshape_node(
        &mut self,
        node: &str,
        remove: &[String],
        add: Vec<Instance>,
    ) -> Result<(), ClusterError> {
        let n = self
            .nodes
            .get_mut(node)
            .ok_or_else(|| ClusterError::UnknownNode(node.into()))?;
        for uuid in remove {
            let slot = n.instances.iter().find(|s| &s.instance.uuid == uuid);
            match slot {
                Some(s) if s.isolated_owner.is_none() && s.draining_for.is_none() => {}
                _ => return Err(ClusterError::InstanceBusy(uuid.clone())),
            }
        }
        n.instances.retain(|s| !remove.contains(&s.instance.uuid));
        n.instances.extend(add.into_iter().map(InstanceSlot::new));
        Ok(())
    }

    /// Records the MPS daemon states a node reported. Returns whether any
    /// changed.
    pub fn update_mps(
        &mut self,
        node: &str,
        states: &std::collections::BTreeMap<String, crate::gpu::MpsState>,
    ) -> bool {
        let Some(n) = self.nodes.get_mut(node) else {
            return false;
        };
        let mut changed = false;
        for slot in &mut n.instances {
            if let (Some(m), Some(s)) =
                (slot.instance.mps.as_mut(), states.get(&slot.instance.uuid))
            {
                changed |= m.state != *s;
                m.state = *s;
            }
        }
        changed
    }

    /// The shared jobs running on `n` that wait for a GPU placement as far
    /// as the controller can tell: (those the node reported waiting,
    /// those started in the last `launch::SETUP_SECS` with no reservation
    /// yet, on their way to their first GPU call).
    pub(super) fn shared_unplaced(&self, n: &Node, now: i64) -> (u32, u32) {
        let waiting: HashSet<JobId> = n.waiting_tasks.iter().map(|w| w.job).collect();
        let (mut w, mut stuck, mut starting) = (0u32, 0u32, 0u32);
        for id in &n.shared {
            if waiting.contains(id) {
                let since = n.waiting_jobs.since.get(id).copied().unwrap_or(now);
                if now.saturating_sub(since) < crate::launch::STUCK_WAITING_SECS {
                    w += 1;
                } else {
                    stuck += 1;
                }
                continue;
            }
            let young = self
                .jobs
                .get(id)
                .and_then(|j| j.start_time)
                .is_some_and(|t| now.saturating_sub(t) < crate::launch::SETUP_SECS);
            if young && !n.instances.iter().any(|s| s.job_bytes.contains_key(id)) {
                starting += 1;
            }
        }
        // Up to start-ahead jobs stuck for long hold nobody back: others
        // start past them, once; more stuck ones count again, so jobs do
        // not pile up at a GPU that takes nothing.
        let ahead = self.shared_start_ahead.unwrap_or(0);
        (w.saturating_add(stuck.saturating_sub(ahead)), starting)
    }
}
