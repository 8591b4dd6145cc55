//! Remote atomics: atomic domains over (team, type, op set), created collectively.
//!
//! An [`AtomicDomain<T>`] is created by every member of a [`Team`] with
//! [`RmaExt::atomic_domain`](crate::RmaExt::atomic_domain), naming the element type `T`
//! ([`AtomicType`]: `i32`, `u32`, `i64`, `u64`, `f32`, `f64`) and the operations it will
//! use ([`AtomicOps`]). Creation is collective: the members exchange their requests
//! ([`Endpoint::exchange`](gex_core::Endpoint::exchange)), every member's type and op
//! set must be equal ([`RmaError::DomainMismatch`] otherwise, on every member), and
//! the implementation is decided the same way on every member: NIC atomics only if
//! every member's conduit offers the whole op set for the type, CPU atomics otherwise.
//! So no two ranks can mix NIC and CPU atomics on the same words, which are not
//! coherent with each other.
//!
//! # Implementation
//! - **CPU**: an operation on a word the conduit maps here is a CPU atomic through the
//!   mapping (direct path); on other words a Short AM carries it to the target, whose
//!   handler performs the same CPU atomic on its own segment and replies (the old value
//!   for fetching operations, an acknowledgement otherwise). Both use the processor's
//!   atomics on the same memory, so they are coherent with each other.
//! - **NIC**: every operation, to any member including this one, goes through the
//!   conduit's [`native_atomic`](gex_core::spi::ConduitEp::native_atomic). Never when
//!   the AM path is forced (`--cfg gex_force_am_rma`, `GEX_RMA_PATH=am`).
//!
//! # Rules
//! - The target word must be naturally aligned ([`RmaError::Misaligned`]), inside the
//!   target's segment ([`RmaError::OutOfSegment`]) and on a member of the domain's team
//!   ([`RmaError::NotInTeam`]).
//! - Concurrent accesses to a word used by atomic operations should all be atomic
//!   operations (of domains of the same type): mixing them with put/get/memset on the
//!   same word at the same time gives unspecified values, as in GASNet-EX, and not
//!   undefined behaviour: CPU atomics are [`gex_sync::word`] operations, defined over
//!   bytes like the byte-wise copies of put and get, so the race is never mixed-size
//!   (on x86-64; elsewhere the standard atomics, see that module).
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
//! The unsafe code runs [`gex_sync::word`] operations on addresses inside a segment:
//! the local one (AM handler) or a peer's mapping (direct path). The address was checked
//! to be inside the segment and naturally aligned for the width; the segment stays
//! mapped for the life of the conduit, which the endpoint keeps alive; every
//! concurrent access to the word in this process is a word operation or a byte-wise
//! copy of `gex_sync::copy`. It also stores fetched values
//! into result locations under the rules of [`crate::layer`] (a word the operation owns,
//! or a destination borrowed for a scope).
#![allow(unsafe_code)]

use crate::GlobalPtr;
use crate::RmaError;
use crate::engine::{Fail, How, Step};
use crate::layer::Rma;
use crate::native::NativeStep;
use crate::nbi::Cat;
use crate::ops::Handout;
use crate::path::{OpKind, Path};
use bytemuck::Pod;
use gex_core::event::{Data, Finish};
use gex_core::layer::Cx;
use gex_core::spi::{AtomicBase, Conduit, ConduitEp, NativeAtomic};
use gex_core::{Am, Event, Team};
use gex_sync::atomic::{Ordering, fence};
use std::marker::PhantomData;

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
    fn native(self) -> (AtomicBase, bool) {
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
    ($name:ident, $t:ty, $load:ident, $store:ident, $swap:ident, $cas:ident,
     $fetch_add:ident, $update:ident) => {
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
                        word::$load(p, load)
                    }
                    Base::Set => {
                        let so = if f.contains(AtomicFlags::RELEASE) {
                            Ordering::Release
                        } else {
                            Ordering::Relaxed
                        };
                        word::$store(p, x, so);
                        if f.contains(AtomicFlags::ACQUIRE) {
                            fence(Ordering::Acquire);
                        }
                        0
                    }
                    Base::Swap => word::$swap(p, x),
                    Base::Cswap => word::$cas(p, x, y),
                    Base::Add if int => word::$fetch_add(p, x),
                    Base::Sub if int => word::$fetch_add(p, x.wrapping_neg()),
                    Base::Inc if int => word::$fetch_add(p, 1),
                    Base::Dec if int => word::$fetch_add(p, <$t>::MAX),
                    Base::And => word::$update(p, |o| Some(o & x)),
                    Base::Or => word::$update(p, |o| Some(o | x)),
                    Base::Xor => word::$update(p, |o| Some(o ^ x)),
                    _ => word::$update(p, |o| compute(k, op, u64::from(o), a, b).map(|n| n as $t)),
                }
            };
            u64::from(old)
        }
    };
}
exec_width!(
    exec32,
    u32,
    load32,
    store32,
    swap32,
    cas32,
    fetch_add32,
    update32
);
exec_width!(
    exec64,
    u64,
    load64,
    store64,
    swap64,
    cas64,
    fetch_add64,
    update64
);

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

/// An atomic domain: the element type `T`, the agreed set of operations and the team
/// whose members' segments its operations target, with the implementation (NIC or CPU)
/// every member agreed on. Made collectively by
/// [`RmaExt::atomic_domain`](crate::RmaExt::atomic_domain); a small descriptor that
/// operations borrow ([`RmaExt::atomic`](crate::RmaExt::atomic),
/// [`RmaExt::fetch_atomic`](crate::RmaExt::fetch_atomic)).
///
/// ```
/// use gex_core::{boot::Singleton, loopback::Loopback, Blocking, ClientBuilder};
/// use gex_rma::{AtomicFlags, AtomicOp, AtomicOps, GlobalPtr, Rma, RmaError, RmaExt};
///
/// let client = ClientBuilder::new().layer::<Rma>().segment_size(4096)
///     .init::<Loopback>(Box::new(Singleton::new()))?;
/// let mut ep = client.endpoint(0)?;
/// let world = ep.world();
/// let ad = ep.atomic_domain::<u64>(&world, AtomicOps::FADD | AtomicOps::FCSWAP | AtomicOps::GET)?;
/// let p = GlobalPtr::<u64>::new(ep.addr(), 64);
/// let f = AtomicFlags::empty();
/// assert_eq!(ep.fetch_atomic(&ad, p, AtomicOp::Add(5), f, Blocking)?, 0);
/// let swap = AtomicOp::CompareSwap { expected: 5, new: 9 };
/// assert_eq!(ep.fetch_atomic(&ad, p, swap, f, Blocking)?, 5);
/// assert_eq!(ep.fetch_atomic(&ad, p, AtomicOp::Get, f, Blocking)?, 9);
/// assert_eq!(
///     ep.atomic(&ad, p, AtomicOp::Max(1), f, Blocking),
///     Err(RmaError::OpNotInDomain { op: AtomicOps::MAX })
/// );
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct AtomicDomain<T> {
    ops: AtomicOps,
    /// Every operation goes through the conduit's NIC atomics.
    nic: bool,
    team: Team,
    _t: PhantomData<fn() -> T>,
}

impl<T> Clone for AtomicDomain<T> {
    fn clone(&self) -> Self {
        AtomicDomain {
            ops: self.ops,
            nic: self.nic,
            team: self.team.clone(),
            _t: PhantomData,
        }
    }
}

impl<T: AtomicType> AtomicDomain<T> {
    /// The agreed op set.
    pub fn ops(&self) -> AtomicOps {
        self.ops
    }
    /// True if this domain performs every operation with the conduit's NIC atomics
    /// (agreed at creation: every member's conduit offers
    /// [`NATIVE_ATOMICS`](gex_core::Capabilities::NATIVE_ATOMICS) and every operation of
    /// the op set for this type); false: CPU atomics, directly or through AMs.
    pub fn is_native(&self) -> bool {
        self.nic
    }
    /// The team whose members' words the domain's operations target.
    pub fn team(&self) -> &Team {
        &self.team
    }
}

/// Length of the agreement blob: kind code, op set, NIC offer.
const AGREE_LEN: usize = 6;

impl Rma {
    /// This member's request for a domain of `T` with `ops`: the blob to exchange,
    /// and the error of an op set the type does not support (the blob is exchanged
    /// anyway, so the other members do not wait for this one).
    pub(crate) fn domain_request<C: Conduit, T: AtomicType>(
        &self,
        cx: &mut Cx<'_, C>,
        ops: AtomicOps,
    ) -> ([u8; AGREE_LEN], Option<RmaError>) {
        let bad = (T::KIND.is_float() && ops.intersects(AtomicOps::BITWISE)).then(|| {
            RmaError::BadOpSet {
                ops: ops & AtomicOps::BITWISE,
            }
        });
        let offers = self.t.caps.contains(gex_core::Capabilities::NATIVE_ATOMICS) && {
            let cep = cx.conduit();
            Code::ALL
                .iter()
                .filter(|op| ops.contains(op.flag()))
                .all(|op| {
                    let (base, fetch) = op.native();
                    cep.native_atomic_supported(T::KIND, base, fetch)
                })
        };
        let mut b = [0u8; AGREE_LEN];
        b[0] = T::KIND.code() as u8;
        b[1..5].copy_from_slice(&ops.bits().to_le_bytes());
        b[5] = u8::from(offers && bad.is_none());
        (b, bad)
    }
}

/// Decides a domain from every member's request (team-rank order): equal requests
/// give the domain (NIC only if every member offers it), different ones
/// [`RmaError::DomainMismatch`] naming the job ranks that differ from team rank 0.
pub(crate) fn agree<T: AtomicType>(
    team: &Team,
    ops: AtomicOps,
    all: &[Vec<u8>],
) -> Result<AtomicDomain<T>, RmaError> {
    let first = all.first().map(|b| b.get(..5)).unwrap_or(None);
    let ranks: Vec<u32> = all
        .iter()
        .enumerate()
        .filter(|(_, b)| b.len() != AGREE_LEN || b.get(..5) != first)
        .filter_map(|(i, _)| team.job_rank(i as u32))
        .collect();
    if !ranks.is_empty() {
        return Err(RmaError::DomainMismatch { ranks });
    }
    let nic = all.iter().all(|b| b[5] == 1);
    Ok(AtomicDomain {
        ops,
        nic,
        team: team.clone(),
        _t: PhantomData,
    })
}

impl<T: AtomicType> AtomicDomain<T> {
    /// True if `dst` is a member of the domain's team.
    #[inline(always)]
    fn has_member(&self, dst: gex_core::EpAddr) -> bool {
        if self.team.id() == 0 {
            dst.ep == self.team.me().ep
        } else {
            self.team.rank_of(dst).is_some()
        }
    }
}

/// Where the old value of an atomic goes: the event's output and a borrowed
/// destination.
#[derive(Debug)]
pub(crate) struct AtomicOut<T, O: Send + 'static> {
    /// A borrowed destination of the fetched value (scoped fetches), written at
    /// completion.
    pub(crate) result: Option<*mut T>,
    /// The event's output is made of the old value (`finish`): the target must send it.
    pub(crate) want: bool,
    /// Makes the output from the completion data.
    pub(crate) finish: Finish<O>,
}

impl<T, O: Send + 'static> Clone for AtomicOut<T, O> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T, O: Send + 'static> Copy for AtomicOut<T, O> {}

/// An atomic being issued: its entry in the op table once made, its event once the
/// completion is decided. The state [`drive`](crate::ext) advances.
#[derive(Debug)]
pub(crate) struct AtomicIssue<O: Send + 'static> {
    pub(crate) id: Option<u32>,
    pub(crate) ev: Option<Event<O, RmaError>>,
}

impl<O: Send + 'static> AtomicIssue<O> {
    pub(crate) fn new() -> Self {
        AtomicIssue { id: None, ev: None }
    }
}

impl Rma {
    /// The fastest path of an atomic, run under
    /// [`layer::state`](gex_core::layer::state): a
    /// CPU atomic in a domain that allows the operation, on an aligned word of a member
    /// whose segment mapping is cached, executes now and gives the old value's bits;
    /// anything else gives `None` and takes [`atomic_step`](Self::atomic_step), which
    /// reports any error.
    #[inline(always)]
    pub(crate) fn atomic_fast<T: AtomicType>(
        &self,
        ad: &AtomicDomain<T>,
        req: AtomicReq<T>,
    ) -> Option<u64> {
        let size = std::mem::size_of::<T>();
        let p = req.ptr;
        let dst = p.addr();
        if ad.nic || !ad.ops.contains(req.code.flag()) || p.offset % size != 0 {
            return None;
        }
        if !ad.has_member(dst) {
            return None;
        }
        let at = self.t.direct_at(dst, p.offset, size)?;
        if at as usize % size != 0 {
            return None;
        }
        // SAFETY: inside the mapped segment and aligned (checked); every access to the
        // word is atomic (module rules).
        Some(unsafe { exec(at, T::KIND, req.code.base(), req.a, req.b, req.flags) })
    }

    /// The first step of an atomic: checks it, performs it now on the direct path
    /// (`Ok(Some(old))`), or makes its entry in the op table (`Ok(None)`, `st.id` set).
    ///
    /// # Safety
    /// `result`, if given, is writable for one `T` (module `# Safety`).
    unsafe fn atomic_start<C: Conduit, T: AtomicType>(
        &mut self,
        cx: &mut Cx<'_, C>,
        ad: &AtomicDomain<T>,
        req: &AtomicReq<T>,
        result: Option<*mut T>,
    ) -> Result<Result<u64, u32>, RmaError> {
        let size = std::mem::size_of::<T>();
        let (p, op) = (req.ptr, req.code);
        let dst = p.addr();
        if !ad.ops.contains(op.flag()) {
            return Err(RmaError::OpNotInDomain { op: op.flag() });
        }
        if !ad.has_member(dst) {
            return Err(RmaError::NotInTeam { dst });
        }
        self.t.check_range(dst, p.offset, size)?;
        let misaligned = RmaError::Misaligned {
            dst,
            offset: p.offset,
            align: size,
        };
        if p.offset % size != 0 {
            return Err(misaligned);
        }
        let base = self.t.mapping(cx, dst, p.offset + size)?;
        let path = self.t.path(
            OpKind::Atomic { nic: ad.nic },
            size,
            p.offset,
            1,
            base.is_some(),
        );
        if let (Path::Direct, Some(base)) = (path, base) {
            // SAFETY: the offset is inside the mapped segment (checked).
            let at = unsafe { base.as_ptr().add(p.offset) };
            if at as usize % size != 0 {
                return Err(misaligned);
            }
            // SAFETY: inside the mapped segment and aligned (checked); every access
            // to the word is atomic (module rules).
            let old = unsafe { exec(at, T::KIND, op.base(), req.a, req.b, req.flags) };
            if let Some(r) = result {
                // SAFETY: writable (contract).
                unsafe { r.write_unaligned(T::from_bits(old)) };
            }
            return Ok(Ok(old));
        }
        // A fetching NIC atomic always gets a word to land the old value in, also
        // when nobody wants it (`atomic` of a fetching form, `fetch_atomic` in mode
        // NBI): the conduit contract allows a null result only for an operation that
        // does not fetch (the NIC writes the old value through it).
        let land = if path == Path::Native && op.is_fetching() {
            Box::into_raw(Box::new(0u64))
        } else {
            std::ptr::null_mut()
        };
        let i = self
            .ops
            .new_op(dst, "atomic", std::ptr::null_mut(), 0, land);
        if let (Some(r), Some(e)) = (result, self.ops.get_mut(&i)) {
            e.result = Some((r.cast(), size));
        }
        Ok(Err(i))
    }

    /// Issues atomic `req` of entry `i`, on the NIC or as a Short AM: true once
    /// started, false under back-pressure. `fetching`: the target sends the old value
    /// back (AM path).
    fn atomic_issue<C: Conduit, T: AtomicType>(
        &mut self,
        cx: &mut Cx<'_, C>,
        nic: bool,
        req: &AtomicReq<T>,
        i: u32,
        fetching: bool,
    ) -> Result<bool, RmaError> {
        let (p, op, f) = (req.ptr, req.code, req.flags);
        let dst = p.addr();
        if nic && !self.t.force_am {
            let (base, fetch) = op.native();
            let na = NativeAtomic {
                kind: T::KIND,
                base,
                fetch,
                a: req.a,
                b: req.b,
                acquire: f.contains(AtomicFlags::ACQUIRE),
                release: f.contains(AtomicFlags::RELEASE),
            };
            let land = self.ops.get(&i).map_or(std::ptr::null_mut(), |e| e.land);
            // SAFETY: the word was checked; `land` is owned by the entry until it
            // completes.
            return match unsafe { self.native_atomic(cx, i, dst, p.offset, &na, land) }? {
                NativeStep::Done => Ok(true),
                NativeStep::Blocked => Ok(false),
                NativeStep::Unsupported => Err(RmaError::Am(gex_core::AmError::Conduit(
                    gex_core::spi::ConduitError::Contract(format!(
                        "{}: native atomic {:?} on {:?} refused after being offered",
                        C::NAME,
                        na.base,
                        na.kind
                    )),
                ))),
            };
        }
        let code =
            op as u32 | (T::KIND.code() << 8) | (f.bits() << 16) | if fetching { WANT } else { 0 };
        // [op, code, offset, a, b]: the 64-bit words as (low, high) halves.
        let mut args = [i, code, 0, 0, 0, 0, 0, 0];
        for (k, w) in [p.offset as u64, req.a, req.b].into_iter().enumerate() {
            args[2 + 2 * k] = w as u32;
            args[3 + 2 * k] = (w >> 32) as u32;
        }
        let sent = crate::am::send_short(cx, dst, self.h.atomic, &args)?;
        if sent {
            self.ops.bump(i, 1);
        }
        Ok(sent)
    }

    /// One step of atomic `req` of domain `ad`; the old value goes to `out`.
    ///
    /// # Safety
    /// `out.result`, if given, is writable for one `T` and untouched by anyone else
    /// until the operation completes (module `# Safety`).
    pub(crate) unsafe fn atomic_step<C: Conduit, T: AtomicType, O: Send + 'static>(
        &mut self,
        cx: &mut Cx<'_, C>,
        ad: &AtomicDomain<T>,
        req: AtomicReq<T>,
        how: How,
        out: AtomicOut<T, O>,
        st: &mut AtomicIssue<O>,
    ) -> Result<Step<O>, Fail<O>> {
        let i = match st.id {
            Some(i) => i,
            // SAFETY: forwarded contract.
            None => match unsafe { self.atomic_start(cx, ad, &req, out.result) }? {
                Ok(old) => return Ok(Step::Now((out.finish)(Data::Word(old), None))),
                Err(i) => {
                    st.id = Some(i);
                    i
                }
            },
        };
        let fetching = req.code.is_fetching() && (out.want || out.result.is_some());
        match self.atomic_issue(cx, ad.nic, &req, i, fetching) {
            Ok(false) => Ok(Step::Blocked),
            Ok(true) => {
                let mut out = Handout {
                    hold: &mut None,
                    finish: out.finish,
                    ev: &mut st.ev,
                };
                if self.ops.get(&i).is_some_and(|e| e.remaining > 0) {
                    self.ops.open(cx, i, how.counted(Cat::Atomics), &mut out);
                }
                let d = match self.ops.seal(i) {
                    Some(w) => Data::Word(w),
                    None => Data::Unit,
                };
                Ok(out.step(d))
            }
            Err(err) => {
                // Nothing was started: a single unit failed to start.
                self.ops.remove(&i);
                Err(Fail { err, ev: None })
            }
        }
    }

    /// Atomic reply: `[op, old lo, old hi]`.
    pub(crate) fn on_atomic_reply(&mut self, am: &Am<'_>) {
        let a = am.args();
        let ok = a.len() >= 3
            && match self.ops.get_mut(&a[0]) {
                Some(e) if !e.abandoned => {
                    e.word = join64(a[1], a[2]);
                    true
                }
                _ => false,
            }
            && self.ops.credit(a[0], 1);
        if !ok {
            self.served.dropped += 1;
        }
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
