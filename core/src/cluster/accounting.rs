//! The controller's accounts (`fairshare`): a job is charged to its
//! account (its `--account`, checked against its user's associations, or
//! the user's default) when it ends; changes come from administrators
//! (`sacctmgr`) and every change is persisted through one effect.

use super::{resources_of, Cluster, ClusterError, Effect};
use crate::fairshare::{AccountChange, BillingWeights, FairShare, ShareRow, StoredFairShare};
use crate::job::{JobId, JobSpec};

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
}

impl Default for AccountingConfig {
    fn default() -> Self {
        AccountingConfig {
            enforce: false,
            half_life_secs: 7 * 24 * 3600,
            weights: BillingWeights::default(),
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

    /// The accounts as the store had them (at start).
    pub fn restore_accounts(&mut self, stored: StoredFairShare) {
        self.fair_share = stored.into();
    }

    pub fn fair_share(&self) -> &FairShare {
        &self.fair_share
    }

    /// What to persist of the accounts.
    pub fn stored_accounts(&self) -> StoredFairShare {
        (&self.fair_share).into()
    }

    /// An administrator's change to the accounts.
    pub fn change_accounts(&mut self, change: &AccountChange) -> Result<Vec<Effect>, ClusterError> {
        self.fair_share
            .apply(change)
            .map_err(|e| ClusterError::Refused(e.to_string()))?;
        Ok(vec![Effect::Accounts])
    }

    /// `sshare`'s lines at `now`.
    pub fn share_rows(&self, now: i64) -> Vec<ShareRow> {
        self.fair_share.rows(now, self.accounting.half_life_secs)
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
        Ok(())
    }

    /// Charges what job `id`'s run held, from its start to `now`, to its
    /// account: the effect that persists it, if anything was charged.
    pub(super) fn charge(&mut self, id: JobId, now: i64) -> Option<Effect> {
        let job = self.jobs.get(&id)?;
        let account = job.spec.slurm.account.clone()?;
        if !self.fair_share.in_use() {
            return None;
        }
        let start = job.start_time?;
        let width = job.nodes().len().max(1);
        let res = resources_of(job);
        let gpus: usize =
            job.gpu_instances.len() + job.sisters.iter().map(|s| s.instances.len()).sum::<usize>();
        let mem = res.memory_mib(0) * width as u64;
        let units = self
            .accounting
            .weights
            .units(res.cpus * width as u32, gpus, mem, now - start);
        let user = job.spec.user_name.clone();
        self.fair_share
            .charge(&user, &account, units, now, self.accounting.half_life_secs);
        Some(Effect::Accounts)
    }
}

#[cfg(test)]
mod tests {
    use crate::cluster::testkit::{cluster, ended, launch, spec};
    use crate::cluster::Effect;
    use crate::fairshare::AccountChange;

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
}
