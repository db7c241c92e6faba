//! `gprobe run --mem SIZE [--warps N] -- CMD ARGS`: one task around a
//! command. Asks gnoded for a place (waiting until there is one), runs the
//! command with `CUDA_VISIBLE_DEVICES` (and `CUDA_MPS_PIPE_DIRECTORY`) set to
//! it, releases the reservation, and exits with the command's status.

use std::os::unix::process::ExitStatusExt;
use std::process::{Command, ExitCode};

use gsched_probe::client::placement_env;
use gsched_probe::ProbeClient;

const USAGE: &str = "usage: gprobe run --mem SIZE [--warps N] -- COMMAND [ARGS...]
       gprobe bench [--count N] [--mem SIZE]   (probe round-trip latency, inside a job)
  SIZE: bytes, or with a K, M, G or T suffix (binary multiples), e.g. 3G";

/// Times `count` begin+end round trips and prints percentiles.
fn bench(args: &[String]) -> ExitCode {
    let mut count = 10_000usize;
    let mut bytes = 1u64 << 20;
    let mut i = 0;
    while i < args.len() {
        match (args[i].as_str(), args.get(i + 1)) {
            ("--count", Some(v)) => match v.parse() {
                Ok(n) if n > 0 => count = n,
                _ => return fail(&format!("--count: '{v}' is not a positive number")),
            },
            ("--mem", Some(v)) => match gsched_core::units::parse_mem_mib(v) {
                Ok(m) => bytes = m << 20,
                Err(e) => return fail(&e.to_string()),
            },
            (other, _) => return fail(&format!("unexpected argument '{other}'\n{USAGE}")),
        }
        i += 2;
    }
    let mut client = match ProbeClient::from_env() {
        Ok(c) => c,
        Err(e) => return fail(&e.message),
    };
    let mut times = Vec::with_capacity(count);
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
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("run") => {}
        Some("bench") => return bench(&args[1..]),
        Some("-h") | Some("--help") => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        _ => return fail(&format!("expected the subcommand 'run'\n{USAGE}")),
    }
    let mut mem: Option<u64> = None;
    let mut warps: u64 = 0;
    let mut i = 1;
    let command = loop {
        let Some(a) = args.get(i) else {
            return fail(&format!("no command given after --\n{USAGE}"));
        };
        let value = |i: usize| args.get(i + 1).cloned();
        match a.as_str() {
            "--" => break &args[i + 1..],
            "--mem" => {
                let Some(v) = value(i) else {
                    return fail("--mem needs a size");
                };
                match gsched_core::units::parse_mem_mib(&v) {
                    Ok(mib) => mem = Some(mib * 1024 * 1024),
                    Err(e) => return fail(&e.to_string()),
                }
                i += 2;
            }
            "--warps" => {
                let Some(v) = value(i) else {
                    return fail("--warps needs a number");
                };
                match v.parse() {
                    Ok(w) => warps = w,
                    Err(_) => return fail(&format!("--warps: '{v}' is not a number")),
                }
                i += 2;
            }
            other => return fail(&format!("unexpected argument '{other}'\n{USAGE}")),
        }
    };
    let Some(bytes) = mem else {
        return fail(&format!("--mem is required\n{USAGE}"));
    };
    if command.is_empty() {
        return fail(&format!("no command given after --\n{USAGE}"));
    }
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
