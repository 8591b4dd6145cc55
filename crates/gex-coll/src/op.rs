//! Operations, modes, element types and reduction operators.

use bytemuck::Pod;
use std::fmt;
use std::sync::Arc;

/// The byte-level reduction: `f(acc, incoming, incoming_is_left)` sets
/// `acc = incoming ⊕ acc` if `incoming_is_left`, else `acc = acc ⊕ incoming`,
/// elementwise over slices of equal length.
pub type ReduceFn = std::sync::Arc<dyn Fn(&mut [u8], &[u8], bool) + Send + Sync>;

/// The collective operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OpKind {
    /// Every member waits for every other.
    Barrier,
    /// The root's block to every member.
    Broadcast,
    /// Block `i` of the root's input to member `i`.
    Scatter,
    /// Every member's block to the root, in team-rank order.
    Gather,
    /// Every member's block to every member, in team-rank order (all-gather).
    GatherAll,
    /// Block `j` of member `i`'s input becomes block `i` of member `j`'s output
    /// (all-to-all).
    Exchange,
    /// The reduction of every member's input to the root.
    Reduce,
    /// The reduction of every member's input to every member.
    Allreduce,
    /// Block `i` of the reduction of every member's `P` blocks to member `i`.
    ReduceScatter,
    /// Member `i` gets the reduction of the inputs of members `0..=i`.
    Scan,
    /// Member `i > 0` gets the reduction of the inputs of members `0..i`.
    Exscan,
}

impl OpKind {
    /// Every operation, in declaration order.
    pub const ALL: [OpKind; 11] = [
        OpKind::Barrier,
        OpKind::Broadcast,
        OpKind::Scatter,
        OpKind::Gather,
        OpKind::GatherAll,
        OpKind::Exchange,
        OpKind::Reduce,
        OpKind::Allreduce,
        OpKind::ReduceScatter,
        OpKind::Scan,
        OpKind::Exscan,
    ];

    /// The lower-case name (`gather_all`, `reduce_scatter`, ...).
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Barrier => "barrier",
            OpKind::Broadcast => "broadcast",
            OpKind::Scatter => "scatter",
            OpKind::Gather => "gather",
            OpKind::GatherAll => "gather_all",
            OpKind::Exchange => "exchange",
            OpKind::Reduce => "reduce",
            OpKind::Allreduce => "allreduce",
            OpKind::ReduceScatter => "reduce_scatter",
            OpKind::Scan => "scan",
            OpKind::Exscan => "exscan",
        }
    }

    /// The environment variable that overrides the algorithm of this operation
    /// (`GEX_COLL_BROADCAST`, ...).
    pub fn env_var(self) -> &'static str {
        match self {
            OpKind::Barrier => "GEX_COLL_BARRIER",
            OpKind::Broadcast => "GEX_COLL_BROADCAST",
            OpKind::Scatter => "GEX_COLL_SCATTER",
            OpKind::Gather => "GEX_COLL_GATHER",
            OpKind::GatherAll => "GEX_COLL_GATHER_ALL",
            OpKind::Exchange => "GEX_COLL_EXCHANGE",
            OpKind::Reduce => "GEX_COLL_REDUCE",
            OpKind::Allreduce => "GEX_COLL_ALLREDUCE",
            OpKind::ReduceScatter => "GEX_COLL_REDUCE_SCATTER",
            OpKind::Scan => "GEX_COLL_SCAN",
            OpKind::Exscan => "GEX_COLL_EXSCAN",
        }
    }

    /// True for operations that combine values with a reduction operator.
    pub fn reduces(self) -> bool {
        matches!(
            self,
            OpKind::Reduce
                | OpKind::Allreduce
                | OpKind::ReduceScatter
                | OpKind::Scan
                | OpKind::Exscan
        )
    }

    /// True for operations with a root.
    pub fn rooted(self) -> bool {
        matches!(
            self,
            OpKind::Broadcast | OpKind::Scatter | OpKind::Gather | OpKind::Reduce
        )
    }

    /// (input, output) lengths in blocks for team rank `rank` of `size` members with
    /// root `root` (a block is `count` elements).
    pub fn shape(self, size: u32, rank: u32, root: u32) -> (usize, usize) {
        let p = size as usize;
        let is_root = rank == root;
        match self {
            OpKind::Barrier => (0, 0),
            OpKind::Broadcast => (usize::from(is_root), 1),
            OpKind::Scatter => (if is_root { p } else { 0 }, 1),
            OpKind::Gather => (1, if is_root { p } else { 0 }),
            OpKind::GatherAll => (1, p),
            OpKind::Exchange => (p, p),
            OpKind::Reduce => (1, usize::from(is_root)),
            OpKind::Allreduce | OpKind::Scan => (1, 1),
            OpKind::ReduceScatter => (p, 1),
            OpKind::Exscan => (1, usize::from(rank > 0)),
        }
    }
}

impl fmt::Display for OpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One side of a synchronisation mode (seed 003, after UPC's collective flags).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum SyncMode {
    /// Entry: data may move as soon as any member entered. Exit: the operation may
    /// complete on this member before every transfer touching its buffers finished
    /// (single address mode only; with owned buffers it behaves as `My`).
    No,
    /// Entry: data moves into or out of a member's buffers only after that member
    /// entered. Exit: complete once every transfer into or out of this member's
    /// buffers finished.
    #[default]
    My,
    /// Entry: no data moves before every member entered. Exit: complete only once
    /// every member's transfers finished.
    All,
}

/// Entry and exit synchronisation of one collective.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct SyncModes {
    /// Entry mode.
    pub input: SyncMode,
    /// Exit mode.
    pub output: SyncMode,
}

impl SyncModes {
    /// `in × out`.
    pub const fn new(input: SyncMode, output: SyncMode) -> SyncModes {
        SyncModes { input, output }
    }
}

/// How the data of a collective is addressed (seed 003, section 2.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AddrMode {
    /// Every member passes only its own (owned) buffers.
    Local,
    /// Every member passes the segment offsets of every member's source and
    /// destination, so data can be written straight into its final place.
    Single,
}

/// How messages move in algorithms that can choose (trees for broadcast, gather_all
/// without rotation), in single address mode or through team scratch space.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Transport {
    /// Medium AMs, copied out of a mailbox by the receiver.
    Eager,
    /// Signaling put: a Long AM writes the bytes into the receiver's destination in
    /// its segment, then its handler sets the arrival flag.
    Put,
    /// Rendezvous: the sender announces where the bytes are in its segment, the
    /// receiver gets them and then increments the sender's acknowledgement counter.
    Rendezvous,
}

impl Transport {
    /// `eager`, `put` or `rdv`.
    pub fn name(self) -> &'static str {
        match self {
            Transport::Eager => "eager",
            Transport::Put => "put",
            Transport::Rendezvous => "rdv",
        }
    }
}

/// Element types of collectives: every primitive numeric type.
pub trait Elem: Pod + Send + Sync + PartialEq + fmt::Debug + 'static {
    /// Applies an arithmetic built-in operator (defined on every element type).
    fn builtin(op: BuiltinOp, a: Self, b: Self) -> Self;
}

/// Integer element types: the bitwise and logical operators ([`BitOp`]) are defined
/// on them.
pub trait IntElem: Elem {
    /// Applies a bitwise or logical operator.
    fn bitop(op: BitOp, a: Self, b: Self) -> Self;
}

/// [`Elem`] for the types listed, the sum and product of `$a` and `$b` as given (min
/// and max are the types' own).
macro_rules! elem {
    (|$a:ident, $b:ident| sum: $sum:expr, prod: $prod:expr; $($t:ty),*) => {$(
        impl Elem for $t {
            #[inline]
            fn builtin(op: BuiltinOp, $a: Self, $b: Self) -> Self {
                match op {
                    BuiltinOp::Sum => $sum,
                    BuiltinOp::Prod => $prod,
                    BuiltinOp::Min => $a.min($b),
                    BuiltinOp::Max => $a.max($b),
                }
            }
        }
    )*};
}

/// [`Elem`] (wrapping sum and product) and [`IntElem`] for the integer types listed.
macro_rules! int_elem {
    ($($t:ty),*) => {
        elem!(|a, b| sum: a.wrapping_add(b), prod: a.wrapping_mul(b); $($t),*);
        $(
        impl IntElem for $t {
            #[inline]
            fn bitop(op: BitOp, a: Self, b: Self) -> Self {
                match op {
                    BitOp::Band => a & b,
                    BitOp::Bor => a | b,
                    BitOp::Bxor => a ^ b,
                    BitOp::Land => <$t>::from(a != 0 && b != 0),
                    BitOp::Lor => <$t>::from(a != 0 || b != 0),
                }
            }
        }
        )*
    };
}
int_elem!(
    u8, u16, u32, u64, u128, usize, i8, i16, i32, i64, i128, isize
);
elem!(|a, b| sum: a + b, prod: a * b; f32, f64);

/// Arithmetic built-in reduction operators, defined on every element type ([`Elem`]).
/// All are commutative and associative (floating point sums and products only up to
/// rounding: results may differ between algorithms in the last bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BuiltinOp {
    /// Sum (wrapping for integers).
    Sum,
    /// Product (wrapping for integers).
    Prod,
    /// Minimum.
    Min,
    /// Maximum.
    Max,
}

impl BuiltinOp {
    /// Every arithmetic built-in operator.
    pub const ALL: [BuiltinOp; 4] = [
        BuiltinOp::Sum,
        BuiltinOp::Prod,
        BuiltinOp::Min,
        BuiltinOp::Max,
    ];
}

/// Bitwise and logical built-in reduction operators, defined on integer element types
/// only ([`IntElem`]): asking for one on a float does not compile. Commutative and
/// associative.
///
/// ```compile_fail
/// use gex_coll::{BitOp, ReduceOp};
/// let _ = ReduceOp::<f64>::bitwise(BitOp::Bxor); // f64 is not an IntElem
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BitOp {
    /// Bitwise and.
    Band,
    /// Bitwise or.
    Bor,
    /// Bitwise exclusive or.
    Bxor,
    /// Logical and: 1 if both are non-zero, else 0.
    Land,
    /// Logical or: 1 if either is non-zero, else 0.
    Lor,
}

impl BitOp {
    /// Every bitwise and logical operator.
    pub const ALL: [BitOp; 5] = [
        BitOp::Band,
        BitOp::Bor,
        BitOp::Bxor,
        BitOp::Land,
        BitOp::Lor,
    ];
}

/// A reduction operator on `T`: a built-in one or a user function, commutative or
/// not. Non-commutative operators are always combined in team-rank order
/// (`x0 ⊕ x1 ⊕ … ⊕ x(P-1)`); they must still be associative.
///
/// Built-in operators cannot fail: arithmetic ones ([`BuiltinOp`]) exist on every
/// element type, bitwise ones ([`BitOp`]) only on integers (a float does not
/// compile). Both convert with `into()`, so a descriptor takes `BuiltinOp::Sum`
/// directly.
///
/// ```
/// use gex_coll::{BitOp, BuiltinOp, ReduceOp};
/// let sum = ReduceOp::<u32>::builtin(BuiltinOp::Sum);
/// assert!(sum.is_commutative());
/// let max: ReduceOp<f64> = BuiltinOp::Max.into();
/// let xor = ReduceOp::<i8>::bitwise(BitOp::Bxor);
/// # let _ = (max, xor);
/// // 2x2 matrix product: associative, not commutative.
/// let matmul = ReduceOp::<[i64; 4]>::user(false, |a, b| {
///     [a[0]*b[0]+a[1]*b[2], a[0]*b[1]+a[1]*b[3], a[2]*b[0]+a[3]*b[2], a[2]*b[1]+a[3]*b[3]]
/// });
/// assert!(!matmul.is_commutative());
/// ```
#[derive(Clone)]
pub struct ReduceOp<T> {
    f: ReduceFn,
    commutative: bool,
    name: &'static str,
    /// Which operator it is, for the members' agreement ([`reduce_name`]).
    code: u8,
    _t: std::marker::PhantomData<fn(T) -> T>,
}

impl<T> fmt::Debug for ReduceOp<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReduceOp")
            .field("name", &self.name)
            .field("commutative", &self.commutative)
            .finish()
    }
}

impl<T: Pod + Send + Sync + 'static> ReduceOp<T> {
    /// A user-defined operator `f(left, right)`; `commutative` allows algorithms that
    /// combine out of rank order.
    pub fn user(commutative: bool, f: impl Fn(&T, &T) -> T + Send + Sync + 'static) -> Self {
        let sz = std::mem::size_of::<T>();
        let func: ReduceFn = Arc::new(move |acc: &mut [u8], inc: &[u8], inc_left: bool| {
            for (a, b) in acc.chunks_exact_mut(sz).zip(inc.chunks_exact(sz)) {
                let x: T = bytemuck::pod_read_unaligned(a);
                let y: T = bytemuck::pod_read_unaligned(b);
                let z = if inc_left { f(&y, &x) } else { f(&x, &y) };
                a.copy_from_slice(bytemuck::bytes_of(&z));
            }
        });
        ReduceOp {
            f: func,
            commutative,
            name: "user",
            code: if commutative { USER } else { USER + 1 },
            _t: std::marker::PhantomData,
        }
    }

    /// True if the operator may be applied out of rank order.
    pub fn is_commutative(&self) -> bool {
        self.commutative
    }

    /// The byte-level function that schedules apply (see [`ReduceFn`]).
    pub fn func(&self) -> &ReduceFn {
        &self.f
    }

    /// The operator's name (`Sum`, `Bxor`, `user`, ...).
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Which operator it is ([`reduce_name`]): what members compare.
    #[inline]
    pub(crate) fn code(&self) -> u8 {
        self.code
    }
}

/// The element-wise function and name of the built-in operator `$op` (of the enum
/// `$kind`, one of the variants listed), combining two elements with `T::$apply`: one
/// closure per operator, so the operator is a constant inside the loop (no
/// per-element dispatch; the loop vectorises).
macro_rules! per_op {
    ($op:expr, $kind:ident, $apply:ident; $($o:ident),*) => {
        match $op {
            $($kind::$o => (elementwise::<T>(|l, r| T::$apply($kind::$o, l, r)), stringify!($o)),)*
        }
    };
}

impl<T: Elem> ReduceOp<T> {
    /// An arithmetic built-in operator (defined on every element type).
    pub fn builtin(op: BuiltinOp) -> Self {
        let (f, name) = per_op!(op, BuiltinOp, builtin; Sum, Prod, Min, Max);
        Self::built_in(f, name, 1 + op as u8)
    }

    /// A commutative built-in operator: element-wise `f`, its `name` and wire `code`.
    fn built_in(f: ReduceFn, name: &'static str, code: u8) -> Self {
        ReduceOp {
            f,
            commutative: true,
            name,
            code,
            _t: std::marker::PhantomData,
        }
    }
}

impl<T: IntElem> ReduceOp<T> {
    /// A bitwise or logical built-in operator (integer element types only).
    pub fn bitwise(op: BitOp) -> Self {
        let (f, name) = per_op!(op, BitOp, bitop; Band, Bor, Bxor, Land, Lor);
        Self::built_in(f, name, 1 + BuiltinOp::ALL.len() as u8 + op as u8)
    }
}

impl<T: Elem> From<BuiltinOp> for ReduceOp<T> {
    fn from(op: BuiltinOp) -> Self {
        ReduceOp::builtin(op)
    }
}

impl<T: IntElem> From<BitOp> for ReduceOp<T> {
    fn from(op: BitOp) -> Self {
        ReduceOp::bitwise(op)
    }
}

/// A reduction operator as the descriptors take it ([`crate::desc`]): moved in (or
/// built from a [`BuiltinOp`] or [`BitOp`]), or borrowed for the descriptor's life,
/// so that a loop of calls with one operator touches no reference count.
///
/// ```
/// use gex_coll::{BuiltinOp, ReduceArg, ReduceOp};
/// let sum = ReduceOp::<u64>::builtin(BuiltinOp::Sum);
/// let borrowed: ReduceArg<'_, u64> = (&sum).into();
/// let owned: ReduceArg<'_, u64> = BuiltinOp::Max.into();
/// assert_eq!((borrowed.name(), owned.name()), ("Sum", "Max"));
/// ```
#[derive(Debug)]
pub enum ReduceArg<'a, T> {
    /// Moved in.
    Owned(ReduceOp<T>),
    /// Borrowed for the descriptor's life.
    Borrowed(&'a ReduceOp<T>),
}

impl<T> std::ops::Deref for ReduceArg<'_, T> {
    type Target = ReduceOp<T>;
    #[inline]
    fn deref(&self) -> &ReduceOp<T> {
        match self {
            ReduceArg::Owned(o) => o,
            ReduceArg::Borrowed(o) => o,
        }
    }
}

impl<T> From<ReduceOp<T>> for ReduceArg<'_, T> {
    fn from(op: ReduceOp<T>) -> Self {
        ReduceArg::Owned(op)
    }
}

impl<'a, T> From<&'a ReduceOp<T>> for ReduceArg<'a, T> {
    fn from(op: &'a ReduceOp<T>) -> Self {
        ReduceArg::Borrowed(op)
    }
}

impl<T: Elem> From<BuiltinOp> for ReduceArg<'_, T> {
    fn from(op: BuiltinOp) -> Self {
        ReduceArg::Owned(ReduceOp::builtin(op))
    }
}

impl<T: IntElem> From<BitOp> for ReduceArg<'_, T> {
    fn from(op: BitOp) -> Self {
        ReduceArg::Owned(ReduceOp::bitwise(op))
    }
}

/// The code of a user-defined commutative operator (`USER + 1`: not commutative);
/// built-in operators are `1 + ` their index in [`BuiltinOp::ALL`], then
/// [`BitOp::ALL`]; 0 is no operator ([`reduce_name`]).
const USER: u8 = 1 + (BuiltinOp::ALL.len() + BitOp::ALL.len()) as u8;

/// The name of reduction code `code` (as [`ReduceOp::name`], with a user operator's
/// commutativity), for errors: `none` for 0.
pub(crate) fn reduce_name(code: u64) -> String {
    let c = code as usize;
    let (nb, nbit) = (BuiltinOp::ALL.len(), BitOp::ALL.len());
    match c {
        0 => "none".into(),
        _ if c <= nb => format!("{:?}", BuiltinOp::ALL[c - 1]),
        _ if c <= nb + nbit => format!("{:?}", BitOp::ALL[c - 1 - nb]),
        _ if code == u64::from(USER) => "a commutative user operator".into(),
        _ if code == u64::from(USER) + 1 => "a non-commutative user operator".into(),
        _ => format!("operator code {code}"),
    }
}

/// Element types members compare, by code (0: any other type; its size is compared).
const ELEM_TYPES: [&str; 14] = [
    "u8", "u16", "u32", "u64", "u128", "usize", "i8", "i16", "i32", "i64", "i128", "isize", "f32",
    "f64",
];

/// The code of element type `T` (`1 + ` its index in the primitive types, 0 for any
/// other): a constant after monomorphisation.
#[inline(always)]
pub(crate) fn elem_code<T: 'static>() -> u8 {
    use std::any::TypeId;
    let t = TypeId::of::<T>();
    macro_rules! code {
        ($($ty:ty),*) => {{
            let mut i = 0u8;
            $(
                i += 1;
                if t == TypeId::of::<$ty>() {
                    return i;
                }
            )*
            let _ = i;
        }};
    }
    code!(
        u8, u16, u32, u64, u128, usize, i8, i16, i32, i64, i128, isize, f32, f64
    );
    0
}

/// The name of element type code `code`, for errors.
pub(crate) fn elem_name(code: u64) -> String {
    match code as usize {
        0 => "a user type".into(),
        c if c <= ELEM_TYPES.len() => ELEM_TYPES[c - 1].into(),
        _ => format!("type code {code}"),
    }
}

/// The byte-level function of the elementwise operator `f(left, right)`.
fn elementwise<T: Pod + Send + Sync + 'static>(
    f: impl Fn(T, T) -> T + Send + Sync + 'static,
) -> ReduceFn {
    Arc::new(move |acc: &mut [u8], inc: &[u8], inc_left: bool| {
        // Aligned buffers (the usual case: allocations and shared-memory slots are
        // aligned) are combined as typed slices, which vectorises; others element
        // by element through unaligned reads.
        if let (Ok(a), Ok(b)) = (
            bytemuck::try_cast_slice_mut::<u8, T>(acc),
            bytemuck::try_cast_slice::<u8, T>(inc),
        ) {
            if inc_left {
                a.iter_mut().zip(b).for_each(|(x, &y)| *x = f(y, *x));
            } else {
                a.iter_mut().zip(b).for_each(|(x, &y)| *x = f(*x, y));
            }
            return;
        }
        let sz = std::mem::size_of::<T>();
        for (a, b) in acc.chunks_exact_mut(sz).zip(inc.chunks_exact(sz)) {
            let x: T = bytemuck::pod_read_unaligned(a);
            let y: T = bytemuck::pod_read_unaligned(b);
            let z = if inc_left { f(y, x) } else { f(x, y) };
            a.copy_from_slice(bytemuck::bytes_of(&z));
        }
    })
}

/// Options of one collective call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Opts<'a> {
    /// Entry and exit synchronisation (default: in-my × out-my).
    pub sync: SyncModes,
    /// Force an algorithm by name (as listed by [`CollExt::algorithms`](crate::CollExt::algorithms));
    /// `None`: the autotuner's choice (or the `GEX_COLL_<OP>` override).
    pub algorithm: Option<&'a str>,
}

impl<'a> Opts<'a> {
    /// Default options with `sync`.
    pub fn sync(input: SyncMode, output: SyncMode) -> Opts<'a> {
        Opts {
            sync: SyncModes::new(input, output),
            algorithm: None,
        }
    }

    /// These options with algorithm `name` forced.
    pub fn with_algorithm(mut self, name: &'a str) -> Opts<'a> {
        self.algorithm = Some(name);
        self
    }
}
