//! `salloc [sbatch options] [command [args]]`: an interactive allocation.
//! A job is submitted whose batch step runs the command (default: the
//! user's shell) inside the allocation, in the job's cgroup, so `srun`
//! there starts steps of that job; the command's standard input, output
//! and error are carried between salloc and the job through named pipes
//! in a directory only the user can enter. The job ends with the
//! command's status, which salloc returns.
//!
//! The pipes are on this host, so the job must run here, which `gsched up`
//! always gives; a job placed on another host cannot open them and fails
//! at once, and salloc says so (jobs across hosts are not built yet). The
//! command has pipes, not a terminal: no line editing or job control.

use std::io::{Read, Write};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use gsched_core::job::JobState;

use crate::client::Client;
use crate::gsub::{build_spec, SubmitOptions};

/// The batch step: runs the command (`$2...`, else the user's shell) on
/// the pipes in the private directory `$1`.
const HOLDER: &str = "#!/bin/sh\n\
# gsched salloc: the interactive command, run inside the allocation\n\
d=\"$1\"; shift\n\
[ $# -gt 0 ] || set -- \"${SHELL:-/bin/sh}\"\n\
exec \"$@\" < \"$d/in\" > \"$d/out\" 2> \"$d/err\"\n";

pub fn main_with(args: Vec<String>) -> Result<i32> {
    let cli: SubmitOptions = super::parse("salloc", args)?;
    // SALLOC_* variables below the command line, as in Slurm.
    let mut cli = cli.over(crate::input_env::from_environment(
        crate::input_env::Reader::Salloc,
    )?);
    if cli.wrap.is_some() {
        bail!("--wrap is sbatch's; give salloc the command itself");
    }
    if cli.wait {
        bail!("-W/--wait is sbatch's; salloc always waits for its command");
    }
    let command = std::mem::take(&mut cli.script);
    let dir = private_dir()?;
    let result = allocate_and_run(cli, &command, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// A directory only this user can enter, for the command's pipes.
fn private_dir() -> Result<PathBuf> {
    let mut rand = [0u8; 8];
    let _ = getrandom::getrandom(&mut rand);
    let name: String = rand.iter().map(|b| format!("{b:02x}")).collect();
    let dir = std::env::temp_dir().join(format!("gsched-salloc-{name}"));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .with_context(|| format!("cannot create {}", dir.display()))?;
    Ok(dir)
}

fn allocate_and_run(opts: SubmitOptions, command: &[String], dir: &Path) -> Result<i32> {
    let cwd = std::env::current_dir().context("cannot determine the current directory")?;
    let mut opts = opts;
    if opts.output.is_none() {
        opts.output = Some("/dev/null".into());
    }
    for pipe in ["in", "out", "err"] {
        nix::unistd::mkfifo(&dir.join(pipe), nix::sys::stat::Mode::S_IRWXU)
            .with_context(|| format!("cannot make a pipe in {}", dir.display()))?;
    }
    let mut spec = build_spec(&opts, HOLDER.to_string(), "interactive", &cwd)?;
    spec.argv = std::iter::once(dir.display().to_string())
        .chain(command.iter().cloned())
        .collect();
    let client = Client::from_env();
    let id = client.submit(&spec)?;
    eprintln!("salloc: Pending job allocation {id}");
    let run = || -> Result<i32> {
        let Some(to_job) = open_input(&client, id, dir)? else {
            return Ok(1);
        };
        eprintln!("salloc: Granted job allocation {id}");
        connect(dir, to_job)?;
        let job = wait_final(&client, id)?;
        eprintln!("salloc: Relinquishing job allocation {id}");
        Ok(super::srun::exit_status(&job))
    };
    run().inspect_err(|_| {
        // Nothing is left to use the allocation: it is given back.
        let _ = client.cancel(&id.to_string(), None, Default::default());
    })
}

/// Opens the command's input pipe once the job has opened it (its command
/// is about to start), or `None` (after saying why) if the job ended first.
fn open_input(client: &Client, id: u64, dir: &Path) -> Result<Option<std::fs::File>> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut said_waiting = false;
    loop {
        let opened = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(dir.join("in"));
        match opened {
            Ok(f) => {
                // Blocking again from here on.
                use std::os::fd::AsRawFd;
                let fd = f.as_raw_fd();
                let flags = nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_GETFL)?;
                let mut flags = nix::fcntl::OFlag::from_bits_truncate(flags);
                flags.remove(nix::fcntl::OFlag::O_NONBLOCK);
                nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_SETFL(flags))?;
                return Ok(Some(f));
            }
            Err(e) if e.raw_os_error() == Some(libc::ENXIO) => {
                // No reader yet.
                let jobs = client.jobs(&[("id", id.to_string()), ("state", "all".into())])?;
                if let Some(j) = jobs.first() {
                    if j.job_state.is_final() {
                        eprintln!(
                            "salloc: error: job {id} ended {} before its command started ({}); salloc needs the allocation on this host (jobs across hosts are not built yet)",
                            j.job_state.as_str(),
                            j.state_reason.as_deref().unwrap_or("no reason")
                        );
                        return Ok(None);
                    }
                    if j.job_state == JobState::Pending && !said_waiting {
                        said_waiting = true;
                        eprintln!("salloc: job {id} queued and waiting for resources");
                    }
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => return Err(e).context("cannot open the job's input pipe"),
        }
    }
}

/// Carries salloc's standard input to the command and its output back,
/// until the command closes them. The pipes are opened in the order the
/// job's shell opens them (in, out, err), so neither waits for the other.
fn connect(dir: &Path, mut to_job: std::fs::File) -> Result<()> {
    let open = |name: &str| {
        std::fs::File::open(dir.join(name))
            .with_context(|| format!("cannot open the job's {name} pipe"))
    };
    let from_out = open("out")?;
    let from_err = open("err")?;
    // Standard input: copied while there is any; the job then sees its end.
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        let mut stdin = std::io::stdin();
        loop {
            match stdin.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if to_job.write_all(&buf[..n]).is_err() {
                        return;
                    }
                }
            }
        }
    });
    let copy = |mut from: std::fs::File, err: bool| {
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            loop {
                match from.read(&mut buf) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => {
                        let _ = if err {
                            std::io::stderr().write_all(&buf[..n])
                        } else {
                            let mut o = std::io::stdout();
                            o.write_all(&buf[..n]).and_then(|()| o.flush())
                        };
                    }
                }
            }
        })
    };
    let out = copy(from_out, false);
    let err = copy(from_err, true);
    let _ = out.join();
    let _ = err.join();
    Ok(())
}

/// Waits for the job to end.
fn wait_final(client: &Client, id: u64) -> Result<gsched_core::wire::JobInfo> {
    loop {
        let jobs = client.jobs(&[("id", id.to_string()), ("state", "all".into())])?;
        if let Some(j) = jobs.into_iter().next().filter(|j| j.job_state.is_final()) {
            return Ok(j);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
