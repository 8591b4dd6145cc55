//! The direct path: when the conduit maps the target's segment here (a neighbour in
//! shared memory, or this endpoint), a put or get is a copy through the mapping and a
//! memset a fill, complete when the call returns. No event slot, no allocation, no
//! message: a bounds check (done by the caller) and a copy.
//!
//! # Safety
//! The mapping comes from [`Cx::peer_segment`](gex_core::layer::Cx::peer_segment) and
//! stays valid for the life of the conduit (which the endpoint holds); every remote
//! range was checked against the target's published segment length before these
//! functions run. Copies go through raw pointers (`std::ptr::copy`, which tolerates
//! the overlap of a self-targeted transfer), never through references to segment
//! memory, which other ranks may write at any time (conflicting concurrent accesses to
//! the same bytes give unspecified bytes across processes, as in every PGAS library;
//! between threads of one process they are a data race in Rust's memory model, a known
//! hole: `tests/rma_race.rs`, under Miri).
#![allow(unsafe_code)]

use crate::vis::Chunk;
use std::ptr::NonNull;

/// Copies `chunks` of `src` into the segment mapped at `base`.
///
/// # Safety
/// Every `c.remote .. c.remote + c.len` lies in the mapped segment; every
/// `c.local .. c.local + c.len` in `src`.
#[inline]
pub(crate) unsafe fn put(base: NonNull<u8>, chunks: &[Chunk], src: &[u8]) {
    for c in chunks {
        debug_assert!(c.local + c.len <= src.len());
        // SAFETY: both ranges are in bounds (contract); they may overlap.
        unsafe {
            std::ptr::copy(
                src.as_ptr().add(c.local),
                base.as_ptr().add(c.remote),
                c.len,
            )
        };
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
        // SAFETY: both ranges are in bounds (contract); they may overlap.
        unsafe { std::ptr::copy(base.as_ptr().add(c.remote), dst.add(c.local), c.len) };
    }
}

/// Sets `len` bytes at `offset` of the segment mapped at `base` to `byte`.
///
/// # Safety
/// `offset .. offset + len` lies in the mapped segment.
#[inline]
pub(crate) unsafe fn fill(base: NonNull<u8>, offset: usize, byte: u8, len: usize) {
    // SAFETY: in bounds (contract).
    unsafe { std::ptr::write_bytes(base.as_ptr().add(offset), byte, len) };
}
