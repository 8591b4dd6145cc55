//! Compositions over binomial trees: allreduce = reduce + broadcast, gather_all =
//! gather + broadcast, reduce_scatter = reduce + scatter (each also the plan of the
//! operation for families that do not declare it).

use super::cost::Cost;
use super::family::Family;
use super::tree::{Tree, at, k_bcast, k_gather, k_reduce_ordered, k_scatter, subtree_end};
use super::{Builtin, Kind, PlanCtx, Query};
use crate::op::OpKind;
use crate::sched::Schedule;

/// The family of a composition for the operation `$op` alone, named `$name`, costed by
/// `$cost` and planned by `$plan` (the fallback for any other operation).
macro_rules! composition {
    ($kind:ident, $op:ident, $name:literal, $cost:expr, $plan:ident) => {
        Family::new(
            Kind::$kind,
            &[OpKind::$op],
            |_, _, _| $name.to_string(),
            ($cost, |a, c| match c.op {
                OpKind::$op => $plan(c),
                _ => super::fallback(a, c),
            }),
        )
    };
}

/// allreduce = reduce + broadcast.
pub(crate) const REDUCE_BCAST: Family = composition!(
    ReduceBcast,
    Allreduce,
    "reduce+bcast",
    |_, _, c| 2.0 * c.tree(Tree::Knomial(2), c.nf, 0),
    reduce_bcast
);

/// gather_all = gather + broadcast.
pub(crate) const GATHER_BCAST: Family = composition!(
    GatherBcast,
    GatherAll,
    "gather+bcast",
    gather_bcast_cost,
    gather_bcast
);

/// reduce_scatter = reduce + scatter.
pub(crate) const REDUCE_SCATTER: Family = composition!(
    ReduceScatter,
    ReduceScatter,
    "reduce+scatter",
    reduce_scatter_cost,
    reduce_scatter
);

fn gather_bcast_cost(_a: &Builtin, _q: &Query, c: &Cost<'_>) -> f64 {
    let m = c.m;
    c.lg2 * c.msg(0.0)
        + (c.pf - 1.0) * c.nf * (m.big_g + m.copy)
        + c.tree(Tree::Knomial(2), c.pf * c.nf, 0)
}

fn reduce_scatter_cost(_a: &Builtin, _q: &Query, c: &Cost<'_>) -> f64 {
    c.tree(Tree::Knomial(2), c.pf * c.nf, 0) + c.lg2 * c.msg(0.0) + (c.pf - 1.0) * c.nf * c.m.big_g
}

/// Reduce + broadcast over binomial trees rooted at 0.
pub(crate) fn reduce_bcast(c: &PlanCtx) -> Schedule {
    let (p, r, n) = (c.size, c.rank, c.block);
    // reduce + broadcast over binomial trees rooted at 0.
    let mut s = Schedule::new(n, n);
    s.input.push((0..n, 0));
    k_reduce_ordered(&mut s, at(Tree::Knomial(2), p, r, 0), 0..n, 0);
    k_bcast(&mut s, at(Tree::Knomial(2), p, r, 0), 0..n, 0, 2);
    s.output.push((0..n, 0));
    s
}

/// Gather + broadcast over binomial trees rooted at 0.
pub(crate) fn gather_bcast(c: &PlanCtx) -> Schedule {
    let (p, r, n) = (c.size, c.rank, c.block);
    let pn = p as usize * n;
    // gather + broadcast over binomial trees rooted at 0.
    let t2 = Tree::Knomial(2);
    let sub = subtree_end(t2, r, p) - r;
    let mut g = Schedule::new(sub as usize * n, 0);
    g.input.push((0..n, 0));
    k_gather(&mut g, at(t2, p, r, 0), n, 0);
    let mut bsch = Schedule::new(pn, pn);
    k_bcast(&mut bsch, at(t2, p, r, 0), 0..pn, 0, 0);
    let mut s = g.then(bsch, 1);
    s.out_len = pn;
    s.output.push((0..pn, 0));
    s
}

/// Reduce (ordered binomial to 0) + binomial scatter from 0.
pub(crate) fn reduce_scatter(c: &PlanCtx) -> Schedule {
    let (p, r, n) = (c.size, c.rank, c.block);
    let pn = p as usize * n;
    // reduce (ordered binomial to 0) + binomial scatter from 0.
    let mut s = Schedule::new(pn, n);
    s.input.push((0..pn, 0));
    k_reduce_ordered(&mut s, at(Tree::Knomial(2), p, r, 0), 0..pn, 0);
    k_scatter(&mut s, at(Tree::Knomial(2), p, r, 0), n, 2);
    s.output.push((0..n, 0));
    s
}
