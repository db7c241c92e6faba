//! GPU backends: where the node's instances come from.

use gsched_core::gpu::{parse_sim_spec, sim_instances, Instance, SimSpecError};

/// A source of GPU instances for this node.
pub trait GpuBackend: Send + Sync {
    /// One line for the log: what was found.
    fn describe(&self) -> String;
    fn instances(&self) -> Vec<Instance>;
}

/// GPUs described in config, with the real profile tables.
pub struct SimulatedGpus {
    spec: String,
    instances: Vec<Instance>,
}

impl SimulatedGpus {
    pub fn new(node: &str, spec: &str) -> Result<SimulatedGpus, SimSpecError> {
        let gpus = parse_sim_spec(spec)?;
        Ok(SimulatedGpus {
            spec: spec.to_string(),
            instances: sim_instances(node, &gpus),
        })
    }
}

impl GpuBackend for SimulatedGpus {
    fn describe(&self) -> String {
        format!(
            "simulated GPUs {} ({} instances)",
            self.spec,
            self.instances.len()
        )
    }
    fn instances(&self) -> Vec<Instance> {
        self.instances.clone()
    }
}

/// The simulated layout used when none is given and no NVML backend exists.
pub const DEFAULT_SIM_GPUS: &str = "1xA100-40GB";

/// Picks the backend: the simulated GPUs named in config, else the default
/// simulated node (the NVML backend is not part of this build yet).
pub fn select(node: &str, sim_gpus: Option<&str>) -> Result<Box<dyn GpuBackend>, SimSpecError> {
    match sim_gpus {
        Some(spec) => Ok(Box::new(SimulatedGpus::new(node, spec)?)),
        None => {
            tracing::warn!(
                "no --sim-gpus given and this build has no NVML backend yet: serving a simulated {DEFAULT_SIM_GPUS}"
            );
            Ok(Box::new(SimulatedGpus::new(node, DEFAULT_SIM_GPUS)?))
        }
    }
}
