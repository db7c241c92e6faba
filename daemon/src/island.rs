//! What makes a job's process an island (docs/security.md, "A job is an
//! island"): its own session with no controlling terminal, no descriptor
//! of the daemon's but 0-2, and the submitter's resource limits.
//!
//! The functions that run between `fork` and `exec` make system calls
//! only, on memory prepared before the fork: they allocate nothing and
//! take no lock, so they are safe in a `pre_exec` hook of a multi-threaded
//! daemon.

use gsched_core::rlimits::{self, ResourceLimits};

/// One limit ready for `setrlimit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PreparedLimit {
    pub resource: libc::__rlimit_resource_t,
    pub soft: libc::rlim_t,
    pub hard: libc::rlim_t,
}

fn to_rlim(v: Option<u64>) -> libc::rlim_t {
    v.unwrap_or(libc::RLIM_INFINITY)
}

fn of_rlim(v: libc::rlim_t) -> Option<u64> {
    (v != libc::RLIM_INFINITY).then_some(v)
}

/// The soft open-file limit a job gets when its submitter sent none:
/// Linux's usual default, whatever the daemon raised its own to.
pub const DEFAULT_NOFILE_SOFT: u64 = 1024;

/// The limits a job's processes get: each submitted one capped by this
/// process's hard limit; where none was submitted, this process's own
/// (the open-file soft limit back at Linux's default, since the daemons
/// raise theirs).
pub fn prepare_limits(given: &ResourceLimits) -> Vec<PreparedLimit> {
    let mut out = Vec::with_capacity(rlimits::LIMIT_NAMES.len());
    for (name, resource) in rlimits::LIMITS {
        let resource = resource as libc::__rlimit_resource_t;
        let mut now = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes into the struct it is given.
        if unsafe { libc::getrlimit(resource, &mut now) } != 0 {
            continue;
        }
        let fallback = if name == "NOFILE" {
            of_rlim(now.rlim_cur).map(|c| c.min(DEFAULT_NOFILE_SOFT))
        } else {
            of_rlim(now.rlim_cur)
        };
        let l = rlimits::effective(given.get(name), of_rlim(now.rlim_max), fallback);
        out.push(PreparedLimit {
            resource,
            soft: to_rlim(l.soft),
            hard: to_rlim(l.hard),
        });
    }
    out
}

/// In the child, before exec: applies the prepared limits. Returns the
/// errno of the first that failed.
pub fn apply_limits(limits: &[PreparedLimit]) -> Result<(), i32> {
    for l in limits {
        let r = libc::rlimit {
            rlim_cur: l.soft,
            rlim_max: l.hard,
        };
        // SAFETY: setrlimit reads the struct it is given.
        if unsafe { libc::setrlimit(l.resource, &r) } != 0 {
            return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
        }
    }
    Ok(())
}

/// In the child: a session of its own, so no terminal of the daemon's is
/// its controlling terminal and it cannot signal or regroup the daemon's
/// processes. The caller must not be a process group leader.
pub fn new_session() -> Result<(), i32> {
    // SAFETY: setsid takes no arguments.
    if unsafe { libc::setsid() } < 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
    }
    Ok(())
}

/// In the child: every descriptor above 2 closes at exec, whatever the
/// daemon inherited or opened (`close_range` with CLOSE_RANGE_CLOEXEC;
/// without it, `fcntl` on each descriptor up to the open-file limit).
/// Descriptors the caller still needs before exec stay usable until then.
pub fn close_all_at_exec() {
    const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
    // SAFETY: close_range only changes this process's descriptor flags.
    let r = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            3 as libc::c_uint,
            libc::c_uint::MAX,
            CLOSE_RANGE_CLOEXEC,
        )
    };
    if r == 0 {
        return;
    }
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct it is given.
    let top = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
        lim.rlim_cur.min(1 << 20) as i32
    } else {
        1 << 16
    };
    for fd in 3..top {
        // SAFETY: fcntl on a descriptor that may not be open fails harmlessly.
        unsafe {
            libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
        }
    }
}

/// At a daemon's start: its soft open-file limit raised to the hard limit
/// (a daemon serving many connections must not run out at 1,024; its jobs
/// get [`DEFAULT_NOFILE_SOFT`] back). Returns the limit now in force.
pub fn raise_open_file_limit() -> Option<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit on this process's own limits.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return None;
        }
        if lim.rlim_cur < lim.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                lim = raised;
            }
        }
    }
    of_rlim(lim.rlim_cur)
}

/// At a daemon's start: the descriptors above 2 it inherited (from a shell,
/// a service manager) close at exec, so nothing it starts inherits them.
pub fn stop_inheriting_descriptors() {
    close_all_at_exec();
}

/// What every daemon does first: its open-file limit raised to the hard
/// limit, inherited descriptors kept from its children.
pub fn prepare_daemon() {
    stop_inheriting_descriptors();
    if let Some(n) = raise_open_file_limit() {
        tracing::debug!(open_files = n, "open-file limit");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gsched_core::rlimits::Limit;

    #[test]
    fn prepared_limits_never_exceed_this_processs_hard_limits() {
        let mut given = ResourceLimits::new();
        given.insert(
            "CORE".into(),
            Limit {
                soft: None,
                hard: None,
            },
        );
        given.insert(
            "NOFILE".into(),
            Limit {
                soft: Some(77),
                hard: Some(99),
            },
        );
        let prepared = prepare_limits(&given);
        let of = |r| prepared.iter().find(|l| l.resource == r).copied().unwrap();
        let mut core = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes into the struct it is given.
        unsafe { libc::getrlimit(libc::RLIMIT_CORE, &mut core) };
        assert_eq!(of(libc::RLIMIT_CORE).hard, core.rlim_max);
        let nofile = of(libc::RLIMIT_NOFILE);
        assert_eq!((nofile.soft, nofile.hard), (77, 99));
        assert_eq!(prepared.len(), rlimits::LIMIT_NAMES.len());
    }

    #[test]
    fn core_knows_linuxs_resource_numbers() {
        let libc_of = [
            ("AS", libc::RLIMIT_AS),
            ("CORE", libc::RLIMIT_CORE),
            ("CPU", libc::RLIMIT_CPU),
            ("DATA", libc::RLIMIT_DATA),
            ("FSIZE", libc::RLIMIT_FSIZE),
            ("MEMLOCK", libc::RLIMIT_MEMLOCK),
            ("NOFILE", libc::RLIMIT_NOFILE),
            ("NPROC", libc::RLIMIT_NPROC),
            ("RSS", libc::RLIMIT_RSS),
            ("STACK", libc::RLIMIT_STACK),
        ];
        for ((name, n), (lname, l)) in rlimits::LIMITS.iter().zip(libc_of) {
            assert_eq!((*name, *n as libc::__rlimit_resource_t), (lname, l));
        }
    }
}
