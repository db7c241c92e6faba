//! Finished jobs leave the controller's memory after `--min-job-age`
//! (Slurm's MinJobAge) while accounting keeps answering from the database,
//! and job listings come in pages (issue 14, item 7).

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::{stdout, Gsched};
use serde_json::Value;

const T: Duration = Duration::from_secs(30);

/// Every job of a paged listing, following `next_after`; also returns the
/// number of pages.
fn all_pages(g: &Gsched, query: &str) -> (Vec<Value>, usize) {
    let mut jobs = Vec::new();
    let mut after: Option<u64> = None;
    let mut pages = 0;
    loop {
        let q = match after {
            Some(a) => format!("{query}&after={a}"),
            None => query.to_string(),
        };
        let page = g.get(&format!("/api/v1/jobs?{q}")).expect("a page");
        pages += 1;
        jobs.extend(page["jobs"].as_array().unwrap().iter().cloned());
        match page["next_after"].as_u64() {
            Some(a) => after = Some(a),
            None => return (jobs, pages),
        }
    }
}

/// Runs one of Slurm's commands through the shims.
fn slurm(g: &Gsched, name: &str, args: &[&str]) -> std::process::Output {
    let shims = g.work.path().join("shims");
    if !shims.is_dir() {
        let out = g.cli("gsched", &["slurm-shims", shims.to_str().unwrap()]);
        assert!(out.status.success(), "{}", common::stderr(&out));
    }
    g.run_program(&shims.join(name), args, g.work.path(), None, &[])
}

fn status(g: &Gsched, path: &str) -> u16 {
    match g.req("GET", path).call() {
        Ok(r) => r.status(),
        Err(ureq::Error::Status(s, _)) => s,
        Err(e) => panic!("transport error: {e}"),
    }
}

#[test]
fn finished_jobs_leave_memory_and_accounting_still_answers() {
    let mut g = Gsched::start(&["--min-job-age", "2"]);
    let ok = g.script("ok.sh", "#!/bin/sh\ntrue\n");
    let bad = g.script("bad.sh", "#!/bin/sh\nexit 3\n");
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(g.submit(&[&ok]));
    }
    let failed = g.submit(&[&bad]);
    ids.push(failed);
    g.wait_until("every job has left memory", T, || {
        ids.iter()
            .all(|id| status(&g, &format!("/api/v1/jobs/{id}")) == 404)
    });
    // squeue and scontrol see only what is in memory, as in Slurm.
    let shown = slurm(&g, "scontrol", &["show", "job", &ids[0].to_string()]);
    assert!(!shown.status.success(), "{}", stdout(&shown));
    // sacct reads the database.
    let list: Vec<String> = ids.iter().map(u64::to_string).collect();
    let acct = slurm(
        &g,
        "sacct",
        &[
            "-j",
            &list.join(","),
            "-n",
            "-P",
            "-o",
            "JobID,State,ExitCode",
        ],
    );
    assert!(acct.status.success(), "{}", common::stderr(&acct));
    let text = stdout(&acct);
    for id in &ids[..3] {
        assert!(text.contains(&format!("{id}|COMPLETED|0:0")), "{text}");
    }
    assert!(text.contains(&format!("{failed}|FAILED|3:0")), "{text}");
    let gacct = g.cli("gacct", &["--json"]);
    let listed: Value = serde_json::from_slice(&gacct.stdout).unwrap();
    let gacct_ids: BTreeSet<u64> = listed["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["job_id"].as_u64().unwrap())
        .collect();
    assert_eq!(gacct_ids, ids.iter().copied().collect());
    // The event log still answers for a job that left memory.
    let events = g.get(&format!("/api/v1/jobs/{failed}/events")).unwrap();
    assert!(!events["events"].as_array().unwrap().is_empty(), "{events}");

    // Pages of two: every job once, in id order, over as many pages.
    let (paged, pages) = all_pages(&g, "state=all&history=true&limit=2");
    let paged_ids: Vec<u64> = paged
        .iter()
        .map(|j| j["job_id"].as_u64().unwrap())
        .collect();
    assert_eq!(paged_ids, ids);
    assert!(pages >= 2, "{pages} pages");
    // A job still running is listed from memory beside the stored ones.
    let sleeper = g.submit(&[&g.script("sleep.sh", "#!/bin/sh\nsleep 60\n")]);
    g.wait_state(sleeper, "RUNNING", T);
    let (paged, _) = all_pages(&g, "state=all&history=true&limit=3");
    let paged_ids: Vec<u64> = paged
        .iter()
        .map(|j| j["job_id"].as_u64().unwrap())
        .collect();
    let mut expect = ids.clone();
    expect.push(sleeper);
    assert_eq!(paged_ids, expect);
    // Without history, only memory: the running job.
    let (live, _) = all_pages(&g, "state=all");
    assert_eq!(live.len(), 1, "{live:?}");
    assert_eq!(status(&g, "/api/v1/jobs?limit=0"), 400);
    assert_eq!(status(&g, "/api/v1/jobs?limit=100000"), 400);

    // A restarted controller loads only what memory holds, and numbers
    // new jobs after every job it ever had.
    slurm(&g, "scancel", &[&sleeper.to_string()]);
    g.wait_until("the cancelled job has left memory", T, || {
        status(&g, &format!("/api/v1/jobs/{sleeper}")) == 404
    });
    g.restart();
    let next = g.submit(&[&ok]);
    assert!(next > sleeper, "job id {next} given again after a restart");
    let acct = slurm(
        &g,
        "sacct",
        &["-j", &sleeper.to_string(), "-n", "-P", "-o", "JobID,State"],
    );
    assert!(
        stdout(&acct).contains(&format!("{sleeper}|CANCELLED")),
        "{}",
        stdout(&acct)
    );
}
