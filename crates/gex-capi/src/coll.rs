//! Collectives: over every rank (`gex_barrier`, `gex_allreduce_u64/f64`) and over a
//! team (`gex_team_barrier`, broadcast, scatter, gather, gather_all, exchange, reduce,
//! allreduce, reduce_scatter, scan, exscan of every element type of [`gex_dt_t`] with
//! every operator of [`gex_op_t`]), blocking and nonblocking (a `gex_event_t`). Each is collective: every member calls it, in the
//! same order as its other collectives on the team; they poll the endpoint (handlers
//! run) while they wait.
//!
//! A nonblocking collective copies its input when it starts (the source may be reused
//! at once) and writes its output to the caller's destination when its event is
//! completed (gex-coll's owned-buffer form: a borrowed destination cannot outlive a
//! Rust call, a C buffer lent until the event completes can).
#![allow(unsafe_code)]

use crate::event::{Done, Filled, Op, gex_event_t};
use crate::handle::{EpState, gex_ep_t, gex_team_t};
use crate::ptr::{self, Lent};
use crate::status::{Error, entry, gex_status_t};
use gex_facade::coll::{BarrierFlags, BitOp, Elem, Exscan, ReduceOp};
use gex_facade::prelude::*;
use std::ffi::{c_int, c_void};

c_enum! {
    OP_DECLS;
    /// A reduction operator (`gex_allreduce_*`, `gex_reduce`, `gex_allreduce`).
    pub enum gex_op_t {
        /// Sum (wrapping for integers).
        GEX_OP_SUM = 0 => OpKind::Builtin(BuiltinOp::Sum),
        /// Minimum.
        GEX_OP_MIN = 1 => OpKind::Builtin(BuiltinOp::Min),
        /// Maximum.
        GEX_OP_MAX = 2 => OpKind::Builtin(BuiltinOp::Max),
        /// Product (wrapping for integers).
        GEX_OP_PROD = 3 => OpKind::Builtin(BuiltinOp::Prod),
        /// Bitwise and (integer types only).
        GEX_OP_BAND = 4 => OpKind::Bit(BitOp::Band),
        /// Bitwise or (integer types only).
        GEX_OP_BOR = 5 => OpKind::Bit(BitOp::Bor),
        /// Bitwise exclusive or (integer types only).
        GEX_OP_BXOR = 6 => OpKind::Bit(BitOp::Bxor),
        /// Logical and: 1 if both are non-zero, else 0 (integer types only).
        GEX_OP_LAND = 7 => OpKind::Bit(BitOp::Land),
        /// Logical or: 1 if either is non-zero, else 0 (integer types only).
        GEX_OP_LOR = 8 => OpKind::Bit(BitOp::Lor),
    }
    /// The gex-coll operator.
    fn kind(self) -> OpKind;
}

/// What a C reduction operator is to gex-coll: an operator of every element type or a
/// bitwise one (integer types only).
#[derive(Clone, Copy)]
enum OpKind {
    Builtin(BuiltinOp),
    Bit(BitOp),
}

/// An element type of the typed collectives and atomic domains.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum gex_dt_t {
    /// `int32_t`.
    GEX_DT_I32 = 0,
    /// `uint32_t`.
    GEX_DT_U32 = 1,
    /// `int64_t`.
    GEX_DT_I64 = 2,
    /// `uint64_t`.
    GEX_DT_U64 = 3,
    /// `float`.
    GEX_DT_F32 = 4,
    /// `double`.
    GEX_DT_F64 = 5,
    /// `uint8_t` (collectives only: bytes to broadcast or gather; no atomics).
    GEX_DT_U8 = 6,
}

/// The operator of every element type that `op` names; `GEX_ERR_INVALID` for an
/// unknown or a bitwise one.
fn builtin(op: c_int) -> Result<BuiltinOp, Error> {
    match gex_op_t::from_code(op).map(gex_op_t::kind) {
        Some(OpKind::Builtin(b)) => Ok(b),
        _ => Err(Error::invalid(format!(
            "unknown reduction operator {op} (or a bitwise one on a float type)"
        ))),
    }
}

/// The bitwise operator that `op` names, if it names one.
fn bitop(op: c_int) -> Option<BitOp> {
    match gex_op_t::from_code(op).map(gex_op_t::kind) {
        Some(OpKind::Bit(b)) => Some(b),
        _ => None,
    }
}

/// An element type of the C collectives: its reduction operators.
pub trait CElem: Elem + Copy {
    /// The gex-coll operator of the C operator `op`.
    ///
    /// # Errors
    /// `GEX_ERR_INVALID` for an unknown operator or a bitwise one on a float type.
    fn reduce_op(op: c_int) -> Result<ReduceOp<Self>, Error>;
}

macro_rules! int_celem {
    ($($t:ty),*) => {$(
        impl CElem for $t {
            fn reduce_op(op: c_int) -> Result<ReduceOp<Self>, Error> {
                match bitop(op) {
                    Some(b) => Ok(ReduceOp::bitwise(b)),
                    None => Ok(ReduceOp::builtin(builtin(op)?)),
                }
            }
        }
    )*};
}
int_celem!(u8, u32, i32, u64, i64);

macro_rules! float_celem {
    ($($t:ty),*) => {$(
        impl CElem for $t {
            fn reduce_op(op: c_int) -> Result<ReduceOp<Self>, Error> {
                Ok(ReduceOp::builtin(builtin(op)?))
            }
        }
    )*};
}
float_celem!(f32, f64);

/// Runs the generic function `$f::<T>(args)` for the element type named by the C
/// `gex_dt_t` value `$dt`; `GEX_ERR_INVALID` for an unknown one.
macro_rules! by_dt {
    ($dt:expr, $f:ident($($a:expr),* $(,)?)) => {{
        use $crate::coll::gex_dt_t::*;
        match $dt {
            x if x == GEX_DT_I32 as c_int => $f::<i32>($($a),*),
            x if x == GEX_DT_U32 as c_int => $f::<u32>($($a),*),
            x if x == GEX_DT_I64 as c_int => $f::<i64>($($a),*),
            x if x == GEX_DT_U64 as c_int => $f::<u64>($($a),*),
            x if x == GEX_DT_F32 as c_int => $f::<f32>($($a),*),
            x if x == GEX_DT_F64 as c_int => $f::<f64>($($a),*),
            x if x == GEX_DT_U8 as c_int => $f::<u8>($($a),*),
            other => Err($crate::status::Error::invalid(format!("unknown element type {other}"))),
        }
    }};
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

/// The endpoint and the team of a team collective, checked.
///
/// # Safety
/// `ep` is NULL or a live endpoint, `team` NULL or a live team.
pub(crate) unsafe fn args<'a>(
    ep: *const gex_ep_t,
    team: *const gex_team_t,
) -> Result<(&'a gex_ep_t, Team), Error> {
    // SAFETY: the caller's promise, as `ptr::handle` states it.
    let h = unsafe { ptr::handle(ep) }?;
    // SAFETY: as above.
    let t = unsafe { ptr::handle(team) }?;
    Ok((h, t.of(h)?.clone()))
}

/// Refuses a source and a destination that overlap (`sb` and `db` bytes).
fn disjoint(src: *const c_void, sb: usize, dst: *mut c_void, db: usize) -> Result<(), Error> {
    let (s0, d0) = (src.addr(), dst.addr());
    if sb > 0 && db > 0 && s0 < d0.saturating_add(db) && d0 < s0.saturating_add(sb) {
        return Err(Error::invalid("src and dst overlap"));
    }
    Ok(())
}

/// `n` elements of `T` in bytes, or `GEX_ERR_INVALID`.
fn bytes<T>(n: usize, what: &str) -> Result<usize, Error> {
    n.checked_mul(size_of::<T>())
        .filter(|&b| b <= isize::MAX as usize)
        .ok_or_else(|| Error::invalid(format!("{what}: {n} elements overflow")))
}

/// Completes a nonblocking collective's start: its event to the caller's slot.
///
/// # Safety
/// `ev` is non-null and valid for writing one pointer.
unsafe fn started<T: CElem>(
    ev: *mut *mut gex_event_t,
    e: Event<Vec<T>, CollError>,
    dst: Lent<T>,
) -> Result<gex_status_t, Error> {
    // SAFETY: the caller's promise.
    unsafe { crate::event::hand_out(ev, Op::Dyn(Box::new(Filled { ev: e, dst }))) }
}

/// Checks the event slot of a nonblocking call.
pub(crate) fn slot(
    nb: Option<*mut *mut gex_event_t>,
) -> Result<Option<*mut *mut gex_event_t>, Error> {
    match nb {
        Some(ev) if ev.is_null() => Err(Error::null("ev")),
        x => Ok(x),
    }
}

/// Broadcast of `n` elements of `T` at `buf` from team rank `root`; nonblocking with
/// `nb` (its event slot).
///
/// # Safety
/// As [`gex_broadcast`] (and [`gex_broadcast_nb`] with `nb`).
unsafe fn broadcast<T: CElem>(
    h: &gex_ep_t,
    team: &Team,
    root: u32,
    buf: *mut c_void,
    n: usize,
    nb: Option<*mut *mut gex_event_t>,
) -> Result<gex_status_t, Error> {
    let buf = buf.cast::<T>();
    match slot(nb)? {
        None => {
            // SAFETY: `buf` is valid for reads and writes of `n` elements (contract).
            let b = unsafe { ptr::slice_mut(buf, n, "buf") }?;
            h.with(|s| {
                Ok(s.ep.collective(team, Broadcast::in_place(root, b), Blocking)?)
            })?;
            Ok(gex_status_t::GEX_OK)
        }
        Some(ev) => {
            // SAFETY: `buf` stays writable until the event completes or is freed (contract).
            let dst = unsafe { Lent::new(buf, n, "buf") }?;
            let data = if team.rank() == root {
                // SAFETY: the root's `buf` is readable for `n` elements (contract).
                unsafe { ptr::slice(buf.cast_const(), n, "buf") }?.to_vec()
            } else {
                vec![T::zeroed(); n]
            };
            let e = h.with(|s| Ok(s.ep.collective(team, Broadcast::new(root, data), Nb)?))?;
            // SAFETY: `ev` is non-null (checked) and writable (contract).
            unsafe { started(ev, e, dst) }
        }
    }
}

/// The element type ([`gex_dt_t`]) and reduction operator ([`gex_op_t`], 0 for a
/// collective that does not reduce) of a typed collective's C call.
struct DtOp(c_int, c_int);

impl From<(c_int,)> for DtOp {
    fn from((dt,): (c_int,)) -> Self {
        DtOp(dt, 0)
    }
}

impl From<(c_int, c_int)> for DtOp {
    fn from((dt, op): (c_int, c_int)) -> Self {
        DtOp(dt, op)
    }
}

/// The root (team rank 0 for an unrooted collective), buffers, element count and
/// event slot (`None`: blocking) of a data collective's call.
#[derive(Clone, Copy)]
pub(crate) struct Call {
    /// The root's team rank.
    pub(crate) root: u32,
    /// The input.
    pub(crate) src: *const c_void,
    /// The output.
    pub(crate) dst: *mut c_void,
    /// The block's element count.
    pub(crate) count: usize,
    /// The event slot of a nonblocking call.
    pub(crate) nb: Option<*mut *mut gex_event_t>,
}

/// The reduction operator of a data collective: a C [`gex_op_t`] value (ignored by
/// the collectives that do not reduce) or a ready operator (a user-defined one).
pub(crate) enum Red<T> {
    /// A [`gex_op_t`] value.
    C(c_int),
    /// An operator built by the caller.
    Op(ReduceOp<T>),
}

/// The data collective of a call: which buffers it reads and writes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    /// `gex_gather`: `n` in, `P × n` out at the root.
    Gather,
    /// `gex_gather_all`: `n` in, `P × n` out.
    GatherAll,
    /// `gex_reduce`: `n` in, `n` out at the root.
    Reduce,
    /// `gex_allreduce`: `n` in, `n` out.
    Allreduce,
    /// `gex_scatter`: `P × n` in at the root, `n` out.
    Scatter,
    /// `gex_exchange`: `P × n` in, `P × n` out.
    Exchange,
    /// `gex_reduce_scatter`: `P × n` in, `n` out.
    ReduceScatter,
    /// `gex_scan`: `n` in, `n` out.
    Scan,
    /// `gex_exscan`: `n` in, `n` out (team rank 0's untouched).
    Exscan,
}

impl Shape {
    /// Rooted: only the root has the `P`-block side.
    fn rooted(self) -> bool {
        matches!(self, Shape::Gather | Shape::Reduce | Shape::Scatter)
    }
    /// A reduction (takes an operator).
    fn reduces(self) -> bool {
        matches!(
            self,
            Shape::Reduce | Shape::Allreduce | Shape::ReduceScatter | Shape::Scan | Shape::Exscan
        )
    }
    /// The body of the entry points of this data collective: the handles checked,
    /// then [`combine`] for the element type and operator `dt_op` (a [`gex_dt_t`] and a
    /// [`gex_op_t`]: `(dt,)` for a collective that does not reduce).
    ///
    /// # Safety
    /// As the entry point of `self` (and its `_nb` form with `nb`).
    #[allow(clippy::too_many_arguments)]
    unsafe fn entry(
        self,
        ep: *const gex_ep_t,
        team: *const gex_team_t,
        call: Call,
        dt_op: impl Into<DtOp>,
    ) -> c_int {
        let DtOp(dt, op) = dt_op.into();
        entry(|| {
            // SAFETY: the caller's promises, as `args` states them.
            let (h, t) = unsafe { args(ep, team) }?;
            // SAFETY: the caller's promises, passed on.
            unsafe { by_dt!(dt, combine(self, h, &t, call, Red::C(op))) }
        })
    }
    /// (input, output) element counts of a member for blocks of `n` (`pn` = `P × n`)
    /// with `root` true at the root (or for an unrooted collective).
    fn lens(self, n: usize, pn: usize, root: bool) -> (usize, usize) {
        let at = |x: usize| if root { x } else { 0 };
        match self {
            Shape::Gather => (n, at(pn)),
            Shape::GatherAll => (n, pn),
            Shape::Reduce => (n, at(n)),
            Shape::Allreduce | Shape::Scan | Shape::Exscan => (n, n),
            Shape::Scatter => (at(pn), n),
            Shape::Exchange => (pn, pn),
            Shape::ReduceScatter => (pn, n),
        }
    }
}

/// A data collective of blocks of `n` elements of `T` from `src` into `dst` (which
/// each member reads and writes as [`Shape::lens`] says), operator `op` for the
/// reductions; nonblocking with `nb`.
///
/// # Safety
/// As the entry point of `shape` (`gex_gather`, ..., and their `_nb` forms with `nb`).
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn combine<T: CElem>(
    shape: Shape,
    h: &gex_ep_t,
    team: &Team,
    call: Call,
    op: Red<T>,
) -> Result<gex_status_t, Error> {
    let Call {
        root,
        src,
        dst,
        count: n,
        nb,
    } = call;
    if shape.rooted() && root >= team.size() {
        return Err(Error::invalid(format!(
            "no team rank {root} (the team has {} members)",
            team.size()
        )));
    }
    let here = !shape.rooted() || team.rank() == root;
    let pn = usize::try_from(team.size())
        .ok()
        .and_then(|p| p.checked_mul(n))
        .ok_or_else(|| Error::invalid("count overflows"))?;
    let (k, m) = shape.lens(n, pn, here);
    disjoint(src, bytes::<T>(k, "src")?, dst, bytes::<T>(m, "dst")?)?;
    let r = if shape.reduces() {
        Some(match op {
            Red::C(op) => T::reduce_op(op)?,
            Red::Op(r) => r,
        })
    } else {
        None
    };
    let red = || {
        r.clone()
            .ok_or_else(|| Error::invalid("no reduction operator"))
    };
    let (src, dst) = (src.cast::<T>(), dst.cast::<T>());
    // SAFETY: `src` is readable for the `k` elements this member sends (contract).
    let input = unsafe { ptr::slice(src, k, "src") }?;
    let Some(ev) = slot(nb)? else {
        // SAFETY: `dst` is writable for the `m` elements this member receives (contract).
        let out = unsafe { ptr::slice_mut(dst, m, "dst") }?;
        h.with(|s| {
            let (ep, b) = (&mut s.ep, Blocking);
            match shape {
                Shape::Gather => ep.collective(team, Gather::slices(root, input, out), b)?,
                Shape::GatherAll => ep.collective(team, GatherAll::slices(input, out), b)?,
                Shape::Reduce => {
                    ep.collective(team, Reduce::slices(root, input, out, red()?), b)?
                }
                Shape::Allreduce => {
                    ep.collective(team, Allreduce::slices(input, out, red()?), b)?
                }
                Shape::Scatter => ep.collective(team, Scatter::slices(root, input, out), b)?,
                Shape::Exchange => ep.collective(team, Exchange::slices(input, out), b)?,
                Shape::ReduceScatter => {
                    ep.collective(team, ReduceScatter::slices(input, out, red()?), b)?
                }
                Shape::Scan => ep.collective(team, Scan::slices(input, out, red()?), b)?,
                Shape::Exscan => ep.collective(team, Exscan::slices(input, out, red()?), b)?,
            }
            Ok(())
        })?;
        return Ok(gex_status_t::GEX_OK);
    };
    // SAFETY: `dst` stays writable for `m` elements until the event completes or is
    // freed (contract).
    let out = unsafe { Lent::new(dst, m, "dst") }?;
    let data = input.to_vec();
    let e = h.with(|s| {
        let ep = &mut s.ep;
        Ok(match shape {
            Shape::Gather => ep.collective(team, Gather::new(root, data), Nb)?,
            Shape::GatherAll => ep.collective(team, GatherAll::new(data), Nb)?,
            Shape::Reduce => ep.collective(team, Reduce::new(root, data, red()?), Nb)?,
            Shape::Allreduce => ep.collective(team, Allreduce::new(data, red()?), Nb)?,
            Shape::Scatter => ep.collective(team, Scatter::new(root, data, n), Nb)?,
            Shape::Exchange => ep.collective(team, Exchange::new(data), Nb)?,
            Shape::ReduceScatter => ep.collective(team, ReduceScatter::new(data, red()?), Nb)?,
            Shape::Scan => ep.collective(team, Scan::new(data, red()?), Nb)?,
            Shape::Exscan => ep.collective(team, Exscan::new(data, red()?), Nb)?,
        })
    })?;
    // SAFETY: `ev` is non-null (checked) and writable (contract).
    unsafe { started(ev, e, out) }
}

/// The body of the allreduce entry points over every rank.
///
/// # Safety
/// As [`gex_allreduce_u64`], for elements of `T`.
unsafe fn allreduce<T: CElem>(
    ep: *const gex_ep_t,
    src: *const T,
    dst: *mut T,
    n: usize,
    op: c_int,
) -> c_int {
    entry(|| {
        // SAFETY: the caller's promise, as `ptr::handle` states it.
        let h = unsafe { ptr::handle(ep) }?;
        let world = h.with(|s| Ok(s.world.clone()))?;
        // SAFETY: the caller's promises, passed on.
        unsafe {
            let (src, dst) = (src.cast(), dst.cast());
            let call = Call {
                root: 0,
                src,
                dst,
                count: n,
                nb: None,
            };
            combine::<T>(Shape::Allreduce, h, &world, call, Red::C(op))
        }
    })
}

/// Flag of the split-phase barrier: an anonymous entry, which matches any id (the id
/// argument is ignored).
pub const GEX_BARRIER_ANONYMOUS: u32 = 1;

/// The gex-coll flags of C barrier flags.
fn barrier_flags(flags: u32) -> Result<BarrierFlags, Error> {
    BarrierFlags::from_bits(flags)
        .ok_or_else(|| Error::invalid(format!("unknown barrier flags {flags:#x}")))
}

/// The body of the team barrier calls: the handles checked, then `f` on the
/// endpoint's state and the team.
///
/// # Safety
/// `ep` is NULL or a live endpoint, `team` NULL or a live team.
unsafe fn on_team(
    ep: *const gex_ep_t,
    team: *const gex_team_t,
    f: impl FnOnce(&mut EpState, &Team) -> Result<gex_status_t, Error>,
) -> c_int {
    entry(|| {
        // SAFETY: the caller's promises, as `args` states them.
        let (h, t) = unsafe { args(ep, team) }?;
        h.with(|s| f(s, &t))
    })
}

/// The body of the split-phase barrier calls: the handles and `flags` checked, then
/// `f` on the endpoint's state, the team and the gex-coll flags.
///
/// # Safety
/// As [`gex_team_barrier_notify`].
unsafe fn split_phase(
    ep: *const gex_ep_t,
    team: *const gex_team_t,
    flags: u32,
    f: impl FnOnce(&mut EpState, &Team, BarrierFlags) -> Result<gex_status_t, Error>,
) -> c_int {
    // SAFETY: the caller's promises, passed on.
    unsafe { on_team(ep, team, |s, t| f(s, t, barrier_flags(flags)?)) }
}

/// `GEX_OK` once `done`, else `GEX_PENDING`.
fn ok_or_pending(done: bool) -> gex_status_t {
    if done {
        gex_status_t::GEX_OK
    } else {
        gex_status_t::GEX_PENDING
    }
}

/// The body of the broadcast entry points: the handles checked, then [`broadcast`]
/// for the element type `dt`.
///
/// # Safety
/// As [`gex_broadcast`] (and [`gex_broadcast_nb`] with `nb`).
unsafe fn broadcast_entry(
    ep: *const gex_ep_t,
    team: *const gex_team_t,
    root: u32,
    buf: *mut c_void,
    (count, dt): (usize, c_int),
    nb: Option<*mut *mut gex_event_t>,
) -> c_int {
    entry(|| {
        // SAFETY: the caller's promises, as `args` states them.
        let (h, t) = unsafe { args(ep, team) }?;
        // SAFETY: the caller's promises, passed on.
        unsafe { by_dt!(dt, broadcast(h, &t, root, buf, count, nb)) }
    })
}

/// The hand-written collective entry points and their declarations (`FN_DECLS`), as
/// [`c_fns!`].
macro_rules! coll_fns {
    ($($fns:tt)*) => {
        with_decls!(FN_DECLS = c_fns[][] $($fns)*);
    };
}

coll_fns! {
    /// Reduces the `n` elements of every rank's `src` element-wise with `op` (a
    /// [`gex_op_t`]) and writes the result to every rank's `dst`. Every rank passes the
    /// same `n` and `op`.
    ///
    /// Returns `GEX_OK`; `GEX_ERR_INVALID` for an unknown `op` (or a bitwise one on
    /// `double`) or overlapping buffers; `GEX_ERR_COLL` if it failed (e.g. the ranks
    /// passed different counts).
    ///
    /// # Safety
    /// `ep` is NULL or a live endpoint; `src` is valid for reading and `dst` for writing
    /// `n` elements (any pointers when `n` is 0), and the two do not overlap.
    fn gex_allreduce_u64(ep: *const gex_ep_t, src: *const u64, dst: *mut u64, n: usize, op: c_int) {
        // SAFETY: the caller's promises, passed on.
        unsafe { allreduce(ep, src, dst, n, op) }
    }

    /// As [`gex_allreduce_u64`] for `double`s (the sum's rounding depends on the order
    /// gex adds them in, the same on every rank).
    ///
    /// # Safety
    /// As [`gex_allreduce_u64`].
    fn gex_allreduce_f64(ep: *const gex_ep_t, src: *const f64, dst: *mut f64, n: usize, op: c_int) {
        // SAFETY: the caller's promises, passed on.
        unsafe { allreduce(ep, src, dst, n, op) }
    }

    /// Blocks until every member of `team` has entered the barrier.
    ///
    /// Returns `GEX_OK`; `GEX_ERR_COLL` if it failed; `GEX_ERR_INVALID` if `team` is not
    /// a team of `ep`.
    ///
    /// # Safety
    /// `ep` is NULL or a live endpoint, `team` NULL or a live team.
    fn gex_team_barrier(ep: *const gex_ep_t, team: *const gex_team_t) {
        // SAFETY: the caller's promises, passed on.
        unsafe { on_team(ep, team, |s, t| {
            s.ep.barrier(t)?;
            Ok(gex_status_t::GEX_OK)
        }) }
    }

    /// Enters the barrier of `team` and writes its event to `*ev`: the event completes
    /// once every member has entered.
    ///
    /// Returns as [`gex_team_barrier`]; `GEX_ERR_NULL` if `ev` is NULL.
    ///
    /// # Safety
    /// As [`gex_team_barrier`], and `ev` is NULL or valid for writing one pointer.
    fn gex_team_barrier_nb(ep: *const gex_ep_t, team: *const gex_team_t, ev: *mut *mut gex_event_t) {
        // SAFETY: the caller's promises, passed on; `hand_out` gets `ev` non-null
        // (checked by `slot`) and writable (the caller's promise).
        unsafe { on_team(ep, team, |s, t| {
            let ev = slot(Some(ev))?.unwrap_or(ev);
            let e = s.ep.collective(t, Barrier::new(), Nb)?;
            crate::event::hand_out(ev, Op::Dyn(Box::new(Done(e))))
        }) }
    }

    /// Notifies this member's split-phase barrier of `team` with the name `id` (or an
    /// anonymous entry with `GEX_BARRIER_ANONYMOUS`). Must be followed by
    /// `gex_team_barrier_wait` (or a `gex_team_barrier_try` that returns `GEX_OK`) with
    /// the same `id` and `flags` before the next notify on the team; other collectives of
    /// the team may run in between (the barrier is ordered among them like any other).
    ///
    /// Returns `GEX_OK`; `GEX_ERR_COLL` if a barrier of the team is already notified here;
    /// `GEX_ERR_INVALID` for an unknown flag or a team of another endpoint.
    ///
    /// # Safety
    /// `ep` is NULL or a live endpoint, `team` NULL or a live team.
    fn gex_team_barrier_notify(ep: *const gex_ep_t, team: *const gex_team_t, id: u64, flags: u32) {
        // SAFETY: the caller's promises, passed on.
        unsafe { split_phase(ep, team, flags, |s, t, f| {
            s.ep.barrier_notify(t, id, f)?;
            Ok(gex_status_t::GEX_OK)
        }) }
    }

    /// Waits (polling the endpoint) for the split-phase barrier notified on `team`; `id`
    /// and `flags` are those of the notify.
    ///
    /// Returns `GEX_OK`; `GEX_ERR_COLL` if two members notified different names (on every
    /// member), if `id`/`flags` differ from this member's notify, or without a notify.
    ///
    /// # Safety
    /// As [`gex_team_barrier_notify`].
    fn gex_team_barrier_wait(ep: *const gex_ep_t, team: *const gex_team_t, id: u64, flags: u32) {
        // SAFETY: the caller's promises, passed on.
        unsafe { split_phase(ep, team, flags, |s, t, f| {
            s.ep.barrier_wait(t, id, f)?;
            Ok(gex_status_t::GEX_OK)
        }) }
    }

    /// Polls the endpoint once: `GEX_OK` once the split-phase barrier notified on `team`
    /// is complete (it is then over), `GEX_PENDING` while it is not.
    ///
    /// Returns as [`gex_team_barrier_wait`] (an error also ends the barrier), and
    /// `GEX_PENDING`.
    ///
    /// # Safety
    /// As [`gex_team_barrier_notify`].
    fn gex_team_barrier_try(ep: *const gex_ep_t, team: *const gex_team_t, id: u64, flags: u32) {
        // SAFETY: the caller's promises, passed on.
        unsafe { split_phase(ep, team, flags, |s, t, f| Ok(ok_or_pending(s.ep.barrier_try(t, id, f)?))) }
    }

    /// Broadcasts the `count` elements of type `dt` (a [`gex_dt_t`]) at `buf` of team
    /// rank `root` to the `buf` of every member of `team`.
    ///
    /// Returns `GEX_OK`; `GEX_ERR_INVALID` for an unknown `dt`, a `root` out of range or a
    /// team of another endpoint; `GEX_ERR_COLL` if it failed (e.g. the members passed
    /// different counts or roots).
    ///
    /// # Safety
    /// `ep` is NULL or a live endpoint, `team` NULL or a live team; `buf` is valid for
    /// reading (at the root) and writing (elsewhere) `count` elements of `dt` (any
    /// pointer when `count` is 0), and suitably aligned.
    fn gex_broadcast(ep: *const gex_ep_t, team: *const gex_team_t, root: u32, buf: *mut c_void, count: usize, dt: c_int) {
        // SAFETY: the caller's promises, passed on.
        unsafe { broadcast_entry(ep, team, root, buf, (count, dt), None) }
    }

    /// Starts a broadcast (as [`gex_broadcast`]) and writes its event to `*ev`. The root's
    /// `buf` is copied before the call returns; every member's `buf` receives the data when
    /// the call that completes the event returns (never if the event is freed first).
    ///
    /// Returns as [`gex_broadcast`]; `GEX_ERR_NULL` if `ev` is NULL.
    ///
    /// # Safety
    /// As [`gex_broadcast`], with `buf` valid for writing until the event is completed or
    /// freed; `ev` is NULL or valid for writing one pointer.
    fn gex_broadcast_nb(
        ep: *const gex_ep_t,
        team: *const gex_team_t,
        root: u32,
        buf: *mut c_void,
        count: usize,
        dt: c_int,
        ev: *mut *mut gex_event_t,
    ) {
        // SAFETY: the caller's promises, passed on.
        unsafe { broadcast_entry(ep, team, root, buf, (count, dt), Some(ev)) }
    }
}

team_data_fns! { Shape::entry;
    /// Gathers the `count` elements of type `dt` at every member's `src` into the `dst` of
    /// team rank `root`, in team-rank order (`size × count` elements there; `dst` is
    /// ignored elsewhere and may be NULL).
    ///
    /// Returns as [`gex_broadcast`], and `GEX_ERR_INVALID` for overlapping buffers.
    ///
    /// # Safety
    /// `ep` is NULL or a live endpoint, `team` NULL or a live team; `src` is valid for
    /// reading `count` elements of `dt`; at the root `dst` is valid for writing
    /// `size × count` elements and does not overlap `src` (any pointers for 0 elements);
    /// both suitably aligned.
    fn gex_gather = Gather [root] (dt: c_int) [];

    /// Starts a gather (as [`gex_gather`]) and writes its event to `*ev`: `src` is copied
    /// before the call returns; the root's `dst` is written by the call that completes the
    /// event (never if the event is freed first).
    ///
    /// Returns as [`gex_gather`]; `GEX_ERR_NULL` if `ev` is NULL.
    ///
    /// # Safety
    /// As [`gex_gather`], with the root's `dst` valid for writing until the event is
    /// completed or freed; `ev` is NULL or valid for writing one pointer.
    fn gex_gather_nb = Gather [root] (dt: c_int) [ev];

    /// Gathers the `count` elements of type `dt` at every member's `src` into every
    /// member's `dst` (`size × count` elements, in team-rank order).
    ///
    /// Returns as [`gex_gather`].
    ///
    /// # Safety
    /// As [`gex_gather`], with `dst` valid for writing `size × count` elements on every
    /// member.
    fn gex_gather_all = GatherAll [] (dt: c_int) [];

    /// Starts a gather_all (as [`gex_gather_all`]) and writes its event to `*ev`; `dst` is
    /// written by the call that completes the event.
    ///
    /// Returns as [`gex_gather_nb`].
    ///
    /// # Safety
    /// As [`gex_gather_all`], with `dst` valid for writing until the event is completed
    /// or freed; `ev` is NULL or valid for writing one pointer.
    fn gex_gather_all_nb = GatherAll [] (dt: c_int) [ev];

    /// Reduces the `count` elements of type `dt` at every member's `src` element-wise
    /// with `op` (a [`gex_op_t`]; the bitwise and logical ones on integer types only) into
    /// the `dst` of team rank `root` (`dst` is ignored elsewhere and may be NULL).
    ///
    /// Returns as [`gex_gather`], and `GEX_ERR_INVALID` for an unknown `op` or a bitwise
    /// one on a float type.
    ///
    /// # Safety
    /// `ep` is NULL or a live endpoint, `team` NULL or a live team; `src` is valid for
    /// reading `count` elements of `dt`; at the root `dst` is valid for writing `count`
    /// elements and does not overlap `src`; both suitably aligned.
    fn gex_reduce = Reduce [root] (dt: c_int, op: c_int) [];

    /// Starts a reduce (as [`gex_reduce`]) and writes its event to `*ev`; the root's `dst`
    /// is written by the call that completes the event.
    ///
    /// Returns as [`gex_reduce`]; `GEX_ERR_NULL` if `ev` is NULL.
    ///
    /// # Safety
    /// As [`gex_reduce`], with the root's `dst` valid for writing until the event is
    /// completed or freed; `ev` is NULL or valid for writing one pointer.
    fn gex_reduce_nb = Reduce [root] (dt: c_int, op: c_int) [ev];

    /// Reduces as [`gex_reduce`] into every member's `dst` (`count` elements).
    ///
    /// Returns as [`gex_reduce`].
    ///
    /// # Safety
    /// As [`gex_reduce`], with `dst` valid for writing `count` elements on every member.
    fn gex_allreduce = Allreduce [] (dt: c_int, op: c_int) [];

    /// Starts an allreduce (as [`gex_allreduce`]) and writes its event to `*ev`: `src` is
    /// copied before the call returns; `dst` is written by the call that completes the
    /// event (never if the event is freed first).
    ///
    /// Returns as [`gex_reduce_nb`].
    ///
    /// # Safety
    /// As [`gex_allreduce`], with `dst` valid for writing until the event is completed or
    /// freed; `ev` is NULL or valid for writing one pointer.
    fn gex_allreduce_nb = Allreduce [] (dt: c_int, op: c_int) [ev];

    /// Scatters the `size × count` elements of type `dt` at the `src` of team rank `root`:
    /// block `i` (`count` elements) goes to the `dst` of team rank `i` (`src` is ignored
    /// elsewhere and may be NULL).
    ///
    /// Returns as [`gex_gather`].
    ///
    /// # Safety
    /// `ep` is NULL or a live endpoint, `team` NULL or a live team; at the root `src` is
    /// valid for reading `size × count` elements of `dt`; `dst` is valid for writing
    /// `count` elements and does not overlap `src`; both suitably aligned.
    fn gex_scatter = Scatter [root] (dt: c_int) [];

    /// Starts a scatter (as [`gex_scatter`]) and writes its event to `*ev`: the root's
    /// `src` is copied before the call returns; `dst` is written by the call that
    /// completes the event (never if the event is freed first).
    ///
    /// Returns as [`gex_gather_nb`].
    ///
    /// # Safety
    /// As [`gex_scatter`], with `dst` valid for writing until the event is completed or
    /// freed; `ev` is NULL or valid for writing one pointer.
    fn gex_scatter_nb = Scatter [root] (dt: c_int) [ev];

    /// All-to-all exchange: block `j` (`count` elements of type `dt`) of member `i`'s `src`
    /// becomes block `i` of member `j`'s `dst` (both `size × count` elements).
    ///
    /// Returns as [`gex_gather`].
    ///
    /// # Safety
    /// `ep` is NULL or a live endpoint, `team` NULL or a live team; `src` is valid for
    /// reading and `dst` for writing `size × count` elements of `dt`, not overlapping, both
    /// suitably aligned.
    fn gex_exchange = Exchange [] (dt: c_int) [];

    /// Starts an exchange (as [`gex_exchange`]) and writes its event to `*ev`; `src` is
    /// copied before the call returns, `dst` written by the call that completes the event.
    ///
    /// Returns as [`gex_gather_nb`].
    ///
    /// # Safety
    /// As [`gex_exchange`], with `dst` valid for writing until the event is completed or
    /// freed; `ev` is NULL or valid for writing one pointer.
    fn gex_exchange_nb = Exchange [] (dt: c_int) [ev];

    /// Reduce_scatter: reduces every member's `src` (`size × count` elements of type `dt`)
    /// element-wise with `op`; team rank `i`'s `dst` receives block `i` (`count` elements)
    /// of the result.
    ///
    /// Returns as [`gex_reduce`].
    ///
    /// # Safety
    /// `ep` is NULL or a live endpoint, `team` NULL or a live team; `src` is valid for
    /// reading `size × count` and `dst` for writing `count` elements of `dt`, not
    /// overlapping, both suitably aligned.
    fn gex_reduce_scatter = ReduceScatter [] (dt: c_int, op: c_int) [];

    /// Starts a reduce_scatter (as [`gex_reduce_scatter`]) and writes its event to `*ev`;
    /// `dst` is written by the call that completes the event.
    ///
    /// Returns as [`gex_reduce_nb`].
    ///
    /// # Safety
    /// As [`gex_reduce_scatter`], with `dst` valid for writing until the event is completed
    /// or freed; `ev` is NULL or valid for writing one pointer.
    fn gex_reduce_scatter_nb = ReduceScatter [] (dt: c_int, op: c_int) [ev];

    /// Inclusive scan: team rank `i`'s `dst` receives the element-wise reduction with `op`
    /// of the `src` of team ranks `0..=i` (`count` elements of type `dt`).
    ///
    /// Returns as [`gex_reduce`].
    ///
    /// # Safety
    /// As [`gex_allreduce`].
    fn gex_scan = Scan [] (dt: c_int, op: c_int) [];

    /// Starts an inclusive scan (as [`gex_scan`]) and writes its event to `*ev`; `dst` is
    /// written by the call that completes the event.
    ///
    /// Returns as [`gex_reduce_nb`].
    ///
    /// # Safety
    /// As [`gex_allreduce_nb`].
    fn gex_scan_nb = Scan [] (dt: c_int, op: c_int) [ev];

    /// Exclusive scan: team rank `i > 0`'s `dst` receives the reduction with `op` of the
    /// `src` of team ranks `0..i`; team rank 0's `dst` is not written.
    ///
    /// Returns as [`gex_reduce`].
    ///
    /// # Safety
    /// As [`gex_allreduce`].
    fn gex_exscan = Exscan [] (dt: c_int, op: c_int) [];

    /// Starts an exclusive scan (as [`gex_exscan`]) and writes its event to `*ev`; `dst`
    /// (not team rank 0's) is written by the call that completes the event.
    ///
    /// Returns as [`gex_reduce_nb`].
    ///
    /// # Safety
    /// As [`gex_allreduce_nb`].
    fn gex_exscan_nb = Exscan [] (dt: c_int, op: c_int) [ev];

}
