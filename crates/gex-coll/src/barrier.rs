//! The barrier: one barrier for every team, blocking, nonblocking (an event), or
//! split-phase with names (GASNet's `notify`/`wait`/`try`).
//!
//! **Entries.** Every member enters a barrier with an *entry*: a named id or
//! anonymous. Entries merge like a join: a named entry wins over an anonymous one; two
//! different named ids give a *mismatch*, which is sticky. The merge is commutative,
//! associative and idempotent, so a barrier carries entries the way an allreduce
//! carries values, whatever its algorithm, and every member ends with the merge of all
//! entries: a mismatch is reported by every member ([`CollError::BarrierMismatch`]).
//!
//! **Algorithms.** A barrier is a collective of its team like any other
//! ([`OpKind::Barrier`](crate::OpKind::Barrier)) and the tuner picks its algorithm:
//! - on a team whose members share memory (`shm`), the *flag barrier* below;
//! - on a team spanning hosts (`hier`), the flag barrier on every host, a message
//!   barrier between the hosts' leaders, and the flag barrier again (stages of
//!   of the `hier` algorithm, each merging the entries it gets);
//! - otherwise a message algorithm (dissemination, recursive doubling, trees): its
//!   messages carry the sender's merged entry (16 bytes) and receivers merge them
//!   (the schedule's messages grow to 16 bytes).
//!
//! **The flag barrier.** Barrier number `k` of a team (counted per member) on a team
//! that holds a shared-memory channel: every member writes its entry into slot
//! `k mod 2` of its channel's barrier line and then `EPOCH = tag | k` (release, same
//! cache line); then it reads every other member's `EPOCH` until it holds `k` or more
//! (acquire), merging their entries of slot `k mod 2`. No counter, no acknowledgement,
//! no release word: one store and `P - 1` loads per member, and a member that finishes
//! barrier `k` enters `k + 1` in the same breath (the next epoch is simply larger).
//! Barriers of one team run one at a time on every member (a member enters `k + 1`
//! only after finishing `k`), so a member that is at `k + 1` has not overwritten the
//! slot of `k` that a slower member still reads (it will only after everyone finished
//! `k + 1`, which needs the slow member's epoch `k + 1`).
//! Measured against gex-rma's counter barrier (arrivals counted in the group leader's
//! area, the last arrival releases) and gex-coll's earlier barrier through the data
//! slots (acknowledged publications): see docs/coll.md and docs/performance.md.

use crate::error::CollError;
use crate::sched::{Action, ReduceFn, Schedule};
use crate::shm::{ShmTeam, WaitOn, epoch_reached};
use gex_sync::atomic::Ordering;
use std::sync::Arc;

bitflags::bitflags! {
    /// Flags of the split-phase barrier calls.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct BarrierFlags: u32 {
        /// An anonymous entry: matches any id (the id argument is ignored).
        const ANONYMOUS = 1;
    }
}

/// Bytes of an encoded entry.
pub(crate) const ENTRY_LEN: usize = 16;

const NAMED: u64 = 1;
const MISMATCH: u64 = 2;

/// A barrier entry, or the merge of several.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Entry {
    /// The smallest named id seen (all of them, unless `mismatch`).
    pub(crate) named: Option<u64>,
    /// Two different named ids were seen.
    pub(crate) mismatch: bool,
}

impl Entry {
    /// The entry of a member: `id`, or anonymous.
    pub(crate) fn new(id: u64, flags: BarrierFlags) -> Entry {
        Entry {
            named: (!flags.contains(BarrierFlags::ANONYMOUS)).then_some(id),
            mismatch: false,
        }
    }

    /// The join of two entries (commutative, associative, idempotent).
    pub(crate) fn merge(self, o: Entry) -> Entry {
        let clash = matches!((self.named, o.named), (Some(a), Some(b)) if a != b);
        let named = match (self.named, o.named) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        Entry {
            named,
            mismatch: self.mismatch || o.mismatch || clash,
        }
    }

    /// The two words an entry is stored as (state, id).
    pub(crate) fn words(self) -> (u64, u64) {
        let st =
            if self.named.is_some() { NAMED } else { 0 } | if self.mismatch { MISMATCH } else { 0 };
        (st, self.named.unwrap_or(0))
    }

    /// The entry stored as `(state, id)`.
    pub(crate) fn from_words(st: u64, id: u64) -> Entry {
        Entry {
            named: (st & NAMED != 0).then_some(id),
            mismatch: st & MISMATCH != 0,
        }
    }

    /// The 16 bytes a barrier collective carries.
    pub(crate) fn encode(self) -> Vec<u8> {
        let (st, id) = self.words();
        let mut v = Vec::with_capacity(ENTRY_LEN);
        v.extend_from_slice(&st.to_le_bytes());
        v.extend_from_slice(&id.to_le_bytes());
        v
    }

    /// Decodes [`encode`](Self::encode)'s bytes (anything shorter: anonymous).
    pub(crate) fn decode(b: &[u8]) -> Entry {
        if b.len() < ENTRY_LEN {
            return Entry::default();
        }
        let w = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        Entry::from_words(w(0), w(8))
    }

    /// The outcome of a barrier that ended with this merged entry.
    pub(crate) fn outcome(self) -> Result<(), CollError> {
        if self.mismatch {
            Err(CollError::BarrierMismatch)
        } else {
            Ok(())
        }
    }
}

/// The merge of entries as a reduction over their bytes (schedules and `hier`).
pub(crate) fn merge_fn() -> ReduceFn {
    Arc::new(|acc: &mut [u8], inc: &[u8], _inc_left: bool| {
        let m = Entry::decode(acc).merge(Entry::decode(inc)).encode();
        acc[..ENTRY_LEN].copy_from_slice(&m);
    })
}

/// A message barrier schedule turned into one that carries entries: the work buffer
/// is the member's entry, every message carries the sender's merged entry and every
/// receive merges it (a barrier schedule moves, by definition, information from every
/// member to every member, and merging is idempotent, so every member ends with the
/// merge of all entries). Rounds added for sync modes (tags at `TAG_PRE` and above)
/// are left empty.
// A message is a list of ranges; a list of one range is the common case.
#[allow(clippy::single_range_in_vec_init)]
pub(crate) fn entry_schedule(mut s: Schedule, sync_tags: u32) -> Schedule {
    s.work_len = ENTRY_LEN;
    s.out_len = ENTRY_LEN;
    s.input = vec![(0..ENTRY_LEN, 0)];
    s.output = vec![(0..ENTRY_LEN, 0)];
    s.symmetric = false;
    for r in &mut s.rounds {
        for x in r.sends.iter_mut().filter(|x| x.tag < sync_tags) {
            x.ranges = vec![0..ENTRY_LEN];
        }
        for x in r.recvs.iter_mut().filter(|x| x.tag < sync_tags) {
            x.ranges = vec![0..ENTRY_LEN];
            x.action = Action::ReduceLeft;
        }
    }
    s
}

/// A split-phase barrier notified on a team and not yet waited for.
#[derive(Debug)]
pub(crate) struct Notified {
    /// The barrier's event (its outcome: mismatch or not).
    pub(crate) ev: gex_core::Event<(), CollError>,
    /// The name this member notified with.
    pub(crate) named: Option<u64>,
}

/// One flag barrier in flight on one member (see the module docs).
#[derive(Debug)]
pub(crate) struct FlagBar {
    k: u32,
    acc: Entry,
    next: u32,
    arrived: bool,
    /// What [`step`](Self::step) waited for when it last returned false.
    pub(crate) wait: Option<WaitOn>,
    /// Members to wake after this member stored its epoch (bit = team rank).
    pub(crate) wake: u64,
}

impl FlagBar {
    /// Barrier number `k` of the team, entered with `entry`.
    pub(crate) fn new(k: u32, entry: Entry) -> FlagBar {
        FlagBar {
            k,
            acc: entry,
            next: 0,
            arrived: false,
            wait: None,
            wake: 0,
        }
    }

    /// The merged entry (complete once [`step`](Self::step) returned true).
    pub(crate) fn entry(&self) -> Entry {
        self.acc
    }

    /// Enters (once) and reads as far as the other members have entered; true once
    /// every member has.
    pub(crate) fn step(&mut self, t: &ShmTeam) -> bool {
        let ch = t.ch;
        let slot = (self.k % 2) as usize;
        if !self.arrived {
            let own = t.areas[t.me as usize];
            let (st, id) = self.acc.words();
            own.bar(ch, 1 + 2 * slot).store(st, Ordering::Relaxed);
            own.bar(ch, 2 + 2 * slot).store(id, Ordering::Relaxed);
            own.bar(ch, 0).store(
                (u64::from(t.tag) << 32) | u64::from(self.k),
                Ordering::Release,
            );
            self.arrived = true;
            self.wake |= t.others();
        }
        let p = t.areas.len() as u32;
        while self.next < p {
            let q = self.next;
            if q != t.me {
                let a = t.areas[q as usize];
                if !epoch_reached(a.bar(ch, 0).load(Ordering::Acquire), t.tag, self.k) {
                    self.wait = Some(WaitOn::Epoch {
                        q,
                        area: a,
                        ch,
                        tag: t.tag,
                        k: self.k,
                    });
                    return false;
                }
                let e = Entry::from_words(
                    a.bar(ch, 1 + 2 * slot).load(Ordering::Relaxed),
                    a.bar(ch, 2 + 2 * slot).load(Ordering::Relaxed),
                );
                self.acc = self.acc.merge(e);
            }
            self.next += 1;
        }
        self.wait = None;
        true
    }
}

/// One counter barrier in flight on one member: for teams of more than
/// [`FLAG_MAX`] members (see the module docs).
#[derive(Debug)]
pub(crate) struct CountBar {
    k: u32,
    acc: Entry,
    arrived: bool,
    /// What [`step`](Self::step) waited for when it last returned false.
    pub(crate) wait: Option<WaitOn>,
    /// Members to wake after this member released the barrier (bit = team rank).
    pub(crate) wake: u64,
}

impl CountBar {
    /// Barrier number `k` of the team, entered with `entry`.
    pub(crate) fn new(k: u32, entry: Entry) -> CountBar {
        CountBar {
            k,
            acc: entry,
            arrived: false,
            wait: None,
            wake: 0,
        }
    }

    /// The merged entry (complete once [`step`](Self::step) returned true).
    pub(crate) fn entry(&self) -> Entry {
        self.acc
    }

    /// Arrives (once); true once the barrier is released (by this member, if it was
    /// the last to arrive).
    pub(crate) fn step(&mut self, t: &ShmTeam) -> bool {
        let ch = t.ch;
        let slot = (self.k % 2) as usize;
        let leader = t.areas[0];
        if !self.arrived {
            self.arrived = true;
            let own = t.areas[t.me as usize];
            let (st, id) = self.acc.words();
            own.bar(ch, 1 + 2 * slot).store(st, Ordering::Relaxed);
            own.bar(ch, 2 + 2 * slot).store(id, Ordering::Relaxed);
            own.bar(ch, 0).store(
                (u64::from(t.tag) << 32) | u64::from(self.k),
                Ordering::Relaxed,
            );
            // Arrivals of this team: `tag | count`; the first arrival of a team on a
            // channel left by an earlier team starts the count again. AcqRel: this
            // arrival publishes its entry, and the last one sees every entry.
            let tag = u64::from(t.tag) << 32;
            let cnt = leader.cnt(ch);
            let mut old = cnt.load(Ordering::Relaxed);
            let count = loop {
                let new = if old & !0xffff_ffff == tag {
                    old + 1
                } else {
                    tag | 1
                };
                match cnt.compare_exchange_weak(old, new, Ordering::AcqRel, Ordering::Relaxed) {
                    Ok(_) => break new as u32,
                    Err(v) => old = v,
                }
            };
            let n = t.areas.len() as u32;
            if count == self.k.wrapping_mul(n) {
                self.release(t);
                return true;
            }
        }
        let r = leader.rel(ch, 0).load(Ordering::Acquire);
        if epoch_reached(r, t.tag, self.k) {
            self.acc = Entry::from_words(
                leader.rel(ch, 1 + 2 * slot).load(Ordering::Relaxed),
                leader.rel(ch, 2 + 2 * slot).load(Ordering::Relaxed),
            );
            self.wait = None;
            return true;
        }
        self.wait = Some(WaitOn::Release {
            area: leader,
            ch,
            tag: t.tag,
            k: self.k,
        });
        false
    }

    /// The last arrival: merges every member's entry and releases the barrier.
    fn release(&mut self, t: &ShmTeam) {
        let ch = t.ch;
        let slot = (self.k % 2) as usize;
        for (q, a) in t.areas.iter().enumerate() {
            if q as u32 == t.me {
                continue;
            }
            debug_assert!(epoch_reached(
                a.bar(ch, 0).load(Ordering::Relaxed),
                t.tag,
                self.k
            ));
            let e = Entry::from_words(
                a.bar(ch, 1 + 2 * slot).load(Ordering::Relaxed),
                a.bar(ch, 2 + 2 * slot).load(Ordering::Relaxed),
            );
            self.acc = self.acc.merge(e);
        }
        let leader = t.areas[0];
        let (st, id) = self.acc.words();
        leader.rel(ch, 1 + 2 * slot).store(st, Ordering::Relaxed);
        leader.rel(ch, 2 + 2 * slot).store(id, Ordering::Relaxed);
        // Release, and the writer's fence of the sleep protocol (`wake_fenced`).
        leader.rel(ch, 0).swap(
            (u64::from(t.tag) << 32) | u64::from(self.k),
            Ordering::SeqCst,
        );
        self.wake |= t.others();
        self.wait = None;
    }
}

/// Largest team whose shared-memory barrier is the flag barrier; larger teams take
/// the counter barrier (measured: see the module docs).
pub(crate) const FLAG_MAX: u32 = 2;

/// A shared-memory barrier: the flag barrier on small teams, the counter barrier on
/// larger ones.
#[derive(Debug)]
pub(crate) enum ShmBar {
    Flag(FlagBar),
    Count(CountBar),
}

impl ShmBar {
    /// Barrier number `k` of a team of `p` members, entered with `entry`.
    pub(crate) fn new(p: u32, k: u32, entry: Entry) -> ShmBar {
        if p <= FLAG_MAX {
            ShmBar::Flag(FlagBar::new(k, entry))
        } else {
            ShmBar::Count(CountBar::new(k, entry))
        }
    }
    pub(crate) fn step(&mut self, t: &ShmTeam) -> bool {
        match self {
            ShmBar::Flag(b) => b.step(t),
            ShmBar::Count(b) => b.step(t),
        }
    }
    pub(crate) fn entry(&self) -> Entry {
        match self {
            ShmBar::Flag(b) => b.entry(),
            ShmBar::Count(b) => b.entry(),
        }
    }
    pub(crate) fn wait(&self) -> Option<WaitOn> {
        match self {
            ShmBar::Flag(b) => b.wait,
            ShmBar::Count(b) => b.wait,
        }
    }
    pub(crate) fn take_wake(&mut self) -> u64 {
        match self {
            ShmBar::Flag(b) => std::mem::take(&mut b.wake),
            ShmBar::Count(b) => std::mem::take(&mut b.wake),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_is_a_join() {
        let anon = Entry::default();
        let a = Entry::new(1, BarrierFlags::empty());
        let b = Entry::new(2, BarrierFlags::empty());
        assert_eq!(anon.merge(a), a);
        assert_eq!(a.merge(anon), a);
        assert_eq!(a.merge(a), a);
        assert!(a.merge(b).mismatch && b.merge(a).mismatch);
        assert_eq!(a.merge(b), b.merge(a), "commutative");
        let c = Entry::new(3, BarrierFlags::empty());
        assert_eq!(a.merge(b).merge(c), a.merge(b.merge(c)), "associative");
        assert_eq!(a.merge(b).merge(a), a.merge(b), "idempotent");
        // Absorption: a partial merge joined with the full merge gives the full one.
        let full = a.merge(anon).merge(a);
        assert_eq!(full.merge(a), full);
        assert!(!full.mismatch);
        assert_eq!(Entry::decode(&b.encode()), b);
        assert_eq!(Entry::decode(&a.merge(b).encode()), a.merge(b));
        assert_eq!(
            Entry::new(9, BarrierFlags::ANONYMOUS),
            anon,
            "the id of an anonymous entry is ignored"
        );
        let mut acc = a.encode();
        merge_fn()(&mut acc, &b.encode(), false);
        assert!(Entry::decode(&acc).mismatch);
        assert_eq!(a.merge(b).outcome(), Err(CollError::BarrierMismatch));
        assert_eq!(a.outcome(), Ok(()));
    }
}
