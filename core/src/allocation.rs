//! What one job's allocation spans: one node or several (`-N`, or the
//! nodes `-w` names), on nodes it may choose (`-w`) or exclude (`-x`),
//! and one or more GPU instances on each (`JobSpec::gpu`'s count, per
//! node as Slurm's `--gres` and `--gpus-per-node` are). Slurm options that
//! ask for what gsched cannot give are refused at submission with the
//! reason, never run with less. The options arrive as the job's recorded
//! Slurm options (`SlurmOptions::other`, by long name).

use std::collections::BTreeMap;

use crate::hostlist::{self, Hostlist, HostlistError};
use crate::slurm_options::SlurmOptions;

/// How a job shares its node (`--exclusive[=user]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeSharing {
    /// No other job on the node while it runs.
    Alone,
    /// Only jobs of the same user beside it.
    UserOnly,
}

impl NodeSharing {
    /// Reads the recorded `--exclusive` value: `None` for one gsched does
    /// not do (`mcs`, `topo`).
    pub fn parse(value: &str) -> Option<NodeSharing> {
        match value.trim() {
            "" | "exclusive" => Some(NodeSharing::Alone),
            "user" => Some(NodeSharing::UserOnly),
            _ => None,
        }
    }
}

/// A request gsched cannot give a job yet.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllocationError {
    #[error("--nodes={nodes} with --nodelist={list}: the list names {count} nodes and gsched runs the job on exactly those; ask for -N {count} at most or name more nodes")]
    FewerListed {
        nodes: String,
        list: String,
        count: usize,
    },
    #[error("-n {tasks} tasks on {nodes} nodes: every node needs at least one task; ask for fewer nodes or more tasks")]
    FewerTasksThanNodes { tasks: u32, nodes: u32 },
    #[error("--{option}={value} on {nodes} nodes: gsched gives a job on several nodes the same GPUs on each; ask for them per node (--gpus-per-node or --gres=gpu:N)")]
    GpusAcrossNodes {
        option: &'static str,
        value: String,
        nodes: u32,
    },
    #[error("--nodes={0}: expected a node count N or a range MIN-MAX")]
    BadNodes(String),
    #[error("--tmp={0}: expected a size (MB, or with K, M, G, T)")]
    BadTmp(String),
    #[error("--{option}={value}: expected [TYPE:]N, a GPU count N of at least 1")]
    BadGpusPer { option: &'static str, value: String },
    #[error("--{option}={value} asks for {asked} GPU instances on the job's node, but its GPU request is for {given}; give one count (--gres=gpu:N, --gpus=N, --gpus-per-node=N or --gpus-per-task=N with -n)")]
    GpusPer {
        option: &'static str,
        value: String,
        asked: u64,
        given: usize,
    },
    #[error("--gpus-per-socket={0}: gsched does not place GPUs by CPU socket; ask for the job's GPU instances with --gres=gpu:N")]
    GpusPerSocket(String),
    #[error("--gpu-bind={0}: gsched binds tasks with none, closest or single:N (N tasks per GPU instance); map_gpu, mask_gpu and per_task are not supported")]
    GpuBind(String),
    #[error("--exclusive={0}: gsched gives a node to a job alone (--exclusive) or to its user's jobs (--exclusive=user); mcs and topo are not supported")]
    Exclusive(String),
    #[error("--{option}: {source}")]
    Hostlist {
        option: &'static str,
        source: HostlistError,
    },
}

/// The nodes a job may run on (`-w`, `-x`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeChoice {
    /// `-w`: only these nodes (all of them, for a job on several).
    pub only: Option<Vec<String>>,
    /// `-x`: never these (read, not expanded).
    pub except: Option<Hostlist>,
}

impl NodeChoice {
    pub fn allows(&self, node: &str) -> bool {
        self.only
            .as_ref()
            .is_none_or(|o| o.iter().any(|n| n == node))
            && !self.except.as_ref().is_some_and(|x| x.contains(node))
    }
}

/// The node choice a job's options make, `None` when they make none.
pub fn node_choice(
    other: &BTreeMap<String, String>,
) -> Result<Option<NodeChoice>, AllocationError> {
    let read = |option: &'static str| {
        other
            .get(option)
            .map(|v| {
                Hostlist::parse(v)
                    .map(|h| (v, h))
                    .map_err(|source| AllocationError::Hostlist { option, source })
            })
            .transpose()
    };
    let only = match read("nodelist")? {
        None => None,
        Some((v, _)) => Some(listed_nodes(v)?),
    };
    let except = read("exclude")?.map(|(_, h)| h);
    Ok((only.is_some() || except.is_some()).then_some(NodeChoice { only, except }))
}

/// `--tmp`: the temporary disk space (MiB) each of the job's nodes must
/// have, if the job asks for any.
pub fn tmp_mib(other: &BTreeMap<String, String>) -> Result<Option<u64>, AllocationError> {
    match other.get("tmp") {
        None => Ok(None),
        Some(v) => crate::units::parse_mem_mib(v)
            .map(Some)
            .map_err(|_| AllocationError::BadTmp(v.clone())),
    }
}

/// Checks a job's recorded Slurm options against what one allocation can
/// give: its nodes, and `gpus` GPU instances on each.
pub fn check(slurm: &SlurmOptions, gpus: usize) -> Result<(), AllocationError> {
    let other = &slurm.other;
    tmp_mib(other)?;
    let asked = match other.get("nodes") {
        Some(v) => min_nodes(v).ok_or_else(|| AllocationError::BadNodes(v.clone()))?,
        None => 1,
    };
    let width = width(slurm)?;
    if let (Some(v), Some(list)) = (other.get("nodes"), other.get("nodelist")) {
        let count = hostlist::expand(list).map_or(0, |n| n.len());
        if asked as usize > count {
            return Err(AllocationError::FewerListed {
                nodes: v.clone(),
                list: list.clone(),
                count,
            });
        }
    }
    if let Some(n) = slurm.ntasks.filter(|n| *n < width) {
        return Err(AllocationError::FewerTasksThanNodes {
            tasks: n,
            nodes: width,
        });
    }
    if width > 1 {
        if let Some(v) = other.get("gpus") {
            return Err(AllocationError::GpusAcrossNodes {
                option: "gpus",
                value: v.clone(),
                nodes: width,
            });
        }
    }
    let tasks = u64::from(tasks_per_node(slurm, width).into_iter().max().unwrap_or(1));
    for (option, per) in [("gpus-per-node", 1), ("gpus-per-task", tasks)] {
        let Some(v) = other.get(option) else { continue };
        let n = gpu_count(v).ok_or_else(|| AllocationError::BadGpusPer {
            option,
            value: v.clone(),
        })?;
        if n.saturating_mul(per) != gpus as u64 {
            return Err(AllocationError::GpusPer {
                option,
                value: v.clone(),
                asked: n.saturating_mul(per),
                given: gpus,
            });
        }
    }
    if let Some(v) = other.get("gpus-per-socket") {
        return Err(AllocationError::GpusPerSocket(v.clone()));
    }
    if let Some(v) = other.get("gpu-bind") {
        gpu_bind(v).ok_or_else(|| AllocationError::GpuBind(v.clone()))?;
    }
    if let Some(v) = other.get("exclusive") {
        NodeSharing::parse(v).ok_or_else(|| AllocationError::Exclusive(v.clone()))?;
    }
    node_choice(other).map(|_| ())
}

/// The distinct nodes a `--nodelist` names, sorted.
fn listed_nodes(v: &str) -> Result<Vec<String>, AllocationError> {
    let mut names = hostlist::expand(v).map_err(|source| AllocationError::Hostlist {
        option: "nodelist",
        source,
    })?;
    names.sort();
    names.dedup();
    Ok(names)
}

/// How many nodes a job runs on: `-N` (its least count), or the nodes
/// `-w` names where they are more; one when neither is given.
pub fn width(slurm: &SlurmOptions) -> Result<u32, AllocationError> {
    let other = &slurm.other;
    let asked = match other.get("nodes") {
        Some(v) => min_nodes(v).ok_or_else(|| AllocationError::BadNodes(v.clone()))?,
        None => 1,
    };
    let listed = match other.get("nodelist") {
        Some(v) => listed_nodes(v)?.len() as u32,
        None => 0,
    };
    Ok(asked.max(listed).max(1))
}

/// How many nodes a job runs on, read as [`width`] does; one for options
/// that no longer read (checked at submission).
pub fn width_of(slurm: &SlurmOptions) -> u32 {
    width(slurm).unwrap_or(1)
}

/// The tasks a job runs on each of its `width` nodes, in node order:
/// `--ntasks-per-node` on each, else `-n` spread in blocks (the first
/// nodes one more where it does not divide: `-n 5 -N 2` is 3 and 2), else
/// one on each.
pub fn tasks_per_node(slurm: &SlurmOptions, width: u32) -> Vec<u32> {
    let width = width.max(1);
    let per_node: Option<u32> = slurm
        .other
        .get("ntasks-per-node")
        .and_then(|v| v.trim().parse().ok())
        .filter(|n| *n > 0);
    match (per_node, slurm.ntasks) {
        (Some(k), _) => vec![k; width as usize],
        (None, Some(n)) => {
            let (base, extra) = (n / width, n % width);
            (0..width)
                .map(|i| (base + u32::from(i < extra)).max(1))
                .collect()
        }
        (None, None) => vec![1; width as usize],
    }
}

/// The tasks a job runs on its one node: `-n`, else `--ntasks-per-node`,
/// else one.
pub fn tasks_on_node(slurm: &SlurmOptions) -> u32 {
    slurm
        .ntasks
        .or_else(|| slurm.other.get("ntasks-per-node")?.trim().parse().ok())
        .unwrap_or(1)
        .max(1)
}

/// The count N of a `[TYPE:]N` GPU request (`--gpus-per-node`,
/// `--gpus-per-task`); a type alone is one. `None` when it is not one.
pub fn gpu_count(v: &str) -> Option<u64> {
    let count = |n: &str| n.parse::<u64>().ok().filter(|n| *n >= 1);
    let is_type = |t: &str| !t.is_empty() && !t.bytes().all(|b| b.is_ascii_digit());
    match v.trim().split(':').collect::<Vec<_>>().as_slice() {
        [n] if !is_type(n) => count(n),
        [t] => crate::gpu::is_gpu_type(t).then_some(1),
        [t, n] if is_type(t) => count(n),
        _ => None,
    }
}

/// How `--gpu-bind` binds tasks to the job's GPU instances.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuBind {
    /// Every task sees all of them (`none`, `closest`: gsched's instances
    /// are already the closest it could give).
    All,
    /// Each GPU instance is given to this many tasks in turn, each task
    /// seeing one (`single:N`).
    Single(u32),
}

/// Reads `--gpu-bind=[verbose,]TYPE`; `None` for a binding gsched does not
/// do.
pub fn gpu_bind(v: &str) -> Option<GpuBind> {
    let v = v.trim();
    let v = v.strip_prefix("verbose,").unwrap_or(v);
    match v {
        "none" | "closest" => Some(GpuBind::All),
        _ => {
            let n: u32 = v.strip_prefix("single:")?.trim().parse().ok()?;
            (n >= 1).then_some(GpuBind::Single(n))
        }
    }
}

/// The least number of nodes `N` or `MIN-MAX` asks for (at least 1), or
/// `None` when it is not a count.
fn min_nodes(v: &str) -> Option<u32> {
    let (min, max) = match v.trim().split_once('-') {
        // `-MAX`: Slurm reads the missing minimum as 1.
        Some(("", b)) => (1, Some(b.trim().parse::<u32>().ok()?)),
        Some((a, b)) => (
            a.trim().parse::<u32>().ok()?,
            Some(b.trim().parse::<u32>().ok()?),
        ),
        None => (v.trim().parse::<u32>().ok()?, None),
    };
    if min == 0 || max.is_some_and(|m| m < min) {
        return None;
    }
    Some(min)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(k: &str, v: &str) -> BTreeMap<String, String> {
        [(k.to_string(), v.to_string())].into_iter().collect()
    }

    fn opts(k: &str, v: &str) -> SlurmOptions {
        SlurmOptions {
            other: with(k, v),
            ..SlurmOptions::default()
        }
    }

    trait With {
        fn with(self, k: &str, v: &str) -> Self;
    }

    impl With for SlurmOptions {
        fn with(mut self, k: &str, v: &str) -> Self {
            self.other.insert(k.into(), v.into());
            self
        }
    }

    #[test]
    fn tasks_are_spread_over_the_nodes_in_blocks() {
        let mut s = opts("nodes", "2");
        assert_eq!(tasks_per_node(&s, 2), vec![1, 1]);
        s.ntasks = Some(5);
        assert_eq!(tasks_per_node(&s, 2), vec![3, 2]);
        s.ntasks = Some(4);
        assert_eq!(tasks_per_node(&s, 2), vec![2, 2]);
        let s = opts("ntasks-per-node", "2");
        assert_eq!(tasks_per_node(&s, 3), vec![2, 2, 2]);
    }

    #[test]
    fn node_counts_are_read_and_bad_ones_refused_with_the_reason() {
        assert_eq!(check(&SlurmOptions::default(), 1), Ok(()));
        assert_eq!(check(&opts("nodes", "1"), 1), Ok(()));
        // A range takes its least count.
        assert_eq!(check(&opts("nodes", "1-4"), 1), Ok(()));
        for (v, w) in [("2", 2), ("2-4", 2), ("1-4", 1)] {
            assert_eq!(check(&opts("nodes", v), 1), Ok(()), "{v}");
            assert_eq!(width(&opts("nodes", v)), Ok(w), "{v}");
        }
        assert_eq!(width(&opts("nodelist", "n[1-3]")), Ok(3));
        let mut both = opts("nodes", "3");
        both.other.insert("nodelist".into(), "n[1-2]".into());
        let e = check(&both, 1).unwrap_err().to_string();
        assert!(e.contains("names 2 nodes"), "{e}");
        let mut few = opts("nodes", "3");
        few.ntasks = Some(2);
        let e = check(&few, 1).unwrap_err().to_string();
        assert!(e.starts_with("-n 2 tasks on 3 nodes"), "{e}");
        let e = check(&opts("nodes", "2").with("gpus", "2"), 2)
            .unwrap_err()
            .to_string();
        assert!(e.contains("--gpus-per-node"), "{e}");
        assert_eq!(check(&opts("nodes", "-3"), 1), Ok(()), "-MAX is 1-MAX");
        for v in ["0", "x", "4-2", "1-", "-0", "-"] {
            assert_eq!(
                check(&opts("nodes", v), 1),
                Err(AllocationError::BadNodes(v.into())),
                "{v}"
            );
        }
    }

    #[test]
    fn a_node_choice_allows_the_chosen_node_and_none_excluded() {
        assert_eq!(node_choice(&BTreeMap::new()), Ok(None));
        let w = node_choice(&with("nodelist", "n2")).unwrap().unwrap();
        assert!(w.allows("n2") && !w.allows("n1"));
        let x = node_choice(&with("exclude", "n[1,3]")).unwrap().unwrap();
        assert!(x.allows("n2") && !x.allows("n1") && !x.allows("n3"));
        let mut both = with("nodelist", "n1");
        both.insert("exclude".into(), "n1".into());
        assert!(!node_choice(&both).unwrap().unwrap().allows("n1"));
    }

    #[test]
    fn gpus_per_node_or_task_must_agree_with_the_gpu_count() {
        assert_eq!(check(&opts("gpus-per-node", "2"), 2), Ok(()));
        assert_eq!(check(&opts("gpus-per-node", "h100:2"), 2), Ok(()));
        assert_eq!(check(&opts("gpus-per-node", "h100"), 1), Ok(()));
        let e = check(&opts("gpus-per-node", "2"), 1)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("--gpus-per-node=2 asks for 2") && e.contains("is for 1"),
            "{e}"
        );
        // Per task: times the tasks on the node.
        let mut per_task = opts("gpus-per-task", "1");
        per_task.ntasks = Some(4);
        assert_eq!(check(&per_task, 4), Ok(()));
        assert!(check(&per_task, 1).is_err());
        per_task.ntasks = None;
        per_task.other.insert("ntasks-per-node".into(), "2".into());
        assert_eq!(check(&per_task, 2), Ok(()));
        for bad in ["0", "x:", "", "a:b:c"] {
            let e = check(&opts("gpus-per-node", bad), 1).unwrap_err();
            assert!(
                matches!(e, AllocationError::BadGpusPer { .. }),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn chosen_nodes_and_unsupported_bindings() {
        // Nodes may be chosen (a job on each named one), any excluded.
        assert_eq!(check(&opts("nodelist", "n2"), 1), Ok(()));
        assert_eq!(check(&opts("exclude", "n[1-3]"), 1), Ok(()));
        assert_eq!(check(&opts("nodelist", "n[1-2]"), 1), Ok(()));
        let e = check(&opts("exclude", "n[1-"), 1).unwrap_err().to_string();
        assert!(e.starts_with("--exclude: hostlist 'n[1-'"), "{e}");
        assert_eq!(check(&opts("ntasks-per-node", "2"), 1), Ok(()));
        for ok in ["none", "closest", "single:1", "single:2", "verbose,closest"] {
            assert_eq!(check(&opts("gpu-bind", ok), 2), Ok(()), "{ok}");
        }
        assert_eq!(gpu_bind("single:2"), Some(GpuBind::Single(2)));
        for bad in ["map_gpu:0,1", "single:0", "mask_gpu:0x1", "per_task:1"] {
            let e = check(&opts("gpu-bind", bad), 1).unwrap_err().to_string();
            assert!(e.starts_with(&format!("--gpu-bind={bad}:")), "{e}");
        }
        for ok in ["exclusive", "user"] {
            assert_eq!(check(&opts("exclusive", ok), 1), Ok(()), "{ok}");
        }
        let e = check(&opts("exclusive", "mcs"), 1).unwrap_err().to_string();
        assert!(e.starts_with("--exclusive=mcs:"), "{e}");
        let e = check(&opts("gpus-per-socket", "1"), 1)
            .unwrap_err()
            .to_string();
        assert!(e.contains("socket") && e.contains("--gres=gpu:N"), "{e}");
    }
}
