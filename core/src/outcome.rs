//! How a job's process ended, and the job state that follows from it.

use serde::{Deserialize, Serialize};

use crate::job_state::{JobId, JobState};

/// Why the node stopped the job, if it did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EndCause {
    /// The batch script exited on its own (or was killed by someone else).
    Exited,
    /// The node killed it at its time limit.
    TimeLimit,
    /// The node killed it because it was cancelled.
    Cancelled,
    /// The job could not be started (bad working directory, foreign user...).
    LaunchFailed(String),
    /// Its processes are gone and nothing recorded how they ended.
    Lost,
    /// The kernel's OOM killer ended a process of the job at its cgroup's
    /// memory limit; the text names the limit.
    OutOfMemory(String),
    /// The node killed it because its lease ran out: it had not reached the
    /// controller for its fence timeout (see `crate::fence`).
    Fenced,
    /// A fatal GPU fault on its instance's MPS server tore its processes
    /// down (whatever its script then returned).
    GpuFault(GpuFault),
}

/// A fatal GPU fault that an instance's MPS server handled by tearing down
/// every client on the instance, as one job hit by it records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuFault {
    /// For people: the instance, the jobs hit, the process MPS named.
    pub reason: String,
    /// MPS named a process of this job as the one with the fatal error (it
    /// may name a neighbour of the real culprit: it cannot tell them apart).
    pub named: bool,
    /// The Xid errors the driver reported on the instance's GPU around the
    /// fault (NVML's critical Xid events), oldest first.
    #[serde(default)]
    pub xids: Vec<u64>,
}

impl GpuFault {
    /// The fault as `job` records it: MPS tore down the processes of `hit`
    /// on `instance`; `named` is the process MPS reported the error in and
    /// its job, where known; `xids` the driver's Xid errors on its GPU then.
    pub fn of(
        job: JobId,
        instance: &str,
        hit: &[JobId],
        named: Option<(u32, Option<JobId>)>,
        xids: &[u64],
    ) -> GpuFault {
        let jobs = hit
            .iter()
            .map(|j| j.to_string())
            .collect::<Vec<_>>()
            .join(", ");
        let culprit = match named {
            Some((pid, Some(j))) => format!(
                "; MPS reported the error in process {pid} of job {j}, which may be a neighbour of the process at fault (MPS cannot tell)"
            ),
            Some((pid, None)) => format!(
                "; MPS reported the error in process {pid}, of no job (it may be a neighbour of the process at fault)"
            ),
            None => String::new(),
        };
        let xid = match xids {
            [] => String::new(),
            [x] => format!("; the driver reported Xid {x}"),
            xs => format!(
                "; the driver reported Xids {}",
                xs.iter()
                    .map(|x| x.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        GpuFault {
            reason: format!(
                "GPU fault: the MPS server of {instance} tore down every client after a fatal GPU error (jobs hit: {jobs}){xid}{culprit}"
            ),
            named: named.is_some_and(|(_, j)| j == Some(job)),
            xids: xids.to_vec(),
        }
    }

    /// The jobs a fault hit: those owning the processes MPS tore down
    /// (`owners` maps a pid to its job), or, where MPS listed none, every
    /// job with a process bound to the instance (`bound`). Sorted, once each.
    pub fn jobs_hit(
        torn_down: &[u32],
        bound: &[(JobId, u32)],
        owners: &std::collections::HashMap<u32, JobId>,
    ) -> Vec<JobId> {
        let mut hit: Vec<JobId> = if torn_down.is_empty() {
            bound.iter().map(|(j, _)| *j).collect()
        } else {
            torn_down
                .iter()
                .filter_map(|p| owners.get(p).copied())
                .collect()
        };
        hit.sort_unstable();
        hit.dedup();
        hit
    }

    /// Whether a job hit by the fault goes back to the queue: only one not
    /// named by MPS, that asked for requeue, and that was requeued after a
    /// GPU fault fewer than `most` times already (`so_far`); the one MPS
    /// named fails, as does a bystander past its limit. Every fault counts,
    /// named or not: MPS may name a victim rather than the culprit (it did
    /// on an H100), so a culprit only ever torn down as a bystander would
    /// otherwise rerun, and tear its neighbours down, without end.
    pub fn requeues(&self, requeueable: bool, so_far: u32, most: u32) -> bool {
        requeueable && !self.named && so_far < most
    }

    /// The reason a job hit by the fault that does not go back to the
    /// queue is recorded with.
    pub fn failed_reason(&self, requeueable: bool, so_far: u32) -> String {
        match (requeueable && !self.named, so_far) {
            (false, _) => self.reason.clone(),
            (true, 0) => format!(
                "{}; not requeued: max_gpu_fault_requeues is 0",
                self.reason
            ),
            (true, n) => format!(
                "{}; not requeued again: requeued after GPU faults {n} times already (max_gpu_fault_requeues)",
                self.reason
            ),
        }
    }
}

/// How many times a requeueable bystander of GPU faults goes back to the
/// queue by default (`max_gpu_fault_requeues`).
pub const DEFAULT_MAX_GPU_FAULT_REQUEUES: u32 = 2;

/// The most `max_gpu_fault_requeues` may be.
pub const MOST_GPU_FAULT_REQUEUES: u32 = 100;

/// The exit code recorded for a job a GPU fault failed whose script
/// nevertheless returned 0: the job did not do its work, so `sbatch -W`,
/// `srun` and scripts that test `$?` must not see success.
pub const GPU_FAULT_EXIT_CODE: i32 = 1;

/// What a node knows of how a run ended: the marks it left in the run's
/// spool, the shepherd's status, and what the run's cgroup counted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EndFacts<'a> {
    pub cancelled: bool,
    pub fenced: bool,
    pub timed_out: bool,
    /// The shepherd recorded an end (`None`: nothing did, the run is lost).
    pub recorded: bool,
    /// The shepherd could not start the script, and why.
    pub launch_error: Option<&'a str>,
    /// Processes the kernel's OOM killer ended in the run's cgroup.
    pub oom_kills: u64,
    /// The memory option the job gave (`--mem=100M`), for the reason.
    pub memory_limit: Option<&'a str>,
    /// A fatal GPU fault on its instance's MPS server hit the run.
    pub gpu_fault: Option<&'a GpuFault>,
}

impl EndCause {
    /// How a run ended, from what its node knows. The node's own stops
    /// (cancel, fence, time limit) come first: what they killed did not
    /// end on its own, OOM kills included.
    pub fn decide(f: &EndFacts<'_>) -> EndCause {
        if f.cancelled {
            EndCause::Cancelled
        } else if f.fenced {
            EndCause::Fenced
        } else if f.timed_out {
            EndCause::TimeLimit
        } else if !f.recorded {
            EndCause::Lost
        } else if let Some(e) = f.launch_error {
            EndCause::LaunchFailed(e.to_string())
        } else if let Some(fault) = f.gpu_fault {
            EndCause::GpuFault(fault.clone())
        } else if f.oom_kills > 0 {
            EndCause::OutOfMemory(oom_reason(f.memory_limit))
        } else {
            EndCause::Exited
        }
    }

    /// The run did not end on its own: the node lost it or stopped it for
    /// want of the controller. The controller treats it as a node failure.
    pub fn is_node_failure(&self) -> bool {
        matches!(self, EndCause::Lost | EndCause::Fenced)
    }
}

/// The reason of an OUT_OF_MEMORY end.
pub fn oom_reason(memory_limit: Option<&str>) -> String {
    match memory_limit {
        Some(l) => format!("the job used all the memory it asked for ({l}) and the kernel's OOM killer ended a process of it"),
        None => "the job used all the node's memory and the kernel's OOM killer ended a process of it".into(),
    }
}

/// How a job ended, as the node reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessOutcome {
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub cause: EndCause,
}

impl ProcessOutcome {
    /// The final job state and reason for this outcome.
    pub fn final_state(&self) -> (JobState, Option<String>) {
        match &self.cause {
            EndCause::Cancelled => (JobState::Cancelled, None),
            EndCause::TimeLimit => (JobState::Timeout, Some("TimeLimit".into())),
            EndCause::LaunchFailed(why) => (JobState::Failed, Some(why.clone())),
            EndCause::Lost => (JobState::NodeFail, Some("job processes lost".into())),
            EndCause::OutOfMemory(why) => (JobState::OutOfMemory, Some(why.clone())),
            EndCause::GpuFault(f) => (JobState::Failed, Some(f.reason.clone())),
            EndCause::Fenced => (
                JobState::NodeFail,
                Some("node fenced itself: it lost contact with the controller".into()),
            ),
            EndCause::Exited => match (self.exit_code, self.signal) {
                (Some(0), None) => (JobState::Completed, None),
                (_, Some(sig)) => (JobState::Failed, Some(format!("killed by signal {sig}"))),
                _ => (JobState::Failed, Some("NonZeroExitCode".into())),
            },
        }
    }
}

/// The signal Slurm records for a job its memory limit ended (its
/// `SIG_OOM`, 253, shown as `0:125`).
pub const OOM_SIGNAL: i32 = 125;

impl ProcessOutcome {
    /// The exit code and signal recorded for the job (sacct's ExitCode):
    /// what the script returned, except `0:125` for OUT_OF_MEMORY as Slurm.
    pub fn recorded_exit(&self) -> (Option<i32>, Option<i32>) {
        match self.cause {
            EndCause::OutOfMemory(_) => (Some(0), Some(OOM_SIGNAL)),
            // Never 0:0 for a job the fault failed.
            EndCause::GpuFault(_) => match (self.exit_code, self.signal) {
                (code, Some(sig)) => (code, Some(sig)),
                (Some(code), None) if code != 0 => (Some(code), None),
                _ => (Some(GPU_FAULT_EXIT_CODE), None),
            },
            _ => (self.exit_code, self.signal),
        }
    }
}

/// Linux signal numbers by name, for `--signal` and `gcancel --signal`.
const SIGNALS: &[(&str, i32)] = &[
    ("HUP", 1),
    ("INT", 2),
    ("QUIT", 3),
    ("ABRT", 6),
    ("KILL", 9),
    ("USR1", 10),
    ("USR2", 12),
    ("ALRM", 14),
    ("TERM", 15),
    ("CONT", 18),
    ("STOP", 19),
    ("TSTP", 20),
    ("URG", 23),
    ("XCPU", 24),
    ("WINCH", 28),
];

/// A signal that is not known.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid signal '{0}': give a name such as TERM, USR1, KILL (with or without SIG) or a number from 1 to 64")]
pub struct BadSignal(pub String);

/// Which of a running job's processes a signal (not a cancel) goes to.
/// `scancel --signal` sends to the job's steps (`srun`) only, `-b` to the
/// batch shell and its children only, `-f` to both, as Slurm's scancel.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum SignalScope {
    /// Every process of the job: the batch shell, its children, its steps.
    #[default]
    Full,
    /// The batch shell and its children, not the steps.
    Batch,
    /// The steps only.
    Steps,
}

/// Parses `TERM`, `SIGTERM`, `term` or `15`.
pub fn parse_signal(s: &str) -> Result<i32, BadSignal> {
    let t = s.trim();
    if let Ok(n) = t.parse::<i32>() {
        return if (1..=64).contains(&n) {
            Ok(n)
        } else {
            Err(BadSignal(s.into()))
        };
    }
    let up = t.to_ascii_uppercase();
    let name = up.strip_prefix("SIG").unwrap_or(&up);
    SIGNALS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, v)| *v)
        .ok_or_else(|| BadSignal(s.into()))
}

/// The name of a signal number (`TERM`), or the number itself.
pub fn signal_name(sig: i32) -> String {
    SIGNALS
        .iter()
        .find(|(_, v)| *v == sig)
        .map(|(n, _)| n.to_string())
        .unwrap_or_else(|| sig.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nodes_own_stops_come_before_how_the_processes_ended() {
        let ended = EndFacts {
            recorded: true,
            ..EndFacts::default()
        };
        assert_eq!(EndCause::decide(&ended), EndCause::Exited);
        assert_eq!(
            EndCause::decide(&EndFacts::default()),
            EndCause::Lost,
            "no record of the end"
        );
        let oom = EndFacts {
            oom_kills: 2,
            memory_limit: Some("--mem=100M"),
            ..ended.clone()
        };
        match EndCause::decide(&oom) {
            EndCause::OutOfMemory(r) => assert!(r.contains("--mem=100M"), "{r}"),
            other => panic!("{other:?}"),
        }
        // A cancelled job killed while over its memory is cancelled; a
        // fenced one is a node failure whatever else is known.
        let cancelled = EndFacts {
            cancelled: true,
            ..oom.clone()
        };
        assert_eq!(EndCause::decide(&cancelled), EndCause::Cancelled);
        let fenced = EndFacts {
            fenced: true,
            timed_out: true,
            ..EndFacts::default()
        };
        assert_eq!(EndCause::decide(&fenced), EndCause::Fenced);
        let timeout = EndFacts {
            timed_out: true,
            ..oom.clone()
        };
        assert_eq!(EndCause::decide(&timeout), EndCause::TimeLimit);
        let failed = EndFacts {
            launch_error: Some("no such directory"),
            ..oom
        };
        assert_eq!(
            EndCause::decide(&failed),
            EndCause::LaunchFailed("no such directory".into())
        );
    }

    #[test]
    fn a_gpu_fault_fails_the_job_whatever_its_script_returned() {
        let fault = GpuFault::of(4, "GPU-a", &[3, 4], Some((474, Some(3))), &[43]);
        assert!(
            fault
                .reason
                .contains("(jobs hit: 3, 4); the driver reported Xid 43;"),
            "{}",
            fault.reason
        );
        assert!(GpuFault::of(4, "GPU-a", &[4], None, &[13, 43])
            .reason
            .ends_with("the driver reported Xids 13, 43"));
        assert!(!fault.named, "job 4 was only torn down");
        assert!(fault.reason.contains("GPU-a") && fault.reason.contains("jobs hit: 3, 4"));
        assert!(
            fault.reason.contains("process 474 of job 3"),
            "{}",
            fault.reason
        );
        // A bystander is requeued while under its limit, and only if it
        // asked for requeue.
        assert!(fault.requeues(true, 0, 2) && fault.requeues(true, 1, 2));
        assert!(!fault.requeues(true, 2, 2) && !fault.requeues(false, 0, 2));
        assert!(fault
            .failed_reason(true, 2)
            .ends_with("requeued after GPU faults 2 times already (max_gpu_fault_requeues)"));
        assert_eq!(fault.failed_reason(false, 0), fault.reason);
        assert!(fault
            .failed_reason(true, 0)
            .ends_with("max_gpu_fault_requeues is 0"));
        let owners = std::collections::HashMap::from([(474, 3), (494, 4), (495, 4)]);
        assert_eq!(
            GpuFault::jobs_hit(&[495, 474, 494, 9], &[], &owners),
            vec![3, 4]
        );
        assert_eq!(
            GpuFault::jobs_hit(&[], &[(5, 1), (2, 7), (5, 8)], &owners),
            vec![2, 5]
        );
        let named = GpuFault::of(3, "GPU-a", &[3, 4], Some((474, Some(3))), &[]);
        assert!(named.named && !named.requeues(true, 0, 2));
        let facts = EndFacts {
            recorded: true,
            gpu_fault: Some(&fault),
            oom_kills: 1,
            ..EndFacts::default()
        };
        let cause = EndCause::decide(&facts);
        assert_eq!(cause, EndCause::GpuFault(fault.clone()));
        let out = ProcessOutcome {
            exit_code: Some(0),
            signal: None,
            cause,
        };
        assert_eq!(
            out.final_state(),
            (JobState::Failed, Some(fault.reason.clone()))
        );
        // Its script said 0, but the job failed: never recorded 0:0.
        assert_eq!(out.recorded_exit(), (Some(GPU_FAULT_EXIT_CODE), None));
        let own_code = ProcessOutcome {
            exit_code: Some(3),
            ..out.clone()
        };
        assert_eq!(own_code.recorded_exit(), (Some(3), None));
        let killed = ProcessOutcome {
            exit_code: None,
            signal: Some(9),
            ..out.clone()
        };
        assert_eq!(killed.recorded_exit(), (None, Some(9)));
        // The node's own stops still come first.
        let cancelled = EndFacts {
            cancelled: true,
            ..facts
        };
        assert_eq!(EndCause::decide(&cancelled), EndCause::Cancelled);
    }

    fn out(code: Option<i32>, sig: Option<i32>, cause: EndCause) -> ProcessOutcome {
        ProcessOutcome {
            exit_code: code,
            signal: sig,
            cause,
        }
    }

    #[test]
    fn states_from_outcomes() {
        assert_eq!(
            out(Some(0), None, EndCause::Exited).final_state().0,
            JobState::Completed
        );
        assert_eq!(
            out(Some(3), None, EndCause::Exited).final_state().0,
            JobState::Failed
        );
        assert_eq!(
            out(None, Some(9), EndCause::Exited).final_state().0,
            JobState::Failed
        );
        assert_eq!(
            out(None, Some(15), EndCause::TimeLimit).final_state().0,
            JobState::Timeout
        );
        assert_eq!(
            out(Some(0), None, EndCause::Cancelled).final_state().0,
            JobState::Cancelled
        );
        assert_eq!(
            out(None, None, EndCause::Lost).final_state().0,
            JobState::NodeFail
        );
        let oom = out(Some(0), None, EndCause::OutOfMemory("limit 100M".into()));
        assert_eq!(oom.final_state().0, JobState::OutOfMemory);
        assert_eq!(oom.recorded_exit(), (Some(0), Some(OOM_SIGNAL)));
        let (st, why) = out(None, None, EndCause::LaunchFailed("no such dir".into())).final_state();
        assert_eq!(
            (st, why.as_deref()),
            (JobState::Failed, Some("no such dir"))
        );
    }

    #[test]
    fn signals() {
        assert_eq!(parse_signal("TERM"), Ok(15));
        assert_eq!(parse_signal("sigusr1"), Ok(10));
        assert_eq!(parse_signal("9"), Ok(9));
        assert!(parse_signal("FOO").is_err());
        assert!(parse_signal("0").is_err());
        assert_eq!(signal_name(12), "USR2");
    }
}
