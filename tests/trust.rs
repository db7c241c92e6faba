//! Issue 36's attacks by local users, each of which worked on the code
//! before its fix (docs/security.md): a job reaching the terminal and the
//! descriptors `gsched up` was started with, the submitter's limits not
//! applied, an administrator running jobs as root, a squatter on a loopback
//! port collecting a job's token or root's script, unknown fields and
//! control characters. (Squatting the daemons' own ports during restarts
//! is in tests/daemons.rs.) Users are created with `useradd` and removed
//! afterwards; the tests need root and say so when skipped.

#![allow(clippy::result_large_err)]

#[macro_use]
mod common;

use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::time::{Duration, Instant};

use common::users::{Squatter, TestUser};
use common::Gsched;
use serde_json::json;

const T: Duration = Duration::from_secs(30);

/// Keeps connections to HOST PORT (N of them, per target) busy for SECS:
/// a request on each every 0.3 s, reconnecting whenever one is closed.
/// `python3 - SECS HOST PORT N [HOST PORT N ...]`.
const BUSY_FLOOD: &str = r#"
import socket, sys, time
secs = float(sys.argv[1])
targets = [(sys.argv[i], int(sys.argv[i + 1]), int(sys.argv[i + 2])) for i in range(2, len(sys.argv), 3)]
def connect(h, p):
    try:
        return socket.create_connection((h, p), timeout=2)
    except OSError:
        return None
pools = [(h, p, [connect(h, p) for _ in range(n)]) for h, p, n in targets]
print("flooding", flush=True)
end = time.time() + secs
while time.time() < end:
    for h, p, cs in pools:
        for i, c in enumerate(cs):
            try:
                c.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                if not c.recv(4096):
                    raise OSError("closed")
            except Exception:
                cs[i] = connect(h, p)
    time.sleep(0.3)
"#;

fn wait_output(g: &Gsched, id: u64) -> String {
    let deadline = Instant::now() + T;
    loop {
        let j = g.job(id);
        let s = j["job_state"].as_str().unwrap_or("").to_string();
        if ["COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"].contains(&s.as_str()) {
            let out = g.work.path().join(format!("slurm-{id}.out"));
            return std::fs::read_to_string(out).unwrap_or_default();
        }
        assert!(Instant::now() < deadline, "job {id} did not end: {j}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A new pseudo-terminal: its master (kept open) and the slave's path.
fn pseudo_terminal() -> (std::fs::File, std::ffi::CString) {
    // SAFETY: plain libc calls on a descriptor this function owns.
    unsafe {
        let master = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
        assert!(master >= 0, "posix_openpt");
        assert_eq!(libc::grantpt(master), 0);
        assert_eq!(libc::unlockpt(master), 0);
        let mut name = [0 as libc::c_char; 128];
        assert_eq!(libc::ptsname_r(master, name.as_mut_ptr(), name.len()), 0);
        let path = std::ffi::CStr::from_ptr(name.as_ptr()).to_owned();
        (std::os::fd::FromRawFd::from_raw_fd(master), path)
    }
}

#[test]
fn a_job_gets_neither_the_daemons_terminal_nor_its_descriptors() {
    needs_root!();
    // `gsched up` as an administrator starts it from a shell: a terminal
    // of its own (its controlling terminal) and, here, descriptor 7 open
    // on a root-only file.
    let (master, slave) = pseudo_terminal();
    let secret_dir = tempfile::tempdir().unwrap();
    let secret = secret_dir.path().join("root-only");
    std::fs::write(&secret, "root's\n").unwrap();
    let held = std::fs::OpenOptions::new()
        .append(true)
        .open(&secret)
        .unwrap();
    let held_fd = held.as_raw_fd();
    let prepare: common::Preparation = std::sync::Arc::new(move |cmd| {
        let slave = slave.clone();
        // SAFETY: system calls only, on memory prepared before the fork.
        unsafe {
            cmd.pre_exec(move || {
                if libc::setsid() < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // A session leader opening a terminal makes it its own.
                let tty = libc::open(slave.as_ptr(), libc::O_RDWR);
                if tty < 0 || libc::ioctl(tty, libc::TIOCSCTTY, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                libc::dup2(tty, 0);
                if libc::dup2(held_fd, 7) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    });
    let g = Gsched::start_prepared(&[], Some(prepare));
    let up_session = std::fs::read_to_string(format!("/proc/{}/stat", g.pid())).unwrap();
    let field = |stat: &str, n: usize| -> String {
        let after = stat.rsplit_once(") ").unwrap().1;
        after.split(' ').nth(n).unwrap().to_string()
    };
    let (up_sid, up_tty) = (field(&up_session, 3), field(&up_session, 4));
    assert_ne!(
        up_tty, "0",
        "gsched up has the terminal (the test's premise)"
    );
    let script = g.script(
        "probe.sh",
        "#!/bin/sh\n\
         set -- $(sed 's/.*) //' /proc/self/stat)\n\
         echo \"session=$4 tty=$5\"\n\
         if (exec 3</dev/tty) 2>/dev/null; then echo tty-opened; else echo no-tty; fi\n\
         if (echo pwned >&7) 2>/dev/null; then echo fd7-written; else echo no-fd7; fi\n",
    );
    let id = g.submit(&[&script]);
    let out = wait_output(&g, id);
    assert!(
        out.contains("tty=0"),
        "the job has a controlling terminal: {out}"
    );
    assert!(out.contains("no-tty"), "the job opened /dev/tty: {out}");
    assert!(out.contains("no-fd7"), "the job wrote descriptor 7: {out}");
    assert!(
        !out.contains(&format!("session={up_sid} ")),
        "the job is in gsched up's session {up_sid}: {out}"
    );
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "root's\n");
    drop(master);
    drop(held);
}

#[test]
fn the_submitters_limits_and_a_process_cap_reach_the_job() {
    needs_root!();
    let g = Gsched::start(&[]);
    let gsub = common::bin("gsub");
    let out = g.run_program(
        Path::new("/bin/sh"),
        &[
            "-c",
            "ulimit -n 77 && ulimit -c 0 && exec \"$0\" --parsable --wrap 'echo nofile=$(ulimit -n) core=$(ulimit -c); p=$(grep :pids: /proc/self/cgroup | cut -d: -f3); if [ -n \"$p\" ]; then echo pidsmax=$(cat /sys/fs/cgroup/pids$p/../pids.max); fi'",
            &gsub.display().to_string(),
        ],
        g.work.path(),
        None,
        &[],
    );
    assert!(out.status.success(), "{out:?}");
    let id: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    let text = wait_output(&g, id);
    assert!(
        text.contains("nofile=77 core=0"),
        "the job did not get the submitter's limits: {text}"
    );
    // Where the node has a v1 pids hierarchy, the job's cgroup caps it
    // (both hierarchies are checked by noded's cgroup unit tests).
    if Path::new("/sys/fs/cgroup/pids").is_dir() {
        assert!(
            text.contains("pidsmax=16384"),
            "the job's cgroup has no process cap: {text}"
        );
    }
}

#[test]
fn an_administrator_cannot_run_jobs_as_root_or_as_another_uid() {
    needs_root!();
    let ops = TestUser::new();
    let victim = TestUser::new();
    let g = Gsched::start(&["--admins", &ops.name]);
    let token: serde_json::Value = g
        .req("POST", "/api/v1/tokens")
        .send_json(json!({"user": ops.name, "lifetime": 600}))
        .unwrap()
        .into_json()
        .unwrap();
    let token = token["token"].as_str().unwrap().to_string();
    let dir = common::users::user_dir(&victim);
    let submit = |spec: serde_json::Value| {
        common::api("POST", &format!("{}/api/v1/jobs", g.url), &token).send_json(spec)
    };
    let mut spec = victim.spec(dir.path(), "#!/bin/sh\nid -u > uid.txt\n");
    spec["uid"] = json!(0);
    match submit(spec) {
        Err(ureq::Error::Status(403, r)) => {
            let text = r.into_string().unwrap();
            assert!(text.contains("uid 0"), "{text}");
        }
        other => panic!(
            "a job of {} as uid 0 was not refused: {other:?}",
            victim.name
        ),
    }
    let root = json!({
        "name": "r", "script": "#!/bin/sh\nid -u\n", "working_dir": "/tmp",
        "user_name": "root", "uid": 0, "gid": 0
    });
    match submit(root) {
        Err(ureq::Error::Status(403, r)) => {
            assert!(r.into_string().unwrap().contains("only root"))
        }
        other => panic!("an administrator ran a job as root: {other:?}"),
    }
    // On the user's behalf, as the user: allowed, and runs as them.
    let r: serde_json::Value = submit(victim.spec(dir.path(), "#!/bin/sh\nid -u > uid.txt\n"))
        .unwrap()
        .into_json()
        .unwrap();
    let id = r["job_id"].as_u64().unwrap();
    wait_output(&g, id);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("uid.txt"))
            .unwrap()
            .trim(),
        victim.uid.to_string()
    );
}

#[test]
fn a_squatter_on_a_loopback_port_gets_no_token_and_no_script() {
    needs_root!();
    let victim = TestUser::new();
    let attacker = TestUser::new();
    let port = common::free_port();
    let squat = Squatter::start(&attacker, port, Some("evil.sock"), 60);
    let url = format!("http://127.0.0.1:{port}");
    // A user's command with a job token, the controller away.
    let out = victim
        .sh_cmd("exec \"$0\" --noheader")
        .arg(common::bin("gqueue"))
        .env("GSCHED_URL", &url)
        .env("GSCHED_TOKEN", "victims-token-0123456789")
        .env("GSCHED_RETRY_SECS", "1")
        .output()
        .unwrap();
    assert!(!out.status.success(), "gqueue believed a squatter: {out:?}");
    // Root's submission: the squatter's /healthz names its own socket.
    let gsub = common::bin("gsub");
    let out = std::process::Command::new(&gsub)
        .args(["--wrap", "echo roots-secret-script"])
        .env("GSCHED_URL", &url)
        .env("GSCHED_RETRY_SECS", "1")
        .env("ROOTS_SECRET_ENV", "roots-secret-environment")
        .env_remove("GSCHED_TOKEN")
        .env_remove("SLURM_JWT")
        .current_dir("/tmp")
        .output()
        .unwrap();
    assert!(!out.status.success(), "gsub believed a squatter: {out:?}");
    for secret in [
        "victims-token-0123456789",
        "roots-secret-script",
        "roots-secret-environment",
    ] {
        assert!(
            !squat.saw(secret),
            "the squatter received {secret}: {}",
            String::from_utf8_lossy(&squat.captured())
        );
    }
    // A socket a user names is refused by root's commands too.
    let evil = squat.unix_path("evil.sock");
    let out = std::process::Command::new(&gsub)
        .args(["--wrap", "echo roots-secret-script"])
        .env("GSCHED_URL", format!("unix:{}", evil.display()))
        .env("GSCHED_RETRY_SECS", "1")
        .current_dir("/tmp")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("refusing the controller socket"),
        "{out:?}"
    );
    assert!(!squat.saw("roots-secret-script"));
}

#[test]
fn unknown_fields_and_control_characters_are_refused_by_name() {
    needs_root!();
    let g = Gsched::start(&[]);
    let spec = json!({
        "name": "h", "script": "#!/bin/sh\ntrue\n", "working_dir": "/tmp",
        "user_name": "", "uid": 0, "gid": 0, "held": true
    });
    match g.req("POST", "/api/v1/jobs").send_json(spec) {
        Err(ureq::Error::Status(400, r)) => {
            let text = r.into_string().unwrap();
            assert!(
                text.contains("unknown field") && text.contains("held"),
                "{text}"
            );
        }
        other => panic!("an unknown field was not refused: {other:?}"),
    }
    let nested = json!({
        "name": "h", "script": "#!/bin/sh\ntrue\n", "working_dir": "/tmp",
        "user_name": "", "uid": 0, "gid": 0, "gpu": {"mem_mb": 5}
    });
    match g.req("POST", "/api/v1/jobs").send_json(nested) {
        Err(ureq::Error::Status(400, r)) => {
            assert!(r.into_string().unwrap().contains("gpu.mem_mb"))
        }
        other => panic!("a nested unknown field was not refused: {other:?}"),
    }
    for (flag, value) in [
        ("--comment", "\u{1b}]0;owned\u{7}"),
        ("--wckey", "a\u{202e}b"),
        ("--job-name", "x\u{1b}[2J"),
        ("-o", "out\u{1b}[31m.txt"),
    ] {
        let out = g.cli("gsub", &[flag, value, "--wrap", "true"]);
        assert!(
            !out.status.success(),
            "{flag} with a control character accepted"
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("control") || err.contains("character"),
            "{flag}: {err}"
        );
    }
    // Nothing was accepted.
    let jobs = g.get("/api/v1/jobs").unwrap();
    assert_eq!(jobs["jobs"].as_array().map(|a| a.len()), Some(0), "{jobs}");
}

/// A token for `user`, minted by root.
fn token_for(g: &Gsched, user: &str) -> String {
    let t: serde_json::Value = g
        .req("POST", "/api/v1/tokens")
        .send_json(json!({"user": user, "lifetime": 600}))
        .unwrap()
        .into_json()
        .unwrap();
    t["token"].as_str().unwrap().to_string()
}

#[test]
fn a_user_may_use_only_the_qos_granted_to_them() {
    needs_root!();
    let team = TestUser::new();
    let outsider = TestUser::new();
    let s = common::slurm::Slurm::start_with(&[
        "--sim-gpus",
        "1xA100-40GB",
        "--preempt-mode",
        "requeue",
    ]);
    let g = &s.g;
    let admin = |args: &[&str]| {
        s.ok("sacctmgr", args);
    };
    admin(&["-i", "add", "qos", "normal"]);
    admin(&[
        "-i",
        "add",
        "qos",
        "teamq",
        "Priority=100",
        "Preempt=normal",
    ]);
    admin(&["-i", "add", "account", "team"]);
    admin(&["-i", "add", "user", &team.name, "Account=team"]);
    admin(&[
        "-i",
        "modify",
        "user",
        &team.name,
        "set",
        "qos+=teamq,normal",
    ]);
    let submit = |u: &TestUser, qos: Option<&str>| {
        let dir = common::users::user_dir(u);
        let mut spec = u.spec(dir.path(), "#!/bin/sh\ntrue\n");
        if let Some(q) = qos {
            spec["slurm"] = json!({ "qos": q });
        }
        common::api(
            "POST",
            &format!("{}/api/v1/jobs", g.url),
            &token_for(g, &u.name),
        )
        .send_json(spec)
    };
    // The outsider names the team's QOS: refused, with Slurm's words.
    match submit(&outsider, Some("teamq")) {
        Err(ureq::Error::Status(_, r)) => {
            let text = r.into_string().unwrap();
            assert!(text.contains("Invalid qos specification"), "{text}");
        }
        other => panic!("a QOS not granted was accepted: {other:?}"),
    }
    let jobs = g.get("/api/v1/jobs").unwrap();
    assert_eq!(jobs["jobs"].as_array().map(|a| a.len()), Some(0), "{jobs}");
    // The outsider may still use normal (granted to everyone by default).
    assert!(submit(&outsider, None).is_ok());
    // The team's user may use it.
    let r: serde_json::Value = submit(&team, Some("teamq")).unwrap().into_json().unwrap();
    let id = r["job_id"].as_u64().unwrap();
    assert_eq!(g.job(id)["slurm"]["qos"], "teamq", "{}", g.job(id));
    // Shown as granted.
    let out = s.ok(
        "sacctmgr",
        &["-P", "-n", "show", "assoc", "format=user,qos"],
    );
    assert!(
        out.contains(&format!("{}|normal,teamq", team.name)),
        "{out}"
    );
}

#[test]
fn a_shared_job_reserves_no_more_gpu_memory_than_it_stated() {
    needs_root!();
    let g = Gsched::start(&["--sim-gpus", "1xA100-40GB:1g.5gb*5"]);
    // Stated 1 GiB; its processes ask for a whole instance, then for 1 GiB
    // in two processes at once.
    let gprobe = common::bin("gprobe");
    let gprobe = gprobe.display();
    let script = g.script(
        "greedy.sh",
        &format!(
            "#!/bin/sh\n{gprobe} run --mem 4G -- true; echo big=$?\n\
             {gprobe} run --mem 1G -- sleep 2 & sleep 0.5\n\
             {gprobe} run --mem 1G -- true; echo second=$?\nwait\n\
             {gprobe} run --mem 1G -- true; echo alone=$?\n"
        ),
    );
    let id = g.submit(&["--gpu-mem", "1G", "-o", "greedy.out", &script]);
    g.wait_state(id, "COMPLETED", Duration::from_secs(60));
    let out = std::fs::read_to_string(g.work.path().join("greedy.out")).unwrap();
    assert!(out.contains("over its budget"), "{out}");
    assert!(out.contains("big=1"), "{out}");
    assert!(out.contains("second=1"), "{out}");
    assert!(out.contains("alone=0"), "{out}");
    // No reservation of the job was ever over its gibibyte (plus context).
    for t in g.ended_tasks(&format!("?job={id}"), 2) {
        assert!(t["bytes"].as_u64().unwrap() <= 1 << 30, "{t}");
    }
}

#[test]
fn a_local_users_busy_flood_leaves_the_daemons_talking() {
    needs_root!();
    let g = Gsched::start(&["--node-timeout", "4"]);
    let flooder = TestUser::new();
    let node = g.get("/api/v1/nodes").unwrap()["nodes"][0]["url"]
        .as_str()
        .unwrap()
        .trim_start_matches("http://")
        .to_string();
    // A job that runs through the flood.
    let long = g.script("long.sh", "#!/bin/sh\nsleep 12\necho survived\n");
    let running = g.submit(&[&long]);
    g.wait_state(running, "RUNNING", T);
    // 300 connections to the controller's TCP port and 80 to the node's,
    // each kept busy (a request every 0.3 s, reconnecting when closed):
    // more than every slot of the loopback client on both.
    let script = tempfile::Builder::new().suffix(".py").tempfile().unwrap();
    std::fs::write(script.path(), BUSY_FLOOD).unwrap();
    std::fs::set_permissions(
        script.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .unwrap();
    let (node_host, node_port) = node.rsplit_once(':').unwrap();
    let flood = format!(
        "exec python3 {} 120 127.0.0.1 {} 300 {node_host} {node_port} 80",
        script.path().display(),
        g.listen.rsplit_once(':').unwrap().1,
    );
    let mut attack = flooder
        .sh_cmd(&flood)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(attack.stdout.as_mut().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line.trim(), "flooding");
    // Long enough for the connections the daemons held before to idle out.
    std::thread::sleep(Duration::from_secs(3));
    // During the flood: a new job launches and ends, the node stays up.
    let short = g.script("short.sh", "#!/bin/sh\necho hello\n");
    let id = g.submit(&["-o", "short.out", &short]);
    g.wait_state(id, "COMPLETED", Duration::from_secs(15));
    // The job that was running goes on to its end: its node was never
    // given up (heartbeats every second, node timeout 4 s).
    assert_eq!(wait_output(&g, running).trim(), "survived");
    let nodes = g.get("/api/v1/nodes").unwrap();
    assert_ne!(nodes["nodes"][0]["state"], "DOWN", "{nodes}");
    assert!(
        attack.try_wait().unwrap().is_none(),
        "the flood ran throughout"
    );
    let _ = attack.kill();
    let _ = attack.wait();
}

/// `pid`'s resident memory, KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/PID/status")
}

/// Submits a held job of `script` as root, printing `m-I`.
fn submit_big(g: &Gsched, script: &str, i: usize) -> u64 {
    let body = json!({
        "name": format!("big{i}"), "script": script, "working_dir": g.work.path(),
        "user_name": "", "uid": 0, "gid": 0, "hold": true,
        "environment": {"MARK": format!("m-{i}"), "PATH": "/usr/bin:/bin"},
    });
    let r: serde_json::Value = g
        .req("POST", "/api/v1/jobs")
        .send_json(body)
        .unwrap()
        .into_json()
        .unwrap();
    r["job_id"].as_u64().expect("a job id")
}

fn script_of(g: &Gsched, id: u64) -> String {
    let v = g.get(&format!("/api/v1/jobs/{id}/script")).unwrap();
    v["script"].as_str().unwrap().to_string()
}

/// Hole 7: 200 held jobs of 1.9 MB took the controller from 19 to 419 MB.
/// Their scripts and environments now stay in the store only, and come
/// back from it for the launch (also after a restart) and for readers of
/// the script.
#[test]
fn held_jobs_keep_their_scripts_and_environments_in_the_store() {
    needs_root!();
    let mut g = Gsched::start(&[]);
    let pad = "#".repeat(1_900_000);
    let script = format!("#!/bin/sh\necho \"marker $MARK\"\nexit 0\n{pad}\n");
    // The allocator's first growth is not the jobs'.
    let first: Vec<u64> = (0..10).map(|i| submit_big(&g, &script, i)).collect();
    let before = rss_kib(g.pid());
    let rest: Vec<u64> = (10..130).map(|i| submit_big(&g, &script, i)).collect();
    let grown_mib = rss_kib(g.pid()).saturating_sub(before) / 1024;
    // 120 jobs brought 228 MB of script; held in memory they would have
    // grown the process by at least that.
    assert!(
        grown_mib < 60,
        "gsched up grew by {grown_mib} MiB for 120 held jobs of 1.9 MB"
    );
    assert_eq!(
        script_of(&g, first[3]),
        script,
        "the script is read back whole"
    );
    // After a restart too, a released job runs its own script with its own
    // environment.
    g.restart();
    let id = rest[7];
    g.req("POST", &format!("/api/v1/jobs/{id}/release"))
        .call()
        .unwrap();
    assert_eq!(wait_output(&g, id).trim(), "marker m-17");
    assert_eq!(g.job(id)["job_state"], "COMPLETED");
    assert_eq!(script_of(&g, rest[100]), script);
}
