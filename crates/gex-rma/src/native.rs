//! The native path: operations the network performs itself
//! ([`ConduitEp::native_put`], [`ConduitEp::native_put_relaxed`],
//! [`ConduitEp::native_get`], [`ConduitEp::native_atomic`]) for peers the conduit does
//! not map. A call answering [`Native::Pending`] leaves a ticket, recorded as a
//! [`NativePend`] counting toward its operation and retired by the layer's progress
//! hook (which reports `Spinning` meanwhile: a native completion wakes no sleeper).
//! [`Native::Unsupported`] for a piece hands the rest of the transfer to the AM path.
//!
//! # Safety
//! The unsafe calls hand buffers to the conduit, which may use them until the
//! operation completes:
//! - a put's source is either borrowed until completion (a blocking call waits for its
//!   event before returning; a scoped put borrows it for the scope, which waits), or a
//!   copy owned by the [`NativePend`] entries (`Arc<[u8]>`) for puts whose source the
//!   caller may reuse at once;
//! - a get's destination and a fetch's landing word follow the rules of
//!   [`crate::layer`] (borrowed until completion, owned by the event, or owned by the
//!   operation's entry);
//! - remote ranges were checked against the published segment lengths before.
#![allow(unsafe_code)]

use crate::RmaError;
use crate::layer::Rma;
use crate::vis::Chunk;
use gex_core::EpAddr;
use gex_core::layer::Cx;
use gex_core::spi::{Conduit, Native, NativeAtomic};
use std::sync::Arc;

/// A native operation in flight ([`Native::Pending`]).
#[derive(Debug)]
pub(crate) struct NativePend {
    pub(crate) ticket: u64,
    /// The operation it counts toward, and for how many units.
    pub(crate) id: u32,
    pub(crate) units: usize,
    /// Copy of a put's source, read by the conduit until completion: held, never read
    /// here.
    _src: Option<Arc<[u8]>>,
}

/// Outcome of issuing the pieces of a transfer natively.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum NativeStep {
    /// Every piece has started (or completed).
    Done,
    /// The conduit lacked resources at the cursor: poll and call again.
    Blocked,
    /// The conduit does not offer the piece at the cursor: carry the rest on the AM
    /// path.
    Unsupported,
}

/// How a native put is issued.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PutSrc<'a> {
    /// Base of the source (the caller's buffer or `copy`).
    pub(crate) base: *const u8,
    /// A copy the pending entries keep alive (sources the caller may reuse at once).
    pub(crate) copy: Option<&'a Arc<[u8]>>,
    /// Relaxed: complete locally, flushed by the next sync of puts.
    pub(crate) relaxed: bool,
}

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
        self.native.push(NativePend {
            ticket,
            id,
            units,
            _src: src,
        });
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
                let p = src.base.add(c.local);
                if src.relaxed {
                    cx.native_put_relaxed(dst, c.remote, p, c.len)
                } else {
                    cx.native_put(dst, c.remote, p, c.len)
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
            let r = unsafe { cx.native_get(src, c.remote, dst.add(c.local), c.len) }?;
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

    /// Issues one native atomic on the word at `offset` of `dst`; a fetched value lands
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
        dst: EpAddr,
        offset: usize,
        op: &NativeAtomic,
        land: *mut u64,
    ) -> Result<NativeStep, RmaError> {
        debug_assert_eq!(op.fetch, !land.is_null(), "a landing word iff fetching");
        // SAFETY: forwarded contract.
        match unsafe { cx.native_atomic(dst, offset, op, land) }? {
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
