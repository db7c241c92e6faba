//! The controller's glue driven in one process: a real store in a
//! temporary directory and fake nodes behind [`NodeClient`], no daemon,
//! socket or child process. Each test waits for what it expects with a
//! bound (a liveness limit, never a timing assertion).

use std::collections::{BTreeMap, VecDeque};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gsched_core::cluster::Cluster;
use gsched_core::job::{JobId, JobSpec, JobState};
use gsched_core::outcome::{EndCause, ProcessOutcome};
use gsched_core::wire::{
    DrainRequest, Heartbeat, JobEndReport, JobEnded, LaunchRequest, NodeRegistration,
    ReshapeRequest, SignalRequest, SuspendRequest,
};
use gsched_daemon::peer::PeerReply;
use reqwest::StatusCode;

use super::Controller;
use crate::auth::Authority;
use crate::config::CtldConfig;
use crate::node_client::{Call, CallError, NodeClient};
use crate::store::{Durability, Store};

/// How a fake node answers a call.
#[derive(Debug, Clone)]
pub(crate) enum Scripted {
    Status(u16, &'static str),
    Unreachable,
    NoAnswer,
}

/// A call the controller made.
#[derive(Debug, Clone)]
#[allow(dead_code)] // Drains and reshapes are recorded for the order of calls.
enum Seen {
    Launch(Box<LaunchRequest>),
    Signal(JobId, SignalRequest),
    Suspend(JobId, SuspendRequest),
    Drain(DrainRequest),
    Reshape(ReshapeRequest),
}

/// Nodes that record every call and answer from a script (200 once the
/// script is used up).
#[derive(Default)]
pub(crate) struct FakeNodes {
    seen: Mutex<Vec<Seen>>,
    launch_answers: Mutex<VecDeque<Scripted>>,
    signal_answers: Mutex<VecDeque<Scripted>>,
}

impl FakeNodes {
    fn answer(&self, seen: Seen, script: &Mutex<VecDeque<Scripted>>) -> Call<'static> {
        self.seen.lock().unwrap().push(seen);
        let answer = script
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or(Scripted::Status(200, "{}"));
        let result = match answer {
            Scripted::Status(code, body) => Ok(PeerReply {
                status: StatusCode::from_u16(code).unwrap(),
                body: body.as_bytes().to_vec(),
            }),
            Scripted::Unreachable => Err(CallError::Unreachable("connection refused".into())),
            Scripted::NoAnswer => Err(CallError::NoAnswer("cut off".into())),
        };
        Box::pin(std::future::ready(result))
    }

    fn launches(&self) -> Vec<LaunchRequest> {
        let seen = self.seen.lock().unwrap();
        seen.iter()
            .filter_map(|s| match s {
                Seen::Launch(r) => Some((**r).clone()),
                _ => None,
            })
            .collect()
    }

    fn signals(&self) -> Vec<(JobId, SignalRequest)> {
        let seen = self.seen.lock().unwrap();
        seen.iter()
            .filter_map(|s| match s {
                Seen::Signal(j, r) => Some((*j, r.clone())),
                _ => None,
            })
            .collect()
    }

    fn suspends(&self) -> Vec<(JobId, SuspendRequest)> {
        let seen = self.seen.lock().unwrap();
        seen.iter()
            .filter_map(|s| match s {
                Seen::Suspend(j, r) => Some((*j, *r)),
                _ => None,
            })
            .collect()
    }
}

impl NodeClient for FakeNodes {
    fn launch<'a>(&'a self, _url: &'a str, req: &'a LaunchRequest) -> Call<'a> {
        self.answer(Seen::Launch(Box::new(req.clone())), &self.launch_answers)
    }

    fn signal<'a>(&'a self, _url: &'a str, job: JobId, req: &'a SignalRequest) -> Call<'a> {
        self.answer(Seen::Signal(job, req.clone()), &self.signal_answers)
    }

    fn suspend<'a>(&'a self, _url: &'a str, job: JobId, req: &'a SuspendRequest) -> Call<'a> {
        self.answer(Seen::Suspend(job, *req), &Mutex::default())
    }

    fn drain<'a>(&'a self, _url: &'a str, req: &'a DrainRequest) -> Call<'a> {
        self.answer(Seen::Drain(req.clone()), &Mutex::default())
    }

    fn reshape<'a>(&'a self, _url: &'a str, req: &'a ReshapeRequest) -> Call<'a> {
        self.answer(Seen::Reshape(req.clone()), &Mutex::default())
    }
}

/// A controller on the store in `dir`, as gctld restores one.
pub(crate) async fn open(dir: &Path, nodes: &Arc<FakeNodes>) -> Arc<Controller> {
    let (store, loaded) = Store::open_alone(
        &crate::store::Database::Sqlite(dir.join("state.db")),
        Durability::Normal,
        None,
    )
    .await
    .unwrap();
    let policy = gsched_core::launch::launch_policy("case").unwrap();
    let mut cluster = Cluster::restore(policy, loaded.jobs, loaded.nodes);
    cluster.restore_accounts(loaded.accounts);
    cluster.restore_history(loaded.max_job_id, loaded.past_runs);
    Controller::new(
        cluster,
        Arc::new(store),
        CtldConfig::default(),
        "k".repeat(32),
        "http://ctld.test".into(),
        Authority::new(&[7u8; 32], &[], 0, 86400),
        dir.join("ctld.sock"),
        Arc::clone(nodes) as Arc<dyn NodeClient>,
    )
}

pub(crate) fn registration(running: Vec<JobId>) -> NodeRegistration {
    let gpus = gsched_core::gpu::parse_sim_spec("1xA100-40GB").unwrap();
    NodeRegistration {
        name: "n1".into(),
        instance_id: "start-1".into(),
        url: "http://n1.test".into(),
        cpus: 8,
        memory_mib: 16384,
        tmp_disk_mib: 0,
        instances: gsched_core::gpu::sim_instances("n1", &gpus),
        worker_limit: Some(8),
        running,
        runs: BTreeMap::new(),
        ended: Vec::new(),
        fence_timeout_ms: None,
        heartbeat_ms: 1000,
        reshape_gpus: Vec::new(),
        reshape_keep: BTreeMap::new(),
        release: gsched_core::version::RELEASE.into(),
        protocol: gsched_core::version::PROTOCOL,
        followed_epoch: 0,
    }
}

pub(crate) fn spec(name: &str, requeue: bool) -> JobSpec {
    JobSpec {
        name: name.into(),
        script: format!("#!/bin/sh\n# {name}\ntrue\n"),
        environment: [("PATH".to_string(), "/bin".to_string())].into(),
        working_dir: "/tmp".into(),
        user_name: "root".into(),
        uid: 0,
        gid: 0,
        submit_host: "h".into(),
        requeue: Some(requeue),
        ..JobSpec::default()
    }
}

/// Waits (at most 20 s) until `what` holds.
pub(crate) async fn until(what: &str, mut f: impl FnMut() -> bool) {
    for _ in 0..2000 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("never came to pass: {what}");
}

fn state(ctl: &Controller, id: JobId) -> JobState {
    ctl.lock().job(id).unwrap().state
}

/// A controller with one registered node whose first answer to a launch
/// is `first_answer` (200 when `None`), and one job submitted, not yet
/// launched.
pub(crate) async fn submitted(
    first_answer: Option<Scripted>,
    requeue: bool,
) -> (tempfile::TempDir, Arc<FakeNodes>, Arc<Controller>, JobId) {
    let dir = tempfile::tempdir().unwrap();
    let nodes = Arc::new(FakeNodes::default());
    if let Some(a) = first_answer {
        nodes.launch_answers.lock().unwrap().push_back(a);
    }
    let ctl = open(dir.path(), &nodes).await;
    ctl.register(registration(vec![])).await.unwrap();
    let id = ctl.submit(spec("a", requeue)).await.unwrap();
    (dir, nodes, ctl, id)
}

/// A registered node and one job launched there, confirmed.
pub(crate) async fn running_job(
    requeue: bool,
) -> (tempfile::TempDir, Arc<FakeNodes>, Arc<Controller>, JobId) {
    let (dir, nodes, ctl, id) = submitted(None, requeue).await;
    ctl.launch_pass().await;
    until("the launch is confirmed", || {
        ctl.lock()
            .job(id)
            .is_some_and(|j| j.state == JobState::Running && !j.launching)
    })
    .await;
    (dir, nodes, ctl, id)
}

fn ended(id: JobId, run: u32, code: i32) -> JobEndReport {
    ended_by(id, run, code, EndCause::Exited)
}

fn ended_by(id: JobId, run: u32, code: i32, cause: EndCause) -> JobEndReport {
    JobEndReport {
        node: "n1".into(),
        ended: vec![JobEnded {
            job_id: id,
            run,
            outcome: ProcessOutcome {
                exit_code: Some(code),
                signal: None,
                cause,
            },
            end_time: gsched_daemon::unix_now(),
            usage: None,
            steps: Default::default(),
        }],
    }
}

#[tokio::test]
async fn the_launch_carries_the_script_and_environment_from_the_store() {
    let (_dir, nodes, ctl, id) = submitted(None, false).await;
    assert!(ctl.lock().job(id).unwrap().text_in_store());
    ctl.launch_pass().await;
    until("a launch", || nodes.launches().len() == 1).await;
    let sent = &nodes.launches()[0];
    assert_eq!(sent.job.spec.script, spec("a", false).script);
    assert_eq!(sent.job.spec.environment["PATH"], "/bin");
    assert!(!sent.job.text_in_store());
    assert!(
        sent.job_token.is_some(),
        "the job's own commands get a token"
    );
}

#[tokio::test]
async fn a_launch_never_delivered_puts_the_job_back_without_a_restart() {
    let (_dir, _nodes, ctl, id) = submitted(Some(Scripted::Unreachable), false).await;
    ctl.launch_pass().await;
    until("the job is queued again", || {
        state(&ctl, id) == JobState::Pending
    })
    .await;
    assert_eq!(ctl.lock().job(id).unwrap().restarts, 0);
}

#[tokio::test]
async fn a_launch_in_doubt_is_sent_again_for_the_same_run() {
    let (_dir, nodes, ctl, id) = submitted(Some(Scripted::NoAnswer), false).await;
    ctl.launch_pass().await;
    until("the launch is confirmed", || {
        ctl.lock()
            .job(id)
            .is_some_and(|j| !j.launching && j.state == JobState::Running)
    })
    .await;
    let launches = nodes.launches();
    assert_eq!(launches.len(), 2, "sent again once");
    assert_eq!(launches[0].job.run, launches[1].job.run, "the same run");
}

#[tokio::test]
async fn a_launch_the_node_refuses_fails_the_job_with_its_reason() {
    let (_dir, _nodes, ctl, id) = submitted(
        Some(Scripted::Status(
            403,
            r#"{"error":"jobs of uid 0 are not allowed here"}"#,
        )),
        true,
    )
    .await;
    ctl.launch_pass().await;
    until("the job failed", || state(&ctl, id) == JobState::Failed).await;
    let reason = ctl.lock().job(id).unwrap().reason.clone().unwrap();
    assert!(reason.contains("uid 0 are not allowed"), "{reason}");
}

#[tokio::test]
async fn a_cancel_is_sent_until_the_node_takes_it() {
    let (_dir, nodes, ctl, id) = running_job(false).await;
    {
        let mut answers = nodes.signal_answers.lock().unwrap();
        answers.push_back(Scripted::Unreachable);
        answers.push_back(Scripted::NoAnswer);
    }
    ctl.cancel(id, None, Some(0)).await.unwrap();
    until("the node took the cancel", || nodes.signals().len() == 3).await;
    assert!(nodes.signals().iter().all(|(j, r)| *j == id && r.cancel));
    let run = ctl.lock().job(id).unwrap().run;
    ctl.jobs_ended(ended_by(id, run, 143, EndCause::Cancelled))
        .await
        .unwrap();
    assert_eq!(state(&ctl, id), JobState::Cancelled);
}

#[tokio::test]
async fn a_silent_node_goes_down_and_its_requeueable_job_waits_again() {
    let (_dir, _nodes, ctl, id) = running_job(true).await;
    ctl.check_liveness(Duration::ZERO).await;
    assert!(!ctl.lock().node("n1").unwrap().up);
    let j = ctl.lock().job(id).unwrap().clone();
    assert_eq!(j.state, JobState::Pending);
    assert_eq!(j.restarts, 1);
}

#[tokio::test]
async fn a_silent_node_ends_a_job_that_may_not_requeue_as_node_fail() {
    let (_dir, _nodes, ctl, id) = running_job(false).await;
    ctl.check_liveness(Duration::ZERO).await;
    assert_eq!(state(&ctl, id), JobState::NodeFail);
}

#[tokio::test]
async fn a_run_the_controller_does_not_own_is_killed_on_its_node() {
    let (_dir, nodes, ctl, _id) = running_job(false).await;
    let hb = Heartbeat {
        instance_id: "start-1".into(),
        running: vec![999],
        ..Heartbeat::default()
    };
    let (known, effects) = ctl.heartbeat("n1", &hb);
    assert!(known);
    ctl.execute(effects).await.unwrap();
    until("the stray run is killed", || {
        nodes.signals().iter().any(|(j, r)| {
            *j == 999 && r.cancel && r.signal == nix::sys::signal::Signal::SIGKILL as i32
        })
    })
    .await;
}

#[tokio::test]
async fn an_end_is_recorded_once_and_a_stale_report_changes_nothing() {
    let (_dir, _nodes, ctl, id) = running_job(false).await;
    let run = ctl.lock().job(id).unwrap().run;
    ctl.jobs_ended(ended(id, run + 1, 1)).await.unwrap();
    assert_eq!(state(&ctl, id), JobState::Running, "another run's report");
    ctl.jobs_ended(ended(id, run, 0)).await.unwrap();
    assert_eq!(state(&ctl, id), JobState::Completed);
    ctl.jobs_ended(ended(id, run, 1)).await.unwrap();
    let j = ctl.lock().job(id).unwrap().clone();
    assert_eq!((j.state, j.exit_code), (JobState::Completed, Some(0)));
}

#[tokio::test]
async fn a_restarted_controller_launches_a_held_job_with_its_stored_script() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = Arc::new(FakeNodes::default());
    let id = {
        let ctl = open(dir.path(), &nodes).await;
        let mut held = spec("kept", false);
        held.hold = true;
        ctl.submit(held).await.unwrap()
    };
    let ctl = open(dir.path(), &nodes).await;
    assert_eq!(state(&ctl, id), JobState::Pending);
    ctl.register(registration(vec![])).await.unwrap();
    ctl.set_held(id, false).await.unwrap();
    ctl.launch_pass().await;
    until("a launch", || nodes.launches().len() == 1).await;
    assert_eq!(
        nodes.launches()[0].job.spec.script,
        spec("kept", false).script
    );
}

#[tokio::test]
async fn a_launch_whose_stored_environment_is_unreadable_fails_the_job() {
    let (dir, nodes, ctl, id) = submitted(None, false).await;
    {
        use sqlx::Connection;
        let url = format!("sqlite://{}", dir.path().join("state.db").display());
        let mut c = sqlx::SqliteConnection::connect(&url).await.unwrap();
        sqlx::query("UPDATE jobs SET environment = 'not json' WHERE id = ?")
            .bind(id as i64)
            .execute(&mut c)
            .await
            .unwrap();
    }
    ctl.launch_pass().await;
    until("the job failed", || state(&ctl, id) == JobState::Failed).await;
    assert!(nodes.launches().is_empty(), "nothing was sent");
    let reason = ctl.lock().job(id).unwrap().reason.clone().unwrap();
    assert!(reason.contains("unreadable"), "{reason}");
}

#[tokio::test]
async fn suspending_a_job_asks_its_node() {
    let (_dir, nodes, ctl, id) = running_job(false).await;
    ctl.suspend(id, true).await.unwrap();
    until("the node was asked", || !nodes.suspends().is_empty()).await;
    let (job, req) = nodes.suspends()[0];
    assert_eq!(job, id);
    assert!(req.suspend);
    assert!(ctl.lock().job(id).unwrap().is_suspended());
}

#[tokio::test]
async fn a_node_one_minor_version_apart_registers_and_one_further_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = Arc::new(FakeNodes::default());
    let ctl = open(dir.path(), &nodes).await;
    // 0.1.0 nodes stated no release.
    let unstated = NodeRegistration {
        release: String::new(),
        protocol: 0,
        ..registration(vec![])
    };
    ctl.register(unstated).await.unwrap();
    let far = NodeRegistration {
        release: "9.0.0".into(),
        ..registration(vec![])
    };
    let e = ctl.register(far).await.unwrap_err().to_string();
    assert!(e.contains("runs gsched 9.0.0"), "{e}");
    assert!(
        e.contains(&format!(
            "the controller gsched {}",
            gsched_core::version::RELEASE
        )),
        "{e}"
    );
    let other_protocol = NodeRegistration {
        protocol: 99,
        ..registration(vec![])
    };
    let e = ctl.register(other_protocol).await.unwrap_err().to_string();
    assert!(e.contains("speaks protocol 99"), "{e}");
}

#[tokio::test]
async fn a_leader_behind_the_epoch_a_node_followed_steps_down_and_raises_it() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = Arc::new(FakeNodes::default());
    let ctl = open(dir.path(), &nodes).await;
    let tenure = crate::leader::Tenure::alone(3);
    ctl.set_tenure(Arc::clone(&tenure));
    let caught_up = NodeRegistration {
        followed_epoch: 3,
        ..registration(vec![])
    };
    ctl.register(caught_up).await.unwrap();
    assert!(ctl.acting());
    // The database went back in time: a node has followed epoch 7.
    let ahead = NodeRegistration {
        followed_epoch: 7,
        ..registration(vec![])
    };
    let e = ctl.register(ahead).await.unwrap_err();
    assert!(matches!(e, super::CtlError::Followed(_)), "{e}");
    assert!(e.to_string().contains("raises the epoch past 7"), "{e}");
    assert!(!ctl.acting(), "it stops acting");
    assert_eq!(tenure.resign_at(), 7);
}
