//! The writer task: it owns the store's one writing connection and commits
//! everything waiting in one transaction (group commit), then answers each
//! caller, so a change is acknowledged only once it is committed. Every
//! transaction first checks the controller's term (`lease::fence`): once
//! another controller has taken over, nothing more is committed, and the
//! controller is told to step down; so it is when the connection is lost
//! (what the database did with the last transaction is then unknown to
//! this controller, and only a fresh load from the database is sure).

use tokio::sync::{mpsc, oneshot};

use super::sql::Conn;
use super::{lease, writes, StepDown, StoreError, Write};

/// The most batches one transaction takes.
const MAX_GROUP: usize = 1024;

/// Writes enqueued together, and who waits for their commit.
pub(super) struct Batch {
    pub writes: Vec<Write>,
    pub done: oneshot::Sender<Result<(), StoreError>>,
}

/// Why a transaction did not commit.
enum Failure {
    /// Another controller holds the lease now.
    Fenced,
    /// The connection is gone or broken.
    Lost(sqlx::Error),
    /// The database refused a write (the others may go on).
    Refused(sqlx::Error),
}

impl From<sqlx::Error> for Failure {
    fn from(e: sqlx::Error) -> Failure {
        match e {
            sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::Protocol(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::WorkerCrashed => Failure::Lost(e),
            other => Failure::Refused(other),
        }
    }
}

pub(super) async fn run(
    mut conn: Conn,
    mut rx: mpsc::UnboundedReceiver<Batch>,
    epoch: i64,
    step_down: StepDown,
) {
    while let Some(first) = rx.recv().await {
        let mut group = vec![first];
        while group.len() < MAX_GROUP {
            match rx.try_recv() {
                Ok(b) => group.push(b),
                Err(_) => break,
            }
        }
        let failure = match commit(&mut conn, epoch, &group).await {
            Ok(()) => {
                for b in group {
                    let _ = b.done.send(Ok(()));
                }
                continue;
            }
            Err(Failure::Refused(e)) => {
                // One bad batch must not fail the others it was grouped
                // with: each on its own.
                tracing::warn!(error = %e, batches = group.len(), "group commit failed; retrying batches one by one");
                match one_by_one(&mut conn, epoch, group).await {
                    Ok(()) => continue,
                    Err((failure, rest)) => {
                        group = rest;
                        failure
                    }
                }
            }
            Err(failure) => failure,
        };
        // Fenced or lost: nothing more is committed by this controller.
        let why = match &failure {
            Failure::Fenced => format!(
                "another controller has taken over the database (this one's epoch {epoch} is over)"
            ),
            Failure::Lost(e) | Failure::Refused(e) => {
                format!("the connection to the database is lost ({e})")
            }
        };
        tracing::error!(epoch, "{why}: stepping down");
        step_down.now(why);
        for b in group {
            let _ = b.done.send(Err(error_of(&failure, epoch)));
        }
        rx.close();
        while let Some(b) = rx.recv().await {
            let _ = b.done.send(Err(StoreError::Fenced { epoch }));
        }
        break;
    }
    conn.close().await;
}

/// Commits each batch of `group` alone, answering each; stops at a
/// failure that is not the batch's own, giving back the batches not
/// answered.
async fn one_by_one(
    conn: &mut Conn,
    epoch: i64,
    group: Vec<Batch>,
) -> Result<(), (Failure, Vec<Batch>)> {
    let mut rest = group.into_iter();
    while let Some(b) = rest.next() {
        match commit(conn, epoch, std::slice::from_ref(&b)).await {
            Ok(()) => {
                let _ = b.done.send(Ok(()));
            }
            Err(Failure::Refused(e)) => {
                tracing::error!(error = %e, "store commit failed");
                let _ = b.done.send(Err(StoreError::Write(e)));
            }
            Err(failure) => return Err((failure, std::iter::once(b).chain(rest).collect())),
        }
    }
    Ok(())
}

fn error_of(failure: &Failure, epoch: i64) -> StoreError {
    match failure {
        Failure::Fenced => StoreError::Fenced { epoch },
        Failure::Lost(e) | Failure::Refused(e) => StoreError::Lost(e.to_string()),
    }
}

async fn commit(conn: &mut Conn, epoch: i64, group: &[Batch]) -> Result<(), Failure> {
    let mut tx = conn.begin().await?;
    {
        let mut c = tx.conn();
        if !lease::fence(c.reborrow(), epoch).await? {
            return Err(Failure::Fenced);
        }
        for b in group {
            for w in &b.writes {
                writes::apply(&mut c, w).await?;
            }
        }
    }
    Ok(tx.commit().await?)
}
