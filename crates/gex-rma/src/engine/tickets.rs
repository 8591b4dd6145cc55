//! The native path's tickets ([`crate::native`]): issuing the pieces of a transfer
//! with the conduit's native operations, and retiring the tickets they leave.
//!
//! # Safety
//! As [`crate::native`]: the buffers handed to the conduit stay valid until the
//! operation completes, and remote ranges were checked before.
#![allow(unsafe_code)]

use crate::RmaError;
use crate::native::*;
use crate::state::Rma;
use crate::vis::Chunk;
use gex_core::EpAddr;
use gex_core::layer::Cx;
use gex_core::spi::{Conduit, Native, NativeAtomic, SegRange};
use std::sync::Arc;

impl Rma {
    /// Records ticket `t` of operation `id` (`units` of it).
    pub(crate) fn track_native<C: Conduit>(
        &mut self,
        cx: &mut Cx<'_, C>,
        id: u32,
        ticket: u64,
        units: usize,
        src: Option<Arc<[u8]>>,
    ) {
        self.ops.bump(id, units);
        self.native.push(NativePend::new(ticket, id, units, src));
        cx.set_busy();
    }

    /// Tests the conduit for completed native operations and credits their entries.
    pub(crate) fn retire_native<C: Conduit>(&mut self, cx: &mut Cx<'_, C>) {
        let mut i = 0;
        while i < self.native.len() {
            if cx.native_test(self.native[i].ticket) {
                let p = self.native.swap_remove(i);
                // Dropped here: the source copy is no longer read.
                let (id, units) = (p.id, p.units);
                drop(p);
                if !self.ops.credit(id, units) {
                    self.served.dropped += 1;
                }
            } else {
                i += 1;
            }
        }
    }

    /// Issues native puts of `chunks[*ci..]` to `dst` for operation `id`.
    ///
    /// # Safety
    /// `src.base + c.local .. + c.len` is readable for every chunk, until completion
    /// (module `# Safety`); remote ranges were checked.
    pub(crate) unsafe fn native_put_chunks<C: Conduit>(
        &mut self,
        cx: &mut Cx<'_, C>,
        id: u32,
        dst: EpAddr,
        chunks: &[Chunk],
        ci: &mut usize,
        src: PutSrc<'_>,
    ) -> Result<NativeStep, RmaError> {
        while let Some(c) = chunks.get(*ci) {
            if c.len == 0 {
                *ci += 1;
                continue;
            }
            // SAFETY: forwarded contract.
            let r = unsafe {
                let (to, p) = (SegRange::new(dst, c.remote, c.len), src.base.add(c.local));
                if src.relaxed {
                    cx.native_put_relaxed(to, p)
                } else {
                    cx.native_put(to, p)
                }
            }?;
            match r {
                Native::Done => {}
                Native::Pending(t) => self.track_native(cx, id, t, 1, src.copy.cloned()),
                Native::WouldBlock => return Ok(NativeStep::Blocked),
                Native::Unsupported => return Ok(NativeStep::Unsupported),
            }
            if src.relaxed {
                self.nbi.dirty(dst);
            }
            *ci += 1;
        }
        Ok(NativeStep::Done)
    }

    /// Issues native gets of `chunks[*ci..]` from `src` into `dst` for operation `id`
    /// (bytes are its units).
    ///
    /// # Safety
    /// `dst + c.local .. + c.len` is writable for every chunk and untouched by anyone
    /// else until completion (module `# Safety`); remote ranges were checked.
    pub(crate) unsafe fn native_get_chunks<C: Conduit>(
        &mut self,
        cx: &mut Cx<'_, C>,
        id: u32,
        src: EpAddr,
        chunks: &[Chunk],
        ci: &mut usize,
        dst: *mut u8,
    ) -> Result<NativeStep, RmaError> {
        while let Some(c) = chunks.get(*ci) {
            if c.len == 0 {
                *ci += 1;
                continue;
            }
            // SAFETY: forwarded contract.
            let r =
                unsafe { cx.native_get(SegRange::new(src, c.remote, c.len), dst.add(c.local)) }?;
            match r {
                Native::Done => {}
                Native::Pending(t) => self.track_native(cx, id, t, c.len, None),
                Native::WouldBlock => return Ok(NativeStep::Blocked),
                Native::Unsupported => return Ok(NativeStep::Unsupported),
            }
            *ci += 1;
        }
        Ok(NativeStep::Done)
    }

    /// Issues one native atomic on the word at `op.offset` of `op.dst`; a fetched value lands
    /// in `land`, which is null exactly when `op.fetch` is false (the conduit's
    /// contract), whether or not the value is wanted.
    ///
    /// # Safety
    /// `land` is valid for a write of a `u64` until completion (the entry of `id` owns
    /// it) when `op.fetch`, null otherwise; the word was checked in range and aligned.
    pub(crate) unsafe fn native_atomic<C: Conduit>(
        &mut self,
        cx: &mut Cx<'_, C>,
        id: u32,
        op: &NativeAtomic,
        land: *mut u64,
    ) -> Result<NativeStep, RmaError> {
        debug_assert_eq!(op.fetch, !land.is_null(), "a landing word iff fetching");
        // SAFETY: forwarded contract.
        match unsafe { cx.native_atomic(op, land) }? {
            Native::Done => Ok(NativeStep::Done),
            Native::Pending(t) => {
                self.track_native(cx, id, t, 1, None);
                Ok(NativeStep::Done)
            }
            Native::WouldBlock => Ok(NativeStep::Blocked),
            Native::Unsupported => Ok(NativeStep::Unsupported),
        }
    }
}
