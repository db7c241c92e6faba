//! Which device files a job may open: every device but the GPUs, and of the
//! GPUs only those it was given (Slurm's `ConstrainDevices`).
//!
//! The node reads `/proc/devices` and, for MIG, the driver's capability
//! minors (`/proc/driver/nvidia-caps/mig-minors`); the rules are decided
//! here and written as device-controller entries (`c 195:0 rwm`).

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use crate::gpu::Instance;

/// The NVIDIA driver's fixed minor of `/dev/nvidiactl`.
pub const NVIDIACTL_MINOR: u32 = 255;
/// The NVIDIA driver's fixed minor of `/dev/nvidia-modeset`.
pub const NVIDIA_MODESET_MINOR: u32 = 254;

/// Block or character device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum DeviceKind {
    Char,
    Block,
}

/// One allow rule: a device major and minor (`None`: every one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct DeviceRule {
    pub kind: DeviceKind,
    pub major: Option<u32>,
    pub minor: Option<u32>,
}

impl fmt::Display for DeviceRule {
    /// The devices controller's form: `c 195:0 rwm`, `b *:* rwm`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = |v: Option<u32>| v.map_or("*".to_string(), |v| v.to_string());
        let k = match self.kind {
            DeviceKind::Char => 'c',
            DeviceKind::Block => 'b',
        };
        write!(f, "{k} {}:{} rwm", n(self.major), n(self.minor))
    }
}

impl DeviceRule {
    /// Reads a rule in the devices controller's form (a line of v1's
    /// `devices.list`: `c 195:0 rwm`). `None` for anything else, such as
    /// `a *:* rwm` (every device) or a rule with fewer permissions.
    pub fn parse(line: &str) -> Option<DeviceRule> {
        let mut w = line.split_whitespace();
        let kind = match w.next()? {
            "c" => DeviceKind::Char,
            "b" => DeviceKind::Block,
            _ => return None,
        };
        let (major, minor) = w.next()?.split_once(':')?;
        let num = |s: &str| match s {
            "*" => Some(None),
            n => n.parse::<u32>().ok().map(Some),
        };
        let (major, minor) = (num(major)?, num(minor)?);
        (w.next()? == "rwm" && w.next().is_none()).then_some(DeviceRule { kind, major, minor })
    }
}

/// The device majors the kernel has registered (`/proc/devices`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceMajors {
    /// Character majors and their driver names.
    pub char: Vec<(u32, String)>,
}

impl DeviceMajors {
    /// Reads the text of `/proc/devices`.
    pub fn parse(text: &str) -> DeviceMajors {
        let mut out = DeviceMajors::default();
        let mut in_char = false;
        for line in text.lines() {
            let line = line.trim();
            if line.starts_with("Character devices") {
                in_char = true;
                continue;
            }
            if line.starts_with("Block devices") {
                in_char = false;
                continue;
            }
            let mut words = line.split_whitespace();
            let (Some(major), Some(name)) = (words.next(), words.next()) else {
                continue;
            };
            if let (true, Ok(major)) = (in_char, major.parse::<u32>()) {
                out.char.push((major, name.to_string()));
            }
        }
        out
    }

    fn major_of(&self, name: &str) -> Option<u32> {
        self.char.iter().find(|(_, n)| n == name).map(|(m, _)| *m)
    }

    /// The major of the GPU device files (`/dev/nvidiaN`, `/dev/nvidiactl`).
    fn nvidia(&self) -> Option<u32> {
        self.major_of("nvidia-frontend")
            .or_else(|| self.major_of("nvidia"))
    }
}

/// Whether a driver is NVIDIA's (its devices are GPU devices).
fn is_gpu_driver(name: &str) -> bool {
    name.starts_with("nvidia")
}

/// The MIG capability minors (`/proc/driver/nvidia-caps/mig-minors`:
/// lines such as `gpu0/gi1/access 12`).
pub fn parse_mig_minors(text: &str) -> BTreeMap<String, u32> {
    text.lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let path = w.next()?;
            let minor = w.next()?.parse().ok()?;
            Some((path.to_string(), minor))
        })
        .collect()
}

/// The GPU devices a job was given.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GivenGpus {
    /// Whole GPUs or the parents of MIG instances, by `/dev/nvidiaN` number.
    pub gpus: Vec<u32>,
    /// MIG instances: (GPU, GPU instance id, compute instance id).
    pub mig: Vec<(u32, u32, u32)>,
}

impl GivenGpus {
    /// The devices behind `instances`: a whole GPU by its index, a MIG
    /// instance by its ids in `mig_ids` (UUID → GPU, GPU instance, compute
    /// instance). A MIG instance without ids gives nothing: its GPU's
    /// device alone does not open it.
    pub fn of<'a>(
        instances: impl IntoIterator<Item = &'a Instance>,
        mig_ids: &HashMap<String, (u32, u32, u32)>,
    ) -> GivenGpus {
        let mut given = GivenGpus::default();
        for i in instances {
            match (i.profile.is_some(), mig_ids.get(&i.uuid)) {
                (false, _) => given.gpus.push(i.gpu_index),
                (true, Some(ids)) => given.mig.push(*ids),
                (true, None) => {}
            }
        }
        given
    }
}

/// A MIG instance whose capability files the driver does not list.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the driver lists no capability file for {0} (in /proc/driver/nvidia-caps/mig-minors)")]
pub struct MissingCapability(pub String);

/// The rules for a job: every block device, every character device whose
/// driver is not NVIDIA's, and of NVIDIA's only the GPUs it was given with
/// what using them needs (`nvidiactl`, `nvidia-uvm`, and for MIG the
/// capability files of its GPU and compute instance). A job given no GPU
/// gets no NVIDIA device at all.
pub fn allowed_devices(
    majors: &DeviceMajors,
    mig_minors: &BTreeMap<String, u32>,
    given: &GivenGpus,
) -> Result<Vec<DeviceRule>, MissingCapability> {
    let rule = |kind, major, minor| DeviceRule { kind, major, minor };
    let mut rules = vec![rule(DeviceKind::Block, None, None)];
    for (major, name) in &majors.char {
        if !is_gpu_driver(name) {
            rules.push(rule(DeviceKind::Char, Some(*major), None));
        }
    }
    let has_gpu = !given.gpus.is_empty() || !given.mig.is_empty();
    if has_gpu {
        if let Some(nv) = majors.nvidia() {
            let mut minors: Vec<u32> = given
                .gpus
                .iter()
                .copied()
                .chain(given.mig.iter().map(|m| m.0))
                .collect();
            minors.extend([NVIDIACTL_MINOR, NVIDIA_MODESET_MINOR]);
            for m in minors {
                rules.push(rule(DeviceKind::Char, Some(nv), Some(m)));
            }
        }
        for name in ["nvidia-uvm", "nvidia-uvm-tools"] {
            if let Some(m) = majors.major_of(name) {
                rules.push(rule(DeviceKind::Char, Some(m), None));
            }
        }
    }
    if !given.mig.is_empty() {
        let caps = majors.major_of("nvidia-caps");
        for &(gpu, gi, ci) in &given.mig {
            for path in [
                format!("gpu{gpu}/gi{gi}/access"),
                format!("gpu{gpu}/gi{gi}/ci{ci}/access"),
            ] {
                let minor = mig_minors
                    .get(&path)
                    .ok_or_else(|| MissingCapability(path.clone()))?;
                if let Some(c) = caps {
                    rules.push(rule(DeviceKind::Char, Some(c), Some(*minor)));
                }
            }
        }
    }
    rules.sort();
    rules.dedup();
    Ok(rules)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEVICES: &str = "Character devices:\n  1 mem\n  4 tty\n136 pts\n195 nvidia-frontend\n\
        234 nvidia-caps\n235 nvidia-uvm\n\nBlock devices:\n  7 loop\n259 blkext\n";

    fn lines(rules: &[DeviceRule]) -> Vec<String> {
        rules.iter().map(|r| r.to_string()).collect()
    }

    #[test]
    fn rules_read_back_as_written() {
        for line in ["c 195:0 rwm", "b *:* rwm", "c 1:* rwm"] {
            let r = DeviceRule::parse(line).expect(line);
            assert_eq!(r.to_string(), line);
        }
        for bad in [
            "a *:* rwm",
            "c 195:0 r",
            "c x:0 rwm",
            "c 195 rwm",
            "",
            "c 1:3 rwm extra",
        ] {
            assert_eq!(DeviceRule::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn instances_map_to_their_devices() {
        let inst = crate::gpu::sim_instances(
            "n",
            &crate::gpu::parse_sim_spec("1xA100-40GB+1xA100-40GB:3g.20gb*2").unwrap(),
        );
        let ids: HashMap<String, (u32, u32, u32)> = [(inst[1].uuid.clone(), (1, 2, 0))].into();
        let given = GivenGpus::of(&inst, &ids);
        // The whole GPU by index; the first MIG instance by its ids; the
        // second, without ids, not at all.
        assert_eq!(given.gpus, vec![0]);
        assert_eq!(given.mig, vec![(1, 2, 0)]);
    }

    #[test]
    fn a_job_without_gpus_gets_no_nvidia_device() {
        let majors = DeviceMajors::parse(DEVICES);
        assert_eq!(majors.char.len(), 6);
        let rules = allowed_devices(&majors, &BTreeMap::new(), &GivenGpus::default()).unwrap();
        assert_eq!(
            lines(&rules),
            ["c 1:* rwm", "c 4:* rwm", "c 136:* rwm", "b *:* rwm"]
        );
    }

    #[test]
    fn a_whole_gpu_job_gets_its_gpu_and_the_control_devices() {
        let majors = DeviceMajors::parse(DEVICES);
        let given = GivenGpus {
            gpus: vec![1],
            mig: vec![],
        };
        let rules = lines(&allowed_devices(&majors, &BTreeMap::new(), &given).unwrap());
        for want in ["c 195:1 rwm", "c 195:255 rwm", "c 235:* rwm"] {
            assert!(rules.contains(&want.to_string()), "{want} in {rules:?}");
        }
        assert!(!rules
            .iter()
            .any(|r| r == "c 195:0 rwm" || r == "c 195:* rwm"));
        assert!(!rules.iter().any(|r| r.starts_with("c 234:")));
    }

    #[test]
    fn a_mig_job_gets_the_capabilities_of_its_instance_only() {
        let majors = DeviceMajors::parse(DEVICES);
        let minors = parse_mig_minors(
            "config 1\nmonitor 2\ngpu0/gi1/access 12\ngpu0/gi1/ci0/access 13\n\
             gpu0/gi2/access 21\ngpu0/gi2/ci0/access 22\n",
        );
        let given = GivenGpus {
            gpus: vec![],
            mig: vec![(0, 2, 0)],
        };
        let rules = lines(&allowed_devices(&majors, &minors, &given).unwrap());
        for want in ["c 195:0 rwm", "c 234:21 rwm", "c 234:22 rwm"] {
            assert!(rules.contains(&want.to_string()), "{want} in {rules:?}");
        }
        assert!(!rules.contains(&"c 234:12 rwm".to_string()));
        let other = GivenGpus {
            gpus: vec![],
            mig: vec![(0, 7, 0)],
        };
        assert_eq!(
            allowed_devices(&majors, &minors, &other),
            Err(MissingCapability("gpu0/gi7/access".into()))
        );
    }
}
