//! User-defined reduction operators from C: a C function combining elements of
//! `elem_size` bytes ([`gex_reduce_fn_t`]), registered with `gex_op_create` and used by
//! `gex_allreduce_user`, `gex_reduce_user`, `gex_reduce_scatter_user`, `gex_scan_user`
//! and `gex_exscan_user` (blocking and `_nb`).
//!
//! gex-coll's operators are typed ([`ReduceOp<T>`] over an element type `T: Elem`, a
//! `Pod`), and its user operators apply a Rust function to one element pair at a time.
//! The C operator becomes such an operator over an opaque element type of its size:
//! one byte array per supported size (1, 2, 4, 8, 16, 32, 64, 128 and 256 bytes),
//! alignment 1, so that the caller's buffers need no alignment beyond their C type's.
//! The C function is called once per element pair (`count` is 1), on copies gex owns,
//! 16-byte aligned (as aligned as any C type of these sizes needs): `inout` is the left
//! operand and
//! receives the result, `in` the right one; operands are combined in team-rank order
//! (`x0 ⊕ x1 ⊕ …`) unless the operator is commutative.
#![allow(unsafe_code)]

use crate::coll::{CElem, Call, Red, Shape, args, combine, slot};
use crate::event::gex_event_t;
use crate::handle::{gex_ep_t, gex_team_t};
use crate::ptr;
use crate::status::{Error, entry, gex_status_t};
use gex_facade::coll::{BuiltinOp, Elem, ReduceOp};
use gex_sync::atomic::AtomicU64;
use std::ffi::{c_int, c_void};

/// A user reduction function: combines `count` elements of the operator's
/// `elem_size` bytes, `inout[i] = inout[i] ⊕ in[i]` (`inout` is the left operand),
/// called with the `arg` given to `gex_op_create`. It must not call gex, must not
/// unwind (a C++ exception or a `longjmp` out of it is undefined behaviour), and must
/// be associative (and commutative if created so).
pub type gex_reduce_fn_t = Option<
    unsafe extern "C" fn(inout: *mut c_void, r#in: *const c_void, count: usize, arg: *mut c_void),
>;

/// The C function and its argument, callable from the threads that progress
/// collectives.
#[derive(Clone, Copy, Debug)]
struct CFn {
    f: unsafe extern "C" fn(*mut c_void, *const c_void, usize, *mut c_void),
    arg: *mut c_void,
}

// SAFETY: gex never dereferences `arg`; it only passes it back to `f`. The caller of
// `gex_op_create` promised (its `# Safety`) that `f` may be called with `arg` from any
// thread that progresses a collective using the operator (the calling thread, or an
// endpoint's progress thread), including from two threads at once for two endpoints.
unsafe impl Send for CFn {}
// SAFETY: as for `Send`: calls through a shared `CFn` are the calls the caller allowed.
unsafe impl Sync for CFn {}

impl CFn {
    /// `*l ⊕ *r`, by the C function on 16-byte aligned copies of both.
    fn apply<E: Copy>(&self, l: &E, r: &E) -> E {
        let (mut out, inc) = (Aligned(*l), Aligned(*r));
        // SAFETY: `out` and `inc` are valid elements of the operator's size (`E` is the
        // opaque type of that size), one each (`count` 1), 16-byte aligned; the C
        // function was promised callable with `arg` on this thread (`gex_op_create`'s
        // `# Safety`) and does not unwind.
        unsafe {
            (self.f)(
                (&raw mut out.0).cast::<c_void>(),
                (&raw const inc.0).cast::<c_void>(),
                1,
                self.arg,
            )
        };
        out.0
    }
}

/// An operand as the C function receives it: aligned for any C type of the supported
/// sizes.
#[repr(C, align(16))]
struct Aligned<E>(E);

/// A user-defined reduction operator (`gex_op_create` .. `gex_op_free`).
#[derive(Debug)]
pub struct gex_user_op_t {
    magic: AtomicU64,
    f: CFn,
    elem_size: usize,
    commutative: bool,
}

crate::ptr::magic!(gex_user_op_t, 0x6765_785f_7573_6f70, "user op");

/// An opaque element of a user operator: its bytes are only the C function's.
pub trait Opaque: CElem {}

macro_rules! opaque {
    ($($name:ident $n:literal),*) => {$(
        #[doc = concat!("An opaque element of ", stringify!($n), " bytes (user operators).")]
        #[repr(transparent)]
        #[derive(Clone, Copy, Debug, PartialEq)]
        pub struct $name([u8; $n]);
        // SAFETY: a byte array: no padding, every bit pattern valid, all-zero valid.
        unsafe impl bytemuck::Zeroable for $name {}
        // SAFETY: as above; `repr(transparent)`, `Copy`, `'static`.
        unsafe impl bytemuck::Pod for $name {}
        impl Elem for $name {
            fn builtin(_: BuiltinOp, a: Self, _: Self) -> Self {
                // Never called: `reduce_op` refuses every built-in operator on opaque
                // elements, so no built-in `ReduceOp` of this type is ever made.
                a
            }
        }
        impl CElem for $name {
            fn reduce_op(op: c_int) -> Result<ReduceOp<Self>, Error> {
                Err(Error::invalid(format!(
                    "built-in operator {op} on an opaque element"
                )))
            }
        }
        impl Opaque for $name {}
    )*};
}
opaque!(B1 1, B2 2, B4 4, B8 8, B16 16, B32 32, B64 64, B128 128, B256 256);

/// Evaluates `$body` with `$e` the opaque element type of `$size` bytes;
/// `GEX_ERR_INVALID` for an unsupported size.
macro_rules! by_size {
    ($size:expr, |$e:ident| $body:expr) => {
        match $size {
            1 => { type $e = B1; $body }
            2 => { type $e = B2; $body }
            4 => { type $e = B4; $body }
            8 => { type $e = B8; $body }
            16 => { type $e = B16; $body }
            32 => { type $e = B32; $body }
            64 => { type $e = B64; $body }
            128 => { type $e = B128; $body }
            256 => { type $e = B256; $body }
            other => Err(unsupported(other)),
        }
    };
}

fn unsupported(size: usize) -> Error {
    Error::invalid(format!(
        "user operators take elements of 1, 2, 4, 8, 16, 32, 64, 128 or 256 bytes, not {size}"
    ))
}

/// Creates a user-defined reduction operator: `fn` combines elements of `elem_size`
/// bytes (1, 2, 4, 8, 16, 32, 64, 128 or 256: pad other types to the next of these),
/// called with `arg`; `commutative` non-zero allows gex to combine operands out of
/// team-rank order. Writes the operator to `*op`.
///
/// `fn` runs on the thread that progresses a collective using the operator: inside
/// the gex calls of that thread that poll (the collective's own call, `gex_ep_poll`,
/// event tests and waits), or on the endpoint's progress thread if there is one. It is
/// called on copies gex owns, with `count` elements (currently always 1), 16-byte
/// aligned. The buffers of the collectives need no alignment beyond their C type's.
///
/// Returns `GEX_OK`; `GEX_ERR_NULL` if `fn` or `op` is NULL; `GEX_ERR_INVALID` for an
/// unsupported `elem_size`.
///
/// # Safety
/// `op` is NULL or valid for writing one pointer. `fn` is a function of the type
/// [`gex_reduce_fn_t`] that may be called with `arg` on any thread that progresses a
/// collective using the operator (from several threads at once when it is used on
/// several endpoints), never unwinds, and does not call gex; `arg` stays valid for
/// `fn` until every collective started with the operator has completed (its outcome
/// taken, or its event freed and the collective completed on every member).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gex_op_create(
    r#fn: gex_reduce_fn_t,
    elem_size: usize,
    commutative: c_int,
    arg: *mut c_void,
    op: *mut *mut gex_user_op_t,
) -> c_int {
    entry(|| {
        let f = r#fn.ok_or_else(|| Error::null("fn"))?;
        if op.is_null() {
            return Err(Error::null("op"));
        }
        if !matches!(elem_size, 1 | 2 | 4 | 8 | 16 | 32 | 64 | 128 | 256) {
            return Err(unsupported(elem_size));
        }
        let o = ptr::into_raw(Box::new(gex_user_op_t {
            magic: AtomicU64::new(0),
            f: CFn { f, arg },
            elem_size,
            commutative: commutative != 0,
        }));
        // SAFETY: `op` is non-null and writable (the caller's promise).
        if let Err(e) = unsafe { ptr::write(op, o, "op") } {
            // SAFETY: `o` was just made by `into_raw` and handed to no one.
            drop(unsafe { ptr::take(o) });
            return Err(e);
        }
        Ok(gex_status_t::GEX_OK)
    })
}

/// Frees a user-defined operator. Collectives already started with it are not
/// affected (they hold their own copy of `fn` and `arg`). A NULL `op` is ignored.
///
/// Returns `GEX_OK`; `GEX_ERR_INVALID` if `op` is not a live operator.
///
/// # Safety
/// `op` is NULL or a live operator, used by no other thread during or after the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gex_op_free(op: *mut gex_user_op_t) -> c_int {
    // SAFETY: the caller's promise, as `ptr::free` states it.
    entry(|| unsafe { ptr::free(op) })
}

/// gex-coll's operator of the C operator `u`, on elements `E`.
fn reduce_op<E: Opaque>(u: &gex_user_op_t) -> ReduceOp<E> {
    let f = u.f;
    ReduceOp::user(u.commutative, move |l: &E, r: &E| f.apply(l, r))
}

/// The body of the user-operator entry points.
///
/// # Safety
/// As the entry point of `shape` (its `_nb` form with `nb`).
#[allow(clippy::too_many_arguments)]
unsafe fn run(
    shape: Shape,
    ep: *const gex_ep_t,
    team: *const gex_team_t,
    call: Call,
    (op,): (*const gex_user_op_t,),
) -> c_int {
    entry(|| {
        // SAFETY: the caller's promises, as `args` states them.
        let (h, t) = unsafe { args(ep, team) }?;
        // SAFETY: the caller's promise, as `ptr::handle` states it.
        let u = unsafe { ptr::handle(op) }?;
        slot(call.nb)?;
        by_size!(u.elem_size, |E| {
            let r = Red::Op(reduce_op::<E>(u));
            // SAFETY: the caller's promises, passed on.
            unsafe { combine::<E>(shape, h, &t, call, r) }
        })
    })
}

team_data_fns! { run;
    /// Reduces the `count` elements (of `op`'s `elem_size` bytes) of every member's `src`
    /// element-wise with the user operator `op`, in team-rank order unless `op` is
    /// commutative, and writes the result to every member's `dst`. Every member passes
    /// the same `count` and an operator of the same function, size and commutativity.
    ///
    /// Returns `GEX_OK`; `GEX_ERR_INVALID` for overlapping buffers, a team of another
    /// endpoint or an `op` that is not a live operator; `GEX_ERR_NULL` for a NULL `op`;
    /// `GEX_ERR_COLL` if it failed (e.g. the members passed different counts).
    ///
    /// # Safety
    /// `ep` is NULL or a live endpoint, `team` NULL or a live team, `op` NULL or a live
    /// operator; `src` is valid for reading and `dst` for writing `count` elements (any
    /// pointers when `count` is 0), not overlapping.
    fn gex_allreduce_user = Allreduce [] (op: *const gex_user_op_t) [];

    /// Starts an allreduce with a user operator (as [`gex_allreduce_user`]) and writes its
    /// event to `*ev`: `src` is copied before the call returns, `dst` written by the call
    /// that completes the event (never if the event is freed first).
    ///
    /// Returns as [`gex_allreduce_user`]; `GEX_ERR_NULL` if `ev` is NULL.
    ///
    /// # Safety
    /// As [`gex_allreduce_user`], with `dst` valid for writing until the event is
    /// completed or freed; `ev` is NULL or valid for writing one pointer.
    fn gex_allreduce_user_nb = Allreduce [] (op: *const gex_user_op_t) [ev];

    /// Reduces as [`gex_allreduce_user`] into the `dst` of team rank `root` only (`dst` is
    /// ignored elsewhere and may be NULL).
    ///
    /// Returns as [`gex_allreduce_user`], and `GEX_ERR_INVALID` for a `root` out of range.
    ///
    /// # Safety
    /// As [`gex_allreduce_user`], with `dst` valid for writing `count` elements at the
    /// root only.
    fn gex_reduce_user = Reduce [root] (op: *const gex_user_op_t) [];

    /// Starts a reduce with a user operator (as [`gex_reduce_user`]) and writes its event
    /// to `*ev`; the root's `dst` is written by the call that completes the event.
    ///
    /// Returns as [`gex_reduce_user`]; `GEX_ERR_NULL` if `ev` is NULL.
    ///
    /// # Safety
    /// As [`gex_reduce_user`], with the root's `dst` valid for writing until the event is
    /// completed or freed; `ev` is NULL or valid for writing one pointer.
    fn gex_reduce_user_nb = Reduce [root] (op: *const gex_user_op_t) [ev];

    /// Inclusive scan with a user operator: team rank `i`'s `dst` receives
    /// `src_0 ⊕ src_1 ⊕ … ⊕ src_i` element-wise (`count` elements).
    ///
    /// Returns as [`gex_allreduce_user`].
    ///
    /// # Safety
    /// As [`gex_allreduce_user`].
    fn gex_scan_user = Scan [] (op: *const gex_user_op_t) [];

    /// Starts an inclusive scan with a user operator (as [`gex_scan_user`]) and writes its
    /// event to `*ev`; `dst` is written by the call that completes the event.
    ///
    /// Returns as [`gex_allreduce_user_nb`].
    ///
    /// # Safety
    /// As [`gex_allreduce_user_nb`].
    fn gex_scan_user_nb = Scan [] (op: *const gex_user_op_t) [ev];

    /// Reduce_scatter with a user operator: reduces every member's `src` (`size × count`
    /// elements) element-wise with `op` (in team-rank order unless `op` is commutative);
    /// team rank `i`'s `dst` receives block `i` (`count` elements) of the result.
    ///
    /// Returns as [`gex_allreduce_user`].
    ///
    /// # Safety
    /// As [`gex_allreduce_user`], with `src` valid for reading `size × count` elements.
    fn gex_reduce_scatter_user = ReduceScatter [] (op: *const gex_user_op_t) [];

    /// Starts a reduce_scatter with a user operator (as [`gex_reduce_scatter_user`]) and
    /// writes its event to `*ev`; `dst` is written by the call that completes the event.
    ///
    /// Returns as [`gex_allreduce_user_nb`].
    ///
    /// # Safety
    /// As [`gex_reduce_scatter_user`], with `dst` valid for writing until the event is
    /// completed or freed; `ev` is NULL or valid for writing one pointer.
    fn gex_reduce_scatter_user_nb = ReduceScatter [] (op: *const gex_user_op_t) [ev];

    /// Exclusive scan with a user operator: team rank `i > 0`'s `dst` receives
    /// `src_0 ⊕ … ⊕ src_{i-1}` element-wise (`count` elements); team rank 0's `dst` is
    /// not written.
    ///
    /// Returns as [`gex_allreduce_user`].
    ///
    /// # Safety
    /// As [`gex_allreduce_user`].
    fn gex_exscan_user = Exscan [] (op: *const gex_user_op_t) [];

    /// Starts an exclusive scan with a user operator (as [`gex_exscan_user`]) and writes
    /// its event to `*ev`; `dst` (not team rank 0's) is written by the call that completes
    /// the event.
    ///
    /// Returns as [`gex_allreduce_user_nb`].
    ///
    /// # Safety
    /// As [`gex_allreduce_user_nb`].
    fn gex_exscan_user_nb = Exscan [] (op: *const gex_user_op_t) [ev];

}

/// The byte-level function gex-coll applies for `u` (tests: operand order).
#[cfg(test)]
pub(crate) fn reduce_op_for_test(u: &gex_user_op_t) -> gex_facade::coll::ReduceFn {
    let f: Result<_, Error> = by_size!(u.elem_size, |E| Ok(reduce_op::<E>(u).func().clone()));
    f.expect("a supported size")
}
