//! Algorithms: schedule generators for every operation, their capabilities and their
//! LogGP cost models — the catalogue.
//!
//! [`Algorithm`] is the plug-in point: a value that says what it supports, what it
//! costs and how one rank executes it (a [`Schedule`]). [`messages`] is the one table
//! of the message algorithms; [`catalog`](crate::catalog()) adds the placement ones
//! (`shm`, `hier`): the instances the autotuner, the planner, `gex-info coll` and `gex-tune` read.
//! The built-in families are values of [`Builtin`]; each family lives in its own
//! module with its plan and its cost together (a `Family` record, registered in
//! `family::family`). A new algorithm is one new module implementing
//! [`Algorithm`] (the helpers of `tree` and `blocks` build schedules, those of
//! `cost` the LogGP terms) plus one line in [`messages`], as [`ScatterAllgather`]
//! shows. A hardware (NIC) collective plugs in as one more [`Algorithm`] registered
//! with [`CollExt::register_algorithm`](crate::CollExt::register_algorithm).

// Messages are lists of ranges; a list of one range is the common case, not a typo.
#![allow(clippy::single_range_in_vec_init)]

mod blocks;
mod bruck;
mod chain;
mod compose;
mod cost;
mod dissemination;
mod family;
mod flat;
mod pairwise;
mod recdbl;
mod rechalv;
mod ring;
mod scan;
mod scatter_allgather;
mod tree;

pub use scatter_allgather::ScatterAllgather;

use crate::loggp::LogGP;
use crate::op::{AddrMode, OpKind, SyncMode, SyncModes, Transport};
use crate::sched::Schedule;
use cost::Cost;
use family::family;
use std::fmt;
use std::sync::Arc;
use tree::{Grid, Tree};

/// What a selection is about: one operation on one team with one size and set of
/// modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Query {
    /// The operation.
    pub op: OpKind,
    /// Team size.
    pub size: u32,
    /// Bytes per block (a block is what one member contributes or receives:
    /// `count × size_of::<T>()`).
    pub bytes: usize,
    /// Address mode.
    pub addr: AddrMode,
    /// Synchronisation modes.
    pub sync: SyncModes,
    /// The reduction operator is commutative (true for non-reducing operations).
    pub commutative: bool,
    /// Local address mode only: every member's team scratch space can hold the
    /// output (`P × bytes`), so symmetric algorithms may move data by signaling put or
    /// rendezvous through it.
    pub scratch: bool,
    /// Every member maps every other member's auxiliary area and the team holds a
    /// shared-memory channel, so the `shm` algorithm can run (see
    /// [`CollExt::shared_memory`](crate::CollExt::shared_memory)).
    pub shm: bool,
    /// The team spans several hosts and has host and leader sub-teams, so the `hier`
    /// algorithm can run (see
    /// [`CollExt::hierarchical`](crate::CollExt::hierarchical)).
    pub hier: bool,
    /// With `hier`: the number of hosts the team spans (0 when unknown or not
    /// hierarchical; cost models then assume half the team size).
    pub hosts: u32,
    /// With `hier`: every host's members form a contiguous team-rank range, so
    /// per-host partial reductions combine in team-rank order and `hier` takes
    /// non-commutative operators too.
    pub host_ranges: bool,
}

impl Query {
    /// The plain query: `op` on a team of `size` with `bytes` per block, local
    /// addressing, default synchronisation, a commutative operator, and none of the
    /// optional resources (no team scratch, no shared-memory channel, not
    /// hierarchical). Set the other fields with struct update syntax:
    ///
    /// ```
    /// use gex_coll::{OpKind, Query};
    /// let q = Query { shm: true, ..Query::plain(OpKind::Broadcast, 8, 64) };
    /// assert!(q.shm && q.commutative && !q.hier);
    /// ```
    pub const fn plain(op: OpKind, size: u32, bytes: usize) -> Query {
        Query {
            op,
            size,
            bytes,
            addr: AddrMode::Local,
            sync: SyncModes::new(SyncMode::My, SyncMode::My),
            commutative: true,
            scratch: false,
            shm: false,
            hier: false,
            hosts: 0,
            host_ranges: false,
        }
    }
}

/// Everything a rank needs to compute its schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlanCtx {
    /// The operation.
    pub op: OpKind,
    /// Team size.
    pub size: u32,
    /// This member's team rank.
    pub rank: u32,
    /// Root (team rank) of rooted operations, else 0.
    pub root: u32,
    /// Bytes per block.
    pub block: usize,
    /// Bytes per element (reductions split blocks only at element boundaries).
    pub elem: usize,
    /// The reduction operator is commutative.
    pub commutative: bool,
}

/// A collective algorithm: capabilities, cost model and per-rank plan.
///
/// Implementations must be pure: `plan` depends only on its argument (every rank
/// computes its own part of one consistent set of schedules), `cost` only on its
/// arguments.
pub trait Algorithm: Send + Sync + fmt::Debug {
    /// Unique name (`binomial`, `knomial4`, `ring`, `binomial+put`, ...).
    fn name(&self) -> &str;
    /// The operations it implements (by default every one, [`OpKind::ALL`]).
    fn ops(&self) -> &[OpKind] {
        &OpKind::ALL
    }
    /// True if it can run `q` (op, team size, modes, commutativity).
    fn supports(&self, q: &Query) -> bool;
    /// Predicted time in µs under LogGP parameters `m`.
    fn cost(&self, q: &Query, m: &LogGP) -> f64;
    /// The schedule of rank `ctx.rank`.
    fn plan(&self, ctx: &PlanCtx) -> Schedule;
    /// How messages move (only [`Transport::Eager`] unless the schedule is
    /// symmetric and the address mode single or the team scratch large enough).
    fn transport(&self) -> Transport {
        Transport::Eager
    }
    /// True for an algorithm the engine runs through shared memory instead of its
    /// schedule (the built-in `shm`); its schedule then only serves the model.
    fn is_shared_memory(&self) -> bool {
        false
    }
    /// True for an algorithm the engine runs as stages on the team's host and leader
    /// sub-teams (the built-in `hier`); its schedule then only serves the model.
    fn is_hierarchical(&self) -> bool {
        false
    }
}

/// The families of built-in algorithms.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Direct: the root (or every member) talks to every other member.
    Flat,
    /// k-nomial tree of radix `radix` (binomial for 2).
    Knomial,
    /// k-ary tree (heap numbering), `radix` children per node.
    Kary,
    /// Chain (pipelined by `seg` bytes for broadcast).
    Chain,
    /// Fork tree (as in GASNet's collective trees): the members laid out as a grid of
    /// `radix` dimensions `d0 × d1 × …` (team rank order, outermost first). The
    /// members split into consecutive blocks of `d1 × d2 × …`; the first member of
    /// each block forms a chain along dimension 0 (root → first of block 1 → first of
    /// block 2 …) and each block is, recursively, a fork tree over the remaining
    /// dimensions; one dimension is a chain. It models a torus: a message moves along
    /// one dimension at a time. Dimensions: automatic for `P` ranks
    /// ([`Builtin::new`]: the inner ones all `m = ⌈P^(1/k)⌉`, the outer one
    /// `⌈P / m^(k−1)⌉`, so the last block may be ragged) or given ([`Builtin::fork`]).
    Fork,
    /// Dissemination with radix `radix` (barrier).
    Dissemination,
    /// Bruck with radix `radix` (gather_all, exchange).
    Bruck,
    /// Ring (gather_all, reduce_scatter; allreduce as ring reduce_scatter + ring
    /// gather_all).
    Ring,
    /// Recursive doubling.
    RecDoubling,
    /// Recursive halving (reduce_scatter; allreduce as halving + doubling).
    RecHalving,
    /// Pairwise exchange (P - 1 rounds).
    Pairwise,
    /// Composition: allreduce = reduce + broadcast (binomial trees).
    ReduceBcast,
    /// Composition: gather_all = gather + broadcast (binomial trees).
    GatherBcast,
    /// Composition: reduce_scatter = reduce + scatter (binomial trees).
    ReduceScatter,
}

/// A built-in algorithm: a family with its parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Builtin {
    kind: Kind,
    radix: u32,
    seg: usize,
    transport: Transport,
    /// Fork trees with given dimensions (outermost first); empty: automatic.
    dims: Vec<u32>,
    name: String,
    ops: Vec<OpKind>,
    sizes: (usize, usize),
}

impl Builtin {
    /// A built-in algorithm. `radix` is used by k-nomial, k-ary, dissemination and
    /// Bruck (at least 2; k-ary at least 1) and is the number of dimensions of a fork
    /// tree (1 to [`MAX_FORK_DIMS`]; automatic dimensions, see [`Kind::Fork`]); `seg`
    /// is the pipelining segment of chain broadcasts (0: no pipelining; other families
    /// ignore it); `transport` other than eager applies to broadcasts and to
    /// flat/ring/recursive-doubling gather_all in single address mode or through team
    /// scratch space.
    pub fn new(kind: Kind, radix: u32, seg: usize, transport: Transport) -> Builtin {
        Self::build(kind, radix, seg, transport, Vec::new())
    }

    /// A fork tree over the given grid dimensions, outermost first (`[4, 4]`: four
    /// blocks of four; named `fork4x4`, plus `+put` / `+rdv` for other transports).
    ///
    /// The inner dimensions `d1 × d2 × …` fix the blocks; the outer one adapts to the
    /// team: `P` members form `⌈P / (d1 × d2 × …)⌉` blocks, the last one ragged when
    /// `P` is not a multiple (and a team smaller than one block uses the leading part
    /// of the grid). Dimensions of 1 add nothing and are dropped.
    ///
    /// ```
    /// use gex_coll::{Builtin, Transport};
    /// let f = Builtin::fork(&[2, 3], Transport::Eager).unwrap();
    /// assert_eq!(gex_coll::Algorithm::name(&f), "fork2x3");
    /// // Six members: blocks {0,1,2} and {3,4,5}; eight: a third, ragged block {6,7}.
    /// assert_eq!(f.fork_dims(6), Some(vec![2, 3]));
    /// assert_eq!(f.fork_dims(8), Some(vec![3, 3]));
    /// assert!(Builtin::fork(&[], Transport::Eager).is_err());
    /// ```
    ///
    /// # Errors
    /// [`CollError::Config`](crate::CollError::Config) if `dims` is empty, longer than
    /// [`MAX_FORK_DIMS`] or has a 0.
    pub fn fork(dims: &[u32], transport: Transport) -> Result<Builtin, crate::CollError> {
        if dims.is_empty() || dims.len() > MAX_FORK_DIMS || dims.contains(&0) {
            return Err(crate::CollError::Config(format!(
                "fork tree dimensions {dims:?}: give 1 to {MAX_FORK_DIMS} dimensions, none 0"
            )));
        }
        Ok(Self::build(
            Kind::Fork,
            dims.len() as u32,
            0,
            transport,
            dims.to_vec(),
        ))
    }

    fn build(kind: Kind, radix: u32, seg: usize, transport: Transport, dims: Vec<u32>) -> Builtin {
        let f = family(kind);
        debug_assert_eq!(f.kind, kind, "the family table answers for its kind");
        let radix = (f.radix)(radix);
        let mut name = (f.name)(radix, seg, &dims);
        if transport != Transport::Eager {
            name = format!("{name}+{}", transport.name());
        }
        // Other transports apply to broadcasts, and to the gather_all of the families
        // that say so.
        let ops: Vec<OpKind> = f
            .ops
            .iter()
            .copied()
            .filter(|&o| {
                transport == Transport::Eager
                    || o == OpKind::Broadcast
                    || (o == OpKind::GatherAll && f.put_gather_all)
            })
            .collect();
        Builtin {
            kind,
            radix,
            seg,
            transport,
            dims,
            name,
            ops,
            sizes: (0, usize::MAX),
        }
    }

    /// This algorithm restricted to blocks of `min..=max` bytes (it declares no
    /// support outside; a forced use there is [`CollError::Unsupported`](crate::CollError::Unsupported)).
    ///
    /// ```
    /// use gex_coll::{Algorithm, Builtin, Kind, OpKind, Query, Transport};
    /// let a = Builtin::new(Kind::Chain, 0, 8192, Transport::Eager).with_sizes(16384, usize::MAX);
    /// let q = |bytes| Query::plain(OpKind::Broadcast, 4, bytes);
    /// assert!(!a.supports(&q(100)));
    /// assert!(a.supports(&q(1 << 20)));
    /// ```
    pub fn with_sizes(mut self, min: usize, max: usize) -> Builtin {
        self.sizes = (min, max);
        self
    }

    /// The family.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// The grid dimensions of a fork tree on `p` members, outermost first (the outer
    /// one as many blocks as `p` needs; dimensions of 1 dropped); `None` for other
    /// families.
    ///
    /// ```
    /// use gex_coll::{Builtin, Kind, Transport};
    /// let f = Builtin::new(Kind::Fork, 2, 0, Transport::Eager);
    /// assert_eq!(f.fork_dims(16), Some(vec![4, 4]));
    /// assert_eq!(f.fork_dims(13), Some(vec![4, 4])); // prime: the last block is {12}
    /// assert_eq!(f.fork_dims(8), Some(vec![3, 3])); // blocks {0,1,2} {3,4,5} {6,7}
    /// let f3 = Builtin::new(Kind::Fork, 3, 0, Transport::Eager);
    /// assert_eq!(f3.fork_dims(8), Some(vec![2, 2, 2]));
    /// ```
    pub fn fork_dims(&self, p: u32) -> Option<Vec<u32>> {
        (self.kind == Kind::Fork).then(|| self.grid(p).dims(p))
    }

    fn grid(&self, p: u32) -> Grid {
        if self.dims.is_empty() {
            Grid::auto(self.radix, p)
        } else {
            Grid::from_inner(&self.dims[1..])
        }
    }

    fn tree(&self, p: u32) -> Tree {
        match self.kind {
            Kind::Flat => Tree::Knomial(p.max(2)),
            Kind::Knomial => Tree::Knomial(self.radix),
            Kind::Kary => Tree::Kary(self.radix),
            Kind::Chain => Tree::Chain,
            Kind::Fork => Tree::Fork(self.grid(p)),
            _ => Tree::Knomial(2),
        }
    }
}

/// The most dimensions a fork tree has ([`Builtin::fork`], [`Builtin::new`] with
/// [`Kind::Fork`]).
pub const MAX_FORK_DIMS: usize = 8;

/// The message algorithms of the catalogue: the one table a new algorithm joins (one
/// line; [`catalog`](crate::catalog()) adds the placement algorithms `shm` and `hier`).
pub fn messages() -> Vec<Arc<dyn Algorithm>> {
    let e = Transport::Eager;
    let mut v: Vec<Builtin> = vec![
        Builtin::new(Kind::Flat, 0, 0, e),
        Builtin::new(Kind::Knomial, 2, 0, e),
        Builtin::new(Kind::Knomial, 4, 0, e),
        Builtin::new(Kind::Knomial, 8, 0, e),
        Builtin::new(Kind::Kary, 2, 0, e),
        Builtin::new(Kind::Kary, 4, 0, e),
        Builtin::new(Kind::Chain, 0, 0, e),
        // Pipelining pays only with at least two segments.
        Builtin::new(Kind::Chain, 0, 8 << 10, e).with_sizes(16 << 10, usize::MAX),
        Builtin::new(Kind::Chain, 0, 64 << 10, e).with_sizes(128 << 10, usize::MAX),
        Builtin::new(Kind::Fork, 2, 0, e),
        Builtin::new(Kind::Fork, 3, 0, e),
        Builtin::new(Kind::Dissemination, 2, 0, e),
        Builtin::new(Kind::Dissemination, 3, 0, e),
        Builtin::new(Kind::Dissemination, 4, 0, e),
        Builtin::new(Kind::Bruck, 2, 0, e),
        Builtin::new(Kind::Bruck, 4, 0, e),
        Builtin::new(Kind::Ring, 0, 0, e),
        Builtin::new(Kind::RecDoubling, 0, 0, e),
        Builtin::new(Kind::RecHalving, 0, 0, e),
        Builtin::new(Kind::Pairwise, 0, 0, e),
        Builtin::new(Kind::ReduceBcast, 0, 0, e),
        Builtin::new(Kind::GatherBcast, 0, 0, e),
        Builtin::new(Kind::ReduceScatter, 0, 0, e),
    ];
    for t in [Transport::Put, Transport::Rendezvous] {
        v.push(Builtin::new(Kind::Flat, 0, 0, t));
        v.push(Builtin::new(Kind::Knomial, 2, 0, t));
        v.push(Builtin::new(Kind::Knomial, 4, 0, t));
        v.push(Builtin::new(Kind::Kary, 2, 0, t));
        v.push(Builtin::new(Kind::Chain, 0, 64 << 10, t));
        v.push(Builtin::new(Kind::Fork, 2, 0, t));
        v.push(Builtin::new(Kind::Ring, 0, 0, t));
        v.push(Builtin::new(Kind::RecDoubling, 0, 0, t));
    }
    let mut all: Vec<Arc<dyn Algorithm>> = v
        .into_iter()
        .filter(|b| !b.ops().is_empty())
        .map(|b| Arc::new(b) as Arc<dyn Algorithm>)
        .collect();
    // The algorithms outside the built-in families, one line each.
    all.push(Arc::new(ScatterAllgather));
    all
}

fn pow2(p: u32) -> bool {
    p.is_power_of_two()
}

fn log_ceil(p: u32, k: u32) -> u32 {
    let (mut n, mut x) = (0, 1u64);
    while x < u64::from(p) {
        x *= u64::from(k.max(2));
        n += 1;
    }
    n
}

impl Algorithm for Builtin {
    fn name(&self) -> &str {
        &self.name
    }

    fn ops(&self) -> &[OpKind] {
        &self.ops
    }

    fn transport(&self) -> Transport {
        self.transport
    }

    fn supports(&self, q: &Query) -> bool {
        if !self.ops.contains(&q.op) || q.bytes < self.sizes.0 || q.bytes > self.sizes.1 {
            return false;
        }
        // Signaling puts and rendezvous need every member's destination in its segment
        // (single mode) and bytes to move. (Without entry synchronisation a put could
        // land before its receiver entered; in-no permits that, in-my adds a ready
        // message: nothing to exclude.)
        if self.transport != Transport::Eager
            && (!(q.addr == AddrMode::Single || q.scratch) || q.bytes == 0)
        {
            return false;
        }
        (family(self.kind).supports)(self, q)
    }

    fn cost(&self, q: &Query, m: &LogGP) -> f64 {
        let p = q.size.max(1);
        if p == 1 {
            return 0.0;
        }
        let c = Cost::new(m, p, q.bytes);
        // Hops of the deepest path (fork trees are deeper than log2 P).
        let hops = match self.tree(p) {
            Tree::Fork(g) => f64::from(g.depth(p)),
            _ => c.lg2,
        };
        let extra = c.transport_extra(self.transport, hops, q.sync.input);
        ((family(self.kind).cost)(self, q, &c) + extra).max(0.0)
    }

    fn plan(&self, ctx: &PlanCtx) -> Schedule {
        (family(self.kind).plan)(self, ctx)
    }
}

/// The plan of an operation a family does not declare (its [`Builtin::ops`] never
/// offer it; a caller that plans it anyway gets the generic composition): trees for
/// the rooted operations, Bruck for exchange, flat scans.
fn fallback(a: &Builtin, c: &PlanCtx) -> Schedule {
    use OpKind::*;
    match c.op {
        Barrier | Broadcast | Scatter | Gather | Reduce => tree::plan(a, c),
        GatherAll => compose::gather_bcast(c),
        Exchange => bruck::exchange(a.radix, c),
        Allreduce => compose::reduce_bcast(c),
        ReduceScatter => compose::reduce_scatter(c),
        Scan | Exscan => scan::flat(c),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique() {
        let c = messages();
        let mut names: Vec<&str> = c.iter().map(|a| a.name()).collect();
        names.sort_unstable();
        let n = names.len();
        names.dedup();
        assert_eq!(n, names.len());
    }

    /// Every family registered answers for its own kind (the table has one entry per
    /// kind, in no particular order).
    #[test]
    fn family_table_is_keyed_by_kind() {
        for k in family::KINDS {
            assert_eq!(family(k).kind, k);
        }
    }
}
