//! Whose jobs a node runs (gnoded checks every launch against it,
//! whatever the controller says).

/// The lowest uid a node runs jobs of by default (Debian's first user
/// account; lower ones are system accounts).
pub const DEFAULT_MIN_JOB_UID: u32 = 1000;

/// Which users' jobs a node runs: none below `min_uid`, and root's only
/// where the site allows them; gnoded's own user's always (a node run by
/// one user for that user).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobUidPolicy {
    pub min_uid: u32,
    pub allow_root: bool,
}

impl JobUidPolicy {
    /// Why a job of `uid` may not run on a node whose daemon is `daemon_uid`.
    pub fn check(&self, uid: u32, daemon_uid: u32) -> Result<(), UidRefused> {
        if uid == 0 && !self.allow_root {
            return Err(UidRefused::Root);
        }
        if uid != 0 && uid != daemon_uid && uid < self.min_uid {
            return Err(UidRefused::SystemAccount {
                uid,
                min: self.min_uid,
            });
        }
        Ok(())
    }
}

/// Why a node refuses a job's user.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UidRefused {
    #[error("this node does not run jobs as root (uid 0); the site allows them with gnoded --allow-root-jobs")]
    Root,
    #[error("uid {uid} is below this node's lowest job uid ({min}, gnoded --min-job-uid): system accounts run no jobs")]
    SystemAccount { uid: u32, min: u32 },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_and_system_accounts_only_where_allowed() {
        let p = JobUidPolicy {
            min_uid: 1000,
            allow_root: false,
        };
        assert_eq!(p.check(0, 0), Err(UidRefused::Root));
        assert_eq!(
            p.check(33, 0),
            Err(UidRefused::SystemAccount { uid: 33, min: 1000 })
        );
        assert_eq!(p.check(1000, 0), Ok(()));
        assert_eq!(p.check(33, 33), Ok(()), "the daemon's own user");
        let root_ok = JobUidPolicy {
            allow_root: true,
            ..p
        };
        assert_eq!(root_ok.check(0, 0), Ok(()));
    }
}
