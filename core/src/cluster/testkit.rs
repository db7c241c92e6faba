//! Builders shared by the cluster's unit tests.

use super::{Cluster, Effect};
use crate::gpu::{parse_sim_spec, sim_instances};
use crate::job::{JobId, JobSpec};
use crate::outcome::{EndCause, ProcessOutcome};
use crate::wire::{JobEnded, NodeRegistration};

/// A shared job of user `u` named `name` (its script names it too).
pub fn spec(name: &str, requeue: bool) -> JobSpec {
    JobSpec {
        name: name.into(),
        script: format!("#!/bin/sh\n# {name}\ntrue\n"),
        environment: [("PATH".to_string(), "/bin".to_string())].into(),
        working_dir: "/tmp".into(),
        user_name: "u".into(),
        uid: 1,
        gid: 1,
        submit_host: "h".into(),
        requeue: Some(requeue),
        ..JobSpec::default()
    }
}

/// Node `name` (two 1g.5gb instances, 64 workers) running `running`
/// (job, run), reporting `ended`.
pub fn registration(
    name: &str,
    running: &[(JobId, u32)],
    ended: Vec<JobEnded>,
) -> NodeRegistration {
    NodeRegistration {
        name: name.into(),
        instance_id: String::new(),
        url: format!("http://{name}"),
        cpus: 64,
        memory_mib: 1024,
        tmp_disk_mib: 0,
        instances: sim_instances(name, &parse_sim_spec("1xA100-40GB:1g.5gb*2").unwrap()),
        worker_limit: Some(64),
        running: running.iter().map(|(j, _)| *j).collect(),
        runs: running.iter().copied().collect(),
        ended,
        fence_timeout_ms: None,
        heartbeat_ms: 0,
        reshape_keep: Default::default(),
        release: crate::version::RELEASE.into(),
        protocol: crate::version::PROTOCOL,
        followed_epoch: 0,
        reshape_gpus: Vec::new(),
    }
}

/// Run `run` of job `id` exited with `code` at `at`.
pub fn ended(id: JobId, run: u32, code: i32, at: i64) -> JobEnded {
    JobEnded {
        job_id: id,
        run,
        outcome: ProcessOutcome {
            exit_code: Some(code),
            signal: None,
            cause: EndCause::Exited,
        },
        end_time: at,
        usage: None,
        steps: Default::default(),
    }
}

/// Adds QOS `name`, which may preempt `preempt`, and grants it to
/// everyone (on the root account).
pub fn add_qos(c: &mut Cluster, name: &str, preempt: &[&str]) {
    c.change_qos(&crate::qos::QosChange::Add {
        qos: crate::qos::Qos {
            name: name.into(),
            preempt: preempt.iter().map(|p| p.to_string()).collect(),
            ..Default::default()
        },
    })
    .unwrap();
    grant_every_qos(c);
}

/// Grants every QOS there is to everyone (on the root account), as an
/// administrator would with `sacctmgr modify account root set qos=...`.
pub fn grant_every_qos(c: &mut Cluster) {
    let stored = c.stored_accounts();
    let mut root = stored.fair_share.root_limits;
    root.qos = Some(stored.qos.into_iter().map(|q| q.name).collect());
    c.change_accounts(&crate::fairshare::AccountChange::SetLimits {
        account: crate::fairshare::ROOT.into(),
        user: None,
        limits: root,
    })
    .unwrap();
}

/// A cluster with node n1 up.
/// The UUIDs of `node`'s instances, in the node's order.
pub fn uuids_of(c: &Cluster, node: &str) -> Vec<String> {
    c.node(node)
        .unwrap()
        .instances
        .iter()
        .map(|s| s.instance.uuid.clone())
        .collect()
}

pub fn cluster() -> Cluster {
    let mut c = Cluster::new(Box::new(crate::launch::CaseLaunch));
    c.register_node(&registration("n1", &[], vec![]), 0);
    c
}

/// Starts what can start at `now`, as a node that has them (launches
/// confirmed); returns the launched ids.
pub fn launch(c: &mut Cluster, now: i64) -> Vec<JobId> {
    let ids = launch_unconfirmed(c, now);
    for &id in &ids {
        let run = c.job(id).expect("launched").run;
        c.launch_confirmed(id, run);
    }
    ids
}

/// Starts what can start at `now`; the launches are not yet confirmed.
pub fn launch_unconfirmed(c: &mut Cluster, now: i64) -> Vec<JobId> {
    c.schedule(now)
        .into_iter()
        .filter_map(|e| match e {
            Effect::Launch { job, .. } => Some(job),
            _ => None,
        })
        .collect()
}
