//! The `jobs` answer, streamed: the matching ids are taken under the lock,
//! then each chunk of jobs is shaped and written out under the lock again,
//! so an answer about many jobs never holds more than one chunk's shapes.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Body;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use gsched_core::job::JobId;
use gsched_core::wire::JobInfo;
use serde::Serialize;
use utoipa::ToSchema;

use super::shape::{Envelope, SlurmNumber};
use super::{no_val, shape, Req};
use crate::controller::{unix_now, Controller};

/// What follows the list of jobs in the answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct JobsTail {
    last_backfill: SlurmNumber,
    last_update: SlurmNumber,
    #[serde(flatten)]
    envelope: Envelope,
}

/// Jobs shaped per lock and per chunk of the body.
const CHUNK: usize = 200;

struct Cursor {
    ctl: Arc<Controller>,
    ids: Vec<JobId>,
    next: usize,
    cluster: String,
    /// Instance uuid -> gres type, taken once.
    types: HashMap<String, String>,
    /// The envelope after the list, sent last.
    tail: Option<Vec<u8>>,
    first: bool,
}

impl Cursor {
    /// The next chunk of the list (jobs that left memory meanwhile are
    /// skipped), then the tail.
    fn chunk(&mut self) -> Option<Vec<u8>> {
        if self.next >= self.ids.len() {
            return self.tail.take();
        }
        let end = (self.next + CHUNK).min(self.ids.len());
        let now = unix_now();
        let mut out = Vec::new();
        let c = self.ctl.lock();
        let weigher = c.weigher(now);
        for id in &self.ids[self.next..end] {
            let Some(j) = c.job(*id) else { continue };
            let info = JobInfo::new(j, &self.ctl.config.partition, now)
                .weighed(weigher.priority_of(j))
                .expecting(c.expected_start(j.id));
            let profile = info
                .gpu_instance
                .as_deref()
                .and_then(|u| self.types.get(u))
                .map(String::as_str);
            if !self.first {
                out.push(b',');
            }
            self.first = false;
            serde_json::to_writer(&mut out, &shape::job(&info, &self.cluster, profile))
                .expect("a job's shape serializes");
        }
        drop(c);
        self.next = end;
        Some(out)
    }
}

/// Every job (or `only`) changed at or after `since`, as slurmrestd lists
/// them.
pub(super) fn answer(
    ctl: Arc<Controller>,
    r: &Req,
    since: Option<i64>,
    only: Option<JobId>,
) -> Response {
    let now = unix_now();
    let (ids, types) = {
        let c = ctl.lock();
        let types: HashMap<String, String> = c
            .nodes()
            .flat_map(|n| n.instances.iter())
            .map(|s| (s.instance.uuid.clone(), shape::gres_type(s)))
            .collect();
        let wanted = |j: &&gsched_core::Job| since.is_none_or(|t| ctl.changed_at(j) >= t);
        let ids: Vec<JobId> = match only {
            Some(id) => c.job(id).filter(wanted).map(|j| j.id).into_iter().collect(),
            None => c.jobs().filter(wanted).map(|j| j.id).collect(),
        };
        (ids, types)
    };
    // `{"jobs":[` ... `],` and the rest of the envelope without its `{`.
    let rest = serde_json::to_vec(&JobsTail {
        last_backfill: no_val(Some(now)),
        last_update: no_val(Some(now)),
        envelope: r.envelope(),
    })
    .expect("the envelope serializes");
    let mut tail = b"],".to_vec();
    tail.extend_from_slice(&rest[1..]);
    let mut cursor = Cursor {
        ctl,
        ids,
        next: 0,
        cluster: r.cluster.clone(),
        types,
        tail: Some(tail),
        first: true,
    };
    let head =
        futures_util::stream::once(async { Ok::<_, std::io::Error>(b"{\"jobs\":[".to_vec()) });
    let body = futures_util::stream::unfold((), move |()| {
        let next = cursor.chunk();
        async move { next.map(|c| (Ok::<_, std::io::Error>(c), ())) }
    });
    use futures_util::StreamExt;
    (
        [(header::CONTENT_TYPE, "application/json")],
        Body::from_stream(head.chain(body)),
    )
        .into_response()
}
