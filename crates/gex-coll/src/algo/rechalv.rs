//! Recursive halving (reduce_scatter; allreduce as halving + recursive-doubling
//! gather_all, Rabenseifner's): power-of-two teams, commutative operators.

use super::blocks::{blocks, k_recdbl_ag, k_rechalv_rs, split};
use super::cost::Cost;
use super::family::Family;
use super::{Builtin, Kind, PlanCtx, Query};
use crate::op::OpKind;
use crate::sched::Schedule;

/// The family.
pub(crate) const FAMILY: Family = Family::new(
    Kind::RecHalving,
    &[OpKind::ReduceScatter, OpKind::Allreduce],
    |_, _, _| "rechalv".to_string(),
    (cost, plan),
)
.with_supports(|_, q| q.commutative && q.size.is_power_of_two());

fn cost(_a: &Builtin, q: &Query, c: &Cost<'_>) -> f64 {
    let m = c.m;
    let bw = (c.pf - 1.0) * c.nf * (m.big_g + m.copy);
    match q.op {
        OpKind::ReduceScatter => c.lg2 * (m.l + 2.0 * m.o) + bw,
        _ => 2.0 * c.lg2 * (m.l + 2.0 * m.o) + 2.0 * bw / c.pf,
    }
}

fn plan(a: &Builtin, c: &PlanCtx) -> Schedule {
    let (p, r, n) = (c.size, c.rank, c.block);
    match c.op {
        OpKind::Allreduce => {
            let mut s = Schedule::new(n, n);
            s.input.push((0..n, 0));
            let b = split(n, c.elem, p);
            k_rechalv_rs(&mut s, p, r, &b, 0);
            k_recdbl_ag(&mut s, p, r, &b, 64);
            s.output.push((0..n, 0));
            s
        }
        OpKind::ReduceScatter => {
            let mut s = Schedule::new(p as usize * n, n);
            s.input.push((0..p as usize * n, 0));
            let b = blocks(n, p);
            k_rechalv_rs(&mut s, p, r, &b, 0);
            s.output.push((b[r as usize].clone(), 0));
            s
        }
        _ => super::fallback(a, c),
    }
}
