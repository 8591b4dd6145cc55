//! Agreement on descriptors: members that call one collective with descriptors that
//! differ in a field every member must agree on (operation, root, element type, block
//! length, reduction operator, sync modes) get
//! [`CollError::Mismatch`], naming the field, both values
//! and the members, instead of waiting forever or taking wrong data. What a program
//! sees is documented on the error and on [`Root`](crate::Root).
//!
//! Every collective has a *descriptor* (four words) and a *belief*, a 32-bit
//! digest of it. Two members that run the same collective have the same belief; the
//! checks compare beliefs where members already meet, at no cost to a collective that
//! makes progress, and look further only when a member stalls:
//!
//! - **Messages** carry the sender's belief; a receiver that takes a message with
//!   another belief than its own asks the sender (a *probe* carrying its descriptor)
//!   which field differs, and fails the collective with the answer (an *abort*
//!   carrying the disagreement), or without one if none comes.
//! - **Shared memory.** A publication's tag (slots and the small-broadcast ring)
//!   digests the publisher's belief, so a reader never takes a publication of another
//!   descriptor: it stalls on it. Every member writes its belief (and sequence number)
//!   into its area's check line when it starts a collective through the slots or the
//!   ring, one store in its own cache line, and its descriptor into one of two
//!   records of its descriptor lines only when the belief is not one of the last two
//!   it recorded (calls in a loop store nothing more).
//! - **Stalls.** A member whose collective has made no progress for 50 ms
//!   over messages sends a probe with its descriptor to each member it waits for in
//!   the current round; a probed member that runs (or ran, or will run) that
//!   collective with another belief names the first field that differs, fails its
//!   own part if it still runs and answers with an abort. This catches the cases
//!   where nobody ever sends to a member that disagrees (two members that each take
//!   the other for the root of a broadcast wait for each other and send nothing).
//!   Through shared memory, the stalled member reads the check line of the member it
//!   waits for: the same collective with another belief is a mismatch (its record
//!   gives the other descriptor), as is a member that went past the collective
//!   without publishing what this one waits for, or one that waits for
//!   acknowledgements that can no longer come.
//! - **Telling everyone.** The member that detects a mismatch fails its part, sends an
//!   abort with what it found to every member of the team (whose part then fails too,
//!   unless it has completed) and, on a shared-memory team, writes what it found into
//!   its descriptor lines and sets its `POISON` word: a stalled member that sees it
//!   fails with the same finding. The team stays failed on every member that learnt
//!   it: later collectives of it fail at once, so a member whose
//!   part completed before anyone could tell gets the error from its next collective
//!   on the team.
//!
//! Nothing here runs on a collective that makes progress: the fast paths only compare
//! a word they already read (messages, tags) or store one word more (shared memory).

use crate::CollError;
pub(crate) use crate::belief::Desc;
use crate::error::{Disagreement, FIELDS};
use crate::msg::Probe;
use crate::op::SyncModes;
use crate::ring::VALID;
use crate::ring::Wait;
use crate::shm::chk::{BELIEF, DONE, POISON, TAG};
use crate::shm::{ShmTeam, WaitOn};
use gex_core::{EpAddr, Team};
use gex_sync::atomic::Ordering;
use std::collections::{HashSet, VecDeque};
use std::time::{Duration, Instant};

/// How long a collective may make no progress before the stall checks run (probes,
/// shared-memory check lines); they run again every [`STALL`] after.
pub(crate) const STALL: Duration = Duration::from_millis(50);

/// The error of collective `seq` of team `team`, with what was found.
pub(crate) fn mismatch(team: u64, seq: u32, found: Option<Disagreement>) -> CollError {
    CollError::Mismatch { team, seq, found }
}

/// True if team failure `e` (the error of its collective `s`) covers the team's
/// collective `seq`: `seq` is `s` or a later one. Collectives before it (still
/// running on a member that learns late) are not affected.
pub(crate) fn covers(e: &CollError, seq: u32) -> bool {
    match e {
        CollError::Mismatch { seq: s, .. } => !after(*s, seq),
        _ => true,
    }
}

/// True if team failure `e` is of an earlier collective than team failure `k`.
pub(crate) fn earlier(e: &CollError, k: &CollError) -> bool {
    match (e, k) {
        (CollError::Mismatch { seq: a, .. }, CollError::Mismatch { seq: b, .. }) => after(*b, *a),
        _ => false,
    }
}

/// Descriptor line words (per channel, [`crate::shm`]): two records of (belief, the
/// descriptor's four words), then what the owner found when it poisoned the team
/// (`FOUND`: sequence number, whether a field was found and which; the members;
/// the two values).
const RECORD: usize = 5;
const FOUND: usize = 10;

/// Which beliefs this member's two descriptor records on a channel hold (0: none),
/// which record it writes next, and the belief it announced last (calls in a loop
/// compare that one only).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Described {
    last: u32,
    beliefs: [u32; 2],
    next: usize,
}

/// This member starts collective `seq` (through the slots or the ring) with `belief`,
/// the digest of the descriptor `desc` gives: records the descriptor if neither
/// record holds it (`rec` says which do; calls in a loop compare one word), then the
/// belief.
#[inline(always)]
pub(crate) fn announce(
    t: &ShmTeam,
    rec: &mut Described,
    seq: u32,
    belief: u32,
    desc: impl FnOnce() -> Desc,
) {
    if rec.last != belief {
        describe(t, rec, belief, &desc());
    }
    let own = t.areas[t.me as usize];
    own.chk(t.ch, BELIEF).store(
        (u64::from(seq) << 32) | u64::from(belief),
        Ordering::Release,
    );
}

/// Another belief than the last announced: writes `desc` (of `belief`) into this
/// member's older record unless one holds it.
#[cold]
#[inline(never)]
fn describe(t: &ShmTeam, rec: &mut Described, belief: u32, desc: &Desc) {
    rec.last = belief;
    if rec.beliefs.contains(&belief) {
        return;
    }
    let own = t.areas[t.me as usize];
    let at = rec.next * RECORD;
    for (i, w) in desc.0.iter().enumerate() {
        own.dsc(t.ch, at + 1 + i).store(*w, Ordering::Relaxed);
    }
    own.dsc(t.ch, at)
        .store(u64::from(belief), Ordering::Release);
    rec.beliefs[rec.next] = belief;
    rec.next ^= 1;
}

/// This member finished collective `seq` (through the slots).
#[inline]
pub(crate) fn finished(t: &ShmTeam, seq: u32) {
    let own = t.areas[t.me as usize];
    own.chk(t.ch, DONE)
        .store(u64::from(seq) | VALID, Ordering::Release);
}

/// This member saw its team `t` fail: `e` (a [`CollError::Mismatch`]: what it found)
/// goes into its descriptor lines, then its `POISON` word is set. A finding already
/// there stays (a later one without a field does not replace it).
pub(crate) fn poison(t: &ShmTeam, e: &CollError) {
    let own = t.areas[t.me as usize];
    let CollError::Mismatch { seq, found, .. } = e else {
        own.chk(t.ch, POISON).store(1, Ordering::Release);
        return;
    };
    if own.chk(t.ch, POISON).load(Ordering::Relaxed) != 0 && found.is_none() {
        return;
    }
    let head = (u64::from(*seq) << 32)
        | found.map_or(0, |d| {
            0x100 | FIELDS.iter().position(|&f| f == d.field).unwrap_or(0) as u64
        });
    own.dsc(t.ch, FOUND).store(head, Ordering::Relaxed);
    if let Some(d) = found {
        own.dsc(t.ch, FOUND + 1).store(
            (u64::from(d.member) << 32) | u64::from(d.other),
            Ordering::Relaxed,
        );
        own.dsc(t.ch, FOUND + 2).store(d.value, Ordering::Relaxed);
        own.dsc(t.ch, FOUND + 3)
            .store(d.other_value, Ordering::Relaxed);
    }
    own.chk(t.ch, POISON).store(1, Ordering::Release);
}

/// What member `q`, which poisoned team `t` (its `POISON` word read with acquire),
/// found: the collective and the disagreement.
fn poisoned_by(t: &ShmTeam, id: u64, q: u32) -> CollError {
    let a = t.areas[q as usize];
    let head = a.dsc(t.ch, FOUND).load(Ordering::Relaxed);
    let found = (head & 0x100 != 0).then(|| {
        let who = a.dsc(t.ch, FOUND + 1).load(Ordering::Relaxed);
        Disagreement {
            field: FIELDS[(head & 0xff) as usize % FIELDS.len()],
            member: (who >> 32) as u32,
            value: a.dsc(t.ch, FOUND + 2).load(Ordering::Relaxed),
            other: who as u32,
            other_value: a.dsc(t.ch, FOUND + 3).load(Ordering::Relaxed),
        }
    });
    mismatch(id, (head >> 32) as u32, found)
}

/// Member `q`'s descriptor of belief `b`, if one of its records holds it (checked
/// against the belief: a record being rewritten does not count).
fn desc_of(t: &ShmTeam, q: u32, b: u32) -> Option<Desc> {
    let a = t.areas[q as usize];
    (0..2).find_map(|r| {
        let at = r * RECORD;
        if a.dsc(t.ch, at).load(Ordering::Acquire) != u64::from(b) {
            return None;
        }
        let d = Desc(std::array::from_fn(|i| {
            a.dsc(t.ch, at + 1 + i).load(Ordering::Relaxed)
        }));
        (d.belief() == b).then_some(d)
    })
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

/// The stall check of a shared-memory collective `seq` of team `t` (id `id`) with
/// descriptor `desc` on this member, stalled on `w`: the error if it can never
/// complete (a mismatch seen here, or by another member), with what was found.
pub(crate) fn shm_stalled(
    t: &ShmTeam,
    id: u64,
    (seq, desc): (u32, &Desc),
    w: &WaitOn,
) -> Option<CollError> {
    shm_stalled_as(t, id, (seq, desc.belief(), Some(desc)), w)
}

/// This member's descriptor of `belief` on team `t`: one of its records (a
/// collective through the slots or the ring wrote it when it started), or a
/// barrier's (barriers record nothing).
pub(crate) fn own_desc(t: &ShmTeam, belief: u32) -> Option<Desc> {
    use crate::SyncMode::{All, My, No};
    desc_of(t, t.me, belief).or_else(|| {
        [No, My, All]
            .into_iter()
            .flat_map(|i| [No, My, All].map(|o| Desc::barrier(SyncModes::new(i, o))))
            .find(|d| d.belief() == belief)
    })
}

/// [`shm_stalled`] of a collective known by its belief (`desc`: its descriptor, if
/// known, to name what differs).
pub(crate) fn shm_stalled_as(
    t: &ShmTeam,
    id: u64,
    (seq, belief, desc): (u32, u32, Option<&Desc>),
    w: &WaitOn,
) -> Option<CollError> {
    // Member `q` runs collective `seq` with another belief (word `b`): what differs.
    let differs = |q: u32, b: u64| {
        let theirs = desc_of(t, q, b as u32);
        let found = desc
            .zip(theirs)
            .and_then(|(d, e)| d.disagreement(t.me, &e, q));
        mismatch(id, seq, found)
    };
    // Any member that poisoned the team, or runs this collective with another
    // descriptor (whatever this member waits for: a publication, acknowledgements of
    // its own, a barrier's flags).
    for q in (0..t.areas.len() as u32).filter(|&q| q != t.me) {
        match line(t, q) {
            Some((_, _, true)) => return Some(poisoned_by(t, id, q)),
            Some((b, _, _)) if b != 0 && (b >> 32) as u32 == seq && b as u32 != belief => {
                return Some(differs(q, b));
            }
            _ => {}
        }
    }
    match *w {
        WaitOn::Post { q, .. } | WaitOn::Ring(Wait::Post { q, .. }) => {
            let (b, _, _) = line(t, q)?;
            // Went past this collective without publishing for this member.
            (b != 0 && after((b >> 32) as u32, seq) && !w.ready()).then(|| mismatch(id, seq, None))
        }
        WaitOn::Acks { seq: s, .. } => {
            let all_past = (0..t.areas.len() as u32)
                .filter(|&q| q != t.me)
                .all(|q| line(t, q).is_some_and(|(_, d, _)| d != 0 && !after(s, d as u32)));
            // Everyone finished the collective of the publication, some did not
            // acknowledge it: they ran another one.
            (all_past && !w.ready()).then(|| mismatch(id, s, None))
        }
        // A barrier (its flags or its release): the members running a collective
        // through the slots at its place were found above; a root waiting for a
        // reader of its slot's previous publication, a member claiming the channel
        // or leaving the team that held it before: the reader's failure (its poison)
        // was found above, nothing else could have been passed differently.
        WaitOn::Epoch { .. } | WaitOn::Release { .. } | WaitOn::Ring(_) => None,
    }
}

/// The stall check of a collective `seq` over messages with descriptor `desc` on a
/// team `t` that also has a channel, waiting for `peers` (team ranks): the error if
/// one of them poisoned the team or runs the collective through the channel with
/// another descriptor (members whose block lengths differ may choose different
/// algorithms).
pub(crate) fn peers_differ(
    t: &ShmTeam,
    id: u64,
    (seq, desc): (u32, &Desc),
    peers: &[u32],
) -> Option<CollError> {
    let belief = desc.belief();
    peers.iter().find_map(|&q| match line(t, q)? {
        (_, _, true) => Some(poisoned_by(t, id, q)),
        (b, _, _) if b != 0 && (b >> 32) as u32 == seq && b as u32 != belief => {
            let found = desc_of(t, q, b as u32).and_then(|d| desc.disagreement(t.me, &d, q));
            Some(mismatch(id, seq, found))
        }
        _ => None,
    })
}

/// When a collective stopped making progress, and what the checks did about it.
#[derive(Clone, Copy, Debug, Default)]
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

/// What this member knew of a recent collective: its descriptor, its team rank in
/// it, and its error if it failed.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Known {
    pub(crate) desc: Desc,
    pub(crate) rank: u32,
    pub(crate) failed: Option<CollError>,
}

/// Agreement on collectives' outcomes, one member's side: what it knows of recent
/// collectives (its [`History`]), which failed, whom it must tell, and who disagreed
/// with a schedule's message. Part of the layer record ([`Coll`](crate::Coll)'s
/// `agree`).
#[derive(Debug, Default)]
pub(crate) struct Agreement {
    /// Recent collectives and early probes.
    pub(crate) history: History,
    /// Collectives other members (or this one) reported failed: (team, seq).
    pub(crate) aborted: HashSet<(u64, u32)>,
    /// Collectives whose failure this member must tell their team about: (team,
    /// seq, what was found).
    pub(crate) pending_aborts: Vec<(Team, u32, Option<Disagreement>)>,
    /// Members to tell that a collective failed: they probed it here before this
    /// member knew (`Coll::fail_op`, `Coll::fail_team`).
    pub(crate) pending_replies: Vec<(EpAddr, CollError)>,
    /// The member (team rank) that sent the message of another belief a schedule
    /// just met (`Coll::ask` asks it what differs).
    pub(crate) disagreeing: Option<u32>,
}

/// What this member knows of recent collectives (for probes of members behind it).
#[derive(Debug, Default)]
pub(crate) struct History {
    /// ((team, seq), what is known), oldest first.
    recent: VecDeque<((u64, u32), Known)>,
    /// Probes about collectives this member has not started yet.
    pub(crate) early: Vec<Probe>,
}

/// Collectives remembered, and early probes kept.
const HISTORY: usize = 4096;

impl History {
    /// Records that this member (team rank `rank`) started (team, seq) with `desc`.
    pub(crate) fn started(&mut self, (team, seq): (u64, u32), rank: u32, desc: Desc) {
        if self.recent.len() >= HISTORY {
            self.recent.pop_front();
        }
        let k = Known {
            desc,
            rank,
            failed: None,
        };
        self.recent.push_back(((team, seq), k));
    }

    /// Records that (team, seq) failed here with `e`.
    pub(crate) fn failed(&mut self, team: u64, seq: u32, e: &CollError) {
        match self.recent.iter_mut().rev().find(|x| x.0 == (team, seq)) {
            Some(x) => x.1.failed = Some(e.clone()),
            None => {
                let k = Known {
                    desc: Desc::default(),
                    rank: 0,
                    failed: Some(e.clone()),
                };
                self.recent.push_back(((team, seq), k));
            }
        }
    }

    /// What this member knows of (team, seq).
    pub(crate) fn lookup(&self, team: u64, seq: u32) -> Option<&Known> {
        self.recent
            .iter()
            .rev()
            .find(|x| x.0 == (team, seq))
            .map(|x| &x.1)
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
    use crate::op::OpKind;

    fn d(kind: OpKind, root: u32, bytes: usize) -> Desc {
        Desc::new(kind, root, (4, 4), bytes, 1, SyncModes::default())
    }

    #[test]
    fn beliefs_differ_by_every_field_that_applies() {
        let b = d(OpKind::Broadcast, 1, 8).belief();
        assert_eq!(b, d(OpKind::Broadcast, 1, 8).belief());
        assert_ne!(b, d(OpKind::Broadcast, 2, 8).belief());
        assert_ne!(b, d(OpKind::Reduce, 1, 8).belief());
        assert_ne!(b, d(OpKind::Broadcast, 1, 16).belief());
        assert_ne!(b, d(OpKind::Broadcast, 1, 8).stage(7).belief());
        let sync = SyncModes::new(crate::SyncMode::All, crate::SyncMode::My);
        assert_ne!(
            b,
            Desc::new(OpKind::Broadcast, 1, (4, 4), 8, 0, sync).belief()
        );
        // Fields that do not apply are left out: a root of an allreduce, the
        // operator of a broadcast.
        assert_eq!(
            d(OpKind::Allreduce, 1, 8).belief(),
            d(OpKind::Allreduce, 2, 8).belief()
        );
        assert_eq!(
            b,
            Desc::new(OpKind::Broadcast, 1, (4, 4), 8, 0, SyncModes::default()).belief()
        );
        assert_ne!(
            d(OpKind::Allreduce, 0, 8).belief(),
            Desc::new(OpKind::Allreduce, 0, (4, 4), 8, 2, SyncModes::default()).belief()
        );
    }

    #[test]
    fn the_ring_cache_key_of_a_descriptor_is_the_key_of_its_call() {
        use crate::SyncMode::{All, My, No};
        for (root, n, ty, elem) in [(0, 8, 1, 1), (3, 56, 4, 8), (1, 0, 0, 200), (7, 24, 14, 4)] {
            for (i, o) in [(My, My), (No, My), (My, No), (No, No), (All, My)] {
                let sync = SyncModes::new(i, o);
                let d = Desc::new(OpKind::Broadcast, root, (ty, elem), n, 0, sync);
                assert_eq!(
                    d.ring_key_of(),
                    Some(Desc::ring_key(root, n, (ty, elem), sync)),
                    "{root} {n} {ty} {elem} {sync:?}"
                );
            }
        }
        let d = Desc::new(OpKind::Broadcast, 0, (1, 1), 8, 0, SyncModes::default());
        assert_eq!(d.stage(5).ring_key_of(), None, "stages are not cached");
        let d = Desc::new(OpKind::Allreduce, 0, (1, 1), 8, 1, SyncModes::default());
        assert_eq!(d.ring_key_of(), None);
    }

    #[test]
    fn the_first_field_that_differs_is_named() {
        use crate::error::Field;
        let a = d(OpKind::Broadcast, 0, 4096);
        let found = a.disagreement(0, &d(OpKind::Broadcast, 0, 8), 1).unwrap();
        assert_eq!(
            (
                found.field,
                found.value,
                found.other_value,
                found.member,
                found.other
            ),
            (Field::BlockBytes, 4096, 8, 0, 1)
        );
        let found = a.disagreement(1, &d(OpKind::Gather, 2, 8), 0).unwrap();
        assert_eq!(found.field, Field::Operation);
        assert_eq!(
            found.to_string(),
            "operation: member 1 passed broadcast, member 0 passed gather"
        );
        let f32s = Desc::new(OpKind::Allreduce, 0, (13, 4), 16, 1, SyncModes::default());
        let u32s = Desc::new(OpKind::Allreduce, 0, (3, 4), 16, 1, SyncModes::default());
        let found = f32s.disagreement(0, &u32s, 1).unwrap();
        assert_eq!(
            found.to_string(),
            "element type: member 0 passed f32, member 1 passed u32"
        );
        assert_eq!(a.disagreement(0, &a, 1), None);
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
        let desc = d(OpKind::Broadcast, 0, 8);
        h.started((5, 1), 0, desc);
        assert_eq!(
            h.lookup(5, 1).map(|k| (k.desc, k.failed.clone())),
            Some((desc, None))
        );
        let e = mismatch(5, 1, None);
        h.failed(5, 1, &e);
        assert_eq!(
            h.lookup(5, 1).map(|k| (k.desc, k.failed.clone())),
            Some((desc, Some(e)))
        );
        assert!(h.lookup(5, 2).is_none());
        let p = Probe {
            team: 5,
            seq: 9,
            src: gex_core::EpAddr::rank(1),
            rank: 1,
            desc,
        };
        h.keep(p);
        assert!(h.take_early(5, 8).is_empty());
        assert_eq!(h.take_early(5, 9), vec![p]);
        assert!(h.early.is_empty());
    }
}
