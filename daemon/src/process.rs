//! What the kernel says of processes and of this host's boot, read from
//! `/proc`: enough to tell a process apart from a later one that reuses its
//! pid, and a boot from the next.

/// Fields of `/proc/PID/stat` after the command name (field 3 onwards).
pub fn stat_fields(pid: i32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces: skip past its ')'.
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    Some(rest.split_whitespace().map(str::to_string).collect())
}

/// Start time of a process in clock ticks since boot (field 22 of
/// `/proc/PID/stat`), which tells a process apart from a later one that
/// reuses its pid.
pub fn process_starttime(pid: i32) -> Option<u64> {
    stat_fields(pid)?.get(19)?.parse().ok()
}

/// Whether the process `pid` that started at `started` still runs.
pub fn runs(pid: u32, started: u64) -> bool {
    i32::try_from(pid).is_ok_and(|pid| process_starttime(pid) == Some(started))
}

/// This boot of the host (the kernel's random boot id); empty if unread.
pub fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// This machine's id (systemd's `/etc/machine-id`, or D-Bus's copy);
/// empty if neither reads.
pub fn machine_id() -> String {
    ["/etc/machine-id", "/var/lib/dbus/machine-id"]
        .iter()
        .find_map(|path| {
            let id = std::fs::read_to_string(path).ok()?;
            let id = id.trim();
            (!id.is_empty()).then(|| id.to_string())
        })
        .unwrap_or_default()
}

/// This process's process-id namespace (the inode `/proc/self/ns/pid`
/// names); empty if unread. Processes of another namespace (a container
/// on the same machine) cannot be looked up by pid from this one.
pub fn pid_namespace() -> String {
    std::fs::read_link("/proc/self/ns/pid")
        .ok()
        .and_then(|link| {
            let link = link.to_string_lossy().into_owned();
            let inode = link.strip_prefix("pid:[")?.strip_suffix(']')?;
            Some(inode.to_string())
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_runs_and_a_later_start_is_another() {
        let me = std::process::id();
        let started = process_starttime(me as i32).unwrap();
        assert!(runs(me, started));
        assert!(!runs(me, started + 1));
        assert!(!runs(u32::MAX, started));
        assert_eq!(boot_id(), boot_id());
        assert!(!boot_id().is_empty());
        assert!(
            pid_namespace().parse::<u64>().is_ok(),
            "{}",
            pid_namespace()
        );
        assert_eq!(machine_id(), machine_id());
    }
}
