//! Messages between gctld and gnoded (HTTP JSON, cluster key in a header).

use serde::{Deserialize, Serialize};

use crate::gpu::Instance;
use crate::job::{Job, JobId};
use crate::outcome::ProcessOutcome;

/// Header carrying the cluster key on daemon-to-daemon requests.
pub const CLUSTER_KEY_HEADER: &str = "x-gsched-cluster-key";

/// A node introduces itself (at start, and again if the controller forgot it).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeRegistration {
    pub name: String,
    /// Base URL of the node's API, e.g. `http://127.0.0.1:6818`.
    pub url: String,
    pub cpus: u32,
    pub memory_mib: u64,
    pub instances: Vec<Instance>,
    /// Non-isolated jobs the node runs at once; `None` lets the controller
    /// derive it from the instances.
    pub worker_limit: Option<u32>,
    /// Jobs whose processes are alive on the node.
    pub running: Vec<JobId>,
    /// Jobs that ended while nobody was listening.
    pub ended: Vec<JobEnded>,
}

/// Periodic liveness report.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Heartbeat {
    pub running: Vec<JobId>,
}

/// The controller's answer to a heartbeat.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HeartbeatReply {
    /// `false`: the controller does not know this node; register again.
    pub known: bool,
}

/// Start a job on the node.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LaunchRequest {
    pub job: Job,
    pub instance: Option<Instance>,
    pub cluster: String,
    pub partition: String,
    pub controller_url: String,
}

/// Signal a job, or cancel it (SIGCONT, SIGTERM, then SIGKILL after the grace).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SignalRequest {
    pub signal: i32,
    pub cancel: bool,
}

/// A job's processes ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobEnded {
    pub job_id: JobId,
    pub outcome: ProcessOutcome,
    /// Unix seconds when it ended.
    pub end_time: i64,
}

/// A batch of job endings from a node.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobEndReport {
    pub node: String,
    pub ended: Vec<JobEnded>,
}

/// Errors on the wire: `{"error": "..."}` with an HTTP status.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: String,
}
