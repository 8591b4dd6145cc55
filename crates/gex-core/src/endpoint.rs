//! Endpoints: handler tables, AM injection with validation, progress, waiting, and
//! negotiated payloads.
//!
//! # Safety
//!
//! This module turns conduit-provided raw memory into slices in two places:
//! - negotiated payloads ([`Prepared`]): the conduit promises the buffer returned by
//!   [`ConduitEp::prepare`] stays valid and unaliased until `commit`/`cancel`, and
//!   `Prepared` holds `&mut Endpoint` for its whole life, so no other conduit call can
//!   happen in between;
//! - the local segment ([`Segment`]): the conduit promises the segment stays mapped for
//!   the life of the conduit, which the endpoint keeps alive through an `Arc`. Segment
//!   memory is shared with other ranks, so the safe accessors copy through raw pointers
//!   and the slice views are `unsafe` with the data-race rule written down.
#![allow(unsafe_code)]

use crate::client::Shared;
use crate::error::{AmError, RegisterError};
use crate::spi::{
    Conduit, ConduitEp, Deliver, Incoming, Limits, OutMsg, OwnedInjected, OwnedMsg, Prepare,
    PrepareReq, ReplyTx,
};
use crate::types::FIRST_CLIENT_HANDLER;
use crate::types::{Category, EpAddr, EpIndex, Flags, HandlerIndex, Injected, Kind, Rank};
use gex_sync::wait::WaitPolicy;
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A registered AM handler. It receives a [`Token`] (source, reply right) and the
/// message ([`Am`]). Handlers must not block or poll; they run on the thread that
/// polls the endpoint.
pub type Handler = Box<dyn for<'t, 'a> FnMut(&mut Token<'t>, Am<'a>) + Send>;

/// Handler indices `1..CORE_HANDLERS` belong to gex-core itself.
const CORE_HANDLERS: HandlerIndex = 16;
const H_BARRIER: HandlerIndex = 1;

/// The message a handler receives.
#[derive(Clone, Copy, Debug)]
pub struct Am<'a> {
    src: EpAddr,
    category: Category,
    kind: Kind,
    args: &'a [u32],
    payload: &'a [u8],
    offset: usize,
}

impl<'a> Am<'a> {
    /// The sending endpoint.
    pub fn src(&self) -> EpAddr {
        self.src
    }
    /// Short, Medium or Long.
    pub fn category(&self) -> Category {
        self.category
    }
    /// Request or reply.
    pub fn kind(&self) -> Kind {
        self.kind
    }
    /// The 32-bit arguments.
    pub fn args(&self) -> &'a [u32] {
        self.args
    }
    /// The payload: for Medium a temporary buffer valid during the handler; for Long
    /// the bytes in this endpoint's segment at [`offset`](Am::offset), written before
    /// the handler ran; empty for Short.
    pub fn payload(&self) -> &'a [u8] {
        self.payload
    }
    /// Long only: where the payload was written in this endpoint's segment.
    pub fn offset(&self) -> usize {
        self.offset
    }
}

/// Handed to a handler: who sent the message, and the right to reply at most once
/// (and only from a request handler).
pub struct Token<'t> {
    tx: &'t mut dyn ReplyTx,
    src: EpAddr,
    kind: Kind,
    replied: bool,
    shared: &'t Shared,
    registered: &'t Bitset,
    limits: &'t [Limits],
    /// Lowest handler index this handler may reply to (reserved indices only from
    /// handlers that were themselves invoked at a reserved index).
    min_handler: HandlerIndex,
}

impl std::fmt::Debug for Token<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Token")
            .field("src", &self.src)
            .field("kind", &self.kind)
            .field("replied", &self.replied)
            .finish()
    }
}

impl Token<'_> {
    /// The endpoint that sent the message being handled.
    pub fn src(&self) -> EpAddr {
        self.src
    }
    /// True inside a request handler.
    pub fn is_request(&self) -> bool {
        self.kind == Kind::Request
    }
    /// True once this handler has replied.
    pub fn has_replied(&self) -> bool {
        self.replied
    }
    /// Replies with a Short AM.
    ///
    /// # Errors
    /// [`AmError::ReplyFromReply`], [`AmError::AlreadyReplied`], [`AmError::TooManyArgs`],
    /// [`AmError::UnregisteredHandler`], [`AmError::Conduit`].
    pub fn reply_short(&mut self, handler: HandlerIndex, args: &[u32]) -> Result<(), AmError> {
        self.reply(Category::Short, handler, args, &[], 0)
    }
    /// Replies with a Medium AM; the payload is copied before this returns.
    ///
    /// # Errors
    /// As [`reply_short`](Token::reply_short), plus [`AmError::PayloadTooLarge`].
    pub fn reply_medium(
        &mut self,
        handler: HandlerIndex,
        args: &[u32],
        payload: &[u8],
    ) -> Result<(), AmError> {
        self.reply(Category::Medium, handler, args, payload, 0)
    }
    /// Replies with a Long AM written at `offset` in the requester's segment.
    ///
    /// # Errors
    /// As [`reply_medium`](Token::reply_medium), plus [`AmError::OutOfSegment`].
    pub fn reply_long(
        &mut self,
        handler: HandlerIndex,
        args: &[u32],
        payload: &[u8],
        offset: usize,
    ) -> Result<(), AmError> {
        self.reply(Category::Long, handler, args, payload, offset)
    }

    fn reply(
        &mut self,
        category: Category,
        handler: HandlerIndex,
        args: &[u32],
        payload: &[u8],
        offset: usize,
    ) -> Result<(), AmError> {
        if self.kind == Kind::Reply {
            return Err(AmError::ReplyFromReply);
        }
        if self.replied {
            return Err(AmError::AlreadyReplied);
        }
        check_reply(
            self.registered,
            self.limits,
            self.min_handler,
            self.src,
            category,
            handler,
            args,
            payload,
            offset,
            &self.shared.layout.seg_len,
        )?;
        let msg = OutMsg::new(
            self.src,
            handler,
            Kind::Reply,
            category,
            args,
            payload,
            offset,
        );
        self.tx.reply(&msg)?;
        self.replied = true;
        am_trace!("reply", self.src, handler, category, payload.len());
        Ok(())
    }
}

#[derive(Clone, Debug, Default)]
pub(crate) struct Bitset([u64; 4]);

impl Bitset {
    #[inline]
    fn get(&self, i: u8) -> bool {
        self.0[(i >> 6) as usize] & (1u64 << (i & 63)) != 0
    }
    fn set(&mut self, i: u8) {
        self.0[(i >> 6) as usize] |= 1u64 << (i & 63);
    }
}

/// Per-peer message counters of one endpoint, for diagnosing hangs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EpStats {
    /// Messages (requests and replies) sent to each rank.
    pub sent: Vec<u64>,
    /// Messages received from each rank.
    pub received: Vec<u64>,
}

#[derive(Debug, Default)]
struct CoreState {
    barrier_epoch: u64,
    /// arrivals[parity][round]
    arrivals: [[u32; 32]; 2],
}

/// [`check_msg`] for a reply: the destination is the source of the message being
/// handled, so its rank and endpoint are known to be valid.
#[allow(clippy::too_many_arguments)]
#[inline]
fn check_reply(
    registered: &Bitset,
    limits: &[Limits],
    min_handler: HandlerIndex,
    dst: EpAddr,
    category: Category,
    handler: HandlerIndex,
    args: &[u32],
    payload: &[u8],
    offset: usize,
    seg_lens: &[usize],
) -> Result<(), AmError> {
    check_body(
        &limits[dst.rank as usize],
        registered,
        min_handler,
        dst,
        category,
        handler,
        args,
        payload,
        offset,
        seg_lens,
    )
}

/// The checks shared by requests and replies once the destination is known to exist.
#[allow(clippy::too_many_arguments)]
#[inline]
fn check_body(
    limits: &Limits,
    registered: &Bitset,
    min_handler: HandlerIndex,
    dst: EpAddr,
    category: Category,
    handler: HandlerIndex,
    args: &[u32],
    payload: &[u8],
    offset: usize,
    seg_lens: &[usize],
) -> Result<(), AmError> {
    if handler != 0 && handler < min_handler {
        return Err(AmError::ReservedHandler(handler));
    }
    if args.len() > limits.max_args {
        return Err(AmError::TooManyArgs {
            given: args.len(),
            max: limits.max_args,
        });
    }
    if handler == 0 || !registered.get(handler) {
        return Err(AmError::UnregisteredHandler(handler));
    }
    match category {
        Category::Short => {}
        Category::Medium => {
            if payload.len() > limits.max_medium {
                return Err(AmError::PayloadTooLarge {
                    len: payload.len(),
                    max: limits.max_medium,
                });
            }
        }
        Category::Long => {
            if payload.len() > limits.max_long {
                return Err(AmError::PayloadTooLarge {
                    len: payload.len(),
                    max: limits.max_long,
                });
            }
            let seg_len = seg_lens[dst.rank as usize];
            match offset.checked_add(payload.len()) {
                Some(end) if end <= seg_len => {}
                _ => {
                    return Err(AmError::OutOfSegment {
                        dst,
                        offset,
                        len: payload.len(),
                        seg_len,
                    });
                }
            }
        }
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
#[inline]
fn check_msg(
    shared: &Shared,
    registered: &Bitset,
    limits: &[Limits],
    min_handler: HandlerIndex,
    dst: EpAddr,
    category: Category,
    handler: HandlerIndex,
    args: &[u32],
    payload: &[u8],
    offset: usize,
) -> Result<(), AmError> {
    let size = shared.size;
    if dst.rank >= size {
        return Err(AmError::BadRank {
            rank: dst.rank,
            size,
        });
    }
    let eps = shared.layout.eps[dst.rank as usize];
    if dst.ep >= eps {
        return Err(AmError::BadEndpoint { dst, eps });
    }
    check_body(
        &limits[dst.rank as usize],
        registered,
        min_handler,
        dst,
        category,
        handler,
        args,
        payload,
        offset,
        &shared.layout.seg_len,
    )
}

/// An endpoint: an injection and completion domain with its own handler table and
/// segment. `Send` but not `Sync`: one thread drives it at a time, so its injection
/// path takes no lock. Threads that communicate concurrently each take their own
/// endpoint from the [`Client`](crate::Client).
///
/// Sharing one endpoint between threads does not compile:
/// ```compile_fail
/// fn shared<T: Sync>() {}
/// shared::<gex_core::Endpoint<gex_core::loopback::Loopback>>();
/// ```
/// while moving it to another thread does:
/// ```
/// fn sent<T: Send>() {}
/// sent::<gex_core::Endpoint<gex_core::loopback::Loopback>>();
/// ```
///
/// ```
/// use gex_core::{Am, Token};
/// # use gex_core::testing::Loopback;
/// # let client = gex_core::ClientBuilder::new().segment_size(4096)
/// #     .init::<Loopback>(Box::new(gex_core::boot::Singleton::new())).unwrap();
/// let mut ep = client.endpoint(0).unwrap();
/// let hits = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
/// let h = hits.clone();
/// ep.register(200, move |t: &mut Token<'_>, am: Am<'_>| {
///     h.fetch_add(am.args()[0], std::sync::atomic::Ordering::Relaxed);
///     t.reply_short(201, &[]).unwrap();
/// }).unwrap();
/// ep.register(201, |_: &mut Token<'_>, _: Am<'_>| {}).unwrap();
/// ep.request_short(ep.addr(), 200, &[5], gex_core::Flags::empty()).unwrap();
/// ep.wait_until(|| hits.load(std::sync::atomic::Ordering::Relaxed) == 5);
/// ```
pub struct Endpoint<C: Conduit> {
    cep: C::Ep,
    handlers: Vec<Option<Handler>>,
    registered: Bitset,
    core: CoreState,
    stats: EpStats,
    /// Limits for messages to each rank (the conduit's per-peer answer, cached).
    limits: Vec<Limits>,
    policy: WaitPolicy,
    /// Yields between spinning and sleeping under spin-then-block (`GEX_YIELDS`).
    yields: u32,
    me: EpAddr,
    bounce: Vec<u8>,
    shared: Arc<Shared>,
    _conduit: Arc<C>,
    _not_sync: PhantomData<std::cell::Cell<()>>,
}

impl<C: Conduit> std::fmt::Debug for Endpoint<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("conduit", &C::NAME)
            .field("addr", &self.me)
            .field("policy", &self.policy)
            .finish()
    }
}

struct Dispatch<'e> {
    handlers: &'e mut [Option<Handler>],
    registered: &'e Bitset,
    core: &'e mut CoreState,
    stats: &'e mut EpStats,
    shared: &'e Shared,
    limits: &'e [Limits],
    me: EpAddr,
    /// This endpoint's segment (Long payloads land in it).
    seg: (NonNull<u8>, usize),
}

impl Deliver for Dispatch<'_> {
    #[inline]
    fn deliver(&mut self, m: &Incoming<'_>, tx: &mut dyn ReplyTx) {
        self.stats.received[m.src.rank as usize] += 1;
        am_trace!("deliver", m.src, m.handler, m.category, m.payload.len());
        if m.handler < CORE_HANDLERS {
            return self.core_handler(m);
        }
        match self.handlers[m.handler as usize].as_mut() {
            Some(h) => {
                let mut t = Token {
                    tx,
                    src: m.src,
                    kind: m.kind,
                    replied: false,
                    shared: self.shared,
                    registered: self.registered,
                    limits: self.limits,
                    min_handler: if m.handler < FIRST_CLIENT_HANDLER {
                        CORE_HANDLERS
                    } else {
                        FIRST_CLIENT_HANDLER
                    },
                };
                let payload: &[u8] = if m.category == Category::Long {
                    let (base, seg_len) = self.seg;
                    assert!(
                        m.offset.checked_add(m.len).is_some_and(|e| e <= seg_len),
                        "gex: {} received a Long from {} outside its segment",
                        self.me,
                        m.src
                    );
                    // SAFETY: in bounds of this endpoint's segment (checked above), which
                    // the conduit keeps mapped for its life.
                    unsafe { std::slice::from_raw_parts(base.as_ptr().add(m.offset), m.len) }
                } else {
                    m.payload
                };
                let am = Am {
                    src: m.src,
                    category: m.category,
                    kind: m.kind,
                    args: m.args,
                    payload,
                    offset: m.offset,
                };
                h(&mut t, am);
                if t.replied {
                    self.stats.sent[m.src.rank as usize] += 1;
                }
            }
            None => panic!(
                "gex: {} received an AM for unregistered handler {} from {} \
                 (handler tables must be identical on every rank)",
                self.me, m.handler, m.src
            ),
        }
    }
}

impl Dispatch<'_> {
    #[cold]
    fn core_handler(&mut self, m: &Incoming<'_>) {
        match m.handler {
            H_BARRIER if m.args.len() == 2 && (m.args[1] as usize) < 32 => {
                let parity = (m.args[0] & 1) as usize;
                let round = m.args[1] as usize;
                self.core.arrivals[parity][round] += 1;
            }
            h => panic!(
                "gex: {} received an AM for unknown core handler {h} from {}",
                self.me, m.src
            ),
        }
    }
}

/// Idle polls after which a spinning wait starts yielding now and then (about a few
/// hundred microseconds of fruitless spinning).
const SPIN_YIELD_AFTER: u32 = 1 << 14;

/// How long a single wait may last before gex prints the endpoint's counters once.
const STALL_REPORT: Duration = Duration::from_secs(60);

impl<C: Conduit> Endpoint<C> {
    pub(crate) fn new(
        cep: C::Ep,
        shared: Arc<Shared>,
        conduit: Arc<C>,
        policy: WaitPolicy,
    ) -> Self {
        let me = EpAddr::new(shared.rank, cep.index());
        let limits = (0..shared.size)
            .map(|r| cep.limits(EpAddr::rank(r)))
            .collect();
        let n = shared.size as usize;
        let mut registered = Bitset::default();
        registered.set(H_BARRIER);
        Endpoint {
            cep,
            handlers: (0..256).map(|_| None).collect(),
            registered,
            core: CoreState::default(),
            stats: EpStats {
                sent: vec![0; n],
                received: vec![0; n],
            },
            limits,
            policy,
            yields: shared.yields,
            me,
            bounce: Vec::new(),
            shared,
            _conduit: conduit,
            _not_sync: PhantomData,
        }
    }

    /// This endpoint's job-wide address.
    pub fn addr(&self) -> EpAddr {
        self.me
    }
    /// This endpoint's index.
    pub fn index(&self) -> EpIndex {
        self.me.ep
    }
    /// This rank.
    pub fn rank(&self) -> Rank {
        self.me.rank
    }
    /// Ranks in the job.
    pub fn size(&self) -> u32 {
        self.shared.size
    }
    /// The wait policy blocking calls of this endpoint follow.
    pub fn wait_policy(&self) -> WaitPolicy {
        self.policy
    }
    /// Changes the wait policy of this endpoint.
    pub fn set_wait_policy(&mut self, p: WaitPolicy) {
        self.policy = p;
    }
    /// The conduit's name.
    pub fn conduit_name(&self) -> &'static str {
        C::NAME
    }
    /// The conduit endpoint underneath (for layers built on the SPI, e.g. RMA).
    pub fn conduit_ep(&mut self) -> &mut C::Ep {
        &mut self.cep
    }
    /// Per-peer message counters.
    pub fn stats(&self) -> &EpStats {
        &self.stats
    }

    /// Maximum number of AM arguments.
    pub fn max_args(&self) -> usize {
        self.limits[self.me.rank as usize].max_args
    }
    /// Largest Medium payload to `dst` (requests and replies).
    pub fn max_medium(&self, dst: EpAddr) -> usize {
        self.cep.limits(dst).max_medium
    }
    /// Largest Long payload to `dst` (also bounded by `dst`'s segment).
    pub fn max_long(&self, dst: EpAddr) -> usize {
        let seg = self
            .shared
            .layout
            .seg_len
            .get(dst.rank as usize)
            .copied()
            .unwrap_or(0);
        self.cep.limits(dst).max_long.min(seg)
    }
    /// Segment length of `rank`'s endpoints.
    pub fn segment_len_of(&self, rank: Rank) -> Option<usize> {
        self.shared.layout.seg_len.get(rank as usize).copied()
    }
    /// Host identifier of `rank` from the job layout (equal ids: the same host; `None`
    /// for a rank outside the job). Whether two ranks on one host share memory is the
    /// conduit's answer ([`ConduitEp::peer_segment`](crate::spi::ConduitEp::peer_segment)).
    pub fn host_of(&self, rank: Rank) -> Option<u32> {
        self.shared.layout.host.get(rank as usize).copied()
    }
    /// Number of endpoints `rank` has (`None` for a rank outside the job).
    pub fn endpoints_of(&self, rank: Rank) -> Option<u16> {
        self.shared.layout.eps.get(rank as usize).copied()
    }

    /// Registers a client handler at `index` (`128..=255`). Tables must be identical on
    /// every rank: register the same handlers at the same indices everywhere.
    ///
    /// # Errors
    /// [`RegisterError::Zero`], [`RegisterError::Reserved`], [`RegisterError::AlreadyRegistered`].
    pub fn register<F>(&mut self, index: HandlerIndex, f: F) -> Result<(), RegisterError>
    where
        F: for<'t, 'a> FnMut(&mut Token<'t>, Am<'a>) + Send + 'static,
    {
        if index == 0 {
            return Err(RegisterError::Zero);
        }
        if index < FIRST_CLIENT_HANDLER {
            return Err(RegisterError::Reserved(index));
        }
        self.install(index, Box::new(f))
    }

    /// Registers a handler in the range reserved for gex's own layers (`16..128`).
    /// Not for clients.
    ///
    /// # Errors
    /// As [`register`](Endpoint::register).
    #[doc(hidden)]
    pub fn register_reserved<F>(&mut self, index: HandlerIndex, f: F) -> Result<(), RegisterError>
    where
        F: for<'t, 'a> FnMut(&mut Token<'t>, Am<'a>) + Send + 'static,
    {
        if !(CORE_HANDLERS..FIRST_CLIENT_HANDLER).contains(&index) {
            return Err(RegisterError::Reserved(index));
        }
        self.install(index, Box::new(f))
    }

    fn install(&mut self, index: HandlerIndex, f: Handler) -> Result<(), RegisterError> {
        if self.registered.get(index) {
            return Err(RegisterError::AlreadyRegistered(index));
        }
        self.handlers[index as usize] = Some(f);
        self.registered.set(index);
        Ok(())
    }

    /// True if a handler is registered at `index`.
    pub fn is_registered(&self, index: HandlerIndex) -> bool {
        self.registered.get(index)
    }

    /// Sends a Short request.
    ///
    /// Without [`Flags::IMMEDIATE`] this polls (runs handlers) until the message can be
    /// injected and returns `Ok(Injected::Sent)`; with it, returns
    /// `Ok(Injected::WouldBlock)` instead of waiting.
    ///
    /// # Errors
    /// [`AmError::BadRank`], [`AmError::BadEndpoint`], [`AmError::TooManyArgs`],
    /// [`AmError::UnregisteredHandler`], [`AmError::Conduit`].
    #[inline]
    pub fn request_short(
        &mut self,
        dst: EpAddr,
        handler: HandlerIndex,
        args: &[u32],
        flags: Flags,
    ) -> Result<Injected, AmError> {
        self.request(
            dst,
            Category::Short,
            handler,
            args,
            &[],
            0,
            flags,
            FIRST_CLIENT_HANDLER,
        )
    }

    /// Sends a request to a handler in the range reserved for gex's layers
    /// (`16..128`, registered with [`register_reserved`](Endpoint::register_reserved)).
    /// Not for clients.
    ///
    /// # Errors
    /// As [`request_long`](Endpoint::request_long).
    #[doc(hidden)]
    #[allow(clippy::too_many_arguments)]
    pub fn request_reserved(
        &mut self,
        dst: EpAddr,
        category: Category,
        handler: HandlerIndex,
        args: &[u32],
        payload: &[u8],
        offset: usize,
        flags: Flags,
    ) -> Result<Injected, AmError> {
        self.request(
            dst,
            category,
            handler,
            args,
            payload,
            offset,
            flags,
            CORE_HANDLERS,
        )
    }

    /// Sends a Medium request. The payload is consumed (copied) before this returns,
    /// so the buffer may be reused at once (synchronous local completion).
    ///
    /// # Errors
    /// As [`request_short`](Endpoint::request_short), plus [`AmError::PayloadTooLarge`].
    #[inline]
    pub fn request_medium(
        &mut self,
        dst: EpAddr,
        handler: HandlerIndex,
        args: &[u32],
        payload: &[u8],
        flags: Flags,
    ) -> Result<Injected, AmError> {
        self.request(
            dst,
            Category::Medium,
            handler,
            args,
            payload,
            0,
            flags,
            FIRST_CLIENT_HANDLER,
        )
    }

    /// Sends a Long request: `payload` is written at `offset` in `dst`'s segment before
    /// the handler runs there. Synchronous local completion.
    ///
    /// # Errors
    /// As [`request_medium`](Endpoint::request_medium), plus [`AmError::OutOfSegment`].
    #[inline]
    #[allow(clippy::too_many_arguments)]
    pub fn request_long(
        &mut self,
        dst: EpAddr,
        handler: HandlerIndex,
        args: &[u32],
        payload: &[u8],
        offset: usize,
        flags: Flags,
    ) -> Result<Injected, AmError> {
        self.request(
            dst,
            Category::Long,
            handler,
            args,
            payload,
            offset,
            flags,
            FIRST_CLIENT_HANDLER,
        )
    }

    /// Sends a Medium request from an owned buffer without waiting for local completion:
    /// the returned event gives the buffer back once the conduit no longer reads it
    /// (at once on conduits that copy at injection; later on conduits that send from the
    /// buffer). Drive it with [`lc_test`](Endpoint::lc_test) or
    /// [`lc_wait`](Endpoint::lc_wait).
    ///
    /// # Errors
    /// As [`request_medium`](Endpoint::request_medium) (never `WouldBlock`).
    pub fn request_medium_lc(
        &mut self,
        dst: EpAddr,
        handler: HandlerIndex,
        args: &[u32],
        payload: Vec<u8>,
    ) -> Result<LcEvent, AmError> {
        self.request_owned(dst, Category::Medium, handler, args, payload, 0)
    }

    /// Like [`request_medium_lc`](Endpoint::request_medium_lc) for a Long request
    /// landing at `offset` in `dst`'s segment.
    ///
    /// # Errors
    /// As [`request_long`](Endpoint::request_long) (never `WouldBlock`).
    pub fn request_long_lc(
        &mut self,
        dst: EpAddr,
        handler: HandlerIndex,
        args: &[u32],
        payload: Vec<u8>,
        offset: usize,
    ) -> Result<LcEvent, AmError> {
        self.request_owned(dst, Category::Long, handler, args, payload, offset)
    }

    fn request_owned(
        &mut self,
        dst: EpAddr,
        category: Category,
        handler: HandlerIndex,
        args: &[u32],
        mut payload: Vec<u8>,
        offset: usize,
    ) -> Result<LcEvent, AmError> {
        let min_handler = FIRST_CLIENT_HANDLER;
        check_msg(
            &self.shared,
            &self.registered,
            &self.limits,
            min_handler,
            dst,
            category,
            handler,
            args,
            &payload,
            offset,
        )?;
        let mut spins = 0u32;
        loop {
            let msg = OwnedMsg::new(dst, handler, category, args, payload, offset);
            match self.cep.inject_owned(msg, false)? {
                OwnedInjected::Done(buf) => {
                    self.stats.sent[dst.rank as usize] += 1;
                    am_trace!("request", dst, handler, category, buf.len());
                    return Ok(LcEvent {
                        state: LcState::Done(buf),
                    });
                }
                OwnedInjected::Pending(ticket) => {
                    self.stats.sent[dst.rank as usize] += 1;
                    am_trace!("request", dst, handler, category, 0usize);
                    return Ok(LcEvent {
                        state: LcState::Pending(ticket),
                    });
                }
                OwnedInjected::WouldBlock(buf) => {
                    payload = buf;
                    self.poll();
                    self.backoff(&mut spins);
                }
            }
        }
    }

    /// True once `ev`'s payload buffer is free (polls the conduit's completions, not
    /// handlers).
    pub fn lc_test(&mut self, ev: &mut LcEvent) -> bool {
        if let LcState::Pending(t) = ev.state {
            if let Some(buf) = self.cep.lc_test(t) {
                ev.state = LcState::Done(buf);
            }
        }
        matches!(ev.state, LcState::Done(_))
    }

    /// Waits (polling, so handlers run) until `ev` is locally complete and returns its
    /// buffer.
    pub fn lc_wait(&mut self, mut ev: LcEvent) -> Vec<u8> {
        let mut spins = 0u32;
        while !self.lc_test(&mut ev) {
            self.poll();
            self.idle(&mut spins);
        }
        match std::mem::replace(&mut ev.state, LcState::Taken) {
            LcState::Done(b) => b,
            _ => unreachable!("tested complete"),
        }
    }

    #[inline]
    #[allow(clippy::too_many_arguments)]
    fn request(
        &mut self,
        dst: EpAddr,
        category: Category,
        handler: HandlerIndex,
        args: &[u32],
        payload: &[u8],
        offset: usize,
        flags: Flags,
        min_handler: HandlerIndex,
    ) -> Result<Injected, AmError> {
        check_msg(
            &self.shared,
            &self.registered,
            &self.limits,
            min_handler,
            dst,
            category,
            handler,
            args,
            payload,
            offset,
        )?;
        let msg = OutMsg::new(dst, handler, Kind::Request, category, args, payload, offset);
        let imm = flags.contains(Flags::IMMEDIATE);
        let mut spins = 0u32;
        loop {
            match self.cep.inject(&msg, imm)? {
                Injected::Sent => {
                    self.stats.sent[dst.rank as usize] += 1;
                    am_trace!("request", dst, handler, category, payload.len());
                    return Ok(Injected::Sent);
                }
                Injected::WouldBlock if imm => return Ok(Injected::WouldBlock),
                Injected::WouldBlock => {
                    self.poll();
                    self.backoff(&mut spins);
                }
            }
        }
    }

    /// Reserves a buffer of `max_len` bytes for a Medium request built in place
    /// (negotiated payload). Returns `Ok(None)` only with [`Flags::IMMEDIATE`] when
    /// resources are lacking. The buffer is sent by [`Prepared::commit`]; dropping the
    /// `Prepared` sends nothing.
    ///
    /// # Errors
    /// [`AmError::BadRank`], [`AmError::BadEndpoint`], [`AmError::PayloadTooLarge`],
    /// [`AmError::Conduit`].
    pub fn prepare_request_medium(
        &mut self,
        dst: EpAddr,
        max_len: usize,
        flags: Flags,
    ) -> Result<Option<Prepared<'_, C>>, AmError> {
        self.prepare(dst, Category::Medium, max_len, 0, flags)
    }

    /// Like [`prepare_request_medium`](Endpoint::prepare_request_medium) for a Long
    /// request whose payload lands at `offset` in `dst`'s segment.
    ///
    /// The buffer may be the destination range itself (conduits with shared memory
    /// build the payload in place), so a dropped `Prepared` sends no message but may
    /// have written `[offset, offset + max_len)` of the destination segment.
    ///
    /// # Errors
    /// As [`prepare_request_medium`](Endpoint::prepare_request_medium), plus
    /// [`AmError::OutOfSegment`].
    pub fn prepare_request_long(
        &mut self,
        dst: EpAddr,
        max_len: usize,
        offset: usize,
        flags: Flags,
    ) -> Result<Option<Prepared<'_, C>>, AmError> {
        self.prepare(dst, Category::Long, max_len, offset, flags)
    }

    fn prepare(
        &mut self,
        dst: EpAddr,
        category: Category,
        max_len: usize,
        offset: usize,
        flags: Flags,
    ) -> Result<Option<Prepared<'_, C>>, AmError> {
        // Validate the shape now; handler and args are checked at commit.
        let size = self.shared.size;
        if dst.rank >= size {
            return Err(AmError::BadRank {
                rank: dst.rank,
                size,
            });
        }
        let eps = self.shared.layout.eps[dst.rank as usize];
        if dst.ep >= eps {
            return Err(AmError::BadEndpoint { dst, eps });
        }
        let max = match category {
            Category::Medium => self.cep.limits(dst).max_medium,
            _ => self.cep.limits(dst).max_long,
        };
        if max_len > max {
            return Err(AmError::PayloadTooLarge { len: max_len, max });
        }
        if category == Category::Long {
            let seg_len = self.shared.layout.seg_len[dst.rank as usize];
            if offset.checked_add(max_len).is_none_or(|e| e > seg_len) {
                return Err(AmError::OutOfSegment {
                    dst,
                    offset,
                    len: max_len,
                    seg_len,
                });
            }
        }
        let imm = flags.contains(Flags::IMMEDIATE);
        loop {
            let req = PrepareReq::new(dst, category, max_len, offset);
            match self.cep.prepare(&req, imm)? {
                Prepare::InPlace(buf) => {
                    debug_assert!(buf.len() >= max_len);
                    return Ok(Some(Prepared {
                        ep: self,
                        dst,
                        category,
                        offset,
                        buf: Some(buf),
                        len: max_len,
                    }));
                }
                Prepare::WouldBlock => {
                    if imm {
                        return Ok(None);
                    }
                    self.poll();
                }
                Prepare::Bounce => {
                    self.bounce.clear();
                    self.bounce.resize(max_len, 0);
                    return Ok(Some(Prepared {
                        ep: self,
                        dst,
                        category,
                        offset,
                        buf: None,
                        len: max_len,
                    }));
                }
            }
        }
    }

    /// Runs handlers for incoming messages on this endpoint. Returns how many ran.
    #[inline]
    pub fn poll(&mut self) -> usize {
        let mut d = Dispatch {
            handlers: &mut self.handlers,
            registered: &self.registered,
            core: &mut self.core,
            stats: &mut self.stats,
            shared: &self.shared,
            limits: &self.limits,
            me: self.me,
            seg: self.cep.local_segment(),
        };
        self.cep.poll(&mut d, 64)
    }

    /// Polls until `cond` returns true, following this endpoint's wait policy: spin,
    /// block in the kernel, or spin then block. `cond` is evaluated after each poll, so
    /// it should depend on state that handlers change.
    pub fn wait_until(&mut self, mut cond: impl FnMut() -> bool) {
        let mut spins: u32 = 0;
        let mut checks: u32 = 0;
        let mut started: Option<Instant> = None;
        loop {
            self.poll();
            if cond() {
                return;
            }
            self.idle(&mut spins);
            checks = checks.wrapping_add(1);
            if checks & 0xffff == 0 {
                let t0 = *started.get_or_insert_with(Instant::now);
                if t0.elapsed() > STALL_REPORT {
                    eprintln!(
                        "gex: {} has waited {:?} without progress; counters: {:?}",
                        self.me,
                        t0.elapsed(),
                        self.stats
                    );
                    started = Some(Instant::now());
                }
            }
        }
    }

    /// A dissemination barrier over core AMs among the endpoints with this endpoint's
    /// index on every rank (for the primordial team: EP 0 everywhere). Polls while it
    /// waits, so AM traffic keeps flowing.
    ///
    /// # Errors
    /// [`AmError::Conduit`] if the network failed; [`AmError::BadEndpoint`] if some
    /// rank lacks this endpoint index.
    pub fn barrier(&mut self) -> Result<(), AmError> {
        let n = self.shared.size;
        let epoch = self.core.barrier_epoch;
        self.core.barrier_epoch += 1;
        let parity = (epoch & 1) as usize;
        let mut round = 0u32;
        let mut dist = 1u32;
        let mut spins = 0u32;
        while dist < n {
            let to = EpAddr::new((self.me.rank + dist) % n, self.me.ep);
            let args = [epoch as u32, round];
            let _sent = self.request(
                to,
                Category::Short,
                H_BARRIER,
                &args,
                &[],
                0,
                Flags::empty(),
                H_BARRIER,
            )?;
            let r = round as usize;
            // Wait for the message of this round from rank - dist.
            loop {
                self.poll();
                if self.core.arrivals[parity][r] > 0 {
                    self.core.arrivals[parity][r] -= 1;
                    break;
                }
                self.idle(&mut spins);
            }
            round += 1;
            dist <<= 1;
        }
        Ok(())
    }

    /// One step of waiting for send resources: the peer that frees them does not wake
    /// us, so instead of sleeping, yield the core (once the spin budget is used up) to
    /// let it run when ranks outnumber cores.
    #[inline]
    fn backoff(&mut self, spins: &mut u32) {
        let yield_now = match self.policy {
            WaitPolicy::Spin => false,
            WaitPolicy::Block => true,
            WaitPolicy::SpinThenBlock { spins: budget } => *spins >= budget,
        };
        if yield_now {
            std::thread::yield_now();
        } else {
            *spins = spins.saturating_add(1);
            gex_sync::hint::spin_loop();
        }
    }

    /// One step of waiting under the wait policy: spin, or sleep in the conduit until a
    /// message may have arrived once the spin budget (`spins`) is used up.
    #[inline]
    fn idle(&mut self, spins: &mut u32) {
        match self.policy {
            WaitPolicy::Spin => {
                // A poll is itself a read of the rings; pausing after every one adds
                // tens of nanoseconds to the time a message waits to be noticed.
                *spins = spins.saturating_add(1);
                if *spins & 3 == 0 {
                    gex_sync::hint::spin_loop();
                }
                if *spins >= SPIN_YIELD_AFTER && *spins & 255 == 0 {
                    // Long without a message: the peer may share our core (other load
                    // on the machine); let it run instead of burning a timeslice.
                    std::thread::yield_now();
                }
            }
            WaitPolicy::Block => self.cep.block(Duration::from_millis(10)),
            WaitPolicy::SpinThenBlock { spins: budget } => {
                let n = *spins;
                *spins = n.saturating_add(1);
                if n < budget {
                    gex_sync::hint::spin_loop();
                } else if n < budget.saturating_add(self.yields) {
                    // Oversubscribed: hand the core to a runnable rank (likely the peer
                    // we wait for) before paying for a sleep and a wake-up.
                    std::thread::yield_now();
                } else {
                    self.cep.block(Duration::from_millis(10));
                }
            }
        }
    }

    /// A view of this endpoint's segment.
    pub fn segment(&self) -> Segment<'_> {
        let (base, len) = self.cep.local_segment();
        Segment {
            base,
            len,
            me: self.me,
            _ep: PhantomData,
        }
    }
}

/// A local-completion event for a payload sent from an owned buffer
/// ([`Endpoint::request_medium_lc`]). It owns the buffer (or the conduit's claim on
/// it), so the buffer cannot be touched while the conduit may still read it.
#[derive(Debug)]
#[must_use = "the payload buffer comes back through Endpoint::lc_wait"]
pub struct LcEvent {
    state: LcState,
}

#[derive(Debug)]
enum LcState {
    Done(Vec<u8>),
    Pending(u64),
    Taken,
}

impl LcEvent {
    /// True if local completion is already known (without polling).
    pub fn is_complete(&self) -> bool {
        matches!(self.state, LcState::Done(_))
    }
}

/// A negotiated-payload message being built in place; see
/// [`Endpoint::prepare_request_medium`].
pub struct Prepared<'e, C: Conduit> {
    ep: &'e mut Endpoint<C>,
    dst: EpAddr,
    category: Category,
    offset: usize,
    /// In-place buffer from the conduit, or `None` for the endpoint's bounce buffer.
    buf: Option<NonNull<[u8]>>,
    len: usize,
}

impl<C: Conduit> std::fmt::Debug for Prepared<'_, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared")
            .field("dst", &self.dst)
            .field("len", &self.len)
            .field("in_place", &self.buf.is_some())
            .finish()
    }
}

impl<C: Conduit> Prepared<'_, C> {
    /// True if the buffer is the conduit's own (built in place, no copy at commit);
    /// false for the endpoint's bounce buffer.
    pub fn in_place(&self) -> bool {
        self.buf.is_some()
    }

    /// The buffer to fill (exactly the length prepared).
    pub fn buffer(&mut self) -> &mut [u8] {
        match self.buf {
            // SAFETY: the conduit guarantees the prepared memory is valid, writable and
            // not aliased until commit/cancel; `self` borrows the endpoint mutably, so no
            // conduit call can intervene, and the returned borrow is tied to `&mut self`.
            Some(p) => unsafe { std::slice::from_raw_parts_mut(p.as_ptr().cast::<u8>(), self.len) },
            None => &mut self.ep.bounce[..self.len],
        }
    }

    /// Sends the first `len` bytes of the buffer with `handler` and `args`.
    ///
    /// # Errors
    /// [`AmError::CommitTooLarge`], [`AmError::TooManyArgs`],
    /// [`AmError::UnregisteredHandler`], [`AmError::Conduit`]. On error nothing is sent.
    pub fn commit(
        mut self,
        handler: HandlerIndex,
        args: &[u32],
        len: usize,
    ) -> Result<(), AmError> {
        if len > self.len {
            return Err(AmError::CommitTooLarge {
                len,
                prepared: self.len,
            });
        }
        let ep = &mut *self.ep;
        match self.buf.take() {
            Some(p) => {
                // SAFETY: as in `buffer`; the slice is only read by the conduit's commit.
                let payload = unsafe {
                    std::slice::from_raw_parts(p.as_ptr().cast::<u8>().cast_const(), len)
                };
                if let Err(e) = check_msg(
                    &ep.shared,
                    &ep.registered,
                    &ep.limits,
                    FIRST_CLIENT_HANDLER,
                    self.dst,
                    self.category,
                    handler,
                    args,
                    payload,
                    self.offset,
                ) {
                    ep.cep.cancel();
                    return Err(e);
                }
                let msg = OutMsg::new(
                    self.dst,
                    handler,
                    Kind::Request,
                    self.category,
                    args,
                    payload,
                    self.offset,
                );
                ep.cep.commit(&msg)?;
                ep.stats.sent[self.dst.rank as usize] += 1;
                Ok(())
            }
            None => {
                let payload = std::mem::take(&mut ep.bounce);
                // The bounce path waits for resources even after an IMMEDIATE prepare:
                // the caller has already built the payload.
                let r = ep.request(
                    self.dst,
                    self.category,
                    handler,
                    args,
                    &payload[..len],
                    self.offset,
                    Flags::empty(),
                    FIRST_CLIENT_HANDLER,
                );
                ep.bounce = payload;
                r.map(|_| ())
            }
        }
    }
}

impl<C: Conduit> Drop for Prepared<'_, C> {
    fn drop(&mut self) {
        if self.buf.take().is_some() {
            self.ep.cep.cancel();
        }
    }
}

/// A view of an endpoint's segment: registered memory that peers write with Long AMs
/// (and, later, RMA). The memory is shared with other ranks, so the safe accessors copy
/// through raw pointers.
#[derive(Debug, Clone, Copy)]
pub struct Segment<'e> {
    base: NonNull<u8>,
    len: usize,
    me: EpAddr,
    _ep: PhantomData<&'e ()>,
}

impl Segment<'_> {
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }
    /// True for an empty segment.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Base address.
    pub fn as_ptr(&self) -> *mut u8 {
        self.base.as_ptr()
    }
    fn check(&self, offset: usize, len: usize) -> Result<(), AmError> {
        match offset.checked_add(len) {
            Some(e) if e <= self.len => Ok(()),
            _ => Err(AmError::OutOfSegment {
                dst: self.me,
                offset,
                len,
                seg_len: self.len,
            }),
        }
    }
    /// Copies `out.len()` bytes at `offset` into `out`.
    ///
    /// # Errors
    /// [`AmError::OutOfSegment`] if the range is not inside the segment.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), AmError> {
        self.check(offset, out.len())?;
        // SAFETY: the range is inside the mapped segment (checked above); `out` is a
        // distinct local buffer, so the regions do not overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.base.as_ptr().add(offset),
                out.as_mut_ptr(),
                out.len(),
            )
        };
        Ok(())
    }
    /// Copies `data` into the segment at `offset`.
    ///
    /// # Errors
    /// [`AmError::OutOfSegment`] if the range is not inside the segment.
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<(), AmError> {
        self.check(offset, data.len())?;
        // SAFETY: as in `read`, with the roles of source and destination swapped.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.base.as_ptr().add(offset), data.len())
        };
        Ok(())
    }
    /// The segment as a slice.
    ///
    /// # Safety
    /// No other rank (or thread) may write the segment while the slice is alive; gex
    /// cannot know what peers do with one-sided operations.
    pub unsafe fn as_slice(&self) -> &[u8] {
        // SAFETY: mapped for the life of the conduit; the caller rules out writers.
        unsafe { std::slice::from_raw_parts(self.base.as_ptr(), self.len) }
    }
}
