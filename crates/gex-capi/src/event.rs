//! `gex_event_t`: the one event type of the C ABI, over the events of every
//! operation it offers (puts, gets into the caller's buffer, fetching atomics of every
//! type, nonblocking collectives of every layer), with test, wait, wait_all, wait_any
//! and free.
//!
//! An event handle is consumed when its operation's outcome is delivered: the call
//! that finds it complete (`gex_event_test`, a wait) frees it, sets the caller's
//! pointer to NULL and returns the operation's status. `gex_event_free` drops an event
//! whose outcome is not wanted (a pending get then never writes the caller's buffer).
//! A NULL entry in the arrays of `wait_all`/`wait_any` counts as complete, so arrays can
//! be waited on again as they empty.
#![allow(unsafe_code)]

use crate::handle::gex_ep_t;
use crate::ptr::{self, Lent};
use crate::status::{Error, entry, gex_status_t};
use gex_facade::event::EventErr;
use gex_facade::rma::RmaError;
use gex_facade::{AnyEvent, Event};
use gex_sync::atomic::AtomicU64;
use std::ffi::c_int;

/// A nonblocking operation of any layer and element type, behind one interface: what
/// the event functions need of it.
pub trait Pending: std::fmt::Debug {
    /// The core's event, for `wait_all`/`wait_any`.
    fn any(&self) -> &dyn AnyEvent;
    /// Polls once; true once complete.
    ///
    /// # Errors
    /// `GEX_ERR_EVENT` if the event belongs to another endpoint.
    fn test(&self, ep: &mut gex_facade::Endpoint) -> Result<bool, Error>;
    /// Takes the outcome (waiting if it is not complete), delivering its output to
    /// the caller's destination.
    ///
    /// # Errors
    /// The operation's.
    fn finish(self: Box<Self>, ep: &mut gex_facade::Endpoint) -> Result<(), Error>;
}

/// An operation without output (a barrier, an NBI-free completion).
#[derive(Debug)]
pub struct Done<E: EventErr>(pub Event<(), E>);

impl<E: EventErr> Pending for Done<E>
where
    Error: From<E>,
{
    fn any(&self) -> &dyn AnyEvent {
        &self.0
    }
    fn test(&self, ep: &mut gex_facade::Endpoint) -> Result<bool, Error> {
        Ok(ep.test(&self.0)?)
    }
    fn finish(self: Box<Self>, ep: &mut gex_facade::Endpoint) -> Result<(), Error> {
        Ok(ep.wait(self.0)?)
    }
}

/// An operation whose output (a vector of `T`) goes to the caller's destination when
/// it completes: a collective's result, a fetched value.
#[derive(Debug)]
pub struct Filled<T: Copy + Send + 'static, E: EventErr> {
    /// The operation's event.
    pub ev: Event<Vec<T>, E>,
    /// Where its output goes.
    pub dst: Lent<T>,
}

impl<T: Copy + Send + std::fmt::Debug + 'static, E: EventErr> Pending for Filled<T, E>
where
    Error: From<E>,
{
    fn any(&self) -> &dyn AnyEvent {
        &self.ev
    }
    fn test(&self, ep: &mut gex_facade::Endpoint) -> Result<bool, Error> {
        Ok(ep.test(&self.ev)?)
    }
    fn finish(self: Box<Self>, ep: &mut gex_facade::Endpoint) -> Result<(), Error> {
        let v = ep.wait(self.ev)?;
        self.dst.fill(&v);
        Ok(())
    }
}

/// A fetching atomic on `T`: the old value goes to the caller's word.
#[derive(Debug)]
pub struct Fetched<T: Copy + Send + 'static>(pub Event<T, RmaError>, pub Lent<T>);

impl<T: Copy + Send + std::fmt::Debug + 'static> Pending for Fetched<T> {
    fn any(&self) -> &dyn AnyEvent {
        &self.0
    }
    fn test(&self, ep: &mut gex_facade::Endpoint) -> Result<bool, Error> {
        Ok(ep.test(&self.0)?)
    }
    fn finish(self: Box<Self>, ep: &mut gex_facade::Endpoint) -> Result<(), Error> {
        let v = ep.wait(self.0)?;
        self.1.fill(&[v]);
        Ok(())
    }
}

/// The operation an event completes.
#[derive(Debug)]
pub enum Op {
    /// Completion only (a put).
    Unit(Event<(), RmaError>),
    /// A get: its bytes go to the caller's buffer on completion.
    Get(Event<Vec<u8>, RmaError>, Lent<u8>),
    /// Any other operation (collectives, atomics of every type).
    Dyn(Box<dyn Pending>),
}

/// A nonblocking operation's completion: consumed (freed, the caller's pointer set to
/// NULL) by the call that finds it complete, or by `gex_event_free`.
#[derive(Debug)]
pub struct gex_event_t {
    magic: AtomicU64,
    op: Op,
}

crate::ptr::magic!(gex_event_t, 0x6765_785f_6576_6e74, "event");

impl gex_event_t {
    /// An event handle for `op`.
    pub fn new(op: Op) -> Self {
        gex_event_t {
            magic: AtomicU64::new(0),
            op,
        }
    }

    fn any(&self) -> &dyn AnyEvent {
        match &self.op {
            Op::Unit(e) => e,
            Op::Get(e, _) => e,
            Op::Dyn(p) => p.any(),
        }
    }

    /// Takes the outcome of a complete event (waiting if it is not), delivering a
    /// get's bytes or a fetched word to the caller's destination.
    fn finish(self, ep: &mut gex_facade::Endpoint) -> Result<(), Error> {
        match self.op {
            Op::Unit(e) => ep.wait(e)?,
            Op::Get(e, dst) => dst.fill(&ep.wait(e)?),
            Op::Dyn(p) => p.finish(ep)?,
        }
        Ok(())
    }
}

/// Writes a new event handle for `op` to the caller's slot `ev`.
///
/// # Safety
/// `ev` is non-null and valid for writing one pointer.
pub(crate) unsafe fn hand_out(ev: *mut *mut gex_event_t, op: Op) -> Result<gex_status_t, Error> {
    let e = ptr::into_raw(Box::new(gex_event_t::new(op)));
    // SAFETY: the caller's promise.
    unsafe { ptr::write(ev, e, "ev") }?;
    Ok(gex_status_t::GEX_OK)
}

/// Checks the event handle in the caller's slot `slot`.
///
/// # Safety
/// `slot` is NULL or valid for reading one pointer, which is NULL or a live event.
unsafe fn peek<'a>(slot: *mut *mut gex_event_t) -> Result<&'a gex_event_t, Error> {
    // SAFETY: the caller's promises, as `ptr::slice` and `ptr::handle` state them.
    let p = unsafe { ptr::slice(slot.cast_const(), 1, "event") }?[0];
    // SAFETY: `p` is NULL or a live handle (this function's `# Safety`).
    unsafe { ptr::handle(p) }
}

/// Takes the event in `slot` back, delivers its outcome and sets the slot to NULL.
///
/// # Safety
/// `slot` is valid for reading and writing one pointer, which is a live event
/// (checked by [`peek`] before), used by nothing else.
unsafe fn consume(slot: *mut *mut gex_event_t, ep: &mut gex_facade::Endpoint) -> Result<(), Error> {
    // SAFETY: the caller's promise: a live event handle in a writable slot.
    let b = unsafe { ptr::take(*slot) }?;
    // SAFETY: the slot is writable (the caller's promise).
    unsafe { *slot = std::ptr::null_mut() };
    b.finish(ep)
}

/// Polls the endpoint once and reports whether the event in `*ev` is complete.
///
/// Returns `GEX_PENDING` if not (nothing changes); once complete, the operation's
/// status (`GEX_OK` or its error), and the event is freed and `*ev` set to NULL (a
/// get's bytes or a fetched value are in the caller's destination then).
/// `GEX_ERR_EVENT` if the event belongs to another endpoint (nothing changes);
/// `GEX_ERR_NULL` if `ev` or `*ev` is NULL.
///
/// # Safety
/// `ep` is NULL or a live endpoint; `ev` is NULL or valid for reading and writing one
/// pointer, which is NULL or a live event used by no other thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gex_event_test(ep: *const gex_ep_t, ev: *mut *mut gex_event_t) -> c_int {
    // SAFETY: the caller's promises, passed on.
    unsafe {
        complete(ep, ev, |s, e| {
            Ok(match &e.op {
                Op::Unit(x) => s.ep.test(x)?,
                Op::Get(x, _) => s.ep.test(x)?,
                Op::Dyn(p) => p.test(&mut s.ep)?,
            })
        })
    }
}

/// The body of `gex_event_test` and `gex_event_wait`: the endpoint and the event in
/// `*ev` checked, then `done` on the endpoint's state and the event; once it returns
/// true the event is consumed (`GEX_OK` or the operation's error), else `GEX_PENDING`.
///
/// # Safety
/// As [`gex_event_test`].
unsafe fn complete(
    ep: *const gex_ep_t,
    ev: *mut *mut gex_event_t,
    done: impl FnOnce(&mut crate::handle::EpState, &gex_event_t) -> Result<bool, Error>,
) -> c_int {
    entry(|| {
        // SAFETY: the caller's promises, as `ptr::handle` and `peek` state them.
        let h = unsafe { ptr::handle(ep) }?;
        // SAFETY: `ev` is a readable slot holding NULL or a live event (the caller's promise).
        let e = unsafe { peek(ev) }?;
        h.with(|s| {
            if !done(s, e)? {
                return Ok(gex_status_t::GEX_PENDING);
            }
            // SAFETY: `peek` checked the slot and the event; the caller gives it up.
            unsafe { consume(ev, &mut s.ep) }?;
            Ok(gex_status_t::GEX_OK)
        })
    })
}

/// Waits (polling the endpoint, so handlers run) until the event in `*ev` is
/// complete, then frees it, sets `*ev` to NULL and returns the operation's status.
///
/// Returns as [`gex_event_test`], never `GEX_PENDING`.
///
/// # Safety
/// As [`gex_event_test`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gex_event_wait(ep: *const gex_ep_t, ev: *mut *mut gex_event_t) -> c_int {
    // SAFETY: the caller's promises, passed on.
    unsafe {
        complete(ep, ev, |s, e| {
            s.ep.wait_all(&[e.any()])?;
            Ok(true)
        })
    }
}

/// The live events of the caller's array `evs` of `n` slots, with their indices
/// (NULL slots skipped); an event in two slots is refused.
///
/// # Safety
/// `evs` is valid for reading `n` pointers, each NULL or a live event.
unsafe fn gather<'a>(
    evs: *mut *mut gex_event_t,
    n: usize,
) -> Result<Vec<(usize, &'a gex_event_t)>, Error> {
    // SAFETY: the caller's promise, as `ptr::slice` states it.
    let slots = unsafe { ptr::slice(evs.cast_const(), n, "evs") }?;
    let mut out = Vec::with_capacity(n);
    let mut seen: Vec<*mut gex_event_t> = Vec::with_capacity(n);
    for (i, &p) in slots.iter().enumerate() {
        if p.is_null() {
            continue;
        }
        // SAFETY: the caller's promise: each non-null slot is a live event.
        out.push((i, unsafe { ptr::handle(p) }?));
        seen.push(p);
    }
    seen.sort_unstable();
    if seen.windows(2).any(|w| w[0] == w[1]) {
        return Err(Error::invalid("an event appears twice in the array"));
    }
    Ok(out)
}

/// Waits until every event of the array `evs` (`n` slots; NULL slots count as
/// complete) is complete, then frees them all and sets their slots to NULL.
///
/// Returns `GEX_OK` if every operation succeeded, else the status of the first that
/// failed (every event is freed all the same). `GEX_ERR_EVENT` if one belongs to
/// another endpoint, `GEX_ERR_INVALID` if one appears twice or is not a live event
/// (nothing is waited for or freed then).
///
/// # Safety
/// `ep` is NULL or a live endpoint; `evs` is valid for reading and writing `n`
/// pointers (any pointer when `n` is 0), each NULL or a live event used by no other
/// thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gex_event_wait_all(
    ep: *const gex_ep_t,
    evs: *mut *mut gex_event_t,
    n: usize,
) -> c_int {
    entry(|| {
        // SAFETY: the caller's promises, as `ptr::handle` and `gather` state them.
        let h = unsafe { ptr::handle(ep) }?;
        // SAFETY: `evs` holds `n` readable slots, each NULL or a live event (this function's `# Safety`).
        let live = unsafe { gather(evs, n) }?;
        h.with(|s| {
            let anys: Vec<&dyn AnyEvent> = live.iter().map(|(_, e)| e.any()).collect();
            s.ep.wait_all(&anys)?;
            drop(anys);
            let mut first = Ok(());
            for (i, _) in live {
                // SAFETY: slot `i` holds a live event (`gather`), each once; the
                // caller gives them up.
                let r = unsafe { consume(evs.add(i), &mut s.ep) };
                if first.is_ok() {
                    first = r;
                }
            }
            first.map(|()| gex_status_t::GEX_OK)
        })
    })
}

/// Waits until at least one event of the array `evs` (`n` slots, NULL slots skipped)
/// is complete; frees the first complete one, sets its slot to NULL, writes its index
/// to `*index` and returns its operation's status.
///
/// Returns `GEX_ERR_INVALID` if no slot holds an event (or as [`gex_event_wait_all`]);
/// `GEX_ERR_NULL` if `index` is NULL.
///
/// # Safety
/// As [`gex_event_wait_all`], and `index` is NULL or valid for writing one `size_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gex_event_wait_any(
    ep: *const gex_ep_t,
    evs: *mut *mut gex_event_t,
    n: usize,
    index: *mut usize,
) -> c_int {
    entry(|| {
        // SAFETY: the caller's promises, as `ptr::handle` and `gather` state them.
        let h = unsafe { ptr::handle(ep) }?;
        // SAFETY: `evs` holds `n` readable slots, each NULL or a live event (this function's `# Safety`).
        let live = unsafe { gather(evs, n) }?;
        if index.is_null() {
            return Err(Error::null("index"));
        }
        if live.is_empty() {
            return Err(Error::invalid("gex_event_wait_any: no event in the array"));
        }
        h.with(|s| {
            let anys: Vec<&dyn AnyEvent> = live.iter().map(|(_, e)| e.any()).collect();
            let k = s.ep.wait_any(&anys)?;
            drop(anys);
            let i = live[k].0;
            // SAFETY: `index` is non-null and writable (the caller's promise).
            unsafe { ptr::write(index, i, "index") }?;
            // SAFETY: slot `i` holds a live event (`gather`); the caller gives it up.
            unsafe { consume(evs.add(i), &mut s.ep) }?;
            Ok(gex_status_t::GEX_OK)
        })
    })
}

/// Frees an event whose outcome is not wanted. Its operation goes on (a put still
/// lands, a collective still runs with the other members); a pending get no longer
/// writes the caller's buffer, nor a fetching atomic its word, nor a collective its
/// destination. A NULL `ev` is ignored.
///
/// # Safety
/// `ev` is NULL or a live event, used by no other thread during or after the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gex_event_free(ev: *mut gex_event_t) -> c_int {
    // SAFETY: the caller's promise, as `ptr::free` states it.
    entry(|| unsafe { ptr::free(ev) })
}
