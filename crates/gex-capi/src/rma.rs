//! One-sided put, get and memset: blocking, nonblocking (an event) and implicit-event
//! (NBI, completed by `gex_nbi_sync` / `gex_nbi_test`).
//!
//! Remote addresses are `(rank, offset)`: `offset` bytes into the segment of `rank`'s
//! endpoint of the calling endpoint's index. Every access is range-checked against the
//! target's segment (`GEX_ERR_RMA`).
#![allow(unsafe_code)]

use crate::event::{Filled, Op, gex_event_t, hand_out};
use crate::handle::gex_ep_t;
use crate::ptr::{self, Lent};
use crate::status::{Error, entry, gex_status_t};
use gex_facade::prelude::*;
use std::ffi::{c_int, c_void};

/// The global pointer of `(rank, offset)` for endpoint `h`'s index.
pub(crate) fn gptr<T>(h: &gex_ep_t, rank: u32, offset: usize) -> Result<GlobalPtr<T>, Error> {
    if rank >= h.size {
        return Err(Error::invalid(format!(
            "no such rank {rank} (the job has {} ranks)",
            h.size
        )));
    }
    Ok(GlobalPtr::new(EpAddr::new(rank, h.index), offset))
}

/// How a call completes: before it returns, through an event handed out, or by
/// `gex_nbi_sync` (puts: of `GEX_NBI_PUTS`; gets: of `GEX_NBI_GETS`).
#[derive(Clone, Copy)]
pub(crate) enum Mode {
    /// Before the call returns.
    Blocking,
    /// Through an event written to the slot.
    Nb(*mut *mut gex_event_t),
    /// By the NBI sync of its category.
    Nbi,
}

impl Mode {
    /// `GEX_ERR_NULL` for a NULL event slot.
    pub(crate) fn check(self) -> Result<(), Error> {
        match self {
            Mode::Nb(ev) if ev.is_null() => Err(Error::null("ev")),
            _ => Ok(()),
        }
    }
}

/// Issues the operation `$call` without a value (`$ep` the endpoint, `$c` the
/// completion) on endpoint `$h` as `$mode` says; the event of `Mode::Nb` to its slot,
/// checked non-null by `Mode::check` before.
macro_rules! issue {
    (@on $h:expr, $completion:expr, |$ep:ident, $c:ident| $call:expr) => {
        $h.with(|s| {
            let ($ep, $c) = (&mut s.ep, $completion);
            Ok($call?)
        })
    };
    ($h:expr, $mode:expr, |$ep:ident, $c:ident| $call:expr) => {
        match $mode {
            Mode::Blocking => {
                issue!(@on $h, Blocking, |$ep, $c| $call)?;
                Ok(gex_status_t::GEX_OK)
            }
            Mode::Nbi => {
                issue!(@on $h, Nbi, |$ep, $c| $call)?;
                Ok(gex_status_t::GEX_OK)
            }
            Mode::Nb(ev) => {
                let e = issue!(@on $h, Nb, |$ep, $c| $call)?;
                // SAFETY: `ev` is non-null (`Mode::check`) and writable (the caller's
                // promise).
                unsafe { hand_out(ev, Op::Unit(e)) }
            }
        }
    };
}

c_families! {
    /// Puts `len` bytes from `src` at `offset` in `rank`'s segment and returns once they
    /// are there (remote completion).
    ///
    /// Returns `GEX_OK`; `GEX_ERR_RMA` if the range is outside the target's segment or the
    /// conduit failed; `GEX_ERR_INVALID` for a rank out of range.
    ///
    /// # Safety
    /// `ep` is NULL or a live endpoint; `src` is valid for reading `len` bytes (any pointer
    /// when `len` is 0).
    fn gex_put,
    /// Starts a put of `len` bytes from `src` to `offset` in `rank`'s segment and writes
    /// its event to `*ev`. `src` may be reused as soon as the call returns (gex has copied
    /// what it still needs); the event completes when the bytes are at the target.
    ///
    /// Returns as [`gex_put`] (no event is made on error); `GEX_ERR_NULL` if `ev` is NULL.
    ///
    /// # Safety
    /// As [`gex_put`], and `ev` is NULL or valid for writing one pointer.
    fn gex_put_nb,
    /// Starts a put of `len` bytes from `src` to `offset` in `rank`'s segment with an
    /// implicit event: `src` may be reused as soon as the call returns; the put is
    /// complete (its bytes at the target) once `gex_nbi_sync` of `GEX_NBI_PUTS` returns
    /// (or `gex_nbi_test` of it returns `GEX_OK`).
    ///
    /// Returns as [`gex_put`] (nothing is started on error).
    ///
    /// # Safety
    /// As [`gex_put`].
    fn gex_put_nbi;
    (ep: *const gex_ep_t, rank: u32, offset: usize, src: *const c_void, len: usize) |mode| {
        entry(|| {
            // SAFETY: the caller's promises, as `ptr::handle` and `ptr::slice` state them.
            let h = unsafe { ptr::handle(ep) }?;
            // SAFETY: `src` is readable for the given count (this function's `# Safety`).
            let src = unsafe { ptr::slice(src.cast::<u8>(), len, "src") }?;
            mode.check()?;
            let p = gptr::<u8>(h, rank, offset)?;
            issue!(h, mode, |ep, c| ep.put(p, src, c))
        })
    }

    /// Gets `len` bytes from `offset` in `rank`'s segment into `dst` and returns once they
    /// are there.
    ///
    /// Returns as [`gex_put`].
    ///
    /// # Safety
    /// `ep` is NULL or a live endpoint; `dst` is valid for writing `len` bytes (any
    /// pointer when `len` is 0) and not accessed by anything else during the call.
    fn gex_get,
    /// Starts a get of `len` bytes from `offset` in `rank`'s segment into `dst` and writes
    /// its event to `*ev`. The bytes are written to `dst` by the call that completes the
    /// event (`gex_event_test` returning `GEX_OK`, or a wait): not before, and never if
    /// the event is freed first.
    ///
    /// Returns as [`gex_put_nb`].
    ///
    /// # Safety
    /// `ep` is NULL or a live endpoint; `ev` is NULL or valid for writing one pointer;
    /// `dst` is valid for writing `len` bytes (any pointer when `len` is 0) until the event
    /// is completed or freed.
    fn gex_get_nb,
    /// Starts a get of `len` bytes from `offset` in `rank`'s segment into `dst` with an
    /// implicit event: the bytes are in `dst` once `gex_nbi_sync` of `GEX_NBI_GETS`
    /// returns (or `gex_nbi_test` of it returns `GEX_OK`), written by that call.
    ///
    /// Returns as [`gex_get`] (nothing is started on error).
    ///
    /// # Safety
    /// `ep` is NULL or a live endpoint; `dst` is valid for writing `len` bytes (any
    /// pointer when `len` is 0) until the sync of the gets that completes it (or until the
    /// endpoint is closed), and not accessed by anything else meanwhile.
    fn gex_get_nbi;
    (ep: *const gex_ep_t, dst: *mut c_void, rank: u32, offset: usize, len: usize) |mode| {
        entry(|| {
            // SAFETY: the caller's promises, as `ptr::handle`, `ptr::slice_mut` and
            // `Lent::new` state them.
            let h = unsafe { ptr::handle(ep) }?;
            if let Mode::Blocking = mode {
                // SAFETY: `dst` is writable for the given count (this function's `# Safety`).
                let dst = unsafe { ptr::slice_mut(dst.cast::<u8>(), len, "dst") }?;
                let p = gptr::<u8>(h, rank, offset)?;
                h.with(|s| Ok(s.ep.get(dst, p, Blocking)?))?;
                return Ok(gex_status_t::GEX_OK);
            }
            // SAFETY: `dst` stays writable until the event completes or is freed, or
            // until the sync of the gets (this function's `# Safety`).
            let dst = unsafe { Lent::new(dst.cast::<u8>(), len, "dst") }?;
            mode.check()?;
            let p = gptr::<u8>(h, rank, offset)?;
            if let Mode::Nb(ev) = mode {
                let e = h.with(|s| Ok(s.ep.get(vec![0u8; len], p, Nb)?))?;
                // SAFETY: `ev` is non-null (checked) and writable (the caller's promise).
                return unsafe { hand_out(ev, Op::Get(e, dst)) };
            }
            h.with(|s| {
                let ev = s.ep.get(vec![0u8; len], p, Nb)?;
                s.nbi_gets.push(Box::new(Filled { ev, dst }));
                Ok(())
            })?;
            Ok(gex_status_t::GEX_OK)
        })
    }

    /// Sets `len` bytes at `offset` in `rank`'s segment to `value` and returns once they
    /// are set (remote completion).
    ///
    /// Returns as [`gex_put`].
    ///
    /// # Safety
    /// `ep` is NULL or a live endpoint.
    fn gex_memset,
    /// Starts a memset (as [`gex_memset`]) and writes its event to `*ev`: it completes
    /// when the bytes are set.
    ///
    /// Returns as [`gex_put_nb`].
    ///
    /// # Safety
    /// `ep` is NULL or a live endpoint; `ev` is NULL or valid for writing one pointer.
    fn gex_memset_nb,
    /// Starts a memset (as [`gex_memset`]) with an implicit event, counted with the puts:
    /// the bytes are set once `gex_nbi_sync` of `GEX_NBI_PUTS` returns.
    ///
    /// Returns as [`gex_put_nbi`].
    ///
    /// # Safety
    /// `ep` is NULL or a live endpoint.
    fn gex_memset_nbi;
    (ep: *const gex_ep_t, rank: u32, offset: usize, value: u8, len: usize) |mode| {
        entry(|| {
            // SAFETY: the caller's promise, as `ptr::handle` states it.
            let h = unsafe { ptr::handle(ep) }?;
            mode.check()?;
            let p = gptr::<u8>(h, rank, offset)?;
            issue!(h, mode, |ep, c| ep.memset(p, value, len, c))
        })
    }
}

/// `gex_nbi_sync` / `gex_nbi_test` category: implicit-event puts (and memsets).
pub const GEX_NBI_PUTS: u32 = 1;
/// `gex_nbi_sync` / `gex_nbi_test` category: implicit-event gets.
pub const GEX_NBI_GETS: u32 = 2;
/// `gex_nbi_sync` / `gex_nbi_test` category: implicit-event atomics.
pub const GEX_NBI_ATOMICS: u32 = 4;
/// `gex_nbi_sync` / `gex_nbi_test`: every category.
pub const GEX_NBI_ALL: u32 = 7;

/// The gex-rma categories of the C categories `cats`.
fn categories(cats: u32) -> Result<NbiCategories, Error> {
    if cats & !GEX_NBI_ALL != 0 {
        return Err(Error::invalid(format!(
            "unknown NBI categories {cats:#x} (GEX_NBI_PUTS | GEX_NBI_GETS | GEX_NBI_ATOMICS)"
        )));
    }
    Ok(NbiCategories::from_bits_truncate(cats))
}

/// Completes the C layer's NBI gets whose events are complete (all of them, waiting,
/// with `wait`) if the categories `c` include gets: their bytes go to the callers'
/// buffers. Returns the first error and whether none is left (nothing to do, and true,
/// without gets in `c`).
fn finish_gets(
    s: &mut crate::handle::EpState,
    c: NbiCategories,
    wait: bool,
) -> (Result<(), Error>, bool) {
    if !c.contains(NbiCategories::GETS) {
        return (Ok(()), true);
    }
    let mut first = Ok(());
    let mut i = 0;
    while i < s.nbi_gets.len() {
        if !wait && !s.nbi_gets[i].any().done() {
            i += 1;
            continue;
        }
        let f = s.nbi_gets.swap_remove(i);
        let r = f.finish(&mut s.ep);
        if first.is_ok() {
            first = r;
        }
    }
    (first, s.nbi_gets.is_empty())
}

/// Waits (polling the endpoint) until every implicit-event operation of the categories
/// `cats` (`GEX_NBI_PUTS | GEX_NBI_GETS | GEX_NBI_ATOMICS`, or `GEX_NBI_ALL`) started on
/// this endpoint so far is complete: puts' bytes at their targets, gets' bytes in their
/// buffers, atomics performed.
///
/// Returns `GEX_OK`, or the first error of an operation that failed (every one is
/// complete all the same); `GEX_ERR_INVALID` for an unknown category bit.
///
/// # Safety
/// `ep` is NULL or a live endpoint.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gex_nbi_sync(ep: *const gex_ep_t, cats: u32) -> c_int {
    // SAFETY: the caller's promise, passed on.
    unsafe {
        nbi(ep, cats, |s, c| {
            let synced = s.ep.sync_nbi(c);
            let (gets, _) = finish_gets(s, c, true);
            synced?;
            gets?;
            Ok(gex_status_t::GEX_OK)
        })
    }
}

/// The body of the NBI calls: the endpoint and the categories `cats` checked, then
/// `f` on the endpoint's state and the categories.
///
/// # Safety
/// `ep` is NULL or a live endpoint.
unsafe fn nbi(
    ep: *const gex_ep_t,
    cats: u32,
    f: impl FnOnce(&mut crate::handle::EpState, NbiCategories) -> Result<gex_status_t, Error>,
) -> c_int {
    entry(|| {
        // SAFETY: the caller's promise, as `ptr::handle` states it.
        let h = unsafe { ptr::handle(ep) }?;
        let c = categories(cats)?;
        h.with(|s| f(s, c))
    })
}

/// Polls the endpoint once and reports whether every implicit-event operation of the
/// categories `cats` is complete: `GEX_OK` if so (as after [`gex_nbi_sync`]),
/// `GEX_PENDING` if not. Gets found complete have their bytes in their buffers.
///
/// Returns as [`gex_nbi_sync`], and `GEX_PENDING`.
///
/// # Safety
/// `ep` is NULL or a live endpoint.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gex_nbi_test(ep: *const gex_ep_t, cats: u32) -> c_int {
    // SAFETY: the caller's promise, passed on.
    unsafe {
        nbi(ep, cats, |s, c| {
            let quiet = s.ep.test_nbi(c)?;
            let (gets, none_left) = finish_gets(s, c, false);
            gets?;
            Ok(if quiet && none_left {
                gex_status_t::GEX_OK
            } else {
                gex_status_t::GEX_PENDING
            })
        })
    }
}
