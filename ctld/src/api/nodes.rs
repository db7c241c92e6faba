//! `/api/v1/nodes`, `/instances`, `/utilization` and `/tasks`: what the
//! cluster's nodes and GPUs hold, and an administrator's changes to them.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use gsched_core::cluster::NodeStateChange;
use gsched_core::job::JobId;
use gsched_core::probe::TaskRecord;
use gsched_core::wire::{ErrorBody, InstanceInfo, MigChange, MigNodeInfo, NodeInfo};
use gsched_daemon::http::{ApiError, Body};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::{admin_only, Ctl, Who};
use crate::controller::{unix_now, UtilSample};

/// One node, after a change of its state.
#[derive(Debug, Serialize, ToSchema)]
pub struct NodeReply {
    pub node: Option<NodeInfo>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct NodeList {
    pub nodes: Vec<NodeInfo>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct InstanceList {
    pub instances: Vec<InstanceInfo>,
}

/// Cluster-wide GPU use: a sample every `interval_s` seconds over the last
/// hour, the last one taken now.
#[derive(Debug, Serialize, ToSchema)]
pub struct Utilization {
    pub interval_s: u64,
    pub samples: Vec<UtilSample>,
}

/// A task's GPU memory reservation and the node it was on.
#[derive(Debug, Serialize, ToSchema)]
pub struct TaskRow {
    #[serde(flatten)]
    pub record: TaskRecord,
    pub node: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct TaskList {
    pub tasks: Vec<TaskRow>,
}

#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct TaskQuery {
    /// Only this job's tasks.
    job: Option<JobId>,
}

/// `scontrol update NodeName=... State=DRAIN|DOWN|RESUME Reason=...`:
/// administrators only.
#[utoipa::path(post, path = "/api/v1/nodes/{name}/state", tag = "nodes",
    params(("name" = String, Path, description = "Node name")),
    request_body = NodeStateChange,
    responses(
        (status = 200, description = "The node as changed", body = NodeReply),
        (status = 400, description = "Bad request: the error names the problem", body = ErrorBody),
        (status = 403, description = "Not an administrator", body = ErrorBody),
        (status = 404, description = "Unknown node", body = ErrorBody)))]
pub(super) async fn set_node_state(
    State(ctl): Ctl,
    Extension(caller): Who,
    Path(name): Path<String>,
    Body(change): Body<NodeStateChange>,
) -> Result<Json<NodeReply>, ApiError> {
    admin_only(&caller, &format!("change node {name}'s state"))?;
    ctl.set_node_state(&name, &change, &caller.user).await?;
    let c = ctl.lock();
    let node = c.node(&name).map(NodeInfo::new);
    Ok(Json(NodeReply { node }))
}

/// A node's MIG GPUs: layouts, states, frozen, reshapes under way.
#[utoipa::path(get, path = "/api/v1/nodes/{name}/mig", tag = "nodes",
    params(("name" = String, Path, description = "Node name")),
    responses(
        (status = 200, description = "The node's MIG GPUs", body = MigNodeInfo),
        (status = 404, description = "Unknown node", body = ErrorBody)))]
pub(super) async fn node_mig(
    State(ctl): Ctl,
    Path(name): Path<String>,
) -> Result<Json<MigNodeInfo>, ApiError> {
    ctl.lock()
        .mig_info(&name)
        .map(Json)
        .ok_or_else(|| ApiError(StatusCode::NOT_FOUND, format!("unknown node '{name}'")))
}

/// An administrator freezes, thaws or lays out one of a node's GPUs.
#[utoipa::path(post, path = "/api/v1/nodes/{name}/mig", tag = "nodes",
    params(("name" = String, Path, description = "Node name")),
    request_body = MigChange,
    responses(
        (status = 200, description = "The node's MIG GPUs after the change", body = MigNodeInfo),
        (status = 400, description = "Bad request: the error names the problem", body = ErrorBody),
        (status = 403, description = "Not an administrator", body = ErrorBody),
        (status = 404, description = "Unknown node", body = ErrorBody)))]
pub(super) async fn change_node_mig(
    State(ctl): Ctl,
    Extension(caller): Who,
    Path(name): Path<String>,
    Body(change): Body<MigChange>,
) -> Result<Json<MigNodeInfo>, ApiError> {
    admin_only(&caller, &format!("change node {name}'s MIG layout"))?;
    if change.frozen.is_some() == change.layout.is_some() {
        return Err(ApiError(
            StatusCode::BAD_REQUEST,
            "give either \"frozen\" or \"layout\"".into(),
        ));
    }
    ctl.change_mig(&name, &change, &caller.user).await?;
    node_mig(State(ctl), Path(name)).await
}

/// Every node, with its GPU instances.
#[utoipa::path(get, path = "/api/v1/nodes", tag = "nodes",
    responses((status = 200, description = "The nodes", body = NodeList)))]
pub(super) async fn list_nodes(State(ctl): Ctl) -> Json<NodeList> {
    let c = ctl.lock();
    Json(NodeList {
        nodes: c.nodes().map(NodeInfo::new).collect(),
    })
}

/// Cluster-wide GPU use over the last hour, and now.
#[utoipa::path(get, path = "/api/v1/utilization", tag = "nodes",
    responses((status = 200, description = "Samples, oldest first", body = Utilization)))]
pub(super) async fn utilization(State(ctl): Ctl) -> Json<Utilization> {
    let mut samples = ctl.utilization();
    samples.push(ctl.sample(unix_now()));
    Json(Utilization {
        interval_s: crate::controller::UTIL_INTERVAL,
        samples,
    })
}

/// Every GPU instance of every node, with what it holds.
#[utoipa::path(get, path = "/api/v1/instances", tag = "nodes",
    responses((status = 200, description = "The instances", body = InstanceList)))]
pub(super) async fn list_instances(State(ctl): Ctl) -> Json<InstanceList> {
    let c = ctl.lock();
    let instances: Vec<InstanceInfo> = c
        .nodes()
        .flat_map(|n| {
            n.instances
                .iter()
                .map(|s| InstanceInfo::new(&n.name, s).with_drain_end(c.drain_expected_end(s)))
                .collect::<Vec<_>>()
        })
        .collect();
    Json(InstanceList { instances })
}

/// Shared tasks' GPU memory reservations, as the nodes reported them.
#[utoipa::path(get, path = "/api/v1/tasks", tag = "nodes",
    params(TaskQuery),
    responses(
        (status = 200, description = "The reservations", body = TaskList),
        (status = 500, description = "The store cannot be read", body = ErrorBody)))]
pub(super) async fn list_tasks(
    State(ctl): Ctl,
    Query(q): Query<TaskQuery>,
) -> Result<Json<TaskList>, ApiError> {
    let rows = ctl.store.task_records(q.job, None).await.map_err(|e| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot read task records: {e}"),
        )
    })?;
    let tasks = rows
        .into_iter()
        .map(|(node, record)| TaskRow { record, node })
        .collect();
    Ok(Json(TaskList { tasks }))
}
