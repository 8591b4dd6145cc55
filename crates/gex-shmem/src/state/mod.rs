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
//! shmem.h does the same work inline in C programs, from the part of [`Pe`] it exports
//! in C layout ([`View`], [`GEXSHMEM_VIEW`]; docs/shmem.md, *Inline calls*): the calls
//! that reach the library are those the view cannot serve.
//!
//! Everything else (the endpoint and its operations to PEs that are not mapped or to
//! static data, the heap allocator, teams, contexts, collectives) is the [`State`],
//! held by one operation at a time ([`state`], a [`StateGuard`]). A context's own
//! endpoint ([`Slot`]) is outside it: its puts, gets and quiet to PEs that are not
//! mapped take no lock (private context) or the slot's own.
//!
//! ## One thread's state
//! At thread levels `SHMEM_THREAD_SINGLE` (what `shmem_init` grants) and
//! `SHMEM_THREAD_FUNNELED` only the thread that initialised may call (OpenSHMEM 1.5,
//! 9.2), so the state is that thread's ([`OWNED_STATE`]): reached without a lock, by
//! the thread whose tag ([`thread_tag`], the thread pointer on x86-64 Linux) is
//! [`OWNER`], while no call of its holds the state ([`BUSY`]). A call from another
//! thread that needs the state is refused ([`ThreadMisuse::NotInitThread`]: the job ends with a message), as is a
//! call made while one of this thread's calls holds it ([`ThreadMisuse::Reentered`]).
//! The lock is two locked instructions per call, each a full barrier: measured on an
//! 8-byte `shmem_broadcastmem` on 2 PEs, 6-8 ns of its 55-60 (docs/shmem.md,
//! *Threads*).
//!
//! At `SHMEM_THREAD_SERIALIZED` and `SHMEM_THREAD_MULTIPLE` the state is behind one
//! process-wide lock ([`STATE`]) taken for the time of one operation; the waits
//! (`wait_until`, `test`, locks) take it once per poll, so that other threads get
//! their turn.
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
//!
//! ## Files
//! This module: the published [`Pe`], the [`State`] and its symmetric-address
//! operations; [`ctx`]: contexts and their own endpoints; [`direct`]: the entry points'
//! primitives (fast paths, checked paths, quiet); [`init`](mod@init): `shmem_init` and
//! `shmem_finalize`.
#![allow(unsafe_code)]

use crate::error::{ShmemError, ThreadMisuse};
use crate::heap::Heap;
use gex_facade::prelude::*;
use gex_facade::rma::AtomicDomain;
use gex_facade::{Client, OwnedEndpoint};
use gex_sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::cell::UnsafeCell;
use std::ffi::c_int;
use std::ptr::NonNull;
use std::sync::atomic::AtomicPtr as CAtomicPtr; // check-atomics: C ABI (GEXSHMEM_VIEW)
use std::sync::{Mutex, MutexGuard, OnceLock};

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
    peers: Box<[Peer]>,
    /// What shmem.h's inline gets read ([`View`]): `peers` and the PE numbers.
    view: View,
    /// The atomic domains agreed on CPU atomics (not the NIC's): an atomic on a mapped
    /// word may be done here, coherently with the other PEs' (gex-rma's rule).
    cpu_atomics: bool,
    pub(crate) thread_level: i32,
}

/// One PE's heap as seen from here ([`Pe::peers`]): where this process maps it, and how
/// many bytes of it a direct copy may reach (0: not mapped). C layout: shmem.h's
/// `gexshmem_peer_t` reads it.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct Peer {
    pub(crate) base: usize,
    pub(crate) lim: usize,
}

/// The published PE as shmem.h's inline calls read it (its `gexshmem_view_t`: the same
/// fields in the same order, C layout; a change of layout is a new name of the exported
/// symbol, [`GEXSHMEM_VIEW`], so that a program built against another layout fails to
/// link instead of misreading it). Addresses, not pointers, so that the view is `Sync`
/// without an `unsafe impl`: `peers` of [`Pe::peers`]' first element (C: `const
/// gexshmem_peer_t *`), `ep_nbi` of [`EP_NBI`] (C: a byte read atomically), and
/// `outstanding` of [`OUTSTANDING`] (C: a `uint64_t` read atomically): the inline
/// `shmem_quiet` is the fence of [`quiet_direct`] when both are clear. Lives in [`PE`],
/// never changed or freed (module documentation).
#[repr(C)]
pub(crate) struct View {
    heap_base: usize,
    peers: usize,
    ep_nbi: usize,
    outstanding: usize,
    npes: u32,
    me: u32,
}

impl View {
    /// The view of a PE whose heap starts at `heap_base`, over `peers`.
    pub(crate) fn new(heap_base: usize, peers: &[Peer], npes: u32, me: u32) -> View {
        View {
            heap_base,
            peers: peers.as_ptr() as usize,
            ep_nbi: std::ptr::from_ref(&EP_NBI) as usize,
            outstanding: std::ptr::from_ref(&OUTSTANDING) as usize,
            npes,
            me,
        }
    }
}

/// The published PE (module documentation).
static PE: OnceLock<Pe> = OnceLock::new();
/// [`PE`]'s value between `shmem_init` and `shmem_finalize`, null outside: what every
/// call reads first, one load.
static PUB: AtomicPtr<Pe> = AtomicPtr::new(std::ptr::null_mut());
/// [`PE`]'s [`View`] while [`PUB`] is set, null outside: exported as `gexshmem_view_v1`
/// (`_v<layout>`) for the gets, puts and quiet that shmem.h inlines into C programs
/// (docs/shmem.md, *Inline calls*). A
/// `std` atomic, not gex-sync's shim: C reads it as a plain pointer, which only the
/// `std` type's layout guarantees (the same as `*mut View`); it is stored twice
/// (`init`, `finalize`) and never read by Rust.
#[unsafe(export_name = "gexshmem_view_v1")]
pub(crate) static GEXSHMEM_VIEW: CAtomicPtr<View> = CAtomicPtr::new(std::ptr::null_mut());
/// An NBI put went through the endpoint since the last quiet (which then syncs it).
static EP_NBI: AtomicBool = AtomicBool::new(false);
/// The endpoint after `shmem_finalize`: kept, never dropped, so that its conduit's
/// mappings stay valid for calls racing finalize (module documentation).
static RETIRED: Mutex<Option<OwnedEndpoint>> = Mutex::new(None);

mod ctx;
mod direct;
mod init;

pub(crate) use ctx::*;
pub(crate) use direct::*;
pub(crate) use init::*;

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
        let &Peer { base, lim } = self.peers.get(pe)?;
        let off = addr.wrapping_sub(self.heap_base);
        if !within(off, len, lim) {
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

/// Whether `[off, off + len)` lies in `[0, lim)`, with `lim` not 0 (0: not mapped).
///
/// No sum and no carry: `off <= lim`, then `len <= lim - off` (which cannot wrap),
/// each a compare and a branch, the difference taking `lim`'s register, so that the
/// 8-byte get's and put's fast paths save no register for it (`checked_add` cost the
/// get two pushes and pops: 2.50-2.62 ns against 2.24-2.41 ns per call, 2026-12-01).
#[inline(always)]
fn within(off: usize, len: usize, lim: usize) -> bool {
    lim != 0 && off <= lim && len <= lim - off
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

/// The [`thread_tag`] of the thread that called `shmem_init` at thread level
/// `SHMEM_THREAD_SINGLE` or `SHMEM_THREAD_FUNNELED` (at most one thread ever may call
/// then), 0 at the other levels and before: when set, the state is in
/// [`OWNED_STATE`], reached by that thread alone and without a lock, and [`STATE`]
/// stays empty. Set once, never cleared (a program initialises once).
///
/// A tag rather than a thread-local role: in the shared library a thread-local is
/// reached through a call to `__tls_get_addr` on every entry point, about 1 ns of
/// an 8-byte `shmem_broadcastmem` on 2 PEs and 10 ns on 8 PEs sharing 2 cores
/// (docs/performance.md, *After the thread-pointer owner check*).
static OWNER: AtomicUsize = AtomicUsize::new(0);

/// Whether a [`StateGuard`] of [`OWNED_STATE`] is alive: written and read only by
/// the [`OWNER`] thread (a call re-entered from inside a call, e.g. from a signal
/// handler, finds it set and is refused). Compiler fences keep the guard's accesses
/// to the state between its two stores, as a signal handler on the same thread
/// would see them.
static BUSY: AtomicBool = AtomicBool::new(false);

/// A tag of the calling thread, distinct between live threads, never 0.
///
/// On x86-64 Linux the thread pointer (`fs:0`: the x86-64 ELF TLS ABI makes the first
/// word of every thread's control block point to itself), one load; elsewhere (and
/// under Miri) the address of a thread-local, which in a shared library costs a call
/// to `__tls_get_addr`.
#[inline(always)]
pub(crate) fn thread_tag() -> usize {
    #[cfg(all(target_arch = "x86_64", target_os = "linux", not(miri)))]
    {
        let tp: usize;
        // SAFETY: reads the word at `fs:0`, which the x86-64 TLS ABI (followed by
        // glibc and musl) sets, for every thread from its creation, to the address of
        // that thread's control block; nothing writes it later (`readonly`, `pure`).
        unsafe {
            std::arch::asm!(
                "mov {tp}, qword ptr fs:[0]",
                tp = out(reg) tp,
                options(nostack, preserves_flags, readonly, pure),
            )
        };
        tp
    }
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux", not(miri))))]
    {
        thread_local! { static TAG: u8 = const { 0 }; }
        TAG.with(|t| std::ptr::from_ref(t) as usize)
    }
}

/// The state at the levels of [`OWNER`].
struct OwnedState(UnsafeCell<Option<State>>);

// SAFETY: the cell is reached only by the thread whose tag is [`OWNER`]
// ([`owned_state`], [`take`], [`try_with`]), and that is one thread at a time for the
// life of the process: `place` sets `OWNER` once, to the initialising thread's tag
// (under the `STATE` lock, `shmem_init` refusing a second initialisation), nothing
// changes it later, and tags are distinct between live threads (a thread made after
// the owner ended may get its tag, but the owner then reaches the cell no more).
// (`State` is `Send`: it may be created and dropped on that thread only, but moves
// nowhere else either.)
unsafe impl Sync for OwnedState {}

static OWNED_STATE: OwnedState = OwnedState(UnsafeCell::new(None));

/// The state, held for one operation: the initialising thread's at thread levels
/// `SHMEM_THREAD_SINGLE` and `SHMEM_THREAD_FUNNELED` (no lock: [`BUSY`] is set
/// meanwhile), else behind [`STATE`]'s lock.
///
/// A guard rather than a closure: an entry point then holds the state in its own
/// frame, without passing a closure and its result through the stack.
pub(crate) struct StateGuard(Held);

enum Held {
    /// The owner's state (a raw pointer: the guard is neither `Send` nor `Sync`).
    Owned(NonNull<State>),
    Locked(MutexGuard<'static, Option<State>>),
}

impl std::ops::Deref for StateGuard {
    type Target = State;
    #[inline(always)]
    fn deref(&self) -> &State {
        match &self.0 {
            // SAFETY: `state` is the owner's state, which only this guard reaches
            // while `BUSY` is set (`owned_state`); the guard is not `Send` (a raw
            // pointer), so it is used on the owner's thread.
            Held::Owned(state) => unsafe { state.as_ref() },
            Held::Locked(g) => g.as_ref().unwrap_or_else(|| unreachable!()),
        }
    }
}

impl std::ops::DerefMut for StateGuard {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut State {
        match &mut self.0 {
            // SAFETY: as in `deref`; `&mut self` makes this the only reference
            // through the guard.
            Held::Owned(state) => unsafe { state.as_mut() },
            Held::Locked(g) => g.as_mut().unwrap_or_else(|| unreachable!()),
        }
    }
}

impl Drop for StateGuard {
    #[inline(always)]
    fn drop(&mut self) {
        if let Held::Owned(_) = self.0 {
            // On the owner's thread (the guard is not `Send`), after every access
            // through the guard.
            gex_sync::atomic::compiler_fence(Ordering::SeqCst);
            BUSY.store(false, Ordering::Relaxed);
        }
    }
}

/// The state, held until the guard is dropped.
///
/// # Errors
/// [`ShmemError::NotInitialized`]; [`ShmemError::Thread`]: a call from a thread other
/// than the initialising one at thread level `SHMEM_THREAD_SINGLE` or
/// `SHMEM_THREAD_FUNNELED`, or from inside a call holding the state on this thread.
#[inline(always)]
pub(crate) fn state() -> Result<StateGuard, ShmemError> {
    let owner = OWNER.load(Ordering::Relaxed);
    if owner != 0 {
        return owned_state(owner);
    }
    let g = STATE.lock().unwrap_or_else(|p| p.into_inner());
    if g.is_none() {
        return Err(ShmemError::NotInitialized);
    }
    Ok(StateGuard(Held::Locked(g)))
}

/// [`state`] at the levels of [`OWNER`] (`owner`: its value, not 0).
#[inline(always)]
fn owned_state(owner: usize) -> Result<StateGuard, ShmemError> {
    if owner != thread_tag() {
        return Err(not_here(false));
    }
    if BUSY.load(Ordering::Relaxed) {
        return Err(not_here(true));
    }
    // SAFETY: this thread is the owner (its tag is `OWNER`), the only thread that
    // reaches `OWNED_STATE` (its `Sync` impl), and no guard of it is alive (it would
    // have set `BUSY`): this is the only reference.
    match unsafe { (*OWNED_STATE.0.get()).as_mut() } {
        Some(s) => {
            BUSY.store(true, Ordering::Relaxed);
            // Before any access through the guard.
            gex_sync::atomic::compiler_fence(Ordering::SeqCst);
            Ok(StateGuard(Held::Owned(NonNull::from(s))))
        }
        None => Err(ShmemError::NotInitialized),
    }
}

/// Runs `f` on the state.
///
/// # Errors
/// As [`state`], or `f`'s.
#[inline(always)]
pub(crate) fn with<R>(
    f: impl FnOnce(&mut State) -> Result<R, ShmemError>,
) -> Result<R, ShmemError> {
    f(&mut *state()?)
}

/// Why this thread cannot have the state of a level whose state is the initialising
/// thread's: it is the owner inside a call holding it (`busy`), or another thread.
#[cold]
fn not_here(busy: bool) -> ShmemError {
    match (busy, published()) {
        (true, _) => ShmemError::Thread(ThreadMisuse::Reentered),
        (false, Some(p)) => ShmemError::Thread(ThreadMisuse::NotInitThread(p.thread_level)),
        (false, None) => ShmemError::NotInitialized,
    }
}

/// Runs `f` on the state if no call holds it (this thread's or, at the levels with a
/// lock, any thread's); `None` otherwise or when not initialised.
fn try_with<R>(f: impl FnOnce(&mut State) -> R) -> Option<R> {
    let owner = OWNER.load(Ordering::Relaxed);
    if owner != 0 {
        return owned_state(owner).ok().map(|mut g| f(&mut g));
    }
    STATE.try_lock().ok()?.as_mut().map(f)
}

/// Places the state of a PE just initialised at thread level `level`: the calling
/// thread's at `SHMEM_THREAD_SINGLE` and `SHMEM_THREAD_FUNNELED`, else behind the
/// lock (`g`, [`STATE`]'s guard, which `init` holds).
fn place(g: &mut Option<State>, s: State, level: i32) {
    if level <= THREAD_FUNNELED {
        // SAFETY: `OWNER` is 0 yet (`init` runs once: `FINALIZED` and `PE` refuse a
        // second one, and it holds the `STATE` lock), so no thread reaches
        // `OWNED_STATE`; from the next line on only this one does.
        unsafe { *OWNED_STATE.0.get() = Some(s) };
        OWNER.store(thread_tag(), Ordering::Release);
    } else {
        *g = Some(s);
    }
}

/// Takes the state out for `shmem_finalize` (`g`: [`STATE`]'s guard); `Ok(None)` when
/// not initialised or finalised already.
///
/// # Errors
/// As [`state`].
fn take(g: &mut Option<State>) -> Result<Option<State>, ShmemError> {
    let owner = OWNER.load(Ordering::Relaxed);
    if owner == 0 {
        return Ok(g.take());
    }
    if owner != thread_tag() || BUSY.load(Ordering::Relaxed) {
        return Err(not_here(owner == thread_tag()));
    }
    // SAFETY: this thread is the owner (its tag) and holds no guard (`BUSY` clear):
    // the only reference to `OWNED_STATE` (its `Sync` impl).
    Ok(unsafe { (*OWNED_STATE.0.get()).take() })
}

/// `SHMEM_THREAD_FUNNELED`: at it and below, the state is the initialising thread's.
pub(crate) const THREAD_FUNNELED: i32 = 1;

/// Ends the whole job with `code` from this PE (`shmem_global_exit`): gex's launcher
/// ends every other PE and the job exits with `code`. Without a client, ends this
/// process.
pub(crate) fn exit_job(code: i32) -> ! {
    try_with(|s| {
        let _ = s.quiet();
        if let Some(c) = s.client.as_ref() {
            c.exit(code)
        }
    });
    std::process::exit(code)
}

/// Aborts the whole job with a message (a failed call), or this process without a client
/// (also from a thread that cannot reach the state: gex-run ends the job when a PE
/// exits with a failure).
pub(crate) fn abort_job(msg: &str) -> ! {
    try_with(|s| {
        if let Some(c) = s.client.as_ref() {
            c.abort(1, msg)
        }
    });
    eprintln!("{msg}");
    std::process::exit(1)
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

#[cfg(test)]
mod tests {
    use super::{thread_tag, within};

    /// `within` agrees with the overflow-checked test on every combination of edge
    /// values (0, 1, around a page, around `isize::MAX` and `usize::MAX`) for every
    /// mapping length up to `isize::MAX` (and beyond: it needs no bound).
    #[test]
    fn the_range_test_agrees_with_the_checked_sum() {
        let m = isize::MAX as usize;
        let edges = [
            0,
            1,
            7,
            8,
            9,
            4095,
            4096,
            4097,
            m / 2,
            m - 8,
            m - 1,
            m,
            m + 1,
            usize::MAX - 8,
            usize::MAX - 1,
            usize::MAX,
        ];
        for &lim in &edges {
            for &off in &edges {
                for &len in &edges {
                    let want = lim != 0 && off.checked_add(len).is_some_and(|e| e <= lim);
                    assert_eq!(within(off, len, lim), want, "off {off} len {len} lim {lim}");
                }
            }
        }
    }
    use std::sync::{Arc, Barrier};

    /// The tag is not 0, the same on every call of a thread, and different on each of
    /// several threads alive at once (what [`OWNER`](super::OWNER) and the private
    /// contexts' owners rest on).
    #[test]
    fn thread_tags_are_stable_nonzero_and_distinct_between_live_threads() {
        const THREADS: usize = 8;
        let mine = thread_tag();
        assert_ne!(mine, 0);
        assert_eq!(mine, thread_tag());
        let all_alive = Arc::new(Barrier::new(THREADS));
        let hs: Vec<_> = (0..THREADS)
            .map(|_| {
                let b = Arc::clone(&all_alive);
                std::thread::spawn(move || {
                    let t = thread_tag();
                    // Held until every thread has taken its tag: all alive at once.
                    b.wait();
                    assert_eq!(t, thread_tag());
                    t
                })
            })
            .collect();
        let mut tags: Vec<usize> = hs.into_iter().map(|h| h.join().unwrap()).collect();
        tags.push(mine);
        assert!(tags.iter().all(|&t| t != 0));
        tags.sort_unstable();
        tags.dedup();
        assert_eq!(tags.len(), THREADS + 1, "two live threads shared a tag");
    }
}
