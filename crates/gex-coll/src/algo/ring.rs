//! Ring (gather_all, reduce_scatter; allreduce as ring reduce_scatter + ring
//! gather_all): P − 1 steps, each member passing one block to its successor.

use super::blocks::{blocks, k_ring_ag, k_ring_rs, split};
use super::cost::Cost;
use super::family::Family;
use super::{Builtin, Kind, PlanCtx, Query};
use crate::op::OpKind;
use crate::sched::Schedule;

/// The family.
pub(crate) const FAMILY: Family = Family::new(
    Kind::Ring,
    &[OpKind::GatherAll, OpKind::ReduceScatter, OpKind::Allreduce],
    |_, _, _| "ring".to_string(),
    (cost, plan),
)
// Blocks combine in ring order: commutative operators only.
.with_supports(|_, q| !q.op.reduces() || q.commutative)
.with_put_gather_all();

fn cost(_a: &Builtin, q: &Query, c: &Cost<'_>) -> f64 {
    match q.op {
        OpKind::Allreduce => 2.0 * (c.pf - 1.0) * c.msg(c.nf / c.pf),
        _ => (c.pf - 1.0) * c.msg(c.nf),
    }
}

fn plan(a: &Builtin, c: &PlanCtx) -> Schedule {
    let (p, r, n) = (c.size, c.rank, c.block);
    let pn = p as usize * n;
    match c.op {
        OpKind::GatherAll => {
            let mut s = Schedule::new(pn, pn);
            s.input.push((0..n, r as usize * n));
            k_ring_ag(&mut s, p, r, &blocks(n, p), 0);
            s.output.push((0..pn, 0));
            s.symmetric = true;
            s
        }
        OpKind::Allreduce => {
            let mut s = Schedule::new(n, n);
            s.input.push((0..n, 0));
            let b = split(n, c.elem, p);
            k_ring_rs(&mut s, p, r, &b, 0);
            // After the ring reduce_scatter rank r holds block r; the ring
            // gather_all starts from block r.
            k_ring_ag(&mut s, p, r, &b, p);
            s.output.push((0..n, 0));
            s
        }
        OpKind::ReduceScatter => {
            let mut s = Schedule::new(pn, n);
            s.input.push((0..pn, 0));
            let b = blocks(n, p);
            k_ring_rs(&mut s, p, r, &b, 0);
            s.output.push((b[r as usize].clone(), 0));
            s
        }
        _ => super::fallback(a, c),
    }
}
