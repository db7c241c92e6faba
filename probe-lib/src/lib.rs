//! gsched's probe library, loaded into jobs' processes: `libgprobe.so`
//! (C ABI, `include/gprobe.h`) and this Rust crate. A task reports its GPU
//! memory and warps before it starts; gnoded places it on an instance with
//! room (CASE Algorithm 2) and the call returns once it is placed. The
//! process's first placement decides its instance: the library sets
//! `CUDA_VISIBLE_DEVICES` (and `CUDA_MPS_PIPE_DIRECTORY`) for the CUDA
//! context that follows.

pub mod capi;
pub mod client;

pub use client::{Placement, ProbeClient, ProbeError};
