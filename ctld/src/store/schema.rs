//! The database across releases: a database that a newer gsched wrote is
//! refused, and one that an older gsched wrote is backed up before it is
//! migrated forward (migrations only go forward). Backups and `gsched db
//! backup` use SQLite's `VACUUM INTO`: a consistent copy, taken while the
//! controller runs.

use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use sqlx::{Connection, SqliteConnection};

use super::sql::{Conn, ConnRef, Engine};
use super::{StoreError, MIGRATOR, PG_MIGRATOR};

/// Why a copy of the database was not taken.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error("no database at {0}")]
    NoDatabase(String),
    #[error("cannot create {path}: {source}")]
    Create {
        path: String,
        source: std::io::Error,
    },
    #[error("the path {0} is not UTF-8")]
    NotUtf8(String),
    #[error("cannot open {path}: {source}")]
    Open { path: String, source: sqlx::Error },
    #[error("cannot copy {path}: {source}")]
    Copy { path: String, source: sqlx::Error },
    #[error("{0}")]
    Unsafe(String),
}

/// What opening a database must do about its schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SchemaPlan {
    /// A new database: every migration runs, nothing to back up.
    Create,
    /// Every migration this release knows is applied.
    Current,
    /// An older release's database: back it up, then apply these.
    Upgrade { from: i64, to: i64, pending: usize },
    /// Written by a newer release: migrations this one does not know.
    Newer { database: i64, known: i64 },
}

/// Decides from the migrations applied to a database and those this
/// release knows.
pub fn plan(applied: &[i64], known: &[i64]) -> SchemaPlan {
    let known_max = known.iter().copied().max().unwrap_or(0);
    if let Some(unknown) = applied.iter().copied().filter(|v| !known.contains(v)).max() {
        return SchemaPlan::Newer {
            database: unknown.max(applied.iter().copied().max().unwrap_or(0)),
            known: known_max,
        };
    }
    if applied.is_empty() {
        return SchemaPlan::Create;
    }
    let pending = known.iter().filter(|v| !applied.contains(v)).count();
    if pending == 0 {
        return SchemaPlan::Current;
    }
    SchemaPlan::Upgrade {
        from: applied.iter().copied().max().unwrap_or(0),
        to: known_max,
        pending,
    }
}

/// The migrations applied to the database (none for a new one).
async fn applied(mut c: ConnRef<'_>) -> Result<Vec<i64>, sqlx::Error> {
    let table = match c.engine() {
        Engine::Sqlite => {
            "SELECT 1 AS present FROM sqlite_master WHERE type = 'table' AND name = '_sqlx_migrations'"
        }
        Engine::Postgres => {
            "SELECT 1 AS present FROM information_schema.tables
              WHERE table_schema = current_schema() AND table_name = '_sqlx_migrations'"
        }
    };
    if c.query(table).fetch_optional(c.reborrow()).await?.is_none() {
        return Ok(Vec::new());
    }
    let rows = c
        .query("SELECT version FROM _sqlx_migrations WHERE success ORDER BY version")
        .fetch_all(c.reborrow())
        .await?;
    rows.iter().map(|r| r.int("version")).collect()
}

/// The migration that made the leadership table.
const LEASES: i64 = 20;

/// Before a controller campaigns: a database a newer release wrote is
/// refused; one without the leadership table (new, or from before leases,
/// when no controller of this protocol can be leading it) is brought to
/// this release's schema now. One that has the table is migrated only by
/// the controller that wins it ([`upgrade`] after the lease is taken), so
/// a standby never changes the schema under a running leader.
pub(super) async fn prepare_for_leases(
    conn: &mut Conn,
    shown: &str,
    backups: &Path,
    now: i64,
) -> Result<(), StoreError> {
    let applied = applied(conn.as_ref())
        .await
        .map_err(|source| StoreError::Open {
            path: shown.to_string(),
            source,
        })?;
    let known: Vec<i64> = migrator(conn.engine()).iter().map(|m| m.version).collect();
    if let SchemaPlan::Newer { database, known } = plan(&applied, &known) {
        return Err(StoreError::Newer {
            path: shown.to_string(),
            database,
            known,
        });
    }
    if !applied.contains(&LEASES) {
        upgrade(conn, shown, backups, now).await?;
    }
    Ok(())
}

/// The migrations of the database's engine.
fn migrator(engine: Engine) -> &'static sqlx::migrate::Migrator {
    match engine {
        Engine::Sqlite => &MIGRATOR,
        Engine::Postgres => &PG_MIGRATOR,
    }
}

/// Brings the database to this release's schema: refuses a newer one;
/// backs an older SQLite one up into `backups` first (PostgreSQL's are the
/// site's to back up with `pg_dump`: docs/install.md). Returns the backup
/// taken, if any.
pub(super) async fn upgrade(
    conn: &mut Conn,
    shown: &str,
    backups: &Path,
    now: i64,
) -> Result<Option<PathBuf>, StoreError> {
    let read = |source| StoreError::Open {
        path: shown.to_string(),
        source,
    };
    let engine = conn.engine();
    let known: Vec<i64> = migrator(engine).iter().map(|m| m.version).collect();
    let backup = match plan(&applied(conn.as_ref()).await.map_err(read)?, &known) {
        SchemaPlan::Newer { database, known } => {
            return Err(StoreError::Newer {
                path: shown.to_string(),
                database,
                known,
            })
        }
        SchemaPlan::Create | SchemaPlan::Current => None,
        SchemaPlan::Upgrade { from, to, pending } => match conn {
            Conn::Sqlite(sqlite) => {
                let to_file = backups.join(format!("ctld-schema{from}-{now}.db"));
                backup_into(sqlite, backups, &to_file)
                    .await
                    .map_err(|why| StoreError::Backup {
                        path: shown.to_string(),
                        to: to_file.display().to_string(),
                        why,
                    })?;
                tracing::info!(db = %shown, backup = %to_file.display(), from, to, pending,
                    "database written by an earlier release backed up before its migration");
                Some(to_file)
            }
            Conn::Postgres(_) => {
                tracing::warn!(db = %shown, from, to, pending,
                    "migrating a database written by an earlier release (each migration in its own transaction); its pg_dump taken before the upgrade is the way back");
                None
            }
        },
    };
    let migrated = match conn {
        Conn::Sqlite(c) => migrator(engine).run(c).await,
        Conn::Postgres(c) => migrator(engine).run(c).await,
    };
    migrated.map_err(|e| StoreError::Migrate {
        path: shown.to_string(),
        source: e,
    })?;
    let mut c = conn.as_ref();
    c.query(
        "INSERT INTO releases (release, protocol, first_opened) VALUES ($1, $2, $3)
         ON CONFLICT (release) DO NOTHING",
    )
    .bind(gsched_core::version::RELEASE)
    .bind(i64::from(gsched_core::version::PROTOCOL))
    .bind(now)
    .execute(c.reborrow())
    .await
    .map_err(StoreError::Write)?;
    Ok(backup)
}

/// Copies the database `conn` reads into `to` (0600, in `dir`, created
/// 0700 if missing), consistently.
async fn backup_into(
    conn: &mut SqliteConnection,
    dir: &Path,
    to: &Path,
) -> Result<(), BackupError> {
    if std::fs::symlink_metadata(dir).is_err() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|source| BackupError::Create {
                path: dir.display().to_string(),
                source,
            })?;
    }
    gsched_daemon::state::check_owned(dir, gsched_daemon::state::Kind::Private)
        .map_err(|e| BackupError::Unsafe(e.to_string()))?;
    // Copied under a name no reader takes for a backup, then renamed: a
    // copy cut short (a start timeout, a full disk) is never left looking
    // whole.
    let partial = to.with_extension("db.partial");
    let _ = std::fs::remove_file(&partial);
    vacuum_into(conn, &partial, "the database").await?;
    std::fs::rename(&partial, to).map_err(|source| BackupError::Create {
        path: to.display().to_string(),
        source,
    })
}

/// `VACUUM INTO` a new private file `to`; removed again if the copy fails.
async fn vacuum_into(
    conn: &mut SqliteConnection,
    to: &Path,
    from: &str,
) -> Result<(), BackupError> {
    create_empty_private(to)?;
    let target = to
        .to_str()
        .ok_or_else(|| BackupError::NotUtf8(to.display().to_string()))?;
    if let Err(source) = sqlx::query("VACUUM INTO ?")
        .bind(target)
        .execute(&mut *conn)
        .await
    {
        let _ = std::fs::remove_file(to);
        return Err(BackupError::Copy {
            path: from.to_string(),
            source,
        });
    }
    Ok(())
}

/// Creates `path` empty, 0600, refusing one that exists (or a link).
fn create_empty_private(path: &Path) -> Result<(), BackupError> {
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(path)
        .map(drop)
        .map_err(|source| BackupError::Create {
            path: path.display().to_string(),
            source,
        })
}

/// `gsched db backup`: a consistent copy of the database at `db` (read
/// only; the controller may be running) into `to`, a new file (0600) in
/// a directory only root or the caller can write.
pub async fn backup(db: &Path, to: &Path) -> Result<(), BackupError> {
    let shown = db.display().to_string();
    if !db.is_file() {
        return Err(BackupError::NoDatabase(shown));
    }
    // Root writes the site's jobs, scripts and accounting here: only into
    // a directory no one else could swap the file in (`trust`), by an
    // absolute path (SQLite would read `file:...` as a URI).
    let to = std::path::absolute(to).map_err(|source| BackupError::Create {
        path: to.display().to_string(),
        source,
    })?;
    let dir = to.parent().unwrap_or(Path::new("/"));
    gsched_site::trust::check_directory(dir).map_err(|e| {
        BackupError::Unsafe(format!("not writing a backup into {}: {e}", dir.display()))
    })?;
    let to = to.as_path();
    let opts = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(db)
        .read_only(true)
        .busy_timeout(std::time::Duration::from_secs(10));
    let mut conn = SqliteConnection::connect_with(&opts)
        .await
        .map_err(|source| BackupError::Open {
            path: shown.clone(),
            source,
        })?;
    vacuum_into(&mut conn, to, &shown).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_follow_the_applied_migrations() {
        let known = [1, 2, 3];
        assert_eq!(plan(&[], &known), SchemaPlan::Create);
        assert_eq!(plan(&[1, 2, 3], &known), SchemaPlan::Current);
        assert_eq!(
            plan(&[1, 2], &known),
            SchemaPlan::Upgrade {
                from: 2,
                to: 3,
                pending: 1
            }
        );
        assert_eq!(
            plan(&[1, 2, 3, 4], &known),
            SchemaPlan::Newer {
                database: 4,
                known: 3
            }
        );
    }

    /// An empty database file in a new directory, and a connection to it.
    async fn new_database() -> (tempfile::TempDir, std::path::PathBuf, Conn) {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("ctld.db");
        let opts = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(&db)
            .create_if_missing(true);
        let conn = SqliteConnection::connect_with(&opts).await.unwrap();
        (dir, db, Conn::Sqlite(conn))
    }

    #[tokio::test]
    async fn an_older_database_is_backed_up_then_migrated_and_a_newer_one_refused() {
        let (dir, db, mut conn) = new_database().await;
        let shown = db.display().to_string();
        let Conn::Sqlite(sqlite) = &mut conn else {
            unreachable!()
        };
        // An older release: every migration but the last.
        let all: Vec<_> = MIGRATOR.iter().collect();
        let older = sqlx::migrate::Migrator {
            migrations: std::borrow::Cow::Owned(
                all[..all.len() - 1].iter().map(|m| (*m).clone()).collect(),
            ),
            ..sqlx::migrate::Migrator::DEFAULT
        };
        older.run(sqlite).await.unwrap();
        let backups = dir.path().join("backups");
        let taken = upgrade(&mut conn, &shown, &backups, 1000)
            .await
            .unwrap()
            .unwrap();
        let before = all[all.len() - 2].version;
        assert_eq!(taken, backups.join(format!("ctld-schema{before}-1000.db")));
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&taken).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        // The backup is the older schema; the database the newer.
        let copy = SqliteConnection::connect_with(
            &sqlx::sqlite::SqliteConnectOptions::new().filename(&taken),
        )
        .await
        .unwrap();
        assert_eq!(
            applied(Conn::Sqlite(copy).as_ref()).await.unwrap().len(),
            all.len() - 1
        );
        assert_eq!(applied(conn.as_ref()).await.unwrap().len(), all.len());
        // Opening again takes no second backup.
        assert_eq!(
            upgrade(&mut conn, &shown, &backups, 2000).await.unwrap(),
            None
        );
        let mut c = conn.as_ref();
        let releases: Vec<(String, i64)> = c
            .query("SELECT release, first_opened FROM releases")
            .fetch_all(c.reborrow())
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get("release").unwrap(), r.int("first_opened").unwrap()))
            .collect();
        assert_eq!(
            releases,
            [(gsched_core::version::RELEASE.to_string(), 1000)]
        );
        // A newer release's migration: refused, naming both schemas.
        c.query("INSERT INTO _sqlx_migrations (version, description, installed_on, success, checksum, execution_time) VALUES (99999, 'from the future', CURRENT_TIMESTAMP, 1, x'00', 0)")
            .execute(c.reborrow())
            .await
            .unwrap();
        let e = upgrade(&mut conn, &shown, &backups, 3000)
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("newer gsched"), "{e}");
        assert!(e.contains("schema 99999"), "{e}");
    }

    #[tokio::test]
    async fn a_backup_is_a_new_private_file() {
        let (dir, db, mut conn) = new_database().await;
        let Conn::Sqlite(sqlite) = &mut conn else {
            unreachable!()
        };
        MIGRATOR.run(sqlite).await.unwrap();
        let to = dir.path().join("copy.db");
        backup(&db, &to).await.unwrap();
        assert!(std::fs::metadata(&to).unwrap().len() > 0);
        let e = backup(&db, &to).await.unwrap_err().to_string();
        assert!(e.contains("File exists"), "{e}");
        let e = backup(&dir.path().join("none.db"), &dir.path().join("x.db"))
            .await
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("no database at"), "{e}");
        // A directory others could write: no copy there.
        use std::os::unix::fs::PermissionsExt;
        let open = dir.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = backup(&db, &open.join("x.db"))
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("not writing a backup into") && e.contains("mode 777"),
            "{e}"
        );
        assert!(!open.join("x.db").exists());
    }
}
