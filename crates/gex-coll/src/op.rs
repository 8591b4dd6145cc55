//! Operations, modes, element types and reduction operators.

use crate::error::CollError;
use crate::sched::ReduceFn;
use bytemuck::Pod;
use std::fmt;
use std::sync::Arc;

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
    /// Applies a built-in operator; `None` if it is not defined on this type
    /// (bitwise and logical operators on floating point).
    fn builtin(op: BuiltinOp, a: Self, b: Self) -> Option<Self>;
}

macro_rules! int_elem {
    ($($t:ty),*) => {$(
        impl Elem for $t {
            #[inline]
            fn builtin(op: BuiltinOp, a: Self, b: Self) -> Option<Self> {
                Some(match op {
                    BuiltinOp::Sum => a.wrapping_add(b),
                    BuiltinOp::Prod => a.wrapping_mul(b),
                    BuiltinOp::Min => a.min(b),
                    BuiltinOp::Max => a.max(b),
                    BuiltinOp::Band => a & b,
                    BuiltinOp::Bor => a | b,
                    BuiltinOp::Bxor => a ^ b,
                    BuiltinOp::Land => <$t>::from(a != 0 && b != 0),
                    BuiltinOp::Lor => <$t>::from(a != 0 || b != 0),
                })
            }
        }
    )*};
}
int_elem!(
    u8, u16, u32, u64, u128, usize, i8, i16, i32, i64, i128, isize
);

macro_rules! float_elem {
    ($($t:ty),*) => {$(
        impl Elem for $t {
            #[inline]
            fn builtin(op: BuiltinOp, a: Self, b: Self) -> Option<Self> {
                match op {
                    BuiltinOp::Sum => Some(a + b),
                    BuiltinOp::Prod => Some(a * b),
                    BuiltinOp::Min => Some(a.min(b)),
                    BuiltinOp::Max => Some(a.max(b)),
                    _ => None,
                }
            }
        }
    )*};
}
float_elem!(f32, f64);

/// Built-in reduction operators. All are commutative and associative (floating
/// point sums and products only up to rounding: results may differ between
/// algorithms in the last bits).
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
    /// Bitwise and (integers).
    Band,
    /// Bitwise or (integers).
    Bor,
    /// Bitwise exclusive or (integers).
    Bxor,
    /// Logical and: 1 if both are non-zero, else 0 (integers).
    Land,
    /// Logical or (integers).
    Lor,
}

impl BuiltinOp {
    /// Every built-in operator.
    pub const ALL: [BuiltinOp; 9] = [
        BuiltinOp::Sum,
        BuiltinOp::Prod,
        BuiltinOp::Min,
        BuiltinOp::Max,
        BuiltinOp::Band,
        BuiltinOp::Bor,
        BuiltinOp::Bxor,
        BuiltinOp::Land,
        BuiltinOp::Lor,
    ];
}

/// A reduction operator on `T`: a built-in one or a user function, commutative or
/// not. Non-commutative operators are always combined in team-rank order
/// (`x0 ⊕ x1 ⊕ … ⊕ x(P-1)`); they must still be associative.
///
/// ```
/// use gex_coll::{BuiltinOp, ReduceOp};
/// let sum = ReduceOp::<u32>::builtin(BuiltinOp::Sum).unwrap();
/// assert!(sum.is_commutative());
/// assert!(ReduceOp::<f64>::builtin(BuiltinOp::Bxor).is_err());
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
    name: String,
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
            name: "user".into(),
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
}

impl<T: Elem> ReduceOp<T> {
    /// A built-in operator.
    ///
    /// # Errors
    /// [`CollError::UnsupportedOp`] for bitwise and logical operators on floating
    /// point types.
    pub fn builtin(op: BuiltinOp) -> Result<Self, CollError> {
        let z: T = bytemuck::Zeroable::zeroed();
        if T::builtin(op, z, z).is_none() {
            return Err(CollError::UnsupportedOp {
                op: format!("{op:?}"),
                ty: std::any::type_name::<T>(),
            });
        }
        // One closure per operator, so the operator is a constant inside the loop
        // (no per-element dispatch; the loop vectorises).
        macro_rules! per_op {
            ($($o:ident),*) => {
                match op {
                    $(BuiltinOp::$o => elementwise::<T>(|l, r| {
                        T::builtin(BuiltinOp::$o, l, r).unwrap_or(l)
                    }),)*
                }
            };
        }
        let func = per_op!(Sum, Prod, Min, Max, Band, Bor, Bxor, Land, Lor);
        Ok(ReduceOp {
            f: func,
            commutative: true,
            name: format!("{op:?}"),
            _t: std::marker::PhantomData,
        })
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
    /// Force an algorithm by name (as listed by [`CollEp::algorithms`](crate::CollEp::algorithms));
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
