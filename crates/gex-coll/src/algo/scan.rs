//! Scan and exscan: the work buffer every algorithm shares, and the flat and chain
//! scans (recursive doubling's is in `recdbl`).

use super::PlanCtx;
use crate::op::OpKind;
use crate::sched::{Action, Local, RecvStep, Schedule, SendStep};
use std::ops::Range;

/// The three parts of a scan's work buffer of `n`-byte blocks: the inclusive partial
/// `[0, n)`, the exclusive partial `[n, 2n)`, the incoming block `[2n, 3n)`.
pub(crate) struct Parts {
    /// Inclusive partial.
    pub(crate) incl: Range<usize>,
    /// Exclusive partial.
    pub(crate) excl: Range<usize>,
    /// Incoming block.
    pub(crate) tmp: Range<usize>,
    /// Exscan (else scan).
    pub(crate) ex: bool,
}

/// A scan's schedule: the work buffer and output of `c` around the rounds `rounds`
/// adds.
pub(crate) fn frame(c: &PlanCtx, rounds: impl FnOnce(&mut Schedule, &Parts)) -> Schedule {
    let (r, n) = (c.rank, c.block);
    let ex = c.op == OpKind::Exscan;
    let mut s = Schedule::new(3 * n, if ex && r == 0 { 0 } else { n });
    s.input.push((0..n, 0));
    let parts = Parts {
        incl: 0..n,
        excl: n..2 * n,
        tmp: 2 * n..3 * n,
        ex,
    };
    rounds(&mut s, &parts);
    if !ex {
        s.output.push((parts.incl, 0));
    } else if r > 0 {
        s.output.push((parts.excl, 0));
    }
    s
}

/// Flat: everyone sends its input to every higher rank.
pub(crate) fn flat(c: &PlanCtx) -> Schedule {
    let (p, r) = (c.size, c.rank);
    frame(c, |s, Parts { incl, excl, .. }| {
        // flat: everyone sends its input to every higher rank.
        let rd = s.round();
        for j in r + 1..p {
            rd.sends.push(SendStep {
                peer: j,
                tag: 0,
                ranges: vec![incl.clone()],
            });
        }
        for (i, j) in (0..r).rev().enumerate() {
            rd.recvs.push(RecvStep {
                peer: j,
                tag: 0,
                ranges: vec![excl.clone()],
                action: if i == 0 {
                    Action::Copy
                } else {
                    Action::ReduceLeft
                },
            });
        }
        if r > 0 {
            rd.post.push(Local::ReduceLeft {
                src: excl.clone(),
                dst: incl.start,
            });
        }
    })
}

/// Chain: member r waits for r − 1's partial, combines, passes it on.
pub(crate) fn chain(c: &PlanCtx) -> Schedule {
    let (p, r) = (c.size, c.rank);
    frame(c, |s, Parts { incl, excl, .. }| {
        if r > 0 {
            let rd = s.round();
            rd.recvs.push(RecvStep {
                peer: r - 1,
                tag: 0,
                ranges: vec![excl.clone()],
                action: Action::Copy,
            });
            rd.post.push(Local::ReduceLeft {
                src: excl.clone(),
                dst: incl.start,
            });
        }
        if r + 1 < p {
            s.round().sends.push(SendStep {
                peer: r + 1,
                tag: 0,
                ranges: vec![incl.clone()],
            });
        }
    })
}
