//! The small-broadcast ring: broadcasts of at most [`CAP`] bytes through shared memory
//! at the pace of an eager FIFO.
//!
//! The general `shm` protocol ([`crate::shm`]) acknowledges every publication with a
//! read-modify-write of a per-slot `ACK` word in the publisher's area and fences after
//! every flag it stores (the sleep protocol). For a broadcast of a few words both
//! are most of the cost: the `ACK` line moves between the cores on every call, and
//! each fence stalls the root until the line of its publication is back in its
//! cache. The ring keeps the slot idea and drops both:
//!
//! - **Slots.** Every member has, per channel, a ring of [`SLOTS`] slots of two cache
//!   lines in its own area: the first holds a `SEQ` word and [`WORDS`] data words, the
//!   second stays empty (see *One line per slot* below). Broadcast number `seq` of a
//!   team (the team's sequence number, shared with its other collectives) uses slot
//!   `seq mod SLOTS` of the *root's* ring.
//! - **Packed slots.** On a team with more members than its host has CPUs
//!   ([`packs`]), a broadcast of at most [`TINY`] bytes (one word) uses packed slot
//!   `seq mod TSLOTS` of the root's packed ring instead: 16 bytes (`SEQ`, then the
//!   data word), [`PACK`] to a cache line, so that a reader behind its root takes up
//!   to `PACK` broadcasts per line it fetches (as MPI eager FIFOs pack small
//!   messages). The protocol is the same but for reuse (below). Elsewhere one-word
//!   blocks take the ring's slots like larger ones.
//! - **Publishing** (the root): the data words, then `SEQ = tag(seq)` (release). The
//!   tag digests the layer's generation, the team, the belief (the descriptor:
//!   operation, root, element type, length, sync modes; [`crate::rootcheck`]) and
//!   `seq`, so a reader never takes a stale slot, another team's, or one of a member
//!   that passed another descriptor.
//! - **Reading** (every other member): waits until `SEQ` holds the tag it computes
//!   (acquire), copies the data words out, and stores `DONE = seq` in its own check
//!   line (release) — the check line's `DONE` word, which every collective through
//!   the channel advances anyway. That store is the acknowledgement: a plain store
//!   to a line of the reader's own, no read-modify-write.
//! - **Reuse** (the root, lazily): before it overwrites a slot it published in
//!   before (at `prev`), every reader's `DONE` must have reached `prev`. The root
//!   remembers the smallest `DONE` it last saw ([`Local`]) and reads the readers'
//!   check lines again only when a slot's `prev` is beyond it: about once every
//!   [`SLOTS`] broadcasts while the readers keep up, never otherwise. A root thus
//!   runs up to `SLOTS - 1` broadcasts ahead of its slowest reader, and the readers
//!   never wait for each other. A packed slot waits instead for the latest previous
//!   publication in it *and the packed slots after it in its line*: a root starting
//!   a line waits until every reader finished the line's previous lap, so it never
//!   stores into a line a reader still reads old broadcasts from (its lead is then
//!   `TSLOTS - PACK` to `TSLOTS - 1` broadcasts). A packed slot needs the same wait
//!   for correctness as a slot; the rest of the line is for speed.
//! - **Opening** (the root, once per team): the first publication of a team waits
//!   until every reader has claimed the channel (its check line names the team), so
//!   a `DONE` word read later is always the team's. When a channel changes hands,
//!   the first publication of the new team first waits until every member of the
//!   previous team has read the previous team's last publication or left that team
//!   (its check line names another): a member slow to finish the old team's last
//!   broadcast still finds its data.
//!
//! **Sleeping without a fence per broadcast.** A member that may sleep while it waits
//! for a flag sets its sticky `MAYSLEEP` word: at once under `WaitPolicy::Block`, at
//! its first sleep announcement under spin-then-block (before it, the member never
//! sleeps).
//! A member that stores a ring flag (`SEQ` as root, `DONE` as reader) and sees the
//! `MAYSLEEP` word of a member that may wait for it sets its own sticky `FENCING` word
//! and, from then on, after every ring flag it stores, fences (sequentially
//! consistent) and wakes those of them whose `SLEEPY` word is set. A member waiting
//! for a ring flag may sleep only if the member that will store it has `FENCING` set
//! (read after its own `SLEEPY` store and fence): then either it sees the flag or the
//! storer sees its `SLEEPY` word (a flag stored before `FENCING` was set is visible
//! through `FENCING`'s release). Otherwise it keeps the endpoint awake (yielding)
//! until the storer notices. So members that never sleep (`Spin`, or a spin part
//! never exhausted) never make anyone fence: a broadcast costs the root its stores and the
//! readers one line transfer and one store each. The model is checked by loom
//! (`tests/loom_ring.rs`).
//!
//! **One line per slot.** A slot's data never reach its second line, and that line
//! holds nothing: a broadcast moves one line, and the line a reader pulls in pairs
//! (CPUs fetch the other line of a 128-byte pair with the one missed) is never one the
//! root is storing into. Measured on 2 ranks (AMD EPYC VM, alternated runs, the build
//! before issue 12 as reference): with 15 data words over both lines, a broadcast of
//! 64-120 bytes took 0.12-0.13 µs against the slot protocol's 0.076-0.079; moving
//! the data words after the first line to a third line (no pair shared with `SEQ`'s)
//! took 64 bytes to 0.094 µs only; slots of one line packed back to back made 16-56
//! bytes 10 % slower (0.086-0.094 µs against 0.078-0.086). Blocks of 57 bytes and
//! more therefore take the slot protocol ([`crate::shm`]), as fast as the ring for
//! them (0.073-0.078 µs).
//!
//! **Limits.** At most [`CAP`] bytes per broadcast (a slot's data words); the root's
//! lead over its slowest reader is `SLOTS - 1` broadcasts (packed: at least
//! `TSLOTS - PACK`); members must pass the same size, as for every collective (the
//! block length is part of the belief, [`crate::rootcheck`], which the tags digest:
//! a reader never takes a publication of another length, and the stall checks
//! report the mismatch instead of a hang); the readers poll the root's
//! line, so the traffic grows with the team like the slot protocol's (teams up to
//! `shm`'s limit); `All` entry or exit synchronisation needs the slot protocol's extra
//! rounds, and other operations keep the slots.
//!
//! **Why hand-written.** The ring is not a queue in process memory: it is a fixed
//! layout of words at known offsets of every member's area, mapped by other processes
//! at other addresses (no pointers, no allocation, no `Drop`), read by every member
//! rather than consumed by one (a one-to-many broadcast, where in-process broadcast
//! queues and SPSC/MPMC ring crates hand each element to one consumer or keep
//! per-reader cursors in process memory), acknowledged through words the layer
//! already keeps (the check line's `TAG` and `DONE`, shared with the root-mismatch
//! checks of [`crate::rootcheck`]), tagged so that stale data of another team, layer
//! or root is never taken, and woken through the conduit's doorbell by the endpoint's
//! wait policy. No crate offers that layout or that sleep protocol; the protocol is
//! small enough to check whole with loom instead.
//!
//! This module holds the protocol only: it reads and writes words through [`Words`]
//! (a member's area in a real job, plain atomics in the loom model) and reports what
//! it waits for and whom to wake; the layer drives it ([`crate::shmdrive`]).

use gex_sync::atomic::{AtomicU64, Ordering, fence};

/// Slots of a member's ring, per channel (1 in the loom model, so that every
/// broadcast after the first reuses a slot).
pub(crate) const SLOTS: usize = if cfg!(gex_loom) { 1 } else { 32 };
/// Data words of a slot (after its `SEQ` word, in the same cache line; the module
/// docs, *One line per slot*, say why the slot's second line stays empty).
pub(crate) const WORDS: usize = 7;
/// Largest broadcast (bytes) the ring carries.
pub(crate) const CAP: usize = WORDS * 8;
/// Largest broadcast (bytes) that goes through the packed ring: slots of a `SEQ` word
/// and one data word, [`PACK`] to a cache line.
pub(crate) const TINY: usize = 8;
/// Slots of a member's packed ring, per channel; they follow the [`SLOTS`] slots of
/// its ring in slot numbering (2 in the loom model: one line of two).
pub(crate) const TSLOTS: usize = if cfg!(gex_loom) { 2 } else { 64 };
/// Packed slots per cache line (2 in the loom model).
pub(crate) const PACK: usize = if cfg!(gex_loom) { 2 } else { 4 };
const _: () = assert!(SLOTS + TSLOTS <= 128 && TSLOTS % PACK == 0);
/// True if a team of `p` members on a host of `host_cpus` CPUs (0: unknown) puts
/// broadcasts of at most [`TINY`] bytes in packed slots; otherwise they take the
/// ring's one-line slots as larger ones do. Every member of a `shm` team is on one
/// host and reads the same count (the host's online CPUs, whatever its affinity), so
/// the members agree.
///
/// Packed where the members outnumber the CPUs: a reader runs only now and then and
/// then takes up to [`PACK`] broadcasts per line it fetches. Where every member has a
/// CPU, a reader keeps up with its root and polls the line the root stores into
/// next; with packed slots, each of the root's next `PACK - 1` publications then
/// needs that line back from the reader (measured on 2 vCPUs, docs/coll.md, *The
/// packed slots decided per host*).
pub(crate) fn packs(p: u32, host_cpus: u32) -> bool {
    host_cpus == 0 || p > host_cpus
}
/// Slots after the one just read whose first line a reader prefetches.
const PREFETCH: usize = 3;
/// Lines of the packed ring after the one just read that a reader prefetches.
const TPREFETCH: usize = 2;
/// Marks a check line's `TAG` and `DONE` words as written (0 is "never").
pub(crate) const VALID: u64 = 1 << 32;

/// The words of one member's area that the ring uses.
pub(crate) trait Words: Copy {
    /// The `SEQ` word of slot `s` of the ring of channel `ch` (`s < SLOTS`), or of
    /// packed slot `s - SLOTS` (`SLOTS <= s < SLOTS + TSLOTS`; packed slot `k` lies in
    /// line `k / PACK` of the packed ring).
    fn seq(&self, ch: usize, s: usize) -> &AtomicU64;
    /// Data word `i` (`0..WORDS`; packed slots: 0 only) of that slot.
    fn data(&self, ch: usize, s: usize, i: usize) -> &AtomicU64;
    /// The check line's `TAG` word of channel `ch`: `team | VALID` once the owner
    /// claimed the channel for the team tagged `team`.
    fn claim(&self, ch: usize) -> &AtomicU64;
    /// The check line's `DONE` word of channel `ch`: `seq | VALID` of the last
    /// collective the owner finished through the channel.
    fn done(&self, ch: usize) -> &AtomicU64;
    /// The owner's `SLEEPY` word (it may be asleep).
    fn sleepy(&self) -> &AtomicU64;
    /// The owner's `MAYSLEEP` word (sticky: it may sleep).
    fn may_sleep(&self) -> &AtomicU64;
    /// The owner's `FENCING` word (sticky: it fences after every ring flag it stores
    /// and wakes sleepers).
    fn fencing(&self) -> &AtomicU64;
    /// Hints the CPU to fetch the first line of slot `s` of channel `ch` (a reader
    /// about to read it); does nothing by default.
    #[inline]
    fn prefetch(&self, ch: usize, s: usize) {
        let _ = (ch, s);
    }
}

/// A team as the ring sees it on one member.
#[derive(Clone, Copy, Debug)]
pub(crate) struct View<'a, A> {
    /// Every member's area, by team rank.
    pub(crate) areas: &'a [A],
    /// This member's team rank.
    pub(crate) me: u32,
    /// The team's channel.
    pub(crate) ch: usize,
    /// The team's tag (what its members' check lines name once claimed).
    pub(crate) team: u32,
}

/// `a` comes after `b` in sequence order (wrapping).
#[inline]
fn after(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

/// The tag of broadcast `seq` whose publications digest to `base` (never 0).
#[inline]
pub(crate) fn tag(base: u64, seq: u32) -> u64 {
    let mut x = base ^ u64::from(seq);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (x ^ (x >> 31)).max(1)
}

/// What a ring broadcast waits for.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Wait<A> {
    /// Member `q`'s publication: its slot `slot` holds `tag` — or the waiting member
    /// (`own`) finished broadcast `seq` of the team tagged `team` already, or left the
    /// team (a reader
    /// that completed outside the layer, [`Bcast::finish`], leaves this wait recorded
    /// in the layer until its next poll; the root may reuse the slot by then).
    Post {
        q: u32,
        area: A,
        ch: usize,
        slot: usize,
        tag: u64,
        own: A,
        team: u32,
        seq: u32,
    },
    /// Member `q` finished broadcast `seq` of the team tagged `team` (`DONE`), or —
    /// with `left` — left that team (its check line names another).
    Done {
        q: u32,
        area: A,
        ch: usize,
        team: u32,
        seq: u32,
        left: bool,
    },
    /// Member `q` claimed the channel for the team tagged `team`.
    Claim {
        q: u32,
        area: A,
        ch: usize,
        team: u32,
    },
}

/// For hang reports: what the member waits for, in words (no addresses).
impl<A> std::fmt::Display for Wait<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Wait::Post { q, ch, slot, .. } if slot < SLOTS => write!(
                f,
                "member {q}'s small-broadcast publication in ring slot {slot} of channel {ch}"
            ),
            Wait::Post { q, ch, slot, .. } => write!(
                f,
                "member {q}'s small-broadcast publication in packed ring slot {} of channel {ch}",
                slot - SLOTS
            ),
            Wait::Done {
                q,
                ch,
                seq,
                left: false,
                ..
            } => write!(
                f,
                "member {q} to read broadcast {seq} (channel {ch}) before its ring slot is reused"
            ),
            Wait::Done {
                q,
                ch,
                seq,
                left: true,
                ..
            } => write!(
                f,
                "member {q} to read the previous team's broadcast {seq} or leave that team (channel {ch} changes hands)"
            ),
            Wait::Claim { q, ch, .. } => write!(f, "member {q} to claim channel {ch}"),
        }
    }
}

impl<A: Words> Wait<A> {
    /// True once what it waits for has happened.
    #[inline]
    pub(crate) fn ready(&self) -> bool {
        match *self {
            Wait::Post {
                area,
                ch,
                slot,
                tag,
                own,
                team,
                seq,
                ..
            } => {
                area.seq(ch, slot).load(Ordering::Acquire) == tag
                    || done_reached(own, ch, team, seq, true)
            }
            Wait::Done {
                area,
                ch,
                team,
                seq,
                left,
                ..
            } => done_reached(area, ch, team, seq, left),
            Wait::Claim { area, ch, team, .. } => {
                area.claim(ch).load(Ordering::Acquire) == u64::from(team) | VALID
            }
        }
    }

    /// True if the member waiting for this may sleep: the member that makes it
    /// ready fences and wakes sleepers (its `FENCING` word; the caller has stored its
    /// own `SLEEPY` word and fenced). Waits whose flag is stored without a wake (a
    /// claim, a member leaving a team) never sleep.
    pub(crate) fn sleep_safe(&self) -> bool {
        match *self {
            Wait::Post { area, .. }
            | Wait::Done {
                area, left: false, ..
            } => area.fencing().load(Ordering::Acquire) != 0,
            Wait::Done { left: true, .. } | Wait::Claim { .. } => false,
        }
    }
}

/// True if `area`'s owner finished broadcast `seq` of team `team`, or (`left`) no
/// longer holds the channel for that team.
#[inline]
fn done_reached<A: Words>(area: A, ch: usize, team: u32, seq: u32, left: bool) -> bool {
    let claim = area.claim(ch).load(Ordering::Acquire);
    if claim != u64::from(team) | VALID {
        return left;
    }
    let d = area.done(ch).load(Ordering::Acquire);
    d & VALID != 0 && !after(seq, d as u32)
}

/// This member's record of its own ring on one channel (one per channel of the
/// endpoint: a channel outlives the teams that hold it).
#[derive(Debug)]
pub(crate) struct Local<A> {
    /// The team whose publications `last` records (0: none yet).
    team: u32,
    /// Every other member of `team` claimed the channel.
    open: bool,
    /// The other members' areas of `team` (read when the channel changes hands).
    peers: Vec<A>,
    /// The last publication per slot (packed ones after the others) under `team`
    /// (valid where `valid` has the bit).
    last: [u32; SLOTS + TSLOTS],
    valid: u128,
    /// The latest publication under `team`.
    latest: Option<u32>,
    /// Every other member of `team` finished broadcast `lo` (or left the team).
    lo: Option<u32>,
}

impl<A> Default for Local<A> {
    fn default() -> Self {
        Local {
            team: 0,
            open: false,
            peers: Vec::new(),
            last: [0; SLOTS + TSLOTS],
            valid: 0,
            latest: None,
            lo: None,
        }
    }
}

impl<A: Words> Local<A> {
    /// `None` if this member may publish broadcast `seq` of team `t` in its slot now;
    /// else what it must wait for first (see the module docs: opening, reuse).
    ///
    /// Inline: the common case (the team's channel open, the slot's previous
    /// publication known to be read) is a few compares; the rest is out of line
    /// ([`may_publish_slow`](Self::may_publish_slow)), so that a root's call keeps
    /// its state in registers and stores little besides its publication (each store
    /// a root makes waits in the store buffer behind the previous publication's
    /// line, which a reader may hold: docs/coll.md, *Broadcast 8 B against Open MPI*).
    #[inline(always)]
    fn may_publish(&mut self, t: &View<'_, A>, slot: usize) -> Option<Wait<A>> {
        if self.team == t.team && self.open {
            match self.prev(slot) {
                None => return None,
                Some(prev) if self.lo.is_some_and(|lo| !after(prev, lo)) => return None,
                Some(_) => {}
            }
        }
        self.may_publish_slow(*t, slot)
    }

    /// [`may_publish`](Self::may_publish) past its common case: a new team on the
    /// channel, a channel not yet open, or the readers' `DONE` words to read again.
    #[cold]
    #[inline(never)]
    fn may_publish_slow(&mut self, t: View<'_, A>, slot: usize) -> Option<Wait<A>> {
        if self.team != t.team {
            if let Some(latest) = self.latest {
                // The previous team's members read its last publication, or left it.
                for (q, &area) in self.peers.iter().enumerate() {
                    if !done_reached(area, t.ch, self.team, latest, true) {
                        return Some(Wait::Done {
                            q: q as u32,
                            area,
                            ch: t.ch,
                            team: self.team,
                            seq: latest,
                            left: true,
                        });
                    }
                }
            }
            self.team = t.team;
            self.open = false;
            self.peers.clear();
            self.peers.extend(
                t.areas
                    .iter()
                    .enumerate()
                    .filter(|&(q, _)| q as u32 != t.me)
                    .map(|(_, &a)| a),
            );
            self.valid = 0;
            self.latest = None;
            self.lo = None;
        }
        if !self.open {
            for (q, &area) in t.areas.iter().enumerate() {
                let claimed = area.claim(t.ch).load(Ordering::Acquire) == u64::from(t.team) | VALID;
                if q as u32 != t.me && !claimed {
                    return Some(Wait::Claim {
                        q: q as u32,
                        area,
                        ch: t.ch,
                        team: t.team,
                    });
                }
            }
            self.open = true;
        }
        // Never published in: free.
        let prev = self.prev(slot)?;
        if self.lo.is_some_and(|lo| !after(prev, lo)) {
            return None;
        }
        // Read the readers' `DONE` words again; keep the smallest.
        let mut lo = None::<u32>;
        for (q, &area) in t.areas.iter().enumerate() {
            if q as u32 == t.me {
                continue;
            }
            let claim = area.claim(t.ch).load(Ordering::Acquire);
            if claim != u64::from(t.team) | VALID {
                // Left the team: it reads nothing more of it.
                continue;
            }
            let d = area.done(t.ch).load(Ordering::Acquire);
            if d & VALID == 0 || after(prev, d as u32) {
                return Some(Wait::Done {
                    q: q as u32,
                    area,
                    ch: t.ch,
                    team: t.team,
                    seq: prev,
                    left: false,
                });
            }
            let d = d as u32;
            lo = Some(match lo {
                Some(l) if after(d, l) => l,
                _ => d,
            });
        }
        self.lo = Some(lo.unwrap_or(prev));
        None
    }

    /// The publication every reader must have finished before this member overwrites
    /// `slot` (`None`: nothing to wait for). A slot of the ring: its last one. A
    /// packed slot: the latest of the previous publications in it and the packed
    /// slots after it in its line (those of the lap before), so that the root never
    /// stores into a line a reader still reads the previous lap of.
    #[inline(always)]
    fn prev(&self, slot: usize) -> Option<u32> {
        if slot < SLOTS {
            return (self.valid & (1 << slot) != 0).then(|| self.last[slot]);
        }
        let end = SLOTS + ((slot - SLOTS) / PACK + 1) * PACK;
        let mut latest = None::<u32>;
        for s in slot..end {
            if self.valid & (1 << s) != 0 {
                let l = self.last[s];
                latest = Some(match latest {
                    Some(a) if !after(l, a) => a,
                    _ => l,
                });
            }
        }
        latest
    }

    /// Records the publication of `seq` in `slot`.
    #[inline(always)]
    fn published(&mut self, slot: usize, seq: u32) {
        self.last[slot] = seq;
        self.valid |= 1 << slot;
        self.latest = Some(seq);
    }
}

/// This member's side of the sleep protocol for publications: ring flags, and the
/// slot protocol's `POST` words ([`crate::shm`], *Sleeping*).
#[derive(Debug, Default)]
pub(crate) struct Fencing {
    /// This member's `FENCING` word is set.
    pub(crate) on: bool,
}

impl Fencing {
    /// After this member (`own`) stored a ring flag members `mask` (bit = team rank,
    /// areas `areas`) may wait for: returns the members to wake. Fences (and reads
    /// their `SLEEPY` words) once this member is fencing, which it becomes when one of
    /// them may sleep.
    ///
    /// Inline: while nobody may sleep it is one look per member in `mask`; the rest
    /// is out of line ([`fenced`](Self::fenced)).
    #[inline(always)]
    pub(crate) fn after_store<A: Words>(&mut self, own: A, areas: &[A], mask: u64) -> u64 {
        if !self.on {
            // (A loop over the bits rather than an iterator adaptor, which the
            // compiler left as a call.)
            let mut m = mask;
            let mut sleeps = false;
            while m != 0 {
                let q = m.trailing_zeros() as usize;
                m &= m - 1;
                sleeps |= areas[q].may_sleep().load(Ordering::Relaxed) != 0;
            }
            if !sleeps {
                return 0;
            }
        }
        self.fenced(own, areas, mask)
    }

    /// [`after_store`](Self::after_store) once a member in `mask` may sleep or this
    /// member fences already.
    #[cold]
    #[inline(never)]
    fn fenced<A: Words>(&mut self, own: A, areas: &[A], mask: u64) -> u64 {
        if !self.on {
            // From now on, every ring flag this member stores is fenced; the flags
            // stored before are visible to whoever sees this word (release).
            own.fencing().store(1, Ordering::Release);
            self.on = true;
        }
        // Pairs with the fence of a sleeper (after its `SLEEPY` store).
        fence(Ordering::SeqCst);
        each(mask)
            .filter(|&q| areas[q].sleepy().load(Ordering::Relaxed) != 0)
            .fold(0, |m, q| m | 1 << q)
    }
}

/// The team ranks in `mask`.
fn each(mask: u64) -> impl Iterator<Item = usize> {
    let mut m = mask;
    std::iter::from_fn(move || {
        if m == 0 {
            return None;
        }
        let q = m.trailing_zeros() as usize;
        m &= m - 1;
        Some(q)
    })
}

/// One ring broadcast in flight on one member.
#[derive(Debug)]
pub(crate) struct Bcast<A> {
    seq: u32,
    tag: u64,
    root: u32,
    /// Bytes of the block.
    n: usize,
    /// A block of at most [`TINY`] bytes takes a packed slot ([`packs`]).
    packed: bool,
    /// What [`step`](Self::step) waited for when it last returned false.
    pub(crate) wait: Option<Wait<A>>,
    /// Members to wake (bit = team rank), after a step that stored a flag.
    pub(crate) wake: u64,
}

impl<A: Words> Bcast<A> {
    /// Broadcast `seq` of a team (root `root`, `n` bytes, `n <= CAP`) whose
    /// publications digest to `base` (see [`tag`]); `packed`: a block of at most
    /// [`TINY`] bytes takes a packed slot ([`packs`] says when; every member of the
    /// team must pass the same).
    pub(crate) fn new(seq: u32, base: u64, root: u32, n: usize, packed: bool) -> Self {
        debug_assert!(n <= CAP);
        Bcast {
            seq,
            tag: tag(base, seq),
            root,
            n,
            packed,
            wait: None,
            wake: 0,
        }
    }

    /// The root (team rank).
    pub(crate) fn root(&self) -> u32 {
        self.root
    }

    /// The slot of this broadcast in the root's ring (or packed ring: at most
    /// [`TINY`] bytes).
    fn slot(&self) -> usize {
        if self.packed && self.n <= TINY {
            SLOTS + self.seq as usize % TSLOTS
        } else {
            wrap(self.seq as usize)
        }
    }

    /// Advances as far as possible without waiting; true once complete. The root
    /// publishes `input` (and completes: it waits for nobody but the readers of its
    /// slot's previous publication); a reader copies the block into `out` once
    /// published. Sets [`wake`](Self::wake) after storing a flag.
    ///
    /// Inline, as what it calls: a call that completes keeps the broadcast's state
    /// in registers instead of spilling it (see [`Local::may_publish`]).
    #[inline(always)]
    pub(crate) fn step(
        &mut self,
        t: &View<'_, A>,
        local: &mut Local<A>,
        fencing: &mut Fencing,
        input: &[u8],
        out: &mut [u8],
    ) -> bool {
        let own = t.areas[t.me as usize];
        let slot = self.slot();
        if t.me == self.root {
            if let Some(w) = local.may_publish(t, slot) {
                self.wait = Some(w);
                return false;
            }
            if self.n <= 8 {
                // One word (the common small case): no chunk iterator.
                own.data(t.ch, slot, 0)
                    .store(word_of(&input[..self.n]), Ordering::Relaxed);
            } else {
                for (i, c) in input[..self.n].chunks(8).enumerate() {
                    own.data(t.ch, slot, i).store(word_of(c), Ordering::Relaxed);
                }
            }
            own.seq(t.ch, slot).store(self.tag, Ordering::Release);
            local.published(slot, self.seq);
            self.finish_here(t, own, fencing, all_but(t.areas.len(), t.me));
            return true;
        }
        let area = t.areas[self.root as usize];
        if area.seq(t.ch, slot).load(Ordering::Acquire) != self.tag {
            self.wait = Some(Wait::Post {
                q: self.root,
                area,
                ch: t.ch,
                slot,
                tag: self.tag,
                own,
                team: t.team,
                seq: self.seq,
            });
            return false;
        }
        self.copy_out(area, t.ch, slot, out);
        // A root running ahead has published the next slots already: fetch their
        // lines now, so that the next broadcasts' misses overlap this one's work.
        if slot < SLOTS {
            for k in 1..=PREFETCH {
                area.prefetch(t.ch, wrap(slot + k));
            }
        } else {
            for k in 1..=TPREFETCH {
                area.prefetch(t.ch, SLOTS + (slot - SLOTS + k * PACK) % TSLOTS);
            }
        }
        self.finish_here(t, own, fencing, 1 << self.root);
        true
    }

    /// A reader's completion outside the layer, once [`step`](Self::step) waited for
    /// the publication and it is there: copies the block into `out` and stores
    /// `DONE`; true if done. Only while neither this member fences nor the root may
    /// sleep (else this member must fence and wake it: the layer does, in
    /// [`step`](Self::step)); false otherwise, with nothing stored.
    pub(crate) fn finish(&mut self, own: A, fencing: &Fencing, out: &mut [u8]) -> bool {
        let Some(Wait::Post { area, ch, slot, .. }) = self.wait else {
            return false;
        };
        if fencing.on
            || area.seq(ch, slot).load(Ordering::Acquire) != self.tag
            || area.may_sleep().load(Ordering::Relaxed) != 0
        {
            return false;
        }
        self.copy_out(area, ch, slot, out);
        own.done(ch)
            .store(u64::from(self.seq) | VALID, Ordering::Release);
        self.wait = None;
        true
    }

    /// Copies the published block out of `area`'s slot (a whole word with one store,
    /// not a call to `memcpy` for a length known only at run time).
    #[inline(always)]
    fn copy_out(&self, area: A, ch: usize, slot: usize, out: &mut [u8]) {
        if self.n == 8 {
            let w = area.data(ch, slot, 0).load(Ordering::Relaxed).to_le_bytes();
            out[..8].copy_from_slice(&w);
            return;
        }
        for (i, c) in out[..self.n].chunks_mut(8).enumerate() {
            let w = area.data(ch, slot, i).load(Ordering::Relaxed).to_le_bytes();
            match <&mut [u8; 8]>::try_from(&mut *c) {
                Ok(whole) => *whole = w,
                Err(_) => c.copy_from_slice(&w[..c.len()]),
            }
        }
    }

    /// Stores this member's `DONE` (the acknowledgement readers give, and what roots
    /// of later broadcasts wait for) and the sleep protocol's part for the flags just
    /// stored (`mask`: who may wait for them).
    #[inline(always)]
    fn finish_here(&mut self, t: &View<'_, A>, own: A, fencing: &mut Fencing, mask: u64) {
        own.done(t.ch)
            .store(u64::from(self.seq) | VALID, Ordering::Release);
        self.wake |= fencing.after_store(own, t.areas, mask);
        self.wait = None;
    }
}

/// `s` as a slot number.
#[inline]
// `SLOTS` is 1 in the loom model.
#[allow(clippy::modulo_one)]
fn wrap(s: usize) -> usize {
    s % SLOTS
}

/// Every member of a team of `p` but `me` (bit = team rank).
fn all_but(p: usize, me: u32) -> u64 {
    let all = if p >= 64 { u64::MAX } else { (1u64 << p) - 1 };
    all & !(1u64 << me)
}

/// Up to 8 bytes as a little-endian word (zero-padded).
#[inline(always)]
fn word_of(c: &[u8]) -> u64 {
    if let Ok(whole) = <[u8; 8]>::try_from(c) {
        return u64::from_le_bytes(whole);
    }
    let mut b = [0u8; 8];
    b[..c.len()].copy_from_slice(c);
    u64::from_le_bytes(b)
}
