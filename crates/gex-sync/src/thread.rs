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

/// Sets the calling thread's timer slack (how late the kernel may end its sleeps) to
/// `slack` (at least 1 ns), so that sleeps of a few microseconds are honoured; the
/// default slack is 50 µs. Best effort: an error is ignored (the sleeps are then only
/// longer). Does nothing under Miri, which has no `prctl` (and no timer slack: its
/// clock is virtual).
///
/// ```
/// gex_sync::thread::set_timer_slack(std::time::Duration::from_micros(1));
/// ```
pub fn set_timer_slack(slack: std::time::Duration) {
    if cfg!(miri) {
        return;
    }
    let ns = u64::try_from(slack.as_nanos()).unwrap_or(u64::MAX).max(1);
    let _ = rustix::thread::set_current_timer_slack(std::num::NonZeroU64::new(ns));
}
