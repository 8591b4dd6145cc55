//! Dissemination (barrier), radix k: in round j every member signals the members
//! `i·k^j` ahead (i = 1..k−1) and waits for those as far behind.

use super::cost::Cost;
use super::family::Family;
use super::{Builtin, Kind, PlanCtx, Query, log_ceil};
use crate::op::OpKind;
use crate::sched::{Action, RecvStep, Schedule, SendStep};

/// The family.
pub(crate) const FAMILY: Family = Family::new(
    Kind::Dissemination,
    &[OpKind::Barrier],
    |k, _, _| format!("dissem{k}"),
    (cost, plan),
)
.with_radix(|k| k.max(2));

fn cost(a: &Builtin, _q: &Query, c: &Cost<'_>) -> f64 {
    let k = a.radix;
    f64::from(log_ceil(c.p, k)) * (f64::from(k - 2) * c.inj(0.0) + c.msg(0.0))
}

fn plan(a: &Builtin, c: &PlanCtx) -> Schedule {
    if c.op != OpKind::Barrier {
        return super::fallback(a, c);
    }
    let (p, r) = (c.size, c.rank);
    let mut s = Schedule::new(0, 0);
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
    s
}
