//! A small blocking client of the controller's REST API.

use std::time::Duration;

use anyhow::{anyhow, Result};
use gsched_core::job::{JobId, JobSpec};
use gsched_core::wire::{ErrorBody, InstanceInfo, JobInfo, JobList, NodeInfo, Submitted};
use serde::Deserialize;

/// Default controller URL when `GSCHED_URL` is not set.
pub const DEFAULT_URL: &str = "http://127.0.0.1:6817";

pub struct Client {
    base: String,
    agent: ureq::Agent,
}

/// An error the controller answered with.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    pub status: u16,
    pub message: String,
}

impl Client {
    /// The controller named by `GSCHED_URL`, or the default.
    pub fn from_env() -> Client {
        let base = std::env::var("GSCHED_URL")
            .ok()
            .filter(|u| !u.is_empty())
            .unwrap_or_else(|| DEFAULT_URL.into());
        Client::new(&base)
    }

    pub fn new(base: &str) -> Client {
        Client {
            base: base.trim_end_matches('/').to_string(),
            agent: ureq::AgentBuilder::new()
                .timeout(Duration::from_secs(30))
                .build(),
        }
    }

    fn call<T: for<'de> Deserialize<'de>>(
        &self,
        req: ureq::Request,
        body: Option<&serde_json::Value>,
    ) -> Result<T> {
        let res = match body {
            Some(b) => req.send_json(b),
            None => req.call(),
        };
        match res {
            Ok(r) => Ok(r.into_json()?),
            Err(ureq::Error::Status(status, r)) => {
                let message = r
                    .into_json::<ErrorBody>()
                    .map(|b| b.error)
                    .unwrap_or_else(|_| format!("controller answered HTTP {status}"));
                Err(ApiError { status, message }.into())
            }
            Err(ureq::Error::Transport(t)) => Err(anyhow!(
                "cannot reach the gsched controller at {}: {t}; is `gsched up` running, and is GSCHED_URL right?",
                self.base
            )),
        }
    }

    pub fn submit(&self, spec: &JobSpec) -> Result<JobId> {
        let body = serde_json::to_value(spec)?;
        let s: Submitted = self.call(
            self.agent.post(&format!("{}/api/v1/jobs", self.base)),
            Some(&body),
        )?;
        Ok(s.job_id)
    }

    /// Jobs matching the query parameters (`state`, `user`, `name`, `id`).
    pub fn jobs(&self, query: &[(&str, String)]) -> Result<Vec<JobInfo>> {
        let mut req = self.agent.get(&format!("{}/api/v1/jobs", self.base));
        for (k, v) in query {
            req = req.query(k, v);
        }
        Ok(self.call::<JobList>(req, None)?.jobs)
    }

    /// Cancels a job, or sends it `signal`.
    pub fn cancel(&self, id: &str, signal: Option<&str>) -> Result<()> {
        let mut req = self
            .agent
            .delete(&format!("{}/api/v1/jobs/{id}", self.base));
        if let Some(s) = signal {
            req = req.query("signal", s);
        }
        self.call::<serde_json::Value>(req, None).map(|_| ())
    }

    /// The controller's `/healthz` answer: status, cluster name, default
    /// partition, launch policy.
    pub fn health(&self) -> Result<serde_json::Value> {
        self.call(self.agent.get(&format!("{}/healthz", self.base)), None)
    }

    /// Records the start of a step of running job `id`; returns its number.
    pub fn begin_step(&self, id: JobId, name: &str, ntasks: u32) -> Result<u32> {
        let v: serde_json::Value = self.call(
            self.agent
                .post(&format!("{}/api/v1/jobs/{id}/steps", self.base)),
            Some(&serde_json::json!({ "name": name, "ntasks": ntasks })),
        )?;
        v["step_id"]
            .as_u64()
            .map(|s| s as u32)
            .ok_or_else(|| anyhow!("the controller gave no step id"))
    }

    /// Records the end of a step.
    pub fn end_step(
        &self,
        id: JobId,
        step: u32,
        exit_code: i32,
        signal: Option<i32>,
    ) -> Result<()> {
        self.call::<serde_json::Value>(
            self.agent
                .post(&format!("{}/api/v1/jobs/{id}/steps/{step}/end", self.base)),
            Some(&serde_json::json!({ "exit_code": exit_code, "signal": signal })),
        )
        .map(|_| ())
    }

    /// Holds (`true`) or releases a pending job.
    pub fn set_held(&self, id: JobId, held: bool) -> Result<()> {
        let op = if held { "hold" } else { "release" };
        self.call::<serde_json::Value>(
            self.agent
                .post(&format!("{}/api/v1/jobs/{id}/{op}", self.base)),
            Some(&serde_json::json!({})),
        )
        .map(|_| ())
    }

    /// Puts a running job back in the queue under its id.
    pub fn requeue(&self, id: JobId) -> Result<()> {
        self.call::<serde_json::Value>(
            self.agent
                .post(&format!("{}/api/v1/jobs/{id}/requeue", self.base)),
            Some(&serde_json::json!({})),
        )
        .map(|_| ())
    }

    pub fn nodes(&self) -> Result<Vec<NodeInfo>> {
        #[derive(Deserialize)]
        struct Nodes {
            nodes: Vec<NodeInfo>,
        }
        Ok(self
            .call::<Nodes>(self.agent.get(&format!("{}/api/v1/nodes", self.base)), None)?
            .nodes)
    }

    pub fn instances(&self) -> Result<Vec<InstanceInfo>> {
        #[derive(Deserialize)]
        struct Instances {
            instances: Vec<InstanceInfo>,
        }
        Ok(self
            .call::<Instances>(
                self.agent.get(&format!("{}/api/v1/instances", self.base)),
                None,
            )?
            .instances)
    }
}
