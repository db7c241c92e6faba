//! Who may run jobs under which QOS (Slurm's association `QOS=` lists and
//! `DefaultQOS=`). A QOS is a right: it is granted to an association, to
//! an account (and so to every association below it that sets none of its
//! own) or to the root account (and so to everyone, users without an
//! association included); granted nowhere, only `normal` may be used.
//! A job naming a QOS it was not granted is refused with Slurm's words;
//! a job naming none gets its `DefaultQOS`, else `normal` where granted,
//! else the one QOS granted where there is exactly one. Root's own jobs
//! may use any QOS. Pure.

use crate::fairshare::assoc_limits::AssocLimits;
use crate::fairshare::{AccountError, FairShare, ROOT};
use crate::qos::DEFAULT_QOS;

/// The QOS rights of one association (or of an account, or of root).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QosRights {
    /// `None`: granted nowhere, so `normal` only.
    allowed: Option<Vec<String>>,
    default: Option<String>,
}

impl QosRights {
    /// Whether a job may run under `qos`.
    pub fn allows(&self, qos: &str) -> bool {
        match &self.allowed {
            Some(list) => list.iter().any(|q| q == qos),
            None => qos == DEFAULT_QOS,
        }
    }

    /// The QOS of a job that names none: `DefaultQOS`, else `normal` where
    /// granted, else the only QOS granted. `None`: `normal`, granted or
    /// not (the caller refuses it if it exists and is not granted).
    pub fn default_qos(&self) -> Option<&str> {
        if let Some(d) = &self.default {
            return Some(d);
        }
        match &self.allowed {
            Some(list) if !self.allows(DEFAULT_QOS) && list.len() == 1 => Some(&list[0]),
            _ => None,
        }
    }

    /// The QOS granted, for messages.
    pub fn describe(&self) -> String {
        match &self.allowed {
            Some(list) if list.is_empty() => "none".into(),
            Some(list) => list.join(","),
            None => DEFAULT_QOS.into(),
        }
    }
}

impl FairShare {
    /// The QOS rights of `user`'s jobs charged to `account`. A job
    /// charged to no account, or to one its user has no association with
    /// (accounting not enforced), has root's.
    pub fn qos_rights(&self, user: &str, account: Option<&str>) -> QosRights {
        match account {
            Some(a)
                if self
                    .associations
                    .contains_key(&(user.to_string(), a.to_string())) =>
            {
                self.rights_from(|pick| self.inherited(user, a, pick))
            }
            _ => self.rights_from(|_| None),
        }
    }

    /// The QOS rights an account (`user`: that user's association with
    /// it) has, own or inherited.
    fn rights_at(&self, account: &str, user: Option<&str>) -> QosRights {
        match (user, account) {
            (Some(u), _) => self.qos_rights(u, Some(account)),
            (None, ROOT) => self.rights_from(|_| None),
            (None, _) => self.rights_from(|pick| {
                self.path(account)
                    .iter()
                    .find_map(|n| self.accounts.get(n).and_then(|a| pick(&a.limits)))
            }),
        }
    }

    /// Rights from `lookup` (own, else inherited), else the root account's.
    fn rights_from(
        &self,
        lookup: impl Fn(&dyn Fn(&AssocLimits) -> Option<Pick>) -> Option<Pick>,
    ) -> QosRights {
        let list = |l: &AssocLimits| l.qos.clone().map(Pick::List);
        let default = |l: &AssocLimits| l.default_qos.clone().map(Pick::Default);
        let allowed = lookup(&list)
            .or_else(|| list(&self.root_limits))
            .and_then(Pick::list);
        let default = lookup(&default)
            .or_else(|| default(&self.root_limits))
            .and_then(Pick::default);
        QosRights { allowed, default }
    }

    /// The QOS granted on `account` (with `user`, that association), own
    /// or inherited: what `QOS+=` and `QOS-=` change.
    pub fn granted_qos(&self, account: &str, user: Option<&str>) -> Vec<String> {
        self.rights_at(account, user)
            .allowed
            .unwrap_or_else(|| vec![DEFAULT_QOS.to_string()])
    }

    /// Checks every grant (root's, each account's, each association's):
    /// each QOS named exists, and each default is granted where it applies
    /// (a change above an association changes what it inherits).
    pub fn check_all_qos_rights(&self, exists: impl Fn(&str) -> bool) -> Result<(), AccountError> {
        self.check_qos_rights(ROOT, None, &exists)?;
        for a in self.accounts.keys() {
            self.check_qos_rights(a, None, &exists)?;
        }
        for (user, account) in self.associations.keys() {
            self.check_qos_rights(account, Some(user), &exists)?;
        }
        Ok(())
    }

    /// Who names QOS `qos` in a grant (a list or a default), for a refusal
    /// to delete it.
    pub fn granting(&self, qos: &str) -> Option<String> {
        let names = |l: &AssocLimits| {
            l.qos.iter().flatten().any(|q| q == qos) || l.default_qos.as_deref() == Some(qos)
        };
        if names(&self.root_limits) {
            return Some("the root account".into());
        }
        if let Some(a) = self.accounts.values().find(|a| names(&a.limits)) {
            return Some(format!("account {}", a.name));
        }
        self.associations
            .values()
            .find(|a| names(&a.limits))
            .map(|a| format!("user {} in account {}", a.user, a.account))
    }

    /// Checks the QOS rights set on `account` (with `user`, on that
    /// association) once changed: every QOS named exists (`exists`) and
    /// the default QOS is among those granted there.
    pub fn check_qos_rights(
        &self,
        account: &str,
        user: Option<&str>,
        exists: &dyn Fn(&str) -> bool,
    ) -> Result<(), AccountError> {
        let own = match user {
            Some(u) => self
                .associations
                .get(&(u.to_string(), account.to_string()))
                .map(|a| &a.limits),
            None if account == ROOT => Some(&self.root_limits),
            None => self.accounts.get(account).map(|a| &a.limits),
        };
        let Some(own) = own else {
            return Ok(());
        };
        let named = own.qos.iter().flatten().chain(own.default_qos.iter());
        if let Some(q) = named.into_iter().find(|q| !exists(q)) {
            return Err(AccountError::NoQos(q.clone()));
        }
        self.check_default(account, user)
    }

    /// The default QOS (own or inherited) that applies at `account` (with
    /// `user`) is granted there.
    fn check_default(&self, account: &str, user: Option<&str>) -> Result<(), AccountError> {
        let rights = self.rights_at(account, user);
        match &rights.default {
            Some(d) if !rights.allows(d) => Err(AccountError::DefaultNotAllowed {
                default: d.clone(),
                whom: match user {
                    Some(u) => format!("association of user {u} with account {account}"),
                    None => format!("account {account}"),
                },
                allowed: rights.describe(),
            }),
            _ => Ok(()),
        }
    }
}

/// One of the two rights looked up the tree.
enum Pick {
    List(Vec<String>),
    Default(String),
}

impl Pick {
    fn list(self) -> Option<Vec<String>> {
        match self {
            Pick::List(l) => Some(l),
            Pick::Default(_) => None,
        }
    }

    fn default(self) -> Option<String> {
        match self {
            Pick::Default(d) => Some(d),
            Pick::List(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fairshare::AccountChange;

    fn site() -> FairShare {
        let mut f = FairShare::default();
        for change in [
            AccountChange::AddAccount {
                name: "physics".into(),
                parent: None,
                shares: None,
                description: None,
            },
            AccountChange::AddAccount {
                name: "astro".into(),
                parent: Some("physics".into()),
                shares: None,
                description: None,
            },
            AccountChange::AddUser {
                user: "ann".into(),
                account: "astro".into(),
                shares: None,
                default: true,
            },
            AccountChange::AddUser {
                user: "bob".into(),
                account: "physics".into(),
                shares: None,
                default: true,
            },
        ] {
            f.apply(&change).unwrap();
        }
        f
    }

    fn grant(
        f: &mut FairShare,
        account: &str,
        user: Option<&str>,
        qos: &[&str],
        def: Option<&str>,
    ) {
        f.apply(&AccountChange::SetLimits {
            account: account.into(),
            user: user.map(String::from),
            limits: AssocLimits {
                qos: Some(qos.iter().map(|q| q.to_string()).collect()),
                default_qos: def.map(String::from),
                ..Default::default()
            },
        })
        .unwrap();
    }

    #[test]
    fn granted_nowhere_only_normal_may_be_used() {
        let f = site();
        let r = f.qos_rights("ann", Some("astro"));
        assert!(r.allows("normal"));
        assert!(!r.allows("high"));
        assert_eq!(r.default_qos(), None);
        assert!(!f.qos_rights("nobody", None).allows("high"));
    }

    #[test]
    fn an_association_inherits_the_nearest_grant_above_it() {
        let mut f = site();
        grant(&mut f, "physics", None, &["normal", "high"], None);
        assert!(f.qos_rights("ann", Some("astro")).allows("high"));
        assert!(f.qos_rights("bob", Some("physics")).allows("high"));
        // Its own list replaces what it inherits.
        grant(&mut f, "astro", Some("ann"), &["low"], None);
        let ann = f.qos_rights("ann", Some("astro"));
        assert!(!ann.allows("high") && ann.allows("low"));
        assert_eq!(ann.default_qos(), Some("low"), "the only QOS granted");
        // A user without an association has root's.
        assert!(!f.qos_rights("carl", None).allows("high"));
        grant(&mut f, ROOT, None, &["normal", "high"], Some("normal"));
        assert!(f.qos_rights("carl", None).allows("high"));
        assert_eq!(f.qos_rights("carl", None).default_qos(), Some("normal"));
    }

    #[test]
    fn the_root_account_takes_qos_rights_only() {
        let mut f = site();
        let err = f
            .apply(&AccountChange::SetLimits {
                account: ROOT.into(),
                user: None,
                limits: AssocLimits {
                    grp_jobs: Some(3),
                    ..Default::default()
                },
            })
            .unwrap_err();
        assert_eq!(err, AccountError::RootLimits);
    }

    #[test]
    fn a_default_must_exist_and_be_granted() {
        let mut f = site();
        grant(&mut f, "physics", None, &["normal"], Some("high"));
        let exists = |q: &str| ["normal", "high"].contains(&q);
        assert!(matches!(
            f.check_qos_rights("physics", None, &exists),
            Err(AccountError::DefaultNotAllowed { .. })
        ));
        grant(&mut f, "physics", None, &["normal", "gone"], None);
        assert_eq!(
            f.check_qos_rights("physics", None, &exists),
            Err(AccountError::NoQos("gone".into()))
        );
        grant(
            &mut f,
            "astro",
            Some("ann"),
            &["normal", "high"],
            Some("high"),
        );
        assert_eq!(f.check_qos_rights("astro", Some("ann"), &exists), Ok(()));
        // A change above an association can leave its default ungranted:
        // every grant is checked.
        grant(&mut f, "physics", None, &["normal"], None);
        grant(&mut f, "astro", None, &["normal", "high"], None);
        grant(&mut f, "astro", Some("ann"), &[], None);
        f.associations
            .get_mut(&("ann".to_string(), "astro".to_string()))
            .unwrap()
            .limits = AssocLimits {
            default_qos: Some("high".into()),
            ..Default::default()
        };
        assert_eq!(f.check_all_qos_rights(exists), Ok(()));
        grant(&mut f, "astro", None, &["normal"], None);
        assert!(f.check_all_qos_rights(exists).is_err());
        assert_eq!(
            f.granting("high").as_deref(),
            Some("user ann in account astro")
        );
        assert_eq!(f.granted_qos("physics", None), vec!["normal".to_string()]);
    }
}
