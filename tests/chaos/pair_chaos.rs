//! Chaos over a leader and a standby on PostgreSQL (issue 40): for SECONDS,
//! every 3-12 s one fault, at most one at a time on the controllers and two
//! on the nodes: kill -9 of the leader or of the standby (back within 3 s),
//! SIGSTOP of the leader for 8-15 s (past the takeover; it must step down
//! without acting when continued), the leader cut off from the database for
//! 5-20 s, a restart of the database, kill -9 of a gnoded (back within
//! 5 s), a node cut off for 2-40 s (the node timeout is 30 s). A controller
//! that exits (it stepped down) is started again after a second, as its
//! service manager would. Jobs of 0.2-20 s, 60% requeueable, keep coming.
//! Then every job must be final, none lost, none run twice, none
//! misrecorded (`net::Verdict`, from the jobs' own markers).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use crate::net::{self, Markers, Verdict};
use crate::pair::{Pair, CONTROLLERS, FIRST_NODE, NODE_TIMEOUT};
use crate::Rng;

const NODES: usize = 4;
/// Jobs waiting or running above which no more are submitted.
const BACKLOG: usize = 48;

#[derive(Default, Debug)]
struct Faults {
    leader_kills: u32,
    standby_kills: u32,
    leader_pauses: u32,
    database_cuts: u32,
    database_restarts: u32,
    gnoded_kills: u32,
    partitions: u32,
    /// Controllers that exited by themselves (stepped down) and were
    /// started again.
    step_downs: u32,
}

/// What is broken now, and when it is mended.
#[derive(Default)]
struct Broken {
    /// Controllers down (killed, or exited), started again then.
    ctld_down: BTreeMap<usize, Instant>,
    /// The controller stopped (SIGSTOP), continued then.
    paused: Option<(usize, Instant)>,
    /// The controller cut off from the database, until then.
    db_cut: Option<(usize, Instant)>,
    /// gnoded dead until then, by host.
    node_dead: BTreeMap<usize, Instant>,
    /// Nodes cut off until then, by host.
    node_cut: BTreeMap<usize, Instant>,
}

impl Broken {
    fn controllers_broken(&self) -> bool {
        !self.ctld_down.is_empty() || self.paused.is_some() || self.db_cut.is_some()
    }

    fn nodes_broken(&self) -> usize {
        self.node_dead.len() + self.node_cut.len()
    }

    /// Mends what is due (everything if `all`), and starts again, after a
    /// second, a controller that exited by itself.
    fn mend(&mut self, p: &mut Pair, now: Instant, all: bool, faults: &mut Faults) {
        let due = |t: &Instant| all || *t <= now;
        if let Some((h, _)) = self.paused.filter(|(_, t)| due(t)) {
            p.signal_ctld(h, libc::SIGCONT);
            self.paused = None;
        }
        if let Some((h, _)) = self.db_cut.filter(|(_, t)| due(t)) {
            p.cut_from_database(h, false);
            self.db_cut = None;
        }
        for h in CONTROLLERS {
            let running = p.ctlds.contains_key(&h);
            if running && p.exited(h).is_some() {
                faults.step_downs += 1;
                self.ctld_down.insert(h, now + Duration::from_secs(1));
            }
        }
        let back: Vec<usize> = self
            .ctld_down
            .iter()
            .filter(|(_, t)| due(t))
            .map(|(h, _)| *h)
            .collect();
        for h in back {
            self.ctld_down.remove(&h);
            p.start_ctld(h);
        }
        for (map, cut) in [(&mut self.node_dead, false), (&mut self.node_cut, true)] {
            let back: Vec<usize> = map
                .iter()
                .filter(|(_, t)| due(t))
                .map(|(h, _)| *h)
                .collect();
            for h in back {
                map.remove(&h);
                if cut {
                    p.net.heal(h);
                } else {
                    p.start_node(h);
                }
            }
        }
    }
}

fn ms(rng: &mut Rng, from: u64, to: u64) -> Duration {
    Duration::from_millis(from + rng.below(to - from))
}

fn inject(p: &mut Pair, rng: &mut Rng, broken: &mut Broken, faults: &mut Faults) {
    let now = Instant::now();
    let node = FIRST_NODE + rng.below(NODES as u64) as usize;
    let node_free = !broken.node_dead.contains_key(&node)
        && !broken.node_cut.contains_key(&node)
        && broken.nodes_broken() < 2;
    let controllers_free = !broken.controllers_broken();
    match rng.below(12) {
        0 | 1 if controllers_free => {
            if let Some(leader) = p.leader() {
                p.kill_ctld(leader);
                broken.ctld_down.insert(leader, now + ms(rng, 0, 3000));
                faults.leader_kills += 1;
            }
        }
        2 if controllers_free => {
            if let Some(leader) = p.leader() {
                let standby = CONTROLLERS.into_iter().find(|&h| h != leader).unwrap();
                p.kill_ctld(standby);
                broken.ctld_down.insert(standby, now + ms(rng, 0, 3000));
                faults.standby_kills += 1;
            }
        }
        3 if controllers_free => {
            if let Some(leader) = p.leader() {
                p.signal_ctld(leader, libc::SIGSTOP);
                broken.paused = Some((leader, now + ms(rng, 8000, 15_000)));
                faults.leader_pauses += 1;
            }
        }
        4 if controllers_free => {
            if let Some(leader) = p.leader() {
                p.cut_from_database(leader, true);
                broken.db_cut = Some((leader, now + ms(rng, 5000, 20_000)));
                faults.database_cuts += 1;
            }
        }
        5 if controllers_free && rng.chance(50) => {
            p.pg.restart();
            faults.database_restarts += 1;
        }
        6..=8 if node_free => {
            p.kill_node(node);
            broken.node_dead.insert(node, now + ms(rng, 0, 5000));
            faults.gnoded_kills += 1;
        }
        9..=11 if node_free => {
            p.net.cut(node);
            broken.node_cut.insert(node, now + ms(rng, 2000, 40_000));
            faults.partitions += 1;
        }
        _ => {}
    }
}

pub fn run(secs: u64, seed: u64) {
    let mut rng = Rng(seed.max(1));
    let mut p = Pair::up(NODES);
    let mut broken = Broken::default();
    let mut faults = Faults::default();
    let mut acknowledged = BTreeSet::new();
    let start = Instant::now();
    let mut next_fault = start + Duration::from_secs(5);
    let mut open = 0usize;
    let mut counted = start;
    while start.elapsed() < Duration::from_secs(secs) {
        let now = Instant::now();
        broken.mend(&mut p, now, false, &mut faults);
        if now >= next_fault {
            inject(&mut p, &mut rng, &mut broken, &mut faults);
            next_fault = Instant::now() + ms(&mut rng, 3000, 12_000);
        }
        if now.duration_since(counted) > Duration::from_secs(2) {
            if let Some(jobs) = p.try_jobs() {
                open = jobs.values().filter(|j| !net::is_final(j)).count();
            }
            counted = now;
        }
        if open < BACKLOG {
            let ticks = crate::job_ticks(&mut rng);
            let requeue = rng.chance(60);
            if let Some(id) = p.try_submit(ticks, requeue, Duration::from_secs(3)) {
                acknowledged.insert(id);
                open += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    broken.mend(&mut p, Instant::now(), true, &mut faults);
    p.wait_leader(None, Duration::from_secs(60));
    p.wait("every node is up", Duration::from_secs(120), |p| {
        p.leader_health()
            .is_some_and(|h| h["nodes_up"].as_u64() == Some(NODES as u64))
    });
    let mut jobs = BTreeMap::new();
    p.wait(
        "every job reached a final state",
        Duration::from_secs(600),
        |p| {
            jobs = p.try_jobs().unwrap_or_default();
            !jobs.is_empty() && jobs.values().all(net::is_final)
        },
    );
    let mut v = Verdict::judge(&jobs, &Markers::read(&p.markers()));
    v.lost
        .extend(acknowledged.iter().filter(|id| !jobs.contains_key(id)));
    let line = format!(
        "chaos over two controllers: {secs} s, seed {seed}, {NODES} nodes, node timeout \
         {NODE_TIMEOUT} s; faults: {} leader kill -9, {} standby kill -9, {} leader SIGSTOP, \
         {} leader cut from the database, {} database restarts, {} gnoded kill -9, {} \
         partitions, {} controllers stepped down and restarted | acknowledged {}, in the \
         books {}, ran {}, ran twice {}, lost {}, misrecorded {} | completed again \
         (requeueable, finished during a partition) {}",
        faults.leader_kills,
        faults.standby_kills,
        faults.leader_pauses,
        faults.database_cuts,
        faults.database_restarts,
        faults.gnoded_kills,
        faults.partitions,
        faults.step_downs,
        acknowledged.len(),
        v.acknowledged,
        v.ran,
        v.ran_twice.len(),
        v.lost.len(),
        v.misrecorded.len(),
        v.completed_again.len(),
    );
    crate::report(&line, &v);
    let clean = v.ran_twice.is_empty() && v.lost.is_empty() && v.misrecorded.is_empty();
    assert!(clean, "{v:?}\n{}", p.logs());
}
