//! GPU backends: what the node's GPUs are, their MIG instances, and the
//! changes gnoded may make to them. The placement rules themselves are pure
//! functions in `gsched_core::mig`; a backend only reports and executes.

pub mod layout;
pub mod meter;
pub mod nvml;
pub mod simulated;
pub mod xid;

use gsched_core::gpu::{GpuModel, Instance};
use serde::Serialize;

pub use simulated::SimulatedGpus;

/// A physical GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuInfo {
    pub index: u32,
    pub uuid: String,
    /// The device name as the driver reports it (`NVIDIA H100 80GB HBM3`).
    pub name: String,
    /// gsched's name for the model when it has its MIG table (`H100-80GB`).
    pub model: Option<String>,
    pub memory_total_mib: u64,
    pub memory_used_mib: u64,
    pub sms: u32,
    /// `None` when the GPU does not support MIG.
    pub mig: Option<MigMode>,
    /// The GPUs that talk directly (NVLink, one PCIe switch or host
    /// bridge) share one ([`gsched_core::gpu::link_domains`]); `None` where
    /// the backend cannot tell.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub link_domain: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct MigMode {
    pub current: bool,
    /// What it becomes after the next GPU reset.
    pub pending: bool,
}

/// One GPU-instance profile of a GPU, with its legal placements.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProfileInfo {
    pub name: String,
    /// NVML's profile id (what instance creation takes).
    pub id: u32,
    /// NVML's profile index (`NVML_GPU_INSTANCE_PROFILE_*`).
    pub nvml_index: u32,
    pub slices: u32,
    pub max_count: u32,
    pub sms: u32,
    pub memory_mib: u64,
    /// Legal first memory slices.
    pub starts: Vec<u32>,
    /// Memory slices an instance covers.
    pub size: u32,
}

/// A MIG device: one GPU instance with its (single, full) compute instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MigDevice {
    /// `MIG-...`: what `CUDA_VISIBLE_DEVICES` takes.
    pub uuid: String,
    pub gi_id: u32,
    pub ci_id: u32,
    pub profile: String,
    pub start: u32,
    pub size: u32,
    pub memory_total_mib: u64,
    pub memory_used_mib: u64,
    pub sms: u32,
    pub slices: u32,
}

/// A process using GPU memory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuProcess {
    pub pid: u32,
    pub used_mib: u64,
}

/// What a backend could not do.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error("no GPU with index {0}")]
    NoSuchGpu(u32),
    #[error("GPU {gpu} has no GPU instance {gi_id}")]
    NoSuchInstance { gpu: u32, gi_id: u32 },
    #[error("GPU {gpu}: {source}")]
    Placement {
        gpu: u32,
        source: gsched_core::mig::PlacementError,
    },
    #[error("GPU {gpu}: unknown MIG profile '{profile}'")]
    UnknownProfile { gpu: u32, profile: String },
    #[error("GPU {0} does not have MIG enabled")]
    MigDisabled(u32),
    #[error("GPU {gpu}: instance {uuid} is in use by {processes} process(es)")]
    Busy {
        gpu: u32,
        uuid: String,
        processes: usize,
    },
    #[error("{uuid}: out of memory: {want} MiB asked, {free} MiB free")]
    OutOfMemory { uuid: String, want: u64, free: u64 },
    #[error("NVML {call}: {message}")]
    Nvml { call: &'static str, message: String },
}

/// One source of GPUs for a node: NVML on real hardware, or the simulated
/// GPUs that obey the same rules.
pub trait GpuBackend: Send + Sync {
    /// One line for the log: what was found.
    fn describe(&self) -> String;
    fn gpus(&self) -> Result<Vec<GpuInfo>, BackendError>;
    /// The GPU-instance profile table (readable while MIG is disabled).
    fn profiles(&self, gpu: u32) -> Result<Vec<ProfileInfo>, BackendError>;
    /// The MIG devices that exist now (empty with MIG disabled).
    fn mig_devices(&self, gpu: u32) -> Result<Vec<MigDevice>, BackendError>;
    /// Processes with GPU memory on the GPU or any of its instances.
    fn processes(&self, gpu: u32) -> Result<Vec<GpuProcess>, BackendError>;
    /// Memory physically free now on an instance (a `GPU-` or `MIG-` UUID),
    /// in bytes, when the backend can tell.
    fn free_bytes(&self, uuid: &str) -> Option<u64>;
    /// The processes running on an instance (a `GPU-` or `MIG-` UUID), when
    /// the backend can tell (simulated GPUs run none).
    fn processes_on(&self, _uuid: &str) -> Option<Vec<u32>> {
        None
    }
    /// Whether the GPUs are simulated (no CUDA contexts take memory).
    fn is_simulated(&self) -> bool {
        false
    }
    /// Per-process SM utilization samples of GPU `gpu` newer than
    /// `since_us` (the driver's CPU clock, microseconds), for GPU time;
    /// `None` where the driver gives none (MIG instances, simulated GPUs).
    fn process_utilization(
        &self,
        _gpu: u32,
        _since_us: u64,
    ) -> Option<Vec<gsched_core::gpu_time::UtilSample>> {
        None
    }
    /// Creates a GPU instance of `profile` at memory slice `start`, with one
    /// compute instance covering it.
    fn create_instance(
        &self,
        gpu: u32,
        profile: &str,
        start: u32,
    ) -> Result<MigDevice, BackendError>;
    /// Destroys GPU instance `gi_id` and its compute instances.
    fn destroy_instance(&self, gpu: u32, gi_id: u32) -> Result<(), BackendError>;
}

/// gsched's MIG table for a device the driver names `name`.
pub fn model_for_device(name: &str, memory_mib: u64) -> Option<&'static GpuModel> {
    let n = name.to_ascii_uppercase();
    let key = if n.contains("A30") {
        "A30"
    } else if n.contains("A100") {
        if memory_mib > 60_000 {
            "A100-80GB"
        } else {
            "A100-40GB"
        }
    } else if n.contains("H100") && memory_mib < 90_000 {
        "H100-80GB"
    } else if n.contains("H200") {
        "H200"
    } else {
        return None;
    };
    gsched_core::gpu::model(key)
}

/// The schedulable instances: each MIG device of a GPU with MIG enabled,
/// else the whole GPU.
pub fn inventory(backend: &dyn GpuBackend) -> Result<Vec<Instance>, BackendError> {
    let mut out = Vec::new();
    for g in backend.gpus()? {
        let model_name = g.model.clone().unwrap_or_else(|| g.name.clone());
        let table = g.model.as_deref().and_then(gsched_core::gpu::model);
        if g.mig.is_some_and(|m| m.current) {
            for d in backend.mig_devices(g.index)? {
                out.push(Instance {
                    uuid: d.uuid,
                    gpu_index: g.index,
                    gpu_uuid: g.uuid.clone(),
                    model: model_name.clone(),
                    profile: Some(d.profile),
                    memory_mib: d.memory_total_mib,
                    sms: d.sms,
                    compute_slices: d.slices,
                    link_domain: g.link_domain,
                    mig_start: Some(d.start),
                    mps: None,
                });
            }
        } else {
            out.push(Instance {
                uuid: g.uuid.clone(),
                gpu_index: g.index,
                gpu_uuid: g.uuid.clone(),
                model: model_name,
                profile: None,
                memory_mib: g.memory_total_mib,
                sms: g.sms,
                compute_slices: table.map(|t| t.compute_slices).unwrap_or(7),
                link_domain: g.link_domain,
                mig_start: None,
                mps: None,
            });
        }
    }
    Ok(out)
}

/// The simulated layout used when none is given and NVML finds no GPU.
pub const DEFAULT_SIM_GPUS: &str = "1xA100-40GB";

/// Picks the backend: the simulated GPUs named in config; else NVML when
/// the driver library loads and sees a GPU; else the default simulated node.
/// `allow_reconfigure` lets the NVML backend create and destroy instances.
pub fn select(
    node: &str,
    sim_gpus: Option<&str>,
    allow_reconfigure: bool,
) -> anyhow::Result<Box<dyn GpuBackend>> {
    if let Some(spec) = sim_gpus {
        return Ok(Box::new(SimulatedGpus::new(node, spec)?));
    }
    match nvml::NvmlGpus::open() {
        Ok(mut n) => {
            n.allow_reconfigure(allow_reconfigure);
            return Ok(Box::new(n));
        }
        Err(why) => tracing::warn!(
            "no NVIDIA GPU to serve ({why}); serving a simulated {DEFAULT_SIM_GPUS} (give --sim-gpus to choose)"
        ),
    }
    Ok(Box::new(SimulatedGpus::new(node, DEFAULT_SIM_GPUS)?))
}
