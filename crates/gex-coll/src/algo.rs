//! Algorithms: schedule generators for every operation, their capabilities and their
//! LogGP cost models.
//!
//! [`Algorithm`] is the plug-in point: a value that says what it supports, what it
//! costs and how one rank executes it (a [`Schedule`]). The built-in algorithms are
//! values of [`Builtin`]; [`catalog`] lists the instances the autotuner considers.
//! A hardware (NIC) collective plugs in as one more [`Algorithm`] registered with
//! [`CollExt::register_algorithm`](crate::CollExt::register_algorithm).

// Messages are lists of ranges; a list of one range is the common case, not a typo.
#![allow(clippy::single_range_in_vec_init)]

use crate::op::{AddrMode, OpKind, SyncMode, SyncModes, Transport};
use crate::sched::{Action, Local, RecvStep, Schedule, SendStep};
use crate::tune::LogGP;
use std::fmt;
use std::ops::Range;
use std::sync::Arc;

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
    /// The operations it implements.
    fn ops(&self) -> &[OpKind];
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
        use OpKind::*;
        let radix = match kind {
            Kind::Knomial | Kind::Dissemination | Kind::Bruck => radix.max(2),
            Kind::Kary => radix.max(1),
            Kind::Fork => radix.clamp(1, MAX_FORK_DIMS as u32),
            _ => radix,
        };
        let mut name = match kind {
            Kind::Flat => "flat".to_string(),
            Kind::Knomial if radix == 2 => "binomial".to_string(),
            Kind::Knomial => format!("knomial{radix}"),
            Kind::Kary => format!("kary{radix}"),
            Kind::Chain if seg == 0 => "chain".to_string(),
            Kind::Chain => format!("chain{}k", seg.div_ceil(1024)),
            Kind::Fork if dims.is_empty() => format!("fork{radix}d"),
            Kind::Fork => {
                let d: Vec<String> = dims.iter().map(u32::to_string).collect();
                format!("fork{}", d.join("x"))
            }
            Kind::Dissemination => format!("dissem{radix}"),
            Kind::Bruck => format!("bruck{radix}"),
            Kind::Ring => "ring".to_string(),
            Kind::RecDoubling => "recdbl".to_string(),
            Kind::RecHalving => "rechalv".to_string(),
            Kind::Pairwise => "pairwise".to_string(),
            Kind::ReduceBcast => "reduce+bcast".to_string(),
            Kind::GatherBcast => "gather+bcast".to_string(),
            Kind::ReduceScatter => "reduce+scatter".to_string(),
        };
        if transport != Transport::Eager {
            name = format!("{name}+{}", transport.name());
        }
        let ops: Vec<OpKind> = match kind {
            Kind::Flat => OpKind::ALL.to_vec(),
            Kind::Knomial | Kind::Fork => vec![Barrier, Broadcast, Scatter, Gather, Reduce],
            Kind::Kary => vec![Broadcast, Reduce],
            Kind::Chain => vec![Broadcast, Scatter, Gather, Reduce, Scan, Exscan],
            Kind::Dissemination => vec![Barrier],
            Kind::Bruck => vec![GatherAll, Exchange],
            Kind::Ring => vec![GatherAll, ReduceScatter, Allreduce],
            Kind::RecDoubling => vec![Barrier, GatherAll, Allreduce, Scan, Exscan],
            Kind::RecHalving => vec![ReduceScatter, Allreduce],
            Kind::Pairwise => vec![Exchange],
            Kind::ReduceBcast => vec![Allreduce],
            Kind::GatherBcast => vec![GatherAll],
            Kind::ReduceScatter => vec![ReduceScatter],
        };
        let ops = if transport == Transport::Eager {
            ops
        } else {
            ops.into_iter()
                .filter(|o| {
                    *o == Broadcast
                        || (*o == GatherAll
                            && matches!(kind, Kind::Flat | Kind::Ring | Kind::RecDoubling))
                })
                .collect()
        };
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
    /// use gex_coll::{AddrMode, Algorithm, Builtin, Kind, OpKind, Query, SyncModes, Transport};
    /// let a = Builtin::new(Kind::Chain, 0, 8192, Transport::Eager).with_sizes(16384, usize::MAX);
    /// let q = |bytes| Query { op: OpKind::Broadcast, size: 4, bytes, addr: AddrMode::Local,
    ///                         sync: SyncModes::default(), commutative: true, scratch: false,
    ///                         shm: false, hier: false, hosts: 0, host_ranges: false };
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

/// The grid of a fork tree: the block size (stride) of every level, outermost first,
/// the innermost 1. Level `i` of member `v` has digit `v / s0` (`i = 0`) or
/// `(v % s(i−1)) / s(i)`; the outer dimension is unbounded (as many blocks as the team
/// needs), so any team size fits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Grid {
    stride: [u64; MAX_FORK_DIMS],
    levels: usize,
}

impl Grid {
    /// From the inner dimensions (all but the outer one); dimensions below 2 dropped.
    fn from_inner(inner: &[u32]) -> Grid {
        let (mut d, mut n) = ([0u64; MAX_FORK_DIMS], 0);
        for &x in inner.iter().filter(|&&x| x >= 2) {
            if n + 1 < MAX_FORK_DIMS {
                d[n] = u64::from(x);
                n += 1;
            }
        }
        // stride[n] = 1; stride[i] = stride[i + 1] × d(i + 1) (saturating: a stride
        // beyond the team only means that level is never reached).
        let mut stride = [1u64; MAX_FORK_DIMS];
        for i in (0..n).rev() {
            stride[i] = stride[i + 1].saturating_mul(d[i]);
        }
        Grid {
            stride,
            levels: n + 1,
        }
    }

    /// `k` dimensions for `p` members: inner dimensions all `m`, the smallest with
    /// `m^k ≥ p`, so the depth `≈ k(m − 1)` is near its minimum for `k` dimensions.
    fn auto(k: u32, p: u32) -> Grid {
        let k = k.clamp(1, MAX_FORK_DIMS as u32);
        if k == 1 {
            return Grid::from_inner(&[]);
        }
        // The floating-point root, corrected to the exact smallest m.
        let mut m = (f64::from(p).powf(1.0 / f64::from(k)).ceil() as u64).max(1);
        while m > 1 && (m - 1).saturating_pow(k) >= u64::from(p) {
            m -= 1;
        }
        while m.saturating_pow(k) < u64::from(p) {
            m += 1;
        }
        let inner = [m.min(u64::from(u32::MAX)) as u32; MAX_FORK_DIMS];
        Grid::from_inner(&inner[..k as usize - 1])
    }

    /// Digit `i` of member `v`.
    fn digit(&self, v: u64, i: usize) -> u64 {
        if i == 0 {
            v / self.stride[0]
        } else {
            (v % self.stride[i - 1]) / self.stride[i]
        }
    }

    /// The level of `v`'s last non-zero digit (`None` for the root): `v` is a member
    /// of the chain along that dimension.
    fn level(&self, v: u64) -> Option<usize> {
        (0..self.levels).rev().find(|&i| self.digit(v, i) != 0)
    }

    /// The effective dimensions on `p` members, outermost first.
    fn dims(&self, p: u32) -> Vec<u32> {
        let s = &self.stride[..self.levels];
        let mut d = vec![u64::from(p).div_ceil(s[0]).max(1)];
        d.extend(s.windows(2).map(|w| w[0] / w[1]));
        d.into_iter()
            .map(|x| x.min(u64::from(u32::MAX)) as u32)
            .collect()
    }

    /// The tree's height on `p` members: the largest digit sum of a member (its hops
    /// from the root).
    fn depth(&self, p: u32) -> u32 {
        if p <= 1 {
            return 0;
        }
        let n = self.levels;
        let x = u64::from(p - 1);
        let mut digits = [0u64; MAX_FORK_DIMS];
        for (i, d) in digits[..n].iter_mut().enumerate() {
            *d = self.digit(x, i);
        }
        let max_digit = |i: usize| self.stride[i - 1] / self.stride[i] - 1;
        let mut best: u64 = digits.iter().sum();
        // Lowering digit i by one frees every later digit to take its maximum (the
        // strides below a non-zero digit of P − 1 are below P: no overflow).
        for i in 0..n {
            if digits[i] > 0 {
                let c = digits[..i].iter().sum::<u64>() + digits[i] - 1
                    + (i + 1..n).map(max_digit).sum::<u64>();
                best = best.max(c);
            }
        }
        best as u32
    }

    fn parent(&self, v: u32) -> u32 {
        let v = u64::from(v);
        self.level(v).map_or(0, |i| (v - self.stride[i]) as u32)
    }

    /// Children in ascending order with the ends of their subtrees: one per deeper
    /// dimension (`v + s(j)`, ending where the next begins), then the next member of
    /// `v`'s own chain (ending at the end of the enclosing block).
    fn children(&self, v: u32, p: u32, out: &mut Vec<(u32, u32)>) {
        let (v, p64) = (u64::from(v), u64::from(p));
        let lvl = self.level(v);
        let first = lvl.map_or(0, |i| i + 1);
        // Strides grow outwards (and may saturate): stop at the first beyond the team.
        for j in (first..self.levels).rev() {
            let c = v.saturating_add(self.stride[j]);
            if c >= p64 {
                break;
            }
            let end = if j == 0 {
                p64
            } else {
                v.saturating_add(self.stride[j - 1]).min(p64)
            };
            out.push((c as u32, end as u32));
        }
        if let Some(i) = lvl {
            let block_end = if i == 0 {
                p64
            } else {
                let s = self.stride[i - 1];
                ((v / s + 1) * s).min(p64)
            };
            let c = v + self.stride[i];
            if c < block_end {
                out.push((c as u32, block_end as u32));
            }
        }
    }
}

/// The algorithm instances the autotuner considers by default.
pub fn catalog() -> Vec<Arc<dyn Algorithm>> {
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
        .filter(|b| !b.ops.is_empty())
        .map(|b| Arc::new(b) as Arc<dyn Algorithm>)
        .collect();
    // The shared-memory and hierarchical algorithms support only teams that have a
    // channel / host sub-teams (`Query::shm`, `Query::hier`); they are part of the
    // catalogue so that profiles naming them load wherever the catalogue is used.
    all.push(Arc::new(crate::shm::Shm));
    all.push(Arc::new(crate::hier::HierAlgo));
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
        use OpKind::*;
        if !self.ops.contains(&q.op) || q.bytes < self.sizes.0 || q.bytes > self.sizes.1 {
            return false;
        }
        if self.transport != Transport::Eager {
            // Signaling puts and rendezvous need every member's destination in its
            // segment (single mode) and bytes to move.
            if !(q.addr == AddrMode::Single || q.scratch) || q.bytes == 0 {
                return false;
            }
            // Without entry synchronisation a put could land before its receiver
            // entered; that is what in-no permits and in-my forbids, and both are
            // handled (in-my adds a ready message). Nothing to exclude here.
        }
        let p = q.size;
        let comm = q.commutative || !q.op.reduces();
        match (self.kind, q.op) {
            (Kind::Kary, Reduce) => comm,
            (Kind::RecDoubling, Barrier | GatherAll) => pow2(p),
            (Kind::RecDoubling, Allreduce) => pow2(p) || comm,
            (Kind::Ring, ReduceScatter | Allreduce) => comm,
            (Kind::RecHalving, _) => comm && pow2(p),
            _ => true,
        }
    }

    fn cost(&self, q: &Query, m: &LogGP) -> f64 {
        use OpKind::*;
        let p = q.size.max(1);
        if p == 1 {
            return 0.0;
        }
        let pf = f64::from(p);
        let n = q.bytes;
        let nf = n as f64;
        let msg = |k: f64| m.l + 2.0 * m.o + (k - 1.0).max(0.0) * m.big_g + k * m.copy;
        let inj = |k: f64| m.g.max(m.o + (k - 1.0).max(0.0) * m.big_g);
        let lg2 = f64::from(log_ceil(p, 2));
        let tree = |t: Tree, bytes: f64| -> f64 {
            match t {
                Tree::Knomial(k) => {
                    let k = k.min(p);
                    f64::from(log_ceil(p, k)) * (f64::from(k - 2) * inj(bytes) + msg(bytes))
                }
                Tree::Kary(k) => {
                    let mut depth = 0u32;
                    let (mut level, mut covered) = (1u64, 1u64);
                    while covered < u64::from(p) {
                        level *= u64::from(k);
                        covered += level;
                        depth += 1;
                    }
                    f64::from(depth) * (f64::from(k.saturating_sub(1)) * inj(bytes) + msg(bytes))
                }
                Tree::Chain => {
                    let seg = if self.seg == 0 {
                        bytes
                    } else {
                        (self.seg as f64).min(bytes)
                    };
                    let nseg = if seg > 0.0 {
                        (bytes / seg).ceil().max(1.0)
                    } else {
                        1.0
                    };
                    (pf - 2.0 + nseg) * msg(seg)
                }
                // Every hop of the deepest path is its sender's first send (the chain
                // of the current dimension is served first; its last member turns
                // into the next dimension first).
                Tree::Fork(g) => f64::from(g.depth(p)) * msg(bytes),
            }
        };
        let t = self.tree(p);
        // Hops of the deepest path (fork trees are deeper than log2 P).
        let hops = match t {
            Tree::Fork(g) => f64::from(g.depth(p)),
            _ => lg2,
        };
        let transport_extra = match self.transport {
            Transport::Eager => 0.0,
            // No receiver copy; in-my adds a ready message per hop, hidden behind the
            // data's own latency except for the first.
            Transport::Put => {
                -(nf * m.copy) * hops
                    + if q.sync.input == SyncMode::My {
                        msg(0.0)
                    } else {
                        0.0
                    }
            }
            // Announce, get (request + reply), acknowledge: per hop about three
            // latencies instead of one.
            Transport::Rendezvous => hops * (2.0 * m.l + 4.0 * m.o) - (nf * m.copy) * hops,
        };
        let c = match (self.kind, q.op) {
            (Kind::Flat, Barrier) => 2.0 * ((pf - 2.0) * inj(0.0) + msg(0.0)),
            (Kind::Flat, Broadcast | Scatter) => (pf - 2.0) * inj(nf) + msg(nf),
            // The root receives P - 1 messages through one endpoint: overhead or gap
            // per message plus the bandwidth of all the bytes.
            (Kind::Flat, Gather | Reduce) => {
                (pf - 1.0) * (m.o.max(m.g) + nf * (m.big_g + m.copy)) + msg(nf)
            }
            (Kind::Flat, GatherAll | Exchange | Allreduce | ReduceScatter) => {
                (pf - 2.0) * inj(nf) + msg(nf) + (pf - 1.0) * (m.o + nf * m.copy)
            }
            (Kind::Flat, Scan | Exscan) => (pf - 2.0) * inj(nf) + msg(nf) + pf * m.o,
            (Kind::Knomial | Kind::Kary | Kind::Chain | Kind::Fork, Barrier) => 2.0 * tree(t, 0.0),
            // Reductions are not pipelined.
            (Kind::Chain, Reduce) => (pf - 1.0) * msg(nf),
            (Kind::Knomial | Kind::Kary | Kind::Chain | Kind::Fork, Broadcast | Reduce) => {
                tree(t, nf)
            }
            // Store and forward along every dimension: in a block of B members
            // (the team for dimension 0, else the first, full, block of the level
            // above), hop j of the chain of level i (stride s) carries the B − j·s
            // blocks beyond it.
            (Kind::Fork, Scatter | Gather) => {
                let Tree::Fork(g) = t else { unreachable!() };
                let p64 = u64::from(p);
                let fwd: u64 = (0..g.levels)
                    .map(|i| {
                        let s = g.stride[i];
                        let b = if i == 0 {
                            p64
                        } else {
                            g.stride[i - 1].min(p64)
                        };
                        (1..b.div_ceil(s)).map(|j| b - j * s).sum::<u64>()
                    })
                    .sum();
                let fwd = fwd as f64;
                f64::from(g.depth(p)) * msg(0.0) + fwd * nf * (m.big_g + m.copy)
            }
            (Kind::Knomial | Kind::Chain, Scatter | Gather) => {
                f64::from(log_ceil(p, self.radix.max(2))) * msg(0.0)
                    + (pf - 1.0) * nf * (m.big_g + m.copy)
            }
            (Kind::Chain, Scan | Exscan) => (pf - 1.0) * msg(nf),
            (Kind::Dissemination, _) => {
                let k = self.radix;
                f64::from(log_ceil(p, k)) * (f64::from(k - 2) * inj(0.0) + msg(0.0))
            }
            (Kind::Bruck, GatherAll) => {
                let k = self.radix;
                f64::from(log_ceil(p, k)) * (f64::from(k - 2) * inj(0.0) + msg(0.0))
                    + (pf - 1.0) * nf * (m.big_g + m.copy)
            }
            (Kind::Bruck, _) => {
                let k = f64::from(self.radix);
                let rounds = f64::from(log_ceil(p, self.radix));
                // Each round moves about P/k blocks to each of k - 1 peers.
                rounds * ((k - 2.0) * inj(0.0) + msg(0.0))
                    + rounds * (k - 1.0) * (pf / k) * nf * (m.big_g + 2.0 * m.copy)
            }
            (Kind::Ring, Allreduce) => 2.0 * (pf - 1.0) * msg(nf / pf),
            (Kind::Ring, ReduceScatter) => (pf - 1.0) * msg(nf),
            (Kind::Ring, _) => (pf - 1.0) * msg(nf),
            (Kind::RecDoubling, Barrier) => lg2 * msg(0.0),
            (Kind::RecDoubling, GatherAll) => {
                lg2 * (m.l + 2.0 * m.o) + (pf - 1.0) * nf * (m.big_g + m.copy)
            }
            (Kind::RecDoubling, Allreduce) => {
                lg2 * msg(nf) + if pow2(p) { 0.0 } else { 2.0 * msg(nf) }
            }
            (Kind::RecDoubling, _) => lg2 * msg(nf),
            (Kind::RecHalving, ReduceScatter) => {
                lg2 * (m.l + 2.0 * m.o) + (pf - 1.0) * nf * (m.big_g + m.copy)
            }
            (Kind::RecHalving, _) => {
                2.0 * lg2 * (m.l + 2.0 * m.o) + 2.0 * (pf - 1.0) / pf * nf * (m.big_g + m.copy)
            }
            (Kind::Pairwise, _) => (pf - 1.0) * msg(nf),
            (Kind::ReduceBcast, _) => 2.0 * tree(Tree::Knomial(2), nf),
            (Kind::GatherBcast, _) => {
                lg2 * msg(0.0)
                    + (pf - 1.0) * nf * (m.big_g + m.copy)
                    + tree(Tree::Knomial(2), pf * nf)
            }
            (Kind::ReduceScatter, _) => {
                tree(Tree::Knomial(2), pf * nf) + lg2 * msg(0.0) + (pf - 1.0) * nf * m.big_g
            }
            _ => f64::INFINITY,
        };
        (c + transport_extra).max(0.0)
    }

    fn plan(&self, ctx: &PlanCtx) -> Schedule {
        plan_builtin(self, ctx)
    }
}

// ----------------------------------------------------------------------- trees

/// Tree shapes over relative ranks (root = 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Tree {
    /// k-nomial; subtrees are contiguous ranges.
    Knomial(u32),
    /// k-ary heap; subtrees are not contiguous.
    Kary(u32),
    /// Chain v -> v + 1; subtrees are contiguous.
    Chain,
    /// Fork tree over a grid; subtrees are contiguous.
    Fork(Grid),
}

impl Tree {
    fn parent(self, v: u32) -> Option<u32> {
        if v == 0 {
            return None;
        }
        Some(match self {
            Tree::Knomial(k) => {
                let mut d = 1u32;
                while (v / d) % k == 0 {
                    d *= k;
                }
                v - ((v / d) % k) * d
            }
            Tree::Kary(k) => (v - 1) / k,
            Tree::Chain => v - 1,
            Tree::Fork(g) => g.parent(v),
        })
    }

    /// Children in ascending order, each with the (exclusive) end of its subtree for
    /// contiguous trees (`u32::MAX` for k-ary).
    fn children(self, v: u32, p: u32) -> Vec<(u32, u32)> {
        let mut out = Vec::new();
        match self {
            Tree::Knomial(k) => {
                let lim = if v == 0 {
                    u64::MAX
                } else {
                    let mut d = 1u64;
                    while (u64::from(v) / d) % u64::from(k) == 0 {
                        d *= u64::from(k);
                    }
                    d
                };
                let mut pw = 1u64;
                while pw < lim && pw < u64::from(p) {
                    for i in 1..u64::from(k) {
                        let c = u64::from(v) + i * pw;
                        if c < u64::from(p) {
                            out.push((c as u32, (c + pw).min(u64::from(p)) as u32));
                        }
                    }
                    pw *= u64::from(k);
                }
            }
            Tree::Kary(k) => {
                for i in 1..=u64::from(k) {
                    let c = u64::from(v) * u64::from(k) + i;
                    if c < u64::from(p) {
                        out.push((c as u32, u32::MAX));
                    }
                }
            }
            Tree::Chain => {
                if v + 1 < p {
                    out.push((v + 1, p));
                }
            }
            Tree::Fork(g) => g.children(v, p, &mut out),
        }
        out
    }
}

fn abs(v: u32, root: u32, p: u32) -> u32 {
    ((u64::from(v) + u64::from(root)) % u64::from(p)) as u32
}

fn rel(r: u32, root: u32, p: u32) -> u32 {
    ((u64::from(r) + u64::from(p) - u64::from(root)) % u64::from(p)) as u32
}

/// Broadcast of `range` (same on every rank) from `root` along `tree`, pipelined by
/// `seg` bytes (0: one piece). Tags `base..`.
#[allow(clippy::too_many_arguments)]
fn k_bcast(
    s: &mut Schedule,
    tree: Tree,
    p: u32,
    r: u32,
    root: u32,
    range: Range<usize>,
    seg: usize,
    base: u32,
) {
    let len = range.len();
    let nseg = if seg == 0 || len == 0 {
        1
    } else {
        len.div_ceil(seg)
    };
    let piece = |i: usize| {
        if seg == 0 || len == 0 {
            range.clone()
        } else {
            let a = range.start + i * seg;
            a..(a + seg).min(range.end)
        }
    };
    let v = rel(r, root, p);
    let mut kids: Vec<u32> = tree.children(v, p).into_iter().map(|c| c.0).collect();
    kids.reverse(); // largest subtree first
    let parent = tree.parent(v);
    let rounds = if parent.is_some() {
        nseg + usize::from(!kids.is_empty())
    } else {
        nseg
    };
    for t in 0..rounds {
        let rd = s.round();
        let send_seg = if parent.is_some() {
            t.checked_sub(1)
        } else {
            Some(t)
        };
        if let Some(i) = send_seg.filter(|&i| i < nseg) {
            for &c in &kids {
                rd.sends.push(SendStep {
                    peer: abs(c, root, p),
                    tag: base + i as u32,
                    ranges: vec![piece(i)],
                });
            }
        }
        if let Some(par) = parent.filter(|_| t < nseg) {
            rd.recvs.push(RecvStep {
                peer: abs(par, root, p),
                tag: base + t as u32,
                ranges: vec![piece(t)],
                action: Action::Copy,
            });
        }
    }
}

/// Tree reduction (or, with `Action::Copy`, a fan-in of empty messages) of `range`
/// to `root`: children combine into the range in ascending order. Tags `base`.
#[allow(clippy::too_many_arguments)]
fn k_reduce(
    s: &mut Schedule,
    tree: Tree,
    p: u32,
    r: u32,
    root: u32,
    range: Range<usize>,
    action: Action,
    base: u32,
) {
    let v = rel(r, root, p);
    let kids = tree.children(v, p);
    if !kids.is_empty() {
        let rd = s.round();
        for (c, _) in kids {
            rd.recvs.push(RecvStep {
                peer: abs(c, root, p),
                tag: base,
                ranges: vec![range.clone()],
                action,
            });
        }
    }
    if let Some(par) = tree.parent(v) {
        s.round().sends.push(SendStep {
            peer: abs(par, root, p),
            tag: base,
            ranges: vec![range],
        });
    }
}

/// Reduction to `root` honouring rank order: over absolute ranks with root 0 (the
/// subtrees of contiguous trees are rank ranges), then 0 -> root.
fn k_reduce_ordered(
    s: &mut Schedule,
    tree: Tree,
    p: u32,
    r: u32,
    root: u32,
    range: Range<usize>,
    base: u32,
) {
    k_reduce(s, tree, p, r, 0, range.clone(), Action::ReduceRight, base);
    if root != 0 {
        if r == 0 {
            s.round().sends.push(SendStep {
                peer: root,
                tag: base + 1,
                ranges: vec![range],
            });
        } else if r == root {
            s.round().recvs.push(RecvStep {
                peer: 0,
                tag: base + 1,
                ranges: vec![range],
                action: Action::Copy,
            });
        }
    }
}

/// Scatter along a contiguous tree: node `v` holds blocks of relative ranks
/// `[v, end)` at `(u - v) * n`. Returns the work length.
fn k_scatter(s: &mut Schedule, tree: Tree, p: u32, r: u32, root: u32, n: usize, base: u32) {
    let v = rel(r, root, p);
    let end = subtree_end(tree, v, p);
    if let Some(par) = tree.parent(v) {
        s.round().recvs.push(RecvStep {
            peer: abs(par, root, p),
            tag: base,
            ranges: vec![0..(end - v) as usize * n],
            action: Action::Copy,
        });
    }
    let mut kids = tree.children(v, p);
    kids.reverse();
    if !kids.is_empty() {
        let rd = s.round();
        for (c, ce) in kids {
            rd.sends.push(SendStep {
                peer: abs(c, root, p),
                tag: base,
                ranges: vec![(c - v) as usize * n..(ce - v) as usize * n],
            });
        }
    }
}

/// Gather along a contiguous tree (the mirror of [`k_scatter`]).
fn k_gather(s: &mut Schedule, tree: Tree, p: u32, r: u32, root: u32, n: usize, base: u32) {
    let v = rel(r, root, p);
    let end = subtree_end(tree, v, p);
    let kids = tree.children(v, p);
    if !kids.is_empty() {
        let rd = s.round();
        for (c, ce) in kids {
            rd.recvs.push(RecvStep {
                peer: abs(c, root, p),
                tag: base,
                ranges: vec![(c - v) as usize * n..(ce - v) as usize * n],
                action: Action::Copy,
            });
        }
    }
    if let Some(par) = tree.parent(v) {
        s.round().sends.push(SendStep {
            peer: abs(par, root, p),
            tag: base,
            ranges: vec![0..(end - v) as usize * n],
        });
    }
}

fn subtree_end(tree: Tree, v: u32, p: u32) -> u32 {
    match tree.parent(v) {
        None => p,
        Some(par) => tree
            .children(par, p)
            .into_iter()
            .find(|c| c.0 == v)
            .map_or(v + 1, |c| c.1),
    }
}

/// Byte ranges of `p` blocks splitting `total` bytes at element boundaries (the first
/// `count % p` blocks get one element more).
fn split(total: usize, elem: usize, p: u32) -> Vec<Range<usize>> {
    let elem = elem.max(1);
    let count = total / elem;
    let p = p as usize;
    let (q, rem) = (count / p, count % p);
    let mut at = 0;
    (0..p)
        .map(|i| {
            let len = (q + usize::from(i < rem)) * elem;
            let r = at..at + len;
            at += len;
            r
        })
        .collect()
}

fn blocks(n: usize, p: u32) -> Vec<Range<usize>> {
    (0..p as usize).map(|i| i * n..(i + 1) * n).collect()
}

fn join(b: &[Range<usize>], lo: usize, hi: usize) -> Range<usize> {
    b[lo].start..b[hi - 1].end
}

/// Ring reduce_scatter over block layout `b` (commutative): rank r ends with block r.
fn k_ring_rs(s: &mut Schedule, p: u32, r: u32, b: &[Range<usize>], base: u32) {
    k_ring(s, p, r, b, base, 1, Action::ReduceRight);
}

/// Ring gather_all over block layout `b`: rank r starts with block r.
fn k_ring_ag(s: &mut Schedule, p: u32, r: u32, b: &[Range<usize>], base: u32) {
    k_ring(s, p, r, b, base, 0, Action::Copy);
}

/// The ring both use: in step i rank r sends block r − i − `lag` to its successor and
/// receives block r − i − `lag` − 1 from its predecessor, applying `action`.
fn k_ring(
    s: &mut Schedule,
    p: u32,
    r: u32,
    b: &[Range<usize>],
    base: u32,
    lag: u32,
    action: Action,
) {
    let (next, prev) = ((r + 1) % p, (r + p - 1) % p);
    for i in 0..p.saturating_sub(1) {
        let sb = ((r + 2 * p - i - lag) % p) as usize;
        let rb = ((r + 2 * p - i - lag - 1) % p) as usize;
        let rd = s.round();
        rd.sends.push(SendStep {
            peer: next,
            tag: base + i,
            ranges: vec![b[sb].clone()],
        });
        rd.recvs.push(RecvStep {
            peer: prev,
            tag: base + i,
            ranges: vec![b[rb].clone()],
            action,
        });
    }
}

/// Recursive-doubling gather_all over block layout `b` (power-of-two `p`).
fn k_recdbl_ag(s: &mut Schedule, p: u32, r: u32, b: &[Range<usize>], base: u32) {
    let mut d = 1u32;
    let mut k = 0;
    while d < p {
        let partner = r ^ d;
        let mine = (r / d * d) as usize;
        let theirs = (partner / d * d) as usize;
        let rd = s.round();
        rd.sends.push(SendStep {
            peer: partner,
            tag: base + k,
            ranges: vec![join(b, mine, mine + d as usize)],
        });
        rd.recvs.push(RecvStep {
            peer: partner,
            tag: base + k,
            ranges: vec![join(b, theirs, theirs + d as usize)],
            action: Action::Copy,
        });
        d *= 2;
        k += 1;
    }
}

/// Recursive-halving reduce_scatter over block layout `b` (power-of-two `p`,
/// commutative).
fn k_rechalv_rs(s: &mut Schedule, p: u32, r: u32, b: &[Range<usize>], base: u32) {
    let (mut lo, mut hi) = (0usize, p as usize);
    let mut mask = p / 2;
    let mut k = 0;
    while mask >= 1 {
        let partner = r ^ mask;
        let mid = (lo + hi) / 2;
        let (keep, give) = if r & mask == 0 {
            ((lo, mid), (mid, hi))
        } else {
            ((mid, hi), (lo, mid))
        };
        let rd = s.round();
        rd.sends.push(SendStep {
            peer: partner,
            tag: base + k,
            ranges: vec![join(b, give.0, give.1)],
        });
        rd.recvs.push(RecvStep {
            peer: partner,
            tag: base + k,
            ranges: vec![join(b, keep.0, keep.1)],
            action: Action::ReduceRight,
        });
        (lo, hi) = keep;
        mask /= 2;
        k += 1;
    }
}

fn plan_builtin(a: &Builtin, c: &PlanCtx) -> Schedule {
    use OpKind::*;
    let (p, r, root, n) = (c.size, c.rank, c.root, c.block);
    let pn = p as usize * n;
    let comm = c.commutative;
    let tree = a.tree(p);
    let contiguous = !matches!(tree, Tree::Kary(_));
    let mut s;
    match (c.op, a.kind) {
        // ------------------------------------------------------------ barrier
        (Barrier, Kind::Dissemination) => {
            s = Schedule::new(0, 0);
            let k = a.radix;
            let (mut d, mut j) = (1u64, 0u32);
            while d < u64::from(p) {
                let rd = s.round();
                for i in 1..u64::from(k) {
                    if i * d >= u64::from(p) {
                        break;
                    }
                    let dist = (i * d) as u32;
                    let tag = j * k + i as u32;
                    rd.sends.push(SendStep {
                        peer: (r + dist) % p,
                        tag,
                        ranges: vec![],
                    });
                    rd.recvs.push(RecvStep {
                        peer: (r + p - dist) % p,
                        tag,
                        ranges: vec![],
                        action: Action::Copy,
                    });
                }
                d *= u64::from(k);
                j += 1;
            }
        }
        (Barrier, Kind::RecDoubling) => {
            s = Schedule::new(0, 0);
            let (mut d, mut k) = (1, 0);
            while d < p {
                let rd = s.round();
                rd.sends.push(SendStep {
                    peer: r ^ d,
                    tag: k,
                    ranges: vec![],
                });
                rd.recvs.push(RecvStep {
                    peer: r ^ d,
                    tag: k,
                    ranges: vec![],
                    action: Action::Copy,
                });
                d *= 2;
                k += 1;
            }
        }
        (Barrier, _) => {
            s = Schedule::new(0, 0);
            k_reduce(&mut s, tree, p, r, 0, 0..0, Action::Copy, 0);
            k_bcast(&mut s, tree, p, r, 0, 0..0, 0, 1);
        }
        // ------------------------------------------------------------ broadcast
        (Broadcast, _) => {
            s = Schedule::new(n, n);
            if r == root {
                s.input.push((0..n, 0));
            }
            let seg = if a.kind == Kind::Chain { a.seg } else { 0 };
            k_bcast(&mut s, tree, p, r, root, 0..n, seg, 0);
            s.output.push((0..n, 0));
            s.symmetric = true;
        }
        // ------------------------------------------------------------ scatter
        (Scatter, _) => {
            let v = rel(r, root, p);
            let sub = if contiguous {
                subtree_end(tree, v, p) - v
            } else {
                1
            };
            s = Schedule::new(sub as usize * n, n);
            if r == root {
                for u in 0..p {
                    let t = abs(u, root, p) as usize;
                    s.input.push((t * n..(t + 1) * n, u as usize * n));
                }
            }
            k_scatter(&mut s, tree, p, r, root, n, 0);
            s.output.push((0..n, 0));
        }
        // ------------------------------------------------------------ gather
        (Gather, _) => {
            let v = rel(r, root, p);
            let sub = subtree_end(tree, v, p) - v;
            s = Schedule::new(sub as usize * n, if r == root { pn } else { 0 });
            s.input.push((0..n, 0));
            k_gather(&mut s, tree, p, r, root, n, 0);
            if r == root {
                for u in 0..p {
                    let t = abs(u, root, p) as usize;
                    s.output.push((u as usize * n..(u as usize + 1) * n, t * n));
                }
            }
        }
        // ------------------------------------------------------------ gather_all
        (GatherAll, Kind::Flat) => {
            s = Schedule::new(pn, pn);
            let rn = r as usize * n;
            s.input.push((0..n, rn));
            let rd = s.round();
            for j in (1..p).map(|i| (r + i) % p) {
                rd.sends.push(SendStep {
                    peer: j,
                    tag: 0,
                    ranges: vec![rn..rn + n],
                });
            }
            for j in (1..p).map(|i| (r + p - i) % p) {
                let jn = j as usize * n;
                rd.recvs.push(RecvStep {
                    peer: j,
                    tag: 0,
                    ranges: vec![jn..jn + n],
                    action: Action::Copy,
                });
            }
            s.output.push((0..pn, 0));
            s.symmetric = true;
        }
        (GatherAll, Kind::Ring | Kind::RecDoubling) => {
            s = Schedule::new(pn, pn);
            s.input.push((0..n, r as usize * n));
            let b = blocks(n, p);
            if a.kind == Kind::Ring {
                k_ring_ag(&mut s, p, r, &b, 0);
            } else {
                k_recdbl_ag(&mut s, p, r, &b, 0);
            }
            s.output.push((0..pn, 0));
            s.symmetric = true;
        }
        (GatherAll, Kind::Bruck) => {
            s = Schedule::new(pn, pn);
            s.input.push((0..n, 0));
            let k = u64::from(a.radix);
            let (mut d, mut j) = (1u64, 0u32);
            while d < u64::from(p) {
                let rd = s.round();
                for i in 1..k {
                    if i * d >= u64::from(p) {
                        break;
                    }
                    let cnt = d.min(u64::from(p) - i * d) as usize;
                    let dist = (i * d) as u32;
                    let tag = j * a.radix + i as u32;
                    rd.sends.push(SendStep {
                        peer: (r + p - dist) % p,
                        tag,
                        ranges: vec![0..cnt * n],
                    });
                    let at = (i * d) as usize * n;
                    rd.recvs.push(RecvStep {
                        peer: (r + dist) % p,
                        tag,
                        ranges: vec![at..at + cnt * n],
                        action: Action::Copy,
                    });
                }
                d *= k;
                j += 1;
            }
            for bidx in 0..p {
                let t = ((r + bidx) % p) as usize;
                s.output
                    .push((bidx as usize * n..(bidx as usize + 1) * n, t * n));
            }
        }
        (GatherAll, _) => {
            // gather + broadcast over binomial trees rooted at 0.
            let t2 = Tree::Knomial(2);
            let sub = subtree_end(t2, r, p) - r;
            let mut g = Schedule::new(sub as usize * n, 0);
            g.input.push((0..n, 0));
            k_gather(&mut g, t2, p, r, 0, n, 0);
            let mut bsch = Schedule::new(pn, pn);
            k_bcast(&mut bsch, t2, p, r, 0, 0..pn, 0, 0);
            s = g.then(bsch, 1);
            s.out_len = pn;
            s.output.push((0..pn, 0));
        }
        // ------------------------------------------------------------ exchange
        (Exchange, Kind::Flat | Kind::Pairwise) => {
            s = Schedule::new(2 * pn, pn);
            s.input.push((0..pn, 0));
            let rn = r as usize * n;
            s.input.push((rn..rn + n, pn + rn));
            if a.kind == Kind::Flat {
                let rd = s.round();
                for j in (1..p).map(|i| (r + i) % p) {
                    let jn = j as usize * n;
                    rd.sends.push(SendStep {
                        peer: j,
                        tag: 0,
                        ranges: vec![jn..jn + n],
                    });
                }
                for j in (1..p).map(|i| (r + p - i) % p) {
                    let jn = j as usize * n;
                    rd.recvs.push(RecvStep {
                        peer: j,
                        tag: 0,
                        ranges: vec![pn + jn..pn + jn + n],
                        action: Action::Copy,
                    });
                }
            } else {
                for i in 1..p {
                    let (to, from) = ((r + i) % p, (r + p - i) % p);
                    let (tn, fnn) = (to as usize * n, from as usize * n);
                    let rd = s.round();
                    rd.sends.push(SendStep {
                        peer: to,
                        tag: i,
                        ranges: vec![tn..tn + n],
                    });
                    rd.recvs.push(RecvStep {
                        peer: from,
                        tag: i,
                        ranges: vec![pn + fnn..pn + fnn + n],
                        action: Action::Copy,
                    });
                }
            }
            s.output.push((pn..2 * pn, 0));
        }
        (Exchange, _) => {
            // Bruck, radix k.
            s = Schedule::new(pn, pn);
            for bidx in 0..p as usize {
                let t = (r as usize + bidx) % p as usize;
                s.input.push((t * n..(t + 1) * n, bidx * n));
            }
            let k = u64::from(a.radix);
            let (mut pw, mut j) = (1u64, 0u32);
            while pw < u64::from(p) {
                let rd = s.round();
                for i in 1..k {
                    let set: Vec<Range<usize>> = (0..u64::from(p))
                        .filter(|b| (b / pw) % k == i)
                        .map(|b| b as usize * n..(b as usize + 1) * n)
                        .collect();
                    if set.is_empty() {
                        continue;
                    }
                    let dist = ((i * pw) % u64::from(p)) as u32;
                    let tag = j * a.radix + i as u32;
                    rd.sends.push(SendStep {
                        peer: (r + dist) % p,
                        tag,
                        ranges: set.clone(),
                    });
                    rd.recvs.push(RecvStep {
                        peer: (r + p - dist) % p,
                        tag,
                        ranges: set,
                        action: Action::Copy,
                    });
                }
                pw *= k;
                j += 1;
            }
            for bidx in 0..p {
                let from = ((r + p - bidx) % p) as usize;
                s.output
                    .push((bidx as usize * n..(bidx as usize + 1) * n, from * n));
            }
        }
        // ------------------------------------------------------------ reduce
        (Reduce, Kind::Flat) => {
            // Root receives everyone's input into its own slot and combines in
            // rank order: lower ranks from the left, higher from the right.
            s = Schedule::new(n, if r == root { n } else { 0 });
            s.input.push((0..n, 0));
            if r == root {
                let rd = s.round();
                for j in (0..root).rev() {
                    rd.recvs.push(RecvStep {
                        peer: j,
                        tag: 0,
                        ranges: vec![0..n],
                        action: Action::ReduceLeft,
                    });
                }
                for j in root + 1..p {
                    rd.recvs.push(RecvStep {
                        peer: j,
                        tag: 0,
                        ranges: vec![0..n],
                        action: Action::ReduceRight,
                    });
                }
                s.output.push((0..n, 0));
            } else {
                s.round().sends.push(SendStep {
                    peer: root,
                    tag: 0,
                    ranges: vec![0..n],
                });
            }
        }
        (Reduce, _) => {
            s = Schedule::new(n, if r == root { n } else { 0 });
            s.input.push((0..n, 0));
            if comm || !contiguous {
                k_reduce(&mut s, tree, p, r, root, 0..n, Action::ReduceRight, 0);
            } else {
                k_reduce_ordered(&mut s, tree, p, r, root, 0..n, 0);
            }
            if r == root {
                s.output.push((0..n, 0));
            }
        }
        // ------------------------------------------------------------ allreduce
        (Allreduce, Kind::Flat) => {
            s = Schedule::new(n, n);
            s.input.push((0..n, 0));
            let rd = s.round();
            for j in (1..p).map(|i| (r + i) % p) {
                rd.sends.push(SendStep {
                    peer: j,
                    tag: 0,
                    ranges: vec![0..n],
                });
            }
            for j in (0..r).rev() {
                rd.recvs.push(RecvStep {
                    peer: j,
                    tag: 0,
                    ranges: vec![0..n],
                    action: Action::ReduceLeft,
                });
            }
            for j in r + 1..p {
                rd.recvs.push(RecvStep {
                    peer: j,
                    tag: 0,
                    ranges: vec![0..n],
                    action: Action::ReduceRight,
                });
            }
            s.output.push((0..n, 0));
        }
        (Allreduce, Kind::RecDoubling) => {
            s = Schedule::new(n, n);
            s.input.push((0..n, 0));
            let p2 = if pow2(p) {
                p
            } else {
                1 << (31 - p.leading_zeros())
            };
            let rem = p - p2;
            if rem > 0 {
                if r >= p2 {
                    s.round().sends.push(SendStep {
                        peer: r - p2,
                        tag: 0,
                        ranges: vec![0..n],
                    });
                } else if r < rem {
                    s.round().recvs.push(RecvStep {
                        peer: r + p2,
                        tag: 0,
                        ranges: vec![0..n],
                        action: Action::ReduceRight,
                    });
                }
            }
            if r < p2 {
                let (mut d, mut k) = (1, 1);
                while d < p2 {
                    let partner = r ^ d;
                    let act = if partner < r {
                        Action::ReduceLeft
                    } else {
                        Action::ReduceRight
                    };
                    let rd = s.round();
                    rd.sends.push(SendStep {
                        peer: partner,
                        tag: k,
                        ranges: vec![0..n],
                    });
                    rd.recvs.push(RecvStep {
                        peer: partner,
                        tag: k,
                        ranges: vec![0..n],
                        action: act,
                    });
                    d *= 2;
                    k += 1;
                }
            }
            if rem > 0 {
                if r < rem {
                    s.round().sends.push(SendStep {
                        peer: r + p2,
                        tag: 100,
                        ranges: vec![0..n],
                    });
                } else if r >= p2 {
                    s.round().recvs.push(RecvStep {
                        peer: r - p2,
                        tag: 100,
                        ranges: vec![0..n],
                        action: Action::Copy,
                    });
                }
            }
            s.output.push((0..n, 0));
        }
        (Allreduce, Kind::Ring | Kind::RecHalving) => {
            s = Schedule::new(n, n);
            s.input.push((0..n, 0));
            let b = split(n, c.elem, p);
            if a.kind == Kind::Ring {
                k_ring_rs(&mut s, p, r, &b, 0);
                // After the ring reduce_scatter rank r holds block r; the ring
                // gather_all starts from block r.
                k_ring_ag(&mut s, p, r, &b, p);
            } else {
                k_rechalv_rs(&mut s, p, r, &b, 0);
                k_recdbl_ag(&mut s, p, r, &b, 64);
            }
            s.output.push((0..n, 0));
        }
        (Allreduce, _) => {
            // reduce + broadcast over binomial trees rooted at 0.
            s = Schedule::new(n, n);
            s.input.push((0..n, 0));
            k_reduce_ordered(&mut s, Tree::Knomial(2), p, r, 0, 0..n, 0);
            k_bcast(&mut s, Tree::Knomial(2), p, r, 0, 0..n, 0, 2);
            s.output.push((0..n, 0));
        }
        // ------------------------------------------------------------ reduce_scatter
        (ReduceScatter, Kind::Flat) => {
            s = Schedule::new(pn, n);
            s.input.push((0..pn, 0));
            let rn = r as usize * n;
            let rd = s.round();
            for j in (1..p).map(|i| (r + i) % p) {
                let jn = j as usize * n;
                rd.sends.push(SendStep {
                    peer: j,
                    tag: 0,
                    ranges: vec![jn..jn + n],
                });
            }
            for j in (0..r).rev() {
                rd.recvs.push(RecvStep {
                    peer: j,
                    tag: 0,
                    ranges: vec![rn..rn + n],
                    action: Action::ReduceLeft,
                });
            }
            for j in r + 1..p {
                rd.recvs.push(RecvStep {
                    peer: j,
                    tag: 0,
                    ranges: vec![rn..rn + n],
                    action: Action::ReduceRight,
                });
            }
            s.output.push((rn..rn + n, 0));
        }
        (ReduceScatter, Kind::Ring | Kind::RecHalving) => {
            s = Schedule::new(pn, n);
            s.input.push((0..pn, 0));
            let b = blocks(n, p);
            if a.kind == Kind::Ring {
                k_ring_rs(&mut s, p, r, &b, 0);
            } else {
                k_rechalv_rs(&mut s, p, r, &b, 0);
            }
            s.output.push((b[r as usize].clone(), 0));
        }
        (ReduceScatter, _) => {
            // reduce (ordered binomial to 0) + binomial scatter from 0.
            s = Schedule::new(pn, n);
            s.input.push((0..pn, 0));
            k_reduce_ordered(&mut s, Tree::Knomial(2), p, r, 0, 0..pn, 0);
            k_scatter(&mut s, Tree::Knomial(2), p, r, 0, n, 2);
            s.output.push((0..n, 0));
        }
        // ------------------------------------------------------------ scan / exscan
        (Scan | Exscan, _) => {
            let ex = c.op == Exscan;
            // [0,n) inclusive partial, [n,2n) exclusive partial, [2n,3n) incoming.
            s = Schedule::new(3 * n, if ex && r == 0 { 0 } else { n });
            s.input.push((0..n, 0));
            let (incl, excl, tmp) = (0..n, n..2 * n, 2 * n..3 * n);
            match a.kind {
                Kind::RecDoubling => {
                    let (mut d, mut k) = (1, 0);
                    while d < p {
                        let rd = s.round();
                        if r + d < p {
                            rd.sends.push(SendStep {
                                peer: r + d,
                                tag: k,
                                ranges: vec![incl.clone()],
                            });
                        }
                        if r >= d {
                            rd.recvs.push(RecvStep {
                                peer: r - d,
                                tag: k,
                                ranges: vec![tmp.clone()],
                                action: Action::Copy,
                            });
                            if ex {
                                rd.post.push(if k == 0 {
                                    Local::Copy {
                                        src: tmp.clone(),
                                        dst: excl.start,
                                    }
                                } else {
                                    Local::ReduceLeft {
                                        src: tmp.clone(),
                                        dst: excl.start,
                                    }
                                });
                            }
                            rd.post.push(Local::ReduceLeft {
                                src: tmp.clone(),
                                dst: incl.start,
                            });
                        }
                        d *= 2;
                        k += 1;
                    }
                }
                Kind::Chain => {
                    if r > 0 {
                        let rd = s.round();
                        rd.recvs.push(RecvStep {
                            peer: r - 1,
                            tag: 0,
                            ranges: vec![excl.clone()],
                            action: Action::Copy,
                        });
                        rd.post.push(Local::ReduceLeft {
                            src: excl.clone(),
                            dst: incl.start,
                        });
                    }
                    if r + 1 < p {
                        s.round().sends.push(SendStep {
                            peer: r + 1,
                            tag: 0,
                            ranges: vec![incl.clone()],
                        });
                    }
                }
                _ => {
                    // flat: everyone sends its input to every higher rank.
                    let rd = s.round();
                    for j in r + 1..p {
                        rd.sends.push(SendStep {
                            peer: j,
                            tag: 0,
                            ranges: vec![incl.clone()],
                        });
                    }
                    for (i, j) in (0..r).rev().enumerate() {
                        rd.recvs.push(RecvStep {
                            peer: j,
                            tag: 0,
                            ranges: vec![excl.clone()],
                            action: if i == 0 {
                                Action::Copy
                            } else {
                                Action::ReduceLeft
                            },
                        });
                    }
                    if r > 0 {
                        rd.post.push(Local::ReduceLeft {
                            src: excl.clone(),
                            dst: incl.start,
                        });
                    }
                }
            }
            if !ex {
                s.output.push((incl, 0));
            } else if r > 0 {
                s.output.push((excl, 0));
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn knomial_tree_shape() {
        let t = Tree::Knomial(2);
        assert_eq!(
            t.children(0, 8).iter().map(|c| c.0).collect::<Vec<_>>(),
            vec![1, 2, 4]
        );
        assert_eq!(t.children(4, 8), vec![(5, 6), (6, 8)]);
        assert_eq!(t.parent(6), Some(4));
        assert_eq!(t.parent(5), Some(4));
        let t3 = Tree::Knomial(3);
        assert_eq!(
            t3.children(0, 10).iter().map(|c| c.0).collect::<Vec<_>>(),
            vec![1, 2, 3, 6, 9]
        );
        assert_eq!(t3.parent(7), Some(6));
        assert_eq!(subtree_end(t3, 3, 10), 6);
        assert_eq!(
            Tree::Kary(2).children(1, 6),
            vec![(3, u32::MAX), (4, u32::MAX)]
        );
    }

    /// Parents, and children with their subtree ends, of every member.
    type Shape = (Vec<Option<u32>>, Vec<Vec<(u32, u32)>>);

    /// The [`Shape`] of `t` on `p` members.
    fn shape(t: Tree, p: u32) -> Shape {
        (
            (0..p).map(|v| t.parent(v)).collect(),
            (0..p).map(|v| t.children(v, p)).collect(),
        )
    }

    /// Checks the tree invariants the contiguous-tree routines rely on: every member
    /// is its parent's child, children ascend and their subtrees tile
    /// `(v, subtree_end(v))`.
    fn check_contiguous(t: Tree, p: u32) {
        for v in 0..p {
            if let Some(par) = t.parent(v) {
                assert!(par < v, "{t:?} P={p}: parent of {v} is {par}");
                assert!(
                    t.children(par, p).iter().any(|c| c.0 == v),
                    "{t:?} P={p}: {v}"
                );
            }
            let mut at = v + 1;
            for (c, end) in t.children(v, p) {
                assert_eq!(c, at, "{t:?} P={p}: children of {v}");
                assert!(end > c && end <= p);
                assert_eq!(subtree_end(t, c, p), end);
                at = end;
            }
            assert_eq!(at, subtree_end(t, v, p), "{t:?} P={p}: subtree of {v}");
        }
    }

    #[test]
    fn fork_tree_shape() {
        let fork = |dims: &[u32]| Builtin::fork(dims, Transport::Eager).unwrap();
        // 2 × 3: blocks {0,1,2} {3,4,5}; 0 -> 3 along dimension 0, chains inside.
        let f = fork(&[2, 3]);
        let (par, kids) = shape(f.tree(6), 6);
        assert_eq!(par, vec![None, Some(0), Some(1), Some(0), Some(3), Some(4)]);
        assert_eq!(kids[0], vec![(1, 3), (3, 6)]);
        assert_eq!(kids[1], vec![(2, 3)]);
        assert_eq!(kids[3], vec![(4, 6)]);
        assert!(kids[2].is_empty() && kids[5].is_empty());
        assert_eq!(f.tree(6), Tree::Fork(f.grid(6)));
        assert_eq!(f.grid(6).depth(6), 3);
        // 3 × 3 × 2 (P = 18): blocks of 6 along dimension 0 (0 -> 6 -> 12), blocks of
        // 2 along dimension 1 inside them (0 -> 2 -> 4), pairs along dimension 2.
        let f = fork(&[3, 3, 2]);
        let (par, kids) = shape(f.tree(18), 18);
        assert_eq!(kids[0], vec![(1, 2), (2, 6), (6, 18)]);
        assert_eq!(kids[6], vec![(7, 8), (8, 12), (12, 18)]);
        assert_eq!(kids[12], vec![(13, 14), (14, 18)]);
        assert_eq!(kids[2], vec![(3, 4), (4, 6)]);
        assert_eq!(kids[14], vec![(15, 16), (16, 18)]);
        assert_eq!(kids[4], vec![(5, 6)]);
        assert!(kids[1].is_empty() && kids[5].is_empty() && kids[17].is_empty());
        let want: Vec<Option<u32>> = [
            None,
            Some(0),
            Some(0),
            Some(2),
            Some(2),
            Some(4),
            Some(0),
            Some(6),
            Some(6),
            Some(8),
            Some(8),
            Some(10),
            Some(6),
            Some(12),
            Some(12),
            Some(14),
            Some(14),
            Some(16),
        ]
        .to_vec();
        assert_eq!(par, want);
        assert_eq!(f.grid(18).depth(18), 2 + 2 + 1);
        // A prime, automatic 2-D: 7 members on a 3 × 3 grid, the last block {6}.
        let f = Builtin::new(Kind::Fork, 2, 0, Transport::Eager);
        assert_eq!(f.fork_dims(7), Some(vec![3, 3]));
        let (par, kids) = shape(f.tree(7), 7);
        assert_eq!(
            par,
            vec![None, Some(0), Some(1), Some(0), Some(3), Some(4), Some(3)]
        );
        assert_eq!(kids[0], vec![(1, 3), (3, 7)]);
        assert_eq!(kids[3], vec![(4, 6), (6, 7)]);
        assert_eq!(f.grid(7).depth(7), 3);
        // 13 (prime) on 4 × 4: the last block is {12}; depth 2 + 3 (member 11).
        assert_eq!(f.fork_dims(13), Some(vec![4, 4]));
        assert_eq!(f.grid(13).depth(13), 5);
        assert_eq!(f.tree(13).parent(12), Some(8));
        // Given dimensions that do not divide P: 3 × 3 on 11 members grows a ragged
        // fourth block {9, 10}; on 5, blocks {0,1,2} {3,4}.
        let f = fork(&[3, 3]);
        assert_eq!(f.fork_dims(11), Some(vec![4, 3]));
        assert_eq!(f.tree(11).parent(9), Some(6));
        assert_eq!(f.tree(11).children(9, 11), vec![(10, 11)]);
        assert_eq!(f.fork_dims(5), Some(vec![2, 3]));
        // One dimension is a chain; dimensions of 1 are dropped.
        let c = Builtin::new(Kind::Fork, 1, 0, Transport::Eager);
        assert_eq!(shape(c.tree(5), 5), shape(Tree::Chain, 5));
        assert_eq!(fork(&[2, 1, 3]).fork_dims(6), Some(vec![2, 3]));
        assert_eq!(fork(&[2, 1, 3]).name(), "fork2x1x3");
        // The invariants for many sizes and shapes (up to 12 members under Miri, where
        // 70 take six minutes).
        let most = if cfg!(miri) { 12 } else { 70 };
        for p in 1..=most {
            for k in 1..=4 {
                let f = Builtin::new(Kind::Fork, k, 0, Transport::Eager);
                check_contiguous(f.tree(p), p);
                // The depth is the real height.
                let t = f.tree(p);
                let height = (0..p)
                    .map(|mut v| {
                        let mut h = 0;
                        while let Some(u) = t.parent(v) {
                            v = u;
                            h += 1;
                        }
                        h
                    })
                    .max()
                    .unwrap();
                assert_eq!(f.grid(p).depth(p), height, "fork{k}d P={p}");
            }
            for dims in [&[2u32, 3][..], &[3, 3, 2], &[5], &[2, 2, 2, 2, 2]] {
                check_contiguous(fork(dims).tree(p), p);
            }
        }
        // Extremes: huge grids (saturating strides) and huge teams.
        let huge = fork(&[u32::MAX; MAX_FORK_DIMS]);
        assert_eq!(shape(huge.tree(10), 10), shape(Tree::Chain, 10));
        check_contiguous(huge.tree(10), 10);
        let f2 = Builtin::new(Kind::Fork, 2, 0, Transport::Eager);
        assert_eq!(f2.fork_dims(1_000_000), Some(vec![1000, 1000]));
        assert_eq!(f2.fork_dims(u32::MAX), Some(vec![65536, 65536]));
        let f3 = Builtin::new(Kind::Fork, 3, 0, Transport::Eager);
        assert_eq!(f3.fork_dims(u32::MAX), Some(vec![1625, 1626, 1626]));
        assert_eq!(f3.tree(u32::MAX).parent(u32::MAX - 1), Some(u32::MAX - 2));
        assert!(Builtin::fork(&[2, 0], Transport::Eager).is_err());
        assert!(Builtin::fork(&[2; MAX_FORK_DIMS + 1], Transport::Eager).is_err());
    }

    #[test]
    fn split_blocks() {
        assert_eq!(split(40, 4, 3), vec![0..16, 16..28, 28..40]);
        assert_eq!(split(4, 4, 3), vec![0..4, 4..4, 4..4]);
    }

    #[test]
    fn names_are_unique() {
        let c = catalog();
        let mut names: Vec<&str> = c.iter().map(|a| a.name()).collect();
        names.sort_unstable();
        let n = names.len();
        names.dedup();
        assert_eq!(n, names.len());
    }
}
