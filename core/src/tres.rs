//! Trackable resources (Slurm's TRES) that QOS limits count: CPUs, GPU
//! instances (`gres/gpu`), GPU memory (`gres/gpumem`, gsched's own: Slurm
//! has no GPU memory TRES) and instances of one MIG profile
//! (`gres/gpu:1g.10gb`, Slurm's typed GRES). A job counts what it asks
//! for, as Slurm counts typed GRES: its instances, its `--gpu-mem` on each,
//! its profile's instances; and the GPU time share a shared job states
//! (`gres/gpushare`, gsched's own: under GPU time quotas a share is a
//! claim on GPU time). Pure.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A limit on trackable resources (`None`, absent: no limit on it).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Tres {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<u64>,
    /// GPU instances (`gres/gpu`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<u64>,
    /// GPU memory, MiB (`gres/gpumem`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_mem_mib: Option<u64>,
    /// Instances of each MIG profile (`gres/gpu:PROFILE`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub mig: BTreeMap<String, u64>,
    /// GPU time shares stated by shared jobs (`--gpu-share`), thousandths
    /// of a GPU (`gres/gpushare=1.5`, gsched's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_share: Option<u64>,
}

/// What jobs take (or one job asks for) of the trackable resources.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TresUse {
    pub cpus: u64,
    pub gpus: u64,
    pub gpu_mem_mib: u64,
    pub mig: BTreeMap<String, u64>,
    /// Stated GPU time shares, thousandths of a GPU.
    pub gpu_share: u64,
}

impl TresUse {
    pub fn add(&mut self, other: &TresUse) {
        self.cpus += other.cpus;
        self.gpus += other.gpus;
        self.gpu_mem_mib += other.gpu_mem_mib;
        self.gpu_share += other.gpu_share;
        for (p, n) in &other.mig {
            *self.mig.entry(p.clone()).or_default() += n;
        }
    }
}

/// Which resource a limit stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TresKind {
    Cpu,
    Gpu,
    GpuMem,
    GpuShare,
    Mig(String),
}

impl TresKind {
    /// Whether it is a generic resource (Slurm's reasons say GRES).
    pub fn is_gres(&self) -> bool {
        !matches!(self, TresKind::Cpu)
    }
}

/// A TRES list that does not read (the message names the part).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct TresError(pub String);

impl From<String> for TresError {
    fn from(why: String) -> Self {
        TresError(why)
    }
}

impl Tres {
    /// Reads Slurm's `cpu=N,gres/gpu=N,gres/gpu:PROFILE=N` and gsched's
    /// `gres/gpumem=SIZE` (`40G`, `512M`; MiB without a unit), in any
    /// order.
    pub fn parse(s: &str) -> Result<Tres, TresError> {
        let mut t = Tres::default();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = part.split_once('=').ok_or_else(|| {
                format!(
                    "'{part}': expected cpu=N, gres/gpu=N, gres/gpu:PROFILE=N or gres/gpumem=SIZE"
                )
            })?;
            let count = || -> Result<u64, TresError> {
                v.trim()
                    .parse()
                    .map_err(|_| TresError(format!("'{part}': expected a whole number")))
            };
            let key = k.trim().to_ascii_lowercase();
            match key.as_str() {
                "cpu" => t.cpu = Some(count()?),
                "gres/gpu" | "gpu" => t.gpu = Some(count()?),
                "gres/gpushare" | "gpushare" => {
                    let gpus: f64 = v
                        .trim()
                        .parse()
                        .ok()
                        .filter(|g: &f64| g.is_finite() && *g >= 0.0)
                        .ok_or_else(|| TresError(format!("'{part}': expected GPUs, such as 1.5")))?;
                    t.gpu_share = Some((gpus * 1000.0).round() as u64);
                }
                "gres/gpumem" | "gpumem" => {
                    t.gpu_mem_mib = Some(
                        crate::units::parse_mem_mib(v.trim())
                            .map_err(|e| TresError(format!("'{part}': {e}")))?,
                    )
                }
                _ => match key.strip_prefix("gres/gpu:") {
                    Some(profile) if crate::gpu::is_profile_name(profile) => {
                        t.mig.insert(profile.to_string(), count()?);
                    }
                    _ => {
                        return Err(TresError(format!(
                            "'{}': gsched limits cpu, gres/gpu, gres/gpu:PROFILE (a MIG profile such as 1g.10gb), gres/gpumem and gres/gpushare",
                            k.trim()
                        )))
                    }
                },
            }
        }
        Ok(t)
    }

    pub fn is_empty(&self) -> bool {
        self.cpu.is_none()
            && self.gpu.is_none()
            && self.gpu_mem_mib.is_none()
            && self.mig.is_empty()
            && self.gpu_share.is_none()
    }

    /// Slurm's form, as [`Tres::parse`] reads it back.
    pub fn to_setting(&self) -> String {
        let mut p = Vec::new();
        if let Some(c) = self.cpu {
            p.push(format!("cpu={c}"));
        }
        if let Some(g) = self.gpu {
            p.push(format!("gres/gpu={g}"));
        }
        for (profile, n) in &self.mig {
            p.push(format!("gres/gpu:{profile}={n}"));
        }
        if let Some(m) = self.gpu_mem_mib {
            p.push(format!("gres/gpumem={m}M"));
        }
        if let Some(s) = self.gpu_share {
            p.push(format!("gres/gpushare={}", s as f64 / 1000.0));
        }
        p.join(",")
    }

    /// The first resource this limit does not allow `job` on top of
    /// `used`.
    pub fn exceeded(&self, used: &TresUse, job: &TresUse) -> Option<TresKind> {
        let over = |limit: Option<u64>, used: u64, asked: u64| {
            limit.is_some_and(|l| asked > 0 && used + asked > l)
        };
        if over(self.cpu, used.cpus, job.cpus) {
            return Some(TresKind::Cpu);
        }
        if over(self.gpu, used.gpus, job.gpus) {
            return Some(TresKind::Gpu);
        }
        if over(self.gpu_mem_mib, used.gpu_mem_mib, job.gpu_mem_mib) {
            return Some(TresKind::GpuMem);
        }
        if over(self.gpu_share, used.gpu_share, job.gpu_share) {
            return Some(TresKind::GpuShare);
        }
        self.mig.iter().find_map(|(p, &l)| {
            let asked = job.mig.get(p).copied().unwrap_or(0);
            let used = used.mig.get(p).copied().unwrap_or(0);
            over(Some(l), used, asked).then(|| TresKind::Mig(p.clone()))
        })
    }

    /// In words, how much of `kind` this limit allows (for refusals).
    pub fn allows(&self, kind: &TresKind) -> String {
        match kind {
            TresKind::Cpu => format!("{} CPUs", self.cpu.unwrap_or(0)),
            TresKind::Gpu => format!("{} GPUs", self.gpu.unwrap_or(0)),
            TresKind::GpuMem => format!("{} MiB of GPU memory", self.gpu_mem_mib.unwrap_or(0)),
            TresKind::GpuShare => format!(
                "GPU time shares of {} GPUs",
                self.gpu_share.unwrap_or(0) as f64 / 1000.0
            ),
            TresKind::Mig(p) => format!("{} {p} instances", self.mig.get(p).copied().unwrap_or(0)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_read_and_print_back() {
        let t =
            Tres::parse("cpu=8, gres/gpu=4,gres/gpumem=40G,gres/gpu:1g.10gb=2,gres/gpushare=1.5")
                .unwrap();
        assert_eq!(t.gpu_share, Some(1500));
        assert_eq!(t.cpu, Some(8));
        assert_eq!(t.gpu, Some(4));
        assert_eq!(t.gpu_mem_mib, Some(40 * 1024));
        assert_eq!(t.mig.get("1g.10gb"), Some(&2));
        assert_eq!(Tres::parse(&t.to_setting()).unwrap(), t);
        for bad in [
            "gres/gpu=x",
            "mem=4",
            "gres/gpu:fast=1",
            "gres/gpumem=lots",
            "cpu",
            "gres/gpushare=-1",
        ] {
            let e = Tres::parse(bad).unwrap_err().to_string();
            assert!(e.contains(bad.split('=').next().unwrap()), "{bad}: {e}");
        }
        assert!(Tres::default().is_empty() && !t.is_empty());
    }

    #[test]
    fn a_job_is_held_to_each_resource_it_asks_for() {
        let t = Tres::parse("gres/gpumem=20G,gres/gpu:1g.10gb=2").unwrap();
        let mut used = TresUse::default();
        let job = |mem: u64, mig: Option<&str>| TresUse {
            cpus: 1,
            gpus: 1,
            gpu_mem_mib: mem,
            mig: mig.map(|p| (p.to_string(), 1)).into_iter().collect(),
            gpu_share: 0,
        };
        assert_eq!(t.exceeded(&used, &job(10 * 1024, Some("1g.10gb"))), None);
        used.add(&job(10 * 1024, Some("1g.10gb")));
        used.add(&job(10 * 1024, Some("1g.10gb")));
        assert_eq!(
            t.exceeded(&used, &job(0, Some("1g.10gb"))),
            Some(TresKind::Mig("1g.10gb".into()))
        );
        assert_eq!(t.exceeded(&used, &job(1, None)), Some(TresKind::GpuMem));
        // What a job does not ask for does not hold it back.
        assert_eq!(t.exceeded(&used, &job(0, Some("3g.40gb"))), None);
        assert!(TresKind::GpuMem.is_gres() && !TresKind::Cpu.is_gres());
    }
}
