//! The node's GPU configuration (`gpus.toml`): a MIG layout and MPS per GPU,
//! and bringing the GPUs to it at start.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use gsched_core::mig::{parse_profiles, profile_of, reconcile, MigPlacement};
use serde::Deserialize;

use super::GpuBackend;

/// What the node does with its GPUs.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuSettings {
    /// Let gnoded create and destroy MIG instances to match the layouts.
    #[serde(default)]
    pub allow_mig_reconfigure: bool,
    /// The MPS control program (default: `nvidia-cuda-mps-control` on PATH).
    #[serde(default)]
    pub mps_control: Option<PathBuf>,
    /// Seconds between liveness checks of the MPS control daemons.
    #[serde(default = "default_mps_check")]
    pub mps_check_interval: u64,
    /// One entry per GPU to configure; GPUs not listed are served as found.
    #[serde(default)]
    pub gpu: Vec<GpuLayout>,
}

fn default_mps_check() -> u64 {
    5
}

/// The layout of one GPU.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuLayout {
    pub index: u32,
    /// `false`: the whole GPU, MIG disabled. `true`: MIG enabled, instances
    /// as found. A list of profiles: exactly these instances.
    #[serde(default)]
    pub mig: Option<MigSetting>,
    /// One MPS control daemon per instance of this GPU.
    #[serde(default)]
    pub mps: bool,
    /// Whether the controller's re-partitioning may change this GPU's
    /// layout: `demand` (the default, where it may change at all) or
    /// `fixed`.
    #[serde(default)]
    pub repartition: Repartition,
    /// Instances re-partitioning must leave on this GPU: `PROFILE*N` (at
    /// least N of PROFILE) or `PROFILE` (at least one).
    #[serde(default)]
    pub keep: Vec<String>,
}

/// A GPU's re-partitioning setting in `gpus.toml`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Repartition {
    #[default]
    Demand,
    Fixed,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum MigSetting {
    Enabled(bool),
    Profiles(Vec<String>),
}

impl GpuSettings {
    pub fn read(path: &Path) -> Result<GpuSettings> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the GPU config {}", path.display()))?;
        let s: GpuSettings = toml::from_str(&text)
            .with_context(|| format!("invalid GPU config {}", path.display()))?;
        let mut seen = BTreeSet::new();
        for g in &s.gpu {
            if !seen.insert(g.index) {
                bail!(
                    "invalid GPU config {}: GPU {} is listed twice",
                    path.display(),
                    g.index
                );
            }
        }
        Ok(s)
    }

    /// GPUs whose layout stays as it is (`repartition = "fixed"`).
    pub fn fixed_gpus(&self) -> BTreeSet<u32> {
        self.gpu
            .iter()
            .filter(|g| g.repartition == Repartition::Fixed)
            .map(|g| g.index)
            .collect()
    }

    /// The bounds of each GPU (`keep`), checked against its model's
    /// profiles: (profile, at least how many). `model_of` gives a GPU's
    /// MIG table.
    pub fn keep_bounds(
        &self,
        model_of: impl Fn(u32) -> Option<&'static gsched_core::gpu::GpuModel>,
    ) -> Result<std::collections::BTreeMap<u32, Vec<(String, u32)>>> {
        let mut out = std::collections::BTreeMap::new();
        for g in self.gpu.iter().filter(|g| !g.keep.is_empty()) {
            let Some(m) = model_of(g.index) else {
                bail!("GPU {}: keep is set, but the GPU has no MIG table", g.index);
            };
            // `PROFILE*N` as a layout reads it: N instances of PROFILE.
            let profiles = gsched_core::mig::parse_profiles(m, &g.keep.join(","))
                .map_err(|e| anyhow::anyhow!("GPU {}: keep: {e}", g.index))?;
            let mut bounds: Vec<(String, u32)> = Vec::new();
            for p in profiles {
                match bounds.iter_mut().find(|(name, _)| name == p.name) {
                    Some((_, n)) => *n += 1,
                    None => bounds.push((p.name.to_string(), 1)),
                }
            }
            out.insert(g.index, bounds);
        }
        Ok(out)
    }

    /// GPUs whose instances get an MPS control daemon.
    pub fn mps_gpus(&self) -> BTreeSet<u32> {
        self.gpu.iter().filter(|g| g.mps).map(|g| g.index).collect()
    }
}

/// Brings every configured GPU to its layout, changing only idle GPUs and
/// only when `allow_mig_reconfigure` is set. Errors name the GPU and why.
pub fn apply(backend: &dyn GpuBackend, settings: &GpuSettings) -> Result<()> {
    let gpus = backend.gpus()?;
    for want in &settings.gpu {
        let Some(g) = gpus.iter().find(|g| g.index == want.index) else {
            bail!(
                "the GPU config names GPU {}, but this node has {} GPU(s) (indices from 0)",
                want.index,
                gpus.len()
            );
        };
        let mig_on = g.mig.is_some_and(|m| m.current);
        let i = g.index;
        match &want.mig {
            None => {}
            Some(MigSetting::Enabled(false)) if mig_on => bail!(
                "GPU {i} ({}) has MIG enabled but its layout says mig = false; gsched never changes MIG mode \
                 (it may need a GPU reset): run `nvidia-smi -i {i} -mig 0` or give a list of profiles",
                g.name
            ),
            Some(MigSetting::Enabled(true)) if !mig_on => bail!(
                "GPU {i} ({}) has MIG disabled but its layout says mig = true; gsched never changes MIG mode \
                 (it may need a GPU reset): run `nvidia-smi -i {i} -mig 1` first",
                g.name
            ),
            Some(MigSetting::Enabled(_)) => {}
            Some(MigSetting::Profiles(list)) => {
                let model = g
                    .model
                    .as_deref()
                    .and_then(gsched_core::gpu::model)
                    .with_context(|| {
                        format!(
                            "GPU {i} ({}): gsched has no MIG placement table for this model, so it cannot \
                             apply a layout; create the instances with nvidia-smi and set mig = true",
                            g.name
                        )
                    })?;
                let desired = parse_profiles(model, &list.join(","))?;
                if !mig_on {
                    bail!(
                        "GPU {i} ({}) has MIG disabled, so layout {} cannot be made; gsched never changes \
                         MIG mode (it may need a GPU reset): run `nvidia-smi -i {i} -mig 1` first",
                        g.name,
                        list.join(",")
                    );
                }
                let devices = backend.mig_devices(i)?;
                let existing = devices
                    .iter()
                    .map(|d| {
                        Ok(MigPlacement {
                            profile: profile_of(model, &d.profile)?,
                            start: d.start,
                        })
                    })
                    .collect::<Result<Vec<_>, gsched_core::mig::LayoutError>>()?;
                let change = reconcile(model, &existing, &desired)?;
                if change.is_noop() {
                    tracing::info!(gpu = i, layout = %list.join(","), "MIG layout already in place");
                    continue;
                }
                let have = devices
                    .iter()
                    .map(|d| format!("{}@{}", d.profile, d.start))
                    .collect::<Vec<_>>()
                    .join(",");
                if !settings.allow_mig_reconfigure {
                    bail!(
                        "GPU {i} ({}) has MIG instances [{have}] but its layout asks for {}; set \
                         allow_mig_reconfigure = true to let gnoded change them, or make the layout match",
                        g.name,
                        list.join(",")
                    );
                }
                let busy = backend.processes(i)?;
                if !busy.is_empty() {
                    tracing::warn!(
                        gpu = i,
                        processes = busy.len(),
                        "GPU {i} runs processes; its MIG instances [{have}] are left as they are instead of \
                         layout {}",
                        list.join(",")
                    );
                    continue;
                }
                for k in &change.destroy {
                    let d = &devices[*k];
                    backend
                        .destroy_instance(i, d.gi_id)
                        .with_context(|| format!("cannot destroy {} at slice {} on GPU {i}", d.profile, d.start))?;
                    tracing::info!(gpu = i, profile = %d.profile, start = d.start, uuid = %d.uuid, "destroyed MIG instance");
                }
                for p in &change.create {
                    let d = backend
                        .create_instance(i, p.profile.name, p.start)
                        .with_context(|| format!("cannot create {} at slice {} on GPU {i}", p.profile.name, p.start))?;
                    tracing::info!(gpu = i, profile = %d.profile, start = d.start, uuid = %d.uuid, "created MIG instance");
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::SimulatedGpus;

    fn settings(text: &str) -> GpuSettings {
        toml::from_str(text).unwrap()
    }

    fn layout_of(sim: &SimulatedGpus, gpu: u32) -> Vec<String> {
        sim.mig_devices(gpu)
            .unwrap()
            .iter()
            .map(|d| format!("{}@{}", d.profile, d.start))
            .collect()
    }

    #[test]
    fn a_layout_is_created_with_explicit_placements() {
        let sim = SimulatedGpus::new("n", "1xA100-40GB:mig").unwrap();
        let s = settings(
            r#"allow_mig_reconfigure = true
               [[gpu]]
               index = 0
               mig = ["3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb"]"#,
        );
        apply(&sim, &s).unwrap();
        assert_eq!(
            layout_of(&sim, 0),
            vec!["2g.10gb@0", "1g.5gb@2", "1g.5gb@3", "3g.20gb@4"]
        );
        // A second start changes nothing.
        let before = sim.mig_devices(0).unwrap();
        apply(&sim, &s).unwrap();
        assert_eq!(sim.mig_devices(0).unwrap(), before);
    }

    #[test]
    fn a_changed_layout_keeps_what_it_can() {
        let sim = SimulatedGpus::new("n", "1xA100-40GB:2g.10gb*2,1g.5gb*3").unwrap();
        let keep: Vec<String> = sim
            .mig_devices(0)
            .unwrap()
            .iter()
            .filter(|d| d.profile == "1g.5gb")
            .map(|d| d.uuid.clone())
            .collect();
        let s = settings(
            "allow_mig_reconfigure = true\n[[gpu]]\nindex = 0\nmig = [\"3g.20gb\", \"1g.5gb\", \"1g.5gb\", \"1g.5gb\"]",
        );
        apply(&sim, &s).unwrap();
        assert_eq!(
            layout_of(&sim, 0),
            vec!["3g.20gb@0", "1g.5gb@4", "1g.5gb@5", "1g.5gb@6"]
        );
        let now: Vec<String> = sim
            .mig_devices(0)
            .unwrap()
            .iter()
            .map(|d| d.uuid.clone())
            .collect();
        assert!(
            keep.iter().all(|u| now.contains(u)),
            "the 1g instances were kept"
        );
    }

    #[test]
    fn busy_gpus_are_left_alone_and_changes_need_permission() {
        let sim = SimulatedGpus::new("n", "1xA100-40GB:7g.40gb").unwrap();
        let whole = sim.mig_devices(0).unwrap()[0].uuid.clone();
        let text = "[[gpu]]\nindex = 0\nmig = [\"1g.5gb\"]";
        let e = apply(&sim, &settings(text)).unwrap_err().to_string();
        assert!(e.contains("set allow_mig_reconfigure = true"), "{e}");
        sim.allocate(&whole, 7, 100).unwrap();
        apply(
            &sim,
            &settings(&format!("allow_mig_reconfigure = true\n{text}")),
        )
        .unwrap();
        assert_eq!(layout_of(&sim, 0), vec!["7g.40gb@0"], "busy GPU untouched");
        sim.release(7);
        apply(
            &sim,
            &settings(&format!("allow_mig_reconfigure = true\n{text}")),
        )
        .unwrap();
        assert_eq!(layout_of(&sim, 0), vec!["1g.5gb@0"]);
    }

    #[test]
    fn impossible_layouts_and_mode_mismatches_are_refused() {
        let sim = SimulatedGpus::new("n", "1xA100-40GB:mig+1xA100-40GB").unwrap();
        let e = apply(
            &sim,
            &settings("allow_mig_reconfigure = true\n[[gpu]]\nindex = 0\nmig = [\"3g.20gb\", \"3g.20gb\", \"1g.5gb\"]"),
        )
        .unwrap_err();
        assert_eq!(
            format!("{e:#}"),
            "3g.20gb,3g.20gb,1g.5gb is not possible on A100-40GB: no free memory slice for 1g.5gb"
        );
        let e = apply(&sim, &settings("[[gpu]]\nindex = 1\nmig = [\"1g.5gb\"]")).unwrap_err();
        assert!(
            e.to_string()
                .contains("GPU 1 (Simulated A100-40GB) has MIG disabled"),
            "{e}"
        );
        let e = apply(&sim, &settings("[[gpu]]\nindex = 0\nmig = false")).unwrap_err();
        assert!(
            e.to_string()
                .contains("has MIG enabled but its layout says mig = false"),
            "{e}"
        );
        let e = apply(&sim, &settings("[[gpu]]\nindex = 5\nmig = false")).unwrap_err();
        assert!(
            e.to_string()
                .contains("names GPU 5, but this node has 2 GPU(s)"),
            "{e}"
        );
        let e = apply(&sim, &settings("[[gpu]]\nindex = 0\nmig = [\"9g.99gb\"]")).unwrap_err();
        assert!(
            e.to_string()
                .contains("A100-40GB has no MIG profile '9g.99gb'"),
            "{e}"
        );
        assert!(toml::from_str::<GpuSettings>("[[gpu]]\nindex = 0\nmig = 3").is_err());
        assert!(toml::from_str::<GpuSettings>("[[gpu]]\nindex = 0\nmsp = true").is_err());
    }
}

#[cfg(test)]
mod repartition_tests {
    use super::*;

    #[test]
    fn a_gpu_may_be_kept_out_of_re_partitioning() {
        let s: GpuSettings = toml::from_str(
            "[[gpu]]\nindex = 0\nrepartition = \"fixed\"\n[[gpu]]\nindex = 1\nrepartition = \"demand\"\n[[gpu]]\nindex = 2\n",
        )
        .unwrap();
        assert_eq!(s.fixed_gpus(), [0].into());
        let bad =
            toml::from_str::<GpuSettings>("[[gpu]]\nindex = 0\nrepartition = \"sometimes\"\n")
                .unwrap_err()
                .to_string();
        assert!(
            bad.contains("sometimes") || bad.contains("variant"),
            "{bad}"
        );
    }
}
