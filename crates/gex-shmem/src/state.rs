//! The PE's state: the gex client and endpoint, the symmetric heap, the static data
//! region, the teams and contexts, and the primitives every entry point is built on
//! (put and get of bytes at a symmetric address, atomics, quiet, the barrier).
//!
//! ## Two parts: the published PE and the locked state
//! What the hot paths need never changes between `shmem_init` and the end of the
//! process: this PE's number, the heap's place and length, and for every PE the address
//! of its heap in this process's mapping of its segment (when the conduit maps it: smp,
//! and this PE itself). `shmem_init` publishes it once ([`Pe`], in a `OnceLock`), and
//! the puts, gets and atomics to a mapped heap word read it without a lock: a bounds
//! check and a byte-wise atomic copy ([`gex_sync::copy`]) or a word operation
//! ([`gex_sync::word`]), as gex-rma's own direct path does, complete when they return.
//! `shmem_quiet` is then a fence, unless an operation went through the endpoint.
//!
//! Everything else (the endpoint and its operations to PEs that are not mapped or to
//! static data, the heap allocator, teams, contexts, collectives) is the [`State`],
//! behind one process-wide lock taken for the time of one operation; the waits
//! (`wait_until`, `test`, locks) take it once per poll, so that other threads get
//! their turn (`SHMEM_THREAD_MULTIPLE`). A context's own endpoint ([`Slot`]) is
//! outside it: its puts, gets and quiet to PEs that are not mapped take no lock
//! (private context) or the slot's own.
//!
//! ## Finalize and calls racing it
//! Calls after `shmem_finalize` are erroneous (OpenSHMEM 1.5, 9.1.5); here they report
//! "not initialised" and end the process. A call that another thread started before
//! `shmem_finalize` returned may still be running its direct copy when finalize ends:
//! so that this is never a use of unmapped memory, `shmem_finalize` does not drop the
//! endpoint: it keeps it (with the conduit and its mappings of every PE's segment)
//! until the process exits ([`RETIRED`]), and the published [`Pe`] is never freed. The
//! rule is then: an address a fast path computed from [`Pe`] stays mapped for the life
//! of the process, whatever other threads call.
//!
//! ## Symmetric addresses
//! A symmetric address is either in the symmetric heap (the gex segment: the remote
//! address is the same offset into the target's segment, reached with gex-rma's put,
//! get and atomics) or in the static data of the executable (its writable `PT_LOAD`
//! segments: `.data`, `.bss`; the same offset from the start of the target's copy,
//! since every PE runs the same executable). Static data is not registered with the
//! conduit, so it is reached by active messages that the target runs when it polls
//! (any call into this library polls).
#![allow(unsafe_code)]

use crate::error::ShmemError;
use crate::heap::Heap;
use gex_facade::prelude::*;
use gex_facade::rma::AtomicDomain;
use gex_facade::{Client, OwnedEndpoint};
use gex_sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::ffi::c_int;
use std::sync::{Mutex, OnceLock};

/// What every fast path reads: published once by `shmem_init` (in [`PE`]), never
/// changed or freed afterwards (module documentation).
pub(crate) struct Pe {
    pub(crate) me: u32,
    pub(crate) npes: u32,
    /// This PE's heap: its address and length.
    pub(crate) heap_base: usize,
    heap_len: usize,
    /// Every PE's offset of the heap in its segment.
    pads: Box<[usize]>,
    /// Some PE is reached through an endpoint: contexts get endpoints of their own.
    ctx_eps: bool,
    /// A no-op handler of endpoint 0 (the same on every PE): contexts' endpoints send
    /// it their first message to a PE ([`CtxEp::reach`]).
    hello: HandlerId,
    /// Per PE: the address of its heap in this process's mapping of its segment and the
    /// bytes of it that may be reached from there (mapped, published, and within this
    /// PE's heap length, so that one comparison checks a range); `(0, 0)` when the
    /// conduit does not map it (the endpoint carries those operations).
    peers: Box<[(usize, usize)]>,
    /// The atomic domains agreed on CPU atomics (not the NIC's): an atomic on a mapped
    /// word may be done here, coherently with the other PEs' (gex-rma's rule).
    cpu_atomics: bool,
    pub(crate) thread_level: i32,
}

/// The published PE (module documentation).
static PE: OnceLock<Pe> = OnceLock::new();
/// [`PE`]'s value between `shmem_init` and `shmem_finalize`, null outside: what every
/// call reads first, one load.
static PUB: AtomicPtr<Pe> = AtomicPtr::new(std::ptr::null_mut());
/// An NBI put went through the endpoint since the last quiet (which then syncs it).
static EP_NBI: AtomicBool = AtomicBool::new(false);
/// The endpoint after `shmem_finalize`: kept, never dropped, so that its conduit's
/// mappings stay valid for calls racing finalize (module documentation).
static RETIRED: Mutex<Option<OwnedEndpoint>> = Mutex::new(None);

/// How many context handles [`CTX_TEAMS`] mirrors.
const CTX_MIRROR: usize = 256;
/// The contexts of the first [`CTX_MIRROR`] handle indices, for lookups without the
/// lock: the team index + 1 of a live context, 0 otherwise. A copy of `State::ctxs`,
/// written under the lock by [`State::set_ctx`].
static CTX_TEAMS: [AtomicUsize; CTX_MIRROR] = [const { AtomicUsize::new(0) }; CTX_MIRROR];

/// A context's own endpoint (issue 27 point 2; docs/shmem.md, "Contexts"): slot `i`
/// belongs to context index `i` (for `i <` [`CTX_MIRROR`]). Its endpoint is made once
/// (by the first `shmem_ctx_create` that gets index `i` while some PE is reached
/// through an endpoint), under the state lock, and kept for the life of the process: a
/// destroyed context leaves it in the slot, and the next context given index `i` reuses
/// it (`shmem_ctx_create` prefers free indices whose slot has one). Its puts, gets and
/// quiet to PEs the conduit does not map go through it, to the target's endpoint 0
/// (which holds the symmetric heap), without the state lock.
pub(crate) struct Slot {
    ep: OnceLock<SlotEp>,
    /// The tag ([`thread_tag`]) of the thread owning the live private context of this
    /// slot, 0 when the context is not private (or none is live). Set from 0 only under
    /// `lock`; set back to 0 only by the owner (`shmem_ctx_destroy`).
    owner: AtomicUsize,
    /// An NBI put went through the endpoint since the context's last quiet.
    nbi: AtomicBool,
    /// Operations the endpoint carried (`gexshmem_ctx_endpoint`: the tests' proof that a
    /// context's operations went through its own endpoint).
    ops: AtomicU64,
    /// Held around every use of the endpoint by a context that is not private.
    lock: Mutex<()>,
}

/// A slot's endpoint and its index.
struct SlotEp {
    index: u16,
    ep: std::cell::UnsafeCell<CtxEp>,
}

/// What a context's operations through its endpoint use.
pub(crate) struct CtxEp {
    ep: OwnedEndpoint,
    /// The buffer of its gets (kept: no allocation once grown).
    buf: Vec<u8>,
    /// Per PE: this endpoint has reached its endpoint 0 ([`CtxEp::reach`]).
    reached: Vec<bool>,
}

impl CtxEp {
    /// Makes sure this endpoint has reached PE `pe`'s endpoint 0 once (a Short request
    /// to the PE's no-op handler, sent with `try_request` while serving endpoint 0
    /// between attempts). The first contact of an endpoint made at run time waits for
    /// the peer's endpoint 0 (ofi: the discovery of addresses and the provider's
    /// connection); a blocking gex operation would wait for it inside gex, polling
    /// only this endpoint, and when every thread of the peer PE waits so too, no one
    /// polls the peer's endpoint 0.
    fn reach(&mut self, pe: u32, hello: HandlerId) -> Result<(), ShmemError> {
        if self.reached.get(pe as usize).copied().unwrap_or(true) {
            return Ok(());
        }
        let mut spins = 0u32;
        while self
            .ep
            .try_request(EpAddr::new(pe, 0), hello, Body::short(&[]))?
            == Injected::WouldBlock
        {
            self.ep.poll();
            serve();
            spins += 1;
            if spins > 64 {
                std::thread::yield_now();
            }
        }
        self.reached[pe as usize] = true;
        Ok(())
    }

    /// Waits for `ev` on the context's endpoint while serving the PE's endpoint 0: a
    /// thread waiting here may be the only one of its PE in the library, and other PEs'
    /// requests to this PE's heap (gex-rma's AM path, ofi's discovery of this endpoint)
    /// are answered by endpoint 0 only when someone polls it.
    fn wait<T: Send + 'static>(&mut self, ev: Event<T, RmaError>) -> Result<T, ShmemError> {
        let mut spins = 0u32;
        while !self.ep.test(&ev).map_err(RmaError::from)? {
            serve();
            spins += 1;
            if spins > 64 {
                std::thread::yield_now();
            }
        }
        Ok(self.ep.wait(ev)?)
    }
}

// SAFETY: `ep` is reached only through `with_slot_ep`, which makes one `&mut` at a time:
// for a private context only the owner thread (`Slot::owner` equal to its tag, which
// only that thread sets back to 0), otherwise only a holder of `Slot::lock` that found
// `owner` 0 under it (and `owner` leaves 0 only under that lock). `OwnedEndpoint` is
// `Send`: using it from one thread at a time is what gex asks.
unsafe impl Sync for SlotEp {}

impl Slot {
    const fn new() -> Slot {
        Slot {
            ep: OnceLock::new(),
            owner: AtomicUsize::new(0),
            nbi: AtomicBool::new(false),
            ops: AtomicU64::new(0),
            lock: Mutex::new(()),
        }
    }
}

/// The context slots (see [`Slot`]).
static SLOTS: [Slot; CTX_MIRROR] = [const { Slot::new() }; CTX_MIRROR];

/// A tag of the calling thread, distinct between live threads (the address of a
/// thread-local), never 0.
fn thread_tag() -> usize {
    thread_local! { static TAG: u8 = const { 0 }; }
    TAG.with(|t| std::ptr::from_ref(t) as usize)
}

/// Runs `f` on the endpoint of context index `i` (see [`Slot`]): `None` when it has
/// none (the context rides the PE's endpoint).
fn with_slot_ep<R>(
    i: usize,
    f: impl FnOnce(&mut CtxEp, &Slot) -> Result<R, ShmemError>,
) -> Option<Result<R, ShmemError>> {
    let slot = SLOTS.get(i)?;
    let cell = slot.ep.get()?;
    let owner = slot.owner.load(Ordering::Acquire);
    if owner != 0 {
        if owner != thread_tag() {
            return Some(Err(ShmemError::Invalid(
                "a private context used by a thread that did not create it".into(),
            )));
        }
        // SAFETY: this thread owns the private context (`owner` is its tag, and only it
        // sets it back): no other `&mut` of the endpoint exists (`SlotEp`'s rule).
        return Some(f(unsafe { &mut *cell.ep.get() }, slot));
    }
    let _g = slot.lock.lock().unwrap_or_else(|p| p.into_inner());
    if slot.owner.load(Ordering::Acquire) != 0 {
        return Some(Err(ShmemError::BadCtx));
    }
    // SAFETY: `lock` is held and `owner` is 0 under it: the only `&mut` (`SlotEp`'s rule).
    Some(f(unsafe { &mut *cell.ep.get() }, slot))
}

/// The put of `src` to heap address `dst` of (world) PE `pe` on context index `i`'s own
/// endpoint, to `pe`'s endpoint 0; `None`: the context has no endpoint, or `dst` is not
/// in the heap (the PE's path decides).
pub(crate) fn ctx_put(
    i: usize,
    dst: usize,
    src: &[u8],
    pe: u32,
    nbi: bool,
) -> Option<Result<(), ShmemError>> {
    let p = published()?;
    let g = p.remote_heap(dst, src.len(), pe)?;
    with_slot_ep(i, |c, slot| {
        c.reach(pe, p.hello)?;
        if nbi {
            c.ep.put(g, src, Nbi)?;
            slot.nbi.store(true, Ordering::Release);
        } else {
            let ev = c.ep.put(g, src, Nb)?;
            c.wait(ev)?;
        }
        slot.ops.fetch_add(1, Ordering::Relaxed);
        Ok(())
    })
}

/// The get into `dst` from heap address `src` of `pe` on context index `i`'s own
/// endpoint, as [`ctx_put`].
pub(crate) fn ctx_get(
    i: usize,
    dst: &mut [u8],
    src: usize,
    pe: u32,
) -> Option<Result<(), ShmemError>> {
    let p = published()?;
    let g = p.remote_heap(src, dst.len(), pe)?;
    with_slot_ep(i, |c, slot| {
        c.reach(pe, p.hello)?;
        let mut buf = std::mem::take(&mut c.buf);
        buf.clear();
        buf.resize(dst.len(), 0);
        let ev = c.ep.get(buf, g, Nb)?;
        let buf = c.wait(ev)?;
        dst.copy_from_slice(&buf);
        c.buf = buf;
        slot.ops.fetch_add(1, Ordering::Relaxed);
        Ok(())
    })
}

/// Context index `i`'s quiet: its own endpoint's NBI puts (if it has one and issued
/// any), then what the PE's quiet completes (what the context sent through the PE's
/// endpoint: static data).
pub(crate) fn ctx_quiet(i: usize) -> Result<(), ShmemError> {
    if let Some(r) = with_slot_ep(i, |c, slot| {
        if slot.nbi.load(Ordering::Acquire) {
            slot.nbi.store(false, Ordering::Release);
            // As `CtxEp::wait`: serve endpoint 0 meanwhile.
            let mut spins = 0u32;
            while !c.ep.test_nbi(NbiCategories::ALL)? {
                serve();
                spins += 1;
                if spins > 64 {
                    std::thread::yield_now();
                }
            }
        }
        Ok(())
    }) {
        r?;
    }
    quiet()
}

/// `gexshmem_ctx_endpoint`: the index of context index `i`'s own endpoint (0: it has
/// none) and the operations it carried.
pub(crate) fn ctx_endpoint(i: usize) -> (u16, u64) {
    SLOTS.get(i).map_or((0, 0), |s| {
        (
            s.ep.get().map_or(0, |e| e.index),
            s.ops.load(Ordering::Relaxed),
        )
    })
}

/// What the mirror says of context index `i`: `Some(Some(team))` live, `Some(None)` not
/// live, `None` not mirrored (look in `State::ctxs`).
#[inline]
pub(crate) fn ctx_team(i: usize) -> Option<Option<usize>> {
    let v = CTX_TEAMS.get(i)?.load(Ordering::Acquire);
    Some(v.checked_sub(1))
}

/// The published PE while initialised.
///
/// # Errors
/// [`ShmemError::NotInitialized`] before `shmem_init` and after `shmem_finalize`.
#[inline(always)]
pub(crate) fn pe() -> Result<&'static Pe, ShmemError> {
    published().ok_or(ShmemError::NotInitialized)
}

/// The published PE while initialised, else `None`: one load.
#[inline(always)]
pub(crate) fn published() -> Option<&'static Pe> {
    let p = PUB.load(Ordering::Acquire);
    // SAFETY: `PUB` is null or the address of `PE`'s value (stored by `init` after
    // `PE.set`), which is `'static` and never changed or freed afterwards.
    unsafe { p.cast_const().as_ref() }
}

impl Pe {
    /// Checks a PE number.
    #[inline]
    pub(crate) fn pe(&self, pe: i32) -> Result<u32, ShmemError> {
        u32::try_from(pe)
            .ok()
            .filter(|&p| p < self.npes)
            .ok_or(ShmemError::BadPe(pe))
    }

    /// The address in this process of `[addr, addr + len)` (a range of this PE's heap)
    /// on PE `pe`, if the conduit maps it here; `None`: not in the heap, not mapped, or
    /// `pe` out of range (a negative PE number as `usize` is beyond every PE: the
    /// bounds check of `peers` is the PE check). The endpoint's path decides then and
    /// reports errors.
    #[inline(always)]
    fn direct(&self, addr: usize, len: usize, pe: usize) -> Option<*mut u8> {
        let &(base, lim) = self.peers.get(pe)?;
        let off = addr.wrapping_sub(self.heap_base);
        if off.checked_add(len)? > lim || lim == 0 {
            return None;
        }
        Some((base + off) as *mut u8)
    }
}

impl Pe {
    /// The global address (on `pe`'s endpoint 0, whose segment holds its heap) of heap
    /// range `[addr, addr + len)`; `None` outside the heap or `pe` out of range.
    fn remote_heap(&self, addr: usize, len: usize, pe: u32) -> Option<GlobalPtr<u8>> {
        let off = addr.wrapping_sub(self.heap_base);
        if off.checked_add(len)? > self.heap_len {
            return None;
        }
        let pad = *self.pads.get(pe as usize)?;
        Some(GlobalPtr::new(EpAddr::new(pe, 0), pad + off))
    }
}

/// The lock-free put (issue 27 point 4: the entry points' fast path, inlined into
/// them): `len` bytes from `src` to symmetric address `dst` of PE `pe` when the
/// conduit maps its heap here; `false` (nothing done) otherwise, for the checked path.
///
/// # Safety
/// `src` is valid for reads of `len` bytes (or null: `false`).
#[inline(always)]
pub(crate) unsafe fn put_direct(dst: usize, src: *const u8, len: usize, pe: c_int) -> bool {
    let Some(p) = published() else {
        return false;
    };
    if len == 0 || src.is_null() {
        return false;
    }
    let Some(at) = p.direct(dst, len, pe as usize) else {
        return false;
    };
    // SAFETY: `at .. at + len` is inside the mapping of `pe`'s segment (checked against
    // the reachable length), mapped for the life of the process (module documentation);
    // `src` the caller's; byte-wise atomic stores on the shared side.
    unsafe { gex_sync::copy::atomic_write(at, std::slice::from_raw_parts(src, len)) };
    true
}

/// The lock-free get, as [`put_direct`].
///
/// # Safety
/// `dst` is valid for writes of `len` bytes and not otherwise accessed meanwhile (or
/// null: `false`).
#[inline(always)]
pub(crate) unsafe fn get_direct(dst: *mut u8, src: usize, len: usize, pe: c_int) -> bool {
    let Some(p) = published() else {
        return false;
    };
    if len == 0 || dst.is_null() {
        return false;
    }
    let Some(at) = p.direct(src, len, pe as usize) else {
        return false;
    };
    if pe as u32 == p.me {
        // Programs spin on gets of their own PE's data: serve the others.
        serve();
    }
    // SAFETY: inside the mapping of `pe`'s segment (checked), mapped for the life of the
    // process; byte-wise atomic loads; `dst` is the caller's.
    unsafe { gex_sync::copy::atomic_read(at, std::slice::from_raw_parts_mut(dst, len)) };
    true
}

/// The lock-free atomic, as [`put_direct`]: `Some(old value)` when done (CPU atomic
/// domains, mapped heap, aligned word), `None` for the checked path.
#[inline(always)]
pub(crate) fn amo_direct(
    addr: usize,
    pe: c_int,
    width: u32,
    op: Amo,
    a: u64,
    b: u64,
) -> Option<u64> {
    let p = published()?;
    let w = width as usize;
    let mask = w.wrapping_sub(1);
    if !p.cpu_atomics || !w.is_power_of_two() || addr & mask != 0 {
        return None;
    }
    let at = p.direct(addr, w, pe as usize)?;
    if at as usize & mask != 0 {
        return None;
    }
    if pe as u32 == p.me {
        // Programs spin on atomics of their own PE's words: serve the others.
        serve();
    }
    // SAFETY: inside the mapping of `pe`'s segment (checked), mapped for the life of
    // the process, aligned to its width (checked); every other access to the word is a
    // `gex_sync::word` operation or a byte-wise copy (gex-rma's rule).
    Some(unsafe { word_amo(at, width, op, a, b) })
}

/// `shmem_quiet`'s fast path: a full barrier, done when nothing went through the
/// endpoint since the last quiet; `false`: take [`quiet`].
#[inline(always)]
pub(crate) fn quiet_direct() -> bool {
    if published().is_none() {
        return false;
    }
    gex_sync::word::full_fence();
    !EP_NBI.load(Ordering::Acquire) && OUTSTANDING.load(Ordering::Acquire) == 0
}

/// Polls the endpoint once if no other thread holds the state (that one polls): calls
/// that may be spun on serve the others' active messages.
fn serve() {
    if let Ok(mut g) = STATE.try_lock() {
        if let Some(s) = g.as_mut() {
            s.ep.poll();
        }
    }
}

/// Puts `src` at symmetric address `dst` of `pe` (a PE number, checked) on context
/// index `ctx` (`None`: the default context). `nbi`: the put may complete later (at the
/// next quiet); else it is complete at its target on return. What does not take the
/// direct path goes through the context's own endpoint when it has one ([`ctx_put`]).
///
/// # Errors
/// As [`State::put`].
#[inline]
pub(crate) fn put_on(
    ctx: Option<usize>,
    dst: usize,
    src: &[u8],
    pe: i32,
    nbi: bool,
) -> Result<(), ShmemError> {
    let p = self::pe()?;
    let pe = p.pe(pe)?;
    if let Some(at) = p.direct(dst, src.len(), pe as usize) {
        // SAFETY: `at .. at + len` is inside the mapping of `pe`'s segment (checked
        // against the mapped length), which stays mapped for the life of the process
        // (module documentation); byte-wise atomic stores, so other PEs' and threads'
        // concurrent accesses give unspecified bytes, not a data race.
        unsafe { gex_sync::copy::atomic_write(at, src) };
        return Ok(());
    }
    if let Some(r) = ctx.and_then(|i| ctx_put(i, dst, src, pe, nbi)) {
        return r;
    }
    with(|s| s.put(dst, src, pe, nbi))
}

/// Gets `dst.len()` bytes from symmetric address `src` of `pe` (checked) on context
/// index `ctx`, as [`put_on`].
///
/// # Errors
/// As [`State::get`].
#[inline]
pub(crate) fn get_on(
    ctx: Option<usize>,
    dst: &mut [u8],
    src: usize,
    pe: i32,
) -> Result<(), ShmemError> {
    let p = self::pe()?;
    let pe = p.pe(pe)?;
    if let Some(at) = p.direct(src, dst.len(), pe as usize) {
        if pe == p.me {
            // Programs spin on gets of their own PE's data: serve the others.
            serve();
        }
        // SAFETY: inside the mapping of `pe`'s segment (checked), mapped for the life of
        // the process; byte-wise atomic loads; `dst` is the caller's own slice.
        unsafe { gex_sync::copy::atomic_read(at, dst) };
        return Ok(());
    }
    if !dst.is_empty() {
        if let Some(r) = ctx.and_then(|i| ctx_get(i, &mut *dst, src, pe)) {
            return r;
        }
    }
    with(|s| s.get(dst, src, pe))
}

/// Atomic `op` on the `width`-byte word at symmetric address `addr` of `pe` (checked);
/// returns the old value (0 for a non-fetching op on the heap, where `fetch` is false).
///
/// # Errors
/// As [`State::amo`].
#[inline]
pub(crate) fn amo(
    addr: usize,
    pe: i32,
    width: u32,
    op: Amo,
    a: u64,
    b: u64,
    fetch: bool,
) -> Result<u64, ShmemError> {
    let p = self::pe()?;
    let pe = p.pe(pe)?;
    // 4 or 8: alignment by mask (a `%` by a run-time width is a division, which was
    // half of the time of a fetch-inc).
    let w = width as usize;
    let mask = w.wrapping_sub(1);
    if p.cpu_atomics && w.is_power_of_two() && addr & mask == 0 {
        if let Some(at) = p
            .direct(addr, w, pe as usize)
            .filter(|&at| at as usize & mask == 0)
        {
            if pe == p.me {
                // Programs spin on atomics of their own PE's words: serve the others.
                serve();
            }
            // SAFETY: inside the mapping of `pe`'s segment (checked), mapped for the life
            // of the process, aligned to its width (checked); every other access to the
            // word is a `gex_sync::word` operation or a byte-wise copy (gex-rma's rule).
            return Ok(unsafe { word_amo(at, width, op, a, b) });
        }
    }
    with(|s| s.amo(addr, pe, width, op, a, b, fetch))
}

/// Performs `op` on the `width`-byte (4 or 8) word at `at` with [`gex_sync::word`]
/// (as gex-rma's CPU atomic domains do) and returns the old value, zero-extended.
///
/// # Safety
/// `at` is valid for reads and writes of `width` bytes for the call and aligned to it;
/// every concurrent access to it is a `gex_sync::word` operation or a `gex_sync::copy`.
#[inline(always)]
unsafe fn word_amo(at: *mut u8, width: u32, op: Amo, a: u64, b: u64) -> u64 {
    use gex_sync::word;
    macro_rules! run {
        ($t:ty, $load:ident, $store:ident, $swap:ident, $cas:ident, $add:ident, $update:ident) => {{
            let (x, y) = (a as $t, b as $t);
            // SAFETY: the caller's promise.
            u64::from(unsafe {
                match op {
                    Amo::Fetch => word::$load(at, Ordering::Acquire),
                    Amo::Set => {
                        word::$store(at, x, Ordering::Release);
                        0
                    }
                    Amo::Swap => word::$swap(at, x),
                    Amo::Cswap => word::$cas(at, x, y),
                    Amo::Add => word::$add(at, x),
                    Amo::And => word::$update(at, |o| Some(o & x)),
                    Amo::Or => word::$update(at, |o| Some(o | x)),
                    Amo::Xor => word::$update(at, |o| Some(o ^ x)),
                }
            })
        }};
    }
    if width == 4 {
        run!(u32, load32, store32, swap32, cas32, fetch_add32, update32)
    } else {
        run!(u64, load64, store64, swap64, cas64, fetch_add64, update64)
    }
}

/// Completes every put, get and atomic issued so far: the direct ones are complete
/// already (a fence orders them before what follows); the endpoint is synced only when
/// an operation went through it.
///
/// # Errors
/// [`ShmemError::NotInitialized`], or as [`State::quiet`].
#[inline]
pub(crate) fn quiet() -> Result<(), ShmemError> {
    self::pe()?;
    gex_sync::word::full_fence();
    if EP_NBI.load(Ordering::Acquire) || OUTSTANDING.load(Ordering::Acquire) != 0 {
        return with(|s| s.quiet());
    }
    Ok(())
}

/// The state of an initialised PE.
pub(crate) struct State {
    pub(crate) client: Option<Client>,
    pub(crate) ep: OwnedEndpoint,
    pub(crate) world: Team,
    pub(crate) me: u32,
    pub(crate) npes: u32,
    /// The symmetric heap: this PE's address and length (the part of the gex segment
    /// from its first [`HEAP_ALIGN`]-aligned address).
    pub(crate) heap_base: usize,
    pub(crate) heap_len: usize,
    /// Every PE's offset of the heap in its segment.
    pads: Vec<usize>,
    pub(crate) ad32: AtomicDomain<u32>,
    pub(crate) ad64: AtomicDomain<u64>,
    pub(crate) heap: Heap,
    h_put: HandlerId,
    h_get: HandlerId,
    h_amo: HandlerId,
    /// Teams by handle index (0: world, 1: shared).
    pub(crate) teams: Vec<Option<TeamEntry>>,
    /// Contexts by handle index (0: the default context): the team each was made on.
    pub(crate) ctxs: Vec<Option<usize>>,
    /// The thread level granted.
    pub(crate) thread_level: i32,
}

/// A team and its configuration.
pub(crate) struct TeamEntry {
    pub(crate) team: Team,
    pub(crate) num_contexts: i32,
    /// Whether this library made it (split teams are destroyed; the predefined not).
    pub(crate) owned: bool,
}

/// Where a symmetric address is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Loc {
    /// This offset into the symmetric heap (the gex segment).
    Heap(usize),
    /// This offset into the executable's static data.
    Static(usize),
}

/// An atomic operation (the old value is returned by every one of them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub(crate) enum Amo {
    Fetch = 0,
    Set = 1,
    Swap = 2,
    Cswap = 3,
    Add = 4,
    And = 5,
    Or = 6,
    Xor = 7,
}

impl Amo {
    fn from_code(c: u32) -> Option<Amo> {
        use Amo::*;
        [Fetch, Set, Swap, Cswap, Add, And, Or, Xor]
            .get(c as usize)
            .copied()
    }
}

/// The alignment of the heap's start on every PE: the largest `shmem_align` honoured.
pub(crate) const HEAP_ALIGN: usize = 1 << 24;

/// The state, `None` outside `shmem_init` .. `shmem_finalize`.
static STATE: Mutex<Option<State>> = Mutex::new(None);
/// True once `shmem_finalize` ran (a second `shmem_init` is refused).
static FINALIZED: AtomicBool = AtomicBool::new(false);

/// The executable's static data: start address and length (set at init, before any
/// handler can run).
static STATIC_BASE: AtomicUsize = AtomicUsize::new(0);
static STATIC_LEN: AtomicUsize = AtomicUsize::new(0);

/// Puts to static data not acknowledged yet.
static OUTSTANDING: AtomicU64 = AtomicU64::new(0);
/// The reply of the one blocking request in flight (under the state lock).
static REPLY_DONE: AtomicBool = AtomicBool::new(false);
static REPLY_VAL: AtomicU64 = AtomicU64::new(0);
static REPLY_BUF: Mutex<Vec<u8>> = Mutex::new(Vec::new());
/// Set by a handler that refused an access outside the static data.
static REMOTE_FAULT: AtomicU32 = AtomicU32::new(0);

/// Runs `f` on the state.
///
/// # Errors
/// [`ShmemError::NotInitialized`], or `f`'s.
pub(crate) fn with<R>(
    f: impl FnOnce(&mut State) -> Result<R, ShmemError>,
) -> Result<R, ShmemError> {
    let mut g = STATE.lock().unwrap_or_else(|p| p.into_inner());
    match g.as_mut() {
        Some(s) => f(s),
        None => Err(ShmemError::NotInitialized),
    }
}

/// Ends the whole job with `code` from this PE (`shmem_global_exit`): gex's launcher
/// ends every other PE and the job exits with `code`. Without a client, ends this
/// process.
pub(crate) fn exit_job(code: i32) -> ! {
    if let Ok(mut g) = STATE.try_lock() {
        if let Some(s) = g.as_mut() {
            let _ = s.quiet();
            if let Some(c) = s.client.as_ref() {
                c.exit(code)
            }
        }
    }
    std::process::exit(code)
}

/// Aborts the whole job with a message (a failed call), or this process without a client.
pub(crate) fn abort_job(msg: &str) -> ! {
    if let Ok(g) = STATE.try_lock() {
        if let Some(c) = g.as_ref().and_then(|s| s.client.as_ref()) {
            c.abort(1, msg)
        }
    }
    eprintln!("{msg}");
    std::process::exit(1)
}

/// The writable loadable segments of the main program: (start, end).
fn static_region() -> (usize, usize) {
    struct Acc {
        first: bool,
        lo: usize,
        hi: usize,
    }
    unsafe extern "C" fn cb(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: `data` is the `&mut Acc` passed to dl_iterate_phdr below, alive for the
        // whole iteration; `info` is valid during the callback (glibc's contract).
        let (acc, info) = unsafe { (&mut *data.cast::<Acc>(), &*info) };
        if !acc.first {
            return 1;
        }
        acc.first = false;
        for i in 0..usize::from(info.dlpi_phnum) {
            // SAFETY: `dlpi_phdr` points to `dlpi_phnum` program headers (glibc's contract).
            let ph = unsafe { &*info.dlpi_phdr.add(i) };
            if ph.p_type == libc::PT_LOAD && ph.p_flags & libc::PF_W != 0 {
                let start = info.dlpi_addr as usize + ph.p_vaddr as usize;
                let end = start + ph.p_memsz as usize;
                acc.lo = acc.lo.min(start);
                acc.hi = acc.hi.max(end);
            }
        }
        1
    }
    let mut acc = Acc {
        first: true,
        lo: usize::MAX,
        hi: 0,
    };
    // SAFETY: `cb` follows dl_iterate_phdr's callback contract and `acc` outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(cb), (&raw mut acc).cast()) };
    if acc.hi > acc.lo {
        (acc.lo, acc.hi)
    } else {
        (0, 0)
    }
}

/// Performs `op` on the `width`-byte word at `addr` of this process and returns the
/// old value (zero-extended).
///
/// # Safety
/// `addr` is valid for atomic reads and writes of `width` (4 or 8) bytes and aligned to it.
unsafe fn local_amo(addr: usize, width: u32, op: Amo, a: u64, b: u64) -> u64 {
    macro_rules! run {
        ($at:ty, $t:ty) => {{
            // SAFETY: the caller's promise.
            let w = unsafe { <$at>::from_ptr(addr as *mut $t) };
            let (a, b) = (a as $t, b as $t);
            let o = Ordering::SeqCst;
            (match op {
                Amo::Fetch => w.load(o),
                Amo::Set => w.swap(a, o),
                Amo::Swap => w.swap(a, o),
                Amo::Cswap => match w.compare_exchange(a, b, o, o) {
                    Ok(v) | Err(v) => v,
                },
                Amo::Add => w.fetch_add(a, o),
                Amo::And => w.fetch_and(a, o),
                Amo::Or => w.fetch_or(a, o),
                Amo::Xor => w.fetch_xor(a, o),
            }) as u64
        }};
    }
    if width == 4 {
        run!(AtomicU32, u32)
    } else {
        run!(AtomicU64, u64)
    }
}

/// Whether `[off, off + len)` is inside the static data, and its address if so.
fn static_addr(off: usize, len: usize) -> Option<usize> {
    let (base, slen) = (
        STATIC_BASE.load(Ordering::Acquire),
        STATIC_LEN.load(Ordering::Acquire),
    );
    (off.checked_add(len)? <= slen).then_some(base + off)
}

fn split64(v: u64) -> [u32; 2] {
    [v as u32, (v >> 32) as u32]
}

fn join64(lo: u32, hi: u32) -> u64 {
    u64::from(lo) | (u64::from(hi) << 32)
}

/// The symmetric heap's size: `GEX_SHMEM_HEAP`, else `SHMEM_SYMMETRIC_SIZE`, else 64 MiB.
fn heap_size() -> Result<usize, ShmemError> {
    for var in ["GEX_SHMEM_HEAP", "SHMEM_SYMMETRIC_SIZE"] {
        if let Ok(v) = std::env::var(var) {
            return parse_size(&v).ok_or_else(|| {
                ShmemError::Config(format!(
                    "{var}={v}: not a size (bytes, with an optional K, M or G)"
                ))
            });
        }
    }
    Ok(64 << 20)
}

/// `123`, `64K`, `512M`, `2G` (binary units, case-insensitive, optional `B`/`iB`).
pub(crate) fn parse_size(v: &str) -> Option<usize> {
    let t = v.trim().to_ascii_uppercase();
    let t = t
        .strip_suffix("IB")
        .or_else(|| t.strip_suffix('B'))
        .unwrap_or(&t);
    let (num, mul) = match t.chars().last()? {
        'K' => (&t[..t.len() - 1], 1usize << 10),
        'M' => (&t[..t.len() - 1], 1 << 20),
        'G' => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    num.trim()
        .parse::<usize>()
        .ok()?
        .checked_mul(mul)
        .filter(|&n| n > 0)
}

/// Initialises the PE (collective). A second call while initialised does nothing.
pub(crate) fn init(level: i32) -> Result<i32, ShmemError> {
    let mut g = STATE.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(s) = g.as_ref() {
        return Ok(s.thread_level);
    }
    if FINALIZED.load(Ordering::Acquire) {
        return Err(ShmemError::Finalized);
    }
    let (lo, hi) = static_region();
    STATIC_BASE.store(lo, Ordering::Release);
    STATIC_LEN.store(hi - lo, Ordering::Release);
    let heap = heap_size()?;
    let client = gex_facade::start(gex_facade::builder().segment_size(heap + HEAP_ALIGN))?;
    let mut ep = client.endpoint(0)?;
    let world = ep.world();
    let (me, npes) = (ep.rank(), ep.size());
    let (seg, seg_len) = {
        let s = ep.segment();
        (s.as_ptr() as usize, s.len())
    };
    // Reply handlers first, so that the request handlers know their ids.
    let h_ack = ep.register(|_t: &mut Token<'_>, am: Am<'_>| {
        if am.args().first() == Some(&1) {
            REMOTE_FAULT.store(1, Ordering::Release);
        }
        OUTSTANDING.fetch_sub(1, Ordering::AcqRel);
    })?;
    let h_getr = ep.register(|_t: &mut Token<'_>, am: Am<'_>| {
        if am.args().first() == Some(&1) {
            REMOTE_FAULT.store(1, Ordering::Release);
        }
        let mut b = REPLY_BUF.lock().unwrap_or_else(|p| p.into_inner());
        b.clear();
        b.extend_from_slice(am.payload());
        REPLY_DONE.store(true, Ordering::Release);
    })?;
    let h_amor = ep.register(|_t: &mut Token<'_>, am: Am<'_>| {
        let a = am.args();
        if a.get(2) == Some(&1) {
            REMOTE_FAULT.store(1, Ordering::Release);
        }
        REPLY_VAL.store(join64(a[0], a[1]), Ordering::Release);
        REPLY_DONE.store(true, Ordering::Release);
    })?;
    let h_put = ep.register(move |t: &mut Token<'_>, am: Am<'_>| {
        let a = am.args();
        let off = join64(a[0], a[1]) as usize;
        let p = am.payload();
        let ok = match static_addr(off, p.len()) {
            Some(addr) => {
                // SAFETY: `[addr, addr + len)` is inside this process's writable static
                // data (checked); the program's own accesses to it race only as any RMA
                // does (OpenSHMEM leaves concurrent local and remote access undefined).
                unsafe { std::ptr::copy(p.as_ptr(), addr as *mut u8, p.len()) };
                0
            }
            None => 1,
        };
        let _ = t.reply(h_ack, Body::short(&[ok]));
    })?;
    let h_get = ep.register(move |t: &mut Token<'_>, am: Am<'_>| {
        let a = am.args();
        let (off, len) = (join64(a[0], a[1]) as usize, a[2] as usize);
        match static_addr(off, len) {
            Some(addr) => {
                // SAFETY: inside this process's static data (checked), readable.
                let s = unsafe { std::slice::from_raw_parts(addr as *const u8, len) };
                let _ = t.reply(h_getr, Body::medium(&[0], s));
            }
            None => {
                let _ = t.reply(h_getr, Body::medium(&[1], &[]));
            }
        }
    })?;
    let h_amo = ep.register(move |t: &mut Token<'_>, am: Am<'_>| {
        let a = am.args();
        let off = join64(a[0], a[1]) as usize;
        let width = a[3];
        let op = Amo::from_code(a[2]);
        let (x, y) = (join64(a[4], a[5]), join64(a[6], a[7]));
        let addr = static_addr(off, width as usize)
            .filter(|&p| (width == 4 || width == 8) && p % width as usize == 0);
        let (old, fault) = match (addr, op) {
            // SAFETY: inside the static data, aligned to its width (checked).
            (Some(p), Some(op)) => (unsafe { local_amo(p, width, op, x, y) }, 0),
            _ => (0, 1),
        };
        let [lo, hi] = split64(old);
        let _ = t.reply(h_amor, Body::short(&[lo, hi, fault]));
    })?;
    let h_hello = ep.register(|_t: &mut Token<'_>, _am: Am<'_>| {})?;
    // The heap starts at the first HEAP_ALIGN-aligned address of each PE's segment, so
    // that alignments up to it hold on every PE; the offsets differ, so they are exchanged.
    let pad = seg.next_multiple_of(HEAP_ALIGN) - seg;
    if pad >= seg_len {
        return Err(ShmemError::Config(format!(
            "a segment of {seg_len} bytes has no room for the heap"
        )));
    }
    let pads: Vec<u64> = ep.collective(&world, GatherAll::new(vec![pad as u64]), Blocking)?;
    let pads: Vec<usize> = pads.into_iter().map(|p| p as usize).collect();
    let heap_len = seg_len - pad;
    let all_int = AtomicOps::all() & !(AtomicOps::MULT | AtomicOps::FMULT);
    let ad32 = ep.atomic_domain::<u32>(&world, all_int)?;
    let ad64 = ep.atomic_domain::<u64>(&world, all_int)?;
    // SHMEM_TEAM_SHARED: every PE whose heap this one maps, which for the conduits of
    // one host is all or none of the others.
    let shares_all = (0..npes).all(|r| ep.shares_memory_with(EpAddr::new(r, 0)));
    let shared = if shares_all {
        world.clone()
    } else {
        ep.split(&world, Some(me), 0, gex_facade::coll::Scratch::None)?
            .ok_or_else(|| ShmemError::Config("split of the shared team".into()))?
    };
    let level = level.clamp(0, 3);
    // The AM path forced (`GEX_RMA_PATH=am`, `--cfg gex_force_am_rma`): every operation
    // goes through the endpoint, as gex-rma's own would.
    let forced_am =
        cfg!(gex_force_am_rma) || ep.config().get("GEX_RMA_PATH").is_some_and(|v| v == "am");
    let mut peers = Vec::with_capacity(npes as usize);
    for r in (0..npes).filter(|_| !forced_am) {
        let heap = ep
            .peer_segment(EpAddr::new(r, 0))
            .zip(ep.segment_len_of(r))
            .and_then(|((base, mapped), published)| {
                let len = mapped.min(published).checked_sub(pads[r as usize])?;
                Some((base.as_ptr() as usize + pads[r as usize], len))
            });
        peers.push(
            heap.map(|(base, len)| (base, len.min(heap_len)))
                .filter(|&(_, len)| len > 0)
                .unwrap_or((0, 0)),
        );
    }
    peers.resize(npes as usize, (0, 0));
    let published = Pe {
        me,
        npes,
        heap_base: seg + pad,
        heap_len,
        pads: pads.clone().into_boxed_slice(),
        ctx_eps: peers.iter().any(|&(_, len)| len == 0),
        hello: h_hello,
        peers: peers.into_boxed_slice(),
        cpu_atomics: !ad32.is_native() && !ad64.is_native(),
        thread_level: level,
    };
    if PE.set(published).is_err() {
        // Only one shmem_init runs (`FINALIZED` refuses a second one), under the lock.
        return Err(ShmemError::Finalized);
    }
    ep.barrier(&world)?;
    if let Some(p) = PE.get() {
        PUB.store(std::ptr::from_ref(p).cast_mut(), Ordering::Release);
    }
    *g = Some(State {
        client: Some(client),
        ep,
        world: world.clone(),
        me,
        npes,
        heap_base: seg + pad,
        heap_len,
        pads,
        ad32,
        ad64,
        heap: Heap::new(heap_len),
        h_put,
        h_get,
        h_amo,
        teams: vec![
            Some(TeamEntry {
                team: world,
                num_contexts: 0,
                owned: false,
            }),
            Some(TeamEntry {
                team: shared,
                num_contexts: 0,
                owned: false,
            }),
        ],
        ctxs: Vec::new(),
        thread_level: level,
    });
    if let Some(s) = g.as_mut() {
        s.set_ctx(0, Some(0));
    }
    Ok(level)
}

/// Finalises the PE (collective): quiet, barrier, close.
pub(crate) fn finalize() -> Result<(), ShmemError> {
    let mut g = STATE.lock().unwrap_or_else(|p| p.into_inner());
    let Some(mut s) = g.take() else {
        return Ok(());
    };
    FINALIZED.store(true, Ordering::Release);
    PUB.store(std::ptr::null_mut(), Ordering::Release);
    let closed = (|| {
        s.quiet()?;
        let world = s.world.clone();
        s.ep.barrier(&world)?;
        for t in s.teams.drain(..).flatten() {
            if t.owned && t.team.id() != world.id() {
                let _ = s.ep.destroy_team(t.team);
            }
        }
        Ok::<(), ShmemError>(())
    })();
    let client = s.client.take();
    let State { ep, .. } = s;
    // Kept for the life of the process, also when closing failed (module
    // documentation): what a racing direct copy reaches stays mapped.
    *RETIRED.lock().unwrap_or_else(|p| p.into_inner()) = Some(ep);
    closed?;
    if let Some(c) = client {
        c.finalize()?;
    }
    Ok(())
}

impl State {
    /// Where `[addr, addr + len)` is.
    ///
    /// # Errors
    /// [`ShmemError::NotSymmetric`] if it is neither in the heap nor in static data.
    pub(crate) fn locate(&self, addr: usize, len: usize) -> Result<Loc, ShmemError> {
        let end = addr
            .checked_add(len)
            .ok_or(ShmemError::NotSymmetric(addr))?;
        if addr >= self.heap_base && end <= self.heap_base + self.heap_len {
            return Ok(Loc::Heap(addr - self.heap_base));
        }
        let (base, slen) = (
            STATIC_BASE.load(Ordering::Acquire),
            STATIC_LEN.load(Ordering::Acquire),
        );
        if addr >= base && end <= base + slen {
            return Ok(Loc::Static(addr - base));
        }
        Err(ShmemError::NotSymmetric(addr))
    }

    /// The offset in `pe`'s segment of heap offset `off`.
    fn seg_off(&self, pe: u32, off: usize) -> usize {
        self.pads[pe as usize] + off
    }

    /// Checks a PE number.
    pub(crate) fn pe(&self, pe: i32) -> Result<u32, ShmemError> {
        u32::try_from(pe)
            .ok()
            .filter(|&p| p < self.npes)
            .ok_or(ShmemError::BadPe(pe))
    }

    fn check_fault(&self) -> Result<(), ShmemError> {
        // A load first: the swap (a locked instruction) only when a fault was flagged.
        if REMOTE_FAULT.load(Ordering::Acquire) != 0 && REMOTE_FAULT.swap(0, Ordering::AcqRel) != 0
        {
            return Err(ShmemError::RemoteFault);
        }
        Ok(())
    }

    fn wait_reply(&mut self) -> Result<(), ShmemError> {
        let mut spins = 0u32;
        while !REPLY_DONE.load(Ordering::Acquire) {
            if self.ep.poll() == 0 {
                spins += 1;
                if spins > 64 {
                    std::thread::yield_now();
                }
            }
        }
        REPLY_DONE.store(false, Ordering::Release);
        self.check_fault()
    }

    /// Puts `src` at symmetric address `dst` of `pe`. `nbi`: the put may complete later
    /// (at the next quiet); else it is complete at its target on return.
    pub(crate) fn put(
        &mut self,
        dst: usize,
        src: &[u8],
        pe: u32,
        nbi: bool,
    ) -> Result<(), ShmemError> {
        if src.is_empty() {
            return Ok(());
        }
        match self.locate(dst, src.len())? {
            Loc::Heap(off) => {
                let p = GlobalPtr::<u8>::new(EpAddr::new(pe, 0), self.seg_off(pe, off));
                if nbi {
                    self.ep.put(p, src, Nbi)?;
                    EP_NBI.store(true, Ordering::Release);
                } else {
                    self.ep.put(p, src, Blocking)?;
                }
            }
            Loc::Static(off) => {
                if pe == self.me {
                    // SAFETY: `dst` is inside this process's static data (located above);
                    // `src` is a valid slice; `copy` allows overlap.
                    unsafe { std::ptr::copy(src.as_ptr(), dst as *mut u8, src.len()) };
                    return Ok(());
                }
                let to = EpAddr::new(pe, 0);
                let max = self.ep.max_medium(to).max(1);
                for (i, chunk) in src.chunks(max).enumerate() {
                    let o = (off + i * max) as u64;
                    OUTSTANDING.fetch_add(1, Ordering::AcqRel);
                    if let Err(e) =
                        self.ep
                            .request(to, self.h_put, Body::medium(&split64(o), chunk))
                    {
                        OUTSTANDING.fetch_sub(1, Ordering::AcqRel);
                        return Err(e.into());
                    }
                }
                if !nbi {
                    self.wait_static_puts()?;
                }
            }
        }
        Ok(())
    }

    fn wait_static_puts(&mut self) -> Result<(), ShmemError> {
        let mut spins = 0u32;
        while OUTSTANDING.load(Ordering::Acquire) != 0 {
            if self.ep.poll() == 0 {
                spins += 1;
                if spins > 64 {
                    std::thread::yield_now();
                }
            }
        }
        self.check_fault()
    }

    /// Gets `dst.len()` bytes from symmetric address `src` of `pe`.
    pub(crate) fn get(&mut self, dst: &mut [u8], src: usize, pe: u32) -> Result<(), ShmemError> {
        if dst.is_empty() {
            return Ok(());
        }
        if pe == self.me {
            // Programs spin on gets of their own PE's data: serve the others.
            self.ep.poll();
        }
        match self.locate(src, dst.len())? {
            Loc::Heap(off) => {
                let p = GlobalPtr::<u8>::new(EpAddr::new(pe, 0), self.seg_off(pe, off));
                self.ep.get(&mut *dst, p, Blocking)?;
            }
            Loc::Static(off) => {
                if pe == self.me {
                    // SAFETY: `src` is inside this process's static data (located
                    // above); `dst` is a valid slice; `copy` allows overlap.
                    unsafe { std::ptr::copy(src as *const u8, dst.as_mut_ptr(), dst.len()) };
                    return Ok(());
                }
                let to = EpAddr::new(pe, 0);
                let max = self.ep.max_medium(to).clamp(1, u32::MAX as usize);
                let mut done = 0;
                while done < dst.len() {
                    let n = max.min(dst.len() - done);
                    let [lo, hi] = split64((off + done) as u64);
                    REPLY_DONE.store(false, Ordering::Release);
                    self.ep
                        .request(to, self.h_get, Body::short(&[lo, hi, n as u32]))?;
                    self.wait_reply()?;
                    let b = REPLY_BUF.lock().unwrap_or_else(|p| p.into_inner());
                    if b.len() != n {
                        return Err(ShmemError::RemoteFault);
                    }
                    dst[done..done + n].copy_from_slice(&b);
                    done += n;
                }
            }
        }
        Ok(())
    }

    /// Atomic `op` on the `width`-byte word at symmetric address `addr` of `pe`;
    /// returns the old value (0 for a non-fetching op on the heap, where `fetch` is false).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn amo(
        &mut self,
        addr: usize,
        pe: u32,
        width: u32,
        op: Amo,
        a: u64,
        b: u64,
        fetch: bool,
    ) -> Result<u64, ShmemError> {
        if addr % width as usize != 0 {
            return Err(ShmemError::Misaligned(addr));
        }
        if pe == self.me {
            // Programs spin on atomics of their own PE's words: serve the others.
            self.ep.poll();
        }
        match self.locate(addr, width as usize)? {
            Loc::Heap(off) => {
                let f = AtomicFlags::empty();
                macro_rules! go {
                    ($ad:expr, $t:ty) => {{
                        let p = GlobalPtr::<$t>::new(EpAddr::new(pe, 0), self.seg_off(pe, off));
                        let (x, y) = (a as $t, b as $t);
                        // The fetching form for fetch, swap and compare-and-swap (and a
                        // fetching set: a swap), the plain one otherwise.
                        let (gop, fetching) = match op {
                            Amo::Fetch => (AtomicOp::Get, true),
                            Amo::Set => (AtomicOp::Set(x), fetch),
                            Amo::Swap => (AtomicOp::Swap(x), true),
                            Amo::Cswap => (
                                AtomicOp::CompareSwap {
                                    expected: x,
                                    new: y,
                                },
                                true,
                            ),
                            Amo::Add => (AtomicOp::Add(x), fetch),
                            Amo::And => (AtomicOp::And(x), fetch),
                            Amo::Or => (AtomicOp::Or(x), fetch),
                            Amo::Xor => (AtomicOp::Xor(x), fetch),
                        };
                        let ad = $ad.clone();
                        if fetching {
                            Ok(self.ep.fetch_atomic(&ad, p, gop, f, Blocking)? as u64)
                        } else {
                            self.ep.atomic(&ad, p, gop, f, Blocking)?;
                            Ok(0)
                        }
                    }};
                }
                if width == 4 {
                    go!(self.ad32, u32)
                } else {
                    go!(self.ad64, u64)
                }
            }
            Loc::Static(off) => {
                if pe == self.me {
                    // SAFETY: inside this process's static data and aligned (checked above).
                    return Ok(unsafe { local_amo(addr, width, op, a, b) });
                }
                let [olo, ohi] = split64(off as u64);
                let [alo, ahi] = split64(a);
                let [blo, bhi] = split64(b);
                REPLY_DONE.store(false, Ordering::Release);
                self.ep.request(
                    EpAddr::new(pe, 0),
                    self.h_amo,
                    Body::short(&[olo, ohi, op as u32, width, alo, ahi, blo, bhi]),
                )?;
                self.wait_reply()?;
                Ok(REPLY_VAL.load(Ordering::Acquire))
            }
        }
    }

    /// Completes every put, get and atomic issued so far.
    pub(crate) fn quiet(&mut self) -> Result<(), ShmemError> {
        gex_sync::word::full_fence();
        // Every NBI put through the endpoint was issued under the lock this holds, and
        // set the flag; without one there is nothing to sync (a sync polls every layer).
        if EP_NBI.load(Ordering::Acquire) && EP_NBI.swap(false, Ordering::AcqRel) {
            self.ep.sync_nbi(NbiCategories::ALL)?;
        }
        self.wait_static_puts()
    }

    /// Quiet, then the barrier over every PE.
    pub(crate) fn barrier_all(&mut self) -> Result<(), ShmemError> {
        self.quiet()?;
        self.ep.barrier(&self.world)?;
        Ok(())
    }

    /// The address of `pe`'s copy of the symmetric address `addr`, if this process
    /// maps it (NULL otherwise).
    pub(crate) fn ptr(&self, addr: usize, pe: u32) -> Option<usize> {
        match self.locate(addr, 0).ok()? {
            Loc::Heap(off) => {
                let (b, len) = self.ep.peer_segment(EpAddr::new(pe, 0))?;
                let o = self.seg_off(pe, off);
                (o < len).then(|| b.as_ptr() as usize + o)
            }
            Loc::Static(_) => (pe == self.me).then_some(addr),
        }
    }

    /// Makes a context on team index `team` (private: only the calling thread uses
    /// it) and returns its index. A free index whose slot already has an endpoint is
    /// taken first (a destroyed context's endpoint is reused); else the first free index,
    /// whose slot gets a new endpoint when some PE is reached through an endpoint. When
    /// gex cannot make one (`EpError::Full` past `GEX_MAX_ENDPOINTS`, a conduit without
    /// endpoints made at run time, an index past the slots), the context rides the PE's
    /// endpoint: creation does not fail for it (docs/shmem.md, "Contexts").
    pub(crate) fn new_ctx(&mut self, team: usize, private: bool) -> Result<usize, ShmemError> {
        self.team(team)?;
        let n = self.ctxs.len();
        let reuse =
            (1..n.min(CTX_MIRROR)).find(|&j| self.ctxs[j].is_none() && SLOTS[j].ep.get().is_some());
        let i = reuse.unwrap_or_else(|| self.ctxs.iter().position(Option::is_none).unwrap_or(n));
        if let Some(slot) = SLOTS.get(i) {
            if slot.ep.get().is_none() && PE.get().is_some_and(|p| p.ctx_eps) {
                let made = self.client.as_ref().and_then(|c| c.create_endpoint().ok());
                // gex checks a request's handler against the sender's table too.
                let hello = PE.get().map(|p| p.hello);
                if let Some(mut ep) = made.filter(|_| hello.is_some()) {
                    if let Some(h) = hello {
                        ep.register_at(h.index(), |_t: &mut Token<'_>, _am: Am<'_>| {})?;
                    }
                    let index = ep.addr().ep;
                    let _ = slot.ep.set(SlotEp {
                        index,
                        ep: std::cell::UnsafeCell::new(CtxEp {
                            ep,
                            buf: Vec::new(),
                            reached: vec![false; self.npes as usize],
                        }),
                    });
                }
            }
            let _g = slot.lock.lock().unwrap_or_else(|p| p.into_inner());
            slot.nbi.store(false, Ordering::Release);
            slot.ops.store(0, Ordering::Relaxed);
            slot.owner
                .store(if private { thread_tag() } else { 0 }, Ordering::Release);
        }
        self.set_ctx(i, Some(team));
        Ok(i)
    }

    /// Ends context index `i` (not the default one): quiet, then not live; its slot's
    /// endpoint stays for the next context of that index. The caller quieted the
    /// context's own endpoint.
    pub(crate) fn end_ctx(&mut self, i: usize) -> Result<(), ShmemError> {
        if i == 0 {
            return Err(ShmemError::Invalid(
                "shmem_ctx_destroy of SHMEM_CTX_DEFAULT".into(),
            ));
        }
        if !matches!(self.ctxs.get(i), Some(Some(_))) {
            return Err(ShmemError::BadCtx);
        }
        let slot = SLOTS.get(i);
        if let Some(o) = slot.map(|s| s.owner.load(Ordering::Acquire)) {
            if o != 0 && o != thread_tag() {
                return Err(ShmemError::Invalid(
                    "a private context destroyed by a thread that did not create it".into(),
                ));
            }
        }
        self.quiet()?;
        self.set_ctx(i, None);
        if let Some(s) = slot {
            s.owner.store(0, Ordering::Release);
        }
        Ok(())
    }

    /// Sets context index `i` to live on team index `team` (or not live), in the table
    /// and its lock-free mirror.
    pub(crate) fn set_ctx(&mut self, i: usize, team: Option<usize>) {
        if self.ctxs.len() <= i {
            self.ctxs.resize(i + 1, None);
        }
        self.ctxs[i] = team;
        if let Some(m) = CTX_TEAMS.get(i) {
            m.store(team.map_or(0, |t| t + 1), Ordering::Release);
        }
    }

    /// The team behind handle index `i`.
    pub(crate) fn team(&self, i: usize) -> Result<&TeamEntry, ShmemError> {
        self.teams
            .get(i)
            .and_then(Option::as_ref)
            .ok_or(ShmemError::BadTeam)
    }
}

/// Polls once (without holding the lock afterwards). Used by the waits.
pub(crate) fn poll_once() -> Result<usize, ShmemError> {
    with(|s| Ok(s.ep.poll()))
}
