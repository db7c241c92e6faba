//! The Slurm command shims (`gsched slurm-shims`) against a live `gsched
//! up`, for the tests that drive gsched as Slurm users do.

use std::path::PathBuf;
use std::process::{Command, Output};

use super::{bin, spare_cpus, stderr, stdout, Gsched};

/// Installs the Slurm shims (`gsched slurm-shims`) in `dir`.
pub fn install_shims(dir: &std::path::Path) {
    let out = Command::new(bin("gsched"))
        .arg("slurm-shims")
        .arg(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
}

/// A gsched with the Slurm shims installed in its work directory.
pub struct Slurm {
    pub g: Gsched,
    pub shims: PathBuf,
}

impl Slurm {
    pub fn start() -> Slurm {
        Slurm::start_with(&["--sim-gpus", "1xA100-40GB"])
    }

    /// With `gsched up` options of its own (`--sim-gpus ...`).
    pub fn start_with(gpus: &[&str]) -> Slurm {
        // CPUs to spare: these jobs ask for more cores than this machine
        // has (tests/confinement.rs tests CPUs as a resource).
        let mut args: Vec<String> = gpus.iter().map(|a| a.to_string()).collect();
        args.extend(spare_cpus());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let g = Gsched::start(&args);
        let shims = g.work.path().join("shims");
        install_shims(&shims);
        Slurm { g, shims }
    }

    pub fn run(&self, name: &str, args: &[&str], stdin: Option<&str>) -> Output {
        // The shims first on PATH, as users install them.
        let path = format!(
            "{}:{}",
            self.shims.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        self.g.run_program(
            &self.shims.join(name),
            args,
            self.g.work.path(),
            stdin,
            &[("PATH", path)],
        )
    }

    pub fn ok(&self, name: &str, args: &[&str]) -> String {
        let o = self.run(name, args, None);
        assert!(o.status.success(), "{name} {args:?} failed: {}", stderr(&o));
        assert_eq!(stderr(&o), "", "{name} {args:?} wrote to stderr");
        stdout(&o)
    }

    /// Runs a command that must fail with `expect` in its error output.
    pub fn refused(&self, name: &str, args: &[&str], expect: &str) {
        let o = self.run(name, args, None);
        assert!(!o.status.success(), "{name} {args:?} succeeded");
        let err = stderr(&o);
        assert!(err.contains(expect), "{name} {args:?}: {err}");
    }

    pub fn sbatch(&self, args: &[&str]) -> u64 {
        let mut all = vec!["--parsable"];
        all.extend_from_slice(args);
        self.ok("sbatch", &all).trim().parse().unwrap()
    }

    pub fn file(&self, name: &str) -> String {
        std::fs::read_to_string(self.g.work.path().join(name)).unwrap_or_default()
    }
}
