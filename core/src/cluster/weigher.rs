//! Weighing jobs by the priority policy at one time: what every job's
//! weight shares (the up nodes' CPUs, the Fair Tree factors) is worked out
//! once, so a launch pass or a listing of many jobs does not redo it per
//! job.

use std::collections::BTreeMap;

use super::Cluster;
use crate::job::Job;
use crate::priority::{Priority, PriorityContext};

/// Each association's Fair Tree factor.
type FairTreeFactors = BTreeMap<(String, String), f64>;

/// Weighs jobs at `now` ([`Cluster::weigher`]).
pub struct Weigher<'a> {
    cluster: &'a Cluster,
    now: i64,
    cluster_cpus: u32,
    fair_tree: Option<FairTreeFactors>,
}

impl Weigher<'_> {
    /// `job`'s priority (0 while held, as Slurm shows it).
    pub fn priority_of(&self, job: &Job) -> Priority {
        if job.held {
            return Priority::default();
        }
        let c = self.cluster;
        let ctx = PriorityContext {
            now: self.now,
            cluster_cpus: self.cluster_cpus,
            fair_share: c
                .fair_share
                .in_use()
                .then_some((&c.fair_share, c.accounting.half_life_secs)),
            fair_tree: self.fair_tree.as_ref(),
            qos: c.qos.in_use().then_some(&c.qos),
            partitions: c.partitions.as_ref().filter(|p| p.in_use()),
        };
        c.priority.priority(job, &ctx)
    }
}

impl Cluster {
    /// The partitions' job factors (the partition factor of
    /// `multifactor`).
    pub fn set_partition_factors(&mut self, factors: crate::priority::PartitionFactors) {
        self.partitions = Some(factors);
    }

    /// Weighs jobs at `now`; for many jobs, one weigher for all.
    pub fn weigher(&self, now: i64) -> Weigher<'_> {
        let cluster_cpus = self
            .nodes
            .values()
            .filter(|n| n.up)
            .map(|n| n.total().cpus)
            .sum();
        Weigher {
            cluster: self,
            now,
            cluster_cpus,
            fair_tree: self.fair_tree(now),
        }
    }

    /// The Fair Tree factors at `now`, where that algorithm is used.
    pub(super) fn fair_tree(&self, now: i64) -> Option<FairTreeFactors> {
        (self.accounting.fair_tree && self.fair_share.in_use()).then(|| {
            self.fair_share
                .fair_tree(now, self.accounting.half_life_secs)
        })
    }

    /// Job `job`'s priority at `now` (0 while held, as Slurm shows it).
    pub fn priority_of(&self, job: &Job, now: i64) -> Priority {
        self.weigher(now).priority_of(job)
    }
}
