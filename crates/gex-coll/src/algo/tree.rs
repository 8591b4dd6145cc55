//! Trees: the shapes (k-nomial, k-ary, chain, fork), the schedule pieces that move
//! data along them (broadcast, reduction, scatter, gather), the plans and costs of
//! the rooted operations over a tree, and the k-nomial, k-ary and fork families
//! (the chain's own operations are in `chain`).

use super::cost::Cost;
use super::family::Family;
use super::{Builtin, Kind, MAX_FORK_DIMS, PlanCtx, Query, log_ceil};
use crate::op::OpKind;
use crate::sched::{Action, Schedule};
use std::ops::Range;

/// k-nomial trees (binomial for radix 2).
pub(crate) const KNOMIAL: Family = Family::new(
    Kind::Knomial,
    ROOTED,
    |k, _, _| {
        if k == 2 {
            "binomial".to_string()
        } else {
            format!("knomial{k}")
        }
    },
    (cost, plan),
)
.with_radix(|k| k.max(2));

/// k-ary trees (heap numbering).
pub(crate) const KARY: Family = Family::new(
    Kind::Kary,
    &[OpKind::Broadcast, OpKind::Reduce],
    |k, _, _| format!("kary{k}"),
    (cost, plan),
)
.with_radix(|k| k.max(1))
// Subtrees are not rank ranges: reductions only for commutative operators.
.with_supports(|_, q| q.op != OpKind::Reduce || q.commutative);

/// Fork trees.
pub(crate) const FORK: Family = Family::new(
    Kind::Fork,
    ROOTED,
    |k, _, dims| {
        if dims.is_empty() {
            format!("fork{k}d")
        } else {
            let d: Vec<String> = dims.iter().map(u32::to_string).collect();
            format!("fork{}", d.join("x"))
        }
    },
    (cost, plan),
)
.with_radix(|k| k.clamp(1, MAX_FORK_DIMS as u32));

/// The operations every contiguous tree runs.
const ROOTED: &[OpKind] = &[
    OpKind::Barrier,
    OpKind::Broadcast,
    OpKind::Scatter,
    OpKind::Gather,
    OpKind::Reduce,
];

/// The cost of a rooted operation (or barrier) along `a`'s tree.
pub(crate) fn cost(a: &Builtin, q: &Query, c: &Cost<'_>) -> f64 {
    use OpKind::*;
    let (p, nf, m) = (c.p, c.nf, c.m);
    let t = a.tree(p);
    match (q.op, t) {
        (Barrier, _) => 2.0 * c.tree(t, 0.0, a.seg),
        (Broadcast | Reduce, _) => c.tree(t, nf, a.seg),
        // Store and forward along every dimension: in a block of B members (the team
        // for dimension 0, else the first, full, block of the level above), hop j of
        // the chain of level i (stride s) carries the B − j·s blocks beyond it.
        (Scatter | Gather, Tree::Fork(g)) => {
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
            f64::from(g.depth(p)) * c.msg(0.0) + fwd as f64 * nf * (m.big_g + m.copy)
        }
        (Scatter | Gather, Tree::Knomial(_) | Tree::Chain) => {
            f64::from(log_ceil(p, a.radix.max(2))) * c.msg(0.0)
                + (c.pf - 1.0) * nf * (m.big_g + m.copy)
        }
        _ => f64::INFINITY,
    }
}

/// The plan of a rooted operation (or barrier: fan-in then fan-out) along `a`'s
/// tree; the chain pipelines broadcasts by its segment.
pub(crate) fn plan(a: &Builtin, c: &PlanCtx) -> Schedule {
    use OpKind::*;
    let (p, r, root, n) = (c.size, c.rank, c.root, c.block);
    let tree = a.tree(p);
    let contiguous = !matches!(tree, Tree::Kary(_));
    match c.op {
        Barrier => {
            let mut s = Schedule::new(0, 0);
            k_reduce(&mut s, at(tree, p, r, 0), 0..0, Action::Copy, 0);
            k_bcast(&mut s, at(tree, p, r, 0), 0..0, 0, 1);
            s
        }
        Broadcast => {
            let mut s = Schedule::new(n, n);
            if r == root {
                s.input.push((0..n, 0));
            }
            let seg = if a.kind == Kind::Chain { a.seg } else { 0 };
            k_bcast(&mut s, at(tree, p, r, root), 0..n, seg, 0);
            s.output.push((0..n, 0));
            s.symmetric = true;
            s
        }
        Scatter => {
            let v = rel(r, root, p);
            let sub = if contiguous {
                subtree_end(tree, v, p) - v
            } else {
                1
            };
            let mut s = Schedule::new(sub as usize * n, n);
            if r == root {
                for u in 0..p {
                    let t = abs(u, root, p) as usize;
                    s.input.push((t * n..(t + 1) * n, u as usize * n));
                }
            }
            k_scatter(&mut s, at(tree, p, r, root), n, 0);
            s.output.push((0..n, 0));
            s
        }
        Gather => {
            let v = rel(r, root, p);
            let sub = subtree_end(tree, v, p) - v;
            let pn = p as usize * n;
            let mut s = Schedule::new(sub as usize * n, if r == root { pn } else { 0 });
            s.input.push((0..n, 0));
            k_gather(&mut s, at(tree, p, r, root), n, 0);
            if r == root {
                for u in 0..p {
                    let t = abs(u, root, p) as usize;
                    s.output.push((u as usize * n..(u as usize + 1) * n, t * n));
                }
            }
            s
        }
        Reduce => {
            let mut s = Schedule::new(n, if r == root { n } else { 0 });
            s.input.push((0..n, 0));
            if c.commutative || !contiguous {
                k_reduce(&mut s, at(tree, p, r, root), 0..n, Action::ReduceRight, 0);
            } else {
                k_reduce_ordered(&mut s, at(tree, p, r, root), 0..n, 0);
            }
            if r == root {
                s.output.push((0..n, 0));
            }
            s
        }
        _ => super::fallback(a, c),
    }
}

/// The grid of a fork tree: the block size (stride) of every level, outermost first,
/// the innermost 1. Level `i` of member `v` has digit `v / s0` (`i = 0`) or
/// `(v % s(i−1)) / s(i)`; the outer dimension is unbounded (as many blocks as the team
/// needs), so any team size fits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Grid {
    pub(crate) stride: [u64; MAX_FORK_DIMS],
    pub(crate) levels: usize,
}

impl Grid {
    /// From the inner dimensions (all but the outer one); dimensions below 2 dropped.
    pub(crate) fn from_inner(inner: &[u32]) -> Grid {
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
    pub(crate) fn auto(k: u32, p: u32) -> Grid {
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
    pub(crate) fn digit(&self, v: u64, i: usize) -> u64 {
        if i == 0 {
            v / self.stride[0]
        } else {
            (v % self.stride[i - 1]) / self.stride[i]
        }
    }

    /// The level of `v`'s last non-zero digit (`None` for the root): `v` is a member
    /// of the chain along that dimension.
    pub(crate) fn level(&self, v: u64) -> Option<usize> {
        (0..self.levels).rev().find(|&i| self.digit(v, i) != 0)
    }

    /// The effective dimensions on `p` members, outermost first.
    pub(crate) fn dims(&self, p: u32) -> Vec<u32> {
        let s = &self.stride[..self.levels];
        let mut d = vec![u64::from(p).div_ceil(s[0]).max(1)];
        d.extend(s.windows(2).map(|w| w[0] / w[1]));
        d.into_iter()
            .map(|x| x.min(u64::from(u32::MAX)) as u32)
            .collect()
    }

    /// The tree's height on `p` members: the largest digit sum of a member (its hops
    /// from the root).
    pub(crate) fn depth(&self, p: u32) -> u32 {
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

    pub(crate) fn parent(&self, v: u32) -> u32 {
        let v = u64::from(v);
        self.level(v).map_or(0, |i| (v - self.stride[i]) as u32)
    }

    /// Children in ascending order with the ends of their subtrees: one per deeper
    /// dimension (`v + s(j)`, ending where the next begins), then the next member of
    /// `v`'s own chain (ending at the end of the enclosing block).
    pub(crate) fn children(&self, v: u32, p: u32, out: &mut Vec<(u32, u32)>) {
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
    pub(crate) fn parent(self, v: u32) -> Option<u32> {
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
    pub(crate) fn children(self, v: u32, p: u32) -> Vec<(u32, u32)> {
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

pub(crate) fn abs(v: u32, root: u32, p: u32) -> u32 {
    ((u64::from(v) + u64::from(root)) % u64::from(p)) as u32
}

/// Where this rank stands in a tree ([`at`]): the tree over `p` ranks rooted at
/// `root`, and this rank `r`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Node {
    pub(crate) tree: Tree,
    pub(crate) p: u32,
    pub(crate) r: u32,
    pub(crate) root: u32,
}

/// Rank `r` of `tree` over `p` ranks rooted at `root`.
pub(crate) fn at(tree: Tree, p: u32, r: u32, root: u32) -> Node {
    Node { tree, p, r, root }
}

pub(crate) fn rel(r: u32, root: u32, p: u32) -> u32 {
    ((u64::from(r) + u64::from(p) - u64::from(root)) % u64::from(p)) as u32
}

/// Broadcast of `range` (same on every rank) from `root` along `tree`, pipelined by
/// `seg` bytes (0: one piece). Tags `base..`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn k_bcast(s: &mut Schedule, node: Node, range: Range<usize>, seg: usize, base: u32) {
    let Node { tree, p, r, root } = node;
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
                rd.send(abs(c, root, p), base + i as u32, vec![piece(i)]);
            }
        }
        if let Some(par) = parent.filter(|_| t < nseg) {
            rd.recv(
                abs(par, root, p),
                base + t as u32,
                vec![piece(t)],
                Action::Copy,
            );
        }
    }
}

/// Tree reduction (or, with `Action::Copy`, a fan-in of empty messages) of `range`
/// to `root`: children combine into the range in ascending order. Tags `base`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn k_reduce(
    s: &mut Schedule,
    node: Node,
    range: Range<usize>,
    action: Action,
    base: u32,
) {
    let Node { tree, p, r, root } = node;
    let v = rel(r, root, p);
    let kids = tree.children(v, p);
    if !kids.is_empty() {
        let rd = s.round();
        for (c, _) in kids {
            rd.recv(abs(c, root, p), base, vec![range.clone()], action);
        }
    }
    if let Some(par) = tree.parent(v) {
        s.round().send(abs(par, root, p), base, vec![range]);
    }
}

/// Reduction to `root` honouring rank order: over absolute ranks with root 0 (the
/// subtrees of contiguous trees are rank ranges), then 0 -> root.
pub(crate) fn k_reduce_ordered(s: &mut Schedule, node: Node, range: Range<usize>, base: u32) {
    let Node { tree, p, r, root } = node;
    k_reduce(
        s,
        at(tree, p, r, 0),
        range.clone(),
        Action::ReduceRight,
        base,
    );
    if root != 0 {
        if r == 0 {
            s.round().send(root, base + 1, vec![range]);
        } else if r == root {
            s.round().recv(0, base + 1, vec![range], Action::Copy);
        }
    }
}

/// Scatter along a contiguous tree: node `v` holds blocks of relative ranks
/// `[v, end)` at `(u - v) * n`. Returns the work length.
pub(crate) fn k_scatter(s: &mut Schedule, node: Node, n: usize, base: u32) {
    let (parent, mut kids) = subtree_pieces(node, n);
    if let Some((par, piece)) = parent {
        s.round().recv(par, base, vec![piece], Action::Copy);
    }
    kids.reverse();
    if !kids.is_empty() {
        let rd = s.round();
        for (c, piece) in kids {
            rd.send(c, base, vec![piece]);
        }
    }
}

/// Gather along a contiguous tree (the mirror of [`k_scatter`]).
pub(crate) fn k_gather(s: &mut Schedule, node: Node, n: usize, base: u32) {
    let (parent, kids) = subtree_pieces(node, n);
    if !kids.is_empty() {
        let rd = s.round();
        for (c, piece) in kids {
            rd.recv(c, base, vec![piece], Action::Copy);
        }
    }
    if let Some((par, piece)) = parent {
        s.round().send(par, base, vec![piece]);
    }
}

/// What node `v` of a contiguous tree holds for scatter and gather (blocks of `n`
/// bytes, its subtree's at `(u - v) * n`): the parent's rank and this node's whole
/// range (none at the root), and each child's rank and the child's subtree's range.
#[allow(clippy::type_complexity)]
fn subtree_pieces(node: Node, n: usize) -> (Option<(u32, Range<usize>)>, Vec<(u32, Range<usize>)>) {
    let Node { tree, p, r, root } = node;
    let v = rel(r, root, p);
    let end = subtree_end(tree, v, p);
    let parent = tree
        .parent(v)
        .map(|par| (abs(par, root, p), 0..(end - v) as usize * n));
    let kids = tree.children(v, p).into_iter();
    let kids = kids.map(|(c, ce)| (abs(c, root, p), (c - v) as usize * n..(ce - v) as usize * n));
    (parent, kids.collect())
}

pub(crate) fn subtree_end(tree: Tree, v: u32, p: u32) -> u32 {
    match tree.parent(v) {
        None => p,
        Some(par) => tree
            .children(par, p)
            .into_iter()
            .find(|c| c.0 == v)
            .map_or(v + 1, |c| c.1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algo::Algorithm;
    use crate::op::Transport;

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
}
