//! The operating-system side of gex-overlap: the double mapping of a buffer, page
//! protection, the process-wide registry of buffers, and the SIGSEGV/SIGBUS handler.
//!
//! # Why this is hand-written
//! Neither `nix` nor `rustix` is a dependency for signal handling here (`rustix` is, but
//! its signal API is not public in the pinned version, and `nix` would be a new
//! dependency for four calls), and the handler itself has to be written by hand in any
//! case: what makes it correct is what it does *not* do. Every libc call below goes
//! through `libc` (already pinned in the workspace).
//!
//! # Safety
//! The unsafe code is of four kinds, each block with its `// SAFETY:` line:
//! - **mappings**: `memfd_create`, `ftruncate`, two `mmap`s of the same file (the
//!   *user view* the program reads and writes, the *transfer view* only the movers
//!   write and read), `munmap` once when the last owner goes; slices of the views only
//!   within their length;
//! - **protection**: `mprotect` of whole pages inside the user view, only by the code
//!   that claimed them in the page table;
//! - **the registry**: raw pointers to regions, dereferenced by the handler only while
//!   it holds the slot's user count, which `unregister` waits to drop to zero before the
//!   region may be freed (a Dekker pair of `SeqCst` operations, see `lookup`);
//!   addresses are kept in `AtomicUsize`s (gex-sync's atomics shim has no `AtomicPtr`;
//!   this module is never built under loom: its statics use `const` constructors);
//! - **the handler** (`on_fault`): async-signal-safe by construction. It allocates
//!   nothing, takes no lock the interrupted code may hold (a lazy transfer's spin
//!   word, [`Lazy`], is held only for a few `mprotect`s by code that touches no buffer
//!   page meanwhile), touches no `std` state that a lock guards (no printing, no
//!   `thread_local!` with a destructor or lazy initialisation), and calls only
//!   `getpid`, `clock_gettime`, `sched_yield`, `nanosleep`, `mprotect` (calibration
//!   pages, a delta buffer's read-only `CLEAN`/`SENT` pages made writable for the
//!   interrupted write, a lazy transfer's guard and tripwire), `abort` and `sigaction` (raw system calls without libc state) besides atomic
//!   loads and stores. It never polls an endpoint: the interrupted thread may be
//!   inside a gex call holding that endpoint (`&mut`), its lock word, or the
//!   allocator's lock. A pending page retires through another thread (the layer's
//!   mover, or the thread that calls `retire_all`/`wait_range` for the fallback path),
//!   so waiting in the handler only ever waits for work that does not need the
//!   faulting thread. `errno` is saved and restored.
#![allow(unsafe_code)]

use gex_sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::cell::Cell;
use std::io;
use std::ptr;
use std::sync::Once;

use crate::table::PageTable;

/// The system page size (cached).
pub(crate) fn page_size() -> usize {
    static PAGE: AtomicUsize = AtomicUsize::new(0);
    let p = PAGE.load(Ordering::Relaxed);
    if p != 0 {
        return p;
    }
    // SAFETY: sysconf has no memory-safety preconditions.
    let v = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    let v = if v > 0 { v as usize } else { 4096 };
    PAGE.store(v, Ordering::Relaxed);
    v
}

/// Monotonic nanoseconds (`clock_gettime`, async-signal-safe).
pub(crate) fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

fn getpid() -> i32 {
    // SAFETY: getpid has no preconditions (a system call, async-signal-safe).
    unsafe { libc::getpid() }
}

/// The page protections gex-overlap uses on a user view.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Prot {
    /// No access (a get's pending destination).
    None,
    /// Read only (a put's pending source).
    Read,
    /// Read and write (retired).
    ReadWrite,
}

/// Two views of one memory file: the user view and the transfer view.
#[derive(Debug)]
pub(crate) struct Mapping {
    user: *mut u8,
    xfer: *mut u8,
    /// Mapped length (whole pages).
    map_len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; which thread touches which
// bytes is governed by the page table (claims), as for a `Vec<u8>`.
unsafe impl Send for Mapping {}
// SAFETY: as for `Send`: shared access only reads the addresses; the bytes are reached
// through the page-table protocol.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `map_len` bytes (a multiple of the page size, not zero) twice.
    pub(crate) fn new(map_len: usize) -> io::Result<Mapping> {
        let name = c"gex-overlap";
        // SAFETY: `name` is a NUL-terminated string; the flags are valid.
        let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let res = (|| {
            // SAFETY: `fd` is the descriptor just created.
            if unsafe { libc::ftruncate(fd, map_len as libc::off_t) } != 0 {
                return Err(io::Error::last_os_error());
            }
            let map = || {
                // SAFETY: a new shared mapping of `fd` at an address the kernel picks;
                // no existing memory is affected.
                let p = unsafe {
                    libc::mmap(
                        ptr::null_mut(),
                        map_len,
                        libc::PROT_READ | libc::PROT_WRITE,
                        libc::MAP_SHARED,
                        fd,
                        0,
                    )
                };
                if p == libc::MAP_FAILED {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(p.cast::<u8>())
                }
            };
            let user = map()?;
            let xfer = match map() {
                Ok(x) => x,
                Err(e) => {
                    // SAFETY: `user` was mapped just above with this length.
                    unsafe { libc::munmap(user.cast(), map_len) };
                    return Err(e);
                }
            };
            Ok(Mapping {
                user,
                xfer,
                map_len,
            })
        })();
        // SAFETY: `fd` is ours; the mappings keep the file alive.
        unsafe { libc::close(fd) };
        res
    }

    /// The user view's base address.
    pub(crate) fn user(&self) -> *mut u8 {
        self.user
    }

    /// The transfer view's base address.
    pub(crate) fn xfer(&self) -> *mut u8 {
        self.xfer
    }

    /// Sets the protection of the user view's bytes `[off, off+len)` (whole pages,
    /// inside the mapping; checked).
    pub(crate) fn protect(&self, off: usize, len: usize, prot: Prot) -> io::Result<()> {
        let page = page_size();
        assert!(off % page == 0 && off <= self.map_len && len <= self.map_len - off);
        let len = len.div_ceil(page) * page;
        let len = len.min(self.map_len - off);
        if len == 0 {
            return Ok(());
        }
        let p = match prot {
            Prot::None => libc::PROT_NONE,
            Prot::Read => libc::PROT_READ,
            Prot::ReadWrite => libc::PROT_READ | libc::PROT_WRITE,
        };
        // SAFETY: the range lies inside the user view (asserted), which this value owns.
        if unsafe { libc::mprotect(self.user.add(off).cast(), len, p) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: both views were mapped with `map_len` in `new` and are unmapped once.
        unsafe {
            libc::munmap(self.user.cast(), self.map_len);
            libc::munmap(self.xfer.cast(), self.map_len);
        }
    }
}

// ---------------------------------------------------------------------------------
// The registry of regions the handler knows.

/// What the handler needs to know about one buffer.
#[derive(Debug)]
pub(crate) struct Region {
    /// User view base address.
    pub(crate) base: usize,
    /// Mapped length.
    pub(crate) len: usize,
    /// log2 of the page size.
    pub(crate) shift: u32,
    /// The process that registered it (a forked child's faults are not waited for).
    pub(crate) pid: i32,
    /// Page states.
    pub(crate) table: PageTable,
    /// The page a faulting thread waits for (`usize::MAX`: none): the mover moves the
    /// strip holding it forward.
    pub(crate) wanted: AtomicUsize,
    /// Claims so far (tells two races at one address in different transfers apart).
    pub(crate) generation: AtomicU64,
    /// `mprotect` calls made on this buffer's user view (transfers, the mover, the
    /// handler).
    pub(crate) mprotects: AtomicU64,
    /// Faults that found their page pending and waited (the consumer caught up with
    /// the data: the strip model's statistics).
    pub(crate) waits: AtomicU64,
    /// The lazy protection of a transfer of this buffer (`OverlapExt::get_lazy`).
    pub(crate) lazy: Lazy,
}

/// No page (a guard or tripwire not set).
pub(crate) const NO_PAGE: usize = usize::MAX;
/// [`Lazy::mode`]: no lazy transfer pending.
pub(crate) const LAZY_OFF: u32 = 0;
/// [`Lazy::mode`]: a lazy transfer pending, only its guard and tripwire protected.
pub(crate) const LAZY_ON: u32 = 1;
/// [`Lazy::mode`]: a lazy transfer whose every pending page is protected (a fault off
/// the expected page was seen: random access).
pub(crate) const LAZY_FALLBACK: u32 = 2;

/// The lazy protection of one transfer of a buffer (at most one at a time): of the
/// pages `lo..hi` (all claimed), only the **guard** (the first page of the lowest
/// strip not landed, the page a sequential reader reaches next) and the
/// **tripwire** (the first page of the next strip not landed) are protected. The
/// guard's fault waits for its strip, then moves the guard and the tripwire on; a
/// fault on the tripwire (a jump ahead) protects every pending page (the fallback).
/// Every protection change of a lazy transfer, and the mover's retirement of its
/// strips, happen under `lock` (a spin word, held for a few system calls only: never
/// while waiting for a strip).
#[derive(Debug)]
pub(crate) struct Lazy {
    pub(crate) lock: AtomicU32,
    pub(crate) mode: AtomicU32,
    pub(crate) lo: AtomicUsize,
    pub(crate) hi: AtomicUsize,
    pub(crate) guard: AtomicUsize,
    pub(crate) trip: AtomicUsize,
    /// One bit per page: the first page of a strip of the lazy transfer.
    pub(crate) heads: Box<[AtomicU64]>,
    /// `mprotects` when the lazy transfer began, and what eager protection would have
    /// made (one call at issue, one per strip).
    pub(crate) calls_before: AtomicU64,
    pub(crate) eager_calls: AtomicU64,
    /// Lazy transfers, fallbacks to protecting everything, `mprotect` calls saved.
    pub(crate) transfers: AtomicU64,
    pub(crate) fallbacks: AtomicU64,
    pub(crate) saved: AtomicU64,
}

impl Lazy {
    fn new(pages: usize) -> Lazy {
        Lazy {
            lock: AtomicU32::new(0),
            mode: AtomicU32::new(LAZY_OFF),
            lo: AtomicUsize::new(0),
            hi: AtomicUsize::new(0),
            guard: AtomicUsize::new(NO_PAGE),
            trip: AtomicUsize::new(NO_PAGE),
            heads: (0..pages.div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
            calls_before: AtomicU64::new(0),
            eager_calls: AtomicU64::new(0),
            transfers: AtomicU64::new(0),
            fallbacks: AtomicU64::new(0),
            saved: AtomicU64::new(0),
        }
    }

    /// Takes the lock word (spinning, then yielding: async-signal-safe).
    pub(crate) fn lock(&self) {
        let mut spins = 0u32;
        while self
            .lock
            .compare_exchange_weak(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                // SAFETY: sched_yield has no preconditions (async-signal-safe).
                unsafe { libc::sched_yield() };
            }
            spins = spins.saturating_add(1);
        }
    }

    pub(crate) fn unlock(&self) {
        self.lock.store(0, Ordering::Release);
    }

    pub(crate) fn is_head(&self, page: usize) -> bool {
        self.heads[page / 64].load(Ordering::Relaxed) & (1 << (page % 64)) != 0
    }

    pub(crate) fn set_head(&self, page: usize, on: bool) {
        let bit = 1u64 << (page % 64);
        if on {
            self.heads[page / 64].fetch_or(bit, Ordering::Relaxed);
        } else {
            self.heads[page / 64].fetch_and(!bit, Ordering::Relaxed);
        }
    }
}

impl Region {
    pub(crate) fn new(base: usize, len: usize) -> Region {
        let page = page_size();
        Region {
            base,
            len,
            shift: page.trailing_zeros(),
            pid: getpid(),
            table: PageTable::new(len / page),
            wanted: AtomicUsize::new(usize::MAX),
            generation: AtomicU64::new(0),
            mprotects: AtomicU64::new(0),
            waits: AtomicU64::new(0),
            lazy: Lazy::new(len / page),
        }
    }
}

struct Slot {
    /// The region's address (0: free).
    region: AtomicUsize,
    users: AtomicU32,
}

/// At most this many buffers exist at once in a process.
pub(crate) const SLOTS: usize = 1024;

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Slot = Slot {
    region: AtomicUsize::new(0),
    users: AtomicU32::new(0),
};
static REGISTRY: [Slot; SLOTS] = [EMPTY; SLOTS];

/// Publishes `r` to the handler. `r` must stay at its address until [`unregister`]
/// returns (it lives in an `Arc`). `None` when every slot is taken.
pub(crate) fn register(r: &Region) -> Option<usize> {
    let p = r as *const Region as usize;
    for (i, s) in REGISTRY.iter().enumerate() {
        if s.region
            .compare_exchange(0, p, Ordering::SeqCst, Ordering::Relaxed)
            .is_ok()
        {
            return Some(i);
        }
    }
    None
}

/// Withdraws slot `i` and waits until no handler uses its region.
pub(crate) fn unregister(i: usize) {
    let s = &REGISTRY[i];
    s.region.store(0, Ordering::SeqCst);
    while s.users.load(Ordering::SeqCst) != 0 {
        std::hint::spin_loop();
        std::thread::yield_now();
    }
}

// ---------------------------------------------------------------------------------
// Trace (GEX_OVERLAP_TRACE).

const TRACE_LEN: usize = 4096;
static TRACE_ON: AtomicBool = AtomicBool::new(false);
static TRACE_NEXT: AtomicUsize = AtomicUsize::new(0);
#[allow(clippy::declare_interior_mutable_const)]
const ZERO: AtomicU64 = AtomicU64::new(0);
static TRACE_ADDR: [AtomicU64; TRACE_LEN] = [ZERO; TRACE_LEN];
static TRACE_WAIT: [AtomicU64; TRACE_LEN] = [ZERO; TRACE_LEN];

pub(crate) fn set_trace(on: bool) {
    TRACE_ON.store(on, Ordering::Relaxed);
}

pub(crate) fn trace_on() -> bool {
    TRACE_ON.load(Ordering::Relaxed)
}

fn trace(addr: usize, wait_ns: u64) {
    if !TRACE_ON.load(Ordering::Relaxed) {
        return;
    }
    let i = TRACE_NEXT.fetch_add(1, Ordering::Relaxed);
    if i < TRACE_LEN {
        TRACE_ADDR[i].store(addr as u64, Ordering::Relaxed);
        TRACE_WAIT[i].store(wait_ns, Ordering::Release);
    }
}

/// Takes the trace recorded so far: (page address, nanoseconds waited), and the number
/// of records that did not fit.
pub(crate) fn take_trace() -> (Vec<(usize, u64)>, usize) {
    let n = TRACE_NEXT.swap(0, Ordering::Acquire);
    let kept = n.min(TRACE_LEN);
    let v = (0..kept)
        .map(|i| {
            let w = TRACE_WAIT[i].load(Ordering::Acquire);
            (TRACE_ADDR[i].load(Ordering::Relaxed) as usize, w)
        })
        .collect();
    (v, n - kept)
}

// ---------------------------------------------------------------------------------
// The handler.

/// The dispositions found at install (addresses of leaked `Box<sigaction>`s; 0: none).
static PREV: [AtomicUsize; 2] = [AtomicUsize::new(0), AtomicUsize::new(0)];
static INSTALL: Once = Once::new();
static INSTALLED: AtomicBool = AtomicBool::new(false);
/// Faults the handler waited for (whole process).
pub(crate) static FAULTS: AtomicU64 = AtomicU64::new(0);

/// Installs the handler for SIGSEGV and SIGBUS once per process, keeping the
/// dispositions found (for chaining).
pub(crate) fn install() -> io::Result<()> {
    let mut err = None;
    INSTALL.call_once(|| {
        for (i, sig) in [libc::SIGSEGV, libc::SIGBUS].into_iter().enumerate() {
            // SAFETY: an all-zero sigaction is a valid value to be overwritten.
            let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
            // SAFETY: reading the current disposition into `old`.
            if unsafe { libc::sigaction(sig, ptr::null(), &mut old) } != 0 {
                err = Some(io::Error::last_os_error());
                return;
            }
            PREV[i].store(Box::into_raw(Box::new(old)) as usize, Ordering::Release);
            // SAFETY: as above.
            let mut new: libc::sigaction = unsafe { std::mem::zeroed() };
            new.sa_sigaction = on_fault as *const () as usize;
            new.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            // SAFETY: `new.sa_mask` is a valid sigset; `on_fault` has the SA_SIGINFO
            // signature and is async-signal-safe (module docs).
            if unsafe {
                libc::sigemptyset(&mut new.sa_mask);
                libc::sigaction(sig, &new, ptr::null_mut())
            } != 0
            {
                err = Some(io::Error::last_os_error());
                return;
            }
        }
        INSTALLED.store(true, Ordering::Release);
    });
    match err {
        Some(e) => Err(e),
        None if INSTALLED.load(Ordering::Acquire) => Ok(()),
        None => Err(io::Error::other("the fault handler could not be installed")),
    }
}

thread_local! {
    /// The last fault this thread returned from without waiting (address, generation):
    /// a second one at once is not ours. Constant-initialised, no destructor: safe to
    /// touch in a signal handler.
    static LAST: Cell<(usize, u64)> = const { Cell::new((0, 0)) };
}

extern "C" fn on_fault(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: errno is thread-local; reading its location is always valid.
    let saved = unsafe { *libc::__errno_location() };
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let addr = unsafe { (*info).si_addr() } as usize;
    if !lookup(addr) {
        chain(sig, info, ctx);
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = saved };
}

/// Whether the fault at `addr` was on a page of ours (and is now retired).
fn lookup(addr: usize) -> bool {
    for s in REGISTRY.iter() {
        if s.region.load(Ordering::Acquire) == 0 {
            continue;
        }
        s.users.fetch_add(1, Ordering::SeqCst);
        let p = s.region.load(Ordering::SeqCst) as *const Region;
        if p.is_null() {
            s.users.fetch_sub(1, Ordering::Release);
            continue;
        }
        // SAFETY: `unregister` stores null before it waits for `users` to reach zero,
        // and we incremented `users` before loading a non-null pointer (both SeqCst):
        // either it sees our count and waits, or we see its null. The region is alive.
        let r = unsafe { &*p };
        if addr < r.base || addr >= r.base + r.len {
            s.users.fetch_sub(1, Ordering::Release);
            continue;
        }
        let ours = wait_page(r, addr);
        s.users.fetch_sub(1, Ordering::Release);
        return ours;
    }
    false
}

fn wait_page(r: &Region, addr: usize) -> bool {
    if r.pid != getpid() {
        // A forked child: nobody here moves the parent's strips.
        return false;
    }
    let page = (addr - r.base) >> r.shift;
    let generation = r.generation.load(Ordering::Acquire);
    if r.lazy.mode.load(Ordering::Acquire) != LAZY_OFF {
        if let Some(ours) = lazy_fault(r, page) {
            return ours;
        }
    }
    // Makes the faulting page readable and writable, for the arms below that say why
    // no other thread reads, copies or claims it meanwhile.
    let unprotect = || {
        let base = r.base + (page << r.shift);
        // SAFETY: the page lies in the region's user view (checked by `lookup`), which
        // is alive while we hold the slot; making it writable is what the interrupted
        // access needs, and the callers below are the two cases where nothing else
        // depends on its protection (a calibration page, a CLEAN or SENT page).
        unsafe {
            libc::mprotect(
                base as *mut libc::c_void,
                1 << r.shift,
                libc::PROT_READ | libc::PROT_WRITE,
            )
        };
    };
    match r.table.state(page) {
        crate::table::PENDING => {}
        crate::table::CALIBRATE => {
            // Calibration pages are only ever touched by the thread measuring.
            unprotect();
            r.table.retire(page, 1);
            return true;
        }
        crate::table::CLEAN | crate::table::SENT => {
            // A write to a read-only page of a delta buffer: unchanged since its last
            // transfer (CLEAN: it becomes changed), or already sent in the open epoch
            // (SENT: a misuse; `delta_end` finds the page no longer SENT, reports it
            // and sends it again). Reads of these pages never fault (PROT_READ), so
            // this is a write.
            let state = r.table.state(page);
            // The page is neither pending nor being copied (CLEAN and SENT pages are
            // only claimed by a delta send, which holds the buffer's `&mut` and so
            // cannot run while this thread writes to it).
            unprotect();
            // Two threads writing the page at once both get here: one moves it, the
            // other finds it READY already; both retry their write, which succeeds.
            let _ = r.table.cas(page, state, crate::table::READY);
            LAST.with(|c| c.set((0, 0)));
            return true;
        }
        _ => {
            // Retired: the mover unprotects before it marks a page ready, so the
            // access raced with the retirement and will succeed when retried. Twice in
            // a row at the same address and transfer: someone else protected it.
            let last = LAST.with(|c| c.replace((addr, generation)));
            return last != (addr, generation);
        }
    }
    LAST.with(|c| c.set((0, 0)));
    wait_pending(r, page);
    true
}

/// Waits (spinning, yielding, then sleeping 20 µs at a time) until `page` is no
/// longer pending, having told the mover it is wanted; counts and traces the wait.
fn wait_pending(r: &Region, page: usize) {
    if r.table.state(page) == crate::table::PENDING {
        r.waits.fetch_add(1, Ordering::Relaxed);
    }
    r.wanted.store(page, Ordering::Release);
    let t0 = now_ns();
    let mut spins = 0u32;
    while r.table.state(page) == crate::table::PENDING {
        if spins < 256 {
            std::hint::spin_loop();
        } else if spins < 1024 {
            // SAFETY: sched_yield has no preconditions.
            unsafe { libc::sched_yield() };
        } else {
            let ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: 20_000,
            };
            // SAFETY: `ts` is valid; nanosleep is async-signal-safe.
            unsafe { libc::nanosleep(&ts, ptr::null_mut()) };
        }
        spins = spins.saturating_add(1);
    }
    FAULTS.fetch_add(1, Ordering::Relaxed);
    trace(r.base + (page << r.shift), now_ns().wrapping_sub(t0));
}

// ---------------------------------------------------------------------------------
// Lazy protection (`OverlapExt::get_lazy`, docs/overlap.md "Lazy protection").

/// Sets the protection of pages `first..first+n` of the region's user view (a raw
/// `mprotect`, async-signal-safe), counting the call. Pages past the mapping are
/// not touched.
pub(crate) fn prot_pages(r: &Region, first: usize, n: usize, prot: Prot) {
    let pages = r.len >> r.shift;
    let n = n.min(pages.saturating_sub(first));
    if n == 0 {
        return;
    }
    let p = match prot {
        Prot::None => libc::PROT_NONE,
        Prot::Read => libc::PROT_READ,
        Prot::ReadWrite => libc::PROT_READ | libc::PROT_WRITE,
    };
    r.mprotects.fetch_add(1, Ordering::Relaxed);
    // SAFETY: pages `first..first+n` lie inside the region's user view (clamped
    // above), which is mapped while the region is registered or its buffer alive (the
    // callers hold one or the other). Which pages a lazy transfer protects is decided
    // under its lock (`Lazy`), and the protection only ever denies access to pending
    // pages or grants it to retired ones and to the guard's strip.
    let rc = unsafe {
        libc::mprotect(
            (r.base + (first << r.shift)) as *mut libc::c_void,
            n << r.shift,
            p,
        )
    };
    if rc != 0 {
        // A guard left unprotected would let a reader see bytes not landed; one left
        // protected would make it wait forever. Neither can be recovered from here.
        // SAFETY: abort has no preconditions (async-signal-safe).
        unsafe { libc::abort() };
    }
}

/// Starts the lazy protection of a get into pages `first..first+n` (claimed), in
/// strips beginning at `heads` (page indices, ascending, the first `first`): the
/// guard (`first`) and the tripwire (the second strip's first page) are protected.
/// `false`: another lazy transfer of the buffer is pending (nothing done; protect
/// this one eagerly).
pub(crate) fn lazy_begin(
    r: &Region,
    first: usize,
    n: usize,
    heads: impl Iterator<Item = usize>,
    strips: usize,
) -> bool {
    let z = &r.lazy;
    z.lock();
    if z.mode.load(Ordering::Relaxed) != LAZY_OFF {
        z.unlock();
        return false;
    }
    for p in first..first + n {
        z.set_head(p, false);
    }
    let mut trip = NO_PAGE;
    for (i, h) in heads.enumerate() {
        z.set_head(h, true);
        if i == 1 {
            trip = h;
        }
    }
    z.lo.store(first, Ordering::Relaxed);
    z.hi.store(first + n, Ordering::Relaxed);
    z.calls_before
        .store(r.mprotects.load(Ordering::Relaxed), Ordering::Relaxed);
    z.eager_calls.store(1 + strips as u64, Ordering::Relaxed);
    prot_pages(r, first, 1, Prot::None);
    if trip != NO_PAGE {
        prot_pages(r, trip, 1, Prot::None);
    }
    z.guard.store(first, Ordering::Relaxed);
    z.trip.store(trip, Ordering::Relaxed);
    z.transfers.fetch_add(1, Ordering::Relaxed);
    z.mode.store(LAZY_ON, Ordering::Release);
    z.unlock();
    true
}

/// The mover retires pages `first..first+n` (a strip) of a lazy transfer: without a
/// system call while only the guard and tripwire are protected (the last page first,
/// so that a page seen retired means its whole strip is), else (the fallback) as
/// any strip: unprotected, then retired.
pub(crate) fn lazy_retire(r: &Region, first: usize, n: usize) {
    let z = &r.lazy;
    z.lock();
    if z.mode.load(Ordering::Relaxed) == LAZY_ON {
        for p in (first..first + n).rev() {
            r.table.retire(p, 1);
        }
    } else {
        prot_pages(r, first, n, Prot::ReadWrite);
        r.table.retire(first, n);
    }
    z.unlock();
}

/// Ends the lazy transfer if none of its pages is pending: unprotects the guard and
/// the tripwire, counts the calls saved. The mover calls it after the transfer's last
/// strip, `wait_range` after its wait.
pub(crate) fn lazy_settle(r: &Region) {
    let z = &r.lazy;
    if z.mode.load(Ordering::Acquire) == LAZY_OFF {
        return;
    }
    z.lock();
    let (lo, hi) = (z.lo.load(Ordering::Relaxed), z.hi.load(Ordering::Relaxed));
    if z.mode.load(Ordering::Relaxed) != LAZY_OFF && !r.table.any_pending(lo, hi - lo) {
        lazy_finish(r);
    }
    z.unlock();
}

/// (Lock held, nothing pending.) Unprotects what is still protected, counts the
/// calls saved against eager protection, and ends the lazy transfer.
fn lazy_finish(r: &Region) {
    let z = &r.lazy;
    for p in [
        z.guard.load(Ordering::Relaxed),
        z.trip.load(Ordering::Relaxed),
    ] {
        if p != NO_PAGE {
            prot_pages(r, p, 1, Prot::ReadWrite);
        }
    }
    z.guard.store(NO_PAGE, Ordering::Relaxed);
    z.trip.store(NO_PAGE, Ordering::Relaxed);
    let used = r.mprotects.load(Ordering::Relaxed) - z.calls_before.load(Ordering::Relaxed);
    let saved = z.eager_calls.load(Ordering::Relaxed).saturating_sub(used);
    z.saved.fetch_add(saved, Ordering::Relaxed);
    z.mode.store(LAZY_OFF, Ordering::Release);
}

/// A fault on a page of a buffer with a lazy transfer. `Some(true)`: handled, retry
/// the access; `None`: not a lazy page's fault (or the fallback was just taken): the
/// ordinary rules apply (wait for a pending page, retry a retired one once).
fn lazy_fault(r: &Region, page: usize) -> Option<bool> {
    let z = &r.lazy;
    z.lock();
    let (lo, hi) = (z.lo.load(Ordering::Relaxed), z.hi.load(Ordering::Relaxed));
    if z.mode.load(Ordering::Relaxed) != LAZY_ON || page < lo || page >= hi {
        z.unlock();
        return None;
    }
    if page == z.guard.load(Ordering::Relaxed) {
        // The page a sequential reader reaches next: wait for its strip (its first
        // page retires last), then move the guard and the tripwire on.
        z.unlock();
        wait_pending(r, page);
        z.lock();
        if z.mode.load(Ordering::Relaxed) == LAZY_ON && z.guard.load(Ordering::Relaxed) == page {
            lazy_advance(r, page);
        }
        z.unlock();
        LAST.with(|c| c.set((0, 0)));
        return Some(true);
    }
    if page == z.trip.load(Ordering::Relaxed) {
        // A jump ahead (past the guard's strip): the access is not sequential.
        lazy_fallback(r);
    }
    z.unlock();
    None
}

/// (Lock held, `g` the guard and retired.) The guard moves to the first pending page
/// after it (the first page of the lowest strip not landed: a strip's first page
/// retires last), the tripwire to the first page of the next strip not landed; what
/// is new is protected first, then what is no longer guarded unprotected.
fn lazy_advance(r: &Region, g: usize) {
    let z = &r.lazy;
    let hi = z.hi.load(Ordering::Relaxed);
    let pending = |p: usize| r.table.state(p) == crate::table::PENDING;
    let old_trip = z.trip.load(Ordering::Relaxed);
    let n = (g + 1..hi).find(|&p| pending(p)).unwrap_or(NO_PAGE);
    let t = if n == NO_PAGE {
        NO_PAGE
    } else {
        (n + 1..hi)
            .find(|&p| z.is_head(p) && pending(p))
            .unwrap_or(NO_PAGE)
    };
    for p in [n, t] {
        if p != NO_PAGE && p != old_trip {
            prot_pages(r, p, 1, Prot::None);
        }
    }
    z.guard.store(n, Ordering::Relaxed);
    z.trip.store(t, Ordering::Relaxed);
    prot_pages(r, g, 1, Prot::ReadWrite);
    if old_trip != NO_PAGE && old_trip != n && old_trip != t {
        prot_pages(r, old_trip, 1, Prot::ReadWrite);
    }
    if n == NO_PAGE {
        lazy_finish(r);
    }
}

/// (Lock held.) Seed 000's fallback for random access: every pending page of the lazy
/// transfer is protected (runs of pages, one call each), the guard and tripwire
/// unprotected if they retired; from now on the mover unprotects each strip as it
/// lands (eager protection).
fn lazy_fallback(r: &Region) {
    let z = &r.lazy;
    z.mode.store(LAZY_FALLBACK, Ordering::Release);
    let (lo, hi) = (z.lo.load(Ordering::Relaxed), z.hi.load(Ordering::Relaxed));
    let pending = |p: usize| r.table.state(p) == crate::table::PENDING;
    let mut p = lo;
    while p < hi {
        if pending(p) {
            let s = p;
            while p < hi && pending(p) {
                p += 1;
            }
            prot_pages(r, s, p - s, Prot::None);
        } else {
            p += 1;
        }
    }
    for q in [
        z.guard.load(Ordering::Relaxed),
        z.trip.load(Ordering::Relaxed),
    ] {
        if q != NO_PAGE && !pending(q) {
            prot_pages(r, q, 1, Prot::ReadWrite);
        }
    }
    z.guard.store(NO_PAGE, Ordering::Relaxed);
    z.trip.store(NO_PAGE, Ordering::Relaxed);
    z.fallbacks.fetch_add(1, Ordering::Relaxed);
}

/// Hands a fault that is not ours to the disposition found at install: a handler is
/// called; the default (or ignore) is restored so that the fault, raised again when
/// this returns, ends the process as it would have without gex (signal and core).
fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let i = usize::from(sig != libc::SIGSEGV);
    let p = PREV[i].load(Ordering::Acquire) as *const libc::sigaction;
    let handler = if p.is_null() {
        libc::SIG_DFL
    } else {
        // SAFETY: set once at install from a leaked Box, never freed.
        unsafe { (*p).sa_sigaction }
    };
    if handler == libc::SIG_DFL || handler == libc::SIG_IGN {
        // SAFETY: an all-zero sigaction is SIG_DFL with an empty mask.
        let mut dfl: libc::sigaction = unsafe { std::mem::zeroed() };
        dfl.sa_sigaction = libc::SIG_DFL;
        // SAFETY: sigaction is async-signal-safe; `dfl` is valid.
        unsafe { libc::sigaction(sig, &dfl, ptr::null_mut()) };
        return;
    }
    // SAFETY: `p` is non-null here (the handler is neither SIG_DFL nor SIG_IGN).
    let flags = unsafe { (*p).sa_flags };
    if flags & libc::SA_SIGINFO != 0 {
        // SAFETY: a handler installed with SA_SIGINFO has this signature.
        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
            unsafe { std::mem::transmute(handler) };
        f(sig, info, ctx);
    } else {
        // SAFETY: a handler installed without SA_SIGINFO has this signature.
        let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(handler) };
        f(sig);
    }
}
