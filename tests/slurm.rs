//! Slurm command compatibility (issue 6, `../shared/slurm-compat.md`): the
//! shims installed by `gsched slurm-shims` against a live `gsched up`.
//! Expected texts are Slurm's own (its man pages and source: sbatch.c,
//! squeue's print.c, sacct's print.c, scancel.c), cited per check.

mod common;

use std::process::Command;
use std::time::Duration;

use common::slurm::Slurm;
use common::{stderr, stdout};

const T: Duration = Duration::from_secs(30);

#[test]
fn sbatch_scripts_options_and_output() {
    let s = Slurm::start();
    let g = &s.g;
    // Script from a relative path; extra arguments go to the script.
    g.script("args.sh", "#!/bin/sh\necho \"args: $*\"\n");
    let out = s.ok("sbatch", &["-o", "args.out", "args.sh", "one", "two words"]);
    // sbatch.c: "Submitted batch job %u\n".
    let id: u64 = out
        .strip_prefix("Submitted batch job ")
        .and_then(|r| r.strip_suffix('\n'))
        .expect(&out)
        .parse()
        .unwrap();
    g.wait_state(id, "COMPLETED", T);
    assert_eq!(s.file("args.out"), "args: one two words\n");

    // The script is copied at submit time: deleting it does not matter.
    let p = g.script(
        "gone.sh",
        "#!/bin/sh\n#SBATCH -o gone.out\necho still here\n",
    );
    let id = s.sbatch(&[&p]);
    std::fs::remove_file(&p).unwrap();
    g.wait_state(id, "COMPLETED", T);
    assert_eq!(s.file("gone.out"), "still here\n");

    // From standard input, and from /dev/stdin.
    for arg in [None, Some("/dev/stdin")] {
        let mut args = vec!["--parsable", "-o", "stdin.out"];
        args.extend(arg);
        let o = s.run("sbatch", &args, Some("#!/bin/sh\necho from stdin\n"));
        assert!(o.status.success(), "{}", stderr(&o));
        let id: u64 = stdout(&o).trim().parse().unwrap();
        g.wait_state(id, "COMPLETED", T);
        assert_eq!(s.file("stdin.out"), "from stdin\n");
    }

    // --wrap, and its refusal of script arguments.
    let id = s.sbatch(&["--wrap", "echo wrapped; exit 3", "-o", "wrap.out"]);
    let j = g.wait_state(id, "FAILED", T);
    assert_eq!(j["exit_code"], 3);
    assert_eq!(s.file("wrap.out"), "wrapped\n");
    let o = s.run("sbatch", &["--wrap", "true", "x.sh"], None);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).starts_with("sbatch: error: "), "{}", stderr(&o));

    // --parsable with --clusters prints ID;CLUSTER; a directive --parsable too.
    let o = s.ok("sbatch", &["--parsable", "-M", "gsched", "--wrap", "true"]);
    assert!(o.trim().ends_with(";gsched"), "{o}");
    let p = g.script("p.sh", "#!/bin/sh\n#SBATCH --parsable\ntrue\n");
    let o = s.ok("sbatch", &[&p]);
    o.trim().parse::<u64>().expect(&o);

    // Many options at once are accepted (-n, -c, --mem among them are
    // enforced: tests/confinement.rs).
    let p = g.script(
        "many.sh",
        "#!/bin/bash\n#SBATCH -J many -A acct --qos=high --comment 'a comment' # trailing comment\n\
         #SBATCH --mem=4G -N 1 -n 2 -c 3 --ntasks-per-node=2 -C a100\n\
         #SBATCH --exclusive --reservation=r1 --mail-type=END --mail-user=u@x --wckey=w\n\
         #SBATCH --open-mode=append --export=ALL --requeue --signal=B:USR1@60 -t 1-00:00:00\n\
         echo $SLURM_NTASKS $SLURM_CPUS_PER_TASK\n",
    );
    let id = s.sbatch(&["-o", "many.out", &p]);
    g.wait_state(id, "COMPLETED", T);
    assert_eq!(s.file("many.out"), "2 3\n");
    // Without -n (or --ntasks-per-node) Slurm sets no task count.
    let bare = s.sbatch(&[
        "-o",
        "bare.out",
        "--wrap",
        "echo n=${SLURM_NTASKS-unset} p=${SLURM_NPROCS-unset}",
    ]);
    g.wait_state(bare, "COMPLETED", T);
    assert_eq!(s.file("bare.out"), "n=unset p=unset\n");
    let acct = s.ok(
        "sacct",
        &[
            "-X",
            "-P",
            "-n",
            "-j",
            &id.to_string(),
            "-o",
            "JobName,Account,Comment,WCKey",
        ],
    );
    assert_eq!(acct, "many|acct|a comment|w\n");

    // -w chooses the node, -x excludes nodes: a job runs only where they
    // allow, and is refused, as Slurm refuses it, where no known node does.
    let on = s.sbatch(&["-w", "node1", "-x", "n9", "--wrap", "true"]);
    g.wait_state(on, "COMPLETED", T);
    let unavailable = |args: &[&str]| {
        let o = s.run("sbatch", args, None);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        assert!(
            stderr(&o).contains("Requested node configuration is not available"),
            "{args:?}: {}",
            stderr(&o)
        );
    };
    unavailable(&["-x", "node[0-1]", "--wrap", "true"]);
    // A node that is down stays a node jobs may wait for.
    s.ok(
        "scontrol",
        &["update", "NodeName=node1", "State=DOWN", "Reason=test"],
    );
    let later = s.sbatch(&["-w", "node1", "--wrap", "true"]);
    s.ok("scontrol", &["update", "NodeName=node1", "State=RESUME"]);
    g.wait_state(later, "COMPLETED", T);

    // A GPU model as the type: the (simulated) A100 serves a100; no node
    // has an H100, so that job is refused.
    let a100 = s.sbatch(&[
        "--gres=gpu:a100:1",
        "-o",
        "a100.out",
        "--wrap",
        "echo $CUDA_VISIBLE_DEVICES",
    ]);
    g.wait_state(a100, "COMPLETED", T);
    assert!(
        s.file("a100.out").starts_with("GPU-"),
        "{}",
        s.file("a100.out")
    );
    unavailable(&["--gpus=h100:1", "--wrap", "true"]);

    // One GPU per node (or per task, with one task) is the job's one GPU
    // instance: it runs isolated on the (simulated) GPU.
    for opt in ["--gpus-per-node=1", "--gpus-per-task=1"] {
        let id = s.sbatch(&[opt, "-o", "gpu.out", "--wrap", "echo $CUDA_VISIBLE_DEVICES"]);
        g.wait_state(id, "COMPLETED", T);
        assert!(
            s.file("gpu.out").starts_with("GPU-"),
            "{opt}: {}",
            s.file("gpu.out")
        );
        assert_eq!(g.job(id)["isolated"], true, "{opt}");
    }

    // Malformed input: Slurm's style, exit 1, nothing submitted.
    for (args, needle) in [
        (vec!["--bogus", "x.sh"], "unexpected argument '--bogus'"),
        (
            vec!["-t", "soon", "--wrap", "true"],
            "invalid time limit 'soon'",
        ),
        (
            vec!["--array=5-2", "--wrap", "true"],
            "invalid array specification '5-2'",
        ),
        (
            vec!["--signal=USR1@x", "--wrap", "true"],
            "Invalid --signal specification",
        ),
        (vec!["--mem=lots", "--wrap", "true"], "--mem=lots"),
        // More than the cluster can give is refused, never run with less
        // (this cluster has one node).
        (
            vec!["-N", "2", "--wrap", "true"],
            "asks for 2 nodes and 1 known",
        ),
        (
            vec!["--nodes=2-4", "--wrap", "true"],
            "asks for 2 nodes and 1 known",
        ),
        (
            vec!["-N", "2", "--gpus=2", "--wrap", "true"],
            "ask for them per node",
        ),
        (
            vec!["--gres=gpu:2", "--gpus-per-node=3", "--wrap", "true"],
            "give one count",
        ),
        (vec!["--gres=gpu:0", "--wrap", "true"], "of 0"),
        (
            vec!["-w", "node[1-2]", "--wrap", "true"],
            "asks for 2 nodes",
        ),
        (
            vec!["--gpus-per-socket=1", "--wrap", "true"],
            "by CPU socket",
        ),
        (
            vec!["--gpu-bind=map_gpu:0,1", "--wrap", "true"],
            "--gpu-bind=map_gpu:0,1",
        ),
        (
            vec!["-x", "node[1-", "--wrap", "true"],
            "unbalanced brackets",
        ),
    ] {
        let o = s.run("sbatch", &args, None);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        assert!(
            stderr(&o).starts_with("sbatch: error: ") && stderr(&o).contains(needle),
            "{args:?}: {}",
            stderr(&o)
        );
        assert_eq!(stdout(&o), "");
    }
}

#[test]
fn max_array_size_is_a_setting() {
    let s = Slurm::start_with(&["--sim-gpus", "1xA100-40GB", "--max-array-size", "5"]);
    let config = s.ok("scontrol", &["show", "config"]);
    assert!(
        config.contains("\nMaxArraySize           = 5\n"),
        "{config}"
    );
    let o = s.run("sbatch", &["--array=0-5", "--wrap", "true"], None);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("index 5 is above MaxArraySize-1 (4)"),
        "{}",
        stderr(&o)
    );
    // Far past it: the same words, not a request too large to send.
    s.refused(
        "sbatch",
        &["--array=0-3999999", "--wrap", "true"],
        "above MaxArraySize-1 (4)",
    );
    assert_eq!(s.ok("squeue", &["-h"]), "", "nothing submitted");
    s.sbatch(&["--array=0-4", "--hold", "--wrap", "true"]);
    assert_eq!(s.ok("squeue", &["-h", "-r", "-o", "%i"]).lines().count(), 5);
}

#[test]
fn arrays_ids_throttle_and_environment() {
    let s = Slurm::start();
    let g = &s.g;
    let p = g.script(
        "arr.sh",
        "#!/bin/sh\necho $SLURM_ARRAY_JOB_ID $SLURM_ARRAY_TASK_ID $SLURM_ARRAY_TASK_MIN $SLURM_ARRAY_TASK_MAX $SLURM_ARRAY_TASK_STEP $SLURM_ARRAY_TASK_COUNT\nsleep 2\n",
    );
    let a = s.sbatch(&["--array=0-6:2%1", &p]);
    // Pending tasks collapse to A_[i-j%max]; the throttle is the reason.
    // (Once the node has confirmed the first task's launch: CF before.)
    g.wait_until("the first task runs", Duration::from_secs(20), || {
        s.ok("squeue", &["-h", "-o", "%i %t"])
            .starts_with(&format!("{a}_0 R"))
    });
    let q = s.ok("squeue", &["-h", "-o", "%i %t %r"]);
    let lines: Vec<&str> = q.lines().collect();
    assert_eq!(lines[0], format!("{a}_0 R None"), "{q}");
    assert_eq!(
        lines[1],
        format!("{a}_[2,4,6%1] PD JobArrayTaskLimit"),
        "{q}"
    );
    // -r: one line per task, pending ones too.
    let r = s.ok("squeue", &["-r", "-h", "-o", "%i %t"]);
    assert_eq!(r, format!("{a}_0 R\n{a}_2 PD\n{a}_4 PD\n{a}_6 PD\n"), "{r}");
    // An id Slurm does not know is an error, not an empty list.
    let o = s.run("squeue", &["-j", "424242"], None);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("Invalid job id specified"),
        "{}",
        stderr(&o)
    );
    // One task at a time, to the end.
    g.wait_until("the array ends", Duration::from_secs(60), || {
        s.ok("squeue", &["-h"]).is_empty()
    });
    let acct = s.ok(
        "sacct",
        &[
            "-j",
            &a.to_string(),
            "-X",
            "-P",
            "-n",
            "-o",
            "JobID,State,Start,End",
        ],
    );
    let rows: Vec<Vec<&str>> = acct.lines().map(|l| l.split('|').collect()).collect();
    assert_eq!(
        rows.iter().map(|r| r[0].to_string()).collect::<Vec<_>>(),
        [0, 2, 4, 6].map(|i| format!("{a}_{i}"))
    );
    for w in rows.windows(2) {
        assert!(w[0][3] <= w[1][2], "tasks overlapped under %1: {acct}");
    }
    // Default output file slurm-%A_%a.out and the SLURM_ARRAY_* variables.
    assert_eq!(
        s.file(&format!("slurm-{a}_4.out")),
        format!("{a} 4 0 6 2 4\n")
    );

    // A_i and the array id in scancel.
    let b = s.sbatch(&["--array=1-3", "--wrap", "sleep 30"]);
    g.wait_until("tasks run", T, || {
        s.ok("squeue", &["-h", "-t", "R"]).lines().count() == 3
    });
    s.ok("scancel", &[&format!("{b}_2")]);
    // CANCELLED at once, completing (still listed by squeue) until its
    // processes are gone.
    g.wait_until("one task cancelled and gone", T, || {
        s.ok("squeue", &["-h", "-o", "%i"]) == format!("{b}_1\n{b}_3\n")
    });
    g.wait_until("one task cancelled", T, || {
        s.ok(
            "sacct",
            &[
                "-X",
                "-n",
                "-P",
                "-o",
                "JobID,State",
                "-j",
                &format!("{b}_2"),
            ],
        )
        .contains("CANCELLED")
    });
    assert_eq!(
        s.ok("squeue", &["-h", "-o", "%i"]),
        format!("{b}_1\n{b}_3\n")
    );
    s.ok("scancel", &[&b.to_string()]);
    g.wait_until("all cancelled", T, || s.ok("squeue", &["-h"]).is_empty());
}

#[test]
fn squeue_sacct_scancel_sinfo_scontrol_formats() {
    let s = Slurm::start();
    let g = &s.g;
    // squeue with no jobs: the header only, exit 0, nothing on stderr.
    // Default format "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R" (squeue man page).
    assert_eq!(
        s.ok("squeue", &[]),
        "             JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)\n"
    );
    assert_eq!(s.ok("squeue", &["-h"]), "");
    // USR1 is ignored (inherited by sleep), so the signals below leave it running.
    let run = s.sbatch(&["-J", "sleepy", "--wrap", "trap '' USR1; sleep 60"]);
    g.wait_state(run, "RUNNING", T);
    let user = g.job(run)["user_name"].as_str().unwrap().to_string();
    let o = s.ok("squeue", &["-h", "-o", "<%i|%T|%t|%j|%u|%D|%P|%N|%C|%b>"]);
    assert_eq!(
        o,
        format!("<{run}|RUNNING|R|sleepy|{user}|1|gpu|node1|1|N/A>\n")
    );
    assert_eq!(
        s.ok("squeue", &["-o", "%.5i", "-j", &run.to_string()]),
        format!("JOBID\n{:>5}\n", run)
    );
    assert_eq!(s.ok("squeue", &["-h", "-n", "nosuch"]), "");
    assert_eq!(
        s.ok("squeue", &["-h", "--me", "-o", "%i"]),
        format!("{run}\n")
    );
    assert_eq!(s.ok("squeue", &["-h", "-t", "PD", "-o", "%i"]), "");
    // Slurm's states gsched never produces are valid filters matching nothing.
    assert_eq!(s.ok("squeue", &["-h", "-t", "CG,S", "-o", "%i"]), "");
    assert_eq!(
        s.ok("squeue", &["-h", "-t", "R,CG", "-o", "%i"]),
        format!("{run}\n")
    );
    let o = s.run("squeue", &["-t", "BOGUS"], None);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        s.ok("squeue", &["--only-job-state", "-h"]),
        format!("{run} RUNNING\n")
    );

    // scancel: signal forms, unknown ids, finished jobs.
    for args in [
        vec!["--signal=USR1".to_string(), run.to_string()],
        vec![run.to_string(), "--signal".into(), "SIGUSR1".into()],
        vec!["-s".into(), "10".into(), run.to_string()],
    ] {
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        s.ok("scancel", &a);
    }
    // scancel.c: "Kill job error on job id %s: %s" with "Invalid job id specified".
    let o = s.run("scancel", &["999999"], None);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stderr(&o),
        "scancel: error: Kill job error on job id 999999: Invalid job id specified\n"
    );
    s.ok("scancel", &[&run.to_string()]);
    g.wait_state(run, "CANCELLED", T);
    assert_eq!(
        s.ok("scancel", &[&run.to_string()]),
        "",
        "a finished job: silent"
    );

    // sacct: parsable2 has no trailing |, parsable has one; .batch rows.
    let done = s.sbatch(&["-J", "ok", "--wrap", "exit 0"]);
    g.wait_state(done, "COMPLETED", T);
    let ids = format!("{run},{done}");
    assert_eq!(
        s.ok("sacct", &["-j", &ids, "-o", "JobID,JobName,State,ExitCode", "--parsable2"]),
        format!(
            "JobID|JobName|State|ExitCode\n{run}|sleepy|CANCELLED by {uid}|0:15\n{run}.batch|batch|CANCELLED by {uid}|0:15\n{done}|ok|COMPLETED|0:0\n{done}.batch|batch|COMPLETED|0:0\n",
            uid = g.job(run)["user_id"]
        )
    );
    assert_eq!(
        s.ok(
            "sacct",
            &[
                "-X",
                "-n",
                "-j",
                &done.to_string(),
                "-o",
                "jobidraw,state",
                "-p"
            ]
        ),
        format!("{done}|COMPLETED|\n")
    );
    // Fixed-width output: JobID left in 12, others right; %W sets widths.
    let t = s.ok(
        "sacct",
        &[
            "-X",
            "-j",
            &done.to_string(),
            "-o",
            "JobID,State%12,JobName%-4",
        ],
    );
    assert_eq!(
        t,
        format!("JobID               State JobN \n------------ ------------ ---- \n{done:<12}    COMPLETED ok   \n")
    );
    let o = s.run("sacct", &["--bogus"], None);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).starts_with("sacct: error: "), "{}", stderr(&o));
    let o = s.run("sacct", &["-o", "JobID,Nope"], None);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stderr(&o),
        "sacct: error: Invalid field requested: \"Nope\"\n"
    );

    // sinfo: the default partition marked *.
    assert_eq!(s.ok("sinfo", &["-o", "%P"]), "PARTITION\ngpu*\n");
    let o = s.ok("sinfo", &[]);
    assert!(
        o.starts_with(
            "PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST\ngpu*         up   infinite      1 "
        ),
        "{o}"
    );
    assert!(s.ok("sinfo", &["-N", "-h"]).starts_with("node1 "));
    // sinfo's own letters (%c CPUs, %G GRES), not squeue's.
    let cpus = s.ok("sinfo", &["-N", "-h", "-o", "%N|%c|%G"]);
    assert!(
        cpus.starts_with("node1|") && cpus.ends_with("|(null)\n"),
        "{cpus}"
    );
    let o = s.run("sinfo", &["-o", "%Z"], None);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("Invalid node format specification '%Z'"),
        "{}",
        stderr(&o)
    );

    // scontrol.
    let c = s.ok("scontrol", &["show", "config"]);
    assert!(c.contains("\nMinJobAge              = 300 sec\n"), "{c}");
    assert!(c.contains("\nMaxArraySize           = 1001\n"), "{c}");
    let j = s.ok("scontrol", &["show", "job", &done.to_string()]);
    assert!(j.starts_with(&format!("JobId={done} JobName=ok\n")), "{j}");
    assert!(j.contains("JobState=COMPLETED"), "{j}");
    // The fields Slurm 22.05 prints that clients read (it ran as root).
    for field in [
        "\n   UserId=root(0) GroupId=root(0) ",
        "\n   Priority=",
        " Requeue=1 ",
        "\n   NumNodes=1 NumCPUs=1 NumTasks=1 CPUs/Task=1 ",
        "\n   Command=(null)\n",
        "\n   StdIn=/dev/null\n",
        "\n   BatchHost=node1\n",
    ] {
        assert!(j.contains(field), "{field:?} missing:\n{j}");
    }
    let o = s.run("scontrol", &["show", "job", "424242"], None);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(stderr(&o), "scontrol: error: Invalid job id specified\n");
    let o = s.run("scontrol", &["reboot"], None);
    assert_eq!(o.status.code(), Some(1));
    // Hostlists, as job scripts use them.
    assert_eq!(
        s.ok("scontrol", &["show", "hostnames", "n[1-3],gpu[09-10]"]),
        "n1\nn2\nn3\ngpu09\ngpu10\n"
    );
    assert_eq!(
        s.ok("scontrol", &["show", "hostlist", "n1,n2,n3,login"]),
        "n[1-3],login\n"
    );
    let o = s.run("scontrol", &["show", "hostnames", "n[1-"], None);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("unbalanced brackets"), "{}", stderr(&o));
    // Inside a job, its own node list.
    let id = s.sbatch(&["-o", "hosts.out", "--wrap", "scontrol show hostnames"]);
    g.wait_state(id, "COMPLETED", T);
    assert_eq!(s.file("hosts.out"), "node1\n");

    // Without accounts, sacctmgr and sshare show only the root.
    assert_eq!(s.ok("sacctmgr", &["-P", "-n", "show", "account"]), "");
    assert!(s
        .ok("sshare", &["-P", "-n"])
        .starts_with("root||1|1.000000|0|"));
    // Slurm's version form on every command; the controller's ping.
    for c in ["sbatch", "squeue", "srun", "sacctmgr", "scontrol"] {
        assert_eq!(s.ok(c, &["-V"]), "slurm 25.11.0\n", "{c}");
    }
    assert_eq!(s.ok("sinfo", &["--version"]), "slurm 25.11.0\n");
    assert!(s.ok("scontrol", &["ping"]).ends_with(" is UP\n"));
    assert_eq!(s.ok("scontrol", &["show", "hostnames", "[]"]), "");
    // --json in Slurm's data_parser shape, from the slurmrestd endpoints.
    let nodes: serde_json::Value =
        serde_json::from_str(&s.ok("scontrol", &["show", "nodes", "--json", "-F"])).unwrap();
    assert_eq!(nodes["nodes"][0]["name"], "node1", "{nodes}");
    assert_eq!(nodes["meta"]["slurm"]["version"]["major"], "25");
    let jobs: serde_json::Value =
        serde_json::from_str(&s.ok("scontrol", &["--json", "-d", "-a", "show", "jobs"])).unwrap();
    assert!(
        jobs["jobs"].as_array().is_some_and(|j| !j.is_empty()),
        "{jobs}"
    );
    assert!(s
        .ok("scontrol", &["show", "node", "node1"])
        .starts_with("NodeName=node1 "));
    assert_eq!(s.ok("scontrol", &["-o", "show", "node"]).lines().count(), 1);
    assert!(s.ok("sacct", &["-e"]).starts_with("JobID "));
    assert!(s.ok("sstat", &["--helpformat"]).starts_with("JobID "));
    for c in ["squeue", "sbatch", "scontrol", "sacctmgr"] {
        assert!(
            s.ok(c, &["--usage"]).to_lowercase().contains("usage"),
            "{c}"
        );
    }
    // `-h` leaves the header out, as Slurm's sshare takes it.
    assert_eq!(s.ok("sshare", &["-P", "-h"]), s.ok("sshare", &["-P", "-n"]));

    // A reader that goes away (`| head -1` done reading) ends the command
    // quietly, by SIGPIPE as Slurm's do: no panic, no message.
    let path = format!(
        "{}:{}",
        s.shims.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let o = g.run_program(
        std::path::Path::new("/bin/bash"),
        &[
            "-c",
            "for c in 'scontrol show job' 'squeue' 'sacct'; do $c | :; echo \"$c ${PIPESTATUS[0]}\" >&2; done",
        ],
        g.work.path(),
        None,
        &[("PATH", path)],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !err.contains("panicked") && !err.contains("Broken pipe"),
        "{err}"
    );
    for line in err.lines() {
        assert!(line.ends_with(" 141") || line.ends_with(" 0"), "{err}");
    }
}

#[test]
fn accounts_and_fair_share_through_sacctmgr_and_sshare() {
    let mut s = Slurm::start_with(&[
        "--sim-gpus",
        "1xA100-40GB",
        "--priority-type",
        "multifactor",
    ]);
    let g = &s.g;
    let me = String::from_utf8(Command::new("id").arg("-un").output().unwrap().stdout)
        .unwrap()
        .trim()
        .to_string();
    s.ok(
        "sacctmgr",
        &["-i", "add", "account", "physics", "Fairshare=3"],
    );
    s.ok(
        "sacctmgr",
        &["-i", "add", "account", "bio", "Description=life"],
    );
    let user = me.clone();
    s.ok(
        "sacctmgr",
        &[
            "-i",
            "add",
            "user",
            &user,
            "Account=physics,bio",
            "DefaultAccount=physics",
        ],
    );
    assert_eq!(
        s.ok(
            "sacctmgr",
            &[
                "-P",
                "-n",
                "show",
                "assoc",
                "format=Account,User,Share,ParentName"
            ]
        ),
        format!("bio||1|root\nbio|{me}|1|\nphysics||3|root\nphysics|{me}|1|\n")
    );
    // Bad changes are refused with the reason.
    let o = s.run("sacctmgr", &["add", "account", "physics"], None);
    assert!(
        stderr(&o).contains("account physics already exists"),
        "{}",
        stderr(&o)
    );
    let o = s.run("sacctmgr", &["delete", "account", "physics"], None);
    assert!(
        stderr(&o).contains("has sub-accounts or users"),
        "{}",
        stderr(&o)
    );
    // A job may name only one of its user's accounts; without -A, the
    // default is recorded.
    let o = s.run("sbatch", &["-A", "chemistry", "--wrap", "true"], None);
    assert!(
        stderr(&o).contains("Invalid account or account/partition combination specified"),
        "{}",
        stderr(&o)
    );
    let id = s.sbatch(&["--wrap", "sleep 2"]);
    let bio = s.sbatch(&["-A", "bio", "--wrap", "true"]);
    g.wait_state(id, "COMPLETED", T);
    g.wait_state(bio, "COMPLETED", T);
    assert_eq!(
        s.ok(
            "sacct",
            &["-j", &id.to_string(), "-X", "-n", "-P", "-o", "Account"]
        ),
        "physics\n"
    );
    // Its use is charged to physics: that association's factor falls.
    let share = s.ok("sshare", &["-P", "-n", "-u", &user]);
    let line = |acct: &str| {
        share
            .lines()
            .find(|l| l.starts_with(&format!("{acct}|{me}|")))
            .unwrap_or_else(|| panic!("{acct} in {share}"))
            .split('|')
            .map(String::from)
            .collect::<Vec<_>>()
    };
    let (phys, life) = (line("physics"), line("bio"));
    let usage: f64 = phys[4].parse().unwrap();
    assert!(usage >= 1.0, "{share}");
    let factor = |l: &[String]| l[6].parse::<f64>().unwrap();
    assert!(factor(&phys) < factor(&life), "{share}");
    // Accounts and usage survive a controller crash.
    s.g.restart();
    s.g.wait_until("gsched is back", T, || s.g.get("/healthz").is_some());
    let again = s.ok("sshare", &["-P", "-n", "-u", &user]);
    assert!(again.contains(&format!("physics|{me}|1|")), "{again}");
    let after: f64 = again
        .lines()
        .find(|l| l.starts_with(&format!("physics|{me}|")))
        .and_then(|l| l.split('|').nth(4))
        .and_then(|u| u.parse().ok())
        .unwrap();
    assert!(after > 0.0 && after <= usage, "{again}");
}

/// Two jobs with `args`, the first sleeping 3 s: the second waits with
/// `reason` while the first runs, then runs.
fn second_waits(s: &Slurm, args: &[&str], reason: &str) {
    let g = &s.g;
    let with = |script: &'static str| {
        let mut all = args.to_vec();
        all.extend(["--wrap", script]);
        s.sbatch(&all)
    };
    let (a, b) = (with("sleep 3"), with("true"));
    g.wait_state(a, "RUNNING", T);
    g.wait_until(&format!("the second job waits ({reason})"), T, || {
        g.job(b)["state_reason"].as_str() == Some(reason)
    });
    g.wait_state(b, "COMPLETED", T);
}

#[test]
fn fair_tree_ranks_associations_by_their_accounts_usage() {
    let s = Slurm::start_with(&[
        "--sim-gpus",
        "1xA100-40GB",
        "--priority-type",
        "multifactor",
        "--fair-tree",
    ]);
    let me = String::from_utf8(Command::new("id").arg("-un").output().unwrap().stdout)
        .unwrap()
        .trim()
        .to_string();
    s.ok("sacctmgr", &["-i", "add", "account", "physics,bio"]);
    s.ok(
        "sacctmgr",
        &[
            "-i",
            "add",
            "user",
            &me,
            "Account=physics,bio",
            "DefaultAccount=physics",
        ],
    );
    let id = s.sbatch(&["--wrap", "sleep 1"]);
    s.g.wait_state(id, "COMPLETED", T);
    // physics has used its share, bio nothing: bio's association ranks
    // first (factor 1), physics's second of two (0.5).
    let share = s.ok("sshare", &["-P", "-n", "-u", &me]);
    let factor = |acct: &str| -> String {
        share
            .lines()
            .find(|l| l.starts_with(&format!("{acct}|{me}|")))
            .and_then(|l| l.split('|').nth(6))
            .unwrap_or_else(|| panic!("{acct} in {share}"))
            .to_string()
    };
    assert_eq!(factor("bio").parse::<f64>().unwrap(), 1.0, "{share}");
    assert_eq!(factor("physics").parse::<f64>().unwrap(), 0.5, "{share}");
}

/// `sacctmgr -i modify account physics set SETTINGS...`.
fn set_physics(s: &Slurm, settings: &[&str]) {
    let mut args = vec!["-i", "modify", "account", "physics", "set"];
    args.extend_from_slice(settings);
    s.ok("sacctmgr", &args);
}

/// `sacctmgr -P -n show ENTITY format=FORMAT`.
fn shown(s: &Slurm, entity: &str, format: &str) -> String {
    s.ok(
        "sacctmgr",
        &["-P", "-n", "show", entity, &format!("format={format}")],
    )
}

#[test]
fn association_limits_through_sacctmgr() {
    let s = Slurm::start_with(&["--sim-gpus", "2xA100-40GB"]);
    let me = String::from_utf8(Command::new("id").arg("-un").output().unwrap().stdout)
        .unwrap()
        .trim()
        .to_string();
    s.ok(
        "sacctmgr",
        &["-i", "add", "account", "physics", "GrpJobs=5"],
    );
    s.ok("sacctmgr", &["-i", "add", "user", &me, "Account=physics"]);
    s.ok(
        "sacctmgr",
        &["-i", "modify", "user", &me, "set", "MaxJobs=1"],
    );
    assert_eq!(
        shown(&s, "assoc", "Account,User,GrpJobs,MaxJobs"),
        format!("physics||5|\nphysics|{me}||1\n")
    );
    // One job of the association at a time: the second waits.
    second_waits(&s, &[], "AssocMaxJobsLimit");
    // Larger alone than the account's GrpTRES: refused, naming it.
    set_physics(&s, &["GrpTRES=gres/gpu=1"]);
    s.refused(
        "sbatch",
        &["--gres=gpu:2", "--wrap", "true"],
        "account physics allows in all at most 1 GPUs",
    );
    // -1 clears a limit.
    set_physics(&s, &["GrpJobs=-1"]);
    assert!(shown(&s, "account", "Account,GrpJobs,GrpTRES").contains("physics||gres/gpu=1\n"));
    // MaxTRES: what one job may ask for.
    set_physics(&s, &["GrpTRES=-1", "MaxTRES=gres/gpu=1"]);
    s.refused(
        "sbatch",
        &["--gres=gpu:2", "--wrap", "true"],
        "allows a job at most 1 GPUs (MaxTRES)",
    );
    // MaxWall: a longer limit is refused; a job without one gets it.
    set_physics(&s, &["MaxWall=30"]);
    assert!(shown(&s, "assoc", "Account,User,MaxWall").contains("physics||00:30:00\n"));
    s.refused(
        "sbatch",
        &["-t", "60", "--wrap", "true"],
        "allows 30 minutes at most (MaxWall)",
    );
    let id = s.sbatch(&["-H", "--wrap", "true"]);
    assert!(s
        .ok("scontrol", &["show", "job", &id.to_string()])
        .contains("TimeLimit=00:30:00"));
}

#[test]
fn qos_limits_and_priorities_through_sacctmgr() {
    let s = Slurm::start_with(&[
        "--sim-gpus",
        "1xA100-40GB",
        "--priority-type",
        "multifactor",
    ]);
    let g = &s.g;
    s.ok(
        "sacctmgr",
        &[
            "-i",
            "add",
            "qos",
            "normal",
            "MaxJobsPerUser=1",
            "MaxWall=10",
        ],
    );
    s.ok("sacctmgr", &["-i", "add", "qos", "high", "Priority=100"]);
    assert_eq!(
        s.ok("sacctmgr", &["-P", "-n", "show", "qos"]),
        "high|100||||||||cluster|||\nnormal|0|00:10:00|1||||||cluster|||\n"
    );
    // Over MaxWall, or an unknown QOS: refused with the reason. Without a
    // time limit a job gets MaxWall, as in Slurm.
    let o = s.run("sbatch", &["-t", "30", "--wrap", "true"], None);
    assert!(
        stderr(&o).contains("allows 10 minutes at most (MaxWall)"),
        "{}",
        stderr(&o)
    );
    let unlimited = s.sbatch(&["-H", "--wrap", "true"]);
    assert!(s
        .ok("scontrol", &["show", "job", &unlimited.to_string()])
        .contains("TimeLimit=00:10:00"));
    s.ok("scancel", &[&unlimited.to_string()]);
    let o = s.run("sbatch", &["--qos", "gold", "--wrap", "true"], None);
    assert!(
        stderr(&o).contains("Invalid qos specification"),
        "{}",
        stderr(&o)
    );
    // One job at a time under normal: the second waits with Slurm's reason.
    let a = s.sbatch(&["-t", "5", "--wrap", "sleep 3"]);
    let b = s.sbatch(&["-t", "5", "--wrap", "true"]);
    g.wait_state(a, "RUNNING", T);
    g.wait_until("the second job waits for its QOS", T, || {
        s.ok("squeue", &["-h", "-j", &b.to_string(), "-o", "%r"])
            .trim()
            == "QOSMaxJobsPerUserLimit"
    });
    g.wait_state(b, "COMPLETED", T);
    assert_eq!(
        s.ok(
            "sacct",
            &["-j", &b.to_string(), "-X", "-n", "-P", "-o", "QOS"]
        ),
        "normal\n"
    );
    // -1 clears a limit; settings gsched does not have are refused, not
    // ignored.
    s.ok(
        "sacctmgr",
        &["-i", "modify", "qos", "normal", "set", "MaxJobsPerUser=-1"],
    );
    assert!(s
        .ok("sacctmgr", &["-P", "-n", "show", "qos"])
        .contains("normal|0|00:10:00||||||"));
    let o = s.run(
        "sacctmgr",
        &["-i", "add", "qos", "x", "PreemptMode=gang"],
        None,
    );
    assert!(stderr(&o).contains("'gang'"), "{}", stderr(&o));
    let o = s.run(
        "sacctmgr",
        &["-i", "add", "qos", "x", "GraceTime=soon"],
        None,
    );
    assert!(stderr(&o).contains("expected seconds"), "{}", stderr(&o));
    // gsched's own: a GPU time quota and the latency-critical flag.
    s.ok(
        "sacctmgr",
        &[
            "-i",
            "add",
            "qos",
            "serve",
            "GpuShare=0.2:0.5",
            "Flags=LatencyCritical",
        ],
    );
    assert!(s
        .ok("sacctmgr", &["-P", "-n", "show", "qos"])
        .contains("serve|0||||||||cluster|0.2:0.5|LatencyCritical|\n"));
    let o = s.run(
        "sacctmgr",
        &["-i", "add", "qos", "y", "Flags=DenyOnLimit"],
        None,
    );
    assert!(
        stderr(&o).contains("LatencyCritical only"),
        "{}",
        stderr(&o)
    );
    let o = s.run(
        "sacctmgr",
        &["-i", "add", "qos", "y", "GpuShare=0.5:0.2"],
        None,
    );
    assert!(
        stderr(&o).contains("at least the request"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn mig_profile_and_gpu_memory_limits_through_sacctmgr() {
    let s = Slurm::start_with(&["--sim-gpus", "1xA100-40GB:1g.5gb*4"]);
    s.ok(
        "sacctmgr",
        &[
            "-i",
            "add",
            "qos",
            "normal",
            "MaxTRESPerUser=gres/gpu:1g.5gb=1,gres/gpumem=8G",
        ],
    );
    assert!(s
        .ok("sacctmgr", &["-P", "-n", "show", "qos"])
        .contains("normal|0|||||gres/gpu:1g.5gb=1,gres/gpumem=8192M|"));
    // One 1g.5gb instance at a time: the second job waits (GRES reason).
    second_waits(&s, &["--gres=gpu:1g.5gb:1"], "QOSMaxGRESPerUser");
    // More GPU memory than the user may have at once is refused.
    s.refused(
        "sbatch",
        &["--gres=gpu:3", "--gpu-mem=3G", "--wrap", "true"],
        "8192 MiB of GPU memory",
    );
    // Stated GPU time shares: 0.6 of a GPU per user; a second 0.5 waits.
    s.ok(
        "sacctmgr",
        &[
            "-i",
            "modify",
            "qos",
            "normal",
            "set",
            "MaxTRESPerUser=gres/gpushare=0.6",
        ],
    );
    second_waits(&s, &["--gpu-share=0.5"], "QOSMaxGRESPerUser");
    // A limit gsched cannot count is refused by name.
    s.refused(
        "sacctmgr",
        &[
            "-i",
            "modify",
            "qos",
            "normal",
            "set",
            "GrpTRES=gres/gpu:fast=1",
        ],
        "gres/gpu:fast",
    );
}

/// A gsched preempting by `mode`, with QOS `low` (its settings `low`)
/// and `high` (which may preempt it); the GPU's one instance goes to a low
/// job running `low_script` (it writes `low start` first), then a high job
/// is submitted. Returns the Slurm, the low job and the high job.
fn low_job_then_high(mode: &str, low: &[&str], low_script: &str) -> (Slurm, u64, u64) {
    let s = Slurm::start_with(&["--sim-gpus", "1xA100-40GB", "--preempt-mode", mode]);
    let mut add = vec!["-i", "add", "qos", "low"];
    add.extend_from_slice(low);
    s.ok("sacctmgr", &add);
    s.ok(
        "sacctmgr",
        &["-i", "add", "qos", "high", "Priority=100", "Preempt=low"],
    );
    let low = s.sbatch(&[
        "--qos=low",
        "--gres=gpu:1",
        "--requeue",
        "-o",
        "low.out",
        "--open-mode=append",
        "--wrap",
        low_script,
    ]);
    s.g.wait_until("the low job started", T, || {
        s.file("low.out").contains("low start")
    });
    let high = s.sbatch(&[
        "--qos=high",
        "--gres=gpu:1",
        "-o",
        "high.out",
        "--wrap",
        "echo high ran",
    ]);
    (s, low, high)
}

/// The high job ran and the low one went back to the queue and runs again.
fn high_ran_and_low_runs_again(s: &Slurm, low: u64, high: u64) {
    let g = &s.g;
    g.wait_state(high, "COMPLETED", T);
    assert_eq!(s.file("high.out"), "high ran\n");
    g.wait_until("the low job runs again", T, || {
        g.job(low)["restart_cnt"].as_u64() == Some(1) && g.job(low)["job_state"] == "RUNNING"
    });
    let events = s.ok("scontrol", &["show", "job", &low.to_string()]);
    assert!(events.contains("Restarts=1"), "{events}");
    s.ok("scancel", &[&low.to_string()]);
}

#[test]
fn a_higher_qos_preempts_and_the_preempted_job_is_requeued() {
    let (s, low, high) = low_job_then_high("requeue", &[], "echo low start; sleep 60");
    assert!(s
        .ok("sacctmgr", &["-P", "-n", "show", "qos"])
        .contains("high|100|||||||low|cluster|||\n"));
    high_ran_and_low_runs_again(&s, low, high);
}

#[test]
fn a_job_cancelled_for_a_higher_qos_ends_preempted() {
    let (s, low, high) = low_job_then_high("cancel", &[], "echo low start; sleep 60");
    s.g.wait_state(low, "PREEMPTED", T);
    s.g.wait_state(high, "COMPLETED", T);
    assert_eq!(s.file("high.out"), "high ran\n");
    let row = s.ok(
        "sacct",
        &[
            "-n",
            "-X",
            "-P",
            "-j",
            &low.to_string(),
            "-o",
            "JobID,State",
        ],
    );
    assert_eq!(row, format!("{low}|PREEMPTED\n"));
    assert_eq!(
        s.ok("sacct", &["-n", "-X", "-s", "PR", "-o", "JobID"])
            .trim(),
        low.to_string()
    );
}

#[test]
fn a_higher_qos_shared_jobs_task_preempts_a_shared_job_for_gpu_memory() {
    // One 1g.5gb instance (4.75 GiB): a low shared job reserves 4 GiB;
    // a high one's 2 GiB task waits, and the low job is requeued for it.
    let s = Slurm::start_with(&[
        "--sim-gpus",
        "1xA100-40GB:1g.5gb",
        "--preempt-mode",
        "requeue",
    ]);
    let g = &s.g;
    s.ok("sacctmgr", &["-i", "add", "qos", "low"]);
    s.ok(
        "sacctmgr",
        &["-i", "add", "qos", "high", "Priority=100", "Preempt=low"],
    );
    let gprobe = common::bin("gprobe");
    let gprobe = gprobe.display();
    let low = s.sbatch(&[
        "--qos=low",
        "--requeue",
        "-o",
        "low.out",
        "--open-mode=append",
        "--wrap",
        &format!("echo low start; exec {gprobe} run --mem 4G --warps 100 -- sleep 120"),
    ]);
    g.wait_until("the low job's task is placed", T, || {
        s.file("low.out").contains("low start")
            && g.get(&format!("/api/v1/tasks?job={low}"))
                .is_some_and(|v| v["tasks"].as_array().is_some_and(|t| !t.is_empty()))
    });
    let high = s.sbatch(&[
        "--qos=high",
        "-o",
        "high.out",
        "--wrap",
        &format!("{gprobe} run --mem 2G --warps 100 -- echo high ran"),
    ]);
    high_ran_and_low_runs_again(&s, low, high);
}

#[test]
fn a_preempted_job_gets_sigterm_and_its_grace_time_first() {
    // The low job notes SIGTERM and goes on: it keeps its GPU through its
    // grace time, then is requeued and the high job runs.
    let (s, low, high) = low_job_then_high(
        "requeue",
        &["GraceTime=3"],
        "trap 'echo got TERM' TERM; echo low start; while :; do sleep 0.2; done",
    );
    assert!(s
        .ok("sacctmgr", &["-P", "-n", "show", "qos"])
        .lines()
        .any(|l| l.starts_with("low|") && l.ends_with("|00:00:03")));
    s.g.wait_until("the low job got SIGTERM", T, || {
        s.file("low.out").contains("got TERM")
    });
    assert_eq!(s.g.job(low)["job_state"], "RUNNING", "in its grace time");
    assert_eq!(s.g.job(high)["job_state"], "PENDING");
    high_ran_and_low_runs_again(&s, low, high);
}

#[test]
fn srun_inside_and_outside_a_job() {
    let s = Slurm::start();
    let g = &s.g;
    // Inside: -n tasks with ranks, per-task output files, highest status.
    let p = g.script(
        "steps.sh",
        "#!/bin/sh\n#SBATCH -n 3 -o batch.out\n\
         srun --unbuffered --output task-%j-%t.out sh -c 'echo rank $SLURM_PROCID of $SLURM_NTASKS local $SLURM_LOCALID'\n\
         echo srun=$?\n\
         srun -n 2 sh -c 'exit $((SLURM_PROCID + 4))'\n\
         echo srun=$?\n\
         env -i PATH=\"$PATH\" GSCHED_URL=\"$GSCHED_URL\" SLURM_JOB_ID=$SLURM_JOB_ID srun sh -c 'echo bare $SLURM_NTASKS'\n\
         echo from-stdin | srun -n 1 cat\n",
    );
    let id = s.sbatch(&[&p]);
    g.wait_state(id, "COMPLETED", T);
    for r in 0..3 {
        assert_eq!(
            s.file(&format!("task-{id}-{r}.out")),
            format!("rank {r} of 3 local {r}\n")
        );
    }
    // Each task that ends badly is told on srun's stderr, as Slurm does.
    let batch = s.file("batch.out");
    for rank in [0, 1] {
        let told = format!(
            "srun: error: node1: task {rank}: Exited with exit code {}\n",
            rank + 4
        );
        assert!(batch.contains(&told), "{batch}");
    }
    let rest: String = batch
        .lines()
        .filter(|l| !l.starts_with("srun: error: node1: task"))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(rest, "srun=0\nsrun=5\nbare 3\nbare 3\nbare 3\nfrom-stdin\n");
    // Each srun is a step that sacct shows (sacct's ID.N rows).
    assert_eq!(
        s.ok("sacct", &["-j", &id.to_string(), "-P", "-o", "JobID,JobName,State,ExitCode"]),
        format!(
            "JobID|JobName|State|ExitCode\n{id}|steps.sh|COMPLETED|0:0\n{id}.batch|batch|COMPLETED|0:0\n\
             {id}.0|sh|COMPLETED|0:0\n{id}.1|sh|FAILED|5:0\n{id}.2|sh|COMPLETED|0:0\n{id}.3|cat|COMPLETED|0:0\n"
        )
    );
    // --label, --kill-on-bad-exit (the killed task's 128+9 is the highest
    // status, as Slurm's srun reports it), -w and --ntasks-per-node within
    // the job's one node.
    let p = g.script(
        "more.sh",
        "#!/bin/sh\n#SBATCH -n 2 -o more.out\n\
         srun -l sh -c 'echo hi; echo err >&2' 2>&1 | sort\n\
         srun -K -n 2 sh -c 'if [ $SLURM_PROCID = 0 ]; then exit 3; fi; sleep 300'\n\
         echo kill=$?\n\
         srun -w node1 --ntasks-per-node=1 sh -c 'echo one $SLURM_NTASKS'\n\
         srun -w node9 true || echo refused\n",
    );
    let id = s.sbatch(&[&p]);
    g.wait_state(id, "COMPLETED", T);
    assert_eq!(
        s.file("more.out"),
        "0: err\n0: hi\n1: err\n1: hi\nsrun: error: node1: task 0: Exited with exit code 3\nkill=137\none 1\nsrun: error: -w node9: the job's allocation is node node1 alone\nrefused\n"
    );

    // Outside a job: submits, waits, prints the output, returns the status.
    let o = s.run("srun", &["sh", "-c", "echo outside; exit 2"], None);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(stdout(&o), "outside\n");
    // Two nodes outside a job, on this one-node cluster: refused with the
    // reason (it once printed one line and exited 0, on one node).
    let o = s.run("srun", &["-N", "2", "hostname"], None);
    assert_ne!(o.status.code(), Some(0));
    assert!(stderr(&o).contains("asks for 2 nodes"), "{}", stderr(&o));
}

#[test]
fn dependencies_wait_start_or_never() {
    let s = Slurm::start();
    let g = &s.g;
    let first = s.sbatch(&["--wrap", "sleep 2"]);
    let ok = s.sbatch(&["-d", &format!("afterok:{first}"), "--wrap", "true"]);
    let notok = s.sbatch(&[
        "--dependency",
        &format!("afternotok:{first}"),
        "--wrap",
        "true",
    ]);
    let any = s.sbatch(&[
        "-d",
        &format!("afterany:{first}?afterok:{first}"),
        "--wrap",
        "true",
    ]);
    let reason = |id: u64| g.job(id)["state_reason"].as_str().unwrap_or("").to_string();
    g.wait_until("dependents wait", T, || reason(ok) == "Dependency");
    assert_eq!(g.job(ok)["job_state"], "PENDING");
    g.wait_state(first, "COMPLETED", T);
    g.wait_state(ok, "COMPLETED", T);
    g.wait_state(any, "COMPLETED", T);
    // afternotok on a job that completed can never be met: it stays pending.
    g.wait_until("never satisfied", T, || {
        reason(notok) == "DependencyNeverSatisfied"
    });
    assert_eq!(g.job(notok)["job_state"], "PENDING");
    let q = s.ok("squeue", &["-h", "-o", "%i %t %R"]);
    assert_eq!(q, format!("{notok} PD (DependencyNeverSatisfied)\n"));
    // singleton: one job of a name and user at a time.
    let a = s.sbatch(&["-J", "solo", "-d", "singleton", "--wrap", "sleep 2"]);
    let b = s.sbatch(&["-J", "solo", "-d", "singleton", "--wrap", "true"]);
    g.wait_state(a, "RUNNING", T);
    g.wait_until("singleton waits", T, || reason(b) == "Dependency");
    g.wait_state(b, "COMPLETED", T);
    let ja = g.job(a);
    let jb = g.job(b);
    assert!(jb["start_time"].as_i64() >= ja["end_time"].as_i64());
    // Malformed or unknown dependencies are refused at submission.
    let o = s.run("sbatch", &["-d", "afterok:x", "--wrap", "true"], None);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("invalid dependency specification 'afterok:x'"),
        "{}",
        stderr(&o)
    );
    let o = s.run("sbatch", &["-d", "afterok:99999", "--wrap", "true"], None);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stderr(&o),
        "sbatch: error: Job dependency problem: job 99999 does not exist\n"
    );
    // An array dependency waits for every task.
    let arr = s.sbatch(&["--array=0-2", "--wrap", "sleep 1"]);
    let after = s.sbatch(&["-d", &format!("afterok:{arr}"), "--wrap", "true"]);
    g.wait_state(after, "COMPLETED", T);
    let end_max = (0..3)
        .map(|i| g.job(arr + i)["end_time"].as_i64().unwrap())
        .max()
        .unwrap();
    assert!(g.job(after)["start_time"].as_i64().unwrap() >= end_max);
    s.ok("scancel", &[&notok.to_string()]);
}

#[test]
fn signal_ahead_of_the_time_limit() {
    let s = Slurm::start();
    let g = &s.g;
    // A one-minute limit and USR1 58 s before it: the signal comes after
    // about 2 s; the whole job gets it, or with B: only the batch shell.
    let p = g.script(
        "warned.sh",
        "#!/bin/bash\ntrap 'echo got USR1 after $SECONDS s; exit 0' USR1\nsleep 30 & wait\n",
    );
    let id = s.sbatch(&["-t", "1", "--signal=USR1@58", "-o", "warned.out", &p]);
    let j = g.wait_state(id, "COMPLETED", T);
    let out = s.file("warned.out");
    assert!(out.starts_with("got USR1 after "), "{out}");
    assert!(j["elapsed"].as_i64().unwrap() < 20, "{j}");
    // B: the shell is signalled; its child, which would die of USR1, is not.
    let p = g.script(
        "batch.sh",
        "#!/bin/bash\ntrap 'echo shell got USR1' USR1\nsleep 4 & child=$!\nwait $child\nwait $child; echo child status $?\n",
    );
    let id = s.sbatch(&["-t", "1", "--signal=B:SIGUSR1@58", "-o", "batch.out", &p]);
    g.wait_state(id, "COMPLETED", T);
    assert_eq!(s.file("batch.out"), "shell got USR1\nchild status 0\n");
}

#[test]
fn requeue_from_inside_the_job_keeps_its_id() {
    let s = Slurm::start();
    let g = &s.g;
    // The first run requeues itself; stopped by SIGTERM, it sees itself
    // PENDING already; the second run completes.
    let p = g.script(
        "again.sh",
        "#!/bin/bash\necho run $SLURM_RESTART_COUNT >> runs.txt\n\
         if [ \"$SLURM_RESTART_COUNT\" = 0 ]; then\n\
           trap 'squeue -h -j $SLURM_JOB_ID -o %T >> runs.txt; exit 0' TERM\n\
           scontrol requeue $SLURM_JOB_ID || echo requeue failed >> runs.txt\n\
           sleep 30 & wait\n\
         fi\n",
    );
    let id = s.sbatch(&["-o", "again.out", &p]);
    let j = g.wait_state(id, "COMPLETED", T);
    assert_eq!(j["restart_cnt"], 1);
    assert_eq!(s.file("runs.txt"), "run 0\nPENDING\nrun 1\n");
    // Requeueing a finished job or an unknown one is an error.
    let o = s.run("scontrol", &["requeue", &id.to_string()], None);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("Requeue of job"), "{}", stderr(&o));
    let o = s.run("scontrol", &["requeue", "777777"], None);
    assert_eq!(stderr(&o), "scontrol: error: Invalid job id specified\n");
}

#[test]
fn strict_priority_order_keeps_later_jobs_behind_one_that_cannot_start() {
    // SchedulerType=sched/builtin: the GPU job waiting for the only GPU
    // keeps a later CPU-only job waiting too (backfill would start it).
    let s = Slurm::start_with(&[
        "--sim-gpus",
        "1xA100-40GB",
        "--scheduler-type",
        "sched/builtin",
    ]);
    let g = &s.g;
    let a = s.sbatch(&["--gres=gpu:1", "--wrap", "sleep 60"]);
    g.wait_state(a, "RUNNING", T);
    let b = s.sbatch(&["--gres=gpu:1", "--wrap", "true"]);
    let c = s.sbatch(&["-o", "c.out", "--wrap", "echo c ran"]);
    let reason = |id: u64| g.job(id)["state_reason"].as_str().unwrap_or("").to_string();
    g.wait_until("both wait for resources", T, || {
        reason(b) == "Resources" && reason(c) == "Resources"
    });
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(g.job(c)["job_state"], "PENDING", "c does not pass b");
    s.ok("scancel", &[&a.to_string()]);
    g.wait_state(b, "COMPLETED", T);
    g.wait_state(c, "COMPLETED", T);
    assert_eq!(s.file("c.out"), "c ran\n");
}

#[test]
fn hold_and_release() {
    let s = Slurm::start();
    let g = &s.g;
    let id = s.sbatch(&["--hold", "--wrap", "true"]);
    let reason = |id: u64| g.job(id)["state_reason"].as_str().unwrap_or("").to_string();
    g.wait_until("held", T, || reason(id) == "JobHeldUser");
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        g.job(id)["job_state"],
        "PENDING",
        "a held job does not start"
    );
    assert_eq!(
        s.ok("squeue", &["-h", "-o", "%i %t %R"]),
        format!("{id} PD (JobHeldUser)\n")
    );
    s.ok("scontrol", &["release", &id.to_string()]);
    g.wait_state(id, "COMPLETED", T);
    // A held job survives a controller restart held.
    let mut s = s;
    let b = s.sbatch(&["-H", "--wrap", "true"]);
    s.g.restart();
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(s.g.job(b)["job_state"], "PENDING");
    s.ok("scontrol", &["hold", &b.to_string()]);
    s.ok("scontrol", &["release", &b.to_string()]);
    s.g.wait_state(b, "COMPLETED", T);
    let o = s.run("scontrol", &["hold", &b.to_string()], None);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("is not pending"), "{}", stderr(&o));
}

#[test]
fn partitions_from_config() {
    let s = Slurm::start_with(&["--sim-gpus", "1xA100-40GB", "--partitions", "debug,long"]);
    // sinfo.c: the default partition carries a '*'.
    assert_eq!(
        s.ok("sinfo", &["-o", "%P"]),
        "PARTITION\ngpu*\ndebug\nlong\n"
    );
    assert_eq!(
        s.ok("sinfo", &["-h", "-p", "long", "-o", "%P %D"]),
        "long 1\n"
    );
    let id = s.sbatch(&["-p", "debug", "--qos", "fast", "--wrap", "true"]);
    s.g.wait_state(id, "COMPLETED", T);
    assert_eq!(
        s.ok(
            "sacct",
            &[
                "-X",
                "-n",
                "-P",
                "-j",
                &id.to_string(),
                "-o",
                "Partition,QOS"
            ]
        ),
        "debug|fast\n"
    );
    let o = s.run("sbatch", &["-p", "nosuch", "--wrap", "true"], None);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stderr(&o),
        "sbatch: error: Batch job submission failed: Invalid partition name specified: 'nosuch' (partitions: gpu, debug, long)\n"
    );
    let p = s.ok("scontrol", &["show", "partition"]);
    assert!(p.starts_with("PartitionName=gpu\n   Default=YES"), "{p}");
    assert!(p.contains("PartitionName=long\n   Default=NO"), "{p}");
}

#[test]
fn filters_by_user_name_time_and_partition() {
    let s = Slurm::start();
    let g = &s.g;
    let me = {
        let id = s.sbatch(&["-J", "first", "--wrap", "true"]);
        g.wait_state(id, "COMPLETED", T)["user_name"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let a = s.sbatch(&["-J", "alpha", "--wrap", "sleep 30"]);
    let b = s.sbatch(&["-J", "beta", "--wrap", "sleep 30"]);
    g.wait_state(b, "RUNNING", T);
    let ids = |o: String| o.split_whitespace().map(String::from).collect::<Vec<_>>();
    assert_eq!(
        ids(s.ok("squeue", &["-h", "-o", "%i", "-u", &me])),
        [a.to_string(), b.to_string()]
    );
    assert_eq!(s.ok("squeue", &["-h", "-o", "%i", "-u", "nobody-here"]), "");
    assert_eq!(
        ids(s.ok("squeue", &["-h", "-o", "%i", "-p", "gpu", "-n", "beta"])),
        [b.to_string()]
    );
    assert_eq!(s.ok("squeue", &["-h", "-p", "other"]), "");
    // scancel by name, then everything of mine.
    s.ok("scancel", &["--name", "alpha"]);
    g.wait_state(a, "CANCELLED", T);
    assert_eq!(g.job(b)["job_state"], "RUNNING");
    s.ok("scancel", &["-u", &me]);
    g.wait_state(b, "CANCELLED", T);
    let o = s.run("scancel", &[], None);
    assert_eq!(o.status.code(), Some(1), "no job named at all");
    // sacct: --name, -u, -S/-E windows, -M, and %u %x %N %% in file names.
    assert_eq!(
        s.ok(
            "sacct",
            &["-n", "-X", "-P", "-o", "JobName", "--name", "beta"]
        ),
        "beta\n"
    );
    let mine = s.ok(
        "sacct",
        &["-n", "-X", "-P", "-o", "JobID", "-u", &me, "-M", "gsched"],
    );
    assert_eq!(mine.lines().count(), 3, "{mine}");
    assert_eq!(
        s.ok(
            "sacct",
            &[
                "-n",
                "-X",
                "-S",
                "now-1hour",
                "-E",
                "now",
                "-o",
                "JobName%-6",
                "--name",
                "first"
            ]
        ),
        "first  \n"
    );
    assert_eq!(
        s.ok(
            "sacct",
            &["-n", "-X", "-S", "2000-01-01", "-E", "2000-01-02"]
        ),
        ""
    );
    let id = s.sbatch(&[
        "-J",
        "pat",
        "-o",
        "%x-%u-%N-%j%%.out",
        "--wrap",
        "echo pattern",
    ]);
    g.wait_state(id, "COMPLETED", T);
    assert_eq!(s.file(&format!("pat-{me}-node1-{id}%.out")), "pattern\n");
    // srun accepts the binding and GPU options inside a job.
    let p = g.script(
        "opts.sh",
        "#!/bin/sh\n#SBATCH -o opts.out\nsrun --cpu-bind=none --gpus=1 -c 2 -N 1 sh -c 'echo $SLURM_CPUS_PER_TASK'\n",
    );
    let id = s.sbatch(&[&p]);
    g.wait_state(id, "COMPLETED", T);
    assert_eq!(s.file("opts.out"), "2\n");
}

#[test]
fn salloc_holds_an_allocation_for_a_command_and_its_steps() {
    let s = Slurm::start();
    let g = &s.g;
    let o = s.run(
        "salloc",
        &[
            "-n",
            "2",
            "-J",
            "inter",
            "sh",
            "-c",
            "echo id=$SLURM_JOB_ID; srun sh -c 'echo task $SLURM_PROCID' | sort; exit 3",
        ],
        None,
    );
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let out = stdout(&o);
    let id: u64 = out
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("id="))
        .expect(&out)
        .parse()
        .unwrap();
    assert_eq!(out, format!("id={id}\ntask 0\ntask 1\n"));
    let err = stderr(&o);
    for line in [
        format!("salloc: Pending job allocation {id}\n"),
        format!("salloc: Granted job allocation {id}\n"),
        format!("salloc: Relinquishing job allocation {id}\n"),
    ] {
        assert!(err.contains(&line), "{line:?} not in {err}");
    }
    // srun ran its step in the job's cgroup (it says so when it cannot).
    assert!(!err.contains("warning"), "{err}");
    // The job ends with the command's status; the srun was its step.
    let j = g.wait_state(id, "FAILED", T);
    assert_eq!(j["exit_code"], 3);
    assert_eq!(
        s.ok(
            "sacct",
            &[
                "-j",
                &id.to_string(),
                "-P",
                "-n",
                "-o",
                "JobID,JobName,State"
            ]
        ),
        format!("{id}|inter|FAILED\n{id}.batch|batch|FAILED\n{id}.0|sh|COMPLETED\n")
    );
}

/// One job at a time under multifactor (with `extra` options), a job
/// running for 3 s ahead of the ones a test submits.
fn one_at_a_time_under_multifactor(extra: &[&str]) -> Slurm {
    let mut args = vec![
        "--sim-gpus",
        "1xA100-40GB",
        "--workers",
        "1",
        "--priority-type",
        "multifactor",
    ];
    args.extend_from_slice(extra);
    let s = Slurm::start_with(&args);
    let blocker = s.sbatch(&["--wrap", "sleep 3"]);
    s.g.wait_state(blocker, "RUNNING", T);
    s
}

/// Job `id`'s line of sprio's output, in words.
fn sprio_row(sprio: &str, id: u64) -> Vec<&str> {
    sprio
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|r| r[0] == id.to_string())
        .unwrap_or_else(|| panic!("{id} in {sprio}"))
}

/// Job `first` ended before job `then` started.
fn ran_before(g: &common::Gsched, first: u64, then: u64) -> bool {
    let end = g.job(first)["end_time"].as_i64().unwrap();
    end <= g.job(then)["start_time"].as_i64().unwrap()
}

#[test]
fn priorities_nice_and_sprio_under_multifactor() {
    // One job at a time. Under multifactor, a job's nice is taken off its
    // priority: the job submitted later without one starts first.
    let s = one_at_a_time_under_multifactor(&[]);
    let g = &s.g;
    let niced = s.sbatch(&["--nice=500", "--wrap", "date +%s%N"]);
    let plain = s.sbatch(&["--wrap", "date +%s%N"]);
    let raised = s.sbatch(&["--wrap", "date +%s%N"]);
    s.ok(
        "scontrol",
        &["update", &format!("JobId={raised}"), "Nice=-100"],
    );
    let sprio = s.ok("sprio", &["-h"]);
    assert_eq!(sprio.lines().count(), 3, "{sprio}");
    let row = |id: u64| sprio_row(&sprio, id);
    assert_eq!(row(niced)[9], "500", "{sprio}");
    assert_eq!(row(raised)[9], "-100", "{sprio}");
    let prio = |id: u64| row(id)[2].parse::<i64>().unwrap();
    assert!(
        prio(raised) > prio(plain) && prio(plain) > prio(niced),
        "{sprio}"
    );
    let shown = s.ok("scontrol", &["show", "job", &niced.to_string()]);
    assert!(
        shown.contains(&format!("Priority={} Nice=500", prio(niced))),
        "{shown}"
    );
    assert_eq!(
        s.ok("squeue", &["-h", "-j", &niced.to_string(), "-o", "%Q"])
            .trim(),
        prio(niced).to_string()
    );
    for id in [niced, plain, raised] {
        g.wait_state(id, "COMPLETED", T);
    }
    assert!(ran_before(g, raised, plain), "the raised job went first");
    assert!(ran_before(g, plain, niced), "the niced job went last");
    // A bad nice is refused with the reason.
    let o = s.run(
        "scontrol",
        &["update", &format!("JobId={niced}"), "Nice=x"],
        None,
    );
    assert_eq!(o.status.code(), Some(1));
}

#[test]
fn a_partitions_job_factor_puts_its_jobs_first() {
    // debug's job factor is the largest, gpu's is 0.
    let s = one_at_a_time_under_multifactor(&[
        "--partitions",
        "debug",
        "--partition-job-factors",
        "debug=10",
    ]);
    let g = &s.g;
    let plain = s.sbatch(&["--wrap", "true"]);
    let debug = s.sbatch(&["-p", "debug", "--wrap", "true"]);
    let sprio = s.ok("sprio", &["-h"]);
    assert_eq!(sprio_row(&sprio, debug)[7], "1000", "{sprio}");
    assert_eq!(sprio_row(&sprio, plain)[7], "0", "{sprio}");
    for id in [plain, debug] {
        g.wait_state(id, "COMPLETED", T);
    }
    assert!(ran_before(g, debug, plain), "the debug job went first");
}

#[test]
fn scancel_signals_the_steps_unless_asked_for_the_batch_shell() {
    let s = Slurm::start();
    let g = &s.g;
    // scancel --signal goes to the steps only: the batch shell, which has
    // no trap, lives on and sees its step end well.
    let steps = g.script(
        "steps.sh",
        "#!/bin/sh\n#SBATCH -o steps.out\n\
         srun sh -c 'trap \"echo step got USR1; exit 0\" USR1; touch step-ready; while :; do sleep 0.1; done'\n\
         echo srun=$?\n",
    );
    let id = s.sbatch(&[&steps]);
    g.wait_until("the step runs", T, || {
        g.work.path().join("step-ready").exists()
    });
    s.ok("scancel", &["--signal=USR1", &id.to_string()]);
    g.wait_state(id, "COMPLETED", T);
    // (The task's `sleep` gets it too, as every process of a Slurm step
    // does: its shell may report it.)
    let out = s.file("steps.out");
    assert!(out.ends_with("step got USR1\nsrun=0\n"), "{out}");
    // -b: the batch shell only; its step does not get it.
    let batch = g.script(
        "batch.sh",
        "#!/bin/sh\n#SBATCH -o batch.out\n\
         trap 'echo batch got USR1' USR1\n\
         srun sh -c 'trap \"echo step got USR1\" USR1; touch batch-ready; i=0; while [ $i -lt 30 ]; do sleep 0.1; i=$((i+1)); done'\n\
         echo done\n",
    );
    let id = s.sbatch(&[&batch]);
    g.wait_until("the step runs", T, || {
        g.work.path().join("batch-ready").exists()
    });
    s.ok("scancel", &["-b", "--signal=USR1", &id.to_string()]);
    g.wait_state(id, "COMPLETED", T);
    assert_eq!(s.file("batch.out"), "batch got USR1\ndone\n");
}

#[test]
fn scancel_marks_the_job_cancelled_at_once_and_completing_until_it_ends() {
    // Eight seconds between SIGTERM and SIGKILL: the program below ignores
    // SIGTERM (as submitit's jobs do), so it lives that long.
    let s = Slurm::start_with(&["--sim-gpus", "1xA100-40GB", "--kill-wait", "8"]);
    let g = &s.g;
    let stubborn = g.script(
        "stubborn.sh",
        "#!/bin/bash\n#SBATCH -o stubborn.out\ntrap '' TERM\ntouch stubborn-ready\nsleep 60\n",
    );
    let id = s.sbatch(&[&stubborn]);
    g.wait_until("the job runs", T, || {
        g.work.path().join("stubborn-ready").exists()
    });
    s.ok("scancel", &[&id.to_string()]);
    // At once, before its processes are gone: CANCELLED, and completing.
    let squeue = s.ok("squeue", &["-h", "-j", &id.to_string(), "-o", "%t %T"]);
    assert_eq!(squeue.trim(), "CG COMPLETING");
    let sacct = s.ok(
        "sacct",
        &["-n", "-X", "-P", "-j", &id.to_string(), "-o", "State"],
    );
    assert!(sacct.trim().starts_with("CANCELLED by "), "{sacct}");
    assert_eq!(g.job(id)["job_state"], "CANCELLED");
    // Not a running job: `squeue -t R` leaves it out, `-t CG` lists it.
    let running = s.ok("squeue", &["-h", "-t", "R", "-o", "%i"]);
    assert!(running.trim().is_empty(), "{running}");
    let completing = s.ok("squeue", &["-h", "-t", "CG", "-o", "%i"]);
    assert_eq!(completing.trim(), id.to_string());
    // The kill wait later its processes are killed: still CANCELLED, no
    // longer completing, gone from squeue.
    g.wait_until("the job's processes end", Duration::from_secs(30), || {
        s.ok("squeue", &["-h", "-o", "%i"]).trim().is_empty()
    });
    let sacct = s.ok(
        "sacct",
        &["-n", "-X", "-P", "-j", &id.to_string(), "-o", "State"],
    );
    assert!(sacct.trim().starts_with("CANCELLED by "), "{sacct}");
}

#[test]
fn begin_holds_a_job_until_its_time() {
    let s = Slurm::start();
    let g = &s.g;
    let id = s.sbatch(&["--begin=now+3", "--wrap", "true"]);
    let why = s.ok("squeue", &["-h", "-j", &id.to_string(), "-o", "%t %r"]);
    assert_eq!(why.trim(), "PD BeginTime");
    let shown = s.ok("scontrol", &["show", "job", &id.to_string()]);
    let field = |k: &str| {
        shown
            .split_whitespace()
            .find_map(|w| w.strip_prefix(k))
            .unwrap_or_default()
            .to_string()
    };
    assert_ne!(field("SubmitTime="), field("EligibleTime="), "{shown}");
    g.wait_state(id, "COMPLETED", T);
    let job = g.job(id);
    let (submit, start) = (
        job["submit_time"].as_i64().unwrap(),
        job["start_time"].as_i64().unwrap(),
    );
    assert!(
        start - submit >= 2,
        "started {}s after submission",
        start - submit
    );
    s.refused(
        "sbatch",
        &["--begin=soon", "--wrap", "true"],
        "--begin: invalid time specification 'soon'",
    );
    // sacct --json: data_parser's accounting shape.
    let acct: serde_json::Value =
        serde_json::from_str(&s.ok("sacct", &["--json", "-j", &id.to_string()])).unwrap();
    let j = &acct["jobs"][0];
    assert_eq!(j["job_id"], id, "{acct}");
    assert_eq!(j["state"]["current"][0], "COMPLETED", "{acct}");
    assert_eq!(j["exit_code"]["status"][0], "SUCCESS", "{acct}");
    assert_eq!(acct["meta"]["command"][1], "--json", "{acct}");
    // -W: sbatch waits for the job and exits with its code.
    let o = s.run("sbatch", &["-W", "--wrap", "sleep 1; exit 3"], None);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(
        stdout(&o).starts_with("Submitted batch job "),
        "{}",
        stdout(&o)
    );
    // For an array: every task, the highest status.
    let o = s.run(
        "sbatch",
        &["-W", "--array=0-2", "--wrap", "exit $SLURM_ARRAY_TASK_ID"],
        None,
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    // The daemons' log, written to a file, has no colour codes.
    assert!(!g.log().contains('\x1b'), "colour codes in the log file");
    // An option sacctmgr does not take is named, not read as a name.
    s.refused(
        "sacctmgr",
        &["show", "user", "--json"],
        "unrecognized option '--json'",
    );
}

#[test]
fn srun_task_prolog_epilog_and_io_files() {
    let s = Slurm::start();
    let g = &s.g;
    let dir = g.work.path();
    let script = |name: &str, body: &str| {
        let p = dir.join(name);
        std::fs::write(&p, body).unwrap();
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    };
    script("prolog", "#!/bin/sh\necho x >> pre.out\necho print HEADER\necho export TEST=from_prolog\necho unset DROPPED\n");
    script("epilog", "#!/bin/sh\necho x >> post.out\nsleep 200\n");
    script("task", "#!/bin/sh\necho TEST=$TEST DROPPED=${DROPPED}.\n");
    let path = format!("{}:{}", s.shims.display(), std::env::var("PATH").unwrap());
    let o = g.run_program(
        &s.shims.join("srun"),
        &[
            "-n2",
            "-O",
            "--task-prolog=prolog",
            "--task-epilog=epilog",
            "./task",
        ],
        dir,
        None,
        &[("PATH", path), ("DROPPED", "yes".into())],
    );
    let out = stdout(&o);
    assert_eq!(out.matches("HEADER\n").count(), 2, "{out}{}", stderr(&o));
    assert_eq!(
        out.matches("TEST=from_prolog DROPPED=.\n").count(),
        2,
        "{out}"
    );
    // Each task's epilog ran, and was killed after its 5 seconds.
    assert_eq!(
        std::fs::read_to_string(dir.join("pre.out")).unwrap(),
        "x\nx\n"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("post.out")).unwrap(),
        "x\nx\n"
    );
    // The task is the command's own process: its status is its own (an
    // exit status above 128 is not taken for a signal).
    let o = s.run(
        "srun",
        &["--task-prolog=prolog", "sh", "-c", "exit 147"],
        None,
    );
    assert_eq!(o.status.code(), Some(147), "{}", stderr(&o));
    // -i, -o, -e with files, and none.
    std::fs::write(dir.join("in.txt"), "echo from-input; echo to-err >&2\n").unwrap();
    s.ok(
        "srun",
        &["-i", "in.txt", "-o", "out.txt", "-e", "err.txt", "sh"],
    );
    assert_eq!(s.file("out.txt"), "from-input\n");
    assert_eq!(s.file("err.txt"), "to-err\n");
    let o = s.run("srun", &["--output=none", "echo", "gone"], None);
    assert_eq!(stdout(&o), "");
    assert!(!dir.join("none").exists());
}
