//! Remote atomics: atomic domains over (team, type, op set).
//!
//! An [`AtomicDomain<T>`] is created from an [`RmaEp`] with the set of operations it
//! will use ([`AtomicOps`]) for one element type `T` ([`AtomicType`]: `i32`, `u32`,
//! `i64`, `u64`, `f32`, `f64`). The team is the primordial team: every rank's endpoint
//! with the index of the `RmaEp` (the same rule as for RMA).
//!
//! # Implementation
//! Every operation is a CPU atomic on the target word:
//! - **direct**: when the conduit maps the target's segment
//!   ([`ConduitEp::peer_segment`](gex_core::spi::ConduitEp::peer_segment)), the
//!   initiator performs it through the mapping;
//! - **AM**: otherwise (or with `--cfg gex_force_am_rma`), a Short request carries the
//!   operation to the target, whose handler performs the same CPU atomic on its own
//!   segment and replies (the old value for fetching operations, an acknowledgement
//!   otherwise).
//!
//! Both paths use the processor's atomics on the same memory, so they are coherent with
//! each other: within a domain, neighbours using the mapping and remote ranks using AMs
//! may target the same word concurrently. A NIC-offload implementation would not be
//! coherent with CPU atomics; that is why the op set and type are declared up front
//! (the conduit hook chooses one implementation per domain, see below).
//!
//! **NIC atomics**: when the conduit offers
//! [`NATIVE_ATOMICS`](gex_core::Capabilities::NATIVE_ATOMICS) and
//! [`native_atomic_supported`](gex_core::spi::ConduitEp::native_atomic_supported) holds
//! for every operation of the op set and the type, the domain is created native
//! ([`AtomicDomain::is_native`]) and performs **every** operation with
//! [`native_atomic`](gex_core::spi::ConduitEp::native_atomic), to any rank including
//! itself. Never with `--cfg gex_force_am_rma`.
//!
//! # Rules
//! - The target word must be naturally aligned ([`RmaError::Misaligned`]) and inside
//!   the target's segment ([`RmaError::OutOfSegment`]).
//! - Concurrent accesses to a word used by atomic operations must all be atomic
//!   operations (of domains of the same type): mixing them with plain put/get/memset on
//!   the same word at the same time is a data race, as in GASNet-EX.
//! - Ordering: by default an operation is `Relaxed` (like GASNet-EX without flags).
//!   [`AtomicFlags::ACQUIRE`] and [`AtomicFlags::RELEASE`] give the operation acquire
//!   and/or release semantics at the target word (`Acquire`, `Release` or `AcqRel`; a
//!   `get` with `RELEASE` is preceded by a release fence, a `set` with `ACQUIRE` is
//!   followed by an acquire fence). Completion of the operation (blocking return, event,
//!   sync) orders it with respect to the initiator's later operations.
//! - Floats: add, sub, mult, min, max, inc and dec are compare-and-swap loops on the bit
//!   pattern; `cswap`/`fcswap` compare bit patterns (so `-0.0 != 0.0` and a NaN equals
//!   itself); min/max keep the old value unless the operand compares smaller/larger (so
//!   a NaN operand never wins). Bitwise operations exist only for integer types
//!   ([`RmaError::BadOpSet`] when a float domain asks for them).
//! - Integers wrap (two's complement) on add, sub, mult, inc and dec.
//!
//! # Safety
//! The unsafe code creates `&AtomicU32`/`&AtomicU64` from addresses inside a segment:
//! the local one (AM handler) or a peer's mapping (direct path). The address was checked
//! to be inside the segment and naturally aligned for the width; the segment stays
//! mapped for the life of the conduit, which the endpoint keeps alive; all concurrent
//! accesses to the word are atomic by the contract above. It also writes fetched values
//! into result locations under the rules of the module `ep` (borrowed by a blocking call,
//! owned by a [`FetchEvent`](crate::FetchEvent), or promised by an `unsafe` caller).
#![allow(unsafe_code)]

use crate::RmaError;
use crate::ep::{NativePend, RawPtr, Shared, lock, native_progress, store_word};
use crate::event::{Event, FetchEvent, GetEvent};
use crate::{GlobalPtr, RmaEp};
use bytemuck::Pod;
use gex_core::spi::{AtomicBase, Conduit, ConduitEp, Native, NativeAtomic};
use gex_core::{Am, Category, Endpoint, HandlerIndex, Token};
use gex_sync::atomic::{AtomicU32, AtomicU64, Ordering, fence};
use std::marker::PhantomData;

/// Handler of atomic requests: `[op id, code, off lo, off hi, a lo, a hi, b lo, b hi]`.
pub(crate) const H_ATOMIC: HandlerIndex = 23;

bitflags::bitflags! {
    /// The operations an [`AtomicDomain`] may perform (one bit per [`AtomicOp`]).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct AtomicOps: u32 {
        /// Non-fetching store.
        const SET = 1 << 0;
        /// Fetching load.
        const GET = 1 << 1;
        /// Fetching exchange.
        const SWAP = 1 << 2;
        /// Non-fetching compare-and-swap.
        const CSWAP = 1 << 3;
        /// Fetching compare-and-swap.
        const FCSWAP = 1 << 4;
        /// Non-fetching add.
        const ADD = 1 << 5;
        /// Fetching add.
        const FADD = 1 << 6;
        /// Non-fetching subtract.
        const SUB = 1 << 7;
        /// Fetching subtract.
        const FSUB = 1 << 8;
        /// Non-fetching multiply.
        const MULT = 1 << 9;
        /// Fetching multiply.
        const FMULT = 1 << 10;
        /// Non-fetching minimum.
        const MIN = 1 << 11;
        /// Fetching minimum.
        const FMIN = 1 << 12;
        /// Non-fetching maximum.
        const MAX = 1 << 13;
        /// Fetching maximum.
        const FMAX = 1 << 14;
        /// Non-fetching increment.
        const INC = 1 << 15;
        /// Fetching increment.
        const FINC = 1 << 16;
        /// Non-fetching decrement.
        const DEC = 1 << 17;
        /// Fetching decrement.
        const FDEC = 1 << 18;
        /// Non-fetching bitwise and (integers only).
        const AND = 1 << 19;
        /// Fetching bitwise and (integers only).
        const FAND = 1 << 20;
        /// Non-fetching bitwise or (integers only).
        const OR = 1 << 21;
        /// Fetching bitwise or (integers only).
        const FOR = 1 << 22;
        /// Non-fetching bitwise xor (integers only).
        const XOR = 1 << 23;
        /// Fetching bitwise xor (integers only).
        const FXOR = 1 << 24;
        /// The bitwise operations (not allowed for float domains).
        const BITWISE = Self::AND.bits() | Self::FAND.bits() | Self::OR.bits()
            | Self::FOR.bits() | Self::XOR.bits() | Self::FXOR.bits();
    }
}

bitflags::bitflags! {
    /// Memory-ordering flags of one atomic operation (default: relaxed).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct AtomicFlags: u32 {
        /// The operation is an acquire at the target word.
        const ACQUIRE = 1;
        /// The operation is a release at the target word.
        const RELEASE = 2;
    }
}

/// One atomic operation (GASNet-EX's list). Operands: `op1` for set, swap, add, sub,
/// mult, min, max and the bitwise ones; `op1` = the value compared and `op2` = the
/// value stored for `Cswap`/`Fcswap`; none for get, inc and dec.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum AtomicOp {
    Set = 0,
    Get,
    Swap,
    Cswap,
    Fcswap,
    Add,
    Fadd,
    Sub,
    Fsub,
    Mult,
    Fmult,
    Min,
    Fmin,
    Max,
    Fmax,
    Inc,
    Finc,
    Dec,
    Fdec,
    And,
    Fand,
    Or,
    For,
    Xor,
    Fxor,
}

impl AtomicOp {
    /// Every operation, in code order.
    pub const ALL: [AtomicOp; 25] = {
        use AtomicOp::*;
        [
            Set, Get, Swap, Cswap, Fcswap, Add, Fadd, Sub, Fsub, Mult, Fmult, Min, Fmin, Max, Fmax,
            Inc, Finc, Dec, Fdec, And, Fand, Or, For, Xor, Fxor,
        ]
    };

    /// The op-set bit of this operation.
    pub fn flag(self) -> AtomicOps {
        AtomicOps::from_bits_retain(1 << self as u32)
    }

    /// True if the operation returns the old value (get, swap and the `F*` ops).
    pub fn is_fetching(self) -> bool {
        use AtomicOp::*;
        matches!(
            self,
            Get | Swap
                | Fcswap
                | Fadd
                | Fsub
                | Fmult
                | Fmin
                | Fmax
                | Finc
                | Fdec
                | Fand
                | For
                | Fxor
        )
    }

    /// Number of operands it uses (0, 1 or 2).
    pub fn operands(self) -> usize {
        use AtomicOp::*;
        match self {
            Get | Inc | Finc | Dec | Fdec => 0,
            Cswap | Fcswap => 2,
            _ => 1,
        }
    }

    fn from_code(c: u32) -> Option<AtomicOp> {
        Self::ALL.get(c as usize).copied()
    }

    /// The SPI's description of this operation: (base, fetching).
    fn native(self) -> (AtomicBase, bool) {
        (self.base(), self.is_fetching())
    }

    fn base(self) -> Base {
        use AtomicOp::*;
        match self {
            Set => Base::Set,
            Get => Base::Get,
            Swap => Base::Swap,
            Cswap | Fcswap => Base::Cswap,
            Add | Fadd => Base::Add,
            Sub | Fsub => Base::Sub,
            Mult | Fmult => Base::Mult,
            Min | Fmin => Base::Min,
            Max | Fmax => Base::Max,
            Inc | Finc => Base::Inc,
            Dec | Fdec => Base::Dec,
            And | Fand => Base::And,
            Or | For => Base::Or,
            Xor | Fxor => Base::Xor,
        }
    }
}

/// The operation without the fetching choice: the SPI's (one list for both).
use gex_core::spi::AtomicBase as Base;

mod sealed {
    pub trait Sealed {}
}
/// Element kinds of atomic domains: the SPI's (wire code = position in
/// [`AtomicKind::ALL`]).
use gex_core::spi::AtomicKind as Kind;

/// What gex-rma needs of a kind beyond the SPI's methods.
trait KindExt: Sized + Copy {
    fn from_code(c: u32) -> Option<Self>;
    fn code(self) -> u32;
    fn is_float(self) -> bool;
}

impl KindExt for Kind {
    fn from_code(c: u32) -> Option<Kind> {
        Kind::ALL.get(c as usize).copied()
    }
    fn code(self) -> u32 {
        Kind::ALL.iter().position(|&k| k == self).unwrap_or(0) as u32
    }
    fn is_float(self) -> bool {
        matches!(self, Kind::F32 | Kind::F64)
    }
}

/// Element types of atomic domains: `i32`, `u32`, `i64`, `u64`, `f32`, `f64`. Sealed.
pub trait AtomicType: Pod + PartialEq + std::fmt::Debug + sealed::Sealed {
    #[doc(hidden)]
    const KIND: Kind;
    #[doc(hidden)]
    fn to_bits(self) -> u64;
    #[doc(hidden)]
    fn from_bits(b: u64) -> Self;
}

macro_rules! atomic_type {
    ($t:ty, $k:ident, $to:expr, $from:expr) => {
        impl sealed::Sealed for $t {}
        impl AtomicType for $t {
            const KIND: Kind = Kind::$k;
            fn to_bits(self) -> u64 {
                let f: fn($t) -> u64 = $to;
                f(self)
            }
            fn from_bits(b: u64) -> $t {
                let f: fn(u64) -> $t = $from;
                f(b)
            }
        }
    };
}
atomic_type!(i32, I32, |v| u64::from(v as u32), |b| b as u32 as i32);
atomic_type!(u32, U32, u64::from, |b| b as u32);
atomic_type!(i64, I64, |v| v as u64, |b| b as i64);
atomic_type!(u64, U64, |v| v, |b| b);
atomic_type!(f32, F32, |v| u64::from(v.to_bits()), |b| f32::from_bits(
    b as u32
));
atomic_type!(f64, F64, f64::to_bits, f64::from_bits);

/// The new value of the word for `op` with operands `a`, `b` (bit patterns,
/// zero-extended for 32-bit kinds), or `None` if the word is left unchanged.
fn compute(k: Kind, op: Base, old: u64, a: u64, b: u64) -> Option<u64> {
    macro_rules! arith {
        ($t:ty, $to:expr, $from:expr) => {{
            let to: fn(u64) -> $t = $to;
            let from: fn($t) -> u64 = $from;
            let (o, x) = (to(old), to(a));
            from(match op {
                Base::Add => o + x,
                Base::Sub => o - x,
                Base::Mult => o * x,
                Base::Inc => o + (1 as $t),
                Base::Dec => o - (1 as $t),
                Base::Min => {
                    if x < o {
                        x
                    } else {
                        o
                    }
                }
                Base::Max => {
                    if x > o {
                        x
                    } else {
                        o
                    }
                }
                _ => return None,
            })
        }};
    }
    macro_rules! int {
        ($t:ty, $u:ty) => {{
            let (o, x) = (old as $u as $t, a as $u as $t);
            (match op {
                Base::Add => o.wrapping_add(x),
                Base::Sub => o.wrapping_sub(x),
                Base::Mult => o.wrapping_mul(x),
                Base::Inc => o.wrapping_add(1),
                Base::Dec => o.wrapping_sub(1),
                Base::Min => o.min(x),
                Base::Max => o.max(x),
                Base::And => o & x,
                Base::Or => o | x,
                Base::Xor => o ^ x,
                _ => return None,
            }) as $u as u64
        }};
    }
    match op {
        Base::Get => return None,
        Base::Set | Base::Swap => return Some(a),
        Base::Cswap => return (old == a).then_some(b),
        _ => {}
    }
    Some(match k {
        Kind::I32 => int!(i32, u32),
        Kind::U32 => int!(u32, u32),
        Kind::I64 => int!(i64, u64),
        Kind::U64 => int!(u64, u64),
        Kind::F32 => arith!(f32, |b| f32::from_bits(b as u32), |v| u64::from(
            v.to_bits()
        )),
        Kind::F64 => arith!(f64, f64::from_bits, f64::to_bits),
    })
}

/// (read-modify-write ordering, load/failure ordering) for `f`.
fn orders(f: AtomicFlags) -> (Ordering, Ordering) {
    match (
        f.contains(AtomicFlags::ACQUIRE),
        f.contains(AtomicFlags::RELEASE),
    ) {
        (false, false) => (Ordering::Relaxed, Ordering::Relaxed),
        (true, false) => (Ordering::Acquire, Ordering::Acquire),
        (false, true) => (Ordering::Release, Ordering::Relaxed),
        (true, true) => (Ordering::AcqRel, Ordering::Acquire),
    }
}

macro_rules! exec_width {
    ($name:ident, $A:ty, $t:ty) => {
        /// # Safety
        /// `p` is naturally aligned for the width, inside a mapped segment, and every
        /// concurrent access to the word is atomic.
        unsafe fn $name(p: *mut u8, k: Kind, op: Base, a: u64, b: u64, f: AtomicFlags) -> u64 {
            // SAFETY: aligned, valid for the conduit's life, accessed only atomically
            // (contract); the atomic type has the size and alignment of the word.
            let at: &$A = unsafe { &*(p as *const $A) };
            let (x, y) = (a as $t, b as $t);
            let (rmw, load) = orders(f);
            let int = !k.is_float();
            let old: $t = match op {
                Base::Get => {
                    if f.contains(AtomicFlags::RELEASE) {
                        fence(Ordering::Release);
                    }
                    at.load(load)
                }
                Base::Set => {
                    let so = if f.contains(AtomicFlags::RELEASE) {
                        Ordering::Release
                    } else {
                        Ordering::Relaxed
                    };
                    at.store(x, so);
                    if f.contains(AtomicFlags::ACQUIRE) {
                        fence(Ordering::Acquire);
                    }
                    0
                }
                Base::Swap => at.swap(x, rmw),
                Base::Cswap => match at.compare_exchange(x, y, rmw, load) {
                    Ok(v) | Err(v) => v,
                },
                Base::Add if int => at.fetch_add(x, rmw),
                Base::Sub if int => at.fetch_sub(x, rmw),
                Base::Inc if int => at.fetch_add(1, rmw),
                Base::Dec if int => at.fetch_sub(1, rmw),
                Base::And => at.fetch_and(x, rmw),
                Base::Or => at.fetch_or(x, rmw),
                Base::Xor => at.fetch_xor(x, rmw),
                _ => match at.fetch_update(rmw, load, |o| {
                    compute(k, op, u64::from(o), a, b).map(|n| n as $t)
                }) {
                    Ok(v) | Err(v) => v,
                },
            };
            u64::from(old)
        }
    };
}
exec_width!(exec32, AtomicU32, u32);
exec_width!(exec64, AtomicU64, u64);

/// Performs `op` on the word at `p`; returns its old bit pattern (0 for `Set`).
///
/// # Safety
/// As `exec32`/`exec64`, for the width of `k`.
unsafe fn exec(p: *mut u8, k: Kind, op: Base, a: u64, b: u64, f: AtomicFlags) -> u64 {
    // SAFETY: forwarded contract.
    unsafe {
        if k.size() == 4 {
            exec32(p, k, op, a, b, f)
        } else {
            exec64(p, k, op, a, b, f)
        }
    }
}

fn join64(l: u32, h: u32) -> u64 {
    (u64::from(h) << 32) | u64::from(l)
}

/// Bit 24 of the code word: the initiator wants the old value back.
const WANT: u32 = 1 << 24;

/// Registers the atomic handler (called by [`RmaEp::new`]).
pub(crate) fn register<C: Conduit>(
    ep: &mut Endpoint<C>,
    seg: RawPtr,
    seg_len: usize,
    st: Shared,
    h_ack: HandlerIndex,
    h_reply: HandlerIndex,
) -> Result<(), RmaError> {
    ep.register_reserved(H_ATOMIC, move |t: &mut Token<'_>, am: Am<'_>| {
        let seg = seg;
        let a = am.args();
        if a.len() < 8 {
            lock(&st).dropped += 1;
            return;
        }
        let code = a[1];
        let off = crate::ep::join(a[2], a[3]);
        let (Some(op), Some(k)) = (
            AtomicOp::from_code(code & 0xff),
            Kind::from_code((code >> 8) & 0xff),
        ) else {
            lock(&st).dropped += 1;
            return;
        };
        if k.is_float() && op.flag().intersects(AtomicOps::BITWISE) {
            lock(&st).dropped += 1;
            return;
        }
        let f = AtomicFlags::from_bits_truncate((code >> 16) & 0xff);
        let size = k.size();
        let ok = off.checked_add(size).is_some_and(|e| e <= seg_len)
            && (seg.0 as usize).wrapping_add(off) % size == 0;
        if !ok {
            lock(&st).dropped += 1;
            return;
        }
        // SAFETY: inside this EP's segment and aligned (checked); atomic by contract.
        let old = unsafe {
            exec(
                seg.0.add(off),
                k,
                op.base(),
                join64(a[4], a[5]),
                join64(a[6], a[7]),
                f,
            )
        };
        if code & WANT != 0 {
            let bytes = old.to_ne_bytes();
            let v: &[u8] = if size == 4 {
                #[cfg(target_endian = "little")]
                {
                    &bytes[..4]
                }
                #[cfg(target_endian = "big")]
                {
                    &bytes[4..]
                }
            } else {
                &bytes
            };
            let _ = t.reply_medium(h_reply, &[a[0], 0, 0], v);
        } else {
            let _ = t.reply_short(h_ack, &a[..1]);
        }
    })?;
    Ok(())
}

/// An atomic domain: the element type `T` and the set of operations (declared up
/// front) for atomic operations on the segments of the primordial team (every rank's
/// endpoint with the creating [`RmaEp`]'s index). A small `Copy` descriptor; the
/// operations take the `RmaEp` to run on.
///
/// Every rank that targets a word must use a domain of the same type; ranks should
/// create domains with the same op set (nothing is exchanged: creation is local).
///
/// ```
/// use gex_core::{boot::Singleton, loopback::Loopback, ClientBuilder};
/// use gex_rma::{AtomicFlags, AtomicOp, AtomicOps, RmaEp, RmaError};
///
/// let client = ClientBuilder::new().segment_size(4096).init::<Loopback>(Box::new(Singleton::new()))?;
/// let mut rma = RmaEp::new(client.endpoint(0)?)?;
/// let ad = rma.atomic_domain::<u64>(AtomicOps::FADD | AtomicOps::FCSWAP | AtomicOps::GET)?;
/// let p = rma.global_ptr::<u64>(rma.addr(), 64);
/// let f = AtomicFlags::empty();
/// assert_eq!(ad.fetch(&mut rma, AtomicOp::Fadd, p, 5, 0, f)?, 0);
/// assert_eq!(ad.fetch(&mut rma, AtomicOp::Fcswap, p, 5, 9, f)?, 5);
/// assert_eq!(ad.fetch(&mut rma, AtomicOp::Get, p, 0, 0, f)?, 9);
/// assert_eq!(
///     ad.op(&mut rma, AtomicOp::Max, p, 1, 0, f),
///     Err(RmaError::OpNotInDomain { op: AtomicOp::Max })
/// );
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct AtomicDomain<T> {
    ops: AtomicOps,
    /// Every operation goes through the conduit's NIC atomics.
    native: bool,
    _t: PhantomData<fn() -> T>,
}

impl<T> Clone for AtomicDomain<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for AtomicDomain<T> {}

impl<C: Conduit> RmaEp<C> {
    /// Creates an atomic domain for `T` with the operations `ops` (local; see
    /// [`AtomicDomain`]).
    ///
    /// # Errors
    /// [`RmaError::BadOpSet`] if `T` is a float type and `ops` has bitwise operations.
    pub fn atomic_domain<T: AtomicType>(
        &mut self,
        ops: AtomicOps,
    ) -> Result<AtomicDomain<T>, RmaError> {
        if T::KIND.is_float() && ops.intersects(AtomicOps::BITWISE) {
            return Err(RmaError::BadOpSet {
                ops: ops & AtomicOps::BITWISE,
            });
        }
        let native = self.native_atomics && {
            let cep = self.ep.conduit_ep();
            AtomicOp::ALL
                .iter()
                .filter(|op| ops.contains(op.flag()))
                .all(|op| {
                    let (base, fetch) = op.native();
                    cep.native_atomic_supported(T::KIND, base, fetch)
                })
        };
        Ok(AtomicDomain {
            ops,
            native,
            _t: PhantomData,
        })
    }

    /// Starts an atomic; writes the old value to `res` (if non-null and the op fetches).
    /// `blocking`: the caller waits for completion before returning.
    ///
    /// # Safety
    /// `res`, if non-null, is writable for one `T` and untouched until the operation
    /// completes, is abandoned, or (if leaked) forever.
    #[allow(clippy::too_many_arguments)]
    unsafe fn atomic_start<T: AtomicType>(
        &mut self,
        ad: &AtomicDomain<T>,
        op: AtomicOp,
        p: GlobalPtr<T>,
        a: T,
        b: T,
        f: AtomicFlags,
        res: *mut T,
        blocking: bool,
    ) -> Result<Option<u32>, RmaError> {
        if !ad.ops.contains(op.flag()) {
            return Err(RmaError::OpNotInDomain { op });
        }
        let size = std::mem::size_of::<T>();
        let dst = p.addr();
        self.check_range(dst, p.offset, size)?;
        if p.offset % size != 0 {
            return Err(RmaError::Misaligned {
                dst,
                offset: p.offset,
                align: size,
            });
        }
        let want = op.is_fetching() && !res.is_null();
        let (x, y) = (a.to_bits(), b.to_bits());
        if ad.native {
            let (base, fetch) = op.native();
            let na = NativeAtomic {
                kind: T::KIND,
                base,
                fetch,
                a: x,
                b: y,
                acquire: f.contains(AtomicFlags::ACQUIRE),
                release: f.contains(AtomicFlags::RELEASE),
            };
            let res = if want {
                res.cast()
            } else {
                std::ptr::null_mut()
            };
            // SAFETY: forwarded contract.
            return unsafe { self.native_atomic(dst, p.offset, &na, res, size, blocking) };
        }
        if let Some(base) = self.direct(dst) {
            // SAFETY: the offset is inside the mapped segment (checked).
            let at = unsafe { base.as_ptr().add(p.offset) };
            if at as usize % size != 0 {
                return Err(RmaError::Misaligned {
                    dst,
                    offset: p.offset,
                    align: size,
                });
            }
            // SAFETY: inside the mapped segment, aligned (checked); atomic by contract.
            let old = unsafe { exec(at, T::KIND, op.base(), x, y, f) };
            if want {
                // SAFETY: writable (contract).
                unsafe { res.write(T::from_bits(old)) };
            }
            return Ok(None);
        }
        let id = if want {
            self.new_op(size, res.cast(), size)
        } else {
            self.new_op(1, std::ptr::null_mut(), 0)
        };
        let code =
            op as u32 | (T::KIND.code() << 8) | (f.bits() << 16) | if want { WANT } else { 0 };
        let o = p.offset as u64;
        let args = [
            id,
            code,
            o as u32,
            (o >> 32) as u32,
            x as u32,
            (x >> 32) as u32,
            y as u32,
            (y >> 32) as u32,
        ];
        match self.send(dst, Category::Short, H_ATOMIC, &args, &[], 0) {
            Ok(()) => Ok(self.pending(id)),
            Err(e) => {
                self.abandon(id);
                Err(e)
            }
        }
    }
}

impl<C: Conduit> RmaEp<C> {
    /// The NIC path of a native domain: the conduit's `native_atomic` for every target.
    /// The fetched word lands in a heap word (a stack word for blocking calls) and is
    /// stored into `res` (`size` bytes; null: discarded) at completion.
    ///
    /// # Safety
    /// As [`atomic_start`](Self::atomic_start).
    unsafe fn native_atomic(
        &mut self,
        dst: gex_core::EpAddr,
        offset: usize,
        na: &NativeAtomic,
        res: *mut u8,
        size: usize,
        blocking: bool,
    ) -> Result<Option<u32>, RmaError> {
        let refused = || {
            RmaError::Am(gex_core::AmError::Conduit(
                gex_core::spi::ConduitError::Contract(format!(
                    "{}: native atomic {:?} on {:?} refused after being offered",
                    C::NAME,
                    na.base,
                    na.kind
                )),
            ))
        };
        if blocking {
            let mut w = 0u64;
            let wp: *mut u64 = if na.fetch {
                &mut w
            } else {
                std::ptr::null_mut()
            };
            loop {
                // SAFETY: the word was range- and alignment-checked; `w` outlives the
                // operation (we wait for it below before returning).
                match unsafe { self.ep.conduit_ep().native_atomic(dst, offset, na, wp) }? {
                    Native::Done => break,
                    Native::Pending(t) => {
                        self.wait_ticket(t);
                        break;
                    }
                    Native::WouldBlock => {
                        self.ep.poll();
                        native_progress(&mut self.ep, &self.st, &mut self.native);
                    }
                    Native::Unsupported => return Err(refused()),
                }
            }
            // SAFETY: `res` is null or writable for `size` bytes (contract).
            unsafe { store_word(res, size, w) };
            return Ok(None);
        }
        let land: *mut u64 = if na.fetch {
            Box::into_raw(Box::new(0u64))
        } else {
            std::ptr::null_mut()
        };
        let free = |l: *mut u64| {
            if !l.is_null() {
                // SAFETY: from `Box::into_raw` above, no longer used by the conduit.
                drop(unsafe { Box::from_raw(l) });
            }
        };
        loop {
            // SAFETY: checked word; `land` lives until completion (freed there).
            let r = unsafe { self.ep.conduit_ep().native_atomic(dst, offset, na, land) };
            match r {
                Ok(Native::Done) => {
                    if !land.is_null() {
                        // SAFETY: complete: the conduit wrote the word and is done.
                        let v = unsafe { *land };
                        // SAFETY: `res` is null or writable (contract).
                        unsafe { store_word(res, size, v) };
                    }
                    free(land);
                    return Ok(None);
                }
                Ok(Native::Pending(ticket)) => {
                    let mut id = None;
                    let pend = NativePend {
                        ticket,
                        id: 0,
                        src: None,
                        land: (!land.is_null()).then_some((RawPtr(land.cast()), RawPtr(res), size)),
                    };
                    self.push_native(&mut id, std::ptr::null_mut(), 0, pend);
                    return Ok(id.and_then(|op| self.pending(op)));
                }
                Ok(Native::WouldBlock) => {
                    self.ep.poll();
                    native_progress(&mut self.ep, &self.st, &mut self.native);
                }
                Ok(Native::Unsupported) => {
                    free(land);
                    return Err(refused());
                }
                Err(e) => {
                    free(land);
                    return Err(e.into());
                }
            }
        }
    }
}

impl<T: AtomicType> AtomicDomain<T> {
    /// The declared op set.
    pub fn ops(&self) -> AtomicOps {
        self.ops
    }

    /// True if this domain performs every operation with the conduit's NIC atomics
    /// (decided at creation: the conduit offers
    /// [`NATIVE_ATOMICS`](gex_core::Capabilities::NATIVE_ATOMICS) and every operation of
    /// the op set for this type); false: CPU atomics, directly or through AMs.
    pub fn is_native(&self) -> bool {
        self.native
    }

    /// Blocking atomic `op` on the word at `p` (operands `a`, `b`: see [`AtomicOp`];
    /// unused ones are ignored). A fetching op's old value is discarded. Returns when the
    /// operation is complete at the target.
    ///
    /// # Errors
    /// [`RmaError::OpNotInDomain`], [`RmaError::Misaligned`], and as
    /// [`RmaEp::put`]; nothing is performed on error.
    pub fn op<C: Conduit>(
        &self,
        rma: &mut RmaEp<C>,
        op: AtomicOp,
        p: GlobalPtr<T>,
        a: T,
        b: T,
        f: AtomicFlags,
    ) -> Result<(), RmaError> {
        // SAFETY: no result location.
        let id = unsafe { rma.atomic_start(self, op, p, a, b, f, std::ptr::null_mut(), true)? };
        rma.wait_id(id);
        Ok(())
    }

    /// Blocking fetching atomic: returns the word's value before `op`.
    ///
    /// # Errors
    /// [`RmaError::NotFetching`] for a non-fetching op, else as [`op`](Self::op).
    pub fn fetch<C: Conduit>(
        &self,
        rma: &mut RmaEp<C>,
        op: AtomicOp,
        p: GlobalPtr<T>,
        a: T,
        b: T,
        f: AtomicFlags,
    ) -> Result<T, RmaError> {
        if !op.is_fetching() {
            return Err(RmaError::NotFetching { op });
        }
        let mut out = T::zeroed();
        // SAFETY: `out` lives until we return, and we return only after completion or
        // abandonment (late replies are then dropped).
        let id = unsafe { rma.atomic_start(self, op, p, a, b, f, &mut out, true)? };
        rma.wait_id(id);
        Ok(out)
    }

    /// Nonblocking atomic (a fetching op's value is discarded); the event signals
    /// completion at the target.
    ///
    /// # Errors
    /// As [`op`](Self::op).
    pub fn op_nb<C: Conduit>(
        &self,
        rma: &mut RmaEp<C>,
        op: AtomicOp,
        p: GlobalPtr<T>,
        a: T,
        b: T,
        f: AtomicFlags,
    ) -> Result<Event, RmaError> {
        // SAFETY: no result location.
        let id = unsafe { rma.atomic_start(self, op, p, a, b, f, std::ptr::null_mut(), false)? };
        Ok(RmaEp::<C>::ev(id))
    }

    /// Nonblocking fetching atomic; [`RmaEp::wait`] on the event returns the old value.
    ///
    /// # Errors
    /// As [`fetch`](Self::fetch).
    pub fn fetch_nb<C: Conduit>(
        &self,
        rma: &mut RmaEp<C>,
        op: AtomicOp,
        p: GlobalPtr<T>,
        a: T,
        b: T,
        f: AtomicFlags,
    ) -> Result<FetchEvent<T>, RmaError> {
        if !op.is_fetching() {
            return Err(RmaError::NotFetching { op });
        }
        let mut buf = vec![T::zeroed()];
        // SAFETY: the Vec's heap buffer moves into the event, which leaks it rather
        // than freeing it while the operation may be pending.
        let id = unsafe { rma.atomic_start(self, op, p, a, b, f, buf.as_mut_ptr(), false)? };
        Ok(FetchEvent {
            inner: GetEvent {
                ev: RmaEp::<C>::ev(id),
                buf: Some(buf),
            },
        })
    }

    /// Implicit-event atomic (a fetching op's value is discarded), completed by
    /// [`RmaEp::wait_syncnbi_atomics`] (or `wait_syncnbi_all`, or the access region).
    ///
    /// # Errors
    /// As [`op`](Self::op).
    pub fn op_nbi<C: Conduit>(
        &self,
        rma: &mut RmaEp<C>,
        op: AtomicOp,
        p: GlobalPtr<T>,
        a: T,
        b: T,
        f: AtomicFlags,
    ) -> Result<(), RmaError> {
        // SAFETY: no result location.
        let id = unsafe { rma.atomic_start(self, op, p, a, b, f, std::ptr::null_mut(), false)? };
        rma.track_atomic(id);
        Ok(())
    }

    /// Implicit-event fetching atomic: the old value is written to `result` by the time
    /// [`RmaEp::wait_syncnbi_atomics`] (or the access region's event) completes.
    ///
    /// # Safety
    /// `result` must stay alive and untouched until that sync completes.
    ///
    /// # Errors
    /// As [`fetch`](Self::fetch).
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn fetch_nbi<C: Conduit>(
        &self,
        rma: &mut RmaEp<C>,
        op: AtomicOp,
        p: GlobalPtr<T>,
        a: T,
        b: T,
        f: AtomicFlags,
        result: &mut T,
    ) -> Result<(), RmaError> {
        if !op.is_fetching() {
            return Err(RmaError::NotFetching { op });
        }
        // SAFETY: forwarded contract.
        let id = unsafe { rma.atomic_start(self, op, p, a, b, f, result, false)? };
        rma.track_atomic(id);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compute_matches_native() {
        let c = |k, op, o: u64, a: u64| compute(k, op, o, a, 0);
        assert_eq!(
            c(Kind::I32, Base::Add, u64::from(-3i32 as u32), 1),
            Some(u64::from(-2i32 as u32))
        );
        assert_eq!(
            c(Kind::I32, Base::Min, u64::from(-3i32 as u32), 5),
            Some(u64::from(-3i32 as u32))
        );
        assert_eq!(c(Kind::U32, Base::Min, u64::from(u32::MAX), 5), Some(5));
        assert_eq!(c(Kind::U32, Base::Dec, 0, 0), Some(u64::from(u32::MAX)));
        assert_eq!(c(Kind::I64, Base::Max, (-1i64) as u64, 0), Some(0));
        assert_eq!(
            c(Kind::F64, Base::Mult, 2.5f64.to_bits(), 4.0f64.to_bits()),
            Some(10.0f64.to_bits())
        );
        assert_eq!(
            c(
                Kind::F32,
                Base::Min,
                u64::from(1.0f32.to_bits()),
                u64::from(f32::NAN.to_bits())
            ),
            Some(u64::from(1.0f32.to_bits()))
        );
        assert_eq!(compute(Kind::U64, Base::Cswap, 3, 3, 7), Some(7));
        assert_eq!(compute(Kind::U64, Base::Cswap, 3, 4, 7), None);
        for op in AtomicOp::ALL {
            assert_eq!(AtomicOp::from_code(op as u32), Some(op));
        }
        assert_eq!(AtomicOps::all().bits().count_ones(), 25);
    }
}
