//! The table of collectives in flight on this endpoint ([`OpTable`], a component of
//! [`Coll`](crate::Coll)): each an [`OpState`] keyed by a local id in start order,
//! its body one of the kinds the drivers advance ([`crate::engine`] schedules over
//! AMs, [`crate::shmdrive`] shared-memory collectives and flag barriers,
//! [`crate::hierdrive`] hierarchical collectives).

use crate::barrier::ShmBar;
use crate::error::CollError;
use crate::hier::HierOp;
use crate::op::{OpKind, Transport};
use crate::ring;
use crate::rma::RmaError;
use crate::rootcheck::{Desc, Stall};
use crate::sched::{ReduceFn, Schedule};
use crate::shm::{Area, OwnedShm};
use gex_core::event::{Event, OpCompleter};
use gex_core::{EpAddr, Team};
use std::collections::{BTreeMap, HashMap};

/// The collectives in flight, by start order.
pub(crate) struct OpTable {
    ops: BTreeMap<u64, OpState>,
    next_op: u64,
}

impl OpTable {
    /// An empty table (the first collective gets id 1).
    pub(crate) fn new() -> OpTable {
        OpTable {
            ops: BTreeMap::new(),
            next_op: 1,
        }
    }

    /// Adds collective `st`; returns its id.
    pub(crate) fn add(&mut self, st: OpState) -> u64 {
        let id = self.next_op;
        self.next_op += 1;
        self.ops.insert(id, st);
        id
    }

    /// Puts back collective `id`, taken out by [`remove`](Self::remove) to be
    /// advanced alone.
    pub(crate) fn put_back(&mut self, id: u64, st: OpState) {
        self.ops.insert(id, st);
    }

    /// Collective `id`.
    #[inline]
    pub(crate) fn get(&self, id: &u64) -> Option<&OpState> {
        self.ops.get(id)
    }

    /// Collective `id`, to change.
    #[inline]
    pub(crate) fn get_mut(&mut self, id: &u64) -> Option<&mut OpState> {
        self.ops.get_mut(id)
    }

    /// Takes collective `id` out of the table.
    pub(crate) fn remove(&mut self, id: &u64) -> Option<OpState> {
        self.ops.remove(id)
    }

    /// Every collective in flight, in start order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &OpState> {
        self.ops.values()
    }

    /// True if no collective is in flight.
    #[inline(always)]
    pub(crate) fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Collectives in flight.
    pub(crate) fn len(&self) -> usize {
        self.ops.len()
    }

    /// The id of the first collective started after `id` (`None`: the first of all).
    pub(crate) fn next_after(&self, id: Option<u64>) -> Option<u64> {
        match id {
            None => self.ops.keys().next().copied(),
            Some(id) => self.ops.range(id + 1..).next().map(|(&k, _)| k),
        }
    }

    /// The collective (team, seq) in flight here.
    pub(crate) fn find(&self, team: u64, seq: u32) -> Option<u64> {
        self.ops
            .iter()
            .find(|(_, o)| o.team.id() == team && o.seq == seq)
            .map(|(&id, _)| id)
    }

    /// True if a collective of `st`'s team started before it (lower sequence number)
    /// and of the kind `kind` selects has not finished here: `st` must wait its turn.
    pub(crate) fn earlier_unfinished(&self, st: &OpState, kind: impl Fn(&OpState) -> bool) -> bool {
        let (tid, seq) = (st.team.id(), st.seq);
        self.ops
            .values()
            .any(|o| kind(o) && o.team.id() == tid && o.seq < seq && !o.taken && o.result.is_none())
    }
}

impl std::ops::Index<&u64> for OpTable {
    type Output = OpState;
    fn index(&self, id: &u64) -> &OpState {
        &self.ops[id]
    }
}

/// Where a schedule's output goes.
#[derive(Debug)]
pub(crate) enum Out {
    Local,
    /// Write the output at this offset of our segment (unless mirrored).
    Seg(usize),
}

/// A send of the current round not yet (completely) issued.
#[derive(Debug)]
pub(crate) struct PendingSend {
    /// Index in the round's sends.
    pub(crate) idx: usize,
    /// The snapshot of an eager send (taken when the round opened).
    pub(crate) data: Option<Vec<u8>>,
    /// Bytes issued so far.
    pub(crate) off: usize,
    /// A signaling put's receiver said it is ready (consumed from the mailbox).
    pub(crate) ready: bool,
}

/// A schedule executed over AMs.
pub(crate) struct SchedOp {
    pub(crate) sched: Schedule,
    pub(crate) work: Vec<u8>,
    pub(crate) reduce: Option<ReduceFn>,
    pub(crate) transport: Transport,
    /// Signaling put / rendezvous: the segment offset every member's work buffer
    /// mirrors.
    pub(crate) mirror: Option<Vec<usize>>,
    pub(crate) need_ready: bool,
    /// Mirrors the team's scratch space (local mode with put/rendezvous): starts
    /// only once earlier such collectives of the team finished here.
    pub(crate) uses_scratch: bool,
    pub(crate) round: usize,
    pub(crate) pending: Vec<PendingSend>,
    /// READY messages still to send when starting.
    pub(crate) readies: Vec<(u32, u32)>,
    pub(crate) round_open: bool,
    pub(crate) applied: usize,
    pub(crate) gets: HashMap<usize, Event<Vec<u8>, RmaError>>,
    pub(crate) fetched: HashMap<usize, Vec<u8>>,
    pub(crate) acks_expected: u32,
    pub(crate) out: Out,
    pub(crate) out_no: bool,
    /// The round whose peers were probed.
    pub(crate) probed: Option<usize>,
    /// When this member took a message of another belief and asked its sender which
    /// field differs (the collective fails with the answer, or without one after
    /// [`STALL`](crate::rootcheck::STALL) × 2).
    pub(crate) asked: Option<std::time::Instant>,
}

/// The body of a collective in flight.
pub(crate) enum Body {
    Sched(Box<SchedOp>),
    Shm(Box<OwnedShm>),
    /// A small broadcast through the ring ([`crate::ring`]).
    Ring(Box<OwnedRing>),
    Bar(ShmBar),
    Hier(Box<HierOp>),
}

/// One collective in flight on this member.
pub(crate) struct OpState {
    /// The team (with the layer's extension).
    pub(crate) team: Team,
    pub(crate) seq: u32,
    pub(crate) kind: OpKind,
    /// The descriptor members compare, and its digest ([`crate::rootcheck`]).
    pub(crate) desc: Desc,
    pub(crate) belief: u32,
    pub(crate) body: Body,
    pub(crate) started: bool,
    /// The outcome, until handed over.
    pub(crate) result: Option<Result<Vec<u8>, CollError>>,
    /// The completer of the program's event (none for stages of a hierarchical
    /// collective, whose parent takes the result).
    pub(crate) done: Option<OpCompleter>,
    /// The outcome was handed over; what remains is background work.
    pub(crate) taken: bool,
    pub(crate) stall: Stall,
    /// Members that probed this collective while it ran here with their descriptor:
    /// told if it fails ([`Coll::fail_op`](crate::Coll::fail_op)).
    pub(crate) probers: Vec<EpAddr>,
}

impl std::fmt::Debug for OpState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpState")
            .field("team", &self.team)
            .field("seq", &self.seq)
            .field("kind", &self.kind)
            .field("done", &self.result.is_some())
            .finish()
    }
}

impl OpState {
    /// One line for a hang report.
    pub(crate) fn describe(&self) -> String {
        let what = match &self.body {
            Body::Sched(s) => format!(
                "schedule round {}/{} ({} of its receives applied, {} sends pending, {} acks expected)",
                s.round,
                s.sched.rounds.len(),
                s.applied,
                s.pending.len(),
                s.acks_expected
            ),
            Body::Shm(s) => s.describe(),
            Body::Ring(r) => match r.op.wait {
                Some(w) => format!("small broadcast (ring), waits for {w}"),
                None => "small broadcast (ring)".to_string(),
            },
            Body::Bar(b) => match b.wait() {
                Some(w) => format!("shared-memory barrier, waits for {w}"),
                None => "shared-memory barrier".to_string(),
            },
            Body::Hier(h) => format!(
                "hierarchical, stage {} (stage collective {:?})",
                h.stage, h.sub
            ),
        };
        format!(
            "{} on team {:#x} seq {}{}: {what}",
            self.kind,
            self.team.id(),
            self.seq,
            match (&self.result, self.taken) {
                (_, true) => " (complete, finishing)",
                (Some(_), false) => " (complete)",
                (None, false) if !self.started => " (waiting its turn)",
                _ => "",
            }
        )
    }

    /// Runs through the team's channel (slots or ring): one at a time, in sequence
    /// order, with the team's other such collectives.
    pub(crate) fn is_shm(&self) -> bool {
        matches!(self.body, Body::Shm(_) | Body::Ring(_))
    }
    /// What a small broadcast waits for.
    pub(crate) fn ring_wait(&self) -> Option<crate::ring::Wait<crate::shm::Area>> {
        match &self.body {
            Body::Ring(r) => r.op.wait,
            _ => None,
        }
    }
    /// What a collective of the slot protocol waits for (its publisher's flag, or
    /// acknowledgements of its own).
    pub(crate) fn slot_wait(&self) -> Option<crate::shm::WaitOn> {
        match &self.body {
            Body::Shm(s) => s.wait(),
            _ => None,
        }
    }
    pub(crate) fn is_bar(&self) -> bool {
        matches!(self.body, Body::Bar(_))
    }
    pub(crate) fn is_hier(&self) -> bool {
        matches!(self.body, Body::Hier(_))
    }
    pub(crate) fn uses_scratch(&self) -> bool {
        matches!(&self.body, Body::Sched(s) if s.uses_scratch)
    }
}

/// A small broadcast in the layer's table, with buffers of its own.
pub(crate) struct OwnedRing {
    pub(crate) op: ring::Bcast<Area>,
    pub(crate) input: Vec<u8>,
    /// The output (the root's: a copy of its input).
    pub(crate) out: Vec<u8>,
}

/// The members this schedule waits for in its current round (for probes), once per
/// round; empty if they were probed already (a probed member that learns later that
/// the collective cannot complete tells this one: [`OpState::probers`]).
pub(crate) fn waited_peers(s: &mut SchedOp) -> Vec<u32> {
    if s.probed == Some(s.round) || s.round >= s.sched.rounds.len() {
        return Vec::new();
    }
    s.probed = Some(s.round);
    let mut v: Vec<u32> = s.sched.rounds[s.round].recvs[s.applied..]
        .iter()
        .map(|r| r.peer)
        .chain(
            s.pending
                .iter()
                .map(|p| s.sched.rounds[s.round].sends[p.idx].peer),
        )
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}
