//! Broadcast as scatter + gather_all (van de Geijn): the root's message splits into P
//! pieces (at element boundaries), a binomial tree scatters them (member v, relative
//! to the root, gets piece v) and a ring gather_all over the relative ranks puts all
//! of them everywhere. About 2·n bytes pass each link, against n·log2 P for a tree:
//! the large broadcasts of big teams.
//!
//! This is the catalogue's example of an algorithm outside the [`Builtin`](super::Builtin)
//! families: one module implementing [`Algorithm`] and one line in
//! [`messages`](super::messages).

use super::blocks::{join, k_ring_ag, split};
use super::cost::Cost;
use super::tree::{Tree, abs, rel, subtree_end};
use super::{Algorithm, PlanCtx, Query};
use crate::loggp::LogGP;
use crate::op::OpKind;
use crate::sched::{Action, RecvStep, Schedule, SendStep};

/// Broadcast by a binomial scatter of P pieces and a ring gather_all of the pieces
/// (named `scatter+allgather`; eager messages; any team size, any operator).
///
/// ```
/// use gex_coll::{Algorithm, OpKind, PlanCtx, ScatterAllgather};
/// let a = ScatterAllgather;
/// assert_eq!(a.name(), "scatter+allgather");
/// assert_eq!(a.ops(), &[OpKind::Broadcast]);
/// let s = a.plan(&PlanCtx { op: OpKind::Broadcast, size: 4, rank: 1, root: 0, block: 64,
///                           elem: 8, commutative: true });
/// assert_eq!((s.work_len, s.out_len), (64, 64));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScatterAllgather;

impl Algorithm for ScatterAllgather {
    fn name(&self) -> &str {
        "scatter+allgather"
    }

    fn ops(&self) -> &[OpKind] {
        &[OpKind::Broadcast]
    }

    fn supports(&self, q: &Query) -> bool {
        q.op == OpKind::Broadcast
    }

    fn cost(&self, q: &Query, m: &LogGP) -> f64 {
        let p = q.size.max(1);
        if p == 1 {
            return 0.0;
        }
        let c = Cost::new(m, p, q.bytes);
        let piece = c.nf / c.pf;
        // The scatter: log2 P hops deep, (P − 1) pieces leave the root; then P − 1
        // ring steps of one piece each.
        let scatter = c.lg2 * c.msg(0.0) + (c.pf - 1.0) * piece * (m.big_g + m.copy);
        scatter + (c.pf - 1.0) * c.msg(piece)
    }

    fn plan(&self, c: &PlanCtx) -> Schedule {
        let (p, r, root, n) = (c.size, c.rank, c.root, c.block);
        // Piece i belongs to relative rank i.
        let b = split(n, c.elem, p);
        let v = rel(r, root, p);
        let mut s = Schedule::new(n, n);
        if r == root {
            s.input.push((0..n, 0));
        }
        let t = Tree::Knomial(2);
        let end = subtree_end(t, v, p);
        if let Some(par) = t.parent(v) {
            s.round().recvs.push(RecvStep {
                peer: abs(par, root, p),
                tag: 0,
                ranges: vec![join(&b, v as usize, end as usize)],
                action: Action::Copy,
            });
        }
        let mut kids = t.children(v, p);
        kids.reverse(); // largest subtree first
        if !kids.is_empty() {
            let rd = s.round();
            for (k, ke) in kids {
                rd.sends.push(SendStep {
                    peer: abs(k, root, p),
                    tag: 0,
                    ranges: vec![join(&b, k as usize, ke as usize)],
                });
            }
        }
        // The ring runs over relative ranks: member v starts with piece v.
        let mut ring = Schedule::new(n, n);
        k_ring_ag(&mut ring, p, v, &b, 0);
        for rd in &mut ring.rounds {
            for x in &mut rd.sends {
                x.peer = abs(x.peer, root, p);
            }
            for x in &mut rd.recvs {
                x.peer = abs(x.peer, root, p);
            }
        }
        let mut s = s.then(ring, 1);
        s.output.push((0..n, 0));
        s
    }
}
