//! What one job's allocation may span today: one node, and at most one GPU
//! instance. Slurm options that ask for more, or for particular nodes, are
//! refused at submission with the reason, never run with less (issue 18
//! brings multi-node and multi-GPU allocations). The options arrive as the
//! job's recorded Slurm options (`SlurmOptions::other`, by long name).

use std::collections::BTreeMap;

/// A request gsched cannot give a job yet.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllocationError {
    #[error("--nodes={0}: gsched runs a job on one node; multi-node jobs are not supported yet (ask for -N 1, or leave the option out)")]
    MultiNode(String),
    #[error("--nodes={0}: expected a node count N or a range MIN-MAX")]
    BadNodes(String),
    #[error("--{option}={value}: GPUs per node or per task are not supported yet; ask for one GPU instance with --gres=gpu:1 or --gpus=1")]
    GpusPer { option: &'static str, value: String },
    #[error("--{option}={value}: choosing or excluding nodes is not supported yet; leave the option out")]
    NodeChoice { option: &'static str, value: String },
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
    for option in ["nodelist", "exclude"] {
        if let Some(v) = other.get(option) {
            return Err(AllocationError::NodeChoice {
                option,
                value: v.clone(),
            });
        }
    }
    Ok(())
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
    fn gpus_per_node_or_task_and_node_choices_are_refused_not_ignored() {
        for k in ["gpus-per-node", "gpus-per-task"] {
            let e = check(&with(k, "1")).unwrap_err().to_string();
            assert!(
                e.starts_with(&format!("--{k}=1:")) && e.contains("--gres=gpu:1"),
                "{e}"
            );
        }
        for k in ["nodelist", "exclude"] {
            let e = check(&with(k, "n2")).unwrap_err().to_string();
            assert!(e.starts_with(&format!("--{k}=n2:")), "{e}");
        }
        // Options that fit one node pass.
        assert_eq!(check(&with("ntasks-per-node", "2")), Ok(()));
    }
}
