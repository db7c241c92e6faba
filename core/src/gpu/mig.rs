//! MIG placement rules: which sets of GPU instances fit a GPU, and where.
//!
//! A GPU instance of a profile occupies `memory_slices` consecutive memory
//! slices from one of the profile's legal starts; instances never overlap;
//! at most `max_count` of a profile exist; their compute slices add up to at
//! most the GPU's. These are the rules NVML enforces on real hardware and
//! the simulated backend enforces in tests (`shared/mig-profiles.md`).

use crate::gpu::{GpuModel, MigProfile};

/// One GPU instance placed on a GPU: a profile and its first memory slice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MigPlacement {
    pub profile: &'static MigProfile,
    pub start: u32,
}

impl MigPlacement {
    /// Memory slices it covers.
    pub fn size(&self) -> u32 {
        self.profile.memory_slices
    }

    /// The covered memory slices as a bit mask.
    pub fn mask(&self) -> u32 {
        slice_mask(self.start, self.size())
    }
}

fn slice_mask(start: u32, size: u32) -> u32 {
    ((1u32 << size) - 1) << start
}

/// A layout that cannot be read or cannot exist on a GPU model.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    #[error("invalid MIG layout '{0}': expected PROFILE[*N],... e.g. 3g.20gb,2g.10gb,1g.5gb*2")]
    Syntax(String),
    #[error("{model} has no MIG profile '{profile}' (it has: {known})")]
    UnknownProfile {
        model: String,
        profile: String,
        known: String,
    },
    #[error("{layout} is not possible on {model}: {why}")]
    Impossible {
        layout: String,
        model: String,
        why: String,
    },
}

/// Why one instance cannot be created where asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    #[error("{profile} cannot start at memory slice {start} on {model} (legal starts: {legal})")]
    IllegalStart {
        model: String,
        profile: String,
        start: u32,
        legal: String,
    },
    #[error(
        "{profile} at memory slice {start} overlaps the {other} instance at slice {other_start}"
    )]
    Overlap {
        profile: String,
        start: u32,
        other: String,
        other_start: u32,
    },
    #[error("{model} allows at most {max} x {profile}")]
    TooMany {
        model: String,
        profile: String,
        max: u32,
    },
    #[error("{profile} needs {need} compute slices and only {free} are free")]
    NoCompute {
        profile: String,
        need: u32,
        free: u32,
    },
}

fn known_profiles(m: &GpuModel) -> String {
    m.profiles
        .iter()
        .map(|p| p.name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Reads `2g.10gb*2,1g.5gb*3` (or a list of names) for one model.
pub fn parse_profiles(
    m: &'static GpuModel,
    layout: &str,
) -> Result<Vec<&'static MigProfile>, LayoutError> {
    let mut out = Vec::new();
    for item in layout.split(',') {
        let item = item.trim();
        let (name, n) = match item.split_once('*') {
            Some((name, n)) => (
                name.trim(),
                n.trim()
                    .parse::<u32>()
                    .ok()
                    .filter(|n| (1..=8).contains(n))
                    .ok_or_else(|| LayoutError::Syntax(layout.into()))?,
            ),
            None => (item, 1),
        };
        if name.is_empty() {
            return Err(LayoutError::Syntax(layout.into()));
        }
        out.extend(std::iter::repeat_n(profile_of(m, name)?, n as usize));
    }
    Ok(out)
}

/// The profile `name` of model `m`, or an error listing the model's profiles.
pub fn profile_of(m: &'static GpuModel, name: &str) -> Result<&'static MigProfile, LayoutError> {
    m.profile(name).ok_or_else(|| LayoutError::UnknownProfile {
        model: m.name.into(),
        profile: name.into(),
        known: known_profiles(m),
    })
}

/// Finds a legal placement for every profile of `layout`, in layout order.
pub fn plan(
    m: &'static GpuModel,
    layout: &[&'static MigProfile],
) -> Result<Vec<MigPlacement>, LayoutError> {
    plan_preferring(m, layout, &[])
}

/// Like [`plan`], but tries the placements in `prefer` first, so that
/// instances that already exist are kept where the layout allows it.
pub fn plan_preferring(
    m: &'static GpuModel,
    layout: &[&'static MigProfile],
    prefer: &[MigPlacement],
) -> Result<Vec<MigPlacement>, LayoutError> {
    let names = layout.iter().map(|p| p.name).collect::<Vec<_>>().join(",");
    let impossible = |why: String| LayoutError::Impossible {
        layout: names.clone(),
        model: m.name.into(),
        why,
    };
    if layout.is_empty() {
        return Err(impossible("the layout is empty".into()));
    }
    for prof in m.profiles {
        let n = layout.iter().filter(|p| p.name == prof.name).count() as u32;
        if n > prof.max_count {
            return Err(impossible(format!(
                "at most {} x {} fit",
                prof.max_count, prof.name
            )));
        }
    }
    let compute: u32 = layout.iter().map(|p| p.compute_slices).sum();
    if compute > m.compute_slices {
        return Err(impossible(format!(
            "needs {compute} compute slices, the GPU has {}",
            m.compute_slices
        )));
    }
    // Place big instances first: they have the fewest legal starts.
    let mut order: Vec<usize> = (0..layout.len()).collect();
    order.sort_by_key(|&i| {
        (
            std::cmp::Reverse(layout[i].memory_slices),
            layout[i].starts.len(),
        )
    });
    let mut starts = vec![0u32; layout.len()];
    let mut search = Search {
        layout,
        order: &order,
        prefer,
        starts: &mut starts,
        deepest: 0,
        deepest_used: 0,
    };
    if search.place(0, 0) {
        return Ok(layout
            .iter()
            .zip(starts)
            .map(|(&profile, start)| MigPlacement { profile, start })
            .collect());
    }
    let (depth, used) = (search.deepest, search.deepest_used);
    let stuck = layout[order[depth]];
    let free = m.memory_slices - used.count_ones();
    Err(impossible(if free < stuck.memory_slices {
        format!("no free memory slice for {}", stuck.name)
    } else {
        format!(
            "no free placement for {}: it must start at memory slice {}",
            stuck.name,
            list_or(stuck.starts)
        )
    }))
}

fn list_or(starts: &[u32]) -> String {
    let s: Vec<String> = starts.iter().map(|s| s.to_string()).collect();
    match s.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        _ => s.join(""),
    }
}

struct Search<'a> {
    layout: &'a [&'static MigProfile],
    order: &'a [usize],
    prefer: &'a [MigPlacement],
    starts: &'a mut [u32],
    /// The furthest point any attempt reached, for the error message.
    deepest: usize,
    deepest_used: u32,
}

impl Search<'_> {
    fn place(&mut self, depth: usize, used: u32) -> bool {
        if depth > self.deepest
            || (depth == self.deepest && used.count_ones() < self.deepest_used.count_ones())
        {
            self.deepest = depth;
            self.deepest_used = used;
        }
        let Some(&i) = self.order.get(depth) else {
            return true;
        };
        let prof = self.layout[i];
        // Preferred starts (existing instances of this profile) first.
        let preferred = self
            .prefer
            .iter()
            .filter(|p| p.profile.name == prof.name)
            .map(|p| p.start);
        let mut candidates: Vec<u32> = preferred.collect();
        for s in prof.starts {
            if !candidates.contains(s) {
                candidates.push(*s);
            }
        }
        for start in candidates {
            if !prof.starts.contains(&start) {
                continue;
            }
            let mask = slice_mask(start, prof.memory_slices);
            if used & mask != 0 {
                continue;
            }
            self.starts[i] = start;
            if self.place(depth + 1, used | mask) {
                return true;
            }
        }
        false
    }
}

/// Checks that an instance of `profile` may be created at `start` next to
/// the `existing` ones.
pub fn check_create(
    m: &GpuModel,
    existing: &[MigPlacement],
    profile: &'static MigProfile,
    start: u32,
) -> Result<(), PlacementError> {
    if !profile.starts.contains(&start) {
        return Err(PlacementError::IllegalStart {
            model: m.name.into(),
            profile: profile.name.into(),
            start,
            legal: list_or(profile.starts),
        });
    }
    let mask = slice_mask(start, profile.memory_slices);
    if let Some(other) = existing.iter().find(|e| e.mask() & mask != 0) {
        return Err(PlacementError::Overlap {
            profile: profile.name.into(),
            start,
            other: other.profile.name.into(),
            other_start: other.start,
        });
    }
    let same = existing
        .iter()
        .filter(|e| e.profile.name == profile.name)
        .count() as u32;
    if same >= profile.max_count {
        return Err(PlacementError::TooMany {
            model: m.name.into(),
            profile: profile.name.into(),
            max: profile.max_count,
        });
    }
    let used: u32 = existing.iter().map(|e| e.profile.compute_slices).sum();
    let free = m.compute_slices.saturating_sub(used);
    if profile.compute_slices > free {
        return Err(PlacementError::NoCompute {
            profile: profile.name.into(),
            need: profile.compute_slices,
            free,
        });
    }
    Ok(())
}

/// How to turn the instances a GPU has into the ones its layout asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reconfiguration {
    /// Indices into `existing` that stay as they are.
    pub keep: Vec<usize>,
    /// Indices into `existing` to destroy (before creating).
    pub destroy: Vec<usize>,
    /// Instances to create, with explicit placements.
    pub create: Vec<MigPlacement>,
}

impl Reconfiguration {
    pub fn is_noop(&self) -> bool {
        self.destroy.is_empty() && self.create.is_empty()
    }
}

/// Plans the change from `existing` to `desired`, keeping every existing
/// instance the desired layout can keep in place.
pub fn reconcile(
    m: &'static GpuModel,
    existing: &[MigPlacement],
    desired: &[&'static MigProfile],
) -> Result<Reconfiguration, LayoutError> {
    let target = plan_preferring(m, desired, existing)?;
    let mut unmatched: Vec<MigPlacement> = target.clone();
    let mut keep = Vec::new();
    let mut destroy = Vec::new();
    for (i, e) in existing.iter().enumerate() {
        match unmatched
            .iter()
            .position(|t| t.profile.name == e.profile.name && t.start == e.start)
        {
            Some(k) => {
                unmatched.swap_remove(k);
                keep.push(i);
            }
            None => destroy.push(i),
        }
    }
    unmatched.sort_by_key(|p| p.start);
    Ok(Reconfiguration {
        keep,
        destroy,
        create: unmatched,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::{model, MODELS};
    use std::collections::BTreeSet;

    fn a100() -> &'static GpuModel {
        model("A100-40GB").unwrap()
    }

    fn plan_str(m: &'static GpuModel, layout: &str) -> Result<Vec<(String, u32)>, String> {
        let profiles = parse_profiles(m, layout).map_err(|e| e.to_string())?;
        plan(m, &profiles)
            .map(|v| {
                v.iter()
                    .map(|p| (p.profile.name.to_string(), p.start))
                    .collect()
            })
            .map_err(|e| e.to_string())
    }

    #[test]
    fn the_issue_example_is_refused_with_its_reason() {
        assert_eq!(
            plan_str(a100(), "3g.20gb,3g.20gb,1g.5gb").unwrap_err(),
            "3g.20gb,3g.20gb,1g.5gb is not possible on A100-40GB: no free memory slice for 1g.5gb"
        );
    }

    #[test]
    fn placements_for_common_layouts() {
        let got = plan_str(a100(), "3g.20gb,2g.10gb,1g.5gb,1g.5gb").unwrap();
        let want: Vec<(String, u32)> =
            [("3g.20gb", 4), ("2g.10gb", 0), ("1g.5gb", 2), ("1g.5gb", 3)]
                .iter()
                .map(|(n, s)| (n.to_string(), *s))
                .collect();
        assert_eq!(got, want);
        let got = plan_str(a100(), "2g.10gb*2,1g.5gb*3").unwrap();
        let starts: Vec<u32> = got.iter().map(|(_, s)| *s).collect();
        assert_eq!(starts, vec![0, 2, 4, 5, 6]);
        assert_eq!(
            plan_str(model("H200").unwrap(), "7g.141gb").unwrap().len(),
            1
        );
    }

    #[test]
    fn full_gpus_name_the_profile_left_over() {
        assert_eq!(
            plan_str(a100(), "4g.20gb,1g.10gb,1g.10gb,1g.10gb").unwrap_err(),
            "4g.20gb,1g.10gb,1g.10gb,1g.10gb is not possible on A100-40GB: no free memory slice for 1g.10gb"
        );
    }

    #[test]
    fn maxima_and_compute_are_checked() {
        assert_eq!(
            plan_str(model("A30").unwrap(), "1g.6gb*5").unwrap_err(),
            "1g.6gb,1g.6gb,1g.6gb,1g.6gb,1g.6gb is not possible on A30: at most 4 x 1g.6gb fit"
        );
        assert!(plan_str(a100(), "4g.20gb,2g.10gb,2g.10gb")
            .unwrap_err()
            .ends_with("needs 8 compute slices, the GPU has 7"));
        assert!(matches!(
            parse_profiles(a100(), "1g.6gb"),
            Err(LayoutError::UnknownProfile { .. })
        ));
        for bad in ["", "1g.5gb*", "1g.5gb*0", "1g.5gb*x", ",1g.5gb"] {
            assert!(parse_profiles(a100(), bad).is_err(), "{bad:?}");
        }
    }

    /// Every multiset of profiles that some set of non-overlapping legal
    /// placements realises, found by brute force over the placement table.
    fn achievable(m: &'static GpuModel) -> BTreeSet<Vec<u32>> {
        let cands: Vec<(usize, u32)> = m
            .profiles
            .iter()
            .enumerate()
            .flat_map(|(i, p)| p.starts.iter().map(move |&s| (i, s)))
            .collect();
        let mut out = BTreeSet::new();
        fn walk(
            m: &GpuModel,
            cands: &[(usize, u32)],
            from: usize,
            used: u32,
            counts: &mut Vec<u32>,
            out: &mut BTreeSet<Vec<u32>>,
        ) {
            let compute: u32 = counts
                .iter()
                .zip(m.profiles)
                .map(|(n, p)| n * p.compute_slices)
                .sum();
            let within = counts
                .iter()
                .zip(m.profiles)
                .all(|(n, p)| *n <= p.max_count);
            if compute > m.compute_slices || !within {
                return;
            }
            out.insert(counts.clone());
            for k in from..cands.len() {
                let (i, s) = cands[k];
                let p = &m.profiles[i];
                let mask = ((1u32 << p.memory_slices) - 1) << s;
                if used & mask == 0 && s + p.memory_slices <= m.memory_slices {
                    counts[i] += 1;
                    walk(m, cands, k + 1, used | mask, counts, out);
                    counts[i] -= 1;
                }
            }
        }
        walk(m, &cands, 0, 0, &mut vec![0; m.profiles.len()], &mut out);
        out
    }

    /// Exhaustive: for every model and every multiset of its profiles within
    /// the per-profile maxima, `plan` succeeds exactly when brute force finds
    /// a placement, and what it returns is legal.
    #[test]
    fn plan_agrees_with_brute_force_on_every_layout() {
        for m in MODELS {
            let ok = achievable(m);
            let mut counts = vec![0u32; m.profiles.len()];
            let mut checked = 0;
            loop {
                let layout: Vec<&'static MigProfile> = counts
                    .iter()
                    .zip(m.profiles)
                    .flat_map(|(&n, p)| std::iter::repeat_n(p, n as usize))
                    .collect();
                if !layout.is_empty() {
                    let got = plan(m, &layout);
                    assert_eq!(
                        got.is_ok(),
                        ok.contains(&counts),
                        "{} {:?}: {:?}",
                        m.name,
                        counts,
                        got
                    );
                    if let Ok(placed) = got {
                        let mut existing = Vec::new();
                        for p in &placed {
                            check_create(m, &existing, p.profile, p.start)
                                .unwrap_or_else(|e| panic!("{}: {e}", m.name));
                            existing.push(*p);
                        }
                        let names: Vec<_> = placed.iter().map(|p| p.profile.name).collect();
                        let want: Vec<_> = layout.iter().map(|p| p.name).collect();
                        assert_eq!(names, want, "layout order is kept");
                    }
                    checked += 1;
                }
                // Next count vector (odometer up to each max_count).
                let mut k = 0;
                loop {
                    if k == counts.len() {
                        assert!(checked > 100, "{}", m.name);
                        break;
                    }
                    if counts[k] < m.profiles[k].max_count {
                        counts[k] += 1;
                        break;
                    }
                    counts[k] = 0;
                    k += 1;
                }
                if k == counts.len() {
                    break;
                }
            }
        }
    }

    #[test]
    fn create_rules() {
        let m = a100();
        let g1 = m.profile("1g.5gb").unwrap();
        let g3 = m.profile("3g.20gb").unwrap();
        let g4 = m.profile("4g.20gb").unwrap();
        let at = |p, s| MigPlacement {
            profile: p,
            start: s,
        };
        assert!(matches!(
            check_create(m, &[], g3, 2),
            Err(PlacementError::IllegalStart { .. })
        ));
        assert!(matches!(
            check_create(m, &[at(g4, 0)], g1, 3),
            Err(PlacementError::Overlap { .. })
        ));
        assert!(matches!(
            check_create(m, &[at(g3, 0), at(g3, 4)], g3, 4),
            Err(PlacementError::Overlap { .. })
        ));
        let seven: Vec<_> = (0..7).map(|s| at(g1, s)).collect();
        assert!(matches!(check_create(m, &seven[..6], g1, 6), Ok(())));
        assert!(matches!(
            check_create(m, &seven, g1, 6),
            Err(PlacementError::Overlap { .. })
        ));
        assert_eq!(
            check_create(m, &[], g3, 2).unwrap_err().to_string(),
            "3g.20gb cannot start at memory slice 2 on A100-40GB (legal starts: 0 or 4)"
        );
    }

    #[test]
    fn reconcile_keeps_what_it_can() {
        let m = a100();
        let g1 = m.profile("1g.5gb").unwrap();
        let g2 = m.profile("2g.10gb").unwrap();
        let g3 = m.profile("3g.20gb").unwrap();
        let at = |p, s| MigPlacement {
            profile: p,
            start: s,
        };
        // Already right: nothing to do.
        let have = [at(g2, 0), at(g2, 2), at(g1, 4), at(g1, 5), at(g1, 6)];
        let r = reconcile(m, &have, &[g2, g2, g1, g1, g1]).unwrap();
        assert!(r.is_noop());
        assert_eq!(r.keep, vec![0, 1, 2, 3, 4]);
        // Replace the two 2g at 0 and 2 by a 3g at 0; the 1g instances stay.
        let r = reconcile(m, &have, &[g3, g1, g1, g1]).unwrap();
        assert_eq!(r.destroy, vec![0, 1]);
        assert_eq!(r.keep, vec![2, 3, 4]);
        assert_eq!(r.create, vec![at(g3, 0)]);
        // From nothing.
        let r = reconcile(m, &[], &[g1]).unwrap();
        assert_eq!(r.create, vec![at(g1, 0)]);
    }
}
