//! Starting one rank process: what runs in the child between `fork` and `exec`.
//!
//! # Safety
//!
//! [`CommandExt::pre_exec`] is `unsafe` because its closure runs in the forked
//! child of a possibly multi-threaded process, where only async-signal-safe
//! operations are allowed. The closure here makes three system calls through
//! rustix (`prctl(PR_SET_PDEATHSIG)`, `getppid`, `fcntl(F_SETFD)`), which are
//! plain syscalls: they neither allocate nor take locks, and may call
//! `pthread_sigmask` (async-signal-safe in POSIX) with a signal set prepared by the
//! parent. Its error values are built from raw OS error numbers, which does not
//! allocate either.

#![allow(unsafe_code)]

use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::sync::Arc;

use rustix::io::FdFlags;
use rustix::process::{Pid, Signal};

/// Spawns `cmd` as a rank.
///
/// In the child, before `exec`: the kernel is asked to send SIGKILL when the
/// launcher thread dies, the parent is checked to still be `launcher` (if it
/// died before the request took effect, the child gives up), and `rank_end` is
/// made inheritable across `exec` (it is close-on-exec in the launcher so that
/// other children never see it). With `mask`, the child's signal mask is set to it
/// (the launcher thread's mask from before it blocked the signals it forwards: a
/// blocked mask survives `exec`, and a rank that inherited it could not be ended
/// by SIGTERM or SIGINT). The caller also puts the child in its own process group.
pub(crate) fn spawn_rank(
    cmd: &mut Command,
    rank_end: &Arc<OwnedFd>,
    launcher: Pid,
    mask: Option<libc::sigset_t>,
) -> io::Result<Child> {
    let fd = Arc::clone(rank_end);
    let hook = move || -> io::Result<()> {
        rustix::process::set_parent_process_death_signal(Some(Signal::KILL))?;
        if rustix::process::getppid() != Some(launcher) {
            // The launcher is already gone: do not run a rank nobody watches.
            return Err(io::Error::from_raw_os_error(libc::ESRCH));
        }
        rustix::io::fcntl_setfd(&*fd, FdFlags::empty())?;
        if let Some(set) = &mask {
            // SAFETY: `set` is an initialised signal set (a copy of the one
            // pthread_sigmask returned in the parent); a null old-set pointer is allowed.
            let rc = unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, set, std::ptr::null_mut()) };
            if rc != 0 {
                return Err(io::Error::from_raw_os_error(rc));
            }
        }
        Ok(())
    };
    // SAFETY: `hook` only makes async-signal-safe system calls and does not
    // allocate (see the module's Safety section).
    unsafe {
        cmd.pre_exec(hook);
    }
    cmd.spawn()
}
