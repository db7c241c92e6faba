//! A PostgreSQL server of a test's own: `initdb` and `pg_ctl` in a
//! temporary directory, reached through a Unix socket only (Debian's
//! `postgresql`, which `scripts/test` installs).

use std::path::PathBuf;
use std::process::Command;

/// A PostgreSQL server of the test's own, stopped when dropped.
pub struct PrivatePostgres {
    bin: PathBuf,
    dir: tempfile::TempDir,
    started: bool,
}

impl PrivatePostgres {
    /// The server programs: `pg_config --bindir`, else Debian's newest
    /// `/usr/lib/postgresql/N/bin`.
    fn bin_dir() -> PathBuf {
        if let Ok(out) = Command::new("pg_config").arg("--bindir").output() {
            let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
            if dir.join("initdb").is_file() && dir.join("pg_ctl").is_file() {
                return dir;
            }
        }
        let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
            .map(|d| d.flatten().map(|e| e.path().join("bin")).collect())
            .unwrap_or_default();
        versions.retain(|d| d.join("initdb").is_file());
        versions.sort_by_key(|d| {
            d.parent()
                .and_then(|v| v.file_name())
                .and_then(|v| v.to_str())
                .and_then(|v| v.parse::<u32>().ok())
                .unwrap_or(0)
        });
        versions
            .pop()
            .expect("PostgreSQL's server programs (initdb, pg_ctl): install Debian's postgresql")
    }

    /// Runs a server program, as `nobody` when the test runs as root
    /// (PostgreSQL refuses to run as root).
    pub fn run(&self, program: &str, args: &[&str]) {
        let out = self.output(program, args);
        assert!(
            out.status.success(),
            "{program} {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    pub fn output(&self, program: &str, args: &[&str]) -> std::process::Output {
        let path = self.bin.join(program);
        let mut c = if nix::unistd::geteuid().is_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "nobody", "--"]).arg(&path);
            c
        } else {
            Command::new(&path)
        };
        c.args(args).output().expect("a PostgreSQL program runs")
    }

    pub fn start() -> PrivatePostgres {
        let dir = tempfile::tempdir().unwrap();
        if nix::unistd::geteuid().is_root() {
            let nobody = nix::unistd::User::from_name("nobody").unwrap().unwrap();
            nix::unistd::chown(dir.path(), Some(nobody.uid), Some(nobody.gid)).unwrap();
        }
        let mut pg = PrivatePostgres {
            bin: PrivatePostgres::bin_dir(),
            dir,
            started: false,
        };
        let data = pg.data().display().to_string();
        pg.run(
            "initdb",
            &[
                "-D",
                &data,
                "-U",
                "gsched",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--no-sync",
            ],
        );
        let options = format!(
            "-k {} -c listen_addresses='' -c fsync=off -c full_page_writes=off",
            pg.dir.path().display()
        );
        let log = pg.dir.path().join("server.log").display().to_string();
        // Stopped in Drop from here on, even if the start fails half way.
        pg.started = true;
        pg.run(
            "pg_ctl",
            &["-D", &data, "-l", &log, "-w", "-o", &options, "start"],
        );
        pg
    }

    pub fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// How to reach database `db` on this server: its socket.
    pub fn options(&self, db: &str) -> sqlx::postgres::PgConnectOptions {
        sqlx::postgres::PgConnectOptions::new()
            .socket(self.dir.path())
            .username("gsched")
            .database(db)
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        if self.started {
            // Never a panic here (it could be during one): a failed stop
            // is said, and the directory goes with the TempDir.
            let data = self.data().display().to_string();
            let out = self.output("pg_ctl", &["-D", &data, "-m", "immediate", "-w", "stop"]);
            if !out.status.success() {
                eprintln!("pg_ctl stop: {}", String::from_utf8_lossy(&out.stderr));
            }
        }
    }
}

impl PrivatePostgres {
    /// The directory of the server's socket.
    pub fn socket_dir(&self) -> &std::path::Path {
        self.dir.path()
    }

    /// A new empty database `name`, and the URL gctld would be given for it.
    pub async fn new_database(&self, name: &str) -> String {
        use sqlx::Connection;
        let mut admin = sqlx::PgConnection::connect_with(&self.options("postgres"))
            .await
            .expect("the private server answers");
        sqlx::query(&format!("CREATE DATABASE \"{name}\""))
            .execute(&mut admin)
            .await
            .expect("a new database");
        format!(
            "postgres:///{name}?user=gsched&host={}",
            self.socket_dir().display()
        )
    }
}
