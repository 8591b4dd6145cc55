//! The layer contract: how an upper layer (one-sided RMA, collectives, later tagged
//! messages and overlap) composes into an endpoint, and the layer author's door into
//! an endpoint (the functions of this module). A program never needs this module: it
//! uses the operations layers offer on [`Endpoint`] through their extension traits.
//!
//! A layer is a type implementing [`Layer`]. The program names the layers it wants on
//! the [`ClientBuilder`](crate::ClientBuilder) (`.layer::<L>()`), in the same order on
//! every rank; every endpoint taken from the client then carries them. When an
//! endpoint is made, each layer, in order, gets:
//!
//! | what | how |
//! |---|---|
//! | a block of [`Layer::HANDLERS`] handler indices in `16..128` | [`Cx::handler`]; incoming messages for them run [`Layer::handle`] with the layer's own state (`&mut self`) |
//! | its slice of every neighbour's auxiliary area ([`Layer::AUX_BYTES`] bytes, zero-filled, 64-byte aligned) | [`Cx::aux`] |
//! | its settings ([`Layer::ENV_VARS`], declared in its own crate, collected into the registry `GEX_VERBOSEENV=1` and `gex-info env` print) | [`Cx::config`] |
//! | a progress hook, run by every poll and every wait of the endpoint while the layer says it has work (or one of its handlers ran) | [`Layer::progress`], [`Cx::set_busy`] |
//! | a line in hang reports | [`Layer::describe`] |
//! | the segments, the job layout, the native operations of the conduit, other layers, events | [`Cx`] |
//!
//! # The door
//!
//! The layer's operations are functions of `&mut Endpoint<C>` (usually an extension
//! trait the layer implements for [`Endpoint`]); they reach the layer's state in one
//! of two ways, both fast and both always available while the layer is attached:
//! - [`state`]: the state alone (`Pin<&mut L>`, to a closure), from the endpoint's
//!   cache of layer addresses, for the fast paths that need nothing else (a bounds
//!   check and a copy to a mapped segment, a CPU atomic);
//! - [`with`]: the state and a [`Cx`] (injection without waiting, segments, events,
//!   the conduit's native operations, other layers).
//!
//! and they wait, with nothing borrowed, through [`poll`], [`retry`] (back-pressure),
//! [`wait_until`] or [`finish`] (an event, as its mode asks). [`done`] and
//! [`track_implicit`] complete the set, and [`wait_unwinding`] is the unwinding wait
//! of an operation cancelled by a panic before it had an event.
//!
//! # Pinned states
//!
//! A layer's state lives in a box the endpoint owns and never moves until the endpoint
//! is dropped, and everything outside the layer's own hooks sees it as
//! `Pin<&mut L>`. A state that safe code must not swap or replace (one holding raw
//! pointers into the endpoint's memory, as the RMA and collectives layers' do) is `!Unpin`
//! (a [`PhantomPinned`](std::marker::PhantomPinned) field): then no code outside the
//! layer's crate can move it, and the crate reaches `&mut L` with
//! [`Pin::get_unchecked_mut`] (its promise: its own code never moves the state out).
//! A state of plain data stays `Unpin`, and `Pin<&mut L>` dereferences to `&mut L`.
//! [`Layer::attach`] takes an [`Attach`] that only the core makes, for the layer being
//! attached, so no code can build a second, detached state of a layer bound to an
//! endpoint.
//!
//! There is no `Arc<Mutex<_>>` between a layer's handlers and its operations: both
//! get the one state the endpoint owns. The price is a rule the types enforce: a
//! layer's code never waits. Handlers, [`Layer::progress`] and the closures passed to
//! [`with`] get a [`Cx`], which can inject only without waiting ([`Cx::try_request`])
//! and cannot poll; operations that must wait take the layer's state briefly, then
//! wait through the endpoint with nothing borrowed, so every layer's handlers can run
//! meanwhile.
//!
//! # Panics in handlers
//!
//! A handler (the program's or a layer's) that panics does not unwind through the
//! conduit's receive loop: the core catches the panic where the handler ran, goes on,
//! and raises it again from the call that ran the handler once that call is done with
//! the buffers it borrowed: [`Endpoint::poll`] and the program's waits raise it at
//! once; [`finish`] of a blocking operation, [`wait_until`] and the event waits raise
//! it once their operation is complete; [`poll`] and [`retry`] keep it for the next
//! call that raises. A layer's operation that lends a caller's buffer to a transfer
//! ends through [`finish`] in blocking mode (or a [scope](Endpoint::scope)), which
//! waits for the transfer on every path: return, error, a handler's panic, and any
//! other panic inside the wait (the unwinding waits for the transfer; if it does not
//! complete within [`UNWIND_WAIT`], the process aborts rather than let the borrow end
//! while it may still be written). Before that, while the operation is still being
//! issued (steps alternating with [`retry`] under back-pressure), a panic in the retry
//! or in a step unwinds through the layer's own loop: the layer's guard cancels the
//! operation (late replies are dropped) and waits, with [`wait_unwinding`], for what
//! the network still holds of it.
//!
//! # Safety
//!
//! The unsafe code here: the forwarding of the conduit's `unsafe` native operations
//! (the caller's promises unchanged), the pinned access to a layer's state from a
//! slot (`LayerSlot::pinned`: the slot's type id names its type) or from the
//! handle's cache of state addresses ([`state`]: exclusive through `&mut Endpoint`,
//! and the lock word with a progress thread), and `LayerBox`, an owning pointer.
//!
//! ```
//! use gex_core::layer::{self, Attach, Layer, Progress};
//! use std::pin::Pin;
//! use gex_core::spi::Conduit;
//! use gex_core::{boot::Singleton, loopback::Loopback, Am, Body, Category, ClientBuilder, HandlerId, InitError, Token};
//!
//! /// Counts pings; replies to each with a pong.
//! #[derive(Debug)]
//! struct Pinger { ping: HandlerId, pong: HandlerId, pongs: u32 }
//!
//! impl Layer for Pinger {
//!     const NAME: &'static str = "pinger";
//!     const HANDLERS: u8 = 2;
//!     fn attach<C: Conduit>(cx: &mut Attach<'_, C, Self>) -> Result<Self, InitError> {
//!         Ok(Pinger { ping: cx.handler(0), pong: cx.handler(1), pongs: 0 })
//!     }
//!     fn handle(mut self: Pin<&mut Self>, h: u8, t: &mut Token<'_>, _am: Am<'_>) {
//!         match h {
//!             0 => t.reply(self.pong, Body::short(&[])).expect("reply"),
//!             _ => self.pongs += 1,
//!         }
//!     }
//! }
//!
//! let client = ClientBuilder::new().layer::<Pinger>().segment_size(4096)
//!     .init::<Loopback>(Box::new(Singleton::new()))?;
//! let mut ep = client.endpoint(0)?;
//! let me = ep.addr();
//! layer::with::<Pinger, _, _>(&mut ep, |p, cx| cx.try_request(me, p.ping, Category::Short, &[], &[], 0))
//!     .unwrap()?;
//! layer::wait_until::<Pinger, _>(&mut ep, |p| p.pongs == 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![allow(unsafe_code)]

use crate::config::{Config, EnvVar};
use crate::endpoint::Core;
use crate::error::{AmError, InitError};
use crate::event::{Event, EventErr, Finish, OpCompleter};
use crate::spi::{
    Capabilities, Conduit, ConduitEp, ConduitError, JobLayout, Native, NativeAtomic, NativeResult,
    SegRange,
};
use crate::team::Team;
use crate::types::{Category, EpAddr, HandlerId, Injected, Rank};
use crate::{Am, Endpoint, Segment, Token};
use gex_sync::wait::WaitPolicy;
use std::any::{Any, TypeId};
use std::marker::PhantomData;
use std::pin::Pin;
use std::ptr::NonNull;

/// What a layer's progress hook reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Progress {
    /// Nothing in flight: the hook need not run again until the layer calls
    /// [`Cx::set_busy`] or one of its handlers runs (a layer whose handler ran is
    /// busy: what the handler recorded may let its work advance).
    Idle,
    /// Work in flight that messages or wake-ups will advance: run the hook on every
    /// poll; a waiting endpoint may sleep.
    Busy,
    /// Work in flight that nothing will announce (e.g. a network completion that does
    /// not wake a sleeper): run the hook on every poll and do not sleep.
    Spinning,
}

/// An upper layer of gex. See the [module documentation](self).
pub trait Layer: Any + Send + Sized {
    /// Short name, for diagnostics (`"rma"`, `"coll"`).
    const NAME: &'static str;
    /// Handler indices the layer uses (its block; at most what is free of `16..128`).
    const HANDLERS: u8 = 0;
    /// Bytes of every endpoint's auxiliary area the layer uses (rounded up to 64).
    const AUX_BYTES: usize = 0;
    /// The `GEX_*` settings the layer reads.
    const ENV_VARS: &'static [EnvVar] = &[];
    /// Makes the layer's state for one endpoint (layers attached before it are
    /// reachable through `cx`, which dereferences to [`Cx`]). Only the core calls it:
    /// an [`Attach`] for a layer exists only while that layer is being attached.
    ///
    /// # Errors
    /// [`InitError`] (typically [`InitError::Layer`] or [`InitError::Config`]).
    fn attach<C: Conduit>(cx: &mut Attach<'_, C, Self>) -> Result<Self, InitError>;
    /// Runs handler `h` (`0..HANDLERS`) of the layer for an incoming message. Must not
    /// block; may reply once through `t`.
    fn handle(self: Pin<&mut Self>, h: u8, t: &mut Token<'_>, am: Am<'_>) {
        let _ = (h, t, am);
    }
    /// Runs when a [`Scope`](crate::Scope) ends (and at
    /// [`Scope::sync`](crate::Scope::sync)), before the endpoint waits for the events
    /// tracked under the scope's `tag`. A layer whose scoped operations complete
    /// locally before they are complete at their targets (relaxed puts, flushed
    /// together) tracks here, with [`Cx::track_implicit`], an event that completes when
    /// they are, and starts what completes it (its progress hook finishes it). Must not
    /// block. The default does nothing.
    fn end_scope<C: Conduit>(self: Pin<&mut Self>, cx: &mut Cx<'_, C>, tag: u32) {
        let _ = (cx, tag);
    }
    /// Advances the layer's work in flight; runs on every poll of the endpoint while
    /// the layer is busy (see [`Progress`]). Must not block.
    fn progress<C: Conduit>(self: Pin<&mut Self>, cx: &mut Cx<'_, C>) -> Progress {
        let _ = cx;
        Progress::Idle
    }
    /// What the layer has in flight, for a hang report (`GEX_STALL_REPORT`,
    /// `SIGUSR1`): pending operations by peer, collectives and their step, barrier
    /// phase... One line per item; empty when idle.
    fn describe(&self) -> String {
        String::new()
    }
}

/// A layer's state behind a trait object (what the endpoint stores).
pub(crate) trait ErasedLayer: Send {
    /// # Safety
    /// `self` is a state in its `LayerBox` (pinned: it never moves until dropped).
    unsafe fn handle(&mut self, h: u8, t: &mut Token<'_>, am: Am<'_>);
    fn describe(&self) -> String;
    fn any_mut(&mut self) -> &mut dyn Any;
    fn any(&self) -> &dyn Any;
}

impl<L: Layer> ErasedLayer for L {
    #[inline]
    unsafe fn handle(&mut self, h: u8, t: &mut Token<'_>, am: Am<'_>) {
        // SAFETY: the state is in its box and never moves until dropped (the caller's
        // promise), which is what `Pin` asks.
        Layer::handle(unsafe { Pin::new_unchecked(self) }, h, t, am)
    }
    fn describe(&self) -> String {
        Layer::describe(self)
    }
    fn any_mut(&mut self) -> &mut dyn Any {
        self
    }
    fn any(&self) -> &dyn Any {
        self
    }
}

/// The progress hook of a layer, monomorphised for its conduit (`unsafe`: the state
/// must be a boxed, pinned one).
pub(crate) type ProgressFn<C> = unsafe fn(&mut dyn ErasedLayer, &mut Cx<'_, C>) -> Progress;

/// A layer's [`Layer::end_scope`], monomorphised for the endpoint's conduit (`unsafe`:
/// as [`ProgressFn`]).
pub(crate) type EndScopeFn<C> = unsafe fn(&mut dyn ErasedLayer, &mut Cx<'_, C>, u32);

/// # Safety
/// `s` is a state in its `LayerBox` (pinned).
unsafe fn end_scope_of<L: Layer, C: Conduit>(
    s: &mut dyn ErasedLayer,
    cx: &mut Cx<'_, C>,
    tag: u32,
) {
    if let Some(l) = s.any_mut().downcast_mut::<L>() {
        // SAFETY: the state never moves until dropped (the caller's promise).
        unsafe { Pin::new_unchecked(l) }.end_scope(cx, tag);
    }
}

/// # Safety
/// `s` is a state in its `LayerBox` (pinned).
unsafe fn progress_of<L: Layer, C: Conduit>(
    s: &mut dyn ErasedLayer,
    cx: &mut Cx<'_, C>,
) -> Progress {
    match s.any_mut().downcast_mut::<L>() {
        // SAFETY: the state never moves until dropped (the caller's promise).
        Some(l) => unsafe { Pin::new_unchecked(l) }.progress(cx),
        None => Progress::Idle,
    }
}

/// Where a layer's resources are in its endpoint.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Place {
    pub(crate) index: usize,
    pub(crate) name: &'static str,
    pub(crate) base: u8,
    pub(crate) count: u8,
    pub(crate) aux_off: usize,
    pub(crate) aux_len: usize,
}

/// A layer's state on the heap, owned through a raw pointer rather than a `Box`, so
/// that the endpoint handle may keep the state's address (`Handle::fast`, for
/// [`state`]) and reach it later without a search: every access, from here or from the
/// handle, derives from the one pointer `Box::into_raw` gave, and none invalidates
/// another's (a `Box` would assert uniqueness each time it is used). The state never
/// moves until the box is dropped: it is pinned.
pub(crate) struct LayerBox(NonNull<dyn ErasedLayer>);

impl LayerBox {
    pub(crate) fn new<L: Layer>(l: L) -> Self {
        let b: Box<dyn ErasedLayer> = Box::new(l);
        LayerBox(NonNull::from(Box::leak(b)))
    }
    /// The state's address (stable for the life of the box).
    pub(crate) fn addr(&self) -> NonNull<u8> {
        self.0.cast::<u8>()
    }
}

mod layer_box {
    use super::{ErasedLayer, Layer, LayerBox, LayerSlot, Pin};
    use crate::spi::Conduit;
    impl std::ops::Deref for LayerBox {
        type Target = dyn ErasedLayer;
        #[inline(always)]
        fn deref(&self) -> &(dyn ErasedLayer + 'static) {
            // SAFETY: the pointer came from `Box::leak` and is freed only in `drop`;
            // `&self` excludes a `&mut` made through this box meanwhile (the handle's
            // own access is exclusive by the endpoint's lock rules, module
            // `crate::endpoint`).
            unsafe { self.0.as_ref() }
        }
    }
    impl std::ops::DerefMut for LayerBox {
        #[inline(always)]
        fn deref_mut(&mut self) -> &mut (dyn ErasedLayer + 'static) {
            // SAFETY: as in `deref`, with `&mut self` exclusive.
            unsafe { self.0.as_mut() }
        }
    }
    impl Drop for LayerBox {
        fn drop(&mut self) {
            // SAFETY: the pointer came from `Box::leak` and is dropped once, here.
            drop(unsafe { Box::from_raw(self.0.as_ptr()) });
        }
    }
    // SAFETY: the box owns an `ErasedLayer`, which is `Send`; it is a `Box` in all
    // but name.
    unsafe impl Send for LayerBox {}

    impl<C: Conduit> LayerSlot<C> {
        /// Runs the layer's progress hook on its state.
        #[inline]
        pub(crate) fn run_progress(&mut self, cx: &mut super::Cx<'_, C>) -> super::Progress {
            // SAFETY: the state is this slot's, in its `LayerBox`, which never moves it.
            unsafe { (self.progress)(&mut *self.state, cx) }
        }
        /// Runs the layer's end-of-scope hook on its state.
        pub(crate) fn run_end_scope(&mut self, cx: &mut super::Cx<'_, C>, tag: u32) {
            // SAFETY: as in `run_progress`.
            unsafe { (self.end_scope)(&mut *self.state, cx, tag) }
        }
        /// Runs the layer's handler `h` on its state.
        #[inline]
        pub(crate) fn run_handle(&mut self, h: u8, t: &mut crate::Token<'_>, am: crate::Am<'_>) {
            // SAFETY: as in `run_progress`.
            unsafe { self.state.handle(h, t, am) }
        }
        /// The slot's state as the layer type it was made from, pinned.
        ///
        /// # Panics
        /// If the slot is not `L`'s (a caller bug: callers find the slot by type).
        #[inline(always)]
        pub(crate) fn pinned<L: Layer>(&mut self) -> Pin<&mut L> {
            assert!(
                self.type_id == std::any::TypeId::of::<L>(),
                "gex: layer slot of another type"
            );
            // SAFETY: the slot was made from an `L` (`attach_one`, `type_id` checked
            // above), so its data pointer is an `L`'s; `&mut self` makes the borrow
            // exclusive; the state stays in its box, unmoved, until the box is dropped
            // (nothing moves it out: the core hands out only this pin and `&mut` to the
            // layer's own hooks), which is `Pin`'s promise.
            unsafe { Pin::new_unchecked(&mut *self.state.0.as_ptr().cast::<L>()) }
        }
    }
}

/// One attached layer.
pub(crate) struct LayerSlot<C: Conduit> {
    pub(crate) state: LayerBox,
    pub(crate) type_id: TypeId,
    pub(crate) place: Place,
    pub(crate) progress: ProgressFn<C>,
    pub(crate) end_scope: EndScopeFn<C>,
}

/// Description of a layer without its type: what the client needs before any
/// endpoint exists (handler and aux budgets, settings).
#[derive(Clone, Copy, Debug)]
pub struct LayerInfo {
    /// [`Layer::NAME`].
    pub name: &'static str,
    /// [`Layer::HANDLERS`].
    pub handlers: u8,
    /// [`Layer::AUX_BYTES`] rounded up to 64.
    pub aux_bytes: usize,
    /// [`Layer::ENV_VARS`].
    pub env_vars: &'static [EnvVar],
}

/// Attaches one layer to an endpoint being made (monomorphised per conduit).
pub(crate) type Attacher<C> = fn(&mut crate::endpoint::Inner<C>, Place) -> Result<(), InitError>;

fn attach_one<L: Layer, C: Conduit>(
    inner: &mut crate::endpoint::Inner<C>,
    place: Place,
) -> Result<(), InitError> {
    let (core, layers) = inner.parts();
    let mut cx = Attach {
        cx: Cx {
            core,
            before: &mut layers[..],
            after: &mut [],
            place,
        },
        _layer: PhantomData,
    };
    let l = L::attach(&mut cx)?;
    inner.push_layer(LayerSlot {
        state: LayerBox::new(l),
        type_id: TypeId::of::<L>(),
        place,
        progress: progress_of::<L, C>,
        end_scope: end_scope_of::<L, C>,
    });
    Ok(())
}

/// A list of layers, built by [`ClientBuilder::layer`](crate::ClientBuilder::layer):
/// `()`, `((), A)`, `(((), A), B)`, ... Sealed: the core decides how layers attach.
pub trait LayerSet: sealed::Sealed + Send + 'static {
    /// The layers, in attach order.
    fn infos(out: &mut Vec<LayerInfo>);
    #[doc(hidden)]
    #[allow(private_interfaces)]
    fn attachers<C: Conduit>(out: &mut Vec<Attacher<C>>);
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for () {}
    impl<A: super::LayerSet, B: super::Layer> Sealed for (A, B) {}
}

impl LayerSet for () {
    fn infos(_: &mut Vec<LayerInfo>) {}
    #[allow(private_interfaces)]
    fn attachers<C: Conduit>(_: &mut Vec<Attacher<C>>) {}
}

impl<A: LayerSet, B: Layer> LayerSet for (A, B) {
    fn infos(out: &mut Vec<LayerInfo>) {
        A::infos(out);
        out.push(LayerInfo {
            name: B::NAME,
            handlers: B::HANDLERS,
            // Saturating: an impossible size is refused by `ClientBuilder::init`.
            aux_bytes: B::AUX_BYTES.div_ceil(64).saturating_mul(64),
            env_vars: B::ENV_VARS,
        });
    }
    #[allow(private_interfaces)]
    fn attachers<C: Conduit>(out: &mut Vec<Attacher<C>>) {
        A::attachers::<C>(out);
        out.push(attach_one::<B, C>);
    }
}

/// What a layer's code may do with its endpoint while it holds its own state: inject
/// without waiting, reach the segments, its auxiliary slice, the conduit's native
/// operations and the other layers, and make events. It cannot poll or wait (see the
/// [module documentation](self)), and it never hands out `&mut` the conduit's
/// endpoint (which safe code could swap for another client's, whose limits and
/// segments the core did not check against).
pub struct Cx<'a, C: Conduit> {
    pub(crate) core: &'a mut Core<C>,
    pub(crate) before: &'a mut [LayerSlot<C>],
    pub(crate) after: &'a mut [LayerSlot<C>],
    pub(crate) place: Place,
}

impl<C: Conduit> std::fmt::Debug for Cx<'_, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cx")
            .field("endpoint", &self.core.me)
            .field("layer", &self.place.name)
            .finish()
    }
}

impl<'a, C: Conduit> Cx<'a, C> {
    /// This endpoint's job-wide address.
    pub fn addr(&self) -> EpAddr {
        self.core.me
    }
    /// This rank.
    pub fn rank(&self) -> Rank {
        self.core.me.rank
    }
    /// Ranks in the job.
    pub fn size(&self) -> u32 {
        self.core.shared.size
    }
    /// The agreed job layout.
    pub fn layout(&self) -> &JobLayout {
        &self.core.shared.layout
    }
    /// The client's configuration (the layer's settings are read from it).
    pub fn config(&self) -> &Config {
        &self.core.shared.config
    }
    /// The endpoint's wait policy.
    pub fn wait_policy(&self) -> WaitPolicy {
        self.core.policy
    }
    /// The endpoint's primordial team.
    pub fn world(&self) -> &Team {
        &self.core.world
    }
    /// The conduit's capabilities.
    pub fn capabilities(&self) -> Capabilities {
        self.core.cep.capabilities()
    }
    /// The conduit's name ([`Conduit::name`], as `Client::conduit_name`: for a
    /// conduit chosen at run time, the chosen one's).
    pub fn conduit_name(&self) -> &'static str {
        self.core._conduit.name()
    }
    /// The conduit endpoint underneath, shared: its queries ([`ConduitEp::limits`],
    /// [`ConduitEp::local_segment`], [`ConduitEp::has_incoming`], ...) and whatever the
    /// conduit offers through `&self`. The operations that need `&mut` are the
    /// methods of `Cx` below; injection takes only messages the core validated
    /// ([`try_request`](Self::try_request)).
    pub fn conduit(&self) -> &C::Ep {
        &self.core.cep
    }
    /// The conduit endpoint underneath, mutably: for tests of the conduit contract
    /// itself (the conformance suite's probe calls [`ConduitEp::block`]). A layer
    /// uses the methods of `Cx` instead.
    ///
    /// # Safety
    /// The caller does not move the endpoint out of the reference nor replace it
    /// (`std::mem::swap`, `replace`, `take`): the core checked its limits, segments
    /// and neighbourhood against the job layout once, for this value.
    pub unsafe fn conduit_mut(&mut self) -> &mut C::Ep {
        &mut self.core.cep
    }
    /// [`ConduitEp::native_put`] of the conduit underneath.
    ///
    /// # Safety
    /// As [`ConduitEp::native_put`]: `src..src+to.len` stays valid and unmodified until
    /// completion, and `to` was checked to lie in `to.dst`'s segment.
    ///
    /// # Errors
    /// The conduit's.
    #[inline]
    pub unsafe fn native_put(&mut self, to: SegRange, src: *const u8) -> NativeResult {
        // SAFETY: forwarded contract.
        unsafe { self.core.cep.native_put(to, src) }
    }
    /// [`ConduitEp::native_put_relaxed`] of the conduit underneath.
    ///
    /// # Safety
    /// As [`native_put`](Self::native_put).
    ///
    /// # Errors
    /// The conduit's.
    #[inline]
    pub unsafe fn native_put_relaxed(&mut self, to: SegRange, src: *const u8) -> NativeResult {
        // SAFETY: forwarded contract.
        unsafe { self.core.cep.native_put_relaxed(to, src) }
    }
    /// [`ConduitEp::native_get`] of the conduit underneath.
    ///
    /// # Safety
    /// As [`ConduitEp::native_get`]: `out..out+from.len` stays valid, and is not read
    /// or written by anyone else, until completion; `from` was checked to lie in
    /// `from.dst`'s segment.
    ///
    /// # Errors
    /// The conduit's.
    #[inline]
    pub unsafe fn native_get(&mut self, from: SegRange, out: *mut u8) -> NativeResult {
        // SAFETY: forwarded contract.
        unsafe { self.core.cep.native_get(from, out) }
    }
    /// [`ConduitEp::native_atomic`] of the conduit underneath.
    ///
    /// # Safety
    /// As [`ConduitEp::native_atomic`]: `result` is valid for a write of a `u64`, and
    /// not accessed by anyone else, until completion (null when `op.fetch` is false);
    /// the word was checked to lie, aligned, in `op.dst`'s segment.
    ///
    /// # Errors
    /// The conduit's.
    #[inline]
    pub unsafe fn native_atomic(&mut self, op: &NativeAtomic, result: *mut u64) -> NativeResult {
        // SAFETY: forwarded contract.
        unsafe { self.core.cep.native_atomic(op, result) }
    }
    /// [`ConduitEp::native_flush`] of the conduit underneath.
    ///
    /// # Errors
    /// The conduit's.
    #[inline]
    pub fn native_flush(&mut self, dst: EpAddr) -> Result<Native, ConduitError> {
        self.core.cep.native_flush(dst)
    }
    /// [`ConduitEp::native_test`] of the conduit underneath.
    #[inline]
    pub fn native_test(&mut self, ticket: u64) -> bool {
        self.core.cep.native_test(ticket)
    }
    /// Handler `local` of this layer's block (`0..HANDLERS`).
    ///
    /// # Panics
    /// If `local` is outside the layer's block.
    pub fn handler(&self, local: u8) -> HandlerId {
        assert!(
            local < self.place.count,
            "layer {} has {} handlers, asked for {local}",
            self.place.name,
            self.place.count
        );
        HandlerId::new(self.place.base + local)
    }
    /// Largest Medium payload to `dst`.
    pub fn max_medium(&self, dst: EpAddr) -> usize {
        self.core.max_medium(dst)
    }
    /// Largest Long payload to `dst` (also bounded by its segment).
    pub fn max_long(&self, dst: EpAddr) -> usize {
        self.core.max_long(dst)
    }
    /// Largest number of AM arguments.
    pub fn max_args(&self) -> usize {
        self.core.max_args()
    }
    /// Injects a request to one of gex's layers' handlers (validated as any request)
    /// without waiting: `WouldBlock` when resources are lacking (nothing sent). The
    /// conduit sees a request that may wait (`imm` false: the layer retries after
    /// `WouldBlock`), so a conduit that is still looking a peer up answers
    /// back-pressure rather than a stale refusal (for endpoints made at run time that
    /// a conduit discovers by asking their rank: a layer's operation to a peer
    /// endpoint made after an earlier "not created yet" goes through once the program
    /// synchronised with its owner).
    ///
    /// # Errors
    /// As [`Endpoint::request`](crate::Endpoint::request).
    pub fn try_request(
        &mut self,
        dst: EpAddr,
        h: HandlerId,
        category: Category,
        args: &[u32],
        payload: &[u8],
        offset: usize,
    ) -> Result<Injected, AmError> {
        let body = crate::Body::of(category, args, payload, offset);
        self.core.try_inject(
            dst,
            h.index(),
            body,
            crate::endpoint::FIRST_LAYER_HANDLER,
            false,
        )
    }
    /// Checks a request of the program's (to a client handler) as
    /// [`Endpoint::request`](crate::Endpoint::request) would, without sending it: for
    /// a layer that carries the program's message inside its own and must refuse a
    /// bad one with the program's own error before it builds the carrier.
    ///
    /// # Errors
    /// As [`Endpoint::request`](crate::Endpoint::request) but
    /// [`AmError::Conduit`]; nothing is sent either way.
    pub fn check_client_request(
        &self,
        dst: EpAddr,
        h: HandlerId,
        body: &crate::Body<'_>,
    ) -> Result<(), AmError> {
        self.core.check_client_request(dst, h.index(), body)
    }
    /// This endpoint's segment.
    pub fn segment(&self) -> Segment<'_> {
        self.core.segment()
    }
    /// The local mapping of `dst`'s segment (base, length) when the conduit shares
    /// memory with it (this endpoint included).
    pub fn peer_segment(&self, dst: EpAddr) -> Option<(NonNull<u8>, usize)> {
        if dst == self.core.me {
            return Some(self.core.cep.local_segment());
        }
        self.core.cep.peer_segment(dst)
    }
    /// Whether `dst` is open ([`ConduitEp::peer_open`]): `Ok` for this endpoint, the
    /// endpoints made at init and the endpoints made at run time that are open now;
    /// [`ConduitError::NoEndpoint`] naming the state of one not created yet or closed.
    /// `dst` must be within its rank's capacity ([`endpoint_capacity`](Self::endpoint_capacity)).
    ///
    /// # Errors
    /// [`ConduitError::NoEndpoint`] if `dst` is not open.
    #[inline]
    pub fn peer_open(&self, dst: EpAddr) -> Result<(), ConduitError> {
        if dst == self.core.me {
            return Ok(());
        }
        self.core.cep.peer_open(dst)
    }
    /// Endpoint indices of `rank` that may be addressed (as
    /// [`Client::endpoint_capacity`](crate::Client::endpoint_capacity)): its capacity
    /// when the conduit makes endpoints at run time, the endpoints it made at init
    /// otherwise; `None` for a rank outside the job.
    #[inline]
    pub fn endpoint_capacity(&self, rank: Rank) -> Option<u16> {
        self.core.shared.cap.get(rank as usize).copied()
    }
    /// This layer's slice of `dst`'s auxiliary area ([`Layer::AUX_BYTES`] bytes,
    /// 64-byte aligned, zero-filled at open) when the conduit maps it (`dst` shares
    /// memory with this rank; this endpoint included). Accesses from several
    /// processes must be atomic.
    pub fn aux(&self, dst: EpAddr) -> Option<NonNull<u8>> {
        if self.place.aux_len == 0 {
            return None;
        }
        let base = self.core.cep.aux(dst)?;
        // SAFETY: the conduit's area is at least the sum of every layer's slice
        // (`OpenParams::aux_len`), of which this one starts at `aux_off`.
        #[allow(unsafe_code)]
        Some(unsafe { base.add(self.place.aux_off) })
    }
    /// Length of this layer's auxiliary slice.
    pub fn aux_len(&self) -> usize {
        self.place.aux_len
    }
    /// Makes a blocked waiter of neighbour `dst` return (after writing a flag it waits
    /// for in an auxiliary area).
    pub fn wake(&self, dst: EpAddr) {
        self.core.cep.wake(dst)
    }
    /// Asks for this layer's progress hook to run on the next polls.
    pub fn set_busy(&mut self) {
        self.core.busy |= 1 << self.place.index;
    }
    /// Another layer's state (`None` if it is not attached, or is the one running).
    pub fn layer<L: Layer>(&self) -> Option<&L> {
        self.before
            .iter()
            .chain(self.after.iter())
            .find(|s| s.type_id == TypeId::of::<L>())
            .and_then(|s| s.state.any().downcast_ref::<L>())
    }
    /// As [`layer`](Self::layer), mutable, pinned (see "Pinned states" in the
    /// [module documentation](self)).
    pub fn layer_mut<L: Layer>(&mut self) -> Option<Pin<&mut L>> {
        self.before
            .iter_mut()
            .chain(self.after.iter_mut())
            .find(|s| s.type_id == TypeId::of::<L>())
            .map(LayerSlot::pinned::<L>)
    }
    /// Runs `f` with another layer's state (pinned) and a context in which that layer
    /// is the one running (so it can inject to its own handlers and make events).
    /// `None` if `L` is not attached or is the one running.
    pub fn with_other<L: Layer, R>(
        &mut self,
        f: impl FnOnce(Pin<&mut L>, &mut Cx<'_, C>) -> R,
    ) -> Option<R> {
        // Find L among before/after, then split around it.
        let (list, i) = match self
            .before
            .iter()
            .position(|s| s.type_id == TypeId::of::<L>())
        {
            Some(i) => (&mut *self.before, i),
            None => {
                let i = self
                    .after
                    .iter()
                    .position(|s| s.type_id == TypeId::of::<L>())?;
                (&mut *self.after, i)
            }
        };
        let (b, rest) = list.split_at_mut(i);
        let (slot, a) = rest.split_first_mut()?;
        let place = slot.place;
        let mut cx = Cx {
            core: self.core,
            before: b,
            after: a,
            place,
        };
        Some(f(slot.pinned::<L>(), &mut cx))
    }
    /// Takes the outcome of `ev` if its operation has completed, without waiting; gives
    /// the event back while it has not. For a layer that keeps another layer's event in
    /// its state (a collective's rendezvous get) and finishes it in its progress hook.
    ///
    /// # Errors
    /// `Err(ev)` while the operation runs. Inside `Ok`: the operation's error, or
    /// [`EventError::WrongEndpoint`](crate::EventError::WrongEndpoint) (as `E`) if `ev`
    /// was started on another endpoint.
    pub fn try_take<T: Send + 'static, E: EventErr>(
        &mut self,
        ev: Event<T, E>,
    ) -> Result<Result<T, E>, Event<T, E>> {
        if let Err(e) = self.core.check_bound(&ev) {
            return Ok(Err(E::from(e)));
        }
        if !ev.is_done() {
            return Err(ev);
        }
        let pool = &mut self.core.events;
        Ok(ev.take(&mut |w| pool.recycle(w)))
    }
    /// A complete event with result `r`.
    pub fn ready<T: Send + 'static, E: EventErr>(&self, r: Result<T, E>) -> Event<T, E> {
        Event::ready(self.core.me, self.core.uid, r)
    }
    /// The output in mode `M` of an operation that completed during the call with
    /// output `v`: `v` ([`Blocking`](crate::Blocking)), a complete event
    /// ([`Nb`](crate::Nb)), nothing ([`Nbi`](crate::Nbi)). The blocking form builds no
    /// event at all, so a layer's fast path (a copy through shared memory) costs no
    /// more than the copy.
    #[inline(always)]
    pub fn done<T: Send + 'static, E: EventErr, M: crate::event::Mode>(
        &self,
        v: T,
    ) -> M::Out<T, E> {
        M::ready(self.core.me, self.core.uid, v)
    }
    /// Tracks `ev` under implicit-event `tag` (a scope's, from
    /// [`Layer::end_scope`]): the endpoint's waits for `tag` wait for it too. As
    /// [`layer::track_implicit`](track_implicit).
    pub fn track_implicit<T: Send + 'static, E: EventErr>(&mut self, tag: u32, ev: Event<T, E>) {
        self.core.track(tag, ev);
    }
    /// A pending event and its completer. `hold` is a buffer the operation writes,
    /// kept alive by the event (and past it, if the event is dropped early); `finish`
    /// makes the output from the completion [`Data`](crate::event::Data) and `hold`.
    pub fn pending<T: Send + 'static, E: EventErr>(
        &mut self,
        hold: Option<T>,
        finish: Finish<T>,
    ) -> (Event<T, E>, OpCompleter) {
        self.core.pending(hold, finish)
    }
}

/// The context of [`Layer::attach`]: a [`Cx`] for the layer `L` being attached. Only the
/// core makes one, while attaching `L`, so no code can build a second state of a
/// layer (a state bound to the endpoint's memory that the endpoint does not own).
pub struct Attach<'a, C: Conduit, L> {
    cx: Cx<'a, C>,
    _layer: PhantomData<fn() -> L>,
}

impl<C: Conduit, L> std::fmt::Debug for Attach<'_, C, L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Attach").field(&self.cx).finish()
    }
}

impl<'a, C: Conduit, L> std::ops::Deref for Attach<'a, C, L> {
    type Target = Cx<'a, C>;
    fn deref(&self) -> &Cx<'a, C> {
        &self.cx
    }
}

impl<'a, C: Conduit, L> std::ops::DerefMut for Attach<'a, C, L> {
    fn deref_mut(&mut self) -> &mut Cx<'a, C> {
        &mut self.cx
    }
}

/// How long an unwinding wait ([`finish`] of a blocking operation, the end of a
/// [scope](Endpoint::scope)) waits for a transfer that still uses a borrowed buffer
/// before it aborts the process (a panic other than a handler's left the transfer in
/// flight; the buffer cannot be handed back while it may still be written).
pub const UNWIND_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Runs `f` with layer `L`'s state alone (pinned), borrowed from `ep` for the call;
/// `None` (and `f` not run) if `L` is not attached: the form for a layer's fast paths
/// that need nothing but their own state. No handler or progress hook runs meanwhile:
/// with a progress thread, `f` runs under the endpoint's lock word. `f` cannot wait
/// (it gets no endpoint).
///
/// A closure rather than a guard so that the compiler keeps the two ways to the state
/// apart (the endpoint's cache of layer addresses, inlined; the locked search) and
/// nothing of the slow way stays live across `f`: the RMA layer's put and get run
/// their bounds check and copy in `f`. A closure whose captures take at most four
/// words (the RMA layer's) is inlined into both ways: passed to an out-of-line
/// function, its captures would be stored to memory on the cached way too, before
/// the branch. A larger one (the collectives' steps) is called from an out-of-line
/// function on the locked way, so that it is inlined once (docs/performance.md).
///
/// ```
/// use gex_core::layer::{self, Layer};
/// # use gex_core::{boot::Singleton, loopback::Loopback, ClientBuilder, InitError};
/// #[derive(Debug, Default)]
/// struct Mine { hits: u64 }
/// # impl Layer for Mine {
/// #     const NAME: &'static str = "mine";
/// #     fn attach<C: gex_core::spi::Conduit>(_: &mut layer::Attach<'_, C, Self>) -> Result<Self, InitError> {
/// #         Ok(Mine::default())
/// #     }
/// # }
/// # let client = ClientBuilder::new().layer::<Mine>().init::<Loopback>(Box::new(Singleton::new()))?;
/// # let mut ep = client.endpoint(0)?;
/// let hits = layer::state::<Mine, _, _>(&mut ep, |mut m| {
///     m.hits += 1; // `Mine` is `Unpin`: `Pin<&mut Mine>` derefs mutably
///     m.hits
/// });
/// assert_eq!(hits, Some(1));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[inline(always)]
pub fn state<L: Layer, C: Conduit, R>(
    ep: &mut Endpoint<C>,
    f: impl FnOnce(Pin<&mut L>) -> R,
) -> Option<R> {
    if let Some(l) = state_cached::<L, C>(ep) {
        return Some(f(l));
    }
    if std::mem::size_of_val(&f) <= INLINE_BOTH_MAX {
        let mut g = ep.inner();
        let a = slot_addr::<L, C>(&mut g)?;
        // SAFETY: as in the cached way for `a` (found by its `type_id`); `g`, alive
        // until `f` returns or unwinds, holds the lock word with a progress thread,
        // which keeps the thread away from the state, and is not used while `l` lives.
        let l = unsafe { Pin::new_unchecked(&mut *a.as_ptr().cast::<L>()) };
        let r = f(l);
        drop(g);
        return Some(r);
    }
    state_locked(ep, f)
}

/// Layer `L`'s state through the endpoint's cache of layer addresses alone (the way
/// [`state`] tries first): `None` where the state is not cached — an endpoint with a
/// progress thread (whose cache stays empty), or a layer past the cached ones — and
/// [`state`] (or [`with`]) must take the lock word. For a fast path with a general way
/// behind it: no closure, so the compiler inlines the caller's work once and builds
/// nothing for the other way (an atomic whose request is larger than [`state`]
/// inlines into both ways: passed to the out-of-line way, its captures were stored to
/// memory on every call; docs/performance.md, issue 29's A/B). The state is
/// borrowed from `ep`, mutably, for as long as the result lives.
///
/// ```
/// use gex_core::layer::{self, Layer};
/// # use gex_core::{boot::Singleton, loopback::Loopback, ClientBuilder, InitError};
/// #[derive(Debug, Default)]
/// struct Mine { hits: u64 }
/// # impl Layer for Mine {
/// #     const NAME: &'static str = "mine";
/// #     fn attach<C: gex_core::spi::Conduit>(_: &mut layer::Attach<'_, C, Self>) -> Result<Self, InitError> {
/// #         Ok(Mine::default())
/// #     }
/// # }
/// # let client = ClientBuilder::new().layer::<Mine>().init::<Loopback>(Box::new(Singleton::new()))?;
/// # let mut ep = client.endpoint(0)?;
/// // No progress thread: the state is cached.
/// let mut m = layer::state_cached::<Mine, _>(&mut ep).expect("cached");
/// m.hits += 1;
/// assert_eq!(layer::state::<Mine, _, _>(&mut ep, |m| m.hits), Some(1));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[inline(always)]
pub fn state_cached<L: Layer, C: Conduit>(ep: &mut Endpoint<C>) -> Option<Pin<&mut L>> {
    let want = TypeId::of::<L>();
    let a = ep.h().fast.iter().find(|f| f.0 == want).map(|f| f.1)?;
    // SAFETY: `a` is the address of the state of a slot whose `type_id` is `L`'s, made
    // from an `L` (`attach_one`); its `LayerBox` lives as long as the endpoint, never
    // moves the state, and every access derives from the same pointer. The cache is
    // filled only without a progress thread, where this handle, borrowed mutably for
    // as long as the result lives, is the only way to the state (module
    // `crate::endpoint`).
    Some(unsafe { Pin::new_unchecked(&mut *a.as_ptr().cast::<L>()) })
}

/// The largest closure (its captures, in bytes) that [`state`] inlines into both of
/// its ways.
const INLINE_BOTH_MAX: usize = 4 * std::mem::size_of::<usize>();

/// The address of `L`'s state, by a search of the slots.
#[cold]
#[inline(never)]
fn slot_addr<L: Layer, C: Conduit>(g: &mut crate::endpoint::Guard<'_, C>) -> Option<NonNull<u8>> {
    g.layers
        .iter()
        .find(|s| s.type_id == TypeId::of::<L>())
        .map(|s| s.state.addr())
}

/// [`state`] by a search of the slots under the lock word (a layer past the cached
/// ones, or an endpoint with a progress thread), for a closure larger than
/// [`INLINE_BOTH_MAX`]; out of line, so that `f` is inlined only into the cached way.
#[cold]
#[inline(never)]
fn state_locked<L: Layer, C: Conduit, R>(
    ep: &mut Endpoint<C>,
    f: impl FnOnce(Pin<&mut L>) -> R,
) -> Option<R> {
    let mut g = ep.inner();
    let a = slot_addr::<L, C>(&mut g)?;
    // SAFETY: as in `state`; `g`, alive until `f` returns (or unwinds), holds the lock
    // word with a progress thread, which keeps the thread away from the state, and is
    // not used while `l` lives.
    let l = unsafe { Pin::new_unchecked(&mut *a.as_ptr().cast::<L>()) };
    let r = f(l);
    drop(g);
    Some(r)
}

/// Runs `f` with layer `L`'s state (pinned) and a [`Cx`] in which `L` is the running
/// layer; `None` if `L` is not attached. No other layer's handler or hook runs
/// meanwhile; `f` cannot wait (a [`Cx`] cannot poll).
#[inline]
pub fn with<L: Layer, C: Conduit, R>(
    ep: &mut Endpoint<C>,
    f: impl FnOnce(Pin<&mut L>, &mut Cx<'_, C>) -> R,
) -> Option<R> {
    ep.inner().with_layer(f)
}

/// True if layer `L` is attached to `ep`.
pub fn is_attached<L: Layer, C: Conduit>(ep: &Endpoint<C>) -> bool {
    ep.has_layer::<L>()
}

/// Polls `ep` once (as [`Endpoint::poll`]) for a layer's loop, keeping a handler's
/// panic for the call that ends the operation (see "Panics in handlers" in the
/// [module documentation](self)). Returns how many messages were handled.
#[inline]
pub fn poll<C: Conduit>(ep: &mut Endpoint<C>) -> usize {
    ep.inner().poll()
}

/// One step of waiting for send resources, for an operation the conduit refused for
/// back-pressure (a `try_*` call or [`Cx::try_request`] that returned
/// [`Injected::WouldBlock`]): polls, then spins or yields
/// under the wait policy, and prints the report on a stall or a report signal like
/// every wait. Keep one [`Retry`] per operation being retried. A handler's panic is
/// kept for the call that ends the operation.
///
/// ```
/// # use gex_core::{loopback::Loopback, boot::Singleton, Body, ClientBuilder, EpAddr, Injected, layer::{self, Retry}};
/// # let client = ClientBuilder::new().segment_size(4096).init::<Loopback>(Box::new(Singleton::new()))?;
/// # let mut ep = client.endpoint(0)?;
/// # let h = ep.register(|_t: &mut gex_core::Token<'_>, _am: gex_core::Am<'_>| {})?;
/// let mut r = Retry::default();
/// while ep.try_request(EpAddr::rank(0), h, Body::short(&[]))? == Injected::WouldBlock {
///     layer::retry(&mut ep, &mut r);
/// }
/// # ep.poll();
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn retry<C: Conduit>(ep: &mut Endpoint<C>, r: &mut Retry) {
    ep.inner().retry(r);
}

pub use crate::endpoint::Retry;

/// Polls `ep` until `cond` holds of layer `L`'s state (false at once if `L` is not
/// attached). A handler's panic is raised once `cond` holds.
pub fn wait_until<L: Layer, C: Conduit>(
    ep: &mut Endpoint<C>,
    mut cond: impl FnMut(&L) -> bool,
) -> bool {
    if !ep.has_layer::<L>() {
        return false;
    }
    let mut g = ep.inner();
    g.wait_for(None, |inner| {
        inner.with_layer::<L, _>(|l, _| cond(&l)).unwrap_or(true)
    });
    g.rethrow();
    true
}

/// The unwinding wait of a layer's operation that is cancelled while a panic unwinds
/// through it before it has an event to wait on (a panic in [`retry`], or in a step,
/// while the operation is still being issued): polls `ep` until `done` holds of `L`'s
/// state, as the unwinding waits of [`finish`] and of a [scope](Endpoint::scope) do,
/// and aborts the process if it does not within [`UNWIND_WAIT`] (a caller's buffer the
/// network may still write or read cannot be handed back). For a guard's `drop`: does
/// nothing when no panic is unwinding, or when `L` is not attached. A handler's panic
/// caught meanwhile is dropped (the panic that is unwinding wins); a panic while it
/// polls is a panic during unwinding, which aborts.
///
/// ```
/// use gex_core::layer::{self, Layer};
/// # use gex_core::{boot::Singleton, loopback::Loopback, ClientBuilder, InitError};
/// # #[derive(Debug, Default)]
/// # struct Mine { in_flight: u32 }
/// # impl Layer for Mine {
/// #     const NAME: &'static str = "mine";
/// #     fn attach<C: gex_core::spi::Conduit>(_: &mut layer::Attach<'_, C, Self>) -> Result<Self, InitError> {
/// #         Ok(Mine::default())
/// #     }
/// # }
/// # let client = ClientBuilder::new().layer::<Mine>().init::<Loopback>(Box::new(Singleton::new()))?;
/// # let mut ep = client.endpoint(0)?;
/// // In the drop of an operation's guard (a no-op unless a panic unwinds):
/// layer::wait_unwinding::<Mine, _>(&mut ep, |m| m.in_flight == 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[cold]
#[inline(never)]
pub fn wait_unwinding<L: Layer, C: Conduit>(
    ep: &mut Endpoint<C>,
    mut done: impl FnMut(&L) -> bool,
) {
    if !std::thread::panicking() || !ep.has_layer::<L>() {
        return;
    }
    let mut g = ep.inner();
    g.wait_on_unwind(&mut |inner| {
        inner
            .layers
            .iter()
            .find(|s| s.type_id == TypeId::of::<L>())
            .and_then(|s| s.state.any().downcast_ref::<L>())
            .is_none_or(&mut done)
    });
}

/// Disposes of `ev` as mode `M` asks, at the end of a layer's operation: waits for it
/// ([`Blocking`](crate::Blocking): on every path, see "Panics in handlers" in the
/// [module documentation](self)), returns it ([`Nb`](crate::Nb)) or tracks it under
/// implicit-event `tag` ([`Nbi`](crate::Nbi)).
///
/// # Errors
/// In blocking mode, the operation's error.
#[inline]
pub fn finish<T: Send + 'static, E: EventErr, M: crate::event::Mode, C: Conduit>(
    ep: &mut Endpoint<C>,
    ev: Event<T, E>,
    tag: u32,
) -> Result<M::Out<T, E>, E> {
    M::finish(ep, ev, tag)
}

/// The output, in mode `M`, of an operation that completed during the call with
/// output `v` (as [`Cx::done`], for a fast path that ran under [`state`]).
#[inline(always)]
pub fn done<T: Send + 'static, E: EventErr, M: crate::event::Mode, C: Conduit>(
    ep: &Endpoint<C>,
    v: T,
) -> M::Out<T, E> {
    ep.done::<T, E, M>(v)
}

/// Tracks `ev` as an implicit event under `tag` (what mode [`Nbi`](crate::Nbi) does):
/// [`Endpoint::sync_implicit`] of `tag` waits for it (an event of another endpoint is
/// recorded as failed: this endpoint's progress cannot complete it).
pub fn track_implicit<T: Send + 'static, E: EventErr, C: Conduit>(
    ep: &mut Endpoint<C>,
    tag: u32,
    ev: Event<T, E>,
) {
    ep.inner().track(tag, ev);
}
