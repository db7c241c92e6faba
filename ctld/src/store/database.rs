//! Where the store lives: SQLite in the state directory (the default), or
//! a PostgreSQL server named by a URL (`--database`, `[controller]
//! database`). The store sends jobs' scripts and environments to the
//! database, so a server is used only once it can prove who it is: over
//! TCP the URL must ask for a verified TLS server (`sslmode=verify-full`
//! only: `verify-ca` checks no server name); through PostgreSQL's Unix
//! socket, the socket's
//! directory must be one no other user could put a socket in.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use sqlx::postgres::{PgConnectOptions, PgSslMode};

/// The URL parameters a database URL may carry (the others libpq knows are
/// refused rather than ignored, as sqlx would).
const PARAMETERS: &[&str] = &[
    "sslmode",
    "sslrootcert",
    "sslcert",
    "sslkey",
    "host",
    "port",
    "dbname",
    "user",
    "application_name",
];

/// A database URL that cannot be used, and why.
#[derive(Debug, thiserror::Error)]
pub enum DatabaseError {
    #[error("the database URL {0} is not a postgres:// or postgresql:// URL (leave --database unset for SQLite in the state directory)")]
    Scheme(String),
    #[error("the database URL {0} does not read: {1}")]
    Parse(String, String),
    #[error("the database URL {0} carries a password, which every local user could read in the process list or the site file: put it in root's ~/.pgpass (mode 0600) or use a client certificate (sslcert=, sslkey=)")]
    Password(String),
    #[error("the database URL {url} has the parameter {parameter}, which gsched does not take (it takes {known})", known = PARAMETERS.join(", "))]
    Parameter { url: String, parameter: String },
    #[error("the database URL {0} names no host: give the server's name or its Unix socket directory (postgres:///gsched?user=gsched&host=/run/postgresql); a default could find a socket someone else put in /tmp")]
    NoHost(String),
    #[error("the database URL {url} reaches {host} over TCP with sslmode={mode}: the server would get job scripts and environments before proving who it is; add sslmode=verify-full (and sslrootcert=CA file) or connect through the server's Unix socket (host=/run/postgresql)")]
    Unverified {
        url: String,
        host: String,
        mode: String,
    },
    #[error("the database socket directory {dir} is unsafe: {why}")]
    Socket { dir: String, why: String },
}

/// Where the store is.
#[derive(Clone)]
pub enum Database {
    /// A SQLite file (the controller's own state directory).
    Sqlite(PathBuf),
    /// A PostgreSQL database, and its URL as shown in logs and errors.
    Postgres(Box<PgConnectOptions>, String),
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.shown())
    }
}

impl Database {
    /// The database a `--database` URL names, checked (see the module).
    pub fn postgres(url: &str) -> Result<Database, DatabaseError> {
        // Until the URL reads, it is not shown: it may hold a password.
        let parsed = reqwest::Url::parse(url)
            .map_err(|e| DatabaseError::Parse("given".into(), e.to_string()))?;
        let shown = url.to_string();
        if parsed.password().is_some() || parsed.query_pairs().any(|(k, _)| k == "password") {
            // Shown without it.
            let mut hidden = parsed.clone();
            let _ = hidden.set_password(None);
            return Err(DatabaseError::Password(hidden.to_string()));
        }
        if !matches!(parsed.scheme(), "postgres" | "postgresql") {
            return Err(DatabaseError::Scheme(shown));
        }
        if let Some((parameter, _)) = parsed
            .query_pairs()
            .find(|(k, _)| !PARAMETERS.contains(&k.as_ref()))
        {
            return Err(DatabaseError::Parameter {
                url: shown,
                parameter: parameter.into_owned(),
            });
        }
        let named_host = parsed.host_str().is_some_and(|h| !h.is_empty())
            || parsed.query_pairs().any(|(k, _)| k == "host");
        if !named_host {
            return Err(DatabaseError::NoHost(shown));
        }
        let options = PgConnectOptions::from_str(url)
            .map_err(|e| DatabaseError::Parse(shown.clone(), e.to_string()))?;
        match socket_of(&options) {
            Some(dir) => check_socket_directory(&dir)?,
            None => {
                let mode = options.get_ssl_mode();
                if !matches!(mode, PgSslMode::VerifyFull) {
                    return Err(DatabaseError::Unverified {
                        url: shown,
                        host: options.get_host().to_string(),
                        mode: format!("{mode:?}").to_lowercase(),
                    });
                }
            }
        }
        let options = options.application_name("gctld");
        Ok(Database::Postgres(Box::new(options), shown))
    }

    /// Checks again, before a connection is opened, that the socket
    /// directory of a database reached through one is still one no other
    /// user can put a socket in (a directory in /tmp may have been removed
    /// by a cleaner and made anew by someone else since the URL was read).
    pub fn check_socket(&self) -> Result<(), DatabaseError> {
        match self {
            Database::Postgres(options, _) => match socket_of(options) {
                Some(dir) => check_socket_directory(&dir),
                None => Ok(()),
            },
            Database::Sqlite(_) => Ok(()),
        }
    }

    /// The database with limits on this controller's sessions, for a
    /// controller that may share it: a session left inside a transaction
    /// (its controller cut off or paused in the middle of a commit, whose
    /// row lock on the lease would hold every other controller back) is
    /// ended by the server after half a lease, and no statement waits for
    /// a lock longer than that (a standby's takeover tries again). SQLite
    /// is left as it is.
    pub fn with_session_limits(&self, lease: std::time::Duration) -> Database {
        match self {
            Database::Sqlite(_) => self.clone(),
            Database::Postgres(options, shown) => {
                let half = (lease / 2).as_millis().max(1).to_string();
                let options = (**options).clone().options([
                    ("idle_in_transaction_session_timeout", half.as_str()),
                    ("lock_timeout", half.as_str()),
                ]);
                Database::Postgres(Box::new(options), shown.clone())
            }
        }
    }

    /// The database as shown in logs and errors (no password is ever in
    /// one: [`Database::postgres`] refuses them).
    pub fn shown(&self) -> String {
        match self {
            Database::Sqlite(path) => path.display().to_string(),
            Database::Postgres(_, url) => url.clone(),
        }
    }
}

/// The Unix socket directory `options` reach the server through, if any.
fn socket_of(options: &PgConnectOptions) -> Option<PathBuf> {
    options.get_socket().cloned().or_else(|| {
        options
            .get_host()
            .starts_with('/')
            .then(|| options.get_host().into())
    })
}

/// Whether others than the owner of a directory with `meta` can write it:
/// through its mode's bits for all, or its group's bits unless the group is
/// root's or one no other user is in (the owner's own group, as Debian's
/// `postgres` group for `/run/postgresql`, mode 2775).
fn others_can_write(meta: &std::fs::Metadata) -> bool {
    let mode = meta.mode();
    mode & 0o002 != 0 || (mode & 0o020 != 0 && !group_is_owners_alone(meta.gid(), meta.uid()))
}

/// Whether group `gid` is root's, or has no member but user `owner`: none
/// listed in it besides the owner, and no other account with it as its own
/// group (by the group and password databases; accounts only a directory
/// service knows are not seen, so a site that has them gives its server's
/// socket directory no group write).
fn group_is_owners_alone(gid: u32, owner: u32) -> bool {
    use nix::unistd::{Gid, Group, Uid, User};
    if gid == 0 {
        return true;
    }
    let Ok(Some(owner)) = User::from_uid(Uid::from_raw(owner)) else {
        return false;
    };
    let Ok(Some(group)) = Group::from_gid(Gid::from_raw(gid)) else {
        return false;
    };
    if group.mem.iter().any(|m| *m != owner.name) {
        return false;
    }
    let Ok(passwd) = std::fs::read_to_string("/etc/passwd") else {
        return false;
    };
    !passwd.lines().any(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        fields.len() > 3 && fields[0] != owner.name && fields[3] == gid.to_string()
    })
}

/// A Unix socket directory no other user can put a socket in: not
/// writable by others, and reached through directories no other user can
/// swap: each one owned by root or by the socket directory's owner (the
/// server's account, trusted as the database server), and either not
/// writable by others or sticky; and a directory in a sticky shared one
/// (such as /tmp, where any user may create one) owned by root.
fn check_socket_directory(dir: &Path) -> Result<(), DatabaseError> {
    let bad = |why: String| DatabaseError::Socket {
        dir: dir.display().to_string(),
        why,
    };
    if !dir.is_absolute() {
        return Err(bad("it is not an absolute path".into()));
    }
    let meta = std::fs::symlink_metadata(dir).map_err(|e| bad(e.to_string()))?;
    if !meta.is_dir() {
        return Err(bad("it is not a directory (a link is not followed)".into()));
    }
    if others_can_write(&meta) {
        return Err(bad(format!(
            "it has mode {:o} (group {}): other users could put a socket there; use the server's own directory (unix_socket_directories)",
            meta.mode() & 0o7777,
            meta.gid()
        )));
    }
    let server = meta.uid();
    let mut below = (dir, meta.uid());
    for up in dir.ancestors().skip(1) {
        let meta = std::fs::symlink_metadata(up).map_err(|e| bad(e.to_string()))?;
        let mode = meta.mode() & 0o7777;
        if !meta.is_dir() || (others_can_write(&meta) && mode & 0o1000 == 0) {
            return Err(bad(format!(
                "{} (mode {mode:o}, group {}) could be changed by other users",
                up.display(),
                meta.gid()
            )));
        }
        if meta.uid() != 0 && meta.uid() != server {
            return Err(bad(format!(
                "{} belongs to uid {}, neither root nor the socket directory's owner (uid {server}), who could swap what it holds",
                up.display(),
                meta.uid()
            )));
        }
        let (child, child_owner) = below;
        if mode & 0o002 != 0 && child_owner != 0 {
            return Err(bad(format!(
                "{} is in {} (mode {mode:o}), where any user may create a directory, and belongs to uid {child_owner}, not root: use the server's own directory (unix_socket_directories), or one root created",
                child.display(),
                up.display()
            )));
        }
        below = (up, meta.uid());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(url: &str) -> String {
        Database::postgres(url).unwrap_err().to_string()
    }

    #[test]
    fn urls_that_would_leak_or_mislead_are_refused() {
        assert!(refused("mysql://db/x").contains("not a postgres://"));
        let e = refused("mysql://u:hunter2@db/x");
        assert!(
            e.contains("carries a password") && !e.contains("hunter2"),
            "{e}"
        );
        let e = refused("postgres://u:hunter2@db:99999999/x");
        assert!(
            e.contains("given does not read") && !e.contains("hunter2"),
            "{e}"
        );
        let e = refused("postgres://gsched:hunter2@db.example/gsched?sslmode=verify-full");
        assert!(
            e.contains("carries a password") && !e.contains("hunter2"),
            "{e}"
        );
        let e = refused("postgres://gsched@db.example/gsched?sslmode=verify-full&password=x");
        assert!(e.contains("carries a password"), "{e}");
        let e =
            refused("postgres://gsched@db.example/gsched?sslmode=verify-full&connect_timeout=3");
        assert!(e.contains("parameter connect_timeout"), "{e}");
        assert!(refused("postgres:///gsched").contains("names no host"));
        for mode in [
            "",
            "?sslmode=prefer",
            "?sslmode=require",
            "?sslmode=disable",
        ] {
            let e = refused(&format!("postgres://gsched@127.0.0.1/gsched{mode}"));
            assert!(e.contains("before proving who it is"), "{mode}: {e}");
        }
        let e = refused("postgres:///gsched?user=gsched&host=/tmp");
        assert!(e.contains("other users could put a socket there"), "{e}");
        let e = refused("postgres:///gsched?user=gsched&host=relative");
        assert!(
            e.contains("before proving"),
            "a relative host is a host name: {e}"
        );
    }

    #[test]
    fn verified_tls_and_a_private_socket_directory_are_taken() {
        let db = Database::postgres(
            "postgresql://gsched@db.example:5433/gsched?sslmode=verify-full&sslrootcert=/etc/gsched/db-ca.pem",
        )
        .unwrap();
        let Database::Postgres(options, shown) = &db else {
            panic!("{db:?}")
        };
        assert_eq!(options.get_port(), 5433);
        assert_eq!(options.get_database(), Some("gsched"));
        assert!(shown.contains("db.example"));
        // A directory of root's in a root-owned one in /tmp is taken.
        use std::os::unix::fs::PermissionsExt;
        let outer = tempfile::tempdir().unwrap();
        let dir = outer.path().join("socket");
        std::fs::create_dir(&dir).unwrap();
        let url = format!("postgres:///gsched?user=gsched&host={}", dir.display());
        if !nix::unistd::geteuid().is_root() {
            // The rules below are about root's view; others own their dirs.
            return;
        }
        let Database::Postgres(options, _) = Database::postgres(&url).unwrap() else {
            panic!()
        };
        assert_eq!(options.get_socket(), Some(&dir));
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(refused(&url).contains("mode 777"));
        // Group-writable: only for a group no other user is in.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o775)).unwrap();
        Database::postgres(&url).unwrap();
        // nobody's own group: another user (nobody) is in it.
        let nobody = nix::unistd::User::from_name("nobody").unwrap().unwrap();
        nix::unistd::chown(&dir, None, Some(nobody.gid)).unwrap();
        let e = refused(&url);
        assert!(e.contains("other users could put a socket there"), "{e}");
        nix::unistd::chown(&dir, None, Some(nix::unistd::Gid::from_raw(0))).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        // Owned by the server's account (nobody here), under root: taken.
        nix::unistd::chown(&dir, Some(nobody.uid), None).unwrap();
        Database::postgres(&url).unwrap();
        // A parent of another user's: refused.
        nix::unistd::chown(outer.path(), Some(nix::unistd::Uid::from_raw(4242)), None).unwrap();
        assert!(
            refused(&url).contains("neither root nor"),
            "{}",
            refused(&url)
        );
        // A user's directory straight in the sticky /tmp: refused, though
        // the user is then the socket directory's owner.
        nix::unistd::chown(outer.path(), Some(nobody.uid), None).unwrap();
        let straight = format!(
            "postgres:///gsched?user=gsched&host={}",
            outer.path().display()
        );
        let e = refused(&straight);
        assert!(e.contains("where any user may create a directory"), "{e}");
        nix::unistd::chown(outer.path(), Some(nix::unistd::Uid::from_raw(0)), None).unwrap();
        // Checked again at every connection: a directory that went bad
        // after the URL was read is refused then.
        let taken = Database::postgres(&url).unwrap();
        taken.check_socket().unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(taken.check_socket().is_err());
    }
}
