//! Zero-filled, page-aligned heap blocks the conduit registers: segments, receive and
//! send buffers, credit words.
//!
//! # Safety
//! A [`Mem`] owns its allocation; it hands out only raw pointers, and the code that
//! dereferences them says why the access is valid. Dropping it frees the block (every
//! registration of it is dropped before: the owners order their fields so).
#![allow(unsafe_code)]

use std::alloc::Layout;
use std::ptr::NonNull;

/// A zero-filled heap block, 4096-byte aligned.
#[derive(Debug)]
pub(crate) struct Mem {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: a block of plain bytes; every access goes through raw pointers whose users
// synchronise (atomics, completions), so sharing the owner between threads is sound.
unsafe impl Send for Mem {}
// SAFETY: as above.
unsafe impl Sync for Mem {}

impl Mem {
    /// Allocates `len` zero bytes (at least one page); `None` when out of memory.
    pub(crate) fn new(len: usize) -> Option<Mem> {
        let layout = Layout::from_size_align(len.max(1).next_multiple_of(4096), 4096).ok()?;
        // SAFETY: the layout has a non-zero size.
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        Some(Mem {
            ptr: NonNull::new(p)?,
            len,
        })
    }
    /// The base address.
    pub(crate) fn ptr(&self) -> NonNull<u8> {
        self.ptr
    }
    /// The length asked for.
    pub(crate) fn len(&self) -> usize {
        self.len
    }
    /// The address of byte `off` (`off <= len`).
    pub(crate) fn at(&self, off: usize) -> *mut u8 {
        assert!(off <= self.len, "offset {off} past a block of {}", self.len);
        // SAFETY: within the allocation (checked).
        unsafe { self.ptr.as_ptr().add(off) }
    }
    /// Loads the 8-byte word `i` (the NIC writes it: credit words).
    pub(crate) fn load_word(&self, i: usize) -> u64 {
        assert!(
            (i + 1) * 8 <= self.len,
            "word {i} past a block of {}",
            self.len
        );
        // SAFETY: aligned (the block is 4096-aligned), within the allocation, alive as
        // long as `self`; every access to these words goes through gex-sync's words
        // (the emulated NIC's too; a NIC's DMA is outside the program).
        unsafe { gex_sync::word::load64(self.at(i * 8), gex_sync::atomic::Ordering::Acquire) }
    }
    /// Stores the 8-byte word `i` (the NIC reads it: credit words).
    pub(crate) fn store_word(&self, i: usize, v: u64) {
        assert!(
            (i + 1) * 8 <= self.len,
            "word {i} past a block of {}",
            self.len
        );
        // SAFETY: as in `load_word`.
        unsafe { gex_sync::word::store64(self.at(i * 8), v, gex_sync::atomic::Ordering::Release) }
    }
}

impl Drop for Mem {
    fn drop(&mut self) {
        let layout = Layout::from_size_align(self.len.max(1).next_multiple_of(4096), 4096)
            .expect("checked at allocation");
        // SAFETY: allocated with this layout in `new`.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), layout) };
    }
}
