//! Shared-memory collectives: the `shm` algorithm.
//!
//! When every member of a team maps every other member's auxiliary area (the layer's
//! slice of it, [`Cx::aux`](gex_core::layer::Cx::aux)), data moves by plain loads and
//! stores through those areas, synchronised by flag words, with no AM at all. Every operation is the same pattern, repeated per *round*:
//!
//! 1. **publish**: a member that has data for others in this round waits until every
//!    reader of its previous publication in the same slot acknowledged it, copies its
//!    piece(s) into the slot of its own area and stores the round's tag in the slot's
//!    `POST` word (release);
//! 2. **read**: each member waits for the tag in the `POST` word of every member it
//!    reads from (acquire), in rank order, copies or combines the bytes into its
//!    output, and increments that slot's `ACK` word (release).
//!
//! Reductions combine in rank order (`in_0 ⊕ in_1 ⊕ …`), so non-commutative operators
//! are exact. Blocks larger than a slot go in several rounds (chunks); each member has
//! two large slots per channel and alternates them (by round and by collective), so
//! publishing round `g + 1` or the next collective overlaps the readers of round `g`;
//! collectives of one round that fit a small slot (4 KiB on the world's channel,
//! 896 bytes on the others) take 32 small slots in turn, so a root runs up to 31 of
//! them ahead of its slowest reader.
//! Entry (in-all) and exit (out-all) synchronisation add one empty round each.
//! A publication of at most 48 bytes in a small slot goes *inline*, in the cache line
//! of the slot's `POST` word: a reader's one line transfer brings tag and data.
//!
//! **By reference.** A blocking call whose input lies in the member's segment, with
//! blocks of at least [`BYREF_MIN`] bytes, publishes a reference instead of the data:
//! the slot's `REF` word holds 1 + the input's segment offset, and readers copy their
//! pieces straight from the publisher's segment as mapped in their process (one copy
//! instead of two; every member maps every member's segment wherever it maps their
//! areas, by the conduit contract). The round structure is unchanged (readers learn
//! per publication which way it came), and the publisher completes only once every
//! reader acknowledged its by-reference publications, so its input is never read
//! after the call returned `Ok` (a call that fails or unwinds may leave readers
//! behind: the `# Safety` of `Segment::as_slice`, whence such an input comes, asks
//! the program to leave it unwritten until a later collective of the team).
//!
//! **Across address spaces (CMA).** A blocking call whose input is private memory
//! (not in the segment) and whose operation only copies (broadcast, scatter, gather,
//! gather_all, exchange), with blocks of at least [`BYREF_MIN`] bytes, publishes the
//! input's *virtual address* (`REF` = [`CMA_FLAG`] | address) when every member of the
//! team is able to take part ([`cma_capable`]: its area's `PID` word is set, and its
//! `PIDNS` word names the publisher's pid namespace): readers
//! copy their pieces straight into their output with `process_vm_readv(2)` from the
//! publisher's process (the pid in its area's `PID` word), one copy instead of two,
//! the way Open MPI's and UCX's shared-memory transports move large messages. It is
//! one system call per piece, taken only for blocks of 16 KiB and more, never on the
//! small-message path. Reductions keep the slot path (a reader would need a bounce
//! buffer to combine from). Completion is as by reference: the publisher returns once
//! every reader acknowledged.
//!
//! **Channels.** The area holds [`NCH`] channels; the world team uses channel 0 (the
//! largest), a new team agrees at creation on a channel free on all its members (an
//! AND of their masks), and frees it when its last handle is dropped. A team that gets
//! no channel (all busy, members on several hosts, no mapping, `gex_force_am_rma`)
//! never offers `shm` ([`Query::shm`] is false). Collectives of one team use its
//! channel one at a time, in sequence order (the engine enforces it), so members never
//! wait for each other in different orders.
//!
//! **Header.** Before the channels, every area has a header: the generation, `PID` and
//! `PIDNS` words, the `SLEEPY` word (see *Sleeping*), and per channel: the
//! barrier line (`EPOCH` and two entries, [`crate::barrier`]), the check line
//! (`BELIEF`, `DONE`, `POISON`: what the owner runs and has finished, and whether it
//! saw members disagree on the channel's team, [`crate::rootcheck`]), the team
//! sleep line (`TEAMSLEEP`: some member of the owner's team on the channel may
//! sleep) and two descriptor lines (the owner's last two collective descriptors and
//! what it found when it saw a mismatch, [`crate::rootcheck`]). The team leader's
//! area also holds the counter barrier's release and arrival lines.
//!
//! **Sleeping.** A member whose wait may end in a kernel sleep (the endpoint's wait
//! policy) first stores 1 in its `SLEEPY` word, then (after a sequentially consistent
//! fence) looks once more at what it waits for. A member that stores a flag another
//! member may wait for (`POST`, `ACK`, `EPOCH`) fences the same way and wakes every
//! such member whose `SLEEPY` word is set ([`Cx::wake`](gex_core::layer::Cx::wake)):
//! either the sleeper sees the flag before it sleeps, or the writer sees its word and
//! wakes it. A member that does not sleep costs writers one load of a line that stays
//! in their cache.
//!
//! **Tags.** A `POST` word holds `prefix ^ (2 · (sequence number << 32 | round)) · K`:
//! `prefix` is an odd digest of the generation, the team id and the belief, `K` an
//! odd constant. Doubling and multiplying by an odd number is a one-to-one map of
//! 64-bit words onto the even ones, so the rounds of a team's last 2³¹ collectives
//! never share a tag, and a tag is odd, never 0 (the word of a slot nobody published
//! in). A reader waits for the exact tag, so a stale publication of another team, of
//! an earlier collective or of an earlier layer on the same endpoint (the generation
//! word counts them), or of a member that runs another collective or passed another
//! descriptor (the belief, [`crate::rootcheck`]), is never mistaken for the awaited one
//! (publications under other digests match only by a 2⁻⁶³ chance). A tag costs a
//! shift and a multiplication: no hashing per collective (the digest is kept).
//!
//! # Safety
//! [`Area`] turns the base of a mapped auxiliary area slice plus fixed offsets into
//! atomics (8-byte aligned: the slice is 64-byte aligned and every offset is a
//! multiple of 8) and into raw data pointers inside the slice ([`AREA_LEN`] bytes, the
//! layer's [`AUX_BYTES`](gex_core::layer::Layer::AUX_BYTES)). The conduit keeps the
//! areas (and the segments) mapped for the life of the conduit, which the endpoint
//! carrying the layer keeps alive. Flag words are only accessed atomically.
//! Slot data are written by their owner only after every reader of the previous
//! publication acknowledged it (acquire on `ACK`), and read by others only after they
//! saw the tag (acquire on `POST`) and before they acknowledge (release on `ACK`): no
//! data race. A by-reference input is borrowed by the blocking call for its whole
//! duration (the caller cannot change it) and the call returns `Ok` only after every
//! reader acknowledged (acquire on `ACK`); such an input lies in the segment, so the
//! program made it with `unsafe` `Segment::as_slice`, whose contract also covers the
//! readers a failed or unwound call leaves behind; readers check the reference against
//! the publisher's mapped segment before reading. A CMA read goes through the kernel,
//! which checks the address against the publisher's mappings; the publisher's input
//! stays borrowed and unchanged until every reader acknowledged, as by reference.
#![allow(unsafe_code)]

use crate::algo::{Algorithm, Builtin, Kind, PlanCtx, Query};
use crate::loggp::LogGP;
use crate::mix::mix_all;
use crate::op::{AddrMode, OpKind, Transport};
use crate::sched::{ReduceFn, Schedule};
use gex_core::EpAddr;
use gex_sync::atomic::{AtomicU32, AtomicU64, Ordering};

mod op;
#[cfg(gex_loom)]
pub(crate) mod shadow;
pub use gex_sync::cma::cma_capable;
use gex_sync::cma::{cma_read, pid_namespace};
pub(crate) use op::{Io, OwnedShm, Publish, ShmOp};
use std::ptr::NonNull;
use std::sync::Arc;

/// Check line words (per channel; [`crate::rootcheck`] reads and writes them). `TAG`
/// and `DONE` are also the small-broadcast ring's claim and acknowledgement words
/// ([`crate::ring`]).
pub(crate) mod chk {
    /// The team's tag (with [`VALID`](crate::ring::VALID)): whose line this is.
    pub(crate) const TAG: usize = 0;
    /// The sequence number and belief of the collective the member started last.
    pub(crate) const BELIEF: usize = 1;
    /// The sequence number of the member's last finished collective (with
    /// [`VALID`](crate::ring::VALID)).
    pub(crate) const DONE: usize = 2;
    /// Set (1) once the member poisoned the team (its finding is in its descriptor
    /// lines).
    pub(crate) const POISON: usize = 3;
}

/// Bytes of the layer's slice of every auxiliary area.
pub(crate) const AREA_LEN: usize = (1 << 20) - 4096;
/// Channels in the area (channel 0: the world team).
pub(crate) const NCH: usize = 4;
/// Offset of the generation word (counts the layers attached on the endpoint).
const GEN: usize = 0;
/// Offset of the `PID` word: the process id of the area's owner if it can take part
/// in CMA publications ([`cma_capable`]), else 0.
const PID: usize = 8;
/// Marks a `REF` word that holds a virtual address in the publisher's process (a CMA
/// publication) rather than 1 + a segment offset.
pub(crate) const CMA_FLAG: u64 = 1 << 63;
/// Offset of the `PIDNS` word: the inode of the owner's pid namespace
/// (`/proc/self/ns/pid`), so that a pid is only used by members that share the
/// namespace it was taken in (containers may share `/dev/shm` but not pids).
const PIDNS: usize = 16;
/// Offset of the `MAYSLEEP` word: sticky 1 once the owner may sleep (at once under
/// `Block`, at its first sleep announcement under spin-then-block:
/// [`ShmPath::note_policy`](crate::shmpath::ShmPath::note_policy)) ([`crate::ring`],
/// *Sleeping without a fence per broadcast*).
const MAYSLEEP: usize = 24;
/// Offset of the `FENCING` word: sticky 1 once the owner fences after every ring flag
/// it stores ([`crate::ring`]).
const FENCING: usize = 32;
/// Offset of the `SLEEPY` word: 1 while the owner may sleep in the kernel waiting for
/// a flag in shared memory (writers of such flags then wake it).
const SLEEPY: usize = 64;
/// Barrier line of channel `c`: `EPOCH` and two entries ([`crate::barrier`]).
const fn bar_line(c: usize) -> usize {
    128 + c * 128
}
/// Check line of channel `c`: `TAG`, `BELIEF` (seq | belief), `DONE`, `POISON`
/// ([`crate::rootcheck`]).
const fn chk_line(c: usize) -> usize {
    128 + c * 128 + 64
}
/// Team sleep line of channel `c`: its first word, `TEAMSLEEP`, is sticky 1 once a
/// member of a team on the channel that the owner belongs to may sleep (the member
/// sets it in every member's area before its own `MAYSLEEP`,
/// [`ShmPath::join`](crate::shmpath::ShmPath::join)), so that a writer looks at one
/// word of its own header, not at a line in every member's header
/// ([`ShmTeam::may_sleep_any`]). Alone in its line: written once per member at most.
const fn sleep_line(c: usize) -> usize {
    640 + c * 64
}
/// Release line of channel `c` (used in the team leader's area): the counter
/// barrier's `RELEASED` word and merged entries ([`crate::barrier`]), read by every
/// waiter.
const fn rel_line(c: usize) -> usize {
    1024 + c * 128
}
/// Counter line of channel `c` (used in the team leader's area): the counter
/// barrier's arrivals, alone in its line (every arrival updates it).
const fn cnt_line(c: usize) -> usize {
    1024 + c * 128 + 64
}
/// Descriptor lines of channel `c` (two): the owner's last two collective
/// descriptors and what it found when it saw a mismatch ([`crate::rootcheck`]), read
/// only by members whose wait stalled.
const fn dsc_lines(c: usize) -> usize {
    1536 + c * 128
}
/// Bytes before the first channel.
const HDR: usize = 2048;
const _: () = assert!(dsc_lines(0) >= cnt_line(NCH - 1) + 64);
const _: () = assert!(dsc_lines(NCH - 1) + 128 <= HDR);
const _: () = assert!(chk_line(NCH - 1) + 64 <= sleep_line(0));
const _: () = assert!(sleep_line(NCH - 1) + 64 <= rel_line(0));
const _: () = assert!(cnt_line(NCH - 1) + 64 <= HDR);
/// Bytes of channel 0 (the small-broadcast ring, two large slots and the small ones).
const WORLD_CH: usize = 512 << 10;
/// Bytes of a slot of the small-broadcast ring: two cache lines, the first for its
/// `SEQ` word and data words, the second empty ([`crate::ring`], *One line per
/// slot*).
const RING_SLOT: usize = 128;
const _: () = assert!(8 * (1 + crate::ring::WORDS) <= 64 && RING_SLOT == 128);
/// Bytes of a packed slot of the small-broadcast ring: its `SEQ` word and one data
/// word, [`crate::ring::PACK`] to a cache line.
const TINY_SLOT: usize = 16;
// (The loom model packs two slots to a "line".)
const _: () = assert!(cfg!(gex_loom) || TINY_SLOT * crate::ring::PACK == 64);
/// Bytes of the small-broadcast ring (its slots, then its packed slots) at the start
/// of every channel.
const RING_BYTES: usize = crate::ring::SLOTS * RING_SLOT + crate::ring::TSLOTS * TINY_SLOT;
const _: () = assert!(cfg!(gex_loom) || RING_BYTES % 128 == 0);
/// Offset of word `i` of slot `s` of channel `c`'s small-broadcast ring
/// ([`Area::ring_word`]).
#[inline]
fn ring_off(c: usize, s: usize, i: usize) -> usize {
    use crate::ring::{SLOTS, TSLOTS, WORDS};
    if s < SLOTS {
        debug_assert!(i <= WORDS);
        chan_base(c) + s * RING_SLOT + 8 * i
    } else {
        debug_assert!(s < SLOTS + TSLOTS && i <= 1);
        chan_base(c) + SLOTS * RING_SLOT + (s - SLOTS) * TINY_SLOT + 8 * i
    }
}
/// Bytes of every other channel.
const OTHER_CH: usize = ((AREA_LEN - HDR - WORLD_CH) / (NCH - 1)) & !127;
/// Slot header: `POST` at 0, `REF` at 8 and up to [`INLINE_CAP`] bytes of inline
/// data at 16 (same cache line), `ACK` at 64 (its own).
const SLOT_HDR: usize = 128;
const POST: usize = 0;
const REF: usize = 8;
const INLINE: usize = 16;
const ACK: usize = 64;
/// Largest publication of a small slot that goes inline, in the `POST` line: a
/// reader's one cache-line transfer brings the tag and the data (broadcasts and
/// reductions of a few words).
const INLINE_CAP: usize = 48;
const _: () = assert!(INLINE + INLINE_CAP <= ACK);
/// Small slots per channel: collectives of one round that fit one take them in turn
/// (by sequence number), so a root can run up to `NSMALL - 1` of them ahead of its
/// slowest reader (what keeps small broadcasts cheap when ranks outnumber cores:
/// every reader need not run once per broadcast).
const NSMALL: usize = 32;
/// Bytes of a small slot of channel 0 (header included): a 4 KiB block fits.
const WORLD_SMALL_LEN: usize = 4096 + SLOT_HDR;
/// Bytes of a small slot of the other channels (header included).
const OTHER_SMALL_LEN: usize = 1024;
/// Slots per channel: two large, then the small ones.
pub(crate) const NSLOT: usize = 2 + NSMALL;
const _: () = assert!(NSLOT <= 64);
const _: () =
    assert!(WORLD_CH >= RING_BYTES + NSMALL * WORLD_SMALL_LEN + 2 * (SLOT_HDR + (64 << 10)));
const _: () =
    assert!(OTHER_CH >= RING_BYTES + NSMALL * OTHER_SMALL_LEN + 2 * (SLOT_HDR + (16 << 10)));
const _: () = assert!(HDR + WORLD_CH + (NCH - 1) * OTHER_CH <= AREA_LEN);

/// Largest team `shm` serves (readers poll every member: quadratic traffic).
pub(crate) const MAX_SIZE: u32 = 64;

/// Smallest block a member publishes *by reference* when its input lies in its
/// segment: readers then copy straight from the segment (one copy instead of two)
/// and the member completes once they did. Below it, copying through the slot costs
/// less than making the member wait for its readers (measured: docs/coll.md 4.1).
pub(crate) const BYREF_MIN: usize = 16 << 10;

fn chan_base(c: usize) -> usize {
    if c == 0 {
        HDR
    } else {
        HDR + WORLD_CH + (c - 1) * OTHER_CH
    }
}

/// Bytes of a small slot of channel `c` (header included).
fn small_len(c: usize) -> usize {
    if c == 0 {
        WORLD_SMALL_LEN
    } else {
        OTHER_SMALL_LEN
    }
}

/// Bytes of a large slot of channel `c` (header included).
fn slot_len(c: usize) -> usize {
    (((if c == 0 { WORLD_CH } else { OTHER_CH }) - RING_BYTES - NSMALL * small_len(c)) / 2) & !127
}

/// Data bytes of a large slot of channel `c`.
pub(crate) fn slot_cap(c: usize) -> usize {
    slot_len(c) - SLOT_HDR
}

/// Data bytes of a small slot of channel `c`.
fn small_cap(c: usize) -> usize {
    small_len(c) - SLOT_HDR
}

/// The layer's slice of one mapped auxiliary area.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Area(NonNull<u8>);

// SAFETY: an address in memory shared between processes and threads, accessed through
// atomics and the flag protocol of the module (`# Safety`).
unsafe impl Send for Area {}
// SAFETY: as above.
unsafe impl Sync for Area {}

impl Area {
    /// The layer's slice based at `aux` ([`AREA_LEN`] bytes, 64-byte aligned, as the
    /// conduit maps it for this layer).
    pub(crate) fn new(aux: NonNull<u8>) -> Area {
        Area(aux)
    }

    #[inline]
    fn word(&self, off: usize) -> &AtomicU64 {
        debug_assert!(off % 8 == 0 && off + 8 <= AREA_LEN);
        // SAFETY: in bounds and 8-byte aligned (offsets are multiples of 8 inside the
        // AREA_LEN-byte slice, which is 64-byte aligned); mapped for the life of the
        // conduit; only ever accessed atomically (module `# Safety`).
        unsafe { &*self.0.as_ptr().add(off).cast::<AtomicU64>() }
    }

    /// The owner's `SLEEPY` word.
    pub(crate) fn sleepy(&self) -> &AtomicU64 {
        self.word(SLEEPY)
    }

    /// Word `i` (0..8) of channel `c`'s barrier line.
    pub(crate) fn bar(&self, c: usize, i: usize) -> &AtomicU64 {
        debug_assert!(i < 8);
        self.word(bar_line(c) + 8 * i)
    }

    /// Channel `c`'s arrival counter (counter barrier).
    pub(crate) fn cnt(&self, c: usize) -> &AtomicU64 {
        self.word(cnt_line(c))
    }

    /// Word `i` (0..8) of channel `c`'s release line (counter barrier).
    pub(crate) fn rel(&self, c: usize, i: usize) -> &AtomicU64 {
        debug_assert!(i < 8);
        self.word(rel_line(c) + 8 * i)
    }

    /// Word `i` (0..8) of channel `c`'s check line.
    pub(crate) fn chk(&self, c: usize, i: usize) -> &AtomicU64 {
        debug_assert!(i < 8);
        self.word(chk_line(c) + 8 * i)
    }

    /// Word `i` (0..16) of channel `c`'s descriptor lines.
    pub(crate) fn dsc(&self, c: usize, i: usize) -> &AtomicU64 {
        debug_assert!(i < 16);
        self.word(dsc_lines(c) + 8 * i)
    }

    #[inline]
    fn slot(&self, c: usize, s: usize) -> usize {
        debug_assert!(s < NSLOT);
        let base = chan_base(c) + RING_BYTES;
        if s < 2 {
            base + s * slot_len(c)
        } else {
            base + 2 * slot_len(c) + (s - 2) * small_len(c)
        }
    }

    /// Word `i` of slot `s` of channel `c`'s small-broadcast ring (0: `SEQ`, then the
    /// data words; packed slots from `ring::SLOTS` on).
    #[inline]
    fn ring_word(&self, c: usize, s: usize, i: usize) -> &AtomicU64 {
        self.word(ring_off(c, s, i))
    }

    /// True if a member of a team on channel `c` that the owner belongs to announced
    /// that its wait policy may sleep (`TEAMSLEEP`, sticky).
    #[inline]
    pub(crate) fn team_may_sleep(&self, c: usize) -> bool {
        self.word(sleep_line(c)).load(Ordering::Relaxed) != 0
    }

    /// Announces (sticky) to the owner that a member of its team on channel `c` may
    /// sleep; a plain load first, so that the line is written once.
    pub(crate) fn set_team_may_sleep(&self, c: usize) {
        let w = self.word(sleep_line(c));
        if w.load(Ordering::Relaxed) == 0 {
            w.store(1, Ordering::Relaxed);
        }
    }

    /// True if the owner announced that its wait policy may sleep.
    #[inline]
    pub(crate) fn may_sleep_set(&self) -> bool {
        self.word(MAYSLEEP).load(Ordering::Relaxed) != 0
    }

    /// Announces (sticky) that the owner's wait policy may sleep ([`crate::ring`]).
    pub(crate) fn set_may_sleep(&self) {
        self.word(MAYSLEEP).store(1, Ordering::Relaxed);
    }

    #[inline]
    fn post(&self, c: usize, s: usize) -> &AtomicU64 {
        self.word(self.slot(c, s) + POST)
    }

    fn ack(&self, c: usize, s: usize) -> &AtomicU64 {
        self.word(self.slot(c, s) + ACK)
    }

    /// 0 when the slot's data are inline; else 1 + the segment offset of the
    /// publisher's input (a publication by reference), or [`CMA_FLAG`] | the input's
    /// virtual address in the publisher's process. Written before `POST`.
    fn reference(&self, c: usize, s: usize) -> &AtomicU64 {
        self.word(self.slot(c, s) + REF)
    }

    /// Data of slot `s` of channel `c` (`slot_cap(c)` bytes for `s < 2`, else
    /// `small_cap(c)`).
    fn data(&self, c: usize, s: usize) -> *mut u8 {
        // SAFETY: the slot lies inside the slice (constant layout, asserted above).
        unsafe { self.0.as_ptr().add(self.slot(c, s) + SLOT_HDR) }
    }

    /// Inline data of slot `s` of channel `c` ([`INLINE_CAP`] bytes, in the `POST`
    /// line; plain bytes, disjoint from the words).
    fn inline_data(&self, c: usize, s: usize) -> *mut u8 {
        // SAFETY: the slot lies inside the slice (constant layout, asserted above).
        unsafe { self.0.as_ptr().add(self.slot(c, s) + INLINE) }
    }

    /// Counts one more collectives layer on this endpoint; returns its generation (from 1).
    pub(crate) fn next_generation(&self) -> u64 {
        self.word(GEN).fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Announces whether this member (the area's owner) takes part in CMA
    /// publications: its pid if `capable`, else 0.
    pub(crate) fn set_cma(&self, capable: bool) {
        let ns = pid_namespace();
        let pid = if capable && ns != 0 {
            u64::from(std::process::id())
        } else {
            0
        };
        self.word(PIDNS).store(ns, Ordering::Relaxed);
        self.word(PID).store(pid, Ordering::Release);
    }

    /// The owner's pid if it takes part in CMA publications.
    fn cma_pid(&self) -> Option<u64> {
        Some(self.word(PID).load(Ordering::Acquire)).filter(|&p| p != 0)
    }

    /// True if the owner takes part in CMA publications in pid namespace `ns`.
    fn cma_in(&self, ns: u64) -> bool {
        self.cma_pid().is_some() && self.word(PIDNS).load(Ordering::Relaxed) == ns
    }

    /// Acknowledgements received so far on slot `s` of channel `c`.
    pub(crate) fn acks(&self, c: usize, s: usize) -> u64 {
        self.ack(c, s).load(Ordering::Acquire)
    }
}

impl crate::ring::Words for Area {
    #[inline]
    fn seq(&self, ch: usize, s: usize) -> &AtomicU64 {
        self.ring_word(ch, s, 0)
    }
    #[inline]
    fn data(&self, ch: usize, s: usize, i: usize) -> &AtomicU64 {
        self.ring_word(ch, s, 1 + i)
    }
    #[inline]
    fn claim(&self, ch: usize) -> &AtomicU64 {
        self.chk(ch, chk::TAG)
    }
    #[inline]
    fn done(&self, ch: usize) -> &AtomicU64 {
        self.chk(ch, chk::DONE)
    }
    #[inline]
    fn sleepy(&self) -> &AtomicU64 {
        self.word(SLEEPY)
    }
    #[inline]
    fn may_sleep(&self) -> &AtomicU64 {
        self.word(MAYSLEEP)
    }
    #[inline]
    fn fencing(&self) -> &AtomicU64 {
        self.word(FENCING)
    }
    #[inline]
    fn prefetch(&self, ch: usize, s: usize) {
        #[cfg(target_arch = "x86_64")]
        {
            let off = ring_off(ch, s, 0);
            let p = self.0.as_ptr().wrapping_add(off).cast::<i8>().cast_const();
            // SAFETY: a prefetch is a hint: it never faults and reads nothing the
            // program sees (the address lies in the mapped area anyway).
            unsafe {
                std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p);
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (ch, s);
    }
}

/// Loom test surface ([`crate::loomkit`]): where the flag words of the header and of
/// channel `c` lie, and the data ranges of its slots (plain bytes, not words).
#[cfg(gex_loom)]
pub(crate) mod layout {
    use super::*;

    /// Offsets of every word the module accesses atomically in the header and in
    /// channel `c` (under loom they must hold loom atomics).
    pub(crate) fn flag_words(c: usize) -> Vec<usize> {
        let a = Area(NonNull::dangling());
        let mut v = vec![
            GEN,
            PID,
            PIDNS,
            SLEEPY,
            MAYSLEEP,
            FENCING,
            cnt_line(c),
            sleep_line(c),
        ];
        v.extend((0..8).flat_map(|i| {
            [
                bar_line(c) + 8 * i,
                chk_line(c) + 8 * i,
                rel_line(c) + 8 * i,
            ]
        }));
        v.extend((0..16).map(|i| dsc_lines(c) + 8 * i));
        v.extend(
            (0..NSLOT).flat_map(|s| [a.slot(c, s) + POST, a.slot(c, s) + REF, a.slot(c, s) + ACK]),
        );
        // The small-broadcast ring's words (its own model is tests/loom_ring.rs).
        v.extend((0..crate::ring::SLOTS).flat_map(|s| {
            (0..=crate::ring::WORDS).map(move |i| chan_base(c) + s * RING_SLOT + 8 * i)
        }));
        v
    }

    /// Byte ranges of the data of every slot of channel `c`: the inline bytes, then
    /// the slot's data area.
    pub(crate) fn data_ranges(c: usize) -> Vec<std::ops::Range<usize>> {
        let a = Area(NonNull::dangling());
        (0..NSLOT)
            .flat_map(|s| {
                let len = if s < 2 { slot_cap(c) } else { small_cap(c) };
                let at = a.slot(c, s);
                [
                    at + INLINE..at + INLINE + INLINE_CAP,
                    at + SLOT_HDR..at + SLOT_HDR + len,
                ]
            })
            .collect()
    }
}

/// A team's shared-memory channel (kept in the team; frees the channel when the last
/// handle of the team goes).
pub(crate) struct ShmTeam {
    /// Channel index.
    pub(crate) ch: usize,
    /// Every member's area, by team rank.
    pub(crate) areas: Vec<Area>,
    /// Every member's segment as mapped here (base address, length), by team rank;
    /// empty when some member's segment is not mapped (then nobody publishes by
    /// reference: the conduit maps segments for exactly the peers whose areas it maps).
    pub(crate) segs: Vec<(usize, usize)>,
    /// Generation of the layer on the endpoints (same on every member).
    pub(crate) generation: u64,
    /// The endpoint's mask of channels in use.
    pub(crate) used: Arc<AtomicU32>,
    /// Every member's endpoint, by team rank (to wake sleepers).
    pub(crate) members: Vec<EpAddr>,
    /// This member's team rank.
    pub(crate) me: u32,
    /// Digest of (generation, team id): marks the team's `EPOCH`, `BELIEF`, `DONE` and
    /// `POISON` words, so words left by an earlier team on the channel never count.
    pub(crate) tag: u32,
}

impl ShmTeam {
    /// The channel `ch` of a team `tid` (generation `generation`) whose members'
    /// areas and mapped segments are `areas` and `segs`; this member is `me`. Takes
    /// the channel's check line for the team ([`ShmTeam::claim`]).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        ch: usize,
        areas: Vec<Area>,
        segs: Vec<(usize, usize)>,
        generation: u64,
        used: Arc<AtomicU32>,
        members: Vec<EpAddr>,
        me: u32,
        tid: u64,
    ) -> ShmTeam {
        let tag = mix_all(&[generation, tid, 0x7a9]) as u32;
        let t = ShmTeam {
            ch,
            areas,
            segs,
            generation,
            used,
            members,
            me,
            tag,
        };
        t.claim();
        t
    }

    /// Prepares this member's check line for the team (when it takes the channel):
    /// beliefs and finished collectives of earlier teams on the channel never count
    /// ([`crate::rootcheck`]).
    fn claim(&self) {
        let own = self.areas[self.me as usize];
        own.chk(self.ch, chk::BELIEF).store(0, Ordering::Relaxed);
        own.chk(self.ch, chk::DONE).store(0, Ordering::Relaxed);
        own.chk(self.ch, chk::POISON).store(0, Ordering::Relaxed);
        own.chk(self.ch, chk::TAG)
            .store(u64::from(self.tag) | crate::ring::VALID, Ordering::Release);
    }

    /// Wakes the members of `mask` (bit = team rank) that announced they may sleep,
    /// after this member stored flags they may wait for, the last of them by a
    /// sequentially consistent read-modify-write: the fence that pairs with a
    /// sleeper's (module docs, *Sleeping*) is that instruction itself on x86 (a locked
    /// instruction is a full barrier), so it is left out there.
    ///
    /// Elsewhere (and under loom, which checks the language's memory model, not x86's)
    /// the fence is needed: a `SeqCst` read-modify-write orders nothing for the
    /// *relaxed* `SLEEPY` loads after it (C++20 \[atomics.order\]: only a `SeqCst`
    /// fence or `SeqCst` load does). Without it, the flag swap and a sleeper's
    /// `SLEEPY` store may each miss the other (aarch64 without LSE: `stlxr` then
    /// `ldr`): the sleeper sleeps, nobody wakes it, and it waits out the conduit's
    /// block timeout (10 ms). Found by `tests/loom_sleep.rs` (a loom deadlock).
    #[inline]
    pub(crate) fn wake_fenced(&self, mask: u64, wake: &mut impl FnMut(EpAddr)) {
        if mask == 0 {
            return;
        }
        #[cfg(any(gex_loom, not(any(target_arch = "x86", target_arch = "x86_64"))))]
        gex_sync::atomic::fence(Ordering::SeqCst);
        self.wake_sleepers(mask, wake);
    }

    /// True if a member of `mask` announced that its wait policy may sleep (its
    /// `MAYSLEEP` word, sticky). This member's own `TEAMSLEEP` word first: while no
    /// member of the team may sleep (every member under `Spin`, or under
    /// spin-then-block without a sleep yet) that one load of a line of its own
    /// header answers, instead of a line in the header page of every member in
    /// `mask` (docs/coll.md, *Waiting inside the layer*). A member sets it in every
    /// member's area before its `MAYSLEEP` and `SLEEPY` (and its fence), so a writer
    /// that reads 0 after its own flag store (and fence) answers as it would have
    /// from the members' words: the sleeper's fenced look at the flag sees the store.
    #[inline]
    pub(crate) fn may_sleep_any(&self, mask: u64) -> bool {
        if !self.areas[self.me as usize].team_may_sleep(self.ch) {
            return false;
        }
        let mut m = mask;
        while m != 0 {
            let q = m.trailing_zeros();
            m &= m - 1;
            if self.areas[q as usize].may_sleep_set() {
                return true;
            }
        }
        false
    }

    /// Wakes the members of `mask` (already found sleeping).
    #[inline]
    pub(crate) fn wake_listed(&self, mask: u64, wake: &mut impl FnMut(EpAddr)) {
        let mut m = mask;
        while m != 0 {
            let q = m.trailing_zeros() as usize;
            m &= m - 1;
            wake(self.members[q]);
        }
    }

    /// Wakes the members of `mask` whose `SLEEPY` word is set (after the fence).
    /// Inline: on every acknowledgement it is a load per acknowledged member (none
    /// sleeps under `Spin`); the wakes ([`wake_listed`](Self::wake_listed)) are out of
    /// line.
    #[inline]
    fn wake_sleepers(&self, mask: u64, wake: &mut impl FnMut(EpAddr)) {
        let mut m = mask;
        let mut sleeping = 0u64;
        while m != 0 {
            let q = m.trailing_zeros();
            m &= m - 1;
            if self.areas[q as usize].sleepy().load(Ordering::Relaxed) != 0 {
                sleeping |= 1 << q;
            }
        }
        if sleeping != 0 {
            self.wake_sleeping(sleeping, wake);
        }
    }

    #[cold]
    #[inline(never)]
    fn wake_sleeping(&self, mask: u64, wake: &mut impl FnMut(EpAddr)) {
        self.wake_listed(mask, wake);
    }

    /// The team as the small-broadcast ring sees it.
    pub(crate) fn view(&self) -> crate::ring::View<'_, Area> {
        crate::ring::View {
            areas: &self.areas,
            me: self.me,
            ch: self.ch,
            team: self.tag,
        }
    }

    /// Every member but this one (bit = team rank).
    pub(crate) fn others(&self) -> u64 {
        let p = self.areas.len();
        let all = if p >= 64 { u64::MAX } else { (1u64 << p) - 1 };
        all & !(1u64 << self.me)
    }
}

/// What a stalled shared-memory collective waits for (it can advance once
/// [`ready`](Self::ready) holds).
#[derive(Clone, Copy, Debug)]
pub(crate) enum WaitOn {
    /// Member `q`'s publication in slot `slot`.
    Post {
        q: u32,
        area: Area,
        ch: usize,
        slot: usize,
        tag: u64,
    },
    /// `n` acknowledgements of this member's slot `slot`, whose last publication
    /// belongs to collective `seq` of the team.
    Acks {
        area: Area,
        ch: usize,
        slot: usize,
        n: u64,
        seq: u32,
    },
    /// Member `q`'s barrier epoch `k` of the team tagged `tag`.
    Epoch {
        q: u32,
        area: Area,
        ch: usize,
        tag: u32,
        k: u32,
    },
    /// The release of counter barrier `k` in the team leader's (member 0's) area.
    Release {
        area: Area,
        ch: usize,
        tag: u32,
        k: u32,
    },
    /// A small broadcast's flag ([`crate::ring`]).
    Ring(crate::ring::Wait<Area>),
}

// SAFETY: an `Area` inside (see `Area`'s `Send`).
unsafe impl Send for WaitOn {}

/// For hang reports: what the member waits for, in words (no addresses).
impl std::fmt::Display for WaitOn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            WaitOn::Post { q, ch, slot, .. } => {
                write!(f, "member {q}'s publication in slot {slot} of channel {ch}")
            }
            WaitOn::Acks {
                ch, slot, n, seq, ..
            } => write!(
                f,
                "{n} acknowledgements of this member's slot {slot} of channel {ch} (collective {seq})"
            ),
            WaitOn::Epoch { q, ch, k, .. } => {
                write!(f, "member {q} to enter barrier {k} (channel {ch})")
            }
            WaitOn::Release { ch, k, .. } => {
                write!(f, "member 0's release of barrier {k} (channel {ch})")
            }
            WaitOn::Ring(w) => write!(f, "{w}"),
        }
    }
}

impl WaitOn {
    /// True if the member waiting for this may sleep (module docs, *Sleeping*): the
    /// publisher of a slot fences and wakes sleepers after its publications only
    /// once its `FENCING` word is set (read after the waiter's own `SLEEPY` store
    /// and fence); a small broadcast's flag as [`crate::ring::Wait::sleep_safe`];
    /// acknowledgements and barrier flags always wake.
    pub(crate) fn sleep_safe(&self) -> bool {
        match *self {
            WaitOn::Post { area, .. } => {
                crate::ring::Words::fencing(&area).load(Ordering::Acquire) != 0
            }
            WaitOn::Ring(w) => w.sleep_safe(),
            WaitOn::Acks { .. } | WaitOn::Epoch { .. } | WaitOn::Release { .. } => true,
        }
    }

    /// True once what it waits for has happened. A publication (what a data round
    /// waits for) is one load here, inlined into the waiting loops; the other kinds
    /// are looked at out of line.
    #[inline(always)]
    pub(crate) fn ready(&self) -> bool {
        match self.post_word() {
            Some((word, tag)) => word.load(Ordering::Acquire) == tag,
            None => self.ready_other(),
        }
    }

    /// The word and value a wait for a publication looks for (`None` for the other
    /// kinds): a waiting loop computes the address once and then loads it.
    #[inline]
    pub(crate) fn post_word(&self) -> Option<(&AtomicU64, u64)> {
        match self {
            WaitOn::Post {
                area,
                ch,
                slot,
                tag,
                ..
            } => Some((area.post(*ch, *slot), *tag)),
            _ => None,
        }
    }

    /// [`ready`](Self::ready), every kind (out of line).
    #[inline(never)]
    fn ready_other(&self) -> bool {
        match *self {
            WaitOn::Post {
                area,
                ch,
                slot,
                tag,
                ..
            } => area.post(ch, slot).load(Ordering::Acquire) == tag,
            WaitOn::Acks {
                area, ch, slot, n, ..
            } => area.acks(ch, slot) >= n,
            WaitOn::Epoch {
                area, ch, tag, k, ..
            } => epoch_reached(area.bar(ch, 0).load(Ordering::Acquire), tag, k),
            WaitOn::Release { area, ch, tag, k } => {
                epoch_reached(area.rel(ch, 0).load(Ordering::Acquire), tag, k)
            }
            WaitOn::Ring(w) => w.ready(),
        }
    }
}

/// True if an `EPOCH` word holds barrier `k` or a later one of the team tagged `tag`.
#[inline]
pub(crate) fn epoch_reached(word: u64, tag: u32, k: u32) -> bool {
    (word >> 32) as u32 == tag && (word as u32).wrapping_sub(k) as i32 >= 0
}

impl std::fmt::Debug for ShmTeam {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShmTeam").field("ch", &self.ch).finish()
    }
}

impl Drop for ShmTeam {
    fn drop(&mut self) {
        self.used.fetch_and(!(1u32 << self.ch), Ordering::Relaxed);
    }
}

/// Per channel and slot of this endpoint's area: acknowledgements expected, and the
/// team sequence number of the last publication in it.
#[derive(Debug)]
pub(crate) struct Expected {
    pub(crate) n: [[u64; NSLOT]; NCH],
    pub(crate) seq: [[u32; NSLOT]; NCH],
}

impl Expected {
    /// Continues from the acknowledgements already counted in `own` (an earlier layer
    /// on the same endpoint left them).
    pub(crate) fn from_area(own: Option<Area>) -> Expected {
        let mut e = Expected {
            n: [[0; NSLOT]; NCH],
            seq: [[0; NSLOT]; NCH],
        };
        if let Some(own) = own {
            for (c, row) in e.n.iter_mut().enumerate() {
                for (s, x) in row.iter_mut().enumerate() {
                    *x = own.acks(c, s);
                }
            }
        }
        e
    }
}

/// The `shm` algorithm (see the module docs).
#[derive(Debug, Default)]
pub struct Shm;

impl Algorithm for Shm {
    fn name(&self) -> &str {
        "shm"
    }

    fn supports(&self, q: &Query) -> bool {
        q.shm && q.addr == AddrMode::Local && q.size <= MAX_SIZE
    }

    fn cost(&self, q: &Query, m: &LogGP) -> f64 {
        use OpKind::*;
        let p = q.size.max(1);
        if p == 1 {
            return 0.0;
        }
        let pf = f64::from(p);
        let n = q.bytes as f64;
        // The world's channel; other teams have smaller slots (a lower bound is fine).
        let cap = slot_cap(0) as f64;
        let per_dest = matches!(q.op, Scatter | Exchange | ReduceScatter);
        let chunk = if per_dest { cap / (pf - 1.0) } else { cap };
        let rounds = (n / chunk).ceil().max(1.0)
            + f64::from(u8::from(q.sync.input == crate::op::SyncMode::All))
            + f64::from(u8::from(q.sync.output == crate::op::SyncMode::All));
        // Per round: one flag handoff (a cache line moving between cores, about one
        // overhead o) plus a poll of every other member's flag.
        let sync = rounds * (m.o + (pf - 1.0) * m.g * 0.5);
        // Bytes copied or combined on the busiest member.
        let bytes = match q.op {
            Barrier => 0.0,
            Broadcast => 2.0 * n,
            Scatter | Gather | GatherAll | Reduce | Allreduce | Scan | Exscan => pf * n,
            Exchange | ReduceScatter => 2.0 * (pf - 1.0) * n,
        };
        sync + bytes * m.copy
    }

    fn plan(&self, ctx: &PlanCtx) -> Schedule {
        // The equivalent message schedule (used only by the schedule model).
        Builtin::new(Kind::Flat, 0, 0, Transport::Eager).plan(ctx)
    }

    fn is_shared_memory(&self) -> bool {
        true
    }
}
