//! The seal of a step's exchange with one node. `srun` on a job's first
//! node starts the step's tasks on the job's other nodes by posting to
//! each node's gnoded: the command, the environment (the job's token in
//! it) and the controller's credential. A port on another host, or on
//! loopback while gnoded restarts, proves nothing, so none of it may go
//! out in clear: the controller derives one secret per step and node from
//! the cluster key (HKDF-SHA256 over job, run, step and node) and gives it
//! to the job's owner with the credential; `srun` seals the request under
//! it (ChaCha20-Poly1305) and the node, which derives the same secret from
//! its own copy of the cluster key, opens it. Whoever holds the port
//! without the cluster key reads nothing and cannot answer: each event the
//! node streams back is sealed under a reply key derived from the secret
//! and the request's own nonce, with its sequence number as the nonce, so
//! `srun` believes only the node's own events, in order, and no two
//! answers (a request replayed included) ever share a key. The secret
//! opens this step on this node only.
//!
//! Its own small crate: `srun` (gsched-cli) and gnoded (gsched-noded)
//! share it without the command pulling in the daemons' libraries.

use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, CHACHA20_POLY1305, NONCE_LEN};
use ring::hkdf;

/// Why a sealed step message was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    #[error("the step's seal secret is not 64 hexadecimal digits")]
    BadSecret,
    #[error("the step request is not sealed for this step on this node (or not with this cluster's key)")]
    Request,
    #[error(
        "event {0} of the step's stream does not open: it did not come from the node's gnoded"
    )]
    Event(u64),
}

/// The keys of one step's exchange with one node.
pub struct StepSeal {
    request: LessSafeKey,
    /// What each answer's key is derived from, with its request's nonce.
    replies: hkdf::Prk,
}

/// The key of the answer to one request: its events, in order.
pub struct StepReply {
    key: LessSafeKey,
}

impl std::fmt::Debug for StepReply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StepReply(..)")
    }
}

impl std::fmt::Debug for StepSeal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StepSeal(..)")
    }
}

/// The secret of step `step` of run `run` of job `job` on `node`, from
/// the cluster key (64 hexadecimal digits): what the controller gives
/// `srun`.
pub fn secret(cluster_key: &str, job: u64, run: u32, step: u32, node: &str) -> String {
    let prk = hkdf::Salt::new(hkdf::HKDF_SHA256, b"gsched step seal")
        .extract(cluster_key.trim().as_bytes());
    let info = format!("step v1\n{job}\n{run}\n{step}\n{node}");
    let info = [info.as_bytes()];
    let mut out = [0u8; 32];
    prk.expand(&info, Len32)
        .and_then(|okm| okm.fill(&mut out))
        .expect("HKDF can expand 32 bytes");
    hex(&out)
}

/// A length for HKDF's output.
struct Len32;

impl hkdf::KeyType for Len32 {
    fn len(&self) -> usize {
        32
    }
}

/// A ChaCha20-Poly1305 key expanded from `prk` for `info` (also the
/// daemons' peer seal's, `gsched_daemon::peer`).
pub fn aead_key(prk: &hkdf::Prk, info: &[u8]) -> LessSafeKey {
    let info = [info];
    let okm = prk
        .expand(&info, &CHACHA20_POLY1305)
        .expect("HKDF can expand one AEAD key");
    LessSafeKey::new(UnboundKey::from(okm))
}

impl StepSeal {
    /// The keys of a secret (from [`secret`]).
    pub fn from_secret(secret: &str) -> Result<StepSeal, SealError> {
        let bytes = unhex(secret)
            .filter(|b| b.len() == 32)
            .ok_or(SealError::BadSecret)?;
        let prk = hkdf::Salt::new(hkdf::HKDF_SHA256, b"gsched step keys").extract(&bytes);
        Ok(StepSeal {
            request: aead_key(&prk, b"request"),
            replies: hkdf::Salt::new(hkdf::HKDF_SHA256, b"gsched step replies").extract(&bytes),
        })
    }

    /// The keys of step `step` of run `run` of job `job` on `node`, as the
    /// node derives them from the cluster key.
    pub fn for_step(cluster_key: &str, job: u64, run: u32, step: u32, node: &str) -> StepSeal {
        StepSeal::from_secret(&secret(cluster_key, job, run, step, node))
            .expect("a derived secret is well formed")
    }

    /// The key of the answer to the request sealed under `nonce`.
    fn reply_to(&self, nonce: &[u8]) -> StepReply {
        StepReply {
            key: aead_key(&self.replies, &[b"reply v1 ".as_slice(), nonce].concat()),
        }
    }

    /// `plain` sealed under a fresh nonce (hexadecimal nonce and cipher
    /// text), and the key its answer comes under.
    pub fn seal_request(&self, plain: &[u8]) -> (String, StepReply) {
        let mut nonce = [0u8; NONCE_LEN];
        getrandom::getrandom(&mut nonce).expect("the OS gives randomness for a nonce");
        let mut data = plain.to_vec();
        self.request
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(b"gsched step request"),
                &mut data,
            )
            .expect("sealing in memory does not fail");
        (
            format!("{}{}", hex(&nonce), hex(&data)),
            self.reply_to(&nonce),
        )
    }

    /// Opens what [`Self::seal_request`] sealed; with the key to answer
    /// it under.
    pub fn open_request(&self, sealed: &str) -> Result<(Vec<u8>, StepReply), SealError> {
        let bytes = unhex(sealed).ok_or(SealError::Request)?;
        if bytes.len() < NONCE_LEN {
            return Err(SealError::Request);
        }
        let (nonce_bytes, data) = bytes.split_at(NONCE_LEN);
        let nonce =
            Nonce::try_assume_unique_for_key(nonce_bytes).map_err(|_| SealError::Request)?;
        let mut data = data.to_vec();
        let plain = self
            .request
            .open_in_place(nonce, Aad::from(b"gsched step request"), &mut data)
            .map_err(|_| SealError::Request)?;
        Ok((plain.to_vec(), self.reply_to(nonce_bytes)))
    }
}

impl StepReply {
    /// Event number `seq` of the node's stream, sealed (hexadecimal). The
    /// sequence number is the nonce: each is used once under the key of
    /// this one answer.
    pub fn seal_event(&self, seq: u64, plain: &[u8]) -> String {
        let mut data = plain.to_vec();
        self.key
            .seal_in_place_append_tag(seq_nonce(seq), Aad::from(b"gsched step event"), &mut data)
            .expect("sealing in memory does not fail");
        hex(&data)
    }

    /// Opens event number `seq` (the events are read in order).
    pub fn open_event(&self, seq: u64, sealed: &str) -> Result<Vec<u8>, SealError> {
        let mut data = unhex(sealed.trim()).ok_or(SealError::Event(seq))?;
        let plain = self
            .key
            .open_in_place(seq_nonce(seq), Aad::from(b"gsched step event"), &mut data)
            .map_err(|_| SealError::Event(seq))?;
        Ok(plain.to_vec())
    }
}

fn seq_nonce(seq: u64) -> Nonce {
    let mut n = [0u8; NONCE_LEN];
    n[NONCE_LEN - 8..].copy_from_slice(&seq.to_be_bytes());
    Nonce::assume_unique_for_key(n)
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 15) as usize] as char);
    }
    s
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    };
    s.as_bytes()
        .chunks(2)
        .map(|p| Some(digit(p[0])? << 4 | digit(p[1])?))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_opens_only_for_its_step_on_its_node_under_the_cluster_key() {
        let s = secret("cluster", 7, 2, 1, "n2");
        let (sealed, _) = StepSeal::from_secret(&s)
            .unwrap()
            .seal_request(b"{\"env\":{\"GSCHED_TOKEN\":\"t\"}}");
        assert!(!sealed.contains(&hex(b"GSCHED_TOKEN")), "sealed in clear");
        let node = StepSeal::for_step("cluster", 7, 2, 1, "n2");
        assert_eq!(
            node.open_request(&sealed).unwrap().0,
            b"{\"env\":{\"GSCHED_TOKEN\":\"t\"}}"
        );
        for other in [
            StepSeal::for_step("other key", 7, 2, 1, "n2"),
            StepSeal::for_step("cluster", 8, 2, 1, "n2"),
            StepSeal::for_step("cluster", 7, 3, 1, "n2"),
            StepSeal::for_step("cluster", 7, 2, 2, "n2"),
            StepSeal::for_step("cluster", 7, 2, 1, "n1"),
        ] {
            assert_eq!(other.open_request(&sealed).unwrap_err(), SealError::Request);
        }
        // Tampered or malformed.
        let mut bad = sealed.clone().into_bytes();
        let last = bad.len() - 1;
        bad[last] = if bad[last] == b'0' { b'1' } else { b'0' };
        assert!(node
            .open_request(std::str::from_utf8(&bad).unwrap())
            .is_err());
        assert!(node.open_request("zz").is_err());
        assert!(node.open_request("").is_err());
        assert_eq!(
            StepSeal::from_secret("12").unwrap_err(),
            SealError::BadSecret
        );
    }

    #[test]
    fn events_open_only_in_order_only_from_the_node_and_only_for_their_request() {
        let node = StepSeal::for_step("k", 1, 0, 0, "n");
        let srun = StepSeal::from_secret(&secret("k", 1, 0, 0, "n")).unwrap();
        let (request, mine) = srun.seal_request(b"go");
        let (_, answer) = node.open_request(&request).unwrap();
        let e0 = answer.seal_event(0, b"first");
        let e1 = answer.seal_event(1, b"second");
        assert_eq!(mine.open_event(0, &e0).unwrap(), b"first");
        assert_eq!(mine.open_event(1, &e1).unwrap(), b"second");
        // Out of order, replayed, or forged by someone without the key.
        assert_eq!(mine.open_event(1, &e0), Err(SealError::Event(1)));
        let (_, guessed) = StepSeal::for_step("guess", 1, 0, 0, "n").seal_request(b"x");
        let forged = guessed.seal_event(2, b"exit 0");
        assert_eq!(mine.open_event(2, &forged), Err(SealError::Event(2)));
        // Another request (a replay's answer included) has another key: its
        // events never open as this one's.
        let (_, other_answer) = node.open_request(&srun.seal_request(b"go").0).unwrap();
        assert!(mine
            .open_event(0, &other_answer.seal_event(0, b"first"))
            .is_err());
    }
}
