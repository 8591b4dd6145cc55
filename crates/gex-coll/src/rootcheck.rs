//! Agreement on roots: members that name different roots (or start different
//! collectives at the same point of a team's sequence) get
//! [`CollError::RootMismatch`](crate::CollError::RootMismatch) instead of waiting
//! forever. What a program sees is documented on [`Root`](crate::Root).
//!
//! Every collective has a *belief*: a 32-bit digest of its operation, its root and,
//! for a stage of a hierarchical collective, the parent's collective and root. Two
//! members that run the same collective have the same belief; the checks compare
//! beliefs where members already meet, and look further only when a member stalls:
//!
//! - **Messages** carry the sender's belief; a receiver that takes a message with
//!   another belief than its own fails the collective.
//! - **Stalls over messages.** A member whose collective has made no progress for
//!   50 ms sends a *probe* with its belief to each member it waits for in the
//!   current round. A probed member that runs (or ran, or will run) that collective
//!   with another belief, or whose part failed, fails its own part if it still runs
//!   and answers with an abort. This catches the cases where nobody ever sends to a
//!   member that disagrees (two members that each take the other for the root of a
//!   broadcast wait for each other and send nothing).
//! - **Shared memory.** Every member writes its belief and its last finished
//!   collective into its area's check line (one store each, in its own cache line).
//!   A member stalled on another member's flag reads that member's check line: the
//!   same collective with another belief, or a member that went past the collective
//!   without publishing what this one waits for, is a mismatch; so is a member that
//!   waits for acknowledgements that can no longer come (every member has finished
//!   the collective they belong to).
//! - **Telling everyone.** The member that detects a mismatch fails its part, sends
//!   an abort to every member of the team (whose part then fails too, unless it has
//!   completed) and, on a shared-memory team, sets its `POISON` word: a stalled member
//!   that sees it fails as well. A shared-memory team stays poisoned (its
//!   acknowledgement counts no longer agree): every later collective of it that has
//!   to wait fails with the error too.
//!
//! Nothing here runs on a collective that makes progress: the fast paths only compare
//! a word they already read (messages) or store one word more (shared memory).

use crate::msg::Probe;
use crate::op::OpKind;
use crate::ring::VALID;
use crate::ring::Wait;
use crate::shm::{ShmTeam, WaitOn};
use crate::teams::mix_all;
use gex_sync::atomic::Ordering;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// How long a collective may make no progress before the stall checks run (probes,
/// shared-memory check lines); they run again every [`STALL`] after.
pub(crate) const STALL: Duration = Duration::from_millis(50);

/// The belief of a collective: a digest of its operation, its root and its context (0
/// for a program's collective; for a stage of a hierarchical one, a digest of the
/// parent's team, sequence number, root and stage).
pub(crate) fn belief(kind: OpKind, root: u32, ctx: u64) -> u32 {
    mix_all(&[kind as u64, u64::from(root), ctx]) as u32
}

/// Check line words (per channel, [`crate::shm`]). `TAG` and `DONE` are also the
/// small-broadcast ring's claim and acknowledgement words ([`crate::ring`]).
pub(crate) const TAG: usize = 0;
const BELIEF: usize = 1;
pub(crate) const DONE: usize = 2;
const POISON: usize = 3;

/// Prepares this member's check line for team `t` (when it takes the channel):
/// beliefs and finished collectives of earlier teams on the channel never count.
pub(crate) fn claim(t: &ShmTeam) {
    let own = t.areas[t.me as usize];
    own.chk(t.ch, BELIEF).store(0, Ordering::Relaxed);
    own.chk(t.ch, DONE).store(0, Ordering::Relaxed);
    own.chk(t.ch, POISON).store(0, Ordering::Relaxed);
    own.chk(t.ch, TAG)
        .store(u64::from(t.tag) | VALID, Ordering::Release);
}

/// This member starts collective `seq` (through the slots) with `belief`.
#[inline]
pub(crate) fn announce(t: &ShmTeam, seq: u32, belief: u32) {
    let own = t.areas[t.me as usize];
    own.chk(t.ch, BELIEF).store(
        (u64::from(seq) << 32) | u64::from(belief),
        Ordering::Release,
    );
}

/// This member finished collective `seq` (through the slots).
#[inline]
pub(crate) fn finished(t: &ShmTeam, seq: u32) {
    let own = t.areas[t.me as usize];
    own.chk(t.ch, DONE)
        .store(u64::from(seq) | VALID, Ordering::Release);
}

/// This member saw a mismatch on team `t`.
pub(crate) fn poison(t: &ShmTeam) {
    let own = t.areas[t.me as usize];
    own.chk(t.ch, POISON).store(1, Ordering::Release);
}

/// Member `q`'s check line, if `q` is on team `t` already: (belief word, done word,
/// poisoned).
fn line(t: &ShmTeam, q: u32) -> Option<(u64, u64, bool)> {
    let a = t.areas[q as usize];
    if a.chk(t.ch, TAG).load(Ordering::Acquire) != u64::from(t.tag) | VALID {
        return None;
    }
    Some((
        a.chk(t.ch, BELIEF).load(Ordering::Acquire),
        a.chk(t.ch, DONE).load(Ordering::Acquire),
        a.chk(t.ch, POISON).load(Ordering::Acquire) != 0,
    ))
}

/// `a` comes after `b` in sequence order (wrapping).
fn after(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

/// The stall check of a shared-memory collective `seq` with `belief` of this member,
/// stalled on `w`: true if it can never complete (a mismatch, here or seen by
/// another member).
pub(crate) fn shm_stalled(t: &ShmTeam, seq: u32, belief: u32, w: &WaitOn) -> bool {
    match *w {
        WaitOn::Post { q, .. } | WaitOn::Ring(Wait::Post { q, .. }) => {
            let Some((b, _, poisoned)) = line(t, q) else {
                return false;
            };
            let (qs, qb) = ((b >> 32) as u32, b as u32);
            poisoned
                || (b != 0 && qs == seq && qb != belief)
                // Went past this collective without publishing for this member.
                || (b != 0 && after(qs, seq) && !w.ready())
        }
        WaitOn::Epoch { q, .. } => {
            let Some((b, _, poisoned)) = line(t, q) else {
                return false;
            };
            // A collective through the slots where this member runs a barrier.
            poisoned || (b != 0 && (b >> 32) as u32 == seq)
        }
        WaitOn::Release { .. } => {
            // Waiting for the last arrival: any member running a collective through
            // the slots at this barrier's place, or poisoned.
            (0..t.areas.len() as u32)
                .filter(|&q| q != t.me)
                .any(|q| match line(t, q) {
                    Some((_, _, true)) => true,
                    Some((b, _, _)) => b != 0 && (b >> 32) as u32 == seq,
                    None => false,
                })
        }
        WaitOn::Acks { seq: s, .. } => {
            let mut all_past = true;
            for q in (0..t.areas.len() as u32).filter(|&q| q != t.me) {
                match line(t, q) {
                    Some((_, _, true)) => return true,
                    Some((_, d, _)) if d != 0 && !after(s, d as u32) => {}
                    _ => all_past = false,
                }
            }
            // Everyone finished the collective of the publication, some did not
            // acknowledge it: they ran another one.
            all_past && !w.ready()
        }
        // A root waiting for a reader of its slot's previous publication: that
        // reader's part failed (its `DONE` never reaches it; it poisoned the team).
        WaitOn::Ring(Wait::Done { q, left: false, .. }) => {
            line(t, q).is_some_and(|(_, _, poisoned)| poisoned)
        }
        // Members claiming the channel, or leaving the team that held it before:
        // nothing a root could have named differently.
        WaitOn::Ring(Wait::Done { left: true, .. } | Wait::Claim { .. }) => false,
    }
}

/// When a collective stopped making progress, and what the checks did about it.
#[derive(Debug, Default)]
pub(crate) struct Stall {
    /// Fruitless advances in a row.
    count: u32,
    /// When the stall was first timed.
    since: Option<Instant>,
    /// When the checks last ran.
    checked: Option<Instant>,
}

impl Stall {
    /// Records progress.
    #[inline]
    pub(crate) fn progressed(&mut self) {
        if self.count != 0 {
            *self = Stall::default();
        }
    }

    /// Records a fruitless advance; true when the stall checks are due. The clock is
    /// read at every 64th fruitless advance in a row (a collective waiting for a peer
    /// that is about to answer reads no clock), or at every one when advances are
    /// `rare` (the endpoint may sleep between polls, so counts do not measure time).
    #[inline]
    pub(crate) fn fruitless(&mut self, rare: bool) -> bool {
        self.count = self.count.wrapping_add(1);
        if !rare && self.count & 63 != 0 {
            return false;
        }
        self.due()
    }

    #[cold]
    fn due(&mut self) -> bool {
        let now = Instant::now();
        let since = *self.since.get_or_insert(now);
        if now - since < STALL {
            return false;
        }
        if self.checked.is_some_and(|c| now - c < STALL) {
            return false;
        }
        self.checked = Some(now);
        true
    }
}

/// What this member knows of recent collectives (for probes of members behind it).
#[derive(Debug, Default)]
pub(crate) struct History {
    /// (team, seq, belief, failed), oldest first.
    recent: VecDeque<(u64, u32, u32, bool)>,
    /// Probes about collectives this member has not started yet.
    pub(crate) early: Vec<Probe>,
}

/// Collectives remembered, and early probes kept.
const HISTORY: usize = 4096;

impl History {
    /// Records that this member started (team, seq) with `belief`.
    pub(crate) fn started(&mut self, team: u64, seq: u32, belief: u32) {
        if self.recent.len() >= HISTORY {
            self.recent.pop_front();
        }
        self.recent.push_back((team, seq, belief, false));
    }

    /// Records that (team, seq) failed here.
    pub(crate) fn failed(&mut self, team: u64, seq: u32) {
        match self
            .recent
            .iter_mut()
            .rev()
            .find(|x| (x.0, x.1) == (team, seq))
        {
            Some(x) => x.3 = true,
            None => self.recent.push_back((team, seq, 0, true)),
        }
    }

    /// What this member knows of (team, seq): (belief, failed).
    pub(crate) fn lookup(&self, team: u64, seq: u32) -> Option<(u32, bool)> {
        self.recent
            .iter()
            .rev()
            .find(|x| (x.0, x.1) == (team, seq))
            .map(|x| (x.2, x.3))
    }

    /// Keeps a probe about a collective not started here yet.
    pub(crate) fn keep(&mut self, p: Probe) {
        if self.early.len() >= HISTORY {
            self.early.remove(0);
        }
        self.early.push(p);
    }

    /// Takes the probes about (team, seq).
    pub(crate) fn take_early(&mut self, team: u64, seq: u32) -> Vec<Probe> {
        if self.early.is_empty() {
            return Vec::new();
        }
        let (mine, rest): (Vec<Probe>, Vec<Probe>) = std::mem::take(&mut self.early)
            .into_iter()
            .partition(|p| (p.team, p.seq) == (team, seq));
        self.early = rest;
        mine
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn beliefs_differ_by_operation_root_and_context() {
        let b = belief(OpKind::Broadcast, 1, 0);
        assert_eq!(b, belief(OpKind::Broadcast, 1, 0));
        assert_ne!(b, belief(OpKind::Broadcast, 2, 0));
        assert_ne!(b, belief(OpKind::Reduce, 1, 0));
        assert_ne!(b, belief(OpKind::Broadcast, 1, 7));
    }

    #[test]
    fn sequence_order_wraps() {
        assert!(after(1, 0));
        assert!(!after(0, 0));
        assert!(after(0, u32::MAX));
        assert!(!after(u32::MAX, 0));
    }

    #[test]
    fn history_remembers_and_keeps_early_probes() {
        let mut h = History::default();
        h.started(5, 1, 42);
        assert_eq!(h.lookup(5, 1), Some((42, false)));
        h.failed(5, 1);
        assert_eq!(h.lookup(5, 1), Some((42, true)));
        assert_eq!(h.lookup(5, 2), None);
        let p = Probe {
            team: 5,
            seq: 9,
            src: gex_core::EpAddr::rank(1),
            belief: 3,
        };
        h.keep(p);
        assert!(h.take_early(5, 8).is_empty());
        assert_eq!(h.take_early(5, 9), vec![p]);
        assert!(h.early.is_empty());
    }
}
