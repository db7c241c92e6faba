//! Opening the store: connect, win the lease (see
//! `gsched_core::leadership`), then bring the schema up to date, load, and
//! start the writer under the term won. A controller that loses its term
//! (another took over, or its database went away under it) is told through
//! [`StepDown`] and stops.

use std::path::{Path, PathBuf};
use std::str::FromStr;

use gsched_core::leadership::Lease;
use sqlx::postgres::{PgConnection, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};
use sqlx::{Connection, SqliteConnection};
use tokio::sync::{mpsc, watch};

use super::lease::{self, Term};
use super::sql::Conn;
use super::{load, schema, writer, Database, Durability, Loaded, Reader, Store, StoreError};

/// Connections a PostgreSQL store reads through beside its writer.
const PG_READERS: u32 = 4;

/// Why the controller must stop leading, once something says so.
#[derive(Clone)]
pub struct StepDown(watch::Sender<Option<String>>);

impl Default for StepDown {
    fn default() -> Self {
        StepDown(watch::channel(None).0)
    }
}

impl StepDown {
    /// Says the controller must stop leading, and why (the first reason
    /// said is kept).
    pub fn now(&self, why: String) {
        self.0.send_if_modified(|held| {
            if held.is_some() {
                return false;
            }
            *held = Some(why);
            true
        });
    }

    /// Whether it has been said.
    pub fn said(&self) -> bool {
        self.0.borrow().is_some()
    }

    /// Waits until it is said; the reason.
    pub async fn wait(&self) -> String {
        let mut rx = self.0.subscribe();
        let why = match rx.wait_for(Option::is_some).await {
            Ok(why) => why.clone().unwrap_or_default(),
            Err(_) => "the store has gone".into(),
        };
        why
    }
}

/// A database connected, before this controller leads it.
pub struct Opened {
    database: Database,
    durability: Durability,
    conn: Conn,
    reader: Reader,
    backups: PathBuf,
}

impl Store {
    /// Connects to `database` (creating a SQLite one if missing).
    /// `durability` is SQLite's; PostgreSQL's server settings decide its.
    pub async fn connect(
        database: &Database,
        durability: Durability,
    ) -> Result<Opened, StoreError> {
        let (conn, reader, backups) = match database {
            Database::Sqlite(path) => {
                let opts = sqlite_options(path, durability).map_err(|e| opening(database, e))?;
                let conn = SqliteConnection::connect_with(&opts)
                    .await
                    .map_err(|e| opening(database, e))?;
                let reader = Reader::Sqlite(Box::new(opts.read_only(true)));
                (Conn::Sqlite(conn), reader, path.with_file_name("backups"))
            }
            Database::Postgres(options, _) => {
                let unsafe_socket = |e: super::DatabaseError| sqlx::Error::Configuration(e.into());
                database
                    .check_socket()
                    .map_err(|e| opening(database, unsafe_socket(e)))?;
                let conn = PgConnection::connect_with(options)
                    .await
                    .map_err(|e| opening(database, e))?;
                // The readers' connections are opened later, as needed:
                // each checks the socket directory again before it is used.
                let checked = database.clone();
                let pool = PgPoolOptions::new()
                    .max_connections(PG_READERS)
                    .after_connect(move |_, _| {
                        let verdict = checked.check_socket().map_err(unsafe_socket);
                        Box::pin(async move { verdict })
                    })
                    .connect_lazy_with((**options).clone());
                (Conn::Postgres(conn), Reader::Postgres(pool), PathBuf::new())
            }
        };
        Ok(Opened {
            database: database.clone(),
            durability,
            conn,
            reader,
            backups,
        })
    }

    /// Opens `database` for a controller that is alone on it (tests, and
    /// tools that know no controller runs): takes the lease whatever its
    /// state, then as [`Opened::open`].
    pub async fn open_alone(
        database: &Database,
        durability: Durability,
        keep_finished_since: Option<i64>,
    ) -> Result<(Store, Loaded), StoreError> {
        let mut opened = Store::connect(database, durability).await?;
        let (seen, _) = opened.lease().await?;
        let term = opened
            .take(seen.as_ref(), "alone 0 0 0", "", 60_000)
            .await?
            .ok_or_else(|| StoreError::Leadership {
                path: database.shown(),
                why: "another controller took the lease at the same moment".into(),
            })?;
        opened
            .open(term, keep_finished_since, StepDown::default())
            .await
    }
}

impl Opened {
    pub fn database(&self) -> &Database {
        &self.database
    }

    pub fn durability(&self) -> Durability {
        self.durability
    }

    pub(super) fn into_conn(self) -> Conn {
        self.conn
    }

    /// The lease as stored, and the database's clock (unix ms). A database
    /// from before leases (or a new one) is first brought to this release's
    /// schema; one a newer release wrote is refused.
    pub async fn lease(&mut self) -> Result<(Option<Lease>, i64), StoreError> {
        let shown = self.database.shown();
        schema::prepare_for_leases(
            &mut self.conn,
            &shown,
            &self.backups,
            gsched_daemon::unix_now(),
        )
        .await?;
        lease::read(self.conn.as_ref())
            .await
            .map_err(|e| opening(&self.database, e))
    }

    /// Takes the lease if it is still as `seen` (see [`lease::take`]).
    pub async fn take(
        &mut self,
        seen: Option<&Lease>,
        holder: &str,
        address: &str,
        lease_ms: i64,
    ) -> Result<Option<Term>, StoreError> {
        lease::take(self.conn.as_ref(), seen, holder, address, lease_ms)
            .await
            .map_err(StoreError::Write)
    }

    /// A second connection to the same database, for renewing the lease
    /// beside the writer.
    pub fn renewer(&self) -> Renewer {
        Renewer {
            database: self.database.clone(),
            durability: self.durability,
            conn: None,
        }
    }

    /// Under `term`: applies migrations, loads what the controller holds
    /// (finished jobs only if they ended at or after `keep_finished_since`,
    /// all when `None`), and starts the writer, which checks the term in
    /// every commit and says `step_down` when it is lost.
    pub async fn open(
        mut self,
        term: Term,
        keep_finished_since: Option<i64>,
        step_down: StepDown,
    ) -> Result<(Store, Loaded), StoreError> {
        let shown = self.database.shown();
        schema::upgrade(
            &mut self.conn,
            &shown,
            &self.backups,
            gsched_daemon::unix_now(),
        )
        .await?;
        let loaded = load::load(self.conn.as_ref(), keep_finished_since).await?;
        let (tx, rx) = mpsc::unbounded_channel();
        let writer = writer::Writer {
            conn: self.conn,
            database: self.database,
            durability: self.durability,
            epoch: term.epoch,
            step_down,
        };
        tokio::spawn(writer.run(rx));
        Ok((
            Store {
                tx,
                reader: self.reader,
            },
            loaded,
        ))
    }
}

/// Renews and gives up the lease through a connection of its own,
/// reconnecting after an error.
pub struct Renewer {
    database: Database,
    durability: Durability,
    conn: Option<Conn>,
}

impl Renewer {
    async fn conn(&mut self) -> Result<&mut Conn, StoreError> {
        if self.conn.is_none() {
            let opened = Store::connect(&self.database, self.durability).await?;
            self.conn = Some(opened.conn);
        }
        Ok(self.conn.as_mut().expect("connected above"))
    }

    /// Renews `term` for `lease_ms`: false when another has taken it.
    pub async fn renew(&mut self, term: &Term, lease_ms: i64) -> Result<bool, StoreError> {
        let result = lease::renew(self.conn().await?.as_ref(), term, lease_ms).await;
        if result.is_err() {
            self.conn = None;
        }
        result.map_err(StoreError::Write)
    }

    /// Gives `term` up after `grace`, with the epoch raised to `epoch` if
    /// that is higher (see `lease::resign`): false when it was no longer
    /// this controller's.
    pub async fn resign(
        &mut self,
        term: &Term,
        epoch: i64,
        grace: std::time::Duration,
    ) -> Result<bool, StoreError> {
        let grace_ms = i64::try_from(grace.as_millis()).unwrap_or(i64::MAX);
        let result = lease::resign(self.conn().await?.as_ref(), term, epoch, grace_ms).await;
        if result.is_err() {
            self.conn = None;
        }
        result.map_err(StoreError::Write)
    }
}

fn opening(database: &Database, source: sqlx::Error) -> StoreError {
    StoreError::Open {
        path: database.shown(),
        source,
    }
}

/// The SQLite connection the store opens at `path`.
fn sqlite_options(
    path: &Path,
    durability: Durability,
) -> Result<SqliteConnectOptions, sqlx::Error> {
    Ok(
        SqliteConnectOptions::from_str(&format!("sqlite://{}", path.display()))?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(match durability {
                Durability::Normal => SqliteSynchronous::Normal,
                Durability::Full => SqliteSynchronous::Full,
            })
            .foreign_keys(true)
            .busy_timeout(std::time::Duration::from_secs(10)),
    )
}
