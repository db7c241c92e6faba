//! gsched's probe client, used by `gprobe`, by Rust programs, and by
//! `libgprobe.so` (the C ABI and CUDA driver interception, in `cdylib/`). A task reports its GPU
//! memory and warps before it starts; gnoded places it on an instance with
//! room (CASE Algorithm 2) and the call returns once it is placed. The
//! process's first placement decides its instance: the library sets
//! `CUDA_VISIBLE_DEVICES` (and `CUDA_MPS_PIPE_DIRECTORY`) for the CUDA
//! context that follows.

pub mod client;
pub mod command;
pub mod meter;

pub use client::{Placement, ProbeClient, ProbeError, ProbeOpener};
