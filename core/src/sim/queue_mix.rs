//! A shared cluster's queue, for the policies that decide who gets the
//! GPU (priority, fair share, QOS limits, backfill, preemption): isolated
//! jobs of mixed sizes with time limits, from several users in two
//! accounts, arriving over time. The distributions are ours (no published
//! trace gives GPU jobs' sizes, limits and run times together); they are
//! stated in docs/simulator.md.

use rand::Rng;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::{Phase, SimJob};

/// The knobs of [`generate`].
#[derive(Debug, Clone, Copy)]
pub struct QueueMix {
    pub jobs: usize,
    pub seed: u64,
    /// Nodes in the cluster, and GPU instances on each.
    pub nodes: u32,
    pub gpus_per_node: u32,
    /// Offered load: the jobs' GPU time over the cluster's GPU time in the
    /// window they arrive in (above 1: a backlog builds).
    pub load: f64,
}

/// The users, their accounts and how many of the jobs each submits.
pub const USERS: &[(&str, &str, f64)] = &[
    ("ann", "physics", 0.4),
    ("bob", "physics", 0.3),
    ("cem", "bio", 0.2),
    ("dia", "bio", 0.1),
];

/// Draws the queue: per job, its size (60% one GPU, 25% a whole node,
/// 15% 2..N whole nodes), its run time (uniform: 5-60, 20-120 and 30-180
/// minutes by size, after 30 s of CPU set-up), its time limit (the run
/// time times 1.2-3, rounded up to a minute; 5% of jobs give 0.8 and are
/// killed at it), its user (weights in [`USERS`]) and QOS (10% of the
/// one-GPU jobs `high`, the others `normal`). Submission times are
/// uniform over a window sized for the offered load.
pub fn generate(mix: &QueueMix) -> Vec<SimJob> {
    let mut rng = ChaCha8Rng::seed_from_u64(mix.seed);
    let per_node = mix.gpus_per_node.max(1);
    let mut jobs: Vec<SimJob> = (0..mix.jobs)
        .map(|i| {
            let size: f64 = rng.gen();
            let (kind, nodes, gpus, minutes) = if size < 0.6 || mix.nodes == 0 {
                ("gpu", 1, 1, rng.gen_range(5.0..60.0))
            } else if size < 0.85 || mix.nodes < 2 {
                ("node", 1, per_node, rng.gen_range(20.0..120.0))
            } else {
                let n = rng.gen_range(2..=mix.nodes);
                ("wide", n, per_node, rng.gen_range(30.0..180.0))
            };
            let secs: f64 = minutes * 60.0;
            let over: f64 = if rng.gen::<f64>() < 0.05 {
                0.8
            } else {
                rng.gen_range(1.2..3.0)
            };
            let limit = ((secs + 30.0) * over / 60.0).ceil() * 60.0;
            let pick: f64 = rng.gen();
            let mut acc = 0.0;
            let (user, account, _) = USERS
                .iter()
                .find(|(_, _, w)| {
                    acc += w;
                    pick < acc
                })
                .unwrap_or(&USERS[USERS.len() - 1]);
            let high = kind == "gpu" && rng.gen::<f64>() < 0.1;
            SimJob {
                name: format!("{kind}-{i}"),
                isolated: true,
                footprint_mib: 1024,
                phases: vec![
                    Phase::Cpu { secs: 30.0 },
                    Phase::Gpu {
                        mem_mib: 1024,
                        slices: 1.0,
                        secs,
                    },
                ],
                user: Some(user.to_string()),
                account: Some(account.to_string()),
                qos: Some(if high { "high" } else { "normal" }.into()),
                time_limit: Some(limit),
                nodes,
                gpus,
                ..SimJob::default()
            }
        })
        .collect();
    // GPU-seconds asked for, spread over a window where the cluster's
    // capacity is `load` times smaller.
    let work: f64 = jobs
        .iter()
        .map(|j| j.alone_secs() * (j.nodes * j.gpus) as f64)
        .sum();
    let capacity = (mix.nodes.max(1) * per_node) as f64;
    let window = work / capacity / mix.load.max(0.01);
    for j in &mut jobs {
        j.submit = (rng.gen_range(0.0..window.max(1.0))).floor();
    }
    jobs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_queue_has_every_size_limits_users_and_qos_and_is_seeded() {
        let mix = QueueMix {
            jobs: 400,
            seed: 3,
            nodes: 4,
            gpus_per_node: 2,
            load: 1.2,
        };
        let jobs = generate(&mix);
        assert_eq!(jobs, generate(&mix), "the same seed gives the same jobs");
        assert_eq!(jobs.len(), 400);
        let kinds = |p: &str| jobs.iter().filter(|j| j.name.starts_with(p)).count();
        assert!((200..280).contains(&kinds("gpu-")), "{}", kinds("gpu-"));
        assert!((70..130).contains(&kinds("node-")), "{}", kinds("node-"));
        assert!((35..85).contains(&kinds("wide-")), "{}", kinds("wide-"));
        for j in &jobs {
            assert!(j.isolated && j.time_limit.is_some() && j.user.is_some());
            assert!(j.nodes >= 1 && j.nodes <= 4, "{}", j.nodes);
            if j.name.starts_with("wide-") {
                assert!(j.nodes >= 2 && j.gpus == 2);
            }
        }
        // Some jobs are killed at their limit (it is below their run time).
        let short = jobs
            .iter()
            .filter(|j| j.time_limit.unwrap() < j.alone_secs())
            .count();
        assert!((5..45).contains(&short), "{short}");
        assert!(jobs.iter().any(|j| j.qos.as_deref() == Some("high")));
        assert!(jobs.iter().any(|j| j.account.as_deref() == Some("bio")));
    }
}
