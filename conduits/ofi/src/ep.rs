//! The endpoint ([`OfiEp`]): its parts (libfabric objects, sending half, receiving
//! half, native RMA slots), and its [`ConduitEp`] implementation, which hands each
//! operation to the module that does it (`tx`, `rx`, `rma`, `progress`).
//!
//! # Safety
//! The endpoint holds raw pointers: `rx.seg` into a segment owned by the conduit (kept
//! alive by the endpoint's `Arc`), every other one into memory this endpoint owns and
//! one thread drives at a time. Native operations forward their callers' buffer
//! contracts unchanged to `rma`.
#![allow(unsafe_code)]

use crate::Ofi;
use crate::fabric::{Av, Cq, Domain, Mr, flags};
use crate::mr::MrCache;
use crate::rma::{Dir, Rma};
use crate::rx::Rx;
use crate::tx::Tx;
use gex_core::spi::{
    AtomicBase, AtomicKind, Capabilities, ConduitEp, ConduitError, Deliver, FarEp, FarPoll, Limits,
    Native, NativeAtomic, NativeResult, OutMsg, SegRange,
};
use gex_core::{EpAddr, EpIndex, Injected};
use std::mem::ManuallyDrop;
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::Duration;

/// libfabric objects of one endpoint, in closing order: the endpoint first, its domain
/// last (Rust drops fields in declaration order).
#[derive(Debug)]
pub(crate) struct Objects {
    pub(crate) ep: crate::fabric::Endpoint,
    /// Registrations of local RMA buffers made on demand (closed after the endpoint and
    /// before the domain), and the table of those made at open.
    pub(crate) cache: MrCache,
    /// Held only to be closed after the endpoint and before the domain.
    pub(crate) _mrs: Vec<Mr>,
    pub(crate) cq: Cq,
    pub(crate) av: Av,
    /// Closed last.
    pub(crate) domain: Domain,
}

/// An ofi endpoint: its own libfabric domain, endpoint, completion queue and address
/// vector (a communication domain in the sense of seed 002).
#[derive(Debug)]
pub struct OfiEp {
    // The libfabric objects and the buffers they may still reference are not dropped
    // with the endpoint: `Drop` moves them, in this order (endpoint first), into a
    // `Grave` that the conduit serves until `Conduit::finalize` and then closes.
    pub(crate) objs: ManuallyDrop<Objects>,
    pub(crate) tx: ManuallyDrop<Tx>,
    pub(crate) rx: ManuallyDrop<Rx>,
    pub(crate) rma: ManuallyDrop<Rma>,
    pub(crate) index: EpIndex,
    pub(crate) limits: Limits,
    pub(crate) caps: Capabilities,
    pub(crate) conduit: Arc<Ofi>,
}

// SAFETY: `rx.seg` points into a segment owned by `conduit` (kept alive by the Arc);
// every other raw pointer is owned by this endpoint, which one thread drives at a time.
unsafe impl Send for OfiEp {}

// SAFETY: the conduit contract holds (module `# Safety`, `crate::conduit`): segments are
// the conduit's registered memory (or a hybrid conduit's shared segments) kept as long as
// the conduit; received payloads are delivered from this endpoint's receive buffers,
// reposted only after delivery, or from a record of an in-process ring, which its
// producer does not overwrite before the record is popped after delivery; native operations complete only once the provider
// reported their completion.
unsafe impl ConduitEp for OfiEp {
    fn index(&self) -> EpIndex {
        self.index
    }
    fn capabilities(&self) -> Capabilities {
        self.caps
    }
    #[inline]
    fn limits(&self, _dst: EpAddr) -> Limits {
        self.limits
    }
    fn local_segment(&self) -> (NonNull<u8>, usize) {
        (
            NonNull::new(self.rx.seg).expect("non-null"),
            self.conduit.seg_len,
        )
    }
    /// No peer's segment is mapped (no `SHARED_MEMORY`): in a hybrid job the near
    /// part maps the neighbours'.
    fn peer_segment(&self, _dst: EpAddr) -> Option<(NonNull<u8>, usize)> {
        None
    }

    /// A request through libfabric: a request credit, then `fi_inject` or `fi_send`.
    #[inline]
    fn inject(&mut self, msg: &OutMsg<'_>, imm: bool) -> Result<Injected, ConduitError> {
        // Without a credit or a buffer it answers WouldBlock either way; `imm` only
        // decides how a peer last known "not created yet" is answered (`runtime`).
        self.inject_net(msg, imm)
    }

    /// Drains this endpoint's completion queue: frees send buffers, delivers messages,
    /// reposts receive buffers, sends queued replies and owed credits.
    ///
    /// # Panics
    /// On a fatal network error (an error completion, a malformed message), with a
    /// message naming the provider, rank, endpoint and operation: `poll` cannot return
    /// an error, and continuing would hang. The launcher then ends the job.
    #[inline]
    fn poll<D: Deliver>(&mut self, d: &mut D, budget: usize) -> usize {
        self.progress(d, budget).delivered
    }

    /// `fi_writemsg` with `FI_DELIVERY_COMPLETE` into `to.dst`'s registered segment.
    /// `Unsupported` when native RMA is off, or under `FI_MR_LOCAL` for a source outside
    /// this rank's segments; `WouldBlock` when all slots are in use or the provider
    /// answers `-FI_EAGAIN`.
    #[inline]
    unsafe fn native_put(&mut self, to: SegRange, src: *const u8) -> NativeResult {
        // SAFETY: forwarded contract of `native_put` (`src` only read).
        unsafe { self.native_rma(to, src.cast_mut(), Dir::Write, true) }
    }

    /// Where the provider orders reads after writes (docs/ofi.md, "Relaxed puts"):
    /// `fi_writemsg` without `FI_DELIVERY_COMPLETE`, so the completion only frees the
    /// source and the target sends no acknowledgement; the destination is marked for
    /// the next [`native_flush`](Self::native_flush). Otherwise (or above the
    /// provider's `max_order_raw_size`) a [`native_put`](Self::native_put).
    #[inline]
    unsafe fn native_put_relaxed(&mut self, to: SegRange, src: *const u8) -> NativeResult {
        let delivery = to.len > self.rma.relaxed_max;
        // SAFETY: forwarded contract of `native_put` (`src` only read).
        unsafe { self.native_rma(to, src.cast_mut(), Dir::Write, delivery) }
    }

    /// `fi_read` from `from.dst`'s registered segment (see [`native_put`](Self::native_put)
    /// for the answers).
    #[inline]
    unsafe fn native_get(&mut self, from: SegRange, out: *mut u8) -> NativeResult {
        // SAFETY: forwarded contract of `native_get`.
        unsafe { self.native_rma(from, out, Dir::Read, true) }
    }

    /// Where relaxed puts to `dst` were posted since its last flush: one `fi_read` of
    /// one byte from the start of `dst`'s segment into the slot's result word. The
    /// provider orders it after those writes at the target (`FI_ORDER_RAW`), so its
    /// completion means their bytes are in place. Otherwise `Done`.
    fn native_flush(&mut self, dst: EpAddr) -> Result<Native, ConduitError> {
        self.flush_puts(dst)
    }

    fn native_atomic_supported(&self, kind: AtomicKind, base: AtomicBase, fetch: bool) -> bool {
        self.atomic_supported(kind, base, fetch)
    }

    /// One `fi_atomic`/`fi_fetch_atomic`/`fi_compare_atomic` on `dst`'s registered
    /// segment; operands live in the slot until completion, and the provider writes
    /// the old value into the slot's result word, which `native_test` copies to
    /// `result` (so every local word of the operation lies in memory registered at
    /// open, which `FI_MR_LOCAL` needs).
    #[inline]
    unsafe fn native_atomic(&mut self, op: &NativeAtomic, result: *mut u64) -> NativeResult {
        // SAFETY: forwarded contract of `native_atomic`.
        unsafe { self.post_atomic(op, result) }
    }

    /// True once the completion of `ticket` has been read from the CQ (by `poll` or
    /// `block`); stores a fetching atomic's old value into its `result` and frees the
    /// slot, so a ticket reports true once.
    #[inline]
    fn native_test(&mut self, ticket: u64) -> bool {
        self.test_ticket(ticket)
    }

    fn describe(&self) -> String {
        let tx = &*self.tx;
        let mut lines = Vec::new();
        for (g, avail, owed, held) in tx.credits.unsettled() {
            lines.push(format!(
                "to global ep {g}: {avail} request credits left, {owed} owed to it, {held} held by queued replies, {} replies queued",
                tx.queued.get(g).map_or(0, |q| q.len())
            ));
        }
        let busy = tx.pool.count.saturating_sub(tx.free.len());
        if busy > 0 {
            lines.push(format!("{busy} send buffers in flight"));
        }
        if !self.rx.repost.is_empty() {
            lines.push(format!(
                "{} receive buffers wait to be reposted",
                self.rx.repost.len()
            ));
        }
        if let Some(f) = &tx.fatal {
            lines.push(format!("failed: {f}"));
        }
        lines.join("\n")
    }

    fn has_incoming(&self) -> bool {
        self.rx.stash.iter().any(|c| c.flags & flags::RECV != 0)
            || self.rx.local.iter().any(|c| c.has_data())
    }

    /// Replies queued for want of a credit or a send buffer (sent from `poll`).
    fn has_outgoing(&self) -> bool {
        self.tx.nqueued > 0
    }

    /// Sleeps in the CQ's wait object when there is one and nothing that only this
    /// endpoint's progress completes is pending; otherwise yields.
    fn block(&mut self, timeout: Duration) {
        self.block_for(timeout)
    }
}

/// As the far part of a hybrid conduit (see the `FarConduit` implementation of
/// [`Ofi`]).
// SAFETY: `poll_far` is `poll` with a report of activity.
unsafe impl FarEp for OfiEp {
    /// Send buffers or native operations in flight, queued replies, receive buffers to
    /// repost, completions read by `block` and not processed yet.
    #[inline(always)]
    fn in_flight(&self) -> bool {
        self.net_busy()
    }

    /// In flight, or credits owed to a peer (only this endpoint's progress returns them).
    fn wants_progress(&self) -> bool {
        self.net_busy() || self.tx.credits_due()
    }

    /// `poll`, telling whether the pass read any completion from the CQ.
    #[inline]
    fn poll_far<D: Deliver>(&mut self, d: &mut D, budget: usize) -> FarPoll {
        self.progress(d, budget)
    }
}
