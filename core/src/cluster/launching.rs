//! Launches and their confirmation. A job given a node is RUNNING with
//! `launching` set (Slurm's CONFIGURING), and is persisted so before the
//! launch is sent. The node confirms it by answering the launch, or by
//! reporting the run in a heartbeat or registration. A launch that is never
//! confirmed (the node did not have it when it registered, could not be
//! reached, or was declared down first) puts the job back in the queue
//! without counting a restart: as far as anyone knows it never started, and
//! a node that did start it has fenced itself by the time it is declared
//! down (see `crate::fence`).

use super::{Cluster, Effect};
use crate::job::{JobId, JobState};

/// What came of sending a launch to its node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LaunchAnswer {
    /// The node has the run (started now, or it had it already).
    Taken,
    /// Not taken now: the node holds no lease, or still has another run of
    /// the job.
    NotNow(String),
    /// Refused for a reason the user can act on (the run is not there).
    Refused(String),
    /// The node failed to start it (an error of its own).
    Failed(String),
    /// Never delivered: the connection was refused.
    NotDelivered,
    /// Maybe delivered: timed out or cut off after sending.
    InDoubt,
}

/// What the sender of a launch does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LaunchNext {
    /// Settled: carry out these effects.
    Done(Vec<Effect>),
    /// Send the same launch again (it is idempotent for its run).
    Retry,
    /// Stop sending and leave the job CONFIGURING: the node's registration,
    /// heartbeats, lease or the launch's expiry settle it.
    LeaveToNode,
}

impl Cluster {
    /// Settles a launch by its node's answer. `in_doubt`: an earlier send of
    /// the same launch may have been delivered, so a later refusal proves
    /// nothing (gnoded may have started the run and died, the run living on
    /// under its shepherd); only a refusal the user can act on still fails
    /// the job.
    pub fn launch_answered(
        &mut self,
        id: JobId,
        run: u32,
        node: &str,
        answer: LaunchAnswer,
        in_doubt: bool,
        now: i64,
    ) -> LaunchNext {
        match answer {
            LaunchAnswer::Taken => LaunchNext::Done(self.launch_confirmed(id, run)),
            LaunchAnswer::InDoubt if self.awaits_launch_on(id, run, node) => LaunchNext::Retry,
            LaunchAnswer::InDoubt => LaunchNext::Done(vec![]),
            LaunchAnswer::Refused(why) => LaunchNext::Done(self.launch_refused(id, why, now)),
            LaunchAnswer::NotNow(_) | LaunchAnswer::NotDelivered | LaunchAnswer::Failed(_)
                if in_doubt =>
            {
                LaunchNext::LeaveToNode
            }
            LaunchAnswer::NotNow(_) | LaunchAnswer::NotDelivered => {
                LaunchNext::Done(self.launch_unreachable(id, node, now))
            }
            LaunchAnswer::Failed(why) => LaunchNext::Done(self.launch_refused(id, why, now)),
        }
    }

    /// The node confirmed run `run` of job `id`: its launch answered, or it
    /// reported the run. Changes nothing for another run or a job no longer
    /// launching.
    pub fn launch_confirmed(&mut self, id: JobId, run: u32) -> Vec<Effect> {
        let Some(job) = self.jobs.get_mut(&id) else {
            return vec![];
        };
        if !job.launching || job.run != run || job.state != JobState::Running {
            return vec![];
        }
        job.launching = false;
        vec![Effect::Job {
            id,
            event: format!("run {run} started"),
        }]
    }

    /// Whether run `run` of job `id` still waits for its node to confirm
    /// the launch (a launch that timed out is tried again only then).
    /// Whether the launch of run `run` of `id` sent to `node` is still
    /// wanted: the run is unconfirmed, or `node` is a sister of a job on
    /// several nodes whose run goes on (another node's answer confirmed
    /// the run; this node's share must still arrive).
    pub fn awaits_launch_on(&self, id: JobId, run: u32, node: &str) -> bool {
        self.awaits_launch(id, run)
            || self
                .jobs
                .get(&id)
                .is_some_and(|j| j.run == run && j.state == JobState::Running && j.is_sister(node))
    }

    pub fn awaits_launch(&self, id: JobId, run: u32) -> bool {
        self.jobs
            .get(&id)
            .is_some_and(|j| j.launching && j.run == run && j.state == JobState::Running)
    }

    /// Launches not confirmed within `timeout` seconds of the decision,
    /// on nodes that are up: the node has answered heartbeats all along
    /// without listing the run, so the launch never arrived (its sender
    /// gave up in doubt). The jobs go back to the queue as never started.
    pub fn expire_launches(&mut self, now: i64, timeout: i64) -> Vec<Effect> {
        let expired: Vec<JobId> = self
            .jobs
            .values()
            .filter(|j| j.launching && j.state == JobState::Running)
            .filter(|j| j.start_time.is_some_and(|t| now - t > timeout))
            .filter(|j| {
                j.node
                    .as_ref()
                    .and_then(|n| self.nodes.get(n))
                    .is_some_and(|n| n.up)
            })
            .map(|j| j.id)
            .collect();
        let mut effects = Vec::new();
        for id in expired {
            let node = self.jobs[&id].node.clone().unwrap_or_default();
            effects.extend(self.unlaunch(
                id,
                now,
                format!("launch on {node} not confirmed within {timeout}s"),
            ));
        }
        effects
    }

    /// The node refused to start a job (a reason the user can act on).
    pub fn launch_refused(&mut self, id: JobId, why: String, now: i64) -> Vec<Effect> {
        if self
            .jobs
            .get(&id)
            .is_none_or(|j| j.state != JobState::Running)
        {
            return vec![];
        }
        let mut effects = self.stop_batch_of_wide(id);
        effects.extend(self.release(id));
        let job = self.jobs.get_mut(&id).expect("checked");
        if job.cancelling() {
            // Already shown CANCELLED: it stays so.
            job.end_cancelled(now);
            effects.push(Effect::Job {
                id,
                event: format!("ended CANCELLED; its launch had failed: {why}"),
            });
            return effects;
        }
        job.transition(JobState::Failed, now).expect("running job");
        job.reason = Some(why.clone());
        effects.push(Effect::Job {
            id,
            event: format!("launch failed: {why}"),
        });
        effects
    }

    /// The launch could not reach the node (the connection was refused: it
    /// was never delivered). The job goes back to the queue; the node is not
    /// declared down for it, since only its lease says whether it is alive,
    /// but nothing more is launched there until it is heard from.
    pub fn launch_unreachable(&mut self, id: JobId, node: &str, now: i64) -> Vec<Effect> {
        if self
            .jobs
            .get(&id)
            .is_none_or(|j| j.state != JobState::Running || !j.runs_on(node))
        {
            return vec![];
        }
        // The node it was sent to (a job on several nodes: maybe a sister).
        if let Some(n) = self.nodes.get_mut(node) {
            n.unconfirmed = true;
        }
        if self.jobs.get(&id).is_some_and(|j| !j.launching) {
            // Another node confirmed the run: it runs there, and is lost
            // with the share this node never got.
            return self.lose_from(node, id, now);
        }
        self.unlaunch(id, now, format!("launch on {node} failed"))
    }

    /// A job the controller believed on a node that is gone (down, or
    /// registered without it): one whose launch was never confirmed goes
    /// back to the queue as never started; one that ran is lost.
    pub(super) fn lose_or_unlaunch(&mut self, id: JobId, now: i64) -> Vec<Effect> {
        let launching = self
            .jobs
            .get(&id)
            .is_some_and(|j| j.launching && j.state == JobState::Running);
        if launching {
            let node = self.jobs[&id].node.clone().unwrap_or_default();
            self.unlaunch(id, now, format!("launch on {node} never confirmed"))
        } else {
            self.lose(id, now)
        }
    }

    /// Puts a RUNNING job whose start is not known to have happened back in
    /// the queue, without counting a restart. Its run is remembered as lost
    /// with the node, so if the node later reports that run ended on its
    /// own, the job gets that end (see `late_end`).
    fn unlaunch(&mut self, id: JobId, now: i64, why: String) -> Vec<Effect> {
        self.note_lost_run(id);
        let mut effects = self.stop_batch_of_wide(id);
        effects.extend(self.release(id));
        let job = self.jobs.get_mut(&id).expect("caller checked");
        if job.cancelling() {
            // Cancelled before its start was confirmed: it ends CANCELLED
            // rather than going back to the queue.
            job.end_cancelled(now);
            effects.push(Effect::Job {
                id,
                event: format!("{why}; ended CANCELLED"),
            });
            return effects;
        }
        job.return_unstarted(now).expect("running job");
        job.reason = Some("LaunchFailedRequeued".into());
        let isolated = job.spec.isolated;
        self.enqueue(id, isolated);
        effects.push(Effect::Job {
            id,
            event: format!("{why}; back in the queue"),
        });
        effects
    }
}

#[cfg(test)]
mod tests {
    use crate::cluster::testkit::{cluster, launch_unconfirmed, registration, spec};
    use crate::cluster::{Cluster, Effect};
    use crate::job::{JobId, JobState};

    fn started() -> (Cluster, JobId, u32) {
        let mut c = cluster();
        let (id, _) = c.submit(spec("a", true), 0).unwrap();
        assert_eq!(launch_unconfirmed(&mut c, 1), vec![id]);
        let run = c.job(id).unwrap().run;
        (c, id, run)
    }

    #[test]
    fn a_launch_is_configuring_until_the_node_confirms_it() {
        let (mut c, id, run) = started();
        let j = c.job(id).unwrap();
        assert!(j.launching);
        assert_eq!(j.state_name(), "CONFIGURING");
        assert!(c.awaits_launch(id, run));
        assert!(c.launch_confirmed(id, run + 1).is_empty(), "another run");
        assert_eq!(c.launch_confirmed(id, run).len(), 1);
        assert_eq!(c.job(id).unwrap().state_name(), "RUNNING");
        assert!(!c.awaits_launch(id, run));
        assert!(c.launch_confirmed(id, run).is_empty(), "said once");
    }

    #[test]
    fn a_heartbeat_that_reports_the_run_confirms_it() {
        let (mut c, id, run) = started();
        let fx = c.reconcile_runs("n1", &[id], &[(id, run)].into());
        assert!(!fx.iter().any(|e| matches!(e, Effect::StopRun { .. })));
        assert!(!c.job(id).unwrap().launching);
    }

    #[test]
    fn a_registration_without_the_launch_requeues_it_as_never_started() {
        for requeue in [true, false] {
            let mut c = cluster();
            let (id, _) = c.submit(spec("a", requeue), 0).unwrap();
            c.schedule(1);
            // The controller restarted (or the node did) before the launch
            // arrived: the node registers without the job.
            c.register_node(&registration("n1", &[], vec![]), 2);
            let j = c.job(id).unwrap();
            assert_eq!(j.state, JobState::Pending, "requeue={requeue}");
            assert_eq!(j.restarts, 0);
            assert_eq!(j.reason.as_deref(), Some("LaunchFailedRequeued"));
            // It starts again, as a new run.
            c.schedule(3);
            assert_eq!(c.job(id).unwrap().run, 2);
        }
    }

    #[test]
    fn a_controller_restarted_mid_launch_requeues_what_the_node_never_got() {
        let mut c = cluster();
        let ids: Vec<JobId> = (0..3)
            .map(|_| c.submit(spec("a", true), 0).unwrap().0)
            .collect();
        assert_eq!(launch_unconfirmed(&mut c, 1), ids);
        // gctld dies after persisting the launches; one reached the node.
        let jobs: Vec<_> = c.jobs().cloned().collect();
        let nodes: Vec<_> = c.nodes().cloned().collect();
        let mut c = Cluster::restore(Box::new(crate::launch::CaseLaunch), jobs, nodes);
        let reg = crate::wire::NodeRegistration {
            running: vec![ids[0]],
            runs: [(ids[0], 1)].into(),
            ..registration("n1", &[], vec![])
        };
        c.register_node(&reg, 5);
        let j = c.job(ids[0]).unwrap();
        assert_eq!((j.state, j.launching), (JobState::Running, false));
        for id in &ids[1..] {
            let j = c.job(*id).unwrap();
            assert_eq!((j.state, j.restarts), (JobState::Pending, 0), "job {id}");
        }
    }

    #[test]
    fn a_registration_with_the_launch_confirms_it() {
        let (mut c, id, run) = started();
        let reg = crate::wire::NodeRegistration {
            running: vec![id],
            runs: [(id, run)].into(),
            ..registration("n1", &[], vec![])
        };
        c.register_node(&reg, 2);
        let j = c.job(id).unwrap();
        assert_eq!((j.state, j.launching), (JobState::Running, false));
    }

    #[test]
    fn a_node_declared_down_sends_unconfirmed_launches_back_not_to_node_fail() {
        let mut c = cluster();
        let (confirmed, _) = c.submit(spec("a", false), 0).unwrap();
        let (unconfirmed, _) = c.submit(spec("a", false), 0).unwrap();
        c.schedule(1);
        let run = c.job(confirmed).unwrap().run;
        c.launch_confirmed(confirmed, run);
        c.node_down("n1", 5);
        assert_eq!(c.job(confirmed).unwrap().state, JobState::NodeFail);
        let j = c.job(unconfirmed).unwrap();
        assert_eq!((j.state, j.restarts), (JobState::Pending, 0));
    }

    #[test]
    fn a_launch_never_confirmed_by_a_live_node_expires() {
        let (mut c, id, run) = started();
        assert!(c.expire_launches(20, 30).is_empty(), "not yet");
        assert_eq!(c.expire_launches(40, 30).len(), 1);
        let j = c.job(id).unwrap();
        assert_eq!((j.state, j.restarts), (JobState::Pending, 0));
        assert!(!c.awaits_launch(id, run), "its sender stops");
        // A confirmed launch never expires.
        let (mut c, id, run) = started();
        c.launch_confirmed(id, run);
        assert!(c.expire_launches(1000, 30).is_empty());
    }

    #[test]
    fn a_refused_connection_after_a_launch_in_doubt_settles_nothing() {
        use super::{LaunchAnswer as A, LaunchNext as N};
        let (mut c, id, run) = started();
        assert_eq!(
            c.launch_answered(id, run, "n1", A::InDoubt, false, 2),
            N::Retry
        );
        // gnoded died after starting the run: its port is closed now.
        assert_eq!(
            c.launch_answered(id, run, "n1", A::NotDelivered, true, 3),
            N::LeaveToNode
        );
        assert_eq!(
            c.launch_answered(id, run, "n1", A::NotNow("busy".into()), true, 3),
            N::LeaveToNode
        );
        assert_eq!(
            c.launch_answered(id, run, "n1", A::Failed("io".into()), true, 3),
            N::LeaveToNode
        );
        assert!(c.awaits_launch(id, run), "still CONFIGURING");
        // Without doubt, a refused connection means never delivered.
        let N::Done(fx) = c.launch_answered(id, run, "n1", A::NotDelivered, false, 4) else {
            panic!("settled")
        };
        assert_eq!(fx.len(), 1);
        assert_eq!(c.job(id).unwrap().state, JobState::Pending);
        // No longer awaited: a send in doubt stops.
        assert_eq!(
            c.launch_answered(id, run, "n1", A::InDoubt, true, 5),
            N::Done(vec![])
        );
    }

    #[test]
    fn a_taken_or_refused_launch_is_settled_either_way() {
        use super::{LaunchAnswer as A, LaunchNext as N};
        let (mut c, id, run) = started();
        assert!(matches!(
            c.launch_answered(id, run, "n1", A::Taken, true, 2),
            N::Done(_)
        ));
        assert!(!c.job(id).unwrap().launching);
        let (mut c, id, run) = started();
        c.launch_answered(id, run, "n1", A::Refused("no such user".into()), true, 2);
        assert_eq!(c.job(id).unwrap().state, JobState::Failed);
    }

    #[test]
    fn an_unreachable_launch_requeues_only_the_job() {
        let (mut c, id, _) = started();
        c.launch_unreachable(id, "n1", 2);
        let j = c.job(id).unwrap();
        assert_eq!((j.state, j.restarts), (JobState::Pending, 0));
        let n = c.node("n1").unwrap();
        assert!(n.up && !n.accepts_launches());
    }
}
