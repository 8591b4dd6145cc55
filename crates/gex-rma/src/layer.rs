//! [`Rma`], the RMA layer: its state (one per endpoint, owned by the endpoint), its side
//! of the layer contract (attach, handler dispatch, progress hook) and the table of
//! operations in flight.
//!
//! An operation that cannot complete during the call that starts it gets an entry in
//! [`Rma::ops`] holding what completes it ([`Done`]: the completer of its event, or
//! the NBI category it counts toward), how many units (acknowledged messages, bytes of
//! a get, native tickets) are outstanding, and where its data lands. Handlers and the
//! progress hook credit units; an entry completes once it is *sealed* (every unit was
//! started) and none is outstanding.
//!
//! # Safety
//! `Rma` holds raw pointers, which makes it `!Send` by default; it is sent with its
//! endpoint (the layer contract requires `Send`) under these rules:
//! - `seg` and the cached mappings in `direct` point at segments the conduit maps for
//!   its whole life; the endpoint holds the conduit, and the layer lives inside the
//!   endpoint, so they outlive the layer. They are dereferenced only within ranges
//!   checked against the published segment lengths and within the mapped length
//!   ([`Rma::mapping`] and [`Rma::direct_at`] bound every direct path by both).
//! - `Op::dst`/`Op::result` point at destinations that outlive the operation: borrowed
//!   by a blocking call that waits for completion before returning, borrowed for a
//!   [scope](gex_core::Endpoint::scope) that waits for its operations before the borrow
//!   ends, owned by the operation's event (which keeps the buffer alive past a drop or
//!   leak until the completer is done: `OpCompleter` is consumed or dropped only when
//!   nothing writes the destination any more), or a heap word the entry owns
//!   (`Op::land`, from `Box::into_raw`, freed with the entry).
//! - The state is only touched by the thread that holds the endpoint (or its progress
//!   thread, under the endpoint's lock), so none of these pointers is used by two
//!   threads at once.
#![allow(unsafe_code)]

use crate::RmaError;
use crate::native::NativePend;
use crate::nbi::{Cat, Nbi};
use crate::path::{OpKind, Path, PathIn};
use gex_core::event::{Data, Finish, OpCompleter};
use gex_core::layer::{Attach, Cx, Layer, Progress};
use gex_core::spi::Conduit;
use gex_core::{Am, Capabilities, EpAddr, Event, HandlerId, InitError, ModeKind, Token};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Hasher of the op table: ids are consecutive `u32`s, so a multiplicative mix is
/// enough (no SipHash on the AM path).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct IdHasher(u64);

impl Hasher for IdHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8 | u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    #[inline]
    fn write_u32(&mut self, v: u32) {
        self.0 = u64::from(v).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// The op table.
pub(crate) type OpTable = HashMap<u32, Op, BuildHasherDefault<IdHasher>>;
use std::ptr::NonNull;

/// The handlers of the AM reference protocol (the layer's block, in this order).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Handlers {
    pub(crate) put_long: HandlerId,
    pub(crate) put_packed: HandlerId,
    pub(crate) ack: HandlerId,
    pub(crate) get: HandlerId,
    pub(crate) get_packed: HandlerId,
    pub(crate) get_reply: HandlerId,
    pub(crate) memset: HandlerId,
    pub(crate) put_short: HandlerId,
    pub(crate) ack_fast: HandlerId,
    pub(crate) put_short_b: HandlerId,
    pub(crate) atomic: HandlerId,
    pub(crate) atomic_reply: HandlerId,
}

/// Local handler indices (see [`Handlers`]).
pub(crate) mod h {
    pub(crate) const PUT_LONG: u8 = 0;
    pub(crate) const PUT_PACKED: u8 = 1;
    pub(crate) const ACK: u8 = 2;
    pub(crate) const GET: u8 = 3;
    pub(crate) const GET_PACKED: u8 = 4;
    pub(crate) const GET_REPLY: u8 = 5;
    pub(crate) const MEMSET: u8 = 6;
    pub(crate) const PUT_SHORT: u8 = 7;
    pub(crate) const ACK_FAST: u8 = 8;
    pub(crate) const PUT_SHORT_B: u8 = 9;
    pub(crate) const ATOMIC: u8 = 10;
    pub(crate) const ATOMIC_REPLY: u8 = 11;
    pub(crate) const COUNT: u8 = 12;
}

/// What completes an operation.
#[derive(Debug)]
pub(crate) enum Done {
    /// Not decided yet (the event is made once the first unit has started).
    Unset,
    /// The completer of the operation's event.
    Event(OpCompleter),
    /// An implicit-event operation counted in its NBI category.
    Count(Cat),
}

/// One operation in flight (see the module documentation).
#[derive(Debug)]
pub(crate) struct Op {
    /// The peer the operation targets (for the hang report).
    pub(crate) peer: EpAddr,
    /// What it is (for the hang report).
    pub(crate) what: &'static str,
    /// Outstanding units: acknowledgements (puts, memset, atomics), bytes (gets),
    /// native tickets.
    pub(crate) remaining: usize,
    /// Every unit has been started.
    pub(crate) sealed: bool,
    /// Failed while starting: only its native tickets are still awaited; replies are
    /// dropped.
    pub(crate) abandoned: bool,
    /// Get destination (null for other operations) and its length in bytes.
    pub(crate) dst: *mut u8,
    pub(crate) dst_len: usize,
    /// A heap word the operation owns (from `Box::into_raw`; null if none): the
    /// destination of a value get or a native fetching atomic.
    pub(crate) land: *mut u64,
    /// A borrowed fetch destination: where the fetched value is stored at completion,
    /// and its width.
    pub(crate) result: Option<(*mut u8, usize)>,
    /// The fetched word (AM atomics).
    pub(crate) word: u64,
    pub(crate) done: Done,
    /// Why an abandoned operation failed (given to its event).
    pub(crate) error: Option<RmaError>,
    /// The owned destination of a counted (NBI) get, freed at completion.
    pub(crate) keep: Option<Box<dyn std::any::Any + Send>>,
}

impl Drop for Op {
    fn drop(&mut self) {
        if !self.land.is_null() {
            // SAFETY: from `Box::into_raw` (module `# Safety`); an entry is dropped
            // only when nothing writes the word any more.
            drop(unsafe { Box::from_raw(self.land) });
        }
    }
}

/// The RMA layer of one endpoint: add it to the client with
/// `ClientBuilder::layer::<gex_rma::Rma>()` (the `gex` facade does by default) and use
/// it through [`RmaExt`](crate::RmaExt) on the endpoint.
///
/// Other layers start its non-waiting get from their own code with
/// [`try_get_owned`](crate::try_get_owned) (given their context, it reaches this
/// state through [`Cx::with_other`](gex_core::layer::Cx::with_other)).
///
/// `!Unpin`: it holds the addresses of the endpoint's mappings, so no code outside
/// this crate may swap or replace it (it is reached as `Pin<&mut Rma>`; see "Pinned
/// states" in [`gex_core::layer`]). Swapping two endpoints' states does not compile:
/// ```compile_fail,E0277
/// # use gex_core::{boot::Singleton, loopback::Loopback, ClientBuilder, layer};
/// # use gex_rma::Rma;
/// # let new = || ClientBuilder::new().layer::<Rma>().init::<Loopback>(Box::new(Singleton::new())).unwrap();
/// let (ca, cb) = (new(), new());
/// let (mut a, mut b) = (ca.endpoint(0).unwrap(), cb.endpoint(0).unwrap());
/// let mut ra = layer::state::<Rma, _>(&mut a).unwrap();
/// let mut rb = layer::state::<Rma, _>(&mut b).unwrap();
/// std::mem::swap(&mut *ra, &mut *rb);
/// ```
pub struct Rma {
    pub(crate) h: Handlers,
    pub(crate) me: EpAddr,
    pub(crate) size: u32,
    /// This endpoint's segment (base, length).
    pub(crate) seg: NonNull<u8>,
    pub(crate) seg_len: usize,
    /// Published segment length of every rank (each of its endpoints, made at init
    /// or at run time, has a segment of this length).
    pub(crate) seg_lens: Vec<usize>,
    /// Endpoint indices every rank may be addressed at (its capacity when the
    /// conduit makes endpoints at run time: [`Cx::endpoint_capacity`]); at or above,
    /// [`RmaError::BadEndpoint`].
    pub(crate) cap: Vec<u16>,
    /// Endpoints every rank made at init: indices at or above are endpoints made at
    /// run time, whose state is asked per operation ([`Rma::mapping`]) and whose
    /// mappings are never cached.
    pub(crate) init_eps: Vec<u16>,
    pub(crate) caps: Capabilities,
    /// The AM path is forced (`--cfg gex_force_am_rma` or `GEX_RMA_PATH=am`).
    pub(crate) force_am: bool,
    /// Per rank: the cached mapping of its endpoint with this endpoint's index and the
    /// length a range must stay within ([`Rma::mapping`] fills it, only for an
    /// endpoint that rank made at init; the fast paths' whole question in one entry,
    /// [`Rma::direct_at`]).
    pub(crate) direct: Vec<Direct>,
    pub(crate) ops: OpTable,
    next: u32,
    /// Native operations in flight.
    pub(crate) native: Vec<NativePend>,
    pub(crate) nbi: Nbi,
    /// Small blocking puts acknowledged and sent so far.
    pub(crate) fast_acks: u64,
    pub(crate) fast_sent: u64,
    /// Reply buffer of the get handlers.
    pub(crate) bounce: Vec<u8>,
    /// Messages handlers had to drop (late replies of abandoned operations, malformed
    /// requests).
    pub(crate) dropped: u64,
    /// Gets started by [`try_get_owned`](crate::try_get_owned) whose remaining requests met
    /// back-pressure: sent by the progress hook.
    pub(crate) deferred: Vec<crate::engine::Deferred>,
    /// A relaxed native put was issued in a scope since the last scope flush.
    pub(crate) scope_relaxed: bool,
    /// Ended scopes waiting for the flush of relaxed puts ([`Layer::end_scope`]).
    pub(crate) scope_flush: Vec<OpCompleter>,
    /// Pinned (see the type's documentation).
    _pin: std::marker::PhantomPinned,
}

impl Rma {
    /// The state, reached pinned through [`gex_core::layer`], as `&mut`.
    #[inline(always)]
    pub(crate) fn unpin(p: std::pin::Pin<&mut Rma>) -> &mut Rma {
        // SAFETY: no code of this crate moves an `Rma` out of the place the endpoint
        // keeps it in (nothing swaps, replaces or takes a state reached this way);
        // the type is `!Unpin` so that no code outside the crate can.
        unsafe { p.get_unchecked_mut() }
    }
}

/// Runs `f` with `ep`'s RMA state alone (the fast paths: no `Cx`); `None` without the
/// layer.
#[inline(always)]
pub(crate) fn fast<C: Conduit, R>(
    ep: &mut gex_core::Endpoint<C>,
    f: impl FnOnce(&mut Rma) -> R,
) -> Option<R> {
    gex_core::layer::state::<Rma, C, R>(ep, |p| f(Rma::unpin(p)))
}

/// Runs `f` with `ep`'s RMA state and a [`Cx`]; `None` without the layer.
#[inline(always)]
pub(crate) fn with<C: Conduit, R>(
    ep: &mut gex_core::Endpoint<C>,
    f: impl FnOnce(&mut Rma, &mut Cx<'_, C>) -> R,
) -> Option<R> {
    gex_core::layer::with::<Rma, C, R>(ep, |p, cx| f(Rma::unpin(p), cx))
}

/// One rank's entry of [`Rma::direct`]: the conduit's answer about its segment, once
/// asked.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Direct {
    /// Base of the mapping (null: not mapped, or not asked yet).
    pub(crate) base: *mut u8,
    /// Bytes a direct range must stay within; 0 without a mapping.
    pub(crate) len: usize,
    /// The conduit was asked ([`ConduitEp::peer_segment`](gex_core::spi::ConduitEp::peer_segment)).
    pub(crate) asked: bool,
}

impl Direct {
    /// Not asked yet.
    pub(crate) const NONE: Direct = Direct {
        base: std::ptr::null_mut(),
        len: 0,
        asked: false,
    };
}

// SAFETY: see the module's `# Safety`: the raw pointers point at mappings and buffers
// that outlive the state, and the state is used by one thread at a time.
unsafe impl Send for Rma {}

impl std::fmt::Debug for Rma {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rma")
            .field("endpoint", &self.me)
            .field("force_am", &self.force_am)
            .field("ops", &self.ops.len())
            .field("native", &self.native.len())
            .field("nbi", &self.nbi.pending)
            .field("dropped", &self.dropped)
            .finish()
    }
}

impl Drop for Rma {
    fn drop(&mut self) {
        if !self.native.is_empty() {
            // The network may still write destinations, land words and read source
            // copies of these: leak them rather than free memory in use.
            std::mem::forget(std::mem::take(&mut self.ops));
            std::mem::forget(std::mem::take(&mut self.native));
        }
    }
}

/// Reads `GEX_RMA_PATH`.
fn force_am(cx: &gex_core::Config) -> Result<bool, InitError> {
    let am = match cx
        .get("GEX_RMA_PATH")
        .map(|v| v.trim().to_ascii_lowercase())
    {
        None => false,
        Some(v) if v.is_empty() || v == "auto" => false,
        Some(v) if v == "am" => true,
        Some(v) => {
            return Err(InitError::Config(format!(
                "GEX_RMA_PATH must be `auto` or `am`, got `{v}`"
            )));
        }
    };
    Ok(am || cfg!(gex_force_am_rma))
}

impl Layer for Rma {
    const NAME: &'static str = "rma";
    const HANDLERS: u8 = h::COUNT;
    const ENV_VARS: &'static [gex_core::config::EnvVar] = crate::ENV_VARS;

    fn attach<C: Conduit>(cx: &mut Attach<'_, C, Self>) -> Result<Self, InitError> {
        let force_am = force_am(cx.config())?;
        let me = cx.addr();
        let (seg, seg_len) = cx.peer_segment(me).ok_or_else(|| InitError::Layer {
            layer: Self::NAME,
            msg: "the conduit does not map this endpoint's own segment".into(),
        })?;
        let size = cx.size();
        let layout = cx.layout();
        let seg_lens = layout.seg_len.clone();
        let init_eps = layout.eps.clone();
        let cap = (0..size)
            .map(|r| cx.endpoint_capacity(r).unwrap_or(0))
            .collect();
        let mut caps = cx.capabilities();
        if force_am {
            caps.remove(Capabilities::NATIVE_RMA | Capabilities::NATIVE_ATOMICS);
        }
        Ok(Rma {
            h: Handlers {
                put_long: cx.handler(h::PUT_LONG),
                put_packed: cx.handler(h::PUT_PACKED),
                ack: cx.handler(h::ACK),
                get: cx.handler(h::GET),
                get_packed: cx.handler(h::GET_PACKED),
                get_reply: cx.handler(h::GET_REPLY),
                memset: cx.handler(h::MEMSET),
                put_short: cx.handler(h::PUT_SHORT),
                ack_fast: cx.handler(h::ACK_FAST),
                put_short_b: cx.handler(h::PUT_SHORT_B),
                atomic: cx.handler(h::ATOMIC),
                atomic_reply: cx.handler(h::ATOMIC_REPLY),
            },
            me,
            size,
            seg,
            seg_len,
            seg_lens,
            cap,
            init_eps,
            caps,
            force_am,
            direct: vec![Direct::NONE; size as usize],
            ops: OpTable::default(),
            next: 0,
            native: Vec::new(),
            nbi: Nbi::default(),
            fast_acks: 0,
            fast_sent: 0,
            bounce: Vec::new(),
            dropped: 0,
            deferred: Vec::new(),
            scope_relaxed: false,
            scope_flush: Vec::new(),
            _pin: std::marker::PhantomPinned,
        })
    }

    fn handle(self: std::pin::Pin<&mut Self>, hi: u8, t: &mut Token<'_>, am: Am<'_>) {
        let this = Rma::unpin(self);
        match hi {
            h::PUT_LONG => this.on_put_long(t, &am),
            h::PUT_PACKED => this.on_put_packed(t, &am),
            h::ACK => this.on_ack(&am),
            h::GET => this.on_get(t, &am),
            h::GET_PACKED => this.on_get_packed(t, &am),
            h::GET_REPLY => this.on_get_reply(&am),
            h::MEMSET => this.on_memset(t, &am),
            h::PUT_SHORT => this.on_put_short(t, &am),
            h::ACK_FAST => this.fast_acks += 1,
            h::PUT_SHORT_B => this.on_put_short_b(t, &am),
            h::ATOMIC => this.on_atomic(t, &am),
            h::ATOMIC_REPLY => this.on_atomic_reply(&am),
            _ => this.dropped += 1,
        }
    }

    fn describe(&self) -> String {
        let mut lines = Vec::new();
        // Operations in flight, by peer and kind.
        let mut by: std::collections::BTreeMap<(u32, u16, &str), (usize, usize)> =
            std::collections::BTreeMap::new();
        for op in self.ops.values() {
            let e = by.entry((op.peer.rank, op.peer.ep, op.what)).or_default();
            e.0 += 1;
            e.1 += op.remaining;
        }
        for ((rank, ep, what), (n, units)) in by {
            lines.push(format!(
                "{n} {what} operation(s) to rank {rank} ep {ep} in flight ({units} units outstanding)"
            ));
        }
        let [puts, gets, atomics] = self.nbi.pending;
        if puts + gets + atomics > 0 {
            lines.push(format!(
                "implicit-event operations not synced: {puts} puts, {gets} gets, {atomics} atomics"
            ));
        }
        if !self.native.is_empty() {
            lines.push(format!(
                "{} native transfers awaiting completion",
                self.native.len()
            ));
        }
        if !self.deferred.is_empty() {
            lines.push(format!(
                "{} gets of other layers wait for send resources",
                self.deferred.len()
            ));
        }
        if self.dropped > 0 {
            lines.push(format!(
                "{} reference-protocol messages dropped",
                self.dropped
            ));
        }
        lines.join("\n")
    }

    /// Scoped puts on the native path are relaxed (complete when their source is free,
    /// as implicit-event puts): a scope that issued one gets an event under its tag
    /// that completes when a flush of every relaxed put has (the progress hook drives
    /// it).
    fn end_scope<C: Conduit>(self: std::pin::Pin<&mut Self>, cx: &mut Cx<'_, C>, tag: u32) {
        let this = Rma::unpin(self);
        if !std::mem::take(&mut this.scope_relaxed) {
            return;
        }
        let (ev, done) = cx.pending::<(), RmaError>(None, gex_core::event::finish_unit);
        cx.track_implicit(tag, ev);
        this.scope_flush.push(done);
        this.scope_flush_step(cx);
        cx.set_busy();
    }

    fn progress<C: Conduit>(self: std::pin::Pin<&mut Self>, cx: &mut Cx<'_, C>) -> Progress {
        let this = Rma::unpin(self);
        this.retire_native(cx);
        if !this.deferred.is_empty() {
            this.pump_deferred(cx);
        }
        if !this.scope_flush.is_empty() {
            this.scope_flush_step(cx);
        }
        if this.native.is_empty() && this.deferred.is_empty() && this.scope_flush.is_empty() {
            Progress::Idle
        } else {
            // Native completions and freed send resources wake nobody.
            Progress::Spinning
        }
    }
}

impl Rma {
    /// Messages of the reference protocol that handlers had to drop (replies for
    /// operations abandoned after an error, or malformed requests). Zero in a healthy
    /// job; for diagnosis and tests.
    pub fn dropped_messages(&self) -> u64 {
        self.dropped
    }

    /// Operations in flight in this endpoint's table (including those whose events
    /// were dropped or forgotten before completion).
    pub fn pending_ops(&self) -> usize {
        self.ops.len()
    }

    /// True if every operation of this endpoint takes the AM reference path
    /// (`--cfg gex_force_am_rma` or `GEX_RMA_PATH=am`).
    pub fn forces_am(&self) -> bool {
        self.force_am
    }

    // ------------------------------------------------------------------ checks

    /// Checks rank and endpoint index (below the rank's capacity); returns the
    /// target's segment length. Whether an endpoint made at run time is open is
    /// asked of the conduit when the operation starts ([`Rma::mapping`]).
    #[inline]
    pub(crate) fn check_target(&self, dst: EpAddr) -> Result<usize, RmaError> {
        if dst.rank >= self.size {
            return Err(RmaError::BadRank {
                rank: dst.rank,
                size: self.size,
            });
        }
        let r = dst.rank as usize;
        if dst.ep >= self.cap[r] {
            return Err(RmaError::BadEndpoint { dst });
        }
        Ok(self.seg_lens[r])
    }

    /// Checks that `[offset, offset + len)` lies in `dst`'s segment.
    #[inline]
    pub(crate) fn check_range(
        &self,
        dst: EpAddr,
        offset: usize,
        len: usize,
    ) -> Result<(), RmaError> {
        let seg_len = self.check_target(dst)?;
        match offset.checked_add(len) {
            Some(e) if e <= seg_len => Ok(()),
            _ => Err(RmaError::OutOfSegment {
                dst,
                offset,
                len,
                seg_len,
            }),
        }
    }

    /// True if (checked) `dst` is an endpoint its rank made at run time.
    #[inline(always)]
    pub(crate) fn made_at_run_time(&self, dst: EpAddr) -> bool {
        self.init_eps
            .get(dst.rank as usize)
            .is_none_or(|&e| dst.ep >= e)
    }

    /// The local mapping of (checked) `dst`'s segment if the bytes `0..end` of it lie
    /// within what is mapped here and within its published length (every remote range
    /// of the operation ends at or before `end`), unless the AM path is forced. `None`
    /// otherwise: the operation takes the native or AM path, so no direct copy ever
    /// passes the smaller of the two lengths (a conduit may map less than the layout
    /// says: `peer_segment`'s length is at most the layout's).
    ///
    /// Every operation asks it when it starts, so this is also where an endpoint made
    /// at run time is checked to be open (one question to the conduit per operation:
    /// its mapping is never cached, so a close is seen by the next operation).
    ///
    /// # Errors
    /// [`RmaError::NoEndpoint`] if `dst` is an endpoint made at run time that is not
    /// open (not created yet, or closed).
    #[inline]
    pub(crate) fn mapping<C: Conduit>(
        &mut self,
        cx: &Cx<'_, C>,
        dst: EpAddr,
        end: usize,
    ) -> Result<Option<NonNull<u8>>, RmaError> {
        let runtime = self.made_at_run_time(dst);
        if runtime {
            cx.peer_open(dst)?;
        }
        if self.force_am {
            return Ok(None);
        }
        let r = dst.rank as usize;
        let (base, len) = if dst.ep != self.me.ep || runtime {
            let (Some((p, len)), Some(&seg)) = (cx.peer_segment(dst), self.seg_lens.get(r)) else {
                return Ok(None);
            };
            (p.as_ptr(), len.min(seg))
        } else {
            if !self.direct[r].asked {
                // `dst` was checked (rank, endpoint); the range bound is the smaller
                // of the published and the mapped length.
                self.direct[r] = match cx.peer_segment(dst) {
                    Some((base, len)) => Direct {
                        base: base.as_ptr(),
                        len: len.min(self.seg_lens[r]),
                        asked: true,
                    },
                    None => Direct {
                        asked: true,
                        ..Direct::NONE
                    },
                };
            }
            (self.direct[r].base, self.direct[r].len)
        };
        if end > len {
            return Ok(None);
        }
        Ok(NonNull::new(base))
    }

    /// The address of `[offset, offset + len)` of `dst`'s segment if that range is on
    /// the direct path and its mapping is already cached (no conduit call): the whole
    /// check of the put, get and atomic fast paths, one entry loaded. Once the
    /// conduit was asked, an empty range at offset 0 passes whatever the mapping (its
    /// copy moves nothing; the target was checked when it was asked). `None` for
    /// anything else (not asked yet, never for an endpoint made at run time, not
    /// mapped, the AM path forced, a bad range: the slow path decides and reports
    /// errors).
    #[inline(always)]
    pub(crate) fn direct_at(&self, dst: EpAddr, offset: usize, len: usize) -> Option<*mut u8> {
        if dst.ep != self.me.ep {
            return None;
        }
        let d = self.direct.get(dst.rank as usize)?;
        let end = offset.checked_add(len)?;
        if end > d.len || !d.asked {
            return None;
        }
        // SAFETY: with `d.len > 0`, `d.base` is a cached mapping of `d.len` bytes
        // (`Direct`) and `end <= d.len` keeps the range inside it; with `d.len == 0`
        // (nothing mapped, `d.base` may be null), `offset == len == 0`: a zero offset
        // is always in bounds, and the caller's copy of `len` bytes moves none.
        Some(unsafe { d.base.add(offset) })
    }

    /// The path of an operation (see [`crate::path`]).
    #[inline]
    pub(crate) fn path(
        &self,
        op: OpKind,
        size: usize,
        offset: usize,
        pieces: usize,
        mapped: bool,
    ) -> Path {
        crate::path::select(PathIn {
            op,
            size,
            offset,
            pieces,
            mapped,
            caps: self.caps,
            force_am: self.force_am,
        })
    }

    // ------------------------------------------------------------------ op table

    /// A new, unsealed entry with nothing outstanding (never id 0, which names no
    /// entry: [`Job::entry`](crate::engine::Job)).
    pub(crate) fn new_op(
        &mut self,
        peer: EpAddr,
        what: &'static str,
        dst: *mut u8,
        dst_len: usize,
        land: *mut u64,
    ) -> u32 {
        loop {
            self.next = self.next.wrapping_add(1);
            let id = self.next;
            if id == 0 {
                continue;
            }
            if let std::collections::hash_map::Entry::Vacant(v) = self.ops.entry(id) {
                v.insert(Op {
                    peer,
                    what,
                    remaining: 0,
                    sealed: false,
                    abandoned: false,
                    dst,
                    dst_len,
                    land,
                    result: None,
                    word: 0,
                    done: Done::Unset,
                    error: None,
                    keep: None,
                });
                return id;
            }
        }
    }

    /// Decides what completes `id` once its first unit has started: the event of
    /// `ev` (made now, holding `hold`), or, for implicit-event operations of a
    /// counted category, the category's counter. Nothing if already decided.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn open<C: Conduit, O: Send + 'static>(
        &mut self,
        cx: &mut Cx<'_, C>,
        id: u32,
        kind: ModeKind,
        counted: Option<Cat>,
        hold: &mut Option<O>,
        finish: Finish<O>,
        ev: &mut Option<Event<O, RmaError>>,
    ) {
        let Some(op) = self.ops.get_mut(&id) else {
            return;
        };
        if !matches!(op.done, Done::Unset) {
            return;
        }
        match counted {
            Some(cat) if kind == ModeKind::Nbi => {
                op.done = Done::Count(cat);
                if let Some(h) = hold.take() {
                    op.keep = Some(Box::new(h));
                }
                self.nbi.pending[cat as usize] += 1;
            }
            _ => {
                let (e, c) = cx.pending(hold.take(), finish);
                op.done = Done::Event(c);
                *ev = Some(e);
            }
        }
    }

    /// `n` more units of `id` are outstanding.
    #[inline]
    pub(crate) fn bump(&mut self, id: u32, n: usize) {
        if let Some(op) = self.ops.get_mut(&id) {
            op.remaining += n;
        }
    }

    /// `n` units of `id` are done; completes it if that was the last of a sealed entry.
    /// False if there is no such entry or it had fewer units outstanding.
    pub(crate) fn credit(&mut self, id: u32, n: usize) -> bool {
        let Some(op) = self.ops.get_mut(&id) else {
            return false;
        };
        if op.remaining < n {
            return false;
        }
        op.remaining -= n;
        if op.sealed && op.remaining == 0 {
            self.complete(id);
        }
        true
    }

    /// Every unit of `id` has started; completes it if none is outstanding. Returns
    /// the fetched or landed word if it completed now.
    pub(crate) fn seal(&mut self, id: u32) -> Option<u64> {
        let op = self.ops.get_mut(&id)?;
        op.sealed = true;
        if op.remaining == 0 {
            return self.complete(id);
        }
        None
    }

    /// Removes a finished entry and completes its event or counter; returns its word.
    fn complete(&mut self, id: u32) -> Option<u64> {
        let mut op = self.ops.remove(&id)?;
        if !op.land.is_null() {
            // SAFETY: the entry owns the word and every writer is done (complete).
            op.word = unsafe { op.land.read() };
        }
        if let Some((p, n)) = op.result {
            // SAFETY: a borrowed fetch destination outlives its operation (module
            // `# Safety`); `n` is the width of its element.
            unsafe { crate::atomic::store_word(p, n, op.word) };
        }
        match std::mem::replace(&mut op.done, Done::Unset) {
            Done::Event(c) => match op.error.take() {
                Some(e) if op.abandoned => c.fail(e),
                _ if op.abandoned => drop(c),
                _ => c.done(Data::Word(op.word)),
            },
            Done::Count(cat) => self.nbi.pending[cat as usize] -= 1,
            Done::Unset => {}
        }
        Some(op.word)
    }

    /// After an error while starting `id`: waits only for its native tickets already
    /// started (they may use buffers the caller still lends); replies are dropped.
    /// Returns true if the entry is still in flight (its event must then be waited
    /// for before a borrowed buffer is released).
    pub(crate) fn abandon(&mut self, id: u32, err: RmaError) -> bool {
        let units: usize = self
            .native
            .iter()
            .filter(|p| p.id == id)
            .map(|p| p.units)
            .sum();
        let Some(op) = self.ops.get_mut(&id) else {
            return false;
        };
        op.abandoned = true;
        op.error = Some(err);
        op.sealed = true;
        op.remaining = units;
        if units == 0 {
            self.complete(id);
            return false;
        }
        true
    }
}
