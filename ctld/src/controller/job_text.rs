//! The script and environment of a job live in the store once it is
//! submitted (`Cluster::take_text`); a launch and the script's readers
//! fetch them from there.

use std::time::Duration;

use gsched_core::job::{JobId, JobText};
use gsched_core::wire::LaunchRequest;
use tracing::warn;

use super::{Controller, CtlError};
use crate::store::StoreError;

/// What fetching a launch's text came to.
pub(super) enum TextFetch {
    /// The launch holds the job's script and environment.
    Ready,
    /// The launch was settled meanwhile (cancelled, requeued, its node
    /// lost): nothing to send.
    Settled,
    /// The store has no text for the job: the launch cannot be sent.
    Missing(String),
}

impl Controller {
    /// Gives a launch its job's script and environment from the store
    /// where they are not in it already, retrying a failing read while the
    /// launch is still awaited.
    pub(super) async fn fill_text(&self, node: &str, req: &mut LaunchRequest) -> TextFetch {
        if !req.job.text_in_store() {
            return TextFetch::Ready;
        }
        let (id, run) = (req.job.id, req.job.run);
        let mut backoff = Duration::from_millis(250);
        loop {
            match self.store.job_text(id).await {
                Ok(Some(text)) => {
                    req.job.put_text(text);
                    return TextFetch::Ready;
                }
                Ok(None) => {
                    return TextFetch::Missing(format!(
                        "job {id}'s script is missing from the controller's store"
                    ))
                }
                // Reading again will not mend it.
                Err(e @ StoreError::Corrupt { .. }) => return TextFetch::Missing(e.to_string()),
                Err(e) => {
                    warn!(error = %e, retry_in = ?backoff, "cannot read the job's script from the store")
                }
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(10));
            // A controller stepping down leaves the launch to the next
            // leader, which resolves it when the node registers.
            if !self.acting() || !self.lock().awaits_launch_on(id, run, node) {
                return TextFetch::Settled;
            }
        }
    }

    /// Job `id`'s script and environment, from memory while the job holds
    /// them, else from the store.
    pub async fn job_text(&self, id: JobId) -> Result<Option<JobText>, CtlError> {
        {
            let c = self.lock();
            match c.job(id) {
                Some(j) if !j.text_in_store() => {
                    return Ok(Some(JobText {
                        script: j.spec.script.clone(),
                        environment: j.spec.environment.clone(),
                    }))
                }
                _ => {}
            }
        }
        Ok(self.store.job_text(id).await?)
    }
}
