//! The daemons' state directory and private files: created with explicit
//! modes whatever the umask, and refused at start when someone loosened
//! them (docs/security.md lists every file and its mode).

use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Why a state directory or file is not safe to use.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("cannot create state directory {path}: {source}")]
    Create {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot inspect {path}: {source}")]
    Inspect {
        path: String,
        source: std::io::Error,
    },
    #[error("{path} is a symbolic link; give the real directory as --state-dir")]
    Symlink { path: String },
    #[error("{path} belongs to uid {owner}, not to uid {me} that runs this daemon; run `chown {me} {path}` or use another --state-dir")]
    Owner { path: String, owner: u32, me: u32 },
    #[error("{path} has mode {mode:o}: other users could {what}; run `chmod {fix} {path}`")]
    Mode {
        path: String,
        mode: u32,
        what: &'static str,
        fix: &'static str,
    },
}

/// Mode of a new state directory: only the daemon's user lists or changes
/// it; others may pass through to the local sockets and their jobs' spool.
pub const STATE_DIR_MODE: u32 = 0o711;

/// What a checked path is for, which says which mode bits are too loose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A state directory: others may pass through, not list or write.
    StateDir,
    /// A private file (database, key): no one else may read or write.
    Private,
    /// Something only its owner may have written (a job's spool and launch
    /// spec): others may read, not write.
    OwnerWritten,
}

impl Kind {
    /// (mode bits that are too loose, what others could do, the chmod fix)
    fn rule(self) -> (u32, &'static str, &'static str) {
        match self {
            Kind::StateDir => (0o066, "list or change it", "711"),
            Kind::Private => (0o077, "read it", "600"),
            Kind::OwnerWritten => (0o022, "change it", "go-w"),
        }
    }
}

/// Checks that `path` is not a symbolic link, belongs to this process's
/// user, and has none of the mode bits `kind` calls loose: the rule for
/// the daemon's own state (the site file, which root may share with other
/// readers, has `gsched_site::trust`).
pub fn check_owned(path: &Path, kind: Kind) -> Result<(), StateError> {
    let shown = path.display().to_string();
    let meta = std::fs::symlink_metadata(path).map_err(|source| StateError::Inspect {
        path: shown.clone(),
        source,
    })?;
    if meta.file_type().is_symlink() {
        return Err(StateError::Symlink { path: shown });
    }
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != me {
        return Err(StateError::Owner {
            path: shown,
            owner: meta.uid(),
            me,
        });
    }
    let (loose, what, fix) = kind.rule();
    let mode = meta.mode() & 0o7777;
    if mode & loose != 0 {
        return Err(StateError::Mode {
            path: shown,
            mode,
            what,
            fix,
        });
    }
    Ok(())
}

/// Creates the state directory (0711) or checks an existing one: owned by
/// this process's user, not a link, listable and writable by no one else.
pub fn prepare_dir(dir: &Path) -> Result<(), StateError> {
    if std::fs::symlink_metadata(dir).is_err() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(STATE_DIR_MODE)
            .create(dir)
            .and_then(|()| {
                std::fs::set_permissions(dir, std::fs::Permissions::from_mode(STATE_DIR_MODE))
            })
            .map_err(|source| StateError::Create {
                path: dir.display().to_string(),
                source,
            })?;
    }
    check_owned(dir, Kind::StateDir)
}

/// Makes sure `file` exists as a private (0600) regular file of this
/// process's user, creating it empty if missing; an existing one that
/// others could read or write is refused. SQLite gives its WAL and shared
/// memory files the database file's mode, so a database created through
/// this stays private whatever the umask.
pub fn private_file(file: &Path) -> Result<(), StateError> {
    if std::fs::symlink_metadata(file).is_err() {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(file)
            .map_err(|source| StateError::Create {
                path: file.display().to_string(),
                source,
            })?;
    }
    check_owned(file, Kind::Private)
}

/// Checks an existing file is private (when it exists at all).
pub fn check_private_if_present(file: &Path) -> Result<(), StateError> {
    if std::fs::symlink_metadata(file).is_err() {
        return Ok(());
    }
    check_owned(file, Kind::Private)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().mode() & 0o7777
    }

    #[test]
    fn a_new_state_dir_and_file_are_private_whatever_the_umask() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("state");
        // SAFETY: umask cannot fail; tests in this binary create no other files meanwhile.
        let old = unsafe { libc::umask(0) };
        prepare_dir(&dir).unwrap();
        private_file(&dir.join("ctld.db")).unwrap();
        unsafe { libc::umask(old) };
        assert_eq!(mode(&dir), 0o711);
        assert_eq!(mode(&dir.join("ctld.db")), 0o600);
        // Both pass again unchanged.
        prepare_dir(&dir).unwrap();
        private_file(&dir.join("ctld.db")).unwrap();
    }

    #[test]
    fn loose_modes_are_refused_with_the_fix() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("state");
        prepare_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let e = prepare_dir(&dir).unwrap_err().to_string();
        assert!(e.contains("has mode 755") && e.contains("chmod 711"), "{e}");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        prepare_dir(&dir).unwrap();
        let db = dir.join("ctld.db");
        std::fs::write(&db, b"").unwrap();
        std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = private_file(&db).unwrap_err().to_string();
        assert!(e.contains("has mode 644") && e.contains("chmod 600"), "{e}");
        let link = dir.join("link");
        std::os::unix::fs::symlink(&db, &link).unwrap();
        assert!(matches!(
            check_private_if_present(&link),
            Err(StateError::Symlink { .. })
        ));
        // A spool-like path: readable by others is fine, writable is not.
        std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o644)).unwrap();
        check_owned(&db, Kind::OwnerWritten).unwrap();
        std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o664)).unwrap();
        let e = check_owned(&db, Kind::OwnerWritten)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("could change it") && e.contains("chmod go-w"),
            "{e}"
        );
    }
}
