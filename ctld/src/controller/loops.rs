//! The controller's loops: launch passes, node liveness, utilization
//! samples and retention of finished jobs.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::warn;

use super::{unix_now, Controller};

/// Seconds between utilization samples, and how many are kept (an hour).
pub const UTIL_INTERVAL: u64 = 10;
pub const UTIL_SAMPLES: usize = 360;

/// The cluster's GPU use at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct UtilSample {
    pub time: i64,
    pub memory_total_mib: u64,
    /// Held by isolated jobs or reserved by shared tasks.
    pub memory_reserved_mib: u64,
    /// In use as the GPUs report it (instances whose node can read it).
    pub memory_used_mib: u64,
    pub isolated_instances: u32,
    pub shared_tasks: u32,
    pub running_jobs: u32,
    pub pending_jobs: u32,
}

impl Controller {
    /// The cluster's GPU use now.
    pub fn sample(&self, now: i64) -> UtilSample {
        let c = self.lock();
        let mut s = UtilSample {
            time: now,
            memory_total_mib: 0,
            memory_reserved_mib: 0,
            memory_used_mib: 0,
            isolated_instances: 0,
            shared_tasks: 0,
            running_jobs: c.running_count() as u32,
            pending_jobs: c.pending_count() as u32,
        };
        for n in c.nodes().filter(|n| n.up) {
            for i in &n.instances {
                s.memory_total_mib += i.instance.memory_mib;
                if i.holder().is_some() {
                    s.isolated_instances += 1;
                }
                s.memory_reserved_mib += i.held_bytes().div_ceil(1 << 20);
                s.memory_used_mib += i.used_bytes.unwrap_or(0).div_ceil(1 << 20);
                s.shared_tasks += i.active_tasks;
            }
        }
        s
    }

    /// The samples of the last hour, oldest first.
    pub fn utilization(&self) -> Vec<UtilSample> {
        self.utilization
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .copied()
            .collect()
    }

    /// Samples the cluster's use every UTIL_INTERVAL seconds.
    pub async fn utilization_loop(self: Arc<Self>) {
        let mut tick = tokio::time::interval(Duration::from_secs(UTIL_INTERVAL));
        loop {
            tick.tick().await;
            let s = self.sample(unix_now());
            let mut u = self.utilization.lock().unwrap_or_else(|p| p.into_inner());
            if u.len() == UTIL_SAMPLES {
                u.pop_front();
            }
            u.push_back(s);
        }
    }

    /// Lets finished jobs older than `min_job_age` leave memory (they stay in
    /// the database, where accounting reads them). Off when it is 0.
    pub async fn retention_loop(self: Arc<Self>) {
        let age = self.config.min_job_age;
        if age == 0 {
            return;
        }
        let mut tick = tokio::time::interval(Duration::from_secs((age / 2).clamp(1, 30)));
        loop {
            tick.tick().await;
            let gone = self.lock().purge_finished(unix_now(), age);
            if gone.is_empty() {
                continue;
            }
            let mut changed = self.changed.lock().unwrap_or_else(|p| p.into_inner());
            for id in &gone {
                changed.remove(id);
            }
            tracing::debug!(jobs = gone.len(), "finished jobs left memory");
        }
    }

    /// The launch loop: a pass whenever something changed, and at least once a second.
    pub async fn scheduler_loop(self: Arc<Self>) {
        loop {
            tokio::select! {
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
            self.launch_pass().await;
        }
    }

    /// One launch pass, its decisions persisted and their launches sent.
    pub async fn launch_pass(self: &Arc<Self>) {
        let pass = Instant::now();
        let effects = self.lock().schedule(unix_now());
        self.metrics
            .scheduler_pass
            .observe(pass.elapsed().as_secs_f64());
        if let Err(e) = self.execute(effects).await {
            warn!(error = %e, "could not persist launch decisions");
        }
    }

    /// Marks nodes down that stopped sending heartbeats, and loses the jobs of
    /// nodes that never came back after a controller restart.
    pub async fn liveness_loop(self: Arc<Self>) {
        let timeout = Duration::from_secs(self.config.node_timeout.max(1));
        let mut tick = tokio::time::interval((timeout / 3).max(Duration::from_millis(200)));
        loop {
            tick.tick().await;
            self.check_liveness(timeout).await;
        }
    }

    /// Marks down the nodes not heard from within `timeout`, and expires
    /// the launches no node confirmed within it.
    pub async fn check_liveness(self: &Arc<Self>, timeout: Duration) {
        let stale: Vec<String> = {
            let seen = self.last_seen.lock().unwrap_or_else(|p| p.into_inner());
            let c = self.lock();
            c.nodes()
                .filter(|n| n.up || !n.running.is_empty())
                .filter(|n| seen.get(&n.name).copied().unwrap_or(self.started).elapsed() > timeout)
                .map(|n| n.name.clone())
                .collect()
        };
        let expired = self
            .lock()
            .expire_launches(unix_now(), timeout.as_secs() as i64);
        if let Err(e) = self.execute(expired).await {
            warn!(error = %e, "could not persist expired launches");
        }
        for name in stale {
            warn!(node = %name, "node missed its heartbeats; marking it down");
            let effects = self.lock().node_down(&name, unix_now());
            if let Err(e) = self.execute(effects).await {
                warn!(error = %e, "could not persist node failure");
            }
            self.wake.notify_one();
        }
    }
}
