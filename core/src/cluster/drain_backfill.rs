//! Backfill into drains. While an instance is drained for an isolated job
//! (the shared tasks on it leaving, nothing new placed there), the shared
//! jobs running on its node whose time limits end before it is expected
//! to be free may still place tasks there: they do not delay the isolated
//! job, whose start the pass expects at that time anyway (EASY backfill).
//! A job is let in by its time limit only, the one end it cannot run past
//! (what its earlier runs took may shorten the drain's expected end, never
//! lengthen a backfilled job's). Nothing is backfilled where that time is
//! unknown or already past, or into an instance an isolated job holds
//! (isolation is exclusive). The node enforces it: the allowance travels
//! with the drain set (`drains.rs`), and an isolated job that takes the
//! instance shuts it at once (`NodeBook::hold`).

use std::collections::BTreeMap;

use super::{Cluster, Node};
use crate::job::JobId;

impl Cluster {
    /// The running shared jobs of `n` each of its drained instances still
    /// takes tasks of, by instance (only instances with some).
    pub(super) fn drain_backfill(&self, n: &Node, now: i64) -> BTreeMap<String, Vec<JobId>> {
        let mut open = BTreeMap::new();
        for slot in &n.instances {
            if slot.draining_for.is_none() || slot.isolated_owner.is_some() || slot.retiring {
                continue;
            }
            let Some(free_at) = self.expected_free(slot).filter(|&t| t > now) else {
                continue;
            };
            let jobs: Vec<JobId> = n
                .shared
                .iter()
                .filter(|id| {
                    self.limit_end(**id)
                        .is_some_and(|end| end > now && end <= free_at)
                })
                .copied()
                .collect();
            if !jobs.is_empty() {
                open.insert(slot.instance.uuid.clone(), jobs);
            }
        }
        open
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use crate::cluster::testkit::{cluster, spec, uuids_of};
    use crate::cluster::{Cluster, Effect};
    use crate::job::{JobId, JobSpec};

    fn opened(fx: &[Effect]) -> Vec<BTreeMap<String, Vec<JobId>>> {
        fx.iter()
            .filter_map(|e| match e {
                Effect::Drain { open_to, .. } => Some(open_to.clone()),
                _ => None,
            })
            .collect()
    }

    fn on(jobs: &[u64]) -> crate::wire::InstanceUse {
        crate::wire::InstanceUse {
            tasks: jobs.len() as u32,
            jobs: jobs.iter().map(|j| (*j, 1 << 30)).collect(),
            ..Default::default()
        }
    }

    /// A shared job named `name` with time limit `limit` (seconds).
    fn limited(name: &str, limit: Option<u64>) -> JobSpec {
        JobSpec {
            time_limit: limit,
            ..spec(name, false)
        }
    }

    fn isolated(name: &str) -> JobSpec {
        JobSpec {
            isolated: true,
            ..spec(name, false)
        }
    }

    #[test]
    fn jobs_expected_to_end_before_a_drained_instance_is_free_may_still_use_it() {
        let mut c = cluster();
        let (a, _) = c.submit(limited("a", Some(100)), 0).unwrap();
        let (b, _) = c.submit(limited("b", Some(300)), 0).unwrap();
        let (long, _) = c.submit(limited("long", Some(1000)), 0).unwrap();
        let (u, _) = c.submit(limited("u", None), 0).unwrap();
        c.schedule(10);
        let uuids = uuids_of(&c, "n1");
        // a and b on the first instance, long and u on the second.
        let uses = [
            (uuids[0].clone(), on(&[a, b])),
            (uuids[1].clone(), on(&[long, u])),
        ];
        c.update_instance_use("n1", &uses.into_iter().collect());
        let (iso, _) = c.submit(isolated("iso"), 11).unwrap();
        let fx = c.schedule(12);
        // The first is expected free at 310 (b's limit); the second never.
        let slot = |c: &Cluster, k: usize| c.node("n1").unwrap().instances[k].clone();
        assert_eq!(slot(&c, 0).draining_for, Some(iso), "{fx:?}");
        let open = opened(&fx);
        assert_eq!(open.len(), 1, "{fx:?}");
        assert_eq!(open[0], BTreeMap::from([(uuids[0].clone(), vec![a, b])]));
        // Nothing changed: nothing sent again.
        assert!(opened(&c.schedule(20)).is_empty());
        // a is past its limit, b not yet: only b.
        let open = opened(&c.schedule(111));
        assert_eq!(open, [BTreeMap::from([(uuids[0].clone(), vec![b])])]);
        // Past the expected free time: the estimate failed, nobody else.
        let open = opened(&c.schedule(311));
        assert_eq!(open, [BTreeMap::new()]);
    }

    #[test]
    fn nothing_is_backfilled_where_the_drained_instance_has_no_known_end() {
        let mut c = cluster();
        let (a, _) = c.submit(limited("a", Some(100)), 0).unwrap();
        let (u, _) = c.submit(limited("u", None), 0).unwrap();
        c.schedule(10);
        let uuids = uuids_of(&c, "n1");
        let uses = [
            (uuids[0].clone(), on(&[a, u])),
            (uuids[1].clone(), on(&[a, u])),
        ];
        c.update_instance_use("n1", &uses.into_iter().collect());
        c.submit(isolated("iso"), 11).unwrap();
        let fx = c.schedule(12);
        let open = opened(&fx);
        assert_eq!(open.len(), 1, "a drain was sent: {fx:?}");
        assert!(open[0].is_empty(), "u's end is unknown: {fx:?}");
    }
}
