//! The store from an administrator's side (issue 40): `gsched up
//! --database` on PostgreSQL runs jobs and keeps them across a restart,
//! with no SQLite file made; `gsched db backup` copies a SQLite store and
//! refuses a PostgreSQL one, pointing at pg_dump.
//!
//! Needs root (the private PostgreSQL runs as nobody) and PostgreSQL's
//! server programs (scripts/test installs them).

mod common;
#[allow(dead_code)]
#[path = "../ctld/tests/support/postgres.rs"]
mod postgres;

use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::time::Duration;

use common::{bin, Gsched};
use postgres::PrivatePostgres;

/// Every file under `dir` whose name ends in `suffix`.
fn files_ending(dir: &std::path::Path, suffix: &str) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(files_ending(&path, suffix));
        } else if path.to_string_lossy().ends_with(suffix) {
            found.push(path);
        }
    }
    found
}

#[test]
fn gsched_up_on_postgres_runs_jobs_and_keeps_them_across_a_restart() {
    let pg = PrivatePostgres::start();
    let url = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(pg.new_database("up"));
    let mut g = Gsched::start(&["--database", &url]);
    let id = g.submit(&["--wrap", "echo stored"]);
    g.wait_state(id, "COMPLETED", Duration::from_secs(60));
    g.restart();
    // Loaded back from PostgreSQL; the next id follows it.
    g.wait_state(id, "COMPLETED", Duration::from_secs(20));
    let next = g.submit(&["--wrap", "true"]);
    assert!(next > id, "{next} after {id}");
    g.wait_state(next, "COMPLETED", Duration::from_secs(60));
    assert!(
        files_ending(g.state.path(), ".db").is_empty(),
        "no SQLite store beside PostgreSQL: {:?}",
        files_ending(g.state.path(), ".db")
    );
}

#[test]
fn gsched_db_backup_copies_sqlite_and_refuses_a_postgres_store() {
    let g = Gsched::start(&[]);
    let id = g.submit(&["--wrap", "true"]);
    g.wait_state(id, "COMPLETED", Duration::from_secs(60));
    let out_dir = tempfile::tempdir().unwrap();
    let copy = out_dir.path().join("copy.db");
    let ctld_state = files_ending(g.state.path(), "ctld.db");
    let state_dir = ctld_state
        .first()
        .and_then(|p| p.parent())
        .expect("gsched up keeps a SQLite store")
        .to_path_buf();
    let out = Command::new(bin("gsched"))
        .args(["db", "backup", "--state-dir"])
        .arg(&state_dir)
        .arg(&copy)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let head = std::fs::read(&copy).unwrap();
    assert!(head.starts_with(b"SQLite format 3\0"));
    let mode = std::fs::metadata(&copy).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);

    // A site whose controller keeps its state in PostgreSQL.
    let site = out_dir.path().join("gsched.toml");
    std::fs::write(
        &site,
        "[controller]\ndatabase = \"postgres://gsched@db.example.org/gsched?sslmode=verify-full\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&site, std::fs::Permissions::from_mode(0o644)).unwrap();
    let refused = out_dir.path().join("refused.db");
    let out = Command::new(bin("gsched"))
        .args(["db", "backup"])
        .arg(&refused)
        .env("GSCHED_CONFIG", &site)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("pg_dump"), "{stderr}");
    assert!(stderr.contains("db.example.org"), "{stderr}");
    assert!(!refused.exists());
}
