//! Slurm's Fair Tree fair-share algorithm (its default since 19.05): at
//! each account, its children (sub-accounts and users' associations) are
//! ranked by their level fair share, `S / U` (their shares over their
//! siblings', their usage over their siblings'; no usage ranks first), and
//! the tree is walked depth-first in that order; each association met
//! gets the next rank, and its factor is its rank over the number of
//! associations (the first 1, the last near 0). So an account that used
//! more than its share puts all its users after those of an account that
//! did not, whatever each user used: usage counts at every level of the
//! tree, unlike the classic factor. Associations with the same level fair
//! share under one account share a rank; tied accounts are walked one
//! after the other by name (Slurm merges their children). Pure.

use std::collections::BTreeMap;

use crate::fairshare::{FairShare, ROOT};

/// A child of an account in the walk: a sub-account or an association.
enum Child {
    Account(String),
    User(String),
}

impl FairShare {
    /// Each association's (user, account) Fair Tree factor at `now`.
    pub fn fair_tree(&self, now: i64, half_life: i64) -> BTreeMap<(String, String), f64> {
        let usage_of = |user: &str, account: &str| {
            self.decayed(&(user.to_string(), account.to_string()), now, half_life)
        };
        // Decayed usage below each account (itself included).
        let mut below: BTreeMap<String, f64> = BTreeMap::new();
        for (user, account) in self.usage.keys() {
            let u = usage_of(user, account);
            for a in self.path(account) {
                *below.entry(a).or_default() += u;
            }
        }
        let users = self.associations.len();
        let mut ranks: Vec<((String, String), usize)> = Vec::new();
        let mut next = users;
        self.walk(ROOT, &below, &usage_of, &mut next, &mut ranks);
        ranks
            .into_iter()
            .map(|(k, rank)| (k, rank as f64 / users.max(1) as f64))
            .collect()
    }

    /// Walks `account`'s children in level fair share order, giving each
    /// association met the rank `next` (counting down).
    fn walk(
        &self,
        account: &str,
        below: &BTreeMap<String, f64>,
        usage_of: &dyn Fn(&str, &str) -> f64,
        next: &mut usize,
        ranks: &mut Vec<((String, String), usize)>,
    ) {
        let mut children: Vec<(Child, f64, f64)> = self
            .accounts
            .values()
            .filter(|a| a.parent == account)
            .map(|a| {
                let u = below.get(&a.name).copied().unwrap_or(0.0);
                (Child::Account(a.name.clone()), f64::from(a.shares), u)
            })
            .chain(
                self.associations
                    .values()
                    .filter(|a| a.account == account)
                    .map(|a| {
                        let u = usage_of(&a.user, account);
                        (Child::User(a.user.clone()), f64::from(a.shares), u)
                    }),
            )
            .collect();
        let shares: f64 = children.iter().map(|c| c.1).sum();
        let used: f64 = children.iter().map(|c| c.2).sum();
        let level = |s: f64, u: f64| {
            let s = if shares > 0.0 { s / shares } else { 0.0 };
            let u = if used > 0.0 { u / used } else { 0.0 };
            match (s > 0.0, u > 0.0) {
                (false, _) => 0.0,
                (true, false) => f64::INFINITY,
                (true, true) => s / u,
            }
        };
        let mut keyed: Vec<(f64, Child)> = children
            .drain(..)
            .map(|(c, s, u)| (level(s, u), c))
            .collect();
        // Highest level fair share first; ties by name.
        keyed.sort_by(|a, b| {
            b.0.total_cmp(&a.0).then_with(|| {
                let name = |c: &Child| match c {
                    Child::Account(n) | Child::User(n) => n.clone(),
                };
                name(&a.1).cmp(&name(&b.1))
            })
        });
        let mut last_user_level: Option<(f64, usize)> = None;
        for (lf, child) in keyed {
            match child {
                Child::Account(name) => {
                    last_user_level = None;
                    self.walk(&name, below, usage_of, next, ranks);
                }
                Child::User(user) => {
                    // Tied users under one account share a rank.
                    let rank = match last_user_level {
                        Some((l, r)) if l == lf => r,
                        _ => *next,
                    };
                    ranks.push(((user, account.to_string()), rank));
                    *next = next.saturating_sub(1);
                    last_user_level = Some((lf, rank));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::fairshare::{AccountChange, FairShare};

    fn tree() -> FairShare {
        let mut f = FairShare::default();
        for a in ["physics", "bio"] {
            f.apply(&AccountChange::AddAccount {
                name: a.into(),
                parent: None,
                shares: Some(1),
                description: None,
            })
            .unwrap();
        }
        for (u, a) in [
            ("ann", "physics"),
            ("bob", "physics"),
            ("cem", "bio"),
            ("dia", "bio"),
        ] {
            f.apply(&AccountChange::AddUser {
                user: u.into(),
                account: a.into(),
                shares: None,
                default: true,
            })
            .unwrap();
        }
        f
    }

    fn factor(f: &FairShare, user: &str, account: &str) -> f64 {
        f.fair_tree(0, 3600)[&(user.to_string(), account.to_string())]
    }

    #[test]
    fn an_account_over_its_share_puts_all_its_users_after_the_others() {
        let mut f = tree();
        // physics used 3 (ann all of it), bio 1 (cem).
        f.charge("ann", "physics", 3.0, 0, 3600);
        f.charge("cem", "bio", 1.0, 0, 3600);
        // bio's users first: dia (no usage) then cem; then physics's:
        // bob (none) then ann.
        assert_eq!(factor(&f, "dia", "bio"), 1.0);
        assert_eq!(factor(&f, "cem", "bio"), 0.75);
        assert_eq!(factor(&f, "bob", "physics"), 0.5);
        assert_eq!(factor(&f, "ann", "physics"), 0.25);
        // Under the classic factor bob (no usage) ranks above cem, who
        // used something: usage does not count at the account's level.
        assert!(f.factor("bob", "physics", 0, 3600) > f.factor("cem", "bio", 0, 3600));
    }

    #[test]
    fn with_no_usage_everyone_ties_within_an_account() {
        let f = tree();
        assert_eq!(factor(&f, "ann", "physics"), factor(&f, "bob", "physics"));
        assert_eq!(factor(&f, "cem", "bio"), factor(&f, "dia", "bio"));
        // All four get a factor in (0, 1].
        for (u, a) in [("ann", "physics"), ("cem", "bio")] {
            let x = factor(&f, u, a);
            assert!(x > 0.0 && x <= 1.0, "{u}: {x}");
        }
    }
}
