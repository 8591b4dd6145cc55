//! The conduit SPI: the contract a network implements.
//!
//! A conduit is one crate (one per network) that depends on gex-core and implements
//! [`Conduit`] and [`ConduitEp`]. Everything above the core (the AM API in
//! [`crate::Endpoint`], and later RMA and collectives) is written once against these
//! traits and monomorphised per conduit: no function-pointer tables on the data path.
//!
//! `docs/conduit-guide.md` in the repository lists every item with its exact semantics;
//! the summary:
//!
//! | family | items | semantics |
//! |---|---|---|
//! | setup | [`Conduit::open`] | collective; creates `params.layout.eps[rank]` endpoints, each with its segment, and publishes them |
//! | endpoints at run time | [`Conduit::open_endpoint`] | optional ([`Capabilities::RUNTIME_ENDPOINTS`]); not collective; opens index `eps[rank]..max_eps[rank]`, found by peers on first contact; the default answers [`ConduitError::Unsupported`] |
//! | description | [`Conduit::NAME`], [`ConduitEp::capabilities`], [`ConduitEp::limits`] | capability flags must match what is implemented (checked by the conformance suite) |
//! | AM injection | [`ConduitEp::inject`] | request injection of a validated [`OutMsg`] (only the core builds one); `Ok(Sent)` means the payload source may be reused; `Ok(WouldBlock)` only when `imm` |
//! | local completion | [`ConduitEp::inject_owned`], [`ConduitEp::lc_test`] | optional; owned payloads whose release may be deferred; the default completes synchronously |
//! | replies | [`ReplyTx::reply`] | never blocks and never fails for lack of resources (the conduit reserves or defers) |
//! | negotiated payload | [`ConduitEp::prepare`], [`ConduitEp::commit`] | optional; validated [`PrepareReq`]; the default answers [`Prepare::Bounce`] and the core uses a bounce buffer |
//! | errors | [`ConduitError`] | the contract's own error type: peer gone, corrupt message, network failure, contract violation |
//! | progress | [`ConduitEp::poll`] | drains incoming messages of this EP only, calling [`Deliver::deliver`] once per message |
//! | waiting | [`ConduitEp::block`] | sleeps until a message may have arrived (spurious returns allowed) |
//! | neighbourhood | [`ConduitEp::local_segment`], [`ConduitEp::peer_segment`] | local mapping of a peer's segment when it shares memory |
//! | endpoint state | [`ConduitEp::peer_open`] | optional (default `Ok`); with run-time endpoints, whether a peer's index is open (`ConduitError::NoEndpoint` otherwise) |
//! | auxiliary area | [`ConduitEp::aux`], [`ConduitEp::wake`] | a zeroed area per EP of [`OpenParams::aux_len`] bytes, mapped by its neighbours, for the layers above (each layer gets a slice); waking a neighbour's blocked waiter |
//! | native RMA | [`ConduitEp::native_put`], [`ConduitEp::native_get`], [`ConduitEp::native_test`] | optional ([`Capabilities::NATIVE_RMA`]); one-sided transfers done by the network |
//! | native atomics | [`ConduitEp::native_atomic_supported`], [`ConduitEp::native_atomic`] | optional ([`Capabilities::NATIVE_ATOMICS`]); NIC-offloaded atomics, chosen per atomic domain |
//! | diagnosis | [`ConduitEp::describe`] | optional; its state for hang reports |
//! | teardown | `Drop` of the conduit and its EPs | releases everything; nothing may be left in `/dev/shm` |
//! | hybrid jobs | [`NearConduit`], [`FarConduit`], [`FarEp`], [`SharedSegments`] | optional; a shared-memory conduit and a network conduit composed by a generic hybrid conduit (module `hybrid` below) |
//!
//! Validation of arguments (ranks, endpoint indices, argument counts, payload sizes,
//! segment bounds, handler registration, reply rules) is done by the core *before* the
//! conduit is called, and the validated values travel in types only the core can build
//! ([`OutMsg`], [`OwnedMsg`], [`PrepareReq`]), so a conduit may assume its inputs are
//! valid, and no safe code outside the core can hand it anything else. Every other
//! safe method of [`ConduitEp`] must be sound for any argument (an unknown ticket, a
//! rank outside the job): the layers above reach the conduit endpoint through safe
//! code.
//!
//! [`Conduit`] and [`ConduitEp`] are `unsafe trait`s: the core and the layers above
//! build views and copies over the memory a conduit describes (its segments, its
//! neighbours' mappings, its auxiliary areas, its in-place buffers, the payloads it
//! delivers) and hand buffers to its native operations until it says they are
//! complete, so a wrong implementation would make safe code write freed or foreign
//! memory. Each trait's `# Safety` section lists what an implementation promises;
//! `docs/conduit-guide.md` repeats the list with the reasons.
//!
//! # Safety
//! This module declares the `unsafe` traits and the `unsafe` native-operation methods
//! (their callers promise buffer lifetimes, see each `# Safety` section). Its two
//! unsafe blocks: [`Sleeper`] dereferences the doorbell its constructor's caller
//! vouched for, and the default [`ConduitEp::native_put_relaxed`] forwards its
//! caller's contract to [`ConduitEp::native_put`].
#![allow(unsafe_code)]

mod hybrid;
pub use hybrid::{FarConduit, FarEp, FarPoll, NearConduit, SharedSegments};

use crate::boot::Bootstrap;
use crate::error::InitError;
use crate::types::{Category, EpAddr, EpIndex, HandlerIndex, Injected, Kind};
use bitflags::bitflags;
use gex_sync::wait::{Doorbell, WaitPolicy};
use std::any::Any;
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::Duration;

/// A handle on a conduit endpoint's [`Doorbell`] that another thread may sleep on:
/// what [`ConduitEp::sleeper`] returns for the endpoint's progress thread.
///
/// The doorbell usually lives in memory the conduit maps (shared with the senders);
/// the handle keeps that memory alive through `keep`, so it may outlive the endpoint.
pub struct Sleeper {
    bell: NonNull<Doorbell>,
    _keep: Arc<dyn Any + Send + Sync>,
}

// SAFETY: a `Doorbell` is made of atomics and is meant to be shared between threads
// (and processes); `keep` is `Send + Sync` and only kept alive.
unsafe impl Send for Sleeper {}
// SAFETY: as above; every method takes `&self` and touches only the atomics.
unsafe impl Sync for Sleeper {}

impl Sleeper {
    /// Wraps the doorbell at `bell`, kept valid by `keep`.
    ///
    /// # Safety
    /// `bell` points to an initialised [`Doorbell`] that stays valid and in place for as
    /// long as `keep` (any clone of it) lives.
    pub unsafe fn new(bell: NonNull<Doorbell>, keep: Arc<dyn Any + Send + Sync>) -> Self {
        Sleeper { bell, _keep: keep }
    }

    fn bell(&self) -> &Doorbell {
        // SAFETY: valid while `_keep` lives (`new`'s contract), and we hold it.
        unsafe { self.bell.as_ref() }
    }

    /// Sleeps in the kernel until `ready()` holds (checked after announcing the sleep,
    /// so a ring that comes after the check wakes it), the doorbell is rung, or
    /// `timeout` passes. Returns whether `ready()` held.
    pub fn wait(&self, timeout: Duration, ready: impl FnMut() -> bool) -> bool {
        self.bell()
            .wait_until_timeout(WaitPolicy::Block, timeout, ready)
    }

    /// Wakes a thread sleeping in [`wait`](Self::wait) (and any other sleeper on the
    /// doorbell, which may return spuriously).
    pub fn wake(&self) {
        self.bell().wake();
    }
}

impl std::fmt::Debug for Sleeper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sleeper")
            .field("bell", self.bell())
            .finish()
    }
}

bitflags! {
    /// What a conduit implements natively. Each flag must match what is wired; the
    /// conformance suite checks it.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct Capabilities: u32 {
        /// [`ConduitEp::prepare`]/[`ConduitEp::commit`] build payloads in place.
        const NP_IN_PLACE = 1;
        /// [`ConduitEp::peer_segment`] maps neighbours' segments (RMA to them is a copy).
        const SHARED_MEMORY = 1 << 1;
        /// [`ConduitEp::block`] sleeps in the kernel rather than returning at once.
        const BLOCKING_WAIT = 1 << 2;
        /// [`ConduitEp::native_put`]/[`ConduitEp::native_get`] move data without the
        /// target's CPU (for peers outside the shared-memory neighbourhood).
        const NATIVE_RMA = 1 << 3;
        /// [`ConduitEp::native_atomic`] performs at least the operations
        /// [`ConduitEp::native_atomic_supported`] lists, without the target's CPU.
        const NATIVE_ATOMICS = 1 << 4;
        /// [`Conduit::open_endpoint`] opens endpoints after initialisation, at the
        /// indices `layout.eps[rank]..layout.max_eps[rank]`, and the endpoints send to
        /// peers' runtime endpoints (a send to one not open answers
        /// [`ConduitError::NoEndpoint`]). Without it the core refuses those indices.
        const RUNTIME_ENDPOINTS = 1 << 5;
    }
}

/// Size limits of a conduit. Per-peer queries go through [`ConduitEp::limits`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Maximum number of 32-bit AM arguments (at least 16).
    pub max_args: usize,
    /// Maximum Medium payload, requests and replies.
    pub max_medium: usize,
    /// Maximum Long payload, requests and replies (also bounded by the segment).
    pub max_long: usize,
}

/// Minimum number of AM arguments every conduit supports.
pub const MIN_MAX_ARGS: usize = 16;

/// The shape of the job, agreed by every rank before the conduit opens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobLayout {
    /// Number of endpoints of every rank made at initialisation (`0..eps[r]`).
    pub eps: Vec<u16>,
    /// Endpoint capacity of every rank: at least `eps[r]`; the indices
    /// `eps[r]..max_eps[r]` are for endpoints made at run time
    /// ([`Client::create_endpoint`](crate::Client::create_endpoint), `GEX_MAX_ENDPOINTS`).
    /// A conduit that offers them ([`Capabilities::RUNTIME_ENDPOINTS`]) reserves room
    /// for this many; the others ignore it.
    pub max_eps: Vec<u16>,
    /// Segment length of every rank's endpoints (each EP of a rank has a segment of this length).
    pub seg_len: Vec<usize>,
    /// Host identifier of every rank (equal means shared memory is possible).
    pub host: Vec<u32>,
    /// Operating-system process id of every rank, as the rank itself reported it. Two
    /// ranks on the same host with the same process id are **thread ranks of one
    /// process** ([`same_process`](JobLayout::same_process)): they share one address
    /// space. Process ids of different hosts mean nothing to each other.
    pub process: Vec<u32>,
}

impl JobLayout {
    /// Number of ranks.
    pub fn size(&self) -> u32 {
        self.eps.len() as u32
    }
    /// Ranks that share this rank's host, in rank order (including `rank`).
    pub fn neighbours(&self, rank: u32) -> Vec<u32> {
        let h = self.host[rank as usize];
        (0..self.size())
            .filter(|&r| self.host[r as usize] == h)
            .collect()
    }
    /// Whether ranks `a` and `b` are threads of one process (same host, same process
    /// id): they share an address space, so either can reach the other's memory
    /// directly. True for `a == b`; false for ranks outside the job.
    ///
    /// ```
    /// use gex_core::spi::JobLayout;
    /// let jl = JobLayout {
    ///     eps: vec![1; 3],
    ///     max_eps: vec![1; 3],
    ///     seg_len: vec![4096; 3],
    ///     host: vec![0, 0, 0],
    ///     process: vec![41, 41, 42],
    /// };
    /// assert!(jl.same_process(0, 1));
    /// assert!(!jl.same_process(1, 2));
    /// assert_eq!(jl.process_peers(0), vec![0, 1]);
    /// ```
    pub fn same_process(&self, a: u32, b: u32) -> bool {
        let (a, b) = (a as usize, b as usize);
        match (self.host.get(a), self.host.get(b)) {
            (Some(ha), Some(hb)) => ha == hb && self.process.get(a) == self.process.get(b),
            _ => false,
        }
    }
    /// Ranks that are threads of `rank`'s process, in rank order, including `rank`.
    pub fn process_peers(&self, rank: u32) -> Vec<u32> {
        (0..self.size())
            .filter(|&r| self.same_process(rank, r))
            .collect()
    }
    /// Whether every rank of the job is a thread of one process.
    pub fn one_process(&self) -> bool {
        (0..self.size()).all(|r| self.same_process(0, r))
    }
}

/// Parameters of [`Conduit::open`].
#[derive(Debug)]
pub struct OpenParams<'a> {
    /// This rank.
    pub rank: u32,
    /// The agreed job layout.
    pub layout: &'a JobLayout,
    /// The wait policy this rank's endpoints use (a conduit that wakes sleepers needs it).
    pub wait: WaitPolicy,
    /// Configuration, for conduit-specific `GEX_*` settings.
    pub config: &'a crate::config::Config,
    /// A conduit-specific object from [`crate::ClientBuilder::conduit_context`].
    pub context: Option<&'a (dyn std::any::Any + Send + Sync)>,
    /// Bytes of auxiliary area every endpoint needs ([`ConduitEp::aux`]): the sum of
    /// the slices of the client's layers (0: no area is needed).
    pub aux_len: usize,
}

/// Element type of a native atomic operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AtomicKind {
    /// `i32`
    I32,
    /// `u32`
    U32,
    /// `i64`
    I64,
    /// `u64`
    U64,
    /// `f32`
    F32,
    /// `f64`
    F64,
}

impl AtomicKind {
    /// Every kind.
    pub const ALL: [AtomicKind; 6] = [
        AtomicKind::I32,
        AtomicKind::U32,
        AtomicKind::I64,
        AtomicKind::U64,
        AtomicKind::F32,
        AtomicKind::F64,
    ];
    /// Width in bytes (4 or 8).
    pub fn size(self) -> usize {
        match self {
            AtomicKind::I32 | AtomicKind::U32 | AtomicKind::F32 => 4,
            _ => 8,
        }
    }
}

/// Operation of a native atomic, without the fetching choice (see [`NativeAtomic`]).
/// Integers wrap; floats follow the atomic layer's rules (bit-pattern compare for `Cswap`, a NaN
/// operand never wins `Min`/`Max`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AtomicBase {
    /// Store `a`.
    Set,
    /// Load (always fetching).
    Get,
    /// Store `a`, fetch the old value (always fetching).
    Swap,
    /// If the word equals `a`, store `b`.
    Cswap,
    /// Add `a`.
    Add,
    /// Subtract `a`.
    Sub,
    /// Multiply by `a`.
    Mult,
    /// Minimum with `a`.
    Min,
    /// Maximum with `a`.
    Max,
    /// Add one.
    Inc,
    /// Subtract one.
    Dec,
    /// Bitwise and with `a` (integers).
    And,
    /// Bitwise or with `a` (integers).
    Or,
    /// Bitwise xor with `a` (integers).
    Xor,
}

/// One native atomic operation: the word it acts on (`dst`, `offset`), `kind`, `base`,
/// whether the old value is fetched, and the operands as bit patterns in the low bits
/// (`a`, `b`; unused ones are zero). The caller of [`ConduitEp::native_atomic`] has
/// checked that the word lies, naturally aligned, in `dst`'s segment; building one
/// checks nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NativeAtomic {
    /// The endpoint whose segment holds the word (any peer, this rank included).
    pub dst: EpAddr,
    /// Offset of the word in `dst`'s segment.
    pub offset: usize,
    /// Element type.
    pub kind: AtomicKind,
    /// Operation.
    pub base: AtomicBase,
    /// Whether the old value is returned.
    pub fetch: bool,
    /// First operand (bit pattern).
    pub a: u64,
    /// Second operand (bit pattern; `Cswap` only).
    pub b: u64,
    /// Acquire semantics at the target word.
    pub acquire: bool,
    /// Release semantics at the target word.
    pub release: bool,
}

impl NativeAtomic {
    /// The word's bytes as a range of `dst`'s segment (`kind.size()` bytes at `offset`).
    ///
    /// ```
    /// use gex_core::spi::{AtomicBase, AtomicKind, NativeAtomic, SegRange};
    /// use gex_core::EpAddr;
    ///
    /// let dst = EpAddr::new(1, 0);
    /// let (kind, base, fetch) = (AtomicKind::U32, AtomicBase::Add, false);
    /// let (a, b, acquire, release) = (1, 0, false, false);
    /// let op = NativeAtomic { dst, offset: 64, kind, base, fetch, a, b, acquire, release };
    /// assert_eq!(op.word(), SegRange::new(dst, 64, 4));
    /// ```
    #[inline]
    #[must_use]
    pub fn word(&self) -> SegRange {
        SegRange::new(self.dst, self.offset, self.kind.size())
    }
}

/// Answer of the native operations ([`ConduitEp::native_put`], ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Native {
    /// Complete already: data at the target (put), in the local buffer (get), result
    /// written (fetching atomic).
    Done,
    /// Started; complete once [`ConduitEp::native_test`] returns true for this ticket.
    Pending(u64),
    /// No resources now: poll and try again.
    WouldBlock,
    /// Not offered for this peer or operation: the caller uses another path.
    Unsupported,
}

/// What the native operations answer: [`Native`], or the failure of the peer or the
/// network.
pub type NativeResult = Result<Native, ConduitError>;

/// A range of a peer endpoint's segment: `len` bytes at offset `offset` of `dst`'s
/// segment. The caller of a native operation ([`ConduitEp::native_put`],
/// [`ConduitEp::native_put_relaxed`], [`ConduitEp::native_get`]) has checked that the
/// range lies in that segment; conduits rely on it without checking again. Building
/// one checks nothing: the check is part of those methods' safety contracts.
///
/// ```
/// use gex_core::spi::SegRange;
/// use gex_core::EpAddr;
///
/// let r = SegRange::new(EpAddr::new(1, 0), 4096, 64);
/// assert_eq!((r.offset, r.len), (4096, 64));
/// assert_eq!(r.end(), 4160);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegRange {
    /// The endpoint whose segment holds the range.
    pub dst: EpAddr,
    /// Offset of the first byte in `dst`'s segment.
    pub offset: usize,
    /// Length in bytes.
    pub len: usize,
}

impl SegRange {
    /// `len` bytes at offset `offset` of `dst`'s segment.
    #[inline]
    #[must_use]
    pub const fn new(dst: EpAddr, offset: usize, len: usize) -> Self {
        Self { dst, offset, len }
    }
    /// The offset one past the last byte (`offset + len`, saturating).
    #[inline]
    #[must_use]
    pub const fn end(&self) -> usize {
        self.offset.saturating_add(self.len)
    }
}

/// Answer of [`ConduitEp::prepare`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prepare {
    /// Build the payload here, then [`ConduitEp::commit`] (or [`ConduitEp::cancel`]).
    InPlace(NonNull<[u8]>),
    /// No resources now; the core polls and asks again (or reports would-block).
    WouldBlock,
    /// Not supported for this message: the core uses a bounce buffer and [`ConduitEp::inject`].
    Bounce,
}

/// Answer of [`ConduitEp::inject_owned`].
#[derive(Debug, PartialEq, Eq)]
pub enum OwnedInjected {
    /// Sent, and the payload buffer is free again (synchronous local completion).
    Done(Vec<u8>),
    /// Sent; the conduit keeps the buffer until [`ConduitEp::lc_test`] returns it for
    /// this ticket (deferred local completion).
    Pending(u64),
    /// Not sent for lack of resources; the buffer is handed back.
    WouldBlock(Vec<u8>),
}

impl OwnedInjected {
    /// The answer of an owned injection done by copying the payload (as the default
    /// [`ConduitEp::inject_owned`] does through [`ConduitEp::inject`], which answered
    /// `sent`): the buffer is free again at once, `Done` if the message was sent,
    /// handed back as `WouldBlock` if not.
    ///
    /// ```
    /// use gex_core::spi::OwnedInjected;
    /// use gex_core::Injected;
    ///
    /// assert_eq!(OwnedInjected::copied(Injected::Sent, vec![1]), OwnedInjected::Done(vec![1]));
    /// let back = OwnedInjected::copied(Injected::WouldBlock, vec![2]);
    /// assert_eq!(back, OwnedInjected::WouldBlock(vec![2]));
    /// ```
    #[inline]
    #[must_use]
    pub fn copied(sent: Injected, payload: Vec<u8>) -> Self {
        match sent {
            Injected::Sent => OwnedInjected::Done(payload),
            Injected::WouldBlock => OwnedInjected::WouldBlock(payload),
        }
    }
}

/// One outgoing message, validated by the core: only gex-core can build one, so a
/// conduit may rely on every field without checking it again.
///
/// What the core checked before building it: `dst` is a rank of the job and an endpoint
/// that rank has; `args` holds at most [`Limits::max_args`] words for `dst`; a Medium
/// payload is at most [`Limits::max_medium`], a Long one at most [`Limits::max_long`]
/// and `[offset, offset + payload.len())` lies inside `dst`'s published segment; the
/// handler is registered (request) or the reply rules hold (reply).
///
/// Code outside gex-core cannot forge one (its fields and constructor are private; the
/// compile-fail tests in `tests/ui/` pin the compiler's reasons):
/// ```compile_fail,E0451
/// use gex_core::{spi::OutMsg, Category, EpAddr, Kind};
/// let m = OutMsg {
///     dst: EpAddr::rank(0), handler: 128, kind: Kind::Request, category: Category::Long,
///     args: &[], payload: &[0u8; 8], offset: usize::MAX - 4,
/// };
/// ```
#[derive(Clone, Copy, Debug)]
pub struct OutMsg<'a> {
    dst: EpAddr,
    handler: HandlerIndex,
    kind: Kind,
    category: Category,
    args: &'a [u32],
    payload: &'a [u8],
    offset: usize,
}

impl<'a> OutMsg<'a> {
    /// Builds a message the caller has validated (see the type's documentation).
    #[inline(always)]
    pub(crate) fn new(
        dst: EpAddr,
        handler: HandlerIndex,
        kind: Kind,
        body: crate::Body<'a>,
    ) -> Self {
        OutMsg {
            dst,
            handler,
            kind,
            category: body.category(),
            args: body.args(),
            payload: body.payload(),
            offset: body.offset(),
        }
    }
    /// The destination endpoint.
    #[inline(always)]
    pub fn dst(&self) -> EpAddr {
        self.dst
    }
    /// Handler index at the destination.
    #[inline(always)]
    pub fn handler(&self) -> HandlerIndex {
        self.handler
    }
    /// Request or reply.
    #[inline(always)]
    pub fn kind(&self) -> Kind {
        self.kind
    }
    /// Short, Medium or Long.
    #[inline(always)]
    pub fn category(&self) -> Category {
        self.category
    }
    /// The arguments (at most `max_args` for the destination).
    #[inline(always)]
    pub fn args(&self) -> &'a [u32] {
        self.args
    }
    /// The payload (empty for Short).
    #[inline(always)]
    pub fn payload(&self) -> &'a [u8] {
        self.payload
    }
    /// Long only: where the payload goes in the destination's segment (in bounds).
    #[inline(always)]
    pub fn offset(&self) -> usize {
        self.offset
    }
}

/// A validated request whose payload buffer the conduit takes over
/// ([`ConduitEp::inject_owned`]); built only by gex-core, like [`OutMsg`].
#[derive(Debug)]
pub struct OwnedMsg<'a> {
    pub(crate) dst: EpAddr,
    pub(crate) handler: HandlerIndex,
    pub(crate) category: Category,
    pub(crate) args: &'a [u32],
    pub(crate) payload: Vec<u8>,
    pub(crate) offset: usize,
}

impl<'a> OwnedMsg<'a> {
    /// The message, with the owned buffer as its payload.
    #[inline]
    pub fn msg(&self) -> OutMsg<'_> {
        self.with_payload(&self.payload)
    }
    /// The message with `payload` for its payload.
    #[inline]
    fn with_payload<'p>(&self, payload: &'p [u8]) -> OutMsg<'p>
    where
        'a: 'p,
    {
        OutMsg {
            dst: self.dst,
            handler: self.handler,
            kind: Kind::Request,
            category: self.category,
            args: self.args,
            payload,
            offset: self.offset,
        }
    }
    /// Takes the payload buffer (the conduit keeps it until local completion).
    pub fn into_payload(self) -> Vec<u8> {
        self.payload
    }
    /// Splits the message into its header (the same message with an empty payload) and
    /// the payload buffer, for conduits that send the buffer itself.
    pub fn into_parts(self) -> (OutMsg<'a>, Vec<u8>) {
        (self.with_payload(&[]), self.payload)
    }
}

/// A validated request for a negotiated-payload buffer ([`ConduitEp::prepare`]); built
/// only by gex-core: `dst` exists, `max_len` is within the limits for `dst` and, for
/// Long, `[offset, offset + max_len)` lies inside `dst`'s segment.
#[derive(Clone, Copy, Debug)]
pub struct PrepareReq {
    dst: EpAddr,
    category: Category,
    max_len: usize,
    offset: usize,
}

impl PrepareReq {
    pub(crate) fn new(dst: EpAddr, category: Category, max_len: usize, offset: usize) -> Self {
        PrepareReq {
            dst,
            category,
            max_len,
            offset,
        }
    }
    /// The destination endpoint.
    pub fn dst(&self) -> EpAddr {
        self.dst
    }
    /// Medium or Long (never Short).
    pub fn category(&self) -> Category {
        self.category
    }
    /// The most payload bytes the message will carry.
    pub fn max_len(&self) -> usize {
        self.max_len
    }
    /// Long only: where the payload goes in the destination's segment.
    pub fn offset(&self) -> usize {
        self.offset
    }
}

/// One incoming message as handed to [`Deliver::deliver`].
///
/// A Long payload is described, not lent: it lies in this endpoint's segment, which
/// other ranks may write at any time, so the core (not a slice) decides how handlers
/// see it.
#[derive(Clone, Copy, Debug)]
pub struct Incoming<'a> {
    /// Sending endpoint.
    pub src: EpAddr,
    /// Handler index.
    pub handler: HandlerIndex,
    /// Request or reply.
    pub kind: Kind,
    /// Category.
    pub category: Category,
    /// Arguments.
    pub args: &'a [u32],
    /// Medium only: the payload, valid during delivery and written by nobody meanwhile.
    /// Empty for Short and Long.
    pub payload: &'a [u8],
    /// Long only: the offset of the payload in this EP's segment.
    pub offset: usize,
    /// Long only: the payload length (the bytes at `offset` were written before the
    /// message was published).
    pub len: usize,
}

/// A message as a conduit that queues messages in process memory keeps it until
/// delivery (the loopback conduit, test conduits): the fields of [`Incoming`], owned.
///
/// ```
/// use gex_core::spi::QueuedMsg;
/// use gex_core::{Category, EpAddr, Kind};
///
/// let q = QueuedMsg {
///     src: EpAddr::new(0, 1),
///     handler: 200,
///     kind: Kind::Request,
///     category: Category::Long,
///     args: vec![7],
///     payload: Vec::new(),
///     offset: 64,
///     len: 16,
/// };
/// let inc = q.incoming(&[]);
/// assert_eq!((inc.src, inc.args, inc.offset, inc.len), (q.src, &[7][..], 64, 16));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueuedMsg {
    /// Sending endpoint.
    pub src: EpAddr,
    /// Handler index.
    pub handler: HandlerIndex,
    /// Request or reply.
    pub kind: Kind,
    /// Category.
    pub category: Category,
    /// Arguments.
    pub args: Vec<u32>,
    /// The bytes the conduit keeps with the message: a Medium's payload (and, at the
    /// conduit's choice, a Long payload the receiver places).
    pub payload: Vec<u8>,
    /// Long: the offset of the payload in the destination's segment.
    pub offset: usize,
    /// Long: the payload length.
    pub len: usize,
}

impl QueuedMsg {
    /// `m` sent by `src`, keeping `payload` and recording a Long payload of `len`
    /// bytes at `m.offset()`.
    #[must_use]
    pub fn new(src: EpAddr, m: &OutMsg<'_>, payload: Vec<u8>, len: usize) -> Self {
        QueuedMsg {
            src,
            handler: m.handler(),
            kind: m.kind(),
            category: m.category(),
            args: m.args().to_vec(),
            payload,
            offset: m.offset(),
            len,
        }
    }
    /// The message as [`Deliver::deliver`] takes it, with `payload` (normally
    /// `&self.payload`) as a Medium's payload. A Long has an empty payload, `offset`
    /// and `len`; the others have zero for both.
    #[inline]
    #[must_use]
    pub fn incoming<'a>(&'a self, payload: &'a [u8]) -> Incoming<'a> {
        let long = self.category == Category::Long;
        Incoming {
            src: self.src,
            handler: self.handler,
            kind: self.kind,
            category: self.category,
            args: &self.args,
            payload: if long { &[] } else { payload },
            offset: if long { self.offset } else { 0 },
            len: if long { self.len } else { 0 },
        }
    }
}

/// The reply half of a conduit endpoint, handed to [`Deliver::deliver`] so request
/// handlers can reply while the conduit is iterating its receive queues.
pub trait ReplyTx {
    /// Sends a reply to `msg.dst()`. Must not block and must not fail for lack of
    /// resources: a conduit reserves reply resources or defers the reply internally.
    ///
    /// # Errors
    /// [`ConduitError`] if the peer or network failed.
    fn reply(&mut self, msg: &OutMsg<'_>) -> Result<(), ConduitError>;
}

/// Receiver of incoming messages during [`ConduitEp::poll`] (implemented by the core).
pub trait Deliver {
    /// Called once per incoming message, in arrival order per sender.
    fn deliver(&mut self, msg: &Incoming<'_>, tx: &mut dyn ReplyTx);
}

/// The error type of the conduit contract: what a network reports.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConduitError {
    /// A peer's process or connection is gone.
    #[error("rank {rank} is gone: {detail}")]
    PeerGone {
        /// The peer.
        rank: u32,
        /// What was observed.
        detail: String,
    },
    /// A peer sent bytes that do not decode (a corrupt or foreign message).
    #[error("corrupt message from rank {rank}: {detail}")]
    Corrupt {
        /// The peer.
        rank: u32,
        /// What was wrong.
        detail: String,
    },
    /// The network or the provider failed.
    #[error("network failure: {0}")]
    Network(String),
    /// A call broke the conduit contract (for example a commit without a prepare).
    #[error("conduit contract violated: {0}")]
    Contract(String),
    /// The conduit does not offer this operation (for example
    /// [`Conduit::open_endpoint`] on a conduit without
    /// [`Capabilities::RUNTIME_ENDPOINTS`]).
    #[error("the {conduit} conduit does not offer {what}")]
    Unsupported {
        /// The conduit's name.
        conduit: &'static str,
        /// What it does not offer.
        what: &'static str,
    },
    /// A message was sent to an endpoint index within the destination's capacity that
    /// is not open there: not created yet, or closed (an endpoint made at run time and
    /// dropped). Nothing was sent.
    #[error("endpoint {dst} is not open ({state})")]
    NoEndpoint {
        /// The destination.
        dst: EpAddr,
        /// `"not created yet"` or `"closed"`.
        state: &'static str,
    },
}

/// A conduit: the per-rank network instance. See the [module documentation](self).
///
/// # Safety
/// An implementation promises, for the conduit and every endpoint [`open`](Self::open)
/// returns (the promises of [`ConduitEp`] included):
/// - `open` returns the endpoints `0..params.layout.eps[params.rank]` in index order
///   (each [`ConduitEp::index`] its position), each with a segment of at least
///   `params.layout.seg_len[params.rank]` bytes, zero-filled, and, when
///   `params.aux_len > 0`, an auxiliary area of at least `aux_len` bytes for every
///   neighbour it maps;
/// - everything a peer or the bootstrap told it that its memory accesses depend on
///   (the length of a peer's mapped segment, the size of a peer's ring, a remote
///   key's range) was checked against `params.layout` and against what it actually
///   mapped or registered, before any endpoint is returned;
/// - the memory its endpoints describe stays valid as long as the conduit value (the
///   `Arc` `open` returned) lives, also after the endpoints are dropped;
/// - [`open_endpoint`](Self::open_endpoint) returns an endpoint whose
///   [`ConduitEp::index`] is the index asked, with a segment and an auxiliary area as
///   `open`'s, under every promise above and of [`ConduitEp`].
pub unsafe trait Conduit: Send + Sync + Sized + 'static {
    /// The conduit's endpoint type.
    type Ep: ConduitEp;
    /// Short name (the facade selects a conduit by it).
    const NAME: &'static str;
    /// The `GEX_*` settings this conduit reads, declared in its own crate (the facade
    /// collects them with the core's and the layers' into the registry that
    /// `gex-info env` prints and `GEX_VERBOSEENV=1` shows).
    const ENV_VARS: &'static [crate::config::EnvVar] = &[];
    /// Every settings registry this conduit type reads: its own ([`ENV_VARS`](Self::ENV_VARS));
    /// a conduit that dispatches to others at run time lists theirs.
    fn env_registries() -> Vec<&'static [crate::config::EnvVar]> {
        vec![Self::ENV_VARS]
    }
    /// The name of this conduit instance: [`NAME`](Self::NAME), or for a conduit
    /// chosen at run time the one chosen.
    fn name(&self) -> &'static str {
        Self::NAME
    }
    /// Opens the conduit: collective over `boot`, creates every endpoint of this rank
    /// (with its segment, zero-filled) and connects to every peer.
    ///
    /// Returns the conduit and this rank's endpoints in index order.
    ///
    /// # Errors
    /// [`InitError`] naming the conduit and what failed.
    fn open(
        boot: &mut dyn Bootstrap,
        params: &OpenParams<'_>,
    ) -> Result<(std::sync::Arc<Self>, Vec<Self::Ep>), InitError>;

    /// Opens endpoint `index` of this rank after initialisation (an endpoint made at
    /// run time, [`Client::create_endpoint`](crate::Client::create_endpoint)): not
    /// collective, with its own resources (segment of the layout's length, zero-filled,
    /// auxiliary area), reachable by every peer as `(rank, index)` once this returns,
    /// peers finding it on first contact. The core calls it at most once per index,
    /// with `layout.eps[rank] <= index < layout.max_eps[rank]`, and only when the
    /// endpoints' capabilities hold [`Capabilities::RUNTIME_ENDPOINTS`] (which a
    /// conduit sets exactly when it implements this method). Dropping the endpoint
    /// closes it: later sends to it fail with [`ConduitError::NoEndpoint`]. The index
    /// is never opened again.
    ///
    /// The default answers [`ConduitError::Unsupported`].
    ///
    /// # Errors
    /// [`ConduitError::Unsupported`] if the conduit cannot;
    /// [`ConduitError::Contract`] for an index outside the range above or opened
    /// before; other [`ConduitError`]s if the network fails.
    fn open_endpoint(self: &Arc<Self>, index: EpIndex) -> Result<Self::Ep, ConduitError> {
        let _ = index;
        Err(ConduitError::Unsupported {
            conduit: self.name(),
            what: "endpoints made at run time",
        })
    }

    /// The last collective step of a rank ([`Client::finalize`](crate::Client::finalize),
    /// also run when a [`Client`](crate::Client) is dropped): runs the job-wide
    /// `barrier` once. Endpoints the client still held have been dropped before.
    ///
    /// A conduit whose peers may still be completing operations on this rank's closed
    /// endpoints (a get from its segment, the last message of a barrier) keeps serving
    /// them until `barrier` has returned on this rank, which is when every rank has
    /// closed its endpoints; only then may it release their network resources. The
    /// default runs `barrier` and nothing else, right for conduits that need no
    /// service from a closed endpoint (shared memory stays mapped while any rank
    /// maps it).
    ///
    /// # Errors
    /// The error of `barrier`.
    fn finalize(
        &self,
        barrier: &mut dyn FnMut() -> Result<(), crate::boot::BootError>,
    ) -> Result<(), crate::boot::BootError> {
        barrier()
    }
}

/// One endpoint of a conduit: an injection and completion domain driven by one thread
/// at a time (`Send`, not required to be `Sync`).
///
/// # Safety
/// An implementation promises:
/// - [`local_segment`](Self::local_segment): `(base, len)` with `len` at least the
///   layout's segment length of this rank, the bytes `base..base + len` valid for
///   reads and writes (through raw pointers and atomics: other ranks write them at any
///   time) for as long as the conduit lives;
/// - [`peer_segment`](Self::peer_segment): `Some((base, len))` only for a mapping of
///   `dst`'s segment valid as above, with `len` at most what is mapped and at most
///   `dst`'s segment length in the layout;
/// - [`aux`](Self::aux): `Some(p)` only for a 64-byte aligned area of at least
///   [`OpenParams::aux_len`] bytes, valid as above and written only through atomics;
/// - [`poll`](Self::poll): each [`Incoming`] it delivers has `args` and `payload`
///   valid for the call, and no one writes the `payload` bytes during it (the core
///   hands them to handlers as `&[u8]`); a Long's `offset`/`len` describe bytes of
///   this endpoint's segment written before the message was published;
/// - [`prepare`](Self::prepare): a [`Prepare::InPlace`] buffer is initialised memory
///   valid for reads and writes of at least the asked length, read or written by no one
///   else until [`commit`](Self::commit)/[`cancel`](Self::cancel) (the core lends a
///   Medium's to the program as `&mut [u8]`);
/// - the native operations ([`native_put`](Self::native_put) and the others): once an
///   operation is complete ([`Native::Done`], or [`native_test`](Self::native_test)
///   true for its ticket), the conduit no longer reads or writes the caller's buffer,
///   and a get's or fetching atomic's data is in it (visible to the calling thread);
///   until then it accesses only the ranges it was given;
/// - [`sleeper`](Self::sleeper): as the method says;
/// - a panic from any of its methods leaves the endpoint sound to use (a later call may
///   panic again) and to drop.
pub unsafe trait ConduitEp: Send + 'static {
    /// This endpoint's index.
    fn index(&self) -> EpIndex;
    /// What this conduit implements natively.
    fn capabilities(&self) -> Capabilities;
    /// Limits for messages to `dst` (per peer).
    fn limits(&self, dst: EpAddr) -> Limits;
    /// This EP's segment: base and length. Valid for the life of the conduit.
    fn local_segment(&self) -> (NonNull<u8>, usize);
    /// The local mapping of `dst`'s segment if it shares memory with this rank.
    fn peer_segment(&self, dst: EpAddr) -> Option<(NonNull<u8>, usize)>;
    /// Whether `dst` (an address within its rank's capacity, checked by the caller) is
    /// open: `Ok` for an endpoint made at init and for one made at run time that is
    /// open now; [`ConduitError::NoEndpoint`] naming its state (`"not created yet"`,
    /// `"closed"`) otherwise. Layers that reach a peer's segment without a message
    /// (a direct copy through [`peer_segment`](Self::peer_segment), which a conduit
    /// may map for an index that is not open) ask it before using the mapping. The
    /// answer may change right after (the owner may create or drop the endpoint):
    /// traffic racing with a close is the program's to avoid, as for AMs. Must not
    /// block; a conduit with [`Capabilities::RUNTIME_ENDPOINTS`] implements it with a
    /// load of the endpoint's state. The default answers `Ok` (right for conduits
    /// without endpoints made at run time, whose indices above the endpoints made at
    /// init the core refuses).
    ///
    /// # Errors
    /// [`ConduitError::NoEndpoint`] if `dst` is not open.
    fn peer_open(&self, dst: EpAddr) -> Result<(), ConduitError> {
        let _ = dst;
        Ok(())
    }
    /// Injects a request to `msg.dst()`. Returns `Ok(Sent)` once the payload source
    /// may be reused; `Ok(WouldBlock)` if resources are lacking and `imm` is set.
    /// Without `imm` the conduit may also return `WouldBlock`; the core then polls and
    /// retries.
    ///
    /// # Errors
    /// [`ConduitError`] if the peer or the network failed.
    fn inject(&mut self, msg: &OutMsg<'_>, imm: bool) -> Result<Injected, ConduitError>;
    /// Injects a request whose payload buffer the conduit takes over, so local
    /// completion may be deferred without copying. The default injects synchronously
    /// and hands the buffer back. Like [`inject`](ConduitEp::inject) it may answer
    /// `WouldBlock` (with the buffer) when resources are lacking; without `imm` the
    /// core polls and retries.
    ///
    /// # Errors
    /// [`ConduitError`] if the peer or the network failed.
    fn inject_owned(
        &mut self,
        msg: OwnedMsg<'_>,
        imm: bool,
    ) -> Result<OwnedInjected, ConduitError> {
        let sent = self.inject(&msg.msg(), imm)?;
        Ok(OwnedInjected::copied(sent, msg.into_payload()))
    }
    /// Returns the buffer of a [`OwnedInjected::Pending`] injection once it is locally
    /// complete (`None`: not yet; call [`poll`](ConduitEp::poll) and ask again). Each
    /// ticket is returned once.
    fn lc_test(&mut self, ticket: u64) -> Option<Vec<u8>> {
        let _ = ticket;
        None
    }
    /// Drains incoming messages (at most about `budget`), delivering each to `d`.
    /// Returns the number delivered. Must not block.
    fn poll<D: Deliver>(&mut self, d: &mut D, budget: usize) -> usize;
    /// True while this endpoint holds messages it accepted (`inject` answered
    /// [`Injected::Sent`]) but has not handed to their
    /// destinations yet: requests kept when a destination's queue was full, replies
    /// deferred. Such messages move on from later calls (`poll`, `inject`); before the
    /// core drops the endpoint it polls, delivering, until this is false (for a bounded
    /// time, then it says what was left). Default: false (a conduit that never keeps
    /// messages).
    fn has_outgoing(&self) -> bool {
        false
    }
    /// True if a message is waiting (cheap). Conduits use it before sleeping in
    /// [`block`](ConduitEp::block); the conformance suite uses it to check
    /// [`Capabilities::BLOCKING_WAIT`].
    fn has_incoming(&self) -> bool;
    /// Sleeps until a message may have arrived or `timeout` passed. Spurious returns are
    /// allowed; a conduit without a wait object returns at once.
    fn block(&mut self, timeout: Duration);
    /// The doorbell this endpoint's senders ring, for the endpoint's progress thread to
    /// sleep on while the rank computes (see [`Sleeper`]); the core asks once, when it
    /// starts the thread. A conduit that returns one must from then on ring it after
    /// publishing every message to this endpoint ([`Doorbell::ring`] with
    /// `may_block` set: a fence and a load per message), so that a sleeping thread
    /// wakes for it. The default, `None`, makes the thread nap between polls instead
    /// (`GEX_PROGRESS_INTERVAL`).
    fn sleeper(&mut self) -> Option<Sleeper> {
        None
    }
    /// Reserves space for a request payload of up to `req.max_len()` bytes to be built
    /// in place (negotiated payload). The default answers [`Prepare::Bounce`] and the
    /// core builds the payload in its own buffer, then injects it. An in-place buffer
    /// stays valid until [`commit`](ConduitEp::commit) or [`cancel`](ConduitEp::cancel),
    /// no other method of this EP is called in between, and gex hands it to nobody
    /// else. For Long it may be the destination range itself (shared-memory conduits),
    /// so `cancel` sends nothing but cannot undo bytes already written there.
    ///
    /// # Errors
    /// [`ConduitError`] if the peer or the network failed.
    fn prepare(&mut self, req: &PrepareReq, imm: bool) -> Result<Prepare, ConduitError> {
        let _ = (req, imm);
        Ok(Prepare::Bounce)
    }
    /// Publishes a prepared message with `msg.payload().len()` bytes taken from the
    /// prepared buffer (`msg.payload()` points at it).
    ///
    /// # Errors
    /// [`ConduitError::Contract`] if nothing was prepared, or prepared for another
    /// destination or category; [`ConduitError`] if the peer or the network failed.
    fn commit(&mut self, msg: &OutMsg<'_>) -> Result<(), ConduitError> {
        let _ = msg;
        Err(ConduitError::Contract(
            "commit without a successful prepare".into(),
        ))
    }
    /// Abandons a prepared message: nothing is sent.
    fn cancel(&mut self) {}

    /// The local mapping of `dst`'s auxiliary area ([`OpenParams::aux_len`] bytes,
    /// zero-filled at open, aligned to 64 bytes) when `dst` shares memory with this
    /// rank, this EP included; `None` otherwise (and always when `aux_len` is 0). The
    /// layers above split it: each gets its own slice. A conduit that maps peers' segments
    /// ([`Capabilities::SHARED_MEMORY`]) must provide it for exactly the peers whose
    /// segments it maps. The area outlives every endpoint of the conduit. Accesses from
    /// several processes must use atomics (the layers above own the protocol; the
    /// conduit never touches the area after open).
    fn aux(&self, dst: EpAddr) -> Option<NonNull<u8>> {
        let _ = dst;
        None
    }
    /// Makes a [`block`](ConduitEp::block)ed waiter of neighbour `dst` return (used after
    /// writing a flag it waits for in an auxiliary area). No effect where `aux(dst)` is
    /// `None` or the conduit never sleeps. Must not block.
    fn wake(&self, dst: EpAddr) {
        let _ = dst;
    }

    /// Starts a put of `to.len` bytes from `src` to the range `to` of a peer's
    /// segment, done by the network ([`Capabilities::NATIVE_RMA`]). Completion
    /// ([`Native::Done`] or a true [`native_test`](ConduitEp::native_test)) means the
    /// bytes are at the target and `src` may be reused. The default answers
    /// [`Native::Unsupported`]; a conduit may also answer it per peer or size, and the
    /// caller then uses AMs.
    ///
    /// # Safety
    /// `src..src+to.len` must stay valid and unmodified until completion; `to` was
    /// checked by the caller to lie in `to.dst`'s segment.
    ///
    /// # Errors
    /// [`ConduitError`] if the peer or the network failed.
    unsafe fn native_put(&mut self, to: SegRange, src: *const u8) -> NativeResult {
        let _ = (to, src);
        Ok(Native::Unsupported)
    }
    /// Starts a put like [`native_put`](ConduitEp::native_put) whose completion only
    /// means `src` may be reused (local completion): the bytes may still be on their
    /// way, and are at the target once a [`native_flush`](ConduitEp::native_flush) of
    /// `to.dst` started after this call has completed. The layers above use it for
    /// implicit-event (NBI) puts, whose completion is only observed at a sync, which
    /// flushes; a network whose remote completion costs traffic per operation (an
    /// acknowledgement, `FI_DELIVERY_COMPLETE`) then pays it once per sync and peer
    /// instead of once per put. The default is `native_put` (already complete at the
    /// target).
    ///
    /// # Safety
    /// As [`native_put`](ConduitEp::native_put).
    ///
    /// # Errors
    /// [`ConduitError`] if the peer or the network failed.
    unsafe fn native_put_relaxed(&mut self, to: SegRange, src: *const u8) -> NativeResult {
        // SAFETY: forwarded contract.
        unsafe { self.native_put(to, src) }
    }
    /// Starts a flush of `dst`: its completion ([`Native::Done`], or a true
    /// [`native_test`](ConduitEp::native_test)) means the bytes of every
    /// [`native_put_relaxed`](ConduitEp::native_put_relaxed) to `dst` started before
    /// this call are at the target. [`Native::Unsupported`] means the same as `Done`.
    /// The default answers `Done` (the default relaxed put completes at the target).
    ///
    /// # Errors
    /// [`ConduitError`] if the peer or the network failed.
    fn native_flush(&mut self, dst: EpAddr) -> Result<Native, ConduitError> {
        let _ = dst;
        Ok(Native::Done)
    }
    /// Starts a get of the range `from` of a peer's segment into `out` (`from.len`
    /// bytes), done by the network. Completion means the bytes are in `out`.
    ///
    /// # Safety
    /// `out..out+from.len` must stay valid, and not be read or written by anyone else,
    /// until completion; `from` was checked by the caller to lie in `from.dst`'s
    /// segment.
    ///
    /// # Errors
    /// [`ConduitError`] if the peer or the network failed.
    unsafe fn native_get(&mut self, from: SegRange, out: *mut u8) -> NativeResult {
        let _ = (from, out);
        Ok(Native::Unsupported)
    }
    /// Whether [`native_atomic`](ConduitEp::native_atomic) performs `base` (fetching or
    /// not, as `fetch` says) on `kind` for every peer. Atomic domains ask once at
    /// creation and use the NIC for all their operations only if every one is offered
    /// (NIC and CPU atomics are not coherent with each other). Default: false.
    fn native_atomic_supported(&self, kind: AtomicKind, base: AtomicBase, fetch: bool) -> bool {
        let _ = (kind, base, fetch);
        false
    }
    /// Starts the atomic `op` on the naturally aligned word at offset `op.offset` of
    /// `op.dst`'s segment (any peer, this rank included). For fetching operations the
    /// old value (bit pattern, zero-extended) is written to `result` before completion.
    ///
    /// # Safety
    /// `result` must be valid for a write of a `u64`, and not be accessed by anyone
    /// else, until completion (it may be null when `op.fetch` is false); the word was
    /// checked by the caller to lie, naturally aligned, in `op.dst`'s segment.
    ///
    /// # Errors
    /// [`ConduitError`] if the peer or the network failed.
    unsafe fn native_atomic(&mut self, op: &NativeAtomic, result: *mut u64) -> NativeResult {
        let _ = (op, result);
        Ok(Native::Unsupported)
    }
    /// The conduit's state of this endpoint for a hang report (queue occupancy,
    /// credits, operations in flight); empty if it has nothing to say.
    fn describe(&self) -> String {
        String::new()
    }
    /// True once the native operation `ticket` (from [`Native::Pending`]) is complete;
    /// each ticket reports true once. Completions are found by [`poll`](ConduitEp::poll)
    /// (and may be by this call).
    fn native_test(&mut self, ticket: u64) -> bool {
        let _ = ticket;
        true
    }
}
