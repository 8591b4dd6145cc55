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
//! - on a team whose members share memory (`shm`), the *flag barrier* on two members
//!   and the *counter barrier* on more (below);
//! - on a team spanning hosts (`hier`), the shared-memory barrier on every host, a
//!   message barrier between the hosts' leaders, and the shared-memory barrier again
//!   (stages of the `hier` algorithm, each merging the entries it gets);
//! - otherwise a message algorithm (dissemination, recursive doubling, trees): its
//!   messages carry the sender's merged entry (16 bytes) and receivers merge them
//!   (the schedule's messages grow to 16 bytes).
//!
//! **The flag barrier** (`FlagBar`, teams of at most `FLAG_MAX` = 2 members).
//! Barrier number `k` of a team (counted per member) on a team that holds a
//! shared-memory channel: every member writes its entry into slot `k mod 2` of its
//! channel's barrier line and then `EPOCH = tag | k` (a sequentially consistent swap:
//! the release, and on x86 the writer's fence of the sleep protocol; elsewhere
//! `ShmTeam::wake_fenced` adds the fence); then
//! it reads every other member's `EPOCH` until it holds `k` or more (acquire), merging
//! their entries of slot `k mod 2`. No counter, no acknowledgement, no release word:
//! one store and `P - 1` loads per member, and a member that finishes barrier `k`
//! enters `k + 1` in the same breath (the next epoch is simply larger). Barriers of
//! one team run one at a time on every member (a member enters `k + 1` only after
//! finishing `k`), so a member that is at `k + 1` has not overwritten the slot of `k`
//! that a slower member still reads (it will only after everyone finished `k + 1`,
//! which needs the slow member's epoch `k + 1`).
//!
//! **The counter barrier** (`CountBar`, larger teams). Every arrival adds one to the
//! team's counter word in the leader's area (its own cache line; a compare-and-swap
//! tagged with the team, so a counter left by an earlier team on the channel starts
//! again); a named arrival first stores its entry and epoch in its own barrier line
//! and counts itself named. The arrival that completes the count merges the named
//! entries (none to read when every entry is anonymous), resets the counter and
//! releases the barrier by a swap of the leader's release word (merged entry in the
//! same line); every other member waits for that one word. With ranks outnumbering
//! cores, every member must run once per barrier anyway: one contended line and one
//! read line per barrier beat `P − 1` lines per member.
//!
//! **Waiting.** A blocking barrier runs on the caller's stack (the direct path,
//! module `shmdrive`): one call into the layer arrives; the wait for the last flag
//! (the release word, or the last member's epoch) is finished by the caller without
//! entering the layer again (`FlagBar::finish`, `CountBar::finish`). With
//! `Spin` the caller looks at the flag a few times before the endpoint's wait loop;
//! with `SpinThenBlock` (ranks outnumbering cores) it hands its core over
//! (`sched_yield`) between looks, serving the endpoint every 16 slices, for up to
//! 2000 slices before the endpoint's wait loop (which sleeps at last: the sleep
//! protocol of module `shm`, writers wake sleepers).
//!
//! **Measured** (2-core VM, release builds, ranks pinned, medians of 5 interleaved
//! rounds, docs/coll.md section 10): 2 ranks 0.101 µs next to GASNet-EX's 0.125 µs; 8
//! ranks 4.98 µs next to GASNet-EX's 5.33 µs. The flag barrier measured 0.30 µs
//! against the counter barrier's 0.38 µs at 2 ranks; the counter barrier 5.9 µs
//! against the flag barrier's 6.0 µs at 8 (same runs, a slower state of the VM).

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

    /// Completes a barrier whose last unread member [`step`](Self::step) waited for,
    /// without the team (the wait names that member's area): true if done. The
    /// caller's fast path, outside the layer.
    pub(crate) fn finish(&mut self, p: u32, me: u32) -> bool {
        let Some(WaitOn::Epoch {
            q,
            area,
            ch,
            tag,
            k,
        }) = self.wait
        else {
            return false;
        };
        let last = if me == p - 1 { p - 2 } else { p - 1 };
        if q != last || !epoch_reached(area.bar(ch, 0).load(Ordering::Acquire), tag, k) {
            return false;
        }
        let slot = (k % 2) as usize;
        self.acc = self.acc.merge(Entry::from_words(
            area.bar(ch, 1 + 2 * slot).load(Ordering::Relaxed),
            area.bar(ch, 2 + 2 * slot).load(Ordering::Relaxed),
        ));
        self.next = p;
        self.wait = None;
        true
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
            // Release (and, on x86, the writer's fence of the sleep protocol: `wake_fenced`).
            own.bar(ch, 0).swap(
                (u64::from(t.tag) << 32) | u64::from(self.k),
                Ordering::SeqCst,
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

/// One counter barrier in flight on one member: for teams of more than [`FLAG_MAX`]
/// members (see the module docs). Every arrival adds one to the team's counter word
/// in the leader's area (a tagged compare-and-swap); a named arrival first stores its
/// entry and epoch in its own barrier line, and counts itself named. The arrival that
/// completes the count merges the named entries (none to read when every entry is
/// anonymous), resets the counter and releases the barrier in the leader's release
/// line, which every other member waits for: one contended line and one read line per
/// barrier instead of the flag barrier's `P − 1` lines per member.
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

/// Counter word: `tag << 32 | named << 16 | arrivals`.
const NAMED_ONE: u64 = 1 << 16;

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
            let named = self.acc != Entry::default();
            if named {
                let own = t.areas[t.me as usize];
                let (st, id) = self.acc.words();
                own.bar(ch, 1 + 2 * slot).store(st, Ordering::Relaxed);
                own.bar(ch, 2 + 2 * slot).store(id, Ordering::Relaxed);
                own.bar(ch, 0).store(
                    (u64::from(t.tag) << 32) | u64::from(self.k),
                    Ordering::Relaxed,
                );
            }
            // AcqRel: this arrival publishes its entry, and the last one sees every
            // entry (every arrival is in the counter's release sequence). A counter
            // left by an earlier team on the channel starts again.
            let tag = u64::from(t.tag) << 32;
            let add = 1 + if named { NAMED_ONE } else { 0 };
            let cnt = leader.cnt(ch);
            let mut old = cnt.load(Ordering::Relaxed);
            let new = loop {
                let new = if old & !0xffff_ffff == tag {
                    old + add
                } else {
                    tag | add
                };
                match cnt.compare_exchange_weak(old, new, Ordering::AcqRel, Ordering::Relaxed) {
                    Ok(_) => break new,
                    Err(v) => old = v,
                }
            };
            if (new & 0xffff) as usize == t.areas.len() {
                self.release(t, (new >> 16) & 0xffff != 0);
                return true;
            }
        }
        if epoch_reached(leader.rel(ch, 0).load(Ordering::Acquire), t.tag, self.k) {
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

    /// Completes a barrier whose release [`step`](Self::step) waited for, without the
    /// team (the wait names the leader's area): true if released. The caller's fast
    /// path, outside the layer.
    pub(crate) fn finish(&mut self) -> bool {
        let Some(WaitOn::Release { area, ch, tag, k }) = self.wait else {
            return false;
        };
        if !epoch_reached(area.rel(ch, 0).load(Ordering::Acquire), tag, k) {
            return false;
        }
        let slot = (k % 2) as usize;
        self.acc = Entry::from_words(
            area.rel(ch, 1 + 2 * slot).load(Ordering::Relaxed),
            area.rel(ch, 2 + 2 * slot).load(Ordering::Relaxed),
        );
        self.wait = None;
        true
    }

    /// The last arrival: merges the named entries, resets the counter and releases.
    fn release(&mut self, t: &ShmTeam, named: bool) {
        let ch = t.ch;
        let slot = (self.k % 2) as usize;
        if named {
            for (q, a) in t.areas.iter().enumerate() {
                // A named member stored barrier `k`'s epoch; an anonymous one's is older.
                if q as u32 == t.me
                    || !epoch_reached(a.bar(ch, 0).load(Ordering::Relaxed), t.tag, self.k)
                {
                    continue;
                }
                self.acc = self.acc.merge(Entry::from_words(
                    a.bar(ch, 1 + 2 * slot).load(Ordering::Relaxed),
                    a.bar(ch, 2 + 2 * slot).load(Ordering::Relaxed),
                ));
            }
        }
        let leader = t.areas[0];
        // Nobody arrives at the next barrier before the release below.
        leader
            .cnt(ch)
            .store(u64::from(t.tag) << 32, Ordering::Relaxed);
        let (st, id) = self.acc.words();
        leader.rel(ch, 1 + 2 * slot).store(st, Ordering::Relaxed);
        leader.rel(ch, 2 + 2 * slot).store(id, Ordering::Relaxed);
        // Release (and, on x86, the writer's fence of the sleep protocol: `wake_fenced`).
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
    #[inline]
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
