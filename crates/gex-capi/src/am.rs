//! Active messages with C handler functions: registration, Short, Medium and Long
//! requests, and the reply from inside a request handler through its token.
//!
//! A C handler is called by a trampoline (a Rust closure registered with the
//! endpoint) with a `gex_token_t*` that is the address of the `Token` the endpoint
//! handed the trampoline. The trampoline records that address as the calling thread's
//! current token; the token functions accept only that address, so a token kept past
//! its handler, or used on another thread, is refused (`GEX_ERR_INVALID`) instead of
//! read.
#![allow(unsafe_code)]

use crate::handle::{EpState, HandlerMark, gex_ep_t};
use crate::ptr;
use crate::status::{Error, entry, gex_status_t};
use gex_facade::{Am, Body, EpAddr, HandlerId, Token};
use std::cell::Cell;
use std::ffi::{c_int, c_void};

/// The token of the AM being handled: passed to a handler, valid only during that
/// call and on that thread (for `gex_am_reply_*` and `gex_token_src`).
#[derive(Debug)]
pub struct gex_token_t {
    _opaque: [u8; 0],
}

/// A C AM handler: `token` (valid during the call), the payload (`len` bytes at
/// `payload`; NULL when `len` is 0), the `nargs` 32-bit arguments at `args` (NULL when
/// `nargs` is 0), and the `user_data` given at registration. A Medium payload and the
/// arguments are valid during the call only; a Long payload is where the sender put it
/// in this endpoint's segment (it stays there, and other ranks may write it again
/// later: read it before the sender is told it may).
///
/// A handler runs inside `gex_ep_poll` and every other call that polls the endpoint
/// (waits, blocking operations, the barrier), on the thread that made the call, or on
/// the endpoint's progress thread (`GEX_PROGRESS_THREAD=1`). It must not call any
/// endpoint function (they return `GEX_ERR_IN_HANDLER`): only `gex_am_reply_*` (once,
/// in a request handler) and `gex_token_src`. It must return normally (no `longjmp`
/// out of it, no C++ exception through it: that aborts the process).
pub type gex_am_handler_t = Option<
    unsafe extern "C" fn(
        token: *mut gex_token_t,
        payload: *const c_void,
        len: usize,
        args: *const u32,
        nargs: usize,
        user_data: *mut c_void,
    ),
>;

thread_local! {
    /// The token of the handler this thread is running (null outside handlers).
    static CURRENT: Cell<*mut c_void> = const { Cell::new(std::ptr::null_mut()) };
}

/// Restores the thread's current token when the handler returns.
struct Current(*mut c_void);

impl Drop for Current {
    fn drop(&mut self) {
        CURRENT.with(|c| c.set(self.0));
    }
}

/// The user's pointer, handed back to the handler on whatever thread runs it, and the
/// address of the endpoint's segment (where Long payloads land).
struct UserData(*mut c_void, *const u8);
// SAFETY: gex never dereferences either pointer: the user's is handed back to the
// handler, whose registrant promised that it may use it on the threads that run
// handlers (the polling thread, or the progress thread); the segment's is only offset
// (`wrapping_add`) to make the payload address the C handler reads.
unsafe impl Send for UserData {}

/// The token behind `t`, if `t` is the calling thread's current one.
///
/// # Safety
/// None beyond the check: the current token is set only by the trampoline below to the
/// address of a `Token` that lives (exclusively borrowed by the trampoline, which is
/// blocked in the C call) until it is reset.
unsafe fn current<'a>(t: *mut gex_token_t) -> Result<&'a mut Token<'a>, Error> {
    if t.is_null() {
        return Err(Error::null("token"));
    }
    if CURRENT.with(Cell::get) != t.cast::<c_void>() {
        return Err(Error::invalid(
            "token is not the one of the AM handler running on this thread (tokens are valid only during their handler)",
        ));
    }
    // SAFETY: `t` is the address the trampoline set for the `&mut Token` it holds
    // while the C handler (our caller, on this thread) runs; the trampoline does not
    // touch the token until the handler returns, and nothing else gets it.
    Ok(unsafe { &mut *t.cast::<Token<'a>>() })
}

/// Registers a C handler at the next free index of `128..=255` and writes the index to
/// `*index`. Register the same handlers in the same order on every rank (the tables
/// must be identical); `user_data` is handed to every call of the handler.
///
/// Returns `GEX_OK`; `GEX_ERR_NULL` for a NULL `handler` or `index`; `GEX_ERR_INVALID`
/// when the table is full.
///
/// # Safety
/// `ep` is NULL or a live endpoint; `index` NULL or valid for writing one `uint32_t`;
/// `handler` is a function with the signature of [`gex_am_handler_t`] that follows its
/// rules; `user_data` may be used by `handler` on the thread that polls the endpoint
/// (and on its progress thread if it has one) for as long as the endpoint is open.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gex_am_register(
    ep: *const gex_ep_t,
    handler: gex_am_handler_t,
    user_data: *mut c_void,
    index: *mut u32,
) -> c_int {
    entry(|| {
        // SAFETY: the caller's promise, as `ptr::handle` states it.
        let h = unsafe { ptr::handle(ep) }?;
        let f = handler.ok_or_else(|| Error::null("handler"))?;
        if index.is_null() {
            return Err(Error::null("index"));
        }
        let id = h.with(|s| {
            let user = UserData(user_data, s.ep.segment().as_ptr().cast_const());
            Ok(s.ep.register(move |t: &mut Token<'_>, am: Am<'_>| {
                let user = &user;
                let (payload, args) = (am.payload(), am.args());
                // A Long payload: its address in the segment (not read here).
                let long = am
                    .long()
                    .map(|l| (user.1.wrapping_add(l.offset()).cast::<c_void>(), l.len()));
                let tp = std::ptr::from_mut(t).cast::<c_void>();
                let _restore = Current(CURRENT.with(|c| c.replace(tp)));
                let _mark = HandlerMark::set();
                let (pp, plen) = match long {
                    Some((_, 0)) => (std::ptr::null(), 0),
                    Some(l) => l,
                    None if payload.is_empty() => (std::ptr::null(), 0),
                    None => (payload.as_ptr().cast(), payload.len()),
                };
                let ap = if args.is_empty() {
                    std::ptr::null()
                } else {
                    args.as_ptr()
                };
                // SAFETY: the registrant promised a handler of this signature that
                // follows its rules; the token address is current for the call, the
                // payload and arguments borrowed for it.
                unsafe { f(tp.cast(), pp, plen, ap, args.len(), user.0) };
            })?)
        })?;
        // SAFETY: `index` is non-null and writable (the caller's promise).
        unsafe { ptr::write(index, u32::from(id.index()), "index") }?;
        Ok(gex_status_t::GEX_OK)
    })
}

/// The handler id of a C index.
fn handler_id(index: u32) -> Result<HandlerId, Error> {
    u8::try_from(index)
        .ok()
        .filter(|&i| i >= gex_facade::FIRST_CLIENT_HANDLER)
        .map(HandlerId::at)
        .ok_or_else(|| {
            Error::invalid(format!(
                "handler index {index} is not a client index (128..=255)"
            ))
        })
}

/// The endpoint address of `rank` for endpoint `h`'s index.
fn dst(h: &gex_ep_t, rank: u32) -> Result<EpAddr, Error> {
    if rank >= h.size {
        return Err(Error::invalid(format!(
            "no such rank {rank} (the job has {} ranks)",
            h.size
        )));
    }
    Ok(EpAddr::new(rank, h.index))
}

/// The kind of an AM: Short (no payload), Medium, or Long (its payload written at
/// the offset in the target's segment).
#[derive(Clone, Copy)]
enum Kind {
    Short,
    Medium,
    Long(usize),
}

/// The arguments and payload of a C AM call as it passed them: `(args, nargs,
/// payload, len, kind)`.
struct Msg(*const u32, usize, *const c_void, usize, Kind);

impl Msg {
    /// The arguments and payload, checked (the payload is not read for a Short).
    ///
    /// # Safety
    /// The arguments are valid for reading `nargs` `uint32_t`s, the payload of a
    /// Medium or Long for reading `len` bytes (any pointers for 0).
    unsafe fn body<'a>(self) -> Result<Body<'a>, Error> {
        let Msg(args, nargs, payload, len, kind) = self;
        // SAFETY: `args` is readable for the given count (the caller's promise).
        let args = unsafe { ptr::slice(args, nargs, "args") }?;
        if let Kind::Short = kind {
            return Ok(Body::short(args));
        }
        // SAFETY: `payload` is readable for the given count (the caller's promise).
        let payload = unsafe { ptr::slice(payload.cast::<u8>(), len, "payload") }?;
        Ok(match kind {
            Kind::Long(offset) => Body::long(args, payload, offset),
            _ => Body::medium(args, payload),
        })
    }
}

/// The body of the requests: the endpoint, the message, the rank and the index
/// checked, then the request.
///
/// # Safety
/// `ep` is NULL or a live endpoint; `msg` as [`Msg::body`] requires.
unsafe fn request(
    ep: *const gex_ep_t,
    rank: u32,
    index: u32,
    msg: Msg,
) -> Result<gex_status_t, Error> {
    // SAFETY: the caller's promise, as `ptr::handle` states it.
    let h = unsafe { ptr::handle(ep) }?;
    // SAFETY: the caller's promise, passed on.
    let body = unsafe { msg.body() }?;
    let (d, id) = (dst(h, rank)?, handler_id(index)?);
    h.with(|s| Ok(s.ep.request(d, id, body)?))?;
    Ok(gex_status_t::GEX_OK)
}

/// The body of the replies: the message checked, then the token (`current`) and the
/// index, then the reply.
///
/// # Safety
/// `msg` as [`Msg::body`] requires; `token` may be any value.
unsafe fn reply(token: *mut gex_token_t, index: u32, msg: Msg) -> Result<gex_status_t, Error> {
    // SAFETY: the caller's promise, passed on.
    let body = unsafe { msg.body() }?;
    // SAFETY: none needed beyond `current`'s own check of the token.
    let t = unsafe { current(token) }?;
    t.reply(handler_id(index)?, body)?;
    Ok(gex_status_t::GEX_OK)
}

/// The message of an AM call: its arguments, then (Medium) its payload or (Long) its
/// payload and the offset to write it at.
macro_rules! am_msg {
    ($args:ident, $nargs:ident) => {
        Msg($args, $nargs, std::ptr::null(), 0, Kind::Short)
    };
    ($args:ident, $nargs:ident, $payload:ident, $len:ident) => {
        Msg($args, $nargs, $payload, $len, Kind::Medium)
    };
    ($args:ident, $nargs:ident, $payload:ident, $len:ident, $offset:ident) => {
        Msg($args, $nargs, $payload, $len, Kind::Long($offset))
    };
}

/// The AM entry points and their declarations (`DECLS`, as `c_fns!`): each takes the
/// sender's parameters (`$who`), the handler `index` and the arguments, then
/// (`[payload]`, Medium) the payload or (`[payload offset]`, Long) the payload and its
/// offset, and passes them as a [`Msg`] to `$send` (no payload is read for a Short).
macro_rules! am_families {
    (@fns $mode:ident; $(
        $(#[$m:meta])*
        fn $name:ident($($who:ident: $wty:ty),*) => $send:ident [$($payload:ident $($offset:ident)?)?];
    )*) => {
        c_fns! { $mode $(
            $(#[$m])*
            fn $name(
                $($who: $wty,)*
                index: u32,
                args: *const u32,
                nargs: usize,
                $($payload: *const c_void, len: usize, $($offset: usize,)?)?
            ) {
                let msg = am_msg!(args, nargs $(, $payload, len $(, $offset)?)?);
                // SAFETY: the caller's promises, passed on.
                entry(|| unsafe { $send($($who,)* index, msg) })
            }
        )* }
    };
    ($($list:tt)*) => {
        with_decls!(DECLS = am_families[@fns][;] $($list)*);
    };
}

am_families! {
    /// Sends a Short request (`nargs` arguments, no payload) to handler `index` of
    /// `rank`'s endpoint of this endpoint's index, polling while the conduit lacks
    /// resources (handlers may run meanwhile).
    ///
    /// Returns `GEX_OK`; `GEX_ERR_INVALID` for a rank out of range, an unregistered index,
    /// or more than `gex_am_max_args` arguments; `GEX_ERR_AM` if the conduit failed.
    ///
    /// # Safety
    /// `ep` is NULL or a live endpoint; `args` is valid for reading `nargs` `uint32_t`s
    /// (any pointer when `nargs` is 0).
    fn gex_am_request_short(ep: *const gex_ep_t, rank: u32) => request [];
    /// Sends a Medium request: as [`gex_am_request_short`] with `len` bytes of payload,
    /// copied before the call returns (the buffer may be reused at once).
    ///
    /// Returns as [`gex_am_request_short`], and `GEX_ERR_AM` if `len` is over
    /// `gex_am_max_medium`.
    ///
    /// # Safety
    /// As [`gex_am_request_short`], and `payload` is valid for reading `len` bytes (any
    /// pointer when `len` is 0).
    fn gex_am_request_medium(ep: *const gex_ep_t, rank: u32) => request [payload];
    /// Sends a Long request: as [`gex_am_request_medium`], with the `len` bytes of
    /// `payload` written at `offset` in `rank`'s segment before the handler runs there
    /// (the handler's `payload` points to them). The source may be reused once the call
    /// returns.
    ///
    /// Returns as [`gex_am_request_medium`], with `GEX_ERR_AM` if `len` is over
    /// `gex_am_max_long` or the range is outside the target's segment.
    ///
    /// # Safety
    /// As [`gex_am_request_medium`].
    fn gex_am_request_long(ep: *const gex_ep_t, rank: u32) => request [payload offset];

    /// Replies to the request being handled with a Short AM to handler `index` of the
    /// requester. At most once, from a request handler only.
    ///
    /// Returns `GEX_OK`; `GEX_ERR_INVALID` if `token` is not the current handler's (or for
    /// a bad index or too many arguments); `GEX_ERR_AM` for a second reply or a reply from
    /// a reply handler.
    ///
    /// # Safety
    /// `args` is valid for reading `nargs` `uint32_t`s (any pointer when `nargs` is 0).
    /// `token` may be any value: only the running handler's token is accepted.
    fn gex_am_reply_short(token: *mut gex_token_t) => reply [];
    /// Replies with a Medium AM (`len` bytes of payload, copied before the call returns):
    /// as [`gex_am_reply_short`], and `GEX_ERR_AM` if `len` is over the reply limit.
    ///
    /// # Safety
    /// As [`gex_am_reply_short`], and `payload` is valid for reading `len` bytes (any
    /// pointer when `len` is 0).
    fn gex_am_reply_medium(token: *mut gex_token_t) => reply [payload];
    /// Replies with a Long AM: the `len` bytes of `payload` are written at `offset` in the
    /// requester's segment before its handler runs. As [`gex_am_reply_medium`], and
    /// `GEX_ERR_AM` if the range is outside the requester's segment or over its Long limit.
    ///
    /// # Safety
    /// As [`gex_am_reply_medium`].
    fn gex_am_reply_long(token: *mut gex_token_t) => reply [payload offset];
}

/// Writes the rank that sent the AM being handled to `*rank`.
///
/// # Safety
/// `rank` is NULL or valid for writing one `uint32_t`. `token` may be any value: only
/// the running handler's token is accepted.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gex_token_src(token: *mut gex_token_t, rank: *mut u32) -> c_int {
    entry(|| {
        // SAFETY: `current` checks the token; `rank` as the caller promised.
        let t = unsafe { current(token) }?;
        let src = t.src().rank;
        // SAFETY: `rank` is NULL or writable (this function's `# Safety`).
        unsafe { ptr::write(rank, src, "rank") }?;
        Ok(gex_status_t::GEX_OK)
    })
}

/// Writes the largest number of arguments of an AM to `*max`.
///
/// # Safety
/// `ep` is NULL or a live endpoint; `max` NULL or valid for writing one `size_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gex_am_max_args(ep: *const gex_ep_t, max: *mut usize) -> c_int {
    // SAFETY: the caller's promises, as `ptr::write_of` states them.
    entry(|| unsafe { ptr::write_of(ep, max, "max", |h| h.with(|s| Ok(s.ep.max_args()))) })
}

/// Writes the largest Medium payload to `rank` (in bytes) to `*max`.
///
/// # Safety
/// As [`gex_am_max_args`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gex_am_max_medium(
    ep: *const gex_ep_t,
    rank: u32,
    max: *mut usize,
) -> c_int {
    // SAFETY: the caller's promises, passed on.
    unsafe { write_max(ep, rank, max, |s, d| s.ep.max_medium(d)) }
}

/// Writes the largest Long payload to `rank` (in bytes; also bounded by its segment)
/// to `*max`.
///
/// # Safety
/// As [`gex_am_max_args`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gex_am_max_long(ep: *const gex_ep_t, rank: u32, max: *mut usize) -> c_int {
    // SAFETY: the caller's promises, passed on.
    unsafe { write_max(ep, rank, max, |s, d| s.ep.max_long(d)) }
}

/// The body of the payload limits to a rank: the endpoint and `rank` checked, then
/// `limit` of the endpoint's state and `rank`'s address written to `*max`.
///
/// # Safety
/// `ep` is NULL or a live endpoint; `max` NULL or valid for writing one `size_t`.
unsafe fn write_max(
    ep: *const gex_ep_t,
    rank: u32,
    max: *mut usize,
    limit: impl FnOnce(&mut EpState, EpAddr) -> usize,
) -> c_int {
    let of = |h: &gex_ep_t| {
        let d = dst(h, rank)?;
        h.with(|s| Ok(limit(s, d)))
    };
    // SAFETY: the caller's promises, as `ptr::write_of` states them.
    entry(|| unsafe { ptr::write_of(ep, max, "max", of) })
}
