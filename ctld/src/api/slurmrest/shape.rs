//! gsched's jobs, nodes and partitions in slurmrestd's JSON shapes
//! (data parser v0.0.41 to v0.0.44 agree on every field written here).

use gsched_core::cluster::{InstanceSlot, Node};
use gsched_core::outcome::signal_name;
use gsched_core::wire::JobInfo;
use gsched_core::JobState;
use serde_json::{json, Value};

/// slurmrestd's number: `{"set", "infinite", "number"}`.
pub fn no_val(n: Option<i64>) -> Value {
    match n {
        Some(n) => json!({"set": true, "infinite": false, "number": n}),
        None => json!({"set": false, "infinite": false, "number": 0}),
    }
}

/// A limit that may be unlimited (`None`): infinite rather than unset.
pub fn limit(n: Option<i64>) -> Value {
    match n {
        Some(n) => no_val(Some(n)),
        None => json!({"set": true, "infinite": true, "number": 0}),
    }
}

/// The `meta` block of every answer.
pub fn meta(version: &str, cluster: &str, user: &str) -> Value {
    json!({
        "plugin": {
            "type": "openapi/slurmctld",
            "name": "Slurm OpenAPI slurmctld",
            "data_parser": format!("data_parser/{version}"),
            "accounting_storage": "",
        },
        "client": {"source": "gsched", "user": user, "group": ""},
        "command": [],
        "slurm": {
            "version": {"major": "25", "minor": "11", "micro": "0"},
            "release": format!("gsched {}", env!("CARGO_PKG_VERSION")),
            "cluster": cluster,
        },
    })
}

fn exit_code(j: &JobInfo) -> Value {
    let (status, rc, sig) = match (j.job_state, j.exit_code, j.exit_signal) {
        (JobState::Pending, ..) | (JobState::Running, None, None) => ("PENDING", None, None),
        (_, _, Some(s)) => ("SIGNALED", j.exit_code, Some(s)),
        (_, Some(0), None) => ("SUCCESS", Some(0), None),
        (_, Some(c), None) => ("ERROR", Some(c), None),
        (_, None, None) => ("PENDING", None, None),
    };
    json!({
        "status": [status],
        "return_code": no_val(rc.map(i64::from)),
        "signal": {
            "id": no_val(sig.map(i64::from)),
            "name": sig.map(signal_name).unwrap_or_default(),
        },
    })
}

/// `gpu:PROFILE:N` for the job's GPU request.
fn gpu_tres(j: &JobInfo) -> String {
    if j.isolated {
        j.gpu_request.tres()
    } else {
        String::new()
    }
}

/// One job as slurmrestd's `job_info`.
/// `profile` is the gres type of the instance the job holds, if known.
pub fn job(j: &JobInfo, cluster: &str, profile: Option<&str>) -> Value {
    let (array_job_id, array_task_id, array_max) = match &j.array {
        Some(a) => (
            Some(a.array_job_id as i64),
            Some(a.task_id as i64),
            a.max_running.map(i64::from),
        ),
        None => (None, None, None),
    };
    let gres_detail: Vec<String> = Some(j.gpu_instances.len())
        .filter(|n| *n > 0 && j.job_state == JobState::Running)
        .map(|n| vec![format!("gpu:{}:{n}", profile.unwrap_or("gpu"))])
        .unwrap_or_default();
    let tres = gpu_tres(j);
    let tres_req = if tres.is_empty() {
        "cpu=1,node=1".to_string()
    } else {
        format!("cpu=1,node=1,{tres}")
    };
    let s = &j.slurm;
    json!({
        "account": s.account.clone().unwrap_or_default(),
        "array_job_id": no_val(array_job_id.or(Some(0))),
        "array_task_id": no_val(array_task_id),
        "array_max_tasks": no_val(array_max.or(Some(0))),
        "batch_flag": true,
        "batch_host": j.nodes,
        "cluster": cluster,
        "command": j.name,
        "comment": s.comment.clone().unwrap_or_default(),
        "cpus": no_val(Some(i64::from(s.cpus_per_task.unwrap_or(1) * s.ntasks.unwrap_or(1)))),
        "cpus_per_task": no_val(s.cpus_per_task.map(i64::from)),
        "current_working_directory": j.current_working_directory,
        "end_time": no_val(j.end_time.or(Some(0))),
        "exit_code": exit_code(j),
        "flags": [],
        "gres_detail": gres_detail,
        "group_id": j.group_id,
        "group_name": crate::auth::group_name(j.group_id),
        "hold": j.state_reason.as_deref() == Some("JobHeldUser"),
        "job_id": j.job_id,
        // Slurm lists the state and its flags: CONFIGURING is a flag of
        // RUNNING; SUSPENDED is a state of its own.
        "job_state": if j.state_name() == "CONFIGURING" {
            vec!["RUNNING", "CONFIGURING"]
        } else {
            vec![j.state_name()]
        },
        "name": j.name,
        "node_count": no_val(Some(i64::from(j.num_nodes))),
        "nodes": j.nodes,
        "partition": j.partition,
        "priority": no_val(Some(j.priority.map_or(1, |p| p.value as i64))),
        "qos": s.qos.clone().unwrap_or_default(),
        "requeue": j.requeue,
        "restart_cnt": j.restart_cnt,
        "standard_error": j.standard_error,
        "standard_input": "/dev/null",
        "standard_output": j.standard_output,
        "start_time": no_val(j.start_time.or(Some(0))),
        "state_description": "",
        "state_reason": j.state_reason.clone().unwrap_or_else(|| "None".into()),
        "submit_time": no_val(Some(j.submit_time)),
        "tasks": no_val(Some(i64::from(s.ntasks.unwrap_or(1)))),
        "time_limit": limit(j.time_limit.map(|m| m as i64)),
        "tres_per_job": tres,
        "tres_req_str": tres_req,
        "tres_alloc_str": if j.job_state == JobState::Running { tres_req.clone() } else { String::new() },
        "user_id": j.user_id,
        "user_name": j.user_name,
        "wckey": s.wckey.clone().unwrap_or_default(),
    })
}

/// `a-b` ranges of sorted indexes: `0-2,5`.
pub fn ranges(idx: &[usize]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < idx.len() {
        let mut j = i;
        while j + 1 < idx.len() && idx[j + 1] == idx[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            idx[i].to_string()
        } else {
            format!("{}-{}", idx[i], idx[j])
        });
        i = j + 1;
    }
    out.join(",")
}

/// The gres name of an instance: its MIG profile, or the GPU model for a
/// whole GPU (`h100_80gb`).
pub fn gres_type(s: &InstanceSlot) -> String {
    match &s.instance.profile {
        Some(p) => p.clone(),
        None => s
            .instance
            .model
            .to_ascii_lowercase()
            .replace([' ', '-'], "_"),
    }
}

/// Whether an instance is in use: held by an isolated job or running
/// shared tasks.
pub fn in_use(s: &InstanceSlot) -> bool {
    s.isolated_owner.is_some() || s.active_tasks > 0
}

/// `gpu:TYPE:N(IDX:a-b),...` over the node's instances that `keep`, grouped
/// by type in order of first appearance; indexes are the instances' places
/// on the node.
pub fn gres(n: &Node, keep: impl Fn(&InstanceSlot) -> bool) -> String {
    let mut groups: Vec<(String, Vec<usize>)> = Vec::new();
    for (i, s) in n.instances.iter().enumerate() {
        if !keep(s) {
            continue;
        }
        let t = gres_type(s);
        match groups.iter_mut().find(|(g, _)| *g == t) {
            Some((_, v)) => v.push(i),
            None => groups.push((t, vec![i])),
        }
    }
    groups
        .iter()
        .map(|(t, v)| format!("gpu:{t}:{}(IDX:{})", v.len(), ranges(v)))
        .collect::<Vec<_>>()
        .join(",")
}

/// One node as slurmrestd's `node`.
pub fn node(n: &Node, partitions: &[String], cluster: &str) -> Value {
    let used = n.running.len() as u32;
    let state = n.state_name();
    let host = n
        .url
        .split("://")
        .nth(1)
        .and_then(|h| h.rsplit_once(':').map(|(h, _)| h.to_string()))
        .unwrap_or_default();
    let gpus = n.instances.len();
    let alloc_cpus = used.min(n.cpus);
    json!({
        "name": n.name,
        "hostname": n.name,
        "address": host,
        "cluster_name": cluster,
        "state": [state],
        "cpus": n.cpus,
        "alloc_cpus": alloc_cpus,
        "alloc_idle_cpus": n.cpus - alloc_cpus,
        "real_memory": n.memory_mib,
        "alloc_memory": 0,
        "free_mem": no_val(None),
        "partitions": partitions,
        "gres": gres(n, |_| true),
        "gres_used": gres(n, in_use),
        "gres_drained": "N/A",
        "tres": format!("cpu={},mem={}M,billing={},gres/gpu={gpus}", n.cpus, n.memory_mib, n.cpus),
        "tres_used": format!("cpu={alloc_cpus},gres/gpu={}", n.instances.iter().filter(|s| in_use(s)).count()),
        "boot_time": no_val(None),
        "last_busy": no_val(None),
        "reason": "",
        "version": env!("CARGO_PKG_VERSION"),
        "features": [],
        "active_features": [],
    })
}

/// One partition as slurmrestd's `partition_info`: every node serves it.
pub fn partition(name: &str, is_default: bool, nodes: &[&Node], cluster: &str) -> Value {
    let names: Vec<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
    let cpus: u32 = nodes.iter().map(|n| n.cpus).sum();
    json!({
        "name": name,
        "cluster": cluster,
        "nodes": {"configured": names.join(","), "total": nodes.len(), "allowed_allocation": ""},
        "cpus": {"total": cpus, "task_binding": 0},
        "partition": {"state": ["UP"]},
        "defaults": {"time": limit(None), "job": ""},
        "maximums": {"time": limit(None), "nodes": limit(None)},
        "flags": if is_default { vec!["DEFAULT"] } else { vec![] },
        "tres": {"configured": format!("cpu={cpus},node={}", nodes.len()), "billing_weights": ""},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_ranges() {
        assert_eq!(no_val(Some(5))["number"], 5);
        assert_eq!(no_val(None)["set"], false);
        assert_eq!(limit(None)["infinite"], true);
        assert_eq!(ranges(&[0, 1, 2, 5, 7, 8]), "0-2,5,7-8");
        assert_eq!(ranges(&[]), "");
    }
}
