//! Descriptors: what [`CollExt::collective`](crate::CollExt::collective) runs.
//!
//! A descriptor is a value naming one collective and its data: built by a
//! constructor, refined with builder methods (`.sync(..)`, `.algorithm(..)`,
//! `.opts(..)`, and `.root(..)`/`.count(..)`/`.reduce(..)` where they apply), then
//! handed to the one generic entry with a mode:
//!
//! ```text
//! ep.collective(&team, Allreduce::new(data, BuiltinOp::Sum), Blocking)  -> Vec<T>
//! ep.collective(&team, Allreduce::new(data, BuiltinOp::Sum), Nb)        -> Event<Vec<T>, CollError>
//! ep.collective(&team, Allreduce::new(data, BuiltinOp::Sum), Nbi)       -> ()
//! ep.collective(&team, Allreduce::slices(&src, &mut dst, BuiltinOp::Sum), Blocking) -> ()
//! ```
//!
//! | descriptor | owned (any mode; output `Vec<T>`) | borrowed (blocking; output `()`) |
//! |---|---|---|
//! | [`Barrier`] | `new()`, `named(id)`, `with(id, flags)` (output `()`) | — |
//! | [`Broadcast`] | `new(root, data)` (every member passes a buffer of the length; non-roots' contents are ignored) | `in_place(root, &mut buf)` |
//! | [`Scatter`] | `new(root, data, count)` (`P × count` at the root) | `slices(root, &src, &mut dst)` |
//! | [`Gather`] | `new(root, data)` (the root gets `P` blocks, others nothing) | `slices(root, &src, &mut dst)` |
//! | [`GatherAll`] | `new(data)` | `slices(&src, &mut dst)` |
//! | [`Exchange`] | `new(data)` (`P` blocks) | `slices(&src, &mut dst)` |
//! | [`Reduce`] | `new(root, data, op)` | `slices(root, &src, &mut dst, op)` |
//! | [`Allreduce`] | `new(data, op)` | `slices(&src, &mut dst, op)`, `in_place(&mut buf, op)` |
//! | [`ReduceScatter`] | `new(data, op)` (`P` blocks) | `slices(&src, &mut dst, op)` |
//! | [`Scan`], [`Exscan`] | `new(data, op)` | `slices(&src, &mut dst, op)` |
//! | [`ByKind`] | `new(kind, data)` + `.root`, `.count`, `.reduce` (any operation, chosen at run time) | `slices(kind, &src, &mut dst)` |
//! | [`InSegments`] | `new(kind, count, offsets)` + `.root`, `.reduce`: single address mode (output `()`) | — |
//!
//! `root` is a team rank or where the root's data lives ([`Root`]); `op` a
//! [`ReduceArg`]: a [`ReduceOp`](crate::ReduceOp) moved in or borrowed (`&op`: a loop
//! of calls with one operator touches no reference count), or a
//! [`BuiltinOp`](crate::BuiltinOp) ([`BitOp`](crate::BitOp) on integers).
//!
//! Why descriptors: one entry point instead of a method per (operation × blocking ×
//! options) (33 in the API this replaces), the mode chosen by a value as for every
//! other operation of gex, and the borrowed forms limited to blocking mode by their
//! type (`Collective<Blocking>` only), so a nonblocking call can never outlive the
//! slices it writes:
//!
//! ```compile_fail
//! use gex_coll::{Allreduce, BuiltinOp, CollExt};
//! fn f(ep: &mut gex_core::Endpoint<gex_core::loopback::Loopback>, team: &gex_core::Team) {
//!     let mut buf = [1u64; 4];
//!     // A borrowed descriptor in nonblocking mode does not compile.
//!     let ev = ep.collective(team, Allreduce::in_place(&mut buf, BuiltinOp::Sum), gex_core::Nb);
//! }
//! ```

use crate::barrier::{BarrierFlags, Entry};
use crate::calls::{run_barrier, run_borrowed, run_owned, run_single};
use crate::error::CollError;
use crate::op::{Elem, OpKind, Opts, ReduceArg, SyncMode, SyncModes};
use crate::root::Root;
use crate::single::Single;
use crate::spec::{Spec, SpecData};
use gex_core::event::Mode;
use gex_core::spi::Conduit;
use gex_core::{Blocking, Endpoint, Team};
use std::marker::PhantomData;

/// A collective operation that [`CollExt::collective`](crate::CollExt::collective)
/// runs in mode `M`. Sealed: implemented by the descriptors of this module.
pub trait Collective<M: Mode>: sealed::Sealed {
    /// What the operation gives back.
    type Output: Send + 'static;
    #[doc(hidden)]
    fn run<C: Conduit>(
        self,
        ep: &mut Endpoint<C>,
        team: &Team,
        mode: M,
    ) -> Result<M::Out<Self::Output, CollError>, CollError>;
}

mod sealed {
    pub trait Sealed {}
}

/// Marks a descriptor that owns its data (any mode).
#[derive(Clone, Copy, Debug)]
pub struct Owned;
/// Marks a descriptor over borrowed slices (blocking mode only).
#[derive(Clone, Copy, Debug)]
pub struct Borrowed;

/// Builder methods every data descriptor has.
macro_rules! options {
    () => {
        /// Entry and exit synchronisation (default: in-my × out-my).
        pub fn sync(mut self, input: SyncMode, output: SyncMode) -> Self {
            self.0.opts.sync = SyncModes::new(input, output);
            self
        }
        /// Forces an algorithm by name (as listed by
        /// [`CollExt::algorithms`](crate::CollExt::algorithms)).
        pub fn algorithm(mut self, name: &'a str) -> Self {
            self.0.opts.algorithm = Some(name);
            self
        }
        /// Sets every option at once.
        pub fn opts(mut self, opts: Opts<'a>) -> Self {
            self.0.opts = opts;
            self
        }
    };
}

/// Declares a data descriptor and its [`Collective`] implementations.
macro_rules! descriptor {
    ($(#[$m:meta])* $name:ident) => {
        $(#[$m])*
        pub struct $name<'a, T: Elem, F = Owned>(Spec<'a, T>, PhantomData<F>);

        impl<'a, T: Elem, F> $name<'a, T, F> {
            options!();
        }

        impl<T: Elem, F> std::fmt::Debug for $name<'_, T, F> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($name))
                    .field("root", &self.0.root)
                    .field("opts", &self.0.opts)
                    .finish_non_exhaustive()
            }
        }

        impl<T: Elem, F> sealed::Sealed for $name<'_, T, F> {}

        impl<T: Elem, M: Mode> Collective<M> for $name<'_, T, Owned> {
            type Output = Vec<T>;
            fn run<C: Conduit>(
                self,
                ep: &mut Endpoint<C>,
                team: &Team,
                _mode: M,
            ) -> Result<M::Out<Vec<T>, CollError>, CollError> {
                run_owned::<C, T, M>(ep, team, self.0)
            }
        }

        impl<T: Elem> Collective<Blocking> for $name<'_, T, Borrowed> {
            type Output = ();
            fn run<C: Conduit>(
                self,
                ep: &mut Endpoint<C>,
                team: &Team,
                _mode: Blocking,
            ) -> Result<(), CollError> {
                run_borrowed::<C, T>(ep, team, self.0)
            }
        }
    };
}

descriptor!(
    /// Broadcast of the root's block to every member.
    Broadcast
);
descriptor!(
    /// Scatter: block `i` of the root's `P` blocks to member `i`.
    Scatter
);
descriptor!(
    /// Gather: every member's block to the root, in team-rank order.
    Gather
);
descriptor!(
    /// Gather_all (all-gather): every member's block to every member, in team-rank
    /// order.
    GatherAll
);
descriptor!(
    /// Exchange (all-to-all): block `j` of member `i`'s input becomes block `i` of
    /// member `j`'s output.
    Exchange
);
descriptor!(
    /// Reduction of every member's block to the root.
    Reduce
);
descriptor!(
    /// Reduction of every member's block to every member.
    Allreduce
);
descriptor!(
    /// Reduce_scatter: block `i` of the reduction of every member's `P` blocks to
    /// member `i`.
    ReduceScatter
);
descriptor!(
    /// Inclusive scan: member `i` gets the reduction of members `0..=i`'s blocks.
    Scan
);
descriptor!(
    /// Exclusive scan: member `i > 0` gets the reduction of members `0..i`'s blocks
    /// (member 0 gets nothing).
    Exscan
);
descriptor!(
    /// Any operation, chosen at run time by its [`OpKind`] (for drivers that iterate
    /// over operations: benchmarks, tuners, tests).
    ByKind
);

fn owned<'a, T: Elem>(
    kind: OpKind,
    root: Root,
    data: Vec<T>,
    op: Option<ReduceArg<'a, T>>,
) -> Spec<'a, T> {
    Spec::new(kind, root, SpecData::Owned(data), op)
}

fn slices<'a, T: Elem>(
    kind: OpKind,
    root: Root,
    src: &'a [T],
    dst: &'a mut [T],
    op: Option<ReduceArg<'a, T>>,
) -> Spec<'a, T> {
    Spec::new(kind, root, SpecData::Slices(src, dst), op)
}

impl<'a, T: Elem> Broadcast<'a, T, Owned> {
    /// The root's `data` to every member (every member passes a buffer of the same
    /// length; non-roots' contents are ignored). Output: the root's data.
    pub fn new(root: impl Into<Root>, data: Vec<T>) -> Self {
        Broadcast(
            owned(OpKind::Broadcast, root.into(), data, None),
            PhantomData,
        )
    }
}
impl<'a, T: Elem> Broadcast<'a, T, Borrowed> {
    /// In place: non-roots' `buf` is overwritten with the root's.
    pub fn in_place(root: impl Into<Root>, buf: &'a mut [T]) -> Self {
        let s = Spec::new(OpKind::Broadcast, root.into(), SpecData::InPlace(buf), None);
        Broadcast(s, PhantomData)
    }
}

impl<'a, T: Elem> Scatter<'a, T, Owned> {
    /// `count` elements to every member from the root's `data` (`P × count` at the
    /// root, ignored elsewhere).
    pub fn new(root: impl Into<Root>, data: Vec<T>, count: usize) -> Self {
        let mut s = owned(OpKind::Scatter, root.into(), data, None);
        s.count = Some(count);
        Scatter(s, PhantomData)
    }
}
impl<'a, T: Elem> Scatter<'a, T, Borrowed> {
    /// `dst` receives this member's block of the root's `src` (`P × dst.len()`).
    pub fn slices(root: impl Into<Root>, src: &'a [T], dst: &'a mut [T]) -> Self {
        Scatter(
            slices(OpKind::Scatter, root.into(), src, dst, None),
            PhantomData,
        )
    }
}

impl<'a, T: Elem> Gather<'a, T, Owned> {
    /// Every member's `data` (same length everywhere) to the root, which gets `P`
    /// blocks in team-rank order (others get none).
    pub fn new(root: impl Into<Root>, data: Vec<T>) -> Self {
        Gather(owned(OpKind::Gather, root.into(), data, None), PhantomData)
    }
}
impl<'a, T: Elem> Gather<'a, T, Borrowed> {
    /// At the root `dst` (`P × src.len()`) receives every block; elsewhere `dst` is
    /// untouched (may be empty).
    pub fn slices(root: impl Into<Root>, src: &'a [T], dst: &'a mut [T]) -> Self {
        Gather(
            slices(OpKind::Gather, root.into(), src, dst, None),
            PhantomData,
        )
    }
}

impl<'a, T: Elem> GatherAll<'a, T, Owned> {
    /// Every member gets every member's `data` in team-rank order.
    pub fn new(data: Vec<T>) -> Self {
        GatherAll(
            owned(OpKind::GatherAll, Root::Rank(0), data, None),
            PhantomData,
        )
    }
}
impl<'a, T: Elem> GatherAll<'a, T, Borrowed> {
    /// `dst` (`P × src.len()`) receives every member's `src`.
    pub fn slices(src: &'a [T], dst: &'a mut [T]) -> Self {
        GatherAll(
            slices(OpKind::GatherAll, Root::Rank(0), src, dst, None),
            PhantomData,
        )
    }
}

impl<'a, T: Elem> Exchange<'a, T, Owned> {
    /// `P` blocks of `data.len() / P` elements.
    pub fn new(data: Vec<T>) -> Self {
        Exchange(
            owned(OpKind::Exchange, Root::Rank(0), data, None),
            PhantomData,
        )
    }
}
impl<'a, T: Elem> Exchange<'a, T, Borrowed> {
    /// `src` and `dst` have `P` blocks.
    pub fn slices(src: &'a [T], dst: &'a mut [T]) -> Self {
        Exchange(
            slices(OpKind::Exchange, Root::Rank(0), src, dst, None),
            PhantomData,
        )
    }
}

impl<'a, T: Elem> Reduce<'a, T, Owned> {
    /// The reduction of every member's `data` to the root (the others get an empty
    /// vector).
    pub fn new(root: impl Into<Root>, data: Vec<T>, op: impl Into<ReduceArg<'a, T>>) -> Self {
        Reduce(
            owned(OpKind::Reduce, root.into(), data, Some(op.into())),
            PhantomData,
        )
    }
}
impl<'a, T: Elem> Reduce<'a, T, Borrowed> {
    /// The root's `dst` gets the reduction; elsewhere untouched.
    pub fn slices(
        root: impl Into<Root>,
        src: &'a [T],
        dst: &'a mut [T],
        op: impl Into<ReduceArg<'a, T>>,
    ) -> Self {
        let s = slices(OpKind::Reduce, root.into(), src, dst, Some(op.into()));
        Reduce(s, PhantomData)
    }
}

/// Constructors of the symmetric reductions (allreduce, reduce_scatter, scan, exscan).
macro_rules! symmetric_reduction {
    ($name:ident, $kind:expr, $new:literal, $slices:literal) => {
        impl<'a, T: Elem> $name<'a, T, Owned> {
            #[doc = $new]
            pub fn new(data: Vec<T>, op: impl Into<ReduceArg<'a, T>>) -> Self {
                $name(
                    owned($kind, Root::Rank(0), data, Some(op.into())),
                    PhantomData,
                )
            }
        }
        impl<'a, T: Elem> $name<'a, T, Borrowed> {
            #[doc = $slices]
            pub fn slices(src: &'a [T], dst: &'a mut [T], op: impl Into<ReduceArg<'a, T>>) -> Self {
                $name(
                    slices($kind, Root::Rank(0), src, dst, Some(op.into())),
                    PhantomData,
                )
            }
        }
    };
}

symmetric_reduction!(
    Allreduce,
    OpKind::Allreduce,
    "The reduction of every member's `data`.",
    "`dst` (the length of `src`) gets the reduction."
);
symmetric_reduction!(
    ReduceScatter,
    OpKind::ReduceScatter,
    "`P` blocks of `data.len() / P` elements: member `i` gets block `i` of the reduction.",
    "`src` has `P × dst.len()` elements; `dst` gets this member's block of the reduction."
);
symmetric_reduction!(
    Scan,
    OpKind::Scan,
    "Inclusive scan of `data` in team-rank order.",
    "`dst` (the length of `src`) gets the inclusive scan."
);
symmetric_reduction!(
    Exscan,
    OpKind::Exscan,
    "Exclusive scan of `data`; team rank 0 gets an empty vector.",
    "`dst` gets the exclusive scan; team rank 0's `dst` is untouched."
);

impl<'a, T: Elem> Allreduce<'a, T, Borrowed> {
    /// In place: `buf` is replaced by the reduction of every member's `buf`.
    pub fn in_place(buf: &'a mut [T], op: impl Into<ReduceArg<'a, T>>) -> Self {
        let s = Spec::new(
            OpKind::Allreduce,
            Root::Rank(0),
            SpecData::InPlace(buf),
            Some(op.into()),
        );
        Allreduce(s, PhantomData)
    }
}

impl<'a, T: Elem> ByKind<'a, T, Owned> {
    /// Operation `kind` over this member's input `data` (its blocks, as
    /// [`OpKind::shape`] says; members without input pass a buffer all the same).
    /// Output: this member's output blocks. Set the root, the count of a scatter and
    /// the operator of a reduction with the builder methods.
    pub fn new(kind: OpKind, data: Vec<T>) -> Self {
        ByKind(owned(kind, Root::Rank(0), data, None), PhantomData)
    }
}
impl<'a, T: Elem> ByKind<'a, T, Borrowed> {
    /// Operation `kind` over slices: `src` this member's input, `dst` its output (as
    /// the operation's borrowed descriptor takes them).
    pub fn slices(kind: OpKind, src: &'a [T], dst: &'a mut [T]) -> Self {
        ByKind(slices(kind, Root::Rank(0), src, dst, None), PhantomData)
    }
}
impl<'a, T: Elem, F> ByKind<'a, T, F> {
    /// The root (rooted operations).
    pub fn root(mut self, root: impl Into<Root>) -> Self {
        self.0.root = root.into();
        self
    }
    /// Elements per block (scatter with owned data).
    pub fn count(mut self, count: usize) -> Self {
        self.0.count = Some(count);
        self
    }
    /// The reduction operator (reducing operations).
    pub fn reduce(mut self, op: impl Into<ReduceArg<'a, T>>) -> Self {
        self.0.reduce = Some(op.into());
        self
    }
}

/// A barrier: anonymous, or named (a named entry must match every other member's
/// named entry; an anonymous one matches anything). Output `()`; a mismatch is
/// [`CollError::BarrierMismatch`] on every member, in every mode.
#[derive(Clone, Copy, Debug, Default)]
pub struct Barrier<'a> {
    entry: Entry,
    opts: Opts<'a>,
}

impl<'a> Barrier<'a> {
    /// An anonymous barrier.
    pub fn new() -> Self {
        Barrier::default()
    }
    /// A barrier named `id`.
    pub fn named(id: u64) -> Self {
        Barrier::with(id, BarrierFlags::empty())
    }
    /// A barrier entered with `id` and `flags` (as in the split-phase calls).
    pub fn with(id: u64, flags: BarrierFlags) -> Self {
        Barrier {
            entry: Entry::new(id, flags),
            opts: Opts::default(),
        }
    }
    /// Forces an algorithm by name.
    pub fn algorithm(mut self, name: &'a str) -> Self {
        self.opts.algorithm = Some(name);
        self
    }
    /// Sets every option at once (a barrier's only option is its algorithm).
    pub fn opts(mut self, opts: Opts<'a>) -> Self {
        self.opts = opts;
        self
    }
}

impl sealed::Sealed for Barrier<'_> {}

impl<M: Mode> Collective<M> for Barrier<'_> {
    type Output = ();
    fn run<C: Conduit>(
        self,
        ep: &mut Endpoint<C>,
        team: &Team,
        _mode: M,
    ) -> Result<M::Out<(), CollError>, CollError> {
        run_barrier::<C, M>(ep, team, self.entry, &self.opts)
    }
}

/// A collective in single address mode: inputs and outputs live in the members'
/// segments at the offsets of a [`Single`], `count` elements of `T` per block. Output
/// `()`. Broadcasts and gather_alls can then move data by signaling put or rendezvous
/// (algorithms `…+put`, `…+rdv`).
///
/// A root given by data ([`Root::Data`], any global pointer) is the member owning the
/// pointer's segment, and the pointer's offset is the root's buffer: it replaces the
/// root's entry of `offsets.src` (broadcast, scatter; with `src: None` the other
/// members keep reading in place) or of `offsets.dst` (gather, reduce).
///
/// ```
/// use gex_coll::{Coll, CollExt, InSegments, OpKind, Single, SyncMode};
/// use gex_core::{Blocking, ClientBuilder};
/// use gex_testkit::sim::{run_sim, SimConfig};
///
/// let builder = || ClientBuilder::new().layer::<gex_rma::Rma>().layer::<Coll>().segment_size(1 << 16);
/// let ok = run_sim(2, SimConfig::default(), builder, |client| {
///     let mut ep = client.endpoint(0).unwrap();
///     let w = ep.world();
///     // The root's source is at offset 0 of its segment; destinations at 1024.
///     if w.rank() == 0 {
///         ep.segment().write(0, &[42u8; 64]).unwrap();
///     }
///     ep.barrier(&w).unwrap();
///     // Signaling put straight into the destinations, after each receiver entered.
///     let bc = InSegments::<u8>::new(OpKind::Broadcast, 64, Single::uniform(2, 0, 1024))
///         .sync(SyncMode::My, SyncMode::My)
///         .algorithm("flat+put");
///     ep.collective(&w, bc, Blocking).unwrap();
///     let mut got = [0u8; 64];
///     ep.segment().read(1024, &mut got).unwrap();
///     ep.barrier(&w).unwrap();
///     got == [42u8; 64]
/// });
/// assert_eq!(ok, vec![true, true]);
/// ```
pub struct InSegments<'a, T: Elem>(Spec<'a, T>);

impl<'a, T: Elem> InSegments<'a, T> {
    /// Operation `kind` over `count` elements per block at `offsets`.
    pub fn new(kind: OpKind, count: usize, offsets: Single) -> Self {
        let mut s = Spec::new(kind, Root::Rank(0), SpecData::Segments(offsets), None);
        s.count = Some(count);
        InSegments(s)
    }
    /// The root (rooted operations).
    pub fn root(mut self, root: impl Into<Root>) -> Self {
        self.0.root = root.into();
        self
    }
    /// The reduction operator (reducing operations).
    pub fn reduce(mut self, op: impl Into<ReduceArg<'a, T>>) -> Self {
        self.0.reduce = Some(op.into());
        self
    }
    options!();
}

impl<T: Elem> std::fmt::Debug for InSegments<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InSegments")
            .field("kind", &self.0.kind)
            .field("root", &self.0.root)
            .finish_non_exhaustive()
    }
}

impl<T: Elem> sealed::Sealed for InSegments<'_, T> {}

impl<T: Elem, M: Mode> Collective<M> for InSegments<'_, T> {
    type Output = ();
    fn run<C: Conduit>(
        self,
        ep: &mut Endpoint<C>,
        team: &Team,
        _mode: M,
    ) -> Result<M::Out<(), CollError>, CollError> {
        run_single::<C, T, M>(ep, team, self.0)
    }
}
