//! Step credentials: what lets `srun` start a step's tasks on the other
//! nodes of its job. The controller signs one per node (HS256 under the
//! cluster key) naming the job, its run, the step and the node, valid for
//! a short while; the node's gnoded checks it and takes everything else
//! (user, groups, working directory, cgroup) from its own record of the
//! job's share there, never from the request.

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};

/// How long a credential is valid: long enough for `srun` to reach every
/// node, short enough that one seen in transit soon opens nothing.
pub const LIFETIME_SECS: i64 = 300;

/// What a step credential says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepClaims {
    /// Always "step": no other token signed under the key reads as one.
    pub kind: String,
    pub job: u64,
    pub run: u32,
    pub step: u32,
    pub node: String,
    /// Unix seconds after which it is refused.
    pub exp: i64,
}

const KIND: &str = "step";

/// How far the controller's clock may be behind a node's when a node
/// compares a credential's issue time with its own start.
pub const CLOCK_SLACK_SECS: i64 = 5;

impl StepClaims {
    /// When it was issued (unix seconds).
    pub fn issued_at(&self) -> i64 {
        self.exp - LIFETIME_SECS
    }
}

/// Signs a credential for `node` to start tasks of step `step` of run
/// `run` of job `job`, valid from `now` for [`LIFETIME_SECS`].
pub fn sign(key: &str, job: u64, run: u32, step: u32, node: &str, now: i64) -> String {
    let claims = StepClaims {
        kind: KIND.into(),
        job,
        run,
        step,
        node: node.into(),
        exp: now + LIFETIME_SECS,
    };
    jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(key.as_bytes()),
    )
    .expect("HS256 signing does not fail")
}

/// A credential refused, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CredentialError {
    #[error("the step credential does not verify: {0}")]
    Invalid(String),
    #[error("the step credential is for {what}, not for this request")]
    Mismatch { what: String },
}

/// Checks `token` under the cluster key and that it is for step `step` of
/// run `run` of job `job` on `node`.
pub fn verify(
    key: &str,
    token: &str,
    job: u64,
    run: u32,
    step: u32,
    node: &str,
) -> Result<StepClaims, CredentialError> {
    let mut v = Validation::new(Algorithm::HS256);
    v.leeway = 5;
    v.set_required_spec_claims(&["exp"]);
    let claims =
        jsonwebtoken::decode::<StepClaims>(token, &DecodingKey::from_secret(key.as_bytes()), &v)
            .map_err(|e| CredentialError::Invalid(e.to_string()))?
            .claims;
    if claims.kind != KIND
        || claims.job != job
        || claims.run != run
        || claims.step != step
        || claims.node != node
    {
        return Err(CredentialError::Mismatch {
            what: format!(
                "{} {}.{} run {} on {}",
                claims.kind, claims.job, claims.step, claims.run, claims.node
            ),
        });
    }
    Ok(claims)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64
    }

    #[test]
    fn a_credential_opens_only_its_step_on_its_node_under_its_key() {
        let t = sign("k", 7, 2, 1, "n2", now());
        assert!(verify("k", &t, 7, 2, 1, "n2").is_ok());
        for (job, run, step, node) in [
            (8, 2, 1, "n2"),
            (7, 3, 1, "n2"),
            (7, 2, 0, "n2"),
            (7, 2, 1, "n1"),
        ] {
            assert!(
                matches!(
                    verify("k", &t, job, run, step, node),
                    Err(CredentialError::Mismatch { .. })
                ),
                "{job} {run} {step} {node}"
            );
        }
        assert!(matches!(
            verify("other", &t, 7, 2, 1, "n2"),
            Err(CredentialError::Invalid(_))
        ));
        let old = sign("k", 7, 2, 1, "n2", now() - LIFETIME_SECS - 60);
        assert!(matches!(
            verify("k", &old, 7, 2, 1, "n2"),
            Err(CredentialError::Invalid(_))
        ));
        assert!(verify("k", "not a token", 7, 2, 1, "n2").is_err());
    }
}
