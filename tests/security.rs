//! Attacks by local users on a root gsched, each of which worked before the
//! fixes of docs/security.md. Every test creates its own unprivileged users
//! (`useradd`) and removes them again; they need root (CI runs as root) and
//! say so when skipped.

#[macro_use]
mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::users::{user_dir, TestUser};
use common::Gsched;
use serde_json::json;

const T: Duration = Duration::from_secs(30);

fn submit(g: &Gsched, spec: serde_json::Value) -> u64 {
    let r: serde_json::Value = g
        .req("POST", "/api/v1/jobs")
        .send_json(spec)
        .unwrap()
        .into_json()
        .unwrap();
    r["job_id"].as_u64().unwrap()
}

/// Waits until a job reached any final state; returns it.
fn wait_final(g: &Gsched, id: u64) -> serde_json::Value {
    let deadline = Instant::now() + T;
    loop {
        let j = g.job(id);
        let s = j["job_state"].as_str().unwrap_or("");
        if ["COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"].contains(&s) {
            return j;
        }
        assert!(Instant::now() < deadline, "job {id} did not end: {j}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn spool_of(g: &Gsched, id: u64) -> PathBuf {
    g.state.path().join(format!("spool/node1/job-{id}"))
}

fn wait_for_file(path: &Path, what: &str) -> String {
    let deadline = Instant::now() + T;
    loop {
        if let Ok(s) = std::fs::read_to_string(path) {
            if s.contains("ready") {
                return s;
            }
        }
        assert!(Instant::now() < deadline, "{what}: {}", path.display());
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_job_can_neither_write_its_spool_nor_plant_links_where_root_writes() {
    needs_root!();
    let g = Gsched::start(&[]);
    let u = TestUser::new();
    let work = user_dir(&u);
    // A file only root may change, which a planted link would truncate.
    let victim = tempfile::tempdir().unwrap();
    let precious = victim.path().join("precious");
    std::fs::write(&precious, "keep me\n").unwrap();
    let spool = g.state.path().join("spool/node1");
    let script = format!(
        r#"#!/bin/sh
S={spool}/job-$SLURM_JOB_ID
try() {{ if "$@" 2>/dev/null; then echo "$1 $3 allowed"; else echo "$1 denied"; fi; }}
try sh -c "echo '{{}}' > $S/launch.json"
for m in cancelled timeout shepherd.pid status.json shepherd.log; do
  ln -sf {precious} $S/$m 2>/dev/null && echo "link $m allowed" || echo "link $m denied"
done
echo ready
sleep 60
"#,
        spool = spool.display(),
        precious = precious.display()
    );
    let id = submit(&g, u.spec(work.path(), &script));
    let out = wait_for_file(&work.path().join(format!("slurm-{id}.out")), "job output");
    assert!(
        !out.contains("allowed"),
        "the job changed its spool:\n{out}"
    );
    // The spool is gnoded's: its directory and files belong to root.
    let dir = std::fs::metadata(spool_of(&g, id)).unwrap();
    assert_eq!((dir.uid(), dir.mode() & 0o777), (0, 0o711));
    for f in ["launch.json", "shepherd.pid"] {
        let m = std::fs::symlink_metadata(spool_of(&g, id).join(f)).unwrap();
        assert_eq!((m.uid(), m.mode() & 0o777), (0, 0o600), "{f}");
    }
    // Cancelling writes the marker; the root file is untouched.
    g.cli("gcancel", &[&id.to_string()]);
    g.wait_state(id, "CANCELLED", T);
    assert_eq!(std::fs::read_to_string(&precious).unwrap(), "keep me\n");
}

#[test]
fn swapping_launch_specs_while_jobs_launch_never_runs_anything_as_root() {
    needs_root!();
    let g = Gsched::start(&[]);
    let u = TestUser::new();
    let work = user_dir(&u);
    // What the attacker wants root to run: it records who ran it.
    let evil = work.path().join("evil.sh");
    std::fs::write(
        &evil,
        format!("#!/bin/sh\nid -u > {}/pwned-$$\n", work.path().display()),
    )
    .unwrap();
    std::fs::set_permissions(&evil, std::fs::Permissions::from_mode(0o755)).unwrap();
    let forged = json!({
        "job_id": 1, "script": evil, "script_body": "#!/bin/sh\nid -u > /tmp/x\n",
        "argv": [], "env": {}, "cwd": "/", "stdout": "/dev/null", "stderr": "/dev/null",
        "uid": 0, "gid": 0, "user_name": "root", "drop_privileges": false,
        "start_time": 0, "time_limit": null, "umask": 18
    })
    .to_string();
    std::fs::write(work.path().join("forged.json"), &forged).unwrap();
    // The attacker: for 20 s, in a tight loop, put the forged spec into
    // every job spool it can guess (job ids are sequential).
    let spool = g.state.path().join("spool/node1");
    let mut attacker = u
        .sh_cmd(&format!(
            "exec python3 -c 'import os,time\n\
             forged=open(\"{w}/forged.json\").read()\n\
             end=time.time()+20\n\
             while time.time()<end:\n  \
               for i in range(1,41):\n    \
                 d=\"{spool}/job-%d\" % i\n    \
                 try:\n      \
                   f=open(d+\"/f.tmp\",\"w\"); f.write(forged); f.close()\n      \
                   os.rename(d+\"/f.tmp\", d+\"/launch.json\")\n    \
                 except OSError: pass'",
            spool = spool.display(),
            w = work.path().display()
        ))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    // One job at a time, so each launch meets the attacker's loop.
    let mut outs = Vec::new();
    for _ in 0..20 {
        let id = submit(&g, u.spec(work.path(), "#!/bin/sh\nid -u\n"));
        let j = wait_final(&g, id);
        let out = std::fs::read_to_string(work.path().join(format!("slurm-{id}.out")));
        outs.push((id, j["job_state"].clone(), out.ok()));
    }
    let _ = attacker.kill();
    let _ = attacker.wait();
    let pwned: Vec<_> = std::fs::read_dir(work.path())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("pwned"))
        .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
        .collect();
    assert!(pwned.is_empty(), "a forged spec ran, as uids {pwned:?}");
    for (id, state, out) in outs {
        assert_eq!(state, "COMPLETED", "job {id}");
        assert_eq!(
            out.as_deref().map(str::trim),
            Some(u.uid.to_string().as_str()),
            "job {id} ran as someone else"
        );
    }
}

#[test]
fn a_forged_pid_file_cannot_make_gnoded_kill_another_users_job() {
    needs_root!();
    let mut g = Gsched::start(&[]);
    let (alice, bob) = (TestUser::new(), TestUser::new());
    let (wa, wb) = (user_dir(&alice), user_dir(&bob));
    let long = "#!/bin/sh\necho ready\nsleep 120\n";
    let b = submit(&g, bob.spec(wb.path(), long));
    wait_for_file(&wb.path().join(format!("slurm-{b}.out")), "bob's job");
    let a = submit(&g, alice.spec(wa.path(), long));
    wait_for_file(&wa.path().join(format!("slurm-{a}.out")), "alice's job");
    // Alice points her job's pid file at bob's shepherd (its pid and start
    // time are public in /proc).
    let bob_pid = std::fs::read_to_string(spool_of(&g, b).join("shepherd.pid")).unwrap();
    let forge = alice.sh(&format!(
        "rm -f {1}/shepherd.pid; echo '{0}' > {1}/shepherd.pid",
        bob_pid.trim(),
        spool_of(&g, a).display()
    ));
    assert!(!forge.status.success(), "alice rewrote her pid file");
    // After a restart gnoded adopts both jobs as they really are.
    g.restart();
    g.cli("gcancel", &[&a.to_string()]);
    g.wait_state(a, "CANCELLED", T);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(g.job(b)["job_state"], "RUNNING", "bob's job was killed");
    let (bpid, _) = bob_pid.trim().split_once(' ').unwrap();
    assert!(Path::new(&format!("/proc/{bpid}")).exists());
    // Alice's processes did not survive her cancel.
    let left = Command::new("pgrep")
        .args(["-u", &alice.name])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&left.stdout).trim().is_empty(),
        "alice's job runs on untracked"
    );
}

#[test]
fn the_database_and_keys_are_private_and_loose_state_dirs_are_refused() {
    needs_root!();
    let g = Gsched::start(&[]);
    let u = TestUser::new();
    let work = user_dir(&u);
    let id = submit(&g, u.spec(work.path(), "#!/bin/sh\necho secret-$((6*7))\n"));
    g.wait_state(id, "COMPLETED", T);
    for f in [
        "ctld.db",
        "ctld.db-wal",
        "ctld.db-shm",
        "cluster.key",
        "jwt.key",
    ] {
        let p = g.state.path().join(f);
        let m = std::fs::metadata(&p).unwrap();
        assert_eq!(m.mode() & 0o777, 0o600, "{f}");
        let read = u.sh(&format!("cat {} >/dev/null", p.display()));
        assert!(!read.status.success(), "{f} is readable by a user");
    }
    assert_eq!(
        std::fs::metadata(g.state.path()).unwrap().mode() & 0o777,
        0o711
    );
    // A state directory others may list is refused, with the fix.
    let loose = common::state_dir();
    std::fs::set_permissions(loose.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = Command::new(common::bin("gctld"))
        .arg("--state-dir")
        .arg(loose.path())
        .args(["--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = common::stderr(&out);
    assert!(
        err.contains("has mode 755") && err.contains("chmod 711"),
        "{err}"
    );
}

#[test]
fn output_files_take_the_submitters_umask() {
    needs_root!();
    let g = Gsched::start(&[]);
    let u = TestUser::new();
    let work = user_dir(&u);
    let gsub = common::bin("gsub");
    std::fs::write(work.path().join("j.sh"), "#!/bin/sh\necho hi\n").unwrap();
    let mut modes = Vec::new();
    for mask in ["077", "022"] {
        let out = u.sh(&format!(
            "cd {w} && umask {mask} && GSCHED_URL={url} {gsub} --parsable -o out-{mask}.txt j.sh",
            w = work.path().display(),
            url = g.url,
            gsub = gsub.display()
        ));
        assert!(out.status.success(), "{out:?}");
        let id: u64 = common::stdout(&out).trim().parse().unwrap();
        g.wait_state(id, "COMPLETED", T);
        let m = std::fs::metadata(work.path().join(format!("out-{mask}.txt"))).unwrap();
        assert_eq!(m.uid(), u.uid);
        modes.push(m.mode() & 0o777);
    }
    assert_eq!(modes, vec![0o600, 0o644]);
}

#[test]
fn a_job_token_dies_with_its_job() {
    needs_root!();
    let g = Gsched::start(&[]);
    let u = TestUser::new();
    let work = user_dir(&u);
    let id = submit(
        &g,
        u.spec(
            work.path(),
            "#!/bin/sh\necho \"$GSCHED_TOKEN\"\necho ready\nsleep 60\n",
        ),
    );
    let out = wait_for_file(&work.path().join(format!("slurm-{id}.out")), "job output");
    let token = out.lines().next().unwrap().to_string();
    let whoami = |t: &str| {
        common::api("GET", &format!("{}/api/v1/whoami", g.url), t)
            .call()
            .map_err(Box::new)
    };
    let me: serde_json::Value = whoami(&token).unwrap().into_json().unwrap();
    assert_eq!(me["user"], u.name.as_str());
    g.cli("gcancel", &[&id.to_string()]);
    g.wait_state(id, "CANCELLED", T);
    match whoami(&token).map_err(|e| *e) {
        Err(ureq::Error::Status(401, r)) => {
            let body = r.into_string().unwrap();
            assert!(
                body.contains(&format!("job {id}, which has ended or was cancelled")),
                "{body}"
            );
        }
        Err(e) => panic!("unexpected answer: {e}"),
        Ok(r) => panic!("the ended job's token still works: {}", r.status()),
    }
}

#[test]
fn overflowing_numbers_and_nul_bytes_are_refused_at_submission() {
    needs_root!();
    let g = Gsched::start(&[]);
    let script = g.script("j.sh", "#!/bin/sh\ntrue\n");
    let out = g.cli("gsub", &["-t", "307445734561825861", &script]);
    assert!(!out.status.success());
    assert!(
        common::stderr(&out).contains("longer than ten years"),
        "{}",
        common::stderr(&out)
    );
    let dir = g.work.path().display().to_string();
    let refused =
        |body: serde_json::Value, says: &str| match g.req("POST", "/api/v1/jobs").send_json(body) {
            Err(ureq::Error::Status(400, r)) => {
                let text = r.into_string().unwrap();
                assert!(text.contains(says), "{text}");
            }
            other => panic!("accepted: {other:?}"),
        };
    let base = |extra: serde_json::Value| {
        let mut v = json!({"name": "j", "script": "#!/bin/sh\ntrue\n", "working_dir": dir,
            "user_name": "", "uid": 0, "gid": 0});
        v.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        v
    };
    refused(
        base(json!({"time_limit": u64::MAX})),
        "longer than the longest accepted",
    );
    refused(
        base(json!({"environment": {"A": "x\u{0}y"}})),
        "environment contains a NUL byte",
    );
    refused(
        base(json!({"argv": ["a\u{0}"]})),
        "arguments contains a NUL byte",
    );
    // Arrays the parser never makes: none (the controller once took its
    // first index and panicked), out of order, past MaxArraySize.
    refused(
        base(json!({"array": {"indices": []}})),
        "invalid array: it has no index",
    );
    refused(
        base(json!({"array": {"indices": [3, 1]}})),
        "in increasing order",
    );
    refused(
        base(json!({"array": {"indices": [0, 1001]}})),
        "above MaxArraySize-1 (1000)",
    );
    // Nothing was stored.
    let jobs = g.get("/api/v1/jobs?state=all").unwrap();
    assert_eq!(jobs["jobs"].as_array().unwrap().len(), 0, "{jobs}");
}

#[test]
fn a_retried_submission_returns_the_first_job() {
    let g = Gsched::start(&[]);
    let dir = g.work.path().display().to_string();
    let body = json!({"name": "j", "script": "#!/bin/sh\ntrue\n", "working_dir": dir,
        "user_name": "", "uid": 0, "gid": 0});
    let post = || -> u64 {
        let r: serde_json::Value = g
            .req("POST", "/api/v1/jobs")
            .set("Idempotency-Key", "retry-me-1")
            .send_json(body.clone())
            .unwrap()
            .into_json()
            .unwrap();
        r["job_id"].as_u64().unwrap()
    };
    let first = post();
    assert_eq!(post(), first);
    let jobs = g.get("/api/v1/jobs?state=all").unwrap();
    assert_eq!(jobs["jobs"].as_array().unwrap().len(), 1, "{jobs}");
}

/// Threads and open descriptors of a process.
fn threads_and_fds(pid: u32) -> (usize, usize) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let threads = status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count();
    (threads, fds)
}

fn raise_fd_limit(to: u64) {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain getrlimit/setrlimit on this process.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut r);
        r.rlim_cur = to.min(r.rlim_max);
        libc::setrlimit(libc::RLIMIT_NOFILE, &r);
    }
}

#[test]
fn connection_floods_leave_the_daemons_bounded_and_answering() {
    needs_root!();
    raise_fd_limit(8192);
    let g = Gsched::start(&[]);
    let u = TestUser::new();
    let (threads0, fds0) = threads_and_fds(g.pid());
    // 1,100 idle TCP connections to the API (loopback only).
    let addr: std::net::SocketAddr = g.listen.parse().unwrap();
    let tcp: Vec<_> = (0..1100)
        .filter_map(|_| std::net::TcpStream::connect(addr).ok())
        .collect();
    // 3,000 idle probe connections as the test user, from one process.
    let sock = g.state.path().join("run/node1.probe.sock");
    let mut prober = u
        .sh_cmd(&format!(
            "exec python3 -c 'import socket,time\n\
             s=[]\nfor i in range(3000):\n  c=socket.socket(socket.AF_UNIX)\n  \
             c.connect(\"{}\")\n  s.append(c)\nprint(len(s), flush=True)\ntime.sleep(30)'",
            sock.display()
        ))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(prober.stdout.as_mut().unwrap()),
        &mut line,
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let (threads, fds) = threads_and_fds(g.pid());
    eprintln!(
        "flood: {} TCP and {} probe connections attempted; gsched up had {threads0} threads / {fds0} fds before, {threads} / {fds} during",
        1100,
        line.trim()
    );
    // At most 256 probe threads for one uid, and far fewer descriptors
    // than connections attempted.
    assert!(
        threads <= threads0 + 256 + 8,
        "{threads} threads (from {threads0})"
    );
    assert!(
        fds <= fds0 + 256 + 256 + 64,
        "{fds} descriptors (from {fds0})"
    );
    // The controller still answers its socket.
    let mut c = std::os::unix::net::UnixStream::connect(g.state.path().join("ctld.sock")).unwrap();
    std::io::Write::write_all(
        &mut c,
        b"GET /api/v1/jobs HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .unwrap();
    let mut answer = String::new();
    std::io::Read::read_to_string(&mut c, &mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // And TCP while the flood is still held: idle connections cannot keep
    // a newcomer out (the longest idle is closed for it).
    g.wait_until("the API answers TCP during the flood", T, || {
        g.get("/healthz").is_some()
    });
    let _ = prober.kill();
    let _ = prober.wait();
    drop(tcp);
    // And TCP once the flood is gone.
    g.wait_until("the API answers again", T, || g.get("/healthz").is_some());
    g.wait_until("probe threads end", T, || {
        threads_and_fds(g.pid()).0 <= threads0 + 8
    });
}
