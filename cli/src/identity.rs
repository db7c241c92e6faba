//! Who is submitting, from where.

use nix::unistd::{getgid, getuid, User};

/// The calling user's name, uid and gid.
pub fn current_user() -> (String, u32, u32) {
    let uid = getuid();
    let name = User::from_uid(uid)
        .ok()
        .flatten()
        .map(|u| u.name)
        .or_else(|| std::env::var("USER").ok())
        .unwrap_or_else(|| uid.to_string());
    (name, uid.as_raw(), getgid().as_raw())
}

/// The name of group `gid`, or the number where it has none.
pub fn group_name(gid: u32) -> String {
    nix::unistd::Group::from_gid(nix::unistd::Gid::from_raw(gid))
        .ok()
        .flatten()
        .map(|g| g.name)
        .unwrap_or_else(|| gid.to_string())
}

pub fn hostname() -> String {
    nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "localhost".into())
}
