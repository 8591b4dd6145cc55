//! Cross Memory Attach (CMA): reading another process's memory with
//! `process_vm_readv(2)`, for single-copy transfers between processes of one host
//! (gex-coll's shared-memory collectives, gex-msg's rendezvous).
//!
//! The kernel checks the remote address range against the target's mappings: a bad or
//! stale address is an error (`EFAULT`), or at worst bytes the target holds there now,
//! never undefined behaviour in the reading process. Whether a process may read
//! another's memory depends on the host's policy (Yama's `ptrace_scope`, the target's
//! dumpable flag, seccomp profiles): [`cma_capable`] tells, once per process, and a
//! caller falls back to a copying protocol when it is false or a read fails (`EPERM`).
//!
//! ```
//! let src = [7u8; 32];
//! let mut dst = [0u8; 32];
//! if gex_sync::cma::cma_capable() {
//!     gex_sync::cma::cma_read(u64::from(std::process::id()), src.as_ptr() as usize, &mut dst)?;
//!     assert_eq!(dst, src);
//! }
//! # Ok::<(), std::io::Error>(())
//! ```
#![allow(unsafe_code)]

/// True if this process can take part in CMA transfers (read and be read): Linux, the process is
/// dumpable (else other processes may not read its memory), Yama's `ptrace_scope` is
/// absent or 0 (else only ancestors may), and `process_vm_readv` works (a seccomp
/// profile may refuse it), tried once on this process's own memory. Evaluated once
/// per process. False under Miri, which has neither `prctl` nor `process_vm_readv`
/// (and runs one process).
pub fn cma_capable() -> bool {
    static CAPABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *CAPABLE.get_or_init(cma_probe)
}

/// The inode of this process's pid namespace (0 if unknown). Evaluated once.
pub fn pid_namespace() -> u64 {
    static NS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *NS.get_or_init(|| {
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            std::fs::metadata("/proc/self/ns/pid").map_or(0, |m| m.ino())
        }
        #[cfg(not(unix))]
        {
            0
        }
    })
}

#[cfg(all(target_os = "linux", not(miri)))]
fn cma_probe() -> bool {
    let yama = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .map(|s| s.trim() == "0")
        .unwrap_or(true);
    // SAFETY: PR_GET_DUMPABLE takes no pointer arguments and only reads a flag.
    let dumpable = unsafe { libc::prctl(libc::PR_GET_DUMPABLE, 0, 0, 0, 0) } == 1;
    if !yama || !dumpable {
        return false;
    }
    let src = [0x5au8; 64];
    let mut dst = [0u8; 64];
    cma_read(
        u64::from(std::process::id()),
        src.as_ptr() as usize,
        &mut dst,
    )
    .is_ok()
        && dst == src
}

#[cfg(any(not(target_os = "linux"), miri))]
fn cma_probe() -> bool {
    false
}

/// Reads `dst.len()` bytes at `addr` in process `pid` into `dst` with
/// `process_vm_readv(2)` (repeating after a partial transfer). Sound whatever `pid`
/// and `addr` are: the kernel reads the remote range, and only `dst` is written here.
///
/// # Errors
/// The system call's error: `EPERM` (the host's policy refuses), `ESRCH` (no such
/// process), `EFAULT` (the range is not mapped in the target), `UnexpectedEof` if the
/// target's mapping ends inside the range; `Unsupported` off Linux.
#[cfg(target_os = "linux")]
pub fn cma_read(pid: u64, addr: usize, dst: &mut [u8]) -> std::io::Result<()> {
    let len = dst.len();
    transfer(addr, len, |done, remote| {
        let local = libc::iovec {
            iov_base: dst[done..].as_mut_ptr().cast(),
            iov_len: len - done,
        };
        // SAFETY: `local` describes the writable rest of `dst`, which nothing else
        // touches during the call; the kernel checks `remote` against the target's
        // mappings (a bad address is an error, not undefined behaviour); one iovec
        // each.
        unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, remote, 1, 0) }
    })
}

/// Reads `len` bytes at `addr` in process `pid` and appends them to `buf` (as
/// [`cma_read`], into `buf`'s spare capacity: no zeroing of the destination first,
/// which for a 1 MiB message cost about a third as much as the read itself). On an
/// error `buf`'s length is unchanged (its spare capacity may hold some of the bytes).
///
/// ```
/// let src = [7u8; 32];
/// let mut buf = vec![1u8];
/// if gex_sync::cma::cma_capable() {
///     gex_sync::cma::cma_read_append(u64::from(std::process::id()), src.as_ptr() as usize, 32, &mut buf)?;
///     assert_eq!(buf.len(), 33);
///     assert_eq!(&buf[1..], &src);
/// }
/// # Ok::<(), std::io::Error>(())
/// ```
///
/// # Errors
/// As [`cma_read`].
#[cfg(target_os = "linux")]
pub fn cma_read_append(
    pid: u64,
    addr: usize,
    len: usize,
    buf: &mut Vec<u8>,
) -> std::io::Result<()> {
    buf.reserve(len);
    let at = buf.len();
    let spare = buf.spare_capacity_mut().as_mut_ptr();
    transfer(addr, len, |done, remote| {
        let local = libc::iovec {
            // SAFETY: `done < len <= spare capacity` (reserved above), so the
            // pointer stays inside the allocation.
            iov_base: unsafe { spare.add(done) }.cast(),
            iov_len: len - done,
        };
        // SAFETY: `local` describes the rest of the `len` bytes of `buf`'s spare
        // capacity (allocated, unused, borrowed mutably through `buf`); the kernel
        // writes it, never reads it; the remote range is checked by the kernel; one
        // iovec each.
        unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, remote, 1, 0) }
    })?;
    // SAFETY: `transfer` returned Ok only after the kernel wrote all `len` bytes
    // after `at`, which lie within the capacity reserved above.
    unsafe { buf.set_len(at + len) };
    Ok(())
}

/// Off Linux: always `Unsupported`.
///
/// # Errors
/// Always.
#[cfg(not(target_os = "linux"))]
pub fn cma_read_append(
    _pid: u64,
    _addr: usize,
    _len: usize,
    _buf: &mut Vec<u8>,
) -> std::io::Result<()> {
    Err(std::io::Error::from(std::io::ErrorKind::Unsupported))
}

/// Moves `len` bytes to or from `addr..addr + len` of another process: `once(done,
/// remote)` moves bytes from `done` on (`remote` describes `addr + done..addr + len`)
/// and returns what `process_vm_readv`/`process_vm_writev` returned; repeated after a
/// partial transfer. A negative return is the OS error, 0 before the end
/// `UnexpectedEof`.
#[cfg(target_os = "linux")]
#[inline]
fn transfer(
    addr: usize,
    len: usize,
    mut once: impl FnMut(usize, &libc::iovec) -> isize,
) -> std::io::Result<()> {
    let mut done = 0;
    while done < len {
        let remote = libc::iovec {
            iov_base: (addr + done) as *mut libc::c_void,
            iov_len: len - done,
        };
        let r = once(done, &remote);
        if r < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if r == 0 {
            return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof));
        }
        done += r as usize;
    }
    Ok(())
}

/// Writes `src` at `addr` in process `pid` with `process_vm_writev(2)` (repeating
/// after a partial transfer). Nothing in this process is written; the kernel checks
/// the remote range against the target's mappings.
///
/// # Safety
/// The write changes another process's memory behind its back: the caller must know
/// that the target offered the range `addr..addr + src.len()` for this write (it
/// published the address, and does not read or write the range until it learns,
/// through a synchronising atomic of shared memory, that the write is over), as
/// gex-msg's cooperative copy does (`gex_msg::coop`). With `pid` this process, the
/// range must likewise be memory no reference of this process covers during the call.
///
/// # Errors
/// As [`cma_read`]: `EPERM`, `ESRCH`, `EFAULT`, `UnexpectedEof`; `Unsupported` off Linux.
#[cfg(target_os = "linux")]
pub unsafe fn cma_write(pid: u64, addr: usize, src: &[u8]) -> std::io::Result<()> {
    transfer(addr, src.len(), |done, remote| {
        let local = libc::iovec {
            iov_base: src[done..].as_ptr().cast_mut().cast(),
            iov_len: src.len() - done,
        };
        // SAFETY: `local` describes the rest of `src`, which the kernel only reads;
        // the remote range is the target's, offered for this write (the caller's
        // contract), and checked by the kernel against its mappings; one iovec each.
        unsafe { libc::process_vm_writev(pid as libc::pid_t, &local, 1, remote, 1, 0) }
    })
}

/// Off Linux: always `Unsupported`.
///
/// # Safety
/// None needed (nothing is written); `unsafe` as on Linux.
///
/// # Errors
/// Always.
#[cfg(not(target_os = "linux"))]
pub unsafe fn cma_write(_pid: u64, _addr: usize, _src: &[u8]) -> std::io::Result<()> {
    Err(std::io::Error::from(std::io::ErrorKind::Unsupported))
}

/// Off Linux: always `Unsupported`.
///
/// # Errors
/// Always.
#[cfg(not(target_os = "linux"))]
pub fn cma_read(_pid: u64, _addr: usize, _dst: &mut [u8]) -> std::io::Result<()> {
    Err(std::io::Error::from(std::io::ErrorKind::Unsupported))
}

#[cfg(all(test, target_os = "linux", not(miri)))]
mod tests {
    use super::*;

    #[test]
    fn read_append_appends_or_leaves_the_length() {
        if !cma_capable() {
            eprintln!("CMA refused on this host: nothing to check");
            return;
        }
        let me = u64::from(std::process::id());
        let src: Vec<u8> = (0..100_000u32).map(|i| (i * 7) as u8).collect();
        let mut buf = vec![9u8; 3];
        cma_read_append(me, src.as_ptr() as usize, src.len(), &mut buf).unwrap();
        assert_eq!(buf.len(), 3 + src.len());
        assert_eq!(&buf[..3], &[9, 9, 9]);
        assert!(buf[3..] == src[..]);
        // An address nothing maps: an error, the length unchanged.
        let before = buf.len();
        let e = cma_read_append(me, 8, 4096, &mut buf).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EFAULT), "{e}");
        assert_eq!(buf.len(), before);
    }
}
