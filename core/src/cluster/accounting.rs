//! The controller's accounts (`fairshare`) and QOS (`qos`): a job is
//! charged to its account (its `--account`, checked against its user's
//! associations, or the user's default) when it ends, and runs under its
//! QOS (`--qos`, else `normal`), whose limits refuse it at submission or
//! keep it pending; changes come from administrators (`sacctmgr`) and
//! every change is persisted through one effect.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::{resources_of, Cluster, ClusterError, Effect};
use crate::fairshare::assoc_limits::AssocTally;
use crate::fairshare::{AccountChange, BillingWeights, ShareRow, StoredFairShare};
use crate::job::{Job, JobId, JobSpec, JobState};
use crate::qos::{JobLoad, Qos, QosChange, QosTable, QosTally};

/// What the store keeps of accounting: accounts, associations, usage and
/// QOS.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct StoredAccounting {
    #[serde(flatten)]
    pub fair_share: StoredFairShare,
    #[serde(default)]
    pub qos: Vec<Qos>,
}

/// How jobs are charged and held to their accounts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AccountingConfig {
    /// Every job must run under one of its user's associations (Slurm's
    /// `AccountingStorageEnforce=associations`); otherwise a user without
    /// any runs uncharged.
    pub enforce: bool,
    /// Usage halves in this many seconds (`PriorityDecayHalfLife`).
    pub half_life_secs: i64,
    pub weights: BillingWeights,
    /// The fair-share factor by Slurm's Fair Tree (`fair_tree`) instead
    /// of the classic one.
    pub fair_tree: bool,
    /// A job may run only under a QOS its association (or an account
    /// above it, or root) was granted (`qos_rights`). Always on in gctld;
    /// the simulator replays jobs a site already accepted and turns it
    /// off unless its site says otherwise.
    pub qos_rights: bool,
}

impl Default for AccountingConfig {
    fn default() -> Self {
        AccountingConfig {
            enforce: false,
            half_life_secs: 7 * 24 * 3600,
            weights: BillingWeights::default(),
            fair_tree: false,
            qos_rights: true,
        }
    }
}

impl Cluster {
    pub fn set_accounting(&mut self, config: AccountingConfig) {
        self.accounting = config;
    }

    pub fn accounting(&self) -> AccountingConfig {
        self.accounting
    }

    /// The accounts and QOS as the store had them (at start).
    pub fn restore_accounts(&mut self, stored: StoredAccounting) {
        self.fair_share = stored.fair_share.into();
        self.qos = QosTable {
            qos: stored
                .qos
                .into_iter()
                .map(|q| (q.name.clone(), q))
                .collect(),
        };
    }

    /// What to persist of the accounts and QOS.
    pub fn stored_accounts(&self) -> StoredAccounting {
        StoredAccounting {
            fair_share: (&self.fair_share).into(),
            qos: self.qos.qos.values().cloned().collect(),
        }
    }

    /// An administrator's change to the QOS.
    pub fn change_qos(&mut self, change: &QosChange) -> Result<Vec<Effect>, ClusterError> {
        if let QosChange::Delete { name } = change {
            if let Some(who) = self.fair_share.granting(name) {
                return Err(ClusterError::Refused(format!(
                    "QOS {name} is granted to {who}; take it out of the grants first (sacctmgr modify ... set qos-={name}, or another DefaultQOS)"
                )));
            }
        }
        self.qos
            .apply(change)
            .map_err(|e| ClusterError::Refused(e.to_string()))?;
        Ok(vec![Effect::Accounts])
    }

    /// The GPU time quota a shared job's processes are held to on their
    /// instance ([`crate::time_quota`]): its own `--gpu-share`, else its
    /// QOS's; latency-critical as its QOS says. `None` for isolated jobs
    /// and jobs with neither.
    pub fn time_quota(&self, job: &crate::Job) -> Option<crate::time_quota::TimeQuota> {
        if job.spec.isolated {
            return None;
        }
        let stated = job.spec.stated_time_quota();
        match job
            .spec
            .slurm
            .qos
            .as_deref()
            .and_then(|q| self.qos.qos.get(q))
        {
            Some(qos) => qos.time_quota(stated),
            None => stated,
        }
    }

    /// The smallest GPU memory limit (MiB, `gres/gpumem`) that holds job
    /// `job` alone: its QOS's `MaxTRESPerUser` and `GrpTRES`, its
    /// association's and the accounts' above it `MaxTRES` and `GrpTRES`.
    /// Its shared processes' reservations are held to it on their nodes.
    pub fn gpu_mem_cap(&self, job: &crate::Job) -> Option<u64> {
        let spec = &job.spec;
        let qos = spec.slurm.qos.as_deref().and_then(|q| self.qos.qos.get(q));
        let from_qos = qos
            .into_iter()
            .flat_map(|q| [q.max_tres_per_user.gpu_mem_mib, q.grp_tres.gpu_mem_mib]);
        let from_assoc = spec
            .slurm
            .account
            .as_deref()
            .map(|a| self.fair_share.gpu_mem_caps(&spec.user_name, a))
            .unwrap_or_default();
        from_qos
            .chain(from_assoc.into_iter().map(Some))
            .flatten()
            .min()
    }

    /// Sets the QOS a submission runs under and checks the QOS's
    /// submission limits.
    pub(super) fn choose_qos(&self, spec: &mut JobSpec) -> Result<(), ClusterError> {
        let refuse = |e: crate::qos::QosError| {
            ClusterError::Refused(format!("Batch job submission failed: {e}"))
        };
        let rights = self
            .fair_share
            .qos_rights(&spec.user_name, spec.slurm.account.as_deref());
        if !self.qos.in_use() {
            // None exists yet: only `normal` may be named (a job staged
            // under a name an administrator creates later would run under
            // it without a grant); root's own jobs are not held to it.
            return match spec.slurm.qos.clone() {
                Some(qos)
                    if self.accounting.qos_rights && spec.uid != 0 && !rights.allows(&qos) =>
                {
                    Err(refuse(crate::qos::QosError::NotGranted {
                        qos,
                        user: spec.user_name.clone(),
                        granted: rights.describe(),
                    }))
                }
                _ => Ok(()),
            };
        }
        let asked = spec
            .slurm
            .qos
            .clone()
            .or_else(|| rights.default_qos().map(String::from));
        spec.slurm.qos = self.qos.qos_for(asked.as_deref()).map_err(refuse)?;
        let Some(qos) = spec.slurm.qos.clone() else {
            return Ok(());
        };
        // Root's own jobs may use any QOS; everyone else only those
        // granted (`qos_rights`).
        if self.accounting.qos_rights && spec.uid != 0 && !rights.allows(&qos) {
            return Err(refuse(crate::qos::QosError::NotGranted {
                qos,
                user: spec.user_name.clone(),
                granted: rights.describe(),
            }));
        }
        // Counted only where a limit needs the count.
        let queued = if self.qos.counts_submissions(&qos) {
            self.active_jobs_of(&spec.user_name, |s| {
                s.slurm.qos.as_deref() == Some(qos.as_str())
            })
        } else {
            0
        };
        self.qos
            .check_submit(
                &JobLoad {
                    qos: &qos,
                    user: &spec.user_name,
                    tres: load_of(spec),
                },
                spec.time_limit,
                queued,
            )
            .map_err(refuse)
    }

    /// Keeps the queued jobs (in the order the pass weighs them) that
    /// their QOS's or their association's launch limits would not allow
    /// on top of what runs and of the jobs before them; returns those and
    /// why (Slurm's reasons).
    pub(super) fn qos_filter(&self, queues: [&mut Vec<JobId>; 2]) -> Vec<(JobId, &'static str)> {
        let qos = self.qos.in_use();
        let assoc = self.fair_share.has_limits();
        if !qos && !assoc {
            return Vec::new();
        }
        let mut tally = QosTally::default();
        let mut assoc_tally = AssocTally::default();
        for n in self.nodes.values() {
            // A job on several nodes counts once, with its batch node.
            for j in n
                .running
                .iter()
                .filter_map(|id| self.jobs.get(id))
                .filter(|j| j.state == JobState::Running && j.node.as_deref() == Some(&n.name))
            {
                let (l, account) = limit_loads(j, qos, assoc);
                if let Some(l) = &l {
                    tally.add(l);
                }
                if let Some((a, load)) = &account {
                    let user = &j.spec.user_name;
                    self.fair_share.tally(&mut assoc_tally, user, a, load);
                }
            }
        }
        let mut waits = Vec::new();
        // A grant taken away after submission (or the QOS gone): the job
        // waits (Slurm's InvalidQOS). Worked out once per user, account
        // and QOS in a pass.
        let rights_checked = qos && self.accounting.qos_rights;
        let mut granted: HashMap<(&str, Option<&str>, &str), bool> = HashMap::new();
        for ids in queues {
            ids.retain(|id| {
                let Some(j) = self.jobs.get(id) else {
                    return true;
                };
                let user = &j.spec.user_name;
                if let Some(q) = j
                    .spec
                    .slurm
                    .qos
                    .as_deref()
                    .filter(|_| rights_checked && j.spec.uid != 0)
                {
                    let account = j.spec.slurm.account.as_deref();
                    let allowed = *granted.entry((user, account, q)).or_insert_with(|| {
                        self.qos.qos.contains_key(q)
                            && self.fair_share.qos_rights(user, account).allows(q)
                    });
                    if !allowed {
                        waits.push((*id, "InvalidQOS"));
                        return false;
                    }
                }
                let (l, account) = limit_loads(j, qos, assoc);
                let verdict = match &l {
                    Some(l) => self.qos.admit(&tally, l).map_err(|w| w.reason()),
                    None => Ok(()),
                }
                .and_then(|()| match &account {
                    Some((a, load)) => self
                        .fair_share
                        .admit(&assoc_tally, user, a, load)
                        .map_err(|w| w.reason()),
                    None => Ok(()),
                });
                match verdict {
                    Ok(()) => {
                        if let Some(l) = &l {
                            tally.add(l);
                        }
                        if let Some((a, load)) = &account {
                            self.fair_share.tally(&mut assoc_tally, user, a, load);
                        }
                        true
                    }
                    Err(reason) => {
                        waits.push((*id, reason));
                        false
                    }
                }
            });
        }
        waits
    }

    /// An administrator's change to the accounts.
    pub fn change_accounts(&mut self, change: &AccountChange) -> Result<Vec<Effect>, ClusterError> {
        let refuse = |e: crate::fairshare::AccountError| ClusterError::Refused(e.to_string());
        if !matches!(change, AccountChange::SetLimits { .. }) {
            self.fair_share.apply(change).map_err(refuse)?;
            return Ok(vec![Effect::Accounts]);
        }
        // QOS rights are checked once set, every grant (a change above an
        // association changes what it inherits), on a copy: nothing
        // changes when they are refused.
        let mut changed = self.fair_share.clone();
        changed.apply(change).map_err(refuse)?;
        changed
            .check_all_qos_rights(|q| self.qos.qos.contains_key(q))
            .map_err(refuse)?;
        self.fair_share = changed;
        Ok(vec![Effect::Accounts])
    }

    /// `sshare`'s lines at `now`.
    pub fn share_rows(&self, now: i64) -> Vec<ShareRow> {
        let mut rows = self.fair_share.rows(now, self.accounting.half_life_secs);
        if let Some(tree) = self.fair_tree(now) {
            // The factor multifactor uses.
            for r in rows.iter_mut().filter(|r| r.fair_share.is_some()) {
                r.fair_share = tree.get(&(r.user.clone(), r.account.clone())).copied();
            }
        }
        rows
    }

    /// Sets the account a submission is charged to, or refuses it (an
    /// account that is not one of its user's, or none where required).
    pub(super) fn choose_account(&self, spec: &mut JobSpec) -> Result<(), ClusterError> {
        if !self.fair_share.in_use() && !self.accounting.enforce {
            return Ok(());
        }
        let account = self
            .fair_share
            .account_for(
                &spec.user_name,
                spec.slurm.account.as_deref(),
                self.accounting.enforce,
            )
            .map_err(|e| ClusterError::Refused(format!("Batch job submission failed: {e}")))?;
        if account.is_some() {
            spec.slurm.account = account;
        }
        self.check_assoc_submit(spec)
    }

    /// How many of `user`'s jobs that `matches` are queued or running
    /// (its own jobs only: `jobs_by_user.rs`).
    fn active_jobs_of(&self, user: &str, matches: impl Fn(&JobSpec) -> bool) -> u32 {
        self.jobs_by_user
            .of(user)
            .filter_map(|id| self.jobs.get(&id))
            .filter(|j| !j.state.is_final() && matches(&j.spec))
            .count() as u32
    }

    /// The limits of the submission's association and the accounts above
    /// it that apply at submission (`MaxSubmitJobs`, a `GrpTRES` it is
    /// larger than alone).
    fn check_assoc_submit(&self, spec: &JobSpec) -> Result<(), ClusterError> {
        let Some(account) = spec.slurm.account.as_deref() else {
            return Ok(());
        };
        if !self.fair_share.has_limits() {
            return Ok(());
        }
        let queued = if self.fair_share.counts_submissions(&spec.user_name, account) {
            self.active_jobs_of(&spec.user_name, |s| {
                s.slurm.account.as_deref() == Some(account)
            })
        } else {
            0
        };
        let queued_in = |a: &str| {
            self.jobs
                .values()
                .filter(|j| !j.state.is_final() && j.spec.slurm.account.as_deref() == Some(a))
                .count() as u32
        };
        self.fair_share
            .check_submit(
                &spec.user_name,
                account,
                &load_of(spec),
                spec.time_limit,
                queued,
                &queued_in,
            )
            .map_err(|e| ClusterError::Refused(format!("Batch job submission failed: {e}")))
    }

    /// A submission without a time limit gets the smallest `MaxWall` of
    /// its QOS and its association, as Slurm sets it.
    pub(super) fn apply_max_wall(&self, spec: &mut JobSpec) {
        if spec.time_limit.is_some() {
            return;
        }
        let qos = spec
            .slurm
            .qos
            .as_deref()
            .and_then(|q| self.qos.max_wall_secs(q));
        let assoc = spec
            .slurm
            .account
            .as_deref()
            .and_then(|a| self.fair_share.max_wall_secs(&spec.user_name, a));
        spec.time_limit = match (qos, assoc) {
            (Some(q), Some(a)) => Some(q.min(a)),
            (q, a) => q.or(a),
        };
    }

    /// Charges what job `id`'s run held, from its start to `now`, to its
    /// account: the effect that persists it, if anything was charged.
    pub(super) fn charge(&mut self, id: JobId, now: i64) -> Option<Effect> {
        let job = self.jobs.get(&id)?;
        let account = job.spec.slurm.account.clone()?;
        if !self.fair_share.in_use() {
            return None;
        }
        job.start_time?;
        // Suspended time is not charged (as Slurm does not).
        let ran = job.elapsed(now);
        let width = job.nodes().len().max(1);
        let res = resources_of(job);
        let gpus: usize =
            job.gpu_instances.len() + job.sisters.iter().map(|s| s.instances.len()).sum::<usize>();
        let mem = res.memory_mib(0) * width as u64;
        let units = self
            .accounting
            .weights
            .units(res.cpus * width as u32, gpus, mem, ran);
        let user = job.spec.user_name.clone();
        self.fair_share
            .charge(&user, &account, units, now, self.accounting.half_life_secs);
        Some(Effect::Accounts)
    }
}

/// What a job takes in all (on every node) of what limits count: CPUs;
/// an isolated job's GPU instances, of its profile where it names one;
/// GPU memory as asked (`--gpu-mem`, on each instance; a shared job's
/// hint); a shared job's stated GPU time share.
fn load_of(spec: &JobSpec) -> crate::tres::TresUse {
    let width = u64::from(crate::allocation::width_of(&spec.slurm));
    let cpus = crate::resources::JobResources::of(&spec.slurm).map_or(1, |r| u64::from(r.cpus));
    let instances = if spec.isolated {
        spec.gpu.instances() as u64 * width
    } else {
        0
    };
    let gpu_mem_mib = spec.gpu.mem_mib.unwrap_or(0) * instances.max(1);
    crate::tres::TresUse {
        cpus: cpus * width,
        gpus: instances,
        gpu_mem_mib,
        gpu_share: if spec.isolated {
            0
        } else {
            u64::from(spec.gpu.share.unwrap_or(0))
        },
        mig: spec
            .gpu
            .mig_profile
            .iter()
            .map(|p| (p.clone(), instances))
            .collect(),
    }
}

/// What job `j` counts against the limits in use, its load worked out
/// once: against its QOS (where `qos` limits are in use and it has one),
/// and against its account (where `assoc` limits are, and it has one).
fn limit_loads(
    j: &Job,
    qos: bool,
    assoc: bool,
) -> (Option<JobLoad<'_>>, Option<(&str, crate::tres::TresUse)>) {
    let l = qos.then(|| job_load(j)).flatten();
    let account = j.spec.slurm.account.as_deref().filter(|_| assoc).map(|a| {
        let load = l
            .as_ref()
            .map_or_else(|| load_of(&j.spec), |l| l.tres.clone());
        (a, load)
    });
    (l, account)
}

/// What a job counts against its QOS's limits (none without a QOS).
fn job_load(j: &Job) -> Option<JobLoad<'_>> {
    let qos = j.spec.slurm.qos.as_deref()?;
    Some(JobLoad {
        qos,
        user: &j.spec.user_name,
        tres: load_of(&j.spec),
    })
}

#[cfg(test)]
mod tests {
    use crate::cluster::testkit::{cluster, ended, launch, spec};
    use crate::cluster::Effect;
    use crate::fairshare::AccountChange;
    use crate::qos::{Qos, QosChange};

    fn physics(c: &mut crate::cluster::Cluster) {
        c.change_accounts(&AccountChange::AddAccount {
            name: "physics".into(),
            parent: None,
            shares: Some(1),
            description: None,
        })
        .unwrap();
        c.change_accounts(&AccountChange::AddUser {
            user: "u".into(),
            account: "physics".into(),
            shares: None,
            default: true,
        })
        .unwrap();
    }

    #[test]
    fn a_job_without_a_time_limit_gets_the_smaller_max_wall_of_its_qos_and_association() {
        let mut c = cluster();
        physics(&mut c);
        c.change_accounts(&AccountChange::SetLimits {
            account: "physics".into(),
            user: None,
            limits: crate::fairshare::assoc_limits::AssocLimits {
                max_wall_minutes: Some(30),
                ..Default::default()
            },
        })
        .unwrap();
        let (id, _) = c.submit(spec("a", false), 0).unwrap();
        assert_eq!(c.job(id).unwrap().spec.time_limit, Some(1800));
        c.change_qos(&QosChange::Add {
            qos: Qos {
                name: "normal".into(),
                max_wall_minutes: Some(10),
                ..Default::default()
            },
        })
        .unwrap();
        let (id, _) = c.submit(spec("b", false), 0).unwrap();
        assert_eq!(c.job(id).unwrap().spec.time_limit, Some(600));
        // One that gives its own keeps it, within both.
        let mut own = spec("c", false);
        own.time_limit = Some(300);
        let (id, _) = c.submit(own, 0).unwrap();
        assert_eq!(c.job(id).unwrap().spec.time_limit, Some(300));
        let mut long = spec("d", false);
        long.time_limit = Some(3600);
        assert!(c
            .submit(long, 0)
            .unwrap_err()
            .to_string()
            .contains("MaxWall"));
    }

    #[test]
    fn jobs_are_charged_to_their_account_and_checked_against_it() {
        let mut c = cluster();
        physics(&mut c);
        // No --account: the user's default.
        let (id, _) = c.submit(spec("a", false), 0).unwrap();
        assert_eq!(
            c.job(id).unwrap().spec.slurm.account.as_deref(),
            Some("physics")
        );
        let mut other = spec("b", false);
        other.slurm.account = Some("chemistry".into());
        let e = c.submit(other, 0).unwrap_err().to_string();
        assert!(
            e.contains("Invalid account or account/partition combination specified"),
            "{e}"
        );
        assert_eq!(launch(&mut c, 10), [id]);
        let fx = c.job_ended("n1", &ended(id, 1, 0, 110)).unwrap();
        assert!(fx.contains(&Effect::Accounts), "{fx:?}");
        let rows = c.share_rows(110);
        let u = rows.iter().find(|r| r.user == "u").unwrap();
        // One CPU for 100 s.
        assert!((u.raw_usage - 100.0).abs() < 1e-6, "{u:?}");
        assert!(u.fair_share.unwrap() < 1.0);
    }

    #[test]
    fn qos_limits_refuse_submissions_and_keep_jobs_waiting() {
        use crate::qos::{Qos, QosChange};
        let mut c = cluster();
        c.change_qos(&QosChange::Add {
            qos: Qos {
                name: "normal".into(),
                max_jobs_per_user: Some(1),
                max_wall_minutes: Some(60),
                ..Default::default()
            },
        })
        .unwrap();
        let mut long = spec("long", false);
        long.time_limit = Some(7200);
        let e = c.submit(long, 0).unwrap_err().to_string();
        assert!(e.contains("MaxWall"), "{e}");
        let mut short = spec("a", false);
        short.time_limit = Some(60);
        let (a, _) = c.submit(short.clone(), 0).unwrap();
        let (b, _) = c.submit(short, 0).unwrap();
        assert_eq!(c.job(a).unwrap().spec.slurm.qos.as_deref(), Some("normal"));
        assert_eq!(launch(&mut c, 1), [a]);
        assert_eq!(
            c.job(b).unwrap().reason.as_deref(),
            Some("QOSMaxJobsPerUserLimit")
        );
        c.job_ended("n1", &ended(a, 1, 0, 2)).unwrap();
        assert_eq!(launch(&mut c, 3), [b]);
        let mut named = spec("x", false);
        named.slurm.qos = Some("gold".into());
        let e = c.submit(named, 4).unwrap_err().to_string();
        assert!(e.contains("Invalid qos specification"), "{e}");
    }

    #[test]
    fn enforced_accounting_refuses_users_without_an_association() {
        let mut c = cluster();
        c.set_accounting(super::AccountingConfig {
            enforce: true,
            ..Default::default()
        });
        let e = c.submit(spec("a", false), 0).unwrap_err().to_string();
        assert!(e.contains("Invalid account"), "{e}");
        physics(&mut c);
        assert!(c.submit(spec("a", false), 0).is_ok());
    }

    #[test]
    fn a_qos_not_granted_is_refused_and_nothing_is_queued() {
        let mut c = cluster();
        physics(&mut c);
        // Before any QOS exists, only normal may be named: a job staged
        // under a name created later would run under it ungranted.
        let mut early = spec("early", false);
        early.slurm.qos = Some("gold".into());
        let e = c.submit(early.clone(), 0).unwrap_err().to_string();
        assert!(e.contains("Invalid qos specification"), "{e}");
        early.slurm.qos = Some("normal".into());
        let (staged, _) = c.submit(early, 0).unwrap();
        c.withdraw(staged);
        for name in ["normal", "high"] {
            c.change_qos(&QosChange::Add {
                qos: Qos {
                    name: name.into(),
                    ..Default::default()
                },
            })
            .unwrap();
        }
        let mut high = spec("a", false);
        high.slurm.qos = Some("high".into());
        let e = c.submit(high.clone(), 0).unwrap_err().to_string();
        assert!(e.contains("Invalid qos specification"), "{e}");
        assert!(e.contains("qos+=high"), "{e}");
        assert_eq!(c.pending_count(), 0);
        // Root's own jobs may use any QOS.
        let mut by_root = high.clone();
        by_root.uid = 0;
        assert!(c.submit(by_root, 0).is_ok());
        // Granted to the account, with a default: the user may, and a job
        // naming none gets the default.
        let grant = |qos: &[&str], default: Option<&str>| AccountChange::SetLimits {
            account: "physics".into(),
            user: None,
            limits: crate::fairshare::assoc_limits::AssocLimits {
                qos: Some(qos.iter().map(|q| q.to_string()).collect()),
                default_qos: default.map(String::from),
                ..Default::default()
            },
        };
        let e = c
            .change_accounts(&grant(&["normal", "gold"], None))
            .unwrap_err();
        assert!(e.to_string().contains("QOS gold does not exist"), "{e}");
        let e = c
            .change_accounts(&grant(&["normal"], Some("high")))
            .unwrap_err();
        assert!(e.to_string().contains("DefaultQOS=high"), "{e}");
        c.change_accounts(&grant(&["normal", "high"], Some("high")))
            .unwrap();
        assert!(c.submit(high, 0).is_ok());
        let (id, _) = c.submit(spec("b", false), 0).unwrap();
        assert_eq!(c.job(id).unwrap().spec.slurm.qos.as_deref(), Some("high"));
        // The grant taken away while it waits: it stays pending, InvalidQOS.
        c.change_accounts(&grant(&["normal"], Some("normal")))
            .unwrap();
        let started = launch(&mut c, 1);
        assert!(!started.contains(&id), "{started:?}");
        assert_eq!(c.job(id).unwrap().reason.as_deref(), Some("InvalidQOS"));
    }
}
