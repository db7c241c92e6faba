//! GPUs, MIG profiles and schedulable instances.
//!
//! The profile tables are data (see `shared/mig-profiles.md`). A GPU with MIG
//! disabled is one instance; with MIG enabled each compute instance is one.

pub mod mig;
mod request;

pub use request::{GpuRequest, MAX_GPUS_PER_JOB};

use serde::{Deserialize, Serialize};

use crate::gpu::mig::{LayoutError, MigPlacement};

/// One MIG GPU-instance profile of a GPU model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MigProfile {
    pub name: &'static str,
    pub compute_slices: u32,
    pub memory_slices: u32,
    pub max_count: u32,
    pub sms: u32,
    pub memory_mib: u64,
    /// Memory slices where an instance of this profile may start (its size is
    /// `memory_slices`), as NVML's possible placements list them.
    pub starts: &'static [u32],
}

/// A GPU model: whole-GPU size and its MIG profile table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuModel {
    pub name: &'static str,
    pub memory_mib: u64,
    pub sms: u32,
    pub compute_slices: u32,
    pub memory_slices: u32,
    pub profiles: &'static [MigProfile],
}

const fn p(
    name: &'static str,
    compute_slices: u32,
    memory_slices: u32,
    max_count: u32,
    sms: u32,
    memory_mib: u64,
    starts: &'static [u32],
) -> MigProfile {
    MigProfile {
        name,
        compute_slices,
        memory_slices,
        max_count,
        sms,
        memory_mib,
        starts,
    }
}

/// Placement starts of GPUs with 8 memory slices (A100, H100, H200).
const S8_1: &[u32] = &[0, 1, 2, 3, 4, 5, 6];
const S8_2: &[u32] = &[0, 2, 4, 6];
const S8_2G: &[u32] = &[0, 2, 4];
const S8_4: &[u32] = &[0, 4];
const S0: &[u32] = &[0];
/// Placement starts of the A30 (4 memory slices).
const S4_1: &[u32] = &[0, 1, 2, 3];
const S4_2: &[u32] = &[0, 2];

/// A100-SXM4-40GB, from NVML (memory in MiB as reported).
const A100_40: &[MigProfile] = &[
    p("1g.5gb", 1, 1, 7, 14, 4864, S8_1),
    p("1g.5gb+me", 1, 1, 1, 14, 4864, S8_1),
    p("1g.10gb", 1, 2, 4, 14, 9856, S8_2),
    p("2g.10gb", 2, 2, 3, 28, 9856, S8_2G),
    p("3g.20gb", 3, 4, 2, 42, 19968, S8_4),
    p("4g.20gb", 4, 4, 1, 56, 19968, S0),
    p("7g.40gb", 7, 8, 1, 98, 40192, S0),
];

/// A100 80GB: NVIDIA's nominal sizes (not yet read through NVML here).
const A100_80: &[MigProfile] = &[
    p("1g.10gb", 1, 1, 7, 14, 9728, S8_1),
    p("1g.10gb+me", 1, 1, 1, 14, 9728, S8_1),
    p("1g.20gb", 1, 2, 4, 14, 19968, S8_2),
    p("2g.20gb", 2, 2, 3, 28, 19968, S8_2G),
    p("3g.40gb", 3, 4, 2, 42, 40192, S8_4),
    p("4g.40gb", 4, 4, 1, 56, 40192, S0),
    p("7g.80gb", 7, 8, 1, 98, 80896, S0),
];

/// H100 80GB HBM3 (SXM5), from `nvidia-smi mig -lgip` (GiB x 1024).
const H100_80: &[MigProfile] = &[
    p("1g.10gb", 1, 1, 7, 16, 9984, S8_1),
    p("1g.10gb+me", 1, 1, 1, 16, 9984, S8_1),
    p("1g.20gb", 1, 2, 4, 26, 20096, S8_2),
    p("2g.20gb", 2, 2, 3, 32, 20096, S8_2G),
    p("3g.40gb", 3, 4, 2, 60, 40448, S8_4),
    p("4g.40gb", 4, 4, 1, 64, 40448, S0),
    p("7g.80gb", 7, 8, 1, 132, 81152, S0),
];

/// H200 141GB, read through NVML (driver 580.159.04).
const H200: &[MigProfile] = &[
    p("1g.18gb", 1, 1, 7, 16, 16384, S8_1),
    p("1g.18gb+me", 1, 1, 1, 16, 16384, S8_1),
    p("1g.35gb", 1, 2, 4, 26, 33280, S8_2),
    p("2g.35gb", 2, 2, 3, 32, 33280, S8_2G),
    p("3g.71gb", 3, 4, 2, 60, 71424, S8_4),
    p("4g.71gb", 4, 4, 1, 64, 71424, S0),
    p("7g.141gb", 7, 8, 1, 132, 143360, S0),
];

/// A30 24GB: NVIDIA's nominal sizes (memory slices of 4).
const A30: &[MigProfile] = &[
    p("1g.6gb", 1, 1, 4, 14, 5952, S4_1),
    p("1g.6gb+me", 1, 1, 1, 14, 5952, S4_1),
    p("2g.12gb", 2, 2, 2, 28, 11904, S4_2),
    p("2g.12gb+me", 2, 2, 1, 28, 11904, S4_2),
    p("4g.24gb", 4, 4, 1, 56, 23808, S0),
];

pub const MODELS: &[GpuModel] = &[
    GpuModel {
        name: "A30",
        memory_mib: 24576,
        sms: 56,
        compute_slices: 4,
        memory_slices: 4,
        profiles: A30,
    },
    GpuModel {
        name: "A100-40GB",
        memory_mib: 40960,
        sms: 108,
        compute_slices: 7,
        memory_slices: 8,
        profiles: A100_40,
    },
    GpuModel {
        name: "A100-80GB",
        memory_mib: 81920,
        sms: 108,
        compute_slices: 7,
        memory_slices: 8,
        profiles: A100_80,
    },
    GpuModel {
        name: "H100-80GB",
        memory_mib: 81559,
        sms: 132,
        compute_slices: 7,
        memory_slices: 8,
        profiles: H100_80,
    },
    GpuModel {
        name: "H200",
        memory_mib: 143771,
        sms: 132,
        compute_slices: 7,
        memory_slices: 8,
        profiles: H200,
    },
];

/// Looks a model up by name, case-insensitively (`H100` and `H200-141GB` too).
pub fn model(name: &str) -> Option<&'static GpuModel> {
    let n = name.to_ascii_uppercase();
    let n = match n.as_str() {
        "H100" => "H100-80GB",
        "H200-141GB" => "H200",
        "A100" => "A100-40GB",
        other => other,
    };
    MODELS.iter().find(|m| m.name == n)
}

/// The memory of MIG profile `name` (the first model that has it: a
/// profile's name gives its memory, so models agree).
pub fn profile_memory_mib(name: &str) -> Option<u64> {
    MODELS
        .iter()
        .find_map(|m| m.profile(name))
        .map(|p| p.memory_mib)
}

impl GpuModel {
    pub fn profile(&self, name: &str) -> Option<&'static MigProfile> {
        self.profiles
            .iter()
            .find(|p| p.name.eq_ignore_ascii_case(name))
    }
}

/// Whether `s` has the shape of a MIG profile name: `<N>g.<M>gb`, optionally `+me`.
/// Whether `s` may name a GPU type in a request (`--gres=gpu:TYPE:1`) that
/// is not a MIG profile: a model such as `h100` or `a100-80gb`. Letters,
/// digits, `-`, `_` and `.`, at most 64.
pub fn is_gpu_type(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes().any(|b| b.is_ascii_alphabetic())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

/// Whether GPU type `kind` names `model` (a model table name such as
/// `H100-80GB`, or the driver's name): its words appear together and in
/// order among the model name's words, case-insensitively (`h100` and
/// `h100-80gb` name `H100-80GB`; `a100` does not name an `A1000`).
pub fn model_matches(model: &str, kind: &str) -> bool {
    let words = |s: &str| -> Vec<String> {
        s.split(|c: char| !c.is_ascii_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(str::to_ascii_lowercase)
            .collect()
    };
    let (m, k) = (words(model), words(kind));
    !k.is_empty() && m.windows(k.len()).any(|w| w == k.as_slice())
}

pub fn is_profile_name(s: &str) -> bool {
    let s = s.strip_suffix("+me").unwrap_or(s);
    let Some((g, mem)) = s.split_once("g.") else {
        return false;
    };
    let Some(m) = mem.strip_suffix("gb") else {
        return false;
    };
    !g.is_empty()
        && g.bytes().all(|b| b.is_ascii_digit())
        && !m.is_empty()
        && m.bytes().all(|b| b.is_ascii_digit())
}

/// A schedulable GPU instance: a whole GPU, or one MIG compute instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Instance {
    /// `GPU-...` for a whole GPU, `MIG-...` for a MIG instance.
    pub uuid: String,
    pub gpu_index: u32,
    pub gpu_uuid: String,
    pub model: String,
    /// MIG profile, or `None` for a whole GPU.
    pub profile: Option<String>,
    pub memory_mib: u64,
    pub sms: u32,
    pub compute_slices: u32,
    /// The node's GPUs that talk to each other directly (NVLink, or one
    /// PCIe switch or host bridge, as NVML's topology says) share a link
    /// domain; `None` where unknown. Several instances for one job are
    /// taken from one domain where they can be.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_domain: Option<u32>,
    /// The memory slice where a MIG instance starts on its GPU (its
    /// placement), where the node reported it: re-partitioning plans
    /// layouts from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mig_start: Option<u32>,
    /// The instance's MPS control daemon, when its layout asks for one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mps: Option<Mps>,
}

/// An instance's MPS control daemon, as the node last saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Mps {
    /// `CUDA_MPS_PIPE_DIRECTORY` for jobs placed on the instance.
    pub pipe_dir: String,
    /// `CUDA_MPS_LOG_DIRECTORY` of the daemon.
    pub log_dir: String,
    pub state: MpsState,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum MpsState {
    /// The control daemon answers.
    Running,
    /// It died or could not start; the node is restarting it.
    Down,
}

impl MpsState {
    pub fn as_str(self) -> &'static str {
        match self {
            MpsState::Running => "running",
            MpsState::Down => "down",
        }
    }
}

/// Non-isolated workers per compute slice: the CASE paper runs 4 per 1g
/// instance and 8 per 2g instance.
pub const WORKERS_PER_COMPUTE_SLICE: u32 = 4;

impl Instance {
    /// A GPU with MIG disabled, as one instance.
    pub fn whole_gpu(gpu_index: u32, gpu_uuid: String, m: &GpuModel) -> Instance {
        Instance {
            uuid: gpu_uuid.clone(),
            gpu_index,
            gpu_uuid,
            model: m.name.into(),
            profile: None,
            memory_mib: m.memory_mib,
            sms: m.sms,
            compute_slices: m.compute_slices,
            link_domain: None,
            mig_start: None,
            mps: None,
        }
    }

    /// One MIG instance of a known profile.
    pub fn mig(
        uuid: String,
        gpu_index: u32,
        gpu_uuid: String,
        model: &str,
        p: &MigProfile,
    ) -> Instance {
        Instance {
            uuid,
            gpu_index,
            gpu_uuid,
            model: model.into(),
            profile: Some(p.name.into()),
            memory_mib: p.memory_mib,
            sms: p.sms,
            compute_slices: p.compute_slices,
            link_domain: None,
            mig_start: None,
            mps: None,
        }
    }

    /// How many non-isolated jobs this instance lets run at once.
    pub fn worker_limit(&self) -> u32 {
        WORKERS_PER_COMPUTE_SLICE * self.compute_slices.max(1)
    }

    /// Whether this instance satisfies an isolated job's request.
    pub fn satisfies(&self, req: &GpuRequest) -> bool {
        if req
            .model
            .as_deref()
            .is_some_and(|m| !model_matches(&self.model, m))
        {
            return false;
        }
        if let Some(p) = &req.mig_profile {
            return self
                .profile
                .as_deref()
                .is_some_and(|q| q.eq_ignore_ascii_case(p));
        }
        match req.mem_mib {
            Some(m) => self.memory_mib >= m,
            None => true,
        }
    }
}

/// The UUIDs of `instances`, comma-joined (logs and spans).
pub fn uuid_list(instances: &[Instance]) -> String {
    instances
        .iter()
        .map(|i| i.uuid.as_str())
        .collect::<Vec<_>>()
        .join(",")
}

/// Link domains of a node's `n` GPUs: GPUs `connected` directly (NVLink,
/// one PCIe switch or host bridge), and GPUs connected to those, share
/// one; numbered from 0 by their lowest GPU.
pub fn link_domains(n: usize, connected: impl Fn(usize, usize) -> bool) -> Vec<u32> {
    let mut domain: Vec<usize> = (0..n).collect();
    fn root(d: &mut [usize], mut i: usize) -> usize {
        while d[i] != i {
            d[i] = d[d[i]];
            i = d[i];
        }
        i
    }
    for a in 0..n {
        for b in a + 1..n {
            if connected(a, b) {
                let (ra, rb) = (root(&mut domain, a), root(&mut domain, b));
                domain[ra.max(rb)] = ra.min(rb);
            }
        }
    }
    let roots: Vec<usize> = (0..n).map(|i| root(&mut domain, i)).collect();
    let mut numbers: Vec<usize> = roots.clone();
    numbers.sort();
    numbers.dedup();
    roots
        .iter()
        .map(|r| numbers.binary_search(r).unwrap_or(0) as u32)
        .collect()
}

/// One GPU of a simulated node: a model and, if MIG is on, its instances.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimGpu {
    pub model: &'static GpuModel,
    /// `None`: MIG disabled. `Some`: MIG enabled with these GPU instances
    /// (possibly none yet).
    pub layout: Option<Vec<MigPlacement>>,
}

/// A `--sim-gpus` spec that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SimSpecError {
    #[error("invalid GPU spec '{0}': expected COUNTxMODEL[:PROFILE[*N],...|:mig], e.g. 2xA100-40GB or 1xA100-40GB:2g.10gb*2,1g.5gb*3")]
    Syntax(String),
    #[error("unknown GPU model '{0}' (known: A30, A100-40GB, A100-80GB, H100-80GB, H200)")]
    UnknownModel(String),
    #[error(transparent)]
    Layout(#[from] LayoutError),
}

/// Parses `2xA100-40GB`, `4xA30:1g.6gb*4`, `1xH100:mig` (MIG on, no
/// instances yet), and `+`-joined groups of those. Layouts are placed with
/// [`crate::gpu::mig::plan`], so an impossible one is refused with its reason.
pub fn parse_sim_spec(spec: &str) -> Result<Vec<SimGpu>, SimSpecError> {
    let syntax = || SimSpecError::Syntax(spec.to_string());
    let mut gpus = Vec::new();
    for group in spec.split('+') {
        let group = group.trim();
        let (head, layout) = match group.split_once(':') {
            Some((h, l)) => (h, Some(l.trim())),
            None => (group, None),
        };
        let (count, model_name) = head.split_once(['x', 'X']).ok_or_else(syntax)?;
        let count: u32 = count.trim().parse().map_err(|_| syntax())?;
        if count == 0 || count > 64 {
            return Err(syntax());
        }
        let model_name = model_name.trim();
        let m = model(model_name).ok_or_else(|| SimSpecError::UnknownModel(model_name.into()))?;
        let layout = match layout {
            None => None,
            Some(l) if l.eq_ignore_ascii_case("mig") => Some(Vec::new()),
            Some(l) => Some(parse_layout(m, l).map_err(|e| match e {
                LayoutError::Syntax(_) => syntax(),
                other => other.into(),
            })?),
        };
        for _ in 0..count {
            gpus.push(SimGpu {
                model: m,
                layout: layout.clone(),
            });
        }
    }
    Ok(gpus)
}

/// Parses `2g.10gb*2,1g.5gb*3` for one model and places it on the GPU.
pub fn parse_layout(m: &'static GpuModel, layout: &str) -> Result<Vec<MigPlacement>, LayoutError> {
    crate::gpu::mig::plan(m, &crate::gpu::mig::parse_profiles(m, layout)?)
}

/// The UUID of a simulated GPU, stable across restarts.
pub fn sim_gpu_uuid(node: &str, index: usize) -> String {
    format!("GPU-{}", stable_uuid(&format!("{node}/gpu{index}")))
}

/// The UUID of a simulated MIG instance: stable for the same GPU, profile
/// and placement.
pub fn sim_mig_uuid(node: &str, index: usize, p: &MigPlacement) -> String {
    format!(
        "MIG-{}",
        stable_uuid(&format!("{node}/gpu{index}/{}@{}", p.profile.name, p.start))
    )
}

/// A stable UUID-shaped identifier derived from `seed` (FNV-1a, two lanes).
pub fn stable_uuid(seed: &str) -> String {
    let lane = |basis: u64| {
        seed.bytes()
            .fold(basis, |h, b| (h ^ b as u64).wrapping_mul(0x100000001b3))
    };
    let a = lane(0xcbf29ce484222325);
    let b = lane(0x84222325cbf29ce4);
    format!(
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xffff,
        b >> 48,
        b & 0xffff_ffff_ffff
    )
}

/// The instances of a simulated node, with UUIDs stable across restarts.
pub fn sim_instances(node: &str, gpus: &[SimGpu]) -> Vec<Instance> {
    let mut out = Vec::new();
    for (i, g) in gpus.iter().enumerate() {
        let gpu_uuid = sim_gpu_uuid(node, i);
        match &g.layout {
            None => out.push(Instance::whole_gpu(i as u32, gpu_uuid, g.model)),
            Some(layout) => {
                for p in layout {
                    out.push(Instance {
                        mig_start: Some(p.start),
                        ..Instance::mig(
                            sim_mig_uuid(node, i, p),
                            i as u32,
                            gpu_uuid.clone(),
                            g.model.name,
                            p.profile,
                        )
                    })
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::GpuRequest;

    #[test]
    fn profile_names() {
        assert!(is_profile_name("1g.5gb"));
        assert!(is_profile_name("7g.141gb"));
        assert!(is_profile_name("1g.10gb+me"));
        for bad in ["", "1g", "g.5gb", "1g.gb", "1x.5gb", "a100"] {
            assert!(!is_profile_name(bad), "{bad}");
        }
    }

    #[test]
    fn case_paper_a100_layout() {
        let gpus = parse_sim_spec("1xA100-40GB:2g.10gb*2,1g.5gb*3").unwrap();
        let inst = sim_instances("n1", &gpus);
        assert_eq!(inst.len(), 5);
        let mem: Vec<u64> = inst.iter().map(|i| i.memory_mib).collect();
        assert_eq!(mem, vec![9856, 9856, 4864, 4864, 4864]);
        assert!(inst.iter().all(|i| i.uuid.starts_with("MIG-")));
        assert_eq!(inst[0].worker_limit(), 8);
        assert_eq!(inst[2].worker_limit(), 4);
        // Stable and distinct.
        assert_eq!(inst, sim_instances("n1", &gpus));
        let mut uuids: Vec<_> = inst.iter().map(|i| &i.uuid).collect();
        uuids.dedup();
        assert_eq!(uuids.len(), 5);
    }

    #[test]
    fn whole_gpus_and_groups() {
        let gpus = parse_sim_spec("2xA100-40GB+1xh100").unwrap();
        let inst = sim_instances("n", &gpus);
        assert_eq!(inst.len(), 3);
        assert_eq!(inst[2].model, "H100-80GB");
        assert!(inst[0].uuid.starts_with("GPU-"));
        assert_eq!(inst[0].worker_limit(), 28);
    }

    #[test]
    fn bad_specs_say_why() {
        assert!(matches!(
            parse_sim_spec("A100"),
            Err(SimSpecError::Syntax(_))
        ));
        assert!(matches!(
            parse_sim_spec("2xB200"),
            Err(SimSpecError::UnknownModel(_))
        ));
        assert!(matches!(
            parse_sim_spec("1xA30:1g.5gb"),
            Err(SimSpecError::Layout(LayoutError::UnknownProfile { .. }))
        ));
        let e = parse_sim_spec("1xA100-40GB:3g.20gb*2,1g.5gb").unwrap_err();
        assert_eq!(
            e.to_string(),
            "3g.20gb,3g.20gb,1g.5gb is not possible on A100-40GB: no free memory slice for 1g.5gb"
        );
        let mig_on = parse_sim_spec("2xH100:mig").unwrap();
        assert_eq!(mig_on[1].layout, Some(vec![]));
        assert!(sim_instances("n", &mig_on).is_empty());
        assert!(parse_sim_spec("1xA30:1g.6gb*5").is_err());
        assert!(parse_sim_spec("4xA30:1g.6gb*4").is_ok());
    }

    #[test]
    fn a_gpu_type_names_models_by_their_words() {
        assert!(model_matches("H100-80GB", "h100"));
        assert!(model_matches("H100-80GB", "H100-80gb"));
        assert!(model_matches("NVIDIA H100 80GB HBM3", "h100"));
        assert!(!model_matches("A1000", "a100"), "a whole word, not a part");
        assert!(!model_matches("A100-40GB", "a100-80gb"));
        assert!(!model_matches("A100-40GB", ""));
        assert!(is_gpu_type("a100-80gb") && is_gpu_type("h100"));
        assert!(!is_gpu_type("100") && !is_gpu_type("a/b") && !is_gpu_type(""));
        let h100 = Instance::whole_gpu(0, "GPU-h".into(), model("H100-80GB").unwrap());
        let a100 = Instance::whole_gpu(1, "GPU-a".into(), model("A100-40GB").unwrap());
        let want = crate::job::GpuRequest {
            model: Some("h100".into()),
            ..Default::default()
        };
        assert!(h100.satisfies(&want) && !a100.satisfies(&want));
    }

    #[test]
    fn link_domains_join_connected_gpus() {
        // 0-2 and 2-3 linked, 1 alone.
        let links = [(0, 2), (2, 3)];
        let d = link_domains(4, |a, b| links.contains(&(a, b)));
        assert_eq!(d, [0, 1, 0, 0]);
        assert_eq!(link_domains(3, |_, _| false), [0, 1, 2]);
        assert_eq!(link_domains(2, |_, _| true), [0, 0]);
        assert!(link_domains(0, |_, _| true).is_empty());
    }

    #[test]
    fn satisfies_requests() {
        let inst = sim_instances("n", &parse_sim_spec("1xA100-40GB:2g.10gb,1g.5gb").unwrap());
        let by_profile = GpuRequest {
            model: None,
            mig_profile: Some("1g.5gb".into()),
            mem_mib: None,
            share: None,
            share_limit: None,
            count: None,
        };
        assert!(!inst[0].satisfies(&by_profile));
        assert!(inst[1].satisfies(&by_profile));
        let by_mem = GpuRequest {
            model: None,
            mig_profile: None,
            mem_mib: Some(6000),
            share: None,
            share_limit: None,
            count: None,
        };
        assert!(inst[0].satisfies(&by_mem));
        assert!(!inst[1].satisfies(&by_mem));
    }
}
