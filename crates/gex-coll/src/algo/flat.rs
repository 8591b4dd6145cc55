//! Flat: the root (or every member) talks to every other member directly. The
//! rooted operations run over a k-nomial tree of radix P (a star).

use super::cost::Cost;
use super::family::Family;
use super::{Builtin, Kind, PlanCtx, Query};
use crate::op::OpKind;
use crate::sched::{Action, RecvStep, Round, Schedule, SendStep};
use std::ops::Range;

/// The family.
pub(crate) const FAMILY: Family = Family::new(
    Kind::Flat,
    &OpKind::ALL,
    |_, _, _| "flat".to_string(),
    (cost, plan),
)
.with_put_gather_all();

fn cost(_a: &Builtin, q: &Query, c: &Cost<'_>) -> f64 {
    use OpKind::*;
    let (m, pf, nf) = (c.m, c.pf, c.nf);
    match q.op {
        Barrier => 2.0 * ((pf - 2.0) * c.inj(0.0) + c.msg(0.0)),
        Broadcast | Scatter => (pf - 2.0) * c.inj(nf) + c.msg(nf),
        // The root receives P - 1 messages through one endpoint: overhead or gap per
        // message plus the bandwidth of all the bytes.
        Gather | Reduce => (pf - 1.0) * (m.o.max(m.g) + nf * (m.big_g + m.copy)) + c.msg(nf),
        GatherAll | Exchange | Allreduce | ReduceScatter => {
            (pf - 2.0) * c.inj(nf) + c.msg(nf) + (pf - 1.0) * (m.o + nf * m.copy)
        }
        Scan | Exscan => (pf - 2.0) * c.inj(nf) + c.msg(nf) + pf * m.o,
    }
}

fn plan(a: &Builtin, c: &PlanCtx) -> Schedule {
    use OpKind::*;
    match c.op {
        Barrier | Broadcast | Scatter | Gather => super::tree::plan(a, c),
        GatherAll => gather_all(c),
        Exchange => exchange(c),
        Reduce => reduce(c),
        Allreduce => allreduce(c),
        ReduceScatter => reduce_scatter(c),
        Scan | Exscan => super::scan::flat(c),
    }
}

/// Every member sends its block to every other.
fn gather_all(c: &PlanCtx) -> Schedule {
    let (p, r, n) = (c.size, c.rank, c.block);
    let pn = p as usize * n;
    let mut s = Schedule::new(pn, pn);
    let rn = r as usize * n;
    s.input.push((0..n, rn));
    let rd = s.round();
    send_to_all(rd, r, p, |_| rn..rn + n);
    recv_from_all(rd, r, p, |j| j * n..(j + 1) * n);
    s.output.push((0..pn, 0));
    s.symmetric = true;
    s
}

/// Every member sends block j to member j.
fn exchange(c: &PlanCtx) -> Schedule {
    let (p, r, n) = (c.size, c.rank, c.block);
    let pn = p as usize * n;
    let mut s = super::pairwise::exchange_frame(c);
    let rd = s.round();
    send_to_all(rd, r, p, |j| j * n..(j + 1) * n);
    recv_from_all(rd, r, p, |j| pn + j * n..pn + (j + 1) * n);

    s.output.push((pn..2 * pn, 0));
    s
}

/// Sends to every member of `0..p` but `me`, from `me + 1` on and wrapping, the range
/// `range(j)` to member `j`.
fn send_to_all(rd: &mut Round, me: u32, p: u32, range: impl Fn(usize) -> Range<usize>) {
    for j in (1..p).map(|i| (me + i) % p) {
        rd.sends.push(SendStep {
            peer: j,
            tag: 0,
            ranges: vec![range(j as usize)],
        });
    }
}

/// Receives from every member of `0..p` but `me`, from `me - 1` down and wrapping,
/// into `range(j)` for member `j` (copied).
fn recv_from_all(rd: &mut Round, me: u32, p: u32, range: impl Fn(usize) -> Range<usize>) {
    for j in (1..p).map(|i| (me + p - i) % p) {
        rd.recvs.push(RecvStep {
            peer: j,
            tag: 0,
            ranges: vec![range(j as usize)],
            action: Action::Copy,
        });
    }
}

/// Receives into `range` the input of every member of `0..p` but `me` and combines it
/// in rank order: the lower ranks from the left (the nearest first), the higher from
/// the right.
fn combine_in_order(rd: &mut Round, me: u32, p: u32, range: Range<usize>) {
    let step = |peer, action| RecvStep {
        peer,
        tag: 0,
        ranges: vec![range.clone()],
        action,
    };
    for j in (0..me).rev() {
        rd.recvs.push(step(j, Action::ReduceLeft));
    }
    for j in me + 1..p {
        rd.recvs.push(step(j, Action::ReduceRight));
    }
}

/// The root receives everyone's input into its own slot and combines in rank
/// order: lower ranks from the left, higher from the right.
fn reduce(c: &PlanCtx) -> Schedule {
    let (p, r, root, n) = (c.size, c.rank, c.root, c.block);
    // Root receives everyone's input into its own slot and combines in
    // rank order: lower ranks from the left, higher from the right.
    let mut s = Schedule::new(n, if r == root { n } else { 0 });
    s.input.push((0..n, 0));
    if r == root {
        combine_in_order(s.round(), root, p, 0..n);
        s.output.push((0..n, 0));
    } else {
        s.round().sends.push(SendStep {
            peer: root,
            tag: 0,
            ranges: vec![0..n],
        });
    }
    s
}

/// Every member sends its input to every other and combines in rank order.
fn allreduce(c: &PlanCtx) -> Schedule {
    let (p, r, n) = (c.size, c.rank, c.block);
    let mut s = Schedule::new(n, n);
    s.input.push((0..n, 0));
    let rd = s.round();
    send_to_all(rd, r, p, |_| 0..n);
    combine_in_order(rd, r, p, 0..n);
    s.output.push((0..n, 0));
    s
}

/// Every member sends block j to member j and combines its own block in rank order.
fn reduce_scatter(c: &PlanCtx) -> Schedule {
    let (p, r, n) = (c.size, c.rank, c.block);
    let pn = p as usize * n;
    let mut s = Schedule::new(pn, n);
    s.input.push((0..pn, 0));
    let rn = r as usize * n;
    let rd = s.round();
    send_to_all(rd, r, p, |j| j * n..(j + 1) * n);
    combine_in_order(rd, r, p, rn..rn + n);
    s.output.push((rn..rn + n, 0));
    s
}
