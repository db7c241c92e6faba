//! Accounts, associations and fair share (Slurm's `sacctmgr`, `sshare`,
//! and the fair-share factor of priority/multifactor).
//!
//! Accounts form a tree below `root`, each with its shares among its
//! siblings; a user belongs to accounts through associations, each with
//! the user's shares among that account's users, one of them the user's
//! default. What jobs use is charged to their association in billing
//! units (seconds × the TRES billing weights of what they held) and
//! decays with a half-life. A job's fair-share factor is Slurm's classic
//! one: `2^(-U/S)`, with `S` the association's normalized shares (the
//! product of its shares' fractions along its path from root) and `U` its
//! share of all the decayed usage. Pure: time comes in as an argument.

pub mod assoc_limits;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::fairshare::assoc_limits::AssocLimits;

/// The root of the account tree (always there).
pub const ROOT: &str = "root";

/// An account: its parent and its shares among its siblings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Account {
    pub name: String,
    pub parent: String,
    pub shares: u32,
    #[serde(default)]
    pub description: String,
    /// `GrpJobs`, `GrpTRES`, and the `MaxJobs`/`MaxSubmitJobs` its users'
    /// associations inherit (`assoc_limits`).
    #[serde(default, skip_serializing_if = "AssocLimits::is_empty")]
    pub limits: AssocLimits,
}

/// A user in an account, with the user's shares among its users.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Association {
    pub user: String,
    pub account: String,
    pub shares: u32,
    /// The account the user's jobs are charged to when they name none.
    pub default: bool,
    /// Its own limits (`assoc_limits`).
    #[serde(default, skip_serializing_if = "AssocLimits::is_empty")]
    pub limits: AssocLimits,
}

/// A change to the accounts, as `sacctmgr` asks it. (One at a time, from
/// an administrator: the size of its largest variant costs nothing.)
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum AccountChange {
    AddAccount {
        name: String,
        #[serde(default)]
        parent: Option<String>,
        #[serde(default)]
        shares: Option<u32>,
        #[serde(default)]
        description: Option<String>,
    },
    ModifyAccount {
        name: String,
        #[serde(default)]
        shares: Option<u32>,
        #[serde(default)]
        parent: Option<String>,
    },
    DeleteAccount {
        name: String,
    },
    AddUser {
        user: String,
        account: String,
        #[serde(default)]
        shares: Option<u32>,
        #[serde(default)]
        default: bool,
    },
    ModifyUser {
        user: String,
        #[serde(default)]
        account: Option<String>,
        #[serde(default)]
        shares: Option<u32>,
        #[serde(default)]
        default_account: Option<String>,
    },
    DeleteUser {
        user: String,
        #[serde(default)]
        account: Option<String>,
    },
    /// Replaces the limits of `account`, or of `user`'s association with
    /// it (the caller reads them, changes what was set, sends them whole).
    SetLimits {
        account: String,
        #[serde(default)]
        user: Option<String>,
        limits: AssocLimits,
    },
}

/// Why a change or a job's account was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AccountError {
    #[error("account {0} already exists")]
    Exists(String),
    #[error("account {0} does not exist")]
    NoAccount(String),
    #[error("user {user} has no association with account {account}")]
    NoAssociation { user: String, account: String },
    #[error("account {0} has sub-accounts or users: delete those first")]
    InUse(String),
    #[error("account {account}: its parent {parent} would be below it")]
    Cycle { account: String, parent: String },
    #[error("'{0}' is not a valid name: letters, digits, '-', '_' and '.' only, at most 64")]
    BadName(String),
    #[error("the root account cannot be changed or deleted")]
    Root,
    #[error(
        "the root account takes QOS= and DefaultQOS= only (set limits on the accounts below it)"
    )]
    RootLimits,
    #[error("QOS {0} does not exist")]
    NoQos(String),
    #[error("DefaultQOS={default}: it is not among the QOS the {whom} may use ({allowed})")]
    DefaultNotAllowed {
        default: String,
        whom: String,
        allowed: String,
    },
    /// A job naming an account its user has no association with, or a
    /// user with none where they are required (Slurm's words).
    #[error("Invalid account or account/partition combination specified")]
    InvalidAccount,
}

/// A job's use to charge: billing units (CPU-seconds and GPU-seconds,
/// each times its weight).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BillingWeights {
    pub cpu: f64,
    /// Per GPU instance held.
    pub gpu: f64,
    /// Per GiB of memory asked for.
    pub mem_gib: f64,
}

impl Default for BillingWeights {
    fn default() -> Self {
        BillingWeights {
            cpu: 1.0,
            gpu: 0.0,
            mem_gib: 0.0,
        }
    }
}

/// TRESBillingWeights that do not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BillingWeightsError(pub String);

impl From<String> for BillingWeightsError {
    fn from(why: String) -> Self {
        BillingWeightsError(why)
    }
}

impl BillingWeights {
    /// Reads Slurm's `TRESBillingWeights` form: `CPU=1.0,Mem=0.25G,GRES/gpu=2.0`
    /// (case-insensitive names; `Mem` per GiB, a `G` suffix allowed).
    pub fn parse(s: &str) -> Result<BillingWeights, BillingWeightsError> {
        let mut w = BillingWeights {
            cpu: 0.0,
            gpu: 0.0,
            mem_gib: 0.0,
        };
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| BillingWeightsError(format!("'{part}': expected NAME=WEIGHT")))?;
            let v = v.trim().trim_end_matches(['G', 'g']);
            let x: f64 = v
                .parse()
                .ok()
                .filter(|x: &f64| x.is_finite() && *x >= 0.0)
                .ok_or_else(|| {
                    BillingWeightsError(format!(
                        "'{part}': the weight must be a number of at least 0"
                    ))
                })?;
            match k.trim().to_ascii_lowercase().as_str() {
                "cpu" => w.cpu = x,
                "mem" => w.mem_gib = x,
                "gres/gpu" | "gpu" => w.gpu = x,
                other => {
                    return Err(BillingWeightsError(format!(
                        "'{other}': gsched bills CPU, Mem and GRES/gpu"
                    )))
                }
            }
        }
        Ok(w)
    }

    /// The billing units of holding `cpus`, `gpus` instances and
    /// `mem_mib` for `secs` seconds.
    pub fn units(&self, cpus: u32, gpus: usize, mem_mib: u64, secs: i64) -> f64 {
        let rate = self.cpu * f64::from(cpus)
            + self.gpu * gpus as f64
            + self.mem_gib * mem_mib as f64 / 1024.0;
        rate * secs.max(0) as f64
    }
}

/// One line of `sshare`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ShareRow {
    pub account: String,
    /// Empty for an account's own line.
    pub user: String,
    pub raw_shares: u32,
    pub norm_shares: f64,
    /// Decayed billing units.
    pub raw_usage: f64,
    /// Its share of all decayed usage.
    pub effective_usage: f64,
    /// Users only: the fair-share factor.
    pub fair_share: Option<f64>,
}

/// The accounts, associations and their decayed usage.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FairShare {
    pub accounts: BTreeMap<String, Account>,
    /// By (user, account).
    pub associations: BTreeMap<(String, String), Association>,
    /// Decayed usage by (user, account), as of `usage_at`.
    pub usage: BTreeMap<(String, String), f64>,
    pub usage_at: i64,
    /// What is set on the root account: its QOS rights only, which every
    /// association and every user without one inherit.
    pub root_limits: AssocLimits,
}

/// One association's decayed usage, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct UsageEntry {
    pub user: String,
    pub account: String,
    pub units: f64,
}

/// [`FairShare`] as it is stored and sent (lists, for JSON).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct StoredFairShare {
    #[serde(default)]
    pub accounts: Vec<Account>,
    #[serde(default)]
    pub associations: Vec<Association>,
    #[serde(default)]
    pub usage: Vec<UsageEntry>,
    #[serde(default)]
    pub usage_at: i64,
    #[serde(default, skip_serializing_if = "AssocLimits::is_empty")]
    pub root_limits: AssocLimits,
}

impl From<&FairShare> for StoredFairShare {
    fn from(f: &FairShare) -> Self {
        StoredFairShare {
            accounts: f.accounts.values().cloned().collect(),
            associations: f.associations.values().cloned().collect(),
            usage: f
                .usage
                .iter()
                .map(|((user, account), units)| UsageEntry {
                    user: user.clone(),
                    account: account.clone(),
                    units: *units,
                })
                .collect(),
            usage_at: f.usage_at,
            root_limits: f.root_limits.clone(),
        }
    }
}

impl From<StoredFairShare> for FairShare {
    fn from(s: StoredFairShare) -> Self {
        FairShare {
            accounts: s
                .accounts
                .into_iter()
                .map(|a| (a.name.clone(), a))
                .collect(),
            associations: s
                .associations
                .into_iter()
                .map(|a| ((a.user.clone(), a.account.clone()), a))
                .collect(),
            usage: s
                .usage
                .into_iter()
                .filter(|u| u.units.is_finite() && u.units > 0.0)
                .map(|u| ((u.user, u.account), u.units))
                .collect(),
            usage_at: s.usage_at,
            root_limits: s.root_limits,
        }
    }
}

fn valid_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 64
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

impl FairShare {
    /// Whether any association exists (accounting is in use).
    pub fn in_use(&self) -> bool {
        !self.associations.is_empty()
    }

    fn has_account(&self, name: &str) -> bool {
        name == ROOT || self.accounts.contains_key(name)
    }

    /// Carries out a change (checked whole first: nothing changes on
    /// error).
    pub fn apply(&mut self, change: &AccountChange) -> Result<(), AccountError> {
        match change {
            AccountChange::AddAccount {
                name,
                parent,
                shares,
                description,
            } => self.add_account(name, parent.as_deref(), *shares, description.as_deref())?,
            AccountChange::ModifyAccount {
                name,
                shares,
                parent,
            } => self.modify_account(name, *shares, parent.as_deref())?,
            AccountChange::DeleteAccount { name } => self.delete_account(name)?,
            AccountChange::AddUser {
                user,
                account,
                shares,
                default,
            } => {
                if !valid_name(user) {
                    return Err(AccountError::BadName(user.clone()));
                }
                if !self.has_account(account) {
                    return Err(AccountError::NoAccount(account.clone()));
                }
                let first = !self.associations.keys().any(|(u, _)| u == user);
                let key = (user.clone(), account.clone());
                if self.associations.contains_key(&key) {
                    return Err(AccountError::Exists(format!("{account} for user {user}")));
                }
                if *default {
                    self.clear_default(user);
                }
                self.associations.insert(
                    key,
                    Association {
                        user: user.clone(),
                        account: account.clone(),
                        shares: shares.unwrap_or(1),
                        default: *default || first,
                        limits: AssocLimits::default(),
                    },
                );
            }
            AccountChange::ModifyUser {
                user,
                account,
                shares,
                default_account,
            } => {
                let keys = self.associations_of(user, account.as_deref())?;
                if let Some(d) = default_account {
                    if !self.associations.contains_key(&(user.clone(), d.clone())) {
                        return Err(AccountError::NoAssociation {
                            user: user.clone(),
                            account: d.clone(),
                        });
                    }
                    self.clear_default(user);
                    if let Some(a) = self.associations.get_mut(&(user.clone(), d.clone())) {
                        a.default = true;
                    }
                }
                if let Some(s) = shares {
                    for k in keys {
                        if let Some(a) = self.associations.get_mut(&k) {
                            a.shares = *s;
                        }
                    }
                }
            }
            AccountChange::SetLimits {
                account,
                user,
                limits,
            } => self.set_limits(account, user.as_deref(), limits)?,
            AccountChange::DeleteUser { user, account } => {
                let keys = self.associations_of(user, account.as_deref())?;
                let lost_default = keys.iter().any(|k| self.associations[k].default);
                for k in &keys {
                    self.associations.remove(k);
                }
                if lost_default {
                    // The first account left becomes the default.
                    if let Some(a) = self.associations.values_mut().find(|a| &a.user == user) {
                        a.default = true;
                    }
                }
            }
        }
        Ok(())
    }

    /// `sacctmgr add account NAME [parent=P] [fairshare=N]`.
    fn add_account(
        &mut self,
        name: &str,
        parent: Option<&str>,
        shares: Option<u32>,
        description: Option<&str>,
    ) -> Result<(), AccountError> {
        if !valid_name(name) {
            return Err(AccountError::BadName(name.to_string()));
        }
        if self.has_account(name) {
            return Err(AccountError::Exists(name.to_string()));
        }
        let parent = parent.unwrap_or(ROOT).to_string();
        if !self.has_account(&parent) {
            return Err(AccountError::NoAccount(parent));
        }
        self.accounts.insert(
            name.to_string(),
            Account {
                name: name.to_string(),
                parent,
                shares: shares.unwrap_or(1),
                description: description.unwrap_or_default().to_string(),
                limits: AssocLimits::default(),
            },
        );
        Ok(())
    }

    /// `sacctmgr modify account NAME set fairshare=N parent=P` (a parent
    /// below the account itself is refused).
    fn modify_account(
        &mut self,
        name: &str,
        shares: Option<u32>,
        parent: Option<&str>,
    ) -> Result<(), AccountError> {
        if name == ROOT {
            return Err(AccountError::Root);
        }
        if !self.accounts.contains_key(name) {
            return Err(AccountError::NoAccount(name.to_string()));
        }
        if let Some(p) = parent {
            if !self.has_account(p) {
                return Err(AccountError::NoAccount(p.to_string()));
            }
            if self.path(p).iter().any(|a| a == name) {
                return Err(AccountError::Cycle {
                    account: name.to_string(),
                    parent: p.to_string(),
                });
            }
        }
        let a = self.accounts.get_mut(name).expect("checked");
        if let Some(s) = shares {
            a.shares = s;
        }
        if let Some(p) = parent {
            a.parent = p.to_string();
        }
        Ok(())
    }

    /// `sacctmgr delete account NAME`: only one with no account or user
    /// under it.
    fn delete_account(&mut self, name: &str) -> Result<(), AccountError> {
        if name == ROOT {
            return Err(AccountError::Root);
        }
        if !self.accounts.contains_key(name) {
            return Err(AccountError::NoAccount(name.to_string()));
        }
        let used = self.accounts.values().any(|a| a.parent == name)
            || self.associations.keys().any(|(_, a)| a == name);
        if used {
            return Err(AccountError::InUse(name.to_string()));
        }
        self.accounts.remove(name);
        Ok(())
    }

    /// Replaces the limits of `account`, or of `user`'s association with
    /// it; the root account takes QOS rights only.
    fn set_limits(
        &mut self,
        account: &str,
        user: Option<&str>,
        limits: &AssocLimits,
    ) -> Result<(), AccountError> {
        match user {
            None if account == ROOT => {
                if limits.counts_jobs() {
                    return Err(AccountError::RootLimits);
                }
                self.root_limits = limits.clone();
            }
            None => {
                let a = self
                    .accounts
                    .get_mut(account)
                    .ok_or_else(|| AccountError::NoAccount(account.to_string()))?;
                a.limits = limits.clone();
            }
            Some(user) => {
                for k in self.associations_of(user, Some(account))? {
                    if let Some(a) = self.associations.get_mut(&k) {
                        a.limits = limits.clone();
                    }
                }
            }
        }
        Ok(())
    }

    /// The keys of `user`'s associations (with `account` only, if given);
    /// refused when there is none.
    fn associations_of(
        &self,
        user: &str,
        account: Option<&str>,
    ) -> Result<Vec<(String, String)>, AccountError> {
        let keys: Vec<(String, String)> = self
            .associations
            .keys()
            .filter(|(u, a)| u == user && account.is_none_or(|x| x == a))
            .cloned()
            .collect();
        if keys.is_empty() {
            return Err(AccountError::NoAssociation {
                user: user.to_string(),
                account: account.unwrap_or("any").to_string(),
            });
        }
        Ok(keys)
    }

    fn clear_default(&mut self, user: &str) {
        for a in self.associations.values_mut().filter(|a| a.user == user) {
            a.default = false;
        }
    }

    /// The accounts from `account` up to root (itself first).
    pub(crate) fn path(&self, account: &str) -> Vec<String> {
        let mut out = Vec::new();
        let mut at = account.to_string();
        while at != ROOT && out.len() <= self.accounts.len() {
            out.push(at.clone());
            match self.accounts.get(&at) {
                Some(a) => at = a.parent.clone(),
                None => break,
            }
        }
        out
    }

    /// The account a job of `user` naming `asked` (`--account`) is charged
    /// to: the one named, which must be one of the user's; else the
    /// user's default. A user without associations is refused where they
    /// are required (`enforce`), else charged to none.
    pub fn account_for(
        &self,
        user: &str,
        asked: Option<&str>,
        enforce: bool,
    ) -> Result<Option<String>, AccountError> {
        let mine: Vec<&Association> = self
            .associations
            .values()
            .filter(|a| a.user == user)
            .collect();
        match asked {
            Some(a) if mine.iter().any(|m| m.account == a) => Ok(Some(a.to_string())),
            Some(_) if enforce || !mine.is_empty() => Err(AccountError::InvalidAccount),
            Some(a) => Ok(Some(a.to_string())),
            None if mine.is_empty() && enforce => Err(AccountError::InvalidAccount),
            None => Ok(mine
                .iter()
                .find(|m| m.default)
                .or(mine.first())
                .map(|m| m.account.clone())),
        }
    }

    /// Brings the usage to `now`, decayed with `half_life` seconds.
    fn decay_to(&mut self, now: i64, half_life: i64) {
        if now > self.usage_at && half_life > 0 {
            let f = 0.5f64.powf((now - self.usage_at) as f64 / half_life as f64);
            for u in self.usage.values_mut() {
                *u *= f;
            }
            self.usage.retain(|_, u| *u > 1e-9);
        }
        self.usage_at = self.usage_at.max(now);
    }

    /// Charges `units` to `user` in `account`, at `now`.
    pub fn charge(&mut self, user: &str, account: &str, units: f64, now: i64, half_life: i64) {
        self.decay_to(now, half_life);
        if units > 0.0 && units.is_finite() {
            *self
                .usage
                .entry((user.to_string(), account.to_string()))
                .or_default() += units;
        }
    }

    /// An association's usage decayed to `now`.
    pub(crate) fn decayed(&self, key: &(String, String), now: i64, half_life: i64) -> f64 {
        let u = self.usage.get(key).copied().unwrap_or(0.0);
        if now > self.usage_at && half_life > 0 {
            u * 0.5f64.powf((now - self.usage_at) as f64 / half_life as f64)
        } else {
            u
        }
    }

    /// The fraction of the whole a node's shares give it among its
    /// siblings, times its parent's, up to root.
    fn account_share(&self, account: &str) -> f64 {
        let mut share = 1.0;
        for a in self.path(account) {
            let Some(acc) = self.accounts.get(&a) else {
                return 0.0;
            };
            let siblings: u32 = self
                .accounts
                .values()
                .filter(|s| s.parent == acc.parent)
                .map(|s| s.shares)
                .sum();
            if siblings == 0 {
                return 0.0;
            }
            share *= f64::from(acc.shares) / f64::from(siblings);
        }
        share
    }

    /// The normalized shares of `user` in `account`.
    pub fn norm_shares(&self, user: &str, account: &str) -> f64 {
        let Some(me) = self
            .associations
            .get(&(user.to_string(), account.to_string()))
        else {
            return 0.0;
        };
        let users: u32 = self
            .associations
            .values()
            .filter(|a| a.account == account)
            .map(|a| a.shares)
            .sum();
        if users == 0 {
            return 0.0;
        }
        let base = if account == ROOT {
            1.0
        } else {
            self.account_share(account)
        };
        base * f64::from(me.shares) / f64::from(users)
    }

    /// The fair-share factor of `user` in `account` at `now`: 1 for no
    /// usage, 0.5 when its usage is exactly its share, towards 0 above.
    pub fn factor(&self, user: &str, account: &str, now: i64, half_life: i64) -> f64 {
        let s = self.norm_shares(user, account);
        if s <= 0.0 {
            return 0.0;
        }
        let total: f64 = self
            .usage
            .keys()
            .map(|k| self.decayed(k, now, half_life))
            .fold(0.0, |a, b| a + b);
        let u = if total > 0.0 {
            self.decayed(&(user.to_string(), account.to_string()), now, half_life) / total
        } else {
            0.0
        };
        2f64.powf(-u / s)
    }

    /// `sshare`'s lines: each account, then its users, in tree order.
    pub fn rows(&self, now: i64, half_life: i64) -> Vec<ShareRow> {
        let total: f64 = self
            .usage
            .keys()
            .map(|k| self.decayed(k, now, half_life))
            .fold(0.0, |a, b| a + b);
        let eff = |u: f64| if total > 0.0 { u / total } else { 0.0 };
        let mut out = Vec::new();
        let mut stack = vec![ROOT.to_string()];
        while let Some(acc) = stack.pop() {
            let users: Vec<&Association> = self
                .associations
                .values()
                .filter(|a| a.account == acc)
                .collect();
            let account_usage: f64 = self
                .usage
                .keys()
                .filter(|(_, a)| self.path(a).contains(&acc) || (acc == ROOT))
                .map(|k| self.decayed(k, now, half_life))
                // From +0.0: an empty sum of floats is -0.0.
                .fold(0.0, |a, b| a + b);
            out.push(ShareRow {
                account: acc.clone(),
                user: String::new(),
                raw_shares: self.accounts.get(&acc).map_or(1, |a| a.shares),
                norm_shares: if acc == ROOT {
                    1.0
                } else {
                    self.account_share(&acc)
                },
                raw_usage: account_usage,
                effective_usage: eff(account_usage),
                fair_share: None,
            });
            for a in users {
                let u = self.decayed(&(a.user.clone(), acc.clone()), now, half_life);
                out.push(ShareRow {
                    account: acc.clone(),
                    user: a.user.clone(),
                    raw_shares: a.shares,
                    norm_shares: self.norm_shares(&a.user, &acc),
                    raw_usage: u,
                    effective_usage: eff(u),
                    fair_share: Some(self.factor(&a.user, &acc, now, half_life)),
                });
            }
            let mut children: Vec<&String> = self
                .accounts
                .values()
                .filter(|c| c.parent == acc)
                .map(|c| &c.name)
                .collect();
            children.sort();
            stack.extend(children.into_iter().rev().cloned());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> FairShare {
        let mut f = FairShare::default();
        for (name, parent, shares) in [
            ("physics", None, 3),
            ("bio", None, 1),
            ("hep", Some("physics"), 1),
        ] {
            f.apply(&AccountChange::AddAccount {
                name: name.into(),
                parent: parent.map(String::from),
                shares: Some(shares),
                description: None,
            })
            .unwrap();
        }
        for (user, account) in [
            ("ann", "physics"),
            ("bob", "physics"),
            ("cat", "bio"),
            ("ann", "hep"),
        ] {
            f.apply(&AccountChange::AddUser {
                user: user.into(),
                account: account.into(),
                shares: None,
                default: false,
            })
            .unwrap();
        }
        f
    }

    #[test]
    fn shares_normalize_along_the_tree() {
        let f = tree();
        // physics has 3 of 4 shares at the top, two users in it.
        assert!((f.norm_shares("ann", "physics") - 0.375).abs() < 1e-9);
        assert!((f.norm_shares("cat", "bio") - 0.25).abs() < 1e-9);
        // hep is physics' only child: all of physics' share.
        assert!((f.norm_shares("ann", "hep") - 0.75).abs() < 1e-9);
        assert_eq!(f.norm_shares("cat", "physics"), 0.0);
    }

    #[test]
    fn usage_lowers_the_factor_and_decays_with_the_half_life() {
        let mut f = tree();
        let day = 86_400;
        assert_eq!(f.factor("ann", "physics", 0, day), 1.0);
        f.charge("cat", "bio", 1000.0, 0, day);
        // cat used everything with a quarter of the shares: 2^-4.
        assert!((f.factor("cat", "bio", 0, day) - 0.0625).abs() < 1e-9);
        assert_eq!(f.factor("ann", "physics", 0, day), 1.0);
        f.charge("ann", "physics", 1000.0, 0, day);
        assert!(f.factor("ann", "physics", 0, day) > f.factor("cat", "bio", 0, day));
        // A day later both halved: the same shares of all usage.
        let rows = f.rows(day, day);
        let cat = rows.iter().find(|r| r.user == "cat").unwrap();
        assert!((cat.raw_usage - 500.0).abs() < 1e-6, "{cat:?}");
        assert!((cat.effective_usage - 0.5).abs() < 1e-9);
    }

    #[test]
    fn a_job_is_charged_to_its_account_or_its_users_default() {
        let f = tree();
        assert_eq!(
            f.account_for("ann", None, false),
            Ok(Some("physics".into()))
        );
        assert_eq!(
            f.account_for("ann", Some("hep"), false),
            Ok(Some("hep".into()))
        );
        assert_eq!(
            f.account_for("ann", Some("bio"), false),
            Err(AccountError::InvalidAccount)
        );
        // Users without associations: refused only where required.
        assert_eq!(f.account_for("dan", None, false), Ok(None));
        assert_eq!(f.account_for("dan", Some("x"), false), Ok(Some("x".into())));
        assert_eq!(
            f.account_for("dan", None, true),
            Err(AccountError::InvalidAccount)
        );
        assert_eq!(
            AccountError::InvalidAccount.to_string(),
            "Invalid account or account/partition combination specified"
        );
    }

    #[test]
    fn bad_changes_are_refused_and_change_nothing() {
        let mut f = tree();
        let before = f.clone();
        for bad in [
            AccountChange::AddAccount {
                name: "physics".into(),
                parent: None,
                shares: None,
                description: None,
            },
            AccountChange::AddAccount {
                name: "x y".into(),
                parent: None,
                shares: None,
                description: None,
            },
            AccountChange::AddAccount {
                name: "x".into(),
                parent: Some("nope".into()),
                shares: None,
                description: None,
            },
            AccountChange::DeleteAccount {
                name: "physics".into(),
            },
            AccountChange::DeleteAccount { name: ROOT.into() },
            AccountChange::ModifyAccount {
                name: "physics".into(),
                shares: None,
                parent: Some("hep".into()),
            },
            AccountChange::AddUser {
                user: "ann".into(),
                account: "physics".into(),
                shares: None,
                default: false,
            },
            AccountChange::DeleteUser {
                user: "zed".into(),
                account: None,
            },
            AccountChange::ModifyUser {
                user: "ann".into(),
                account: None,
                shares: None,
                default_account: Some("bio".into()),
            },
        ] {
            assert!(f.apply(&bad).is_err(), "{bad:?}");
            assert_eq!(f, before, "{bad:?}");
        }
        f.apply(&AccountChange::ModifyUser {
            user: "ann".into(),
            account: None,
            shares: None,
            default_account: Some("hep".into()),
        })
        .unwrap();
        assert_eq!(f.account_for("ann", None, false), Ok(Some("hep".into())));
        f.apply(&AccountChange::DeleteUser {
            user: "ann".into(),
            account: Some("hep".into()),
        })
        .unwrap();
        assert_eq!(
            f.account_for("ann", None, false),
            Ok(Some("physics".into()))
        );
    }

    #[test]
    fn billing_weights_read_as_slurm_writes_them() {
        let w = BillingWeights::parse("CPU=1.0,Mem=0.25G,GRES/gpu=2.0").unwrap();
        assert_eq!((w.cpu, w.mem_gib, w.gpu), (1.0, 0.25, 2.0));
        assert_eq!(w.units(2, 1, 4096, 10), (2.0 + 2.0 + 1.0) * 10.0);
        assert!(BillingWeights::parse("license/x=1").is_err());
        assert!(BillingWeights::parse("CPU=-1").is_err());
        assert!(BillingWeights::parse("CPU").is_err());
    }
}
