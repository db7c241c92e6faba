//! The writer task: it owns the store's one writing connection and commits
//! everything waiting in one transaction (group commit), then answers each
//! caller, so a change is acknowledged only once it is committed. Every
//! transaction checks the controller's term (`lease::fence`) as its last
//! statement before the commit (so the lease row is locked only for the
//! commit itself, not for the writes, and renewals do not wait on them):
//! once another controller has taken over, nothing more is committed, and
//! the controller is told to step down.
//!
//! A connection found broken before the commit was sent (the database
//! restarted since the last transaction) is opened again and the group
//! written anew: nothing of it can have been committed. One that breaks
//! while the commit is under way leaves the outcome unknown to this
//! controller, and only a fresh load from the database is sure: it steps
//! down too (a standby, or this controller started again, takes over).

use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use super::sql::Conn;
use super::{lease, writes, Database, Durability, StepDown, Store, StoreError, Write};

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
    /// The connection broke before the commit was sent: nothing of the
    /// transaction was committed.
    Broken(sqlx::Error),
    /// The connection broke while the commit was under way.
    InDoubt(sqlx::Error),
    /// The database refused a write (the others may go on).
    Refused(sqlx::Error),
}

/// Whether an error means the connection is gone, not the statement: an
/// I/O or protocol failure, or PostgreSQL's own word that it ended the
/// session (SQLSTATE class 08, connection exception; 57P, a shutdown or
/// restart of the server; 25P03, the session's transaction idled past
/// `idle_in_transaction_session_timeout`).
fn lost_connection(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(d) => d
            .code()
            .is_some_and(|c| c.starts_with("08") || c.starts_with("57P") || c == "25P03"),
        _ => false,
    }
}

fn before_commit(e: sqlx::Error) -> Failure {
    if lost_connection(&e) {
        Failure::Broken(e)
    } else {
        Failure::Refused(e)
    }
}

/// The connection and what it takes to open it again.
pub(super) struct Writer {
    pub conn: Conn,
    pub database: Database,
    pub durability: Durability,
    pub epoch: i64,
    pub step_down: StepDown,
}

impl Writer {
    pub(super) async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Batch>) {
        while let Some(first) = rx.recv().await {
            let mut group = vec![first];
            while group.len() < MAX_GROUP {
                match rx.try_recv() {
                    Ok(b) => group.push(b),
                    Err(_) => break,
                }
            }
            let Err((failure, rest)) = self.write_group(group).await else {
                continue;
            };
            // Fenced or in doubt: nothing more is committed by this
            // controller.
            let epoch = self.epoch;
            let (why, error) = match &failure {
                Failure::Fenced => (
                    format!("another controller has taken over the database (this one's epoch {epoch} is over)"),
                    StoreError::Fenced { epoch },
                ),
                Failure::Broken(e) | Failure::InDoubt(e) | Failure::Refused(e) => (
                    format!("the connection to the database was lost during a commit ({e})"),
                    StoreError::Lost(e.to_string()),
                ),
            };
            tracing::error!(epoch, "{why}: stepping down");
            self.step_down.now(why);
            for b in rest {
                let _ = b.done.send(Err(clone_error(&error)));
            }
            rx.close();
            while let Some(b) = rx.recv().await {
                let _ = b.done.send(Err(StoreError::Fenced { epoch }));
            }
            break;
        }
        self.conn.close().await;
    }

    /// Commits `group` and answers its batches; on a failure that ends
    /// this controller's writing, the batches not answered.
    async fn write_group(&mut self, group: Vec<Batch>) -> Result<(), (Failure, Vec<Batch>)> {
        match self.commit_anew(&group).await {
            Ok(()) => {
                for b in group {
                    let _ = b.done.send(Ok(()));
                }
                Ok(())
            }
            Err(Failure::Refused(e)) => {
                // One bad batch must not fail the others it was grouped
                // with: each on its own.
                tracing::warn!(error = %e, batches = group.len(), "group commit failed; retrying batches one by one");
                let mut rest = group.into_iter();
                while let Some(b) = rest.next() {
                    match self.commit_anew(std::slice::from_ref(&b)).await {
                        Ok(()) => {
                            let _ = b.done.send(Ok(()));
                        }
                        Err(Failure::Refused(e)) => {
                            tracing::error!(error = %e, "store commit failed");
                            let _ = b.done.send(Err(StoreError::Write(e)));
                        }
                        Err(failure) => {
                            return Err((failure, std::iter::once(b).chain(rest).collect()))
                        }
                    }
                }
                Ok(())
            }
            Err(failure) => Err((failure, group)),
        }
    }

    /// Commits `group`, opening the connection again (with backoff, for as
    /// long as this controller leads) while it is found broken before the
    /// commit.
    async fn commit_anew(&mut self, group: &[Batch]) -> Result<(), Failure> {
        let mut backoff = Duration::from_millis(100);
        loop {
            match commit(&mut self.conn, self.epoch, group).await {
                Err(Failure::Broken(e)) => {
                    tracing::warn!(error = %e, "the database connection is broken; opening it again");
                    loop {
                        if self.step_down.said() {
                            return Err(Failure::Broken(e));
                        }
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(Duration::from_secs(1));
                        match Store::connect(&self.database, self.durability).await {
                            Ok(opened) => {
                                self.conn = opened.into_conn();
                                break;
                            }
                            Err(e) => tracing::warn!(error = %e, "cannot reach the database yet"),
                        }
                    }
                }
                other => return other,
            }
        }
    }
}

fn clone_error(e: &StoreError) -> StoreError {
    match e {
        StoreError::Fenced { epoch } => StoreError::Fenced { epoch: *epoch },
        other => StoreError::Lost(other.to_string()),
    }
}

async fn commit(conn: &mut Conn, epoch: i64, group: &[Batch]) -> Result<(), Failure> {
    let mut tx = conn.begin().await.map_err(before_commit)?;
    {
        let mut c = tx.conn();
        for b in group {
            for w in &b.writes {
                writes::apply(&mut c, w).await.map_err(before_commit)?;
            }
        }
        if !lease::fence(c.reborrow(), epoch)
            .await
            .map_err(before_commit)?
        {
            return Err(Failure::Fenced);
        }
    }
    tx.commit().await.map_err(at_commit)
}

/// What an error of the commit itself means. PostgreSQL's 25P03 says the
/// server ended the session for idling in the transaction and rolled it
/// back, before the commit was taken: nothing was committed. Any other
/// lost connection leaves the outcome unknown.
fn at_commit(e: sqlx::Error) -> Failure {
    let rolled_back =
        matches!(&e, sqlx::Error::Database(d) if d.code().as_deref() == Some("25P03"));
    if rolled_back {
        Failure::Broken(e)
    } else if lost_connection(&e) {
        Failure::InDoubt(e)
    } else {
        Failure::Refused(e)
    }
}
