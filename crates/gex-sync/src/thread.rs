//! Thread shim: [`std::thread`] in a normal build, `loom::thread` under `--cfg gex_loom`.
//!
//! Only the few functions that tests and waiters need are re-exported.
//!
//! # Example
//!
//! ```
//! let h = gex_sync::thread::spawn(|| 6 * 7);
//! assert_eq!(h.join().unwrap(), 42);
//! ```

#[cfg(not(gex_loom))]
pub use std::thread::{JoinHandle, spawn, yield_now};

#[cfg(gex_loom)]
pub use loom::thread::{JoinHandle, spawn, yield_now};
