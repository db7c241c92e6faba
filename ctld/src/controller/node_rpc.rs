//! Sending effects to nodes: launches resent while in doubt, signals and
//! cancels until the node confirms, drain sets and re-partitions; each a
//! sealed call (`gsched_daemon::peer`).

use std::sync::Arc;
use std::time::Duration;

use gsched_core::cluster::{LaunchAnswer, LaunchNext};
use gsched_core::job::JobId;
use gsched_core::wire::{DrainRequest, LaunchRequest, SignalRequest, SuspendRequest};
use tracing::{warn, Instrument};

use super::job_text::TextFetch;
use super::{unix_now, Controller};
use crate::node_client::CallError;

impl Controller {
    // Boxed: `send` and `execute` call each other, and a boxed `Send` future
    // breaks the cycle for the compiler.
    pub(super) fn send(
        self: Arc<Self>,
        rpc: Rpc,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
        Box::pin(self.send_now(rpc))
    }

    /// Whether this controller may still call nodes: a leader that may
    /// have been superseded calls none (the nodes also refuse an older
    /// epoch once they know a newer one). Checked before every send,
    /// resends included.
    fn still_acting(&self, what: &str) -> bool {
        let acting = self.acting();
        if !acting {
            warn!(
                epoch = self.epoch(),
                call = what,
                "not calling a node: this controller is stepping down"
            );
        }
        acting
    }

    pub(super) async fn send_now(self: Arc<Self>, rpc: Rpc) {
        if !self.still_acting("any") {
            return;
        }
        match rpc {
            Rpc::Launch { url, node, req } => self.send_launch(url, node, req).await,
            Rpc::Drain { url, node, req } => self.send_drain(url, node, req).await,
            Rpc::Reshape { url, node, req } => self.send_reshape(url, node, req).await,
            Rpc::Suspend { url, job, req } => {
                // Sent once: the node's heartbeats say whether it took it,
                // and `Cluster::reconcile_suspensions` asks again if not.
                let res = self.nodes.suspend(&url, job, &req).await;
                match res {
                    Ok(r) if r.is_success() => {}
                    Ok(r) => {
                        warn!(job, status = %r.status, suspend = req.suspend, "node did not suspend or resume the job")
                    }
                    Err(e) => {
                        warn!(job, error = %e, "node unreachable to suspend or resume the job")
                    }
                }
            }
            Rpc::Signal { url, job, req } => self.send_signal(url, job, req).await,
        }
    }

    /// Delivers a signal or a cancel until the node confirms it, as long as
    /// the job runs: a cancel that cannot reach its node (a flood of
    /// connections, a restart) is sent again with backoff, never dropped
    /// while `gcancel` said it was done. A signal can also overtake the
    /// launch it follows: the node then does not know the job yet (404),
    /// so that is tried again for a little while.
    pub(super) async fn send_signal(&self, url: String, job: JobId, req: SignalRequest) {
        let running = || {
            self.lock()
                .job(job)
                .is_some_and(|j| j.state == gsched_core::JobState::Running)
        };
        let mut backoff = Duration::from_millis(250);
        let mut unknown = 0;
        loop {
            if !self.acting() {
                return;
            }
            let res = self.nodes.signal(&url, job, &req).await;
            match res {
                Ok(r) if r.is_success() => return,
                Ok(r) if r.status == reqwest::StatusCode::NOT_FOUND && unknown < 19 => {
                    unknown += 1;
                    if !running() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                Ok(r) => return warn!(job, status = %r.status, "node did not signal the job"),
                Err(e) => {
                    if !running() {
                        return;
                    }
                    warn!(job, error = %e, retry_in = ?backoff, "node unreachable for a signal; will send it again");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(10));
                }
            }
        }
    }

    /// Delivers a launch, sending it again while its delivery is in doubt
    /// (a launch is idempotent for its run); what each answer means is
    /// `Cluster::launch_answered`'s.
    pub(super) async fn send_launch(
        self: Arc<Self>,
        url: String,
        node: String,
        mut req: Box<LaunchRequest>,
    ) {
        let (id, run) = (req.job.id, req.job.run);
        let span = tracing::info_span!(
            "launch",
            job = id,
            run,
            instance = gsched_core::gpu::uuid_list(&req.instances)
        );
        let missing = match self
            .fill_text(&node, &mut req)
            .instrument(span.clone())
            .await
        {
            TextFetch::Ready => None,
            TextFetch::Settled => return,
            TextFetch::Missing(why) => Some(why),
        };
        let mut backoff = Duration::from_millis(500);
        let mut in_doubt = false;
        let effects = loop {
            if !self.still_acting("launch") {
                return;
            }
            if in_doubt && !self.lock().awaits_launch_on(id, run, &node) {
                // Settled meanwhile (confirmed, requeued or expired).
                return;
            }
            let answer = match &missing {
                Some(why) => LaunchAnswer::Failed(why.clone()),
                None => self.launch_once(&url, &req).instrument(span.clone()).await,
            };
            span.in_scope(|| match &answer {
                LaunchAnswer::Taken => {}
                LaunchAnswer::InDoubt => {
                    warn!(retry_in = ?backoff, "launch in doubt; will send it again")
                }
                other => warn!(answer = ?other, in_doubt, "launch not taken"),
            });
            let next = self
                .lock()
                .launch_answered(id, run, &node, answer, in_doubt, unix_now());
            match next {
                LaunchNext::Done(effects) => break effects,
                LaunchNext::LeaveToNode => {
                    span.in_scope(|| {
                        warn!("the node's registration, heartbeats or lease decide this launch")
                    });
                    return;
                }
                LaunchNext::Retry => {
                    in_doubt = true;
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(10));
                }
            }
        };
        if let Err(e) = self.execute(effects).await {
            warn!(job = id, error = %e, "could not record the launch's outcome");
        }
        self.wake.notify_one();
    }

    /// One send of a launch, and what its answer says.
    pub(super) async fn launch_once(&self, url: &str, req: &LaunchRequest) -> LaunchAnswer {
        let res = self.nodes.launch(url, req).await;
        let r = match res {
            Ok(r) if r.is_success() => return LaunchAnswer::Taken,
            Ok(r) => r,
            Err(e @ CallError::Unreachable(_)) => {
                warn!(error = %e, "node unreachable");
                return LaunchAnswer::NotDelivered;
            }
            Err(e @ CallError::NoAnswer(_)) => {
                // No answer, or one from something that could not prove it
                // is the node (it got only ciphertext): the node may still
                // come back, so the launch stays in doubt and is resent.
                warn!(error = %e, "no proven answer to the launch");
                return LaunchAnswer::InDoubt;
            }
        };
        let status = r.status;
        let why = r.error_text();
        match status {
            reqwest::StatusCode::SERVICE_UNAVAILABLE | reqwest::StatusCode::CONFLICT => {
                LaunchAnswer::NotNow(why)
            }
            reqwest::StatusCode::FORBIDDEN => LaunchAnswer::Refused(why),
            _ => LaunchAnswer::Failed(why),
        }
    }

    /// Pushes a node's drain set, retrying while it is still the newest
    /// for that node (a newer one, or the node going down, ends it; a node
    /// that registers again is sent its set afresh).
    pub(super) async fn send_drain(self: Arc<Self>, url: String, node: String, req: DrainRequest) {
        let mut backoff = Duration::from_millis(250);
        loop {
            if !self.still_acting("drain set") {
                return;
            }
            let res = self.nodes.drain(&url, &req).await;
            let error = match res {
                Ok(r) if r.is_success() => return,
                Ok(r) => format!("node answered {}", r.status),
                Err(e) => e.to_string(),
            };
            warn!(node = %node, seq = req.seq, %error, "could not push the drain set; will retry");
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(5));
            if !self.lock().drain_is_current(&node, req.seq) {
                return;
            }
        }
    }

    /// Sends a reshape order to its node (a node answers a resend of an
    /// order it took as it did the first). One the node refuses is settled
    /// as undone (its instances are in use again); one that cannot reach
    /// the node is sent again while it is still in flight (a node that
    /// registers again forgets it).
    pub(super) async fn send_reshape(
        self: Arc<Self>,
        url: String,
        node: String,
        req: gsched_core::wire::ReshapeRequest,
    ) {
        let mut backoff = Duration::from_millis(250);
        loop {
            if !self.still_acting("reshape") {
                return;
            }
            let res = self.nodes.reshape(&url, &req).await;
            let refused = match res {
                Ok(r) if r.is_success() => return,
                Ok(r) if r.status.is_client_error() => {
                    Some(format!("node refused it: {}", r.error_text()))
                }
                Ok(r) => {
                    warn!(node = %node, seq = req.seq, status = %r.status, "could not send the reshape; will retry");
                    None
                }
                Err(e) => {
                    warn!(node = %node, seq = req.seq, error = %e, "could not send the reshape; will retry");
                    None
                }
            };
            if let Some(why) = refused {
                warn!(node = %node, seq = req.seq, %why, "reshape not done");
                let done = self.lock().reshape_done(&node, req.seq, &[], Vec::new());
                if let Ok(effects) = done {
                    if let Err(e) = self.execute(effects).await {
                        warn!(error = %e, "could not record the undone reshape");
                    }
                }
                return;
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(5));
            let in_flight = self
                .lock()
                .reshapes_on(&node)
                .iter()
                .any(|o| o.seq == req.seq);
            if !in_flight {
                return;
            }
        }
    }
}

/// A node call an effect comes to.
pub(super) enum Rpc {
    Launch {
        url: String,
        node: String,
        req: Box<LaunchRequest>,
    },
    Drain {
        url: String,
        node: String,
        req: DrainRequest,
    },
    Reshape {
        url: String,
        node: String,
        req: gsched_core::wire::ReshapeRequest,
    },
    Signal {
        url: String,
        job: JobId,
        req: SignalRequest,
    },
    Suspend {
        url: String,
        job: JobId,
        req: SuspendRequest,
    },
}
