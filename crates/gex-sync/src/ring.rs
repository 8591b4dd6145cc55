//! Single-producer single-consumer rings of variable-length records, usable between threads
//! and between processes.
//!
//! A ring lives in two pieces of memory that the caller provides (or that [`channel`]
//! allocates for in-process use):
//!
//! - a control block, [`RingCtl`], holding the consumer's published head position on its own
//!   cache line;
//! - a data area of `cap` bytes: `cap` a power of two in
//!   [`MIN_CAPACITY`]`..=`[`MAX_CAPACITY`], the start aligned to [`DATA_ALIGN`] (64) bytes,
//!   and **all bytes zero** when the ring is first used.
//!
//! Both may sit in a `MAP_SHARED` mapping seen by two processes (at different addresses):
//! nothing in them is a pointer, and every cross-party access is an atomic on naturally
//! aligned memory or a plain access ordered by such an atomic. [`ring_bytes_needed`] and
//! [`DATA_OFFSET`] describe one convenient layout (control block first, data right after).
//!
//! # Protocol
//!
//! Positions are `u64` byte counters that only grow; the physical offset of position `p` is
//! `p & (cap - 1)`. Positions stay below `2^63` (bit 63 is the pad flag below), which takes
//! centuries at memory bandwidth. A record is 8-byte aligned and laid out as
//!
//! ```text
//! [tag: u64][len: u32][user: u32][body: len bytes, padded to a multiple of 8]
//! ```
//!
//! so it occupies [`record_size`]`(len) = 16 + round_up(len, 8)` bytes ([`RECORD_HEADER`] is
//! 16).
//!
//! - **Valid tag.** The record starting at position `p` is published iff the word at `p` holds
//!   `p + 1`. Zero means "nothing here yet". A *pad* is the tag `(p + 1) | 2^63`: it tells the
//!   consumer that nothing follows before the physical end of the data area and that the next
//!   record starts at the next multiple of `cap`. A pad is a single tag word, so it needs only
//!   8 bytes and every `user` value is free for callers.
//! - **Records never straddle the physical end.** When a record does not fit before the end,
//!   the producer writes a pad tag at its tail and puts the record at the start of the data
//!   area.
//! - **Producer.** It keeps its tail and a cached copy of the consumer's head privately. A
//!   record of `r` bytes placed at `pos` (after the pad, if any) needs
//!   `pos + r + 8 <= head + cap`: the extra 8 bytes of slack are for the terminator below. The
//!   producer re-reads [`RingCtl`]'s head (`Acquire`) only when the cached head says the
//!   record does not fit. To publish, it writes `len`, `user` and the body with plain stores,
//!   then a zero *terminator* word at `pos + r` (`Relaxed`, the header word of the next
//!   record), then the tag `pos + 1` (`Release`), then the pad tag if there is one
//!   (`Release`).
//! - **Consumer.** It never reads a shared tail. It polls the word at its head (`Acquire`):
//!   a valid tag is a record, a pad tag moves the head to the next lap, anything else means
//!   empty. After [`Consumer::pop`] it stores its new head (`Release`) into its own cache
//!   line of the control block.
//!
//! **Why stale bytes are never mistaken for a tag.** The consumer reads the word at its head
//! `h` only when everything before `h` has been consumed. If the record before `h` ended
//! exactly at `h`, the producer wrote the terminator 0 at `h` before publishing that record's
//! tag (which the consumer acquired), so the consumer sees the terminator or something
//! written later to that word — and the only later write is the real tag `h + 1`, because
//! the producer's slack rule keeps `h` in free space, away from any body it writes. If the
//! consumer got to `h` by skipping a pad, the record at `h` was published before the pad. At
//! position 0 the zero-initialised data area serves as terminator. So old body bytes of an
//! earlier lap — which a caller may fill with anything, including numbers that look like
//! future tags — sit only in words the consumer does not poll until they are overwritten.
//! Tags differ for every position (`p + 1`), so an old tag from an earlier lap is never valid
//! either.
//!
//! The bytes of a record stay untouched until the consumer releases them: the producer only
//! writes in `[tail, head + cap)`, and the head moves past a record only in
//! [`Consumer::pop`]. That is why the body returned by [`Consumer::peek`] stays valid until
//! the next `pop`.
//!
//! # Sizes
//!
//! The largest body is [`max_body`]`(cap) = cap / 2 - 16`. A record of that size
//! (`cap / 2` bytes) fits into an empty ring at any tail offset: either it fits before the
//! physical end, or the tail offset is above `cap / 2`, so the pad plus the record plus the
//! 8-byte terminator take at most `cap` bytes. A ring of `cap` bytes holds at most
//! `cap - 8` bytes of records and pads at once.
//!
//! # Model checking
//!
//! Under `--cfg gex_loom` the tag words cannot be loom atomics overlaid on raw bytes, so they
//! live in a side table of loom `AtomicU64`s, one per 8-byte word of the data area (see the
//! private `tags` module, the only cfg-specific code). When a record is committed or a
//! reservation is cancelled, its header and body words are copied into the table with
//! `Relaxed` stores, so loom still sees stale body bytes overlapping later tags and the
//! terminator argument above is checked. Loom checks the orderings and interleavings of the
//! tag, terminator and head accesses, full and wrap-around conditions and the pad logic.
//! It does not check the plain body and header bytes themselves (loom runs its threads one at
//! a time on real memory, so those always read the newest value), nothing about two address
//! spaces, and the ring under loom needs at most a few records to stay tractable.
//!
//! # Example
//!
//! ```
//! use gex_sync::ring;
//!
//! let (mut tx, mut rx) = ring::channel(4096);
//! assert!(tx.push(7, &[b"hello, ", b"world"]));
//!
//! let mut r = tx.reserve(3).expect("space");
//! r.body().copy_from_slice(b"abc");
//! r.commit(8, 2); // publish only the first two bytes
//!
//! assert_eq!(rx.peek(), Some((7, &b"hello, world"[..])));
//! rx.pop();
//! assert_eq!(rx.peek(), Some((8, &b"ab"[..])));
//! rx.pop();
//! assert_eq!(rx.peek(), None);
//! assert!(tx.is_empty());
//! ```
//!
//! # Safety
//!
//! This module uses `unsafe` for raw-pointer access to the caller-provided control block and
//! data area. The invariants every block relies on:
//!
//! - `Producer::new`/`Consumer::new` callers guarantee that `ctl` points to an initialised
//!   [`RingCtl`] and `data` to `cap` readable and writable bytes, both valid while the
//!   endpoint lives, and that at most one producer and one consumer use the ring.
//! - Every offset used is `position & (cap - 1)`, a multiple of 8 (positions start at the
//!   published head with its low three bits cleared, and grow by multiples of 8 or to the
//!   next multiple of `cap`), and a record's bytes `[offset, offset + record_size)` never
//!   exceed `cap` (records never straddle the end), so all accesses stay inside the data
//!   area and tag words are 8-byte aligned.
//! - Bytes in `[tail, head + cap)` belong to the producer, bytes in `[head, tail)` to the
//!   consumer; ownership passes through the `Release` tag store / `Acquire` tag load
//!   (producer to consumer) and the `Release` head store / `Acquire` head load (back), so
//!   plain reads and writes of header and body bytes never race.

#![allow(unsafe_code)]

mod tags;

use std::alloc::{self, Layout};
use std::fmt;
use std::sync::Arc;

use crate::CachePadded;
use crate::atomic::{AtomicU64, Ordering};
use tags::{CtlTags, TagStore};

/// Bytes of record header: tag (`u64`), length (`u32`) and user word (`u32`).
pub const RECORD_HEADER: usize = 16;

/// Smallest allowed data-area size in bytes.
pub const MIN_CAPACITY: usize = 256;

/// Largest allowed data-area size in bytes (2 GiB, so lengths fit the `u32` length field).
pub const MAX_CAPACITY: usize = 1 << 31;

/// Required alignment of the data area in bytes.
pub const DATA_ALIGN: usize = 64;

/// Offset of the data area from the control block in the layout of [`ring_bytes_needed`]
/// (the size of [`RingCtl`], a multiple of [`DATA_ALIGN`]).
pub const DATA_OFFSET: usize = round_up(std::mem::size_of::<RingCtl>(), DATA_ALIGN);

/// Extra free bytes the producer keeps after every record for the next terminator word.
const SLACK: u64 = 8;

/// Tag flag marking a pad: the rest of the lap is empty.
const PAD_BIT: u64 = 1 << 63;

const fn round_up(n: usize, to: usize) -> usize {
    (n + to - 1) & !(to - 1)
}

/// Returns the number of bytes a record with a body of `body_len` bytes occupies in the data
/// area: header plus body rounded up to a multiple of 8.
///
/// # Example
///
/// ```
/// assert_eq!(gex_sync::ring::record_size(0), 16);
/// assert_eq!(gex_sync::ring::record_size(9), 32);
/// ```
pub const fn record_size(body_len: usize) -> usize {
    RECORD_HEADER + round_up(body_len, 8)
}

/// Returns the largest body a ring of `cap` bytes accepts: `cap / 2 - 16`.
///
/// A record of that size always fits into an empty ring, whatever the tail offset and the
/// pad it may need.
///
/// # Example
///
/// ```
/// assert_eq!(gex_sync::ring::max_body(256), 112);
/// assert_eq!(gex_sync::ring::max_body(4096), 2032);
/// ```
pub const fn max_body(cap: usize) -> usize {
    cap / 2 - RECORD_HEADER
}

/// Returns whether `cap` is an allowed data-area size: a power of two in
/// [`MIN_CAPACITY`]`..=`[`MAX_CAPACITY`].
///
/// # Example
///
/// ```
/// assert!(gex_sync::ring::is_valid_capacity(256));
/// assert!(!gex_sync::ring::is_valid_capacity(300));
/// ```
pub const fn is_valid_capacity(cap: usize) -> bool {
    cap.is_power_of_two() && cap >= MIN_CAPACITY && cap <= MAX_CAPACITY
}

/// Returns the bytes needed for a control block followed by a data area of `cap` bytes: the
/// control block at offset 0 and the data area at [`DATA_OFFSET`]. The region must start
/// [`DATA_ALIGN`]-aligned (page-aligned mappings are).
///
/// # Example
///
/// ```
/// use gex_sync::ring;
/// assert_eq!(ring::ring_bytes_needed(4096), ring::DATA_OFFSET + 4096);
/// ```
pub const fn ring_bytes_needed(cap: usize) -> usize {
    DATA_OFFSET + cap
}

/// The published head as the starting position of an endpoint that attaches. Positions
/// stay below `2^63` and are multiples of 8; a head that is not can only come from corrupt
/// shared memory. It loses its top bit, so that position arithmetic never overflows, and
/// its low 3 bits, so that every offset the endpoint derives stays a multiple of 8: a tag
/// word aligned and inside the data area, whatever the memory holds. (Without the low
/// bits cleared, a head of `u64::MAX` made both endpoints start at offset `cap - 1` and
/// access a tag word 7 bytes past the end of the data area; memcheck found it in
/// `corrupt_head_does_not_overflow`.)
fn attach_head(ctl: &RingCtl) -> u64 {
    ctl.head.load(Ordering::Acquire) & !(PAD_BIT | 7)
}

fn check_geometry(data: *mut u8, cap: usize) {
    assert!(
        is_valid_capacity(cap),
        "ring capacity {cap} must be a power of two in {MIN_CAPACITY}..={MAX_CAPACITY}"
    );
    assert!(
        (data as usize) % DATA_ALIGN == 0,
        "ring data area must be {DATA_ALIGN}-byte aligned"
    );
}

/// The control block of a ring: the consumer's published head position.
///
/// `#[repr(C)]`, a multiple of 64 bytes, and free of pointers, so it can be placed in memory
/// shared between processes. The head sits alone on its cache line, so the consumer's stores
/// after each pop do not disturb the producer until it actually runs out of cached space.
///
/// # Example
///
/// ```
/// use gex_sync::ring::RingCtl;
///
/// let ctl = RingCtl::new();
/// assert_eq!(ctl.head(), 0);
/// ```
#[repr(C)]
pub struct RingCtl {
    /// Position just past the last record the consumer released.
    head: CachePadded<AtomicU64>,
    /// Loom-only tag side table (zero-sized otherwise).
    tags: CtlTags,
}

impl RingCtl {
    /// Creates a control block for an empty ring.
    pub fn new() -> Self {
        Self {
            head: CachePadded::new(AtomicU64::new(0)),
            tags: CtlTags::new(),
        }
    }

    /// Initialises a control block in place, e.g. in freshly mapped shared memory.
    ///
    /// # Safety
    ///
    /// `p` must be valid for writes of `size_of::<RingCtl>()` bytes and aligned to
    /// `align_of::<RingCtl>()`. Any previous value at `p` is overwritten without being
    /// dropped, and no endpoint may be using it.
    pub unsafe fn init_in_place(p: *mut RingCtl) {
        // SAFETY: the caller guarantees `p` is valid and aligned for a write of a `RingCtl`.
        unsafe { p.write(RingCtl::new()) }
    }

    /// Returns the consumer's published head position (`Acquire`); for diagnostics.
    pub fn head(&self) -> u64 {
        self.head.load(Ordering::Acquire)
    }
}

impl Default for RingCtl {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for RingCtl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RingCtl")
            .field("head", &self.head.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// Heap memory of a ring made by [`channel`], freed when both endpoints are gone.
struct OwnedRing {
    ctl: *mut RingCtl,
    data: *mut u8,
    layout: Layout,
}

// SAFETY: `OwnedRing` only owns two heap allocations and frees them in `Drop`; it never reads
// or writes them itself, so moving or sharing it across threads is harmless.
unsafe impl Send for OwnedRing {}
// SAFETY: as above, `&OwnedRing` gives no access to the allocations.
unsafe impl Sync for OwnedRing {}

impl Drop for OwnedRing {
    fn drop(&mut self) {
        // SAFETY: `ctl` came from `Box::into_raw` and `data` from `alloc_zeroed(layout)` in
        // `channel`; both endpoints holding pointers into them are gone (this is the last
        // `Arc` reference).
        unsafe {
            drop(Box::from_raw(self.ctl));
            alloc::dealloc(self.data, self.layout);
        }
    }
}

/// Allocates an in-process ring with a data area of `cap` bytes and returns its two
/// endpoints. The memory is freed when both are dropped.
///
/// Allocation happens here, never on the push/pop paths.
///
/// # Panics
///
/// If `cap` is not a valid capacity (see [`is_valid_capacity`]) or allocation fails.
///
/// # Example
///
/// ```
/// let (mut tx, mut rx) = gex_sync::ring::channel(256);
/// let t = std::thread::spawn(move || {
///     for i in 0u32..100 {
///         while !tx.push(i, &[&i.to_le_bytes()]) {
///             std::hint::spin_loop();
///         }
///     }
/// });
/// for i in 0u32..100 {
///     let (user, body) = loop {
///         if let Some((u, b)) = rx.peek() {
///             break (u, b.to_vec());
///         }
///     };
///     assert_eq!((user, body), (i, i.to_le_bytes().to_vec()));
///     rx.pop();
/// }
/// t.join().unwrap();
/// ```
pub fn channel(cap: usize) -> (Producer, Consumer) {
    assert!(
        is_valid_capacity(cap),
        "ring capacity {cap} must be a power of two in {MIN_CAPACITY}..={MAX_CAPACITY}"
    );
    let layout = Layout::from_size_align(cap, DATA_ALIGN).expect("ring layout");
    // SAFETY: `layout` has a non-zero size (cap >= MIN_CAPACITY).
    let data = unsafe { alloc::alloc_zeroed(layout) };
    if data.is_null() {
        alloc::handle_alloc_error(layout);
    }
    let owner = Arc::new(OwnedRing {
        ctl: Box::into_raw(Box::new(RingCtl::new())),
        data,
        layout,
    });
    // SAFETY: `ctl` is an initialised control block and `data` a zeroed, 64-byte aligned
    // area of `cap` bytes; both live as long as `owner`, which each endpoint keeps alive, and
    // these are the only two endpoints.
    unsafe {
        let mut tx = Producer::new(owner.ctl, owner.data, cap);
        let mut rx = Consumer::new(owner.ctl, owner.data, cap);
        tx._owner = Some(Arc::clone(&owner));
        rx._owner = Some(owner);
        (tx, rx)
    }
}

/// The writing end of a ring.
///
/// `Send` but not `Sync`: exactly one thread pushes at a time.
///
/// # Example
///
/// ```
/// let (mut tx, mut rx) = gex_sync::ring::channel(256);
/// assert_eq!(tx.capacity(), 256);
/// assert_eq!(tx.max_body(), 112);
/// assert!(tx.push(1, &[&[0u8; 112]]));
/// assert!(!tx.push(2, &[&[0u8; 112]])); // full: back-pressure, not an error
/// rx.peek().unwrap();
/// rx.pop();
/// assert!(tx.push(2, &[&[0u8; 112]]));
/// ```
pub struct Producer {
    ctl: *const RingCtl,
    data: *mut u8,
    tags: TagStore,
    cap: usize,
    mask: u64,
    tail: u64,
    cached_head: u64,
    _owner: Option<Arc<OwnedRing>>,
}

// SAFETY: a `Producer` is the only writer of its ring; the memory it points to is valid for
// its whole life (caller contract of `new`) and all cross-thread accesses follow the
// protocol, so it may move to another thread. It is not `Sync` (raw pointers).
unsafe impl Send for Producer {}

impl Producer {
    /// Attaches the producer end to a ring.
    ///
    /// The ring must be empty: freshly initialised (control block from [`RingCtl::new`] or
    /// [`RingCtl::init_in_place`], data area all zero), or with everything consumed and the
    /// previous producer gone. The tail starts at the published head.
    ///
    /// # Safety
    ///
    /// - `ctl` points to an initialised [`RingCtl`] and `data` to `cap` bytes that are
    ///   readable and writable; both stay valid and in place while the producer lives (in
    ///   shared memory: stay mapped).
    /// - No other producer uses this ring while this one lives, and at most one consumer
    ///   (created with the same `cap`) does.
    /// - Nothing else writes to the control block or data area.
    ///
    /// # Panics
    ///
    /// If `cap` is not a valid capacity or `data` is not [`DATA_ALIGN`]-aligned.
    pub unsafe fn new(ctl: *const RingCtl, data: *mut u8, cap: usize) -> Producer {
        check_geometry(data, cap);
        // SAFETY: the caller guarantees `ctl` is valid and initialised.
        let head = attach_head(unsafe { &*ctl });
        Producer {
            ctl,
            data,
            // SAFETY: forwarded caller guarantees; geometry checked above.
            tags: unsafe { TagStore::new(ctl, data, cap) },
            cap,
            mask: cap as u64 - 1,
            tail: head,
            cached_head: head,
            _owner: None,
        }
    }

    /// Returns the size of the data area in bytes.
    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// Returns the largest body [`reserve`](Self::reserve) accepts, [`max_body`]`(cap)`.
    pub fn max_body(&self) -> usize {
        max_body(self.cap)
    }

    /// Reserves space for a record with a body of `body_len` bytes.
    ///
    /// Returns `None` when the ring has no room right now (back-pressure: retry after the
    /// consumer made progress). Nothing is visible to the consumer until
    /// [`Reserved::commit`]; dropping the reservation cancels it.
    ///
    /// No allocation, no syscall; the shared head is read only when the cached copy says the
    /// record does not fit.
    ///
    /// # Panics
    ///
    /// In debug builds if `body_len > self.max_body()`; release builds return `None`.
    #[inline]
    pub fn reserve(&mut self, body_len: usize) -> Option<Reserved<'_>> {
        let max = max_body(self.cap);
        debug_assert!(body_len <= max, "record body {body_len} > max_body {max}");
        if body_len > max {
            return None;
        }
        let size = record_size(body_len) as u64;
        let off = self.tail & self.mask;
        let pos = if off + size <= self.cap as u64 {
            self.tail
        } else {
            // Pad to the end of the lap; the record starts at the next multiple of `cap`.
            (self.tail | self.mask) + 1
        };
        let need = pos + size + SLACK;
        // `need - head > cap`, written so that no head value overflows: the head comes from
        // shared memory, which another process may have corrupted (then records may be
        // overwritten, but every write stays inside the data area).
        if need.saturating_sub(self.cached_head) > self.cap as u64 {
            // SAFETY: `ctl` is valid while `self` lives (contract of `new`).
            self.cached_head = unsafe { &*self.ctl }.head.load(Ordering::Acquire);
            if need.saturating_sub(self.cached_head) > self.cap as u64 {
                return None;
            }
        }
        Some(Reserved {
            prod: self,
            pos,
            len: body_len,
        })
    }

    /// Copies the concatenation of `parts` into one record with user word `user` and
    /// publishes it. Returns `false` (and publishes nothing) when there is no room now.
    ///
    /// # Panics
    ///
    /// In debug builds if the total length exceeds [`max_body`](Self::max_body); release
    /// builds return `false`.
    #[inline]
    pub fn push(&mut self, user: u32, parts: &[&[u8]]) -> bool {
        let total: usize = parts.iter().map(|p| p.len()).sum();
        let Some(mut r) = self.reserve(total) else {
            return false;
        };
        let body = r.body();
        let mut at = 0;
        for p in parts {
            body[at..at + p.len()].copy_from_slice(p);
            at += p.len();
        }
        r.commit(user, total);
        true
    }

    /// Bytes published but not yet released by the consumer (reads the shared head;
    /// for diagnostics: the answer may be stale by the time it is used).
    pub fn in_flight(&self) -> u64 {
        // SAFETY: `ctl` is valid while `self` lives (contract of `new`).
        let head = unsafe { &*self.ctl }.head.load(Ordering::Acquire);
        self.tail.saturating_sub(head)
    }

    /// Returns whether the consumer has released everything pushed so far. Re-reads the
    /// shared head (`Acquire`) and refreshes the cached copy.
    pub fn is_empty(&mut self) -> bool {
        // SAFETY: `ctl` is valid while `self` lives (contract of `new`).
        self.cached_head = unsafe { &*self.ctl }.head.load(Ordering::Acquire);
        self.cached_head == self.tail
    }
}

impl fmt::Debug for Producer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Producer")
            .field("cap", &self.cap)
            .field("tail", &self.tail)
            .field("cached_head", &self.cached_head)
            .finish_non_exhaustive()
    }
}

/// Space reserved in a ring for one record, not yet visible to the consumer.
///
/// Fill [`body`](Self::body) (or write through [`body_ptr`](Self::body_ptr)), then
/// [`commit`](Self::commit). Dropping it without committing cancels the reservation: nothing
/// is published and the space can be reserved again.
///
/// # Example
///
/// ```
/// let (mut tx, mut rx) = gex_sync::ring::channel(256);
/// drop(tx.reserve(40).unwrap()); // cancelled
/// let mut r = tx.reserve(4).unwrap();
/// r.body().copy_from_slice(&[1, 2, 3, 4]);
/// r.commit(9, 4);
/// assert_eq!(rx.peek(), Some((9, &[1u8, 2, 3, 4][..])));
/// ```
pub struct Reserved<'a> {
    prod: &'a mut Producer,
    /// Position of the record (after the pad, if one is needed).
    pos: u64,
    /// Reserved body length.
    len: usize,
}

impl Reserved<'_> {
    fn body_offset(&self) -> usize {
        (self.pos & self.prod.mask) as usize + RECORD_HEADER
    }

    /// Returns the reserved body: exactly the length passed to
    /// [`Producer::reserve`]. Its initial contents are unspecified (old ring bytes).
    #[inline]
    pub fn body(&mut self) -> &mut [u8] {
        let off = self.body_offset();
        // SAFETY: `[off, off + len)` lies inside the data area (records never straddle the
        // end) and in the producer's free space, which nobody else reads or writes until the
        // record is published; `&mut self` makes the borrow unique.
        unsafe { std::slice::from_raw_parts_mut(self.prod.data.add(off), self.len) }
    }

    /// Returns a pointer to the reserved body (8-byte aligned, valid for writes of the
    /// reserved length until `commit` or drop); the same memory as [`body`](Self::body).
    #[inline]
    pub fn body_ptr(&mut self) -> *mut u8 {
        let off = self.body_offset();
        // SAFETY: `off <= cap`, so the result stays inside (or one past) the data area.
        unsafe { self.prod.data.add(off) }
    }

    /// Publishes the record with user word `user` and a body of the first `len` reserved
    /// bytes. Any `u32` is a valid user word.
    ///
    /// # Panics
    ///
    /// If `len` exceeds the reserved length.
    #[inline]
    pub fn commit(self, user: u32, len: usize) {
        assert!(
            len <= self.len,
            "commit length {len} > reserved {}",
            self.len
        );
        let p = &mut *self.prod;
        let pos = self.pos;
        let off = (pos & p.mask) as usize;
        // SAFETY: `[off, off + record_size(len))` is inside the data area and in the
        // producer's free space; `off + 8` is 8-byte aligned (data is 64-aligned).
        unsafe {
            p.data.add(off + 8).cast::<u32>().write(len as u32);
            p.data.add(off + 12).cast::<u32>().write(user);
        }
        let end = pos + record_size(len) as u64;
        // SAFETY: every tag offset below is `position & mask`, a multiple of 8 below `cap`;
        // the words at `end` and `pos` (and the pad at `tail`) are in the producer's free
        // space because `reserve` checked `end + 8 <= head + cap`; the mirrored record is
        // inside the data area.
        unsafe {
            p.tags.mirror(p.data, off, record_size(len));
            p.tags.store((end & p.mask) as usize, 0, Ordering::Relaxed);
            p.tags.store(off, pos + 1, Ordering::Release);
            if pos != p.tail {
                p.tags.store(
                    (p.tail & p.mask) as usize,
                    (p.tail + 1) | PAD_BIT,
                    Ordering::Release,
                );
            }
        }
        p.tail = end;
        std::mem::forget(self);
    }
}

impl Drop for Reserved<'_> {
    fn drop(&mut self) {
        // Cancel: nothing to undo. Under loom, record that the caller may have written the
        // reserved bytes.
        let off = (self.pos & self.prod.mask) as usize;
        // SAFETY: the reserved record lies inside the data area in free space.
        unsafe {
            self.prod
                .tags
                .mirror(self.prod.data, off, record_size(self.len))
        };
    }
}

impl fmt::Debug for Reserved<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reserved")
            .field("pos", &self.pos)
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

/// A published ring record that does not fit the data area: the ring memory is corrupt
/// (see [`Consumer::try_peek`]).
///
/// # Example
///
/// ```
/// let e = gex_sync::ring::CorruptRecord { pos: 4096, len: Some(1 << 30), room: 256 };
/// assert_eq!(
///     e.to_string(),
///     "corrupt ring: the record at position 4096 claims a 1073741824-byte body, \
///      but 256 bytes (header included) remain before the end of the data area"
/// );
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CorruptRecord {
    /// Ring position of the record.
    pub pos: u64,
    /// Body length its header claims; `None` when the header itself does not fit (a
    /// record tag in the last 8 bytes of the data area, where only a pad fits).
    pub len: Option<usize>,
    /// Bytes from the start of the record to the end of the data area.
    pub room: usize,
}

impl fmt::Display for CorruptRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.len {
            Some(len) => write!(
                f,
                "corrupt ring: the record at position {} claims a {len}-byte body, but {} \
                 bytes (header included) remain before the end of the data area",
                self.pos, self.room
            ),
            None => write!(
                f,
                "corrupt ring: a record tag at position {}, {} bytes before the end of the \
                 data area, leaves no room for its header",
                self.pos, self.room
            ),
        }
    }
}

impl std::error::Error for CorruptRecord {}

/// The reading end of a ring.
///
/// `Send` but not `Sync`: exactly one thread consumes at a time.
///
/// # Example
///
/// ```
/// let (mut tx, mut rx) = gex_sync::ring::channel(256);
/// assert!(!rx.has_data());
/// tx.push(3, &[b"x"]);
/// assert!(rx.has_data());
/// let (user, body) = rx.peek().unwrap();
/// assert_eq!((user, body), (3, &b"x"[..]));
/// rx.pop();
/// assert!(!rx.has_data());
/// ```
pub struct Consumer {
    ctl: *const RingCtl,
    data: *mut u8,
    tags: TagStore,
    cap: usize,
    mask: u64,
    /// Position of the next record (pads already skipped by `peek` are behind it).
    head: u64,
    /// Size of the record returned by the last `peek`, 0 if none.
    pending: u64,
    /// Last head value stored into the control block (a `Cell` so that the `&self`
    /// emptiness check can publish too).
    published: std::cell::Cell<u64>,
    _owner: Option<Arc<OwnedRing>>,
}

// SAFETY: a `Consumer` is the only reader of its ring; the memory it points to is valid for
// its whole life (caller contract of `new`) and all cross-thread accesses follow the
// protocol, so it may move to another thread. It is not `Sync` (raw pointers).
unsafe impl Send for Consumer {}

impl Consumer {
    /// Attaches the consumer end to a ring, starting at the published head.
    ///
    /// # Safety
    ///
    /// - `ctl` points to an initialised [`RingCtl`] and `data` to `cap` readable bytes (the
    ///   same ring and `cap` as the producer); both stay valid and in place while the
    ///   consumer lives.
    /// - No other consumer uses this ring while this one lives.
    /// - Nothing but the ring's producer writes to the data area, and nothing else writes to
    ///   the control block.
    ///
    /// # Panics
    ///
    /// If `cap` is not a valid capacity or `data` is not [`DATA_ALIGN`]-aligned.
    pub unsafe fn new(ctl: *const RingCtl, data: *mut u8, cap: usize) -> Consumer {
        check_geometry(data, cap);
        // SAFETY: the caller guarantees `ctl` is valid and initialised.
        let head = attach_head(unsafe { &*ctl });
        Consumer {
            ctl,
            data,
            // SAFETY: forwarded caller guarantees; geometry checked above.
            tags: unsafe { TagStore::new(ctl, data, cap) },
            cap,
            mask: cap as u64 - 1,
            head,
            pending: 0,
            published: std::cell::Cell::new(head),
            _owner: None,
        }
    }

    /// Stores the head into the control block for the producer.
    #[inline]
    fn publish(&self) {
        self.published.set(self.head);
        // SAFETY: `ctl` is valid while `self` lives (contract of `new`).
        unsafe { &*self.ctl }
            .head
            .store(self.head, Ordering::Release);
    }

    /// Returns the next record as `(user, body)`, or `None` if the ring is empty.
    ///
    /// Pads are skipped transparently. When the ring is empty this costs one `Acquire` load.
    /// Calling `peek` again before [`pop`](Self::pop) returns the same record. The body stays
    /// valid (and unchanged) until `pop`.
    ///
    /// # Panics
    ///
    /// If the ring memory is corrupt (a published record claims to extend past the end of
    /// the data area). [`try_peek`](Self::try_peek) returns that as an error instead, for a
    /// caller that can name the producer in its report.
    #[inline]
    pub fn peek(&mut self) -> Option<(u32, &[u8])> {
        match self.try_peek() {
            Ok(r) => r,
            Err(e) => panic!("{e}"),
        }
    }

    /// [`peek`](Self::peek), with corrupt ring memory reported as an error instead of a
    /// panic.
    ///
    /// The ring's memory may be shared with another process, which can write anything into
    /// it. Whatever it writes, this reads only inside the data area and returns: a record
    /// whose header claims more bytes than the data area holds after it is
    /// [`CorruptRecord`]. The consumer then stays at that record (every later call returns
    /// the same error): the ring cannot be read past it.
    ///
    /// # Errors
    ///
    /// [`CorruptRecord`] for a published record that claims to extend past the end of the
    /// data area.
    ///
    /// # Example
    ///
    /// ```
    /// let (mut tx, mut rx) = gex_sync::ring::channel(256);
    /// assert_eq!(rx.try_peek(), Ok(None));
    /// tx.push(3, &[b"x"]);
    /// assert_eq!(rx.try_peek(), Ok(Some((3, &b"x"[..]))));
    /// ```
    #[inline]
    pub fn try_peek(&mut self) -> Result<Option<(u32, &[u8])>, CorruptRecord> {
        loop {
            let off = (self.head & self.mask) as usize;
            // SAFETY: `off` is a multiple of 8 below `cap`.
            let tag = unsafe { self.tags.load(off, Ordering::Acquire) };
            if tag == self.head + 1 {
                if off + RECORD_HEADER > self.cap {
                    // Only a pad fits in the last word of a lap.
                    self.pending = 0;
                    return Err(CorruptRecord {
                        pos: self.head,
                        len: None,
                        room: self.cap - off,
                    });
                }
                // SAFETY: the record is published (`Acquire` above pairs with the producer's
                // `Release` tag store) and owned by the consumer until `pop`; its header is
                // inside the data area (checked above) and 8-byte aligned.
                let (len, user) = unsafe {
                    (
                        self.data.add(off + 8).cast::<u32>().read() as usize,
                        self.data.add(off + 12).cast::<u32>().read(),
                    )
                };
                if off + RECORD_HEADER + len > self.cap {
                    self.pending = 0;
                    return Err(CorruptRecord {
                        pos: self.head,
                        len: Some(len),
                        room: self.cap - off,
                    });
                }
                self.pending = record_size(len) as u64;
                // SAFETY: the body is inside the data area (checked above), published, and
                // not written by the producer before `pop` releases it; the borrow of `self`
                // ends before `pop` can run.
                let body =
                    unsafe { std::slice::from_raw_parts(self.data.add(off + RECORD_HEADER), len) };
                return Ok(Some((user, body)));
            }
            if tag == (self.head + 1) | PAD_BIT {
                self.head = (self.head | self.mask) + 1;
                continue;
            }
            if self.published.get() != self.head {
                // Caught up: give the producer all the space consumed so far.
                self.publish();
            }
            return Ok(None);
        }
    }

    /// Releases the record returned by the last [`peek`](Self::peek). The space goes back
    /// to the producer when the consumer publishes its head (`Release`): once a quarter
    /// of the ring has been released since the last publication, and whenever `peek` or
    /// [`has_data`](Self::has_data) finds the ring empty. Publishing in batches keeps the
    /// head's cache line from bouncing between the two sides once per record while the
    /// ring is full.
    ///
    /// # Panics
    ///
    /// If there is no such record (no `peek` returned `Some` since the last `pop`).
    #[inline]
    pub fn pop(&mut self) {
        assert!(
            self.pending != 0,
            "Consumer::pop without a record from peek"
        );
        self.head += self.pending;
        self.pending = 0;
        if self.head - self.published.get() >= (self.cap as u64) / 4 {
            self.publish();
        }
    }

    /// Returns whether a record (or a pad, which precedes a record) is available, with one
    /// `Acquire` load. Finding the ring empty publishes the head like an empty
    /// [`peek`](Self::peek), so a consumer that checks before it sleeps never sits on
    /// space the producer waits for.
    #[inline]
    pub fn has_data(&self) -> bool {
        let off = (self.head & self.mask) as usize;
        // SAFETY: `off` is a multiple of 8 below `cap`.
        let tag = unsafe { self.tags.load(off, Ordering::Acquire) };
        let yes = tag & !PAD_BIT == self.head + 1;
        if !yes && self.published.get() != self.head {
            self.publish();
        }
        yes
    }

    /// Returns the size of the data area in bytes.
    pub fn capacity(&self) -> usize {
        self.cap
    }
}

impl fmt::Debug for Consumer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Consumer")
            .field("cap", &self.cap)
            .field("head", &self.head)
            .field("pending", &self.pending)
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, not(gex_loom)))]
mod tests;
