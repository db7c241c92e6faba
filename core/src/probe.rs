//! The probe protocol between a job's processes and gnoded.
//!
//! A unix stream socket (path in `GSCHED_PROBE_SOCK`); each message is a
//! 4-byte little-endian length followed by that many bytes of JSON. Every
//! request names the job and carries its secret (`GSCHED_JOB_KEY`); gnoded
//! also checks the peer's uid and takes the process id from the socket's
//! peer credentials, never from the message.

use serde::{Deserialize, Serialize};

use crate::job::JobId;

/// A task's number on its node (unique among the node's tasks).
pub type TaskId = u64;

pub const PROBE_SOCK_ENV: &str = "GSCHED_PROBE_SOCK";
pub const JOB_KEY_ENV: &str = "GSCHED_JOB_KEY";
pub const JOB_ID_ENV: &str = "GSCHED_JOB_ID";
/// The compute demand a job's tasks state, thousandths of a whole GPU (set
/// by gnoded from `--gpu-share` or the job's earlier runs).
pub const TASK_SHARE_ENV: &str = "GSCHED_TASK_SHARE";

/// Set in the environment of an isolated job started early: its
/// processes wait at their first CUDA call until gnoded opens its
/// instances to them (`ProbeRequest::Gate`).
pub const GATE_ENV: &str = "GSCHED_GPU_GATE";

/// Largest message either side accepts.
pub const MAX_MESSAGE: usize = 64 * 1024;

/// Error codes returned to C callers (negative) and in error replies.
pub mod code {
    /// The request was malformed or the protocol was broken.
    pub const PROTOCOL: i32 = -1;
    /// Wrong job key, unknown job, or a foreign uid.
    pub const AUTH: i32 = -2;
    /// The task can never fit any instance open to it.
    pub const NEVER_FITS: i32 = -3;
    /// The instance has no room to grow the reservation.
    pub const FULL: i32 = -4;
    /// No such task (or not this job's).
    pub const NO_TASK: i32 = -5;
    /// gnoded cannot be reached, or the job has no probe socket.
    pub const UNAVAILABLE: i32 = -6;
    /// A step cannot begin or end as asked (see the message).
    pub const STEP: i32 = -7;
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum ProbeRequest {
    /// Place a task; the reply comes once it is placed (it may wait).
    Begin {
        job: JobId,
        key: String,
        bytes: u64,
        warps: u64,
        /// The launch shape of the task's kernel, for placement policies
        /// that emulate SM slots (`mgb-sm`); optional.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        shape: Option<crate::sm::KernelShape>,
        /// The task's compute demand, thousandths of a whole GPU (1 to
        /// 1000): the job's stated or learned GPU share; absent, the node's
        /// default counts.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        share: Option<u32>,
    },
    /// The task ended: release its reservation.
    End {
        job: JobId,
        key: String,
        task: TaskId,
    },
    /// Grow the task's reservation by `bytes` on its instance, or by
    /// `at_least` if only that fits; when neither fits, the reply waits
    /// until `at_least` does (or says the instance is full when nothing
    /// there could free memory).
    Grow {
        job: JobId,
        key: String,
        task: TaskId,
        bytes: u64,
        #[serde(default)]
        at_least: Option<u64>,
    },
    /// The task's warps now in use.
    Warps {
        job: JobId,
        key: String,
        task: TaskId,
        warps: u64,
    },
    /// The calling process's peak GPU memory, reported before it exits,
    /// with how long it kept its instance busy (work in flight on one of
    /// its streams) out of how long it was placed, where the interception
    /// library measured it (microseconds).
    Peak {
        job: JobId,
        key: String,
        bytes: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        busy: Option<BusyTime>,
    },
    /// How long the calling process has kept its instance busy since it
    /// was placed, reported while it runs (every
    /// [`crate::compute::BUSY_REPORT_EVERY_MS`]), so that gnoded corrects
    /// its compute demand within seconds ([`crate::placement::measured`]).
    Busy {
        job: JobId,
        key: String,
        busy: BusyTime,
    },
    /// `srun` starts step `step` of the job: gnoded creates the step's
    /// cgroup below the job's and moves the calling process (a process of
    /// the job, from the socket's credentials) into it, so the tasks it
    /// starts next are the step's.
    StepBegin { job: JobId, key: String, step: u32 },
    /// The step's tasks ended: gnoded moves the calling process back where
    /// it came from, kills what is left in the step, counts what the step
    /// used and removes its cgroup.
    StepEnd { job: JobId, key: String, step: u32 },
    /// An isolated job started early (its instances were still in use
    /// when it started): the reply comes once its instances are its own
    /// and its processes may open them (`GATE_ENV`). Answered at once for
    /// any other job of the node.
    Gate { job: JobId, key: String },
    /// The calling process (placed, of a job with a GPU time quota) opens
    /// its token connection: after the `Ok` reply, this connection carries
    /// [`TokenRequest`]s one way and [`TokenReply`]s the other
    /// ([`crate::time_quota`]).
    Tokens { job: JobId, key: String },
}

/// What a process sends on its token connection (after `Tokens`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum TokenRequest {
    /// It wants a token (its next kernel launch waits for one).
    Ask,
    /// Its quota ended with work still to launch: another quota, or a
    /// revocation.
    Renew,
    /// It gives its token back: its work in flight is done.
    GiveBack,
    /// It gives its token back and wants another at once (a launch waits):
    /// whether it gets the next one is decided with it among the waiting.
    GiveBackAndAsk,
}

/// What gnoded sends on a token connection, whenever it decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "order", rename_all = "snake_case")]
pub enum TokenReply {
    /// Launch for `quota_us` microseconds.
    Grant { quota_us: u64 },
    /// Stop launching; give the token back once the work in flight is done.
    Revoke,
}

/// How long a process kept its instance busy out of how long it was
/// placed (microseconds), as its interception library sampled it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BusyTime {
    pub busy_usec: u64,
    pub placed_usec: u64,
}

impl ProbeRequest {
    pub fn job_and_key(&self) -> (JobId, &str) {
        match self {
            ProbeRequest::Begin { job, key, .. }
            | ProbeRequest::End { job, key, .. }
            | ProbeRequest::Grow { job, key, .. }
            | ProbeRequest::Warps { job, key, .. }
            | ProbeRequest::Peak { job, key, .. }
            | ProbeRequest::Busy { job, key, .. }
            | ProbeRequest::StepBegin { job, key, .. }
            | ProbeRequest::StepEnd { job, key, .. }
            | ProbeRequest::Gate { job, key }
            | ProbeRequest::Tokens { job, key } => (*job, key),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum ProbeReply {
    Placed {
        task: TaskId,
        /// What `CUDA_VISIBLE_DEVICES` must be for the process.
        instance: String,
        /// `CUDA_MPS_PIPE_DIRECTORY`, when the instance has an MPS daemon.
        mps_pipe_dir: Option<String>,
        bytes: u64,
    },
    Ok,
    /// A `Grow` was granted: the reservation grew by `bytes`.
    Grown {
        bytes: u64,
    },
    Error {
        code: i32,
        message: String,
    },
}

impl ProbeReply {
    pub fn error(code: i32, message: impl Into<String>) -> ProbeReply {
        ProbeReply::Error {
            code,
            message: message.into(),
        }
    }
}

/// A frame: length prefix and JSON body.
pub fn encode<T: Serialize>(msg: &T) -> Vec<u8> {
    let body = serde_json::to_vec(msg).expect("probe messages serialize");
    let mut out = Vec::with_capacity(4 + body.len());
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&body);
    out
}

/// A probe frame whose length header is out of bounds.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct FrameError(pub String);

impl From<String> for FrameError {
    fn from(why: String) -> Self {
        FrameError(why)
    }
}

/// The body length announced by a frame header, if acceptable.
pub fn frame_len(header: [u8; 4]) -> Result<usize, FrameError> {
    let n = u32::from_le_bytes(header) as usize;
    if n == 0 || n > MAX_MESSAGE {
        return Err(FrameError(format!(
            "message length {n} is outside 1..={MAX_MESSAGE}"
        )));
    }
    Ok(n)
}

/// One reservation as gctld records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TaskRecord {
    pub job: JobId,
    pub task: TaskId,
    pub pid: u32,
    pub instance: String,
    pub bytes: u64,
    pub warps: u64,
    /// The compute demand it was placed with, thousandths of a whole GPU.
    #[serde(default)]
    pub share: u32,
    /// Unix time in milliseconds.
    pub begin_ms: i64,
    /// `None` while the reservation is held.
    pub end_ms: Option<i64>,
}

/// What a node reports about tasks: reservations that began or ended, and
/// process peaks.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskReport {
    pub node: String,
    pub records: Vec<TaskRecord>,
    /// (job, peak bytes) reported by exiting processes.
    #[serde(default)]
    pub peaks: Vec<(JobId, u64)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_bad_input_is_refused() {
        let r = ProbeRequest::Begin {
            job: 3,
            key: "k".into(),
            bytes: 1 << 30,
            warps: 64,
            shape: None,
            share: Some(250),
        };
        let f = encode(&r);
        let n = frame_len(f[..4].try_into().unwrap()).unwrap();
        assert_eq!(n, f.len() - 4);
        let back: ProbeRequest = serde_json::from_slice(&f[4..]).unwrap();
        assert_eq!(back, r);
        // The kernel shape is optional and carried when given.
        let shaped: ProbeRequest = serde_json::from_str(
            r#"{"op":"begin","job":3,"key":"k","bytes":1,"warps":16,"shape":{"blocks":2,"block_warps":8}}"#,
        )
        .unwrap();
        assert!(matches!(
            shaped,
            ProbeRequest::Begin {
                shape: Some(crate::sm::KernelShape {
                    blocks: 2,
                    block_warps: 8
                }),
                ..
            }
        ));
        assert!(frame_len([0, 0, 0, 0]).is_err());
        assert!(frame_len((MAX_MESSAGE as u32 + 1).to_le_bytes()).is_err());
        for bad in [
            r#"{"op":"begin","job":1}"#,
            r#"{"op":"launch","job":1,"key":"k"}"#,
            r#"{"op":"end","job":1,"key":"k","task":1,"extra":2}"#,
            r#"{"op":"begin","job":-1,"key":"k","bytes":1,"warps":1}"#,
        ] {
            assert!(serde_json::from_str::<ProbeRequest>(bad).is_err(), "{bad}");
        }
    }
}
