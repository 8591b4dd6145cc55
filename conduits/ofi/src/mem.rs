//! Memory the conduit hands to libfabric: page-aligned zero-filled allocations at fixed
//! addresses ([`Mem`]) and pools of send or receive buffers with one libfabric context
//! per buffer ([`Pool`]), so a completion's context names its buffer.
//!
//! # Safety
//! A [`Mem`] never moves and is freed once, by its `Drop`, unless it only names memory
//! owned elsewhere ([`Mem::shared`]). Pool buffers and contexts are addressed by index
//! inside their allocation; who may touch a buffer while libfabric holds it is the
//! business of the endpoint that owns the pool (the Safety sections of `tx`, `rx` and
//! `close`). Whoever owns a `Mem` that libfabric was given (registered, or posted to an
//! endpoint) drops it only after the endpoint and the registration are closed, on every
//! path (the Safety sections of `open` and `close`).
#![allow(unsafe_code)]

use crate::config::conduit_err;
use crate::fabric::{Desc, flags};
use gex_core::InitError;
use std::ptr::NonNull;

/// A zero-filled, page-aligned heap allocation at a fixed address, or (hybrid jobs) a
/// segment inside the node-local shared region, which the conduit's `Smp` owns.
#[derive(Debug)]
pub(crate) struct Mem {
    ptr: NonNull<u8>,
    /// `None`: not owned (a segment of the shared region, freed with the `Smp`).
    layout: Option<std::alloc::Layout>,
}

// SAFETY: plain memory; every access goes through raw pointers under the rules of the
// module's Safety section (segments: the application's responsibility, as on every
// conduit; pools: only the endpoint that owns them).
unsafe impl Send for Mem {}
// SAFETY: as above.
unsafe impl Sync for Mem {}

impl Mem {
    /// A zero-filled, page-aligned allocation of `len` bytes (at least one).
    pub(crate) fn new(len: usize) -> Result<Mem, InitError> {
        let layout = std::alloc::Layout::from_size_align(len.max(1), 4096)
            .map_err(|_| InitError::Config(format!("ofi: {len}-byte allocation too large")))?;
        // SAFETY: non-zero size.
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr =
            NonNull::new(p).ok_or_else(|| conduit_err(format!("out of memory ({len} bytes)")))?;
        Ok(Mem {
            ptr,
            layout: Some(layout),
        })
    }
    /// A segment of the node-local shared region (hybrid jobs), not owned.
    pub(crate) fn shared(ptr: NonNull<u8>) -> Mem {
        Mem { ptr, layout: None }
    }
    /// The first byte.
    pub(crate) fn base(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

impl Drop for Mem {
    fn drop(&mut self) {
        if let Some(layout) = self.layout {
            #[cfg(test)]
            crate::test_hooks::note(crate::test_hooks::Event::Freed {
                base: self.ptr.as_ptr() as usize,
                len: layout.size(),
            });
            // SAFETY: allocated in `new` with this layout, freed once. No libfabric
            // object uses it any more: a pool or slot array is freed only after the
            // endpoint it was posted to and its registration are closed (`open::Local`
            // and `close::Grave`, where an `OfiEp`'s parts end, drop their `ep::Objects`
            // first); a segment only after every endpoint (`Ofi`'s drop closes the
            // graves before its fields go; in `open` the segments outlive the parts).
            unsafe { std::alloc::dealloc(self.ptr.as_ptr(), layout) };
        }
    }
}

/// `count` buffers of `stride` bytes, with a libfabric context slot each.
#[derive(Debug)]
pub(crate) struct Pool {
    pub(crate) mem: Mem,
    pub(crate) stride: usize,
    pub(crate) count: usize,
    ctx: Mem,
    /// Descriptor of the pool's registration (under `FI_MR_LOCAL`), else none.
    pub(crate) desc: Desc,
}

impl Pool {
    /// `count` zero-filled buffers of `stride` bytes.
    pub(crate) fn new(count: usize, stride: usize) -> Result<Pool, InitError> {
        Ok(Pool {
            mem: Mem::new(count * stride)?,
            stride,
            count,
            ctx: Mem::new(count * flags::CONTEXT_BYTES)?,
            desc: Desc::NONE,
        })
    }
    /// Buffer `i`.
    #[inline(always)]
    pub(crate) fn buf(&self, i: usize) -> *mut u8 {
        debug_assert!(i < self.count);
        // SAFETY: i < count: inside the allocation.
        unsafe { self.mem.base().add(i * self.stride) }
    }
    /// The libfabric context of buffer `i`.
    #[inline(always)]
    pub(crate) fn ctx(&self, i: usize) -> *mut std::ffi::c_void {
        // SAFETY: i < count: inside the context array.
        unsafe { self.ctx.base().add(i * flags::CONTEXT_BYTES) }.cast()
    }
    /// The buffer index of a context pointer, if it is one of this pool's.
    #[inline(always)]
    pub(crate) fn index_of(&self, ctx: *mut std::ffi::c_void) -> Option<usize> {
        let (p, b) = (ctx as usize, self.ctx.base() as usize);
        let off = p.checked_sub(b)?;
        (off < self.count * flags::CONTEXT_BYTES && off % flags::CONTEXT_BYTES == 0)
            .then_some(off / flags::CONTEXT_BYTES)
    }
    /// Bytes of all buffers together.
    pub(crate) fn len(&self) -> usize {
        self.count * self.stride
    }
}
