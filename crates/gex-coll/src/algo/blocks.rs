//! Block layouts and the schedule pieces that move blocks among all members: rings,
//! recursive doubling and recursive halving.

use crate::sched::{Action, RecvStep, Schedule, SendStep};
use std::ops::Range;

/// Byte ranges of `p` blocks splitting `total` bytes at element boundaries (the first
/// `count % p` blocks get one element more).
pub(crate) fn split(total: usize, elem: usize, p: u32) -> Vec<Range<usize>> {
    let elem = elem.max(1);
    let count = total / elem;
    let p = p as usize;
    let (q, rem) = (count / p, count % p);
    let mut at = 0;
    (0..p)
        .map(|i| {
            let len = (q + usize::from(i < rem)) * elem;
            let r = at..at + len;
            at += len;
            r
        })
        .collect()
}

pub(crate) fn blocks(n: usize, p: u32) -> Vec<Range<usize>> {
    (0..p as usize).map(|i| i * n..(i + 1) * n).collect()
}

pub(crate) fn join(b: &[Range<usize>], lo: usize, hi: usize) -> Range<usize> {
    b[lo].start..b[hi - 1].end
}

/// Ring reduce_scatter over block layout `b` (commutative): rank r ends with block r.
pub(crate) fn k_ring_rs(s: &mut Schedule, p: u32, r: u32, b: &[Range<usize>], base: u32) {
    k_ring(s, p, r, b, base, 1, Action::ReduceRight);
}

/// Ring gather_all over block layout `b`: rank r starts with block r.
pub(crate) fn k_ring_ag(s: &mut Schedule, p: u32, r: u32, b: &[Range<usize>], base: u32) {
    k_ring(s, p, r, b, base, 0, Action::Copy);
}

/// The ring both use: in step i rank r sends block r − i − `lag` to its successor and
/// receives block r − i − `lag` − 1 from its predecessor, applying `action`.
pub(crate) fn k_ring(
    s: &mut Schedule,
    p: u32,
    r: u32,
    b: &[Range<usize>],
    base: u32,
    lag: u32,
    action: Action,
) {
    let (next, prev) = ((r + 1) % p, (r + p - 1) % p);
    for i in 0..p.saturating_sub(1) {
        let sb = ((r + 2 * p - i - lag) % p) as usize;
        let rb = ((r + 2 * p - i - lag - 1) % p) as usize;
        let rd = s.round();
        rd.sends.push(SendStep {
            peer: next,
            tag: base + i,
            ranges: vec![b[sb].clone()],
        });
        rd.recvs.push(RecvStep {
            peer: prev,
            tag: base + i,
            ranges: vec![b[rb].clone()],
            action,
        });
    }
}

/// Recursive-doubling gather_all over block layout `b` (power-of-two `p`).
pub(crate) fn k_recdbl_ag(s: &mut Schedule, p: u32, r: u32, b: &[Range<usize>], base: u32) {
    let mut d = 1u32;
    let mut k = 0;
    while d < p {
        let partner = r ^ d;
        let mine = (r / d * d) as usize;
        let theirs = (partner / d * d) as usize;
        let rd = s.round();
        rd.sends.push(SendStep {
            peer: partner,
            tag: base + k,
            ranges: vec![join(b, mine, mine + d as usize)],
        });
        rd.recvs.push(RecvStep {
            peer: partner,
            tag: base + k,
            ranges: vec![join(b, theirs, theirs + d as usize)],
            action: Action::Copy,
        });
        d *= 2;
        k += 1;
    }
}

/// Recursive-halving reduce_scatter over block layout `b` (power-of-two `p`,
/// commutative).
pub(crate) fn k_rechalv_rs(s: &mut Schedule, p: u32, r: u32, b: &[Range<usize>], base: u32) {
    let (mut lo, mut hi) = (0usize, p as usize);
    let mut mask = p / 2;
    let mut k = 0;
    while mask >= 1 {
        let partner = r ^ mask;
        let mid = (lo + hi) / 2;
        let (keep, give) = if r & mask == 0 {
            ((lo, mid), (mid, hi))
        } else {
            ((mid, hi), (lo, mid))
        };
        let rd = s.round();
        rd.sends.push(SendStep {
            peer: partner,
            tag: base + k,
            ranges: vec![join(b, give.0, give.1)],
        });
        rd.recvs.push(RecvStep {
            peer: partner,
            tag: base + k,
            ranges: vec![join(b, keep.0, keep.1)],
            action: Action::ReduceRight,
        });
        (lo, hi) = keep;
        mask /= 2;
        k += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_blocks() {
        assert_eq!(split(40, 4, 3), vec![0..16, 16..28, 28..40]);
        assert_eq!(split(4, 4, 3), vec![0..4, 4..4, 4..4]);
    }
}
