//! Busy-wait hint shim.
//!
//! [`spin_loop`] is [`std::hint::spin_loop`] in a normal build and `loom::thread::yield_now`
//! under `--cfg gex_loom` (loom must be told when a thread spins, or it explores the spin loop
//! forever).
//!
//! # Example
//!
//! ```
//! use gex_sync::atomic::{AtomicBool, Ordering};
//!
//! let flag = AtomicBool::new(true);
//! while !flag.load(Ordering::Acquire) {
//!     gex_sync::hint::spin_loop();
//! }
//! ```

/// Tells the processor (or the loom scheduler) that the caller is in a busy-wait loop.
#[inline(always)]
pub fn spin_loop() {
    #[cfg(not(gex_loom))]
    std::hint::spin_loop();
    #[cfg(gex_loom)]
    loom::thread::yield_now();
}
