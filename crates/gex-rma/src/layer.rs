//! [`Rma`], the RMA layer: its state (one per endpoint, owned by the endpoint) and its
//! side of the layer contract (attach, handler dispatch, progress hook).
//!
//! The state is made of components with their own state and a narrow interface, the
//! dependencies flowing one way (API → engine → components):
//! - [`Targets`] ([`crate::target`]): the addressing checks and the direct path's
//!   mappings;
//! - [`OpTable`] ([`crate::ops`]): the operations in flight and the implicit-event
//!   counters;
//! - [`Nbi`] ([`crate::nbi`]): the relaxed native puts to flush;
//! - the native tickets ([`crate::native`]) and the AM protocol's handlers
//!   ([`crate::am`], [`Handlers`]), with this endpoint's segment.
//!
//! # Safety
//! `Rma` holds raw pointers, which makes it `!Send` by default; it is sent with its
//! endpoint (the layer contract requires `Send`) under these rules:
//! - `seg` and the cached mappings of [`Targets`] point at segments the conduit maps for
//!   its whole life; the endpoint holds the conduit, and the layer lives inside the
//!   endpoint, so they outlive the layer. They are dereferenced only within ranges
//!   checked against the published segment lengths and within the mapped length
//!   ([`Targets::mapping`](crate::target::Targets::mapping) and [`Targets::direct_at`] bound every direct path by both).
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
use crate::nbi::Nbi;
use crate::ops::OpTable;
use crate::served::Served;
use crate::target::Targets;
use gex_core::event::OpCompleter;
use gex_core::layer::{Attach, Cx, Layer, Progress};
use gex_core::spi::Conduit;
use gex_core::{Am, Capabilities, HandlerId, InitError, Token};

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
    /// The target side: serving other ranks' requests ([`crate::served`]).
    pub(crate) served: Served,
    /// The targets: addressing checks and the direct path's mappings
    /// ([`crate::target`]).
    pub(crate) t: Targets,
    /// The operations in flight ([`crate::ops`]).
    pub(crate) ops: OpTable,
    /// Native operations in flight.
    pub(crate) native: Vec<NativePend>,
    pub(crate) nbi: Nbi,
    /// Small blocking puts acknowledged and sent so far.
    pub(crate) fast_acks: u64,
    pub(crate) fast_sent: u64,
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

// SAFETY: see the module's `# Safety`: the raw pointers point at mappings and buffers
// that outlive the state, and the state is used by one thread at a time.
unsafe impl Send for Rma {}

impl std::fmt::Debug for Rma {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rma")
            .field("endpoint", &self.t.me)
            .field("force_am", &self.t.force_am)
            .field("ops", &self.ops.len())
            .field("native", &self.native.len())
            .field("nbi", &self.ops.counted)
            .field("dropped", &self.served.dropped)
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
        let h = Handlers {
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
        };
        Ok(Rma {
            h,
            served: Served::new(h, seg, seg_len),
            t: Targets::new(me, size, seg_lens, cap, init_eps, caps, force_am),
            ops: OpTable::default(),
            native: Vec::new(),
            nbi: Nbi::default(),
            fast_acks: 0,
            fast_sent: 0,
            deferred: Vec::new(),
            scope_relaxed: false,
            scope_flush: Vec::new(),
            _pin: std::marker::PhantomPinned,
        })
    }

    fn handle(self: std::pin::Pin<&mut Self>, hi: u8, t: &mut Token<'_>, am: Am<'_>) {
        let this = Rma::unpin(self);
        match hi {
            h::PUT_LONG => this.served.on_put_long(t, &am),
            h::PUT_PACKED => this.served.on_put_packed(t, &am),
            h::ACK => this.on_ack(&am),
            h::GET => this.served.on_get(t, &am),
            h::GET_PACKED => this.served.on_get_packed(t, &am),
            h::GET_REPLY => this.on_get_reply(&am),
            h::MEMSET => this.served.on_memset(t, &am),
            h::PUT_SHORT => this.served.on_put_short(t, &am),
            h::ACK_FAST => this.fast_acks += 1,
            h::PUT_SHORT_B => this.served.on_put_short_b(t, &am),
            h::ATOMIC => this.served.on_atomic(t, &am),
            h::ATOMIC_REPLY => this.on_atomic_reply(&am),
            _ => this.served.dropped += 1,
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
        let [puts, gets, atomics] = self.ops.counted;
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
        if self.served.dropped > 0 {
            lines.push(format!(
                "{} reference-protocol messages dropped",
                self.served.dropped
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
        self.served.dropped
    }

    /// Operations in flight in this endpoint's table (including those whose events
    /// were dropped or forgotten before completion).
    pub fn pending_ops(&self) -> usize {
        self.ops.len()
    }

    /// True if every operation of this endpoint takes the AM reference path
    /// (`--cfg gex_force_am_rma` or `GEX_RMA_PATH=am`).
    pub fn forces_am(&self) -> bool {
        self.t.force_am
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
        self.ops.abandon(id, err, units)
    }
}
