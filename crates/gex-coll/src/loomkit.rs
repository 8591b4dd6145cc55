//! Loom test surface (built only with `--cfg gex_loom`; hidden): lets the loom models
//! of `tests/loom_*.rs` drive the real shared-memory barrier ([`crate::barrier`]) and
//! channel ([`crate::shm`]) code, with threads as members.
//!
//! **Memory.** [`Shared`] allocates every member's area (and a small segment per
//! member) as the conduit would map them, zeroed, and places a loom atomic at every
//! word the code accesses atomically ([`crate::shm::layout::flag_words`]). A loom
//! `AtomicU64` is one word (its object's index, asserted below), so [`Area`]'s casts of
//! area offsets to `&AtomicU64` find a loom atomic, and loom explores every ordering
//! of the flag words exactly as the code states it.
//!
//! **Plain bytes.** Slot data, inline data and segments are plain bytes, which loom
//! does not see. Each slot's data (and inline bytes, and every 64 bytes of a segment)
//! has a shadow loom `UnsafeCell`; [`ShmOp`]'s `write` and `read` (and [`Shared`]'s
//! segment writes) call [`touch`], which accesses the cells of the bytes touched, so
//! loom reports a causality violation when a slot is rewritten before its readers'
//! reads happened-before (a missing acquire on `ACK`), or read before its writer's
//! bytes happened-before (a missing release on `POST`).
#![allow(unsafe_code)]

use crate::barrier::{Entry, ShmBar};
use crate::op::{OpKind, SyncModes};
use crate::shm::shadow::{Cell, SHADOW, Shadow, touch};
use crate::shm::{Area, Expected, Io, Publish, ShmOp, ShmTeam, WaitOn, layout};
use gex_core::EpAddr;
use gex_sync::atomic::{AtomicU32, AtomicU64};
use std::alloc::Layout;
use std::ptr::NonNull;
use std::sync::Arc;

// `Area` casts area words to `&AtomicU64`: loom's must be one word too.
const _: () = assert!(std::mem::size_of::<AtomicU64>() == 8);
const _: () = assert!(std::mem::align_of::<AtomicU64>() <= 8);

/// The channel the models use (not the world's: its slots are smaller).
pub const CH: usize = 1;

/// Data bytes of a large slot of channel [`CH`] (a block larger than this takes
/// several rounds, alternating the two large slots).
pub fn slot_cap() -> usize {
    crate::shm::slot_cap(CH)
}

/// Smallest block published by reference (from a member's segment).
pub const BYREF_MIN: usize = crate::shm::BYREF_MIN;

/// Bytes of a segment's shadow cells (a read or write of a segment accesses the
/// cells it overlaps).
const SEG_GRAIN: usize = 4096;

/// One zeroed allocation of the models (an area or a segment).
#[derive(Debug)]
struct Block {
    ptr: NonNull<u8>,
    layout: Layout,
}

impl Block {
    fn new(len: usize) -> Block {
        let layout = Layout::from_size_align(len, 64).expect("layout");
        // SAFETY: `layout` has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        Block {
            ptr: NonNull::new(ptr).unwrap_or_else(|| std::alloc::handle_alloc_error(layout)),
            layout,
        }
    }
    fn range(&self, r: std::ops::Range<usize>) -> Cell {
        let base = self.ptr.as_ptr() as usize;
        Cell {
            start: base + r.start,
            end: base + r.end,
            cell: Arc::new(Shadow::new()),
        }
    }
}

/// Every member's area and segment, as the conduit would map them (see the module docs).
/// Create it inside `loom::model`, before spawning the members.
#[derive(Debug)]
pub struct Shared {
    areas: Vec<Block>,
    segs: Vec<Block>,
    seg_len: usize,
}

// SAFETY: shared memory accessed through atomics and the flag protocol under test
// (module `crate::shm`, `# Safety`); the test's own segment writes are shadowed, and
// its views of segment bytes (`segment`) are `unsafe`, unwritten while they live.
unsafe impl Send for Shared {}
// SAFETY: as above.
unsafe impl Sync for Shared {}

impl Shared {
    /// The areas of `p` members, and a segment of `seg_len` bytes each (a multiple of
    /// 4096).
    pub fn new(p: u32, seg_len: usize) -> Arc<Shared> {
        let areas: Vec<Block> = (0..p).map(|_| Block::new(crate::shm::AREA_LEN)).collect();
        let segs: Vec<Block> = (0..p).map(|_| Block::new(seg_len.max(SEG_GRAIN))).collect();
        let mut cells = Vec::new();
        for a in &areas {
            for off in layout::flag_words(CH) {
                // SAFETY: in bounds, 8-byte aligned, and not referenced yet.
                unsafe {
                    a.ptr
                        .as_ptr()
                        .add(off)
                        .cast::<AtomicU64>()
                        .write(AtomicU64::new(0));
                }
            }
            cells.extend(layout::data_ranges(CH).into_iter().map(|r| a.range(r)));
        }
        for s in &segs {
            cells.extend(
                (0..seg_len / SEG_GRAIN).map(|i| s.range(SEG_GRAIN * i..SEG_GRAIN * (i + 1))),
            );
        }
        let mut g = SHADOW
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Ranges of an earlier execution that panicked before dropping its `Shared`.
        g.retain(|c| !cells.iter().any(|n| c.start < n.end && n.start < c.end));
        g.extend(cells);
        drop(g);
        Arc::new(Shared {
            areas,
            segs,
            seg_len,
        })
    }

    /// Writes `bytes` at `off` in member `q`'s segment (shadowed: a write the
    /// publisher makes after its collective returned, e.g. its next input).
    ///
    /// # Panics
    /// If `off + bytes.len()` passes `seg_len` (or overflows), or `q` is not a member.
    pub fn write_segment(&self, q: u32, off: usize, bytes: &[u8]) {
        assert!(
            off.checked_add(bytes.len())
                .is_some_and(|end| end <= self.seg_len),
            "write_segment: {off} + {} past the segment of {} bytes",
            bytes.len(),
            self.seg_len
        );
        let p = self.segs[q as usize].ptr.as_ptr();
        // SAFETY: in bounds (checked above, without overflow); the shadow cells make
        // loom check that no reader's read races with it (that is what the models
        // test), and no slice of these bytes is alive (`segment`'s `# Safety`).
        unsafe {
            touch(p.add(off), bytes.len(), true);
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), p.add(off), bytes.len());
        }
    }

    /// `len` bytes at `off` in member `q`'s segment (an input published by
    /// reference), as a slice: the view `Segment::as_slice` gives the program.
    ///
    /// # Safety
    /// Nothing writes those bytes while the slice lives: no [`write_segment`]
    /// of them (from any thread) until the slice's last use. The models call it on
    /// their own member's segment, between that member's writes.
    ///
    /// [`write_segment`]: Shared::write_segment
    ///
    /// # Panics
    /// If `off + len` passes `seg_len` (or overflows), or `q` is not a member.
    pub unsafe fn segment(&self, q: u32, off: usize, len: usize) -> &[u8] {
        assert!(
            off.checked_add(len).is_some_and(|end| end <= self.seg_len),
            "segment: {off} + {len} past the segment of {} bytes",
            self.seg_len
        );
        // SAFETY: in bounds (checked above, without overflow), inside a block this
        // `Shared` owns for the slice's life (`&self`); unwritten while the slice
        // lives (the caller's `# Safety`).
        unsafe { std::slice::from_raw_parts(self.segs[q as usize].ptr.as_ptr().add(off), len) }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        let mine = |c: &Cell| {
            self.areas.iter().chain(&self.segs).any(|b| {
                (b.ptr.as_ptr() as usize..b.ptr.as_ptr() as usize + b.layout.size())
                    .contains(&c.start)
            })
        };
        SHADOW
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .retain(|c| !mine(c));
        for b in self.areas.iter().chain(&self.segs) {
            // SAFETY: allocated by `Block::new` with this layout, freed once (here).
            // Nothing that reaches into it outlives this: every value of the kit
            // holding an `Area` (`Member`, `Bar`, `Coll`: their teams and `WaitOn`s)
            // holds an `Arc<Shared>` too, and `segment`'s slices borrow `&self`.
            // Loom atomics have no drop.
            unsafe { std::alloc::dealloc(b.ptr.as_ptr(), b.layout) };
        }
    }
}

/// One member of a team over [`Shared`]: its [`ShmTeam`] on channel [`CH`] and its
/// expected acknowledgements, as the layer keeps them.
#[derive(Debug)]
pub struct Member {
    team: ShmTeam,
    expected: Expected,
    /// This member's side of the publications' sleep protocol.
    fencing: crate::ring::Fencing,
    shared: Arc<Shared>,
}

impl Member {
    /// Member `me` of the team of every area of `shared` (claims its check line as
    /// [`ShmTeam::new`] does).
    pub fn new(shared: &Arc<Shared>, me: u32) -> Member {
        let p = shared.areas.len() as u32;
        let areas = shared.areas.iter().map(|b| Area::new(b.ptr)).collect();
        let segs = shared
            .segs
            .iter()
            .map(|b| (b.ptr.as_ptr() as usize, shared.seg_len))
            .collect();
        let members = (0..p).map(|q| EpAddr::new(q, 0)).collect();
        let used = std::sync::Arc::new(AtomicU32::new(1 << CH));
        let team = ShmTeam::new(CH, areas, segs, 1, used, members, me, 77);
        let expected = Expected::from_area(None);
        Member {
            team,
            expected,
            fencing: crate::ring::Fencing::default(),
            shared: shared.clone(),
        }
    }

    /// Announces, once, that this member may sleep (`Area::set_may_sleep`, as
    /// `ShmPath::note_policy` does under a policy that may).
    pub fn set_may_sleep(&self) {
        for a in &self.team.areas {
            a.set_team_may_sleep(self.team.ch);
        }
        self.team.areas[self.team.me as usize].set_may_sleep();
    }

    /// This member's team rank.
    pub fn me(&self) -> u32 {
        self.team.me
    }

    /// `ShmTeam::wake_fenced`: calls `wake` with the rank of every member of `mask`
    /// whose `SLEEPY` word is set (the last flag was stored by a sequentially
    /// consistent read-modify-write; the loom build fences first).
    pub fn wake_fenced(&self, mask: u64, wake: &mut dyn FnMut(u32)) {
        self.team.wake_fenced(mask, &mut |a: EpAddr| wake(a.rank));
    }

    /// This member's `SLEEPY` word.
    pub fn sleepy(&self) -> &AtomicU64 {
        self.team.areas[self.team.me as usize].sleepy()
    }

    /// Barrier number `k` of the team, entered with `id` (`None`: anonymous): the
    /// flag barrier on two members, the counter barrier on more (`ShmBar::new`).
    pub fn barrier(&self, k: u32, id: Option<u64>) -> Bar {
        let entry = Entry {
            named: id,
            mismatch: false,
        };
        Bar {
            op: ShmBar::new(self.team.areas.len() as u32, k, entry),
            _shared: self.shared.clone(),
        }
    }

    /// Barrier number `k` as a counter barrier whatever the team's size (`CountBar`).
    pub fn counter_barrier(&self, k: u32, id: Option<u64>) -> Bar {
        let entry = Entry {
            named: id,
            mismatch: false,
        };
        Bar {
            op: ShmBar::Count(crate::barrier::CountBar::new(k, entry)),
            _shared: self.shared.clone(),
        }
    }

    /// Collective `seq` of the team: `kind` with root 0 and blocks of `n` bytes.
    pub fn collective(&self, kind: OpKind, n: usize, sync: SyncModes, seq: u32) -> Coll {
        let p = self.team.areas.len() as u32;
        let op = ShmOp::new(kind, (p, self.team.me, 0), 1, n, sync, (77, seq), CH);
        Coll {
            op,
            _shared: self.shared.clone(),
        }
    }
}

/// A barrier in flight on one member ([`Member::barrier`]). It keeps the areas its
/// waits point into alive (the `Arc<Shared>`): [`Bar::ready`] may run after the
/// member is gone.
#[derive(Debug)]
pub struct Bar {
    op: ShmBar,
    _shared: Arc<Shared>,
}

impl Bar {
    /// `ShmBar::step`: enters (once) and advances; true once the barrier is over.
    pub fn step(&mut self, m: &Member) -> bool {
        self.op.step(&m.team)
    }

    /// The direct path's `DirectOp::finish`: completes a barrier whose last wait is
    /// over without the team; true if done.
    pub fn finish(&mut self, m: &Member) -> bool {
        let p = m.team.areas.len() as u32;
        match &mut self.op {
            ShmBar::Count(b) => b.finish(),
            ShmBar::Flag(b) => b.finish(p, m.team.me),
        }
    }

    /// True once what the last step waited for has happened (`WaitOn::ready`; true
    /// when it did not wait).
    pub fn ready(&self) -> bool {
        self.op.wait().is_none_or(|w| w.ready())
    }

    /// The merged entry: (smallest named id, mismatch).
    pub fn entry(&self) -> (Option<u64>, bool) {
        let e = self.op.entry();
        (e.named, e.mismatch)
    }

    /// The members to wake after the last step (bit = rank), taken.
    pub fn take_wake(&mut self) -> u64 {
        self.op.take_wake()
    }
}

/// A shared-memory collective in flight on one member ([`Member::collective`]). It
/// keeps the areas its waits point into alive, as [`Bar`] does.
#[derive(Debug)]
pub struct Coll {
    op: ShmOp,
    _shared: Arc<Shared>,
}

impl Coll {
    /// `ShmOp::publish_by_reference` (never CMA: the models' inputs lie in segments
    /// or nowhere a reader could reach); true if it publishes by reference.
    pub fn publish_by_reference(&mut self, m: &Member, input: &[u8]) -> bool {
        self.op.publish_by_reference(&m.team, input, false) == Publish::Segment
    }

    /// `ShmOp::keep_own`.
    pub fn keep_own(&self, input: &[u8], out: &mut [u8]) {
        self.op.keep_own(input, out);
    }

    /// `ShmOp::step` over `input` and `out` (copying operations only).
    pub fn step(&mut self, m: &mut Member, input: &[u8], out: &mut [u8]) -> bool {
        let mut io = Io {
            input,
            out,
            reduce: None,
        };
        self.op.step(&m.team, &mut m.expected, &mut io)
    }

    /// True once what the last step waited for has happened (true when it did not
    /// wait).
    pub fn ready(&self) -> bool {
        self.op.wait.is_none_or(|w: WaitOn| w.ready())
    }

    /// The members to wake after the last step (bit = rank), taken.
    pub fn take_wake(&mut self) -> u64 {
        std::mem::take(&mut self.op.wake)
    }

    /// `ShmOp::wake_members`: wakes the members stored for since the last wake
    /// (readers of a publication through the publications' protocol: a fence and
    /// their `SLEEPY` words once this member fences; publishers of an acknowledged
    /// slot as `wake_fenced`).
    pub fn wake_members(&mut self, m: &mut Member, wake: &mut dyn FnMut(u32)) {
        self.op
            .wake_members(&m.team, &mut m.fencing, &mut |a: EpAddr| wake(a.rank));
    }

    /// `WaitOn::sleep_safe` of what the last step waited for (true when it did not
    /// wait): the member may sleep on it.
    pub fn sleep_safe(&self) -> bool {
        self.op.wait.is_none_or(|w: WaitOn| w.sleep_safe())
    }
}
