//! The portable implementation (every architecture but x86-64, and x86-64 under Miri,
//! which cannot run inline assembly): one relaxed [`AtomicU8`] access per byte,
//! unrolled by eight. Byte-sized accesses on purpose: a wider atomic meeting a byte
//! access of another copy at a different alignment would be a mixed-size race, which
//! Rust's memory model makes undefined behaviour, whereas bytes against bytes are
//! always the same size.
//!
//! # Safety
//! The contracts of [`super::atomic_copy`] and [`super::atomic_fill`]: every address
//! used is inside a range the caller vouched for, and a byte is always aligned for
//! `AtomicU8`.

use std::sync::atomic::{AtomicU8, Ordering::Relaxed};

/// Relaxed load of the byte at `p`.
///
/// # Safety
/// `p` is valid for reads.
#[inline(always)]
unsafe fn ld(p: *const u8) -> u8 {
    // SAFETY: valid (contract) and aligned (a byte); every concurrent access of this
    // module is an `AtomicU8` access too.
    unsafe { AtomicU8::from_ptr(p.cast_mut()) }.load(Relaxed)
}

/// Relaxed store of `v` at `p`.
///
/// # Safety
/// `p` is valid for writes.
#[inline(always)]
unsafe fn st(p: *mut u8, v: u8) {
    // SAFETY: as `ld`.
    unsafe { AtomicU8::from_ptr(p) }.store(v, Relaxed)
}

/// A load of the byte at `p`: relaxed atomic if `ATOMIC`, plain otherwise.
///
/// # Safety
/// `p` is valid for reads; if not `ATOMIC`, nothing writes it concurrently.
#[inline(always)]
unsafe fn load<const ATOMIC: bool>(p: *const u8) -> u8 {
    // SAFETY: contract.
    unsafe { if ATOMIC { ld(p) } else { p.read() } }
}

/// A store of `v` at `p`: relaxed atomic if `ATOMIC`, plain otherwise.
///
/// # Safety
/// `p` is valid for writes; if not `ATOMIC`, nothing else accesses it concurrently.
#[inline(always)]
unsafe fn store<const ATOMIC: bool>(p: *mut u8, v: u8) {
    // SAFETY: contract.
    unsafe { if ATOMIC { st(p, v) } else { p.write(v) } }
}

/// Copies `n` bytes from `src` to `dst` (the ranges may overlap), with atomic loads
/// if `AS` and atomic stores if `AD` (a side that is not atomic is private to the
/// caller: [`super::atomic_read`]'s output, [`super::atomic_write`]'s input).
///
/// # Safety
/// As [`super::atomic_copy`]; a side that is not atomic is not accessed by anyone
/// else during the call.
#[inline]
pub(super) unsafe fn copy<const AS: bool, const AD: bool>(src: *const u8, dst: *mut u8, n: usize) {
    let forward = (dst as usize).wrapping_sub(src as usize) >= n;
    // SAFETY: every access is at an index below `n` of a range the caller vouched for.
    // Each group of eight is loaded before it is stored, and groups go in the
    // direction that never loads a byte already overwritten.
    unsafe {
        if forward {
            let mut i = 0;
            while i + 8 <= n {
                let mut b = [0u8; 8];
                for (k, v) in b.iter_mut().enumerate() {
                    *v = load::<AS>(src.add(i + k));
                }
                for (k, v) in b.iter().enumerate() {
                    store::<AD>(dst.add(i + k), *v);
                }
                i += 8;
            }
            while i < n {
                store::<AD>(dst.add(i), load::<AS>(src.add(i)));
                i += 1;
            }
        } else {
            let mut i = n;
            while i >= 8 {
                i -= 8;
                let mut b = [0u8; 8];
                for (k, v) in b.iter_mut().enumerate() {
                    *v = load::<AS>(src.add(i + k));
                }
                for (k, v) in b.iter().enumerate().rev() {
                    store::<AD>(dst.add(i + k), *v);
                }
            }
            while i > 0 {
                i -= 1;
                store::<AD>(dst.add(i), load::<AS>(src.add(i)));
            }
        }
    }
}

/// Sets `n` bytes at `dst` to `byte`.
///
/// # Safety
/// As [`super::atomic_fill`].
#[inline]
pub(super) unsafe fn fill(dst: *mut u8, byte: u8, n: usize) {
    for i in 0..n {
        // SAFETY: below `n` (contract).
        unsafe { st(dst.add(i), byte) };
    }
}
