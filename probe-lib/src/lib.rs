//! gsched-probe: the probe library that jobs load (`libgprobe.so`, C ABI and
//! Rust) to report the GPU footprint of each task to gnoded.
//!
//! Nothing is implemented here yet: the probe API, its protocol and the CUDA
//! driver interception are the next stage of gsched (see docs/status.md).
//! The crate exists so the workspace has its final layout.
