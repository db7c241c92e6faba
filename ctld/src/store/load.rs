//! What the controller holds at start, read from the store, and the
//! columns that are lists or JSON.

use gsched_core::cluster::{AdminState, InstanceSlot, Node, NodeAdmin};
use gsched_core::gpu::{Instance, Mps, MpsState};

use super::sql::{ConnRef, Record};
use super::{history, Loaded, StoreError};

pub(super) fn json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).expect("serializable")
}

pub(super) async fn load(
    mut c: ConnRef<'_>,
    keep_finished_since: Option<i64>,
) -> Result<Loaded, StoreError> {
    let jobs = history::held_jobs(c.reborrow(), keep_finished_since).await?;
    let max_job_id = history::max_job_id(c.reborrow()).await?;
    let past_runs = history::past_runs(c.reborrow()).await?;
    let mut nodes = Vec::new();
    for row in c
        .query("SELECT * FROM nodes ORDER BY name")
        .fetch_all(c.reborrow())
        .await?
    {
        let name: String = row.get("name")?;
        let mut instances = Vec::new();
        for r in c
            .query("SELECT * FROM gpu_instances WHERE node = $1 ORDER BY gpu_index, uuid")
            .bind(&name)
            .fetch_all(c.reborrow())
            .await?
        {
            instances.push(InstanceSlot::new(Instance {
                uuid: r.get("uuid")?,
                gpu_index: r.int("gpu_index")? as u32,
                gpu_uuid: r.get("gpu_uuid")?,
                model: r.get("model")?,
                profile: r.get("profile")?,
                memory_mib: r.int("memory_mib")? as u64,
                sms: r.int("sms")? as u32,
                compute_slices: r.int("compute_slices")? as u32,
                // Not kept: the node reports it again when it registers.
                link_domain: None,
                mig_start: None,
                mps: mps_of(&r)?,
            }));
        }
        let admin = match row.get::<Option<String>>("admin_state")? {
            None => None,
            Some(state) => Some(NodeAdmin {
                // A state this version does not know holds the node as a
                // drain would.
                state: AdminState::parse(&state).unwrap_or(AdminState::Drain),
                reason: row
                    .get::<Option<String>>("admin_reason")?
                    .unwrap_or_default(),
                by: row.get::<Option<String>>("admin_by")?.unwrap_or_default(),
                since: row.opt_int("admin_since")?.unwrap_or(0),
            }),
        };
        nodes.push(Node {
            name,
            admin,
            url: row.get("url")?,
            cpus: row.int("cpus")? as u32,
            memory_mib: row.int("memory_mib")? as u64,
            // Not stored: the node's next registration says it.
            tmp_disk_mib: 0,
            worker_limit: row.int("worker_limit")? as u32,
            up: row.get("up")?,
            instances,
            running: Default::default(),
            taken: (0, 0),
            suspended: Default::default(),
            shared: Default::default(),
            unconfirmed: false,
            instance_id: String::new(),
            drain_sent: None,
            drain_seq: 0,
            reshape_gpus: Default::default(),
            mig_frozen: row
                .get::<Option<String>>("mig_frozen")?
                .map(|s| s.split(',').filter_map(|g| g.trim().parse().ok()).collect())
                .unwrap_or_default(),
            waiting_tasks: Vec::new(),
            waiting_reports: 0,
            waiting_jobs: Default::default(),
            reshape_keep: Default::default(),
            shared_room: None,
            mem_available_mib: None,
        });
    }
    let accounts = match c
        .query("SELECT data FROM accounts WHERE id = 1")
        .fetch_optional(c.reborrow())
        .await?
    {
        Some(row) => {
            serde_json::from_str(row.get::<&str>("data")?).map_err(|e| StoreError::Corrupt {
                id: 0,
                why: format!("the accounts do not read: {e}"),
            })?
        }
        None => Default::default(),
    };
    Ok(Loaded {
        jobs,
        nodes,
        max_job_id,
        past_runs,
        accounts,
    })
}

/// The `gpu_instance` column of a job: the UUIDs of its instances, joined
/// by commas (UUIDs have none); NULL for none.
pub(super) fn instances_column(uuids: &[String]) -> Option<String> {
    (!uuids.is_empty()).then(|| uuids.join(","))
}

/// The instances a job's `gpu_instance` column names.
pub(crate) fn instances_of_column(column: Option<String>) -> Vec<String> {
    column
        .map(|c| {
            c.split(',')
                .filter(|u| !u.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// The MPS columns of a `gpu_instances` row.
fn mps_of(r: &Record) -> Result<Option<Mps>, sqlx::Error> {
    let Some(pipe_dir) = r.get::<Option<String>>("mps_pipe_dir")? else {
        return Ok(None);
    };
    let state = match r.get::<Option<String>>("mps_state")?.as_deref() {
        Some("running") => MpsState::Running,
        _ => MpsState::Down,
    };
    Ok(Some(Mps {
        pipe_dir,
        log_dir: r.get::<Option<String>>("mps_log_dir")?.unwrap_or_default(),
        state,
    }))
}
