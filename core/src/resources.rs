//! The CPUs and host memory a job is given on a node, and the limits that
//! follow from them.
//!
//! The controller counts a node's CPUs and memory as consumable resources
//! ([`JobResources`] of every running job against the node's capacity); the
//! node picks which cores a job gets ([`pick_cpus`]) and confines it to them
//! and to its memory ([`MemoryLimits`]).

use std::collections::BTreeSet;

use crate::slurm_options::SlurmOptions;
use crate::units::parse_mem_mib;

/// Most CPUs one job may ask for on a node.
pub const MAX_JOB_CPUS: u32 = 1 << 16;

/// The host memory a job asks for on its node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryRequest {
    /// No `--mem`, `--mem-per-cpu` or `--mem-per-gpu`: nothing is set aside
    /// for it, and it is limited only by the node's allowed memory.
    Unspecified,
    /// This many MiB.
    Mib(u64),
    /// `--mem=0`: all of the node's memory (no other job with memory).
    WholeNode,
}

/// What a job takes of a node's CPUs and memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobResources {
    pub cpus: u32,
    pub memory: MemoryRequest,
}

/// A resource request that cannot be met as written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResourceError {
    #[error("--{option}={value}: {why}")]
    BadMemory {
        option: &'static str,
        value: String,
        why: String,
    },
    #[error("--mem, --mem-per-cpu and --mem-per-gpu are mutually exclusive; give one of them")]
    ConflictingMemory,
    #[error("--{0} must be at least 1")]
    Zero(&'static str),
    #[error("the job asks for {0} CPUs on one node; at most {MAX_JOB_CPUS} are accepted")]
    TooManyCpus(u64),
    #[error("--ntasks-per-node={0}: expected a whole number of at least 1")]
    BadTasksPerNode(String),
    #[error("--mincpus={0}: expected a whole number of at least 1")]
    BadMinCpus(String),
    #[error("the job's memory request overflows: {0}")]
    Overflow(String),
}

impl JobResources {
    /// The CPUs and memory a job asks for on its node: `ntasks` (or
    /// `--ntasks-per-node`, whichever is more) times `--cpus-per-task`, and
    /// `--mem`, or `--mem-per-cpu` times those CPUs, or `--mem-per-gpu`
    /// times its GPUs (a gsched job runs on one GPU or instance).
    pub fn of(s: &SlurmOptions) -> Result<JobResources, ResourceError> {
        if s.ntasks == Some(0) {
            return Err(ResourceError::Zero("ntasks"));
        }
        if s.cpus_per_task == Some(0) {
            return Err(ResourceError::Zero("cpus-per-task"));
        }
        let per_node = match s.other.get("ntasks-per-node") {
            Some(v) => match v.trim().parse::<u32>() {
                Ok(n) if n > 0 => n,
                _ => return Err(ResourceError::BadTasksPerNode(v.clone())),
            },
            None => 1,
        };
        // On each node: a job on several takes its share on each.
        let width = crate::allocation::width_of(s);
        // `--overcommit`: as if one task ran on each node.
        let overcommit = s.other.contains_key("overcommit");
        let tasks = if overcommit {
            1
        } else if width > 1 {
            let spread = crate::allocation::tasks_per_node(s, width);
            u64::from(spread.into_iter().max().unwrap_or(1))
        } else {
            u64::from(s.ntasks.unwrap_or(1).max(per_node))
        };
        // `--mincpus`: at least that many on the node.
        let at_least = match s.other.get("mincpus") {
            Some(v) => match v.trim().parse::<u32>() {
                Ok(n) if n > 0 => u64::from(n),
                _ => return Err(ResourceError::BadMinCpus(v.clone())),
            },
            None => 1,
        };
        let cpus = (tasks * u64::from(s.cpus_per_task.unwrap_or(1))).max(at_least);
        if cpus > u64::from(MAX_JOB_CPUS) {
            return Err(ResourceError::TooManyCpus(cpus));
        }
        let cpus = cpus as u32;
        let given: Vec<(&'static str, &String)> = ["mem", "mem-per-cpu", "mem-per-gpu"]
            .into_iter()
            .filter_map(|o| s.other.get(o).map(|v| (o, v)))
            .collect();
        let memory = match given.as_slice() {
            [] => MemoryRequest::Unspecified,
            [(option, value)] => {
                let mib = parse_mem_mib(value).map_err(|e| ResourceError::BadMemory {
                    option,
                    value: value.to_string(),
                    why: e.to_string(),
                })?;
                let times = match *option {
                    "mem-per-cpu" => u64::from(cpus),
                    _ => 1,
                };
                match mib.checked_mul(times) {
                    Some(0) if *option == "mem" => MemoryRequest::WholeNode,
                    Some(0) => {
                        return Err(ResourceError::BadMemory {
                            option,
                            value: value.to_string(),
                            why: "must be more than 0".into(),
                        })
                    }
                    Some(m) => MemoryRequest::Mib(m),
                    None => return Err(ResourceError::Overflow(format!("--{option}={value}"))),
                }
            }
            _ => return Err(ResourceError::ConflictingMemory),
        };
        Ok(JobResources { cpus, memory })
    }

    /// The MiB this job holds on a node with `node_mib` of memory.
    pub fn memory_mib(&self, node_mib: u64) -> u64 {
        match self.memory {
            MemoryRequest::Unspecified => 0,
            MemoryRequest::Mib(m) => m,
            MemoryRequest::WholeNode => node_mib,
        }
    }

    /// Whether the job fits in what a node has free now.
    pub fn fits(&self, free: &NodeResources, total: &NodeResources) -> bool {
        self.cpus <= free.cpus && self.memory_mib(total.memory_mib) <= free.memory_mib
    }

    /// Whether the job could ever run on a node of this size.
    pub fn could_fit(&self, total: &NodeResources) -> bool {
        self.fits(total, total)
    }

    /// How the request reads in messages (`2 CPUs, 4096 MiB`).
    pub fn describe(&self) -> String {
        match self.memory {
            MemoryRequest::Unspecified => format!("{} CPUs", self.cpus),
            MemoryRequest::Mib(m) => format!("{} CPUs, {m} MiB", self.cpus),
            MemoryRequest::WholeNode => format!("{} CPUs, all of the node's memory", self.cpus),
        }
    }
}

/// A node's CPUs and memory (its capacity, or what is free of it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NodeResources {
    pub cpus: u32,
    pub memory_mib: u64,
}

impl NodeResources {
    /// What is left after `used` is taken.
    pub fn minus(&self, used: &NodeResources) -> NodeResources {
        NodeResources {
            cpus: self.cpus.saturating_sub(used.cpus),
            memory_mib: self.memory_mib.saturating_sub(used.memory_mib),
        }
    }

    /// Takes a job's share (after [`JobResources::fits`]).
    pub fn take(&mut self, job: &JobResources, total: &NodeResources) {
        self.cpus = self.cpus.saturating_sub(job.cpus);
        self.memory_mib = self
            .memory_mib
            .saturating_sub(job.memory_mib(total.memory_mib));
    }
}

/// The lowest-numbered `n` of the node's cores that no running job holds;
/// `None` if fewer than `n` are free.
pub fn pick_cpus(online: &BTreeSet<u32>, taken: &BTreeSet<u32>, n: u32) -> Option<Vec<u32>> {
    let free: Vec<u32> = online.difference(taken).take(n as usize).copied().collect();
    (free.len() == n as usize).then_some(free)
}

/// The cores a suspended job goes on with: its own (`own`) where no
/// running job holds any of them, else as many of the free ones
/// ([`pick_cpus`]); `None` if too few are free. The second value says
/// whether they are its own (else its cgroup must move onto them).
pub fn cpus_to_resume(
    online: &BTreeSet<u32>,
    taken: &BTreeSet<u32>,
    own: &[u32],
) -> Option<(Vec<u32>, bool)> {
    if own.iter().all(|c| !taken.contains(c)) {
        return Some((own.to_vec(), true));
    }
    pick_cpus(online, taken, own.len() as u32).map(|c| (c, false))
}

/// A CPU list in the kernel's form (`0-3,8,10-11`) that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid CPU list '{0}': expected numbers and ranges such as 0-3,8")]
pub struct BadCpuList(pub String);

/// Reads a CPU list in the kernel's form (`0-3,8,10-11`; empty is none).
pub fn parse_cpu_list(s: &str) -> Result<BTreeSet<u32>, BadCpuList> {
    let bad = || BadCpuList(s.to_string());
    let mut set = BTreeSet::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (a, b),
            None => (part, part),
        };
        let lo: u32 = lo.trim().parse().map_err(|_| bad())?;
        let hi: u32 = hi.trim().parse().map_err(|_| bad())?;
        if lo > hi || hi - lo >= MAX_JOB_CPUS * 16 {
            return Err(bad());
        }
        set.extend(lo..=hi);
    }
    Ok(set)
}

/// Writes CPUs in the kernel's list form (`0-3,8`).
pub fn format_cpu_list(cpus: &[u32]) -> String {
    let mut sorted = cpus.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let mut j = i;
        while j + 1 < sorted.len() && sorted[j + 1] == sorted[j] + 1 {
            j += 1;
        }
        parts.push(if i == j {
            sorted[i].to_string()
        } else {
            format!("{}-{}", sorted[i], sorted[j])
        });
        i = j + 1;
    }
    parts.join(",")
}

/// How a node confines memory (its `cgroup` settings, like Slurm's
/// `AllowedRAMSpace`, `AllowedSwapSpace` and `ConstrainSwapSpace`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MemoryPolicy {
    /// Percent of the job's request it may use (AllowedRAMSpace).
    pub allowed_ram_percent: f64,
    /// Percent of the job's request it may use in swap on top of its RAM
    /// limit (AllowedSwapSpace); with `constrain_swap`.
    pub allowed_swap_percent: f64,
    /// Whether swap counts against the limit (ConstrainSwapSpace): a job
    /// cannot escape its limit by being swapped out.
    pub constrain_swap: bool,
    /// The lowest RAM limit a job's cgroup gets, MiB (MinRAMSpace): a
    /// smaller request (`--mem=1`) still leaves its shell room to start.
    pub min_ram_mib: u64,
}

/// Slurm's default MinRAMSpace (MB).
pub const DEFAULT_MIN_RAM_MIB: u64 = 30;

impl Default for MemoryPolicy {
    fn default() -> Self {
        MemoryPolicy {
            allowed_ram_percent: 100.0,
            allowed_swap_percent: 0.0,
            constrain_swap: true,
            min_ram_mib: DEFAULT_MIN_RAM_MIB,
        }
    }
}

/// The memory limits a job's cgroup gets, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryLimits {
    /// RAM (v2 `memory.max`, v1 `memory.limit_in_bytes`).
    pub ram_bytes: u64,
    /// RAM and swap together (v1 `memory.memsw.limit_in_bytes`); v2's
    /// `memory.swap.max` is this minus `ram_bytes`. `None`: swap is not
    /// constrained.
    pub ram_and_swap_bytes: Option<u64>,
    /// The limit as the job asked for it, MiB (for the reason of an
    /// OUT_OF_MEMORY end).
    pub requested_mib: u64,
}

impl MemoryLimits {
    /// The limits for a job that asks for `request` on a node with
    /// `node_mib` of memory. A job with no memory request is limited to the
    /// node's memory.
    pub fn for_job(request: MemoryRequest, node_mib: u64, policy: &MemoryPolicy) -> MemoryLimits {
        let mib = match request {
            MemoryRequest::Mib(m) => m.min(node_mib.max(1)),
            MemoryRequest::Unspecified | MemoryRequest::WholeNode => node_mib,
        };
        let bytes = mib.saturating_mul(1 << 20);
        let share = |percent: f64| (bytes as f64 * percent.max(0.0) / 100.0) as u64;
        // At least MinRAMSpace (and 1 MiB), so a tiny request or
        // percentage never means "no room to start".
        let floor = policy.min_ram_mib.max(1).saturating_mul(1 << 20);
        let ram = share(policy.allowed_ram_percent).max(floor);
        MemoryLimits {
            ram_bytes: ram,
            ram_and_swap_bytes: policy
                .constrain_swap
                .then(|| ram.saturating_add(share(policy.allowed_swap_percent))),
            requested_mib: mib,
        }
    }

    /// v2's `memory.swap.max`: the swap allowed on top of RAM.
    pub fn swap_bytes(&self) -> Option<u64> {
        self.ram_and_swap_bytes
            .map(|both| both.saturating_sub(self.ram_bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::JobSpec;

    fn spec_of(opts: &[(&str, &str)], ntasks: Option<u32>, cpt: Option<u32>) -> SlurmOptions {
        spec_of_job(opts, ntasks, cpt).slurm
    }

    fn spec_of_job(opts: &[(&str, &str)], ntasks: Option<u32>, cpt: Option<u32>) -> JobSpec {
        let mut s = JobSpec::default();
        s.slurm.ntasks = ntasks;
        s.slurm.cpus_per_task = cpt;
        for (k, v) in opts {
            s.slurm.other.insert(k.to_string(), v.to_string());
        }
        s
    }

    #[test]
    fn cpus_are_tasks_times_cpus_per_task() {
        let r = JobResources::of(&spec_of(&[], None, None)).unwrap();
        assert_eq!(r.cpus, 1);
        assert_eq!(r.memory, MemoryRequest::Unspecified);
        assert_eq!(
            JobResources::of(&spec_of(&[], Some(3), Some(2)))
                .unwrap()
                .cpus,
            6
        );
        let per_node = spec_of_job(&[("ntasks-per-node", "4")], Some(2), Some(2));
        assert_eq!(JobResources::of(&per_node.slurm).unwrap().cpus, 8);
        assert_eq!(
            JobResources::of(&spec_of(&[], Some(0), None)),
            Err(ResourceError::Zero("ntasks"))
        );
        assert!(matches!(
            JobResources::of(&spec_of(&[], Some(1 << 16), Some(2))),
            Err(ResourceError::TooManyCpus(_))
        ));
        assert!(matches!(
            JobResources::of(&spec_of(&[("ntasks-per-node", "x")], None, None)),
            Err(ResourceError::BadTasksPerNode(_))
        ));
        // --mincpus raises the CPUs, never lowers them.
        let min = |v: &str| JobResources::of(&spec_of(&[("mincpus", v)], Some(2), None));
        assert_eq!(min("5").unwrap().cpus, 5);
        assert_eq!(min("1").unwrap().cpus, 2);
        assert!(matches!(min("0"), Err(ResourceError::BadMinCpus(_))));
        let over = spec_of(&[("overcommit", "yes")], Some(8), Some(2));
        assert_eq!(JobResources::of(&over).unwrap().cpus, 2, "one task's CPUs");
    }

    #[test]
    fn memory_per_job_cpu_and_gpu() {
        let m = |opts: &[(&str, &str)]| JobResources::of(&spec_of(opts, Some(2), Some(2)));
        assert_eq!(
            m(&[("mem", "100M")]).unwrap().memory,
            MemoryRequest::Mib(100)
        );
        assert_eq!(
            m(&[("mem-per-cpu", "1G")]).unwrap().memory,
            MemoryRequest::Mib(4096)
        );
        assert_eq!(
            m(&[("mem-per-gpu", "2G")]).unwrap().memory,
            MemoryRequest::Mib(2048)
        );
        assert_eq!(m(&[("mem", "0")]).unwrap().memory, MemoryRequest::WholeNode);
        assert!(matches!(
            m(&[("mem-per-cpu", "0")]),
            Err(ResourceError::BadMemory { .. })
        ));
        assert_eq!(
            m(&[("mem", "1G"), ("mem-per-cpu", "1G")]),
            Err(ResourceError::ConflictingMemory)
        );
        let err = m(&[("mem", "lots")]).unwrap_err().to_string();
        assert!(err.starts_with("--mem=lots: invalid memory size"), "{err}");
    }

    #[test]
    fn fitting_counts_cpus_and_memory() {
        let total = NodeResources {
            cpus: 4,
            memory_mib: 1000,
        };
        let job = |cpus, memory| JobResources { cpus, memory };
        let mut free = total;
        let a = job(2, MemoryRequest::Mib(600));
        assert!(a.fits(&free, &total));
        free.take(&a, &total);
        assert_eq!(
            free,
            NodeResources {
                cpus: 2,
                memory_mib: 400
            }
        );
        assert!(!job(1, MemoryRequest::Mib(500)).fits(&free, &total));
        assert!(!job(3, MemoryRequest::Unspecified).fits(&free, &total));
        assert!(job(2, MemoryRequest::Unspecified).fits(&free, &total));
        // The whole node's memory needs a node with none of it taken.
        assert!(!job(1, MemoryRequest::WholeNode).fits(&free, &total));
        assert!(job(1, MemoryRequest::WholeNode).could_fit(&total));
        assert!(!job(5, MemoryRequest::Unspecified).could_fit(&total));
    }

    #[test]
    fn cores_are_picked_lowest_free_first() {
        let online: BTreeSet<u32> = (0..4).collect();
        let taken: BTreeSet<u32> = [0, 2].into_iter().collect();
        assert_eq!(pick_cpus(&online, &taken, 2), Some(vec![1, 3]));
        assert_eq!(pick_cpus(&online, &taken, 3), None);
        assert_eq!(pick_cpus(&online, &BTreeSet::new(), 0), Some(vec![]));
    }

    #[test]
    fn cpu_lists_round_trip() {
        let set = parse_cpu_list("0-3,8,10-11\n").unwrap();
        assert_eq!(set.len(), 7);
        let v: Vec<u32> = set.into_iter().collect();
        assert_eq!(format_cpu_list(&v), "0-3,8,10-11");
        assert!(parse_cpu_list("").unwrap().is_empty());
        assert!(parse_cpu_list("3-1").is_err());
        assert!(parse_cpu_list("a").is_err());
        assert_eq!(format_cpu_list(&[5]), "5");
    }

    #[test]
    fn memory_limits_follow_the_policy() {
        let mib = 1u64 << 20;
        let strict = MemoryPolicy::default();
        let l = MemoryLimits::for_job(MemoryRequest::Mib(100), 8192, &strict);
        assert_eq!(l.ram_bytes, 100 * mib);
        assert_eq!(l.ram_and_swap_bytes, Some(100 * mib));
        assert_eq!(l.swap_bytes(), Some(0));
        assert_eq!(l.requested_mib, 100);
        // No request: the node's memory.
        let l = MemoryLimits::for_job(MemoryRequest::Unspecified, 8192, &strict);
        assert_eq!(l.ram_bytes, 8192 * mib);
        let loose = MemoryPolicy {
            allowed_ram_percent: 110.0,
            allowed_swap_percent: 50.0,
            constrain_swap: true,
            min_ram_mib: DEFAULT_MIN_RAM_MIB,
        };
        let l = MemoryLimits::for_job(MemoryRequest::Mib(100), 8192, &loose);
        assert_eq!(l.ram_bytes, 110 * mib);
        assert_eq!(l.ram_and_swap_bytes, Some(160 * mib));
        assert_eq!(l.swap_bytes(), Some(50 * mib));
        let no_swap = MemoryPolicy {
            constrain_swap: false,
            ..strict
        };
        let l = MemoryLimits::for_job(MemoryRequest::Mib(100), 8192, &no_swap);
        assert_eq!(l.ram_and_swap_bytes, None);
        // A request above the node is capped at the node.
        let l = MemoryLimits::for_job(MemoryRequest::Mib(1 << 30), 8192, &strict);
        assert_eq!(l.ram_bytes, 8192 * mib);
        // One below MinRAMSpace gets MinRAMSpace (Slurm's 30 MB).
        let l = MemoryLimits::for_job(MemoryRequest::Mib(1), 8192, &strict);
        assert_eq!((l.ram_bytes, l.requested_mib), (30 * mib, 1));
    }

    #[test]
    fn a_resumed_job_gets_its_own_cores_back_else_free_ones() {
        let online: BTreeSet<u32> = (0..8).collect();
        let taken: BTreeSet<u32> = [0, 1, 5].into();
        assert_eq!(
            cpus_to_resume(&online, &taken, &[2, 3]),
            Some((vec![2, 3], true))
        );
        assert_eq!(
            cpus_to_resume(&online, &taken, &[1, 2]),
            Some((vec![2, 3], false))
        );
        let busy: BTreeSet<u32> = (0..7).collect();
        assert_eq!(cpus_to_resume(&online, &busy, &[0, 1]), None);
    }
}
