//! A PostgreSQL server of a test's own: `initdb` and `pg_ctl` in a
//! temporary directory (Debian's `postgresql`, which `scripts/test`
//! installs). By default reached through a Unix socket only; a test that
//! needs it on a network gives it a namespace, an address and TLS
//! ([`Network`]).

use std::path::{Path, PathBuf};
use std::process::Command;

/// A PostgreSQL server of the test's own, stopped when dropped.
pub struct PrivatePostgres {
    bin: PathBuf,
    /// The server's own directory (its socket, data and log), owned by
    /// its user, in `_outer`, a root-owned directory (a socket directory a
    /// user created straight in the sticky /tmp is refused).
    dir: PathBuf,
    _outer: tempfile::TempDir,
    started: bool,
    /// The network namespace it runs in, if not the test's own.
    netns: Option<String>,
    /// The server's options (`pg_ctl -o`), for a restart.
    options: String,
}

/// Where a server listens besides its socket: on `addr:5432` inside
/// network namespace `netns`, TLS only, with `cert`/`key` (PEM), trusting
/// every client of `clients` (a CIDR): the tests' own cluster.
pub struct Network<'a> {
    pub netns: &'a str,
    pub addr: &'a str,
    pub cert: &'a str,
    pub key: &'a str,
    pub clients: &'a str,
}

pub const PORT: u16 = 5432;

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
    /// (PostgreSQL refuses to run as root), in the server's namespace.
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
        self.output_in(self.netns.as_deref(), program, args)
    }

    /// [`PrivatePostgres::output`] in network namespace `netns` (`None`:
    /// the test's own).
    fn output_in(&self, netns: Option<&str>, program: &str, args: &[&str]) -> std::process::Output {
        let mut argv: Vec<std::ffi::OsString> = Vec::new();
        if let Some(ns) = netns {
            argv.extend(["ip", "netns", "exec", ns].map(Into::into));
        }
        if nix::unistd::geteuid().is_root() {
            argv.extend(["runuser", "-u", "nobody", "--"].map(Into::into));
        }
        argv.push(self.bin.join(program).into());
        argv.extend(args.iter().map(Into::into));
        Command::new(&argv[0])
            .args(&argv[1..])
            .output()
            .expect("a PostgreSQL program runs")
    }

    /// A server on a Unix socket only.
    pub fn start() -> PrivatePostgres {
        PrivatePostgres::start_on(None)
    }

    /// A server on a Unix socket, and on `network` if given.
    pub fn start_on(network: Option<Network<'_>>) -> PrivatePostgres {
        let outer = tempfile::tempdir().unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(outer.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let dir = outer.path().join("pg");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        if nix::unistd::geteuid().is_root() {
            let nobody = nix::unistd::User::from_name("nobody").unwrap().unwrap();
            nix::unistd::chown(&dir, Some(nobody.uid), Some(nobody.gid)).unwrap();
        }
        let mut pg = PrivatePostgres {
            bin: PrivatePostgres::bin_dir(),
            dir,
            _outer: outer,
            started: false,
            netns: network.as_ref().map(|n| n.netns.to_string()),
            options: String::new(),
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
        let mut options = format!(
            "-k {} -c fsync=off -c full_page_writes=off",
            pg.dir.as_path().display()
        );
        match &network {
            None => options.push_str(" -c listen_addresses=''"),
            Some(n) => {
                let cert = pg.private_copy(n.cert, "server.crt");
                let key = pg.private_copy(n.key, "server.key");
                options.push_str(&format!(
                    " -c listen_addresses={} -c port={PORT} -c ssl=on -c ssl_cert_file={} -c ssl_key_file={}",
                    n.addr,
                    cert.display(),
                    key.display()
                ));
                // TLS only, and only from the test's cluster.
                let hba = pg.data().join("pg_hba.conf");
                let mut text = std::fs::read_to_string(&hba).unwrap();
                text.push_str(&format!("hostssl all all {} trust\n", n.clients));
                std::fs::write(&hba, text).unwrap();
            }
        }
        pg.options = options;
        // Stopped in Drop from here on, even if the start fails half way.
        pg.started = true;
        pg.start_server();
        pg
    }

    /// Starts the server, its output into its log (so that no pipe of the
    /// test's stays open with it).
    fn start_server(&self) {
        let data = self.data().display().to_string();
        let log = self.dir.as_path().join("server.log").display().to_string();
        self.run(
            "pg_ctl",
            &["-D", &data, "-l", &log, "-w", "-o", &self.options, "start"],
        );
    }

    /// A copy of `from` the server's user owns, mode 0600.
    fn private_copy(&self, from: &str, name: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let to = self.dir.as_path().join(name);
        std::fs::copy(from, &to).unwrap();
        std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o600)).unwrap();
        if nix::unistd::geteuid().is_root() {
            let nobody = nix::unistd::User::from_name("nobody").unwrap().unwrap();
            nix::unistd::chown(&to, Some(nobody.uid), Some(nobody.gid)).unwrap();
        }
        to
    }

    pub fn data(&self) -> PathBuf {
        self.dir.as_path().join("data")
    }

    /// The directory of the server's socket.
    pub fn socket_dir(&self) -> &Path {
        self.dir.as_path()
    }

    /// The server's log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.as_path().join("server.log")).unwrap_or_default()
    }

    /// How to reach database `db` on this server: its socket.
    pub fn options(&self, db: &str) -> sqlx::postgres::PgConnectOptions {
        sqlx::postgres::PgConnectOptions::new()
            .socket(self.dir.as_path())
            .username("gsched")
            .database(db)
    }

    /// Stops the server (fast: every connection is closed) and starts it
    /// again with the same settings.
    pub fn restart(&self) {
        let data = self.data().display().to_string();
        self.run("pg_ctl", &["-D", &data, "-m", "fast", "-w", "stop"]);
        self.start_server();
    }

    /// A new empty database `name`, and the URL gctld would be given for
    /// it (through the socket).
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

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        if self.started {
            // Never a panic here (it could be during one): a failed stop
            // is said, and the directory goes with the TempDir. Stopping
            // signals the server by its pid file: no namespace needed (it
            // may be gone already).
            let data = self.data().display().to_string();
            let out = self.output_in(
                None,
                "pg_ctl",
                &["-D", &data, "-m", "immediate", "-w", "stop"],
            );
            if !out.status.success() {
                eprintln!("pg_ctl stop: {}", String::from_utf8_lossy(&out.stderr));
            }
        }
    }
}
