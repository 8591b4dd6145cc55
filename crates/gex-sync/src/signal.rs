//! The report signal: `SIGUSR1` asks every rank of a job to print its state (what each
//! endpoint has in flight), for diagnosing a hang from outside.
//!
//! The handler only increments a counter (async-signal-safe); waits of gex poll the
//! counter ([`report_generation`]) and print their endpoint's report when it changed.
//! The counter is the one piece of process-wide state this needs: a signal handler has
//! no other way to reach the ranks of a process.
//!
//! # Safety
//! `install_report_signal` calls `sigaction` with a handler that touches only an
//! atomic; it installs it only over the default disposition (never replacing a
//! program's own handler).
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicU64, Ordering};

static REPORTS: AtomicU64 = AtomicU64::new(0);

extern "C" fn on_signal(_: libc::c_int) {
    REPORTS.fetch_add(1, Ordering::Relaxed);
}

/// Installs the report handler for `SIGUSR1` if the signal still has its default
/// disposition; returns true if gex's handler is installed (now or before). Under Miri,
/// which has no signals, installs nothing and returns false.
///
/// ```
/// assert!(gex_sync::signal::install_report_signal());
/// let g = gex_sync::signal::report_generation();
/// // SAFETY: sending a signal to this process, whose handler only counts.
/// unsafe { libc::raise(libc::SIGUSR1) };
/// assert!(gex_sync::signal::report_generation() > g);
/// ```
pub fn install_report_signal() -> bool {
    // Miri has no signals (`sigaction` is an unsupported foreign call there): in a Miri
    // run the report signal is not installed, as when a program has its own handler.
    if cfg!(miri) {
        return false;
    }
    let handler = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: a zeroed sigaction is a valid "query" argument; `old` is written by the
    // kernel.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: querying the current disposition (null new action).
    if unsafe { libc::sigaction(libc::SIGUSR1, std::ptr::null(), &mut old) } != 0 {
        return false;
    }
    if old.sa_sigaction == handler {
        return true;
    }
    if old.sa_sigaction != libc::SIG_DFL {
        return false;
    }
    // SAFETY: as above; the handler only touches an atomic (async-signal-safe).
    let mut new: libc::sigaction = unsafe { std::mem::zeroed() };
    new.sa_sigaction = handler;
    new.sa_flags = libc::SA_RESTART;
    // SAFETY: installing a valid action for SIGUSR1.
    unsafe { libc::sigaction(libc::SIGUSR1, &new, std::ptr::null_mut()) == 0 }
}

/// How many report signals this process has received.
pub fn report_generation() -> u64 {
    REPORTS.load(Ordering::Relaxed)
}
