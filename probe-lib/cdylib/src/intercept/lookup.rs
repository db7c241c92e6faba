//! Finding libcuda's real functions, and handing the program our wrappers
//! instead whenever a lookup (`dlsym`, `cuGetProcAddress`) returns one.

use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::OnceLock;

use super::wrappers::*;

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
        pub(super) enum H { $($name),* }
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
    cuStreamDestroy_v2,
    cuCtxDestroy_v2,
    cuDevicePrimaryCtxRelease_v2,
    cuDevicePrimaryCtxReset_v2,
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
pub(super) fn real<F: Copy>(h: H) -> Option<F> {
    let p = real_ptr(h as usize, true);
    if p.is_null() {
        return None;
    }
    // SAFETY: `F` is the C signature of that driver function.
    Some(unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) })
}

/// A real driver function this library does not wrap, as type `F`, if
/// libcuda has it (looked up on each call: for calls made once).
pub(super) fn real_named<F: Copy>(name: &CStr) -> Option<F> {
    let h = libcuda(true);
    if h.is_null() {
        return None;
    }
    // SAFETY: real dlsym on libcuda's handle with a NUL-terminated name.
    let p = unsafe { real_dlsym()(h, name.as_ptr()) };
    if p.is_null() {
        return None;
    }
    // SAFETY: `F` is the C signature of that driver function.
    Some(unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) })
}

/// Swaps a real driver function for its wrapper.
pub(super) fn redirect(p: *mut c_void) -> *mut c_void {
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
