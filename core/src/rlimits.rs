//! The submitter's resource limits, carried with a job to its processes as
//! Slurm's `PropagateResourceLimits` carries them (on by default there
//! too). A limit is the user's word; the node applies it only below its own
//! hard limit, so propagation can lower what a job may use, never raise it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Slurm's names of the limits that propagate, in its order, with their
/// resource numbers in Linux's `getrlimit(2)` ABI (the same on every
/// architecture gsched runs on; `island` tests check them against libc).
pub const LIMITS: [(&str, u32); 10] = [
    ("AS", 9),
    ("CORE", 4),
    ("CPU", 0),
    ("DATA", 2),
    ("FSIZE", 1),
    ("MEMLOCK", 8),
    ("NOFILE", 7),
    ("NPROC", 6),
    ("RSS", 5),
    ("STACK", 3),
];

/// The names alone.
pub const LIMIT_NAMES: [&str; 10] = {
    let mut out = [""; 10];
    let mut i = 0;
    while i < LIMITS.len() {
        out[i] = LIMITS[i].0;
        i += 1;
    }
    out
};

/// One limit: `None` is unlimited (`RLIM_INFINITY`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Limit {
    #[serde(default)]
    pub soft: Option<u64>,
    #[serde(default)]
    pub hard: Option<u64>,
}

/// The limits a job carries, by Slurm's name (`NOFILE`, `NPROC`, ...).
pub type ResourceLimits = BTreeMap<String, Limit>;

/// A limit set that names something that is not a limit, or is inverted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadLimits {
    #[error("unknown resource limit {0:?} (known: {known})", known = LIMIT_NAMES.join(", "))]
    Unknown(String),
    #[error("resource limit {0}: the soft limit is above the hard limit")]
    SoftAboveHard(String),
}

/// Checks a job's limits: known names only, soft at most hard.
pub fn validate(limits: &ResourceLimits) -> Result<(), BadLimits> {
    for (name, l) in limits {
        if !LIMIT_NAMES.contains(&name.as_str()) {
            return Err(BadLimits::Unknown(name.clone()));
        }
        if let (Some(s), h) = (l.soft, l.hard) {
            if h.is_some_and(|h| s > h) {
                return Err(BadLimits::SoftAboveHard(name.clone()));
            }
        }
    }
    Ok(())
}

/// `a` no higher than `b`, where `None` is unlimited.
fn lower(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (x, None) | (None, x) => x,
    }
}

/// What the job gets for one limit: the submitter's, capped by the node's
/// hard limit (`node_hard`, `None` unlimited). Where the submitter gave no
/// value, the node's soft limit `fallback_soft` under its hard limit.
pub fn effective(
    given: Option<&Limit>,
    node_hard: Option<u64>,
    fallback_soft: Option<u64>,
) -> Limit {
    match given {
        Some(l) => {
            let hard = lower(l.hard, node_hard);
            Limit {
                soft: lower(l.soft, hard),
                hard,
            }
        }
        None => Limit {
            soft: lower(fallback_soft, node_hard),
            hard: node_hard,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_order_are_checked() {
        let mut l = ResourceLimits::new();
        l.insert(
            "NOFILE".into(),
            Limit {
                soft: Some(10),
                hard: Some(20),
            },
        );
        assert_eq!(validate(&l), Ok(()));
        l.insert(
            "CORE".into(),
            Limit {
                soft: Some(30),
                hard: Some(20),
            },
        );
        assert_eq!(validate(&l), Err(BadLimits::SoftAboveHard("CORE".into())));
        let mut l = ResourceLimits::new();
        l.insert("BOGUS".into(), Limit::default());
        assert!(validate(&l).unwrap_err().to_string().contains("BOGUS"));
    }

    #[test]
    fn a_submitted_limit_never_exceeds_the_nodes_hard_limit() {
        let unlimited = Limit {
            soft: None,
            hard: None,
        };
        assert_eq!(
            effective(Some(&unlimited), Some(4096), Some(1024)),
            Limit {
                soft: Some(4096),
                hard: Some(4096)
            }
        );
        let low = Limit {
            soft: Some(64),
            hard: Some(128),
        };
        assert_eq!(effective(Some(&low), Some(4096), Some(1024)), low);
        assert_eq!(effective(Some(&low), None, None), low);
        // Nothing given: the node's soft default under its hard limit.
        assert_eq!(
            effective(None, Some(1 << 20), Some(1024)),
            Limit {
                soft: Some(1024),
                hard: Some(1 << 20)
            }
        );
    }
}
