//! What one job's allocation may span today: one node, and at most one GPU
//! instance, on a node it may choose (`-w`) or exclude (`-x`). Slurm
//! options that ask for more are refused at submission with the reason,
//! never run with less (issue 18 brings multi-node and multi-GPU
//! allocations). The options arrive as the job's recorded Slurm options
//! (`SlurmOptions::other`, by long name).

use std::collections::BTreeMap;

use crate::hostlist::{self, Hostlist, HostlistError};

/// A request gsched cannot give a job yet.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllocationError {
    #[error("--nodes={0}: gsched runs a job on one node; multi-node jobs are not supported yet (ask for -N 1, or leave the option out)")]
    MultiNode(String),
    #[error("--nodes={0}: expected a node count N or a range MIN-MAX")]
    BadNodes(String),
    #[error("--{option}={value}: GPUs per node or per task are not supported yet; ask for one GPU instance with --gres=gpu:1 or --gpus=1")]
    GpusPer { option: &'static str, value: String },
    #[error("--nodelist={value}: names {count} nodes, and gsched runs a job on one node; name one (multi-node jobs are not supported yet)")]
    NodeList { value: String, count: usize },
    #[error("--gpus-per-socket={0}: gsched does not place GPUs by CPU socket; ask for one GPU instance with --gres=gpu:1")]
    GpusPerSocket(String),
    #[error("--gpu-bind={0}: gsched binds a job to its one GPU instance; give none, closest or single:1, or leave the option out")]
    GpuBind(String),
    #[error("--{option}: {source}")]
    Hostlist {
        option: &'static str,
        source: HostlistError,
    },
}

/// The nodes a job may run on (`-w`, `-x`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeChoice {
    /// `-w`: only this node.
    pub only: Option<String>,
    /// `-x`: never these (read, not expanded).
    pub except: Option<Hostlist>,
}

impl NodeChoice {
    pub fn allows(&self, node: &str) -> bool {
        self.only.as_deref().is_none_or(|o| o == node)
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
        Some((v, _)) => {
            // Expanded only here, where a valid one names one node.
            let mut names = hostlist::expand(v).map_err(|source| AllocationError::Hostlist {
                option: "nodelist",
                source,
            })?;
            if names.len() > 1 {
                return Err(AllocationError::NodeList {
                    value: v.clone(),
                    count: names.len(),
                });
            }
            names.pop()
        }
    };
    let except = read("exclude")?.map(|(_, h)| h);
    Ok((only.is_some() || except.is_some()).then_some(NodeChoice { only, except }))
}

/// Checks a job's recorded Slurm options against what one allocation can
/// give.
pub fn check(other: &BTreeMap<String, String>) -> Result<(), AllocationError> {
    if let Some(v) = other.get("nodes") {
        if min_nodes(v).ok_or_else(|| AllocationError::BadNodes(v.clone()))? > 1 {
            return Err(AllocationError::MultiNode(v.clone()));
        }
    }
    for option in ["gpus-per-node", "gpus-per-task"] {
        if let Some(v) = other.get(option) {
            return Err(AllocationError::GpusPer {
                option,
                value: v.clone(),
            });
        }
    }
    if let Some(v) = other.get("gpus-per-socket") {
        return Err(AllocationError::GpusPerSocket(v.clone()));
    }
    if let Some(v) = other.get("gpu-bind") {
        // With one instance, these bind as asked: to it.
        let fits = matches!(v.trim(), "none" | "closest")
            || v.trim()
                .strip_prefix("single:")
                .is_some_and(|n| n.trim() == "1");
        if !fits {
            return Err(AllocationError::GpuBind(v.clone()));
        }
    }
    node_choice(other).map(|_| ())
}

/// The least number of nodes `N` or `MIN-MAX` asks for (at least 1), or
/// `None` when it is not a count.
fn min_nodes(v: &str) -> Option<u32> {
    let (min, max) = match v.trim().split_once('-') {
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

    #[test]
    fn one_node_is_given_more_is_refused_with_the_reason() {
        assert_eq!(check(&BTreeMap::new()), Ok(()));
        assert_eq!(check(&with("nodes", "1")), Ok(()));
        // A range that one node satisfies.
        assert_eq!(check(&with("nodes", "1-4")), Ok(()));
        for v in ["2", "2-4"] {
            let e = check(&with("nodes", v)).unwrap_err();
            assert_eq!(e, AllocationError::MultiNode(v.into()));
            assert!(e.to_string().contains("one node"), "{e}");
        }
        for v in ["0", "x", "4-2", "1-"] {
            assert_eq!(
                check(&with("nodes", v)),
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
    fn recorded_gpus_per_node_or_task_and_several_chosen_nodes_are_refused() {
        for k in ["gpus-per-node", "gpus-per-task"] {
            let e = check(&with(k, "1")).unwrap_err().to_string();
            assert!(
                e.starts_with(&format!("--{k}=1:")) && e.contains("--gres=gpu:1"),
                "{e}"
            );
        }
        // One node may be chosen, any excluded; more than one chosen is
        // more than one node.
        assert_eq!(check(&with("nodelist", "n2")), Ok(()));
        assert_eq!(check(&with("exclude", "n[1-3]")), Ok(()));
        let e = check(&with("nodelist", "n[1-2]")).unwrap_err().to_string();
        assert!(e.contains("names 2 nodes") && e.contains("one node"), "{e}");
        let e = check(&with("exclude", "n[1-")).unwrap_err().to_string();
        assert!(e.starts_with("--exclude: hostlist 'n[1-'"), "{e}");
        // Options that fit one node pass.
        assert_eq!(check(&with("ntasks-per-node", "2")), Ok(()));
        // GPU binding: what one instance satisfies passes.
        for ok in ["none", "closest", "single:1"] {
            assert_eq!(check(&with("gpu-bind", ok)), Ok(()), "{ok}");
        }
        for bad in ["map_gpu:0,1", "single:2", "verbose,closest"] {
            let e = check(&with("gpu-bind", bad)).unwrap_err().to_string();
            assert!(e.starts_with(&format!("--gpu-bind={bad}:")), "{e}");
        }
        let e = check(&with("gpus-per-socket", "1"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("socket") && e.contains("--gres=gpu:1"), "{e}");
    }
}
