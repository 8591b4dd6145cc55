//! The vocabulary of remote atomics and the word operations themselves: the op sets
//! ([`AtomicOps`]), ordering flags ([`AtomicFlags`]), operations with their operands
//! ([`AtomicOp`]), the element types ([`AtomicType`]), the wire codes of the AM path
//! and [`exec`], the CPU atomic on a word that both the direct path and the target's
//! AM handler run. Nothing here knows the layer's state: the domains and the
//! initiator's engine are in [`crate::atomic`], the target side in [`crate::served`].
//!
//! # Safety
//! [`exec`] runs [`gex_sync::word`] operations on an address inside a segment (the
//! local one for the AM handler, a peer's mapping on the direct path), checked by the
//! caller to be inside the segment and naturally aligned for the width; the segment
//! stays mapped for the life of the conduit, which the endpoint keeps alive; every
//! concurrent access to the word in this process is a word operation or a byte-wise
//! copy of `gex_sync::copy`. [`store_word`] stores a fetched value into a result
//! location under the rules of [`crate::state`] (a word the operation owns, or a
//! destination borrowed for a scope).
#![allow(unsafe_code)]

use crate::GlobalPtr;
use bytemuck::Pod;
use gex_core::event::Data;
use gex_core::spi::AtomicBase;
use gex_sync::atomic::{Ordering, fence};

bitflags::bitflags! {
    /// The operations an [`AtomicDomain`] may perform: one bit per operation of
    /// GASNet-EX in its fetching or non-fetching form ([`AtomicOp::flag`],
    /// [`AtomicOp::fetch_flag`]).
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

/// One atomic operation with its operands, on words of type `T` (GASNet-EX's list,
/// one variant per operation whatever its fetching form).
///
/// Whether the old value comes back is the method's choice, not the operation's:
/// [`RmaExt::atomic`](crate::RmaExt::atomic) performs the non-fetching form and
/// returns `()`, [`RmaExt::fetch_atomic`](crate::RmaExt::fetch_atomic) (and
/// [`ScopeRmaExt::fetch_into`](crate::ScopeRmaExt::fetch_into)) the fetching form and
/// return the word's value before the operation. Every pair is defined, so there is
/// no run-time "does not fetch" error:
///
/// | variant | `atomic` performs (needs in the domain) | `fetch_atomic` performs (needs) |
/// |---|---|---|
/// | `Get` | a load, value discarded (`GET`) | a load (`GET`) |
/// | `Set(v)` | a store (`SET`) | a swap: the fetching set (`SWAP`) |
/// | `Swap(v)` | a swap, old value discarded (`SWAP`) | a swap (`SWAP`) |
/// | `CompareSwap { expected, new }` | `CSWAP` | `FCSWAP` |
/// | `Add(v)`, `Sub(v)`, `Mult(v)`, `Min(v)`, `Max(v)`, `Inc`, `Dec`, `And(v)`, `Or(v)`, `Xor(v)` | `ADD`, `SUB`, ... | `FADD`, `FSUB`, ... |
///
/// [`flag`](Self::flag) and [`fetch_flag`](Self::fetch_flag) give the bit each form
/// needs in the domain's op set ([`AtomicOps`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AtomicOp<T> {
    /// Reads the word.
    Get,
    /// Stores the value (fetching: a swap).
    Set(T),
    /// Stores the value; the old one is fetched.
    Swap(T),
    /// Stores `new` if the word equals `expected` (bit patterns compared).
    CompareSwap {
        /// The value compared with the word.
        expected: T,
        /// The value stored if they are equal.
        new: T,
    },
    /// Adds the value (integers wrap).
    Add(T),
    /// Subtracts the value (integers wrap).
    Sub(T),
    /// Multiplies by the value (integers wrap).
    Mult(T),
    /// Keeps the smaller of the word and the value.
    Min(T),
    /// Keeps the larger of the word and the value.
    Max(T),
    /// Adds one.
    Inc,
    /// Subtracts one.
    Dec,
    /// Bitwise and (integers only).
    And(T),
    /// Bitwise or (integers only).
    Or(T),
    /// Bitwise xor (integers only).
    Xor(T),
}

impl<T: Copy> AtomicOp<T> {
    /// The op-set bit [`RmaExt::atomic`](crate::RmaExt::atomic) needs for this
    /// operation (its non-fetching form: `Add(_)` needs [`AtomicOps::ADD`]).
    #[inline]
    pub fn flag(self) -> AtomicOps {
        self.code(false).flag()
    }

    /// The op-set bit [`RmaExt::fetch_atomic`](crate::RmaExt::fetch_atomic) needs for
    /// this operation (its fetching form: `Add(_)` needs [`AtomicOps::FADD`], `Set(_)`
    /// [`AtomicOps::SWAP`]).
    #[inline]
    pub fn fetch_flag(self) -> AtomicOps {
        self.code(true).flag()
    }

    /// The operation on the wire and at the SPI, in its fetching form or not.
    #[inline(always)]
    pub(crate) fn code(self, fetch: bool) -> Code {
        use AtomicOp::*;
        let pick = |n: Code, f: Code| if fetch { f } else { n };
        match self {
            Get => Code::Get,
            Set(_) => pick(Code::Set, Code::Swap),
            Swap(_) => Code::Swap,
            CompareSwap { .. } => pick(Code::Cswap, Code::Fcswap),
            Add(_) => pick(Code::Add, Code::Fadd),
            Sub(_) => pick(Code::Sub, Code::Fsub),
            Mult(_) => pick(Code::Mult, Code::Fmult),
            Min(_) => pick(Code::Min, Code::Fmin),
            Max(_) => pick(Code::Max, Code::Fmax),
            Inc => pick(Code::Inc, Code::Finc),
            Dec => pick(Code::Dec, Code::Fdec),
            And(_) => pick(Code::And, Code::Fand),
            Or(_) => pick(Code::Or, Code::For),
            Xor(_) => pick(Code::Xor, Code::Fxor),
        }
    }
}

impl<T: AtomicType> AtomicOp<T> {
    /// The operands' bit patterns (0 for an operand the operation does not have).
    #[inline(always)]
    fn operands(self) -> (u64, u64) {
        use AtomicOp::*;
        match self {
            Get | Inc | Dec => (0, 0),
            CompareSwap { expected, new } => (expected.to_bits(), new.to_bits()),
            Set(v) | Swap(v) | Add(v) | Sub(v) | Mult(v) | Min(v) | Max(v) | And(v) | Or(v)
            | Xor(v) => (v.to_bits(), 0),
        }
    }
}

/// One of GASNet-EX's 25 operations, fetching form included: what the wire (the AM
/// path's code word), the op set ([`AtomicOps`], bit `1 << code`) and the SPI
/// ([`AtomicBase`] and a fetching flag) speak.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Code {
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

impl Code {
    /// Every operation, in code order.
    pub(crate) const ALL: [Code; 25] = {
        use Code::*;
        [
            Set, Get, Swap, Cswap, Fcswap, Add, Fadd, Sub, Fsub, Mult, Fmult, Min, Fmin, Max, Fmax,
            Inc, Finc, Dec, Fdec, And, Fand, Or, For, Xor, Fxor,
        ]
    };

    /// The op-set bit of this operation.
    #[inline(always)]
    pub(crate) fn flag(self) -> AtomicOps {
        AtomicOps::from_bits_retain(1 << self as u32)
    }

    /// True if the operation returns the old value (get, swap and the `F*` ops).
    #[inline(always)]
    pub(crate) fn is_fetching(self) -> bool {
        use Code::*;
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

    pub(crate) fn from_code(c: u32) -> Option<Code> {
        Self::ALL.get(c as usize).copied()
    }

    /// The SPI's description of this operation: (base, fetching).
    pub(crate) fn native(self) -> (AtomicBase, bool) {
        (self.base(), self.is_fetching())
    }

    pub(crate) fn base(self) -> Base {
        use Code::*;
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

/// One atomic as the layer performs it: the word, the operation in its chosen form
/// and its operands' bit patterns, the ordering flags. Made once per call, by value
/// (no allocation), from the public [`AtomicOp`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct AtomicReq<T> {
    pub(crate) ptr: GlobalPtr<T>,
    pub(crate) code: Code,
    pub(crate) a: u64,
    pub(crate) b: u64,
    pub(crate) flags: AtomicFlags,
}

impl<T: AtomicType> AtomicReq<T> {
    /// `op` on the word at `ptr`, in its fetching form if `fetch`.
    #[inline(always)]
    pub(crate) fn new(ptr: GlobalPtr<T>, op: AtomicOp<T>, fetch: bool, flags: AtomicFlags) -> Self {
        let (a, b) = op.operands();
        AtomicReq {
            ptr,
            code: op.code(fetch),
            a,
            b,
            flags,
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
pub(crate) trait KindExt: Sized + Copy {
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
pub trait AtomicType: Pod + Send + Sync + PartialEq + std::fmt::Debug + sealed::Sealed {
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
            #[inline(always)]
            fn to_bits(self) -> u64 {
                let f: fn($t) -> u64 = $to;
                f(self)
            }
            #[inline(always)]
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

/// The ordering of a `Get` with flags `f`.
fn load_order(f: AtomicFlags) -> Ordering {
    if f.contains(AtomicFlags::ACQUIRE) {
        Ordering::Acquire
    } else {
        Ordering::Relaxed
    }
}

macro_rules! exec_width {
    ($name:ident, $t:ty, $w:literal) => { paste::paste! {
        /// # Safety
        /// `p` is naturally aligned for the width, inside a mapped segment, and every
        /// concurrent access to the word is a [`gex_sync::word`] operation or a
        /// [`gex_sync::copy`].
        unsafe fn $name(p: *mut u8, k: Kind, op: Base, a: u64, b: u64, f: AtomicFlags) -> u64 {
            use gex_sync::word;
            let (x, y) = (a as $t, b as $t);
            // The read-modify-writes are sequentially consistent, at least what `f`
            // asks (module `gex_sync::word`); loads take the ordering `f` asks.
            let load = load_order(f);
            let int = !k.is_float();
            // SAFETY: aligned, valid for the conduit's life, and every concurrent
            // access is a word operation or a byte-wise copy (contract).
            let old: $t = unsafe {
                match op {
                    Base::Get => {
                        if f.contains(AtomicFlags::RELEASE) {
                            fence(Ordering::Release);
                        }
                        word::[<load $w>](p, load)
                    }
                    Base::Set => {
                        let so = if f.contains(AtomicFlags::RELEASE) {
                            Ordering::Release
                        } else {
                            Ordering::Relaxed
                        };
                        word::[<store $w>](p, x, so);
                        if f.contains(AtomicFlags::ACQUIRE) {
                            fence(Ordering::Acquire);
                        }
                        0
                    }
                    Base::Swap => word::[<swap $w>](p, x),
                    Base::Cswap => word::[<cas $w>](p, x, y),
                    Base::Add if int => word::[<fetch_add $w>](p, x),
                    Base::Sub if int => word::[<fetch_add $w>](p, x.wrapping_neg()),
                    Base::Inc if int => word::[<fetch_add $w>](p, 1),
                    Base::Dec if int => word::[<fetch_add $w>](p, <$t>::MAX),
                    Base::And => word::[<update $w>](p, |o| Some(o & x)),
                    Base::Or => word::[<update $w>](p, |o| Some(o | x)),
                    Base::Xor => word::[<update $w>](p, |o| Some(o ^ x)),
                    _ => word::[<update $w>](p, |o| compute(k, op, u64::from(o), a, b).map(|n| n as $t)),
                }
            };
            u64::from(old)
        }
    } };
}
exec_width!(exec32, u32, 32);
exec_width!(exec64, u64, 64);

/// Performs `op` on the word at `p`; returns its old bit pattern (0 for `Set`).
///
/// # Safety
/// As `exec32`/`exec64`, for the width of `k`.
#[inline]
pub(crate) unsafe fn exec(p: *mut u8, k: Kind, op: Base, a: u64, b: u64, f: AtomicFlags) -> u64 {
    // SAFETY: forwarded contract.
    unsafe {
        if k.size() == 4 {
            exec32(p, k, op, a, b, f)
        } else {
            exec64(p, k, op, a, b, f)
        }
    }
}

pub(crate) fn join64(l: u32, h: u32) -> u64 {
    (u64::from(h) << 32) | u64::from(l)
}

/// Bit 24 of the code word: the initiator wants the old value back.
pub(crate) const WANT: u32 = 1 << 24;

/// Stores the bit pattern `v` of a `size`-byte element at `res` (nothing if null).
///
/// # Safety
/// `res` is null or valid for a write of `size` bytes.
pub(crate) unsafe fn store_word(res: *mut u8, size: usize, v: u64) {
    if res.is_null() {
        return;
    }
    // SAFETY: valid for `size` bytes (contract); unaligned writes need no alignment.
    unsafe {
        if size == 4 {
            res.cast::<u32>().write_unaligned(v as u32);
        } else {
            res.cast::<u64>().write_unaligned(v);
        }
    }
}

/// The output of a fetching atomic from its completion data.
pub(crate) fn fetch_finish<T: AtomicType>(d: Data, _: Option<T>) -> T {
    match d {
        Data::Word(w) => T::from_bits(w),
        _ => T::zeroed(),
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
        for op in Code::ALL {
            assert_eq!(Code::from_code(op as u32), Some(op));
        }
        assert_eq!(AtomicOps::all().bits().count_ones(), 25);
    }
}
