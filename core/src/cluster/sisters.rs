//! Jobs on several nodes: the batch node runs the script, each *sister*
//! holds its share of the job (cgroup, CPUs, memory, instances) and runs
//! the tasks of the job's steps there. Each node gets the launch through
//! the one launch effect (a sister's launch says it is one); the job's end,
//! however it comes, stops its run on every sister; a sister lost (down,
//! registered without it, its share ended) ends the job as its batch
//! node's loss does.

use super::{resources_of, Cluster, Effect};
use crate::job::{JobId, JobState, Sister};

impl Cluster {
    /// Starts `job` on `nodes` (the batch node first, each with the
    /// instances it holds there): the effects (nothing when it cannot).
    pub(super) fn start_wide(
        &mut self,
        id: JobId,
        nodes: Vec<(String, Vec<String>)>,
        now: i64,
    ) -> Vec<Effect> {
        let mut nodes = nodes.into_iter();
        let Some((batch, instances)) = nodes.next() else {
            return vec![];
        };
        let sisters: Vec<Sister> = nodes
            .map(|(node, instances)| Sister { node, instances })
            .collect();
        if sisters.iter().any(|s| !self.nodes.contains_key(&s.node))
            || self.start(id, &batch, instances, now).is_err()
        {
            return vec![];
        }
        let job = self.jobs.get_mut(&id).expect("started above");
        job.sisters = sisters.clone();
        let (res, shared) = (resources_of(job), !job.spec.isolated);
        for s in &sisters {
            let n = self.nodes.get_mut(&s.node).expect("checked above");
            n.add_running(id, &res, shared);
            for slot in n
                .instances
                .iter_mut()
                .filter(|slot| s.instances.contains(&slot.instance.uuid))
            {
                slot.isolated_owner = Some(id);
            }
        }
        let names: Vec<String> = self.jobs[&id]
            .nodes()
            .iter()
            .map(|n| n.to_string())
            .collect();
        let mut effects = vec![Effect::Job {
            id,
            event: format!("started on {}", crate::hostlist::compress(&names)),
        }];
        effects.extend(names.into_iter().map(|node| Effect::Launch {
            job: id,
            node,
            early: false,
        }));
        effects
    }

    /// Takes a job off its sisters' books and stops its run there.
    pub(super) fn release_sisters(&mut self, id: JobId) -> Vec<Effect> {
        let Some(job) = self.jobs.get(&id) else {
            return vec![];
        };
        let run = job.run;
        let sisters: Vec<String> = job.sisters.iter().map(|s| s.node.clone()).collect();
        let mut effects = Vec::new();
        for node in sisters {
            let on_books = self
                .nodes
                .get(&node)
                .is_some_and(|n| n.running.contains(&id));
            if on_books {
                effects.extend(self.release_on(&node, id));
                effects.push(Effect::StopRun {
                    job: id,
                    node,
                    run: Some(run),
                });
            }
        }
        effects
    }

    /// The job's share on sister `node` ended. Where it still runs (this
    /// run), its allocation is broken: the job is cancelled on its batch
    /// node (its end comes from there) and stopped on the other sisters.
    /// An end after the job's (the stop sent then) changes nothing.
    pub(super) fn sister_ended(
        &mut self,
        node: &str,
        ended: &crate::wire::JobEnded,
    ) -> Vec<Effect> {
        let id = ended.job_id;
        let Some(job) = self.jobs.get(&id) else {
            return vec![];
        };
        if job.state != JobState::Running || (ended.run != 0 && ended.run != job.run) {
            return vec![];
        }
        let batch = job.node.clone().unwrap_or_default();
        let res = resources_of(job);
        if let Some(n) = self.nodes.get_mut(node) {
            n.remove_running(id, &res);
        }
        let mut effects = vec![
            Effect::Job {
                id,
                event: format!(
                    "its share on {node} ended ({:?}); the job is cancelled",
                    ended.outcome.cause
                ),
            },
            Effect::Signal {
                job: id,
                node: batch,
                signal: super::SIGTERM,
                cancel: true,
                scope: crate::outcome::SignalScope::Full,
            },
        ];
        effects.extend(self.release_sisters(id));
        effects
    }

    /// For a job on several nodes whose launch failed on one of them (or
    /// was never confirmed): its run is stopped on its batch node too,
    /// which may have started it. Nothing for a job on one node.
    pub(super) fn stop_batch_of_wide(&self, id: JobId) -> Vec<Effect> {
        match self.jobs.get(&id) {
            Some(j) if !j.sisters.is_empty() => vec![Effect::StopRun {
                job: id,
                node: j.node.clone().unwrap_or_default(),
                run: Some(j.run),
            }],
            _ => vec![],
        }
    }

    /// Job `id` was lost with `node` (down, or registered without it): as
    /// for any job there, and where `node` was a sister, its batch node's
    /// run is stopped too (its script cannot go on without the sister).
    pub(super) fn lose_from(&mut self, node: &str, id: JobId, now: i64) -> Vec<Effect> {
        let sister = self
            .jobs
            .get(&id)
            .filter(|j| j.state == JobState::Running && j.is_sister(node))
            .map(|j| {
                (
                    j.node.clone().unwrap_or_default(),
                    j.run,
                    j.launching,
                    // One being cancelled is lost, and ends CANCELLED.
                    j.spec.requeues() && !j.cancelling(),
                )
            });
        if let Some((_, _, false, true)) = sister {
            // Requeued as `scontrol requeue` does: its batch node's run is
            // stopped, and the job starts again only once that run has
            // reported its end (never two runs at once).
            let mut effects = self.requeue(id, now).unwrap_or_default();
            if let Some(j) = self.jobs.get_mut(&id) {
                j.reason = Some("NodeFailRequeued".into());
            }
            effects.push(Effect::Job {
                id,
                event: format!("requeued: its node {node} was lost"),
            });
            return effects;
        }
        let sister = sister.map(|(batch, run, _, _)| (batch, run));
        let mut effects = self.lose_or_unlaunch(id, now);
        if let Some((batch, run)) = sister {
            effects.push(Effect::StopRun {
                job: id,
                node: batch,
                run: Some(run),
            });
        }
        effects
    }
}

#[cfg(test)]
mod tests {
    use crate::cluster::testkit;
    use crate::cluster::{Cluster, Effect};
    use crate::job::{JobSpec, JobState};
    use crate::launch::CaseLaunch;
    use crate::outcome::{EndCause, ProcessOutcome};
    use crate::wire::JobEnded;

    fn two_nodes() -> Cluster {
        let mut c = Cluster::new(Box::new(CaseLaunch));
        for n in ["n1", "n2"] {
            c.register_node(&testkit::registration(n, &[], vec![]), 0);
        }
        c
    }

    fn wide(nodes: &str) -> JobSpec {
        let mut s = testkit::spec("w", false);
        s.slurm.other.insert("nodes".into(), nodes.into());
        s
    }

    fn ended(job: u64, run: u32, cause: EndCause) -> JobEnded {
        JobEnded {
            job_id: job,
            run,
            outcome: ProcessOutcome {
                exit_code: Some(0),
                signal: None,
                cause,
            },
            end_time: 5,
            usage: None,
            steps: Default::default(),
        }
    }

    fn launches(fx: &[Effect]) -> Vec<String> {
        fx.iter()
            .filter_map(|e| match e {
                Effect::Launch { node, .. } => Some(node.clone()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_job_on_two_nodes_is_launched_on_both_and_stopped_on_its_sister_at_its_end() {
        let mut c = two_nodes();
        let (id, _) = c.submit(wide("2"), 0).unwrap();
        let fx = c.schedule(1);
        assert_eq!(launches(&fx), ["n1", "n2"]);
        c.launch_confirmed(id, 1);
        let j = c.job(id).unwrap();
        assert_eq!((j.state, j.run), (JobState::Running, 1), "{j:?}");
        assert_eq!(j.nodes(), ["n1", "n2"]);
        assert!(c.node("n2").unwrap().running.contains(&id));
        // Its end on the batch node frees both and stops the sister.
        let fx = c.job_ended("n1", &ended(id, 1, EndCause::Exited)).unwrap();
        assert!(fx.contains(&Effect::StopRun {
            job: id,
            node: "n2".into(),
            run: Some(1)
        }));
        assert!(c.node("n2").unwrap().running.is_empty());
        assert_eq!(c.job(id).unwrap().state, JobState::Completed);
        // The sister's end after that changes nothing.
        let fx = c
            .job_ended("n2", &ended(id, 1, EndCause::Cancelled))
            .unwrap();
        assert!(fx.is_empty(), "{fx:?}");
        assert_eq!(c.job(id).unwrap().state, JobState::Completed);
    }

    #[test]
    fn a_sisters_launch_in_doubt_is_sent_again_after_the_batch_node_confirmed() {
        use crate::cluster::{LaunchAnswer, LaunchNext};
        let mut c = two_nodes();
        let (id, _) = c.submit(wide("2"), 0).unwrap();
        c.schedule(1);
        // The batch node's answer confirms the run...
        c.launch_answered(id, 1, "n1", LaunchAnswer::Taken, false, 2);
        assert!(!c.awaits_launch(id, 1));
        // ...and the sister's, still in doubt, is sent again, not dropped.
        assert!(c.awaits_launch_on(id, 1, "n2"));
        assert_eq!(
            c.launch_answered(id, 1, "n2", LaunchAnswer::InDoubt, true, 3),
            LaunchNext::Retry
        );
        // Once the job ended, nothing is sent.
        c.job_ended("n1", &ended(id, 1, EndCause::Exited)).unwrap();
        assert!(!c.awaits_launch_on(id, 1, "n2"));
    }

    #[test]
    fn a_job_wider_than_the_cluster_never_starts() {
        let mut c = two_nodes();
        c.set_refuse_unsatisfiable(true);
        let e = c.submit(wide("3"), 0).unwrap_err().to_string();
        assert!(
            e.contains("asks for 3 nodes and 2 known could run it"),
            "{e}"
        );
    }

    #[test]
    fn a_lost_sister_ends_the_job_and_stops_its_batch_node() {
        let mut c = two_nodes();
        let (id, _) = c.submit(wide("2"), 0).unwrap();
        c.schedule(1);
        c.launch_confirmed(id, 1);
        let fx = c.node_down("n2", 3);
        assert_eq!(c.job(id).unwrap().state, JobState::NodeFail);
        assert!(fx.contains(&Effect::StopRun {
            job: id,
            node: "n1".into(),
            run: Some(1)
        }));
        assert!(c.node("n1").unwrap().running.is_empty());
        assert!(c.node("n2").unwrap().running.is_empty());
    }

    #[test]
    fn a_requeueable_job_losing_a_sister_starts_again_only_after_its_batch_run_ended() {
        let mut c = two_nodes();
        let mut spec = wide("2");
        spec.requeue = Some(true);
        let (id, _) = c.submit(spec, 0).unwrap();
        c.schedule(1);
        c.launch_confirmed(id, 1);
        let fx = c.node_down("n2", 3);
        assert!(
            fx.iter().any(|e| matches!(e,
            Effect::Signal { node, cancel: true, .. } if node == "n1")),
            "{fx:?}"
        );
        assert_eq!(c.job(id).unwrap().state, JobState::Pending);
        c.register_node(&testkit::registration("n2", &[], vec![]), 4);
        // The old run still holds n1: nothing starts before it ended.
        assert!(launches(&c.schedule(5)).is_empty());
        c.job_ended("n1", &ended(id, 1, EndCause::Cancelled))
            .unwrap();
        assert_eq!(launches(&c.schedule(6)), ["n1", "n2"]);
        assert_eq!(c.job(id).unwrap().run, 2);
    }

    #[test]
    fn a_sister_share_ending_while_the_job_runs_cancels_the_job() {
        let mut c = two_nodes();
        let (id, _) = c.submit(wide("2"), 0).unwrap();
        c.schedule(1);
        let fx = c.job_ended("n2", &ended(id, 1, EndCause::Exited)).unwrap();
        assert!(fx.iter().any(|e| matches!(e,
            Effect::Signal { node, cancel: true, .. } if node == "n1")));
        assert!(c.node("n2").unwrap().running.is_empty());
        assert_eq!(c.job(id).unwrap().state, JobState::Running);
    }

    #[test]
    fn a_restarted_controller_books_the_sisters_again() {
        let mut c = two_nodes();
        let (id, _) = c.submit(wide("2"), 0).unwrap();
        c.schedule(1);
        let jobs: Vec<_> = c.jobs().cloned().collect();
        let nodes: Vec<_> = c.nodes().cloned().collect();
        let c = Cluster::restore(Box::new(CaseLaunch), jobs, nodes);
        assert!(c.node("n2").unwrap().running.contains(&id));
        assert!(c.node("n1").unwrap().running.contains(&id));
    }
}
