//! The hybrid endpoint ([`HybridEp`]): one far endpoint and, in a hybrid job, one near
//! endpoint. AMs to near ranks go through the near endpoint, all others through the
//! far one; `poll` drains the near endpoint first and reads the far one on the
//! schedule of [`crate::schedule`]; `block` naps on the near endpoint; native RMA and
//! atomics are the far endpoint's for every peer; the neighbourhood (`peer_segment`,
//! `aux`, `wake`) is the near endpoint's. Without the near part every call goes to the
//! far endpoint unchanged. Everything is generic: no dynamic dispatch.
//!
//! # Safety
//! The native operations forward their callers' contracts (buffer lifetimes, ranges
//! checked against the target segment) unchanged to the far endpoint.
#![allow(unsafe_code)]

use crate::conduit::Hybrid;
use crate::schedule::{FarSchedule, NAP};
use crate::stats::PathCounters;
use gex_core::spi::{
    AtomicBase, AtomicKind, Capabilities, ConduitEp, ConduitError, Deliver, FarConduit, FarEp,
    Limits, Native, NativeAtomic, NativeResult, NearConduit, OutMsg, OwnedMsg, Prepare, PrepareReq,
    SegRange,
};
use gex_core::{EpAddr, EpIndex, Injected, OwnedInjected};
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::Duration;

/// An endpoint of a [`Hybrid`] conduit.
pub struct HybridEp<N: NearConduit, F: FarConduit> {
    // Field order is drop order: the far endpoint first (it may hand its network
    // resources to its conduit for finalisation), then the near one.
    far: F::Ep,
    /// The near endpoint, in a hybrid job.
    near: Option<N::Ep>,
    /// When `poll` reads the far endpoint (hybrid jobs).
    sched: FarSchedule,
    /// The endpoint's index (both parts'), kept here: the data path counts per index.
    index: EpIndex,
    caps: Capabilities,
    conduit: Arc<Hybrid<N, F>>,
}

impl<N: NearConduit, F: FarConduit> std::fmt::Debug for HybridEp<N, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HybridEp")
            .field("index", &self.index)
            .field("hybrid", &self.near.is_some())
            .field("sched", &self.sched)
            .field("caps", &self.caps)
            .finish_non_exhaustive()
    }
}

impl<N: NearConduit, F: FarConduit> HybridEp<N, F> {
    pub(crate) fn new(
        far: F::Ep,
        near: Option<N::Ep>,
        caps: Capabilities,
        conduit: Arc<Hybrid<N, F>>,
    ) -> Self {
        HybridEp {
            index: far.index(),
            far,
            near,
            sched: FarSchedule::default(),
            caps,
            conduit,
        }
    }

    /// The far endpoint.
    pub fn far(&self) -> &F::Ep {
        &self.far
    }

    /// The near endpoint, in a hybrid job.
    pub fn near(&self) -> Option<&N::Ep> {
        self.near.as_ref()
    }

    /// This endpoint's counters.
    #[inline(always)]
    fn counters(&self) -> &PathCounters {
        &self.conduit.counters[self.index as usize]
    }

    /// The near endpoint if `dst` is reached through it.
    #[inline(always)]
    fn near_for(&self, dst: EpAddr) -> Option<&N::Ep> {
        self.near
            .as_ref()
            .filter(|_| self.conduit.is_near(dst.rank))
    }
}

// SAFETY: every memory promise is the near endpoint's (segment, neighbourhood, in-place
// buffers, delivered payloads: near ranks only, by `is_near`) or the far endpoint's
// (native operations, far deliveries), each an `unsafe impl` of its own.
unsafe impl<N: NearConduit, F: FarConduit> ConduitEp for HybridEp<N, F> {
    fn index(&self) -> EpIndex {
        self.index
    }

    fn capabilities(&self) -> Capabilities {
        self.caps
    }

    /// The near endpoint's limits for near ranks, the far endpoint's for the others.
    #[inline]
    fn limits(&self, dst: EpAddr) -> Limits {
        match self.near_for(dst) {
            Some(near) => near.limits(dst),
            None => self.far.limits(dst),
        }
    }

    /// The far endpoint's segment, which in a hybrid job lies in the near part's
    /// shared memory (the near endpoint's segment).
    fn local_segment(&self) -> (NonNull<u8>, usize) {
        self.far.local_segment()
    }

    fn peer_segment(&self, dst: EpAddr) -> Option<(NonNull<u8>, usize)> {
        match &self.near {
            Some(near) => near.peer_segment(dst),
            None => self.far.peer_segment(dst),
        }
    }

    fn aux(&self, dst: EpAddr) -> Option<NonNull<u8>> {
        match &self.near {
            Some(near) => near.aux(dst),
            None => self.far.aux(dst),
        }
    }

    fn wake(&self, dst: EpAddr) {
        match &self.near {
            Some(near) => near.wake(dst),
            None => self.far.wake(dst),
        }
    }

    /// A request to a near rank goes into the near endpoint; any other to the far one
    /// (and the far endpoint is read on the next polls: its answer is coming).
    #[inline]
    fn inject(&mut self, msg: &OutMsg<'_>, imm: bool) -> Result<Injected, ConduitError> {
        if let Some(near) = &mut self.near {
            if self.conduit.is_near(msg.dst().rank) {
                let r = near.inject(msg, imm);
                if let Ok(Injected::Sent) = r {
                    PathCounters::bump(&self.counters().near_sent, 1);
                }
                return r;
            }
            self.sched.expect();
        }
        let r = self.far.inject(msg, imm);
        if let Ok(Injected::Sent) = r {
            PathCounters::bump(&self.counters().far_sent, 1);
        }
        r
    }

    /// Without the near part: the far endpoint's. In a hybrid job the near endpoint
    /// may not defer local completion (its tickets and the far endpoint's would mix):
    /// the payload is injected and handed back at once.
    fn inject_owned(
        &mut self,
        msg: OwnedMsg<'_>,
        imm: bool,
    ) -> Result<OwnedInjected, ConduitError> {
        if self.near.is_none() {
            let r = self.far.inject_owned(msg, imm);
            if let Ok(OwnedInjected::Done(_) | OwnedInjected::Pending(_)) = r {
                PathCounters::bump(&self.counters().far_sent, 1);
            }
            return r;
        }
        let sent = self.inject(&msg.msg(), imm)?;
        Ok(OwnedInjected::copied(sent, msg.into_payload()))
    }

    fn lc_test(&mut self, ticket: u64) -> Option<Vec<u8>> {
        match self.near {
            None => self.far.lc_test(ticket),
            Some(_) => None,
        }
    }

    /// Drains the near endpoint, then the far one when the schedule says so (every
    /// poll while far operations are in flight, else at doubling intervals).
    ///
    /// # Panics
    /// Where the parts' `poll` panics (a far conduit ends the rank on a fatal network
    /// error it cannot return from `poll`).
    #[inline]
    fn poll<D: Deliver>(&mut self, d: &mut D, budget: usize) -> usize {
        let Some(near) = &mut self.near else {
            let m = self.far.poll(d, budget);
            if m > 0 {
                PathCounters::bump(
                    &self.conduit.counters[self.index as usize].far_recv,
                    m as u64,
                );
            }
            return m;
        };
        let n = near.poll(d, budget);
        let c = &self.conduit.counters[self.index as usize];
        if n > 0 {
            PathCounters::bump(&c.near_recv, n as u64);
        }
        let far = &self.far;
        if self.sched.skip(|| far.in_flight()) {
            return n;
        }
        let p = self.far.poll_far(d, budget.saturating_sub(n).max(1));
        if p.delivered > 0 {
            PathCounters::bump(&c.far_recv, p.delivered as u64);
        }
        self.sched.after_read(p.active);
        n + p.delivered
    }

    /// Both parts' reports, each line marked with its part. No
    /// [`sleeper`](ConduitEp::sleeper): the far endpoint needs polling, so a progress
    /// thread naps instead of sleeping on the near part's doorbell.
    fn describe(&self) -> String {
        let mut lines = Vec::new();
        if let Some(n) = &self.near {
            lines.extend(n.describe().lines().map(|l| format!("near: {l}")));
        }
        lines.extend(self.far.describe().lines().map(|l| format!("far: {l}")));
        lines.join("\n")
    }

    fn has_incoming(&self) -> bool {
        self.near.as_ref().is_some_and(|n| n.has_incoming()) || self.far.has_incoming()
    }

    fn has_outgoing(&self) -> bool {
        self.near.as_ref().is_some_and(|n| n.has_outgoing()) || self.far.has_outgoing()
    }

    /// Without the near part: the far endpoint's. Otherwise, one thread cannot sleep on
    /// both parts' wait objects: nap on the near endpoint (a near rank's message wakes
    /// it at once) for at most [`NAP`], so far traffic is seen soon after, and stay
    /// awake (yield) while the far endpoint has work only its progress completes.
    fn block(&mut self, timeout: Duration) {
        let Some(near) = &mut self.near else {
            return self.far.block(timeout);
        };
        if self.far.wants_progress() {
            std::thread::yield_now();
        } else {
            near.block(timeout.min(NAP));
            self.sched.woke();
        }
    }

    /// Without the near part: the far endpoint's. In a hybrid job payloads are not built
    /// in place (`NP_IN_PLACE` would have to hold for every peer): `Bounce`.
    fn prepare(&mut self, req: &PrepareReq, imm: bool) -> Result<Prepare, ConduitError> {
        match self.near {
            None => self.far.prepare(req, imm),
            Some(_) => Ok(Prepare::Bounce),
        }
    }

    fn commit(&mut self, msg: &OutMsg<'_>) -> Result<(), ConduitError> {
        match self.near {
            None => self.far.commit(msg),
            Some(_) => Err(ConduitError::Contract(
                "hybrid: commit without a successful prepare".into(),
            )),
        }
    }

    fn cancel(&mut self) {
        if self.near.is_none() {
            self.far.cancel();
        }
    }

    #[inline]
    unsafe fn native_put(&mut self, to: SegRange, src: *const u8) -> NativeResult {
        // SAFETY: forwarded contract of `native_put`.
        unsafe { self.far.native_put(to, src) }
    }

    #[inline]
    unsafe fn native_put_relaxed(&mut self, to: SegRange, src: *const u8) -> NativeResult {
        // SAFETY: forwarded contract of `native_put_relaxed`.
        unsafe { self.far.native_put_relaxed(to, src) }
    }

    #[inline]
    fn native_flush(&mut self, dst: EpAddr) -> Result<Native, ConduitError> {
        self.far.native_flush(dst)
    }

    #[inline]
    unsafe fn native_get(&mut self, from: SegRange, out: *mut u8) -> NativeResult {
        // SAFETY: forwarded contract of `native_get`.
        unsafe { self.far.native_get(from, out) }
    }

    fn native_atomic_supported(&self, kind: AtomicKind, base: AtomicBase, fetch: bool) -> bool {
        self.far.native_atomic_supported(kind, base, fetch)
    }

    #[inline]
    unsafe fn native_atomic(&mut self, op: &NativeAtomic, result: *mut u64) -> NativeResult {
        // SAFETY: forwarded contract of `native_atomic`.
        unsafe { self.far.native_atomic(op, result) }
    }

    #[inline]
    fn native_test(&mut self, ticket: u64) -> bool {
        self.far.native_test(ticket)
    }
}
