//! gsched-cli: the user commands `gsub`, `gqueue`, `gcancel`, `ginfo` and
//! `gacct`. Each binary is a thin `main` over a function here.

pub mod client;
pub mod directives;
pub mod gacct;
pub mod gcancel;
pub mod ginfo;
pub mod gqueue;
pub mod gsub;
pub mod identity;
pub mod input_env;
pub mod local_socket;
pub mod retry;
pub mod slurm;
pub mod table;
pub mod tls;
pub mod unix_http;
pub mod when;

/// Prints `prog: error: msg` on stderr and exits with status 1.
pub fn fail(prog: &str, msg: impl std::fmt::Display) -> ! {
    eprintln!("{prog}: error: {msg}");
    std::process::exit(1)
}

/// Runs a command's body, turning an error into one line on stderr and exit 1.
/// A command whose output is read by a pipe that closes (`scontrol show
/// job | head -1`) ends there, silently, as Slurm's C commands do: the
/// default action of SIGPIPE, which Rust's runtime ignores (every later
/// write would fail and `println!` would panic).
pub fn end_quietly_when_the_reader_goes() {
    // SAFETY: setting a signal's disposition to its default is always
    // sound; no handler runs.
    unsafe {
        let _ = nix::sys::signal::signal(
            nix::sys::signal::Signal::SIGPIPE,
            nix::sys::signal::SigHandler::SigDfl,
        );
    }
}

pub fn run(prog: &str, body: impl FnOnce() -> anyhow::Result<()>) {
    end_quietly_when_the_reader_goes();
    if let Err(e) = body() {
        fail(prog, format!("{e:#}"));
    }
}
