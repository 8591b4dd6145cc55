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
//!   [`crate::state`] (borrowed until completion, owned by the event, or owned by the
//!   operation's entry);
//! - remote ranges were checked against the published segment lengths before.
#![allow(unsafe_code)]

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

impl NativePend {
    /// Ticket `ticket` of operation `id`, counting `units`, keeping `src` (a put's
    /// source copy) alive until it is retired.
    pub(crate) fn new(ticket: u64, id: u32, units: usize, src: Option<Arc<[u8]>>) -> Self {
        NativePend {
            ticket,
            id,
            units,
            _src: src,
        }
    }
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
