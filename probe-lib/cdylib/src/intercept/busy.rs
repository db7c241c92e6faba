//! How long the process keeps its instance busy: the share of its placed
//! time during which work it launched is still in flight on one of its
//! streams. Under MPS and on MIG instances the driver reports no
//! per-process GPU time, so gnoded learns a job's compute demand from this.
//!
//! A thread of the library's own samples, every [`SAMPLE`], whether any
//! stream the process launched a kernel on has work pending
//! (`cuStreamQuery`), and credits the time since the last sample when one
//! has. Sampling the state at regular times estimates the busy time without
//! touching the launches themselves (no events, no synchronization); its
//! error is a few samples' worth. Like NVML's utilization, it counts time,
//! not SMs: a kernel that keeps a few SMs busy all the time counts as busy
//! all the time, and work slowed by neighbours counts longer.
//!
//! Every [`REPORT`] the busy time since the sampler started goes to gnoded
//! on a connection of the sampler's own, which corrects the process's
//! compute demand from it while it runs.
//!
//! Not measured: launches on the per-thread default stream (only its own
//! thread can name it), and processes that never launched a kernel (they
//! report nothing, so they do not dilute their job's share).

use std::ffi::c_void;
use std::sync::atomic::Ordering;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use gsched_core::probe::BusyTime;

use super::lookup::real_named;
use super::{CUresult, CUDA_SUCCESS, GENERATION};

/// How often the streams are looked at.
const SAMPLE: Duration = Duration::from_millis(4);
/// How often the busy time so far goes to gnoded while the process runs.
const REPORT: Duration = Duration::from_millis(gsched_core::compute::BUSY_REPORT_EVERY_MS);
/// The most one sample may credit (a sampler that was descheduled does not
/// credit the whole gap).
const MAX_CREDIT: Duration = Duration::from_millis(20);

const CUDA_ERROR_NOT_READY: CUresult = 600;
/// `CU_STREAM_PER_THREAD`: names the calling thread's own default stream.
const STREAM_PER_THREAD: usize = 0x2;

type StreamQuery = unsafe extern "C" fn(*mut c_void) -> CUresult;
type CtxGet = unsafe extern "C" fn(*mut *mut c_void) -> CUresult;
type CtxSet = unsafe extern "C" fn(*mut c_void) -> CUresult;

#[derive(Default)]
struct Streams {
    /// Matches GENERATION unless this is a forked child's inherited copy.
    generation: u64,
    /// When the process was placed; nothing is measured before.
    placed: Option<Instant>,
    /// (context, stream) the process launched kernels on.
    known: Vec<(usize, usize)>,
    sampling: bool,
    stopped: bool,
    /// A context was destroyed: the sampler makes its context current
    /// again before the next query (a new context may reuse the address).
    forgot: bool,
    /// Contexts forgotten so far (other threads that query reset theirs).
    forgets: u64,
    busy: Duration,
    /// What opens the connection the sampler reports on, until it starts
    /// and takes it.
    reporter: Option<gsched_probe::ProbeOpener>,
}

static STREAMS: Mutex<Streams> = Mutex::new(Streams {
    generation: 0,
    placed: None,
    known: Vec::new(),
    sampling: false,
    stopped: false,
    forgot: false,
    forgets: 0,
    busy: Duration::ZERO,
    reporter: None,
});

thread_local! {
    /// The last stream this thread launched on, with its generation: the
    /// common case (the same stream again) takes no lock.
    static LAST: std::cell::Cell<(u64, usize)> = const { std::cell::Cell::new((0, usize::MAX)) };
}

fn streams() -> MutexGuard<'static, Streams> {
    let mut s = STREAMS.lock().unwrap_or_else(|e| e.into_inner());
    let generation = GENERATION.load(Ordering::Relaxed);
    if s.generation != generation {
        // A forked child: no sampler runs here, nothing is known yet.
        *s = Streams {
            generation,
            ..Streams::default()
        };
    }
    s
}

/// The process was placed: its busy time counts from now; `reporter`
/// carries the sampler's reports to gnoded while it runs.
pub(super) fn placed(reporter: Option<gsched_probe::ProbeOpener>) {
    let mut st = streams();
    st.placed = Some(Instant::now());
    st.reporter = reporter;
}

/// A kernel was launched on `stream` (`per_thread`: through a `_ptsz`
/// entry point, where the null stream is the thread's own).
pub(super) fn launched(stream: *mut c_void, per_thread: bool) {
    let s = stream as usize;
    if s == STREAM_PER_THREAD || (per_thread && s == 0) {
        return;
    }
    let generation = GENERATION.load(Ordering::Relaxed);
    if LAST.with(|l| l.get()) == (generation, s) {
        return;
    }
    let mut st = streams();
    if st.placed.is_none() || st.stopped {
        return;
    }
    LAST.with(|l| l.set((generation, s)));
    let Some(get) = real_named::<CtxGet>(c"cuCtxGetCurrent") else {
        return;
    };
    let mut ctx: *mut c_void = std::ptr::null_mut();
    // SAFETY: the driver's cuCtxGetCurrent with a valid out pointer.
    if unsafe { get(&mut ctx) } != CUDA_SUCCESS || ctx.is_null() {
        return;
    }
    let key = (ctx as usize, s);
    if !st.known.contains(&key) {
        st.known.push(key);
    }
    if !st.sampling {
        st.sampling = true;
        let generation = st.generation;
        let reporter = st.reporter.take();
        hold_across_forks();
        if std::thread::Builder::new()
            .name("gprobe-busy".into())
            .spawn(move || sample(generation, reporter))
            .is_ok()
        {
            // Registered now, after the driver's own exit handlers: it runs
            // before them, so no stream is queried while the driver tears
            // down.
            // SAFETY: registering a plain extern "C" function.
            unsafe { libc::atexit(stop_sampling) };
        }
    }
}

/// The program destroyed `stream`: never query it again.
pub(super) fn forget_stream(stream: *mut c_void) {
    let s = stream as usize;
    streams().known.retain(|k| k.1 != s);
    LAST.with(|l| l.set((0, usize::MAX)));
}

/// The program destroyed a context (or released a primary one, which
/// names none): forget its streams (all of them for `None`); launches
/// name them again.
pub(super) fn forget_context(ctx: Option<*mut c_void>) {
    let mut st = streams();
    match ctx {
        Some(c) => st.known.retain(|k| k.0 != c as usize),
        None => st.known.clear(),
    }
    st.forgot = true;
    st.forgets += 1;
    LAST.with(|l| l.set((0, usize::MAX)));
}

extern "C" fn stop_sampling() {
    // Never block at exit for long: the sampler holds the lock only for
    // its queries.
    for _ in 0..200 {
        if let Ok(mut st) = STREAMS.try_lock() {
            st.stopped = true;
            return;
        }
        std::thread::sleep(Duration::from_micros(100));
    }
}

/// What was measured, for the report at exit: `None` when the process
/// launched nothing that could be measured.
pub(super) fn measured() -> Option<BusyTime> {
    let st = STREAMS.try_lock().ok()?;
    if st.generation != GENERATION.load(Ordering::Relaxed) || !st.sampling {
        return None;
    }
    let placed = st.placed?.elapsed();
    Some(BusyTime {
        busy_usec: st.busy.min(placed).as_micros() as u64,
        placed_usec: placed.as_micros() as u64,
    })
}

std::thread_local! {
    /// `STREAMS`, held by the thread that forks from just before the fork
    /// to just after it, on both sides.
    static HELD_FOR_FORK: std::cell::RefCell<Option<MutexGuard<'static, Streams>>> =
        const { std::cell::RefCell::new(None) };
}

// Never a panic across the C boundary: a thread whose locals are being
// torn down forks without the lock held (as before this handler).
extern "C" fn before_fork() {
    let _ = HELD_FOR_FORK.try_with(|h| {
        let guard = STREAMS.lock().unwrap_or_else(|e| e.into_inner());
        if let Ok(mut held) = h.try_borrow_mut() {
            *held = Some(guard);
        }
    });
}

extern "C" fn after_fork() {
    let _ = HELD_FOR_FORK.try_with(|h| {
        if let Ok(mut held) = h.try_borrow_mut() {
            drop(held.take());
        }
    });
}

/// The sampler holds `STREAMS` while it queries, every few milliseconds: a
/// fork from another thread then would copy it locked into a child that
/// has no sampler to release it, and the child's first launch would wait
/// forever. Held across every fork instead, the child gets it unlocked.
/// Not covered: a fork from a signal handler on a thread that holds it
/// already (that fork waits for itself), and the placement state's lock,
/// held while the process waits to be placed.
fn hold_across_forks() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    // SAFETY: registering plain extern "C" functions.
    ONCE.call_once(|| unsafe {
        libc::pthread_atfork(Some(before_fork), Some(after_fork), Some(after_fork));
    });
}

fn sample(generation: u64, mut opener: Option<gsched_probe::ProbeOpener>) {
    let (Some(query), Some(set)) = (
        real_named::<StreamQuery>(c"cuStreamQuery"),
        real_named::<CtxSet>(c"cuCtxSetCurrent"),
    ) else {
        return;
    };
    let mut last = Instant::now();
    // What goes to gnoded while the process runs counts from here (the
    // first launch), not from the placement: host setup before it would
    // dilute the first window.
    let (started, mut reported, mut busy_since_start) = (last, last, Duration::ZERO);
    let mut current: usize = 0;
    let mut reporter: Option<gsched_probe::ProbeClient> = None;
    loop {
        std::thread::sleep(SAMPLE);
        let mut st = STREAMS.lock().unwrap_or_else(|e| e.into_inner());
        if st.stopped || st.generation != generation {
            return;
        }
        let now = Instant::now();
        let credit = (now - last).min(MAX_CREDIT);
        last = now;
        if std::mem::take(&mut st.forgot) {
            current = 0;
        }
        if any_pending(&mut st, &mut current, query, set) {
            st.busy += credit;
            busy_since_start += credit;
        }
        drop(st);
        if now - reported < REPORT {
            continue;
        }
        reported = now;
        if reporter.is_none() {
            // Opened once: one that fails (gnoded restarted) is not tried
            // again.
            reporter = opener.take().and_then(|open| open().ok());
        }
        let Some(client) = reporter.as_mut() else {
            continue;
        };
        let sampled = now - started;
        let so_far = BusyTime {
            busy_usec: busy_since_start.min(sampled).as_micros() as u64,
            placed_usec: sampled.as_micros() as u64,
        };
        // No lock is held: a fork now copies nothing locked. A connection
        // that failed (gnoded restarted) is not tried again.
        if client.busy(so_far).is_err() {
            reporter = None;
        }
    }
}

/// Whether any stream the process launched on has work pending, asked
/// from the calling thread (`current`: the context it last made current
/// there, kept by the caller).
fn any_pending(st: &mut Streams, current: &mut usize, query: StreamQuery, set: CtxSet) -> bool {
    let mut busy = false;
    st.known.retain(|&(ctx, stream)| {
        if busy {
            return true;
        }
        // SAFETY: a context the program created and has not destroyed
        // (destroying it goes through forget_context first).
        if ctx != *current && unsafe { set(ctx as *mut c_void) } != CUDA_SUCCESS {
            return false;
        }
        *current = ctx;
        // SAFETY: a stream the program launched on and has not
        // destroyed (destroying it goes through forget_stream first).
        match unsafe { query(stream as *mut c_void) } {
            CUDA_SUCCESS => true,
            CUDA_ERROR_NOT_READY => {
                busy = true;
                true
            }
            // Gone in a way not seen here: not asked again.
            _ => false,
        }
    });
    busy
}

/// Whether the process has work in flight on a stream it launched on, for
/// a thread other than the sampler (`current` as for `any_pending`, kept
/// by that thread; reset when a context was forgotten).
pub(super) fn pending(current: &mut usize, forgot_seen: &mut u64) -> bool {
    let (Some(query), Some(set)) = (
        real_named::<StreamQuery>(c"cuStreamQuery"),
        real_named::<CtxSet>(c"cuCtxSetCurrent"),
    ) else {
        return false;
    };
    let mut st = streams();
    if st.stopped {
        return false;
    }
    if st.forgets != *forgot_seen {
        *forgot_seen = st.forgets;
        *current = 0;
    }
    any_pending(&mut st, current, query, set)
}
