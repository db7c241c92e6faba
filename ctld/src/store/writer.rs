//! The writer task: it owns the store's one writing connection and commits
//! everything waiting in one transaction (group commit), then answers each
//! caller, so a change is acknowledged only once it is committed.

use tokio::sync::{mpsc, oneshot};

use super::sql::Conn;
use super::{writes, Write};

/// The most batches one transaction takes.
const MAX_GROUP: usize = 1024;

/// Writes enqueued together, and who waits for their commit.
pub(super) struct Batch {
    pub writes: Vec<Write>,
    pub done: oneshot::Sender<Result<(), sqlx::Error>>,
}

pub(super) async fn run(mut conn: Conn, mut rx: mpsc::UnboundedReceiver<Batch>) {
    while let Some(first) = rx.recv().await {
        let mut group = vec![first];
        while group.len() < MAX_GROUP {
            match rx.try_recv() {
                Ok(b) => group.push(b),
                Err(_) => break,
            }
        }
        match commit(&mut conn, &group).await {
            Ok(()) => {
                for b in group {
                    let _ = b.done.send(Ok(()));
                }
            }
            Err(e) => {
                // One bad batch must not fail the others it was grouped with:
                // retry each on its own.
                tracing::warn!(error = %e, batches = group.len(), "group commit failed; retrying batches one by one");
                for b in group {
                    let result = commit(&mut conn, std::slice::from_ref(&b)).await;
                    if let Err(e) = &result {
                        tracing::error!(error = %e, "store commit failed");
                    }
                    let _ = b.done.send(result);
                }
            }
        }
    }
    conn.close().await;
}

async fn commit(conn: &mut Conn, group: &[Batch]) -> Result<(), sqlx::Error> {
    let mut tx = conn.begin().await?;
    {
        let mut c = tx.conn();
        for b in group {
            for w in &b.writes {
                writes::apply(&mut c, w).await?;
            }
        }
    }
    tx.commit().await
}
