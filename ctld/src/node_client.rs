//! The controller's calls to its nodes, typed: one method per call. In
//! production each is a sealed request (`SealedNodes`, through
//! `gsched_daemon::peer`); the controller's unit tests answer them with a
//! fake node, in one process.

use std::future::Future;
use std::pin::Pin;

use gsched_core::job::JobId;
use gsched_core::wire::{
    DrainRequest, LaunchRequest, ReshapeRequest, SignalRequest, SuspendRequest,
};
use gsched_daemon::peer::{Direction, PeerClient, PeerError, PeerReply};

/// Why a call brought no answer the controller can believe.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// Nothing was sent: nothing listens at the node's address.
    #[error("{0}")]
    Unreachable(String),
    /// Sent, but no whole answer came back, or one the node could not
    /// prove was its own: the call may or may not have been carried out.
    #[error("{0}")]
    NoAnswer(String),
}

impl From<PeerError> for CallError {
    fn from(e: PeerError) -> Self {
        if e.is_connect() {
            CallError::Unreachable(e.to_string())
        } else {
            CallError::NoAnswer(e.to_string())
        }
    }
}

/// A call in flight.
pub type Call<'a> = Pin<Box<dyn Future<Output = Result<PeerReply, CallError>> + Send + 'a>>;

/// What the controller asks of a node at `url`.
pub trait NodeClient: Send + Sync {
    /// Start a run of a job (idempotent per run).
    fn launch<'a>(&'a self, url: &'a str, req: &'a LaunchRequest) -> Call<'a>;
    /// Signal a job, or cancel it.
    fn signal<'a>(&'a self, url: &'a str, job: JobId, req: &'a SignalRequest) -> Call<'a>;
    /// Suspend or resume a job.
    fn suspend<'a>(&'a self, url: &'a str, job: JobId, req: &'a SuspendRequest) -> Call<'a>;
    /// Replace the node's drain set.
    fn drain<'a>(&'a self, url: &'a str, req: &'a DrainRequest) -> Call<'a>;
    /// Re-partition a GPU.
    fn reshape<'a>(&'a self, url: &'a str, req: &'a ReshapeRequest) -> Call<'a>;
}

/// The nodes reached by sealed requests over HTTP(S), each carrying the
/// leadership epoch the controller leads in (sealed with the path).
pub struct SealedNodes {
    client: PeerClient,
    epoch: i64,
}

impl SealedNodes {
    pub fn new(http: reqwest::Client, cluster_key: &str, epoch: i64) -> SealedNodes {
        SealedNodes {
            client: PeerClient::new(http, cluster_key, Direction::ToNode),
            epoch,
        }
    }

    fn post<'a, T: serde::Serialize + Sync + ?Sized>(
        &'a self,
        url: String,
        body: &'a T,
    ) -> Call<'a> {
        let url = format!(
            "{url}?{}={}",
            gsched_core::leadership::EPOCH_PARAM,
            self.epoch
        );
        Box::pin(async move { Ok(self.client.post(&url, body).await?) })
    }
}

impl NodeClient for SealedNodes {
    fn launch<'a>(&'a self, url: &'a str, req: &'a LaunchRequest) -> Call<'a> {
        self.post(format!("{url}/v1/jobs"), req)
    }

    fn signal<'a>(&'a self, url: &'a str, job: JobId, req: &'a SignalRequest) -> Call<'a> {
        self.post(format!("{url}/v1/jobs/{job}/signal"), req)
    }

    fn suspend<'a>(&'a self, url: &'a str, job: JobId, req: &'a SuspendRequest) -> Call<'a> {
        self.post(format!("{url}/v1/jobs/{job}/suspend"), req)
    }

    fn drain<'a>(&'a self, url: &'a str, req: &'a DrainRequest) -> Call<'a> {
        self.post(format!("{url}/v1/drain"), req)
    }

    fn reshape<'a>(&'a self, url: &'a str, req: &'a ReshapeRequest) -> Call<'a> {
        self.post(format!("{url}/v1/reshape"), req)
    }
}
