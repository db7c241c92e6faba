//! Who is calling: signed tokens (JWT, HS256) on the TCP API, the peer's
//! credentials on the local unix socket, and what each caller may do.
//!
//! Tokens carry slurmrestd's `sun` claim (the user name) plus the uid and
//! gid the controller saw when it issued them, so a job submitted with a
//! token runs as that user and no other.

use std::collections::HashSet;

use axum::http::{HeaderMap, StatusCode};
use gsched_core::job::{JobId, JobSpec};
use gsched_daemon::http::ApiError;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};

/// slurmrestd's header pair.
pub const USER_TOKEN_HEADER: &str = "x-slurm-user-token";
pub const USER_NAME_HEADER: &str = "x-slurm-user-name";
const ISSUER: &str = "gsched";

/// The caller of one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub user: String,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub admin: bool,
    pub via: Via,
    /// When the caller's token expires (unix seconds), for token callers.
    pub expires: Option<i64>,
    /// The job a job token was issued to: it is good only until that job
    /// ends.
    pub job: Option<JobId>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// The local unix socket: identity from the kernel (SO_PEERCRED).
    Socket,
    /// A token on the TCP API.
    Token,
    /// A path the configuration exempts from authentication.
    Anonymous,
}

impl Caller {
    pub fn anonymous() -> Caller {
        Caller {
            user: String::new(),
            uid: None,
            gid: None,
            admin: false,
            via: Via::Anonymous,
            expires: None,
            job: None,
        }
    }

    /// Whether this caller may cancel or change a job of `user` (`uid`).
    pub fn may_act_on(&self, user: &str, uid: u32) -> bool {
        self.admin
            || (self.via != Via::Anonymous
                && self.user == user
                && self.uid.is_none_or(|u| u == uid))
    }

    /// Makes a submitted job this caller's: the spec's user, uid and gid
    /// become the caller's. A spec naming someone else is refused, except
    /// from an administrator, who may submit on a user's behalf (as root
    /// may in Slurm).
    pub fn stamp_owner(&self, spec: &mut JobSpec) -> Result<(), ApiError> {
        let deny = |m: String| Err(ApiError(StatusCode::FORBIDDEN, m));
        if self.via == Via::Anonymous {
            return deny(
                "submitting needs an authenticated user (a token, or the local socket)".into(),
            );
        }
        if self.admin && !spec.user_name.is_empty() && spec.user_name != self.user {
            return self.stamp_for_user(spec, lookup_identity(&spec.user_name));
        }
        if !spec.user_name.is_empty() && spec.user_name != self.user {
            return deny(format!(
                "the job names user {} but you are {}; only an administrator may submit for another user",
                spec.user_name, self.user
            ));
        }
        let Some(uid) = self.uid else {
            return deny(format!(
                "user {} has no uid on the controller host; jobs cannot run as them",
                self.user
            ));
        };
        if spec.uid != uid && !(spec.uid == 0 && spec.user_name.is_empty()) {
            return deny(format!(
                "the job names uid {} but you are uid {uid}",
                spec.uid
            ));
        }
        spec.user_name = self.user.clone();
        spec.uid = uid;
        spec.gid = match self.gid {
            Some(g) => g,
            // A token that carries no gid: the user database's word.
            None => own_gid(&self.user, spec.gid, lookup_identity(&self.user))?,
        };
        Ok(())
    }

    /// An administrator's job on behalf of `spec.user_name`: who it runs as
    /// is the controller's user database's word for that name (`found`:
    /// uid, primary gid and groups), never the body's. A uid or gid in the
    /// body that disagrees is refused, and only root may run jobs as root.
    fn stamp_for_user(
        &self,
        spec: &mut JobSpec,
        found: Option<(u32, u32, Vec<u32>)>,
    ) -> Result<(), ApiError> {
        let deny = |m: String| Err(ApiError(StatusCode::FORBIDDEN, m));
        let Some((uid, gid, groups)) = found else {
            return deny(format!(
                "user {} has no account on the controller host; jobs cannot run as them",
                spec.user_name
            ));
        };
        if spec.uid != uid {
            return deny(format!(
                "the job names uid {} but user {} is uid {uid}",
                spec.uid, spec.user_name
            ));
        }
        if uid == 0 && self.uid != Some(0) {
            return deny(format!(
                "only root may run jobs as {} (uid 0); {} may not",
                spec.user_name, self.user
            ));
        }
        if spec.gid != gid && !groups.contains(&spec.gid) {
            return deny(format!(
                "the job names gid {} but user {} is not in that group",
                spec.gid, spec.user_name
            ));
        }
        Ok(())
    }

    /// 403 unless this caller may act on the job.
    pub fn check_owner(&self, job: u64, user: &str, uid: u32) -> Result<(), ApiError> {
        if self.may_act_on(user, uid) {
            return Ok(());
        }
        let who = if self.via == Via::Anonymous {
            "an unauthenticated caller".to_string()
        } else {
            format!("user {}", self.user)
        };
        Err(ApiError(
            StatusCode::FORBIDDEN,
            format!(
                "Access/permission denied: job {job} belongs to {user}; {who} may not change it (only its owner or an administrator)"
            ),
        ))
    }
}

/// Claims of a gsched token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    /// The user name (slurmrestd's claim name).
    pub sun: String,
    #[serde(default)]
    pub uid: Option<u32>,
    #[serde(default)]
    pub gid: Option<u32>,
    pub iat: i64,
    pub exp: i64,
    #[serde(default)]
    pub iss: Option<String>,
    /// A job token's job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<JobId>,
}

/// Why a request was not authenticated: the 401's reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("this API needs a token: send `Authorization: Bearer TOKEN` or X-SLURM-USER-TOKEN; get one with `gsched token` (or `scontrol token`) on the controller host")]
    Missing,
    #[error("give the token either as X-SLURM-USER-TOKEN or as Authorization: Bearer, not both")]
    BothForms,
    #[error("X-SLURM-USER-NAME was given without X-SLURM-USER-TOKEN")]
    NameWithoutToken,
    #[error("the Authorization header is not `Bearer TOKEN`")]
    NotBearer,
    #[error("the token has expired; get a new one with `gsched token`")]
    Expired,
    #[error("the token's signature does not verify (forged, or signed with another key)")]
    BadSignature,
    #[error("the token is not a gsched token: {0}")]
    Malformed(String),
    #[error("the token is for user {token}, not {header} (X-SLURM-USER-NAME)")]
    UserMismatch { token: String, header: String },
    #[error("user {0} is not known on the controller host")]
    UnknownUser(String),
    #[error("this token belonged to job {0}, which has ended or was cancelled; job tokens are good only until their job ends")]
    JobEnded(JobId),
    #[error("cannot sign a token: {0}")]
    Sign(String),
}

impl From<AuthError> for ApiError {
    fn from(e: AuthError) -> ApiError {
        ApiError(StatusCode::UNAUTHORIZED, e.to_string())
    }
}

/// No token outlives this (ten years), whatever the settings say.
pub const MAX_TOKEN_LIFETIME: u64 = 10 * 365 * 86400;

/// Token signing and the admin list.
pub struct Authority {
    encoding: EncodingKey,
    decoding: DecodingKey,
    admins: HashSet<String>,
    /// The uid the controller runs as: an administrator of its own cluster.
    own_uid: u32,
    pub max_lifetime: u64,
}

/// A user's uid and primary gid, by name, from the host's user database.
pub fn lookup_user(name: &str) -> Option<(u32, u32)> {
    nix::unistd::User::from_name(name)
        .ok()
        .flatten()
        .map(|u| (u.uid.as_raw(), u.gid.as_raw()))
}

/// A user's uid, primary gid and every group, by name, from the host's
/// user database.
pub fn lookup_identity(name: &str) -> Option<(u32, u32, Vec<u32>)> {
    let user = nix::unistd::User::from_name(name).ok().flatten()?;
    let cname = std::ffi::CString::new(name).ok()?;
    let groups = nix::unistd::getgrouplist(&cname, user.gid)
        .map(|g| g.iter().map(|g| g.as_raw()).collect())
        .unwrap_or_else(|_| vec![user.gid.as_raw()]);
    Some((user.uid.as_raw(), user.gid.as_raw(), groups))
}

/// The gid a job of `user` runs with when its caller's credentials carry
/// none: the body's `asked` where it is one of the user's groups (`found`:
/// uid, primary gid, groups), else the primary group when the body named
/// none (0, the field's default); a group that is not the user's is
/// refused, and so is a user the controller's host does not know.
fn own_gid(user: &str, asked: u32, found: Option<(u32, u32, Vec<u32>)>) -> Result<u32, ApiError> {
    let Some((_, primary, groups)) = found else {
        return Err(ApiError(
            StatusCode::FORBIDDEN,
            format!("user {user} has no account on the controller host; its groups are unknown"),
        ));
    };
    if asked == primary || groups.contains(&asked) {
        Ok(asked)
    } else if asked == 0 {
        Ok(primary)
    } else {
        Err(ApiError(
            StatusCode::FORBIDDEN,
            format!("the job names gid {asked} but user {user} is not in that group"),
        ))
    }
}

/// A user's name by uid (the uid as text when the host has no entry).
pub fn user_name(uid: u32) -> String {
    nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .ok()
        .flatten()
        .map(|u| u.name)
        .unwrap_or_else(|| uid.to_string())
}

/// A group's name by gid (the gid as text when the host has none).
pub fn group_name(gid: u32) -> String {
    nix::unistd::Group::from_gid(nix::unistd::Gid::from_raw(gid))
        .ok()
        .flatten()
        .map(|g| g.name)
        .unwrap_or_else(|| gid.to_string())
}

/// This host's name.
pub fn host_name() -> String {
    nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "localhost".into())
}

impl Authority {
    pub fn new(secret: &[u8], admins: &[String], own_uid: u32, max_lifetime: u64) -> Authority {
        Authority {
            encoding: EncodingKey::from_secret(secret),
            decoding: DecodingKey::from_secret(secret),
            admins: admins.iter().cloned().collect(),
            own_uid,
            max_lifetime: max_lifetime.min(MAX_TOKEN_LIFETIME),
        }
    }

    pub fn is_admin(&self, user: &str, uid: Option<u32>) -> bool {
        uid.is_some_and(|u| u == 0 || u == self.own_uid) || self.admins.contains(user)
    }

    /// The caller behind a unix-socket peer.
    pub fn socket_caller(&self, uid: u32, gid: u32) -> Caller {
        let user = user_name(uid);
        Caller {
            admin: self.is_admin(&user, Some(uid)),
            user,
            uid: Some(uid),
            gid: Some(gid),
            via: Via::Socket,
            expires: None,
            job: None,
        }
    }

    /// Signs a token for `user` valid `lifetime` seconds from `now`.
    pub fn issue(
        &self,
        user: &str,
        uid: Option<u32>,
        gid: Option<u32>,
        lifetime: u64,
        now: i64,
    ) -> Result<(String, Claims), AuthError> {
        let claims = Claims {
            sun: user.to_string(),
            uid,
            gid,
            iat: now,
            exp: now.saturating_add(lifetime.min(self.max_lifetime) as i64),
            iss: Some(ISSUER.into()),
            job: None,
        };
        self.sign(claims)
    }

    /// Signs a token for a job's own commands: its user's, and good only
    /// until the job ends (checked on every request), at most
    /// `lifetime` (capped by the maximum token lifetime).
    pub fn issue_for_job(
        &self,
        spec: &JobSpec,
        job: JobId,
        lifetime: u64,
        now: i64,
    ) -> Result<(String, Claims), AuthError> {
        let (_, base) = self.issue(
            &spec.user_name,
            Some(spec.uid),
            Some(spec.gid),
            lifetime,
            now,
        )?;
        self.sign(Claims {
            job: Some(job),
            ..base
        })
    }

    fn sign(&self, claims: Claims) -> Result<(String, Claims), AuthError> {
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &self.encoding)
            .map(|t| (t, claims))
            .map_err(|e| AuthError::Sign(e.to_string()))
    }

    /// Checks a token's signature and lifetime.
    pub fn verify(&self, token: &str) -> Result<Claims, AuthError> {
        let mut v = Validation::new(Algorithm::HS256);
        v.leeway = 0;
        v.set_required_spec_claims(&["exp"]);
        match jsonwebtoken::decode::<Claims>(token, &self.decoding, &v) {
            Ok(d) => Ok(d.claims),
            Err(e) => Err(match e.kind() {
                ErrorKind::ExpiredSignature => AuthError::Expired,
                ErrorKind::InvalidSignature => AuthError::BadSignature,
                ErrorKind::InvalidAlgorithm => {
                    AuthError::Malformed("it is not signed with HS256".into())
                }
                other => AuthError::Malformed(format!("{other:?}")),
            }),
        }
    }

    /// The caller named by a request's token headers.
    pub fn token_caller(&self, headers: &HeaderMap) -> Result<Caller, AuthError> {
        let text = |name: &str| {
            headers
                .get(name)
                .map(|v| v.to_str().unwrap_or("").trim().to_string())
        };
        let slurm = text(USER_TOKEN_HEADER);
        let name = text(USER_NAME_HEADER).filter(|n| !n.is_empty());
        let bearer = text("authorization");
        let token = match (slurm, bearer) {
            (Some(_), Some(_)) => return Err(AuthError::BothForms),
            (Some(t), None) => t,
            (None, Some(b)) => {
                if name.is_some() {
                    return Err(AuthError::NameWithoutToken);
                }
                match b.split_once(' ') {
                    Some((scheme, t)) if scheme.eq_ignore_ascii_case("bearer") => {
                        t.trim().to_string()
                    }
                    _ => return Err(AuthError::NotBearer),
                }
            }
            (None, None) if name.is_some() => return Err(AuthError::NameWithoutToken),
            (None, None) => return Err(AuthError::Missing),
        };
        if token.is_empty() {
            return Err(AuthError::Missing);
        }
        let c = self.verify(&token)?;
        let admin = self.is_admin(&c.sun, c.uid);
        let job = c.job;
        match name {
            Some(n) if n != c.sun => {
                // An administrator's token may act as the named user, as
                // slurmrestd lets SlurmUser's tokens do.
                // A job token never acts as anyone else.
                if !admin || job.is_some() {
                    return Err(AuthError::UserMismatch {
                        token: c.sun,
                        header: n,
                    });
                }
                let (uid, gid) = lookup_user(&n).ok_or(AuthError::UnknownUser(n.clone()))?;
                if uid == 0 && c.uid != Some(0) {
                    // Only root acts as root.
                    return Err(AuthError::UserMismatch {
                        token: c.sun,
                        header: n,
                    });
                }
                Ok(Caller {
                    admin: self.is_admin(&n, Some(uid)),
                    user: n,
                    uid: Some(uid),
                    gid: Some(gid),
                    via: Via::Token,
                    expires: Some(c.exp),
                    job: None,
                })
            }
            _ => {
                let (uid, gid) = match c.uid {
                    Some(u) => (Some(u), c.gid),
                    None => match lookup_user(&c.sun) {
                        Some((u, g)) => (Some(u), Some(g)),
                        None => (None, None),
                    },
                };
                Ok(Caller {
                    user: c.sun,
                    uid,
                    gid,
                    admin,
                    via: Via::Token,
                    expires: Some(c.exp),
                    job,
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn authority() -> Authority {
        Authority::new(
            b"0123456789abcdef0123456789abcdef",
            &["ops".into()],
            4242,
            86400,
        )
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    fn now() -> i64 {
        gsched_daemon::unix_now()
    }

    #[test]
    fn issued_tokens_verify_in_both_header_forms() {
        let a = authority();
        let (t, _) = a.issue("alice", Some(1000), Some(100), 60, now()).unwrap();
        let bearer = a
            .token_caller(&headers(&[("authorization", &format!("Bearer {t}"))]))
            .unwrap();
        assert_eq!(bearer.user, "alice");
        assert_eq!(bearer.uid, Some(1000));
        assert_eq!(bearer.gid, Some(100));
        assert!(!bearer.admin);
        let slurm = a
            .token_caller(&headers(&[
                (USER_TOKEN_HEADER, &t),
                (USER_NAME_HEADER, "alice"),
            ]))
            .unwrap();
        assert_eq!(slurm, bearer);
        assert_eq!(
            a.token_caller(&headers(&[
                (USER_TOKEN_HEADER, &t),
                ("authorization", &format!("Bearer {t}"))
            ])),
            Err(AuthError::BothForms)
        );
    }

    #[test]
    fn an_administrator_submits_as_the_named_user_only() {
        let ops = Caller {
            user: "ops".into(),
            uid: Some(2000),
            gid: Some(2000),
            admin: true,
            via: Via::Token,
            expires: None,
            job: None,
        };
        let victim = Some((1000, 100, vec![100, 27]));
        let spec = |uid, gid| JobSpec {
            user_name: "victim".into(),
            uid,
            gid,
            ..JobSpec::default()
        };
        // The uid and gid must be the user's (a group of theirs).
        for (uid, gid) in [(1000, 100), (1000, 27)] {
            let mut s = spec(uid, gid);
            ops.stamp_for_user(&mut s, victim.clone()).unwrap();
            assert_eq!((s.uid, s.gid), (uid, gid));
        }
        for (uid, gid) in [(0, 0), (0, 100), (1, 100), (1000, 5), (1000, 0)] {
            let e = ops.stamp_for_user(&mut spec(uid, gid), victim.clone());
            assert_eq!(e.unwrap_err().0, StatusCode::FORBIDDEN, "{uid} {gid}");
        }
        assert!(ops.stamp_for_user(&mut spec(1000, 100), None).is_err());
        // Naming root: only root may.
        let root_user = Some((0, 0, vec![0]));
        assert!(ops
            .stamp_for_user(&mut spec(0, 0), root_user.clone())
            .unwrap_err()
            .1
            .contains("only root"));
        let root = Caller {
            uid: Some(0),
            ..ops.clone()
        };
        root.stamp_for_user(&mut spec(0, 0), root_user).unwrap();
    }

    #[test]
    fn without_a_gid_in_the_token_the_job_runs_in_one_of_the_users_groups() {
        let found = Some((1000, 100, vec![100, 27]));
        assert_eq!(own_gid("ann", 27, found.clone()).unwrap(), 27);
        // None named (0, the field's default): the primary group.
        assert_eq!(own_gid("ann", 0, found.clone()).unwrap(), 100);
        // Root's group or another's: refused.
        let e = own_gid("ann", 5, found).unwrap_err();
        assert_eq!(e.0, StatusCode::FORBIDDEN);
        assert!(e.1.contains("gid 5"), "{}", e.1);
        assert!(own_gid("ghost", 100, None).is_err());
        // A member of root's group may name it.
        assert_eq!(
            own_gid("adm", 0, Some((1001, 100, vec![100, 0]))).unwrap(),
            0
        );
    }

    #[test]
    fn job_tokens_name_their_job_and_never_act_as_another_user() {
        let a = authority();
        let spec = JobSpec {
            user_name: "alice".into(),
            uid: 1000,
            gid: 100,
            ..JobSpec::default()
        };
        // A ten-year job still gets a token no longer than the maximum.
        let (t, claims) = a.issue_for_job(&spec, 7, u64::MAX, now()).unwrap();
        assert_eq!(claims.exp - claims.iat, a.max_lifetime as i64);
        let c = a
            .token_caller(&headers(&[("authorization", &format!("Bearer {t}"))]))
            .unwrap();
        assert_eq!(
            (c.user.as_str(), c.uid, c.job),
            ("alice", Some(1000), Some(7))
        );
        assert!(matches!(
            a.token_caller(&headers(&[
                (USER_TOKEN_HEADER, &t),
                (USER_NAME_HEADER, "bob")
            ])),
            Err(AuthError::UserMismatch { .. })
        ));
    }

    #[test]
    fn bad_tokens_say_why() {
        let a = authority();
        assert_eq!(a.token_caller(&HeaderMap::new()), Err(AuthError::Missing));
        let (old, _) = a.issue("alice", Some(1000), None, 10, now() - 100).unwrap();
        assert_eq!(a.verify(&old), Err(AuthError::Expired));
        let other = Authority::new(b"another key entirely, 32 bytes!!", &[], 1, 60);
        let (forged, _) = other.issue("root", Some(0), None, 60, now()).unwrap();
        assert_eq!(a.verify(&forged), Err(AuthError::BadSignature));
        assert!(matches!(
            a.verify("not.a.token"),
            Err(AuthError::Malformed(_))
        ));
        assert_eq!(
            a.token_caller(&headers(&[("authorization", "Basic abc")])),
            Err(AuthError::NotBearer)
        );
        assert_eq!(
            a.token_caller(&headers(&[(USER_NAME_HEADER, "alice")])),
            Err(AuthError::NameWithoutToken)
        );
        let (t, _) = a.issue("alice", Some(1000), None, 60, now()).unwrap();
        assert_eq!(
            a.token_caller(&headers(&[
                (USER_TOKEN_HEADER, &t),
                (USER_NAME_HEADER, "bob")
            ])),
            Err(AuthError::UserMismatch {
                token: "alice".into(),
                header: "bob".into()
            })
        );
    }

    #[test]
    fn owners_and_admins_may_act() {
        let a = authority();
        let alice = a.socket_caller(1000, 1000);
        assert!(!alice.admin);
        let alice = Caller {
            user: "alice".into(),
            ..alice
        };
        assert!(alice.may_act_on("alice", 1000));
        assert!(!alice.may_act_on("bob", 1001));
        assert!(!alice.may_act_on("alice", 1001), "same name, other uid");
        assert!(a.socket_caller(0, 0).admin);
        assert!(a.socket_caller(4242, 0).admin, "the controller's own user");
        assert!(a.is_admin("ops", Some(7)));
        assert!(!Caller::anonymous().may_act_on("", 0));
        let err = alice.check_owner(5, "bob", 1001).unwrap_err();
        assert_eq!(err.0, StatusCode::FORBIDDEN);
        assert!(err.1.contains("job 5 belongs to bob"), "{}", err.1);
    }
}
