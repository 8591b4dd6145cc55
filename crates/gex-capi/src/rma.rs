//! One-sided put and get (blocking and nonblocking) and remote atomics on `uint64_t`.
//!
//! Remote addresses are `(rank, offset)`: `offset` bytes into the segment of `rank`'s
//! endpoint of the calling endpoint's index. Every access is range-checked against the
//! target's segment (`GEX_ERR_RMA`).
#![allow(unsafe_code)]

use crate::event::{Op, gex_event_t};
use crate::handle::{gex_atomic_domain_t, gex_ep_t};
use crate::ptr::{self, Lent};
use crate::status::{Error, entry, gex_status_t};
use gex_facade::prelude::*;
use std::ffi::{c_int, c_void};

/// The global pointer of `(rank, offset)` for endpoint `h`'s index.
fn gptr<T>(h: &gex_ep_t, rank: u32, offset: usize) -> Result<GlobalPtr<T>, Error> {
    if rank >= h.size {
        return Err(Error::invalid(format!(
            "no such rank {rank} (the job has {} ranks)",
            h.size
        )));
    }
    Ok(GlobalPtr::new(EpAddr::new(rank, h.index), offset))
}

/// Writes a new event handle for `op` to the caller's slot `ev`.
///
/// # Safety
/// `ev` is non-null and valid for writing one pointer.
unsafe fn hand_out(ev: *mut *mut gex_event_t, op: Op) -> Result<gex_status_t, Error> {
    let e = ptr::into_raw(Box::new(gex_event_t::new(op)));
    // SAFETY: the caller's promise.
    unsafe { ptr::write(ev, e, "ev") }?;
    Ok(gex_status_t::GEX_OK)
}

/// Puts `len` bytes from `src` at `offset` in `rank`'s segment and returns once they
/// are there (remote completion).
///
/// Returns `GEX_OK`; `GEX_ERR_RMA` if the range is outside the target's segment or the
/// conduit failed; `GEX_ERR_INVALID` for a rank out of range.
///
/// # Safety
/// `ep` is NULL or a live endpoint; `src` is valid for reading `len` bytes (any pointer
/// when `len` is 0).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gex_put(
    ep: *const gex_ep_t,
    rank: u32,
    offset: usize,
    src: *const c_void,
    len: usize,
) -> c_int {
    entry(|| {
        // SAFETY: the caller's promises, as `ptr::handle` and `ptr::slice` state them.
        let h = unsafe { ptr::handle(ep) }?;
        // SAFETY: `src` is readable for the given count (this function's `# Safety`).
        let src = unsafe { ptr::slice(src.cast::<u8>(), len, "src") }?;
        let p = gptr::<u8>(h, rank, offset)?;
        h.with(|s| Ok(s.ep.put(p, src, Blocking)?))?;
        Ok(gex_status_t::GEX_OK)
    })
}

/// Starts a put of `len` bytes from `src` to `offset` in `rank`'s segment and writes
/// its event to `*ev`. `src` may be reused as soon as the call returns (gex has copied
/// what it still needs); the event completes when the bytes are at the target.
///
/// Returns as [`gex_put`] (no event is made on error); `GEX_ERR_NULL` if `ev` is NULL.
///
/// # Safety
/// As [`gex_put`], and `ev` is NULL or valid for writing one pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gex_put_nb(
    ep: *const gex_ep_t,
    rank: u32,
    offset: usize,
    src: *const c_void,
    len: usize,
    ev: *mut *mut gex_event_t,
) -> c_int {
    entry(|| {
        // SAFETY: the caller's promises, as `ptr::handle` and `ptr::slice` state them.
        let h = unsafe { ptr::handle(ep) }?;
        // SAFETY: `src` is readable for the given count (this function's `# Safety`).
        let src = unsafe { ptr::slice(src.cast::<u8>(), len, "src") }?;
        if ev.is_null() {
            return Err(Error::null("ev"));
        }
        let p = gptr::<u8>(h, rank, offset)?;
        let e = h.with(|s| Ok(s.ep.put(p, src, Nb)?))?;
        // SAFETY: `ev` is non-null and writable (the caller's promise).
        unsafe { hand_out(ev, Op::Unit(e)) }
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
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gex_get(
    ep: *const gex_ep_t,
    dst: *mut c_void,
    rank: u32,
    offset: usize,
    len: usize,
) -> c_int {
    entry(|| {
        // SAFETY: the caller's promises, as `ptr::handle` and `ptr::slice_mut` state them.
        let h = unsafe { ptr::handle(ep) }?;
        // SAFETY: `dst` is writable for the given count (this function's `# Safety`).
        let dst = unsafe { ptr::slice_mut(dst.cast::<u8>(), len, "dst") }?;
        let p = gptr::<u8>(h, rank, offset)?;
        h.with(|s| Ok(s.ep.get(dst, p, Blocking)?))?;
        Ok(gex_status_t::GEX_OK)
    })
}

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
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gex_get_nb(
    ep: *const gex_ep_t,
    dst: *mut c_void,
    rank: u32,
    offset: usize,
    len: usize,
    ev: *mut *mut gex_event_t,
) -> c_int {
    entry(|| {
        // SAFETY: the caller's promises, as `ptr::handle` and `Lent::new` state them.
        let h = unsafe { ptr::handle(ep) }?;
        // SAFETY: `dst` stays writable until the event completes or is freed (this function's `# Safety`).
        let dst = unsafe { Lent::new(dst.cast::<u8>(), len, "dst") }?;
        if ev.is_null() {
            return Err(Error::null("ev"));
        }
        let p = gptr::<u8>(h, rank, offset)?;
        let e = h.with(|s| Ok(s.ep.get(vec![0u8; len], p, Nb)?))?;
        // SAFETY: `ev` is non-null and writable (the caller's promise).
        unsafe { hand_out(ev, Op::Get(e, dst)) }
    })
}

/// Creates a domain of remote atomics on `uint64_t` over every rank (for the
/// endpoints of this endpoint's index) and writes it to `*ad`. Collective: every rank
/// calls it, in the same order as its other collectives.
///
/// Returns `GEX_OK`; `GEX_ERR_RMA` if the ranks disagree or the exchange failed.
///
/// # Safety
/// `ep` is NULL or a live endpoint; `ad` is NULL or valid for writing one pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gex_atomic_domain_create(
    ep: *const gex_ep_t,
    ad: *mut *mut gex_atomic_domain_t,
) -> c_int {
    entry(|| {
        // SAFETY: the caller's promise, as `ptr::handle` states it.
        let h = unsafe { ptr::handle(ep) }?;
        if ad.is_null() {
            return Err(Error::null("ad"));
        }
        let ops =
            AtomicOps::GET | AtomicOps::SET | AtomicOps::FADD | AtomicOps::ADD | AtomicOps::FCSWAP;
        let d = h.with(|s| {
            let world = s.world.clone();
            Ok(s.ep.atomic_domain::<u64>(&world, ops)?)
        })?;
        let p = ptr::into_raw(Box::new(gex_atomic_domain_t::new(d)));
        // SAFETY: `ad` is non-null and writable (the caller's promise).
        unsafe { ptr::write(ad, p, "ad") }?;
        Ok(gex_status_t::GEX_OK)
    })
}

/// Frees an atomic domain (not collective). A NULL `ad` is ignored.
///
/// # Safety
/// `ad` is NULL or a live atomic domain, used by no other thread during or after the
/// call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gex_atomic_domain_free(ad: *mut gex_atomic_domain_t) -> c_int {
    entry(|| {
        if !ad.is_null() {
            // SAFETY: the caller's promise, as `ptr::take` states it.
            drop(unsafe { ptr::take(ad) }?);
        }
        Ok(gex_status_t::GEX_OK)
    })
}

/// One fetching atomic `op` (operands `a`, `b`) on the word at `(rank, offset)`,
/// blocking, the old value written to `*old` unless it is NULL.
///
/// # Safety
/// `ep`, `ad` NULL or live handles; `old` NULL or valid for writing one `uint64_t`.
#[allow(clippy::too_many_arguments)]
unsafe fn fetch_blocking(
    ep: *const gex_ep_t,
    ad: *const gex_atomic_domain_t,
    op: AtomicOp,
    rank: u32,
    offset: usize,
    a: u64,
    b: u64,
    old: *mut u64,
) -> c_int {
    entry(|| {
        // SAFETY: the caller's promises, as `ptr::handle` states them.
        let h = unsafe { ptr::handle(ep) }?;
        // SAFETY: `ad` is NULL or a live handle (this function's `# Safety`).
        let d = unsafe { ptr::handle(ad) }?;
        let p = gptr::<u64>(h, rank, offset)?;
        let v = h.with(|s| {
            Ok(s.ep.fetch(&d.ad, op, p, a, b, AtomicFlags::empty(), Blocking)?)
        })?;
        if !old.is_null() {
            // SAFETY: non-null and writable (the caller's promise).
            unsafe { ptr::write(old, v, "old") }?;
        }
        Ok(gex_status_t::GEX_OK)
    })
}

/// Atomically adds `value` to the `uint64_t` at `offset` in `rank`'s segment
/// (wrapping) and writes the value it had before to `*old` (unless `old` is NULL).
/// `offset` must be a multiple of 8.
///
/// Returns `GEX_OK`; `GEX_ERR_RMA` if the word is outside the segment or misaligned.
///
/// # Safety
/// `ep` is NULL or a live endpoint, `ad` NULL or a live atomic domain created on it;
/// `old` NULL or valid for writing one `uint64_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gex_atomic_fetch_add_u64(
    ep: *const gex_ep_t,
    ad: *const gex_atomic_domain_t,
    rank: u32,
    offset: usize,
    value: u64,
    old: *mut u64,
) -> c_int {
    // SAFETY: the caller's promises, passed on.
    unsafe { fetch_blocking(ep, ad, AtomicOp::Fadd, rank, offset, value, 0, old) }
}

/// Atomically replaces the `uint64_t` at `offset` in `rank`'s segment by `desired` if
/// it equals `expected`, and writes the value it had before to `*old` (unless NULL):
/// the swap happened if `*old == expected`.
///
/// Returns as [`gex_atomic_fetch_add_u64`].
///
/// # Safety
/// As [`gex_atomic_fetch_add_u64`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gex_atomic_compare_swap_u64(
    ep: *const gex_ep_t,
    ad: *const gex_atomic_domain_t,
    rank: u32,
    offset: usize,
    expected: u64,
    desired: u64,
    old: *mut u64,
) -> c_int {
    // SAFETY: the caller's promises, passed on.
    unsafe {
        fetch_blocking(
            ep,
            ad,
            AtomicOp::Fcswap,
            rank,
            offset,
            expected,
            desired,
            old,
        )
    }
}

/// Atomically reads the `uint64_t` at `offset` in `rank`'s segment into `*value`.
///
/// Returns as [`gex_atomic_fetch_add_u64`]; `GEX_ERR_NULL` if `value` is NULL.
///
/// # Safety
/// As [`gex_atomic_fetch_add_u64`], `value` NULL or valid for writing one `uint64_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gex_atomic_get_u64(
    ep: *const gex_ep_t,
    ad: *const gex_atomic_domain_t,
    rank: u32,
    offset: usize,
    value: *mut u64,
) -> c_int {
    if value.is_null() {
        return entry(|| Err(Error::null("value")));
    }
    // SAFETY: the caller's promises, passed on.
    unsafe { fetch_blocking(ep, ad, AtomicOp::Get, rank, offset, 0, 0, value) }
}

/// Starts an atomic fetch-add (as [`gex_atomic_fetch_add_u64`]) and writes its event
/// to `*ev`; the old value is written to `*old` by the call that completes the event
/// (never if the event is freed first).
///
/// # Safety
/// As [`gex_atomic_fetch_add_u64`], with `old` valid for writing one `uint64_t` until
/// the event is completed or freed; `ev` NULL or valid for writing one pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gex_atomic_fetch_add_u64_nb(
    ep: *const gex_ep_t,
    ad: *const gex_atomic_domain_t,
    rank: u32,
    offset: usize,
    value: u64,
    old: *mut u64,
    ev: *mut *mut gex_event_t,
) -> c_int {
    entry(|| {
        // SAFETY: the caller's promises, as `ptr::handle` and `Lent::new` state them.
        let h = unsafe { ptr::handle(ep) }?;
        // SAFETY: `ad` is NULL or a live handle (this function's `# Safety`).
        let d = unsafe { ptr::handle(ad) }?;
        // SAFETY: `old` stays writable until the event completes or is freed (this function's `# Safety`).
        let out = unsafe { Lent::new(old, 1, "old") }?;
        if ev.is_null() {
            return Err(Error::null("ev"));
        }
        let p = gptr::<u64>(h, rank, offset)?;
        let f = AtomicFlags::empty();
        let e = h.with(|s| Ok(s.ep.fetch(&d.ad, AtomicOp::Fadd, p, value, 0, f, Nb)?))?;
        // SAFETY: `ev` is non-null and writable (the caller's promise).
        unsafe { hand_out(ev, Op::Fetch(e, out)) }
    })
}
