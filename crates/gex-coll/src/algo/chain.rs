//! Chain (pipelined by `seg` bytes for broadcast): member i passes to i + 1; the
//! rooted operations run over the chain as a tree (`tree`), scans along it.

use super::cost::Cost;
use super::family::Family;
use super::{Builtin, Kind, PlanCtx, Query};
use crate::op::OpKind;
use crate::sched::Schedule;

/// The family.
pub(crate) const FAMILY: Family = Family::new(
    Kind::Chain,
    &[
        OpKind::Broadcast,
        OpKind::Scatter,
        OpKind::Gather,
        OpKind::Reduce,
        OpKind::Scan,
        OpKind::Exscan,
    ],
    |_, seg, _| {
        if seg == 0 {
            "chain".to_string()
        } else {
            format!("chain{}k", seg.div_ceil(1024))
        }
    },
    (cost, plan),
);

fn cost(a: &Builtin, q: &Query, c: &Cost<'_>) -> f64 {
    match q.op {
        // Reductions are not pipelined.
        OpKind::Reduce | OpKind::Scan | OpKind::Exscan => (c.pf - 1.0) * c.msg(c.nf),
        _ => super::tree::cost(a, q, c),
    }
}

fn plan(a: &Builtin, c: &PlanCtx) -> Schedule {
    match c.op {
        OpKind::Scan | OpKind::Exscan => super::scan::chain(c),
        _ => super::tree::plan(a, c),
    }
}
