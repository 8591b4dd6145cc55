//! Hierarchical collectives across hosts: the `hier` algorithm.
//!
//! A team whose members sit on several hosts, at least one of them with two or more
//! members, has two internal sub-teams: its members on this rank's host (the *host
//! team*, in team-rank order; it normally holds a shared-memory channel, so its
//! collectives run `shm`) and, on the first member (lowest team rank) of each host, the
//! *leaders team* (one member per host, in host order, a host's order being that of
//! its lowest team rank; message algorithms). Teams made by `split`/`create_team` get
//! them collectively at creation; the world team gets them without communication when
//! its endpoint is built, from the job layout every rank holds (the host team takes
//! channel 0, the world's own channel, which a world spanning hosts never uses; see
//! [`CollExt::hierarchical`](crate::CollExt::hierarchical)).
//!
//! Every operation then runs as three stages, each a collective of a sub-team started
//! by the engine when the previous one finished on this member ("leader" is this host's
//! leader, *S* the number of members of the largest host, *H* the number of hosts, *P*
//! the team size, *n* the block):
//!
//! | operation | stage 1 (host) | stage 2 (leaders) | stage 3 (host) |
//! |---|---|---|---|
//! | barrier | barrier | barrier | barrier |
//! | broadcast | root's host, root not leader: broadcast from the root | broadcast from the root's host | other hosts (and the root's, if the root leads): broadcast from the leader |
//! | reduce | reduce to the leader | reduce to the root's host | root's host, root not leader: broadcast from the leader |
//! | allreduce | reduce to the leader | allreduce | broadcast from the leader |
//! | gather_all | gather to the leader | gather_all of `S·n` (padded) | leader permutes to team-rank order; broadcast of `P·n` |
//! | gather | gather to the leader | gather of `S·n` to the root's host | root's host, root not leader: broadcast of `P·n` (permuted) |
//! | scatter | root's host, root not leader: broadcast of `P·n` from the root | scatter of `S·n` (per-host blocks) | scatter of `n` |
//! | exchange | gather of `P·n` to the leader | exchange of `S·S·n` (source × destination) | scatter of `P·n` (permuted) |
//! | reduce_scatter | reduce of `P·n` to the leader | reduce_scatter of `S·n` (per-host blocks) | scatter of `n` |
//! | scan, exscan (host ranges) | gather to the leader, which folds its host's prefixes | exscan of the host totals | leader combines; scatter of `n` |
//! | scan, exscan (other placements) | gather to the leader | gather_all of `S·n` (padded) | leader folds in team-rank order; scatter of `n` |
//!
//! **Unequal and interleaved hosts.** Hosts may hold different numbers of members and a
//! host's members need not be a contiguous team-rank range (ranks placed round-robin).
//! The leaders' collectives take equal blocks, so a host's contribution is padded to
//! the largest host's (`S·n`; exchange: `S·S·n`): the leaders stage moves `H·S·n`
//! instead of `P·n` bytes (nothing more on equal hosts, up to `H/P·S` times more when
//! one host is much larger than the others). Leaders put blocks back in team-rank
//! order by each member's (host, rank in host).
//!
//! **Order of reductions.** Reductions combine per host first and then across hosts in
//! host order. That is team-rank order only when every host's members form a
//! contiguous team-rank range ([`Query::host_ranges`]); otherwise `hier` takes only
//! commutative operators for reduce, allreduce and reduce_scatter. Scan and exscan
//! are exact for every operator and placement: on host ranges the leaders' exscan of
//! host totals is in rank order, on other placements every leader folds all `P`
//! inputs in team-rank order itself (`P` combines per leader instead of `S`).
//!
//! Entry and exit synchronisation `All` are left to the flat algorithms (not
//! offered), and so is single address mode. Collectives of one team run their stages
//! one collective at a time (the engine starts the next once the previous finished
//! here), so the sub-teams see their collectives in the same order on every member.
//! Sub-collectives are chosen by the model, a profile or an override, never timed
//! online (an online trial is itself a collective of the sub-team and would interleave
//! with the stages).

use crate::algo::{Algorithm, Builtin, Kind, PlanCtx, Query};
use crate::loggp::LogGP;
use crate::op::{AddrMode, OpKind, SyncMode, Transport};
use crate::sched::{ReduceFn, Schedule};
use crate::shm::Shm;
use gex_core::Team;
use std::collections::HashMap;

/// Which host every member of a team is on.
#[derive(Debug)]
pub(crate) struct Layout {
    /// Per team rank: (host index, rank in its host team).
    pub(crate) place: Vec<(u32, u32)>,
    /// Per host index: its members' team ranks, ascending (the first is its leader).
    pub(crate) hosts: Vec<Vec<u32>>,
}

impl Layout {
    /// The layout of a team whose member `r` is on host id `host_ids[r]`; hosts are
    /// numbered in the order of their lowest team rank. `None` unless there are two
    /// or more hosts and at least one of them holds two or more members.
    pub(crate) fn new(host_ids: &[u32]) -> Option<Layout> {
        let mut index: HashMap<u32, usize> = HashMap::new();
        let mut hosts: Vec<Vec<u32>> = Vec::new();
        let mut place = Vec::with_capacity(host_ids.len());
        for (r, h) in host_ids.iter().enumerate() {
            let i = *index.entry(*h).or_insert_with(|| {
                hosts.push(Vec::new());
                hosts.len() - 1
            });
            place.push((i as u32, hosts[i].len() as u32));
            hosts[i].push(r as u32);
        }
        (hosts.len() >= 2 && hosts.len() < host_ids.len()).then_some(Layout { place, hosts })
    }

    /// The leaders' team ranks, in host order.
    pub(crate) fn leaders(&self) -> Vec<u32> {
        self.hosts.iter().map(|h| h[0]).collect()
    }

    /// Every host's members form a contiguous team-rank range (then hosts follow one
    /// another in team-rank order, as they are numbered by their lowest rank).
    pub(crate) fn ranges(&self) -> bool {
        self.hosts
            .iter()
            .all(|h| h.windows(2).all(|w| w[1] == w[0] + 1))
    }

    /// Members of the largest host.
    pub(crate) fn widest(&self) -> usize {
        self.hosts.iter().map(Vec::len).max().unwrap_or(0)
    }
}

/// The sub-teams of a hierarchical team.
#[derive(Debug)]
pub(crate) struct Hier {
    /// This member's host team.
    pub(crate) host: Team,
    /// The leaders team, on leaders only.
    pub(crate) leaders: Option<Team>,
    /// Where every member is.
    pub(crate) layout: Layout,
    /// [`Layout::ranges`], computed once.
    pub(crate) ranges: bool,
}

impl Hier {
    /// The hierarchy of a member: its host team, the leaders team (on leaders only)
    /// and the layout, whose [`Layout::ranges`] it computes once.
    pub(crate) fn new(host: Team, leaders: Option<Team>, layout: Layout) -> Hier {
        let ranges = layout.ranges();
        Hier {
            host,
            leaders,
            layout,
            ranges,
        }
    }

    /// Number of hosts.
    pub(crate) fn hosts(&self) -> u32 {
        self.layout.hosts.len() as u32
    }
}

/// The `hier` algorithm (see the module docs).
#[derive(Debug, Default)]
pub struct HierAlgo;

impl Algorithm for HierAlgo {
    fn name(&self) -> &str {
        "hier"
    }

    fn supports(&self, q: &Query) -> bool {
        q.hier
            && q.addr == AddrMode::Local
            && (q.commutative
                || !q.op.reduces()
                || q.host_ranges
                || matches!(q.op, OpKind::Scan | OpKind::Exscan))
            && q.sync.input != SyncMode::All
            && q.sync.output != SyncMode::All
    }

    fn cost(&self, q: &Query, m: &LogGP) -> f64 {
        use OpKind::*;
        let p = q.size.max(2);
        // Without the host count (a query built by hand): half the members, the most
        // hosts a team with a shared host can have.
        let h = if q.hosts >= 2 { q.hosts } else { p / 2 }.clamp(2, p);
        // The largest host holds at least this many members.
        let s = p.div_ceil(h);
        let (sf, n) = (f64::from(s), q.bytes);
        // A host stage: the `shm` model on `s` members.
        let shm = |op: OpKind, bytes: usize| {
            let sub = Query {
                op,
                size: s,
                bytes,
                sync: Default::default(),
                scratch: false,
                shm: true,
                hier: false,
                hosts: 0,
                host_ranges: false,
                ..*q
            };
            Shm.cost(&sub, m)
        };
        // The leaders stage: the cheapest built-in message algorithm's model on `h`
        // members. All-to-all traffic (gather_all, exchange, reduce_scatter, the
        // scan of other placements): the message algorithms' models let every member
        // of a host send across hosts at the full rate `G` at once, while they share
        // the host's link; the leader alone uses it here, so it gets `G / s` (the
        // same convention).
        let catalog = crate::algo::messages();
        let leaders = |op: OpKind, bytes: usize, all_to_all: bool| {
            let sub = Query {
                op,
                size: h,
                bytes,
                sync: Default::default(),
                scratch: false,
                shm: false,
                hier: false,
                hosts: 0,
                host_ranges: false,
                ..*q
            };
            let m = if all_to_all {
                LogGP {
                    big_g: m.big_g / sf,
                    ..*m
                }
            } else {
                *m
            };
            catalog
                .iter()
                .filter(|a| a.ops().contains(&op) && a.supports(&sub))
                .map(|a| a.cost(&sub, &m))
                .fold(f64::INFINITY, f64::min)
        };
        // A root that does not lead its host (chance (s-1)/s) adds a host stage.
        let not_leader = (sf - 1.0) / sf;
        let (pn, sn) = (p as usize * n, s as usize * n);
        match q.op {
            Barrier => 2.0 * shm(Barrier, 0) + leaders(Barrier, 0, false),
            Broadcast => 2.0 * shm(Broadcast, n) + leaders(Broadcast, n, false),
            Reduce => shm(Reduce, n) + leaders(Reduce, n, false) + not_leader * shm(Broadcast, n),
            Allreduce => shm(Reduce, n) + leaders(Allreduce, n, false) + shm(Broadcast, n),
            GatherAll => shm(Gather, n) + leaders(GatherAll, sn, true) + shm(Broadcast, pn),
            Gather => shm(Gather, n) + leaders(Gather, sn, false) + not_leader * shm(Broadcast, pn),
            Scatter => {
                not_leader * shm(Broadcast, pn) + leaders(Scatter, sn, false) + shm(Scatter, n)
            }
            Exchange => {
                shm(Gather, pn) + leaders(Exchange, s as usize * sn, true) + shm(Scatter, pn)
            }
            ReduceScatter => shm(Reduce, pn) + leaders(ReduceScatter, sn, true) + shm(Scatter, n),
            Scan | Exscan if q.host_ranges => {
                shm(Gather, n)
                    + 2.0 * sn as f64 * m.copy
                    + leaders(Exscan, n, false)
                    + shm(Scatter, n)
            }
            Scan | Exscan => {
                shm(Gather, n) + leaders(GatherAll, sn, true) + pn as f64 * m.copy + shm(Scatter, n)
            }
        }
    }

    fn plan(&self, ctx: &PlanCtx) -> Schedule {
        // The equivalent message schedule (used only by the schedule model).
        Builtin::new(Kind::Flat, 0, 0, Transport::Eager).plan(ctx)
    }

    fn is_hierarchical(&self) -> bool {
        true
    }
}

/// One sub-collective to start.
#[derive(Debug)]
pub(crate) struct Call {
    /// The host team or the leaders team.
    pub(crate) team: Team,
    pub(crate) op: OpKind,
    /// Root, in the sub-team.
    pub(crate) root: u32,
    /// Elements per block.
    pub(crate) count: usize,
    /// This member's input (sized for the sub-collective).
    pub(crate) input: Vec<u8>,
    /// Pass the reduction operator (reducing sub-collectives only, so that the others
    /// are chosen as non-reducing ones).
    pub(crate) reduces: bool,
}

/// Stages of every hierarchical collective.
pub(crate) const STAGES: u8 = 3;

/// A hierarchical collective in flight on one member.
pub(crate) struct HierOp {
    pub(crate) op: OpKind,
    pub(crate) root: u32,
    pub(crate) elem: usize,
    pub(crate) count: usize,
    /// The bytes carried from stage to stage.
    data: Vec<u8>,
    /// A leader's prefixes of its host (scan and exscan on host ranges).
    keep: Vec<u8>,
    pub(crate) reduce: Option<(ReduceFn, bool)>,
    /// Next stage to start ([`STAGES`]: done).
    pub(crate) stage: u8,
    /// The sub-collective in flight.
    pub(crate) sub: Option<u64>,
    /// The stage whose sub-team was probed about this collective (its stall checks,
    /// [`crate::rootcheck`]: a member that passed another descriptor may have run
    /// another algorithm, whose messages this member's stages never take).
    pub(crate) probed: Option<u8>,
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

/// `data` resized to the input of `op` for member `rank` of `size` (root `root`) with
/// `n`-byte blocks (at least one block: members without input pass a dummy one; a
/// barrier's block is its entry).
fn sized(
    mut data: Vec<u8>,
    op: OpKind,
    (size, rank, root): (usize, u32, u32),
    n: usize,
) -> Vec<u8> {
    data.resize(op.shape(size as u32, rank, root).0.max(1) * n, 0);
    data
}

impl HierOp {
    /// A hierarchical `op` of this member's `input` (`count` elements of `elem`
    /// bytes per block).
    pub(crate) fn new(
        op: OpKind,
        root: u32,
        (elem, count): (usize, usize),
        input: Vec<u8>,
        reduce: Option<(ReduceFn, bool)>,
    ) -> HierOp {
        HierOp {
            op,
            root,
            elem,
            count,
            data: input,
            keep: Vec::new(),
            reduce,
            stage: 0,
            sub: None,
            probed: None,
        }
    }

    /// The sub-collective of the next stage for member `me`, or `None` if this member
    /// sits the stage out (its data stays for the stage after); moves to the next
    /// stage.
    pub(crate) fn next_call(&mut self, h: &Hier, me: u32) -> Option<Call> {
        use OpKind::*;
        let stage = self.stage;
        self.stage += 1;
        let l = &h.layout;
        let (g, j) = l.place[me as usize];
        let (rg, rj) = l.place[self.root as usize];
        // The root's host, when the root does not lead it: an extra host stage there.
        let root_follows = g == rg && rj != 0;
        let skip = match (self.op, stage) {
            (_, 1) => h.leaders.is_none(),
            (Broadcast | Scatter, 0) | (Reduce | Gather, 2) => !root_follows,
            (Broadcast, 2) => root_follows,
            _ => false,
        };
        if skip {
            return None;
        }
        let (big_h, s, p) = (l.hosts.len(), l.widest(), l.place.len());
        let sg = l.hosts[g as usize].len();
        let (elem, c, n) = (self.elem, self.count, self.elem * self.count);
        let data = std::mem::take(&mut self.data);
        let lead = j == 0;
        let (team, op, root, count, input) = match (self.op, stage) {
            // A barrier carries its merged entry (one 16-byte block) from stage to
            // stage: host, leaders, host again (which spreads the leaders' merge).
            (Barrier, 1) => (None, Barrier, 0, 1, data),
            (Barrier, _) => (Some(j), Barrier, 0, 1, data),

            (Broadcast, 0) => (Some(j), Broadcast, rj, c, data),
            (Broadcast, 1) => (None, Broadcast, rg, c, data),
            (Broadcast, _) => (Some(j), Broadcast, 0, c, data),

            (Reduce | Allreduce, 0) => (Some(j), Reduce, 0, c, data),
            (Reduce, 1) => (None, Reduce, rg, c, data),
            (Allreduce, 1) => (None, Allreduce, 0, c, data),
            (Reduce | Allreduce, _) => (Some(j), Broadcast, 0, c, data),

            (GatherAll | Gather | Scan | Exscan, 0) => (Some(j), Gather, 0, c, data),
            (GatherAll, 1) => (None, GatherAll, 0, s * c, data),
            (Gather, 1) => (None, Gather, rg, s * c, data),
            (GatherAll | Gather, _) => (Some(j), Broadcast, 0, p * c, data),

            (Scatter, 0) => (Some(j), Broadcast, rj, p * c, data),
            (Scatter, 1) => {
                let input = if g == rg {
                    spread(l, &data, n)
                } else {
                    Vec::new()
                };
                (None, Scatter, rg, s * c, input)
            }

            (Exchange, 0) => (Some(j), Gather, 0, p * c, data),
            (Exchange, 1) => (None, Exchange, 0, s * s * c, pack(l, g, &data, n)),
            (Exchange, _) => (Some(j), Scatter, 0, p * c, data),

            (ReduceScatter, 0) => (Some(j), Reduce, 0, p * c, data),
            (ReduceScatter, 1) => (None, ReduceScatter, 0, s * c, spread(l, &data, n)),

            (Scan | Exscan, 1) if h.ranges => (None, Exscan, 0, c, data),
            (Scan | Exscan, 1) => (None, GatherAll, 0, s * c, data),
            (Scatter | ReduceScatter | Scan | Exscan, _) => (Some(j), Scatter, 0, c, data),
        };
        debug_assert!(team.is_some() || lead);
        // Host stages: this member's host rank; leaders stages: its host index.
        let (team, size, rank) = match team {
            Some(j) => (h.host.clone(), sg, j),
            None => (h.leaders.clone()?, big_h, g),
        };
        Some(Call {
            team,
            op,
            root,
            count,
            input: sized(input, op, (size, rank, root), count * elem),
            reduces: op.reduces(),
        })
    }

    /// Takes `out`, the output of the sub-collective of the stage just finished on
    /// member `me`.
    pub(crate) fn absorb(&mut self, h: &Hier, me: u32, out: Vec<u8>) {
        use OpKind::*;
        if self.op == Barrier {
            self.data = out;
            return;
        }
        let stage = self.stage - 1;
        let l = &h.layout;
        let (g, j) = l.place[me as usize];
        let lead = j == 0;
        let n = self.elem * self.count;
        let sg = l.hosts[g as usize].len();
        let f = self.reduce.as_ref().map(|r| &r.0);
        self.data = match (self.op, stage) {
            (GatherAll, 1) => unpad(l, &out, n),
            (Gather, 1) if g == l.place[self.root as usize].0 => unpad(l, &out, n),
            (Exchange, 1) if lead => unpack(l, g, &out, n),
            (Scan | Exscan, 0) if lead => {
                let f = f.expect("a scan has a reduction operator");
                if h.ranges {
                    // This host's inclusive prefixes; the total goes to the leaders.
                    let mut pre = out;
                    for k in 1..sg {
                        let (a, b) = pre.split_at_mut(k * n);
                        f(&mut b[..n], &a[(k - 1) * n..], true);
                    }
                    let total = pre[(sg - 1) * n..].to_vec();
                    self.keep = pre;
                    total
                } else {
                    // Padded for the leaders' gather_all.
                    let mut x = out;
                    x.resize(l.widest() * n, 0);
                    x
                }
            }
            (Scan | Exscan, 1) if lead => {
                let f = f.expect("a scan has a reduction operator");
                let exclusive = self.op == Exscan;
                if h.ranges {
                    let pre = std::mem::take(&mut self.keep);
                    // `out`: the hosts before this one combined (nothing on host 0).
                    let before = (g > 0).then_some(out);
                    let mut res = vec![0u8; sg * n];
                    for k in 0..sg {
                        let dst = &mut res[k * n..(k + 1) * n];
                        let own = if exclusive {
                            k.checked_sub(1).map(|i| &pre[i * n..(i + 1) * n])
                        } else {
                            Some(&pre[k * n..(k + 1) * n])
                        };
                        match (own, &before) {
                            (Some(o), Some(b)) => {
                                dst.copy_from_slice(o);
                                f(dst, b, true);
                            }
                            (Some(o), None) => dst.copy_from_slice(o),
                            (None, Some(b)) => dst.copy_from_slice(b),
                            (None, None) => {}
                        }
                    }
                    res
                } else {
                    fold_all(l, g, &out, n, f, exclusive)
                }
            }
            _ => out,
        };
    }

    /// The final output of member `me`.
    pub(crate) fn output(&mut self, me: u32) -> Vec<u8> {
        use OpKind::*;
        match self.op {
            Reduce | Gather if me != self.root => Vec::new(),
            Exscan if me == 0 => Vec::new(),
            _ => std::mem::take(&mut self.data),
        }
    }
}

/// The leaders' padded gather (`H` blocks of `S·n`, host by host) in team-rank order
/// (`P·n`).
fn unpad(l: &Layout, all: &[u8], n: usize) -> Vec<u8> {
    let s = l.widest();
    let mut out = vec![0u8; l.place.len() * n];
    for (q, members) in l.hosts.iter().enumerate() {
        for (k, &r) in members.iter().enumerate() {
            let src = (q * s + k) * n;
            out[r as usize * n..(r as usize + 1) * n].copy_from_slice(&all[src..src + n]);
        }
    }
    out
}

/// Team-rank-ordered blocks (`P·n`) as per-host blocks of `S·n` (`H·S·n`): host `q`'s
/// members' blocks in host order, padded with copies of its first member's (valid
/// operands for a reduction; the padding is never used).
fn spread(l: &Layout, data: &[u8], n: usize) -> Vec<u8> {
    let s = l.widest();
    let mut out = vec![0u8; l.hosts.len() * s * n];
    for (q, members) in l.hosts.iter().enumerate() {
        for k in 0..s {
            let r = *members.get(k).unwrap_or(&members[0]) as usize;
            let dst = (q * s + k) * n;
            out[dst..dst + n].copy_from_slice(&data[r * n..(r + 1) * n]);
        }
    }
    out
}

/// Exchange, leaders stage input: the gathered inputs of host `g`'s members (`sg`
/// rows of `P·n`) as one `S·S·n` block per destination host (source member ×
/// destination member, both padded to `S`).
fn pack(l: &Layout, g: u32, data: &[u8], n: usize) -> Vec<u8> {
    let (s, p) = (l.widest(), l.place.len());
    let mine = &l.hosts[g as usize];
    let mut out = vec![0u8; l.hosts.len() * s * s * n];
    for (q, dests) in l.hosts.iter().enumerate() {
        for k in 0..mine.len() {
            for (t, &d) in dests.iter().enumerate() {
                let src = (k * p + d as usize) * n;
                let dst = ((q * s + k) * s + t) * n;
                out[dst..dst + n].copy_from_slice(&data[src..src + n]);
            }
        }
    }
    out
}

/// Exchange, after the leaders stage: the blocks from every source host (`S·S·n`
/// each) as the outputs of host `g`'s members (`sg` rows of `P·n` in team-rank
/// order of the sources).
fn unpack(l: &Layout, g: u32, all: &[u8], n: usize) -> Vec<u8> {
    let (s, p) = (l.widest(), l.place.len());
    let sg = l.hosts[g as usize].len();
    let mut out = vec![0u8; sg * p * n];
    for (q, srcs) in l.hosts.iter().enumerate() {
        for (k, &r) in srcs.iter().enumerate() {
            for t in 0..sg {
                let src = ((q * s + k) * s + t) * n;
                let dst = (t * p + r as usize) * n;
                out[dst..dst + n].copy_from_slice(&all[src..src + n]);
            }
        }
    }
    out
}

/// Scan or exscan on a placement that is not host ranges: from every member's input
/// (the leaders' padded gather_all), the outputs of host `g`'s members, folding in
/// team-rank order (exact for non-commutative operators).
fn fold_all(l: &Layout, g: u32, all: &[u8], n: usize, f: &ReduceFn, exclusive: bool) -> Vec<u8> {
    let s = l.widest();
    let mine = &l.hosts[g as usize];
    let last = *mine.last().expect("a host has members") as usize;
    let mut res = vec![0u8; mine.len() * n];
    let mut acc: Option<Vec<u8>> = None;
    for &(hq, kq) in l.place.iter().take(last + 1) {
        let src = (hq as usize * s + kq as usize) * n;
        let x = &all[src..src + n];
        let dst = kq as usize * n..(kq as usize + 1) * n;
        if exclusive && hq == g {
            if let Some(a) = &acc {
                res[dst.clone()].copy_from_slice(a);
            }
        }
        match &mut acc {
            None => acc = Some(x.to_vec()),
            Some(a) => f(a, x, false),
        }
        if !exclusive && hq == g {
            res[dst].copy_from_slice(acc.as_deref().unwrap_or_default());
        }
    }
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts() {
        assert!(Layout::new(&[0, 0, 0]).is_none());
        assert!(Layout::new(&[0, 1, 2]).is_none());
        let l = Layout::new(&[7, 3, 7, 3, 5]).unwrap();
        assert_eq!(l.hosts, vec![vec![0, 2], vec![1, 3], vec![4]]);
        assert_eq!(l.place, vec![(0, 0), (1, 0), (0, 1), (1, 1), (2, 0)]);
        assert_eq!(l.leaders(), vec![0, 1, 4]);
        assert!(!l.ranges());
        assert_eq!(l.widest(), 2);
        let l = Layout::new(&[4, 4, 4, 1, 1, 9]).unwrap();
        assert!(l.ranges());
        assert_eq!(l.widest(), 3);
    }

    #[test]
    fn exchange_pack_unpack() {
        // Hosts {0, 2} and {1}: member r's block for d is the byte 10·r + d.
        let l = Layout::new(&[0, 1, 0]).unwrap();
        let row = |r: u8| (0..3).map(|d| 10 * r + d).collect::<Vec<u8>>();
        let host0: Vec<u8> = [row(0), row(2)].concat();
        let host1 = row(1);
        let p0 = pack(&l, 0, &host0, 1);
        let p1 = pack(&l, 1, &host1, 1);
        // The leaders' exchange of S·S = 4-byte blocks.
        let to0: Vec<u8> = [&p0[0..4], &p1[0..4]].concat();
        let to1: Vec<u8> = [&p0[4..8], &p1[4..8]].concat();
        let out0 = unpack(&l, 0, &to0, 1);
        let out1 = unpack(&l, 1, &to1, 1);
        // Member d gets block d of every source, sources in team-rank order.
        assert_eq!(out0, vec![0, 10, 20, 2, 12, 22]);
        assert_eq!(out1, vec![1, 11, 21]);
    }
}
