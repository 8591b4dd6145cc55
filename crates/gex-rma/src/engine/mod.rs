//! Starting operations: validation is done by the callers; here a transfer of
//! validated [`Chunk`]s picks its path ([`crate::path`]), runs the direct path inline,
//! or issues native operations and AM messages from a resumable [`Job`], and decides
//! how it completes (an event, an NBI counter, or nothing to wait for).
//!
//! A step never waits: under back-pressure it returns [`Step::Blocked`] and the caller
//! (a function of `&mut Endpoint` in [`crate::ext`]) polls the endpoint and calls the
//! step again with the same job; [`try_get_owned`] instead hands the rest of its
//! requests to the progress hook.
//!
//! # Safety
//! The get steps take a raw destination: the callers guarantee it is writable and
//! untouched by anyone else until the operation completes (the rules of
//! [`crate::state`]); the steps hand it only to the direct copy, the native path and
//! the operation's entry.
#![allow(unsafe_code)]

mod flush;
mod pump;
mod tickets;

pub(crate) use crate::job::{Deferred, Job};
pub(crate) use crate::ops::Step;

use crate::RmaError;
use crate::am::{AmCursor, short_put_args};
use crate::native::{NativeStep, PutSrc};
use crate::nbi::Cat;
use crate::ops::Handout;
use crate::path::{OpKind, Path};
use crate::state::Rma;
use crate::vis::Chunk;
use gex_core::event::{Data, finish_held};
use gex_core::layer::Cx;
use gex_core::spi::Conduit;
use gex_core::{EpAddr, Event, ModeKind};
use std::ptr::NonNull;
use std::sync::Arc;

/// How an operation was asked for.
#[derive(Clone, Copy, Debug)]
pub(crate) struct How {
    /// Its mode.
    pub(crate) kind: ModeKind,
    /// Started in a scope with a buffer borrowed for the scope (no copy; tracked under
    /// the scope's tag, so not counted; a native put is relaxed and flushed at the
    /// scope's end).
    pub(crate) scoped: bool,
}

impl How {
    pub(crate) fn new(kind: ModeKind) -> Self {
        How {
            kind,
            scoped: false,
        }
    }
    pub(crate) fn scoped() -> Self {
        How {
            kind: ModeKind::Nb,
            scoped: true,
        }
    }
    /// The NBI category the operation is counted in, if it is counted.
    pub(crate) fn counted(self, cat: Cat) -> Option<Cat> {
        (self.kind == ModeKind::Nbi && !self.scoped).then_some(cat)
    }
}

/// The remote side of a transfer: the target and the (validated) chunks.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Xfer<'a> {
    pub(crate) peer: EpAddr,
    pub(crate) chunks: &'a [Chunk],
}

impl<'a> Xfer<'a> {
    /// The transfer of `chunks` with peer `peer`.
    #[inline(always)]
    pub(crate) const fn new(peer: EpAddr, chunks: &'a [Chunk]) -> Self {
        Xfer { peer, chunks }
    }
}

/// A memset: `len` bytes set to `byte` at `offset` of `dst` (validated).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Fill {
    pub(crate) dst: EpAddr,
    pub(crate) offset: usize,
    pub(crate) byte: u8,
    pub(crate) len: usize,
}

/// A failed step: the error, and the event of units already in flight that may still
/// use a borrowed buffer (wait for it, or track it in the scope, before returning).
#[derive(Debug)]
pub(crate) struct Fail<O: Send + 'static> {
    pub(crate) err: RmaError,
    pub(crate) ev: Option<Event<O, RmaError>>,
}

impl<O: Send + 'static> From<RmaError> for Fail<O> {
    fn from(err: RmaError) -> Self {
        Fail { err, ev: None }
    }
}

/// Where a get's bytes land.
#[derive(Clone, Copy, Debug)]
pub(crate) enum GetTo {
    /// A buffer of this many bytes (rules in the module `# Safety`).
    Ptr(*mut u8, usize),
    /// A word the operation owns (value gets of at most 8 bytes); the event's output
    /// is made from it.
    Land(usize),
}

/// Where the last byte of validated `chunks` ends in the remote segment (0 for none):
/// the bound a direct path must find mapped ([`Targets::mapping`](crate::target::Targets::mapping)).
#[inline]
fn remote_end(chunks: &[Chunk]) -> usize {
    chunks.iter().map(|c| c.remote + c.len).max().unwrap_or(0)
}

impl Rma {
    /// Where issuing `j` stands after a pump sent its messages (`sent`): not yet
    /// (`Blocked`); everything sent, the decision of how `j` completes opened
    /// (`counted`: its NBI category, if it is counted) and sealed: the event to hand
    /// out; an error, a [`Fail`] (the entry abandoned if units are in flight).
    fn settle<C: Conduit, O: Send + 'static>(
        &mut self,
        cx: &mut Cx<'_, C>,
        j: &Job,
        counted: Option<Cat>,
        mut out: Handout<'_, O>,
        sent: Result<bool, RmaError>,
    ) -> Result<Step<O>, Fail<O>> {
        match sent {
            Ok(false) => Ok(Step::Blocked),
            Ok(true) => {
                if self.ops.get(&j.id).is_some_and(|op| op.remaining > 0) {
                    self.ops.open(cx, j.id, counted, &mut out);
                }
                let d = match self.ops.seal(j.id) {
                    Some(w) => Data::Word(w),
                    None => Data::Unit,
                };
                Ok(out.step(d))
            }
            Err(err) if !j.started => {
                self.ops.remove(&j.id);
                Err(Fail { err, ev: None })
            }
            Err(err) => {
                self.ops.open(cx, j.id, counted, &mut out);
                let in_flight = self.abandon(j.id, err.clone());
                Err(Fail {
                    err,
                    ev: if in_flight { out.ev.take() } else { None },
                })
            }
        }
    }

    /// The fastest path of a contiguous put, run under
    /// [`layer::state`](gex_core::layer::state): a
    /// valid range of a segment whose mapping is cached
    /// ([`direct_at`](Self::direct_at)) is copied now (true); anything else returns
    /// false and takes [`put_now`](Self::put_now).
    #[inline(always)]
    pub(crate) fn put_fast(&mut self, dst: EpAddr, offset: usize, src: &[u8]) -> bool {
        let Some(at) = self.t.direct_at(dst, offset, src.len()) else {
            return false;
        };
        // SAFETY: `direct_at` checked the range against the cached mapping, which is
        // live (module `crate::direct`).
        unsafe { crate::direct::put_at(at, src) };
        true
    }

    /// As [`put_fast`](Self::put_fast), for a get of `len` bytes into `dst`.
    ///
    /// # Safety
    /// `dst` is valid for writes of `len` bytes and not otherwise borrowed.
    #[inline(always)]
    pub(crate) unsafe fn get_fast(
        &mut self,
        src: EpAddr,
        offset: usize,
        dst: *mut u8,
        len: usize,
    ) -> bool {
        let Some(at) = self.t.direct_at(src, offset, len) else {
            return false;
        };
        // SAFETY: `direct_at` checked the range against the cached mapping; `dst` is
        // writable and not otherwise borrowed (contract).
        unsafe { crate::direct::get_at(at, dst, len) };
        true
    }

    /// Where `[offset, offset + len)` of `dst` is on the direct path, asking the
    /// conduit if need be: `Some(Some(base))` (the segment's mapping) when it is valid
    /// and mapped, `Some(None)` when it is empty and its endpoint reachable (nothing
    /// to move), `None` otherwise (then the step runs, and reports any error).
    #[inline(always)]
    fn direct_range<C: Conduit>(
        &mut self,
        cx: &Cx<'_, C>,
        dst: EpAddr,
        offset: usize,
        len: usize,
    ) -> Option<Option<std::ptr::NonNull<u8>>> {
        self.t.check_range(dst, offset, len).ok()?;
        if len == 0 {
            // Nothing moves, but an endpoint made at run time must be open.
            return (!self.t.made_at_run_time(dst) || cx.peer_open(dst).is_ok()).then_some(None);
        }
        match self.t.mapping(cx, dst, offset + len) {
            Ok(Some(base)) => Some(Some(base)),
            Ok(None) | Err(_) => None,
        }
    }

    /// The fast path of a contiguous put: if `[offset, offset + src.len())` of `dst` is
    /// valid and on the direct path (or empty), copies it now and returns true; false
    /// otherwise (then [`put_step`](Self::put_step) runs, and reports any error).
    #[inline(always)]
    pub(crate) fn put_now<C: Conduit>(
        &mut self,
        cx: &Cx<'_, C>,
        dst: EpAddr,
        offset: usize,
        src: &[u8],
    ) -> bool {
        match self.direct_range(cx, dst, offset, src.len()) {
            None => false,
            Some(None) => true,
            Some(Some(base)) => {
                // SAFETY: the range was checked against the segment; the mapping is
                // live (module `crate::direct`).
                unsafe { crate::direct::put_at(base.as_ptr().add(offset), src) };
                true
            }
        }
    }

    /// The fast path of a contiguous get of `len` bytes into `dst`, as
    /// [`put_now`](Self::put_now).
    ///
    /// # Safety
    /// `dst` is valid for writes of `len` bytes and not otherwise borrowed.
    #[inline(always)]
    pub(crate) unsafe fn get_now<C: Conduit>(
        &mut self,
        cx: &Cx<'_, C>,
        src: EpAddr,
        offset: usize,
        dst: *mut u8,
        len: usize,
    ) -> bool {
        match self.direct_range(cx, src, offset, len) {
            None => false,
            Some(None) => true,
            Some(Some(base)) => {
                // SAFETY: the range was checked against the segment; `dst` is writable
                // and not otherwise borrowed (contract).
                unsafe { crate::direct::get_at(base.as_ptr().add(offset), dst, len) };
                true
            }
        }
    }

    /// One step of a put of `src` to the (validated) transfer `x`.
    /// The path of transfer `x` (an operation of kind `kind`) and the mapping of its
    /// peer's segment, when there is one (inlined into the steps).
    #[inline(always)]
    fn route<C: Conduit>(
        &mut self,
        cx: &mut Cx<'_, C>,
        kind: OpKind,
        x: Xfer<'_>,
    ) -> Result<(Path, Option<NonNull<u8>>), RmaError> {
        let chunks = x.chunks;
        let total: usize = chunks.iter().map(|c| c.len).sum();
        let offset = chunks.first().map_or(0, |c| c.remote);
        let base = self.t.mapping(cx, x.peer, remote_end(chunks))?;
        let path = self
            .t
            .path(kind, total, offset, chunks.len(), base.is_some());
        Ok((path, base))
    }

    #[inline]
    pub(crate) fn put_step<C: Conduit>(
        &mut self,
        cx: &mut Cx<'_, C>,
        x: Xfer<'_>,
        src: &[u8],
        how: How,
        job: &mut Option<Job>,
        ev: &mut Option<Event<(), RmaError>>,
    ) -> Result<Step<()>, Fail<()>> {
        let Xfer { peer: dst, chunks } = x;
        if job.is_none() {
            let (path, base) = self.route(cx, OpKind::Put, x)?;
            match (path, base) {
                (Path::Nothing, _) => return Ok(Step::Now(())),
                (Path::Direct, Some(base)) => {
                    // SAFETY: the chunks were validated against the segment and lie in
                    // `src` (callers); the mapping is live (module `crate::direct`).
                    unsafe { crate::direct::put(base, chunks, src) };
                    return Ok(Step::Now(()));
                }
                _ => {}
            }
            let copy = (path == Path::Native && how.kind != ModeKind::Blocking && !how.scoped)
                .then(|| {
                    let end = chunks.iter().map(|c| c.local + c.len).max().unwrap_or(0);
                    Arc::<[u8]>::from(&src[..end])
                });
            let blocking_short = path == Path::AmShort && how.kind == ModeKind::Blocking;
            let id = if blocking_short {
                0
            } else {
                self.ops
                    .new_op(dst, "put", std::ptr::null_mut(), 0, std::ptr::null_mut())
            };
            *job = Some(Job::new(path, id, copy));
        }
        let Some(j) = job.as_mut() else {
            return Ok(Step::Blocked);
        };
        loop {
            let r: Result<bool, RmaError> = match j.path {
                Path::AmShort => {
                    let c = chunks[0];
                    let (mut args, n) = short_put_args(c.remote, &src[c.local..c.local + c.len]);
                    if how.kind == ModeKind::Blocking {
                        let h = self.h.put_short_b;
                        return match crate::am::send_short(cx, dst, h, &args[1..n]) {
                            Ok(false) => Ok(Step::Blocked),
                            Ok(true) => {
                                self.fast_sent += 1;
                                Ok(Step::Fast(self.fast_sent, ()))
                            }
                            Err(e) => Err(e.into()),
                        };
                    }
                    args[0] = j.id;
                    let h = self.h.put_short;
                    crate::am::send_short(cx, dst, h, &args[..n]).inspect(|&sent| {
                        if sent {
                            self.ops.bump(j.id, 1);
                        }
                    })
                }
                Path::Native => {
                    let copy = j.copy.clone();
                    // Implicit-event and scoped puts are relaxed: a sync of puts or the
                    // scope's end flushes them (`Rma::end_scope`).
                    let relaxed = how.kind == ModeKind::Nbi || how.scoped;
                    self.scope_relaxed |= how.scoped;
                    let ps = PutSrc {
                        base: copy.as_ref().map_or(src.as_ptr(), |c| c.as_ptr()),
                        copy: copy.as_ref(),
                        relaxed,
                    };
                    let before = j.ci;
                    // SAFETY: the source (or its copy) stays readable until completion:
                    // borrowed by a blocking call or a scope, or the copy held by the
                    // pending entries (module `crate::native`).
                    let r = unsafe { self.native_put_chunks(cx, j.id, dst, chunks, &mut j.ci, ps) };
                    j.started |= j.ci > before;
                    match r {
                        Ok(NativeStep::Done) => Ok(true),
                        Ok(NativeStep::Blocked) => Ok(false),
                        Ok(NativeStep::Unsupported) => {
                            // The rest goes through AMs (which read `src` now).
                            j.path = Path::Am;
                            j.am = AmCursor::at(j.ci);
                            continue;
                        }
                        Err(e) => Err(e),
                    }
                }
                _ => {
                    let before = (j.am.ci, j.am.off);
                    let r = self.am_put_pump(cx, j.id, dst, chunks, src, &mut j.am);
                    j.started |= (j.am.ci, j.am.off) != before
                        || self.ops.get(&j.id).is_some_and(|o| o.remaining > 0);
                    r
                }
            };
            if j.path == Path::AmShort {
                if let Ok(true) = r {
                    j.started = true;
                }
            }
            let out = Handout {
                hold: &mut None,
                finish: gex_core::event::finish_unit,
                ev,
            };
            return self.settle(cx, j, how.counted(Cat::Puts), out, r);
        }
    }

    /// Issues the get units of `j`; true once all have started.
    fn get_pump<C: Conduit>(
        &mut self,
        cx: &mut Cx<'_, C>,
        j: &mut Job,
        src: EpAddr,
        chunks: &[Chunk],
        dst: *mut u8,
    ) -> Result<bool, RmaError> {
        loop {
            if j.path == Path::Native {
                let before = j.ci;
                // SAFETY: `dst` outlives the operation (module `# Safety`).
                let r = unsafe { self.native_get_chunks(cx, j.id, src, chunks, &mut j.ci, dst) };
                j.started |= j.ci > before;
                match r? {
                    NativeStep::Done => return Ok(true),
                    NativeStep::Blocked => return Ok(false),
                    NativeStep::Unsupported => {
                        j.path = Path::Am;
                        j.am = AmCursor::at(j.ci);
                    }
                }
            } else {
                let before = (j.am.ci, j.am.off);
                let r = self.am_get_pump(cx, j.id, src, chunks, &mut j.am);
                j.started |= (j.am.ci, j.am.off) != before
                    || self.ops.get(&j.id).is_some_and(|o| o.remaining > 0);
                return r;
            }
        }
    }

    /// One step of a get of `chunks` from `src` (validated) into `to`; the event's
    /// output is made as `out` says.
    ///
    /// # Safety
    /// A [`GetTo::Ptr`] destination is writable for its length and untouched by anyone
    /// else until the operation completes (module `# Safety`).
    #[inline]
    pub(crate) unsafe fn get_step<C: Conduit, O: Send + 'static>(
        &mut self,
        cx: &mut Cx<'_, C>,
        x: Xfer<'_>,
        to: GetTo,
        how: How,
        job: &mut Option<Job>,
        out: Handout<'_, O>,
    ) -> Result<Step<O>, Fail<O>> {
        let Xfer { peer: src, chunks } = x;
        let (finish, hold) = (out.finish, &mut *out.hold);
        if job.is_none() {
            let (path, base) = self.route(cx, OpKind::Get, x)?;
            match (path, base, to) {
                (Path::Nothing, _, _) => {
                    return Ok(Step::Now(finish(Data::Word(0), hold.take())));
                }
                (Path::Direct, Some(base), GetTo::Ptr(p, _)) => {
                    // SAFETY: remote ranges validated, local ones inside the destination
                    // (callers; module `# Safety`).
                    unsafe { crate::direct::get(base, chunks, p) };
                    return Ok(Step::Now(finish(Data::Unit, hold.take())));
                }
                (Path::Direct, Some(base), GetTo::Land(n)) => {
                    let mut w = 0u64;
                    debug_assert!(n <= 8);
                    // SAFETY: as above; the chunks of a value get lie in `0..n`, n <= 8.
                    unsafe { crate::direct::get(base, chunks, (&raw mut w).cast()) };
                    return Ok(Step::Now(finish(Data::Word(w), hold.take())));
                }
                _ => {}
            }
            let id = match to {
                GetTo::Ptr(p, n) => self.ops.new_op(src, "get", p, n, std::ptr::null_mut()),
                GetTo::Land(n) => {
                    let land = Box::into_raw(Box::new(0u64));
                    self.ops.new_op(src, "get", land.cast(), n, land)
                }
            };
            *job = Some(Job::new(path, id, None));
        }
        let Some(j) = job.as_mut() else {
            return Ok(Step::Blocked);
        };
        let dst = self.ops.get(&j.id).map_or(std::ptr::null_mut(), |o| o.dst);
        let sent = self.get_pump(cx, j, src, chunks, dst);
        self.settle(cx, j, how.counted(Cat::Gets), out, sent)
    }

    /// One step of a memset of `len` bytes at `offset` of `dst` (validated).
    pub(crate) fn memset_step<C: Conduit>(
        &mut self,
        cx: &mut Cx<'_, C>,
        fill: Fill,
        how: How,
        job: &mut Option<Job>,
        ev: &mut Option<Event<(), RmaError>>,
    ) -> Result<Step<()>, Fail<()>> {
        let Fill {
            dst,
            offset,
            byte,
            len,
        } = fill;
        if job.is_none() {
            let base = self.t.mapping(cx, dst, offset + len)?;
            match (
                self.t.path(OpKind::Memset, len, offset, 1, base.is_some()),
                base,
            ) {
                (Path::Nothing, _) => return Ok(Step::Now(())),
                (Path::Direct, Some(base)) => {
                    // SAFETY: the range was validated against the segment.
                    unsafe { crate::direct::fill(base, offset, byte, len) };
                    return Ok(Step::Now(()));
                }
                _ => {}
            }
            let id = self
                .ops
                .new_op(dst, "memset", std::ptr::null_mut(), 0, std::ptr::null_mut());
            *job = Some(Job::new(Path::Am, id, None));
        }
        let Some(j) = job.as_mut() else {
            return Ok(Step::Blocked);
        };
        let (a, h) = (crate::am::lo, self.h.memset);
        let args = [
            j.id,
            a(offset),
            crate::am::hi(offset),
            a(len),
            crate::am::hi(len),
            u32::from(byte),
        ];
        let out = Handout {
            hold: &mut None,
            finish: gex_core::event::finish_unit,
            ev,
        };
        let sent = crate::am::send_short(cx, dst, h, &args);
        if let Ok(true) = sent {
            self.ops.bump(j.id, 1);
            j.started = true;
        }
        self.settle(cx, j, how.counted(Cat::Puts), out, sent)
    }

    /// [`try_get_owned`] on the state itself, with its own endpoint's `cx` (the
    /// state caches the mappings `cx` reports: a context of another endpoint would
    /// poison it, which is why this is not public).
    fn try_get_owned_now<C: Conduit>(
        &mut self,
        cx: &mut Cx<'_, C>,
        dst: Vec<u8>,
        src: crate::GlobalPtr<u8>,
    ) -> Result<OwnedGet, RmaError> {
        let a = src.addr();
        self.t.check_range(a, src.offset, dst.len())?;
        let chunks = [Chunk::whole(src.offset, dst.len())];
        let mut dst = dst;
        let p = dst.as_mut_ptr();
        let n = dst.len();
        let mut hold = Some(dst);
        let (mut job, mut ev) = (None, None);
        // SAFETY: the buffer's heap block moves into the event (made when the first
        // request starts), which keeps it alive until the operation is done with it.
        let r = unsafe {
            self.get_step(
                cx,
                Xfer::new(a, &chunks),
                GetTo::Ptr(p, n),
                How::new(ModeKind::Nb),
                &mut job,
                Handout {
                    hold: &mut hold,
                    finish: finish_held,
                    ev: &mut ev,
                },
            )
        };
        match r {
            Ok(Step::Done(e)) => Ok(OwnedGet::Started(e)),
            Ok(Step::Now(v) | Step::Fast(_, v)) => Ok(OwnedGet::Started(cx.ready(Ok(v)))),
            Ok(Step::Blocked) => {
                let Some(j) = job else {
                    return Err(RmaError::Event(gex_core::EventError::Abandoned));
                };
                if !j.started {
                    self.ops.remove(&j.id);
                    return Ok(OwnedGet::Busy(hold.take().unwrap_or_default()));
                }
                let mut out = Handout {
                    hold: &mut hold,
                    finish: finish_held,
                    ev: &mut ev,
                };
                self.ops.open(cx, j.id, None, &mut out);
                let e = ev
                    .take()
                    .ok_or(RmaError::Event(gex_core::EventError::Abandoned))?;
                self.deferred.push(Deferred {
                    src: a,
                    chunks,
                    dst: p,
                    job: j,
                });
                cx.set_busy();
                Ok(OwnedGet::Started(e))
            }
            Err(f) => Err(f.err),
        }
    }

    /// Sends what deferred gets can (progress hook).
    pub(crate) fn pump_deferred<C: Conduit>(&mut self, cx: &mut Cx<'_, C>) {
        let mut list = std::mem::take(&mut self.deferred);
        list.retain_mut(|d| {
            let (src, chunks, dst) = (d.src, d.chunks, d.dst);
            match self.get_pump(cx, &mut d.job, src, &chunks, dst) {
                Ok(false) => true,
                Ok(true) => {
                    self.ops.seal(d.job.id);
                    false
                }
                Err(e) => {
                    self.abandon(d.job.id, e);
                    false
                }
            }
        });
        list.append(&mut self.deferred);
        self.deferred = list;
    }
}

/// What [`try_get_owned`] did with its buffer.
#[derive(Debug)]
#[must_use = "a started get's event gives the buffer back; a busy one hands it back"]
pub enum OwnedGet {
    /// Started (complete already on the direct path): the event gives the filled
    /// buffer back.
    Started(Event<Vec<u8>, RmaError>),
    /// Back-pressure: nothing was started; the buffer, handed back.
    Busy(Vec<u8>),
}

/// Starts a get of `dst.len()` bytes from `src` into the owned buffer `dst` without
/// waiting, from another layer's code, which may not wait (a rendezvous get started
/// from the collectives layer's progress hook): `cx` is that layer's context, and the
/// get runs on the RMA layer of the same endpoint (reached through
/// [`Cx::with_other`], so the state and the context are always the same endpoint's).
///
/// - `Ok(OwnedGet::Started(event))`: started (complete already on the direct path);
///   the event gives the filled buffer back. If it is dropped or leaked early, the
///   buffer is kept alive until the transfer is done with it.
/// - `Ok(OwnedGet::Busy(dst))`: back-pressure: nothing was started, the buffer is
///   handed back; try again from a later progress call.
/// - requests that meet back-pressure after the first are sent by the RMA layer's
///   progress hook.
///
/// # Errors
/// [`RmaError::NoLayer`] if the endpoint does not carry the RMA layer, or `cx` is the
/// RMA layer's own context (its state is then the caller's, not reachable here);
/// [`RmaError::BadRank`], [`RmaError::BadEndpoint`], [`RmaError::OutOfSegment`],
/// [`RmaError::Am`] (the conduit failed).
///
/// # Examples
/// From another layer's code (here a closure given to
/// [`layer::with`](gex_core::layer::with), which gets the same [`Cx`] as the layer's
/// handlers and progress hook):
/// ```
/// use gex_core::layer::{self, Attach, Layer};
/// use gex_core::spi::Conduit;
/// use gex_core::{boot::Singleton, loopback::Loopback, Blocking, ClientBuilder, InitError};
/// use gex_rma::{GlobalPtr, OwnedGet, Rma, RmaExt};
///
/// /// A layer of the program's own, attached after gex-rma.
/// #[derive(Debug)]
/// struct Mine;
/// impl Layer for Mine {
///     const NAME: &'static str = "mine";
///     fn attach<C: Conduit>(_: &mut Attach<'_, C, Self>) -> Result<Self, InitError> {
///         Ok(Mine)
///     }
/// }
///
/// let client = ClientBuilder::new().layer::<Rma>().layer::<Mine>().segment_size(4096)
///     .init::<Loopback>(Box::new(Singleton::new()))?;
/// let mut ep = client.endpoint(0)?;
/// let p = GlobalPtr::<u8>::new(ep.addr(), 8);
/// ep.put(p, b"rendezvous", Blocking)?;
/// let started = layer::with::<Mine, _, _>(&mut ep, |_, cx| {
///     gex_rma::try_get_owned(cx, vec![0u8; 10], p)
/// })
/// .expect("the layer")?;
/// let OwnedGet::Started(ev) = started else { panic!("no back-pressure on loopback") };
/// assert_eq!(ep.wait(ev)?, b"rendezvous");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn try_get_owned<C: Conduit>(
    cx: &mut Cx<'_, C>,
    dst: Vec<u8>,
    src: crate::GlobalPtr<u8>,
) -> Result<OwnedGet, RmaError> {
    cx.with_other::<Rma, _>(|rma, cx| Rma::unpin(rma).try_get_owned_now(cx, dst, src))
        .unwrap_or(Err(RmaError::NoLayer))
}
