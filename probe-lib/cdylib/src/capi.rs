//! The C ABI of `libgprobe.so` (`include/gprobe.h`), with the CASE papers'
//! names as aliases. One connection per process, opened by `gprobe_init`
//! (or the first `gprobe_task_begin`).

use std::ffi::{c_char, c_int, CString};
use std::sync::Mutex;

use gsched_core::probe::code;
use gsched_core::sm::KernelShape;

use gsched_probe::client::{placement_env, ProbeClient};

struct Probe {
    client: Option<ProbeClient>,
    /// The instance this process is bound to, once placed.
    instance: Option<String>,
    last_error: Option<CString>,
}

static PROBE: Mutex<Probe> = Mutex::new(Probe {
    client: None,
    instance: None,
    last_error: None,
});

fn lock() -> std::sync::MutexGuard<'static, Probe> {
    PROBE.lock().unwrap_or_else(|e| e.into_inner())
}

fn fail(p: &mut Probe, code: i32, message: &str) -> i32 {
    p.last_error = CString::new(message.replace('\0', " ")).ok();
    code
}

fn ensure(p: &mut Probe) -> Result<&mut ProbeClient, i32> {
    if p.client.is_none() {
        match ProbeClient::from_env() {
            Ok(c) => p.client = Some(c),
            Err(e) => return Err(fail(p, e.code, &e.message)),
        }
    }
    Ok(p.client.as_mut().expect("just set"))
}

/// Connects to gnoded. Returns 0, or a negative error code.
#[no_mangle]
pub extern "C" fn gprobe_init() -> c_int {
    let mut p = lock();
    match ensure(&mut p) {
        Ok(_) => 0,
        Err(c) => c,
    }
}

/// Reports a task of `mem_bytes` and `warps`; blocks until gnoded has placed
/// and reserved it. Returns a task handle (> 0) or a negative error code.
/// The first placement sets `CUDA_VISIBLE_DEVICES` (and
/// `CUDA_MPS_PIPE_DIRECTORY`) for this process: call it before CUDA starts.
#[no_mangle]
pub extern "C" fn gprobe_task_begin(mem_bytes: u64, warps: u64) -> i64 {
    begin(mem_bytes, warps, None)
}

/// [`gprobe_task_begin`] for a task whose kernel has `blocks` thread blocks
/// of `threads_per_block` threads (used by `mgb-sm` placement).
#[no_mangle]
pub extern "C" fn gprobe_task_begin_kernel(
    mem_bytes: u64,
    blocks: u64,
    threads_per_block: u64,
) -> i64 {
    let shape = KernelShape::from_launch(blocks, threads_per_block);
    begin(mem_bytes, shape.warps(), Some(shape))
}

fn begin(mem_bytes: u64, warps: u64, shape: Option<KernelShape>) -> i64 {
    // The program places itself: the driver interception stands down.
    crate::intercept::EXPLICIT.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut p = lock();
    let result = match ensure(&mut p) {
        Ok(client) => client.begin_kernel(mem_bytes, warps, shape),
        Err(c) => return c as i64,
    };
    match result {
        Ok(placed) => {
            if p.instance.is_none() {
                for (k, v) in placement_env(&placed) {
                    std::env::set_var(k, v);
                }
                p.instance = Some(placed.instance.clone());
            }
            placed.task as i64
        }
        Err(e) => fail(&mut p, e.code, &e.message) as i64,
    }
}

/// Ends a task: its reservation is released. Returns 0 or a negative code.
#[no_mangle]
pub extern "C" fn gprobe_task_end(handle: i64) -> c_int {
    if handle <= 0 {
        let mut p = lock();
        return fail(&mut p, code::NO_TASK, "not a task handle");
    }
    let mut p = lock();
    let result = match ensure(&mut p) {
        Ok(client) => client.end(handle as u64),
        Err(c) => return c,
    };
    match result {
        Ok(()) => 0,
        Err(e) => fail(&mut p, e.code, &e.message),
    }
}

/// Closes the connection (reservations still held are released when the
/// process exits or its job ends). Returns 0.
#[no_mangle]
pub extern "C" fn gprobe_destroy() -> c_int {
    lock().client = None;
    0
}

/// The message of the last error in this process ("" if none). Valid until
/// the next call.
#[no_mangle]
pub extern "C" fn gprobe_last_error() -> *const c_char {
    match &lock().last_error {
        Some(s) => s.as_ptr(),
        None => c"".as_ptr(),
    }
}

/// CASE paper name of [`gprobe_init`].
#[no_mangle]
pub extern "C" fn case_init() -> c_int {
    gprobe_init()
}

/// CASE paper name of [`gprobe_task_begin`].
#[no_mangle]
pub extern "C" fn case_task_begin(mem_bytes: u64, warps: u64) -> i64 {
    gprobe_task_begin(mem_bytes, warps)
}

/// CASE paper name of [`gprobe_task_end`].
#[no_mangle]
pub extern "C" fn case_task_end(handle: i64) -> c_int {
    gprobe_task_end(handle)
}

/// CASE paper name of [`gprobe_destroy`].
#[no_mangle]
pub extern "C" fn case_destroy() -> c_int {
    gprobe_destroy()
}
