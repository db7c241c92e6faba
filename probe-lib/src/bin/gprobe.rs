//! `gprobe run --mem SIZE [--warps N] -- CMD ARGS`: one task around a
//! command. Asks gnoded for a place (waiting until there is one), runs the
//! command with `CUDA_VISIBLE_DEVICES` (and `CUDA_MPS_PIPE_DIRECTORY`) set to
//! it, releases the reservation, and exits with the command's status.

use std::os::unix::process::ExitStatusExt;
use std::process::{Command, ExitCode};

use clap::Parser;
use gsched_probe::client::placement_env;
use gsched_probe::command::{GprobeArgs, GprobeCommand};
use gsched_probe::ProbeClient;

/// Times `count` begin+end round trips and prints percentiles.
fn bench(count: u64, bytes: u64) -> ExitCode {
    let mut client = match ProbeClient::from_env() {
        Ok(c) => c,
        Err(e) => return fail(&e.message),
    };
    let mut times = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let t = std::time::Instant::now();
        let p = match client.begin(bytes, 32) {
            Ok(p) => p,
            Err(e) => return fail(&e.message),
        };
        if let Err(e) = client.end(p.task) {
            return fail(&e.message);
        }
        times.push(t.elapsed().as_nanos() as u64);
    }
    times.sort_unstable();
    let pct = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize] as f64 / 1000.0;
    let mean = times.iter().sum::<u64>() as f64 / times.len() as f64 / 1000.0;
    println!(
        "probe round trips (begin+end): {count}; p50 {:.1} us, p99 {:.1} us, mean {mean:.1} us, max {:.1} us",
        pct(0.5),
        pct(0.99),
        pct(1.0)
    );
    ExitCode::SUCCESS
}

fn fail(msg: &str) -> ExitCode {
    eprintln!("gprobe: {msg}");
    ExitCode::from(1)
}

fn main() -> ExitCode {
    let (bytes, warps, command) = match GprobeArgs::parse().command {
        GprobeCommand::Bench { count, mem } => return bench(count, mem),
        GprobeCommand::Run {
            mem,
            warps,
            command,
        } => (mem, warps, command),
    };
    let mut client = match ProbeClient::from_env() {
        Ok(c) => c,
        Err(e) => return fail(&e.message),
    };
    let placed = match client.begin(bytes, warps) {
        Ok(p) => p,
        Err(e) => return fail(&e.message),
    };
    let status = Command::new(&command[0])
        .args(&command[1..])
        .envs(placement_env(&placed))
        // This task covers the command: the interception library, if
        // preloaded, must not place it a second time.
        .env("GSCHED_INTERCEPT", "0")
        .status();
    let _ = client.end(placed.task);
    match status {
        Ok(s) => match (s.code(), s.signal()) {
            (Some(c), _) => ExitCode::from(c as u8),
            (None, Some(sig)) => ExitCode::from(128 + sig as u8),
            _ => ExitCode::from(1),
        },
        Err(e) => fail(&format!("cannot run {}: {e}", command[0])),
    }
}
