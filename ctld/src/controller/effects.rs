//! Carrying out effects: the rows they change are written (in the order
//! the state changed), and then their node calls are sent.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use gsched_core::cluster::{AdminState, Cluster, Effect, Node, ReshapeOrder};
use gsched_core::job::JobId;
use gsched_core::outcome::SignalScope;
use gsched_core::wire::{
    DrainRequest, LaunchRequest, ReshapeRequest, SignalRequest, SuspendRequest,
};

use super::{unix_now, Controller, Rpc};
use crate::store::{JobRuntime, StoreError, Write};

/// What the effects of one operation come to: rows to write, then node
/// calls to send once they are written.
#[derive(Default)]
struct Carried {
    writes: Vec<Write>,
    rpcs: Vec<Rpc>,
}

/// Effects turned into rows (enqueued in the store, in the order the state
/// changed) and the node calls to send once those are written.
pub(super) struct Pending {
    written: Pin<Box<dyn Future<Output = Result<(), StoreError>> + Send>>,
    rpcs: Vec<Rpc>,
}

impl Controller {
    /// Persists the effects and then performs their RPCs. Rows are read fresh
    /// under the lock and enqueued before it is released, so the store always
    /// ends with the latest state of every job.
    pub async fn execute(self: &Arc<Self>, effects: Vec<Effect>) -> Result<(), StoreError> {
        if effects.is_empty() {
            return Ok(());
        }
        let pending = self.carry_all(&mut self.lock(), effects, unix_now());
        self.finish(pending).await
    }

    /// Turns effects into rows and node calls under the caller's lock of
    /// the cluster, and enqueues the rows before the lock is let go: the
    /// one path every operation's effects take, a submission's included.
    pub(super) fn carry_all(&self, c: &mut Cluster, effects: Vec<Effect>, now: i64) -> Pending {
        let mut carried = Carried::default();
        for e in effects {
            self.carry(c, e, now, &mut carried);
        }
        Pending {
            written: Box::pin(self.store.write(carried.writes)),
            rpcs: carried.rpcs,
        }
    }

    /// Waits until the rows are written, then sends the node calls.
    pub(super) async fn finish(self: &Arc<Self>, pending: Pending) -> Result<(), StoreError> {
        pending.written.await?;
        for rpc in pending.rpcs {
            let this = Arc::clone(self);
            tokio::spawn(async move { this.send(rpc).await });
        }
        Ok(())
    }

    /// The rows and node calls of one effect.
    fn carry(&self, c: &mut Cluster, effect: Effect, now: i64, out: &mut Carried) {
        match effect {
            Effect::Submitted { id } => {
                self.touch([id], now);
                // The script and environment go to the store and leave
                // memory: a launch (sent only after this write is
                // committed) and the script's readers fetch them there.
                let text = c.take_text(id);
                if let Some(j) = c.job(id) {
                    let mut row = j.clone();
                    if let Some(text) = text {
                        row.put_text(text);
                    }
                    out.writes.push(Write::NewJob(Box::new(row)));
                    out.writes.push(Write::Event {
                        time: now,
                        job_id: Some(id),
                        node: None,
                        kind: "submitted".into(),
                        detail: None,
                    });
                }
            }
            Effect::Accounts => {
                let stored = c.stored_accounts();
                out.writes.push(Write::Accounts(
                    serde_json::to_string(&stored).expect("serializable"),
                ));
            }
            Effect::JobSpec { id } => {
                self.touch([id], now);
                if let Some(j) = c.job(id) {
                    out.writes.push(Write::JobSpec(Box::new(j.clone())));
                }
            }
            Effect::Job { id, event } => {
                self.touch([id], now);
                if let Some(j) = c.job(id) {
                    out.writes
                        .push(Write::JobState(Box::new(JobRuntime::of(j))));
                    out.writes.push(Write::Event {
                        time: now,
                        job_id: Some(id),
                        node: j.node.clone(),
                        kind: j.state.as_str().to_string(),
                        detail: Some(event),
                    });
                }
            }
            Effect::Node { name } => {
                self.touch_nodes(now);
                if let Some(n) = c.node(&name) {
                    out.writes.push(Write::Node(Box::new(n.clone())));
                    out.writes.push(node_event(n, now));
                }
            }
            Effect::Launch { job, node, early } => {
                out.rpcs.extend(self.launch_rpc(c, job, node, early));
            }
            Effect::Signal {
                job,
                node,
                signal,
                cancel,
                scope,
            } => {
                if let Some(n) = c.node(&node) {
                    out.rpcs.push(Rpc::Signal {
                        url: n.url.clone(),
                        job,
                        req: SignalRequest {
                            signal,
                            cancel,
                            run: None,
                            scope,
                        },
                    });
                }
            }
            Effect::Reshape { node, order } => {
                if let Some(n) = c.node(&node) {
                    out.writes.push(reshape_event(&node, &order, now));
                    out.rpcs.push(Rpc::Reshape {
                        url: n.url.clone(),
                        node,
                        req: ReshapeRequest {
                            seq: order.seq,
                            gpu: order.gpu,
                            retire: order.retire,
                            create: order.create,
                        },
                    });
                }
            }
            Effect::Drain {
                node,
                instances,
                open_to,
                seq,
            } => {
                let req = DrainRequest {
                    instances,
                    seq,
                    open_to,
                };
                if let Some(url) = c.node(&node).map(|n| n.url.clone()) {
                    out.rpcs.push(Rpc::Drain { url, node, req });
                }
            }
            Effect::Suspend {
                job,
                node,
                run,
                suspend,
            } => {
                if let Some(n) = c.node(&node) {
                    out.rpcs.push(Rpc::Suspend {
                        url: n.url.clone(),
                        job,
                        req: SuspendRequest { run, suspend },
                    });
                }
            }
            Effect::StopRun { job, node, run } => {
                if let Some(n) = c.node(&node) {
                    out.writes.push(Write::Event {
                        time: now,
                        job_id: Some(job),
                        node: Some(node.clone()),
                        kind: "STOP_RUN".into(),
                        detail: Some(match run {
                            Some(r) => format!("run {r} is not the controller's; killed"),
                            None => "a run that is not the controller's; killed".into(),
                        }),
                    });
                    out.rpcs.push(Rpc::Signal {
                        url: n.url.clone(),
                        job,
                        req: SignalRequest {
                            signal: nix::sys::signal::Signal::SIGKILL as i32,
                            cancel: true,
                            run,
                            scope: SignalScope::Full,
                        },
                    });
                }
            }
        }
    }

    /// The launch of `job` on `node` (its batch node or a sister), with
    /// what the node needs to know beyond the job (`None`: the job or the
    /// node is gone).
    fn launch_rpc(&self, c: &Cluster, job: JobId, node: String, early: bool) -> Option<Rpc> {
        let (j, n) = (c.job(job)?, c.node(&node)?);
        // Once per job (a job on several nodes has a launch for each).
        if let (Some(start), false) = (j.start_time, j.is_sister(&node)) {
            self.metrics
                .queue_wait
                .observe((start - j.submit_time).max(0) as f64);
        }
        // Its batch node's instances, or a sister's.
        let instances = j
            .instances_on(&node)
            .iter()
            .filter_map(|u| {
                n.instances
                    .iter()
                    .find(|s| &s.instance.uuid == u)
                    .map(|s| s.instance.clone())
            })
            .collect();
        let learned = c.learned(job);
        let req = LaunchRequest {
            job: j.clone(),
            instances,
            cluster: self.config.cluster_name.clone(),
            partition: j
                .spec
                .partition
                .clone()
                .unwrap_or_else(|| self.config.partition.clone()),
            controller_url: self
                .config
                .controllers
                .clone()
                .unwrap_or_else(|| self.url.clone()),
            learned_footprint_mib: learned.mib,
            learned_gpu_share: learned.share,
            job_token: self.job_token(j),
            early,
            time_quota: c.time_quota(j),
            gpu_mem_cap_mib: c.gpu_mem_cap(j),
        };
        Some(Rpc::Launch {
            url: n.url.clone(),
            node,
            req: Box::new(req),
        })
    }
}

/// The event a node's new state is logged with.
fn node_event(n: &Node, now: i64) -> Write {
    Write::Event {
        time: now,
        job_id: None,
        node: Some(n.name.clone()),
        kind: match (n.up, n.admin.as_ref().map(|a| a.state)) {
            (false, _) | (true, Some(AdminState::Down)) => "NODE_DOWN",
            (true, Some(AdminState::Drain)) => "NODE_DRAIN",
            (true, None) => "NODE_UP",
        }
        .into(),
        detail: n.admin.as_ref().map(|a| a.reason.clone()),
    }
}

/// The event a re-partition order is logged with.
fn reshape_event(node: &str, order: &ReshapeOrder, now: i64) -> Write {
    Write::Event {
        time: now,
        job_id: None,
        node: Some(node.to_string()),
        kind: "RESHAPE".into(),
        detail: Some(format!(
            "gpu {}: retire {} for {}",
            order.gpu,
            order.retire.join(","),
            order
                .create
                .iter()
                .map(|s| format!("{}@{}", s.profile, s.start))
                .collect::<Vec<_>>()
                .join(",")
        )),
    }
}
