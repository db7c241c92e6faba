//! cgroup v2 device rules: a small eBPF program (`BPF_PROG_TYPE_CGROUP_DEVICE`)
//! attached to the job's cgroup that allows the listed devices and denies
//! every other, as runc and systemd do. Built by hand: a dozen instructions
//! do not justify an eBPF toolchain.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

use gsched_core::devices::{DeviceKind, DeviceRule};

use super::Result;

const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_PROG_ATTACH: libc::c_long = 8;
const BPF_PROG_DETACH: libc::c_long = 9;
const BPF_PROG_GET_FD_BY_ID: libc::c_long = 13;
const BPF_PROG_QUERY: libc::c_long = 16;
const BPF_PROG_TYPE_CGROUP_DEVICE: u32 = 15;
const BPF_CGROUP_DEVICE: u32 = 6;
const BPF_F_ALLOW_MULTI: u32 = 2;
/// `bpf_cgroup_dev_ctx.access_type & 0xffff`.
const DEV_BLOCK: i32 = 1;
const DEV_CHAR: i32 = 2;

/// One eBPF instruction (`struct bpf_insn`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Insn {
    code: u8,
    /// dst in the low nibble, src in the high one.
    regs: u8,
    off: i16,
    imm: i32,
}

const fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn {
        code,
        regs: (src << 4) | (dst & 0xf),
        off,
        imm,
    }
}

/// r[dst] = *(u32 *)(r[src] + off)
const fn load_u32(dst: u8, src: u8, off: i16) -> Insn {
    insn(0x61, dst, src, off, 0)
}
/// w[dst] &= imm
const fn and32(dst: u8, imm: i32) -> Insn {
    insn(0x54, dst, 0, 0, imm)
}
/// if r[dst] != imm goto +off
const fn jump_if_not(dst: u8, imm: i32, off: i16) -> Insn {
    insn(0x55, dst, 0, off, imm)
}
/// r[dst] = imm
const fn mov(dst: u8, imm: i32) -> Insn {
    insn(0xb7, dst, 0, 0, imm)
}
const EXIT: Insn = insn(0x95, 0, 0, 0, 0);

/// The program: load the device type, major and minor; for each rule,
/// return 1 (allow) if it matches; return 0 (deny) after the last.
fn program(rules: &[DeviceRule]) -> Vec<Insn> {
    let mut p = vec![
        load_u32(2, 1, 0),
        and32(2, 0xffff),
        load_u32(3, 1, 4),
        load_u32(4, 1, 8),
    ];
    for r in rules {
        let kind = match r.kind {
            DeviceKind::Block => DEV_BLOCK,
            DeviceKind::Char => DEV_CHAR,
        };
        let mut checks: Vec<(u8, i32)> = vec![(2, kind)];
        if let Some(m) = r.major {
            checks.push((3, m as i32));
        }
        if let Some(m) = r.minor {
            checks.push((4, m as i32));
        }
        let n = checks.len();
        for (k, (reg, value)) in checks.into_iter().enumerate() {
            // Past the remaining checks and this rule's two instructions.
            p.push(jump_if_not(reg, value, (n - k - 1 + 2) as i16));
        }
        p.push(mov(0, 1));
        p.push(EXIT);
    }
    p.push(mov(0, 0));
    p.push(EXIT);
    p
}

fn bpf(cmd: libc::c_long, attr: &mut [u64; 16]) -> std::io::Result<i64> {
    // SAFETY: `attr` is a zeroed, 128-byte, 8-aligned `union bpf_attr`
    // with the fields this command reads filled in; pointers in it refer
    // to memory that outlives the call.
    let r = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), 128usize) };
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn load(prog: &[Insn]) -> std::io::Result<OwnedFd> {
    let license = b"GPL\0";
    let mut attr = [0u64; 16];
    attr[0] = u64::from(BPF_PROG_TYPE_CGROUP_DEVICE) | ((prog.len() as u64) << 32);
    attr[1] = prog.as_ptr() as u64;
    attr[2] = license.as_ptr() as u64;
    let fd = bpf(BPF_PROG_LOAD, &mut attr)?;
    // SAFETY: the kernel just returned this new descriptor to us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Whether this kernel lets gnoded load device programs.
pub fn supported() -> bool {
    load(&program(&[])).is_ok()
}

/// Allows only `rules` to the processes in cgroup `dir` (and below).
pub fn attach_device_filter(dir: &Path, rules: &[DeviceRule]) -> Result<()> {
    let cgroup = open_cgroup(dir)?;
    attach(dir, &cgroup, rules)
}

/// Replaces the device filter of cgroup `dir` with one allowing `rules`.
/// The new filter is attached before the old ones go: with both, a device
/// must pass both, so nothing is allowed in between that neither allows
/// alone.
pub fn replace_device_filter(dir: &Path, rules: &[DeviceRule]) -> Result<()> {
    let cgroup = open_cgroup(dir)?;
    let old = attached(dir, &cgroup)?;
    attach(dir, &cgroup, rules)?;
    for id in old {
        let mut attr = [0u64; 16];
        attr[0] = u64::from(id);
        // Gone meanwhile: nothing to detach.
        let Ok(fd) = bpf(BPF_PROG_GET_FD_BY_ID, &mut attr) else {
            continue;
        };
        // SAFETY: the kernel just returned this new descriptor to us.
        let prog = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        let mut attr = [0u64; 16];
        attr[0] = cgroup.as_raw_fd() as u32 as u64 | ((prog.as_raw_fd() as u32 as u64) << 32);
        attr[1] = u64::from(BPF_CGROUP_DEVICE);
        bpf(BPF_PROG_DETACH, &mut attr)
            .map_err(super::error("cannot detach a device filter from", dir))?;
    }
    Ok(())
}

fn open_cgroup(dir: &Path) -> Result<std::fs::File> {
    std::fs::File::open(dir).map_err(super::error("cannot open", dir))
}

fn attach(dir: &Path, cgroup: &std::fs::File, rules: &[DeviceRule]) -> Result<()> {
    let prog =
        load(&program(rules)).map_err(super::error("cannot load the device filter for", dir))?;
    let mut attr = [0u64; 16];
    attr[0] = cgroup.as_raw_fd() as u32 as u64 | ((prog.as_raw_fd() as u32 as u64) << 32);
    attr[1] = u64::from(BPF_CGROUP_DEVICE) | (u64::from(BPF_F_ALLOW_MULTI) << 32);
    bpf(BPF_PROG_ATTACH, &mut attr)
        .map_err(super::error("cannot attach the device filter to", dir))?;
    Ok(())
}

/// The ids of the device programs attached to `dir` itself (not those
/// inherited from its parents).
fn attached(dir: &Path, cgroup: &std::fs::File) -> Result<Vec<u32>> {
    let mut ids = [0u32; 64];
    let mut attr = [0u64; 16];
    attr[0] = cgroup.as_raw_fd() as u32 as u64 | (u64::from(BPF_CGROUP_DEVICE) << 32);
    attr[2] = ids.as_mut_ptr() as u64;
    attr[3] = ids.len() as u64;
    bpf(BPF_PROG_QUERY, &mut attr)
        .map_err(super::error("cannot list the device filters of", dir))?;
    let count = (attr[3] as u32 as usize).min(ids.len());
    Ok(ids[..count].to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_program_checks_each_rule_then_denies() {
        let rules = [
            DeviceRule {
                kind: DeviceKind::Char,
                major: Some(1),
                minor: Some(3),
            },
            DeviceRule {
                kind: DeviceKind::Block,
                major: None,
                minor: None,
            },
        ];
        let p = program(&rules);
        // 4 loads, rule 1: 3 checks + 2, rule 2: 1 check + 2, deny: 2.
        assert_eq!(p.len(), 4 + 5 + 3 + 2);
        // The first check of rule 1 skips its other two checks and its
        // allow to land on rule 2's first instruction.
        assert_eq!(p[4], jump_if_not(2, DEV_CHAR, 4));
        assert_eq!(p[6], jump_if_not(4, 3, 2));
        assert_eq!(p[9], jump_if_not(2, DEV_BLOCK, 2));
        assert_eq!(&p[p.len() - 2..], &[mov(0, 0), EXIT]);
        assert_eq!(std::mem::size_of::<Insn>(), 8);
    }
}
