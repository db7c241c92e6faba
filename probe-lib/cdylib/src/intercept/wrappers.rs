//! The wrappers: the driver functions this library stands in for, with the
//! driver's own names and C signatures.

use std::ffi::{c_char, c_int, c_uint, c_void};

use gsched_probe::meter::launch_warps;

use super::lookup::{real, redirect, H};
use super::{
    admit, busy, ensure_placed, freed, launched, lock, settle, tokens, CUresult,
    CUDA_ERROR_NOT_INITIALIZED, CUDA_SUCCESS,
};

macro_rules! call_real {
    ($h:expr, $ty:ty, $($arg:expr),*) => {
        match real::<$ty>($h) {
            Some(f) => f($($arg),*),
            None => CUDA_ERROR_NOT_INITIALIZED,
        }
    };
}

/// A wrapper that places the process first (see `ensure_placed`), then
/// calls the driver.
macro_rules! placing_wrapper {
    ($name:ident($($a:ident: $t:ty),*)) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name($($a: $t),*) -> CUresult {
            ensure_placed();
            call_real!(H::$name, unsafe extern "C" fn($($t),*) -> CUresult, $($a),*)
        }
    };
}

placing_wrapper!(cuInit(flags: c_uint));
placing_wrapper!(cuDevicePrimaryCtxRetain(ctx: *mut *mut c_void, dev: c_int));
placing_wrapper!(cuCtxCreate_v2(ctx: *mut *mut c_void, flags: c_uint, dev: c_int));
placing_wrapper!(cuCtxCreate_v3(
    ctx: *mut *mut c_void,
    params: *mut c_void,
    num_params: c_int,
    flags: c_uint,
    dev: c_int
));
placing_wrapper!(cuCtxCreate_v4(ctx: *mut *mut c_void, params: *mut c_void, flags: c_uint, dev: c_int));

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

/// A wrapper that frees `$handle` and uncounts it when the driver agrees.
macro_rules! free_wrapper {
    ($name:ident($handle:ident: $ht:ty $(, $a:ident: $t:ty)*)) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name($handle: $ht $(, $a: $t)*) -> CUresult {
            let r = call_real!(H::$name, unsafe extern "C" fn($ht $(, $t)*) -> CUresult, $handle $(, $a)*);
            freed(r, $handle as usize as u64);
            r
        }
    };
}

free_wrapper!(cuMemFree_v2(dptr: u64));
free_wrapper!(cuMemFreeAsync(dptr: u64, stream: *mut c_void));
free_wrapper!(cuMemFreeAsync_ptsz(dptr: u64, stream: *mut c_void));
free_wrapper!(cuMemRelease(handle: u64));
free_wrapper!(cuArrayDestroy(handle: *mut c_void));
free_wrapper!(cuMipmappedArrayDestroy(handle: *mut c_void));

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

/// A kernel-launch wrapper: grid and block dimensions first (after the
/// function), then the launch's other arguments, passed through; `stream`
/// names the argument that is the stream, `per_thread` whether the null
/// stream is the thread's own (`_ptsz`).
macro_rules! launch_wrapper {
    ($name:ident($($a:ident: $t:ty),*) stream = $stream:ident, per_thread = $pt:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            f: *mut c_void,
            gx: c_uint,
            gy: c_uint,
            gz: c_uint,
            bx: c_uint,
            by: c_uint,
            bz: c_uint,
            $($a: $t),*
        ) -> CUresult {
            tokens::before_launch();
            launched(launch_warps([gx, gy, gz], [bx, by, bz]));
            let r = call_real!(
                H::$name,
                unsafe extern "C" fn(*mut c_void, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, $($t),*) -> CUresult,
                f, gx, gy, gz, bx, by, bz $(, $a)*
            );
            if r == CUDA_SUCCESS {
                busy::launched($stream, $pt);
            }
            r
        }
    };
}

launch_wrapper!(cuLaunchKernel(shared: c_uint, stream: *mut c_void, params: *mut *mut c_void, extra: *mut *mut c_void) stream = stream, per_thread = false);
launch_wrapper!(cuLaunchKernel_ptsz(shared: c_uint, stream: *mut c_void, params: *mut *mut c_void, extra: *mut *mut c_void) stream = stream, per_thread = true);
launch_wrapper!(cuLaunchCooperativeKernel(shared: c_uint, stream: *mut c_void, params: *mut *mut c_void) stream = stream, per_thread = false);
launch_wrapper!(cuLaunchCooperativeKernel_ptsz(shared: c_uint, stream: *mut c_void, params: *mut *mut c_void) stream = stream, per_thread = true);

/// The head of `CUlaunchConfig`.
#[repr(C)]
pub struct LaunchConfig {
    grid: [c_uint; 3],
    block: [c_uint; 3],
    shared: c_uint,
    stream: *mut c_void,
}

macro_rules! launch_ex_wrapper {
    ($name:ident, per_thread = $pt:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            config: *const LaunchConfig,
            f: *mut c_void,
            params: *mut *mut c_void,
            extra: *mut *mut c_void,
        ) -> CUresult {
            tokens::before_launch();
            if !config.is_null() {
                launched(launch_warps((*config).grid, (*config).block));
            }
            let r = call_real!(
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
            );
            if r == CUDA_SUCCESS && !config.is_null() {
                busy::launched((*config).stream, $pt);
            }
            r
        }
    };
}
launch_ex_wrapper!(cuLaunchKernelEx, per_thread = false);
launch_ex_wrapper!(cuLaunchKernelEx_ptsz, per_thread = true);

/// Streams and contexts the program destroys are forgotten by the busy
/// sampler first, so that it never queries a destroyed one.
#[no_mangle]
pub unsafe extern "C" fn cuStreamDestroy_v2(stream: *mut c_void) -> CUresult {
    busy::forget_stream(stream);
    call_real!(
        H::cuStreamDestroy_v2,
        unsafe extern "C" fn(*mut c_void) -> CUresult,
        stream
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxDestroy_v2(ctx: *mut c_void) -> CUresult {
    busy::forget_context(Some(ctx));
    call_real!(
        H::cuCtxDestroy_v2,
        unsafe extern "C" fn(*mut c_void) -> CUresult,
        ctx
    )
}

/// Releasing or resetting a device's primary context names no context:
/// the sampler forgets every stream (launches name them again).
macro_rules! primary_ctx_wrapper {
    ($name:ident) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(dev: c_int) -> CUresult {
            busy::forget_context(None);
            call_real!(H::$name, unsafe extern "C" fn(c_int) -> CUresult, dev)
        }
    };
}
primary_ctx_wrapper!(cuDevicePrimaryCtxRelease_v2);
primary_ctx_wrapper!(cuDevicePrimaryCtxReset_v2);

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
