//! The node's instances as the probe server holds them: isolated holds,
//! drains, re-partitioning, MPS state and the processes bound to each.

use gsched_core::job::JobId;
use tracing::{debug, info, warn};

use super::{now_ms, ProbeServer, UNPLACED_POLL};

impl ProbeServer {
    /// An isolated job takes `uuid`: no new placements there from now on.
    /// Returns whether anything still runs on it: shared tasks, or
    /// processes the GPU reports there (see [`Self::drained`]).
    pub fn hold(&self, uuid: &str, job: JobId) -> bool {
        let tasks = self.lock().node.hold(uuid, job);
        tasks || !self.processes_on(uuid).is_empty()
    }

    /// Returns true once isolated job `job` holds `uuid` (an isolated job
    /// that held it before has ended), no shared task is left there and the
    /// GPU reports no process there: a process that bypassed the
    /// interception has no placement, but an isolated job does not start
    /// next to it either. Returns false if `job` ends meanwhile.
    pub async fn drained_for(&self, uuid: &str, job: JobId) -> bool {
        let mut said = false;
        loop {
            let notified = self.changed.notified();
            let (running, free) = {
                let st = self.lock();
                (st.jobs.contains_key(&job), st.node.free_for(uuid, job))
            };
            if !running {
                return false; // it ended while it waited
            }
            if !free {
                debug!(
                    instance = uuid,
                    "waiting for shared tasks or the isolated job before to leave the instance"
                );
                notified.await;
                continue;
            }
            // NVML and the cgroups' process lists: off the async threads.
            let unplaced = match self.processes_on.clone() {
                Some(f) => {
                    let u = uuid.to_string();
                    // The job's own processes (one that bypassed the gate
                    // where no device rules hold it) are not waited for.
                    tokio::task::spawn_blocking(move || {
                        f(&u)
                            .unwrap_or_default()
                            .into_iter()
                            .filter(|&(_, owner)| owner != job)
                            .map(|(pid, _)| pid)
                            .collect::<Vec<u32>>()
                    })
                    .await
                    .unwrap_or_default()
                }
                None => Vec::new(),
            };
            if unplaced.is_empty() {
                return true;
            }
            if !std::mem::replace(&mut said, true) {
                warn!(
                    instance = uuid,
                    pids = ?unplaced,
                    "processes without a placement run on the instance (a job that bypassed the interception?): the isolated job waits until they end"
                );
            }
            let _ = tokio::time::timeout(UNPLACED_POLL, notified).await;
        }
    }

    /// Marks an instance as being re-partitioned (no new process is bound
    /// there), or back in use.
    pub fn set_retiring(&self, uuid: &str, retiring: bool) {
        let mut st = self.lock();
        st.node.set_retiring(uuid, retiring, now_ms());
        self.dispatch(&mut st);
    }

    /// Whether nothing of a shared job uses `uuid` (no task, no bound
    /// process) and no isolated job holds it.
    pub fn idle(&self, uuid: &str) -> bool {
        let st = self.lock();
        st.node.tasks().is_idle(uuid) && st.node.holder(uuid).is_none()
    }

    /// Drops an idle instance the node destroyed; false (and nothing
    /// changes) when it is not idle.
    pub fn remove_instance(&self, uuid: &str) -> bool {
        self.lock().node.remove_instance(uuid)
    }

    /// Adds an instance the node created; waiting tasks may go there.
    pub fn add_instance(&self, i: &gsched_core::gpu::Instance) {
        let mut st = self.lock();
        st.node.add_instance(i, now_ms());
        self.dispatch(&mut st);
        drop(st);
        self.changed.notify_waiters();
    }

    /// Sets (or, with `None`, forgets) the MPS pipe directory processes
    /// placed on `uuid` are given.
    pub fn set_mps_pipe(&self, uuid: &str, pipe_dir: Option<String>) {
        let mut m = self.mps.write().unwrap_or_else(|e| e.into_inner());
        match pipe_dir {
            Some(d) => m.insert(uuid.to_string(), d),
            None => m.remove(uuid),
        };
    }

    /// Whether `uuid` has shared tasks on it now.
    pub fn busy(&self, uuid: &str) -> bool {
        self.lock().node.tasks().tasks_on(uuid) > 0
    }

    /// The instances gctld drains for isolated jobs (the full set), as
    /// drain set number `seq`: a set older than the newest applied since
    /// the node last registered changes nothing; `open_to`, the running
    /// jobs a drained instance still takes tasks of. Returns whether it was
    /// applied.
    pub fn set_drained(
        &self,
        uuids: &[String],
        open_to: &std::collections::BTreeMap<String, Vec<JobId>>,
        seq: u64,
    ) -> bool {
        let mut st = self.lock();
        let applied = st.node.set_drained(uuids, open_to, seq, now_ms());
        self.dispatch(&mut st);
        applied
    }

    /// The node registered: the controller numbers drain sets afresh
    /// (a restarted controller starts again from 1).
    pub fn reset_drain_seq(&self) {
        self.lock().node.reset_drain_seq();
    }

    /// The processes bound to instance `uuid` (job, pid).
    pub fn bound_to(&self, uuid: &str) -> Vec<(JobId, u32)> {
        self.lock().node.tasks().processes_on(uuid)
    }

    /// The processes bound to instance `uuid` now or until less than
    /// [`gsched_core::placement::RECENTLY_GONE_MS`] ago, and not gone
    /// before `gone_since` (job, pid): an MPS server's log names the
    /// clients it tore down, which are gone by the time it is read.
    pub fn bound_or_recent(&self, uuid: &str, gone_since: Option<i64>) -> Vec<(JobId, u32)> {
        self.lock().node.bound_or_recent(uuid, now_ms(), gone_since)
    }

    /// Says whether an instance's MPS server is down: while it is, no new
    /// process of a shared job is placed there (its log says so once per
    /// change).
    pub fn set_mps_down(&self, uuid: &str, down: bool) {
        let mut st = self.lock();
        if !st.node.set_mps_down(uuid, down, now_ms()) {
            return;
        }
        if down {
            warn!(instance = %uuid, "the instance's MPS server is down: no new shared work is placed there until it is back");
        } else {
            info!(instance = %uuid, "the instance's MPS server is back: shared work is placed there again");
        }
        self.dispatch(&mut st);
        drop(st);
        self.changed.notify_waiters();
    }
}
