//! Collectives over every rank (the endpoints of the calling endpoint's index): the
//! barrier and allreduce. Each is collective: every rank calls it, in the same order
//! as its other collectives; they poll the endpoint (handlers run) while they wait.
#![allow(unsafe_code)]

use crate::handle::gex_ep_t;
use crate::ptr;
use crate::status::{Error, entry, gex_status_t};
use gex_facade::coll::Elem;
use gex_facade::prelude::*;
use std::ffi::c_int;

/// A reduction operator of `gex_allreduce_*`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum gex_op_t {
    /// Sum (wrapping for integers).
    GEX_OP_SUM = 0,
    /// Minimum.
    GEX_OP_MIN = 1,
    /// Maximum.
    GEX_OP_MAX = 2,
}

fn builtin(op: c_int) -> Result<BuiltinOp, Error> {
    match op {
        x if x == gex_op_t::GEX_OP_SUM as c_int => Ok(BuiltinOp::Sum),
        x if x == gex_op_t::GEX_OP_MIN as c_int => Ok(BuiltinOp::Min),
        x if x == gex_op_t::GEX_OP_MAX as c_int => Ok(BuiltinOp::Max),
        _ => Err(Error::invalid(format!("unknown reduction operator {op}"))),
    }
}

/// Blocks until every rank has entered the barrier.
///
/// Returns `GEX_OK`; `GEX_ERR_COLL` if it failed.
///
/// # Safety
/// `ep` is NULL or a live endpoint.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gex_barrier(ep: *const gex_ep_t) -> c_int {
    entry(|| {
        // SAFETY: the caller's promise, as `ptr::handle` states it.
        let h = unsafe { ptr::handle(ep) }?;
        h.with(|s| {
            let world = s.world.clone();
            Ok(s.ep.barrier(&world)?)
        })?;
        Ok(gex_status_t::GEX_OK)
    })
}

/// The body of the allreduce entry points.
///
/// # Safety
/// As [`gex_allreduce_u64`], for elements of `T`.
unsafe fn allreduce<T: Elem>(
    ep: *const gex_ep_t,
    src: *const T,
    dst: *mut T,
    n: usize,
    op: c_int,
) -> c_int {
    entry(|| {
        // SAFETY: the caller's promises, as `ptr::handle`, `ptr::slice` and
        // `ptr::slice_mut` state them.
        let h = unsafe { ptr::handle(ep) }?;
        let bytes = n.saturating_mul(size_of::<T>());
        let (s0, d0) = (src.addr(), dst.addr());
        if n > 0 && s0 < d0.saturating_add(bytes) && d0 < s0.saturating_add(bytes) {
            return Err(Error::invalid("allreduce: src and dst overlap"));
        }
        // SAFETY: `src` is readable for the given count (this function's `# Safety`).
        let src = unsafe { ptr::slice(src, n, "src") }?;
        // SAFETY: `dst` is writable for the given count (this function's `# Safety`).
        let dst = unsafe { ptr::slice_mut(dst, n, "dst") }?;
        let op = builtin(op)?;
        h.with(|s| {
            let world = s.world.clone();
            Ok(s.ep.collective(&world, Allreduce::slices(src, dst, op), Blocking)?)
        })?;
        Ok(gex_status_t::GEX_OK)
    })
}

/// Reduces the `n` elements of every rank's `src` element-wise with `op` (a
/// [`gex_op_t`]) and writes the result to every rank's `dst`. Every rank passes the
/// same `n` and `op`.
///
/// Returns `GEX_OK`; `GEX_ERR_INVALID` for an unknown `op`; `GEX_ERR_COLL` if it failed
/// (e.g. the ranks passed different counts).
///
/// # Safety
/// `ep` is NULL or a live endpoint; `src` is valid for reading and `dst` for writing
/// `n` elements (any pointers when `n` is 0), and the two do not overlap.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gex_allreduce_u64(
    ep: *const gex_ep_t,
    src: *const u64,
    dst: *mut u64,
    n: usize,
    op: c_int,
) -> c_int {
    // SAFETY: the caller's promises, passed on.
    unsafe { allreduce(ep, src, dst, n, op) }
}

/// As [`gex_allreduce_u64`] for `double`s (the sum's rounding depends on the order
/// gex adds them in, the same on every rank).
///
/// # Safety
/// As [`gex_allreduce_u64`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gex_allreduce_f64(
    ep: *const gex_ep_t,
    src: *const f64,
    dst: *mut f64,
    n: usize,
    op: c_int,
) -> c_int {
    // SAFETY: the caller's promises, passed on.
    unsafe { allreduce(ep, src, dst, n, op) }
}
