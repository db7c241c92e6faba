//! gsched's jobs, nodes and partitions in slurmrestd's JSON shapes
//! (data parser v0.0.41 to v0.0.44 agree on every field written here).

use gsched_core::cluster::{InstanceSlot, Node};
use gsched_core::outcome::signal_name;
use gsched_core::wire::JobInfo;
use gsched_core::JobState;
use serde::Serialize;
use utoipa::ToSchema;

/// slurmrestd's number: `{"set", "infinite", "number"}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
pub struct SlurmNumber {
    pub set: bool,
    pub infinite: bool,
    pub number: i64,
}

/// A number that may be unset (`None`).
pub fn no_val(n: Option<i64>) -> SlurmNumber {
    match n {
        Some(number) => SlurmNumber {
            set: true,
            infinite: false,
            number,
        },
        None => SlurmNumber {
            set: false,
            infinite: false,
            number: 0,
        },
    }
}

/// A limit that may be unlimited (`None`): infinite rather than unset.
pub fn limit(n: Option<i64>) -> SlurmNumber {
    match n {
        Some(n) => no_val(Some(n)),
        None => SlurmNumber {
            set: true,
            infinite: true,
            number: 0,
        },
    }
}

/// The `meta` block of every answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct Meta {
    plugin: MetaPlugin,
    client: MetaClient,
    command: Vec<String>,
    slurm: MetaSlurm,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct MetaPlugin {
    r#type: String,
    name: String,
    data_parser: String,
    accounting_storage: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct MetaClient {
    source: String,
    user: String,
    group: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct MetaSlurm {
    version: SlurmVersion,
    release: String,
    cluster: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct SlurmVersion {
    major: String,
    minor: String,
    micro: String,
}

pub fn meta(version: &str, cluster: &str, user: &str) -> Meta {
    Meta {
        plugin: MetaPlugin {
            r#type: "openapi/slurmctld".into(),
            name: "Slurm OpenAPI slurmctld".into(),
            data_parser: format!("data_parser/{version}"),
            accounting_storage: String::new(),
        },
        client: MetaClient {
            source: "gsched".into(),
            user: user.into(),
            group: String::new(),
        },
        command: Vec::new(),
        slurm: MetaSlurm {
            version: SlurmVersion {
                major: "25".into(),
                minor: "11".into(),
                micro: "0".into(),
            },
            release: format!("gsched {}", env!("CARGO_PKG_VERSION")),
            cluster: cluster.into(),
        },
    }
}

/// One entry of `errors`.
#[derive(Debug, Serialize, ToSchema)]
pub struct SlurmErrorEntry {
    pub error: String,
    pub error_number: i64,
    pub description: String,
    pub source: String,
}

/// One entry of `warnings`.
#[derive(Debug, Serialize, ToSchema)]
pub struct SlurmWarning {
    pub description: String,
    pub source: String,
}

/// What every answer carries beside its own fields.
#[derive(Debug, Serialize, ToSchema)]
pub struct Envelope {
    pub meta: Meta,
    pub errors: Vec<SlurmErrorEntry>,
    pub warnings: Vec<SlurmWarning>,
}

/// An answer with nothing but the envelope: every error.
#[derive(Debug, Serialize, ToSchema)]
pub struct SlurmResponse {
    #[serde(flatten)]
    pub envelope: Envelope,
}

/// How a job ended, as slurmrestd's `exit_code`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ExitCode {
    /// `PENDING`, `SUCCESS`, `ERROR` or `SIGNALED`.
    status: Vec<String>,
    return_code: SlurmNumber,
    signal: ExitSignal,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ExitSignal {
    id: SlurmNumber,
    name: String,
}

fn exit_code(j: &JobInfo) -> ExitCode {
    let (status, rc, sig) = match (j.job_state, j.exit_code, j.exit_signal) {
        (JobState::Pending, ..) | (JobState::Running, None, None) => ("PENDING", None, None),
        (_, _, Some(s)) => ("SIGNALED", j.exit_code, Some(s)),
        (_, Some(0), None) => ("SUCCESS", Some(0), None),
        (_, Some(c), None) => ("ERROR", Some(c), None),
        (_, None, None) => ("PENDING", None, None),
    };
    ExitCode {
        status: vec![status.into()],
        return_code: no_val(rc.map(i64::from)),
        signal: ExitSignal {
            id: no_val(sig.map(i64::from)),
            name: sig.map(signal_name).unwrap_or_default(),
        },
    }
}

/// `gpu:PROFILE:N` for the job's GPU request.
fn gpu_tres(j: &JobInfo) -> String {
    if j.isolated {
        j.gpu_request.tres()
    } else {
        String::new()
    }
}

/// One job as slurmrestd's `job_info`: the fields gsched fills (data
/// parsers v0.0.41 to v0.0.44 agree on each).
#[derive(Debug, Serialize, ToSchema)]
pub struct SlurmJob {
    account: String,
    array_job_id: SlurmNumber,
    array_task_id: SlurmNumber,
    array_max_tasks: SlurmNumber,
    batch_flag: bool,
    batch_host: String,
    cluster: String,
    command: String,
    comment: String,
    cpus: SlurmNumber,
    cpus_per_task: SlurmNumber,
    current_working_directory: String,
    end_time: SlurmNumber,
    exit_code: ExitCode,
    flags: Vec<String>,
    gres_detail: Vec<String>,
    group_id: u32,
    group_name: String,
    hold: bool,
    job_id: u64,
    /// The state, then its flags (`["RUNNING", "CONFIGURING"]`).
    job_state: Vec<String>,
    name: String,
    node_count: SlurmNumber,
    nodes: String,
    partition: String,
    priority: SlurmNumber,
    qos: String,
    requeue: bool,
    restart_cnt: u32,
    standard_error: String,
    standard_input: String,
    standard_output: String,
    start_time: SlurmNumber,
    state_description: String,
    state_reason: String,
    submit_time: SlurmNumber,
    tasks: SlurmNumber,
    time_limit: SlurmNumber,
    tres_per_job: String,
    tres_req_str: String,
    tres_alloc_str: String,
    user_id: u32,
    user_name: String,
    wckey: String,
}

/// One job as slurmrestd's `job_info`.
/// `profile` is the gres type of the instance the job holds, if known.
pub fn job(j: &JobInfo, cluster: &str, profile: Option<&str>) -> SlurmJob {
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
    // Slurm lists the state and its flags: CONFIGURING is a flag of
    // RUNNING; SUSPENDED is a state of its own.
    let job_state = if j.state_name() == "CONFIGURING" {
        vec!["RUNNING".to_string(), "CONFIGURING".to_string()]
    } else if j.completing {
        vec!["CANCELLED".to_string(), "COMPLETING".to_string()]
    } else {
        vec![j.state_name().to_string()]
    };
    SlurmJob {
        account: s.account.clone().unwrap_or_default(),
        array_job_id: no_val(array_job_id.or(Some(0))),
        array_task_id: no_val(array_task_id),
        array_max_tasks: no_val(array_max.or(Some(0))),
        batch_flag: true,
        batch_host: j.nodes.clone(),
        cluster: cluster.to_string(),
        command: j.name.clone(),
        comment: s.comment.clone().unwrap_or_default(),
        cpus: no_val(Some(i64::from(
            s.cpus_per_task.unwrap_or(1) * s.ntasks.unwrap_or(1),
        ))),
        cpus_per_task: no_val(s.cpus_per_task.map(i64::from)),
        current_working_directory: j.current_working_directory.clone(),
        end_time: no_val(j.end_time.or(Some(0))),
        exit_code: exit_code(j),
        flags: Vec::new(),
        gres_detail,
        group_id: j.group_id,
        group_name: crate::auth::group_name(j.group_id),
        hold: j.state_reason.as_deref() == Some("JobHeldUser"),
        job_id: j.job_id,
        job_state,
        name: j.name.clone(),
        node_count: no_val(Some(i64::from(j.num_nodes))),
        nodes: j.nodes.clone(),
        partition: j.partition.clone(),
        priority: no_val(Some(j.priority.map_or(1, |p| p.value as i64))),
        qos: s.qos.clone().unwrap_or_default(),
        requeue: j.requeue,
        restart_cnt: j.restart_cnt,
        standard_error: j.standard_error.clone(),
        standard_input: "/dev/null".into(),
        standard_output: j.standard_output.clone(),
        start_time: no_val(j.start_time.or(Some(0))),
        state_description: String::new(),
        state_reason: j.state_reason.clone().unwrap_or_else(|| "None".into()),
        submit_time: no_val(Some(j.submit_time)),
        tasks: no_val(Some(i64::from(s.ntasks.unwrap_or(1)))),
        time_limit: limit(j.time_limit.map(|m| m as i64)),
        tres_per_job: tres,
        tres_alloc_str: if j.job_state == JobState::Running {
            tres_req.clone()
        } else {
            String::new()
        },
        tres_req_str: tres_req,
        user_id: j.user_id,
        user_name: j.user_name.clone(),
        wckey: s.wckey.clone().unwrap_or_default(),
    }
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
#[derive(Debug, Serialize, ToSchema)]
pub struct SlurmNode {
    name: String,
    hostname: String,
    address: String,
    cluster_name: String,
    state: Vec<String>,
    cpus: u32,
    alloc_cpus: u32,
    alloc_idle_cpus: u32,
    real_memory: u64,
    /// MiB of temporary disk (`/tmp`).
    tmp_disk: u64,
    alloc_memory: u64,
    free_mem: SlurmNumber,
    partitions: Vec<String>,
    /// `gpu:TYPE:N(IDX:a-b),...`
    gres: String,
    gres_used: String,
    gres_drained: String,
    tres: String,
    tres_used: String,
    boot_time: SlurmNumber,
    last_busy: SlurmNumber,
    reason: String,
    version: String,
    features: Vec<String>,
    active_features: Vec<String>,
}

pub fn node(n: &Node, partitions: &[String], cluster: &str) -> SlurmNode {
    let used = n.running.len() as u32;
    let host = n
        .url
        .split("://")
        .nth(1)
        .and_then(|h| h.rsplit_once(':').map(|(h, _)| h.to_string()))
        .unwrap_or_default();
    let gpus = n.instances.len();
    let alloc_cpus = used.min(n.cpus);
    SlurmNode {
        name: n.name.clone(),
        hostname: n.name.clone(),
        address: host,
        cluster_name: cluster.to_string(),
        state: vec![n.state_name().to_string()],
        cpus: n.cpus,
        alloc_cpus,
        alloc_idle_cpus: n.cpus - alloc_cpus,
        real_memory: n.memory_mib,
        tmp_disk: n.tmp_disk_mib,
        alloc_memory: 0,
        free_mem: no_val(None),
        partitions: partitions.to_vec(),
        gres: gres(n, |_| true),
        gres_used: gres(n, in_use),
        gres_drained: "N/A".into(),
        tres: format!(
            "cpu={},mem={}M,billing={},gres/gpu={gpus}",
            n.cpus, n.memory_mib, n.cpus
        ),
        tres_used: format!(
            "cpu={alloc_cpus},gres/gpu={}",
            n.instances.iter().filter(|s| in_use(s)).count()
        ),
        boot_time: no_val(None),
        last_busy: no_val(None),
        reason: String::new(),
        version: env!("CARGO_PKG_VERSION").into(),
        features: Vec::new(),
        active_features: Vec::new(),
    }
}

/// One partition as slurmrestd's `partition_info`: every node serves it.
#[derive(Debug, Serialize, ToSchema)]
pub struct SlurmPartition {
    name: String,
    cluster: String,
    nodes: PartitionNodes,
    cpus: PartitionCpus,
    partition: PartitionState,
    defaults: PartitionDefaults,
    maximums: PartitionMaximums,
    /// `["DEFAULT"]` for the default partition.
    flags: Vec<String>,
    tres: PartitionTres,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct PartitionNodes {
    configured: String,
    total: usize,
    allowed_allocation: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct PartitionCpus {
    total: u32,
    task_binding: u32,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct PartitionState {
    state: Vec<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct PartitionDefaults {
    time: SlurmNumber,
    job: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct PartitionMaximums {
    time: SlurmNumber,
    nodes: SlurmNumber,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct PartitionTres {
    configured: String,
    billing_weights: String,
}

pub fn partition(name: &str, is_default: bool, nodes: &[&Node], cluster: &str) -> SlurmPartition {
    let names: Vec<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
    let cpus: u32 = nodes.iter().map(|n| n.cpus).sum();
    SlurmPartition {
        name: name.to_string(),
        cluster: cluster.to_string(),
        nodes: PartitionNodes {
            configured: names.join(","),
            total: nodes.len(),
            allowed_allocation: String::new(),
        },
        cpus: PartitionCpus {
            total: cpus,
            task_binding: 0,
        },
        partition: PartitionState {
            state: vec!["UP".into()],
        },
        defaults: PartitionDefaults {
            time: limit(None),
            job: String::new(),
        },
        maximums: PartitionMaximums {
            time: limit(None),
            nodes: limit(None),
        },
        flags: if is_default {
            vec!["DEFAULT".into()]
        } else {
            Vec::new()
        },
        tres: PartitionTres {
            configured: format!("cpu={cpus},node={}", nodes.len()),
            billing_weights: String::new(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_ranges() {
        assert_eq!(no_val(Some(5)).number, 5);
        assert!(!no_val(None).set);
        assert!(limit(None).infinite);
        assert_eq!(ranges(&[0, 1, 2, 5, 7, 8]), "0-2,5,7-8");
        assert_eq!(ranges(&[]), "");
    }
}
