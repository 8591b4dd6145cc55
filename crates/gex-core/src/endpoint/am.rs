//! Active messages: handlers and their registration, tokens, the message view handlers
//! get, what a message sends ([`Body`]), validation, and injection (blocking, `try_*`,
//! owned payloads, payloads built in place).
//!
//! # Entry points
//! Every send names its destination, its handler and a [`Body`] (category, arguments,
//! payload): [`Endpoint::request`] (waits under back-pressure),
//! [`Endpoint::try_request`] (back-pressure as [`Injected::WouldBlock`]),
//! [`Endpoint::request_owned`] (an owned buffer whose local completion may be deferred),
//! [`Endpoint::request_with`] / [`Endpoint::try_request_with`] (the payload built in
//! place by a closure) and [`Token::reply`]. A `Body` is a small `Copy` value whose
//! category is a constant at the call site: the entry points are `#[inline]` and match
//! on it, so a Short request compiles to the code the category-specific methods of
//! earlier versions did.
//!
//! In-place building takes a closure, not a prepared value the program holds: a value
//! between the conduit's reservation and its send could be leaked (`mem::forget`) or
//! kept while other calls reach the conduit, which the conduit contract forbids; a
//! closure runs inside the one call that reserves and sends, so the rule holds by
//! construction, a panic in it cancels the reservation, and nothing stays borrowed after
//! a `WouldBlock`, so a retry loop is plain code.
//!
//! # Safety
//! - [`LongPayload`] reads a Long payload in this endpoint's segment, which the conduit
//!   keeps mapped for its life (the endpoint holds the conduit) and which other ranks
//!   may write at any time: the safe reads copy with relaxed atomics
//!   ([`gex_sync::copy`]); the slice view is `unsafe` with that rule written down.
//! - `Prepared` turns a conduit's negotiated-payload buffer for a Medium request into
//!   a slice: the conduit promises it stays valid and unaliased until
//!   `commit`/`cancel`, and `Prepared` exists only inside one call of
//!   `request_with`/`try_request_with` (never handed to the program, so it cannot
//!   be leaked) holding the endpoint's state exclusively, so no other conduit call can
//!   happen in between. A Long request's in-place buffer may be the destination range
//!   of a segment (shared-memory conduits), which other ranks write at any time: it is
//!   cancelled, never made a slice, and the payload is built in the endpoint's bounce
//!   buffer instead.
#![allow(unsafe_code)]

use super::dispatch::Clients;
use super::{Core, Endpoint, Guard, Inner, OWN_CLIENT, OWN_NONE};
use crate::client::Shared;
use crate::error::{AmError, RegisterError};
use crate::event::{Data, Event, Mode, finish_bytes};
use crate::spi::{
    Conduit, ConduitEp, ConduitError, Limits, OutMsg, OwnedInjected, OwnedMsg, Prepare, PrepareReq,
    ReplyTx,
};
use crate::types::{
    Category, EpAddr, FIRST_CLIENT_HANDLER, HandlerId, HandlerIndex, Injected, Kind,
};
use std::marker::PhantomData;
use std::ptr::NonNull;

/// A registered client handler. It receives a [`Token`] (source, reply right) and the
/// message ([`Am`]). Handlers must not block or poll; they run on the thread that
/// polls the endpoint (or on its progress thread).
pub type Handler = Box<dyn for<'t, 'a> FnMut(&mut Token<'t>, Am<'a>) + Send>;

/// What an active message sends: its category, its 32-bit arguments, its payload and,
/// for a Long, where the payload lands in the destination's segment. Made by
/// [`short`](Body::short), [`medium`](Body::medium) or [`long`](Body::long) and handed
/// to [`Endpoint::request`], [`Endpoint::try_request`] or [`Token::reply`].
///
/// These, with [`Endpoint::request_owned`] and [`Endpoint::request_with`] /
/// [`Endpoint::try_request_with`], are every way to send an AM. A body is a small `Copy`
/// value whose category is a constant at the call site; the entry points are
/// `#[inline]` and match on it, so each call compiles to the path a per-category method
/// would.
///
/// The payload type `P` says how the payload is given: borrowed bytes (`&[u8]`, the
/// default) for the copying sends; an owned `Vec<u8>` for [`Endpoint::request_owned`];
/// a capacity in bytes (`usize`) for [`Endpoint::request_with`], whose closure writes
/// the payload. Made at the call site, a body takes any payload that coerces to the
/// expected type (`&vec`, `b"..."`, `&[]`).
///
/// ```
/// # use gex_core::{boot::Singleton, loopback::Loopback, Am, Body, ClientBuilder, Token};
/// # let client = ClientBuilder::new().segment_size(4096).init::<Loopback>(Box::new(Singleton::new()))?;
/// # let mut ep = client.endpoint(0)?;
/// let h = ep.register(|_t: &mut Token<'_>, am: Am<'_>| assert_eq!(am.args(), [7]))?;
/// let me = ep.addr();
/// ep.request(me, h, Body::short(&[7]))?;
/// ep.request(me, h, Body::medium(&[7], b"hello"))?;
/// ep.request(me, h, Body::long(&[7], b"hello", 128))?; // lands at offset 128
/// # ep.poll();
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Body<'a, P = &'a [u8]> {
    pub(super) category: Category,
    pub(super) args: &'a [u32],
    pub(super) payload: P,
    pub(super) offset: usize,
}

impl<'a> Body<'a> {
    /// A Short message: arguments only.
    #[inline]
    pub const fn short(args: &'a [u32]) -> Self {
        Body {
            category: Category::Short,
            args,
            payload: &[],
            offset: 0,
        }
    }
}

impl<'a, P> Body<'a, P> {
    /// A Medium message: the payload is delivered in a temporary buffer of the
    /// destination's handler.
    #[inline]
    pub const fn medium(args: &'a [u32], payload: P) -> Self {
        Body {
            category: Category::Medium,
            args,
            payload,
            offset: 0,
        }
    }
    /// A Long message: the payload is written at `offset` in the destination's segment
    /// before its handler runs.
    #[inline]
    pub const fn long(args: &'a [u32], payload: P, offset: usize) -> Self {
        Body {
            category: Category::Long,
            args,
            payload,
            offset,
        }
    }
    /// Short, Medium or Long.
    #[inline]
    pub fn category(&self) -> Category {
        self.category
    }
    /// The 32-bit arguments.
    #[inline]
    pub fn args(&self) -> &'a [u32] {
        self.args
    }
    /// The payload as given.
    #[inline]
    pub fn payload(&self) -> &P {
        &self.payload
    }
    /// Long: where the payload lands in the destination's segment (0 otherwise).
    #[inline]
    pub fn offset(&self) -> usize {
        self.offset
    }
    /// A body of any category (the offset is ignored but by a Long).
    #[inline]
    pub(crate) const fn of(category: Category, args: &'a [u32], payload: P, offset: usize) -> Self {
        Body {
            category,
            args,
            payload,
            offset,
        }
    }
    /// The same category, arguments and offset with another payload.
    #[inline]
    pub(crate) fn with_payload<Q>(&self, payload: Q) -> Body<'a, Q> {
        Body {
            category: self.category,
            args: self.args,
            payload,
            offset: self.offset,
        }
    }
}

impl<'a, P: AsRef<[u8]>> Body<'a, P> {
    /// The body with its payload as a byte slice.
    #[inline]
    pub(crate) fn bytes(&self) -> Body<'_, &[u8]> {
        self.with_payload(self.payload.as_ref())
    }
}

/// The message a handler receives.
#[derive(Clone, Copy, Debug)]
pub struct Am<'a> {
    pub(crate) src: EpAddr,
    pub(crate) category: Category,
    pub(crate) kind: Kind,
    pub(crate) args: &'a [u32],
    pub(crate) payload: &'a [u8],
    pub(crate) long: Option<LongPayload<'a>>,
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
    /// A Medium payload: a temporary buffer valid during the handler, written by
    /// nobody else meanwhile. Empty for Short and Long (see [`long`](Self::long)).
    pub fn payload(&self) -> &'a [u8] {
        self.payload
    }
    /// Payload length: a Medium's or a Long's (0 for Short).
    pub fn len(&self) -> usize {
        match self.long {
            Some(l) => l.len,
            None => self.payload.len(),
        }
    }
    /// True if there is no payload.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// A Long payload: where it landed in this endpoint's segment, and reads of it.
    pub fn long(&self) -> Option<LongPayload<'a>> {
        self.long
    }
    /// Long only: where the payload was written in this endpoint's segment (0
    /// otherwise).
    pub fn offset(&self) -> usize {
        self.long.map_or(0, |l| l.offset)
    }
}

/// A Long payload in this endpoint's segment. The bytes were written before the
/// handler ran, but the segment is memory other ranks may write at any time, so the
/// safe reads copy with relaxed atomics (never a data race); the slice view is
/// `unsafe`.
#[derive(Clone, Copy, Debug)]
pub struct LongPayload<'a> {
    base: NonNull<u8>,
    offset: usize,
    len: usize,
    _seg: PhantomData<&'a ()>,
}

impl<'a> LongPayload<'a> {
    /// `len` bytes at `offset` of the segment at `base` (checked in bounds by the
    /// caller).
    pub(crate) fn new(base: NonNull<u8>, offset: usize, len: usize) -> Self {
        LongPayload {
            base,
            offset,
            len,
            _seg: PhantomData,
        }
    }
    /// Offset in this endpoint's segment.
    pub fn offset(&self) -> usize {
        self.offset
    }
    /// Length in bytes.
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> usize {
        self.len
    }
    /// Copies the first `out.len()` bytes (at most [`len`](Self::len)) into `out`;
    /// returns how many were copied.
    pub fn read(&self, out: &mut [u8]) -> usize {
        let n = out.len().min(self.len);
        // SAFETY: in bounds of the mapped segment (checked at delivery); atomic copies
        // are race-free (module `# Safety`).
        unsafe { gex_sync::copy::atomic_read(self.base.as_ptr().add(self.offset), &mut out[..n]) };
        n
    }
    /// The payload as a new vector.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.len];
        self.read(&mut v);
        v
    }
    /// The payload as a slice of segment memory.
    ///
    /// # Safety
    /// Nothing may write these bytes while the slice is alive: no RMA or Long AM from
    /// any rank (nor any thread of this process) may target them. gex cannot know what
    /// peers do, so the program must (e.g. by its protocol: the sender does not touch
    /// the range again before this handler replies). A slice given as the input of a
    /// call that returned an error or unwound keeps this promise longer, as
    /// [`Segment::as_slice`](crate::Segment::as_slice) says.
    pub unsafe fn as_slice(&self) -> &'a [u8] {
        // SAFETY: in bounds and mapped; the caller rules out writers.
        unsafe { std::slice::from_raw_parts(self.base.as_ptr().add(self.offset), self.len) }
    }
}

/// Handed to a handler: who sent the message, and the right to reply at most once
/// (and only from a request handler).
pub struct Token<'t> {
    pub(crate) tx: &'t mut dyn ReplyTx,
    pub(crate) src: EpAddr,
    pub(crate) kind: Kind,
    pub(crate) replied: bool,
    pub(crate) shared: &'t Shared,
    pub(crate) owner: &'t [u8; 256],
    pub(crate) limits: &'t [Limits],
    /// Lowest handler index this handler may reply to (reserved indices only from
    /// handlers that were themselves invoked at a reserved index).
    pub(crate) min_handler: HandlerIndex,
    /// A layer's handler only: the dispatcher's client handler table and panic slot,
    /// for [`deliver_client`](Token::deliver_client) (the lifetime is erased: the
    /// dispatcher outlives the token, see the module's `# Safety`). `None` in a client
    /// handler's token.
    pub(crate) clients: Option<NonNull<Clients<'static>>>,
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
    /// Largest number of arguments of a reply.
    pub fn max_args(&self) -> usize {
        self.limits[self.src.rank as usize].max_args
    }
    /// Largest Medium payload of a reply to the sender.
    pub fn max_reply_medium(&self) -> usize {
        self.limits[self.src.rank as usize].max_medium
    }
    /// Largest Long payload of a reply to the sender (also bounded by its segment).
    pub fn max_reply_long(&self) -> usize {
        let seg = self
            .shared
            .layout
            .seg_len
            .get(self.src.rank as usize)
            .copied()
            .unwrap_or(0);
        self.limits[self.src.rank as usize].max_long.min(seg)
    }
    /// Replies to the sender with `handler` and `body` (Short, Medium or Long). A
    /// payload is copied before this returns; a Long one is written at the body's
    /// offset in the requester's segment.
    ///
    /// ```
    /// # use gex_core::{boot::Singleton, loopback::Loopback, Am, Body, ClientBuilder, Token};
    /// # let client = ClientBuilder::new().init::<Loopback>(Box::new(Singleton::new()))?;
    /// # let mut ep = client.endpoint(0)?;
    /// let done = ep.register(|_t: &mut Token<'_>, am: Am<'_>| assert_eq!(am.payload(), b"hi"))?;
    /// let echo = ep.register(move |t: &mut Token<'_>, am: Am<'_>| {
    ///     t.reply(done, Body::medium(am.args(), am.payload())).unwrap();
    /// })?;
    /// let me = ep.addr();
    /// ep.request(me, echo, Body::medium(&[], b"hi"))?;
    /// # ep.poll();
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`AmError::ReplyFromReply`], [`AmError::AlreadyReplied`], [`AmError::TooManyArgs`],
    /// [`AmError::UnregisteredHandler`], [`AmError::ReservedHandler`],
    /// [`AmError::PayloadTooLarge`] (Medium, Long), [`AmError::OutOfSegment`] (Long),
    /// [`AmError::Conduit`].
    #[inline]
    pub fn reply(&mut self, handler: HandlerId, body: Body<'_>) -> Result<(), AmError> {
        self.reply_body(handler, body)
    }

    fn reply_body(&mut self, handler: HandlerId, body: Body<'_>) -> Result<(), AmError> {
        if self.kind == Kind::Reply {
            return Err(AmError::ReplyFromReply);
        }
        if self.replied {
            return Err(AmError::AlreadyReplied);
        }
        let h = handler.index();
        check_body(
            &self.limits[self.src.rank as usize],
            self.owner,
            self.min_handler,
            self.src,
            h,
            &body,
            &self.shared.layout.seg_len,
        )?;
        let msg = body.out_msg(self.src, h, Kind::Reply);
        self.tx.reply(&msg)?;
        self.replied = true;
        am_trace!("reply", self.src, h, body.category, body.payload.len());
        Ok(())
    }
}

impl<'a> Body<'a> {
    /// The conduit's view of this body sent to `dst` with `handler`.
    #[inline]
    fn out_msg(&self, dst: EpAddr, handler: HandlerIndex, kind: Kind) -> OutMsg<'a> {
        OutMsg::new(dst, handler, kind, *self)
    }
}

/// The checks shared by requests and replies once the destination is known to exist.
#[inline(always)]
pub(crate) fn check_body(
    limits: &Limits,
    owner: &[u8; 256],
    min_handler: HandlerIndex,
    dst: EpAddr,
    handler: HandlerIndex,
    body: &Body<'_>,
    seg_lens: &[usize],
) -> Result<(), AmError> {
    let (args, payload) = (body.args, body.payload);
    if handler != 0 && handler < min_handler {
        return Err(AmError::ReservedHandler(handler));
    }
    if args.len() > limits.max_args {
        return Err(AmError::TooManyArgs {
            given: args.len(),
            max: limits.max_args,
        });
    }
    if handler == 0 || owner[handler as usize] == OWN_NONE {
        return Err(AmError::UnregisteredHandler(handler));
    }
    match body.category {
        Category::Short => {}
        Category::Medium => {
            if payload.len() > limits.max_medium {
                return Err(AmError::PayloadTooLarge {
                    len: payload.len(),
                    max: limits.max_medium,
                });
            }
        }
        Category::Long => check_long(limits, dst, payload.len(), body.offset, seg_lens)?,
    }
    Ok(())
}

#[inline]
fn check_long(
    limits: &Limits,
    dst: EpAddr,
    len: usize,
    offset: usize,
    seg_lens: &[usize],
) -> Result<(), AmError> {
    if len > limits.max_long {
        return Err(AmError::PayloadTooLarge {
            len,
            max: limits.max_long,
        });
    }
    let seg_len = seg_lens[dst.rank as usize];
    match offset.checked_add(len) {
        Some(end) if end <= seg_len => Ok(()),
        _ => Err(AmError::OutOfSegment {
            dst,
            offset,
            len,
            seg_len,
        }),
    }
}

#[inline(always)]
fn check_dst(shared: &Shared, dst: EpAddr) -> Result<(), AmError> {
    let size = shared.size;
    if dst.rank >= size {
        return Err(AmError::BadRank {
            rank: dst.rank,
            size,
        });
    }
    let eps = shared.cap[dst.rank as usize];
    if dst.ep >= eps {
        return Err(AmError::BadEndpoint { dst, eps });
    }
    Ok(())
}

/// Every check of a request.
///
/// Inline into its callers with the checks it makes (and so is `Core::request_msg`):
/// out of line, its arguments went to the stack and its result came back through
/// memory on every request. Measured with callgrind on `gex-perf am --test
/// am_medium_rtt --sizes 32`, the requester's path per round trip went from 560
/// instructions and 114 stores to 525 and 108 (the build before the one
/// validate-then-inject: 518 and 99).
#[inline(always)]
pub(crate) fn check_request(
    shared: &Shared,
    owner: &[u8; 256],
    limits: &[Limits],
    min_handler: HandlerIndex,
    dst: EpAddr,
    handler: HandlerIndex,
    body: &Body<'_>,
) -> Result<(), AmError> {
    check_dst(shared, dst)?;
    check_body(
        &limits[dst.rank as usize],
        owner,
        min_handler,
        dst,
        handler,
        body,
        &shared.layout.seg_len,
    )
}

impl<C: Conduit> Core<C> {
    fn install(&mut self, index: HandlerIndex, f: Handler) -> Result<HandlerId, RegisterError> {
        if index == 0 {
            return Err(RegisterError::Zero);
        }
        if index < FIRST_CLIENT_HANDLER {
            return Err(RegisterError::Reserved(index));
        }
        if self.owner[index as usize] != OWN_NONE {
            return Err(RegisterError::AlreadyRegistered(index));
        }
        self.handlers[index as usize] = Some(f);
        self.owner[index as usize] = OWN_CLIENT;
        Ok(HandlerId::new(index))
    }

    /// Every check of a program's request (to a client handler), nothing sent.
    pub(crate) fn check_client_request(
        &self,
        dst: EpAddr,
        handler: HandlerIndex,
        body: &Body<'_>,
    ) -> Result<(), AmError> {
        check_request(
            &self.shared,
            &self.owner,
            &self.limits,
            FIRST_CLIENT_HANDLER,
            dst,
            handler,
            body,
        )
    }

    /// Validates a request and builds its message: the one check of every request
    /// (the program's, a layer's and the owned-payload form's), `min_handler` telling
    /// which handlers the caller may address.
    #[inline(always)]
    fn request_msg<'a>(
        &self,
        dst: EpAddr,
        handler: HandlerIndex,
        body: Body<'a>,
        min_handler: HandlerIndex,
    ) -> Result<OutMsg<'a>, AmError> {
        check_request(
            &self.shared,
            &self.owner,
            &self.limits,
            min_handler,
            dst,
            handler,
            &body,
        )?;
        Ok(body.out_msg(dst, handler, Kind::Request))
    }

    /// One injection attempt of a validated request; a sent one is counted (the
    /// endpoint's statistics, the core-sharing interval) and traced (`trace-am`).
    /// `imm`: the conduit may not wait for resources it is still looking up.
    #[inline(always)]
    fn inject_msg(&mut self, msg: &OutMsg<'_>, imm: bool) -> Result<Injected, AmError> {
        let r = self.cep.inject(msg, imm)?;
        if r.is_sent() {
            self.share.sent();
            self.stats.sent[msg.dst().rank as usize] += 1;
            am_trace!(
                "request",
                msg.dst(),
                msg.handler(),
                msg.category(),
                msg.payload().len()
            );
        }
        Ok(r)
    }

    /// Validates and injects a request once, without waiting: `WouldBlock` when the
    /// conduit lacks resources (nothing sent). The program's `try_request*` calls pass
    /// `imm` true; a layer's (`Cx::try_request`) false.
    #[inline]
    pub(crate) fn try_inject(
        &mut self,
        dst: EpAddr,
        handler: HandlerIndex,
        body: Body<'_>,
        min_handler: HandlerIndex,
        imm: bool,
    ) -> Result<Injected, AmError> {
        let msg = self.request_msg(dst, handler, body, min_handler)?;
        self.inject_msg(&msg, imm)
    }
}

impl<C: Conduit> Inner<C> {
    /// Injects a validated request, polling (so handlers run) while the conduit lacks
    /// resources. `Ok(true)` if it polled: a handler's panic may be pending, which the
    /// public caller raises once the payload is copied.
    #[inline]
    pub(crate) fn request(
        &mut self,
        dst: EpAddr,
        handler: HandlerIndex,
        body: Body<'_>,
        min_handler: HandlerIndex,
    ) -> Result<bool, AmError> {
        let msg = self.core.request_msg(dst, handler, body, min_handler)?;
        match self.core.inject_msg(&msg, false)? {
            Injected::Sent => Ok(false),
            Injected::WouldBlock => {
                // A copy for the retry, so that `msg`'s address does not leave this
                // function and its fields stay in registers on the first attempt.
                let kept = msg;
                self.request_retry(&kept)
            }
        }
    }

    /// [`request`](Self::request)'s wait for conduit resources: polls (so handlers
    /// run) and injects again until the conduit takes `msg`; `Ok(true)`.
    ///
    /// Out of line so that the first attempt, which almost always succeeds, sets up
    /// no retry state: its stores queue behind the ring's, whose cache lines a
    /// polling receiver keeps taking, and in a flood they decide whether the sender
    /// stays ahead of the receiver (docs/performance.md, "Floods of 512 B to 4 KiB").
    #[cold]
    #[inline(never)]
    fn request_retry(&mut self, msg: &OutMsg<'_>) -> Result<bool, AmError> {
        let mut retry = super::progress::Retry::default();
        loop {
            self.retry(&mut retry);
            if self.core.inject_msg(msg, false)?.is_sent() {
                return Ok(true);
            }
        }
    }

    fn request_owned(
        &mut self,
        dst: EpAddr,
        handler: HandlerIndex,
        body: Body<'_, Vec<u8>>,
    ) -> Result<Event<Vec<u8>, AmError>, AmError> {
        check_request(
            &self.core.shared,
            &self.core.owner,
            &self.core.limits,
            FIRST_CLIENT_HANDLER,
            dst,
            handler,
            &body.bytes(),
        )?;
        let (category, args, offset) = (body.category, body.args, body.offset);
        let mut payload = body.payload;
        let mut retry = super::progress::Retry::default();
        let mut retried = false;
        let ev = loop {
            let msg = OwnedMsg {
                dst,
                handler,
                category,
                args,
                payload,
                offset,
            };
            match self.core.cep.inject_owned(msg, false)? {
                OwnedInjected::Done(buf) => {
                    self.core.stats.sent[dst.rank as usize] += 1;
                    am_trace!("request", dst, handler, category, buf.len());
                    break Event::ready(self.core.me, self.core.uid, Ok(buf));
                }
                OwnedInjected::Pending(ticket) => {
                    self.core.stats.sent[dst.rank as usize] += 1;
                    am_trace!("request", dst, handler, category, 0usize);
                    let (ev, c) = self.core.pending::<Vec<u8>, AmError>(None, finish_bytes);
                    self.core.lc.push((ticket, c));
                    break ev;
                }
                OwnedInjected::WouldBlock(buf) => {
                    payload = buf;
                    self.retry(&mut retry);
                    retried = true;
                }
            }
        };
        if retried {
            // The buffer is the event's (kept alive by it if the panic drops it).
            self.rethrow();
        }
        Ok(ev)
    }

    /// Completes owned-payload local completions the conduit reports.
    pub(crate) fn check_lc(&mut self) {
        let cep = &mut self.core.cep;
        let mut i = 0;
        while i < self.core.lc.len() {
            if let Some(buf) = cep.lc_test(self.core.lc[i].0) {
                let (_, c) = self.core.lc.swap_remove(i);
                c.done(Data::Bytes(buf));
            } else {
                i += 1;
            }
        }
    }
}

/// A negotiated-payload message being built in place, inside one call of
/// [`Endpoint::request_with`] or [`Endpoint::try_request_with`] (never handed out: a guard a program
/// could leak would let other calls reach the conduit between its reservation and its
/// send).
pub(crate) struct Prepared<'e, C: Conduit> {
    ep: Guard<'e, C>,
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
    /// The buffer to fill (exactly the length prepared).
    fn buffer(&mut self) -> &mut [u8] {
        match self.buf {
            // SAFETY: the conduit guarantees the prepared memory is valid, writable and
            // not aliased until commit/cancel (only a Medium's is used: `prepare_req`
            // never keeps a Long's, which may be the destination's segment); `self`
            // holds the endpoint exclusively, so no conduit call can intervene, and the
            // borrow is tied to `&mut self`.
            Some(p) => unsafe { std::slice::from_raw_parts_mut(p.as_ptr().cast::<u8>(), self.len) },
            None => &mut self.ep.core.bounce[..self.len],
        }
    }

    /// Sends the first `len` bytes of the buffer with `handler` and `args`.
    ///
    /// # Errors
    /// [`AmError::CommitTooLarge`], [`AmError::TooManyArgs`],
    /// [`AmError::UnregisteredHandler`], [`AmError::Conduit`]. On error nothing is sent.
    fn commit(mut self, handler: HandlerId, args: &[u32], len: usize) -> Result<(), AmError> {
        if len > self.len {
            return Err(AmError::CommitTooLarge {
                len,
                prepared: self.len,
            });
        }
        let (dst, category, offset) = (self.dst, self.category, self.offset);
        let h = handler.index();
        match self.buf.take() {
            Some(p) => {
                let ep = &mut *self.ep;
                // SAFETY: as in `buffer`; the slice is only read by the conduit's commit.
                let payload = unsafe {
                    std::slice::from_raw_parts(p.as_ptr().cast::<u8>().cast_const(), len)
                };
                let body = Body::of(category, args, payload, offset);
                if let Err(e) = check_request(
                    &ep.core.shared,
                    &ep.core.owner,
                    &ep.core.limits,
                    FIRST_CLIENT_HANDLER,
                    dst,
                    h,
                    &body,
                ) {
                    ep.core.cep.cancel();
                    return Err(e);
                }
                let msg = body.out_msg(dst, h, Kind::Request);
                ep.core.cep.commit(&msg)?;
                ep.core.stats.sent[dst.rank as usize] += 1;
                ep.core.stats.built_in_place += 1;
                Ok(())
            }
            None => {
                let ep = &mut *self.ep;
                let payload = std::mem::take(&mut ep.core.bounce);
                // The bounce path waits for resources: the payload is built already.
                let body = Body::of(category, args, &payload[..len], offset);
                let r = ep.request(dst, h, body, FIRST_CLIENT_HANDLER);
                ep.core.bounce = payload;
                if r? {
                    ep.rethrow();
                }
                Ok(())
            }
        }
    }
}

impl<C: Conduit> Drop for Prepared<'_, C> {
    fn drop(&mut self) {
        if self.buf.take().is_some() {
            self.ep.core.cep.cancel();
        }
    }
}

impl<C: Conduit> Inner<C> {
    /// Validates the shape of a negotiated-payload message and asks the conduit for a
    /// buffer; `Ok(None)`: no resources now (only when `wait` is false).
    fn prepare_req(
        &mut self,
        dst: EpAddr,
        category: Category,
        max_len: usize,
        offset: usize,
        wait: bool,
    ) -> Result<Option<Option<NonNull<[u8]>>>, AmError> {
        check_dst(&self.core.shared, dst)?;
        let lim = self.core.limits[dst.rank as usize];
        match category {
            Category::Long => {
                check_long(&lim, dst, max_len, offset, &self.core.shared.layout.seg_len)?
            }
            _ => {
                if max_len > lim.max_medium {
                    return Err(AmError::PayloadTooLarge {
                        len: max_len,
                        max: lim.max_medium,
                    });
                }
            }
        }
        let mut retry = super::progress::Retry::default();
        loop {
            let req = PrepareReq::new(dst, category, max_len, offset);
            match self.core.cep.prepare(&req, !wait)? {
                Prepare::InPlace(buf) if category != Category::Long => {
                    // `Prepared::buffer` lends `max_len` bytes of it: a shorter buffer
                    // (a conduit bug, in safe code) would let the program write past
                    // it. The rest of the promise (valid, unaliased memory) the
                    // conduit contract carries.
                    if buf.len() < max_len {
                        self.core.cep.cancel();
                        return Err(AmError::Conduit(ConduitError::Contract(format!(
                            "prepare gave a {}-byte buffer for a {max_len}-byte payload",
                            buf.len()
                        ))));
                    }
                    return Ok(Some(Some(buf)));
                }
                // A Long's payload lands in the destination's segment, which other
                // ranks (and the destination itself) may write at any time: a
                // conduit's in-place buffer for it may be that very range, so it
                // never becomes the `&mut [u8]` of `Prepared::buffer`. The conduit
                // had the resources: build the payload in the bounce buffer, which
                // `commit` injects (a copy, as `request_long` makes).
                Prepare::InPlace(_) => {
                    self.core.cep.cancel();
                    self.core.bounce.clear();
                    self.core.bounce.resize(max_len, 0);
                    return Ok(Some(None));
                }
                Prepare::Bounce => {
                    self.core.bounce.clear();
                    self.core.bounce.resize(max_len, 0);
                    return Ok(Some(None));
                }
                Prepare::WouldBlock if !wait => return Ok(None),
                Prepare::WouldBlock => {
                    self.retry(&mut retry);
                    // Nothing is prepared yet: a handler's panic may end the call.
                    self.rethrow();
                }
            }
        }
    }
}

impl<C: Conduit> Endpoint<C> {
    /// Registers a client handler at the lowest free index of `128..=255` and returns
    /// its id. Tables must be identical on every rank: register the same handlers in
    /// the same order everywhere.
    ///
    /// # Errors
    /// [`RegisterError::Full`] when all 128 client indices are taken.
    pub fn register<F>(&mut self, f: F) -> Result<HandlerId, RegisterError>
    where
        F: for<'t, 'a> FnMut(&mut Token<'t>, Am<'a>) + Send + 'static,
    {
        let mut g = self.inner();
        let core = &mut g.core;
        let mut i = core.next_client;
        while i <= 255 && core.owner[i as usize] != OWN_NONE {
            i += 1;
        }
        if i > 255 {
            return Err(RegisterError::Full);
        }
        core.next_client = i + 1;
        core.install(i as HandlerIndex, Box::new(f))
    }

    /// Registers a client handler at a fixed `index` (`128..=255`), for runtimes that
    /// keep GASNet-style numbered tables.
    ///
    /// # Errors
    /// [`RegisterError::Zero`], [`RegisterError::Reserved`],
    /// [`RegisterError::AlreadyRegistered`].
    pub fn register_at<F>(&mut self, index: HandlerIndex, f: F) -> Result<HandlerId, RegisterError>
    where
        F: for<'t, 'a> FnMut(&mut Token<'t>, Am<'a>) + Send + 'static,
    {
        self.inner().core.install(index, Box::new(f))
    }

    /// True if a handler is registered at `index`.
    pub fn is_registered(&self, index: HandlerIndex) -> bool {
        self.with_ref(|i| i.core.owner[index as usize] != OWN_NONE)
    }

    /// Sends a request to `dst`'s `handler` with `body` (Short, Medium or Long),
    /// polling (so handlers run) until the conduit has the resources to inject it. A
    /// payload is copied before this returns, so its buffer may be reused at once
    /// (synchronous local completion); a Long one is written at the body's offset in
    /// `dst`'s segment before the handler runs there.
    ///
    /// ```
    /// # use gex_core::{boot::Singleton, loopback::Loopback, Am, Body, ClientBuilder, Token};
    /// # let client = ClientBuilder::new().init::<Loopback>(Box::new(Singleton::new()))?;
    /// # let mut ep = client.endpoint(0)?;
    /// let h = ep.register(|_t: &mut Token<'_>, am: Am<'_>| assert_eq!(am.payload(), b"hi"))?;
    /// let me = ep.addr();
    /// ep.request(me, h, Body::medium(&[1, 2], b"hi"))?;
    /// # ep.poll();
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`AmError::BadRank`], [`AmError::BadEndpoint`], [`AmError::TooManyArgs`],
    /// [`AmError::UnregisteredHandler`], [`AmError::ReservedHandler`],
    /// [`AmError::PayloadTooLarge`] (Medium, Long), [`AmError::OutOfSegment`] (Long),
    /// [`AmError::Conduit`]. Nothing is sent on error.
    #[inline]
    pub fn request(
        &mut self,
        dst: EpAddr,
        handler: HandlerId,
        body: Body<'_>,
    ) -> Result<(), AmError> {
        let mut g = self.inner();
        if g.request(dst, handler.index(), body, FIRST_CLIENT_HANDLER)? {
            g.rethrow();
        }
        Ok(())
    }

    /// [`request`](Self::request) without waiting for resources: returns
    /// [`Injected::WouldBlock`] (nothing sent) when the conduit lacks them; poll and
    /// try again.
    ///
    /// ```
    /// # use gex_core::{boot::Singleton, loopback::Loopback, Am, Body, ClientBuilder, Injected, Token};
    /// # let client = ClientBuilder::new().init::<Loopback>(Box::new(Singleton::new()))?;
    /// # let mut ep = client.endpoint(0)?;
    /// let h = ep.register(|_t: &mut Token<'_>, _am: Am<'_>| {})?;
    /// let me = ep.addr();
    /// while ep.try_request(me, h, Body::short(&[1]))? == Injected::WouldBlock {
    ///     ep.poll();
    /// }
    /// # ep.poll();
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// As [`request`](Self::request).
    #[inline]
    pub fn try_request(
        &mut self,
        dst: EpAddr,
        handler: HandlerId,
        body: Body<'_>,
    ) -> Result<Injected, AmError> {
        self.inner()
            .core
            .try_inject(dst, handler.index(), body, FIRST_CLIENT_HANDLER, true)
    }

    /// Sends a Medium or Long request from an owned buffer
    /// ([`Body::medium`]`(args, vec)`, [`Body::long`]`(args, vec, offset)`) whose local
    /// completion may be deferred (conduits that send from the buffer itself return it
    /// only once the network no longer reads it). The mode decides what comes back:
    /// [`Blocking`](crate::Blocking) waits and returns the buffer, [`Nb`](crate::Nb)
    /// returns an [`Event`] that gives it back, [`Nbi`](crate::Nbi) returns nothing
    /// (the buffer is freed at local completion, which
    /// [`sync_implicit`](Self::sync_implicit) waits for).
    ///
    /// # Errors
    /// As [`request`](Self::request).
    pub fn request_owned<M: Mode>(
        &mut self,
        dst: EpAddr,
        handler: HandlerId,
        body: Body<'_, Vec<u8>>,
        _mode: M,
    ) -> Result<M::Out<Vec<u8>, AmError>, AmError> {
        let ev = self.inner().request_owned(dst, handler.index(), body)?;
        M::finish(self, ev, 0)
    }

    /// Builds a request's payload in place (negotiated payload), waiting (polling)
    /// while the conduit lacks resources. The body's payload is a capacity:
    /// [`Body::medium`]`(args, max_len)` or [`Body::long`]`(args, max_len, offset)`.
    /// `fill` writes the payload into a buffer of `max_len` bytes and returns its
    /// length, then the message is sent.
    ///
    /// A Medium's buffer is the conduit's own when it builds payloads in place (else
    /// the endpoint's bounce buffer). A Long's is always the endpoint's own (never the
    /// destination range: other ranks may write a segment at any time, so it cannot be
    /// a `&mut [u8]` of the caller's), and what `fill` says it wrote is copied into
    /// place when sent. If `fill` panics nothing is sent.
    ///
    /// Why a closure and not a prepared value the program holds: a value could be
    /// leaked (`mem::forget`) or kept while other calls reach the conduit between its
    /// reservation and its send, which the conduit contract forbids; the closure runs
    /// inside the one call that reserves and sends, so that rule holds by construction,
    /// and after a `WouldBlock` nothing stays borrowed, so a retry loop is plain code.
    ///
    /// ```
    /// # use gex_core::{boot::Singleton, loopback::Loopback, Am, Body, ClientBuilder, Token};
    /// # let client = ClientBuilder::new().segment_size(4096).init::<Loopback>(Box::new(Singleton::new()))?;
    /// # let mut ep = client.endpoint(0)?;
    /// let h = ep.register(|_t: &mut Token<'_>, am: Am<'_>| assert_eq!(am.payload(), b"hi"))?;
    /// let me = ep.addr();
    /// ep.request_with(me, h, Body::medium(&[], 16), |buf| {
    ///     buf[..2].copy_from_slice(b"hi");
    ///     2
    /// })?;
    /// # ep.poll();
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`AmError::BadRank`], [`AmError::BadEndpoint`], [`AmError::PayloadTooLarge`],
    /// [`AmError::OutOfSegment`] (checked for `max_len` before `fill` runs);
    /// [`AmError::CommitTooLarge`] for a length above `max_len`,
    /// [`AmError::TooManyArgs`], [`AmError::UnregisteredHandler`],
    /// [`AmError::ReservedHandler`] (nothing sent); [`AmError::Conduit`].
    pub fn request_with(
        &mut self,
        dst: EpAddr,
        handler: HandlerId,
        body: Body<'_, usize>,
        fill: impl FnOnce(&mut [u8]) -> usize,
    ) -> Result<(), AmError> {
        self.with(dst, handler, body, fill, true).map(drop)
    }

    /// [`request_with`](Self::request_with) without waiting for resources: returns
    /// [`Injected::WouldBlock`] (and does not call `fill`) when the conduit lacks them;
    /// nothing stays borrowed, so a retry loop is plain code.
    ///
    /// ```
    /// # use gex_core::{boot::Singleton, loopback::Loopback, Am, Body, ClientBuilder, Token, Injected};
    /// # let client = ClientBuilder::new().segment_size(4096).init::<Loopback>(Box::new(Singleton::new()))?;
    /// # let mut ep = client.endpoint(0)?;
    /// let h = ep.register(|_t: &mut Token<'_>, am: Am<'_>| assert_eq!(am.payload(), b"hi"))?;
    /// let me = ep.addr();
    /// let fill = |buf: &mut [u8]| { buf[..2].copy_from_slice(b"hi"); 2 };
    /// while ep.try_request_with(me, h, Body::medium(&[], 16), fill)? == Injected::WouldBlock {
    ///     ep.poll();
    /// }
    /// # ep.poll();
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// As [`request_with`](Self::request_with).
    pub fn try_request_with(
        &mut self,
        dst: EpAddr,
        handler: HandlerId,
        body: Body<'_, usize>,
        fill: impl FnOnce(&mut [u8]) -> usize,
    ) -> Result<Injected, AmError> {
        self.with(dst, handler, body, fill, false)
    }

    /// The in-place forms: reserves (waiting for resources if `wait`, else answering
    /// `WouldBlock`), lets `fill` build the payload, sends it. The reservation never
    /// outlives the call (a panic in `fill` cancels it).
    fn with(
        &mut self,
        dst: EpAddr,
        handler: HandlerId,
        body: Body<'_, usize>,
        fill: impl FnOnce(&mut [u8]) -> usize,
        wait: bool,
    ) -> Result<Injected, AmError> {
        let (category, max_len, offset) = (body.category, body.payload, body.offset);
        let mut g = self.inner();
        let Some(buf) = g.prepare_req(dst, category, max_len, offset, wait)? else {
            return Ok(Injected::WouldBlock);
        };
        let mut p = Prepared {
            ep: g,
            dst,
            category,
            offset,
            buf,
            len: max_len,
        };
        let len = fill(p.buffer());
        p.commit(handler, body.args, len).map(|()| Injected::Sent)
    }
}
