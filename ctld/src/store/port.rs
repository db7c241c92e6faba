//! What the controller asks of its store, as a trait: the SQLite [`Store`]
//! in production; the controller's glue depends on this alone.

use std::future::Future;
use std::pin::Pin;

use gsched_core::job::{Job, JobId, JobText};
use gsched_core::probe::TaskRecord;

use super::{JobEvent, JobQuery, Store, StoreError, Write};

/// A store call in flight.
pub type StoreCall<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// The controller's store: writes in the order the state changed, and the
/// reads it answers from the database rather than memory.
pub trait ControllerStore: Send + Sync {
    /// Enqueues `writes` now (after every write enqueued before them) and
    /// resolves once they are committed.
    fn write(&self, writes: Vec<Write>) -> StoreCall<'static, ()>;
    /// A job's script and environment (`None`: no such job).
    fn job_text(&self, id: JobId) -> StoreCall<'_, Option<JobText>>;
    /// A job's history, oldest first.
    fn job_events(&self, id: JobId) -> StoreCall<'_, Vec<JobEvent>>;
    /// Recorded task reservations with their nodes: of one job if given,
    /// only those still open on `open_on` if given.
    fn task_records<'a>(
        &'a self,
        job: Option<JobId>,
        open_on: Option<&'a str>,
    ) -> StoreCall<'a, Vec<(String, TaskRecord)>>;
    /// Finished jobs matching `query` with ids above `after`, at most
    /// `limit`, by id.
    fn finished_jobs<'a>(
        &'a self,
        query: &'a JobQuery,
        after: JobId,
        limit: u32,
    ) -> StoreCall<'a, Vec<Job>>;
}

impl ControllerStore for Store {
    fn write(&self, writes: Vec<Write>) -> StoreCall<'static, ()> {
        Box::pin(Store::write(self, writes))
    }

    fn job_text(&self, id: JobId) -> StoreCall<'_, Option<JobText>> {
        Box::pin(Store::job_text(self, id))
    }

    fn job_events(&self, id: JobId) -> StoreCall<'_, Vec<JobEvent>> {
        Box::pin(async move { Ok(Store::job_events(self, id).await?) })
    }

    fn task_records<'a>(
        &'a self,
        job: Option<JobId>,
        open_on: Option<&'a str>,
    ) -> StoreCall<'a, Vec<(String, TaskRecord)>> {
        Box::pin(async move { Ok(Store::task_records(self, job, open_on).await?) })
    }

    fn finished_jobs<'a>(
        &'a self,
        query: &'a JobQuery,
        after: JobId,
        limit: u32,
    ) -> StoreCall<'a, Vec<Job>> {
        Box::pin(Store::finished_jobs(self, query, after, limit))
    }
}
