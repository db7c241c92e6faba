//! A job's identity and the states it goes through, with the moves
//! between them: the bottom of the model, which every other module may
//! name.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A job id, as Slurm numbers them: positive, increasing with submission order.
pub type JobId = u64;

/// The states a job goes through. Names and compact codes are Slurm's.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    utoipa::ToSchema,
)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum JobState {
    Pending,
    Running,
    Completed,
    Failed,
    Cancelled,
    Timeout,
    NodeFail,
    OutOfMemory,
    Requeued,
    /// Cancelled to make room for a job of a higher QOS
    /// (`PreemptMode=CANCEL`).
    Preempted,
}

/// A transition the state machine does not allow.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("job state cannot change from {from} to {to}")]
pub struct IllegalTransition {
    pub from: JobState,
    pub to: JobState,
}

/// A state name that is not one of Slurm's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown job state '{0}' (expected one of PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, TIMEOUT, NODE_FAIL, OUT_OF_MEMORY, REQUEUED, PREEMPTED, or their short forms PD, R, CD, F, CA, TO, NF, OOM, RQ, PR)")]
pub struct UnknownState(pub String);

impl JobState {
    pub const ALL: [JobState; 10] = [
        JobState::Pending,
        JobState::Running,
        JobState::Completed,
        JobState::Failed,
        JobState::Cancelled,
        JobState::Timeout,
        JobState::NodeFail,
        JobState::OutOfMemory,
        JobState::Requeued,
        JobState::Preempted,
    ];

    /// Slurm's long name, e.g. `NODE_FAIL`.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Pending => "PENDING",
            JobState::Running => "RUNNING",
            JobState::Completed => "COMPLETED",
            JobState::Failed => "FAILED",
            JobState::Cancelled => "CANCELLED",
            JobState::Timeout => "TIMEOUT",
            JobState::NodeFail => "NODE_FAIL",
            JobState::OutOfMemory => "OUT_OF_MEMORY",
            JobState::Requeued => "REQUEUED",
            JobState::Preempted => "PREEMPTED",
        }
    }

    /// Slurm's compact code, e.g. `NF`.
    pub fn compact(self) -> &'static str {
        match self {
            JobState::Pending => "PD",
            JobState::Running => "R",
            JobState::Completed => "CD",
            JobState::Failed => "F",
            JobState::Cancelled => "CA",
            JobState::Timeout => "TO",
            JobState::NodeFail => "NF",
            JobState::OutOfMemory => "OOM",
            JobState::Requeued => "RQ",
            JobState::Preempted => "PR",
        }
    }

    /// Parses a long name or compact code, case-insensitively.
    pub fn parse(s: &str) -> Result<JobState, UnknownState> {
        let up = s.trim().to_ascii_uppercase();
        JobState::ALL
            .into_iter()
            .find(|st| st.as_str() == up || st.compact() == up)
            .ok_or_else(|| UnknownState(s.to_string()))
    }

    /// A final state: the job will not change again.
    pub fn is_final(self) -> bool {
        !matches!(
            self,
            JobState::Pending | JobState::Running | JobState::Requeued
        )
    }

    /// Whether `self -> to` is a legal transition.
    ///
    /// PENDING -> RUNNING (launched), CANCELLED, FAILED (refused at launch);
    /// RUNNING -> any end state, or REQUEUED; REQUEUED -> PENDING or CANCELLED.
    /// Final states never change.
    pub fn can_become(self, to: JobState) -> bool {
        use JobState::*;
        match self {
            Pending => matches!(to, Running | Cancelled | Failed),
            Running => matches!(
                to,
                Completed
                    | Failed
                    | Cancelled
                    | Timeout
                    | NodeFail
                    | OutOfMemory
                    | Requeued
                    | Preempted
            ),
            Requeued => matches!(to, Pending | Cancelled),
            _ => false,
        }
    }

    /// Checks a transition; an illegal one is an error, never silently applied.
    pub fn transition(self, to: JobState) -> Result<JobState, IllegalTransition> {
        if self.can_become(to) {
            Ok(to)
        } else {
            Err(IllegalTransition { from: self, to })
        }
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
