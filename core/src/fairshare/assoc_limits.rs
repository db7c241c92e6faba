//! Limits on accounts and users' associations (Slurm's association
//! limits): `GrpJobs` and `GrpTRES` on an account count every running job
//! charged to it or to an account below it; on a user's association, that
//! association's jobs. `MaxJobs` (running) and `MaxSubmitJobs` (queued and
//! running) hold per association: its own, else the nearest account
//! above it that sets one; so does `MaxTRES` (what one job may ask for).
//! `GrpSubmitJobs` counts queued and running jobs like `GrpJobs`.
//! `MaxWall` (inherited too) bounds a job's time limit, and is the limit
//! of a job that gives none (as Slurm sets it). Over a
//! launch limit a job waits with Slurm's reason (`AssocGrpJobsLimit`,
//! `AssocGrpGRES`, `AssocGrpCpuLimit`, `AssocMaxJobsLimit`); over
//! `MaxSubmitJobs`, `GrpSubmitJobs` or `MaxTRES`, or larger alone than a
//! `GrpTRES`, it is refused at submission. Pure.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::fairshare::FairShare;
use crate::tres::{Tres, TresUse};

/// The limits of an account or association (`None`: none).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AssocLimits {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grp_jobs: Option<u32>,
    #[serde(default, skip_serializing_if = "Tres::is_empty")]
    pub grp_tres: Tres,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_jobs: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_submit_jobs: Option<u32>,
    /// `GrpSubmitJobs`: jobs queued or running in all (an account: with
    /// the accounts below it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grp_submit_jobs: Option<u32>,
    /// `MaxTRES`: what one job may ask for (own, else inherited).
    #[serde(default, skip_serializing_if = "Tres::is_empty")]
    pub max_tres_per_job: Tres,
    /// `MaxWall`: the longest time limit a job may have, minutes (own,
    /// else inherited); a job without one gets it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_wall_minutes: Option<u64>,
    /// `QOS=`: the QOS its jobs may run under (own, else inherited; set
    /// nowhere: `normal` only). See `qos_rights`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qos: Option<Vec<String>>,
    /// `DefaultQOS=`: the QOS of a job that names none (own, else
    /// inherited).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_qos: Option<String>,
}

impl AssocLimits {
    pub fn is_empty(&self) -> bool {
        *self == AssocLimits::default()
    }

    /// Whether it limits what runs or is queued (its QOS rights aside).
    pub fn counts_jobs(&self) -> bool {
        !AssocLimits {
            qos: None,
            default_qos: None,
            ..self.clone()
        }
        .is_empty()
    }
}

/// Why a job waits for its association (Slurm's reasons).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AssocWait {
    MaxJobs,
    GrpJobs,
    GrpCpu,
    GrpGres,
}

impl AssocWait {
    pub fn reason(self) -> &'static str {
        match self {
            AssocWait::MaxJobs => "AssocMaxJobsLimit",
            AssocWait::GrpJobs => "AssocGrpJobsLimit",
            AssocWait::GrpCpu => "AssocGrpCpuLimit",
            AssocWait::GrpGres => "AssocGrpGRES",
        }
    }
}

/// Running jobs per association and per account (with the accounts below
/// it), built for one pass and updated as jobs are admitted.
#[derive(Debug, Default)]
pub struct AssocTally {
    by_assoc: BTreeMap<(String, String), (u32, TresUse)>,
    by_account: BTreeMap<String, (u32, TresUse)>,
}

/// A submission over an association's limits, in Slurm's words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct LimitRefusal(pub String);

impl From<String> for LimitRefusal {
    fn from(why: String) -> Self {
        LimitRefusal(why)
    }
}

impl FairShare {
    /// Whether any account or association has a limit (none: nothing to
    /// count in a pass).
    pub fn has_limits(&self) -> bool {
        self.accounts.values().any(|a| a.limits.counts_jobs())
            || self.associations.values().any(|a| a.limits.counts_jobs())
    }

    /// Whether a submission of `user` charged to `account` needs the
    /// association's queued jobs counted (`MaxSubmitJobs`, its own
    /// `GrpSubmitJobs`).
    pub fn counts_submissions(&self, user: &str, account: &str) -> bool {
        self.inherited(user, account, |l| l.max_submit_jobs)
            .is_some()
            || self
                .associations
                .get(&(user.to_string(), account.to_string()))
                .is_some_and(|a| a.limits.grp_submit_jobs.is_some())
    }

    /// An association's `MaxWall` in seconds: its own, else the nearest
    /// account above it that sets one.
    pub fn max_wall_secs(&self, user: &str, account: &str) -> Option<u64> {
        self.inherited(user, account, |l| l.max_wall_minutes)
            .map(|m| m.saturating_mul(60))
    }

    /// An association's `MaxJobs`, `MaxSubmitJobs` or `MaxWall` (`pick`):
    /// its own, else the nearest account above it that sets one.
    pub(crate) fn inherited<T>(
        &self,
        user: &str,
        account: &str,
        pick: impl Fn(&AssocLimits) -> Option<T>,
    ) -> Option<T> {
        self.associations
            .get(&(user.to_string(), account.to_string()))
            .and_then(|a| pick(&a.limits))
            .or_else(|| {
                self.path(account)
                    .iter()
                    .find_map(|n| self.accounts.get(n).and_then(|a| pick(&a.limits)))
            })
    }

    /// The GPU memory limits (MiB) that hold one job of `user` charged to
    /// `account`: `MaxTRES` and `GrpTRES` of its association and of the
    /// accounts above it.
    pub fn gpu_mem_caps(&self, user: &str, account: &str) -> Vec<u64> {
        let own = self
            .associations
            .get(&(user.to_string(), account.to_string()))
            .map(|a| &a.limits);
        let above = self
            .path(account)
            .into_iter()
            .filter_map(|n| self.accounts.get(&n).map(|a| &a.limits));
        own.into_iter()
            .chain(above)
            .flat_map(|l| [l.max_tres_per_job.gpu_mem_mib, l.grp_tres.gpu_mem_mib])
            .flatten()
            .collect()
    }

    /// Counts a running (or admitted) job of `user` charged to `account`.
    pub fn tally(&self, tally: &mut AssocTally, user: &str, account: &str, load: &TresUse) {
        let t = tally
            .by_assoc
            .entry((user.to_string(), account.to_string()))
            .or_default();
        t.0 += 1;
        t.1.add(load);
        for a in self.path(account) {
            let t = tally.by_account.entry(a).or_default();
            t.0 += 1;
            t.1.add(load);
        }
    }

    /// Whether a job of `user` charged to `account` taking `load` may
    /// start on top of `tally`.
    pub fn admit(
        &self,
        tally: &AssocTally,
        user: &str,
        account: &str,
        load: &TresUse,
    ) -> Result<(), AssocWait> {
        let none = (0, TresUse::default());
        let key = (user.to_string(), account.to_string());
        let (jobs, used) = tally.by_assoc.get(&key).unwrap_or(&none);
        if self
            .inherited(user, account, |l| l.max_jobs)
            .is_some_and(|m| *jobs >= m)
        {
            return Err(AssocWait::MaxJobs);
        }
        let own = self.associations.get(&key).map(|a| &a.limits);
        let groups = own.map(|l| (l, *jobs, used)).into_iter().chain(
            self.path(account).into_iter().filter_map(|n| {
                let l = &self.accounts.get(&n)?.limits;
                let (j, u) = tally.by_account.get(&n).unwrap_or(&none);
                Some((l, *j, u))
            }),
        );
        for (limits, jobs, used) in groups {
            if limits.grp_jobs.is_some_and(|m| jobs >= m) {
                return Err(AssocWait::GrpJobs);
            }
            if let Some(kind) = limits.grp_tres.exceeded(used, load) {
                return Err(if kind.is_gres() {
                    AssocWait::GrpGres
                } else {
                    AssocWait::GrpCpu
                });
            }
        }
        Ok(())
    }

    /// Checks a submission of `user` charged to `account` taking `load`
    /// for `time_limit_secs`, with `queued` of the association's jobs
    /// queued or running already and `queued_in(a)` those charged to
    /// account `a`: `MaxWall`, `MaxSubmitJobs`, `GrpSubmitJobs`, `MaxTRES`
    /// (per job), and a `GrpTRES` it is larger than alone. The error is in
    /// Slurm's words.
    pub fn check_submit(
        &self,
        user: &str,
        account: &str,
        load: &TresUse,
        time_limit_secs: Option<u64>,
        queued: u32,
        queued_in: &dyn Fn(&str) -> u32,
    ) -> Result<(), LimitRefusal> {
        const VIOLATES: &str =
            "Job violates accounting/QOS policy (job submit limit, user's size and/or time limits)";
        if let (Some(max), Some(t)) = (self.max_wall_secs(user, account), time_limit_secs) {
            if t > max {
                return Err(LimitRefusal(format!(
                    "{VIOLATES}: the association of user {user} with account {account} allows {} minutes at most (MaxWall)",
                    max / 60
                )));
            }
        }
        if let Some(m) = self
            .inherited(user, account, |l| l.max_submit_jobs)
            .filter(|m| queued >= *m)
        {
            return Err(LimitRefusal(format!(
                "{VIOLATES}: the association of user {user} with account {account} allows {m} jobs queued or running (MaxSubmitJobs)"
            )));
        }
        let per_job = self
            .associations
            .get(&(user.to_string(), account.to_string()))
            .map(|a| &a.limits.max_tres_per_job)
            .filter(|t| !t.is_empty())
            .or_else(|| {
                self.path(account).iter().find_map(|n| {
                    let t = &self.accounts.get(n)?.limits.max_tres_per_job;
                    (!t.is_empty()).then_some(t)
                })
            });
        if let Some(t) = per_job {
            if let Some(kind) = t.exceeded(&TresUse::default(), load) {
                return Err(LimitRefusal(format!(
                    "{VIOLATES}: the association of user {user} with account {account} allows a job at most {} (MaxTRES)",
                    t.allows(&kind)
                )));
            }
        }
        if let Some(a) = self
            .associations
            .get(&(user.to_string(), account.to_string()))
            .and_then(|a| a.limits.grp_submit_jobs)
            .filter(|m| queued >= *m)
        {
            return Err(LimitRefusal(format!(
                "{VIOLATES}: user {user} in account {account} allows {a} jobs queued or running (GrpSubmitJobs)"
            )));
        }
        for n in self.path(account) {
            let Some(m) = self.accounts.get(&n).and_then(|a| a.limits.grp_submit_jobs) else {
                continue;
            };
            let in_all: u32 = self
                .accounts
                .keys()
                .filter(|a| self.path(a).contains(&n))
                .map(|a| queued_in(a))
                .sum();
            if in_all >= m {
                return Err(LimitRefusal(format!(
                    "{VIOLATES}: account {n} allows {m} jobs queued or running in all (GrpSubmitJobs)"
                )));
            }
        }
        let own = self
            .associations
            .get(&(user.to_string(), account.to_string()))
            .map(|a| (format!("user {user} in account {account}"), &a.limits));
        let accounts = self.path(account).into_iter().filter_map(|n| {
            let l = &self.accounts.get(&n)?.limits;
            Some((format!("account {n}"), l))
        });
        for (what, limits) in own.into_iter().chain(accounts) {
            if let Some(kind) = limits.grp_tres.exceeded(&TresUse::default(), load) {
                return Err(LimitRefusal(format!(
                    "{VIOLATES}: {what} allows in all at most {} (GrpTRES; the job alone asks for more)",
                    limits.grp_tres.allows(&kind)
                )));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fairshare::AccountChange;

    fn site() -> FairShare {
        let mut f = FairShare::default();
        for (name, parent) in [("science", None), ("physics", Some("science"))] {
            f.apply(&AccountChange::AddAccount {
                name: name.into(),
                parent: parent.map(String::from),
                shares: None,
                description: None,
            })
            .unwrap();
        }
        for user in ["ann", "bob"] {
            f.apply(&AccountChange::AddUser {
                user: user.into(),
                account: "physics".into(),
                shares: None,
                default: true,
            })
            .unwrap();
        }
        f
    }

    fn set(f: &mut FairShare, account: &str, user: Option<&str>, limits: AssocLimits) {
        f.apply(&AccountChange::SetLimits {
            account: account.into(),
            user: user.map(String::from),
            limits,
        })
        .unwrap();
    }

    fn gpus(n: u64) -> TresUse {
        TresUse {
            cpus: 1,
            gpus: n,
            ..TresUse::default()
        }
    }

    #[test]
    fn an_accounts_group_limits_count_the_accounts_below_it() {
        let mut f = site();
        set(
            &mut f,
            "science",
            None,
            AssocLimits {
                grp_tres: Tres::parse("gres/gpu=3").unwrap(),
                grp_jobs: Some(3),
                ..AssocLimits::default()
            },
        );
        assert!(f.has_limits());
        let mut t = AssocTally::default();
        f.tally(&mut t, "ann", "physics", &gpus(2));
        assert_eq!(f.admit(&t, "bob", "physics", &gpus(1)), Ok(()));
        assert_eq!(
            f.admit(&t, "bob", "physics", &gpus(2)),
            Err(AssocWait::GrpGres)
        );
        f.tally(&mut t, "bob", "physics", &gpus(1));
        f.tally(&mut t, "bob", "physics", &gpus(0));
        assert_eq!(
            f.admit(&t, "ann", "physics", &gpus(0)),
            Err(AssocWait::GrpJobs)
        );
        assert_eq!(AssocWait::GrpGres.reason(), "AssocGrpGRES");
        // Larger alone than the account's GrpTRES: refused at submission.
        let e = f
            .check_submit("ann", "physics", &gpus(4), None, 0, &|_| 0)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("account science allows in all at most 3 GPUs"),
            "{e}"
        );
    }

    #[test]
    fn per_job_and_group_submission_limits_refuse_at_submission() {
        let mut f = site();
        set(
            &mut f,
            "science",
            None,
            AssocLimits {
                grp_submit_jobs: Some(3),
                max_tres_per_job: Tres::parse("gres/gpu=2").unwrap(),
                ..AssocLimits::default()
            },
        );
        // MaxTRES is inherited by physics's users.
        let e = f
            .check_submit("ann", "physics", &gpus(3), None, 0, &|_| 0)
            .unwrap_err()
            .to_string();
        assert!(e.contains("a job at most 2 GPUs (MaxTRES)"), "{e}");
        // science's GrpSubmitJobs counts the jobs charged to physics too.
        let two_in_physics = |a: &str| if a == "physics" { 2 } else { 0 };
        assert!(f
            .check_submit("ann", "physics", &gpus(1), None, 0, &two_in_physics)
            .is_ok());
        let three = |a: &str| if a == "physics" { 3 } else { 0 };
        let e = f
            .check_submit("bob", "physics", &gpus(1), None, 0, &three)
            .unwrap_err()
            .to_string();
        assert!(e.contains("account science allows 3 jobs"), "{e}");
    }

    #[test]
    fn max_jobs_hold_per_association_own_or_inherited() {
        let mut f = site();
        set(
            &mut f,
            "physics",
            None,
            AssocLimits {
                max_jobs: Some(1),
                max_submit_jobs: Some(2),
                ..AssocLimits::default()
            },
        );
        // bob's own limit wins over the account's.
        set(
            &mut f,
            "physics",
            Some("bob"),
            AssocLimits {
                max_jobs: Some(2),
                ..AssocLimits::default()
            },
        );
        let mut t = AssocTally::default();
        f.tally(&mut t, "ann", "physics", &gpus(1));
        f.tally(&mut t, "bob", "physics", &gpus(1));
        assert_eq!(
            f.admit(&t, "ann", "physics", &gpus(1)),
            Err(AssocWait::MaxJobs)
        );
        assert_eq!(f.admit(&t, "bob", "physics", &gpus(1)), Ok(()));
        let none = |_: &str| 0;
        assert!(f
            .check_submit("ann", "physics", &gpus(1), None, 1, &none)
            .is_ok());
        let e = f
            .check_submit("ann", "physics", &gpus(1), None, 2, &none)
            .unwrap_err()
            .to_string();
        assert!(e.contains("MaxSubmitJobs"), "{e}");
        // Clearing them lifts them.
        set(&mut f, "physics", None, AssocLimits::default());
        assert_eq!(f.admit(&t, "ann", "physics", &gpus(1)), Ok(()));
        // An account or association that does not exist is refused.
        assert!(f
            .apply(&AccountChange::SetLimits {
                account: "chemistry".into(),
                user: None,
                limits: AssocLimits::default(),
            })
            .is_err());
        assert!(f
            .apply(&AccountChange::SetLimits {
                account: "science".into(),
                user: Some("ann".into()),
                limits: AssocLimits::default(),
            })
            .is_err());
    }

    #[test]
    fn max_wall_is_inherited_and_refuses_a_longer_limit() {
        let mut f = site();
        set(
            &mut f,
            "science",
            None,
            AssocLimits {
                max_wall_minutes: Some(60),
                ..AssocLimits::default()
            },
        );
        assert_eq!(
            f.max_wall_secs("ann", "physics"),
            Some(3600),
            "from science"
        );
        let none = |_: &str| 0;
        let e = f
            .check_submit("ann", "physics", &gpus(1), Some(7200), 0, &none)
            .unwrap_err()
            .to_string();
        assert!(e.contains("allows 60 minutes at most (MaxWall)"), "{e}");
        assert!(f
            .check_submit("ann", "physics", &gpus(1), Some(3600), 0, &none)
            .is_ok());
        assert!(f
            .check_submit("ann", "physics", &gpus(1), None, 0, &none)
            .is_ok());
        // ann's own is used before the account's.
        set(
            &mut f,
            "physics",
            Some("ann"),
            AssocLimits {
                max_wall_minutes: Some(600),
                ..AssocLimits::default()
            },
        );
        assert_eq!(f.max_wall_secs("ann", "physics"), Some(36000));
        assert_eq!(f.max_wall_secs("bob", "physics"), Some(3600));
    }
}
