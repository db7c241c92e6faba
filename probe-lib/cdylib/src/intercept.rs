//! CUDA driver interception (`LD_PRELOAD=libgprobe.so`): an unmodified CUDA
//! program becomes one task whose footprint is its reservation.
//!
//! - `cuInit` (and the first context calls) place the process: the library
//!   asks gnoded for `GSCHED_TASK_MEM` bytes and sets `CUDA_VISIBLE_DEVICES`
//!   to the instance before the driver reads it. A process that cannot be
//!   placed sees no device at all, so it never touches memory it was not
//!   given.
//! - Allocations are counted against the reservation; one that does not fit
//!   grows the reservation on the same instance, or fails with
//!   `CUDA_ERROR_OUT_OF_MEMORY` in this process only. Frees are counted.
//! - `cuMemGetInfo_v2` and `cuDeviceTotalMem_v2` report the reservation.
//! - Kernel launches update the task's warps (reported when they rise).
//! - The real functions are found in `libcuda.so.1`; a program that looks
//!   them up itself, through `dlsym` or `cuGetProcAddress[_v2]`, gets these
//!   wrappers instead, because both lookups are intercepted and every real
//!   pointer they return that this library wraps is swapped for its wrapper.
//! - At exit the process's peak is reported and its task ended.

// The wrappers are the CUDA driver's own functions, with its names and its
// contracts: callers must pass what the driver documents for each.
#![allow(non_snake_case, clippy::missing_safety_doc)]

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use gsched_core::probe::code;
use gsched_probe::client::placement_env;
use gsched_probe::meter::{launch_warps, Admit, Meter};
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
static GENERATION: AtomicU64 = AtomicU64::new(1);

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

// ---- finding the real functions ------------------------------------------

type DlsymFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;

fn real_dlsym() -> DlsymFn {
    static REAL: OnceLock<usize> = OnceLock::new();
    let p = *REAL.get_or_init(|| {
        for ver in [c"GLIBC_2.34", c"GLIBC_2.2.5"] {
            // SAFETY: dlvsym with a constant name and version.
            let p = unsafe { libc::dlvsym(libc::RTLD_NEXT, c"dlsym".as_ptr(), ver.as_ptr()) };
            if !p.is_null() {
                return p as usize;
            }
        }
        0
    });
    assert!(p != 0, "libgprobe: cannot find the real dlsym");
    // SAFETY: the pointer is glibc's dlsym, which has this signature.
    unsafe { std::mem::transmute::<usize, DlsymFn>(p) }
}

/// libcuda's handle; with `load` false only if it is already loaded.
fn libcuda(load: bool) -> *mut c_void {
    static HANDLE: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
    let h = HANDLE.load(Ordering::Acquire);
    if !h.is_null() {
        return h;
    }
    let flags = libc::RTLD_NOW | libc::RTLD_GLOBAL | if load { 0 } else { libc::RTLD_NOLOAD };
    // SAFETY: dlopen with a constant name.
    let h = unsafe { libc::dlopen(c"libcuda.so.1".as_ptr(), flags) };
    if !h.is_null() {
        HANDLE.store(h, Ordering::Release);
    }
    h
}

macro_rules! hooks {
    ($($name:ident),* $(,)?) => {
        #[allow(non_camel_case_types, clippy::upper_case_acronyms)]
        #[derive(Clone, Copy)]
        #[repr(usize)]
        enum H { $($name),* }
        const NAMES: &[&CStr] = &[$(
            // SAFETY: literal names with a NUL added.
            unsafe { CStr::from_bytes_with_nul_unchecked(concat!(stringify!($name), "\0").as_bytes()) }
        ),*];
        fn ours(i: usize) -> *mut c_void {
            let table: &[usize] = &[$($name as *const () as usize),*];
            table[i] as *mut c_void
        }
    };
}

hooks!(
    cuInit,
    cuDevicePrimaryCtxRetain,
    cuCtxCreate_v2,
    cuCtxCreate_v3,
    cuCtxCreate_v4,
    cuMemAlloc_v2,
    cuMemAllocPitch_v2,
    cuMemAllocManaged,
    cuMemAllocAsync,
    cuMemAllocAsync_ptsz,
    cuMemAllocFromPoolAsync,
    cuMemAllocFromPoolAsync_ptsz,
    cuMemCreate,
    cuArrayCreate_v2,
    cuArray3DCreate_v2,
    cuMipmappedArrayCreate,
    cuMemFree_v2,
    cuMemFreeAsync,
    cuMemFreeAsync_ptsz,
    cuMemRelease,
    cuArrayDestroy,
    cuMipmappedArrayDestroy,
    cuMemGetInfo_v2,
    cuDeviceTotalMem_v2,
    cuLaunchKernel,
    cuLaunchKernel_ptsz,
    cuLaunchKernelEx,
    cuLaunchKernelEx_ptsz,
    cuLaunchCooperativeKernel,
    cuLaunchCooperativeKernel_ptsz,
    cuGetProcAddress,
    cuGetProcAddress_v2,
);

static REAL: [AtomicPtr<c_void>; NAMES.len()] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; NAMES.len()];

/// The real function `i` from libcuda (loading it if `load`).
fn real_ptr(i: usize, load: bool) -> *mut c_void {
    // A driver without this function is remembered, so that `dlsym` calls
    // do not look it up again each time.
    let missing: *mut c_void = std::ptr::dangling_mut();
    let p = REAL[i].load(Ordering::Acquire);
    if p == missing {
        return std::ptr::null_mut();
    }
    if !p.is_null() {
        return p;
    }
    let h = libcuda(load);
    if h.is_null() {
        return p;
    }
    // SAFETY: real dlsym on libcuda's handle with a NUL-terminated name.
    let p = unsafe { real_dlsym()(h, NAMES[i].as_ptr()) };
    REAL[i].store(if p.is_null() { missing } else { p }, Ordering::Release);
    p
}

/// The real function `h` as type `F`, if libcuda has it.
fn real<F: Copy>(h: H) -> Option<F> {
    let p = real_ptr(h as usize, true);
    if p.is_null() {
        return None;
    }
    // SAFETY: `F` is the C signature of that driver function.
    Some(unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) })
}

/// Swaps a real driver function for its wrapper.
fn redirect(p: *mut c_void) -> *mut c_void {
    if p.is_null() || libcuda(false).is_null() {
        return p;
    }
    for i in 0..NAMES.len() {
        if real_ptr(i, false) == p {
            return ours(i);
        }
    }
    p
}

/// `dlsym` as seen by the program: real lookups, wrapped CUDA functions.
///
/// # Safety
/// As `dlsym(3)`.
#[no_mangle]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void {
    redirect(real_dlsym()(handle, symbol))
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
                &format!("cannot reach gnoded ({e}); CUDA will see no device"),
            );
            std::env::set_var("CUDA_VISIBLE_DEVICES", "");
            return;
        }
    };
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
        let _ = c.peak(peak);
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
            let grown = {
                let c = st.client.as_mut().expect("a placed process has a client");
                match c.grow(task, by) {
                    Ok(()) => Ok(by),
                    Err(_) if exact < by => c.grow(task, exact).map(|_| exact),
                    Err(e) => Err(e),
                }
            };
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

// ---- the wrappers ----------------------------------------------------------

macro_rules! call_real {
    ($h:expr, $ty:ty, $($arg:expr),*) => {
        match real::<$ty>($h) {
            Some(f) => f($($arg),*),
            None => CUDA_ERROR_NOT_INITIALIZED,
        }
    };
}

#[no_mangle]
pub unsafe extern "C" fn cuInit(flags: c_uint) -> CUresult {
    ensure_placed();
    call_real!(H::cuInit, unsafe extern "C" fn(c_uint) -> CUresult, flags)
}

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(ctx: *mut *mut c_void, dev: c_int) -> CUresult {
    ensure_placed();
    call_real!(
        H::cuDevicePrimaryCtxRetain,
        unsafe extern "C" fn(*mut *mut c_void, c_int) -> CUresult,
        ctx,
        dev
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxCreate_v2(
    ctx: *mut *mut c_void,
    flags: c_uint,
    dev: c_int,
) -> CUresult {
    ensure_placed();
    call_real!(
        H::cuCtxCreate_v2,
        unsafe extern "C" fn(*mut *mut c_void, c_uint, c_int) -> CUresult,
        ctx,
        flags,
        dev
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxCreate_v3(
    ctx: *mut *mut c_void,
    params: *mut c_void,
    num_params: c_int,
    flags: c_uint,
    dev: c_int,
) -> CUresult {
    ensure_placed();
    call_real!(
        H::cuCtxCreate_v3,
        unsafe extern "C" fn(*mut *mut c_void, *mut c_void, c_int, c_uint, c_int) -> CUresult,
        ctx,
        params,
        num_params,
        flags,
        dev
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxCreate_v4(
    ctx: *mut *mut c_void,
    params: *mut c_void,
    flags: c_uint,
    dev: c_int,
) -> CUresult {
    ensure_placed();
    call_real!(
        H::cuCtxCreate_v4,
        unsafe extern "C" fn(*mut *mut c_void, *mut c_void, c_uint, c_int) -> CUresult,
        ctx,
        params,
        flags,
        dev
    )
}

/// An allocation wrapper: admit, call, settle with the handle at `out`.
macro_rules! alloc_wrapper {
    ($name:ident ($out:ident : *mut $outty:ty, $($a:ident : $t:ty),*) size = $size:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name($out: *mut $outty, $($a: $t),*) -> CUresult {
            let size: u64 = $size;
            let counted = match admit(size) {
                Ok(c) => c,
                Err(r) => return r,
            };
            let r = call_real!(H::$name, unsafe extern "C" fn(*mut $outty, $($t),*) -> CUresult, $out, $($a),*);
            let handle = if r == CUDA_SUCCESS && !$out.is_null() { *$out as usize as u64 } else { 0 };
            settle(counted, r, size, handle);
            r
        }
    };
}

alloc_wrapper!(cuMemAlloc_v2(dptr: *mut u64, bytesize: usize) size = bytesize as u64);
alloc_wrapper!(cuMemAllocManaged(dptr: *mut u64, bytesize: usize, flags: c_uint) size = bytesize as u64);
alloc_wrapper!(cuMemAllocAsync(dptr: *mut u64, bytesize: usize, stream: *mut c_void) size = bytesize as u64);
alloc_wrapper!(cuMemAllocAsync_ptsz(dptr: *mut u64, bytesize: usize, stream: *mut c_void) size = bytesize as u64);
alloc_wrapper!(cuMemAllocFromPoolAsync(dptr: *mut u64, bytesize: usize, pool: *mut c_void, stream: *mut c_void) size = bytesize as u64);
alloc_wrapper!(cuMemAllocFromPoolAsync_ptsz(dptr: *mut u64, bytesize: usize, pool: *mut c_void, stream: *mut c_void) size = bytesize as u64);
alloc_wrapper!(cuMemCreate(handle: *mut u64, size: usize, prop: *const c_void, flags: u64) size = size as u64);

#[no_mangle]
pub unsafe extern "C" fn cuMemAllocPitch_v2(
    dptr: *mut u64,
    pitch: *mut usize,
    width: usize,
    height: usize,
    element: c_uint,
) -> CUresult {
    // Pitch rounds rows up (to 512 bytes at most on current GPUs).
    let estimate = (width as u64).next_multiple_of(512) * height as u64;
    let counted = match admit(estimate) {
        Ok(c) => c,
        Err(r) => return r,
    };
    let r = call_real!(
        H::cuMemAllocPitch_v2,
        unsafe extern "C" fn(*mut u64, *mut usize, usize, usize, c_uint) -> CUresult,
        dptr,
        pitch,
        width,
        height,
        element
    );
    let handle = if r == CUDA_SUCCESS && !dptr.is_null() {
        *dptr
    } else {
        0
    };
    settle(counted, r, estimate, handle);
    r
}

/// `CUDA_ARRAY_DESCRIPTOR`.
#[repr(C)]
pub struct ArrayDesc {
    width: usize,
    height: usize,
    format: c_int,
    channels: c_uint,
}

/// `CUDA_ARRAY3D_DESCRIPTOR`.
#[repr(C)]
pub struct Array3dDesc {
    width: usize,
    height: usize,
    depth: usize,
    format: c_int,
    channels: c_uint,
    flags: c_uint,
}

fn format_bytes(format: c_int) -> u64 {
    match format {
        0x01 | 0x08 => 1,        // (UN)SIGNED_INT8
        0x02 | 0x09 | 0x10 => 2, // (UN)SIGNED_INT16, HALF
        _ => 4,                  // 32-bit formats, and an upper bound for others
    }
}

alloc_wrapper!(cuArrayCreate_v2(handle: *mut *mut c_void, desc: *const ArrayDesc) size = if desc.is_null() { 0 } else {
    let d = &*desc;
    d.width as u64 * (d.height.max(1) as u64) * d.channels.max(1) as u64 * format_bytes(d.format)
});
alloc_wrapper!(cuArray3DCreate_v2(handle: *mut *mut c_void, desc: *const Array3dDesc) size = if desc.is_null() { 0 } else {
    let d = &*desc;
    d.width as u64 * d.height.max(1) as u64 * d.depth.max(1) as u64 * d.channels.max(1) as u64 * format_bytes(d.format)
});
// A full mipmap chain is at most twice the base level.
alloc_wrapper!(cuMipmappedArrayCreate(handle: *mut *mut c_void, desc: *const Array3dDesc, levels: c_uint) size = if desc.is_null() { 0 } else {
    let d = &*desc;
    2 * d.width as u64 * d.height.max(1) as u64 * d.depth.max(1) as u64 * d.channels.max(1) as u64 * format_bytes(d.format)
});

#[no_mangle]
pub unsafe extern "C" fn cuMemFree_v2(dptr: u64) -> CUresult {
    let r = call_real!(H::cuMemFree_v2, unsafe extern "C" fn(u64) -> CUresult, dptr);
    freed(r, dptr);
    r
}

#[no_mangle]
pub unsafe extern "C" fn cuMemFreeAsync(dptr: u64, stream: *mut c_void) -> CUresult {
    let r = call_real!(
        H::cuMemFreeAsync,
        unsafe extern "C" fn(u64, *mut c_void) -> CUresult,
        dptr,
        stream
    );
    freed(r, dptr);
    r
}

#[no_mangle]
pub unsafe extern "C" fn cuMemFreeAsync_ptsz(dptr: u64, stream: *mut c_void) -> CUresult {
    let r = call_real!(
        H::cuMemFreeAsync_ptsz,
        unsafe extern "C" fn(u64, *mut c_void) -> CUresult,
        dptr,
        stream
    );
    freed(r, dptr);
    r
}

#[no_mangle]
pub unsafe extern "C" fn cuMemRelease(handle: u64) -> CUresult {
    let r = call_real!(
        H::cuMemRelease,
        unsafe extern "C" fn(u64) -> CUresult,
        handle
    );
    freed(r, handle);
    r
}

#[no_mangle]
pub unsafe extern "C" fn cuArrayDestroy(handle: *mut c_void) -> CUresult {
    let r = call_real!(
        H::cuArrayDestroy,
        unsafe extern "C" fn(*mut c_void) -> CUresult,
        handle
    );
    freed(r, handle as usize as u64);
    r
}

#[no_mangle]
pub unsafe extern "C" fn cuMipmappedArrayDestroy(handle: *mut c_void) -> CUresult {
    let r = call_real!(
        H::cuMipmappedArrayDestroy,
        unsafe extern "C" fn(*mut c_void) -> CUresult,
        handle
    );
    freed(r, handle as usize as u64);
    r
}

#[no_mangle]
pub unsafe extern "C" fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> CUresult {
    let r = call_real!(
        H::cuMemGetInfo_v2,
        unsafe extern "C" fn(*mut usize, *mut usize) -> CUresult,
        free,
        total
    );
    if r == CUDA_SUCCESS && !free.is_null() && !total.is_null() {
        let st = lock();
        if st.task.is_some() {
            *total = st.meter.reserved as usize;
            *free = (st.meter.free() as usize).min(*free);
        }
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceTotalMem_v2(bytes: *mut usize, dev: c_int) -> CUresult {
    let r = call_real!(
        H::cuDeviceTotalMem_v2,
        unsafe extern "C" fn(*mut usize, c_int) -> CUresult,
        bytes,
        dev
    );
    if r == CUDA_SUCCESS && !bytes.is_null() {
        let st = lock();
        if st.task.is_some() {
            *bytes = st.meter.reserved as usize;
        }
    }
    r
}

type LaunchFn = unsafe extern "C" fn(
    *mut c_void,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    *mut c_void,
    *mut *mut c_void,
    *mut *mut c_void,
) -> CUresult;

type CoopLaunchFn = unsafe extern "C" fn(
    *mut c_void,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    *mut c_void,
    *mut *mut c_void,
) -> CUresult;

macro_rules! launch_wrapper {
    ($name:ident) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            f: *mut c_void,
            gx: c_uint,
            gy: c_uint,
            gz: c_uint,
            bx: c_uint,
            by: c_uint,
            bz: c_uint,
            shared: c_uint,
            stream: *mut c_void,
            params: *mut *mut c_void,
            extra: *mut *mut c_void,
        ) -> CUresult {
            launched(launch_warps([gx, gy, gz], [bx, by, bz]));
            call_real!(
                H::$name,
                LaunchFn,
                f,
                gx,
                gy,
                gz,
                bx,
                by,
                bz,
                shared,
                stream,
                params,
                extra
            )
        }
    };
}
launch_wrapper!(cuLaunchKernel);
launch_wrapper!(cuLaunchKernel_ptsz);

macro_rules! coop_wrapper {
    ($name:ident) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            f: *mut c_void,
            gx: c_uint,
            gy: c_uint,
            gz: c_uint,
            bx: c_uint,
            by: c_uint,
            bz: c_uint,
            shared: c_uint,
            stream: *mut c_void,
            params: *mut *mut c_void,
        ) -> CUresult {
            launched(launch_warps([gx, gy, gz], [bx, by, bz]));
            call_real!(
                H::$name,
                CoopLaunchFn,
                f,
                gx,
                gy,
                gz,
                bx,
                by,
                bz,
                shared,
                stream,
                params
            )
        }
    };
}
coop_wrapper!(cuLaunchCooperativeKernel);
coop_wrapper!(cuLaunchCooperativeKernel_ptsz);

/// The head of `CUlaunchConfig`.
#[repr(C)]
pub struct LaunchConfig {
    grid: [c_uint; 3],
    block: [c_uint; 3],
}

macro_rules! launch_ex_wrapper {
    ($name:ident) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            config: *const LaunchConfig,
            f: *mut c_void,
            params: *mut *mut c_void,
            extra: *mut *mut c_void,
        ) -> CUresult {
            if !config.is_null() {
                launched(launch_warps((*config).grid, (*config).block));
            }
            call_real!(
                H::$name,
                unsafe extern "C" fn(
                    *const LaunchConfig,
                    *mut c_void,
                    *mut *mut c_void,
                    *mut *mut c_void,
                ) -> CUresult,
                config,
                f,
                params,
                extra
            )
        }
    };
}
launch_ex_wrapper!(cuLaunchKernelEx);
launch_ex_wrapper!(cuLaunchKernelEx_ptsz);

#[no_mangle]
pub unsafe extern "C" fn cuGetProcAddress(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
) -> CUresult {
    let r = call_real!(
        H::cuGetProcAddress,
        unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64) -> CUresult,
        symbol,
        pfn,
        version,
        flags
    );
    if r == CUDA_SUCCESS && !pfn.is_null() {
        *pfn = redirect(*pfn);
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn cuGetProcAddress_v2(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
    status: *mut c_int,
) -> CUresult {
    let r = call_real!(
        H::cuGetProcAddress_v2,
        unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64, *mut c_int) -> CUresult,
        symbol,
        pfn,
        version,
        flags,
        status
    );
    if r == CUDA_SUCCESS && !pfn.is_null() {
        *pfn = redirect(*pfn);
    }
    r
}
