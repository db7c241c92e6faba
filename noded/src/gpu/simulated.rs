//! Simulated GPUs: the real profile tables and placement rules, instance
//! creation and destruction with the same legality checks as the hardware,
//! stable UUIDs, and memory accounting for simulated processes.

use std::sync::Mutex;

use gsched_core::gpu::{parse_sim_spec, sim_gpu_uuid, sim_mig_uuid, GpuModel, SimSpecError};
use gsched_core::mig::{check_create, MigPlacement};

use super::{BackendError, GpuBackend, GpuInfo, GpuProcess, MigDevice, MigMode, ProfileInfo};

/// GPUs that exist only in this process.
pub struct SimulatedGpus {
    node: String,
    spec: String,
    gpus: Mutex<Vec<SimGpuState>>,
}

struct SimGpuState {
    model: &'static GpuModel,
    mig: bool,
    instances: Vec<SimInstance>,
    next_gi: u32,
    /// Memory held by simulated processes: (pid, instance uuid or None for
    /// the whole GPU, MiB).
    processes: Vec<(u32, Option<String>, u64)>,
}

struct SimInstance {
    gi_id: u32,
    placement: MigPlacement,
    uuid: String,
}

impl SimulatedGpus {
    /// GPUs from a `--sim-gpus` spec; MIG layouts in the spec exist from the
    /// start, as if an administrator had created them.
    pub fn new(node: &str, spec: &str) -> Result<SimulatedGpus, SimSpecError> {
        let gpus = parse_sim_spec(spec)?
            .into_iter()
            .enumerate()
            .map(|(i, g)| {
                let instances: Vec<SimInstance> = g
                    .layout
                    .iter()
                    .flatten()
                    .enumerate()
                    .map(|(k, p)| SimInstance {
                        gi_id: k as u32 + 1,
                        placement: *p,
                        uuid: sim_mig_uuid(node, i, p),
                    })
                    .collect();
                SimGpuState {
                    model: g.model,
                    mig: g.layout.is_some(),
                    next_gi: instances.len() as u32 + 1,
                    instances,
                    processes: Vec::new(),
                }
            })
            .collect();
        Ok(SimulatedGpus {
            node: node.to_string(),
            spec: spec.to_string(),
            gpus: Mutex::new(gpus),
        })
    }

    fn with_gpu<T>(
        &self,
        gpu: u32,
        f: impl FnOnce(&mut SimGpuState) -> Result<T, BackendError>,
    ) -> Result<T, BackendError> {
        let mut gpus = self.gpus.lock().unwrap_or_else(|e| e.into_inner());
        let g = gpus
            .get_mut(gpu as usize)
            .ok_or(BackendError::NoSuchGpu(gpu))?;
        f(g)
    }

    /// A simulated process takes `mib` of memory on an instance (a `MIG-` or
    /// `GPU-` UUID); refused, like a CUDA allocation, when it does not fit.
    pub fn allocate(&self, uuid: &str, pid: u32, mib: u64) -> Result<(), BackendError> {
        let mut gpus = self.gpus.lock().unwrap_or_else(|e| e.into_inner());
        for (i, g) in gpus.iter_mut().enumerate() {
            let target = if uuid == sim_gpu_uuid(&self.node, i) && !g.mig {
                Some((None, g.model.memory_mib))
            } else {
                g.instances
                    .iter()
                    .find(|s| s.uuid == uuid)
                    .map(|s| (Some(s.uuid.clone()), s.placement.profile.memory_mib))
            };
            if let Some((on, total)) = target {
                let used: u64 = g.processes.iter().filter(|p| p.1 == on).map(|p| p.2).sum();
                let free = total - used.min(total);
                if mib > free {
                    return Err(BackendError::OutOfMemory {
                        uuid: uuid.into(),
                        want: mib,
                        free,
                    });
                }
                g.processes.push((pid, on, mib));
                return Ok(());
            }
        }
        Err(BackendError::Nvml {
            call: "allocate",
            message: format!("no simulated device {uuid}"),
        })
    }

    /// Frees everything simulated process `pid` holds.
    pub fn release(&self, pid: u32) {
        let mut gpus = self.gpus.lock().unwrap_or_else(|e| e.into_inner());
        for g in gpus.iter_mut() {
            g.processes.retain(|p| p.0 != pid);
        }
    }

    fn device(g: &SimGpuState, s: &SimInstance) -> MigDevice {
        let p = s.placement.profile;
        MigDevice {
            uuid: s.uuid.clone(),
            gi_id: s.gi_id,
            ci_id: 0,
            profile: p.name.into(),
            start: s.placement.start,
            size: p.memory_slices,
            memory_total_mib: p.memory_mib,
            memory_used_mib: g
                .processes
                .iter()
                .filter(|q| q.1.as_deref() == Some(&s.uuid))
                .map(|q| q.2)
                .sum(),
            sms: p.sms,
            slices: p.compute_slices,
        }
    }
}

impl GpuBackend for SimulatedGpus {
    fn describe(&self) -> String {
        let gpus = self.gpus.lock().unwrap_or_else(|e| e.into_inner());
        let n: usize = gpus
            .iter()
            .map(|g| if g.mig { g.instances.len() } else { 1 })
            .sum();
        format!("simulated GPUs {} ({n} instances)", self.spec)
    }

    fn gpus(&self) -> Result<Vec<GpuInfo>, BackendError> {
        let gpus = self.gpus.lock().unwrap_or_else(|e| e.into_inner());
        Ok(gpus
            .iter()
            .enumerate()
            .map(|(i, g)| GpuInfo {
                index: i as u32,
                uuid: sim_gpu_uuid(&self.node, i),
                name: format!("Simulated {}", g.model.name),
                model: Some(g.model.name.into()),
                memory_total_mib: g.model.memory_mib,
                memory_used_mib: g.processes.iter().map(|p| p.2).sum(),
                sms: g.model.sms,
                mig: Some(MigMode {
                    current: g.mig,
                    pending: g.mig,
                }),
                link_domain: None,
            })
            .collect())
    }

    fn profiles(&self, gpu: u32) -> Result<Vec<ProfileInfo>, BackendError> {
        self.with_gpu(gpu, |g| {
            Ok(g.model
                .profiles
                .iter()
                .enumerate()
                .map(|(k, p)| ProfileInfo {
                    name: p.name.into(),
                    id: k as u32,
                    nvml_index: k as u32,
                    slices: p.compute_slices,
                    max_count: p.max_count,
                    sms: p.sms,
                    memory_mib: p.memory_mib,
                    starts: p.starts.to_vec(),
                    size: p.memory_slices,
                })
                .collect())
        })
    }

    fn mig_devices(&self, gpu: u32) -> Result<Vec<MigDevice>, BackendError> {
        self.with_gpu(gpu, |g| {
            let mut v: Vec<MigDevice> = g.instances.iter().map(|s| Self::device(g, s)).collect();
            v.sort_by_key(|d| d.start);
            Ok(v)
        })
    }

    fn processes(&self, gpu: u32) -> Result<Vec<GpuProcess>, BackendError> {
        self.with_gpu(gpu, |g| {
            Ok(g.processes
                .iter()
                .map(|p| GpuProcess {
                    pid: p.0,
                    used_mib: p.2,
                })
                .collect())
        })
    }

    fn is_simulated(&self) -> bool {
        true
    }

    fn free_bytes(&self, uuid: &str) -> Option<u64> {
        let gpus = self.gpus.lock().unwrap_or_else(|e| e.into_inner());
        for (i, g) in gpus.iter().enumerate() {
            let (on, total) = if !g.mig && uuid == sim_gpu_uuid(&self.node, i) {
                (None, g.model.memory_mib)
            } else if let Some(s) = g.instances.iter().find(|s| s.uuid == uuid) {
                (Some(s.uuid.clone()), s.placement.profile.memory_mib)
            } else {
                continue;
            };
            let used: u64 = g.processes.iter().filter(|p| p.1 == on).map(|p| p.2).sum();
            return Some(total.saturating_sub(used) * 1024 * 1024);
        }
        None
    }

    fn create_instance(
        &self,
        gpu: u32,
        profile: &str,
        start: u32,
    ) -> Result<MigDevice, BackendError> {
        let node = self.node.clone();
        self.with_gpu(gpu, |g| {
            if !g.mig {
                return Err(BackendError::MigDisabled(gpu));
            }
            let p = g
                .model
                .profile(profile)
                .ok_or_else(|| BackendError::UnknownProfile {
                    gpu,
                    profile: profile.into(),
                })?;
            let existing: Vec<MigPlacement> = g.instances.iter().map(|s| s.placement).collect();
            check_create(g.model, &existing, p, start)
                .map_err(|source| BackendError::Placement { gpu, source })?;
            let placement = MigPlacement { profile: p, start };
            let inst = SimInstance {
                gi_id: g.next_gi,
                placement,
                uuid: sim_mig_uuid(&node, gpu as usize, &placement),
            };
            g.next_gi += 1;
            let d = Self::device(g, &inst);
            g.instances.push(inst);
            Ok(d)
        })
    }

    fn destroy_instance(&self, gpu: u32, gi_id: u32) -> Result<(), BackendError> {
        self.with_gpu(gpu, |g| {
            let k = g
                .instances
                .iter()
                .position(|s| s.gi_id == gi_id)
                .ok_or(BackendError::NoSuchInstance { gpu, gi_id })?;
            let uuid = g.instances[k].uuid.clone();
            let users = g
                .processes
                .iter()
                .filter(|p| p.1.as_deref() == Some(&uuid))
                .count();
            if users > 0 {
                // nvmlGpuInstanceDestroy fails the same way (NVML_ERROR_IN_USE).
                return Err(BackendError::Busy {
                    gpu,
                    uuid,
                    processes: users,
                });
            }
            g.instances.remove(k);
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creation_obeys_the_hardware_rules() {
        let sim = SimulatedGpus::new("n", "1xA100-40GB:mig").unwrap();
        assert!(sim.mig_devices(0).unwrap().is_empty());
        let a = sim.create_instance(0, "3g.20gb", 4).unwrap();
        assert!(a.uuid.starts_with("MIG-"));
        assert_eq!((a.start, a.size, a.memory_total_mib), (4, 4, 19968));
        // Overlap, illegal start, per-profile maximum.
        let e = sim.create_instance(0, "2g.10gb", 4).unwrap_err();
        assert!(
            e.to_string().contains("overlaps the 3g.20gb instance"),
            "{e}"
        );
        let e = sim.create_instance(0, "2g.10gb", 1).unwrap_err();
        assert!(
            e.to_string().contains("cannot start at memory slice 1"),
            "{e}"
        );
        sim.create_instance(0, "1g.5gb+me", 0).unwrap();
        let e = sim.create_instance(0, "1g.5gb+me", 1).unwrap_err();
        assert!(e.to_string().contains("at most 1 x 1g.5gb+me"), "{e}");
        assert!(matches!(
            sim.create_instance(0, "1g.6gb", 1),
            Err(BackendError::UnknownProfile { .. })
        ));
        // Same placement, same UUID; destroy frees the slices.
        sim.destroy_instance(0, a.gi_id).unwrap();
        assert!(matches!(
            sim.destroy_instance(0, a.gi_id),
            Err(BackendError::NoSuchInstance { .. })
        ));
        let b = sim.create_instance(0, "3g.20gb", 4).unwrap();
        assert_eq!(a.uuid, b.uuid);
        assert_ne!(a.gi_id, b.gi_id);
    }

    #[test]
    fn whole_gpus_cannot_be_partitioned() {
        let sim = SimulatedGpus::new("n", "1xH100").unwrap();
        assert!(matches!(
            sim.create_instance(0, "1g.10gb", 0),
            Err(BackendError::MigDisabled(0))
        ));
        assert!(matches!(
            sim.mig_devices(3),
            Err(BackendError::NoSuchGpu(3))
        ));
        let p = sim.profiles(0).unwrap();
        assert_eq!(p.len(), 7);
        assert_eq!(p[4].name, "3g.40gb");
        assert_eq!(p[4].starts, vec![0, 4]);
    }

    #[test]
    fn memory_is_accounted_and_busy_instances_stay() {
        let sim = SimulatedGpus::new("n", "1xA100-40GB:2g.10gb,1g.5gb").unwrap();
        let devs = sim.mig_devices(0).unwrap();
        let small = devs.iter().find(|d| d.profile == "1g.5gb").unwrap().clone();
        sim.allocate(&small.uuid, 42, 4000).unwrap();
        let e = sim.allocate(&small.uuid, 43, 1000).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "{}: out of memory: 1000 MiB asked, 864 MiB free",
                small.uuid
            )
        );
        let d = sim.mig_devices(0).unwrap();
        assert_eq!(d.iter().map(|d| d.memory_used_mib).sum::<u64>(), 4000);
        assert_eq!(sim.gpus().unwrap()[0].memory_used_mib, 4000);
        assert_eq!(sim.processes(0).unwrap().len(), 1);
        assert!(matches!(
            sim.destroy_instance(0, small.gi_id),
            Err(BackendError::Busy { .. })
        ));
        sim.release(42);
        sim.destroy_instance(0, small.gi_id).unwrap();
        assert_eq!(sim.mig_devices(0).unwrap().len(), 1);
    }
}
