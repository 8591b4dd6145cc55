//! The atomics shim: the only place in the workspace that names atomic types.
//!
//! In a normal build these are the types of [`std::sync::atomic`]. When the crate is built with
//! `RUSTFLAGS="--cfg gex_loom"` they are the model-checked types of `loom::sync::atomic`, so
//! every algorithm written against this module can be explored by loom without changes.
//!
//! Everything else in the workspace imports atomics from here (`use gex_sync::atomic::...`),
//! never from `std` or `core` directly.
//!
//! Note that the loom types have no `const fn new`; code that must also build under loom
//! therefore never constructs atomics in `const` context.
//!
//! # Example
//!
//! ```
//! use gex_sync::atomic::{AtomicU64, Ordering};
//!
//! let n = AtomicU64::new(1);
//! n.fetch_add(2, Ordering::Relaxed);
//! assert_eq!(n.load(Ordering::Relaxed), 3);
//! ```

#[cfg(not(gex_loom))]
pub use std::sync::atomic::{
    AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence,
};

#[cfg(gex_loom)]
pub use loom::sync::atomic::{
    AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence,
};

/// A compiler-only fence ([`std::sync::atomic::compiler_fence`]): orders this
/// thread's memory accesses as a signal handler on the same thread sees them, and
/// emits no instruction. The same under loom, which models threads, not signal
/// handlers.
pub use std::sync::atomic::compiler_fence;
