//! Endpoints: the one object a rank communicates through. An endpoint carries the
//! layers its client was built with, runs their handlers and progress hooks, and is
//! where every operation's event is waited on.
//!
//! Submodules: `am` (handlers, tokens, validation and AM injection), `dispatch`
//! (delivery of incoming messages to client, layer and core handlers), `progress`
//! (the one progress engine: poll, waiting under the wait policy, events, implicit
//! events, scopes), `segment` (the safe view of segment memory), `exchange` (the
//! setup-time all-gather over a team), `thread` (the optional progress thread).
//!
//! # Safety
//! An endpoint's state lives in an [`EpCell`]: an `UnsafeCell` behind an `Arc` that
//! only the endpoint handle and, when enabled, its progress thread hold. Access goes
//! through [`Endpoint::inner`], which returns a guard: without a progress thread the
//! handle is the only holder and `&mut self` makes the access exclusive; with one,
//! both sides take the cell's lock word (compare-and-swap with `Acquire`, released
//! with `Release`) before touching the state, so the state is never accessed from two
//! threads at once. The state is `Send` (every handler and layer is), so moving it
//! between the two threads under the lock is sound.
//!
//! A layer's state is reached (`LayerSlot::pinned`, from [`Inner::with_layer`] and
//! [`layer::state`](crate::layer::state)) as the type its slot's `type_id` names
//! without a second (virtual) `Any` check: slots are made only by `attach_one`, from
//! an `L` with `type_id == TypeId::of::<L>()`.
//!
//! Without a progress thread the handle caches the first layers' types and state
//! addresses (`Handle::fast`) for [`layer::state`](crate::layer::state), which hands
//! out the layer's state borrowed from `&mut Endpoint` without a search: the handle's
//! `&mut` is the only way to the state. With a progress thread the cache stays empty
//! and `layer::state` takes its slow path, whose result holds the lock word.
//!
//! [`Endpoint`] is a dynamically sized type: `#[repr(transparent)]` over
//! `[Handle<C>]`, always made as a box of one handle ([`open`]; an [`OwnedEndpoint`] is
//! that box), so [`Endpoint::h`] reads element 0 without a bounds check. Being
//! unsized, it cannot be moved out of a `&mut Endpoint` by safe code
//! (`std::mem::swap`/`replace`/`take` need `Sized`), which is what lets a [`Scope`]
//! hand out `&mut Endpoint` while it relies on the endpoint staying the one it began
//! on.
#![allow(unsafe_code)]

mod am;
mod dispatch;
mod exchange;
mod forward;
mod progress;
mod segment;
mod thread;

pub use am::{Am, Body, Handler, LongPayload, Token};
pub use progress::{Retry, Scope};
pub use segment::Segment;

use crate::client::Shared;
use crate::event::Outcome;
use crate::layer::{LayerSlot, Place};
use crate::spi::{Conduit, ConduitEp, Limits};
use crate::team::Team;
use crate::types::{EpAddr, EpIndex, HandlerIndex, Rank};
use gex_sync::atomic::{AtomicBool, AtomicU32, Ordering};
use gex_sync::slot::SlotPool;
use gex_sync::wait::WaitPolicy;
use std::cell::UnsafeCell;
use std::sync::Arc;

/// Handler indices `1..16` belong to gex-core itself.
pub(crate) const CORE_HANDLERS: HandlerIndex = 16;
/// First index of the layers' blocks.
pub(crate) const FIRST_LAYER_HANDLER: HandlerIndex = CORE_HANDLERS;
/// The core's all-gather ([`Endpoint::exchange`]).
pub(crate) const H_EXCHANGE: HandlerIndex = 1;

/// Layers the handle caches for [`crate::layer::state`].
const FAST_LAYERS: usize = 4;

/// `owner` entry of an index with no handler.
pub(crate) const OWN_NONE: u8 = 0xff;
/// `owner` entry of a client handler.
pub(crate) const OWN_CLIENT: u8 = 0xfe;
/// `owner` entry of a core handler.
pub(crate) const OWN_CORE: u8 = 0xfd;

/// Per-peer message counters of one endpoint, for diagnosing hangs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EpStats {
    /// Messages (requests and replies) sent to each rank.
    pub sent: Vec<u64>,
    /// Messages received from each rank.
    pub received: Vec<u64>,
    /// Negotiated-payload messages whose payload was built in the conduit's own
    /// buffer (in place: [`Capabilities::NP_IN_PLACE`](crate::Capabilities::NP_IN_PLACE)),
    /// not in the endpoint's bounce buffer.
    pub built_in_place: u64,
}

/// Everything of an endpoint except its layers.
pub(crate) struct Core<C: Conduit> {
    pub(crate) cep: C::Ep,
    /// Client handlers by index (`128..=255`).
    pub(crate) handlers: Vec<Option<Handler>>,
    /// Who owns each handler index (`OWN_*` or a layer's index).
    pub(crate) owner: [u8; 256],
    pub(crate) stats: EpStats,
    /// Limits for messages to each rank (the conduit's per-peer answer, cached).
    pub(crate) limits: Vec<Limits>,
    pub(crate) policy: WaitPolicy,
    /// Core sharing while injecting under spin-then-block (`GEX_SHARE_INTERVAL`).
    pub(crate) share: progress::Share,
    /// Yields between spinning and sleeping under spin-then-block (`GEX_YIELDS`).
    pub(crate) yields: u32,
    pub(crate) me: EpAddr,
    /// Identity of this endpoint value (events are bound to it).
    pub(crate) uid: u64,
    pub(crate) bounce: Vec<u8>,
    pub(crate) shared: Arc<Shared>,
    pub(crate) _conduit: Arc<C>,
    pub(crate) world: Team,
    /// The core's all-gather mailbox.
    pub(crate) xchg: exchange::Mailbox,
    /// Pending local completions of owned AM payloads: (conduit ticket, completer).
    pub(crate) lc: Vec<(u64, crate::event::OpCompleter)>,
    /// Implicit events (mode `Nbi`), by tag.
    pub(crate) implicit: Vec<progress::Implicit>,
    pub(crate) events: SlotPool<Outcome>,
    /// Layers whose progress hook runs on every poll (bit = layer index).
    pub(crate) busy: u64,
    /// A layer reported work that nothing announces: do not sleep.
    pub(crate) spinning: bool,
    /// Next client index `register` tries.
    pub(crate) next_client: u16,
    /// Tag of the next scope.
    pub(crate) next_scope_tag: u32,
    /// The report-signal generation this endpoint last answered.
    pub(crate) seen_reports: u64,
    /// The panic of a handler, caught where the handler ran (so that no conduit's
    /// receive loop unwinds) and raised again by the call that ran it once that call's
    /// operations on borrowed buffers are complete (module `progress`).
    pub(crate) panicked: Option<Box<dyn std::any::Any + Send>>,
}

/// The state of an endpoint: the core part and the layers.
///
/// The layers are declared (so dropped) before the core: a layer whose work may still
/// read the conduit's mappings when it is dropped (a helper thread of the layer that
/// copies from peers' segments) finishes it while the conduit endpoint still exists.
pub(crate) struct Inner<C: Conduit> {
    pub(crate) layers: Vec<LayerSlot<C>>,
    pub(crate) core: Core<C>,
}

impl<C: Conduit> Inner<C> {
    pub(crate) fn parts(&mut self) -> (&mut Core<C>, &mut Vec<LayerSlot<C>>) {
        (&mut self.core, &mut self.layers)
    }

    pub(crate) fn push_layer(&mut self, slot: LayerSlot<C>) {
        let p = slot.place;
        for i in p.base..p.base + p.count {
            self.core.owner[i as usize] = p.index as u8;
        }
        self.layers.push(slot);
    }
}

/// The shared home of an endpoint's state (see the module's `# Safety`).
pub(crate) struct EpCell<C: Conduit> {
    /// 0: free; 1: held by the endpoint handle; 2: held by the progress thread.
    lock: AtomicU32,
    /// Set when the handle is dropped: the progress thread ends.
    pub(crate) stop: AtomicBool,
    /// The endpoint's address (for the progress thread's messages).
    pub(crate) me: EpAddr,
    inner: UnsafeCell<Inner<C>>,
}

// SAFETY: the state is only reached under the lock word or by the unique handle (module
// `# Safety`), and it is `Send`.
unsafe impl<C: Conduit> Sync for EpCell<C> where Inner<C>: Send {}
// SAFETY: as above.
unsafe impl<C: Conduit> Send for EpCell<C> where Inner<C>: Send {}

const FREE: u32 = 0;
const HANDLE: u32 = 1;
const THREAD: u32 = 2;

impl<C: Conduit> EpCell<C> {
    /// Takes the lock for the progress thread if it is free.
    pub(crate) fn try_lock_thread(&self) -> Option<ThreadGuard<'_, C>> {
        self.lock
            .compare_exchange(FREE, THREAD, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| ThreadGuard { cell: self })
    }
}

/// The progress thread's access to the state (released on drop).
pub(crate) struct ThreadGuard<'a, C: Conduit> {
    cell: &'a EpCell<C>,
}

impl<C: Conduit> ThreadGuard<'_, C> {
    pub(crate) fn inner(&mut self) -> &mut Inner<C> {
        // SAFETY: the lock word is ours (module `# Safety`).
        unsafe { &mut *self.cell.inner.get() }
    }
}

impl<C: Conduit> Drop for ThreadGuard<'_, C> {
    fn drop(&mut self) {
        self.cell.lock.store(FREE, Ordering::Release);
    }
}

/// The endpoint handle's access to the state.
pub(crate) struct Guard<'a, C: Conduit> {
    cell: &'a EpCell<C>,
    locked: bool,
}

impl<C: Conduit> std::ops::Deref for Guard<'_, C> {
    type Target = Inner<C>;
    #[inline(always)]
    fn deref(&self) -> &Inner<C> {
        // SAFETY: exclusive access (module `# Safety`).
        unsafe { &*self.cell.inner.get() }
    }
}

impl<C: Conduit> std::ops::DerefMut for Guard<'_, C> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut Inner<C> {
        // SAFETY: exclusive access (module `# Safety`).
        unsafe { &mut *self.cell.inner.get() }
    }
}

impl<C: Conduit> Drop for Guard<'_, C> {
    #[inline(always)]
    fn drop(&mut self) {
        if self.locked {
            self.cell.lock.store(FREE, Ordering::Release);
        }
    }
}

/// The parts of an endpoint handle: what an [`OwnedEndpoint`] owns and an [`Endpoint`]
/// views.
pub(crate) struct Handle<C: Conduit> {
    cell: Arc<EpCell<C>>,
    thread: Option<thread::ProgressThread>,
    /// The first layers' types and state addresses, for [`crate::layer::state`] (a
    /// search here, in the handle, instead of through the state's slot vector). The
    /// addresses are those of the slots' boxes, which live as long as the state and
    /// never move (layers are attached once, at creation).
    pub(crate) fast: [(std::any::TypeId, std::ptr::NonNull<u8>); FAST_LAYERS],
    /// Not `Sync`: one thread drives an endpoint at a time.
    _not_sync: std::marker::PhantomData<std::cell::Cell<()>>,
}

/// An endpoint: an injection and completion domain with its own handler table,
/// segment and layers, addressed job-wide as (rank, index), and the operations of a
/// program on it. `Send` but not `Sync`: one thread drives it at a time, so its
/// injection path takes no lock. Threads that communicate concurrently each take their
/// own endpoint from the [`Client`](crate::Client).
///
/// [`Client::endpoint`](crate::Client::endpoint) gives an [`OwnedEndpoint`], a
/// `Box<Endpoint<C>>`: programs hold the box and write `&mut Endpoint<C>` in
/// signatures. `Endpoint` is unsized, so nothing can be moved out of a
/// `&mut Endpoint` (swapped, replaced) by safe code: a [`Scope`], which lends
/// `&mut Endpoint` to its body, knows that the endpoint it syncs at the end is the one
/// its operations started on. Swapping does not compile:
/// ```compile_fail,E0277
/// # use gex_core::{boot::Singleton, loopback::Loopback, ClientBuilder, Endpoint, EventError};
/// # let client = ClientBuilder::new().endpoints(2).init::<Loopback>(Box::new(Singleton::new())).unwrap();
/// let (mut a, mut b) = (client.endpoint(0).unwrap(), client.endpoint(1).unwrap());
/// a.scope(|s| {
///     std::mem::swap::<Endpoint<Loopback>>(&mut **s, &mut *b);
///     Ok::<(), EventError>(())
/// });
/// ```
///
/// Sharing one endpoint between threads does not compile:
/// ```compile_fail
/// fn shared<T: Sync + ?Sized>() {}
/// shared::<gex_core::Endpoint<gex_core::loopback::Loopback>>();
/// ```
/// while moving it to another thread does:
/// ```
/// fn sent<T: Send + ?Sized>() {}
/// sent::<gex_core::OwnedEndpoint<gex_core::loopback::Loopback>>();
/// sent::<&mut gex_core::Endpoint<gex_core::loopback::Loopback>>();
/// ```
///
/// ```
/// use gex_core::{Am, Body, Token};
/// # use gex_core::loopback::Loopback;
/// # let client = gex_core::ClientBuilder::new().segment_size(4096)
/// #     .init::<Loopback>(Box::new(gex_core::boot::Singleton::new())).unwrap();
/// let mut ep = client.endpoint(0).unwrap();
/// let hits = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
/// let h = hits.clone();
/// let ack = ep.register(|_: &mut Token<'_>, _: Am<'_>| {}).unwrap();
/// let add = ep.register(move |t: &mut Token<'_>, am: Am<'_>| {
///     h.fetch_add(am.args()[0], std::sync::atomic::Ordering::Relaxed);
///     t.reply(ack, Body::short(&[])).unwrap();
/// }).unwrap();
/// ep.request(ep.addr(), add, Body::short(&[5])).unwrap();
/// ep.wait_until(|| hits.load(std::sync::atomic::Ordering::Relaxed) == 5);
/// ```
#[repr(transparent)]
pub struct Endpoint<C: Conduit> {
    h: [Handle<C>],
}

/// The owner of an endpoint, from [`Client::endpoint`](crate::Client::endpoint): a box
/// of the (unsized) [`Endpoint`], where the operations are. Dropping it closes the
/// endpoint (and stops its progress thread). `Send`, not `Sync`.
pub type OwnedEndpoint<C> = Box<Endpoint<C>>;

impl<C: Conduit> Endpoint<C> {
    /// The box of one handle, as an endpoint.
    fn boxed(h: Handle<C>) -> Box<Self> {
        let b: Box<[Handle<C>]> = Box::new([h]);
        // SAFETY: `Endpoint` is `repr(transparent)` over `[Handle<C>]`: the same layout
        // and the same pointer metadata (the length, 1), so the box's allocation is
        // one of an `Endpoint` and is freed as one.
        unsafe { Box::from_raw(Box::into_raw(b) as *mut Self) }
    }

    /// The handle this view is of.
    #[inline(always)]
    pub(crate) fn h(&self) -> &Handle<C> {
        // SAFETY: every `Endpoint` is made by `boxed` from a slice of one.
        unsafe { self.h.get_unchecked(0) }
    }

    /// The handle this view is of, mutably.
    #[inline(always)]
    pub(crate) fn h_mut(&mut self) -> &mut Handle<C> {
        // SAFETY: as in `h`.
        unsafe { self.h.get_unchecked_mut(0) }
    }
}

impl<C: Conduit> std::fmt::Debug for Endpoint<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("conduit", &C::NAME)
            .field("progress_thread", &self.h().thread.is_some())
            .finish_non_exhaustive()
    }
}

impl<C: Conduit> Endpoint<C> {
    /// Makes an endpoint around `cep`, attaching `attachers`' layers in order, and
    /// starts a progress thread if asked.
    pub(crate) fn new(
        cep: C::Ep,
        shared: Arc<Shared>,
        conduit: Arc<C>,
        policy: WaitPolicy,
        layers: &[(crate::layer::Attacher<C>, Place)],
        progress_thread: Option<std::time::Duration>,
        uid: u64,
    ) -> Result<OwnedEndpoint<C>, crate::error::InitError> {
        let me = EpAddr::new(shared.rank, cep.index());
        let limits = (0..shared.size)
            .map(|r| cep.limits(EpAddr::rank(r)))
            .collect();
        let n = shared.size as usize;
        let mut owner = [OWN_NONE; 256];
        owner[H_EXCHANGE as usize] = OWN_CORE;
        let world = Team::new(
            0,
            (0..shared.size).map(|r| EpAddr::new(r, me.ep)).collect(),
            me.rank,
        );
        let core = Core {
            cep,
            handlers: (0..256).map(|_| None).collect(),
            owner,
            stats: EpStats {
                sent: vec![0; n],
                received: vec![0; n],
                built_in_place: 0,
            },
            limits,
            policy,
            share: progress::Share::new(policy, shared.share),
            yields: shared.yields,
            me,
            uid,
            bounce: Vec::new(),
            shared,
            _conduit: conduit,
            world,
            xchg: exchange::Mailbox::default(),
            lc: Vec::new(),
            implicit: Vec::new(),
            events: SlotPool::default(),
            busy: 0,
            spinning: false,
            next_client: crate::types::FIRST_CLIENT_HANDLER as u16,
            next_scope_tag: progress::SCOPE_TAG_BIT,
            seen_reports: gex_sync::signal::report_generation(),
            panicked: None,
        };
        let mut inner = Inner {
            core,
            layers: Vec::with_capacity(layers.len()),
        };
        for (attach, place) in layers {
            attach(&mut inner, *place)?;
        }
        let sleeper = match progress_thread {
            Some(_) => inner.core.cep.sleeper(),
            None => None,
        };
        // A type no layer has marks an empty cache entry. With a progress thread the
        // cache stays empty: `layer::state` then takes its slow path, which holds the
        // lock word for the borrow's life, and its fast path needs no check for the
        // thread.
        let mut fast = [(
            std::any::TypeId::of::<Handle<C>>(),
            std::ptr::NonNull::dangling(),
        ); FAST_LAYERS];
        if progress_thread.is_none() {
            for (f, s) in fast.iter_mut().zip(inner.layers.iter()) {
                *f = (s.type_id, s.state.addr());
            }
        }
        let cell = Arc::new(EpCell {
            lock: AtomicU32::new(FREE),
            stop: AtomicBool::new(false),
            me,
            inner: UnsafeCell::new(inner),
        });
        let thread =
            progress_thread.map(|nap| thread::ProgressThread::start(cell.clone(), nap, sleeper));
        Ok(Endpoint::boxed(Handle {
            cell,
            thread,
            fast,
            _not_sync: std::marker::PhantomData,
        }))
    }
}

impl<C: Conduit> Handle<C> {
    /// Exclusive access to the state (see the module's `# Safety`).
    #[inline(always)]
    pub(crate) fn inner(&mut self) -> Guard<'_, C> {
        if self.thread.is_none() {
            return Guard {
                cell: &self.cell,
                locked: false,
            };
        }
        self.lock_slow()
    }

    #[cold]
    fn lock_slow(&mut self) -> Guard<'_, C> {
        self.acquire();
        Guard {
            cell: &self.cell,
            locked: true,
        }
    }

    /// Takes the lock word for this handle (`FREE` to `HANDLE`), spinning, then
    /// yielding, while the progress thread holds it. The caller builds the locked
    /// [`Guard`] that releases it.
    #[inline]
    fn acquire(&self) {
        let mut spins = 0u32;
        while self
            .cell
            .lock
            .compare_exchange_weak(FREE, HANDLE, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            spins += 1;
            if spins < 64 {
                gex_sync::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// Shared access for queries (takes the lock like every access).
    #[inline(always)]
    fn with_ref<R>(&self, f: impl FnOnce(&Inner<C>) -> R) -> R {
        if self.thread.is_none() {
            // SAFETY: no progress thread: this handle is the only holder, and `&self`
            // excludes a `&mut self` access meanwhile.
            return f(unsafe { &*self.cell.inner.get() });
        }
        self.acquire();
        let g = Guard {
            cell: &self.cell,
            locked: true,
        };
        f(&g)
    }
}

// SAFETY: the handle is `Send` but for the cached layer addresses, which point into the
// state the `Arc<EpCell>` owns (itself `Send` when the state is): moving the handle
// moves the right to use them with it.
unsafe impl<C: Conduit> Send for Handle<C> where Inner<C>: Send {}

/// How long dropping an endpoint waits for messages its conduit still holds
/// ([`ConduitEp::has_outgoing`](crate::spi::ConduitEp::has_outgoing)).
const OUTGOING_DRAIN: std::time::Duration = std::time::Duration::from_secs(2);

impl<C: Conduit> Drop for Handle<C> {
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            self.cell.stop.store(true, Ordering::Release);
            t.join();
        }
        // A handler's panic that no call raised (the program stopped calling gex
        // after it): say so rather than lose it silently.
        // SAFETY: the progress thread is gone (joined above) or never existed, so this
        // handle is the only holder of the state.
        let inner = unsafe { &mut *self.cell.inner.get() };
        // Messages the conduit accepted but still holds (requests kept for a full
        // destination): hand them over before the endpoint goes, polling (and
        // delivering) meanwhile, so two endpoints dropped together drain each other.
        if !std::thread::panicking() && inner.core.cep.has_outgoing() {
            let deadline = std::time::Instant::now() + OUTGOING_DRAIN;
            if !inner.wait_for(Some(deadline), |i| !i.core.cep.has_outgoing()) {
                eprintln!(
                    "gex: {}: dropped with messages its conduit could not hand over within \
                     {OUTGOING_DRAIN:?} (their destinations stopped polling):\n{}",
                    inner.core.me,
                    inner.core.cep.describe()
                );
            }
        }
        if inner.core.panicked.take().is_some() {
            eprintln!(
                "gex: {}: a handler panicked and no later call on the endpoint raised it \
                 before the endpoint was dropped",
                inner.core.me
            );
        }
    }
}

impl<C: Conduit> Endpoint<C> {
    /// Exclusive access to the state (see the module's `# Safety`).
    #[inline(always)]
    pub(crate) fn inner(&mut self) -> Guard<'_, C> {
        self.h_mut().inner()
    }

    /// Shared access for queries (takes the lock like every access).
    #[inline(always)]
    fn with_ref<R>(&self, f: impl FnOnce(&Inner<C>) -> R) -> R {
        self.h().with_ref(f)
    }

    /// True if this endpoint has a progress thread (see
    /// [`ClientBuilder::progress_thread`](crate::ClientBuilder::progress_thread)).
    pub fn has_progress_thread(&self) -> bool {
        self.h().thread.is_some()
    }

    /// This endpoint's job-wide address.
    pub fn addr(&self) -> EpAddr {
        self.with_ref(|i| i.core.me)
    }
    /// This endpoint's index.
    pub fn index(&self) -> EpIndex {
        self.addr().ep
    }
    /// This rank.
    pub fn rank(&self) -> Rank {
        self.addr().rank
    }
    /// Ranks in the job.
    pub fn size(&self) -> u32 {
        self.with_ref(|i| i.core.shared.size)
    }
    /// The wait policy blocking calls of this endpoint follow.
    pub fn wait_policy(&self) -> WaitPolicy {
        self.with_ref(|i| i.core.policy)
    }
    /// Changes the wait policy of this endpoint.
    pub fn set_wait_policy(&mut self, p: WaitPolicy) {
        let mut g = self.inner();
        g.core.policy = p;
        g.core.share = progress::Share::new(p, g.core.shared.share);
    }
    /// The conduit's name.
    pub fn conduit_name(&self) -> &'static str {
        self.with_ref(|i| i.core._conduit.name())
    }
    /// The conduit's capabilities.
    pub fn capabilities(&self) -> crate::spi::Capabilities {
        self.with_ref(|i| i.core.cep.capabilities())
    }
    /// Per-peer message counters.
    pub fn stats(&self) -> EpStats {
        self.with_ref(|i| i.core.stats.clone())
    }
    /// The names of the layers this endpoint carries, in attach order.
    pub fn layers(&self) -> Vec<&'static str> {
        self.with_ref(|i| i.layers.iter().map(|l| l.place.name).collect())
    }
    /// The primordial team of this endpoint: the endpoints with its index on every
    /// rank, in rank order (team id 0).
    pub fn world(&self) -> Team {
        self.with_ref(|i| i.core.world.clone())
    }
    /// The client's configuration.
    pub fn config(&self) -> crate::Config {
        self.with_ref(|i| i.core.shared.config.clone())
    }

    /// Maximum number of AM arguments.
    pub fn max_args(&self) -> usize {
        self.with_ref(|i| i.core.max_args())
    }
    /// Largest Medium payload to `dst` (requests and replies).
    pub fn max_medium(&self, dst: EpAddr) -> usize {
        self.with_ref(|i| i.core.max_medium(dst))
    }
    /// Largest Long payload to `dst` (also bounded by `dst`'s segment).
    pub fn max_long(&self, dst: EpAddr) -> usize {
        self.with_ref(|i| i.core.max_long(dst))
    }
    /// Segment length of `rank`'s endpoints.
    pub fn segment_len_of(&self, rank: Rank) -> Option<usize> {
        self.with_ref(|i| i.core.shared.layout.seg_len.get(rank as usize).copied())
    }
    /// Host identifier of `rank` from the job layout (equal ids: the same host; `None`
    /// for a rank outside the job). Whether two ranks on one host share memory is the
    /// conduit's answer.
    pub fn host_of(&self, rank: Rank) -> Option<u32> {
        self.with_ref(|i| i.core.shared.layout.host.get(rank as usize).copied())
    }
    /// Number of endpoints `rank` has (`None` for a rank outside the job).
    pub fn endpoints_of(&self, rank: Rank) -> Option<u16> {
        self.with_ref(|i| i.core.shared.layout.eps.get(rank as usize).copied())
    }
    /// A view of this endpoint's segment (safe copies in and out; the memory stays
    /// mapped as long as the endpoint lives).
    pub fn segment(&self) -> Segment<'_> {
        self.with_ref(|i| {
            let (b, l) = i.core.cep.local_segment();
            Segment::new(b, l, i.core.me)
        })
    }
    /// True if the conduit maps `dst`'s segment here (shared memory: RMA to it is a
    /// copy).
    pub fn shares_memory_with(&self, dst: EpAddr) -> bool {
        self.with_ref(|i| dst == i.core.me || i.core.cep.peer_segment(dst).is_some())
    }

    /// The local mapping of `dst`'s segment (base address, length) when the conduit
    /// shares memory with it (this endpoint's own segment for `dst` = this endpoint),
    /// else `None`. Loads and stores through it race with other ranks' accesses
    /// unless the program synchronises with them.
    pub fn peer_segment(&self, dst: EpAddr) -> Option<(std::ptr::NonNull<u8>, usize)> {
        self.with_ref(|i| {
            if dst == i.core.me {
                Some(i.core.cep.local_segment())
            } else {
                i.core.cep.peer_segment(dst)
            }
        })
    }

    /// This endpoint's state report: per-peer message counters, busy layers, implicit
    /// and local-completion operations in flight, then what the conduit and each layer
    /// say they have in flight ([`ConduitEp::describe`](crate::spi::ConduitEp::describe),
    /// [`Layer::describe`](crate::layer::Layer::describe)). Printed by a wait that makes
    /// no progress for `GEX_STALL_REPORT` seconds and on `SIGUSR1`.
    pub fn report(&self) -> String {
        self.with_ref(Inner::report)
    }

    /// See [`layer::done`](crate::layer::done).
    #[inline(always)]
    pub(crate) fn done<T: Send + 'static, E: crate::event::EventErr, M: crate::event::Mode>(
        &self,
        v: T,
    ) -> M::Out<T, E> {
        if M::KIND == crate::event::ModeKind::Nb {
            return self.with_ref(|i| M::ready(i.core.me, i.core.uid, v));
        }
        M::ready(self.h().cell.me, 0, v)
    }

    /// True if layer `L` is attached.
    pub(crate) fn has_layer<L: crate::layer::Layer>(&self) -> bool {
        self.with_ref(|i| {
            i.layers
                .iter()
                .any(|s| s.type_id == std::any::TypeId::of::<L>())
        })
    }
}

impl<C: Conduit> Inner<C> {
    /// See [`Endpoint::report`].
    pub(crate) fn report(&self) -> String {
        use std::fmt::Write;
        let c = &self.core;
        let mut s = format!("gex: state of {} ({} ranks)\n", c.me, c.shared.size);
        let peers: Vec<String> = (0..c.stats.sent.len())
            .filter(|&r| c.stats.sent[r] + c.stats.received[r] > 0)
            .map(|r| {
                format!(
                    "{r}: sent {} received {}",
                    c.stats.sent[r], c.stats.received[r]
                )
            })
            .collect();
        let _ = writeln!(
            s,
            "  messages by peer: {}",
            if peers.is_empty() {
                "none".into()
            } else {
                peers.join(", ")
            }
        );
        let busy: Vec<&str> = self
            .layers
            .iter()
            .filter(|l| c.busy & (1 << l.place.index) != 0)
            .map(|l| l.place.name)
            .collect();
        let _ = writeln!(
            s,
            "  busy layers: [{}]; implicit operations: {}; owned payloads awaiting local completion: {}",
            busy.join(", "),
            c.implicit.len(),
            c.lc.len()
        );
        let conduit = c.cep.describe();
        if !conduit.is_empty() {
            for line in conduit.lines() {
                let _ = writeln!(s, "  conduit {}: {line}", c._conduit.name());
            }
        }
        for l in &self.layers {
            for line in l.state.describe().lines() {
                let _ = writeln!(s, "  {}: {line}", l.place.name);
            }
        }
        s
    }

    /// Runs `f` with layer `L`'s state (pinned: it lives in its box until the endpoint
    /// is dropped) and a `Cx` in which `L` is the running layer; `None` if `L` is not
    /// attached.
    #[inline]
    pub(crate) fn with_layer<L: crate::layer::Layer, R>(
        &mut self,
        f: impl FnOnce(std::pin::Pin<&mut L>, &mut crate::layer::Cx<'_, C>) -> R,
    ) -> Option<R> {
        let i = self
            .layers
            .iter()
            .position(|s| s.type_id == std::any::TypeId::of::<L>())?;
        self.in_slot(i, |slot, cx| f(slot.pinned::<L>(), cx))
    }

    /// Runs `f` with layer slot `i` (its state and hooks) and a `Cx` in which that
    /// layer is the running one (`None` past the last slot).
    #[inline]
    pub(crate) fn in_slot<R>(
        &mut self,
        i: usize,
        f: impl FnOnce(&mut LayerSlot<C>, &mut crate::layer::Cx<'_, C>) -> R,
    ) -> Option<R> {
        let (b, rest) = self.layers.split_at_mut(i);
        let (slot, a) = rest.split_first_mut()?;
        let mut cx = crate::layer::Cx {
            core: &mut self.core,
            before: b,
            after: a,
            place: slot.place,
        };
        Some(f(slot, &mut cx))
    }
}

impl<C: Conduit> Core<C> {
    pub(crate) fn max_args(&self) -> usize {
        self.limits[self.me.rank as usize].max_args
    }
    pub(crate) fn max_medium(&self, dst: EpAddr) -> usize {
        self.cep.limits(dst).max_medium
    }
    pub(crate) fn max_long(&self, dst: EpAddr) -> usize {
        let seg = self
            .shared
            .layout
            .seg_len
            .get(dst.rank as usize)
            .copied()
            .unwrap_or(0);
        self.cep.limits(dst).max_long.min(seg)
    }
    pub(crate) fn segment(&self) -> Segment<'_> {
        let (base, len) = self.cep.local_segment();
        Segment::new(base, len, self.me)
    }
}
