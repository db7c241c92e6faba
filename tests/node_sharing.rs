//! `--exclusive` (issue 18, item 2): a job has its node alone, and jobs
//! behind it neither join it nor starve it.

mod common;

use std::time::Duration;

use common::slurm::Slurm;
use common::stderr;

const T: Duration = Duration::from_secs(30);

fn stamp(s: &Slurm, name: &str) -> f64 {
    s.file(name)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{name}: {:?}", s.file(name)))
}

#[test]
fn an_exclusive_job_runs_alone_and_is_not_starved() {
    let s = Slurm::start();
    let g = &s.g;
    let first = s.sbatch(&["--wrap", "sleep 3; date +%s.%N > a.end"]);
    g.wait_state(first, "RUNNING", T);
    let alone = s.sbatch(&[
        "--exclusive",
        "--wrap",
        "date +%s.%N > b.start; sleep 2; date +%s.%N > b.end",
    ]);
    let after = s.sbatch(&["--wrap", "date +%s.%N > c.start"]);
    std::thread::sleep(Duration::from_secs(1));
    // The node is in use: the exclusive job waits, and the job behind it
    // does not slip in beside the first.
    assert_eq!(g.job(alone)["job_state"], "PENDING");
    assert_eq!(g.job(alone)["state_reason"], "Resources");
    assert_eq!(g.job(after)["job_state"], "PENDING");
    g.wait_state(after, "COMPLETED", T);
    g.wait_state(alone, "COMPLETED", T);
    assert!(
        stamp(&s, "b.start") >= stamp(&s, "a.end"),
        "started beside a job"
    );
    assert!(
        stamp(&s, "c.start") >= stamp(&s, "b.end"),
        "a job joined it"
    );
    // Only mcs and topo are refused.
    let o = s.run("sbatch", &["--exclusive=mcs", "--wrap", "true"], None);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("--exclusive=mcs"), "{}", stderr(&o));
    let mine = s.sbatch(&["--exclusive=user", "--wrap", "true"]);
    g.wait_state(mine, "COMPLETED", T);
}
