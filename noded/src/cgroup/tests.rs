use super::*;
use gsched_core::devices::{DeviceKind, DeviceRule};
use gsched_core::resources::{MemoryLimits, MemoryPolicy, MemoryRequest};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

const MOUNTINFO: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
41 31 0:38 / /sys/fs/cgroup/my\\040unified rw,relatime - cgroup2 cgroup2 rw,nsdelegate
";

#[test]
fn mounts_are_read_from_mountinfo() {
    let m = Mounts::parse(MOUNTINFO);
    assert_eq!(m.v2, Some(PathBuf::from("/sys/fs/cgroup/my unified")));
    assert_eq!(
        m.v1_of("cpuacct"),
        Some(Path::new("/sys/fs/cgroup/cpu,cpuacct"))
    );
    assert_eq!(m.v1_of("memory"), Some(Path::new("/sys/fs/cgroup/memory")));
    assert_eq!(m.v1_of("devices"), None);
    assert_eq!(m.v1_of("name=systemd"), None);
}

#[test]
fn auto_prefers_v2_with_controllers_then_v1() {
    let set = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
    let both = Mounts::parse(MOUNTINFO);
    assert_eq!(
        choose(Plugin::Auto, &both, &set(&["cpu", "memory", "pids"])),
        Plugin::V2
    );
    // This project's machines: v1 controllers, a v2 mount with none.
    assert_eq!(choose(Plugin::Auto, &both, &set(&[])), Plugin::V1);
    let only_v2 = Mounts {
        v2: Some("/sys/fs/cgroup".into()),
        v1: vec![],
    };
    assert_eq!(choose(Plugin::Auto, &only_v2, &set(&[])), Plugin::V2);
    assert_eq!(
        choose(Plugin::Auto, &Mounts::default(), &set(&[])),
        Plugin::None
    );
    assert_eq!(choose(Plugin::V1, &only_v2, &set(&[])), Plugin::V1);
}

#[test]
fn config_is_checked() {
    let c: CgroupConfig =
        toml::from_str("allowed_ram_space = 90\nconstrain_cores = false").unwrap();
    assert!(!c.constrain_cores && c.constrain_devices);
    assert!(c.check().is_ok());
    let bad = CgroupConfig {
        base: "../x".into(),
        ..CgroupConfig::default()
    };
    assert!(bad.check().unwrap_err().to_string().contains("base"));
    let bad = CgroupConfig {
        allowed_ram_space: 0.0,
        ..CgroupConfig::default()
    };
    assert!(bad
        .check()
        .unwrap_err()
        .to_string()
        .contains("allowed_ram_space"));
    assert!(toml::from_str::<CgroupConfig>("constrain_ram = true").is_err());
}

fn is_root() -> bool {
    nix::unistd::getuid().is_root()
}

/// Starts `script` with its processes in the job's batch step.
fn start_in(procs: &[PathBuf], script: &str) -> std::process::Child {
    let procs = procs.to_vec();
    let mut cmd = Command::new("/bin/sh");
    cmd.args(["-c", script])
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    // SAFETY: only writes to files between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            for p in &procs {
                std::fs::write(p, "0")?;
            }
            Ok(())
        });
    }
    cmd.spawn().expect("start a process in the job's cgroup")
}

fn wait_for(what: &str, mut ok: impl FnMut() -> bool) {
    for _ in 0..300 {
        if ok() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    panic!("timed out waiting for {what}");
}

/// Both backends, through the trait: limits applied, devices filtered,
/// every process tracked (a setsid one too), killed at once, removed.
fn exercise(cg: &dyn Cgroups, job: JobId) {
    let memory = MemoryLimits::for_job(MemoryRequest::Mib(64), 1024, &MemoryPolicy::default());
    let null = DeviceRule {
        kind: DeviceKind::Char,
        major: Some(1),
        minor: Some(3),
    };
    let limits = JobLimits {
        memory: Some(memory),
        cpus: Some(vec![0]),
        devices: Some(vec![null]),
        max_processes: Some(64),
    };
    let procs = cg.create(job, &limits).expect("create the job's cgroup");
    assert!(!procs.is_empty());
    // /dev/null (1:3) is allowed, /dev/zero (1:5) is not.
    let check = start_in(
        &procs,
        "echo ok >/dev/null && (head -c1 /dev/zero >/dev/null 2>&1 && echo zero-opened || echo zero-denied)",
    );
    let out = String::from_utf8(check.wait_with_output().unwrap().stdout).unwrap();
    if cg.enforced().devices {
        assert_eq!(out.trim(), "zero-denied", "{} device rules", cg.version());
    }
    exercise_step(cg, job, &procs);
    exercise_device_changes(cg, job, &procs, null);
    exercise_process_cap(cg, job + 1000, &limits);
    let mut child = start_in(&procs, "setsid sleep 300 & sleep 300 & wait");
    wait_for("three processes in the cgroup", || {
        cg.pids(job, Scope::Job).len() >= 3
    });
    cg.kill(job, Scope::Job);
    let _ = child.wait();
    wait_for("an empty cgroup", || cg.pids(job, Scope::Job).is_empty());
    let c = cg.counters(job, Scope::Job);
    assert_eq!(c.oom_kills, 0);
    assert!(
        cg.remove(job, Scope::Job),
        "{} cgroup removed",
        cg.version()
    );
}

/// A job that forks without end stops at its process cap (64 here). Its
/// own cgroup: the killed processes' zombies stay charged until whoever
/// inherits them reaps them.
fn exercise_process_cap(cg: &dyn Cgroups, job: JobId, limits: &JobLimits) {
    if !cg.enforced().processes {
        return;
    }
    let procs = cg
        .create(job, limits)
        .expect("create the capped job's cgroup");
    let mut bomb = start_in(
        &procs,
        "i=0; while [ $i -lt 200 ]; do sleep 300 >/dev/null 2>&1 & i=$((i+1)); done; echo started; wait",
    );
    let mut out = String::new();
    let stdout = bomb.stdout.take().unwrap();
    let _ = std::io::Read::read_to_string(&mut std::io::Read::take(stdout, 8), &mut out);
    let n = cg.pids(job, Scope::Job).len();
    assert!(
        (2..=64).contains(&n),
        "{}: {n} processes in a job capped at 64",
        cg.version()
    );
    cg.kill(job, Scope::Job);
    let _ = bomb.wait();
    wait_for("the capped job's end", || {
        cg.pids(job, Scope::Job).is_empty()
    });
    let _ = cg.remove(job, Scope::Job);
}

/// A step beside the batch step: a process moved into it is the step's
/// (and the job's), keeps the job's device rules, and the step is killed
/// and removed alone.
fn exercise_step(cg: &dyn Cgroups, job: JobId, procs: &[PathBuf]) {
    let v = cg.version();
    let mut batch = start_in(procs, "exec sleep 300");
    wait_for("the batch process", || {
        !cg.pids(job, Scope::Batch).is_empty()
    });
    cg.create_step(job, 3).expect("create step 3");
    assert_eq!(cg.steps(job), vec![Scope::Batch, Scope::Step(3)], "{v}");
    // One process (exec): none forks before or after it moves.
    let mut step = start_in(procs, "exec sleep 300");
    let pid = step.id() as i32;
    cg.join(job, Scope::Step(3), pid).expect("join step 3");
    assert_eq!(cg.pids(job, Scope::Step(3)), vec![pid], "{v}");
    assert!(cg.pids(job, Scope::Job).contains(&pid), "{v}");
    assert!(!cg.pids(job, Scope::Batch).contains(&pid), "{v}");
    let own = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    assert!(own.contains(&format!("job_{job}/step_3")), "{v}: {own}");
    if cg.enforced().devices {
        let mut probe = start_in(
            procs,
            "sleep 0.3; head -c1 /dev/zero >/dev/null 2>&1 && echo zero-opened || echo zero-denied",
        );
        cg.join(job, Scope::Step(3), probe.id() as i32).unwrap();
        let mut out = String::new();
        std::io::Read::read_to_string(probe.stdout.as_mut().unwrap(), &mut out).unwrap();
        let _ = probe.wait();
        assert_eq!(
            out.trim(),
            "zero-denied",
            "{v}: the step keeps the job's device rules"
        );
    }
    cg.kill(job, Scope::Step(3));
    let _ = step.wait();
    wait_for("an empty step", || cg.pids(job, Scope::Step(3)).is_empty());
    assert!(
        !cg.pids(job, Scope::Batch).is_empty(),
        "{v}: the batch step lives on"
    );
    assert!(cg.remove(job, Scope::Step(3)), "{v}: step removed");
    assert_eq!(cg.steps(job), vec![Scope::Batch], "{v}");
    cg.kill(job, Scope::Batch);
    let _ = batch.wait();
}

/// A running job's devices change (an isolated job took a GPU, or gave it
/// back): the batch step and a step that already exists follow, and
/// reopening is what is checked.
fn exercise_device_changes(cg: &dyn Cgroups, job: JobId, procs: &[PathBuf], null: DeviceRule) {
    if !cg.enforced().devices {
        return;
    }
    let v = cg.version();
    let zero = DeviceRule {
        minor: Some(5),
        ..null
    };
    cg.create_step(job, 4).expect("create step 4");
    let opens_zero = |scope: Scope| {
        let mut p = start_in(
            procs,
            "sleep 0.3; head -c1 /dev/zero >/dev/null 2>&1 && echo zero-opened || echo zero-denied",
        );
        if scope != Scope::Batch {
            cg.join(job, scope, p.id() as i32).unwrap();
        }
        let mut out = String::new();
        std::io::Read::read_to_string(p.stdout.as_mut().unwrap(), &mut out).unwrap();
        let _ = p.wait();
        out.trim() == "zero-opened"
    };
    cg.set_devices(job, &[null, zero]).expect("allow /dev/zero");
    assert!(opens_zero(Scope::Batch), "{v}: allowed in the batch step");
    assert!(
        opens_zero(Scope::Step(4)),
        "{v}: allowed in an existing step"
    );
    cg.set_devices(job, &[null]).expect("deny /dev/zero again");
    assert!(!opens_zero(Scope::Batch), "{v}: denied in the batch step");
    assert!(
        !opens_zero(Scope::Step(4)),
        "{v}: denied in an existing step"
    );
    // Twice the same: nothing changes.
    cg.set_devices(job, &[null]).unwrap();
    assert!(!opens_zero(Scope::Batch), "{v}");
    assert!(cg.remove(job, Scope::Step(4)), "{v}: step removed");
}

#[test]
fn step_directories_are_named_one_way() {
    assert_eq!(Scope::of_dir_name("step_batch"), Some(Scope::Batch));
    assert_eq!(Scope::of_dir_name("step_12"), Some(Scope::Step(12)));
    assert_eq!(Scope::of_dir_name("step_012"), None);
    assert_eq!(Scope::of_dir_name("step_"), None);
    assert_eq!(Scope::of_dir_name("job_1"), None);
    assert_eq!(Scope::of_dir_name("step_99999999999"), None);
    for s in [Scope::Batch, Scope::Step(0), Scope::Step(7)] {
        assert_eq!(Scope::of_dir_name(&s.dir_name().unwrap()), Some(s));
    }
    assert_eq!(Scope::Job.dir(Path::new("/j")), PathBuf::from("/j"));
}

#[test]
fn v1_confines_tracks_and_kills() {
    let mounts = Mounts::read();
    if !is_root() || mounts.v1_of("memory").is_none() {
        eprintln!("skipped: needs root and a v1 memory hierarchy");
        return;
    }
    let node = format!("test-v1-{}", std::process::id());
    let cg = v1::CgroupV1::new(&mounts, &CgroupConfig::default(), &node).unwrap();
    assert!(cg.enforced().memory && cg.enforced().tracking);
    let job = 41;
    // The limits as the files show them, before anything runs.
    let memory = MemoryLimits::for_job(MemoryRequest::Mib(64), 1024, &MemoryPolicy::default());
    let limits = JobLimits {
        memory: Some(memory),
        cpus: Some(vec![0]),
        devices: Some(vec![DeviceRule {
            kind: DeviceKind::Char,
            major: Some(1),
            minor: Some(3),
        }]),
        max_processes: Some(64),
    };
    cg.create(job, &limits).unwrap();
    let root = |c: &str| {
        mounts
            .v1_of(c)
            .unwrap()
            .join("gsched")
            .join(&node)
            .join("job_41")
    };
    let read = |c: &str, f: &str| std::fs::read_to_string(root(c).join(f)).unwrap();
    assert_eq!(read("memory", "memory.limit_in_bytes").trim(), "67108864");
    assert_eq!(read("cpuset", "cpuset.cpus").trim(), "0");
    if mounts.v1_of("pids").is_some() {
        assert_eq!(read("pids", "pids.max").trim(), "64");
    }
    assert_eq!(read("devices", "devices.list").trim(), "c 1:3 rwm");
    assert_eq!(
        read("devices", "step_batch/devices.list").trim(),
        "c 1:3 rwm"
    );
    // A job moved onto other cores (resumed where its own were taken):
    // its steps follow, though a v1 child must stay within its parent.
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default();
    if gsched_core::resources::parse_cpu_list(&online).is_ok_and(|c| c.contains(&1)) {
        cg.create_step(job, 3).unwrap();
        cg.set_cpus(job, &[1]).unwrap();
        for f in [
            "cpuset.cpus",
            "step_batch/cpuset.cpus",
            "step_3/cpuset.cpus",
        ] {
            assert_eq!(read("cpuset", f).trim(), "1", "{f}");
        }
    }
    assert!(cg.remove(job, Scope::Job));
    exercise(&cg, job + 1);
    cg.remove_node_dir();
    assert!(!root("memory").parent().unwrap().exists());
}

#[test]
fn v2_tracks_kills_and_filters_devices() {
    let mounts = Mounts::read();
    let Some(root) = mounts.v2.clone() else {
        eprintln!("skipped: no cgroup v2 hierarchy");
        return;
    };
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let node = format!("test-v2-{}", std::process::id());
    let cg = v2::CgroupV2::new(&root, &CgroupConfig::default(), &node).unwrap();
    assert!(cg.enforced().tracking);
    eprintln!("v2 enforces {:?}", cg.enforced());
    // Device filters need no controller: they are checked on every kernel
    // that can load them.
    exercise(&cg, 43);
    cg.remove_node_dir();
    assert!(!root.join("gsched").join(&node).exists());
}
