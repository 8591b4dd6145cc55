//! Local memory registration for native RMA and atomics under `FI_MR_LOCAL`: where an
//! operation's local buffer finds its descriptor, the per-endpoint registration cache,
//! and client regions ([`MemRegion`], made by [`Ofi::register`](crate::Ofi::register)).
//!
//! A provider with `FI_MR_LOCAL` in its `mr_mode` (verbs, efa, psm3, ...) needs a
//! descriptor of a registration for every local buffer of a data transfer.
//! [`MrCache::acquire`] finds one, in this order:
//! 1. **registered at open** (the conduit owns the memory, so nothing can change under
//!    the registration): the segments of every endpoint of the rank (redundant
//!    registration), the bounce and receive buffers, and the slot words that hold
//!    atomic operands and fetched values;
//! 2. **cached registrations** (no system call: a hit is a few comparisons and one
//!    atomic load): a client region's registration in this endpoint's domain, or a
//!    registration that an operation still in flight made for the same buffer;
//! 3. **registered on demand** (`fi_mr_reg`, a system call on real NICs; the miss path,
//!    never taken on a hit): the whole client region containing the buffer, kept in the
//!    cache, or else the buffer itself, for its operation.
//!
//! # Why a cached registration needs a proof
//! A registration names pages, not an allocation: a NIC that pins memory reads and
//! writes the physical pages that backed the range when it was registered. If the
//! application frees a buffer, the allocator returns its pages to the kernel (`munmap`,
//! `madvise(MADV_DONTNEED)`, a `brk` shrink, `mremap`) and new pages later appear at the
//! same addresses, a registration kept by address would make the NIC send the old
//! pages' bytes, or write into them: silently wrong data. (Memory reused while it stays
//! mapped is harmless: the pages are the same.) That is why the caches of libfabric's
//! providers and UCX run a *memory monitor* that hears of every unmapping. Here a
//! registration is only ever used while something proves that its pages have not
//! changed since it was made:
//! - **Client regions** own their memory: [`MemRegion`] holds the `Vec<T>` it was made
//!   from and hands out only `&[T]` and `&mut [T]`, so no code can free, grow or move
//!   the buffer while the region lives (changing the mapping of a live allocation is
//!   undefined behaviour for `unsafe` code too). Each endpoint registers a region in
//!   its own domain at the first operation from it (lazily, because a domain belongs to
//!   the thread driving its endpoint: `FI_THREAD_DOMAIN`) and keeps the registration;
//!   every hit checks the region's liveness flag. Ending the region (dropping it, or
//!   [`MemRegion::into_vec`]) clears the flag (`Release`) before the buffer is freed or
//!   handed back, so an endpoint that later meets the same addresses (a new allocation
//!   there can only be reached through the allocator's own synchronisation, after the
//!   end) sees the flag cleared (`Acquire`) and never uses the old registration again.
//!   A region that is never ended (leaked: `mem::forget`, an `Rc` cycle) leaks its
//!   buffer with it, so its pages stay its own and the registration stays right. The
//!   registration is closed at the endpoint's next miss (the registry's epoch tells it
//!   a region went away), when its last operation completes, or when the endpoint
//!   closes.
//! - **Any other buffer** is registered for its operation and closed when the
//!   operation's completion is read. While an operation is in flight its buffer is
//!   valid and unmodified (the contract of `ConduitEp::native_put`/`native_get`), so
//!   every page holding one of its bytes keeps its mapping: an operation posted
//!   meanwhile whose buffer lies inside that range may share the registration (a flood
//!   of puts from one buffer registers it once). The registration stops being shared
//!   the moment no operation covering its whole range is in flight any more, and is
//!   closed when its last user completes: after that, nothing would prove its pages
//!   unchanged, so it is never kept.
//!
//! Runtimes that transfer from the same buffers repeatedly register them once as
//! client regions (like `ucp_mem_map`, or GASNet-EX's client-allocated segments), or
//! use the segment. Where a provider runs its own cache with a monitor (verbs, efa,
//! cxi: `FI_MR_CACHE_MONITOR`), the per-operation registrations are hits in it.
//!
//! # Why a region owns its buffer
//! The liveness flag is only as good as the promise that the buffer outlives it, and
//! that promise must not rest on a destructor running: leaking a value is safe.
//! - A region that **borrowed** its buffer (`register(&'a mut [T]) -> MemRegion<'a, T>`,
//!   the first design) broke it: `mem::forget(region)` ended the borrow without the
//!   drop, the flag stayed set, and the program could free the buffer or `realloc` it
//!   (glibc moves a large block with `mremap`, leaving its old addresses unmapped) and
//!   get new memory at the same addresses; the next operation there hit the old
//!   registration. On a NIC that pins pages (`FI_MR_LOCAL`: verbs, efa) that
//!   registration names the old physical pages, which after an `mremap` back the moved
//!   block: a get would have written into another allocation, from safe code (the
//!   probe `tests/regions.rs` found the hit at the reused addresses both ways; it now
//!   checks that each new buffer gets a registration of its own).
//! - A **closure-scoped** region (`with_region(&mut buf, |r| ..)`, the guard kept in
//!   gex's frame and ended on return and on unwinding, with a higher-ranked lifetime so
//!   that the regions of nested calls cannot be swapped) is sound, but it ties a
//!   registration to one lexical scope: a runtime cannot keep a registered buffer in
//!   its own long-lived structures or hand it to another thread, and each new scope
//!   over the same buffer is a new region, registered again, which loses the cache's
//!   benefit across calls.
//! - An **owned** region has neither cost: it lives as long as the program keeps it
//!   (in any structure, on any thread: moving it does not move the heap buffer), every
//!   operation after an endpoint's first is a hit, `into_vec` gives the buffer back
//!   without a copy, and the one way to keep the flag set forever, leaking the region,
//!   leaks the buffer too. What it cannot register is memory something else owns (a
//!   stack array, a field, a mapped file): such buffers take the per-operation path
//!   (still native), or are copied into a region.
//!
//! # Why no memory monitor here
//! - `userfaultfd` (`UFFD_FEATURE_EVENT_UNMAP`/`_REMOVE`/`_REMAP`): the kernel makes the
//!   thread that unmaps a monitored range wait until the event has been *read*
//!   (`userfaultfd_unmap_complete` → `userfaultfd_event_wait_completion`), so someone
//!   must read the descriptor at all times: a single-threaded program that frees a
//!   registered buffer would wait for itself forever. That means a hidden thread, which
//!   gex does not start (design: no hidden threads unless asked). It also needs
//!   `vm.unprivileged_userfaultfd=1` (0 on this machine and Debian's default) or
//!   `CAP_SYS_PTRACE`, container seccomp profiles commonly refuse the system call, a
//!   range can belong to one userfaultfd only (another user in the process makes
//!   registration fail), and a missing-page registration turns the application's own
//!   faults on those pages into events the monitor must resolve.
//! - Intercepting `munmap`/`madvise`/`free` (libfabric's "memhooks", UCX's `ucm`)
//!   patches process-global symbols: not expressible in safe Rust, global state that
//!   several clients in one process would share, and blind to system calls made
//!   directly.
//! - `/proc/self/pagemap` shows no frame numbers without `CAP_SYS_ADMIN`, and reading
//!   it is a system call on every hit.
//!
//! Owning the buffer gives what a monitor would, for the buffers a runtime declares, at
//! the price of one atomic load per hit; everything else pays a registration per operation
//! (or per flood), but is never wrong.
//!
//! # Bound
//! An endpoint keeps at most `GEX_OFI_MR_CACHE_ENTRIES` registrations of at most
//! `GEX_OFI_MR_CACHE_BYTES` bytes in all; beyond that the least recently used idle
//! client-region registrations are closed (and made again at the next use). A
//! registration in use by an operation in flight is never closed, so the bound may be
//! exceeded by what is in flight. A region larger than the byte bound is not cached:
//! its operations register their own ranges. `GEX_OFI_MR_CACHE_ENTRIES=0` keeps
//! nothing once idle.
//!
//! # Safety
//! - Every registration made here covers memory that is valid when it is made: the
//!   operation's own buffer (valid until completion by the caller's contract), or a
//!   client region whose liveness flag was seen set (the region owns the buffer, and
//!   clears the flag before it frees or returns it; a region never ended keeps it
//!   allocated forever). A region ended concurrently with its registration only makes
//!   the registration unusable (the flag is checked at every use); the current
//!   operation's own range is valid by its contract.
//! - A registration is closed only when no operation posted with its descriptor is in
//!   flight (`inflight == 0`), or when the endpoint is closed (the cache sits between
//!   the endpoint and the domain in `ofi::Objects`, so it is dropped after the endpoint
//!   and before the domain).
#![allow(unsafe_code)]

use crate::fabric::{Desc, Domain, Endpoint, Mr, flags};
use gex_sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex};

/// Default of `GEX_OFI_MR_CACHE_ENTRIES`: registrations an endpoint keeps.
pub const DEFAULT_MR_CACHE_ENTRIES: usize = 256;
/// Default of `GEX_OFI_MR_CACHE_BYTES`: bytes an endpoint keeps registered (1 GiB).
pub const DEFAULT_MR_CACHE_BYTES: usize = 1 << 30;

/// A tag's bit saying the operation covers its registration's whole range.
const COVER: u32 = 1 << 31;

/// Whether `[p, p + n)` lies inside `[base, base + len)`.
#[inline(always)]
fn contains(base: usize, len: usize, p: usize, n: usize) -> bool {
    p >= base && p - base <= len && n <= len - (p - base)
}

/// One client region as the endpoints see it.
#[derive(Debug)]
pub(crate) struct RegionState {
    base: usize,
    len: usize,
    /// Set while the region lives (cleared, `Release`, when it ends).
    alive: AtomicBool,
}

impl RegionState {
    #[inline(always)]
    fn alive(&self) -> bool {
        self.alive.load(Ordering::Acquire)
    }
}

/// The client regions of a conduit (shared by its endpoints; locked only on the miss
/// path and when a region is made or dropped).
#[derive(Debug, Default)]
pub(crate) struct Registry {
    list: Mutex<Vec<Arc<RegionState>>>,
    /// Bumped whenever a region ends: endpoints then close their registrations of dead
    /// regions at their next miss.
    epoch: AtomicU64,
}

impl Registry {
    /// The live region containing `[p, p + n)`, if any.
    fn find(&self, p: usize, n: usize) -> Option<Arc<RegionState>> {
        let list = self.list.lock().unwrap_or_else(|e| e.into_inner());
        list.iter()
            .find(|r| r.alive() && contains(r.base, r.len, p, n))
            .cloned()
    }

    /// Makes a region of `buf` (see [`Ofi::register`](crate::Ofi::register)).
    pub(crate) fn add<T>(self: &Arc<Self>, buf: Vec<T>) -> MemRegion<T> {
        let bytes = std::mem::size_of_val(&buf[..]);
        let state = (bytes > 0).then(|| {
            let s = Arc::new(RegionState {
                // The region never reallocates `buf` (it hands out slices only).
                base: buf.as_ptr() as usize,
                len: bytes,
                alive: AtomicBool::new(true),
            });
            self.list
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(s.clone());
            s
        });
        MemRegion {
            buf,
            state,
            registry: self.clone(),
        }
    }
}

/// A buffer registered for native RMA and atomics for as long as this region lives (a
/// *client region*, like `ucp_mem_map` or a GASNet-EX client segment), made by
/// [`Ofi::register`](crate::Ofi::register), which takes the buffer.
///
/// The region owns the `Vec<T>` it was made from and lends it through
/// `Deref`/`DerefMut` as a slice (never as the `Vec`, which could reallocate): use
/// `&region[..]` as the source of puts and `&mut region[..]` as the destination of gets.
/// Where the provider requires `FI_MR_LOCAL`, each endpoint registers the region in its
/// domain at its first operation from it and keeps that registration in its cache
/// (bounded by `GEX_OFI_MR_CACHE_ENTRIES` and `GEX_OFI_MR_CACHE_BYTES`), so later
/// operations from anywhere in the region need no registration; elsewhere the region
/// costs nothing. [`into_vec`](Self::into_vec) ends the region and gives the buffer
/// back; dropping it ends it and frees the buffer. Either way no endpoint uses its
/// registrations afterwards, and each closes them at its next registration, when their
/// last operation completes, or when it closes.
///
/// Why keeping these registrations is sound where keeping one by address is not: a
/// registration pins the pages behind its addresses when it is made, and a buffer that
/// is freed and whose addresses are later mapped again would leave it pointing at the
/// old pages (stale data, or writes into whatever those pages back now, on NICs that
/// pin). The region owns the buffer, so nothing can free or move it while the
/// registration is in use; its end is seen by every endpoint before the memory can be
/// reused; and a region that never ends (leaked with `mem::forget`) keeps its buffer
/// allocated, so its pages never change (docs/ofi.md, section 2b, explains this, why
/// the region owns rather than borrows its buffer, and why gex runs no memory monitor).
///
/// An endpoint of a client built with gex-rma's layer puts from and gets into the
/// region (in a hybrid job, `GEX_CONDUIT=ofi`, the `Ofi` conduit is the far part:
/// `client.conduit().far().register(..)`):
///
/// ```no_run
/// use gex_conduit_ofi::Ofi;
/// use gex_core::{Blocking, Client, Endpoint, EpAddr};
/// use gex_rma::{GlobalPtr, RmaError, RmaExt};
///
/// fn demo(client: &Client<Ofi>, ep: &mut Endpoint<Ofi>) -> Result<Vec<u8>, RmaError> {
///     let mut region = client.conduit().register(vec![0u8; 1 << 20]);
///     let peer = GlobalPtr::<u8>::new(EpAddr::rank(1), 0);
///     region[..8].copy_from_slice(b"abcdefgh");
///     ep.put(peer, &region[..], Blocking)?; // registered once per endpoint, then cached
///     ep.get(&mut region[..], peer, Blocking)?; // a cache hit
///     Ok(region.into_vec()) // the region ends; the buffer is the caller's again
/// }
/// ```
pub struct MemRegion<T> {
    /// Never reallocated, moved out or shrunk while the region lives: only slices of it
    /// are handed out (the registry holds its address).
    buf: Vec<T>,
    /// `None` for an empty region (nothing to register), or once it ended.
    state: Option<Arc<RegionState>>,
    registry: Arc<Registry>,
}

impl<T> MemRegion<T> {
    /// The region's length in bytes.
    pub fn byte_len(&self) -> usize {
        std::mem::size_of_val(&self.buf[..])
    }

    /// Ends the region and returns its buffer, unchanged (same allocation, length and
    /// capacity): no endpoint uses a registration of it afterwards.
    pub fn into_vec(mut self) -> Vec<T> {
        self.end();
        std::mem::take(&mut self.buf)
    }

    /// Ends the region: from now on no endpoint uses a registration of it. Called before
    /// the buffer is freed or handed back.
    fn end(&mut self) {
        let Some(s) = self.state.take() else { return };
        s.alive.store(false, Ordering::Release);
        self.registry
            .list
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|r| !Arc::ptr_eq(r, &s));
        self.registry.epoch.fetch_add(1, Ordering::Release);
    }
}

impl<T> Deref for MemRegion<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.buf
    }
}

impl<T> DerefMut for MemRegion<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        &mut self.buf
    }
}

impl<T> Drop for MemRegion<T> {
    fn drop(&mut self) {
        // Before the buffer (a field, dropped after this) is freed.
        self.end();
    }
}

impl<T> fmt::Debug for MemRegion<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemRegion")
            .field("addr", &self.buf.as_ptr())
            .field("bytes", &self.byte_len())
            .finish()
    }
}

crate::stats::counters! {
    /// Counters of one endpoint's registrations of local buffers (see
    /// [`OfiStats`](crate::OfiStats)).
    MrCounters {
        hits => mr_cache_hits,
        region_regs => mr_region_registrations,
        op_regs => mr_op_registrations,
        evictions => mr_evictions,
        closed => mr_closed,
        failures => mr_failures,
    }
}

impl MrCounters {
    #[inline(always)]
    fn bump(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }
}

/// One registration made on demand.
#[derive(Debug)]
struct Entry {
    base: usize,
    len: usize,
    /// `None`: a free slot of the table.
    mr: Option<Mr>,
    desc: Desc,
    /// The client region registered, or `None`: registered for an operation.
    region: Option<Arc<RegionState>>,
    /// Operations posted with this registration whose completion has not been read.
    inflight: u32,
    /// Of those, the ones whose buffer is the whole range (operation registrations
    /// only): while non-zero the range's pages provably keep their mapping.
    cover: u32,
    /// Use stamp for LRU eviction.
    last_use: u64,
}

/// How the cache is set up for one endpoint.
#[derive(Debug)]
pub(crate) struct CacheConfig {
    /// Descriptors are needed (`FI_MR_LOCAL`, the provider's or forced) for native
    /// operations.
    pub(crate) on: bool,
    /// `FI_MR_ENDPOINT`: registrations are bound to the endpoint and enabled.
    pub(crate) bind: bool,
    pub(crate) max_entries: usize,
    pub(crate) max_bytes: usize,
    /// High bits of the keys requested for registrations (unique per domain).
    pub(crate) key_base: u64,
}

/// One endpoint's registered regions and cache of registrations (module docs).
#[derive(Debug)]
pub(crate) struct MrCache {
    cfg: CacheConfig,
    /// Registered at open: segments, bounce and receive buffers, slot words.
    fixed: Vec<(usize, usize, Desc)>,
    entries: Vec<Entry>,
    free: Vec<u32>,
    /// 1 + the entry of the last hit (0: none).
    memo: usize,
    tick: u64,
    /// Live entries, and their bytes.
    kept: usize,
    bytes: usize,
    registry: Arc<Registry>,
    epoch: u64,
    key_seq: u64,
    stats: Arc<MrCounters>,
    warned: bool,
}

impl MrCache {
    pub(crate) fn new(
        cfg: CacheConfig,
        fixed: Vec<(usize, usize, Desc)>,
        registry: Arc<Registry>,
        stats: Arc<MrCounters>,
    ) -> MrCache {
        MrCache {
            cfg,
            fixed,
            entries: Vec::new(),
            free: Vec::new(),
            memo: 0,
            tick: 0,
            kept: 0,
            bytes: 0,
            epoch: registry.epoch.load(Ordering::Acquire),
            registry,
            key_seq: 0,
            stats,
            warned: false,
        }
    }

    /// The descriptor for an operation's local buffer `[p, p + len)` and the tag to
    /// hand back to [`release`](Self::release) when the operation completes (0: none
    /// needed). `None`: the provider needs a registration and making one failed (the
    /// caller answers `Unsupported`, so gex-rma uses AMs).
    #[inline]
    pub(crate) fn acquire(
        &mut self,
        domain: &Domain,
        ep: &Endpoint,
        p: *const u8,
        len: usize,
    ) -> Option<(Desc, u32)> {
        let p = p as usize;
        for &(b, l, d) in &self.fixed {
            if contains(b, l, p, len) {
                return Some((d, 0));
            }
        }
        if !self.cfg.on {
            return Some((Desc::NONE, 0));
        }
        if self.memo != 0 && self.usable(self.memo - 1, p, len) {
            return Some(self.hit(self.memo - 1, p, len));
        }
        if let Some(i) = (0..self.entries.len()).find(|&i| self.usable(i, p, len)) {
            return Some(self.hit(i, p, len));
        }
        self.miss(domain, ep, p, len)
    }

    #[inline(always)]
    fn usable(&self, i: usize, p: usize, len: usize) -> bool {
        let e = &self.entries[i];
        e.mr.is_some()
            && contains(e.base, e.len, p, len)
            && match &e.region {
                Some(r) => r.alive(),
                None => e.cover > 0,
            }
    }

    #[inline]
    fn hit(&mut self, i: usize, p: usize, len: usize) -> (Desc, u32) {
        self.tick += 1;
        let e = &mut self.entries[i];
        e.inflight += 1;
        e.last_use = self.tick;
        let cover = e.region.is_none() && e.base == p && e.len == len;
        if cover {
            e.cover += 1;
        }
        self.memo = i + 1;
        let h = &self.stats.hits;
        h.store(h.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        (e.desc, tag(i, cover))
    }

    /// Registers the client region containing `[p, p + len)`, or else that range for
    /// its operation.
    #[cold]
    fn miss(
        &mut self,
        domain: &Domain,
        ep: &Endpoint,
        p: usize,
        len: usize,
    ) -> Option<(Desc, u32)> {
        let epoch = self.registry.epoch.load(Ordering::Acquire);
        if epoch != self.epoch {
            self.epoch = epoch;
            self.sweep();
        }
        let region = self
            .registry
            .find(p, len)
            .filter(|r| r.len <= self.cfg.max_bytes);
        let (base, rlen) = region.as_ref().map_or((p, len), |r| (r.base, r.len));
        if region.is_some() {
            // Room for it: close idle registrations beyond the bound first.
            self.evict(1, rlen);
        }
        self.key_seq = self.key_seq.wrapping_add(1);
        let key = self.cfg.key_base | 0x8000_0000 | (self.key_seq & 0x7fff_ffff);
        // SAFETY: the range is valid now (module Safety section: the operation's own
        // buffer, or a live client region); the registration is closed before the
        // domain (field order of `ofi::Objects`) and only used while its pages are
        // proven unchanged.
        let reg = unsafe {
            Mr::register(
                domain,
                base as *const u8,
                rlen.max(1),
                flags::READ | flags::WRITE,
                key,
            )
        }
        .and_then(|mut mr| {
            if self.cfg.bind {
                mr.bind(ep)?;
            }
            Ok(mr)
        });
        let mr = match reg {
            Ok(mr) => mr,
            Err(e) => {
                MrCounters::bump(&self.stats.failures);
                if !self.warned {
                    self.warned = true;
                    tracing::warn!(
                        "ofi: fi_mr_reg of a local RMA buffer ({rlen} bytes) failed: {e}; such operations take gex-rma's AM path"
                    );
                }
                return None;
            }
        };
        let cover = region.is_none();
        MrCounters::bump(if cover {
            &self.stats.op_regs
        } else {
            &self.stats.region_regs
        });
        self.tick += 1;
        let e = Entry {
            base,
            len: rlen,
            desc: mr.desc(),
            mr: Some(mr),
            region,
            inflight: 1,
            cover: u32::from(cover),
            last_use: self.tick,
        };
        let desc = e.desc;
        let i = match self.free.pop() {
            Some(i) => {
                self.entries[i as usize] = e;
                i as usize
            }
            None => {
                self.entries.push(e);
                self.entries.len() - 1
            }
        };
        self.kept += 1;
        self.bytes += rlen;
        self.memo = i + 1;
        Some((desc, tag(i, cover)))
    }

    /// The operation holding `tag` (from [`acquire`](Self::acquire)) completed, or was
    /// not posted after all: its registration may be closed now.
    #[inline]
    pub(crate) fn release(&mut self, tag: u32) {
        if tag == 0 {
            return;
        }
        let i = (tag & !COVER) as usize - 1;
        let e = &mut self.entries[i];
        e.inflight -= 1;
        if tag & COVER != 0 {
            e.cover -= 1;
        }
        if e.inflight > 0 {
            return;
        }
        if e.region.as_ref().is_some_and(|r| r.alive()) {
            // An idle client-region registration: kept, within the bound.
            if self.kept > self.cfg.max_entries || self.bytes > self.cfg.max_bytes {
                self.evict(0, 0);
            }
        } else {
            // An operation's registration (nothing proves its pages once no operation
            // covers them), or a dead region's.
            self.close(i);
        }
    }

    /// Closes idle registrations, least recently used first, until `extra` more
    /// entries of `extra_bytes` more bytes fit the bound (or none is idle).
    fn evict(&mut self, extra: usize, extra_bytes: usize) {
        while self.kept + extra > self.cfg.max_entries
            || self.bytes + extra_bytes > self.cfg.max_bytes
        {
            let victim = self
                .entries
                .iter()
                .enumerate()
                .filter(|(_, e)| e.mr.is_some() && e.inflight == 0)
                .min_by_key(|(_, e)| e.last_use)
                .map(|(i, _)| i);
            let Some(i) = victim else { return };
            self.close(i);
            MrCounters::bump(&self.stats.evictions);
        }
    }

    /// Closes the idle registrations of regions that were dropped.
    #[cold]
    fn sweep(&mut self) {
        for i in 0..self.entries.len() {
            let e = &self.entries[i];
            if e.mr.is_some() && e.inflight == 0 && e.region.as_ref().is_some_and(|r| !r.alive()) {
                self.close(i);
            }
        }
    }

    fn close(&mut self, i: usize) {
        let e = &mut self.entries[i];
        debug_assert_eq!(e.inflight, 0);
        if e.mr.take().is_none() {
            return;
        }
        e.region = None;
        self.kept -= 1;
        self.bytes -= e.len;
        self.free.push(i as u32);
        if self.memo == i + 1 {
            self.memo = 0;
        }
        MrCounters::bump(&self.stats.closed);
    }
}

impl Drop for MrCache {
    fn drop(&mut self) {
        // The endpoint is closed (field order): every registration goes, used or not.
        let n = self.entries.iter().filter(|e| e.mr.is_some()).count() as u64;
        self.entries.clear();
        self.stats.closed.fetch_add(n, Ordering::Relaxed);
    }
}

#[inline(always)]
fn tag(i: usize, cover: bool) -> u32 {
    (i as u32 + 1) | if cover { COVER } else { 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_contained() {
        assert!(contains(100, 10, 100, 10));
        assert!(contains(100, 10, 105, 5));
        assert!(contains(100, 10, 110, 0));
        assert!(!contains(100, 10, 105, 6));
        assert!(!contains(100, 10, 99, 1));
        assert!(!contains(100, 10, 111, 0));
        assert!(!contains(100, 10, 105, usize::MAX));
    }

    #[test]
    fn regions_are_found_while_they_live() {
        let reg = Arc::new(Registry::default());
        let ra = reg.add(vec![0u64; 512]);
        let mut rb = reg.add(vec![0u8; 100]);
        let (pa, pb) = (ra.as_ptr() as usize, rb.as_ptr() as usize);
        assert_eq!(ra.byte_len(), 4096);
        assert!(reg.find(pa + 8, 4088).is_some());
        assert!(reg.find(pa + 8, 4089).is_none(), "past the end");
        assert!(reg.find(pb, 100).is_some());
        let e0 = reg.epoch.load(Ordering::Relaxed);
        let state = ra.state.clone().expect("non-empty");
        drop(ra);
        assert!(!state.alive(), "dropping the region clears the flag");
        assert!(reg.find(pa, 8).is_none());
        assert_eq!(reg.epoch.load(Ordering::Relaxed), e0 + 1);
        rb[99] = 7;
        let state = rb.state.clone().expect("non-empty");
        let b = rb.into_vec();
        assert!(!state.alive(), "into_vec clears the flag");
        assert_eq!(reg.epoch.load(Ordering::Relaxed), e0 + 2);
        assert_eq!(
            (b.as_ptr() as usize, b.len(), b[99]),
            (pb, 100, 7),
            "same buffer"
        );
        assert!(reg.list.lock().unwrap().is_empty());
        let re = reg.add(Vec::<u8>::with_capacity(64));
        assert!(reg.list.lock().unwrap().is_empty(), "nothing to register");
        assert_eq!(re.into_vec().capacity(), 64);
        assert_eq!(reg.epoch.load(Ordering::Relaxed), e0 + 2);
    }

    #[test]
    fn a_leaked_region_stays_alive_with_its_buffer() {
        let reg = Arc::new(Registry::default());
        let r = reg.add(vec![5u8; 4096]);
        let (p, state) = (r.as_ptr() as usize, r.state.clone().expect("non-empty"));
        std::mem::forget(r);
        assert!(state.alive(), "a leaked region is alive...");
        assert!(reg.find(p, 4096).is_some());
        // ...and so is its buffer: no allocation can overlap it.
        let other = vec![6u8; 4096];
        let q = other.as_ptr() as usize;
        assert!(q + 4096 <= p || p + 4096 <= q);
        assert!(reg.find(q, 4096).is_none());
    }

    #[test]
    fn tags_carry_index_and_cover() {
        assert_eq!(tag(0, false), 1);
        assert_eq!(tag(5, true) & !COVER, 6);
        assert_ne!(tag(5, true) & COVER, 0);
    }
}
