//! Each kind of [`Write`] as the rows it changes.

use gsched_core::cluster::Node;
use gsched_core::job::{Job, JobId};
use gsched_core::probe::TaskRecord;

use super::sql::ConnRef;
use super::{instances_column, json, JobRuntime, Write};

/// Applies one write inside the writer's transaction.
pub(super) async fn apply(c: &mut ConnRef<'_>, w: &Write) -> Result<(), sqlx::Error> {
    match w {
        Write::NewJob(job) => insert_job(c, job).await,
        Write::JobSpec(job) => update_spec(c, job).await,
        Write::JobState(job) => update_state(c, job).await,
        Write::Accounts(data) => store_accounts(c, data).await,
        Write::Node(node) => upsert_node(c, node).await,
        Write::Task { node, record } => upsert_task(c, node, record).await,
        Write::Event {
            time,
            job_id,
            node,
            kind,
            detail,
        } => append_event(c, *time, *job_id, node.as_deref(), kind, detail.as_deref()).await,
    }
}

/// Writes a newly submitted job: the full row.
async fn insert_job(c: &mut ConnRef<'_>, job: &Job) -> Result<(), sqlx::Error> {
    let s = &job.spec;
    let mut rest = s.clone();
    rest.script = String::new();
    rest.environment.clear();
    c.query(
        "INSERT INTO jobs (id, name, user_name, uid, gid, working_dir, script, environment,
           isolated, gpu_request, time_limit, partition, spec, state, reason, exit_code,
           exit_signal, submit_time, start_time, end_time, node, gpu_instance, gpu_mem_peak, restarts,
           held)
         VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17,$18,$19,$20,$21,$22,$23,$24,$25)",
    )
    .bind(job.id as i64)
    .bind(&s.name)
    .bind(&s.user_name)
    .bind(s.uid as i64)
    .bind(s.gid as i64)
    .bind(&s.working_dir)
    .bind(&s.script)
    .bind(json(&s.environment))
    .bind(s.isolated)
    .bind(json(&s.gpu))
    .bind(s.time_limit.map(|t| t as i64))
    .bind(&s.partition)
    .bind(json(&rest))
    .bind(job.state.as_str())
    .bind(&job.reason)
    .bind(job.exit_code.map(i64::from))
    .bind(job.exit_signal.map(i64::from))
    .bind(job.submit_time)
    .bind(job.start_time)
    .bind(job.end_time)
    .bind(&job.node)
    .bind(instances_column(&job.gpu_instances))
    .bind(job.gpu_mem_peak.map(|m| m as i64))
    .bind(job.restarts as i64)
    .bind(job.held)
    .execute(c.reborrow())
    .await?;
    Ok(())
}

/// Writes a pending job's spec (the columns that may change).
async fn update_spec(c: &mut ConnRef<'_>, job: &Job) -> Result<(), sqlx::Error> {
    let s = &job.spec;
    let mut rest = s.clone();
    rest.script = String::new();
    rest.environment.clear();
    c.query("UPDATE jobs SET name = $1, time_limit = $2, partition = $3, spec = $4 WHERE id = $5")
        .bind(&s.name)
        .bind(s.time_limit.map(|t| t as i64))
        .bind(&s.partition)
        .bind(json(&rest))
        .bind(job.id as i64)
        .execute(c.reborrow())
        .await?;
    Ok(())
}

/// Writes a job's state, times and placement.
async fn update_state(c: &mut ConnRef<'_>, job: &JobRuntime) -> Result<(), sqlx::Error> {
    c.query(
        "UPDATE jobs SET state = $1, reason = $2, exit_code = $3, exit_signal = $4, start_time = $5,
           end_time = $6, node = $7, gpu_instance = $8, gpu_mem_peak = $9, restarts = $10, held = $11, steps = $12,
           cancelled_by = $13, run = $14, launching = $15, usage = $16, batch_usage = $17, sisters = $18,
           suspension = $19, grace = $20, gpu_fault_requeues = $21
         WHERE id = $22",
    )
    .bind(job.state.as_str())
    .bind(&job.reason)
    .bind(job.exit_code.map(i64::from))
    .bind(job.exit_signal.map(i64::from))
    .bind(job.start_time)
    .bind(job.end_time)
    .bind(&job.node)
    .bind(instances_column(&job.gpu_instances))
    .bind(job.gpu_mem_peak.map(|m| m as i64))
    .bind(job.restarts as i64)
    .bind(job.held)
    .bind(json(&job.steps))
    .bind(job.cancelled_by.map(i64::from))
    .bind(i64::from(job.run))
    .bind(job.launching)
    .bind(job.usage.as_ref().map(json))
    .bind(job.batch_usage.as_ref().map(json))
    .bind((!job.sisters.is_empty()).then(|| json(&job.sisters)))
    .bind(job.suspension.as_ref().map(json))
    .bind(job.grace.as_ref().map(json))
    .bind(i64::from(job.gpu_fault_requeues))
    .bind(job.id as i64)
    .execute(c.reborrow())
    .await?;
    Ok(())
}

/// Writes the accounts, associations and usage.
async fn store_accounts(c: &mut ConnRef<'_>, data: &str) -> Result<(), sqlx::Error> {
    c.query(
        "INSERT INTO accounts (id, data) VALUES (1, $1)
         ON CONFLICT (id) DO UPDATE SET data = excluded.data",
    )
    .bind(data)
    .execute(c.reborrow())
    .await?;
    Ok(())
}

/// Writes a node and its instances.
async fn upsert_node(c: &mut ConnRef<'_>, node: &Node) -> Result<(), sqlx::Error> {
    c.query(
        "INSERT INTO nodes (name, url, cpus, memory_mib, worker_limit, up, updated_at,
           admin_state, admin_reason, admin_by, admin_since, mig_frozen)
         VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12)
         ON CONFLICT(name) DO UPDATE SET url = excluded.url, cpus = excluded.cpus,
           memory_mib = excluded.memory_mib, worker_limit = excluded.worker_limit,
           up = excluded.up, updated_at = excluded.updated_at,
           admin_state = excluded.admin_state, admin_reason = excluded.admin_reason,
           admin_by = excluded.admin_by, admin_since = excluded.admin_since,
           mig_frozen = excluded.mig_frozen",
    )
    .bind(&node.name)
    .bind(&node.url)
    .bind(node.cpus as i64)
    .bind(node.memory_mib as i64)
    .bind(node.worker_limit as i64)
    .bind(node.up)
    .bind(gsched_daemon::unix_now())
    .bind(node.admin.as_ref().map(|a| a.state.as_str()))
    .bind(node.admin.as_ref().map(|a| &a.reason))
    .bind(node.admin.as_ref().map(|a| &a.by))
    .bind(node.admin.as_ref().map(|a| a.since))
    .bind((!node.mig_frozen.is_empty()).then(|| {
        node.mig_frozen
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(",")
    }))
    .execute(c.reborrow())
    .await?;
    c.query("DELETE FROM gpu_instances WHERE node = $1")
        .bind(&node.name)
        .execute(c.reborrow())
        .await?;
    for s in &node.instances {
        let i = &s.instance;
        c.query(
            "INSERT INTO gpu_instances (uuid, node, gpu_index, gpu_uuid, model, profile,
               memory_mib, sms, compute_slices, mps_pipe_dir, mps_log_dir, mps_state)
             VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12)
             ON CONFLICT (uuid) DO UPDATE SET node = excluded.node,
               gpu_index = excluded.gpu_index, gpu_uuid = excluded.gpu_uuid,
               model = excluded.model, profile = excluded.profile,
               memory_mib = excluded.memory_mib, sms = excluded.sms,
               compute_slices = excluded.compute_slices, mps_pipe_dir = excluded.mps_pipe_dir,
               mps_log_dir = excluded.mps_log_dir, mps_state = excluded.mps_state",
        )
        .bind(&i.uuid)
        .bind(&node.name)
        .bind(i.gpu_index as i64)
        .bind(&i.gpu_uuid)
        .bind(&i.model)
        .bind(&i.profile)
        .bind(i.memory_mib as i64)
        .bind(i.sms as i64)
        .bind(i.compute_slices as i64)
        .bind(i.mps.as_ref().map(|m| &m.pipe_dir))
        .bind(i.mps.as_ref().map(|m| &m.log_dir))
        .bind(i.mps.as_ref().map(|m| m.state.as_str()))
        .execute(c.reborrow())
        .await?;
    }
    Ok(())
}

/// Writes a task reservation (by job and task).
async fn upsert_task(c: &mut ConnRef<'_>, node: &str, r: &TaskRecord) -> Result<(), sqlx::Error> {
    c.query(
        "INSERT INTO task_reservations (job_id, task, instance, mem_bytes, warps, begin_time, end_time, node, pid, gpu_share)
         VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10)
         ON CONFLICT(job_id, task) DO UPDATE SET
           mem_bytes = CASE WHEN task_reservations.mem_bytes >= excluded.mem_bytes
             THEN task_reservations.mem_bytes ELSE excluded.mem_bytes END,
           warps = CASE WHEN task_reservations.warps >= excluded.warps
             THEN task_reservations.warps ELSE excluded.warps END,
           end_time = coalesce(excluded.end_time, task_reservations.end_time)",
    )
    .bind(r.job as i64)
    .bind(r.task as i64)
    .bind(&r.instance)
    .bind(r.bytes as i64)
    .bind(r.warps as i64)
    .bind(r.begin_ms)
    .bind(r.end_ms)
    .bind(node)
    .bind(r.pid as i64)
    .bind(r.share as i64)
    .execute(c.reborrow())
    .await?;
    Ok(())
}

/// Writes an entry of the append-only event log.
async fn append_event(
    c: &mut ConnRef<'_>,
    time: i64,
    job_id: Option<JobId>,
    node: Option<&str>,
    kind: &str,
    detail: Option<&str>,
) -> Result<(), sqlx::Error> {
    c.query("INSERT INTO events (time, job_id, node, kind, detail) VALUES ($1,$2,$3,$4,$5)")
        .bind(time)
        .bind(job_id.map(|j| j as i64))
        .bind(node)
        .bind(kind)
        .bind(detail)
        .execute(c.reborrow())
        .await?;
    Ok(())
}
