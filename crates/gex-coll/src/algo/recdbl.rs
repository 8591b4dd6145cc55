//! Recursive doubling (barrier, gather_all, allreduce, scan, exscan): log2 P rounds
//! with partners `r xor 2^k` (scans: `r ± 2^k`).

use super::blocks::{blocks, k_recdbl_ag};
use super::cost::Cost;
use super::family::Family;
use super::scan::{Parts, frame};
use super::{Builtin, Kind, PlanCtx, Query, pow2};
use crate::op::OpKind;
use crate::sched::{Action, Local, RecvStep, Schedule, SendStep};

/// The family.
pub(crate) const FAMILY: Family = Family::new(
    Kind::RecDoubling,
    &[
        OpKind::Barrier,
        OpKind::GatherAll,
        OpKind::Allreduce,
        OpKind::Scan,
        OpKind::Exscan,
    ],
    |_, _, _| "recdbl".to_string(),
    (cost, plan),
)
.with_supports(|_, q| match q.op {
    OpKind::Barrier | OpKind::GatherAll => pow2(q.size),
    // Non-power-of-two teams fold the extra members in: commutative only.
    OpKind::Allreduce => pow2(q.size) || q.commutative,
    _ => true,
})
.with_put_gather_all();

fn cost(_a: &Builtin, q: &Query, c: &Cost<'_>) -> f64 {
    let m = c.m;
    match q.op {
        OpKind::Barrier => c.lg2 * c.msg(0.0),
        OpKind::GatherAll => c.lg2 * (m.l + 2.0 * m.o) + (c.pf - 1.0) * c.nf * (m.big_g + m.copy),
        OpKind::Allreduce => c.lg2 * c.msg(c.nf) + if pow2(c.p) { 0.0 } else { 2.0 * c.msg(c.nf) },
        _ => c.lg2 * c.msg(c.nf),
    }
}

fn plan(a: &Builtin, c: &PlanCtx) -> Schedule {
    match c.op {
        OpKind::Barrier => barrier(c),
        OpKind::GatherAll => {
            let (p, r, n) = (c.size, c.rank, c.block);
            let pn = p as usize * n;
            let mut s = Schedule::new(pn, pn);
            s.input.push((0..n, r as usize * n));
            k_recdbl_ag(&mut s, p, r, &blocks(n, p), 0);
            s.output.push((0..pn, 0));
            s.symmetric = true;
            s
        }
        OpKind::Allreduce => allreduce(c),
        OpKind::Scan | OpKind::Exscan => scan(c),
        _ => super::fallback(a, c),
    }
}

/// Pairwise signals with partners `r xor 2^k`.
fn barrier(c: &PlanCtx) -> Schedule {
    let (p, r) = (c.size, c.rank);
    let mut s = Schedule::new(0, 0);
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
    s
}

/// The members beyond the largest power of two fold into its first ones, which
/// exchange with partners `r xor 2^k`, then pass the result back.
fn allreduce(c: &PlanCtx) -> Schedule {
    let (p, r, n) = (c.size, c.rank, c.block);
    let mut s = Schedule::new(n, n);
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
    s
}

/// In round k member r sends its inclusive partial to r + 2^k.
fn scan(c: &PlanCtx) -> Schedule {
    let (p, r) = (c.size, c.rank);
    frame(
        c,
        |s,
         Parts {
             incl,
             excl,
             tmp,
             ex,
         }| {
            let ex = *ex;
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
        },
    )
}
