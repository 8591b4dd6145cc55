//! The direct path: when the conduit maps the target's segment here (a neighbour in
//! shared memory, or this endpoint), a put or get is a copy through the mapping and a
//! memset a fill, complete when the call returns. No event slot, no allocation, no
//! message: a bounds check (done by the caller) and a copy.
//!
//! # Safety
//! The mapping comes from [`Cx::peer_segment`](gex_core::layer::Cx::peer_segment) and
//! stays valid for the life of the conduit (which the endpoint holds); every remote
//! range was checked against the target's published segment length before these
//! functions run. Copies go through raw pointers, never through references to segment
//! memory, and are byte-wise atomic on the segment side ([`gex_sync::copy`]: as fast
//! as `memcpy`): other ranks, endpoints and threads may read or write the same bytes
//! at any time, and conflicting concurrent accesses give unspecified bytes, never a
//! data race, between processes and between threads of one process alike
//! (`tests/rma_race.rs`, under Miri).
#![allow(unsafe_code)]

use crate::vis::Chunk;
use std::ptr::NonNull;

/// The direct-copy put: copies `src` into the segment at `at`. Every put on the
/// direct path ends here (the fastest path of a contiguous put, its slow path's
/// direct case, and each chunk of a VIS put).
///
/// # Safety
/// `at .. at + src.len()` lies in a live mapping of a segment.
#[inline(always)]
pub(crate) unsafe fn put_at(at: *mut u8, src: &[u8]) {
    // SAFETY: in bounds (contract). Race-free: byte-wise atomic stores into the
    // segment; `src` is the caller's.
    unsafe { gex_sync::copy::atomic_write(at, src) };
}

/// The direct-copy get: copies `len` bytes of the segment at `at` to `dst`. Every get
/// on the direct path ends here.
///
/// # Safety
/// `at .. at + len` lies in a live mapping of a segment; `dst` is valid for writes of
/// `len` bytes and not otherwise borrowed.
#[inline(always)]
pub(crate) unsafe fn get_at(at: *const u8, dst: *mut u8, len: usize) {
    // SAFETY: both ranges are in bounds (contract). Race-free: byte-wise atomic
    // loads from the segment; `dst` is not otherwise borrowed (contract).
    unsafe { gex_sync::copy::atomic_copy(at, dst, len) };
}

/// Copies `chunks` of `src` into the segment mapped at `base`.
///
/// # Safety
/// Every `c.remote .. c.remote + c.len` lies in the mapped segment; every
/// `c.local .. c.local + c.len` in `src`.
#[inline]
pub(crate) unsafe fn put(base: NonNull<u8>, chunks: &[Chunk], src: &[u8]) {
    for c in chunks {
        debug_assert!(c.local + c.len <= src.len());
        // SAFETY: the remote range is in the mapping (contract).
        unsafe { put_at(base.as_ptr().add(c.remote), &src[c.local..c.local + c.len]) };
    }
}

/// Copies `chunks` of the segment mapped at `base` into `dst`.
///
/// # Safety
/// Every `c.remote .. c.remote + c.len` lies in the mapped segment; every
/// `c.local .. c.local + c.len` is writable at `dst` and not otherwise borrowed.
#[inline]
pub(crate) unsafe fn get(base: NonNull<u8>, chunks: &[Chunk], dst: *mut u8) {
    for c in chunks {
        // SAFETY: both ranges are in bounds (contract).
        unsafe { get_at(base.as_ptr().add(c.remote), dst.add(c.local), c.len) };
    }
}

/// Sets `len` bytes at `offset` of the segment mapped at `base` to `byte`.
///
/// # Safety
/// `offset .. offset + len` lies in the mapped segment.
#[inline]
pub(crate) unsafe fn fill(base: NonNull<u8>, offset: usize, byte: u8, len: usize) {
    // SAFETY: in bounds (contract). Race-free: byte-wise atomic stores.
    unsafe { gex_sync::copy::atomic_fill(base.as_ptr().add(offset), byte, len) };
}
