//! The `demand` re-partitioning policy.
//!
//! [`DemandRepartition`]: isolated jobs need an instance each,
//! ideally the smallest that holds them; shared work packs better into
//! fewer, larger instances (one pool of memory instead of several that each
//! strand a remainder). So while isolated jobs wait and no instance of the
//! size they need is open, an idle larger instance is split, or, where none
//! is larger, idle smaller instances are merged into one of that size; while only
//! shared work waits, idle neighbouring instances are merged, up to a
//! profile of `max_pool_slices` compute slices. It touches idle instances
//! only: draining busy ones to reshape them was tried in the simulator and
//! lost more (instances held empty while their neighbours drained) than
//! the better packing gained (docs/simulator.md). The retiring state still
//! matters to a node, which must keep new processes off an instance between
//! deciding to destroy it and destroying it.

use super::{
    plain_profiles, BadSetting, Demand, GpuUse, InstanceUse, IsolatedNeed, RepartitionPolicy,
    Reshape, Use,
};
use crate::gpu::mig::{check_create, MigPlacement};
use crate::gpu::GpuModel;

/// Builds the policy from its setting: the largest merged instance in
/// compute slices, 1-8 (default 2).
pub(super) fn build(setting: Option<&str>) -> Result<Box<dyn RepartitionPolicy>, BadSetting> {
    Ok(Box::new(DemandRepartition {
        max_pool_slices: max_pool_slices(setting)?,
    }))
}

fn max_pool_slices(setting: Option<&str>) -> Result<u32, BadSetting> {
    match setting {
        None => Ok(2),
        Some(n) => n
            .parse::<u32>()
            .ok()
            .filter(|n| (1..=8).contains(n))
            .ok_or_else(|| {
                BadSetting(format!(
                    "'{n}' is not a number of compute slices from 1 to 8"
                ))
            }),
    }
}

/// Split for isolated jobs, merge for shared work (module docs).
#[derive(Debug, Clone, Copy)]
pub struct DemandRepartition {
    /// The largest merged instance, in compute slices.
    pub max_pool_slices: u32,
}

/// Fills memory slices `[start, start + size)` with the fewest, largest
/// plain profiles that may go there next to `kept` (and what is placed so
/// far), compute permitting. May leave slices empty where nothing fits.
fn fill(
    m: &'static GpuModel,
    kept: &mut Vec<MigPlacement>,
    start: u32,
    size: u32,
    max_slices: u32,
) -> Vec<MigPlacement> {
    let mut out = Vec::new();
    let mut at = start;
    while at < start + size {
        let room = start + size - at;
        let best = plain_profiles(m)
            .filter(|p| p.memory_slices <= room && p.compute_slices <= max_slices)
            .filter(|p| check_create(m, kept, p, at).is_ok())
            .max_by_key(|p| (p.memory_slices, p.compute_slices));
        match best {
            Some(p) => {
                let placed = MigPlacement {
                    profile: p,
                    start: at,
                };
                kept.push(placed);
                out.push(placed);
                at += p.memory_slices;
            }
            None => at += 1,
        }
    }
    out
}

impl DemandRepartition {
    /// Splits the idle instance, larger than an isolated job of `mib`
    /// needs, that gives up the least memory; the job's instance comes
    /// first in `create`.
    fn split(&self, gpus: &[GpuUse], need: &IsolatedNeed, keep_mib: u64) -> Option<Reshape> {
        let holding = |gi: usize, ii: usize| {
            gpus.iter().enumerate().any(|(g, gpu)| {
                gpu.instances
                    .iter()
                    .enumerate()
                    .any(|(k, i)| (g, k) != (gi, ii) && i.placement.profile.memory_mib >= keep_mib)
            })
        };
        // The one with the least memory (the least shared capacity lost).
        let mut best: Option<((u64, usize, usize), Reshape)> = None;
        for (gi, g) in gpus.iter().enumerate() {
            let Some(want) = need.profile_on(g.model) else {
                continue;
            };
            for (ii, inst) in g.instances.iter().enumerate() {
                let p = inst.placement;
                if inst.state != Use::Idle || p.profile.memory_mib <= want.memory_mib {
                    continue;
                }
                let mut kept: Vec<MigPlacement> = g
                    .instances
                    .iter()
                    .enumerate()
                    .filter(|(k, _)| *k != ii)
                    .map(|(_, i)| i.placement)
                    .collect();
                // The job's instance at the first legal start inside the
                // region, the rest filled with the largest that fit.
                let Some(at) = want
                    .starts
                    .iter()
                    .copied()
                    .filter(|s| *s >= p.start && s + want.memory_slices <= p.start + p.size())
                    .find(|s| check_create(g.model, &kept, want, *s).is_ok())
                else {
                    continue;
                };
                kept.push(MigPlacement {
                    profile: want,
                    start: at,
                });
                let mut create = vec![MigPlacement {
                    profile: want,
                    start: at,
                }];
                create.extend(fill(g.model, &mut kept, p.start, at - p.start, u32::MAX));
                let after = at + want.memory_slices;
                create.extend(fill(
                    g.model,
                    &mut kept,
                    after,
                    p.start + p.size() - after,
                    u32::MAX,
                ));
                create[1..].sort_by_key(|c| c.start);
                let made_holding = create.iter().any(|c| c.profile.memory_mib >= keep_mib);
                if !made_holding && !holding(gi, ii) {
                    // The last instance the largest shared job fits in.
                    continue;
                }
                if !g.keeps(&[ii], &create) {
                    continue;
                }
                let key = (p.profile.memory_mib, gi, ii);
                if best.as_ref().is_none_or(|(k, _)| key < *k) {
                    best = Some((
                        key,
                        Reshape {
                            gpu: gi,
                            retire: vec![ii],
                            create,
                        },
                    ));
                }
            }
        }
        best.map(|(_, r)| r)
    }

    /// Merges idle instances into the smallest instance that holds an
    /// isolated job of `mib`, when no idle instance is that large: the
    /// region where the fewest instances go, then the lowest GPU and start.
    fn merge_for(&self, gpus: &[GpuUse], need: &IsolatedNeed) -> Option<Reshape> {
        let mut best: Option<((usize, usize, u32), Reshape)> = None;
        for (gi, g) in gpus.iter().enumerate() {
            let Some(want) = need.profile_on(g.model) else {
                continue;
            };
            for &start in want.starts {
                let region = MigPlacement {
                    profile: want,
                    start,
                };
                let Some(inside) = idle_region(g, region).filter(|v| !v.is_empty()) else {
                    continue;
                };
                if !g.keeps(&inside, &[region]) {
                    continue;
                }
                let key = (inside.len(), gi, start);
                if best.as_ref().is_none_or(|(k, _)| key < *k) {
                    best = Some((
                        key,
                        Reshape {
                            gpu: gi,
                            retire: inside,
                            create: vec![region],
                        },
                    ));
                }
            }
        }
        best.map(|(_, r)| r)
    }

    /// Merges idle neighbouring instances of one GPU into one larger
    /// instance: the smallest result, then the lowest position.
    fn merge(&self, gi: usize, g: &GpuUse) -> Option<Reshape> {
        let mut best: Option<((u32, u32), Reshape)> = None;
        for p in plain_profiles(g.model).filter(|p| p.compute_slices <= self.max_pool_slices) {
            for &start in p.starts {
                let region = MigPlacement { profile: p, start };
                let Some(inside) = idle_region(g, region) else {
                    continue;
                };
                // At least two go, each smaller than the result, which has
                // at least their compute slices (no compute is given up to
                // gain memory).
                let instances = || inside.iter().map(|&k| g.instances[k].placement.profile);
                let slices: u32 = instances().map(|q| q.compute_slices).sum();
                if inside.len() < 2
                    || instances().any(|q| q.memory_mib >= p.memory_mib)
                    || p.compute_slices < slices
                    || !g.keeps(&inside, &[region])
                {
                    continue;
                }
                let key = (p.compute_slices, start);
                if best.as_ref().is_none_or(|(k, _)| key < *k) {
                    best = Some((
                        key,
                        Reshape {
                            gpu: gi,
                            retire: inside,
                            create: vec![region],
                        },
                    ));
                }
            }
        }
        best.map(|(_, r)| r)
    }
}

/// The instances of `g` inside `region`, when every instance touching it
/// lies inside it and is idle, and `region` can be created once they go.
fn idle_region(g: &GpuUse, region: MigPlacement) -> Option<Vec<usize>> {
    let mask = region.mask();
    let inside: Vec<usize> = (0..g.instances.len())
        .filter(|&k| g.instances[k].placement.mask() & mask != 0)
        .collect();
    let contained = inside.iter().all(|&k| {
        let i = &g.instances[k];
        i.placement.mask() & !mask == 0 && i.state == Use::Idle
    });
    if !contained {
        return None;
    }
    let kept: Vec<MigPlacement> = (0..g.instances.len())
        .filter(|k| !inside.contains(k))
        .map(|k| g.instances[k].placement)
        .collect();
    check_create(g.model, &kept, region.profile, region.start)
        .is_ok()
        .then_some(inside)
}

/// The GPUs as they will be once the reshapes planned so far in a pass are
/// done, with the index each instance has in the caller's view.
struct Working {
    gpus: Vec<GpuUse>,
    /// `orig[g][k]`: index in the caller's GPU `g` of working instance `k`
    /// (`None` for instances the pass creates).
    orig: Vec<Vec<Option<usize>>>,
}

impl Working {
    fn new(gpus: &[GpuUse]) -> Working {
        Working {
            gpus: gpus.to_vec(),
            orig: gpus
                .iter()
                .map(|g| (0..g.instances.len()).map(Some).collect())
                .collect(),
        }
    }

    /// Applies a reshape planned on the working view; returns it in the
    /// caller's indices. `claim_first`: the first created instance is
    /// taken (by the isolated job it was split for).
    fn apply(&mut self, r: Reshape, claim_first: bool) -> Reshape {
        let g = r.gpu;
        let mut retire: Vec<usize> = r
            .retire
            .iter()
            // Only idle instances are reshaped, and only the caller's are idle.
            .filter_map(|&k| self.orig[g][k])
            .collect();
        retire.sort_unstable();
        let mut gone = r.retire.clone();
        gone.sort_unstable_by(|a, b| b.cmp(a));
        for k in gone {
            self.gpus[g].instances.remove(k);
            self.orig[g].remove(k);
        }
        for (n, &placement) in r.create.iter().enumerate() {
            let state = if claim_first && n == 0 {
                Use::Isolated
            } else {
                Use::Creating
            };
            self.gpus[g]
                .instances
                .push(InstanceUse { placement, state });
            self.orig[g].push(None);
        }
        Reshape {
            gpu: g,
            retire,
            create: r.create,
        }
    }

    /// Takes an open (or coming) instance that serves `need` (its profile,
    /// or one that holds its memory and is no bigger than the smallest
    /// profile that does): the launch policy gives it to the job (draining
    /// it if need be). Whether there was one.
    fn claim_right_sized(&mut self, need: &IsolatedNeed) -> bool {
        for g in &mut self.gpus {
            let Some(want) = need.profile_on(g.model) else {
                continue;
            };
            let found = g.instances.iter_mut().find(|i| {
                let p = i.placement.profile;
                let serves = match need.profile {
                    Some(_) => p.name == want.name,
                    None => p.memory_mib >= need.mib && p.memory_mib <= want.memory_mib,
                };
                matches!(i.state, Use::Idle | Use::Shared | Use::Creating) && serves
            });
            if let Some(i) = found {
                i.state = Use::Isolated;
                return true;
            }
        }
        false
    }
}

impl RepartitionPolicy for DemandRepartition {
    fn name(&self) -> &'static str {
        "demand"
    }

    fn plan(&self, gpus: &[GpuUse], demand: &Demand) -> Vec<Reshape> {
        let mut work = Working::new(gpus);
        let mut out = Vec::new();
        if !demand.isolated.is_empty() {
            // Isolated jobs first (as in the launch policy), in queue order;
            // no merges while they wait.
            for need in &demand.isolated {
                if work.claim_right_sized(need) {
                    continue;
                }
                let split = self.split(&work.gpus, need, demand.largest_shared_mib);
                let Some(r) = split.or_else(|| self.merge_for(&work.gpus, need)) else {
                    break;
                };
                out.push(work.apply(r, true));
            }
            return out;
        }
        if !demand.shared_backlog {
            return out;
        }
        for gi in 0..work.gpus.len() {
            while let Some(r) = self.merge(gi, &work.gpus[gi]) {
                out.push(work.apply(r, false));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::{model, parse_layout};
    use crate::{Job, JobState};

    fn gpu(name: &str, layout: &str, states: &[Use]) -> GpuUse {
        let m = model(name).unwrap();
        let placements = parse_layout(m, layout).unwrap();
        assert_eq!(placements.len(), states.len());
        GpuUse {
            model: m,
            instances: placements
                .into_iter()
                .zip(states)
                .map(|(placement, &state)| InstanceUse { placement, state })
                .collect(),
            keep: Vec::new(),
        }
    }

    #[test]
    fn a_bound_keeps_instances_a_reshape_would_take() {
        use Use::*;
        // Two idle 1g.6gb and a shared one on an A30; shared work waits:
        // the two idle ones would be merged into a 2g.12gb.
        let d = Demand {
            isolated: vec![],
            shared_backlog: true,
            largest_shared_mib: 0,
        };
        let free = gpu("A30", "1g.6gb*4", &[Idle, Idle, Shared, Shared]);
        assert_eq!(DEMAND2.plan(std::slice::from_ref(&free), &d).len(), 1);
        // Keep at least three 1g.6gb: no merge.
        let m = model("A30").unwrap();
        let kept = GpuUse {
            keep: vec![(m.profile("1g.6gb").unwrap(), 3)],
            ..free
        };
        assert!(DEMAND2.plan(std::slice::from_ref(&kept), &d).is_empty());
        // An isolated job needing a 2g.12gb does not get it by merging
        // either.
        let iso = Demand {
            isolated: vec![11000.into()],
            shared_backlog: false,
            largest_shared_mib: 0,
        };
        assert!(DEMAND2.plan(&[kept], &iso).is_empty());
    }

    fn names(v: &[MigPlacement]) -> Vec<String> {
        v.iter()
            .map(|p| format!("{}@{}", p.profile.name, p.start))
            .collect()
    }

    const DEMAND2: DemandRepartition = DemandRepartition { max_pool_slices: 2 };

    #[test]
    fn shared_backlog_merges_idle_neighbours() {
        use Use::*;
        let g = gpu("A30", "1g.6gb*4", &[Shared, Shared, Idle, Idle]);
        let d = Demand {
            isolated: vec![],
            shared_backlog: true,
            largest_shared_mib: 0,
        };
        let r = DEMAND2.plan(&[g], &d);
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].retire, vec![2, 3]);
        assert_eq!(names(&r[0].create), ["2g.12gb@2"]);
        // Nothing waits: nothing changes.
        let g = gpu("A30", "1g.6gb*4", &[Idle, Idle, Idle, Idle]);
        assert!(DEMAND2.plan(&[g], &Demand::default()).is_empty());
    }

    #[test]
    fn merges_never_touch_isolated_or_exceed_the_pool_limit() {
        use Use::*;
        let d = Demand {
            isolated: vec![],
            shared_backlog: true,
            largest_shared_mib: 0,
        };
        // The only legal pairs hold an isolated instance.
        let g = gpu("A30", "1g.6gb*4", &[Isolated, Idle, Idle, Isolated]);
        assert!(DEMAND2.plan(&[g], &d).is_empty());
        // Already at the pool limit.
        let g = gpu("A30", "2g.12gb*2", &[Idle, Idle]);
        assert!(DEMAND2.plan(std::slice::from_ref(&g), &d).is_empty());
        let whole = DemandRepartition { max_pool_slices: 4 };
        assert_eq!(names(&whole.plan(&[g], &d)[0].create), ["4g.24gb@0"]);
        // Instances in a reshape already are left alone.
        let g = gpu("A30", "1g.6gb*4", &[Retiring, Retiring, Idle, Idle]);
        let r = DEMAND2.plan(&[g], &d);
        assert_eq!(
            (r.len(), names(&r[0].create)),
            (1, vec!["2g.12gb@2".into()])
        );
        // All idle: every pair merges in one pass.
        let g = gpu("H100-80GB", "1g.10gb*7", &[Idle; 7]);
        let r = DEMAND2.plan(&[g], &d);
        let made: Vec<String> = r.iter().flat_map(|r| names(&r.create)).collect();
        assert_eq!(made, ["2g.20gb@0", "2g.20gb@2", "2g.20gb@4"]);
        assert_eq!(r[2].retire, vec![4, 5], "indices of the caller's view");
    }

    #[test]
    fn a100_merges_small_slices_into_a_10gb_one() {
        use Use::*;
        // The CASE paper's layout: 2x 2g.10gb + 3x 1g.5gb.
        let g = gpu(
            "A100-40GB",
            "2g.10gb*2,1g.5gb*3",
            &[Shared, Shared, Idle, Idle, Idle],
        );
        let d = Demand {
            isolated: vec![],
            shared_backlog: true,
            largest_shared_mib: 0,
        };
        let r = DEMAND2.plan(std::slice::from_ref(&g), &d);
        assert_eq!(r.len(), 1);
        let retired: Vec<String> = r[0]
            .retire
            .iter()
            .map(|&k| {
                let p = g.instances[k].placement;
                format!("{}@{}", p.profile.name, p.start)
            })
            .collect();
        assert_eq!(retired, ["1g.5gb@4", "1g.5gb@5"]);
        assert_eq!(names(&r[0].create), ["2g.10gb@4"]);
    }

    #[test]
    fn isolated_jobs_split_a_larger_instance_when_none_fits_them_snugly() {
        use Use::*;
        let d = Demand {
            isolated: vec![2048.into()],
            shared_backlog: true,
            largest_shared_mib: 0,
        };
        // Busy instances are not split.
        let g = gpu("A30", "2g.12gb*2", &[Shared, Shared]);
        assert!(DEMAND2.plan(&[g], &d).is_empty());
        let g = gpu("A30", "2g.12gb*2", &[Shared, Idle]);
        let r = DEMAND2.plan(&[g], &d);
        assert_eq!(r.len(), 1);
        // The idle one goes, into two 1g instances.
        assert_eq!(r[0].retire, vec![1]);
        assert_eq!(names(&r[0].create), ["1g.6gb@2", "1g.6gb@3"]);
        // A right-sized open instance exists: the launch policy uses it.
        let g = gpu("A30", "2g.12gb,1g.6gb*2", &[Idle, Shared, Isolated]);
        assert!(DEMAND2.plan(&[g], &d).is_empty());
        // No merges while isolated jobs wait.
        let g = gpu("A30", "1g.6gb*4", &[Isolated, Isolated, Isolated, Isolated]);
        assert!(DEMAND2.plan(&[g], &d).is_empty());
        // One split per waiting job: three jobs, two idle 2g instances make
        // four 1g; an instance being created counts as room.
        let d3 = Demand {
            isolated: vec![2048.into(); 3],
            shared_backlog: false,
            largest_shared_mib: 0,
        };
        let g = gpu("A30", "2g.12gb*2", &[Idle, Idle]);
        let r = DEMAND2.plan(&[g], &d3);
        assert_eq!(r.len(), 2);
        assert_eq!(
            (r[0].retire.clone(), r[1].retire.clone()),
            (vec![0], vec![1])
        );
        let mut g = gpu("A30", "2g.12gb", &[Idle]);
        g.instances.push(InstanceUse {
            placement: MigPlacement {
                profile: g.model.profile("1g.6gb").unwrap(),
                start: 2,
            },
            state: Creating,
        });
        let r = DEMAND2.plan(&[g], &d3);
        assert_eq!(r.len(), 1, "the job after the first gets the split");
    }

    #[test]
    fn a_split_keeps_an_instance_for_the_largest_shared_job() {
        use Use::*;
        let g = gpu("A30", "2g.12gb,1g.6gb*2", &[Idle, Isolated, Isolated]);
        let mut d = Demand {
            isolated: vec![2048.into()],
            shared_backlog: true,
            largest_shared_mib: 8000,
        };
        assert!(DEMAND2.plan(std::slice::from_ref(&g), &d).is_empty());
        d.largest_shared_mib = 5000;
        assert_eq!(DEMAND2.plan(&[g], &d).len(), 1);
    }

    #[test]
    fn every_reshape_leaves_a_legal_layout() {
        use Use::*;
        let cases = [
            ("A100-40GB", "1g.5gb*7"),
            ("A100-40GB", "2g.10gb*3,1g.5gb"),
            ("A100-40GB", "3g.20gb*2"),
            ("A30", "1g.6gb*4"),
            ("H100-80GB", "1g.10gb*7"),
        ];
        for (m, layout) in cases {
            for iso in [vec![], vec![1000u64]] {
                for pool in 1..=7 {
                    let n = parse_layout(model(m).unwrap(), layout).unwrap().len();
                    let g = gpu(m, layout, &vec![Idle; n]);
                    let d = Demand {
                        isolated: iso.iter().map(|&m| m.into()).collect(),
                        shared_backlog: true,
                        largest_shared_mib: 0,
                    };
                    let p = DemandRepartition {
                        max_pool_slices: pool,
                    };
                    for r in p.plan(std::slice::from_ref(&g), &d) {
                        let mut kept: Vec<MigPlacement> = g
                            .instances
                            .iter()
                            .enumerate()
                            .filter(|(k, _)| !r.retire.contains(k))
                            .map(|(_, i)| i.placement)
                            .collect();
                        for c in &r.create {
                            check_create(g.model, &kept, c.profile, c.start)
                                .unwrap_or_else(|e| panic!("{m} {layout}: {e}"));
                            kept.push(*c);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn demand_of_a_queue() {
        let job = |id, isolated, mib, state| {
            let mut j = Job::new(
                id,
                crate::JobSpec {
                    isolated,
                    gpu: crate::job::GpuRequest {
                        model: None,
                        mig_profile: None,
                        mem_mib: Some(mib),
                        share: None,
                        share_limit: None,
                        count: None,
                    },
                    ..crate::JobSpec::default()
                },
                0,
            );
            j.state = state;
            j
        };
        let jobs = [
            job(1, true, 2000, JobState::Running),
            job(2, true, 3000, JobState::Pending),
            job(3, false, 9000, JobState::Running),
            job(4, true, 1000, JobState::Pending),
            job(5, false, 12000, JobState::Completed),
        ];
        let d = Demand::of(jobs.iter(), false);
        let mib: Vec<u64> = d.isolated.iter().map(|n| n.mib).collect();
        assert_eq!(mib, vec![3000, 1000]);
        assert!(!d.shared_backlog, "no shared job pending, no task waiting");
        assert_eq!(d.largest_shared_mib, 9000, "ended jobs do not count");
        assert!(Demand::of(jobs.iter(), true).shared_backlog);
        let more = [job(6, false, 500, JobState::Pending)];
        assert!(Demand::of(more.iter(), false).shared_backlog);
    }

    #[test]
    fn the_setting_is_the_largest_merged_instance() {
        assert_eq!(max_pool_slices(None), Ok(2));
        assert_eq!(max_pool_slices(Some("4")), Ok(4));
        for bad in ["0", "9", "x", ""] {
            assert!(max_pool_slices(Some(bad)).is_err(), "{bad}");
        }
    }
}
