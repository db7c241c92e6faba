//! `bench/chaos.sh`: the faults of `tests/faults.rs`, at random, for a
//! while, under a steady stream of jobs; then counts what went wrong.
//! Ignored by `cargo test` (it runs for minutes); the script runs it with
//! GSCHED_CHAOS_SECS (default 600) and GSCHED_CHAOS_SEED. `chaos` runs one
//! controller on SQLite; `chaos_over_two_controllers` (`bench/chaos.sh
//! --pair`) a leader and a standby on PostgreSQL, with the failover faults
//! of `tests/failover.rs` besides.

mod common;
mod net;
#[allow(dead_code)]
mod pair;
#[path = "chaos/pair_chaos.rs"]
mod pair_chaos;
#[allow(dead_code)]
#[path = "../ctld/tests/support/postgres.rs"]
mod postgres;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use net::{Cluster, Markers, Verdict};

const NODES: usize = 4;
/// Node timeout (s): nodes fence after two thirds of it.
const NODE_TIMEOUT: u64 = 6;
/// Jobs waiting or running above which no more are submitted.
const BACKLOG: usize = 48;

/// xorshift64*: reproducible from the seed, and no dependency.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

#[derive(Default, Debug)]
struct Faults {
    gnoded_kills: u32,
    partitions: u32,
    gctld_kills: u32,
}

/// What is broken now, and when it is mended.
#[derive(Default)]
struct Broken {
    /// Node i's gnoded is dead until then.
    dead: [Option<Instant>; NODES + 1],
    /// Node i is cut off until then.
    cut: [Option<Instant>; NODES + 1],
    ctld: Option<Instant>,
}

impl Broken {
    fn count(&self) -> usize {
        self.dead.iter().chain(&self.cut).flatten().count()
    }

    fn mend(&mut self, c: &mut Cluster, now: Instant, all: bool) {
        for i in 1..=NODES {
            if self.dead[i].is_some_and(|t| all || t <= now) {
                self.dead[i] = None;
                c.start_node(i);
            }
            if self.cut[i].is_some_and(|t| all || t <= now) {
                self.cut[i] = None;
                c.net.heal(i);
            }
        }
        if self.ctld.is_some_and(|t| all || t <= now) {
            self.ctld = None;
            c.start_ctld();
        }
    }
}

fn inject(c: &mut Cluster, rng: &mut Rng, broken: &mut Broken, faults: &mut Faults) {
    let now = Instant::now();
    let node = 1 + rng.below(NODES as u64) as usize;
    let busy = broken.dead[node].is_some() || broken.cut[node].is_some();
    match rng.below(10) {
        // kill -9 of a gnoded, back within 5 s.
        0..=3 if !busy && broken.count() < 2 => {
            c.kill_node(node);
            broken.dead[node] = Some(now + Duration::from_millis(rng.below(5000)));
            faults.gnoded_kills += 1;
        }
        // A partition of 2 to 30 s (the node timeout is 6 s).
        4..=7 if !busy && broken.count() < 2 => {
            c.net.cut(node);
            broken.cut[node] = Some(now + Duration::from_millis(2000 + rng.below(28_000)));
            faults.partitions += 1;
        }
        // kill -9 of gctld, back within 3 s.
        8 | 9 if broken.ctld.is_none() => {
            c.kill_ctld();
            broken.ctld = Some(now + Duration::from_millis(rng.below(3000)));
            faults.gctld_kills += 1;
        }
        _ => {}
    }
}

/// A marker job's length in fifth-seconds: mostly short (0.2-3 s), some
/// long (4-20 s).
pub fn job_ticks(rng: &mut Rng) -> u32 {
    if rng.chance(85) {
        1 + rng.below(15) as u32
    } else {
        20 + rng.below(80) as u32
    }
}

/// The run's length (s) and seed, from the environment.
fn settings() -> (u64, u64) {
    let secs: u64 = std::env::var("GSCHED_CHAOS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(600);
    let seed: u64 = std::env::var("GSCHED_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    (secs, seed)
}

/// Writes the report where the script asked for it.
fn report(line: &str, verdict: &Verdict) {
    println!("{line}");
    if let Ok(path) = std::env::var("GSCHED_CHAOS_REPORT") {
        std::fs::write(path, format!("{line}\n{verdict:?}\n")).unwrap();
    }
}

#[test]
#[ignore = "minutes long: run by bench/chaos.sh --pair"]
fn chaos_over_two_controllers() {
    let (secs, seed) = settings();
    pair_chaos::run(secs, seed);
}

#[test]
#[ignore = "minutes long: run by bench/chaos.sh"]
fn chaos() {
    let (secs, seed) = settings();
    let mut rng = Rng(seed.max(1));
    let mut c = Cluster::up(NODES, NODE_TIMEOUT);
    let mut broken = Broken::default();
    let mut faults = Faults::default();
    let mut acknowledged = BTreeSet::new();
    let start = Instant::now();
    let mut next_fault = start + Duration::from_secs(5);
    let mut open = 0usize;
    let mut counted = start;
    while start.elapsed() < Duration::from_secs(secs) {
        let now = Instant::now();
        broken.mend(&mut c, now, false);
        if now >= next_fault {
            inject(&mut c, &mut rng, &mut broken, &mut faults);
            next_fault = now + Duration::from_millis(3000 + rng.below(9000));
        }
        if broken.ctld.is_none() && now.duration_since(counted) > Duration::from_secs(2) {
            if let Ok(jobs) = std::panic::catch_unwind(|| c.jobs()) {
                open = jobs.values().filter(|j| !net::is_final(j)).count();
            }
            counted = now;
        }
        if broken.ctld.is_none() && open < BACKLOG {
            // Mostly short jobs, some long; some may be requeued, some not;
            // now and then an array.
            let ticks = job_ticks(&mut rng);
            let tasks = rng.chance(3).then(|| 5 + rng.below(20) as u32);
            if let Ok(id) = c.try_submit(ticks, rng.chance(60), tasks) {
                if tasks.is_none() {
                    acknowledged.insert(id);
                }
                open += tasks.unwrap_or(1) as usize;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    broken.mend(&mut c, Instant::now(), true);
    c.wait_nodes_up(NODES);
    let jobs = c.settle(Duration::from_secs(600));
    let mut v = Verdict::judge(&jobs, &Markers::read(&c.markers()));
    // Acknowledged, and not in the controller's books at all.
    v.lost
        .extend(acknowledged.iter().filter(|id| !jobs.contains_key(id)));
    let report = format!(
        "chaos: {secs} s, seed {seed}, {NODES} nodes, node timeout {NODE_TIMEOUT} s; faults: \
         {} gnoded kill -9, {} partitions, {} gctld kill -9 | acknowledged {}, ran {}, \
         ran twice {}, lost {}, misrecorded {} | completed again (requeueable, finished \
         during a partition) {}",
        faults.gnoded_kills,
        faults.partitions,
        faults.gctld_kills,
        v.acknowledged,
        v.ran,
        v.ran_twice.len(),
        v.lost.len(),
        v.misrecorded.len(),
        v.completed_again.len(),
    );
    self::report(&report, &v);
    v.assert_clean(&c);
}
