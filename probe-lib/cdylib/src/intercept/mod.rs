//! CUDA driver interception (`LD_PRELOAD=libgprobe.so`): an unmodified CUDA
//! program becomes one task whose footprint is its reservation.
//!
//! - `cuInit` (and the first context calls) place the process: the library
//!   asks gnoded for `GSCHED_TASK_MEM` bytes and sets `CUDA_VISIBLE_DEVICES`
//!   to the instance before the driver reads it. A process that cannot be
//!   placed sees no device at all, so it never touches memory it was not
//!   given.
//! - In an isolated job started early (`GSCHED_GPU_GATE`), the first CUDA
//!   call waits instead until gnoded says the job's instances are its own
//!   (the job before it has left them); nothing is reserved or counted.
//! - Allocations are counted against the reservation; one that does not fit
//!   grows the reservation on the same instance, waiting for room there
//!   when gnoded says so, or fails with `CUDA_ERROR_OUT_OF_MEMORY` in this
//!   process only. Frees are counted.
//! - `cuMemGetInfo_v2` and `cuDeviceTotalMem_v2` report the reservation.
//! - In a job with a GPU time quota, kernel launches wait for a token from
//!   gnoded (`tokens`).
//! - Kernel launches update the task's warps (reported when they rise), and
//!   name the streams whose pending work a sampler thread looks at, to
//!   measure how long the process keeps its instance busy (`busy`),
//!   reported to gnoded every second while it runs (on a connection of the
//!   sampler's own) and at exit.
//! - The real functions are found in `libcuda.so.1`; a program that looks
//!   them up itself, through `dlsym` or `cuGetProcAddress[_v2]`, gets these
//!   wrappers instead, because both lookups are intercepted and every real
//!   pointer they return that this library wraps is swapped for its wrapper.
//! - At exit the process's peak and busy time are reported and its task
//!   ended.

// The wrappers are the CUDA driver's own functions, with its names and its
// contracts: callers must pass what the driver documents for each.
#![allow(non_snake_case, clippy::missing_safety_doc)]

mod busy;
mod lookup;
mod tokens;
mod wrappers;

use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use gsched_core::probe::code;
use gsched_probe::client::placement_env;
use gsched_probe::meter::{Admit, Meter};
use gsched_probe::ProbeClient;

type CUresult = c_int;
const CUDA_SUCCESS: CUresult = 0;
const CUDA_ERROR_OUT_OF_MEMORY: CUresult = 2;
const CUDA_ERROR_NOT_INITIALIZED: CUresult = 3;

/// Set when the program uses the explicit probe API: it places itself.
pub static EXPLICIT: AtomicBool = AtomicBool::new(false);

struct State {
    /// Matches GENERATION unless this is a forked child's inherited copy.
    generation: u64,
    /// Whether this process has decided (placed, or interception off).
    decided: bool,
    pid: u32,
    client: Option<ProbeClient>,
    task: Option<u64>,
    job: String,
    meter: Meter,
}

static STATE: OnceLock<Mutex<State>> = OnceLock::new();

fn state() -> &'static Mutex<State> {
    STATE.get_or_init(|| {
        Mutex::new(State {
            generation: 0,
            decided: false,
            pid: 0,
            client: None,
            task: None,
            job: String::new(),
            meter: Meter::default(),
        })
    })
}

static MAX_WARPS: AtomicU64 = AtomicU64::new(0);

/// Bumped in a forked child (pthread_atfork), so the child starts over
/// without a getpid() on every call.
pub(super) static GENERATION: AtomicU64 = AtomicU64::new(1);

extern "C" fn forked_child() {
    GENERATION.fetch_add(1, Ordering::Relaxed);
}

fn lock() -> std::sync::MutexGuard<'static, State> {
    static ATFORK: std::sync::Once = std::sync::Once::new();
    // SAFETY: registering a plain extern "C" function for the child side.
    ATFORK.call_once(|| unsafe {
        libc::pthread_atfork(None, None, Some(forked_child));
    });
    let mut st = state().lock().unwrap_or_else(|e| e.into_inner());
    let generation = GENERATION.load(Ordering::Relaxed);
    if st.generation != generation {
        st.generation = generation;
        let pid = std::process::id();
        // First use, or a forked child: start over for this process.
        st.decided = false;
        st.pid = pid;
        st.client = None;
        st.task = None;
        st.meter = Meter::default();
        MAX_WARPS.store(0, Ordering::Relaxed);
    }
    st
}

// ---- placement -----------------------------------------------------------

fn note(job: &str, msg: &str) {
    eprintln!("gprobe: job {job}: {msg}");
}

/// Places this process on first use (see the module docs).
fn ensure_placed() {
    let mut st = lock();
    if st.decided {
        return;
    }
    st.decided = true;
    if EXPLICIT.load(Ordering::Relaxed) || std::env::var("GSCHED_INTERCEPT").is_ok_and(|v| v == "0")
    {
        return;
    }
    st.job = std::env::var("GSCHED_JOB_ID").unwrap_or_default();
    let mut client = match ProbeClient::from_env() {
        Ok(c) => c,
        // Not in a gsched job (or no probe socket): stay out of the way.
        Err(e)
            if e.code == code::UNAVAILABLE && std::env::var_os("GSCHED_PROBE_SOCK").is_none() =>
        {
            return
        }
        Err(e) => {
            let job = st.job.clone();
            note(
                &job,
                &format!("cannot use gnoded's probe socket ({e}); CUDA will see no device"),
            );
            std::env::set_var("CUDA_VISIBLE_DEVICES", "");
            return;
        }
    };
    if std::env::var_os(gsched_core::probe::GATE_ENV).is_some() {
        // An isolated job started early: its instances may still be in use
        // (and its device rules closed); wait until they are its own. It
        // holds them whole: nothing to reserve or count.
        if let Err(e) = client.wait_gate() {
            let job = st.job.clone();
            note(
                &job,
                &format!("cannot wait for the job's GPU instances ({e}); CUDA will see no device"),
            );
            std::env::set_var("CUDA_VISIBLE_DEVICES", "");
        }
        return;
    }
    let env_bytes = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(default)
    };
    let bytes = env_bytes("GSCHED_TASK_MEM", 1 << 30);
    // The context's own memory is reserved too, but not for allocations.
    let context = env_bytes("GSCHED_CONTEXT_MEM", 0);
    match client.begin(bytes + context, 0) {
        Ok(p) => {
            for (k, v) in placement_env(&p) {
                std::env::set_var(k, v);
            }
            st.task = Some(p.task);
            st.meter = Meter::new(p.bytes.saturating_sub(context));
            // The sampler's own connection, opened by its thread when it
            // first reports: its reports never wait on (or hold) this
            // process's state, which a fork may copy locked.
            busy::placed(Some(client.opener()));
            if let Ok(quota) = std::env::var(gsched_core::time_quota::TIME_QUOTA_ENV) {
                // The job has a GPU time quota: launches wait for tokens.
                let lc = gsched_core::time_quota::TimeQuota::from_env(&quota)
                    .is_some_and(|q| q.latency_critical);
                match client.token_stream() {
                    Ok(stream) => tokens::start(stream, client.token_opener(), lc),
                    Err(e) => {
                        let job = st.job.clone();
                        note(
                            &job,
                            &format!("cannot open the GPU time quota's connection ({e}); kernels are not held to it"),
                        );
                    }
                }
            }
            st.client = Some(client);
            // SAFETY: registering a plain extern "C" function.
            unsafe { libc::atexit(at_exit) };
        }
        Err(e) => {
            let job = st.job.clone();
            note(
                &job,
                &format!("GPU placement failed: {e}; CUDA will see no device"),
            );
            std::env::set_var("CUDA_VISIBLE_DEVICES", "");
        }
    }
}

extern "C" fn at_exit() {
    // Never block at exit: another thread may hold the lock.
    let Ok(mut st) = state().try_lock() else {
        return;
    };
    if st.pid != std::process::id() {
        return;
    }
    // Only the peak: the reservation is released when gnoded sees the
    // process gone, after the driver has taken its memory back.
    let peak = st.meter.peak;
    if let (Some(_), Some(c)) = (st.task, st.client.as_mut()) {
        let _ = c.peak(peak, busy::measured());
    }
}

/// Counts an allocation of `size` before it is made. `Ok(true)`: counted
/// (settle it after the call); `Ok(false)`: not intercepted; `Err`: refused.
fn admit(size: u64) -> Result<bool, CUresult> {
    let mut st = lock();
    let Some(task) = st.task else {
        return Ok(false);
    };
    match st.meter.admit(size) {
        Admit::Go => Ok(true),
        Admit::Grow { by, exact } => {
            // Waits while gnoded has no room for it yet on the instance.
            let grown = st
                .client
                .as_mut()
                .expect("a placed process has a client")
                .grow(task, by, exact);
            match grown {
                Ok(by) => {
                    st.meter.grown(by);
                    match st.meter.admit(size) {
                        Admit::Go => Ok(true),
                        Admit::Grow { .. } => Err(CUDA_ERROR_OUT_OF_MEMORY),
                    }
                }
                Err(e) => {
                    let job = st.job.clone();
                    note(
                        &job,
                        &format!(
                            "allocation of {size} bytes refused (CUDA_ERROR_OUT_OF_MEMORY): {} bytes reserved, {} in use; {e}",
                            st.meter.reserved, st.meter.used
                        ),
                    );
                    Err(CUDA_ERROR_OUT_OF_MEMORY)
                }
            }
        }
    }
}

fn settle(counted: bool, r: CUresult, size: u64, handle: u64) {
    if !counted {
        return;
    }
    let mut st = lock();
    if r == CUDA_SUCCESS {
        st.meter.allocated(handle, size);
    } else {
        st.meter.failed(size);
    }
}

fn freed(r: CUresult, handle: u64) {
    if r == CUDA_SUCCESS {
        let mut st = lock();
        if st.task.is_some() {
            st.meter.freed(handle);
        }
    }
}

fn launched(warps: u64) {
    if MAX_WARPS.fetch_max(warps, Ordering::Relaxed) >= warps {
        return;
    }
    let mut st = lock();
    let Some(task) = st.task else { return };
    if let Some(w) = st.meter.launched(warps) {
        if let Some(c) = st.client.as_mut() {
            let _ = c.warps(task, w);
        }
    }
}
