//! Pairwise exchange: P − 1 rounds, in round i every member sends to `r + i` and
//! receives from `r − i`.

use super::cost::Cost;
use super::family::Family;
use super::{Builtin, Kind, PlanCtx, Query};
use crate::op::OpKind;
use crate::sched::{Action, RecvStep, Schedule, SendStep};

/// The family.
pub(crate) const FAMILY: Family = Family::new(
    Kind::Pairwise,
    &[OpKind::Exchange],
    |_, _, _| "pairwise".to_string(),
    (cost, plan),
);

fn cost(_a: &Builtin, _q: &Query, c: &Cost<'_>) -> f64 {
    (c.pf - 1.0) * c.msg(c.nf)
}

fn plan(a: &Builtin, c: &PlanCtx) -> Schedule {
    if c.op != OpKind::Exchange {
        return super::fallback(a, c);
    }
    let (p, r, n) = (c.size, c.rank, c.block);
    let mut s = exchange_frame(c);
    let pn = p as usize * n;
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

    s.output.push((pn..2 * pn, 0));
    s
}

/// The work buffer of a direct exchange: the input at `[0, P·n)`, the output at
/// `[P·n, 2·P·n)` with the member's own block already in place.
pub(crate) fn exchange_frame(c: &PlanCtx) -> Schedule {
    let (p, r, n) = (c.size, c.rank, c.block);
    let pn = p as usize * n;
    let mut s = Schedule::new(2 * pn, pn);
    s.input.push((0..pn, 0));
    let rn = r as usize * n;
    s.input.push((rn..rn + n, pn + rn));

    s
}
