//! Drains reach a node as effects: whenever the set of a node's instances
//! closed to shared tasks (being drained for isolated jobs, or held by
//! them) changes, or the running jobs a drained instance still takes tasks
//! of (`drain_backfill.rs`), the whole set is pushed to the node
//! (`Effect::Drain`), numbered so the node keeps only the newest when two
//! cross on the way. A node that registers (restarted, or back from an
//! outage) is sent its set afresh.

use std::collections::{BTreeMap, BTreeSet};

use super::{Cluster, Effect};
use crate::job::JobId;

/// What was last pushed to a node: its closed instances, and the jobs
/// each drained one still takes tasks of.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DrainSet {
    pub instances: BTreeSet<String>,
    pub open_to: BTreeMap<String, Vec<JobId>>,
}

impl DrainSet {
    /// Nothing drained, nothing open.
    pub fn is_empty(&self) -> bool {
        self.instances.is_empty() && self.open_to.is_empty()
    }
}

impl Cluster {
    /// `Effect::Drain` for every node whose drain set differs from the last
    /// one sent to it.
    pub(super) fn drain_changes(&mut self, now: i64) -> Vec<Effect> {
        let sets: Vec<(String, DrainSet)> = self
            .nodes
            .values()
            .filter_map(|n| self.changed_drain_set(n, now).map(|s| (n.name.clone(), s)))
            .collect();
        self.send_drain_sets(sets)
    }

    /// [`Self::drain_changes`] of node `name` alone: what its registration
    /// must send it (the pass it wakes looks at every node; a scan of every
    /// node at each registration made registering N nodes take N² steps).
    pub(super) fn drain_change_of(&mut self, name: &str, now: i64) -> Vec<Effect> {
        let set = self
            .nodes
            .get(name)
            .and_then(|n| self.changed_drain_set(n, now));
        self.send_drain_sets(set.map(|s| (name.to_string(), s)).into_iter().collect())
    }

    /// Node `n`'s drain set now, if it is up and that differs from the one
    /// last sent to it.
    fn changed_drain_set(&self, n: &super::Node, now: i64) -> Option<DrainSet> {
        if !n.up {
            return None;
        }
        // Most nodes drain nothing and were told so: nothing to build.
        let drains_any = n
            .instances
            .iter()
            .any(|s| s.draining_for.is_some() || s.isolated_owner.is_some());
        if !drains_any && n.drain_sent.as_ref().is_some_and(DrainSet::is_empty) {
            return None;
        }
        let set = DrainSet {
            instances: n
                .instances
                .iter()
                // Held ones too: an instance handed from one isolated job
                // to the next stays closed in between (the new set and the
                // launch travel separately).
                .filter(|s| s.draining_for.is_some() || s.isolated_owner.is_some())
                .map(|s| s.instance.uuid.clone())
                .collect(),
            open_to: self.drain_backfill(n, now),
        };
        (n.drain_sent.as_ref() != Some(&set)).then_some(set)
    }

    fn send_drain_sets(&mut self, sets: Vec<(String, DrainSet)>) -> Vec<Effect> {
        let mut effects = Vec::new();
        for (name, set) in sets {
            let Some(n) = self.nodes.get_mut(&name) else {
                continue;
            };
            n.drain_seq += 1;
            effects.push(Effect::Drain {
                node: name,
                instances: set.instances.iter().cloned().collect(),
                open_to: set.open_to.clone(),
                seq: n.drain_seq,
            });
            n.drain_sent = Some(set);
        }
        effects
    }

    /// When an instance being drained for an isolated job is expected to be
    /// free ([`Self::expected_free`]). `None` when it is not being drained,
    /// or when that cannot be known.
    pub fn drain_expected_end(&self, slot: &super::InstanceSlot) -> Option<i64> {
        slot.draining_for?;
        self.expected_free(slot)
    }

    /// When what holds an instance now is expected to have left (unix
    /// seconds): the expected end ([`Self::expected_end`]) of the isolated
    /// job running there, or the latest of the shared jobs that reserve
    /// memory on it. `None` when nothing holds it, or when that cannot be
    /// known: a job with neither a time limit nor earlier runs (or not
    /// started), or a node that has not yet reported who is there.
    pub fn expected_free(&self, slot: &super::InstanceSlot) -> Option<i64> {
        if let Some(owner) = &slot.isolated_owner {
            return self.expected_end(*owner);
        }
        let mut latest: Option<i64> = None;
        for id in slot.job_bytes.keys() {
            let end = self.expected_end(*id)?;
            latest = Some(latest.map_or(end, |l| l.max(end)));
        }
        latest
    }

    /// When a running job is expected to end (unix seconds): at its time
    /// limit, or sooner where its earlier runs (the longest of the latest
    /// [`super::PEAK_WINDOW`]) say it will. `None` without either.
    pub fn expected_end(&self, id: crate::job::JobId) -> Option<i64> {
        let limit_end = self.limit_end(id);
        let learned_end = self
            .started_at(id)
            .zip(self.learned(id).runtime_secs)
            .map(|(start, r)| start.saturating_add(r));
        match (limit_end, learned_end) {
            (Some(l), Some(r)) => Some(l.min(r)),
            (l, r) => l.or(r),
        }
    }

    /// When a running job reaches its time limit (unix seconds; `None`
    /// without one): it ends by then whatever its earlier runs say.
    pub fn limit_end(&self, id: crate::job::JobId) -> Option<i64> {
        let start = self.started_at(id)?;
        let limit = i64::try_from(self.jobs.get(&id)?.spec.time_limit?).ok()?;
        Some(start.saturating_add(limit))
    }

    /// A running job's start, moved on by the time it was suspended
    /// (added to its limit and to what it learned).
    fn started_at(&self, id: crate::job::JobId) -> Option<i64> {
        let job = self.jobs.get(&id)?;
        Some(
            job.start_time?
                .saturating_add(job.suspension.map_or(0, |s| s.secs)),
        )
    }

    /// Whether drain `seq` is still the newest for `node` (an older one in
    /// flight is not sent again).
    pub fn drain_is_current(&self, node: &str, seq: u64) -> bool {
        self.nodes
            .get(node)
            .is_some_and(|n| n.up && n.drain_seq == seq)
    }
}

#[cfg(test)]
mod tests {
    use crate::cluster::testkit::{cluster, registration, uuids_of};
    use crate::cluster::Effect;
    use crate::job::{GpuRequest, JobSpec};

    fn drains(fx: &[Effect]) -> Vec<(String, Vec<String>, u64)> {
        fx.iter()
            .filter_map(|e| match e {
                Effect::Drain {
                    node,
                    instances,
                    seq,
                    ..
                } => Some((node.clone(), instances.clone(), *seq)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_drain_is_pushed_when_it_begins_and_when_it_ends() {
        let mut c = cluster();
        // Both instances busy with shared tasks.
        let uses: std::collections::BTreeMap<String, crate::wire::InstanceUse> = c
            .node("n1")
            .unwrap()
            .instances
            .iter()
            .map(|s| {
                (
                    s.instance.uuid.clone(),
                    crate::wire::InstanceUse {
                        tasks: 1,
                        ..Default::default()
                    },
                )
            })
            .collect();
        c.update_instance_use("n1", &uses);
        let iso = JobSpec {
            isolated: true,
            gpu: GpuRequest::default(),
            ..crate::cluster::testkit::spec("iso", false)
        };
        let (id, _) = c.submit(iso, 0).unwrap();
        let fx = c.schedule(1);
        let d = drains(&fx);
        assert_eq!(d.len(), 1, "{fx:?}");
        assert_eq!(d[0].1.len(), 1, "one instance drained");
        assert!(c.drain_is_current("n1", d[0].2));
        // Nothing changed: nothing sent.
        assert!(drains(&c.schedule(2)).is_empty());
        // The tasks leave: the job starts; its instance stays closed while
        // it holds it (nothing new is sent), and opens when it ends.
        c.update_instance_use("n1", &Default::default());
        let fx = c.schedule(3);
        assert!(fx.contains(&Effect::Launch {
            job: id,
            node: "n1".into(),
            early: false
        }));
        assert!(drains(&fx).is_empty(), "{fx:?}");
        let run = c.job(id).unwrap().run;
        c.launch_confirmed(id, run);
        c.job_ended("n1", &crate::cluster::testkit::ended(id, run, 0, 5))
            .unwrap();
        let d2 = drains(&c.schedule(6));
        assert_eq!(d2.len(), 1);
        assert!(d2[0].1.is_empty());
        assert!(d2[0].2 > d[0].2);
        assert!(!c.drain_is_current("n1", d[0].2), "the older one is stale");
        // A node that registers again is sent its set afresh.
        let fx = c.register_node(&registration("n1", &[], vec![]), 7);
        assert_eq!(drains(&fx).len(), 1);
    }

    #[test]
    fn a_registration_sends_its_own_node_s_set_and_the_pass_no_other() {
        let mut c = cluster();
        assert_eq!(drains(&c.schedule(1)), vec![]);
        // n2 registers: its (empty) set goes to it alone ...
        let fx = c.register_node(&registration("n2", &[], vec![]), 2);
        let d = drains(&fx);
        assert_eq!(d.len(), 1, "{fx:?}");
        assert_eq!((d[0].0.as_str(), d[0].1.len()), ("n2", 0));
        // ... and a pass after it finds every node told.
        assert_eq!(drains(&c.schedule(3)), vec![]);
    }

    #[test]
    fn a_job_on_several_instances_drains_them_all_and_holds_them_across_a_restart() {
        let mut c = cluster();
        let uuids = uuids_of(&c, "n1");
        // Shared tasks on the first instance only.
        let busy = [(
            uuids[0].clone(),
            crate::wire::InstanceUse {
                tasks: 1,
                ..Default::default()
            },
        )];
        c.update_instance_use("n1", &busy.into_iter().collect());
        let two = JobSpec {
            isolated: true,
            gpu: GpuRequest {
                count: Some(2),
                ..GpuRequest::default()
            },
            ..crate::cluster::testkit::spec("two", false)
        };
        let (id, _) = c.submit(two, 0).unwrap();
        let fx = c.schedule(1);
        // Both are closed to shared tasks, the free one too: it would
        // fill while the other drains.
        let d = drains(&fx);
        assert_eq!(d.len(), 1, "{fx:?}");
        let mut closed = d[0].1.clone();
        closed.sort();
        assert_eq!(closed, uuids);
        assert!(!fx.iter().any(|e| matches!(e, Effect::Launch { .. })));
        c.update_instance_use("n1", &Default::default());
        let fx = c.schedule(2);
        assert!(fx.contains(&Effect::Launch {
            job: id,
            node: "n1".into(),
            early: false
        }));
        let mut held = c.job(id).unwrap().gpu_instances.clone();
        held.sort();
        assert_eq!(held, uuids);
        // The controller restarts: both stay the job's.
        let jobs: Vec<_> = c.jobs().cloned().collect();
        let nodes: Vec<_> = c.nodes().cloned().collect();
        let c = crate::cluster::Cluster::restore(Box::new(crate::launch::CaseLaunch), jobs, nodes);
        let n = c.node("n1").unwrap();
        assert!(n.instances.iter().all(|s| s.isolated_owner == Some(id)));
    }

    #[test]
    fn a_drain_is_expected_to_end_when_the_jobs_on_it_reach_their_limits() {
        let mut c = cluster();
        let limited = |name: &str, limit: Option<u64>| JobSpec {
            time_limit: limit,
            ..crate::cluster::testkit::spec(name, false)
        };
        let (a, _) = c.submit(limited("a", Some(100)), 0).unwrap();
        let (b, _) = c.submit(limited("b", Some(300)), 0).unwrap();
        let (u, _) = c.submit(limited("u", None), 0).unwrap();
        c.schedule(10);
        let uuids = uuids_of(&c, "n1");
        let on = |jobs: &[u64]| crate::wire::InstanceUse {
            tasks: jobs.len() as u32,
            jobs: jobs.iter().map(|j| (*j, 1 << 30)).collect(),
            ..Default::default()
        };
        // a and b on the first instance, the unlimited u on the second.
        let uses = [
            (uuids[0].clone(), on(&[a, b])),
            (uuids[1].clone(), on(&[u])),
        ];
        c.update_instance_use("n1", &uses.into_iter().collect());
        let slot =
            |c: &crate::cluster::Cluster, k: usize| c.node("n1").unwrap().instances[k].clone();
        // Not draining: no expected end.
        assert_eq!(c.drain_expected_end(&slot(&c, 0)), None);
        let iso = JobSpec {
            isolated: true,
            ..crate::cluster::testkit::spec("iso", false)
        };
        c.submit(iso, 11).unwrap();
        c.schedule(12);
        let drained: Vec<usize> = (0..2)
            .filter(|&k| slot(&c, k).draining_for.is_some())
            .collect();
        assert_eq!(drained.len(), 1);
        let k = drained[0];
        let other = 1 - k;
        // The jobs with limits on the drained instance: the later end.
        let uses = [
            (uuids[k].clone(), on(&[a, b])),
            (uuids[other].clone(), on(&[u])),
        ];
        c.update_instance_use("n1", &uses.into_iter().collect());
        assert_eq!(c.drain_expected_end(&slot(&c, k)), Some(10 + 300));
        // One of them without a limit: unknown.
        let uses = [
            (uuids[k].clone(), on(&[a, u])),
            (uuids[other].clone(), on(&[b])),
        ];
        c.update_instance_use("n1", &uses.into_iter().collect());
        assert_eq!(c.drain_expected_end(&slot(&c, k)), None);
    }

    #[test]
    fn earlier_runs_tell_when_a_job_is_expected_to_end() {
        use crate::cluster::testkit::{ended, spec};
        let mut c = cluster();
        let limited = |limit: Option<u64>| JobSpec {
            time_limit: limit,
            ..spec("same", false)
        };
        // Nothing known yet: no limit, no earlier run.
        let (first, _) = c.submit(limited(None), 0).unwrap();
        c.schedule(10);
        assert_eq!(c.expected_end(first), None);
        // It runs 40 s (and peaked, so it is remembered).
        c.record_peak(first, 1 << 30);
        let run = c.job(first).unwrap().run;
        c.launch_confirmed(first, run);
        c.job_ended("n1", &ended(first, run, 0, 50)).unwrap();
        // The next run, started at 100: expected to take as long.
        let (next, _) = c.submit(limited(None), 60).unwrap();
        c.schedule(100);
        assert_eq!(c.expected_end(next), Some(140));
        // A time limit that ends sooner wins.
        let (short, _) = c.submit(limited(Some(20)), 101).unwrap();
        c.schedule(102);
        assert_eq!(c.expected_end(short), Some(122));
        // One that ends later does not.
        let (long, _) = c.submit(limited(Some(600)), 103).unwrap();
        c.schedule(104);
        assert_eq!(c.expected_end(long), Some(144));
    }
}
