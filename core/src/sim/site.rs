//! A simulated site's accounts, QOS and preemption: the same changes
//! `sacctmgr` sends (`AccountChange`, `QosChange`, in the REST API's JSON)
//! and the settings of gctld's flags, applied to the simulator's
//! [`Cluster`] as a live controller applies them.

use serde::Deserialize;

use super::SimError;
use crate::cluster::{AccountingConfig, Cluster};
use crate::fairshare::{AccountChange, BillingWeights};
use crate::preempt::PreemptMode;
use crate::priority::PriorityConfig;
use crate::qos::QosChange;

/// What a site configures beyond its nodes (`gsched sim --site FILE`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimSite {
    /// Accounts and users' associations, in order (`sacctmgr add account`,
    /// `add user`).
    #[serde(default)]
    pub accounts: Vec<AccountChange>,
    /// QOS, in order (`sacctmgr add qos`).
    #[serde(default)]
    pub qos: Vec<QosChange>,
    /// gctld's `--preempt-mode`.
    #[serde(default)]
    pub preempt_mode: PreemptMode,
    /// `multifactor`'s weights (gctld's `--priority-weight-*`).
    #[serde(default)]
    pub priority_weights: Option<PriorityConfig>,
    /// `PriorityDecayHalfLife`, seconds (gctld's default: 7 days).
    #[serde(default)]
    pub half_life_secs: Option<i64>,
    /// `TRESBillingWeights`.
    #[serde(default)]
    pub billing_weights: Option<BillingWeights>,
    /// Every job must name one of its user's associations.
    #[serde(default)]
    pub enforce_associations: bool,
    /// The fair-share factor by Fair Tree (gctld's `--fair-tree`).
    #[serde(default)]
    pub fair_tree: bool,
    /// Jobs may use only the QOS their associations were granted, as in
    /// gctld. Off by default: a trace holds jobs the site accepted.
    #[serde(default)]
    pub enforce_qos_rights: bool,
}

impl SimSite {
    /// Reads a site from JSON, naming what is wrong.
    pub fn from_json(text: &str) -> Result<SimSite, SimError> {
        serde_json::from_str(text).map_err(|e| SimError::Site(format!("file: {e}")))
    }

    /// Configures `cluster` as this site, with the priority policy named
    /// `priority` (`None`: the default). Returns the longest grace time
    /// of its QOS, seconds.
    pub(super) fn apply(
        &self,
        cluster: &mut Cluster,
        priority: Option<&str>,
    ) -> Result<f64, SimError> {
        if priority.is_some() || self.priority_weights.is_some() {
            let name = priority.unwrap_or("multifactor");
            let weights = self.priority_weights.unwrap_or_default();
            cluster.set_priority_policy(crate::priority::priority_policy(name, weights)?);
        }
        let mut accounting = AccountingConfig {
            enforce: self.enforce_associations,
            fair_tree: self.fair_tree,
            qos_rights: self.enforce_qos_rights,
            ..AccountingConfig::default()
        };
        if let Some(h) = self.half_life_secs {
            accounting.half_life_secs = h.max(1);
        }
        if let Some(w) = self.billing_weights {
            accounting.weights = w;
        }
        cluster.set_accounting(accounting);
        for (k, change) in self.accounts.iter().enumerate() {
            cluster
                .change_accounts(change)
                .map_err(|e| SimError::Site(format!("account change {}: {e}", k + 1)))?;
        }
        let mut grace: u32 = 0;
        for (k, change) in self.qos.iter().enumerate() {
            cluster
                .change_qos(change)
                .map_err(|e| SimError::Site(format!("QOS change {}: {e}", k + 1)))?;
            if let QosChange::Add { qos } | QosChange::Modify { qos } = change {
                grace = grace.max(qos.grace_time_secs.unwrap_or(0));
            }
        }
        cluster.set_preempt_mode(self.preempt_mode);
        Ok(grace as f64)
    }
}
