//! Receiving SIGINT, SIGTERM and SIGHUP as readable data while a job runs, so the
//! launcher can forward them to its ranks from its poll loop.
//!
//! # Safety
//!
//! `sigemptyset`, `sigaddset`, `pthread_sigmask` and `signalfd` are called through
//! `libc` on a `sigset_t` that lives on the stack and is initialised by
//! `sigemptyset` before any other use. The descriptor returned by `signalfd` is
//! checked and then owned by exactly one [`OwnedFd`].

#![allow(unsafe_code)]

use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, FromRawFd, OwnedFd};

/// The signals a launcher forwards.
const FORWARDED: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// While alive, SIGINT/SIGTERM/SIGHUP are blocked in the calling thread and can
/// be read from this descriptor. Dropping it restores the thread's signal mask.
///
/// A process started meanwhile inherits the blocked mask across `fork` and `exec`:
/// give it back the thread's previous mask ([`mask_before`](Self::mask_before)), or
/// it could not be ended by SIGTERM or SIGINT.
///
/// Blocking is per thread: in a process with other threads that do not block
/// these signals, the kernel delivers them there instead (and the default
/// action ends the process, after which PR_SET_PDEATHSIG ends the ranks).
#[derive(Debug)]
pub(crate) struct SignalFd {
    fd: OwnedFd,
    old: libc::sigset_t,
}

fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

impl SignalFd {
    /// Blocks the forwarded signals in this thread and opens the descriptor.
    pub(crate) fn new() -> io::Result<Self> {
        let mut set = MaybeUninit::<libc::sigset_t>::uninit();
        // SAFETY: `set` is valid for writes; sigemptyset initialises it.
        check(unsafe { libc::sigemptyset(set.as_mut_ptr()) })?;
        for sig in FORWARDED {
            // SAFETY: `set` was initialised by sigemptyset above.
            check(unsafe { libc::sigaddset(set.as_mut_ptr(), sig) })?;
        }
        // SAFETY: initialised by sigemptyset/sigaddset above.
        let set = unsafe { set.assume_init() };
        let mut old = MaybeUninit::<libc::sigset_t>::uninit();
        // SAFETY: `set` is initialised; `old` is valid for writes.
        let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, old.as_mut_ptr()) };
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        // SAFETY: pthread_sigmask succeeded, so it wrote the previous mask to `old`.
        let old = unsafe { old.assume_init() };
        // SAFETY: `set` is an initialised signal set; -1 asks for a new descriptor.
        let raw = unsafe { libc::signalfd(-1, &set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK) };
        if raw < 0 {
            let e = io::Error::last_os_error();
            restore(&old);
            return Err(e);
        }
        // SAFETY: `raw` is a new descriptor returned by signalfd that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        Ok(SignalFd { fd, old })
    }

    /// The calling thread's signal mask before [`new`](Self::new) blocked the
    /// forwarded signals: what a rank process must start with.
    pub(crate) fn mask_before(&self) -> libc::sigset_t {
        self.old
    }

    /// Reads one pending signal number, if any.
    pub(crate) fn read(&self) -> io::Result<Option<i32>> {
        // struct signalfd_siginfo is 128 bytes; ssi_signo (u32) comes first.
        let mut buf = [0u8; 128];
        match rustix::io::read(&self.fd, &mut buf) {
            Ok(n) if n >= 4 => {
                let signo = u32::from_ne_bytes([buf[0], buf[1], buf[2], buf[3]]);
                Ok(i32::try_from(signo).ok())
            }
            Ok(_) => Ok(None),
            Err(rustix::io::Errno::AGAIN) | Err(rustix::io::Errno::INTR) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }
}

fn restore(old: &libc::sigset_t) {
    // SAFETY: `old` is the mask previously returned by pthread_sigmask.
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, old, std::ptr::null_mut()) };
    debug_assert_eq!(rc, 0);
}

impl AsFd for SignalFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl Drop for SignalFd {
    fn drop(&mut self) {
        restore(&self.old);
    }
}
