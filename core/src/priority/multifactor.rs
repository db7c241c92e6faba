//! `multifactor`: Slurm's priority/multifactor with the age, job-size,
//! fair-share, partition and QOS factors. Each factor is between 0 and 1
//! and counts with its weight: `weight_age * min(waited, max_age) /
//! max_age`, plus `weight_job_size * cpus / cluster_cpus`, plus
//! `weight_fair_share * fair_share`, plus `weight_partition * partition`,
//! plus `weight_qos * qos`, less the job's nice; at least 1. The
//! fair-share factor is the job's association's (`fairshare`), 0 where it
//! has none; the partition factor its partition's job factor over the
//! largest (`PartitionFactors`); the QOS factor its QOS's priority over
//! the highest (`qos`).

use super::{Priority, PriorityConfig, PriorityContext, PriorityPolicy};
use crate::job::Job;

#[derive(Debug, Clone, Copy)]
pub struct Multifactor(pub PriorityConfig);

impl PriorityPolicy for Multifactor {
    fn name(&self) -> &'static str {
        "multifactor"
    }

    fn orders(&self) -> bool {
        true
    }

    fn priority(&self, job: &Job, ctx: &PriorityContext<'_>) -> Priority {
        let c = &self.0;
        let waited = (ctx.now - job.submit_time).max(0) as f64;
        let age = if c.max_age_secs == 0 {
            1.0
        } else {
            (waited / c.max_age_secs as f64).min(1.0)
        };
        let cpus = job.resources().cpus as f64;
        let size = if ctx.cluster_cpus == 0 {
            0.0
        } else {
            (cpus / f64::from(ctx.cluster_cpus)).min(1.0)
        };
        let age = (f64::from(c.weight_age) * age).round() as u64;
        let job_size = (f64::from(c.weight_job_size) * size).round() as u64;
        let fair_share = (f64::from(c.weight_fair_share) * ctx.fair_share_of(job)).round() as u64;
        let qos = (f64::from(c.weight_qos) * ctx.qos_of(job)).round() as u64;
        let partition = (f64::from(c.weight_partition) * ctx.partition_of(job)).round() as u64;
        let nice = job.spec.nice;
        let sum = i128::from(age)
            + i128::from(job_size)
            + i128::from(fair_share)
            + i128::from(qos)
            + i128::from(partition)
            - i128::from(nice);
        Priority {
            value: sum.clamp(1, i128::from(super::TOP)) as u64,
            age,
            job_size,
            fair_share,
            qos,
            partition,
            nice,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::{Job, JobSpec};

    fn job(submit: i64, cpus: u32, nice: i64) -> Job {
        let spec = JobSpec {
            slurm: crate::job::SlurmOptions {
                cpus_per_task: Some(cpus),
                ..Default::default()
            },
            nice,
            ..JobSpec::default()
        };
        Job::new(1, spec, submit)
    }

    #[test]
    fn age_grows_to_its_weight_size_counts_and_nice_is_taken_off() {
        let m = Multifactor(PriorityConfig {
            weight_age: 1000,
            weight_job_size: 500,
            max_age_secs: 100,
            weight_fair_share: 1000,
            weight_qos: 1000,
            weight_partition: 1000,
        });
        let ctx = |now| PriorityContext {
            now,
            cluster_cpus: 8,
            fair_share: None,
            fair_tree: None,
            qos: None,
            partitions: None,
        };
        let p = m.priority(&job(0, 2, 0), &ctx(50));
        assert_eq!((p.age, p.job_size, p.value), (500, 125, 625));
        let p = m.priority(&job(0, 2, 0), &ctx(1000));
        assert_eq!(p.age, 1000, "capped at max age");
        let p = m.priority(&job(0, 2, 100), &ctx(50));
        assert_eq!((p.nice, p.value), (100, 525));
        let p = m.priority(&job(0, 2, 10_000), &ctx(50));
        assert_eq!(p.value, 1, "never 0 (that is a held job's)");
        let p = m.priority(&job(0, 2, -1000), &ctx(0));
        assert_eq!(p.value, 1125, "an administrator's negative nice raises it");
    }

    #[test]
    fn a_partitions_job_factor_counts_with_its_weight() {
        let m = Multifactor(PriorityConfig {
            weight_age: 0,
            weight_job_size: 0,
            weight_partition: 2000,
            ..PriorityConfig::default()
        });
        let known = ["gpu".to_string(), "debug".into()];
        let parts = crate::priority::PartitionFactors::parse("debug=10,gpu=5", &known).unwrap();
        let ctx = PriorityContext {
            now: 0,
            cluster_cpus: 8,
            fair_share: None,
            fair_tree: None,
            qos: None,
            partitions: Some(&parts),
        };
        let mut debug = job(0, 1, 0);
        debug.spec.partition = Some("debug".into());
        let p = m.priority(&debug, &ctx);
        assert_eq!((p.partition, p.value), (2000, 2000));
        let p = m.priority(&job(0, 1, 0), &ctx);
        assert_eq!(
            (p.partition, p.value),
            (1000, 1000),
            "the default partition, gpu"
        );
    }
}
