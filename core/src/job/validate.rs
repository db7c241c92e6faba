//! What a submission must be to be accepted: [`JobSpec::validate`] and
//! the errors that name what is wrong.

use super::{
    JobSpec, MAX_GPUS_PER_JOB, MAX_GPU_MEM_MIB, MAX_IDEMPOTENCY_KEY_LEN, MAX_NAME_LEN,
    MAX_TIME_LIMIT_SECS, NICE_LIMIT,
};

/// Why a submission was refused. Each message names the field and what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("the batch script is empty")]
    EmptyScript,
    #[error("Invalid nice value {0}: it must be between -{limit} and {limit}", limit = NICE_LIMIT)]
    BadNice(i64),
    #[error("this does not look like a batch script: the first line must start with #! followed by the path to an interpreter")]
    NoShebang,
    #[error("job name is longer than {MAX_NAME_LEN} characters")]
    NameTooLong,
    #[error("job name must not contain control characters")]
    BadName,
    #[error("working directory '{0}' is not an absolute path")]
    RelativeWorkingDir(String),
    #[error(
        "a MIG profile (--mig {0}) asks for an isolated instance; add --isolated or drop --mig"
    )]
    ProfileWithoutIsolated(String),
    #[error("'{0}' is not a MIG profile name (expected the form Ng.Mgb, e.g. 1g.5gb)")]
    BadProfile(String),
    #[error("GPU memory request must be greater than zero")]
    ZeroGpuMem,
    #[error("a GPU share of {0} thousandths is out of range: give above 0 and at most a whole GPU (1.0)")]
    BadGpuShare(u32),
    #[error("--gpu-share is for shared jobs: an isolated job has its instance to itself; drop one of them")]
    GpuShareWithIsolated,
    #[error("a GPU time limit needs a request: give --gpu-share=REQ:LIMIT")]
    GpuShareLimitAlone,
    #[error("a GPU time limit of {0} thousandths is out of range: give at least the request ({1}) and at most a whole GPU (1.0)")]
    BadGpuShareLimit(u32, u32),
    #[error("time limit must be at least one second")]
    ZeroTimeLimit,
    #[error("script contains a NUL byte")]
    NulInScript,
    #[error("time limit of {0} seconds is longer than the longest accepted ({MAX_TIME_LIMIT_SECS} s, ten years); give UNLIMITED for no limit")]
    TimeLimitTooLong(u64),
    #[error(
        "GPU memory request of {0} MiB is larger than any GPU (at most {MAX_GPU_MEM_MIB} MiB)"
    )]
    GpuMemTooLarge(u64),
    #[error("the job's {0} contains a NUL byte")]
    Nul(&'static str),
    #[error("environment variable name '{0}' is empty or contains '='")]
    BadEnvName(String),
    #[error("umask {0:o} is not a permission mask (at most 0777)")]
    BadUmask(u32),
    #[error(transparent)]
    Resources(#[from] crate::resources::ResourceError),
    #[error(transparent)]
    Allocation(#[from] crate::allocation::AllocationError),
    #[error("GPU type '{0}' is not a MIG profile or a model name (letters, digits, '-', '_', '.'; such as h100 or a100-80gb)")]
    BadGpuType(String),
    #[error("GPU type '{0}' asks for an instance of its own: only isolated jobs may name one")]
    GpuTypeWithoutIsolated(String),
    #[error("a GPU count of 0 is not a GPU request; leave the option out")]
    ZeroGpuCount,
    #[error("{0} GPU instances are more than one job may hold (at most {MAX_GPUS_PER_JOB})")]
    GpuCountTooLarge(u32),
    #[error("a job asking for {0} GPU instances holds them whole: submit it isolated (--isolated; a --gres or --gpus request is)")]
    GpuCountWithoutIsolated(u32),
    #[error("the idempotency key must be 1 to {MAX_IDEMPOTENCY_KEY_LEN} printable characters")]
    BadIdempotencyKey,
    #[error(transparent)]
    Limits(#[from] crate::rlimits::BadLimits),
    #[error("the job's {0} contains a control or invisible formatting character (such as ESC or a bidirectional override); remove it")]
    ControlCharacter(&'static str),
    #[error("the job's {what} is {size} bytes, more than the {max} accepted")]
    TooLarge {
        what: &'static str,
        size: usize,
        max: usize,
    },
}

impl JobSpec {
    /// Checks a submission; nothing is stored unless this passes.
    pub fn validate(&self) -> Result<(), SpecError> {
        if self.script.trim().is_empty() {
            return Err(SpecError::EmptyScript);
        }
        if self.script.contains('\0') {
            return Err(SpecError::NulInScript);
        }
        if !self.script.starts_with("#!") {
            return Err(SpecError::NoShebang);
        }
        self.validate_without_script()
    }

    /// [`JobSpec::validate`] less the script's checks: for a change to a
    /// submitted job, whose script may be in the controller's store only
    /// and never changes.
    pub fn validate_without_script(&self) -> Result<(), SpecError> {
        if self.name.len() > MAX_NAME_LEN {
            return Err(SpecError::NameTooLong);
        }
        if self.nice.abs() > NICE_LIMIT {
            return Err(SpecError::BadNice(self.nice));
        }
        if self.name.chars().any(char::is_control) {
            return Err(SpecError::BadName);
        }
        if !self.working_dir.starts_with('/') {
            return Err(SpecError::RelativeWorkingDir(self.working_dir.clone()));
        }
        if let Some(p) = &self.gpu.mig_profile {
            if !crate::gpu::is_profile_name(p) {
                return Err(SpecError::BadProfile(p.clone()));
            }
            if !self.isolated {
                return Err(SpecError::ProfileWithoutIsolated(p.clone()));
            }
        }
        if let Some(m) = &self.gpu.model {
            if !crate::gpu::is_gpu_type(m) {
                return Err(SpecError::BadGpuType(m.clone()));
            }
            if !self.isolated {
                return Err(SpecError::GpuTypeWithoutIsolated(m.clone()));
            }
        }
        if self.gpu.mem_mib == Some(0) {
            return Err(SpecError::ZeroGpuMem);
        }
        match self.gpu.count {
            Some(0) => return Err(SpecError::ZeroGpuCount),
            Some(n) if n > MAX_GPUS_PER_JOB => return Err(SpecError::GpuCountTooLarge(n)),
            Some(n) if n > 1 && !self.isolated => {
                return Err(SpecError::GpuCountWithoutIsolated(n))
            }
            _ => {}
        }
        if let Some(share) = self.gpu.share {
            if !crate::compute::is_share(share) {
                return Err(SpecError::BadGpuShare(share));
            }
            if self.isolated {
                return Err(SpecError::GpuShareWithIsolated);
            }
        }
        if let Some(limit) = self.gpu.share_limit {
            let share = self.gpu.share.ok_or(SpecError::GpuShareLimitAlone)?;
            if !crate::compute::is_share(limit) || limit < share {
                return Err(SpecError::BadGpuShareLimit(limit, share));
            }
        }
        if self.time_limit == Some(0) {
            return Err(SpecError::ZeroTimeLimit);
        }
        if let Some(t) = self.time_limit.filter(|t| *t > MAX_TIME_LIMIT_SECS) {
            return Err(SpecError::TimeLimitTooLong(t));
        }
        if let Some(m) = self.gpu.mem_mib.filter(|m| *m > MAX_GPU_MEM_MIB) {
            return Err(SpecError::GpuMemTooLarge(m));
        }
        if let Some(u) = self.umask.filter(|u| *u > 0o777) {
            return Err(SpecError::BadUmask(u));
        }
        if let Some(k) = &self.idempotency_key {
            if k.is_empty()
                || k.len() > MAX_IDEMPOTENCY_KEY_LEN
                || k.chars().any(|c| c.is_control())
            {
                return Err(SpecError::BadIdempotencyKey);
            }
        }
        crate::resources::JobResources::of(&self.slurm)?;
        crate::allocation::check(&self.slurm, self.gpu.instances())?;
        crate::rlimits::validate(&self.rlimits)?;
        self.check_nul_bytes()?;
        self.check_sizes()?;
        self.check_printable()
    }

    /// Refuses NUL bytes anywhere the job's process gets a C string (the
    /// launch would fail later, after the job was accepted).
    fn check_nul_bytes(&self) -> Result<(), SpecError> {
        let nul = |s: &str| s.contains('\0');
        if nul(&self.name) {
            return Err(SpecError::Nul("name"));
        }
        if self.argv.iter().any(|a| nul(a)) {
            return Err(SpecError::Nul("arguments"));
        }
        if nul(&self.working_dir) {
            return Err(SpecError::Nul("working directory"));
        }
        if nul(&self.user_name) {
            return Err(SpecError::Nul("user name"));
        }
        if [&self.stdout, &self.stderr]
            .into_iter()
            .flatten()
            .any(|p| nul(p))
        {
            return Err(SpecError::Nul("output file name"));
        }
        for (k, v) in &self.environment {
            if nul(k) || nul(v) {
                return Err(SpecError::Nul("environment"));
            }
            if k.is_empty() || k.contains('=') {
                return Err(SpecError::BadEnvName(k.clone()));
            }
        }
        Ok(())
    }
}
