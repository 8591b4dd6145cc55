//! Segment memory of the simulated fabric: raw, zero-filled, 64-byte aligned
//! allocations that every rank thread reads and writes through raw pointers.
//!
//! # Safety
//!
//! - [`SegMem`] owns one allocation from [`std::alloc::alloc_zeroed`] with the layout it
//!   records, freed exactly once in `Drop`. The allocation is never moved or resized, so
//!   base pointers handed out stay valid for as long as the `SegMem` lives (the fabric
//!   keeps it alive for as long as any endpoint or conduit of the job exists).
//! - Segments are shared memory by contract: several threads access them concurrently,
//!   always through raw pointers (never through Rust references the module hands out
//!   for longer than a delivery), with byte-wise atomic copies ([`gex_sync::copy`]), so
//!   conflicting concurrent accesses to the same bytes give unspecified bytes, never a
//!   data race, exactly as on a real conduit; this is why `SegMem` is `Send + Sync`.
//! - [`SegMem::write`] and [`SegMem::slice`] take ranges that the core has bounds-checked
//!   against the segment length; they re-check with `debug_assert!`/`assert!` so a core
//!   bug cannot turn into an out-of-bounds access.
#![allow(unsafe_code)]

use std::alloc::Layout;
use std::ptr::NonNull;

/// One endpoint's segment.
#[derive(Debug)]
pub(crate) struct SegMem {
    base: NonNull<u8>,
    len: usize,
    layout: Layout,
}

// SAFETY: the memory is a plain heap allocation owned by this value; concurrent access
// through raw pointers is the documented shared-memory contract of segments.
unsafe impl Send for SegMem {}
// SAFETY: as above; `&SegMem` only hands out raw pointers and bounds-checked copies.
unsafe impl Sync for SegMem {}

impl SegMem {
    /// A zero-filled segment of `len` bytes (at least one cache line is allocated, so
    /// the base is never dangling, even for `len == 0`).
    ///
    /// # Panics
    /// If `len` does not fit a layout or the allocation fails.
    pub(crate) fn new(len: usize) -> Self {
        let size = len
            .max(1)
            .checked_next_multiple_of(64)
            .expect("segment length overflows");
        let layout = Layout::from_size_align(size, 64).expect("segment layout");
        // SAFETY: `layout` has a non-zero size.
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        let base = NonNull::new(p).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        SegMem { base, len, layout }
    }

    pub(crate) fn base(&self) -> NonNull<u8> {
        self.base
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Copies `data` to `offset` (byte-wise atomic stores; `data` may lie in a segment,
    /// which nothing writes while it is borrowed).
    ///
    /// # Panics
    /// If the range is outside the segment.
    pub(crate) fn write(&self, offset: usize, data: &[u8]) {
        assert!(
            offset
                .checked_add(data.len())
                .is_some_and(|e| e <= self.len),
            "sim: Long write out of segment"
        );
        // SAFETY: the destination range is inside the allocation (checked above).
        // Race-free: byte-wise atomic stores (rank threads access segments at any time);
        // `data` is a shared borrow nothing writes meanwhile (a source inside a segment
        // came from `unsafe` `Segment::as_slice`, whose contract says so).
        unsafe { gex_sync::copy::atomic_write(self.base.as_ptr().add(offset), data) }
    }
}

#[cfg(test)]
impl SegMem {
    /// The bytes at `offset..offset + len` (tests only: nothing writes them meanwhile).
    ///
    /// # Panics
    /// If the range is outside the segment.
    pub(crate) fn slice(&self, offset: usize, len: usize) -> &[u8] {
        assert!(
            offset.checked_add(len).is_some_and(|e| e <= self.len),
            "sim: Long read out of segment"
        );
        // SAFETY: in bounds (checked above) of a live allocation that only this test
        // thread touches.
        unsafe { std::slice::from_raw_parts(self.base.as_ptr().add(offset), len) }
    }
}

impl Drop for SegMem {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with exactly this layout and freed only here.
        unsafe { std::alloc::dealloc(self.base.as_ptr(), self.layout) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zeroed_aligned_and_bounds_checked() {
        let s = SegMem::new(100);
        assert_eq!(s.base().as_ptr() as usize % 64, 0);
        assert!(s.slice(0, 100).iter().all(|&b| b == 0));
        s.write(98, &[1, 2]);
        assert_eq!(s.slice(97, 3), &[0, 1, 2]);
        assert!(std::panic::catch_unwind(|| s.write(99, &[1, 2])).is_err());
        let z = SegMem::new(0);
        assert_eq!(z.slice(0, 0), &[] as &[u8]);
    }
}
