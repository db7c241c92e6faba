//! Demand-driven MIG re-partitioning: when to re-make a GPU's instances
//! into others, from what waits in the queues.
//!
//! Pure decisions, no I/O. A [`RepartitionPolicy`] looks at every GPU's
//! instances (idle, shared, isolated, or already retiring) and at the
//! demand, and answers with [`Reshape`]s: instances to retire and the
//! placements to create once they are all idle. The caller stops placing new
//! processes on retiring instances (processes already bound there go on),
//! destroys them when nothing uses them, and creates the new ones, as MIG
//! requires: an instance cannot be destroyed while a process uses it, and
//! the GPU is never cleared while jobs run (`shared/mig-profiles.md`).
//!
//! [`DemandRepartition`], the policy: isolated jobs need an instance each,
//! ideally the smallest that holds them; shared work packs better into
//! fewer, larger instances (one pool of memory instead of several that each
//! strand a remainder). So while isolated jobs wait and no instance of the
//! size they need is open, one larger instance is split; while only shared
//! work waits, neighbouring instances are merged, up to a profile of
//! `max_pool_slices` compute slices.

use crate::gpu::{GpuModel, MigProfile};
use crate::mig::{check_create, MigPlacement};

/// What an instance is doing, as far as re-partitioning cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Use {
    /// Nothing runs on it and no process is bound to it.
    Idle,
    /// Shared tasks run on it, or processes are bound to it.
    Shared,
    /// Held by an isolated job, or drained for one.
    Isolated,
    /// Part of a reshape in progress: it goes when idle.
    Retiring,
}

/// One instance of a GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InstanceUse {
    pub placement: MigPlacement,
    pub state: Use,
}

/// One GPU with MIG enabled.
#[derive(Debug, Clone)]
pub struct GpuUse {
    pub model: &'static GpuModel,
    pub instances: Vec<InstanceUse>,
}

/// The work waiting for GPU instances.
#[derive(Debug, Clone, Default)]
pub struct Demand {
    /// Footprints (MiB) of pending isolated jobs, in queue order.
    pub isolated_mib: Vec<u64>,
    /// Shared jobs wait to start, or shared tasks wait for memory.
    pub shared_backlog: bool,
}

/// A change to one GPU: retire `retire` (indices into its instances), then
/// create `create` in the memory slices they covered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reshape {
    pub gpu: usize,
    pub retire: Vec<usize>,
    pub create: Vec<MigPlacement>,
}

/// Decides re-partitions. One type per policy, chosen by name.
pub trait RepartitionPolicy: Send + Sync {
    fn name(&self) -> &'static str;
    /// New reshapes to start now (never touching isolated or retiring
    /// instances).
    fn plan(&self, gpus: &[GpuUse], demand: &Demand) -> Vec<Reshape>;
}

/// Split for isolated jobs, merge for shared work (module docs).
#[derive(Debug, Clone, Copy)]
pub struct DemandRepartition {
    /// The largest merged instance, in compute slices.
    pub max_pool_slices: u32,
}

/// Profiles a scheduler creates: no `+me` (media extension) variants.
fn plain_profiles(m: &'static GpuModel) -> impl Iterator<Item = &'static MigProfile> {
    m.profiles.iter().filter(|p| !p.name.contains('+'))
}

/// The smallest plain profile of `m` holding `mib`.
fn smallest_holding(m: &'static GpuModel, mib: u64) -> Option<&'static MigProfile> {
    plain_profiles(m)
        .filter(|p| p.memory_mib >= mib)
        .min_by_key(|p| (p.memory_mib, p.compute_slices))
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
                let placed = MigPlacement { profile: p, start: at };
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
    /// Splits one instance larger than the first waiting isolated job needs,
    /// unless an open instance of the size it needs exists.
    fn split(&self, gpus: &[GpuUse], mib: u64) -> Option<Reshape> {
        let open = |s: Use| matches!(s, Use::Idle | Use::Shared);
        // An open instance the job fits in and that is no bigger than
        // needed: the launch policy takes it (draining it if need be).
        let right_sized = gpus.iter().any(|g| {
            smallest_holding(g.model, mib).is_some_and(|want| {
                g.instances.iter().any(|i| {
                    open(i.state)
                        && i.placement.profile.memory_mib >= mib
                        && i.placement.profile.memory_mib <= want.memory_mib
                })
            })
        });
        if right_sized {
            return None;
        }
        // Otherwise the open instance to split: idle first, then the one
        // with the least memory (the least shared capacity lost).
        let mut best: Option<((bool, u64, usize, usize), Reshape)> = None;
        for (gi, g) in gpus.iter().enumerate() {
            let Some(want) = smallest_holding(g.model, mib) else {
                continue;
            };
            for (ii, inst) in g.instances.iter().enumerate() {
                let p = inst.placement;
                if !open(inst.state) || p.profile.memory_mib <= want.memory_mib {
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
                create.sort_by_key(|c| c.start);
                let key = (inst.state != Use::Idle, p.profile.memory_mib, gi, ii);
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

    /// Merges neighbouring open instances of one GPU into one larger
    /// instance: the merge with the fewest busy instances, then the smallest
    /// result, then the lowest position.
    fn merge(&self, gi: usize, g: &GpuUse) -> Option<Reshape> {
        let mut best: Option<((usize, u32, u32), Reshape)> = None;
        for p in plain_profiles(g.model).filter(|p| p.compute_slices <= self.max_pool_slices) {
            for &start in p.starts {
                let region = MigPlacement { profile: p, start };
                let mask = region.mask();
                let inside: Vec<usize> = (0..g.instances.len())
                    .filter(|&k| g.instances[k].placement.mask() & mask != 0)
                    .collect();
                // Every instance touching the region lies inside it, is open,
                // and is smaller than the result; at least two go.
                let ok = inside.len() >= 2
                    && inside.iter().all(|&k| {
                        let i = &g.instances[k];
                        i.placement.mask() & !mask == 0
                            && matches!(i.state, Use::Idle | Use::Shared)
                            && i.placement.profile.memory_mib < p.memory_mib
                    });
                if !ok {
                    continue;
                }
                let kept: Vec<MigPlacement> = (0..g.instances.len())
                    .filter(|k| !inside.contains(k))
                    .map(|k| g.instances[k].placement)
                    .collect();
                if check_create(g.model, &kept, p, start).is_err() {
                    continue;
                }
                let busy = inside
                    .iter()
                    .filter(|&&k| g.instances[k].state == Use::Shared)
                    .count();
                let key = (busy, p.compute_slices, start);
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

impl RepartitionPolicy for DemandRepartition {
    fn name(&self) -> &'static str {
        "demand"
    }

    fn plan(&self, gpus: &[GpuUse], demand: &Demand) -> Vec<Reshape> {
        // One reshape at a time per GPU.
        let busy = |g: &GpuUse| g.instances.iter().any(|i| i.state == Use::Retiring);
        if let Some(&mib) = demand.isolated_mib.first() {
            // Isolated jobs first (as in the launch policy); no merges while
            // they wait.
            if gpus.iter().any(busy) {
                return Vec::new();
            }
            return self.split(gpus, mib).into_iter().collect();
        }
        if !demand.shared_backlog {
            return Vec::new();
        }
        gpus.iter()
            .enumerate()
            .filter(|(_, g)| !busy(g))
            .filter_map(|(gi, g)| self.merge(gi, g))
            .collect()
    }
}

/// A re-partitioning policy by name: `none` (no policy) or `demand[:N]`
/// (N: the largest merged instance in compute slices, default 2).
pub fn repartition_policy(name: &str) -> Result<Option<DemandRepartition>, UnknownRepartition> {
    let bad = || UnknownRepartition(name.into());
    match name {
        "none" => Ok(None),
        "demand" => Ok(Some(DemandRepartition { max_pool_slices: 2 })),
        _ => {
            let n = name
                .strip_prefix("demand:")
                .and_then(|n| n.parse::<u32>().ok())
                .filter(|n| (1..=8).contains(n))
                .ok_or_else(bad)?;
            Ok(Some(DemandRepartition { max_pool_slices: n }))
        }
    }
}

/// A re-partitioning policy name that does not exist.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown re-partitioning policy '{0}' (known: none, demand, demand:N with N the largest merged instance in compute slices, 1-8)")]
pub struct UnknownRepartition(pub String);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::{model, parse_layout};

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
        }
    }

    fn names(v: &[MigPlacement]) -> Vec<String> {
        v.iter()
            .map(|p| format!("{}@{}", p.profile.name, p.start))
            .collect()
    }

    const DEMAND2: DemandRepartition = DemandRepartition { max_pool_slices: 2 };

    #[test]
    fn shared_backlog_merges_neighbours_idle_first() {
        use Use::*;
        let g = gpu("A30", "1g.6gb*4", &[Shared, Shared, Idle, Idle]);
        let d = Demand {
            isolated_mib: vec![],
            shared_backlog: true,
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
            isolated_mib: vec![],
            shared_backlog: true,
        };
        // The only legal pairs hold an isolated instance.
        let g = gpu("A30", "1g.6gb*4", &[Isolated, Idle, Idle, Isolated]);
        assert!(DEMAND2.plan(&[g], &d).is_empty());
        // Already at the pool limit.
        let g = gpu("A30", "2g.12gb*2", &[Idle, Idle]);
        assert!(DEMAND2.plan(&[g.clone()], &d).is_empty());
        let whole = DemandRepartition { max_pool_slices: 4 };
        assert_eq!(names(&whole.plan(&[g], &d)[0].create), ["4g.24gb@0"]);
        // One reshape at a time per GPU.
        let g = gpu("A30", "1g.6gb*4", &[Retiring, Retiring, Idle, Idle]);
        assert!(DEMAND2.plan(&[g], &d).is_empty());
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
            isolated_mib: vec![],
            shared_backlog: true,
        };
        let r = DEMAND2.plan(&[g.clone()], &d);
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
        let g = gpu("A30", "2g.12gb*2", &[Shared, Idle]);
        let d = Demand {
            isolated_mib: vec![2048],
            shared_backlog: true,
        };
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
                        isolated_mib: iso.clone(),
                        shared_backlog: true,
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
    fn names_parse() {
        assert!(repartition_policy("none").unwrap().is_none());
        assert_eq!(
            repartition_policy("demand").unwrap().unwrap().max_pool_slices,
            2
        );
        assert_eq!(
            repartition_policy("demand:4")
                .unwrap()
                .unwrap()
                .max_pool_slices,
            4
        );
        assert!(repartition_policy("demand:0").is_err());
        assert!(repartition_policy("always").is_err());
    }
}
