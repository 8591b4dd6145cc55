//! The RMA layer's state ([`Rma`]): the components, with the entry points that reach
//! them from an endpoint ([`fast`], [`with`]).
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
use crate::am::Handlers;
use crate::native::NativePend;
use crate::nbi::Nbi;
use crate::ops::OpTable;
use crate::served::Served;
use crate::target::Targets;
use gex_core::event::OpCompleter;
use gex_core::layer::Cx;
use gex_core::spi::Conduit;

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
    pub(crate) deferred: Vec<crate::job::Deferred>,
    /// A relaxed native put was issued in a scope since the last scope flush.
    pub(crate) scope_relaxed: bool,
    /// Ended scopes waiting for the flush of relaxed puts ([`Layer::end_scope`]).
    pub(crate) scope_flush: Vec<OpCompleter>,
    /// Pinned (see the type's documentation).
    _pin: std::marker::PhantomPinned,
}

impl Rma {
    /// A new state: the protocol's handlers, the target side and the targets, with
    /// nothing in flight.
    pub(crate) fn new(h: Handlers, served: Served, t: Targets) -> Rma {
        Rma {
            h,
            served,
            t,
            ops: OpTable::default(),
            native: Vec::new(),
            nbi: Nbi::default(),
            fast_acks: 0,
            fast_sent: 0,
            deferred: Vec::new(),
            scope_relaxed: false,
            scope_flush: Vec::new(),
            _pin: std::marker::PhantomPinned,
        }
    }

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

/// `ep`'s RMA state through the endpoint's cache alone
/// ([`layer::state_cached`](gex_core::layer::state_cached)): `None` without the layer
/// or with a progress thread (the caller's general way then decides).
#[inline(always)]
pub(crate) fn cached<C: Conduit>(ep: &mut gex_core::Endpoint<C>) -> Option<&mut Rma> {
    gex_core::layer::state_cached::<Rma, C>(ep).map(Rma::unpin)
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
