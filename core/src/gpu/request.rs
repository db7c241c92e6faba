//! What a job asks of the GPUs.

use serde::{Deserialize, Serialize};

/// What a job asks of the GPUs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct GpuRequest {
    /// A MIG profile name such as `1g.5gb` (isolated jobs only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mig_profile: Option<String>,
    /// A GPU model the instance must be of, such as `h100` or `a100-80gb`
    /// (`--gres=gpu:h100:1`; isolated jobs only; [`crate::gpu::model_matches`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// GPU memory footprint in MiB: the size of instance an isolated job needs,
    /// or the reservation hint of a non-isolated one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_mib: Option<u64>,
    /// The compute a shared job's GPU tasks demand, stated with
    /// `--gpu-share`: thousandths of a whole GPU ([`crate::compute`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share: Option<u32>,
    /// The most of its instance's time the job's processes may take
    /// (`--gpu-share=REQ:LIMIT`), thousandths; with a share, the job's
    /// processes are held to a GPU time quota ([`crate::time_quota`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_limit: Option<u32>,
    /// How many instances (whole GPUs or MIG instances) an isolated job
    /// holds, all on its node (`--gres=gpu:N`); one when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u32>,
}

/// The most GPU instances one job may ask for.
pub const MAX_GPUS_PER_JOB: u32 = 64;

impl GpuRequest {
    /// How many instances the job holds (isolated) or asks for.
    pub fn instances(&self) -> usize {
        self.count.unwrap_or(1) as usize
    }

    /// The GPU type named: the MIG profile, else the model.
    pub fn kind(&self) -> Option<&str> {
        self.mig_profile.as_deref().or(self.model.as_deref())
    }

    /// Slurm's TRES form of an isolated job's request: `gres/gpu:TYPE=N`
    /// or `gres/gpu=N`.
    pub fn tres(&self) -> String {
        let n = self.instances();
        match self.kind() {
            Some(k) => format!("gres/gpu:{k}={n}"),
            None => format!("gres/gpu={n}"),
        }
    }
}
