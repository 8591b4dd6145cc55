//! Hierarchical collectives across hosts: the `hier` algorithm.
//!
//! A team whose members sit on several hosts, at least one of them with two or more
//! members, gets two internal sub-teams at creation: its members on this rank's host
//! (the *host team*, in team-rank order; it holds a shared-memory channel, so its
//! collectives run `shm`) and, on the first member of each host, the *leaders team*
//! (one member per host, in host order; message algorithms). A collective then runs in
//! three stages, each a collective of a sub-team started by the engine when the
//! previous one finished here:
//!
//! | operation | stage 1 (host) | stage 2 (leaders) | stage 3 (host) |
//! |---|---|---|---|
//! | barrier | barrier | barrier | barrier |
//! | allreduce | reduce to the leader | allreduce | broadcast from the leader |
//! | reduce | reduce to the leader | reduce to the root's host leader | root's host, root not leader: broadcast from the leader |
//! | broadcast | root's host, root not leader: broadcast from the root | broadcast from the root's host | other hosts (and the root's, if the root leads): broadcast from the leader |
//!
//! Reductions combine per host first, so only commutative operators qualify. Entry
//! and exit synchronisation `All` are left to the flat algorithms (not offered).
//! Collectives of one team run their stages one collective at a time (the engine
//! starts the next once the previous finished here), so the sub-teams see their
//! collectives in the same order on every member.

use crate::algo::{Algorithm, Builtin, Kind, PlanCtx, Query};
use crate::op::{AddrMode, OpKind, SyncMode, Transport};
use crate::sched::Schedule;
use crate::team::Team;
use crate::tune::LogGP;

/// The sub-teams of a hierarchical team.
#[derive(Debug)]
pub(crate) struct Hier {
    /// This member's host team.
    pub(crate) host: Team,
    /// The leaders team, on leaders only.
    pub(crate) leaders: Option<Team>,
    /// Per team rank: (host index, rank in its host team).
    pub(crate) place: Vec<(u32, u32)>,
}

/// The `hier` algorithm (see the module docs).
#[derive(Debug, Default)]
pub struct HierAlgo;

const OPS: [OpKind; 4] = [
    OpKind::Barrier,
    OpKind::Broadcast,
    OpKind::Reduce,
    OpKind::Allreduce,
];

impl Algorithm for HierAlgo {
    fn name(&self) -> &str {
        "hier"
    }

    fn ops(&self) -> &[OpKind] {
        &OPS
    }

    fn supports(&self, q: &Query) -> bool {
        q.hier
            && q.addr == AddrMode::Local
            && OPS.contains(&q.op)
            && (q.commutative || !q.op.reduces())
            && q.sync.input != SyncMode::All
            && q.sync.output != SyncMode::All
    }

    fn cost(&self, q: &Query, m: &LogGP) -> f64 {
        let p = f64::from(q.size.max(2));
        let n = q.bytes as f64;
        let msg = m.l + 2.0 * m.o + n * (m.big_g + m.copy);
        // Two shared-memory stages (a flag handoff and two copies each) and a tree
        // over the hosts (at most half the members).
        2.0 * (m.o + 2.0 * n * m.copy) + (p.log2() - 1.0).max(1.0) * msg
    }

    fn plan(&self, ctx: &PlanCtx) -> Schedule {
        // The equivalent message schedule (used only by the schedule model).
        Builtin::new(Kind::Flat, 0, 0, Transport::Eager).plan(ctx)
    }

    fn is_hierarchical(&self) -> bool {
        true
    }
}

/// One stage to run: (sub-team, operation, root in the sub-team).
pub(crate) type Stage = (Team, OpKind, u32);

/// The stage `stage` (0..3) of `op` with `root` for this member, if it takes part.
pub(crate) fn stage(h: &Hier, me: u32, op: OpKind, root: u32, stage: u8) -> Option<Stage> {
    let (my_host, my_hr) = h.place[me as usize];
    let (root_host, root_hr) = h.place[root as usize];
    let host = || h.host.clone();
    match (op, stage) {
        (OpKind::Barrier, 0 | 2) => Some((host(), OpKind::Barrier, 0)),
        (OpKind::Barrier, _) => h.leaders.clone().map(|l| (l, OpKind::Barrier, 0)),
        (OpKind::Allreduce | OpKind::Reduce, 0) => Some((host(), OpKind::Reduce, 0)),
        (OpKind::Allreduce, 1) => h.leaders.clone().map(|l| (l, OpKind::Allreduce, 0)),
        (OpKind::Allreduce, _) => Some((host(), OpKind::Broadcast, 0)),
        (OpKind::Reduce, 1) => h.leaders.clone().map(|l| (l, OpKind::Reduce, root_host)),
        (OpKind::Reduce, _) => {
            (my_host == root_host && root_hr != 0).then(|| (host(), OpKind::Broadcast, 0))
        }
        (OpKind::Broadcast, 0) => {
            (my_host == root_host && root_hr != 0).then(|| (host(), OpKind::Broadcast, root_hr))
        }
        (OpKind::Broadcast, 1) => h.leaders.clone().map(|l| (l, OpKind::Broadcast, root_host)),
        (OpKind::Broadcast, _) => {
            (my_host != root_host || root_hr == 0).then(|| (host(), OpKind::Broadcast, 0))
        }
        _ => {
            let _ = my_hr;
            None
        }
    }
}

/// A hierarchical collective in flight on one member.
pub(crate) struct HierOp {
    pub(crate) op: OpKind,
    pub(crate) root: u32,
    pub(crate) elem: usize,
    pub(crate) count: usize,
    /// The bytes carried from stage to stage.
    pub(crate) data: Vec<u8>,
    pub(crate) reduce: Option<(crate::sched::ReduceFn, bool)>,
    /// Next stage to start (3: done).
    pub(crate) stage: u8,
    /// The sub-collective in flight.
    pub(crate) sub: Option<u64>,
}

impl std::fmt::Debug for HierOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HierOp")
            .field("op", &self.op)
            .field("stage", &self.stage)
            .field("sub", &self.sub)
            .finish()
    }
}
