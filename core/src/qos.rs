//! Quality of service (Slurm's QOS): named levels a job runs under
//! (`--qos`, else `normal` where it exists), each with a priority (the QOS
//! factor of multifactor) and limits. Limits checked at submission refuse
//! the job (`MaxWall`, `MaxSubmitJobsPerUser`); those checked at launch
//! keep it pending with Slurm's reason (`MaxJobsPerUser`, `GrpJobs`,
//! `MaxTRESPerUser`, `GrpTRES` for CPUs and GPUs). Pure: the controller
//! gives what runs and what is queued.

use std::collections::BTreeMap;

use crate::time_quota::TimeQuota;
use serde::{Deserialize, Serialize};

/// The QOS jobs get when they name none, where it exists.
pub const DEFAULT_QOS: &str = "normal";

pub use crate::tres::Tres;
use crate::tres::{TresKind, TresUse};

/// A QOS and its limits (`None`: no limit).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Qos {
    pub name: String,
    #[serde(default)]
    pub priority: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_jobs_per_user: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_submit_jobs_per_user: Option<u32>,
    /// Minutes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_wall_minutes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grp_jobs: Option<u32>,
    #[serde(default, skip_serializing_if = "Tres::is_empty")]
    pub max_tres_per_user: Tres,
    #[serde(default, skip_serializing_if = "Tres::is_empty")]
    pub grp_tres: Tres,
    /// The QOS whose running jobs a job of this one may preempt
    /// (`Preempt=`; gctld's `--preempt-mode` says how).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub preempt: Vec<String>,
    /// The GPU time quota of the QOS's shared jobs that state no
    /// `--gpu-share` (`GpuShare=REQ[:LIMIT]`, gsched's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_share: Option<TimeQuota>,
    /// `Flags=LatencyCritical` (gsched's own): the kernel bursts of the
    /// QOS's shared jobs go first on their instance.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub latency_critical: bool,
    /// `GraceTime=` seconds: a job of this QOS chosen for preemption gets
    /// SIGTERM and this long to end before it is requeued or cancelled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grace_time_secs: Option<u32>,
    /// `PreemptMode=`: how the QOS's jobs are preempted, in place of
    /// gctld's `--preempt-mode` (`off`: never). Preemption happens only
    /// while gctld's mode is not `off`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preempt_mode: Option<crate::preempt::PreemptMode>,
}

impl Qos {
    /// The GPU time quota of a shared job of this QOS that states
    /// `stated` (its `--gpu-share`, request and limit): the job's own,
    /// else the QOS's; a latency-critical QOS gives every shared job one
    /// (the least request where none is given).
    pub fn time_quota(&self, stated: Option<TimeQuota>) -> Option<TimeQuota> {
        let base = stated.or(self.gpu_share);
        let base = match (base, self.latency_critical) {
            (Some(q), _) => q,
            (None, true) => TimeQuota {
                request: 1,
                limit: crate::compute::WHOLE_GPU,
                latency_critical: false,
            },
            (None, false) => return None,
        };
        Some(TimeQuota {
            latency_critical: self.latency_critical,
            ..base
        })
    }
}

/// What a job of a QOS takes while it runs, and whose it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobLoad<'a> {
    pub qos: &'a str,
    pub user: &'a str,
    pub tres: TresUse,
}

/// Why a job waits for its QOS (Slurm's reasons).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QosWait {
    MaxJobsPerUser,
    GrpJobs,
    MaxCpuPerUser,
    MaxGresPerUser,
    GrpCpu,
    GrpGres,
}

impl QosWait {
    /// The wait for a resource over a per-user (`user`) or group limit.
    fn over(kind: &TresKind, user: bool) -> QosWait {
        match (kind.is_gres(), user) {
            (false, true) => QosWait::MaxCpuPerUser,
            (true, true) => QosWait::MaxGresPerUser,
            (false, false) => QosWait::GrpCpu,
            (true, false) => QosWait::GrpGres,
        }
    }
}

impl QosWait {
    pub fn reason(self) -> &'static str {
        match self {
            QosWait::MaxJobsPerUser => "QOSMaxJobsPerUserLimit",
            QosWait::GrpJobs => "QOSGrpJobsLimit",
            QosWait::MaxCpuPerUser => "QOSMaxCpuPerUserLimit",
            QosWait::MaxGresPerUser => "QOSMaxGRESPerUser",
            QosWait::GrpCpu => "QOSGrpCpuLimit",
            QosWait::GrpGres => "QOSGrpGRES",
        }
    }
}

/// Why a submission is refused by its QOS.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QosError {
    #[error("Invalid qos specification ('{0}' does not exist)")]
    Unknown(String),
    #[error("Invalid qos specification (user {user} may not use QOS {qos} under this account: granted {granted}; an administrator grants it with sacctmgr modify user {user} set qos+={qos})")]
    NotGranted {
        qos: String,
        user: String,
        granted: String,
    },
    #[error("Job violates accounting/QOS policy (job submit limit, user's size and/or time limits): QOS {qos} allows {minutes} minutes at most (MaxWall)")]
    MaxWall { qos: String, minutes: u64 },
    #[error("Job violates accounting/QOS policy (job submit limit, user's size and/or time limits): QOS {qos} allows {max} jobs of a user queued or running (MaxSubmitJobsPerUser)")]
    MaxSubmit { qos: String, max: u32 },
    #[error("Job violates accounting/QOS policy (job submit limit, user's size and/or time limits): QOS {qos} allows a user {what} (the job alone asks for more)")]
    TooBig { qos: String, what: String },
}

/// The QOS that exist.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QosTable {
    #[serde(default)]
    pub qos: BTreeMap<String, Qos>,
}

/// A change to the QOS, as `sacctmgr` asks it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum QosChange {
    /// A new QOS.
    Add {
        qos: Qos,
    },
    /// An existing QOS replaced by `qos` (of the same name): the caller
    /// reads it, changes what was set, and sends it whole.
    Modify {
        qos: Qos,
    },
    Delete {
        name: String,
    },
}

/// Why a QOS change was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QosChangeError {
    #[error("QOS {0} already exists")]
    Exists(String),
    #[error("QOS {0} does not exist")]
    Unknown(String),
    #[error("'{0}' is not a valid QOS name: letters, digits, '-', '_' and '.' only, at most 64")]
    BadName(String),
    #[error("QOS {0}: GpuShare must be a request above 0 and a limit from the request to 1")]
    BadGpuShare(String),
}

/// The running totals limits are checked against, built for one pass
/// from the running jobs and then updated as jobs are admitted.
#[derive(Debug, Default)]
pub struct QosTally {
    user: BTreeMap<(String, String), (u32, TresUse)>,
    group: BTreeMap<String, (u32, TresUse)>,
}

impl QosTally {
    pub fn add(&mut self, j: &JobLoad<'_>) {
        for t in [
            self.user
                .entry((j.qos.to_string(), j.user.to_string()))
                .or_default(),
            self.group.entry(j.qos.to_string()).or_default(),
        ] {
            t.0 += 1;
            t.1.add(&j.tres);
        }
    }
}

impl QosTable {
    pub fn in_use(&self) -> bool {
        !self.qos.is_empty()
    }

    /// Carries out a change (nothing changes on error).
    pub fn apply(&mut self, change: &QosChange) -> Result<(), QosChangeError> {
        if let QosChange::Add { qos } | QosChange::Modify { qos } = change {
            if qos.gpu_share.is_some_and(|q| !q.is_valid()) {
                return Err(QosChangeError::BadGpuShare(qos.name.clone()));
            }
        }
        match change {
            QosChange::Add { qos } => {
                let n = &qos.name;
                if n.is_empty()
                    || n.len() > 64
                    || !n
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
                {
                    return Err(QosChangeError::BadName(n.clone()));
                }
                if self.qos.contains_key(n) {
                    return Err(QosChangeError::Exists(n.clone()));
                }
                self.qos.insert(n.clone(), qos.clone());
            }
            QosChange::Modify { qos } => {
                let Some(q) = self.qos.get_mut(&qos.name) else {
                    return Err(QosChangeError::Unknown(qos.name.clone()));
                };
                *q = qos.clone();
            }
            QosChange::Delete { name } => {
                if self.qos.remove(name).is_none() {
                    return Err(QosChangeError::Unknown(name.clone()));
                }
            }
        }
        Ok(())
    }

    /// The QOS a job naming `asked` runs under: that one (which must
    /// exist), else `normal` where it exists, else none.
    pub fn qos_for(&self, asked: Option<&str>) -> Result<Option<String>, QosError> {
        match asked {
            Some(q) if self.qos.contains_key(q) => Ok(Some(q.to_string())),
            Some(q) if self.in_use() => Err(QosError::Unknown(q.to_string())),
            Some(q) => Ok(Some(q.to_string())),
            None => Ok(self
                .qos
                .contains_key(DEFAULT_QOS)
                .then(|| DEFAULT_QOS.to_string())),
        }
    }

    /// Whether a submission under `qos` needs its user's jobs there
    /// counted (`MaxSubmitJobsPerUser`).
    pub fn counts_submissions(&self, qos: &str) -> bool {
        self.qos
            .get(qos)
            .is_some_and(|q| q.max_submit_jobs_per_user.is_some())
    }

    /// QOS `qos`'s `MaxWall` in seconds, where it sets one.
    pub fn max_wall_secs(&self, qos: &str) -> Option<u64> {
        self.qos
            .get(qos)?
            .max_wall_minutes
            .map(|m| m.saturating_mul(60))
    }

    /// The limits checked when a job is submitted: its time limit
    /// (`MaxWall`), its own size against the per-user and group TRES
    /// limits, and how many jobs its user has queued or running under
    /// the QOS (`queued`, without it).
    pub fn check_submit(
        &self,
        job: &JobLoad<'_>,
        time_limit_secs: Option<u64>,
        queued: u32,
    ) -> Result<(), QosError> {
        let Some(q) = self.qos.get(job.qos) else {
            return Ok(());
        };
        if let Some(m) = q.max_wall_minutes {
            // A job without a limit gets MaxWall (the caller sets it).
            if time_limit_secs.is_some_and(|t| t > m.saturating_mul(60)) {
                return Err(QosError::MaxWall {
                    qos: q.name.clone(),
                    minutes: m,
                });
            }
        }
        if let Some(max) = q.max_submit_jobs_per_user {
            if queued >= max {
                return Err(QosError::MaxSubmit {
                    qos: q.name.clone(),
                    max,
                });
            }
        }
        for (limit, scope) in [
            (&q.max_tres_per_user, "at most"),
            (&q.grp_tres, "in all at most"),
        ] {
            if let Some(kind) = limit.exceeded(&TresUse::default(), &job.tres) {
                return Err(QosError::TooBig {
                    qos: q.name.clone(),
                    what: format!("{scope} {}", limit.allows(&kind)),
                });
            }
        }
        Ok(())
    }

    /// Whether `job` may start on top of `tally` (what runs, and what this
    /// pass admitted); `Err` says which limit keeps it waiting.
    pub fn admit(&self, tally: &QosTally, job: &JobLoad<'_>) -> Result<(), QosWait> {
        let Some(q) = self.qos.get(job.qos) else {
            return Ok(());
        };
        let none = (0, TresUse::default());
        let (uj, user) = tally
            .user
            .get(&(job.qos.to_string(), job.user.to_string()))
            .unwrap_or(&none);
        let (gj, group) = tally.group.get(job.qos).unwrap_or(&none);
        if q.max_jobs_per_user.is_some_and(|m| *uj >= m) {
            return Err(QosWait::MaxJobsPerUser);
        }
        if q.grp_jobs.is_some_and(|m| *gj >= m) {
            return Err(QosWait::GrpJobs);
        }
        if let Some(kind) = q.max_tres_per_user.exceeded(user, &job.tres) {
            return Err(QosWait::over(&kind, true));
        }
        if let Some(kind) = q.grp_tres.exceeded(group, &job.tres) {
            return Err(QosWait::over(&kind, false));
        }
        Ok(())
    }

    /// The QOS factor of a job under `qos`: its priority over the highest
    /// of any QOS (0 to 1).
    pub fn factor(&self, qos: Option<&str>) -> f64 {
        let top = self.qos.values().map(|q| q.priority).max().unwrap_or(0);
        match qos.and_then(|q| self.qos.get(q)) {
            Some(q) if top > 0 => f64::from(q.priority) / f64::from(top),
            _ => 0.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> QosTable {
        let mut t = QosTable::default();
        t.qos.insert(
            "normal".into(),
            Qos {
                name: "normal".into(),
                priority: 10,
                max_jobs_per_user: Some(2),
                max_tres_per_user: Tres::parse("gres/gpu=2").unwrap(),
                ..Default::default()
            },
        );
        t.qos.insert(
            "short".into(),
            Qos {
                name: "short".into(),
                priority: 100,
                max_wall_minutes: Some(10),
                max_submit_jobs_per_user: Some(1),
                grp_jobs: Some(3),
                ..Default::default()
            },
        );
        t
    }

    fn load<'a>(qos: &'a str, user: &'a str, gpus: u64) -> JobLoad<'a> {
        JobLoad {
            qos,
            user,
            tres: TresUse {
                cpus: 1,
                gpus,
                ..TresUse::default()
            },
        }
    }

    #[test]
    fn jobs_get_their_qos_or_normal() {
        let t = table();
        assert_eq!(t.qos_for(None), Ok(Some("normal".into())));
        assert_eq!(t.qos_for(Some("short")), Ok(Some("short".into())));
        assert_eq!(t.qos_for(Some("x")), Err(QosError::Unknown("x".into())));
        assert_eq!(QosTable::default().qos_for(Some("x")), Ok(Some("x".into())));
        assert_eq!(QosTable::default().qos_for(None), Ok(None));
        assert!((t.factor(Some("normal")) - 0.1).abs() < 1e-9);
        assert_eq!(t.factor(Some("short")), 1.0);
    }

    #[test]
    fn submission_limits_refuse_with_the_reason() {
        let t = table();
        let e = t
            .check_submit(&load("short", "a", 0), Some(3600), 0)
            .unwrap_err();
        assert!(e.to_string().contains("10 minutes"), "{e}");
        assert!(
            t.check_submit(&load("short", "a", 0), None, 0).is_ok(),
            "no limit: the job gets MaxWall (Cluster::apply_max_wall)"
        );
        assert_eq!(t.max_wall_secs("short"), Some(600));
        assert_eq!(t.max_wall_secs("normal"), None);
        assert!(t.check_submit(&load("short", "a", 0), Some(600), 0).is_ok());
        let e = t
            .check_submit(&load("short", "a", 0), Some(60), 1)
            .unwrap_err();
        assert!(e.to_string().contains("MaxSubmitJobsPerUser"), "{e}");
        let e = t
            .check_submit(&load("normal", "a", 3), None, 0)
            .unwrap_err();
        assert!(e.to_string().contains("at most 2 GPUs"), "{e}");
    }

    #[test]
    fn launch_limits_keep_jobs_waiting_with_slurms_reasons() {
        let t = table();
        let mut tally = QosTally::default();
        let j = load("normal", "a", 1);
        assert_eq!(t.admit(&tally, &j), Ok(()));
        tally.add(&j);
        assert_eq!(
            t.admit(&tally, &load("normal", "a", 2)),
            Err(QosWait::MaxGresPerUser)
        );
        tally.add(&j);
        assert_eq!(
            t.admit(&tally, &load("normal", "a", 0)),
            Err(QosWait::MaxJobsPerUser)
        );
        // Another user is not held by a's jobs.
        assert_eq!(t.admit(&tally, &load("normal", "b", 1)), Ok(()));
        for u in ["a", "b", "c"] {
            tally.add(&load("short", u, 0));
        }
        assert_eq!(
            t.admit(&tally, &load("short", "d", 0)),
            Err(QosWait::GrpJobs)
        );
        assert_eq!(QosWait::GrpJobs.reason(), "QOSGrpJobsLimit");
    }

    #[test]
    fn a_users_stated_gpu_time_shares_are_capped() {
        let mut t = QosTable::default();
        t.qos.insert(
            "shared".into(),
            Qos {
                name: "shared".into(),
                max_tres_per_user: Tres::parse("gres/gpushare=1").unwrap(),
                ..Default::default()
            },
        );
        let job = |share: u64| JobLoad {
            qos: "shared",
            user: "a",
            tres: TresUse {
                cpus: 1,
                gpu_share: share,
                ..TresUse::default()
            },
        };
        let mut tally = QosTally::default();
        tally.add(&job(700));
        assert_eq!(t.admit(&tally, &job(300)), Ok(()));
        assert_eq!(t.admit(&tally, &job(400)), Err(QosWait::MaxGresPerUser));
        // A job stating no share is not held by the cap.
        assert_eq!(t.admit(&tally, &job(0)), Ok(()));
        let e = t.check_submit(&job(1500), None, 0).unwrap_err();
        assert!(e.to_string().contains("GPU time shares of 1 GPUs"), "{e}");
    }

    #[test]
    fn gpu_memory_and_mig_profiles_are_limited_like_gres() {
        let mut t = QosTable::default();
        t.qos.insert(
            "mig".into(),
            Qos {
                name: "mig".into(),
                max_tres_per_user: Tres::parse("gres/gpumem=20G,gres/gpu:1g.10gb=2").unwrap(),
                grp_tres: Tres::parse("gres/gpu:1g.10gb=3").unwrap(),
                ..Default::default()
            },
        );
        let job = |user, mem: u64| JobLoad {
            qos: "mig",
            user,
            tres: TresUse {
                cpus: 1,
                gpus: 1,
                gpu_mem_mib: mem,
                mig: [("1g.10gb".to_string(), 1)].into(),
                ..TresUse::default()
            },
        };
        // Too big alone: refused at submission, naming the limit.
        let e = t.check_submit(&job("a", 30 * 1024), None, 0).unwrap_err();
        assert!(e.to_string().contains("MiB of GPU memory"), "{e}");
        let mut tally = QosTally::default();
        tally.add(&job("a", 10 * 1024));
        // Over a's GPU memory, then over a's two 1g.10gb instances.
        assert_eq!(
            t.admit(&tally, &job("a", 11 * 1024)),
            Err(QosWait::MaxGresPerUser)
        );
        tally.add(&job("a", 1024));
        assert_eq!(
            t.admit(&tally, &job("a", 1024)),
            Err(QosWait::MaxGresPerUser)
        );
        // b may run one more; then the group's three are taken.
        assert_eq!(t.admit(&tally, &job("b", 1024)), Ok(()));
        tally.add(&job("b", 1024));
        assert_eq!(t.admit(&tally, &job("c", 1024)), Err(QosWait::GrpGres));
        assert_eq!(QosWait::GrpGres.reason(), "QOSGrpGRES");
    }

    #[test]
    fn tres_read_as_slurm_writes_them() {
        assert_eq!(
            Tres::parse("cpu=4,gres/gpu=2"),
            Ok(Tres {
                cpu: Some(4),
                gpu: Some(2),
                ..Tres::default()
            })
        );
        assert!(Tres::parse("mem=4G").is_err());
        assert!(Tres::parse("cpu=x").is_err());
    }
}
