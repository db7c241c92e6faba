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
//! The policies, one file each, are listed in [`REPARTITIONS`].

mod demand;

use crate::gpu::mig::MigPlacement;
use crate::gpu::{GpuModel, MigProfile};
use crate::{Job, JobState};

pub use demand::DemandRepartition;

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
    /// Made by a reshape, not ready yet: it will be open, so it counts as
    /// room for a waiting isolated job, but is not reshaped again.
    Creating,
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
    /// Bounds an administrator set: at least this many instances of the
    /// profile stay on the GPU (a reshape never takes it below, or further
    /// below, that).
    pub keep: Vec<(&'static MigProfile, u32)>,
}

impl GpuUse {
    /// Whether retiring `retire` (indices) and creating `create` respects
    /// the GPU's bounds.
    fn keeps(&self, retire: &[usize], create: &[MigPlacement]) -> bool {
        self.keep.iter().all(|&(p, n)| {
            let count = |it: &mut dyn Iterator<Item = &'static MigProfile>| {
                it.filter(|q| q.name == p.name).count() as u32
            };
            let before = count(&mut self.instances.iter().map(|i| i.placement.profile));
            let kept = count(
                &mut self
                    .instances
                    .iter()
                    .enumerate()
                    .filter(|(k, _)| !retire.contains(k))
                    .map(|(_, i)| i.placement.profile),
            );
            let after = kept + count(&mut create.iter().map(|c| c.profile));
            after >= n.min(before)
        })
    }
}

/// The work waiting for GPU instances.
#[derive(Debug, Clone, Default)]
pub struct Demand {
    /// What pending isolated jobs need, one per instance, in queue order.
    pub isolated: Vec<IsolatedNeed>,
    /// Shared jobs wait to start, or shared tasks wait for memory.
    pub shared_backlog: bool,
    /// The largest footprint (MiB) of a shared job that waits or runs: a
    /// split never leaves the cluster without an instance that holds it.
    pub largest_shared_mib: u64,
}

/// One instance a pending isolated job needs: of MIG profile `profile`
/// where it names one, else the smallest holding `mib`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IsolatedNeed {
    pub mib: u64,
    pub profile: Option<String>,
}

impl From<u64> for IsolatedNeed {
    fn from(mib: u64) -> IsolatedNeed {
        IsolatedNeed { mib, profile: None }
    }
}

impl IsolatedNeed {
    /// The profile of model `m` that serves it (`None`: none does).
    fn profile_on(&self, m: &'static GpuModel) -> Option<&'static MigProfile> {
        match &self.profile {
            Some(name) => m.profile(name),
            None => smallest_holding(m, self.mib),
        }
    }
}

impl Demand {
    /// The demand of a queue: pending isolated jobs' footprints in queue
    /// order (`jobs` in id order), whether shared jobs are pending or
    /// `tasks_waiting` (shared tasks wait for memory on a node), and the
    /// largest footprint of a pending or running shared job.
    pub fn of<'a>(jobs: impl Iterator<Item = &'a Job>, tasks_waiting: bool) -> Demand {
        let mut demand = Demand {
            shared_backlog: tasks_waiting,
            ..Demand::default()
        };
        for j in jobs {
            let pending = j.state == JobState::Pending;
            let gpu = &j.spec.gpu;
            // A job asking for a MIG profile needs that profile's memory.
            let mib = gpu
                .mem_mib
                .or_else(|| {
                    gpu.mig_profile
                        .as_deref()
                        .and_then(crate::gpu::profile_memory_mib)
                })
                .unwrap_or(0);
            if j.spec.isolated {
                if pending {
                    let n = gpu.instances().max(1);
                    let need = IsolatedNeed {
                        mib,
                        profile: gpu.mig_profile.clone(),
                    };
                    demand.isolated.extend(std::iter::repeat_n(need, n));
                }
            } else if pending || j.state == JobState::Running {
                demand.shared_backlog |= pending;
                demand.largest_shared_mib = demand.largest_shared_mib.max(mib);
            }
        }
        demand
    }
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

/// One re-partitioning policy: its name in config (`--repartition
/// NAME[:SETTING]`), one line for `--help`, and how to build it from its
/// setting (the text after `:`, if any).
pub struct RepartitionEntry {
    pub name: &'static str,
    pub about: &'static str,
    pub build: BuildRepartition,
}

/// Builds a policy from its setting (the text after `NAME:`, if any).
pub type BuildRepartition = fn(Option<&str>) -> Result<Box<dyn RepartitionPolicy>, BadSetting>;

/// A setting a policy refuses, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadSetting(pub String);

/// Every re-partitioning policy: one file each (`repartition/demand.rs`),
/// one line here. `none`, no policy, is not one of them.
pub const REPARTITIONS: &[RepartitionEntry] = &[RepartitionEntry {
    name: "demand",
    about: "split idle instances for isolated jobs, merge them for shared work; demand:N caps a merged instance at N compute slices (1-8, default 2)",
    build: demand::build,
}];

/// The names `--repartition` takes: `none`, then every policy.
pub fn repartition_names() -> Vec<&'static str> {
    std::iter::once("none")
        .chain(REPARTITIONS.iter().map(|p| p.name))
        .collect()
}

/// `--repartition`'s help, from the table.
pub fn repartition_help() -> String {
    let mut help = String::from("MIG re-partitioning: none (the layout stays)");
    for p in REPARTITIONS {
        help.push_str(&format!("; {}[:SETTING]: {}", p.name, p.about));
    }
    help
}

/// Checks a `--repartition` value (clap's value parser).
pub fn parse_repartition(spec: &str) -> Result<String, RepartitionError> {
    repartition_policy(spec).map(|_| spec.to_string())
}

/// The re-partitioning policy `spec` names (`none`, `NAME` or
/// `NAME:SETTING`); `None` for `none`.
pub fn repartition_policy(
    spec: &str,
) -> Result<Option<Box<dyn RepartitionPolicy>>, RepartitionError> {
    if spec == "none" {
        return Ok(None);
    }
    let (name, setting) = match spec.split_once(':') {
        Some((n, s)) => (n, Some(s)),
        None => (spec, None),
    };
    let entry = REPARTITIONS
        .iter()
        .find(|p| p.name == name)
        .ok_or_else(|| RepartitionError::Unknown {
            name: spec.to_string(),
            known: repartition_names().join(", "),
        })?;
    (entry.build)(setting)
        .map(Some)
        .map_err(|why| RepartitionError::BadSetting {
            spec: spec.to_string(),
            why: why.0,
        })
}

/// A re-partitioning policy that does not exist, or a setting it refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RepartitionError {
    #[error("unknown re-partitioning policy '{name}' (known: {known})")]
    Unknown { name: String, known: String },
    #[error("re-partitioning policy '{spec}': {why}")]
    BadSetting { spec: String, why: String },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_are_found_by_name_with_their_setting() {
        assert!(repartition_policy("none").unwrap().is_none());
        assert_eq!(
            repartition_policy("demand").unwrap().unwrap().name(),
            "demand"
        );
        assert_eq!(
            repartition_policy("demand:4").unwrap().unwrap().name(),
            "demand"
        );
        for bad in ["demand:0", "demand:9", "demand:x", "random"] {
            let e = repartition_policy(bad).err().unwrap().to_string();
            assert!(e.contains(bad), "{e}");
        }
        assert!(repartition_policy("random")
            .err()
            .unwrap()
            .to_string()
            .contains("known: none, demand"));
    }
}
