//! Reading the site file only when no one but root or the reader could
//! have written it: the daemons (root) and root's commands take decisions
//! from it (who administers the cluster, where the keys are, what jobs may
//! do), so a file, a link to it or a directory on the way that another
//! user could change is refused, naming the path and the fix.

use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Why a path is not trusted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Untrusted {
    #[error("{path} belongs to uid {owner}, neither root nor uid {me} that reads it; run `chown root {path}`")]
    Owner { path: PathBuf, owner: u32, me: u32 },
    #[error("{path} has mode {mode:o}: other users could change it; run `chmod go-w {path}`")]
    Writable { path: PathBuf, mode: u32 },
    #[error("cannot inspect {path}: {why}")]
    Inspect { path: PathBuf, why: String },
}

fn me() -> u32 {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() }
}

/// Checks one path's own metadata (`lstat`, or `fstat` for an open file):
/// root's or the reader's, and not writable by group or others unless it
/// is a sticky directory (where no one can rename what others put) or a
/// symbolic link (whose mode means nothing; its directory is checked).
fn check_meta(path: &Path, meta: &std::fs::Metadata) -> Result<(), Untrusted> {
    let owner = meta.uid();
    if owner != 0 && owner != me() {
        return Err(Untrusted::Owner {
            path: path.to_path_buf(),
            owner,
            me: me(),
        });
    }
    let mode = meta.mode() & 0o7777;
    let sticky_dir = meta.is_dir() && mode & 0o1000 != 0;
    if mode & 0o022 != 0 && !sticky_dir && !meta.file_type().is_symlink() {
        return Err(Untrusted::Writable {
            path: path.to_path_buf(),
            mode,
        });
    }
    Ok(())
}

/// Checks every directory from `path`'s parent up to `/`, each by its own
/// metadata (links not followed).
fn check_directories(path: &Path) -> Result<(), Untrusted> {
    let mut dir = path.parent();
    while let Some(d) = dir {
        let d = if d.as_os_str().is_empty() {
            Path::new(".")
        } else {
            d
        };
        let meta = std::fs::symlink_metadata(d).map_err(|e| Untrusted::Inspect {
            path: d.to_path_buf(),
            why: e.to_string(),
        })?;
        check_meta(d, &meta)?;
        dir = d.parent().filter(|p| !p.as_os_str().is_empty());
    }
    Ok(())
}

/// Checks `path` as given (each directory on the way, and a link itself:
/// no one else may change or swap it) and as it resolves (the real file
/// and its directories).
pub fn check(path: &Path) -> Result<(), Untrusted> {
    let given = std::path::absolute(path).map_err(|e| Untrusted::Inspect {
        path: path.to_path_buf(),
        why: e.to_string(),
    })?;
    check_directories(&given)?;
    let own = std::fs::symlink_metadata(&given).map_err(|e| Untrusted::Inspect {
        path: given.clone(),
        why: e.to_string(),
    })?;
    check_meta(&given, &own)?;
    let real = std::fs::canonicalize(&given).map_err(|e| Untrusted::Inspect {
        path: given.clone(),
        why: e.to_string(),
    })?;
    if real != given {
        check_directories(&real)?;
        let meta = std::fs::metadata(&real).map_err(|e| Untrusted::Inspect {
            path: real.clone(),
            why: e.to_string(),
        })?;
        check_meta(&real, &meta)?;
    }
    Ok(())
}

/// Reads a trusted file: the path is checked, then the file is opened
/// once and its open descriptor checked again before its text is read,
/// so what is read is what was checked.
pub fn read(path: &Path) -> Result<String, Untrusted> {
    check(path)?;
    let inspect = |e: std::io::Error| Untrusted::Inspect {
        path: path.to_path_buf(),
        why: e.to_string(),
    };
    let mut file = std::fs::File::open(path).map_err(inspect)?;
    let meta = file.metadata().map_err(inspect)?;
    check_meta(path, &meta)?;
    let mut text = String::new();
    file.read_to_string(&mut text).map_err(inspect)?;
    Ok(text)
}

/// Checks that files may be created safely in `dir`: it and every
/// directory above it are root's or the caller's, and no one else can
/// write them (a sticky one, such as `/tmp`, is safe: no one can remove or
/// rename a file someone else created there).
pub fn check_directory(dir: &Path) -> Result<(), Untrusted> {
    let dir = std::path::absolute(dir).map_err(|e| Untrusted::Inspect {
        path: dir.to_path_buf(),
        why: e.to_string(),
    })?;
    let meta = std::fs::symlink_metadata(&dir).map_err(|e| Untrusted::Inspect {
        path: dir.clone(),
        why: e.to_string(),
    })?;
    if meta.file_type().is_symlink() {
        // Resolved and checked as it is, its own directory checked too.
        check_directories(&dir)?;
        let real = std::fs::canonicalize(&dir).map_err(|e| Untrusted::Inspect {
            path: dir.clone(),
            why: e.to_string(),
        })?;
        return check_directory(&real);
    }
    check_meta(&dir, &meta)?;
    check_directories(&dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn chmod(p: &Path, mode: u32) {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn a_file_others_could_change_or_swap_is_refused() {
        let root = tempfile::tempdir().unwrap();
        // Explicit modes: whatever the umask.
        chmod(root.path(), 0o700);
        let dir = root.path().join("etc");
        std::fs::create_dir(&dir).unwrap();
        chmod(&dir, 0o755);
        let file = dir.join("gsched.toml");
        std::fs::write(&file, b"[cluster]\n").unwrap();
        chmod(&file, 0o644);
        assert_eq!(read(&file).unwrap(), "[cluster]\n");
        // Through a link in a trusted place: the real file is checked.
        let link = dir.join("link.toml");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        check(&link).unwrap();
        chmod(&file, 0o666);
        let e = check(&link).unwrap_err().to_string();
        assert!(
            e.contains("gsched.toml has mode 666") && e.contains("chmod go-w"),
            "{e}"
        );
        chmod(&file, 0o644);
        // A link in a directory others could write: refused, whatever it
        // points to.
        let open = root.path().join("open");
        std::fs::create_dir(&open).unwrap();
        chmod(&open, 0o777);
        let swapped = open.join("gsched.toml");
        std::os::unix::fs::symlink(&file, &swapped).unwrap();
        let e = check(&swapped).unwrap_err().to_string();
        assert!(e.contains("open has mode 777"), "{e}");
        // A directory above the file others could write (not sticky).
        chmod(&dir, 0o777);
        assert!(check(&file)
            .unwrap_err()
            .to_string()
            .contains("etc has mode 777"));
        // Sticky, as /tmp: no one can swap the file in it.
        chmod(&dir, 0o1777);
        check(&file).unwrap();
        check_directory(&dir).unwrap();
        chmod(&dir, 0o777);
        assert!(check_directory(&dir).is_err());
    }
}
