//! Steps across the nodes of a job (`srun` inside an allocation on several
//! nodes): which tasks run where ([`layout`]), what `srun` asks each
//! node's gnoded ([`StepTasks`]), what comes back ([`StepEvent`]), and the
//! environment each task gets there ([`task_environment`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::job::Job;

/// What `srun` asks for inside the allocation (`-N`, `-n`,
/// `--ntasks-per-node`, `-w`); what it leaves out, the job's.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct LayoutRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ntasks: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ntasks_per_node: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodelist: Option<String>,
}

/// One node of a step: its name, its place among the step's nodes
/// (`SLURM_NODEID`, relative to the step as in Slurm: Open MPI's daemons
/// take their rank from it) and the ranks (`SLURM_PROCID`) of its tasks, in order
/// (the i-th has `SLURM_LOCALID` i).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepNode {
    pub name: String,
    pub node_id: u32,
    pub tasks: Vec<u32>,
}

/// One node of a step as the controller answers `srun`: its tasks, its
/// gnoded's URL and the credential that lets `srun` start them there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct StepNodeAnswer {
    pub name: String,
    pub node_id: u32,
    pub tasks: Vec<u32>,
    pub url: String,
    pub credential: String,
    /// The secret that seals the step's request to this node and opens
    /// the node's answers (`gsched_seal`).
    pub seal: String,
}

/// A step that does not fit the job's allocation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    #[error("-N {asked}: the job's allocation has {have} nodes")]
    TooManyNodes { asked: u32, have: usize },
    #[error("-w {list}: node {node} is not in the job's allocation ({nodes})")]
    NotAllocated {
        list: String,
        node: String,
        nodes: String,
    },
    #[error("-w {0}: {1}")]
    BadList(String, String),
    #[error("-n {tasks} on {nodes} nodes: every node of a step needs a task; ask for fewer nodes (-N) or more tasks")]
    FewerTasks { tasks: u32, nodes: usize },
    #[error("a step needs at least one task and one node")]
    Empty,
}

/// Where each task of a step runs: on the nodes `-w` names, else the
/// first `-N` of the job's (all by default, or as many as `-n` tasks where
/// fewer), `--ntasks-per-node` on each, else `-n` spread in blocks, else
/// the job's own tasks per node. Ranks go in node order.
pub fn layout(job: &Job, req: &LayoutRequest) -> Result<Vec<StepNode>, LayoutError> {
    let all: Vec<&str> = job.nodes();
    let width = all.len() as u32;
    let chosen: Vec<&str> = match &req.nodelist {
        Some(list) => {
            let names = crate::hostlist::expand(list)
                .map_err(|e| LayoutError::BadList(list.clone(), e.to_string()))?;
            let mut chosen = Vec::new();
            for n in &names {
                let Some(at) = all.iter().find(|a| **a == n.as_str()) else {
                    return Err(LayoutError::NotAllocated {
                        list: list.clone(),
                        node: n.clone(),
                        nodes: crate::hostlist::compress(&all),
                    });
                };
                if !chosen.contains(at) {
                    chosen.push(*at);
                }
            }
            // In the job's order.
            all.iter().copied().filter(|a| chosen.contains(a)).collect()
        }
        None => {
            let count = match (req.nodes, req.ntasks) {
                (Some(n), _) if n > width => {
                    return Err(LayoutError::TooManyNodes {
                        asked: n,
                        have: all.len(),
                    })
                }
                (Some(n), _) => n,
                (None, Some(t)) if req.ntasks_per_node.is_none() => t.min(width),
                (None, _) => width,
            };
            all.iter().copied().take(count as usize).collect()
        }
    };
    if chosen.is_empty() {
        return Err(LayoutError::Empty);
    }
    let counts: Vec<u32> = match (req.ntasks_per_node, req.ntasks) {
        (Some(k), _) => vec![k.max(1); chosen.len()],
        (None, Some(n)) => {
            if (n as usize) < chosen.len() {
                return Err(LayoutError::FewerTasks {
                    tasks: n,
                    nodes: chosen.len(),
                });
            }
            let w = chosen.len() as u32;
            (0..w).map(|i| n / w + u32::from(i < n % w)).collect()
        }
        (None, None) => {
            let job_counts = crate::allocation::tasks_per_node(&job.spec.slurm, width);
            chosen
                .iter()
                .map(|c| {
                    let i = all.iter().position(|a| a == c).unwrap_or(0);
                    job_counts.get(i).copied().unwrap_or(1)
                })
                .collect()
        }
    };
    let mut next = 0;
    Ok(chosen
        .iter()
        .zip(counts)
        .enumerate()
        .map(|(i, (name, k))| {
            let tasks = (next..next + k).collect();
            next += k;
            StepNode {
                name: name.to_string(),
                node_id: i as u32,
                tasks,
            }
        })
        .collect())
}

/// What `srun` asks one node's gnoded to start: the step's tasks there,
/// with a credential from the controller ([`StepNode`]s come with one).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepTasks {
    pub job: u64,
    pub run: u32,
    pub step: u32,
    pub credential: String,
    pub argv: Vec<String>,
    /// `srun`'s environment (its job's, with what the script changed), with
    /// the step's variables; the node sets its own and each task's.
    pub env: BTreeMap<String, String>,
    /// The node's place among the job's nodes and its tasks' ranks.
    pub node_id: u32,
    pub tasks: Vec<u32>,
    /// GPUs per task (`--gpus-per-task`) or `--gpu-bind`, to split the
    /// node's GPUs among its tasks as on the batch node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus_per_task: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_bind_single: Option<u32>,
}

/// What `srun` posts to a node's gnoded: a [`StepTasks`] sealed under the
/// step's secret for that node (`gsched_seal`), with the step it is for
/// in clear so the node can derive the key. Nothing else goes in clear.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SealedStepTasks {
    pub job: u64,
    pub run: u32,
    pub step: u32,
    /// The [`StepTasks`] as JSON, sealed (hexadecimal).
    pub sealed: String,
}

/// What a node's gnoded streams back for a step's tasks, one JSON object
/// per line, each line sealed under the step's reply key with its
/// sequence number (`gsched_seal::StepSeal::seal_event`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepEvent {
    /// Output of task `task` (its rank), as written (lossless for UTF-8).
    Stdout {
        task: u32,
        data: String,
    },
    Stderr {
        task: u32,
        data: String,
    },
    /// Task `task` ended: its exit code, or the signal that ended it.
    Exit {
        task: u32,
        code: Option<i32>,
        signal: Option<i32>,
    },
    /// The tasks could not be started there, and why.
    Failed {
        why: String,
    },
    /// Nothing happened (sent now and then while tasks run: a node notices
    /// that srun went away when it cannot write one).
    Tick,
}

/// Variables that belong to the node a task runs on, not to `srun`'s:
/// the node's own launch environment gives them (or leaves them out).
const NODE_LOCAL: &[&str] = &[
    "SLURMD_NODENAME",
    "SLURM_NODEID",
    "SLURM_CPUS_ON_NODE",
    "SLURM_JOB_GPUS",
    "SLURM_STEP_GPUS",
    "SLURM_GPUS_ON_NODE",
    "CUDA_VISIBLE_DEVICES",
    "GPU_DEVICE_ORDINAL",
    "CUDA_MPS_PIPE_DIRECTORY",
    "CUDA_MPS_LOG_DIRECTORY",
    "LD_PRELOAD",
    "TMPDIR",
];

/// Whether variable `k` is the node's to set (see [`NODE_LOCAL`]; every
/// `GSCHED_` variable, such as the node's probe socket and job key, too).
fn node_local(k: &str) -> bool {
    NODE_LOCAL.contains(&k) || k.starts_with("GSCHED_")
}

/// The environment of task `rank` (the `local`-th on its node) of a step
/// on a node other than `srun`'s: `srun`'s environment, with the node's
/// own variables from its launch environment, and the task's ranks and
/// devices.
pub fn task_environment(
    srun: &BTreeMap<String, String>,
    node: &BTreeMap<String, String>,
    node_id: u32,
    rank: u32,
    local: u32,
    devices: Option<&str>,
) -> BTreeMap<String, String> {
    let mut env: BTreeMap<String, String> = srun
        .iter()
        .filter(|(k, _)| !node_local(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    env.extend(
        node.iter()
            .filter(|(k, _)| node_local(k))
            .map(|(k, v)| (k.clone(), v.clone())),
    );
    env.insert("SLURM_NODEID".into(), node_id.to_string());
    env.insert("SLURM_PROCID".into(), rank.to_string());
    env.insert("SLURM_LOCALID".into(), local.to_string());
    if let Some(d) = devices {
        env.insert("CUDA_VISIBLE_DEVICES".into(), d.into());
        env.insert("GPU_DEVICE_ORDINAL".into(), d.into());
    }
    env
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::{JobSpec, Sister};

    fn job(nodes: &[&str], per_node: Option<u32>) -> Job {
        let mut spec = JobSpec::default();
        spec.slurm
            .other
            .insert("nodes".into(), nodes.len().to_string());
        if let Some(k) = per_node {
            spec.slurm
                .other
                .insert("ntasks-per-node".into(), k.to_string());
        }
        let mut j = Job::new(1, spec, 0);
        j.node = Some(nodes[0].into());
        j.sisters = nodes[1..]
            .iter()
            .map(|n| Sister {
                node: n.to_string(),
                instances: vec![],
            })
            .collect();
        j
    }

    fn ranks(l: &[StepNode]) -> Vec<(&str, u32, Vec<u32>)> {
        l.iter()
            .map(|n| (n.name.as_str(), n.node_id, n.tasks.clone()))
            .collect()
    }

    #[test]
    fn a_step_takes_the_jobs_layout_unless_told_otherwise() {
        let j = job(&["n1", "n2"], Some(2));
        let all = LayoutRequest::default();
        assert_eq!(
            ranks(&layout(&j, &all).unwrap()),
            [("n1", 0, vec![0, 1]), ("n2", 1, vec![2, 3])]
        );
        // -n 3: spread in blocks.
        let three = LayoutRequest {
            ntasks: Some(3),
            ..Default::default()
        };
        assert_eq!(
            ranks(&layout(&j, &three).unwrap()),
            [("n1", 0, vec![0, 1]), ("n2", 1, vec![2])]
        );
        // -n 1: on the first node only.
        let one = LayoutRequest {
            ntasks: Some(1),
            ..Default::default()
        };
        assert_eq!(ranks(&layout(&j, &one).unwrap()), [("n1", 0, vec![0])]);
        // -w n2 --ntasks-per-node=1 (mpirun's daemons, one per node).
        let w = LayoutRequest {
            nodelist: Some("n2".into()),
            ntasks_per_node: Some(1),
            ..Default::default()
        };
        assert_eq!(ranks(&layout(&j, &w).unwrap()), [("n2", 0, vec![0])]);
    }

    #[test]
    fn a_step_beyond_the_allocation_is_refused_with_the_reason() {
        let j = job(&["n1", "n2"], None);
        let e = layout(
            &j,
            &LayoutRequest {
                nodes: Some(3),
                ..Default::default()
            },
        )
        .unwrap_err();
        assert!(e.to_string().contains("has 2 nodes"), "{e}");
        let e = layout(
            &j,
            &LayoutRequest {
                nodelist: Some("n3".into()),
                ..Default::default()
            },
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("n3 is not in the job's allocation (n[1-2])"),
            "{e}"
        );
        let e = layout(
            &j,
            &LayoutRequest {
                nodes: Some(2),
                ntasks: Some(1),
                ..Default::default()
            },
        )
        .unwrap_err();
        assert!(matches!(e, LayoutError::FewerTasks { .. }), "{e}");
    }

    #[test]
    fn a_remote_task_keeps_sruns_environment_but_the_nodes_own_variables() {
        let srun: BTreeMap<String, String> = [
            ("PATH", "/mine"),
            ("SLURMD_NODENAME", "n1"),
            ("CUDA_VISIBLE_DEVICES", "GPU-a"),
            ("GSCHED_JOB_KEY", "k1"),
            ("SLURM_STEP_ID", "3"),
        ]
        .into_iter()
        .map(|(k, v)| (k.into(), v.into()))
        .collect();
        let node: BTreeMap<String, String> = [
            ("PATH", "/launch"),
            ("SLURMD_NODENAME", "n2"),
            ("GSCHED_JOB_KEY", "k2"),
        ]
        .into_iter()
        .map(|(k, v)| (k.into(), v.into()))
        .collect();
        let env = task_environment(&srun, &node, 1, 5, 1, None);
        assert_eq!(env["PATH"], "/mine");
        assert_eq!(env["SLURMD_NODENAME"], "n2");
        assert_eq!(env["GSCHED_JOB_KEY"], "k2");
        assert_eq!(env["SLURM_STEP_ID"], "3");
        assert!(
            !env.contains_key("CUDA_VISIBLE_DEVICES"),
            "the node has no GPU of the job"
        );
        assert_eq!(
            (
                env["SLURM_NODEID"].as_str(),
                env["SLURM_PROCID"].as_str(),
                env["SLURM_LOCALID"].as_str()
            ),
            ("1", "5", "1")
        );
        let env = task_environment(&srun, &node, 1, 5, 1, Some("GPU-x"));
        assert_eq!(env["CUDA_VISIBLE_DEVICES"], "GPU-x");
    }
}
