//! The wrappers: the driver functions this library stands in for, with the
//! driver's own names and C signatures.

use std::ffi::{c_char, c_int, c_uint, c_void};

use gsched_probe::meter::launch_warps;

use super::lookup::{real, redirect, H};
use super::{
    admit, ensure_placed, freed, launched, lock, settle, CUresult, CUDA_ERROR_NOT_INITIALIZED,
    CUDA_SUCCESS,
};

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
