//! `libgprobe.so`: gsched's probe API for C and C++ programs
//! (`include/gprobe.h`, with the CASE papers' names as aliases), and, when
//! preloaded (`LD_PRELOAD=libgprobe.so`, which gnoded sets for non-isolated
//! jobs), the CUDA driver interception that makes an unmodified CUDA
//! program one task.

pub mod capi;
pub mod intercept;
