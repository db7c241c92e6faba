//! Real GPUs through NVML (nvml-wrapper; the library is loaded at run time,
//! so gsched builds and runs on machines without a driver).
//!
//! Reading is always allowed. Creating and destroying MIG instances goes
//! through the placement-aware raw calls and is refused unless the node's
//! GPU config sets `allow_mig_reconfigure = true`.

use std::ffi::CStr;
use std::mem;

use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::{nvml_sym, nvml_try, NvmlError};
use nvml_wrapper::{Device, Nvml};
use nvml_wrapper_sys::bindings::*;

use super::{
    model_for_device, BackendError, GpuBackend, GpuInfo, GpuProcess, MigDevice, MigMode,
    ProfileInfo,
};

const MIB: u64 = 1024 * 1024;

/// The GPUs NVML sees.
pub struct NvmlGpus {
    nvml: Nvml,
    allow_reconfigure: bool,
}

fn err(call: &'static str) -> impl Fn(NvmlError) -> BackendError {
    move |e| BackendError::Nvml {
        call,
        message: e.to_string(),
    }
}

fn c_name(name: &[std::os::raw::c_char]) -> String {
    // SAFETY: NVML writes a NUL-terminated string into the fixed buffer; the
    // buffer was zeroed first, so a terminator exists.
    let s = unsafe { CStr::from_ptr(name.as_ptr()) };
    s.to_string_lossy().trim_start_matches("MIG ").to_string()
}

/// Why NVML cannot serve this node's GPUs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NvmlUnavailable(pub String);

impl From<String> for NvmlUnavailable {
    fn from(why: String) -> Self {
        NvmlUnavailable(why)
    }
}

impl From<&str> for NvmlUnavailable {
    fn from(why: &str) -> Self {
        NvmlUnavailable(why.to_string())
    }
}

impl NvmlGpus {
    /// Loads NVML and checks that it sees at least one GPU.
    pub fn open() -> Result<NvmlGpus, NvmlUnavailable> {
        let nvml = Nvml::init().map_err(|e| NvmlUnavailable(format!("NVML not available: {e}")))?;
        match nvml.device_count() {
            Ok(0) => Err("NVML sees no GPU".into()),
            Ok(_) => Ok(NvmlGpus {
                nvml,
                allow_reconfigure: false,
            }),
            Err(e) => Err(NvmlUnavailable(format!("NVML cannot count GPUs: {e}"))),
        }
    }

    /// Lets [`GpuBackend::create_instance`] and
    /// [`GpuBackend::destroy_instance`] change the hardware.
    pub fn allow_reconfigure(&mut self, allow: bool) {
        self.allow_reconfigure = allow;
    }

    pub fn driver_version(&self) -> Option<String> {
        self.nvml.sys_driver_version().ok()
    }

    fn device(&self, gpu: u32) -> Result<Device<'_>, BackendError> {
        self.nvml.device_by_index(gpu).map_err(|e| match e {
            NvmlError::InvalidArg | NvmlError::NotFound => BackendError::NoSuchGpu(gpu),
            e => err("nvmlDeviceGetHandleByIndex")(e),
        })
    }

    fn refuse_changes(&self) -> Result<(), BackendError> {
        if self.allow_reconfigure {
            Ok(())
        } else {
            Err(BackendError::Nvml {
                call: "reconfigure",
                message: "MIG changes are off: set allow_mig_reconfigure = true in the GPU config"
                    .into(),
            })
        }
    }

    /// The GPU-instance handle with id `gi_id`.
    fn gpu_instance(
        &self,
        dev: &Device<'_>,
        gpu: u32,
        gi_id: u32,
    ) -> Result<nvmlGpuInstance_t, BackendError> {
        let lib = self.nvml.lib();
        let f = nvml_sym(lib.nvmlDeviceGetGpuInstanceById.as_ref())
            .map_err(err("nvmlDeviceGetGpuInstanceById"))?;
        // SAFETY: valid device handle, out-pointer to a local.
        unsafe {
            let mut gi: nvmlGpuInstance_t = mem::zeroed();
            match nvml_try(f(dev.handle(), gi_id, &mut gi)) {
                Ok(()) => Ok(gi),
                Err(NvmlError::NotFound) | Err(NvmlError::InvalidArg) => {
                    Err(BackendError::NoSuchInstance { gpu, gi_id })
                }
                Err(e) => Err(err("nvmlDeviceGetGpuInstanceById")(e)),
            }
        }
    }

    fn gpu_instance_info(
        &self,
        gi: nvmlGpuInstance_t,
    ) -> Result<nvmlGpuInstanceInfo_t, BackendError> {
        let f = nvml_sym(self.nvml.lib().nvmlGpuInstanceGetInfo.as_ref())
            .map_err(err("nvmlGpuInstanceGetInfo"))?;
        // SAFETY: valid GPU-instance handle, out-pointer to a local.
        unsafe {
            let mut info: nvmlGpuInstanceInfo_t = mem::zeroed();
            nvml_try(f(gi, &mut info)).map_err(err("nvmlGpuInstanceGetInfo"))?;
            Ok(info)
        }
    }

    /// Legal starts and the size in memory slices of a profile.
    fn placements(&self, dev: &Device<'_>, profile_id: u32) -> Result<(Vec<u32>, u32), NvmlError> {
        let f = nvml_sym(
            self.nvml
                .lib()
                .nvmlDeviceGetGpuInstancePossiblePlacements_v2
                .as_ref(),
        )?;
        // SAFETY: first call asks for the count (NULL array), second fills a
        // buffer of that many elements.
        unsafe {
            let mut count: u32 = 0;
            nvml_try(f(
                dev.handle(),
                profile_id,
                std::ptr::null_mut(),
                &mut count,
            ))?;
            let mut buf = vec![nvmlGpuInstancePlacement_t { start: 0, size: 0 }; count as usize];
            nvml_try(f(dev.handle(), profile_id, buf.as_mut_ptr(), &mut count))?;
            buf.truncate(count as usize);
            let size = buf.first().map(|p| p.size).unwrap_or(0);
            Ok((buf.iter().map(|p| p.start).collect(), size))
        }
    }
}

impl GpuBackend for NvmlGpus {
    fn describe(&self) -> String {
        let n = self.nvml.device_count().unwrap_or(0);
        format!(
            "NVML: {n} GPU(s), driver {}",
            self.driver_version().unwrap_or_else(|| "unknown".into())
        )
    }

    fn gpus(&self) -> Result<Vec<GpuInfo>, BackendError> {
        let n = self
            .nvml
            .device_count()
            .map_err(err("nvmlDeviceGetCount"))?;
        let mut out = Vec::new();
        for i in 0..n {
            let d = self.device(i)?;
            let mem = d.memory_info().map_err(err("nvmlDeviceGetMemoryInfo"))?;
            let name = d.name().map_err(err("nvmlDeviceGetName"))?;
            let total = mem.total / MIB;
            let sms = d.attributes().map(|a| a.multiprocessor_count).unwrap_or(0);
            let mig = match d.mig_mode() {
                Ok(m) => Some(MigMode {
                    current: m.current == NVML_DEVICE_MIG_ENABLE,
                    pending: m.pending == NVML_DEVICE_MIG_ENABLE,
                }),
                Err(NvmlError::NotSupported) => None,
                Err(e) => return Err(err("nvmlDeviceGetMigMode")(e)),
            };
            out.push(GpuInfo {
                index: i,
                uuid: d.uuid().map_err(err("nvmlDeviceGetUUID"))?,
                model: model_for_device(&name, total).map(|m| m.name.to_string()),
                name,
                memory_total_mib: total,
                memory_used_mib: mem.used / MIB,
                // MIG-enabled GPUs report no attributes on the parent.
                sms: if sms == 0 { self.sms_fallback(&d) } else { sms },
                mig,
                link_domain: None,
            });
        }
        let domains = gsched_core::gpu::link_domains(out.len(), |a, b| self.linked(a, b));
        for (g, d) in out.iter_mut().zip(domains) {
            g.link_domain = Some(d);
        }
        Ok(out)
    }

    fn profiles(&self, gpu: u32) -> Result<Vec<ProfileInfo>, BackendError> {
        let d = self.device(gpu)?;
        let f = nvml_sym(
            self.nvml
                .lib()
                .nvmlDeviceGetGpuInstanceProfileInfoV
                .as_ref(),
        )
        .map_err(err("nvmlDeviceGetGpuInstanceProfileInfoV"))?;
        let mut out = Vec::new();
        for index in 0..NVML_GPU_INSTANCE_PROFILE_COUNT {
            // SAFETY: the struct is zeroed and carries its version, as the
            // versioned call requires.
            let info = unsafe {
                let mut info: nvmlGpuInstanceProfileInfo_v2_t = mem::zeroed();
                info.version = mem::size_of::<nvmlGpuInstanceProfileInfo_v2_t>() as u32 | (2 << 24);
                match nvml_try(f(d.handle(), index, &mut info)) {
                    Ok(()) => info,
                    // Profiles this GPU does not have.
                    Err(NvmlError::NotSupported) | Err(NvmlError::InvalidArg) => continue,
                    Err(e) => return Err(err("nvmlDeviceGetGpuInstanceProfileInfoV")(e)),
                }
            };
            // Placements may be unreadable while MIG is disabled.
            let (starts, size) = self.placements(&d, info.id).unwrap_or_default();
            out.push(ProfileInfo {
                name: c_name(&info.name),
                id: info.id,
                nvml_index: index,
                slices: info.sliceCount,
                max_count: info.instanceCount,
                sms: info.multiprocessorCount,
                memory_mib: info.memorySizeMB,
                starts,
                size,
            });
        }
        // Without placements (MIG disabled), sizes in memory slices follow
        // from memory: the smallest profile is one slice.
        if let Some(unit) = out.iter().map(|p| p.memory_mib).filter(|m| *m > 0).min() {
            for p in out.iter_mut().filter(|p| p.size == 0) {
                p.size = ((p.memory_mib as f64 / unit as f64).round() as u32).next_power_of_two();
            }
        }
        Ok(out)
    }

    fn mig_devices(&self, gpu: u32) -> Result<Vec<MigDevice>, BackendError> {
        let d = self.device(gpu)?;
        match d.mig_mode() {
            Ok(m) if m.current == NVML_DEVICE_MIG_ENABLE => {}
            _ => return Ok(Vec::new()),
        }
        let profiles = self.profiles(gpu)?;
        let max = d
            .mig_device_count()
            .map_err(err("nvmlDeviceGetMaxMigDeviceCount"))?;
        let lib = self.nvml.lib();
        let gi_id_of = nvml_sym(lib.nvmlDeviceGetGpuInstanceId.as_ref())
            .map_err(err("nvmlDeviceGetGpuInstanceId"))?;
        let ci_id_of = nvml_sym(lib.nvmlDeviceGetComputeInstanceId.as_ref())
            .map_err(err("nvmlDeviceGetComputeInstanceId"))?;
        let mut out = Vec::new();
        for k in 0..max {
            let m = match d.mig_device_by_index(k) {
                Ok(m) => m,
                Err(NvmlError::NotFound) | Err(NvmlError::InvalidArg) => continue,
                Err(e) => return Err(err("nvmlDeviceGetMigDeviceHandleByIndex")(e)),
            };
            let (mut gi_id, mut ci_id) = (0u32, 0u32);
            // SAFETY: valid MIG device handle, out-pointers to locals.
            unsafe {
                nvml_try(gi_id_of(m.handle(), &mut gi_id))
                    .map_err(err("nvmlDeviceGetGpuInstanceId"))?;
                nvml_try(ci_id_of(m.handle(), &mut ci_id))
                    .map_err(err("nvmlDeviceGetComputeInstanceId"))?;
            }
            let info = self.gpu_instance_info(self.gpu_instance(&d, gpu, gi_id)?)?;
            let prof = profiles.iter().find(|p| p.id == info.profileId);
            let mem = m.memory_info().map_err(err("nvmlDeviceGetMemoryInfo"))?;
            out.push(MigDevice {
                uuid: m.uuid().map_err(err("nvmlDeviceGetUUID"))?,
                gi_id,
                ci_id,
                profile: prof
                    .map(|p| p.name.clone())
                    .unwrap_or_else(|| format!("profile-{}", info.profileId)),
                start: info.placement.start,
                size: info.placement.size,
                memory_total_mib: mem.total / MIB,
                memory_used_mib: mem.used / MIB,
                sms: m.attributes().map(|a| a.multiprocessor_count).unwrap_or(0),
                slices: prof.map(|p| p.slices).unwrap_or(1),
            });
        }
        out.sort_by_key(|d| d.start);
        Ok(out)
    }

    fn processes(&self, gpu: u32) -> Result<Vec<GpuProcess>, BackendError> {
        let d = self.device(gpu)?;
        let mut procs = d
            .running_compute_processes()
            .map_err(err("nvmlDeviceGetComputeRunningProcesses"))?;
        procs.extend(d.running_graphics_processes().unwrap_or_default());
        let mut out: Vec<GpuProcess> = Vec::new();
        for p in procs {
            let used = match p.used_gpu_memory {
                UsedGpuMemory::Used(b) => b / MIB,
                UsedGpuMemory::Unavailable => 0,
            };
            if !out.iter().any(|q| q.pid == p.pid) {
                out.push(GpuProcess {
                    pid: p.pid,
                    used_mib: used,
                });
            }
        }
        Ok(out)
    }

    fn process_utilization(
        &self,
        gpu: u32,
        since_us: u64,
    ) -> Option<Vec<gsched_core::gpu_time::UtilSample>> {
        let d = self.device(gpu).ok()?;
        // With MIG on, the driver samples no process of an instance.
        if d.mig_mode().is_ok_and(|m| m.current == 1) {
            return None;
        }
        match d.process_utilization_stats(since_us) {
            Ok(samples) => Some(
                samples
                    .into_iter()
                    .map(|s| gsched_core::gpu_time::UtilSample {
                        pid: s.pid,
                        timestamp_us: s.timestamp,
                        sm_percent: s.sm_util,
                    })
                    .collect(),
            ),
            // No sample since then: nothing ran.
            Err(NvmlError::NotFound) => Some(Vec::new()),
            Err(e) => {
                tracing::debug!(gpu, error = %e, "no per-process utilization from the driver");
                None
            }
        }
    }

    fn processes_on(&self, uuid: &str) -> Option<Vec<u32>> {
        let d = self.nvml.device_by_uuid(uuid).ok()?;
        let mut pids: Vec<u32> = d
            .running_compute_processes()
            .ok()?
            .into_iter()
            .chain(d.running_graphics_processes().unwrap_or_default())
            .map(|p| p.pid)
            .collect();
        pids.sort_unstable();
        pids.dedup();
        Some(pids)
    }

    fn free_bytes(&self, uuid: &str) -> Option<u64> {
        self.nvml
            .device_by_uuid(uuid)
            .ok()?
            .memory_info()
            .ok()
            .map(|m| m.free)
    }

    fn create_instance(
        &self,
        gpu: u32,
        profile: &str,
        start: u32,
    ) -> Result<MigDevice, BackendError> {
        self.refuse_changes()?;
        let d = self.device(gpu)?;
        let prof = self
            .profiles(gpu)?
            .into_iter()
            .find(|p| p.name.eq_ignore_ascii_case(profile))
            .ok_or_else(|| BackendError::UnknownProfile {
                gpu,
                profile: profile.into(),
            })?;
        let lib = self.nvml.lib();
        let create_gi = nvml_sym(lib.nvmlDeviceCreateGpuInstanceWithPlacement.as_ref())
            .map_err(err("nvmlDeviceCreateGpuInstanceWithPlacement"))?;
        let ci_info = nvml_sym(lib.nvmlGpuInstanceGetComputeInstanceProfileInfo.as_ref())
            .map_err(err("nvmlGpuInstanceGetComputeInstanceProfileInfo"))?;
        let create_ci = nvml_sym(lib.nvmlGpuInstanceCreateComputeInstance.as_ref())
            .map_err(err("nvmlGpuInstanceCreateComputeInstance"))?;
        let destroy_gi =
            nvml_sym(lib.nvmlGpuInstanceDestroy.as_ref()).map_err(err("nvmlGpuInstanceDestroy"))?;
        // SAFETY: handles come from NVML and out-pointers are locals; on a
        // failed compute-instance creation the new GPU instance is destroyed.
        let gi_id = unsafe {
            let placement = nvmlGpuInstancePlacement_t {
                start,
                size: prof.size,
            };
            let mut gi: nvmlGpuInstance_t = mem::zeroed();
            nvml_try(create_gi(d.handle(), prof.id, &placement, &mut gi))
                .map_err(err("nvmlDeviceCreateGpuInstanceWithPlacement"))?;
            // The compute-instance profile that spans the whole GPU instance.
            let mut chosen = None;
            for idx in 0..NVML_COMPUTE_INSTANCE_PROFILE_COUNT {
                let mut info: nvmlComputeInstanceProfileInfo_t = mem::zeroed();
                if nvml_try(ci_info(
                    gi,
                    idx,
                    NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
                    &mut info,
                ))
                .is_ok()
                    && info.sliceCount == prof.slices
                {
                    chosen = Some(info.id);
                    break;
                }
            }
            let made = match chosen {
                Some(id) => {
                    let mut ci: nvmlComputeInstance_t = mem::zeroed();
                    nvml_try(create_ci(gi, id, &mut ci))
                        .map_err(err("nvmlGpuInstanceCreateComputeInstance"))
                }
                None => Err(BackendError::Nvml {
                    call: "nvmlGpuInstanceGetComputeInstanceProfileInfo",
                    message: format!("no compute-instance profile of {} slices", prof.slices),
                }),
            };
            if let Err(e) = made {
                let _ = destroy_gi(gi);
                return Err(e);
            }
            self.gpu_instance_info(gi)?.id
        };
        self.mig_devices(gpu)?
            .into_iter()
            .find(|m| m.gi_id == gi_id)
            .ok_or(BackendError::NoSuchInstance { gpu, gi_id })
    }

    fn destroy_instance(&self, gpu: u32, gi_id: u32) -> Result<(), BackendError> {
        self.refuse_changes()?;
        let d = self.device(gpu)?;
        let gi = self.gpu_instance(&d, gpu, gi_id)?;
        let lib = self.nvml.lib();
        let list_ci = nvml_sym(lib.nvmlGpuInstanceGetComputeInstances.as_ref())
            .map_err(err("nvmlGpuInstanceGetComputeInstances"))?;
        let destroy_ci = nvml_sym(lib.nvmlComputeInstanceDestroy.as_ref())
            .map_err(err("nvmlComputeInstanceDestroy"))?;
        let destroy_gi =
            nvml_sym(lib.nvmlGpuInstanceDestroy.as_ref()).map_err(err("nvmlGpuInstanceDestroy"))?;
        let busy = |e: NvmlError, call| match e {
            NvmlError::InUse => BackendError::Busy {
                gpu,
                uuid: format!("GPU instance {gi_id}"),
                processes: 1,
            },
            e => err(call)(e),
        };
        // SAFETY: handles come from NVML; buffers are sized by NVML's counts.
        unsafe {
            for idx in 0..NVML_COMPUTE_INSTANCE_PROFILE_COUNT {
                let mut cis: Vec<nvmlComputeInstance_t> = vec![mem::zeroed(); 8];
                let mut count: u32 = 0;
                if nvml_try(list_ci(gi, idx, cis.as_mut_ptr(), &mut count)).is_err() {
                    continue;
                }
                for ci in cis.into_iter().take(count as usize) {
                    nvml_try(destroy_ci(ci)).map_err(|e| busy(e, "nvmlComputeInstanceDestroy"))?;
                }
            }
            nvml_try(destroy_gi(gi)).map_err(|e| busy(e, "nvmlGpuInstanceDestroy"))?;
        }
        Ok(())
    }
}

impl NvmlGpus {
    /// Whether GPUs `a` and `b` (indices) talk directly: over NVLink, or
    /// under one PCIe switch or host bridge. What NVML cannot tell counts
    /// as not.
    fn linked(&self, a: usize, b: usize) -> bool {
        use nvml_wrapper::enum_wrappers::device::{P2pCapabilitiesIndex, P2pStatus, TopologyLevel};
        let (Ok(da), Ok(db)) = (self.device(a as u32), self.device(b as u32)) else {
            return false;
        };
        if matches!(
            da.p2p_status(&db, P2pCapabilitiesIndex::NvLink),
            Ok(P2pStatus::Ok)
        ) {
            return true;
        }
        matches!(
            da.topology_common_ancestor(db),
            Ok(TopologyLevel::Internal
                | TopologyLevel::Single
                | TopologyLevel::Multiple
                | TopologyLevel::HostBridge)
        )
    }

    /// SM count of a GPU whose attributes are unreadable (MIG enabled): the
    /// full-GPU profile's.
    fn sms_fallback(&self, d: &Device<'_>) -> u32 {
        d.index()
            .ok()
            .and_then(|i| self.profiles(i).ok())
            .and_then(|p| p.iter().map(|p| p.sms).max())
            .unwrap_or(0)
    }
}
