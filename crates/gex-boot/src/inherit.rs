//! Adopting a socket that a launcher left open in this process (the fork launcher's
//! `GEX_BOOT_FD`, Hydra's `PMI_FD`).
//!
//! # Safety
//! The only `unsafe` is borrowing the inherited descriptor number named by the launcher's
//! environment variable. The launcher guarantees the descriptor is open in this process;
//! the borrow lives only for the two `fcntl` calls that duplicate it and mark it
//! close-on-exec, and nothing in this process closes it meanwhile. A number that is not
//! an open socket is reported as an error, never used.
#![allow(unsafe_code)]

use std::os::fd::{BorrowedFd, OwnedFd, RawFd};

use gex_core::boot::BootError;
use rustix::io::FdFlags;

/// Takes a private, close-on-exec duplicate of descriptor `fd` (from variable `var`,
/// set by `launcher`) and marks the inherited one close-on-exec so programs this rank
/// starts do not inherit it.
pub(crate) fn socket(var: &str, fd: u32, launcher: &str) -> Result<OwnedFd, BootError> {
    let Ok(raw) = RawFd::try_from(fd) else {
        return Err(BootError::Environment(format!(
            "{var}={fd} is out of range"
        )));
    };
    if raw <= 2 {
        return Err(BootError::Environment(format!(
            "{var}={fd} names a standard stream, not a socket from {launcher}"
        )));
    }
    // SAFETY: the launcher left descriptor `raw` open in this process (module Safety
    // section); the borrow is used for the two fcntl calls below only.
    let inherited = unsafe { BorrowedFd::borrow_raw(raw) };
    let owned = rustix::io::fcntl_dupfd_cloexec(inherited, 3).map_err(|e| {
        BootError::Environment(format!(
            "{var}={fd} is not an open descriptor ({e}); was this process started by {launcher}?"
        ))
    })?;
    rustix::io::fcntl_setfd(inherited, FdFlags::CLOEXEC).map_err(|e| BootError::Io(e.into()))?;
    let stat = rustix::fs::fstat(&owned).map_err(|e| BootError::Io(e.into()))?;
    if rustix::fs::FileType::from_raw_mode(stat.st_mode) != rustix::fs::FileType::Socket {
        return Err(BootError::Environment(format!(
            "{var}={fd} is not a socket; was this process started by {launcher}?"
        )));
    }
    Ok(owned)
}
