//! An administrator's hold on a node (`scontrol update NodeName=X
//! State=DRAIN|DOWN|RESUME Reason=...`): a drained node finishes its jobs
//! and takes no new ones; a node set down takes none and loses the jobs on
//! it (killed there; requeued where they allow it, NODE_FAIL otherwise);
//! resume opens it again.

use super::{Cluster, ClusterError, Effect};
use crate::job::{JobId, JobState};

pub use crate::wire::{AdminState, NodeAdmin, NodeStateChange};

/// The longest reason kept.
pub const MAX_REASON_LEN: usize = 256;

impl Cluster {
    /// Applies an administrator's change to node `name` (by user `by`).
    pub fn set_node_state(
        &mut self,
        name: &str,
        change: &NodeStateChange,
        by: &str,
        now: i64,
    ) -> Result<Vec<Effect>, ClusterError> {
        if let NodeStateChange::Drain { reason } | NodeStateChange::Down { reason } = change {
            if reason.trim().is_empty() {
                return Err(ClusterError::Refused(
                    "You must specify a reason when DOWNING or DRAINING a node. Request denied"
                        .into(),
                ));
            }
            if reason.len() > MAX_REASON_LEN || reason.chars().any(char::is_control) {
                return Err(ClusterError::Refused(format!(
                    "a node's reason must be at most {MAX_REASON_LEN} printable characters"
                )));
            }
        }
        let node = self
            .nodes
            .get_mut(name)
            .ok_or_else(|| ClusterError::UnknownNode(name.into()))?;
        let mut effects = vec![Effect::Node { name: name.into() }];
        node.admin = match change {
            NodeStateChange::Resume => None,
            NodeStateChange::Drain { reason } | NodeStateChange::Down { reason } => {
                Some(NodeAdmin {
                    state: if matches!(change, NodeStateChange::Down { .. }) {
                        AdminState::Down
                    } else {
                        AdminState::Drain
                    },
                    reason: reason.trim().to_string(),
                    by: by.to_string(),
                    since: now,
                })
            }
        };
        if let NodeStateChange::Down { reason } = change {
            let running: Vec<JobId> = node.running.iter().copied().collect();
            let why = format!("node {name} set down: {}", reason.trim());
            for id in running {
                effects.extend(self.stop_for_down(id, name, &why, now));
            }
        }
        Ok(effects)
    }

    /// A job running on a node set down: requeued where it allows it (it
    /// starts again only once the node reports this run ended, as with
    /// `scontrol requeue`), NODE_FAIL otherwise; its processes are killed
    /// there either way. A NODE_FAIL run is remembered as lost with its
    /// node (`runs.rs`): if it ended on its own before the kill reached it,
    /// the node's report gives the job its real end.
    fn stop_for_down(&mut self, id: JobId, node: &str, why: &str, now: i64) -> Vec<Effect> {
        let Some(job) = self.jobs.get(&id) else {
            return vec![];
        };
        if job.state != JobState::Running {
            return vec![];
        }
        // One being cancelled ends CANCELLED, as users already see it.
        let cancelling = job.cancelling();
        if job.spec.requeues() && !cancelling {
            let mut effects = self.requeue(id, now).unwrap_or_default();
            if let Some(j) = self.jobs.get_mut(&id) {
                j.reason = Some("NodeDown".into());
            }
            effects.push(Effect::Job {
                id,
                event: format!("requeued: {why}"),
            });
            return effects;
        }
        let run = job.run;
        // Its batch node (this one, or another where this is a sister).
        let batch = job.node.clone().unwrap_or_else(|| node.to_string());
        // Remembered as lost with its node: stopped there when the node is
        // back (and, not cancelled, given its real end if it had one).
        self.note_lost_run(id);
        let mut stops = self.release(id);
        // What it ran until now counts, as for any end.
        stops.extend(self.charge(id, now));
        let job = self.jobs.get_mut(&id).expect("checked above");
        let state = if cancelling {
            job.end_cancelled(now);
            JobState::Cancelled
        } else {
            job.transition(JobState::NodeFail, now)
                .expect("running job");
            job.reason = Some(why.to_string());
            JobState::NodeFail
        };
        let mut effects = vec![
            Effect::Job {
                id,
                event: format!("ended {state}: {why}"),
            },
            // The run is no longer the controller's: killed, its end
            // (cancelled) changes nothing.
            Effect::StopRun {
                job: id,
                node: batch,
                run: Some(run),
            },
        ];
        effects.extend(stops);
        effects
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::testkit::{cluster, launch, spec};

    #[test]
    fn a_drained_node_finishes_its_jobs_and_takes_no_new_ones() {
        let mut c = cluster();
        let (a, _) = c.submit(spec("a", false), 0).unwrap();
        assert_eq!(launch(&mut c, 1), [a]);
        let drain = NodeStateChange::Drain {
            reason: "bad fan".into(),
        };
        c.set_node_state("n1", &drain, "root", 2).unwrap();
        assert_eq!(c.node("n1").unwrap().state_name(), "DRAINING");
        let (b, _) = c.submit(spec("b", false), 3).unwrap();
        assert!(launch(&mut c, 4).is_empty());
        assert_eq!(c.job(a).unwrap().state, JobState::Running);
        let run = c.job(a).unwrap().run;
        c.job_ended("n1", &crate::cluster::testkit::ended(a, run, 0, 5))
            .unwrap();
        assert_eq!(c.node("n1").unwrap().state_name(), "DRAINED");
        assert!(launch(&mut c, 6).is_empty());
        c.set_node_state("n1", &NodeStateChange::Resume, "root", 7)
            .unwrap();
        assert_eq!(launch(&mut c, 8), [b]);
    }

    #[test]
    fn a_node_set_down_loses_its_jobs_and_kills_them_there() {
        let mut c = cluster();
        let (kept, _) = c.submit(spec("kept", true), 0).unwrap();
        let (lost, _) = c.submit(spec("lost", false), 0).unwrap();
        launch(&mut c, 1);
        let down = NodeStateChange::Down {
            reason: "reboot".into(),
        };
        let fx = c.set_node_state("n1", &down, "root", 2).unwrap();
        // Killed there: the requeued one as scontrol requeue does it, the
        // other as a run no longer the controller's.
        assert!(fx
            .iter()
            .any(|e| matches!(e, Effect::Signal { job, cancel: true, .. } if *job == kept)));
        assert!(fx
            .iter()
            .any(|e| matches!(e, Effect::StopRun { job, run: Some(_), .. } if *job == lost)));
        // Requeued where it allows it, NODE_FAIL otherwise.
        assert_eq!(c.job(kept).unwrap().state, JobState::Pending);
        assert_eq!(c.job(lost).unwrap().state, JobState::NodeFail);
        assert!(c
            .job(lost)
            .unwrap()
            .reason
            .as_deref()
            .unwrap()
            .contains("reboot"));
        assert_eq!(c.node("n1").unwrap().state_name(), "DOWN");
        assert!(launch(&mut c, 3).is_empty());
        // Back: the requeued job waits for its old run's end before it
        // starts again; the failed one stays failed when its end comes.
        c.set_node_state("n1", &NodeStateChange::Resume, "root", 4)
            .unwrap();
        assert!(launch(&mut c, 5).is_empty(), "old run not yet ended");
        // (Both were killed by the stop: their ends come back cancelled.)
        for id in [kept, lost] {
            let mut killed = crate::cluster::testkit::ended(id, 1, 0, 6);
            killed.outcome = crate::outcome::ProcessOutcome {
                exit_code: None,
                signal: Some(9),
                cause: crate::outcome::EndCause::Cancelled,
            };
            let _ = c.job_ended("n1", &killed);
        }
        assert_eq!(launch(&mut c, 7), [kept]);
        assert_eq!(c.job(lost).unwrap().state, JobState::NodeFail);
    }

    #[test]
    fn a_run_that_ended_on_its_own_before_the_kill_keeps_its_real_end() {
        use crate::outcome::{EndCause, ProcessOutcome};
        let mut c = cluster();
        let (done, _) = c.submit(spec("done", false), 0).unwrap();
        let (killed, _) = c.submit(spec("killed", false), 0).unwrap();
        launch(&mut c, 1);
        let down = NodeStateChange::Down { reason: "r".into() };
        c.set_node_state("n1", &down, "root", 2).unwrap();
        // One had exited 0 before the stop arrived; the stop killed the other.
        c.job_ended("n1", &crate::cluster::testkit::ended(done, 1, 0, 2))
            .unwrap();
        let mut cancelled = crate::cluster::testkit::ended(killed, 1, 0, 3);
        cancelled.outcome = ProcessOutcome {
            exit_code: None,
            signal: Some(9),
            cause: EndCause::Cancelled,
        };
        let _ = c.job_ended("n1", &cancelled);
        assert_eq!(c.job(done).unwrap().state, JobState::Completed);
        assert_eq!(c.job(killed).unwrap().state, JobState::NodeFail);
    }

    #[test]
    fn a_reason_is_required_and_unknown_nodes_are_refused() {
        let mut c = cluster();
        let e = c
            .set_node_state(
                "n1",
                &NodeStateChange::Drain { reason: " ".into() },
                "root",
                1,
            )
            .unwrap_err();
        assert!(e.to_string().contains("specify a reason"), "{e}");
        assert!(c
            .set_node_state("n9", &NodeStateChange::Resume, "root", 1)
            .is_err());
    }
}
