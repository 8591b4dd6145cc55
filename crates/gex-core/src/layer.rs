//! The layer contract: how an upper layer (one-sided RMA, collectives, later tagged
//! messages and overlap) composes into an endpoint.
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
//! | the conduit, the segment, the job layout, other layers, events | [`Cx`] |
//!
//! There is no `Arc<Mutex<_>>` between a layer's handlers and its operations: both
//! get `&mut` the one state the endpoint owns. The price is a rule the types enforce:
//! a layer's code never waits. Handlers, [`Layer::progress`] and the closures passed to
//! [`Endpoint::with_layer`](crate::Endpoint::with_layer) get a [`Cx`], which can inject
//! only without waiting ([`Cx::try_request`]) and cannot poll; operations that must wait
//! are written as functions of `&mut Endpoint` that take the layer's state briefly
//! (with `with_layer`), then [`poll`](crate::Endpoint::poll) or
//! [`wait`](crate::Endpoint::wait) with nothing borrowed, so every layer's handlers can
//! run meanwhile.
//!
//! ```
//! use gex_core::layer::{Cx, Layer, Progress};
//! use gex_core::spi::Conduit;
//! use gex_core::{boot::Singleton, loopback::Loopback, Am, Category, ClientBuilder, HandlerId, InitError, Token};
//!
//! /// Counts pings; replies to each with a pong.
//! #[derive(Debug)]
//! struct Pinger { ping: HandlerId, pong: HandlerId, pongs: u32 }
//!
//! impl Layer for Pinger {
//!     const NAME: &'static str = "pinger";
//!     const HANDLERS: u8 = 2;
//!     fn attach<C: Conduit>(cx: &mut Cx<'_, C>) -> Result<Self, InitError> {
//!         Ok(Pinger { ping: cx.handler(0), pong: cx.handler(1), pongs: 0 })
//!     }
//!     fn handle(&mut self, h: u8, t: &mut Token<'_>, _am: Am<'_>) {
//!         match h {
//!             0 => t.reply_short(self.pong, &[]).expect("reply"),
//!             _ => self.pongs += 1,
//!         }
//!     }
//! }
//!
//! let client = ClientBuilder::new().layer::<Pinger>().segment_size(4096)
//!     .init::<Loopback>(Box::new(Singleton::new()))?;
//! let mut ep = client.endpoint(0)?;
//! let me = ep.addr();
//! ep.with_layer::<Pinger, _>(|p, cx| cx.try_request(me, p.ping, Category::Short, &[], &[], 0)).unwrap()?;
//! ep.wait_until_layer::<Pinger>(|p| p.pongs == 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::config::{Config, EnvVar};
use crate::endpoint::{Core, check_request};
use crate::error::{AmError, InitError};
use crate::event::{Event, EventErr, Finish, OpCompleter};
use crate::spi::{Capabilities, Conduit, ConduitEp, JobLayout, OutMsg};
use crate::team::Team;
use crate::types::{Category, EpAddr, HandlerId, Injected, Kind, Rank};
use crate::{Am, Segment, Token};
use gex_sync::wait::WaitPolicy;
use std::any::{Any, TypeId};
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
    /// reachable through `cx`).
    ///
    /// # Errors
    /// [`InitError`] (typically [`InitError::Layer`] or [`InitError::Config`]).
    fn attach<C: Conduit>(cx: &mut Cx<'_, C>) -> Result<Self, InitError>;
    /// Runs handler `h` (`0..HANDLERS`) of the layer for an incoming message. Must not
    /// block; may reply once through `t`.
    fn handle(&mut self, h: u8, t: &mut Token<'_>, am: Am<'_>) {
        let _ = (h, t, am);
    }
    /// Runs when a [`Scope`](crate::Scope) ends (and at
    /// [`Scope::sync`](crate::Scope::sync)), before the endpoint waits for the events
    /// tracked under the scope's `tag`. A layer whose scoped operations complete
    /// locally before they are complete at their targets (relaxed puts, flushed
    /// together) tracks here, with [`Cx::track_implicit`], an event that completes when
    /// they are, and starts what completes it (its progress hook finishes it). Must not
    /// block. The default does nothing.
    fn end_scope<C: Conduit>(&mut self, cx: &mut Cx<'_, C>, tag: u32) {
        let _ = (cx, tag);
    }
    /// Advances the layer's work in flight; runs on every poll of the endpoint while
    /// the layer is busy (see [`Progress`]). Must not block.
    fn progress<C: Conduit>(&mut self, cx: &mut Cx<'_, C>) -> Progress {
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
    fn handle(&mut self, h: u8, t: &mut Token<'_>, am: Am<'_>);
    fn describe(&self) -> String;
    fn any_mut(&mut self) -> &mut dyn Any;
    fn any(&self) -> &dyn Any;
}

impl<L: Layer> ErasedLayer for L {
    #[inline]
    fn handle(&mut self, h: u8, t: &mut Token<'_>, am: Am<'_>) {
        Layer::handle(self, h, t, am)
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

/// The progress hook of a layer, monomorphised for its conduit.
pub(crate) type ProgressFn<C> = fn(&mut dyn ErasedLayer, &mut Cx<'_, C>) -> Progress;

/// A layer's [`Layer::end_scope`], monomorphised for the endpoint's conduit.
pub(crate) type EndScopeFn<C> = fn(&mut dyn ErasedLayer, &mut Cx<'_, C>, u32);

fn end_scope_of<L: Layer, C: Conduit>(s: &mut dyn ErasedLayer, cx: &mut Cx<'_, C>, tag: u32) {
    if let Some(l) = s.any_mut().downcast_mut::<L>() {
        l.end_scope(cx, tag);
    }
}

fn progress_of<L: Layer, C: Conduit>(s: &mut dyn ErasedLayer, cx: &mut Cx<'_, C>) -> Progress {
    match s.any_mut().downcast_mut::<L>() {
        Some(l) => l.progress(cx),
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
/// that the endpoint handle may keep the state's address
/// ([`Endpoint::layer_state_mut`](crate::Endpoint::layer_state_mut)) and reach it
/// later without a search: every access, from here or from the handle, derives from
/// the one pointer `Box::into_raw` gave, and none invalidates another's (a `Box`
/// would assert uniqueness each time it is used).
pub(crate) struct LayerBox(std::ptr::NonNull<dyn ErasedLayer>);

impl LayerBox {
    pub(crate) fn new<L: Layer>(l: L) -> Self {
        let b: Box<dyn ErasedLayer> = Box::new(l);
        LayerBox(std::ptr::NonNull::from(Box::leak(b)))
    }
    /// The state's address (stable for the life of the box).
    pub(crate) fn addr(&self) -> usize {
        self.0.as_ptr().cast::<u8>() as usize
    }
}

#[allow(unsafe_code)]
mod layer_box {
    use super::{ErasedLayer, LayerBox};
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
    let mut cx = Cx {
        core,
        before: &mut layers[..],
        after: &mut [],
        place,
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
/// `()`, `((), A)`, `(((), A), B)`, ...
pub trait LayerSet: Send + 'static {
    /// The layers, in attach order.
    fn infos(out: &mut Vec<LayerInfo>);
    #[doc(hidden)]
    #[allow(private_interfaces)]
    fn attachers<C: Conduit>(out: &mut Vec<Attacher<C>>);
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
/// without waiting, reach the conduit, the segments, its auxiliary slice and the other
/// layers, and make events. It cannot poll or wait (see the
/// [module documentation](self)).
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
    /// The conduit endpoint underneath. Every safe method of the conduit contract is
    /// sound for any argument; injection takes only messages the core validated.
    pub fn conduit(&mut self) -> &mut C::Ep {
        &mut self.core.cep
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
    /// without waiting: `WouldBlock` when resources are lacking (nothing sent).
    ///
    /// # Errors
    /// As [`Endpoint::request_long`](crate::Endpoint::request_long).
    pub fn try_request(
        &mut self,
        dst: EpAddr,
        h: HandlerId,
        category: Category,
        args: &[u32],
        payload: &[u8],
        offset: usize,
    ) -> Result<Injected, AmError> {
        let c = &mut *self.core;
        check_request(
            &c.shared,
            &c.owner,
            &c.limits,
            crate::endpoint::FIRST_LAYER_HANDLER,
            dst,
            category,
            h.index(),
            args,
            payload,
            offset,
        )?;
        let msg = OutMsg::new(
            dst,
            h.index(),
            Kind::Request,
            category,
            args,
            payload,
            offset,
        );
        let r = c.cep.inject(&msg, true)?;
        if r.is_sent() {
            c.stats.sent[dst.rank as usize] += 1;
        }
        Ok(r)
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
    /// As [`layer`](Self::layer), mutable.
    pub fn layer_mut<L: Layer>(&mut self) -> Option<&mut L> {
        self.before
            .iter_mut()
            .chain(self.after.iter_mut())
            .find(|s| s.type_id == TypeId::of::<L>())
            .and_then(|s| s.state.any_mut().downcast_mut::<L>())
    }
    /// Runs `f` with another layer's state and a context in which that layer is the
    /// one running (so it can inject to its own handlers and make events).
    pub fn with_other<L: Layer, R>(
        &mut self,
        f: impl FnOnce(&mut L, &mut Cx<'_, C>) -> R,
    ) -> Option<R> {
        let me_place = self.place;
        // Find L among before/after, then split around it.
        if let Some(i) = self
            .before
            .iter()
            .position(|s| s.type_id == TypeId::of::<L>())
        {
            let (b, rest) = self.before.split_at_mut(i);
            let (slot, a) = rest.split_first_mut()?;
            let l = slot.state.any_mut().downcast_mut::<L>()?;
            let _ = me_place;
            let mut cx = Cx {
                core: self.core,
                before: b,
                after: a,
                place: slot.place,
            };
            return Some(f(l, &mut cx));
        }
        let i = self
            .after
            .iter()
            .position(|s| s.type_id == TypeId::of::<L>())?;
        let (b, rest) = self.after.split_at_mut(i);
        let (slot, a) = rest.split_first_mut()?;
        let l = slot.state.any_mut().downcast_mut::<L>()?;
        let mut cx = Cx {
            core: self.core,
            before: b,
            after: a,
            place: slot.place,
        };
        Some(f(l, &mut cx))
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
    /// [`Endpoint::track_implicit`](crate::Endpoint::track_implicit).
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
