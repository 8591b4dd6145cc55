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

/// Builder methods every data descriptor has; with `by_kind`, the root and the
/// reduction operator of the descriptors whose operation is chosen at run time.
macro_rules! options {
    (by_kind) => {
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
    };
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

/// Implements [`Collective`] in mode `$mode` for the descriptor type `$ty` (output
/// `$out`): `run` is `$run` of the descriptor, the endpoint and the team.
macro_rules! collective {
    ([$($g:tt)*] $mode:ty, $ty:ty => $out:ty, |$d:ident, $ep:ident, $team:ident| $run:expr) => {
        impl<$($g)*> Collective<$mode> for $ty {
            type Output = $out;
            fn run<C: Conduit>(
                self,
                $ep: &mut Endpoint<C>,
                $team: &Team,
                _mode: $mode,
            ) -> Result<<$mode as Mode>::Out<$out, CollError>, CollError> {
                let $d = self;
                $run
            }
        }
    };
}

/// Declares the data descriptors and their [`Collective`] implementations.
macro_rules! descriptors {
    ($( $(#[$m:meta])* $name:ident; )*) => {$(
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

        collective!([T: Elem, M: Mode] M, $name<'_, T, Owned> => Vec<T>,
            |d, ep, team| run_owned::<C, T, M>(ep, team, d.0));

        collective!([T: Elem] Blocking, $name<'_, T, Borrowed> => (),
            |d, ep, team| run_borrowed::<C, T>(ep, team, d.0));
    )*};
}

descriptors! {
    /// Broadcast of the root's block to every member.
    Broadcast;
    /// Scatter: block `i` of the root's `P` blocks to member `i`.
    Scatter;
    /// Gather: every member's block to the root, in team-rank order.
    Gather;
    /// Gather_all (all-gather): every member's block to every member, in team-rank
    /// order.
    GatherAll;
    /// Exchange (all-to-all): block `j` of member `i`'s input becomes block `i` of
    /// member `j`'s output.
    Exchange;
    /// Reduction of every member's block to the root.
    Reduce;
    /// Reduction of every member's block to every member.
    Allreduce;
    /// Reduce_scatter: block `i` of the reduction of every member's `P` blocks to
    /// member `i`.
    ReduceScatter;
    /// Inclusive scan: member `i` gets the reduction of members `0..=i`'s blocks.
    Scan;
    /// Exclusive scan: member `i > 0` gets the reduction of members `0..i`'s blocks
    /// (member 0 gets nothing).
    Exscan;
    /// Any operation, chosen at run time by its [`OpKind`] (for drivers that iterate
    /// over operations: benchmarks, tuners, tests).
    ByKind;
}

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
        Self(
            owned(OpKind::Broadcast, root.into(), data, None),
            PhantomData,
        )
    }
}
impl<'a, T: Elem> Broadcast<'a, T, Borrowed> {
    /// In place: non-roots' `buf` is overwritten with the root's.
    pub fn in_place(root: impl Into<Root>, buf: &'a mut [T]) -> Self {
        Self(
            Spec::new(OpKind::Broadcast, root.into(), SpecData::InPlace(buf), None),
            PhantomData,
        )
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
        Self(
            slices(OpKind::Scatter, root.into(), src, dst, None),
            PhantomData,
        )
    }
}

/// `Some` reduction operator `op` of a constructor that takes one, else `None`.
macro_rules! reduce_arg {
    () => {
        None
    };
    ($op:ident) => {
        Some($op.into())
    };
}

/// The root of a constructor that takes one (`root`), else team rank 0.
macro_rules! root_arg {
    () => {
        Root::Rank(0)
    };
    ($root:ident) => {
        $root.into()
    };
}

/// The constructors `new` (owned data) and `slices` (borrowed) of the data
/// descriptors, each with its docs: `[root]` for the rooted ones, `[op]` for those
/// that take a reduction operator.
macro_rules! data_ctors {
    ($( $name:ident [$($root:ident)?] [$($op:ident)?] $new:literal, $slices:literal; )*) => {$(
        impl<'a, T: Elem> $name<'a, T, Owned> {
            #[doc = $new]
            pub fn new(
                $($root: impl Into<Root>,)?
                data: Vec<T>
                $(, $op: impl Into<ReduceArg<'a, T>>)?
            ) -> Self {
                let s = owned(OpKind::$name, root_arg!($($root)?), data, reduce_arg!($($op)?));
                $name(s, PhantomData)
            }
        }
        impl<'a, T: Elem> $name<'a, T, Borrowed> {
            #[doc = $slices]
            pub fn slices(
                $($root: impl Into<Root>,)?
                src: &'a [T],
                dst: &'a mut [T]
                $(, $op: impl Into<ReduceArg<'a, T>>)?
            ) -> Self {
                let s = slices(OpKind::$name, root_arg!($($root)?), src, dst, reduce_arg!($($op)?));
                $name(s, PhantomData)
            }
        }
    )*};
}

data_ctors! {
    Gather [root] [] "Every member's `data` (same length everywhere) to the root, which gets \
        `P` blocks in team-rank order (others get none).",
        "At the root `dst` (`P × src.len()`) receives every block; elsewhere `dst` is \
        untouched (may be empty).";
    Reduce [root] [op] "The reduction of every member's `data` to the root (the others get an \
        empty vector).",
        "The root's `dst` gets the reduction; elsewhere untouched.";
    GatherAll [] [] "Every member gets every member's `data` in team-rank order.",
        "`dst` (`P × src.len()`) receives every member's `src`.";
    Exchange [] [] "`P` blocks of `data.len() / P` elements.",
        "`src` and `dst` have `P` blocks.";
    Allreduce [] [op] "The reduction of every member's `data`.",
        "`dst` (the length of `src`) gets the reduction.";
    ReduceScatter [] [op]
        "`P` blocks of `data.len() / P` elements: member `i` gets block `i` of the reduction.",
        "`src` has `P × dst.len()` elements; `dst` gets this member's block of the reduction.";
    Scan [] [op] "Inclusive scan of `data` in team-rank order.",
        "`dst` (the length of `src`) gets the inclusive scan.";
    Exscan [] [op] "Exclusive scan of `data`; team rank 0 gets an empty vector.",
        "`dst` gets the exclusive scan; team rank 0's `dst` is untouched.";
}

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
    options!(by_kind);
    /// Elements per block (scatter with owned data).
    pub fn count(mut self, count: usize) -> Self {
        self.0.count = Some(count);
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

collective!([M: Mode] M, Barrier<'_> => (),
    |d, ep, team| run_barrier::<C, M>(ep, team, d.entry, &d.opts));

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
    options!(by_kind);
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

collective!([T: Elem, M: Mode] M, InSegments<'_, T> => (),
    |d, ep, team| run_single::<C, T, M>(ep, team, d.0));
