//! The highest leadership epoch this node has seen (from registration
//! replies and from the calls themselves): calls from a controller of an
//! older epoch, one that was superseded, are refused
//! (`gsched_core::leadership::admit`).

use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use gsched_core::leadership::{admit, EPOCH_PARAM};
use gsched_daemon::http::ApiError;
use std::sync::atomic::{AtomicI64, Ordering};

#[derive(Default)]
pub struct LeaderEpoch(AtomicI64);

impl LeaderEpoch {
    /// Learns the epoch a registration reply states.
    pub fn learn(&self, epoch: i64) {
        let before = self.0.fetch_max(epoch, Ordering::SeqCst);
        if epoch > before {
            tracing::info!(epoch, before, "following the leader of a new epoch");
        }
    }

    pub fn highest(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }

    /// Takes a call carrying `given`, or refuses it as stale.
    pub fn admit(&self, given: Option<i64>) -> Result<(), gsched_core::leadership::StaleEpoch> {
        let mut highest = self.highest();
        loop {
            let next = admit(highest, given)?;
            match self
                .0
                .compare_exchange(highest, next, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => return Ok(()),
                Err(now) => highest = now,
            }
        }
    }
}

/// The epoch a call's (sealed) query carries; a malformed one reads as
/// none (epoch 0).
fn epoch_of(query: Option<&str>) -> Option<i64> {
    query?
        .split('&')
        .find_map(|pair| pair.strip_prefix(EPOCH_PARAM)?.strip_prefix('='))?
        .parse()
        .ok()
}

/// Middleware inside the seal: refuses calls of an older epoch.
pub async fn check(epoch: &LeaderEpoch, req: Request, next: Next) -> Response {
    match epoch.admit(epoch_of(req.uri().query())) {
        Ok(()) => next.run(req).await,
        Err(stale) => {
            tracing::warn!(path = %req.uri().path(), error = %stale, "call from a superseded controller refused");
            ApiError::new(StatusCode::CONFLICT, stale.to_string()).into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epochs_are_read_from_the_query_and_only_go_up() {
        assert_eq!(epoch_of(Some("epoch=4")), Some(4));
        assert_eq!(epoch_of(Some("a=1&epoch=9")), Some(9));
        assert_eq!(epoch_of(Some("epochs=9")), None);
        assert_eq!(epoch_of(None), None);
        let e = LeaderEpoch::default();
        e.admit(None).unwrap();
        e.learn(3);
        assert!(e.admit(Some(2)).is_err());
        assert!(e.admit(None).is_err());
        e.admit(Some(5)).unwrap();
        assert_eq!(e.highest(), 5);
        e.learn(4);
        assert_eq!(e.highest(), 5);
    }
}
