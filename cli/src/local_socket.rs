//! Finding the controller's local socket without asking the network.
//!
//! A command given a loopback `GSCHED_URL` (`http://127.0.0.1:6817`) talks
//! to the controller through its unix socket, where the kernel says who
//! the caller is and no token is needed. The socket is found in places
//! only the controller's user can write: the rendezvous it publishes for
//! its port (`/run/gsched/ctld.PORT.sock` for root, the user's runtime
//! directory otherwise), or `GSCHED_SOCKET`. Every path is checked before
//! use: a socket owned by root or the caller, in directories that no one
//! else could have swapped. A loopback port proves nothing (any user can
//! bind it while the controller restarts), so it is never asked where the
//! socket is.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use gsched_core::env::{rendezvous_socket, SOCKET_ENV, SYSTEM_RUN_DIR};

/// Why a socket path is not trusted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Untrusted {
    #[error("{0} does not exist")]
    Missing(PathBuf),
    #[error("{0} is not a socket")]
    NotASocket(PathBuf),
    #[error("{path} belongs to uid {owner}, neither root nor you")]
    Owner { path: PathBuf, owner: u32 },
    #[error("{0} can be changed by other users (group or others may write it)")]
    Writable(PathBuf),
    #[error("{0} is a symbolic link")]
    Link(PathBuf),
}

impl Untrusted {
    /// Nothing listens there yet (the controller is down or restarting).
    pub fn is_missing(&self) -> bool {
        matches!(self, Untrusted::Missing(_))
    }
}

fn trusted_owner(uid: u32, me: u32) -> bool {
    uid == 0 || uid == me
}

/// Checks that `path` is a socket of root's or the caller's, reached
/// through directories that only root or the caller could change (a
/// sticky, world-writable directory such as `/tmp` is safe to pass
/// through: no one else can rename what is in it).
pub fn check(path: &Path) -> Result<(), Untrusted> {
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(_) => return Err(Untrusted::Missing(path.to_path_buf())),
    };
    if meta.file_type().is_symlink() {
        return Err(Untrusted::Link(path.to_path_buf()));
    }
    if !meta.file_type().is_socket() {
        return Err(Untrusted::NotASocket(path.to_path_buf()));
    }
    if !trusted_owner(meta.uid(), me) {
        return Err(Untrusted::Owner {
            path: path.to_path_buf(),
            owner: meta.uid(),
        });
    }
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .map(|d| d.join(path))
            .unwrap_or_else(|_| path.to_path_buf())
    };
    let mut dir = absolute.parent();
    while let Some(d) = dir {
        let m = std::fs::symlink_metadata(d).map_err(|_| Untrusted::Missing(d.to_path_buf()))?;
        if m.file_type().is_symlink() {
            return Err(Untrusted::Link(d.to_path_buf()));
        }
        if !trusted_owner(m.uid(), me) {
            return Err(Untrusted::Owner {
                path: d.to_path_buf(),
                owner: m.uid(),
            });
        }
        let sticky = m.mode() & 0o1000 != 0;
        if m.mode() & 0o022 != 0 && !sticky {
            return Err(Untrusted::Writable(d.to_path_buf()));
        }
        dir = d.parent();
    }
    Ok(())
}

/// The places a controller on this host listening on `port` may have
/// published its socket, in the order they are tried.
pub fn candidates(port: u16) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(s) = std::env::var_os(SOCKET_ENV).filter(|s| !s.is_empty()) {
        out.push(PathBuf::from(s));
    }
    out.push(rendezvous_socket(Path::new(SYSTEM_RUN_DIR), port));
    if let Some(run) = user_run_dir() {
        out.push(rendezvous_socket(&run, port));
    }
    out
}

/// A controller not running as root publishes its socket in its user's
/// runtime directory (`$XDG_RUNTIME_DIR/gsched`).
pub fn user_run_dir() -> Option<PathBuf> {
    std::env::var_os("XDG_RUNTIME_DIR")
        .filter(|d| !d.is_empty())
        .map(|d| PathBuf::from(d).join("gsched"))
}

/// The first trusted socket for a loopback controller on `port`, or why
/// none is usable: every place looked at, with what was wrong there.
pub fn find(port: u16) -> Result<PathBuf, Vec<Untrusted>> {
    let mut why = Vec::new();
    for c in candidates(port) {
        match check(&c) {
            Ok(()) => return Ok(c),
            Err(e) => why.push(e),
        }
    }
    Err(why)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn only_sockets_in_directories_others_cannot_change_are_trusted() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("ctld.sock");
        let _l = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        // tempdir() makes a 0700 directory of ours under a sticky /tmp.
        assert_eq!(check(&sock), Ok(()));
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        assert_eq!(
            check(&sock),
            Err(Untrusted::Writable(dir.path().to_path_buf()))
        );
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
        assert_eq!(check(&sock), Ok(()), "a sticky directory is safe");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let link = dir.path().join("link.sock");
        std::os::unix::fs::symlink(&sock, &link).unwrap();
        assert_eq!(check(&link), Err(Untrusted::Link(link.clone())));
        let file = dir.path().join("plain");
        std::fs::write(&file, "").unwrap();
        assert_eq!(check(&file), Err(Untrusted::NotASocket(file.clone())));
        let gone = dir.path().join("gone.sock");
        assert!(check(&gone).unwrap_err().is_missing());
    }
}
