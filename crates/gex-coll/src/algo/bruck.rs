//! Bruck, radix k (gather_all, exchange): ⌈log_k P⌉ rounds, each member sending
//! to k − 1 peers at distances `i·k^j`, blocks rotated so that every round moves a
//! contiguous prefix (gather_all) or the blocks whose digit j is i (exchange).

use super::cost::Cost;
use super::family::Family;
use super::{Builtin, Kind, PlanCtx, Query, log_ceil};
use crate::op::OpKind;
use crate::sched::{Action, RecvStep, Schedule, SendStep};
use std::ops::Range;

/// The family.
pub(crate) const FAMILY: Family = Family::new(
    Kind::Bruck,
    &[OpKind::GatherAll, OpKind::Exchange],
    |k, _, _| format!("bruck{k}"),
    (cost, plan),
)
.with_radix(|k| k.max(2));

fn cost(a: &Builtin, q: &Query, c: &Cost<'_>) -> f64 {
    let (m, pf, nf) = (c.m, c.pf, c.nf);
    let rounds = f64::from(log_ceil(c.p, a.radix));
    if q.op == OpKind::GatherAll {
        let k = a.radix;
        return rounds * (f64::from(k - 2) * c.inj(0.0) + c.msg(0.0))
            + (pf - 1.0) * nf * (m.big_g + m.copy);
    }
    let k = f64::from(a.radix);
    // Each round moves about P/k blocks to each of k - 1 peers.
    rounds * ((k - 2.0) * c.inj(0.0) + c.msg(0.0))
        + rounds * (k - 1.0) * (pf / k) * nf * (m.big_g + 2.0 * m.copy)
}

fn plan(a: &Builtin, c: &PlanCtx) -> Schedule {
    match c.op {
        OpKind::GatherAll => gather_all(a.radix, c),
        OpKind::Exchange => exchange(a.radix, c),
        _ => super::fallback(a, c),
    }
}

/// Bruck gather_all of radix `radix`.
fn gather_all(radix: u32, c: &PlanCtx) -> Schedule {
    let (p, r, n) = (c.size, c.rank, c.block);
    let pn = p as usize * n;
    let mut s = Schedule::new(pn, pn);
    s.input.push((0..n, 0));
    let k = u64::from(radix);
    let (mut d, mut j) = (1u64, 0u32);
    while d < u64::from(p) {
        let rd = s.round();
        for i in 1..k {
            if i * d >= u64::from(p) {
                break;
            }
            let cnt = d.min(u64::from(p) - i * d) as usize;
            let dist = (i * d) as u32;
            let tag = j * radix + i as u32;
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
    s
}

/// Bruck exchange of radix `radix` (also the fallback of families without one).
pub(crate) fn exchange(radix: u32, c: &PlanCtx) -> Schedule {
    let (p, r, n) = (c.size, c.rank, c.block);
    let pn = p as usize * n;
    // Bruck, radix k.
    let mut s = Schedule::new(pn, pn);
    for bidx in 0..p as usize {
        let t = (r as usize + bidx) % p as usize;
        s.input.push((t * n..(t + 1) * n, bidx * n));
    }
    let k = u64::from(radix);
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
            let tag = j * radix + i as u32;
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
    s
}
