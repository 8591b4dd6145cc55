//! The ofi conduit and its endpoints.
//!
//! # Safety
//! - **Buffers posted to libfabric** (send bounce buffers, receive buffers) live in
//!   [`Mem`] allocations owned by the endpoint's pools. They are allocated once, never
//!   moved, and freed only after the libfabric endpoint is closed: dropping an [`OfiEp`]
//!   moves its libfabric objects and pools together into a `Grave` (closed by
//!   `Ofi::finalize` after the job-wide barrier, or when the conduit is dropped), which
//!   declares `objs` (endpoint first) before `tx` and `rx`, so the endpoint is closed
//!   before the pools are dropped. A send buffer leaves the free list when it is posted and comes
//!   back only when its completion is read; a receive buffer is reposted only after the
//!   message in it has been delivered.
//! - **Contexts** handed to libfabric are slots of a `fi_context2`-sized array parallel
//!   to each pool, so a completion's context pointer names its buffer; it is checked to
//!   lie inside one of the arrays before it is used.
//! - **Native RMA and atomics** use the slots of [`Rma`]: a context and three operand
//!   words per slot, in [`Mem`] allocations that `Grave` declares after `objs`, so they
//!   outlive the libfabric endpoint. A slot is taken when an operation is posted and
//!   freed only after its completion has been read and reported by `native_test`. The
//!   user buffers of puts and gets are the caller's to keep valid until completion
//!   (`ConduitEp::native_put`'s contract), and so is an atomic's result word, which
//!   `native_test` writes (from the slot's result word) just before it reports the
//!   completion; remote addresses are the peer's published segment base (or 0) plus an
//!   offset the caller checked against the segment. Registrations of local buffers are
//!   `crate::mr`'s (its Safety section); a slot keeps its registration's tag until its
//!   completion is read.
//! - **Segments** are zero-filled [`Mem`] allocations owned by [`Ofi`], which every
//!   endpoint keeps alive through its `Arc`; in a hybrid job they are the endpoints'
//!   segments inside the node-local shared region (`Mem::shared`, not freed by `Mem`),
//!   whose mapping the `Arc<Smp>` held by [`Ofi`] keeps alive until every endpoint, and
//!   so every libfabric registration of them, is closed. Long payloads are written into them at
//!   offsets the receiver checks against the segment length before copying.
//! - A received message is read through a slice of the receive buffer it landed in, of
//!   the length the completion reports (checked against the buffer's bounds).
#![allow(unsafe_code)]

use crate::fabric::{
    AtomicCall, Av, CQ_BATCH, Completion, Cq, Desc, Domain, EpHandle, Errno, Fabric, Hints, Info,
    InfoList, Mr, flags,
};
use crate::mr::{
    CacheConfig, DEFAULT_MR_CACHE_BYTES, DEFAULT_MR_CACHE_ENTRIES, MemRegion, MrCache, MrCounters,
    Registry,
};
use crate::wire::{self, Credits, HEADER};
use gex_conduit_smp::{Smp, SmpEp};
use gex_core::boot::Bootstrap;
use gex_core::spi::{
    AtomicBase, AtomicKind, Capabilities, Conduit, ConduitEp, ConduitError, Deliver, Incoming,
    Limits, Native, NativeAtomic, OpenParams, OutMsg, ReplyTx,
};
use gex_core::{Category, EpAddr, EpIndex, InitError, Injected, Kind, WaitPolicy};
use gex_sync::atomic::{AtomicU64, Ordering};
use std::collections::VecDeque;
use std::fmt;
use std::mem::ManuallyDrop;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Default provider (`GEX_OFI_PROVIDER`): libfabric's `tcp`, which offers RDM endpoints
/// through the `ofi_rxm` utility provider (`tcp;ofi_rxm`).
pub const DEFAULT_PROVIDER: &str = "tcp";
/// Default largest Medium (and Long) payload (`GEX_OFI_MAX_MEDIUM`).
pub const DEFAULT_MAX_MEDIUM: usize = 8192;
/// Default request credits per ordered endpoint pair (`GEX_OFI_CREDITS`).
pub const DEFAULT_CREDITS: u16 = 64;

pub(crate) const MAX_ARGS: usize = 16;
/// Send bounce buffers per endpoint.
const SEND_BUFS: usize = 64;
/// Receive buffers per endpoint without multi-receive.
const RECV_BUFS: usize = 128;
/// Multi-receive buffers per endpoint.
const MULTI_BUFS: usize = 4;
/// Completion queue entries.
const CQ_SIZE: usize = 4096;
/// Progress passes in a row without a completion after which an endpoint probes the
/// peers it waits on ([`Tx::probe`]); `block` counts a fruitless sleep as
/// `PROBE_AFTER / 64` passes. About 0.1-0.3 s of tcp polling, or 64 sleeps.
const PROBE_AFTER: u32 = 1 << 18;
/// A liveness probe still pending after this long means its peer is gone.
const PROBE_DEADLINE: Duration = Duration::from_secs(5);
/// Longest the wire-up in `open` may take before it reports which peers are silent.
const WIREUP_TIMEOUT: Duration = Duration::from_secs(60);
/// Hybrid jobs: longest interval, in polls, between completion-queue reads while no
/// network operation of the endpoint is in flight (see `OfiEp::poll`).
const NET_POLL_MAX: u32 = 256;
/// Hybrid jobs: longest nap of `block` on the shared-memory doorbell (the network is
/// not watched meanwhile).
const NET_NAP: Duration = Duration::from_micros(50);

fn conduit_err(msg: impl Into<String>) -> InitError {
    InitError::Conduit {
        conduit: "ofi",
        msg: msg.into(),
    }
}

// ---------------------------------------------------------------------------------------
// Memory

/// A zero-filled, page-aligned heap allocation at a fixed address, or (hybrid jobs) a
/// segment inside the node-local shared region, which the conduit's `Smp` owns.
#[derive(Debug)]
struct Mem {
    ptr: NonNull<u8>,
    /// `None`: not owned (a segment of the shared region, freed with the `Smp`).
    layout: Option<std::alloc::Layout>,
}

// SAFETY: plain memory; every access goes through raw pointers under the rules of the
// module's Safety section (segments: the application's responsibility, as on every
// conduit; pools: only the endpoint that owns them).
unsafe impl Send for Mem {}
// SAFETY: as above.
unsafe impl Sync for Mem {}

impl Mem {
    fn new(len: usize) -> Result<Mem, InitError> {
        let layout = std::alloc::Layout::from_size_align(len.max(1), 4096)
            .map_err(|_| InitError::Config(format!("ofi: {len}-byte allocation too large")))?;
        // SAFETY: non-zero size.
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr =
            NonNull::new(p).ok_or_else(|| conduit_err(format!("out of memory ({len} bytes)")))?;
        Ok(Mem {
            ptr,
            layout: Some(layout),
        })
    }
    /// A segment of the node-local shared region (hybrid jobs), not owned.
    fn shared(ptr: NonNull<u8>) -> Mem {
        Mem { ptr, layout: None }
    }
    fn base(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

impl Drop for Mem {
    fn drop(&mut self) {
        if let Some(layout) = self.layout {
            // SAFETY: allocated in `new` with this layout, freed once.
            unsafe { std::alloc::dealloc(self.ptr.as_ptr(), layout) };
        }
    }
}

/// `count` buffers of `stride` bytes, with a libfabric context slot each.
#[derive(Debug)]
struct Pool {
    mem: Mem,
    stride: usize,
    count: usize,
    ctx: Mem,
    desc: Desc,
}

impl Pool {
    fn new(count: usize, stride: usize) -> Result<Pool, InitError> {
        Ok(Pool {
            mem: Mem::new(count * stride)?,
            stride,
            count,
            ctx: Mem::new(count * flags::CONTEXT_BYTES)?,
            desc: Desc::NONE,
        })
    }
    #[inline(always)]
    fn buf(&self, i: usize) -> *mut u8 {
        debug_assert!(i < self.count);
        // SAFETY: i < count: inside the allocation.
        unsafe { self.mem.base().add(i * self.stride) }
    }
    #[inline(always)]
    fn ctx(&self, i: usize) -> *mut std::ffi::c_void {
        // SAFETY: i < count: inside the context array.
        unsafe { self.ctx.base().add(i * flags::CONTEXT_BYTES) }.cast()
    }
    /// The buffer index of a context pointer, if it is one of this pool's.
    #[inline(always)]
    fn index_of(&self, ctx: *mut std::ffi::c_void) -> Option<usize> {
        let (p, b) = (ctx as usize, self.ctx.base() as usize);
        let off = p.checked_sub(b)?;
        (off < self.count * flags::CONTEXT_BYTES && off % flags::CONTEXT_BYTES == 0)
            .then_some(off / flags::CONTEXT_BYTES)
    }
    fn len(&self) -> usize {
        self.count * self.stride
    }
}

// ---------------------------------------------------------------------------------------
// Configuration and provider selection

/// How one operation is carried out, and why (see [`OfiReport`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathChoice {
    /// The operation (e.g. `"AM receive"`, `"RMA put/get"`).
    pub operation: &'static str,
    /// The path used.
    pub path: String,
    /// Why this path.
    pub reason: String,
}

/// What the ofi conduit opened and which path each operation uses, with the reason
/// (for `gex-info` and diagnostics). `Display` prints it as a table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OfiReport {
    provider: String,
    fabric: String,
    domain: String,
    threading: String,
    progress: String,
    mr_mode: Vec<&'static str>,
    paths: Vec<PathChoice>,
}

impl OfiReport {
    /// The libfabric provider opened, as libfabric names it (e.g. `tcp;ofi_rxm`, `shm`).
    pub fn provider(&self) -> &str {
        &self.provider
    }
    /// The fabric name (e.g. `127.0.0.1/32`).
    pub fn fabric(&self) -> &str {
        &self.fabric
    }
    /// The domain name (e.g. `lo`).
    pub fn domain(&self) -> &str {
        &self.domain
    }
    /// The memory-registration modes the provider requires (`FI_MR_*` names).
    pub fn mr_mode(&self) -> &[&'static str] {
        &self.mr_mode
    }
    /// Which path each operation uses, and why.
    pub fn paths(&self) -> &[PathChoice] {
        &self.paths
    }
    /// The path chosen for `operation`, if listed.
    pub fn path(&self, operation: &str) -> Option<&PathChoice> {
        self.paths.iter().find(|p| p.operation == operation)
    }
}

impl fmt::Display for OfiReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "ofi: provider {} (fabric {}, domain {}), provider threading {}, data progress {}, mr_mode [{}]",
            self.provider,
            self.fabric,
            self.domain,
            self.threading,
            self.progress,
            self.mr_mode.join(", ")
        )?;
        for p in &self.paths {
            writeln!(f, "  {}: {} -- {}", p.operation, p.path, p.reason)?;
        }
        Ok(())
    }
}

#[derive(Debug)]
struct Settings {
    provider: Option<String>,
    provider_shown: String,
    domain: Option<String>,
    max_medium: usize,
    credits: u16,
    multi_recv: bool,
    rma: bool,
    atomics: bool,
    /// `GEX_OFI_HYBRID`: `None` = auto.
    hybrid: Option<bool>,
    /// `GEX_OFI_MR_LOCAL=1`: act as if the provider required `FI_MR_LOCAL` (testing aid).
    force_mr_local: bool,
    /// `GEX_OFI_RELAXED_PUTS` (default on): implicit-event puts are transmit-complete
    /// writes flushed by an ordered read, where the provider orders reads after writes.
    relaxed_puts: bool,
    /// `GEX_OFI_MR_CACHE_ENTRIES`, `GEX_OFI_MR_CACHE_BYTES`.
    mr_cache_entries: usize,
    mr_cache_bytes: usize,
}

fn settings(params: &OpenParams<'_>) -> Result<Settings, InitError> {
    let c = params.config;
    let (provider, provider_shown) = match c.get("GEX_OFI_PROVIDER").map(str::trim) {
        Some("") | Some("auto") => (None, "any (libfabric's choice; FI_PROVIDER applies)".into()),
        Some(p) => (Some(p.to_string()), p.to_string()),
        None => match std::env::var("FI_PROVIDER") {
            // libfabric's own selection: let it filter.
            Ok(p) if !p.trim().is_empty() => (None, format!("FI_PROVIDER={p}")),
            _ => (
                Some(DEFAULT_PROVIDER.to_string()),
                DEFAULT_PROVIDER.to_string(),
            ),
        },
    };
    let domain = c
        .get("GEX_OFI_DOMAIN")
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .map(String::from);
    let max_medium = c.size("GEX_OFI_MAX_MEDIUM", DEFAULT_MAX_MEDIUM)?;
    if !(512..=(1 << 20)).contains(&max_medium) {
        return Err(InitError::Config(format!(
            "GEX_OFI_MAX_MEDIUM={max_medium}: must be between 512 and 1048576"
        )));
    }
    let mr_cache_entries = c.u64("GEX_OFI_MR_CACHE_ENTRIES", DEFAULT_MR_CACHE_ENTRIES as u64)?;
    if mr_cache_entries > 1 << 16 {
        return Err(InitError::Config(format!(
            "GEX_OFI_MR_CACHE_ENTRIES={mr_cache_entries}: must be at most 65536"
        )));
    }
    let credits = c.u64("GEX_OFI_CREDITS", u64::from(DEFAULT_CREDITS))?;
    if !(2..=4096).contains(&credits) {
        return Err(InitError::Config(format!(
            "GEX_OFI_CREDITS={credits}: must be between 2 and 4096"
        )));
    }
    Ok(Settings {
        provider,
        provider_shown,
        domain,
        max_medium,
        credits: credits as u16,
        multi_recv: c.bool("GEX_OFI_MULTI_RECV", true)?,
        rma: c.bool("GEX_OFI_RMA", true)?,
        atomics: c.bool("GEX_OFI_ATOMICS", true)?,
        hybrid: match c.get("GEX_OFI_HYBRID").map(str::trim) {
            None | Some("") | Some("auto") => None,
            Some(_) => Some(c.bool("GEX_OFI_HYBRID", false)?),
        },
        force_mr_local: c.bool("GEX_OFI_MR_LOCAL", false)?,
        relaxed_puts: c.bool("GEX_OFI_RELAXED_PUTS", true)?,
        mr_cache_entries: mr_cache_entries as usize,
        mr_cache_bytes: c.size("GEX_OFI_MR_CACHE_BYTES", DEFAULT_MR_CACHE_BYTES)?,
    })
}

/// Whether `provider` (`tcp`, `tcp;ofi_rxm`) carries the operations between two
/// endpoints in one byte stream that the target processes in order, placing a write's
/// bytes before it reads the next request: for it, message ordering `FI_ORDER_RMA_RAW`
/// implies that a read sees the bytes of every earlier write, although it reports
/// `max_order_raw_size` 0 once `FI_ATOMIC` is asked for (`ofi_rxm` carries atomics as
/// messages, outside that data ordering). See docs/ofi.md, "Relaxed puts".
fn stream_provider(provider: &str) -> bool {
    provider.split(';').next() == Some("tcp")
}

/// Relaxed puts (transmit-complete writes whose arrival an ordered read proves): the
/// largest write that may be relaxed, or why none may.
fn relaxed_limit(rma: bool, enabled: bool, a: &crate::fabric::Attrs) -> Result<usize, String> {
    if !rma {
        Err("no native RMA".into())
    } else if !enabled {
        Err("disabled by GEX_OFI_RELAXED_PUTS=0".into())
    } else if a.max_order_raw > 0 {
        Ok(a.max_order_raw)
    } else if a.rma_raw && stream_provider(&a.provider) {
        Ok(usize::MAX)
    } else {
        Err("provider does not order reads after writes (FI_ORDER_RAW / FI_ORDER_RMA_RAW, with max_order_raw_size > 0 unless the provider is tcp)".into())
    }
}

/// The offer chosen, what it lacks, and why.
struct Chosen {
    info: Info,
    attrs: crate::fabric::Attrs,
    multi_recv: Result<(), String>,
    rma: Result<(), String>,
    atomics: Result<(), String>,
    ordered: bool,
}

fn mr_mode_names(m: i32) -> Vec<&'static str> {
    [
        (flags::MR_LOCAL, "FI_MR_LOCAL"),
        (flags::MR_VIRT_ADDR, "FI_MR_VIRT_ADDR"),
        (flags::MR_ALLOCATED, "FI_MR_ALLOCATED"),
        (flags::MR_PROV_KEY, "FI_MR_PROV_KEY"),
        (flags::MR_ENDPOINT, "FI_MR_ENDPOINT"),
    ]
    .into_iter()
    .filter(|(f, _)| m & f != 0)
    .map(|(_, n)| n)
    .collect()
}

/// `fi_getinfo` with the wanted capabilities, dropping optional ones the provider lacks
/// (RMA, then multi-receive, then send-after-send ordering) instead of failing.
fn choose(s: &Settings, single_host: bool) -> Result<Chosen, InitError> {
    let rma_caps =
        flags::RMA | flags::READ | flags::WRITE | flags::REMOTE_READ | flags::REMOTE_WRITE;
    let mut want_rma = s.rma;
    let mut want_atomic = s.rma && s.atomics;
    let mut notes_atomic = if !s.rma {
        "disabled by GEX_OFI_RMA=0".to_string()
    } else if !s.atomics {
        "disabled by GEX_OFI_ATOMICS=0".to_string()
    } else {
        String::new()
    };
    let mut want_multi = s.multi_recv;
    let mut want_order = true;
    let mut notes_rma = if s.rma {
        String::new()
    } else {
        "disabled by GEX_OFI_RMA=0".to_string()
    };
    let mut notes_multi = if s.multi_recv {
        String::new()
    } else {
        "disabled by GEX_OFI_MULTI_RECV=0".to_string()
    };
    loop {
        let hints = Hints {
            provider: s.provider.clone(),
            caps: flags::MSG
                | if want_rma { rma_caps } else { 0 }
                | if want_atomic { flags::ATOMIC } else { 0 }
                | if want_multi { flags::MULTI_RECV } else { 0 },
            mr_mode: flags::MR_LOCAL
                | flags::MR_VIRT_ADDR
                | flags::MR_ALLOCATED
                | flags::MR_PROV_KEY
                | flags::MR_ENDPOINT,
            mode: flags::CONTEXT | flags::CONTEXT2,
            msg_order: if want_order { flags::ORDER_SAS } else { 0 },
        };
        match InfoList::get(&hints) {
            Ok(list) => {
                let entries = list.entries();
                let pick = match &s.domain {
                    Some(d) => entries.iter().find(|e| {
                        let a = e.attrs();
                        &a.domain == d || &a.fabric == d
                    }),
                    // One host: keep the traffic on the loopback interface if offered.
                    None if single_host => entries
                        .iter()
                        .find(|e| e.attrs().domain == "lo")
                        .or(entries.first()),
                    // Several hosts: the loopback interface cannot reach the others.
                    None => entries
                        .iter()
                        .find(|e| !is_loopback(&e.attrs()))
                        .or(entries.first()),
                };
                let Some(pick) = pick else {
                    let offered: Vec<String> = entries
                        .iter()
                        .map(|e| {
                            let a = e.attrs();
                            format!("{} ({})", a.domain, a.fabric)
                        })
                        .collect();
                    return Err(conduit_err(format!(
                        "fi_getinfo(provider={}): no domain or fabric named {:?} (GEX_OFI_DOMAIN); offered: {}",
                        s.provider_shown,
                        s.domain.as_deref().unwrap_or(""),
                        offered.join(", ")
                    )));
                };
                let attrs = pick.attrs();
                return Ok(Chosen {
                    info: pick.dup(),
                    multi_recv: if want_multi { Ok(()) } else { Err(notes_multi) },
                    rma: if want_rma { Ok(()) } else { Err(notes_rma) },
                    atomics: if want_atomic {
                        Ok(())
                    } else {
                        Err(notes_atomic)
                    },
                    ordered: want_order,
                    attrs,
                });
            }
            Err(Errno::NODATA) if want_atomic => {
                want_atomic = false;
                notes_atomic = "provider does not offer FI_ATOMIC with FI_MSG and FI_RMA".into();
            }
            Err(Errno::NODATA) if want_rma => {
                want_rma = false;
                notes_rma = "provider does not offer FI_RMA with FI_MSG".into();
            }
            Err(Errno::NODATA) if want_multi => {
                want_multi = false;
                notes_multi = "provider does not offer FI_MULTI_RECV".into();
            }
            Err(Errno::NODATA) if want_order => want_order = false,
            Err(e) => {
                let mut msg = format!(
                    "fi_getinfo(provider={}, FI_EP_RDM, FI_MSG): {e}",
                    s.provider_shown
                );
                if e == Errno::NODATA {
                    msg.push_str(
                        " (no such provider offers RDM endpoints here; `fi_info -t FI_EP_RDM` lists those that do; set GEX_OFI_PROVIDER)",
                    );
                }
                if let Ok(fp) = std::env::var("FI_PROVIDER") {
                    msg.push_str(&format!(
                        " [libfabric's FI_PROVIDER={fp} also filters providers]"
                    ));
                }
                return Err(conduit_err(msg));
            }
        }
    }
}

/// Whether a job is hybrid: `setting` is `GEX_OFI_HYBRID` (`None` = auto), `hosts` the
/// number of distinct hosts, `crowded` whether some host has several ranks.
fn hybrid_mode(setting: Option<bool>, hosts: usize, crowded: bool) -> bool {
    match setting {
        Some(false) => false,
        Some(true) => crowded,
        None => hosts > 1 && crowded,
    }
}

/// Whether an offer is the loopback interface (tcp names it domain `lo`, fabric
/// `127.0.0.0/8` or `::1/128`).
fn is_loopback(a: &crate::fabric::Attrs) -> bool {
    a.domain == "lo" || a.fabric.starts_with("127.") || a.fabric.starts_with("::1/")
}

// ---------------------------------------------------------------------------------------
// The conduit

/// A peer endpoint's segment as published at open: the address its offset 0 has in RMA
/// operations (its virtual address under `FI_MR_VIRT_ADDR`, else 0), length and the key
/// of its registration in its own domain (the domain of the endpoint RMA targets).
#[derive(Clone, Copy, Debug)]
struct RemoteSeg {
    base: u64,
    #[allow(dead_code)] // ranges are checked by the caller (gex-rma); kept for diagnostics
    len: usize,
    key: u64,
}

/// Counters of one endpoint's native operations (written only by the thread driving
/// that endpoint; read by [`Ofi::stats`]). A cache line each, so that endpoints driven
/// by different threads do not share one.
#[derive(Debug, Default)]
#[repr(align(64))]
struct EpCounters {
    puts: AtomicU64,
    relaxed_puts: AtomicU64,
    flushes: AtomicU64,
    gets: AtomicU64,
    put_bytes: AtomicU64,
    get_bytes: AtomicU64,
    atomics: AtomicU64,
    shm_sent: AtomicU64,
    net_sent: AtomicU64,
    shm_recv: AtomicU64,
    net_recv: AtomicU64,
}

impl EpCounters {
    /// Adds `n` to a counter (single writer: a load and a store suffice).
    #[inline(always)]
    fn bump(c: &AtomicU64, n: u64) {
        c.store(c.load(Ordering::Relaxed) + n, Ordering::Relaxed);
    }

    /// Adds one operation of `len` bytes (single writer: a load and a store suffice).
    #[inline(always)]
    fn add(ops: &AtomicU64, bytes: &AtomicU64, len: usize) {
        ops.store(ops.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        bytes.store(
            bytes.load(Ordering::Relaxed) + len as u64,
            Ordering::Relaxed,
        );
    }
}

/// Native RMA operations this rank's endpoints started (see [`Ofi::stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OfiStats {
    /// `fi_writemsg` calls accepted by the provider (native puts).
    pub native_puts: u64,
    /// `fi_read` calls accepted by the provider (native gets).
    pub native_gets: u64,
    /// Those of `native_puts` posted transmit-complete (implicit-event puts, completed
    /// at the target by a flush; see docs/ofi.md, "Relaxed puts").
    pub native_relaxed_puts: u64,
    /// Flushes posted: one ordered `fi_read` per destination with relaxed puts, at a sync.
    pub native_flushes: u64,
    /// Bytes of those puts.
    pub native_put_bytes: u64,
    /// Bytes of those gets.
    pub native_get_bytes: u64,
    /// Native atomics (`fi_atomic`, `fi_fetch_atomic`, `fi_compare_atomic`) accepted.
    pub native_atomics: u64,
    /// AM requests sent to ranks of this host through the shared-memory rings (hybrid
    /// jobs; replies are not counted here).
    pub shm_am_requests: u64,
    /// AM requests sent through libfabric.
    pub net_am_requests: u64,
    /// AMs (requests and replies) delivered from the shared-memory rings.
    pub shm_am_delivered: u64,
    /// AMs (requests and replies) delivered from libfabric.
    pub net_am_delivered: u64,
    /// Native operations whose local buffer lies outside the memory registered at open
    /// and that used a registration already in the cache (a client region's, or one an
    /// operation on the same buffer still in flight made). Only under `FI_MR_LOCAL`
    /// (the provider's, or `GEX_OFI_MR_LOCAL=1`).
    pub mr_cache_hits: u64,
    /// Client regions ([`Ofi::register`]) registered by an endpoint at its first
    /// operation from them, or again after an eviction (cache misses).
    pub mr_region_registrations: u64,
    /// Registrations made for one operation (its local buffer in no segment, pool or
    /// client region), closed when its last user completes.
    pub mr_op_registrations: u64,
    /// Idle client-region registrations closed to stay within
    /// `GEX_OFI_MR_CACHE_ENTRIES` / `GEX_OFI_MR_CACHE_BYTES`.
    pub mr_evictions: u64,
    /// Registrations of the two kinds above closed so far (completion, eviction, region
    /// dropped, endpoint closed): equal to their sum once every endpoint has closed.
    pub mr_closed: u64,
    /// On-demand registrations that failed (the operation took gex-rma's AM path).
    pub mr_failures: u64,
}

/// The libfabric conduit. See the [crate documentation](crate).
#[derive(Debug)]
pub struct Ofi {
    report: OfiReport,
    segs: Vec<Mem>,
    seg_len: usize,
    remote: Vec<Option<RemoteSeg>>,
    counters: Vec<EpCounters>,
    /// Per endpoint: counters of its registrations of local buffers (shared with its
    /// cache, which outlives the endpoint in a grave).
    mr_counters: Vec<Arc<MrCounters>>,
    /// Client regions ([`Ofi::register`]).
    regions: Arc<Registry>,
    // Closed last: every domain (one per endpoint) is closed by then.
    _fabric: Fabric,
    _info: Info,
    /// Hybrid jobs: the node-local shared memory (owns the segments' memory, which
    /// stays mapped until every endpoint, and so every registration, is closed).
    smp: Option<Arc<Smp>>,
    /// Network resources of dropped endpoints, served by `finalize` and closed after
    /// its barrier (or when the conduit is dropped without it). Declared last but
    /// emptied by `finalize`; see the `Drop` of [`Ofi`] for the case without it.
    graves: Mutex<Vec<Grave>>,
}

impl Drop for Ofi {
    fn drop(&mut self) {
        // Close the endpoints before the segments they registered are freed.
        self.graves
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }
}

impl Ofi {
    /// What was opened and which path each operation uses, with reasons.
    pub fn report(&self) -> &OfiReport {
        &self.report
    }

    /// Native RMA operations started so far by this rank's endpoints (summed), e.g. to
    /// check that puts took the `FI_RMA` path rather than gex-rma's AM reference path.
    pub fn stats(&self) -> OfiStats {
        let mut s = OfiStats::default();
        for c in &self.counters {
            s.native_puts += c.puts.load(Ordering::Relaxed);
            s.native_relaxed_puts += c.relaxed_puts.load(Ordering::Relaxed);
            s.native_flushes += c.flushes.load(Ordering::Relaxed);
            s.native_gets += c.gets.load(Ordering::Relaxed);
            s.native_put_bytes += c.put_bytes.load(Ordering::Relaxed);
            s.native_get_bytes += c.get_bytes.load(Ordering::Relaxed);
            s.native_atomics += c.atomics.load(Ordering::Relaxed);
            s.shm_am_requests += c.shm_sent.load(Ordering::Relaxed);
            s.net_am_requests += c.net_sent.load(Ordering::Relaxed);
            s.shm_am_delivered += c.shm_recv.load(Ordering::Relaxed);
            s.net_am_delivered += c.net_recv.load(Ordering::Relaxed);
        }
        for c in &self.mr_counters {
            s.mr_cache_hits += c.hits.load(Ordering::Relaxed);
            s.mr_region_registrations += c.region_regs.load(Ordering::Relaxed);
            s.mr_op_registrations += c.op_regs.load(Ordering::Relaxed);
            s.mr_evictions += c.evictions.load(Ordering::Relaxed);
            s.mr_closed += c.closed.load(Ordering::Relaxed);
            s.mr_failures += c.failures.load(Ordering::Relaxed);
        }
        s
    }

    /// Registers `buf` for native RMA and atomics for as long as the returned guard
    /// lives (a *client region*; see [`MemRegion`]): use the guard (it derefs to the
    /// slice) as the local buffer of puts, gets and VIS transfers. Where the provider
    /// requires `FI_MR_LOCAL`, each endpoint registers the region in its own domain at
    /// its first operation from it and keeps the registration in its cache, so later
    /// transfers from the region need no registration (a buffer outside the segments
    /// and every region is registered for each operation instead). Elsewhere it costs
    /// nothing. Regions of one conduit never overlap (each borrows its memory).
    ///
    /// Registration itself is lazy (a libfabric domain belongs to the thread driving
    /// its endpoint): a failure shows at the first transfer, which then takes gex-rma's
    /// AM path and is counted in [`OfiStats::mr_failures`].
    pub fn register<'a, T>(&self, buf: &'a mut [T]) -> MemRegion<'a, T> {
        self.regions.add(buf)
    }

    /// Whether `rank` is reached through shared memory (hybrid jobs: a rank of this host).
    #[inline(always)]
    fn near(&self, rank: u32) -> bool {
        self.smp.as_ref().is_some_and(|s| s.is_neighbour(rank))
    }

    /// Whether this is a hybrid job: ranks of this host talk through shared memory.
    pub fn is_hybrid(&self) -> bool {
        self.smp.is_some()
    }

    /// The ranks this rank reaches through shared memory (this rank included): the
    /// ranks of its host in a hybrid job, else none.
    pub fn shared_memory_peers(&self) -> &[u32] {
        self.smp.as_ref().map_or(&[], |s| s.neighbours())
    }
}

/// Native RMA slots per endpoint: operations in flight, or complete and not yet
/// reported by `native_test`.
const RMA_SLOTS: usize = 1024;

/// Native RMA state of one endpoint: a fixed table of slots, each with an
/// `fi_context2` handed to libfabric; a ticket is `generation << 32 | slot`.
#[derive(Debug)]
struct Rma {
    /// `FI_RMA` granted and wired (and not disabled by `GEX_OFI_RMA=0`).
    on: bool,
    ctx: Mem,
    /// Per slot: generation (bumped when the slot is freed) and state.
    epoch: Vec<u32>,
    state: Vec<u8>,
    free: Vec<u32>,
    /// Per slot: the tag of the registration its local buffer uses (see
    /// `MrCache::acquire`; 0: none to release).
    tag: Vec<u32>,
    /// Per slot: where a fetching atomic's old value goes (copied from the slot's
    /// result word by `native_test`), or null.
    res: Vec<*mut u64>,
    /// `FI_ATOMIC` granted.
    atomics: bool,
    /// Relaxed puts (`native_put_relaxed`) of up to this many bytes are posted
    /// transmit-complete and completed at the target by a flush; 0: never (every put
    /// asks for `FI_DELIVERY_COMPLETE`).
    relaxed_max: usize,
    /// Per peer endpoint (global index): relaxed puts posted since its last flush.
    unflushed: Vec<bool>,
    /// Per slot: an atomic's words: operand, compare value, and the result the provider
    /// writes (registered under `FI_MR_LOCAL`, descriptor `words_desc`).
    words: Mem,
    words_desc: Desc,
}

const SLOT_FREE: u8 = 0;
const SLOT_PENDING: u8 = 1;
const SLOT_DONE: u8 = 2;

impl Rma {
    fn new(on: bool, atomics: bool, relaxed_max: usize, peers: usize) -> Result<Rma, InitError> {
        let n = if on { RMA_SLOTS } else { 0 };
        Ok(Rma {
            atomics: on && atomics,
            relaxed_max: if on { relaxed_max } else { 0 },
            unflushed: vec![false; if on { peers } else { 0 }],
            words: Mem::new(n * 24)?,
            words_desc: Desc::NONE,
            on,
            ctx: Mem::new(n * flags::CONTEXT_BYTES)?,
            epoch: vec![0; n],
            state: vec![SLOT_FREE; n],
            free: (0..n as u32).rev().collect(),
            tag: vec![0; n],
            res: vec![std::ptr::null_mut(); n],
        })
    }
    #[inline(always)]
    fn ctx(&self, i: usize) -> *mut std::ffi::c_void {
        debug_assert!(i < self.state.len());
        // SAFETY: i < slots: inside the context array.
        unsafe { self.ctx.base().add(i * flags::CONTEXT_BYTES) }.cast()
    }
    /// The slot of a context pointer, if it is one of the table's.
    #[inline(always)]
    fn index_of(&self, ctx: *mut std::ffi::c_void) -> Option<usize> {
        let off = (ctx as usize).checked_sub(self.ctx.base() as usize)?;
        (off < self.state.len() * flags::CONTEXT_BYTES && off % flags::CONTEXT_BYTES == 0)
            .then_some(off / flags::CONTEXT_BYTES)
    }
    /// Slot `i`'s words: operand, compare value, discarded result.
    #[inline(always)]
    fn words(&self, i: usize) -> *mut u64 {
        debug_assert!(i < self.state.len());
        // SAFETY: i < slots: inside the 24-byte-per-slot array (8-byte aligned: page
        // aligned base).
        unsafe { self.words.base().add(i * 24) }.cast()
    }
    /// Marks the operation of slot `i` complete; returns the tag of the registration
    /// it used, for `MrCache::release`.
    #[inline]
    fn completed(&mut self, i: usize) -> u32 {
        self.state[i] = SLOT_DONE;
        std::mem::take(&mut self.tag[i])
    }
}

/// libfabric objects of one endpoint, in closing order: the endpoint first, its domain
/// last (Rust drops fields in declaration order).
#[derive(Debug)]
struct Objects {
    ep: crate::fabric::Endpoint,
    /// Registrations of local RMA buffers made on demand (closed after the endpoint and
    /// before the domain), and the table of those made at open.
    cache: MrCache,
    /// Held only to be closed after the endpoint and before the domain.
    _mrs: Vec<Mr>,
    cq: Cq,
    av: Av,
    /// Closed last.
    domain: Domain,
}

/// Sending half of an endpoint (also the [`ReplyTx`] handed to handlers).
#[derive(Debug)]
struct Tx {
    h: EpHandle,
    rank: u32,
    index: u16,
    g_base: Vec<usize>,
    addrs: Vec<u64>,
    inject_max: usize,
    pool: Pool,
    free: Vec<u32>,
    credits: Credits,
    /// Replies that could not leave at once, per destination (FIFO).
    queued: Vec<VecDeque<Vec<u8>>>,
    nqueued: usize,
    /// Destinations that may be owed a credit-only message.
    due: Vec<usize>,
    in_due: Vec<bool>,
    scratch: Vec<u8>,
    fatal: Option<String>,
    who: Arc<str>,
    /// Progress passes in a row that found nothing (see [`PROBE_AFTER`]).
    idle: u32,
    /// Whether liveness probes are sent (not with `shm`: a dead peer's queue takes
    /// messages until it is full, and a full queue of a live peer that computes
    /// without polling would look the same).
    probing: bool,
    /// Per send buffer: 1 + the endpoint its pending liveness probe went to, or 0.
    probe_buf: Vec<u32>,
    /// Per endpoint: when its pending liveness probe was first tried, and whether the
    /// provider accepted it ([`Tx::probe`]).
    probe_since: Vec<Option<(Instant, bool)>>,
}

/// Receiving half of an endpoint.
#[derive(Debug)]
struct Rx {
    h: EpHandle,
    pool: Pool,
    multi: bool,
    repost: Vec<u32>,
    seg: *mut u8,
    seg_len: usize,
    g_base: Vec<usize>,
    eps: Vec<u16>,
    /// Completions read by `block` and not processed yet.
    stash: VecDeque<Completion>,
    /// Where `poll` reads completions (kept here: not re-initialised on every poll).
    comps: [Completion; CQ_BATCH],
    hellos: usize,
}

/// An ofi endpoint: its own libfabric domain, endpoint, completion queue and address
/// vector (a communication domain in the sense of seed 002).
#[derive(Debug)]
pub struct OfiEp {
    // The libfabric objects and the buffers they may still reference are not dropped
    // with the endpoint: `Drop` moves them, in this order (endpoint first), into a
    // [`Grave`] that the conduit serves until `Conduit::finalize` and then closes.
    objs: ManuallyDrop<Objects>,
    tx: ManuallyDrop<Tx>,
    rx: ManuallyDrop<Rx>,
    rma: ManuallyDrop<Rma>,
    index: EpIndex,
    limits: Limits,
    caps: Capabilities,
    /// Hybrid jobs: the shared-memory endpoint serving the ranks of this host.
    near: Option<SmpEp>,
    /// Polls left before the next completion-queue read (hybrid jobs; see `poll`).
    net_countdown: u32,
    /// Current interval between completion-queue reads (hybrid jobs).
    net_interval: u32,
    /// Whether the last progress pass found completions.
    net_seen: bool,
    conduit: Arc<Ofi>,
}

// SAFETY: `rx.seg` points into a segment owned by `conduit` (kept alive by the Arc);
// every other raw pointer is owned by this endpoint, which one thread drives at a time.
unsafe impl Send for OfiEp {}

impl Tx {
    #[inline(always)]
    fn g(&self, dst: EpAddr) -> usize {
        self.g_base[dst.rank as usize] + dst.ep as usize
    }

    #[cold]
    fn fail(&mut self, what: String, e: Errno) -> ConduitError {
        let msg = format!("{}: {what}: {e}", self.who);
        if self.fatal.is_none() {
            self.fatal = Some(msg.clone());
        }
        ConduitError::Network(msg)
    }

    /// Sends one message of `len` bytes built by `build` to `g`, with the credits owed
    /// to `g`. `Ok(false)`: no resources now (nothing sent, nothing changed).
    #[inline]
    fn send_now(
        &mut self,
        g: usize,
        len: usize,
        build: impl FnOnce(&mut [u8]),
    ) -> Result<bool, ConduitError> {
        let credits = self.credits.returnable(g);
        if len <= self.inject_max {
            let mut s = std::mem::take(&mut self.scratch);
            s.resize(len, 0);
            build(&mut s);
            wire::set_credits(&mut s, credits);
            let r = self.h.inject(&s, self.addrs[g]);
            self.scratch = s;
            return match r {
                Ok(()) => {
                    self.credits.sent_back(g, credits);
                    Ok(true)
                }
                Err(Errno::AGAIN) => Ok(false),
                Err(e) => Err(self.fail(format!("fi_inject of {len} bytes to endpoint {g}"), e)),
            };
        }
        let Some(i) = self.free.pop() else {
            return Ok(false);
        };
        let i = i as usize;
        let p = self.pool.buf(i);
        // SAFETY: a free buffer of `stride >= len` bytes that libfabric does not hold.
        let buf = unsafe { std::slice::from_raw_parts_mut(p, len) };
        build(buf);
        wire::set_credits(buf, credits);
        // SAFETY: the buffer and its context slot stay untouched (off the free list)
        // until the send completion is read in `poll` (module Safety section).
        let r = unsafe {
            self.h
                .send(p, len, self.pool.desc, self.addrs[g], self.pool.ctx(i))
        };
        match r {
            Ok(()) => {
                self.credits.sent_back(g, credits);
                Ok(true)
            }
            Err(Errno::AGAIN) => {
                self.free.push(i as u32);
                Ok(false)
            }
            Err(e) => {
                self.free.push(i as u32);
                Err(self.fail(format!("fi_send of {len} bytes to endpoint {g}"), e))
            }
        }
    }

    #[inline]
    fn send_msg(&mut self, g: usize, msg: &OutMsg<'_>) -> Result<bool, ConduitError> {
        let len = wire::wire_len(msg.category(), msg.args().len(), msg.payload().len());
        let (rank, index) = (self.rank, self.index);
        self.send_now(g, len, |b| {
            wire::encode(
                b,
                rank,
                index,
                msg.handler(),
                msg.kind(),
                msg.category(),
                msg.args(),
                msg.payload(),
                msg.offset(),
            )
        })
    }

    /// Sends queued replies, oldest first, while resources last.
    #[cold]
    fn flush(&mut self) -> Result<(), ConduitError> {
        for g in 0..self.queued.len() {
            while let Some(m) = self.queued[g].pop_front() {
                self.credits.release(g);
                let r = self.send_now(g, m.len(), |b| b.copy_from_slice(&m));
                match r {
                    Ok(true) => self.nqueued -= 1,
                    Ok(false) => {
                        self.credits.hold(g);
                        self.queued[g].push_front(m);
                        break;
                    }
                    Err(e) => {
                        self.credits.hold(g);
                        self.queued[g].push_front(m);
                        return Err(e);
                    }
                }
            }
        }
        Ok(())
    }

    #[inline(always)]
    fn mark_due(&mut self, g: usize) {
        if !self.in_due[g] {
            self.in_due[g] = true;
            self.due.push(g);
        }
    }

    /// Liveness probe of the peers this endpoint waits on -- those it has requests
    /// outstanding to (not all credits came back). A peer's process that dies is not
    /// reported to a rank that only waits: tcp;ofi_rxm sees the connection close, then
    /// retries connecting in silence, holding every later send. So each such peer gets
    /// a credit-only message sent with `fi_send` (a completion, unlike `fi_inject`); its
    /// send completion clears the probe ([`Tx::sent`]). With the job's credit window the
    /// data in flight to a peer stays far below a socket's buffer, so a live peer's
    /// probe completes locally even if it does not poll; a probe still pending, or
    /// still refused with `-FI_EAGAIN`, after [`PROBE_DEADLINE`] (or one that completes
    /// in error) means the peer is gone.
    #[cold]
    fn probe(&mut self, own: usize) -> Result<(), ConduitError> {
        for g in 0..self.queued.len() {
            if g == own {
                continue;
            }
            if !self.credits.outstanding(g) {
                // Not waited on any more: forget a probe the provider never took (one
                // in flight clears itself when it completes).
                if matches!(self.probe_since[g], Some((_, false))) {
                    self.probe_since[g] = None;
                }
                continue;
            }
            if let Some((t, in_flight)) = self.probe_since[g] {
                if t.elapsed() > PROBE_DEADLINE {
                    let msg = format!(
                        "{}: endpoint {g} is unreachable: a liveness probe first tried {:?} ago has not completed while requests to it are outstanding (its process may have exited; the provider retries the connection in silence)",
                        self.who,
                        t.elapsed()
                    );
                    self.fatal.get_or_insert(msg.clone());
                    return Err(ConduitError::Network(msg));
                }
                if in_flight {
                    continue;
                }
            }
            // No buffer free now: the next probe tries again.
            let Some(i) = self.free.pop() else {
                return Ok(());
            };
            let i = i as usize;
            let credits = self.credits.returnable(g);
            let p = self.pool.buf(i);
            let mut h = [0u8; HEADER];
            wire::encode_credit(&mut h, self.rank, self.index, false);
            wire::set_credits(&mut h, credits);
            // SAFETY: a free buffer of `stride >= HEADER` bytes that libfabric does not
            // hold; it and its context slot stay off the free list until the send
            // completion is read (module Safety section).
            let r = unsafe {
                std::ptr::copy_nonoverlapping(h.as_ptr(), p, HEADER);
                self.h
                    .send(p, HEADER, self.pool.desc, self.addrs[g], self.pool.ctx(i))
            };
            match r {
                Ok(()) => {
                    self.credits.sent_back(g, credits);
                    self.probe_buf[i] = g as u32 + 1;
                    let t = self.probe_since[g].map_or_else(Instant::now, |(t, _)| t);
                    self.probe_since[g] = Some((t, true));
                }
                Err(Errno::AGAIN) => {
                    // ofi_rxm refuses sends while it (re)connects: keep trying, from the
                    // time of the first attempt.
                    self.free.push(i as u32);
                    if self.probe_since[g].is_none() {
                        self.probe_since[g] = Some((Instant::now(), false));
                    }
                }
                Err(e) => {
                    self.free.push(i as u32);
                    return Err(self.fail(format!("fi_send of a probe to endpoint {g}"), e));
                }
            }
        }
        Ok(())
    }

    /// Send buffer `i` completed: back on the free list (and its probe, if it carried
    /// one, answered).
    #[inline(always)]
    fn sent(&mut self, i: usize) {
        if self.probe_buf[i] != 0 {
            self.probe_since[self.probe_buf[i] as usize - 1] = None;
            self.probe_buf[i] = 0;
        }
        self.free.push(i as u32);
    }

    /// Sends credit-only messages where half a window is owed.
    fn return_credits(&mut self) -> Result<(), ConduitError> {
        let mut i = 0;
        while i < self.due.len() {
            let g = self.due[i];
            if self.credits.returnable(g) == 0 {
                self.in_due[g] = false;
                self.due.swap_remove(i);
                continue;
            }
            if self.credits.due(g) && self.queued[g].is_empty() {
                let (rank, index) = (self.rank, self.index);
                let sent = self.send_now(g, HEADER, |b| {
                    let mut h = [0u8; HEADER];
                    wire::encode_credit(&mut h, rank, index, false);
                    b.copy_from_slice(&h);
                })?;
                if sent {
                    self.in_due[g] = false;
                    self.due.swap_remove(i);
                    continue;
                }
            }
            i += 1;
        }
        Ok(())
    }
}

impl ReplyTx for Tx {
    #[inline]
    fn reply(&mut self, msg: &OutMsg<'_>) -> Result<(), ConduitError> {
        let dst = msg.dst();
        if let Some(f) = &self.fatal {
            return Err(ConduitError::Network(f.clone()));
        }
        let g = self.g(dst);
        if self.queued[g].is_empty() && self.send_msg(g, msg)? {
            return Ok(());
        }
        // No resources now: queue it (never block); bounded by the credit window.
        let mut v =
            vec![0u8; wire::wire_len(msg.category(), msg.args().len(), msg.payload().len())];
        wire::encode(
            &mut v,
            self.rank,
            self.index,
            msg.handler(),
            msg.kind(),
            msg.category(),
            msg.args(),
            msg.payload(),
            msg.offset(),
        );
        self.queued[g].push_back(v);
        self.nqueued += 1;
        self.credits.hold(g);
        Ok(())
    }
}

impl Rx {
    /// Posts receive buffer `i`; `Ok(false)` if the provider has no room now
    /// (`-FI_EAGAIN`, or `-FI_ENOMEM`, which libfabric 1.17's shm returns while its pool
    /// of receive entries is used up by unexpected messages): `poll` retries it.
    fn post(&mut self, i: usize) -> Result<bool, Errno> {
        // SAFETY: buffer i is not held by libfabric (never posted, or its message was
        // delivered); buffer and context live until the endpoint is closed.
        let r = unsafe {
            self.h.recv(
                self.pool.buf(i),
                self.pool.stride,
                self.pool.desc,
                self.pool.ctx(i),
                self.multi,
            )
        };
        match r {
            Ok(()) => Ok(true),
            Err(Errno::AGAIN | Errno::NOMEM) => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn repost_pending(&mut self) -> Result<(), Errno> {
        while let Some(&i) = self.repost.last() {
            if !self.post(i as usize)? {
                break;
            }
            self.repost.pop();
        }
        Ok(())
    }

    #[inline(always)]
    fn g_of(&self, rank: u32, ep: u16) -> Option<usize> {
        let r = rank as usize;
        (r < self.eps.len() && ep < self.eps[r]).then(|| self.g_base[r] + ep as usize)
    }
}

/// What a processed completion was.
enum Done {
    Nothing,
    Delivered,
}

/// Direction of a native RMA transfer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dir {
    /// Put: local buffer to the peer's segment.
    Write,
    /// Get: the peer's segment to a local buffer.
    Read,
}

impl OfiEp {
    /// The shared body of `native_put` (`Dir::Write`: `fi_writemsg` from `buf`) and
    /// `native_get` (`Dir::Read`: `fi_read` into `buf`): slot, remote address and key,
    /// the call, counters, and the answers documented on `native_put`.
    ///
    /// # Safety
    /// As `ConduitEp::native_put` (write: `buf` readable and unmodified until
    /// completion) or `native_get` (read: `buf` writable and untouched by others until
    /// completion).
    #[inline]
    unsafe fn native_rma(
        &mut self,
        dst: EpAddr,
        offset: usize,
        buf: *mut u8,
        len: usize,
        dir: Dir,
        delivery: bool,
    ) -> Result<Native, ConduitError> {
        if !self.rma.on {
            return Ok(Native::Unsupported);
        }
        if let Some(f) = &self.tx.fatal {
            return Err(ConduitError::Network(f.clone()));
        }
        if len == 0 {
            return Ok(Native::Done);
        }
        let g = self.tx.g(dst);
        let Some(Some(r)) = self.conduit.remote.get(g) else {
            return Ok(Native::Unsupported);
        };
        let (addr, key) = (r.base + offset as u64, r.key);
        let Some(slot) = self.rma.free.pop() else {
            return Ok(Native::WouldBlock);
        };
        // The local descriptor: registered at open, cached, or registered now (under
        // FI_MR_LOCAL); a registration that fails leaves the transfer to the AM path.
        let o = &mut *self.objs;
        let Some((desc, tag)) = o.cache.acquire(&o.domain, &o.ep, buf, len) else {
            self.rma.free.push(slot);
            return Ok(Native::Unsupported);
        };
        let i = slot as usize;
        let ctx = self.rma.ctx(i);
        let peer = self.tx.addrs[g];
        // SAFETY: `buf` stays valid (and, for a write, unmodified; for a read, untouched
        // by others) until completion (caller's contract); the context is slot `i`'s,
        // not reused before its completion is read and reported by `native_test`; the
        // remote range lies in `dst`'s registered segment (checked by the caller).
        let r = unsafe {
            match dir {
                Dir::Write => self
                    .tx
                    .h
                    .write(buf, len, desc, peer, addr, key, ctx, delivery),
                Dir::Read => self.tx.h.read(buf, len, desc, peer, addr, key, ctx),
            }
        };
        if r.is_ok() {
            self.rma.tag[i] = tag;
            let c = &self.conduit.counters[self.index as usize];
            match dir {
                Dir::Write => EpCounters::add(&c.puts, &c.put_bytes, len),
                Dir::Read => EpCounters::add(&c.gets, &c.get_bytes, len),
            }
            if !delivery {
                EpCounters::bump(&c.relaxed_puts, 1);
                self.rma.unflushed[g] = true;
            }
        } else {
            self.objs.cache.release(tag);
        }
        self.slot_posted(slot, r, || {
            let what = match dir {
                Dir::Write => "fi_writemsg to",
                Dir::Read => "fi_read from",
            };
            format!("{what} rank {} EP {} ({len} bytes)", dst.rank, dst.ep)
        })
    }

    /// The answer for the operation just posted in `slot` (result `r`): `Pending` with
    /// the slot's ticket, `WouldBlock` on `-FI_EAGAIN` (slot freed), else the fatal
    /// error naming `what()` (slot freed).
    #[inline]
    fn slot_posted(
        &mut self,
        slot: u32,
        r: Result<(), Errno>,
        what: impl FnOnce() -> String,
    ) -> Result<Native, ConduitError> {
        let i = slot as usize;
        match r {
            Ok(()) => {
                self.rma.state[i] = SLOT_PENDING;
                Ok(Native::Pending(
                    u64::from(self.rma.epoch[i]) << 32 | u64::from(slot),
                ))
            }
            Err(Errno::AGAIN) => {
                self.rma.free.push(slot);
                Ok(Native::WouldBlock)
            }
            Err(e) => {
                self.rma.free.push(slot);
                Err(self.tx.fail(what(), e))
            }
        }
    }

    /// The completion of native operation `i` was read: its slot is done and its
    /// registration released.
    #[inline]
    fn rma_completed(&mut self, i: usize) {
        let tag = self.rma.completed(i);
        self.objs.cache.release(tag);
    }

    #[cold]
    fn die(&mut self, what: String) -> ! {
        let msg = format!("{}: {what}", self.tx.who);
        self.tx.fatal.get_or_insert(msg.clone());
        // poll cannot return an error: end this rank with the reason; the launcher ends
        // the job (docs/ofi.md, "Faults").
        panic!("gex {msg}");
    }

    /// Processes one completion.
    #[inline]
    fn complete<D: Deliver>(&mut self, c: Completion, d: &mut D) -> Done {
        if let Some(i) = self.tx.pool.index_of(c.ctx) {
            self.tx.sent(i);
            return Done::Nothing;
        }
        if let Some(i) = self.rma.index_of(c.ctx) {
            self.rma_completed(i);
            return Done::Nothing;
        }
        let Some(i) = self.rx.pool.index_of(c.ctx) else {
            self.die(format!("completion with an unknown context {:p}", c.ctx));
        };
        let mut done = Done::Nothing;
        if c.flags & flags::RECV != 0 && c.len > 0 {
            let start = if self.rx.multi {
                c.buf.cast::<u8>()
            } else {
                self.rx.pool.buf(i)
            };
            let (lo, hi) = (
                self.rx.pool.buf(i) as usize,
                self.rx.pool.buf(i) as usize + self.rx.pool.stride,
            );
            if (start as usize) < lo || start as usize + c.len > hi {
                self.die(format!(
                    "a {}-byte message at {start:p} lies outside its receive buffer",
                    c.len
                ));
            }
            // SAFETY: inside receive buffer i (checked above), written by libfabric before
            // it reported the completion; not reposted until after delivery.
            let msg = unsafe { std::slice::from_raw_parts(start, c.len) };
            done = self.deliver(msg, d);
        }
        if !self.rx.multi || c.flags & flags::MULTI_RECV != 0 {
            match self.rx.post(i) {
                Ok(true) => {}
                Ok(false) => self.rx.repost.push(i as u32),
                Err(e) => self.die(format!("fi_recvmsg (repost): {e}")),
            }
        }
        done
    }

    #[inline]
    fn deliver<D: Deliver>(&mut self, msg: &[u8], d: &mut D) -> Done {
        let h = match wire::decode(msg, MAX_ARGS) {
            Ok(h) => h,
            Err(e) => {
                let from = match wire::claimed_source(msg) {
                    Some((r, ep)) => format!(" (claiming to come from rank {r} EP {ep})"),
                    None => String::new(),
                };
                self.die(format!("malformed message{from}: {e}"))
            }
        };
        let Some(g) = self.rx.g_of(h.src_rank, h.src_ep) else {
            self.die(format!(
                "message from a nonexistent endpoint (rank {}, EP {})",
                h.src_rank, h.src_ep
            ));
        };
        if h.credits > 0 {
            self.tx.credits.returned(g, h.credits);
        }
        let Some(category) = h.category else {
            if h.hello {
                self.rx.hellos += 1;
            }
            return Done::Nothing;
        };
        let mut argbuf = [0u32; 32];
        let args = wire::args(msg, &h, &mut argbuf);
        let body = &msg[h.payload_at()..];
        let payload: &[u8] = match category {
            Category::Short => &[],
            Category::Medium => body,
            Category::Long => {
                if h.offset
                    .checked_add(h.len)
                    .is_none_or(|e| e > self.rx.seg_len)
                {
                    self.die(format!(
                        "Long from rank {} EP {} outside the segment ([{}, +{}) of {})",
                        h.src_rank, h.src_ep, h.offset, h.len, self.rx.seg_len
                    ));
                }
                // SAFETY: in bounds of this endpoint's segment (checked); the source is a
                // receive buffer, distinct from segment memory.
                unsafe {
                    let dst = self.rx.seg.add(h.offset);
                    std::ptr::copy_nonoverlapping(body.as_ptr(), dst, h.len);
                }
                &[]
            }
        };
        if h.kind == Kind::Request {
            self.tx.credits.delivered(g);
            self.tx.mark_due(g);
        }
        let inc = Incoming {
            src: EpAddr::new(h.src_rank, h.src_ep),
            handler: h.handler,
            kind: h.kind,
            category,
            args,
            payload,
            offset: if category == Category::Long {
                h.offset
            } else {
                0
            },
            len: if category == Category::Long { h.len } else { 0 },
        };
        d.deliver(&inc, &mut *self.tx);
        Done::Delivered
    }

    /// Reads and processes completions; returns messages delivered.
    fn progress<D: Deliver>(&mut self, d: &mut D, budget: usize) -> usize {
        if let Some(f) = self.tx.fatal.clone() {
            panic!("gex {f}");
        }
        if self.tx.nqueued > 0 {
            if let Err(e) = self.tx.flush() {
                self.die(format!("sending a queued reply: {e}"));
            }
        }
        if !self.rx.repost.is_empty() {
            if let Err(e) = self.rx.repost_pending() {
                self.die(format!("fi_recvmsg (repost): {e}"));
            }
        }
        let mut n = 0;
        let mut seen = !self.rx.stash.is_empty();
        while let Some(c) = self.rx.stash.pop_front() {
            if let Done::Delivered = self.complete(c, d) {
                n += 1;
            }
        }
        while n < budget {
            let k = match self.objs.cq.read(&mut self.rx.comps) {
                Ok(0) => break,
                Ok(k) => k,
                Err(Errno::AVAIL) => {
                    let e = match self.objs.cq.read_error() {
                        Ok(e) => e,
                        Err(e) => self.die(format!("fi_cq_readerr: {e}")),
                    };
                    let what = if self.tx.pool.index_of(e.ctx).is_some() {
                        "send"
                    } else if self.rma.index_of(e.ctx).is_some() {
                        "native RMA or atomic"
                    } else if e.flags & flags::RECV != 0 {
                        "receive"
                    } else {
                        "operation"
                    };
                    self.die(format!(
                        "{what} completed in error: {} (a peer may have exited)",
                        e.text
                    ));
                }
                Err(e) => self.die(format!("fi_cq_read: {e}")),
            };
            seen |= k > 0;
            for j in 0..k {
                let c = self.rx.comps[j];
                if let Done::Delivered = self.complete(c, d) {
                    n += 1;
                }
            }
            // A short batch drained the queue. Reading again would cost a whole provider
            // progress pass (tcp: a poll(2) over every socket plus the read of its
            // signal fd) between a reply's arrival and the caller seeing it: on the
            // round trip's critical path.
            if k < CQ_BATCH {
                break;
            }
        }
        if !self.tx.due.is_empty() {
            if let Err(e) = self.tx.return_credits() {
                self.die(format!("returning credits: {e}"));
            }
        }
        self.net_seen = seen;
        if seen {
            self.tx.idle = 0;
        } else if self.tx.probing {
            self.tx.idle += 1;
            if self.tx.idle >= PROBE_AFTER {
                self.idle_probe();
            }
        }
        n
    }

    /// Injects a request through libfabric (credits, then `fi_inject` or `fi_send`).
    #[inline]
    fn inject_net(&mut self, dst: EpAddr, msg: &OutMsg<'_>) -> Result<Injected, ConduitError> {
        if let Some(f) = &self.tx.fatal {
            return Err(ConduitError::Network(f.clone()));
        }
        if self.tx.nqueued > 0 {
            self.tx.flush()?;
        }
        let g = self.tx.g(dst);
        if !self.tx.queued[g].is_empty() || !self.tx.credits.take(g) {
            return Ok(Injected::WouldBlock);
        }
        match self.tx.send_msg(g, msg) {
            Ok(true) => Ok(Injected::Sent),
            Ok(false) => {
                self.tx.credits.untake(g);
                Ok(Injected::WouldBlock)
            }
            Err(e) => {
                self.tx.credits.untake(g);
                Err(e)
            }
        }
    }

    /// Whether network operations of this endpoint are in flight, whose completions
    /// only a CQ read collects: send buffers, native RMA and atomics, queued replies,
    /// receive buffers to repost, stashed completions.
    #[inline(always)]
    fn net_busy(&self) -> bool {
        self.tx.free.len() < SEND_BUFS
            || self.rma.free.len() < self.rma.state.len()
            || self.tx.nqueued > 0
            || !self.rx.repost.is_empty()
            || !self.rx.stash.is_empty()
    }

    #[cold]
    fn idle_probe(&mut self) {
        self.tx.idle = 0;
        let own = self.tx.g(EpAddr::new(self.tx.rank, self.index));
        if let Err(e) = self.tx.probe(own) {
            let msg = match e {
                ConduitError::Network(m) => m,
                e => format!("{}: probing a silent peer: {e}", self.tx.who),
            };
            self.tx.fatal.get_or_insert(msg.clone());
            panic!("gex {msg}");
        }
    }
}

// ---------------------------------------------------------------------------------------
// Closing

/// How long `finalize` waits for a closed endpoint's own operations (sends, native RMA)
/// to complete before it joins the job-wide barrier anyway.
const DRAIN_LIMIT: Duration = Duration::from_secs(30);

/// The network resources of a dropped endpoint. Peers may still be completing
/// operations on it (a get from its segment, an AM to it, the last message of a
/// barrier) and its own sends and native RMA may still be in flight: closing it at
/// once would cancel them (with tcp;ofi_rxm the peer sees `Operation canceled` on a
/// reset connection). So `OfiEp::drop` moves them here, `Ofi::finalize` serves them
/// (a thread reads their completion queues and reposts receive buffers) until the
/// job-wide barrier has passed, and only then are they closed. Messages that arrive
/// here are dropped: their endpoint is gone.
#[derive(Debug)]
struct Grave {
    // Field order is drop order: libfabric objects (endpoint first) before the
    // buffers they may still reference.
    objs: Objects,
    tx: Tx,
    rx: Rx,
    rma: Rma,
}

// SAFETY: the raw pointers inside (libfabric handles, receive buffers, the segment
// pointer of `rx`) are owned by the grave or by the conduit that owns the grave; one
// thread at a time serves a grave (the endpoint's, then `finalize`'s).
unsafe impl Send for Grave {}

impl Grave {
    /// Whether this endpoint's own sends or native operations are still in flight.
    fn busy(&self) -> bool {
        self.tx.free.len() < SEND_BUFS || self.rma.state.contains(&SLOT_PENDING)
    }

    /// One pass over the completion queue: completions are recorded, messages
    /// dropped, receive buffers reposted, errors (peers that closed first) ignored.
    /// Returns the completions seen.
    fn serve(&mut self) -> usize {
        let _ = self.rx.repost_pending();
        let mut seen = 0;
        loop {
            let k = match self.objs.cq.read(&mut self.rx.comps) {
                Ok(k) => k,
                Err(Errno::AVAIL) => {
                    if let Ok(e) = self.objs.cq.read_error() {
                        self.complete(e.ctx, e.flags, true);
                    }
                    seen += 1;
                    continue;
                }
                Err(_) => 0,
            };
            for j in 0..k {
                let c = self.rx.comps[j];
                self.complete(c.ctx, c.flags, false);
            }
            seen += k;
            if k < CQ_BATCH {
                return seen;
            }
        }
    }

    fn complete(&mut self, ctx: *mut std::ffi::c_void, fl: u64, error: bool) {
        if let Some(i) = self.tx.pool.index_of(ctx) {
            self.tx.sent(i);
        } else if let Some(i) = self.rma.index_of(ctx) {
            let tag = self.rma.completed(i);
            self.objs.cache.release(tag);
        } else if let Some(i) = self.rx.pool.index_of(ctx) {
            // A canceled receive is not reposted: its endpoint is being torn down.
            if !error && (!self.rx.multi || fl & flags::MULTI_RECV != 0) {
                match self.rx.post(i) {
                    Ok(true) => {}
                    _ => self.rx.repost.push(i as u32),
                }
            }
        }
    }
}

impl Drop for OfiEp {
    fn drop(&mut self) {
        // SAFETY: each field is taken exactly once, here, and never used again: the
        // endpoint is being dropped and no other code runs on it after `drop`.
        let grave = unsafe {
            Grave {
                objs: ManuallyDrop::take(&mut self.objs),
                tx: ManuallyDrop::take(&mut self.tx),
                rx: ManuallyDrop::take(&mut self.rx),
                rma: ManuallyDrop::take(&mut self.rma),
            }
        };
        self.conduit
            .graves
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(grave);
    }
}

/// A [`Deliver`] for the wire-up in `open`, where only hello messages may arrive.
struct NoDeliver;
impl Deliver for NoDeliver {
    fn deliver(&mut self, msg: &Incoming<'_>, _tx: &mut dyn ReplyTx) {
        panic!(
            "gex ofi: an active message from {} arrived during initialisation",
            msg.src
        );
    }
}

fn fi_init(prov: &str, what: String, e: Errno) -> InitError {
    conduit_err(format!("{prov}: {what}: {e}"))
}

impl Conduit for Ofi {
    type Ep = OfiEp;
    const NAME: &'static str = "ofi";

    /// Serves the libfabric objects of the dropped endpoints from a thread while this
    /// rank first waits for its own operations to complete (at most 30 s) and then
    /// runs the job-wide `barrier`; closes them once it has returned (docs/ofi.md,
    /// "Closing").
    fn finalize(
        &self,
        barrier: &mut dyn FnMut() -> Result<(), gex_core::boot::BootError>,
    ) -> Result<(), gex_core::boot::BootError> {
        let mut graves =
            std::mem::take(&mut *self.graves.lock().unwrap_or_else(|e| e.into_inner()));
        if graves.is_empty() {
            return barrier();
        }
        let who = graves[0].tx.who.clone();
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let (drained, is_drained) = std::sync::mpsc::channel::<()>();
        let r = std::thread::scope(|s| {
            let graves = &mut graves;
            s.spawn(move || {
                let mut drained = Some(drained);
                while let Err(std::sync::mpsc::TryRecvError::Empty) = stopped.try_recv() {
                    let seen: usize = graves.iter_mut().map(Grave::serve).sum();
                    if drained.is_some() && !graves.iter().any(Grave::busy) {
                        drained.take();
                    }
                    if seen == 0 {
                        std::thread::sleep(Duration::from_micros(50));
                    }
                }
            });
            // The sender is dropped (and `recv_timeout` returns) once nothing of this
            // rank's is in flight.
            if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                is_drained.recv_timeout(DRAIN_LIMIT)
            {
                eprintln!(
                    "gex {who}: operations of closed endpoints still in flight after {DRAIN_LIMIT:?}; finalising anyway"
                );
            }
            let r = barrier();
            drop(stop);
            r
        });
        drop(graves);
        r
    }

    fn open(
        boot: &mut dyn Bootstrap,
        params: &OpenParams<'_>,
    ) -> Result<(Arc<Ofi>, Vec<OfiEp>), InitError> {
        let jl = params.layout;
        let n = jl.size() as usize;
        let rank = params.rank as usize;
        let s = settings(params)?;
        let single_host = jl.host.iter().all(|&h| h == jl.host[0]);
        let chosen = choose(&s, single_host)?;
        let a = chosen.attrs.clone();
        let prov = a.provider.clone();
        let hosts = {
            let mut h = jl.host.clone();
            h.sort_unstable();
            h.dedup();
            h.len()
        };
        if hosts > 1 && s.domain.is_none() && is_loopback(&a) {
            return Err(conduit_err(format!(
                "{prov}: fi_getinfo offers only the loopback interface (domain {}, fabric {}) but this job spans {hosts} hosts, which it cannot reach: bring a network interface up (with carrier) or name one with GEX_OFI_DOMAIN or FI_TCP_IFACE",
                a.domain, a.fabric
            )));
        }
        if hosts > 1 && prov == "shm" {
            return Err(conduit_err(format!(
                "shm: fi_getinfo chose the shm provider, which reaches only processes of one host, but this job spans {hosts} hosts: choose a network provider (GEX_OFI_PROVIDER)"
            )));
        }
        // Hybrid: shared memory between the ranks of a host (decided identically on
        // every rank from the layout and GEX_OFI_HYBRID, which is checked to agree).
        let crowded = (0..n as u32).any(|r| jl.neighbours(r).len() > 1);
        let hybrid = hybrid_mode(s.hybrid, hosts, crowded);
        let votes = boot.exchange(&[u8::from(hybrid)])?;
        if let Some(r) = votes
            .iter()
            .position(|v| v.as_slice() != [u8::from(hybrid)])
        {
            return Err(conduit_err(format!(
                "rank {r} and rank {rank} disagree on the hybrid mode (GEX_OFI_HYBRID must be the same on every rank)"
            )));
        }
        let (smp, mut near_eps) = if hybrid {
            // The doorbells are armed as the smp conduit arms them (senders check for
            // sleepers only when the policy may block): `block` naps on them.
            let p = OpenParams {
                rank: params.rank,
                layout: jl,
                wait: params.wait,
                config: params.config,
                context: None,
            };
            let (smp, eps) = gex_conduit_smp::node::open(boot, &p)?;
            (Some(smp), eps.into_iter().map(Some).collect::<Vec<_>>())
        } else {
            (None, Vec::new())
        };
        let fab = Fabric::open(&chosen.info)
            .map_err(|e| fi_init(&prov, format!("fi_fabric({})", a.fabric), e))?;
        // FI_MR_LOCAL: the provider's, or GEX_OFI_MR_LOCAL=1 (testing aid: descriptors
        // are passed and local buffers registered although the provider does not ask).
        let mr_local = a.mr_mode & flags::MR_LOCAL != 0 || s.force_mr_local;
        let mr_endpoint = a.mr_mode & flags::MR_ENDPOINT != 0;
        let virt_addr = a.mr_mode & flags::MR_VIRT_ADDR != 0;
        let multi = chosen.multi_recv.is_ok();
        let rma = chosen.rma.is_ok();
        let atomics = rma && chosen.atomics.is_ok();
        let relaxed = relaxed_limit(rma, s.relaxed_puts, &a);
        let relaxed_max = relaxed.as_ref().map_or(0, |&m| m);

        let mut g_base = Vec::with_capacity(n);
        let mut total = 0usize;
        for &e in &jl.eps {
            g_base.push(total);
            total += e as usize;
        }
        let my_eps = jl.eps[rank] as usize;
        let regions = Arc::new(Registry::default());
        let mr_counters: Vec<Arc<MrCounters>> = (0..my_eps)
            .map(|_| Arc::new(MrCounters::default()))
            .collect();
        let seg_len = jl.seg_len[rank];
        let wire_max = wire::wire_len(Category::Long, MAX_ARGS, s.max_medium);
        if wire_max > a.max_msg_size {
            return Err(conduit_err(format!(
                "{prov}: messages of {wire_max} bytes exceed the provider's max_msg_size {} (lower GEX_OFI_MAX_MEDIUM)",
                a.max_msg_size
            )));
        }
        let stride = wire_max.next_multiple_of(64);
        let (rx_count, rx_stride) = if multi {
            (MULTI_BUFS, (256 << 10).max(stride * 16))
        } else {
            (RECV_BUFS, stride)
        };
        let segs: Vec<Mem> = if hybrid {
            // The segments live in the shared region, mapped by every rank of the host.
            near_eps
                .iter()
                .map(|e| Mem::shared(e.as_ref().expect("smp endpoint").local_segment().0))
                .collect()
        } else {
            (0..my_eps)
                .map(|_| Mem::new(seg_len))
                .collect::<Result<_, _>>()?
        };

        // Per endpoint: domain, CQ, AV, endpoint, pools, registrations.
        // A hybrid endpoint never sleeps in the CQ (it must watch the rings too).
        let wait_obj = params.wait != WaitPolicy::Spin && !hybrid;
        let mut objs = Vec::with_capacity(my_eps);
        let mut pools = Vec::with_capacity(my_eps);
        let mut names = Vec::with_capacity(my_eps);
        let mut own_keys = Vec::with_capacity(my_eps);
        let mut rmas = Vec::with_capacity(my_eps);
        let mut waitable = true;
        for (e, mr_stats) in mr_counters.iter().enumerate() {
            let p = prov.as_str();
            let err = |what: String| move |x: Errno| fi_init(p, format!("EP {e}: {what}"), x);
            let domain = Domain::open(&fab, &chosen.info)
                .map_err(err(format!("fi_domain({})", a.domain)))?;
            let cq = match Cq::open(&domain, CQ_SIZE, wait_obj) {
                Ok(cq) => cq,
                Err(_) if wait_obj => {
                    waitable = false;
                    Cq::open(&domain, CQ_SIZE, false).map_err(err("fi_cq_open".into()))?
                }
                Err(x) => return Err(err("fi_cq_open".into())(x)),
            };
            waitable &= cq.waitable();
            let av =
                Av::open(&domain, total).map_err(err(format!("fi_av_open({total} addresses)")))?;
            let mut ep = crate::fabric::Endpoint::open(&domain, &chosen.info)
                .map_err(err("fi_endpoint".into()))?;
            ep.bind_cq(&cq).map_err(err("fi_ep_bind(cq)".into()))?;
            ep.bind_av(&av).map_err(err("fi_ep_bind(av)".into()))?;
            ep.enable().map_err(err("fi_enable".into()))?;
            // After fi_enable: shm 1.17 creates its receive context there.
            if multi {
                ep.set_min_multi_recv(stride)
                    .map_err(err("fi_setopt(FI_OPT_MIN_MULTI_RECV)".into()))?;
            }
            let name = ep.name().map_err(err("fi_getname".into()))?;
            let mut tx_pool = Pool::new(SEND_BUFS, stride)?;
            let mut rx_pool = Pool::new(rx_count, rx_stride)?;
            let mut mrs = Vec::new();
            let register = |base: *const u8,
                            len: usize,
                            access: u64,
                            key: u64,
                            what: &str|
             -> Result<Mr, InitError> {
                // SAFETY: the memory (a pool or a segment) outlives the registration: MRs
                // are closed with the endpoint's objects, before pools and segments are
                // freed (module Safety section).
                let mut mr =
                    unsafe { Mr::register(&domain, base, len, access, key) }.map_err(|x| {
                        fi_init(&prov, format!("EP {e}: fi_mr_reg({what}, {len} bytes)"), x)
                    })?;
                if mr_endpoint {
                    mr.bind(&ep).map_err(|x| {
                        fi_init(&prov, format!("EP {e}: fi_mr_bind/fi_mr_enable({what})"), x)
                    })?;
                }
                Ok(mr)
            };
            let key_base = (e as u64) << 32;
            // Memory registered at open, in which local buffers of native operations
            // need no registration of their own (see `MrCache`).
            let mut fixed = Vec::new();
            let mut rma_state = Rma::new(rma, atomics, relaxed_max, total)?;
            if mr_local {
                // The pools may also be the local side of RMA (READ/WRITE).
                let mr = register(
                    tx_pool.mem.base(),
                    tx_pool.len(),
                    flags::SEND | flags::READ | flags::WRITE,
                    key_base | 1,
                    "send buffers",
                )?;
                tx_pool.desc = mr.desc();
                fixed.push((tx_pool.mem.base() as usize, tx_pool.len(), mr.desc()));
                mrs.push(mr);
                let mr = register(
                    rx_pool.mem.base(),
                    rx_pool.len(),
                    flags::RECV | flags::READ | flags::WRITE,
                    key_base | 2,
                    "receive buffers",
                )?;
                rx_pool.desc = mr.desc();
                fixed.push((rx_pool.mem.base() as usize, rx_pool.len(), mr.desc()));
                mrs.push(mr);
                if rma {
                    // The slots' operand, compare and result words (atomics), and the
                    // landing word of a flush's read.
                    let len = RMA_SLOTS * 24;
                    let mr = register(
                        rma_state.words.base(),
                        len,
                        flags::READ | flags::WRITE,
                        key_base | 3,
                        "slot words (atomic operands, flush reads)",
                    )?;
                    rma_state.words_desc = mr.desc();
                    mrs.push(mr);
                }
            }
            // Redundant registration: every segment of this rank in this endpoint's
            // domain, so any endpoint can use any local segment as an RMA source or
            // target without sharing a domain (seed 002).
            let mut own_key = 0u64;
            if rma {
                let access = flags::READ
                    | flags::WRITE
                    | flags::REMOTE_READ
                    | flags::REMOTE_WRITE
                    | flags::SEND
                    | flags::RECV;
                for (j, sm) in segs.iter().enumerate() {
                    let mr = register(
                        sm.base(),
                        seg_len,
                        access,
                        key_base | (16 + j as u64),
                        &format!("segment of EP {j}"),
                    )?;
                    if j == e {
                        own_key = mr.key();
                    }
                    // Segments first: the most common local buffers.
                    fixed.insert(j, (sm.base() as usize, seg_len, mr.desc()));
                    mrs.push(mr);
                }
            }
            let cache = MrCache::new(
                CacheConfig {
                    on: mr_local && rma,
                    bind: mr_endpoint,
                    max_entries: s.mr_cache_entries,
                    max_bytes: s.mr_cache_bytes,
                    key_base,
                },
                fixed,
                regions.clone(),
                mr_stats.clone(),
            );
            own_keys.push(own_key);
            rmas.push(rma_state);
            names.push(name);
            pools.push((tx_pool, rx_pool));
            objs.push(Objects {
                ep,
                cache,
                _mrs: mrs,
                cq,
                av,
                domain,
            });
        }

        // Exchange provider, limits, addresses and segment keys.
        let blob = wire::PeerBlob {
            provider: prov.clone(),
            max_medium: s.max_medium as u64,
            eps: names
                .iter()
                .enumerate()
                .map(|(e, name)| (name.clone(), segs[e].base() as u64, own_keys[e]))
                .collect(),
        }
        .encode();
        let all = boot.exchange(&blob)?;
        let mut addrs_all: Vec<Vec<u8>> = Vec::with_capacity(total);
        let mut remote = Vec::with_capacity(total);
        let mut max_medium = s.max_medium;
        for (r, b) in all.iter().enumerate() {
            let pb = wire::PeerBlob::decode(b)
                .map_err(|e| conduit_err(format!("rank {r} sent a malformed address blob: {e}")))?;
            let p = pb.provider;
            if p != prov {
                return Err(conduit_err(format!(
                    "rank {r} opened provider {p}, this rank (rank {rank}) {prov}: every rank must use the same provider (GEX_OFI_PROVIDER, FI_PROVIDER)"
                )));
            }
            max_medium = max_medium.min(usize::try_from(pb.max_medium).unwrap_or(usize::MAX));
            let k = pb.eps.len();
            if k != jl.eps[r] as usize {
                return Err(conduit_err(format!(
                    "rank {r} published {k} endpoints, the layout says {}",
                    jl.eps[r]
                )));
            }
            for (addr, base, key) in pb.eps {
                addrs_all.push(addr);
                remote.push(rma.then_some(RemoteSeg {
                    base: if virt_addr { base } else { 0 },
                    len: jl.seg_len[r],
                    key,
                }));
            }
        }
        let mut addrs_per_ep = Vec::with_capacity(my_eps);
        for (e, o) in objs.iter_mut().enumerate() {
            let mut v = Vec::with_capacity(total);
            for (g, name) in addrs_all.iter().enumerate() {
                v.push(o.av.insert(name).map_err(|x| {
                    fi_init(
                        &prov,
                        format!("EP {e}: fi_av_insert(address of endpoint {g})"),
                        x,
                    )
                })?);
            }
            addrs_per_ep.push(v);
        }

        let who_of = |e: usize| -> Arc<str> { format!("ofi({prov}) rank {rank} EP {e}").into() };
        let report = OfiReport {
            provider: prov.clone(),
            fabric: a.fabric.clone(),
            domain: a.domain.clone(),
            threading: a.threading.to_string(),
            progress: a.data_progress.to_string(),
            mr_mode: mr_mode_names(a.mr_mode),
            paths: vec![
                PathChoice {
                    operation: "AM injection",
                    path: format!("FI_MSG: fi_inject up to {} bytes, else fi_send from {SEND_BUFS} bounce buffers", a.inject_size),
                    reason: format!("RDM endpoint per gex EP; {} request credits per endpoint pair", s.credits),
                },
                PathChoice {
                    operation: "AM receive",
                    path: if multi {
                        format!("FI_MULTI_RECV: {MULTI_BUFS} buffers of {} KiB", rx_stride >> 10)
                    } else {
                        format!("{RECV_BUFS} pre-posted buffers of {rx_stride} bytes")
                    },
                    reason: match &chosen.multi_recv {
                        Ok(()) => "provider offers FI_MULTI_RECV".into(),
                        Err(why) => why.clone(),
                    },
                },
                PathChoice {
                    operation: "AM Long",
                    path: "payload inside the FI_MSG message, copied into the segment by the receiver".into(),
                    reason: "Long over native RMA is not done yet, so max Long = max Medium".into(),
                },
                PathChoice {
                    operation: "RMA put/get",
                    path: if rma {
                        format!(
                            "native FI_RMA: fi_writemsg(FI_DELIVERY_COMPLETE) / fi_read, {RMA_SLOTS} in flight per EP, remote address = {}",
                            if virt_addr { "segment base + offset (FI_MR_VIRT_ADDR)" } else { "offset" }
                        )
                    } else {
                        "reference: AM-based, in gex-rma".into()
                    },
                    reason: match &chosen.rma {
                        Ok(()) => "provider offers FI_RMA; segments registered in every EP's domain, keys exchanged".into(),
                        Err(why) => why.clone(),
                    },
                },
                PathChoice {
                    operation: "implicit-event puts",
                    path: match &relaxed {
                        Ok(_) => "relaxed: fi_writemsg (transmit-complete), then at the sync one fi_read of 1 byte per destination, which the provider orders after the writes".into(),
                        Err(_) if rma => "as RMA put: fi_writemsg(FI_DELIVERY_COMPLETE) each".into(),
                        Err(_) => "reference: AM-based, in gex-rma".into(),
                    },
                    reason: match &relaxed {
                        Ok(_) if a.max_order_raw == 0 => "tcp: FI_ORDER_RMA_RAW, and one byte stream per peer in which each write's bytes are placed before the next request is read: one acknowledgement per sync and destination instead of one per put".into(),
                        Ok(m) if *m == usize::MAX => "provider orders reads after writes of any size (FI_ORDER_RAW, max_order_raw_size): one acknowledgement per sync and destination instead of one per put".into(),
                        Ok(m) => format!("provider orders reads after writes of up to {m} bytes (larger puts ask for FI_DELIVERY_COMPLETE)"),
                        Err(why) => why.clone(),
                    },
                },
                PathChoice {
                    operation: "atomics",
                    path: if atomics {
                        "native FI_ATOMIC (fi_atomic / fi_fetch_atomic / fi_compare_atomic) for atomic domains whose every operation fi_*atomicvalid accepts; others AM-based".into()
                    } else {
                        "reference: AM-based".into()
                    },
                    reason: match &chosen.atomics {
                        Ok(()) if mr_local => "provider offers FI_ATOMIC; FI_MR_LOCAL: operands and fetched values live in each EP's slot words, registered at open".into(),
                        Ok(()) => "provider offers FI_ATOMIC".into(),
                        Err(why) => why.clone(),
                    },
                },
                PathChoice {
                    operation: "RMA local buffers",
                    path: if !rma {
                        "none (no native RMA)".into()
                    } else if mr_local {
                        format!(
                            "descriptors: segments, bounce/receive buffers and atomic words registered at open; client regions (Ofi::register) registered per EP at first use and cached (LRU, at most {} registrations / {} bytes per EP); any other buffer registered for its operation (shared by operations on it in flight) and closed at completion",
                            s.mr_cache_entries, s.mr_cache_bytes
                        )
                    } else {
                        "no registration needed (segment descriptors passed where the buffer lies in a segment)".into()
                    },
                    reason: if !rma {
                        "native RMA is off".into()
                    } else if a.mr_mode & flags::MR_LOCAL != 0 {
                        "the provider requires FI_MR_LOCAL: every local buffer needs a registration's descriptor; a registration is kept only while its memory is provably unchanged (a live client region, or an operation in flight)".into()
                    } else if mr_local {
                        "GEX_OFI_MR_LOCAL=1 (testing aid): acting as if the provider required FI_MR_LOCAL, which it does not".into()
                    } else {
                        "the provider does not require FI_MR_LOCAL".into()
                    },
                },
                PathChoice {
                    operation: "ordering",
                    path: if chosen.ordered { "FI_ORDER_SAS".into() } else { "none".into() },
                    reason: if chosen.ordered {
                        "per-sender delivery order from the provider".into()
                    } else {
                        "provider does not offer FI_ORDER_SAS: messages from one sender may be delivered out of order".into()
                    },
                },
                PathChoice {
                    operation: "waiting",
                    path: if waitable { "fi_cq_sread on the CQ's wait object".into() } else { "yield, no wait object".into() },
                    reason: if hybrid {
                        "hybrid job: an endpoint watches its rings and its CQ, so it cannot sleep in either".into()
                    } else if !wait_obj {
                        "wait policy is spin, and a wait object would cost every completion a signal".into()
                    } else if waitable {
                        "wait policy may block".into()
                    } else {
                        "provider offers no file-descriptor wait object for CQs".into()
                    }
                },
                PathChoice {
                    operation: "neighbours",
                    path: match &smp {
                        Some(smp) => format!(
                            "shared memory (smp rings, doorbells, mapped segments) to ranks {:?}; libfabric to the others; CQ read every pass while network operations are in flight, else at most every {NET_POLL_MAX} polls",
                            smp.neighbours()
                        ),
                        None => "libfabric, like every other peer".into(),
                    },
                    reason: match (hybrid, s.hybrid) {
                        (true, Some(true)) => "GEX_OFI_HYBRID=1 and a host has several ranks".into(),
                        (true, _) => "the job spans several hosts and a host has several ranks (GEX_OFI_HYBRID=auto)".into(),
                        (false, Some(false)) => "disabled by GEX_OFI_HYBRID=0".into(),
                        (false, _) if !crowded => "every host has one rank".into(),
                        (false, _) => "one host (GEX_OFI_HYBRID=auto; the smp conduit serves one-host jobs)".into(),
                    },
                },
                PathChoice {
                    operation: "threading",
                    path: "one domain, endpoint, CQ and AV per gex EP; FI_THREAD_DOMAIN".into(),
                    reason: "endpoints driven by different threads share no libfabric object, as in seed 002".into(),
                },
            ],
        };
        let mut caps = if waitable && wait_obj {
            Capabilities::BLOCKING_WAIT
        } else {
            Capabilities::empty()
        };
        if rma {
            caps |= Capabilities::NATIVE_RMA;
        }
        if atomics {
            caps |= Capabilities::NATIVE_ATOMICS;
        }
        if hybrid {
            caps |= Capabilities::SHARED_MEMORY;
        }
        let limits = Limits {
            max_args: MAX_ARGS,
            max_medium,
            max_long: max_medium,
        };
        tracing::debug!(rank, provider = %prov, "ofi conduit open:\n{report}");
        let ofi = Arc::new(Ofi {
            report,
            seg_len,
            remote,
            counters: (0..my_eps).map(|_| EpCounters::default()).collect(),
            mr_counters,
            regions,
            segs,
            _fabric: fab,
            _info: chosen.info,
            smp,
            graves: Mutex::new(Vec::new()),
        });

        let mut eps = Vec::with_capacity(my_eps);
        for (e, ((o, rma_state), ((tx_pool, rx_pool), addrs))) in objs
            .into_iter()
            .zip(rmas)
            .zip(pools.into_iter().zip(addrs_per_ep))
            .enumerate()
        {
            let h = o.ep.handle();
            let mut ep = OfiEp {
                tx: ManuallyDrop::new(Tx {
                    h,
                    rank: rank as u32,
                    index: e as u16,
                    g_base: g_base.clone(),
                    addrs,
                    inject_max: a.inject_size,
                    free: (0..SEND_BUFS as u32).rev().collect(),
                    pool: tx_pool,
                    credits: Credits::new(total, s.credits),
                    queued: (0..total).map(|_| VecDeque::new()).collect(),
                    nqueued: 0,
                    due: Vec::new(),
                    in_due: vec![false; total],
                    scratch: Vec::with_capacity(a.inject_size.min(stride)),
                    fatal: None,
                    who: who_of(e),
                    idle: 0,
                    probing: prov != "shm",
                    probe_buf: vec![0; SEND_BUFS],
                    probe_since: vec![None; total],
                }),
                rx: ManuallyDrop::new(Rx {
                    h,
                    multi,
                    repost: Vec::new(),
                    seg: ofi.segs[e].base(),
                    seg_len,
                    g_base: g_base.clone(),
                    eps: jl.eps.clone(),
                    stash: VecDeque::new(),
                    comps: [Completion {
                        ctx: std::ptr::null_mut(),
                        flags: 0,
                        len: 0,
                        buf: std::ptr::null_mut(),
                    }; CQ_BATCH],
                    hellos: 0,
                    pool: rx_pool,
                }),
                rma: ManuallyDrop::new(rma_state),
                objs: ManuallyDrop::new(o),
                index: e as u16,
                limits,
                caps,
                near: near_eps.get_mut(e).and_then(Option::take),
                net_countdown: 0,
                net_interval: 1,
                net_seen: false,
                conduit: ofi.clone(),
            };
            for i in 0..ep.rx.pool.count {
                match ep.rx.post(i) {
                    Ok(true) => {}
                    Ok(false) => ep.rx.repost.push(i as u32),
                    Err(x) => return Err(fi_init(&prov, format!("EP {e}: fi_recvmsg"), x)),
                }
            }
            eps.push(ep);
        }

        // Wire-up: every endpoint says hello to every other endpoint of the job and
        // waits to hear from all of them, so that connections exist
        // before any AM (a connection-oriented provider under ofi_rxm connects lazily,
        // and a lazy connection needs both sides to make progress) and an unreachable
        // peer is reported here, by name, instead of hanging later.
        wireup(&mut eps, total, &g_base, &prov)?;
        if prov == "shm" {
            // Every peer has now mapped each of this rank's shm regions (a hello from a
            // peer was written into the region, and every peer inserted every address
            // before saying hello). Their names are no longer needed: unlink them now,
            // so that nothing is left in /dev/shm even if this rank is killed with
            // SIGKILL, which the provider's own cleanup (at close, or in its handlers
            // of catchable signals) cannot see.
            for (e, name) in names.iter().enumerate() {
                unlink_shm_region(name)
                    .map_err(|x| conduit_err(format!("shm: EP {e}: shm_unlink: {x}")))?;
            }
        }
        boot.barrier()?;
        Ok((ofi, eps))
    }
}

/// Unlinks the shm region named by an address of libfabric's `shm` provider.
///
/// libfabric 1.17's `shm` names an endpoint `fi_shm://<pid>:<uid>:<index>` (NUL
/// terminated) and backs it with the POSIX shared-memory object `/<pid>:<uid>:<index>`
/// (`/dev/shm/<pid>:<uid>:<index>`), which peers open by name when they insert the
/// address into their AV, and which the provider unlinks itself only when the endpoint
/// is closed or on a catchable signal. An address of another form (another version's
/// format) is left alone: `Ok(false)`. An object already gone is not an error.
/// The libfabric call, datatype and operation that perform `base` on `kind` (fetching
/// as `fetch` says), or `None` where there is none (bitwise operations on floats).
/// `Sub`, `Inc` and `Dec` are `FI_SUM` of a transformed operand ([`atomic_operand`]).
fn fi_atomic_of(
    kind: AtomicKind,
    base: AtomicBase,
    fetch: bool,
) -> Option<(AtomicCall, libfabric_sys::fi_datatype, libfabric_sys::fi_op)> {
    use libfabric_sys as fi;
    let float = matches!(kind, AtomicKind::F32 | AtomicKind::F64);
    let dt = match kind {
        AtomicKind::I32 => fi::FI_INT32,
        AtomicKind::U32 => fi::FI_UINT32,
        AtomicKind::I64 => fi::FI_INT64,
        AtomicKind::U64 => fi::FI_UINT64,
        AtomicKind::F32 => fi::FI_FLOAT,
        AtomicKind::F64 => fi::FI_DOUBLE,
    };
    let op = match base {
        AtomicBase::Cswap => return Some((AtomicCall::Compare, dt, fi::FI_CSWAP)),
        AtomicBase::Set | AtomicBase::Swap => fi::FI_ATOMIC_WRITE,
        AtomicBase::Get => fi::FI_ATOMIC_READ,
        AtomicBase::Add | AtomicBase::Sub | AtomicBase::Inc | AtomicBase::Dec => fi::FI_SUM,
        AtomicBase::Mult => fi::FI_PROD,
        AtomicBase::Min => fi::FI_MIN,
        AtomicBase::Max => fi::FI_MAX,
        AtomicBase::And | AtomicBase::Or | AtomicBase::Xor if float => return None,
        AtomicBase::And => fi::FI_BAND,
        AtomicBase::Or => fi::FI_BOR,
        AtomicBase::Xor => fi::FI_BXOR,
    };
    let call = if fetch || matches!(base, AtomicBase::Get | AtomicBase::Swap) {
        AtomicCall::Fetch
    } else {
        AtomicCall::Plain
    };
    Some((call, dt, op))
}

/// The operand libfabric gets for `base` with gex operand `a` (bit pattern, low bits):
/// `Sub` adds the negation (exact for floats, wrapping for integers), `Inc`/`Dec` add
/// plus or minus one.
fn atomic_operand(kind: AtomicKind, base: AtomicBase, a: u64) -> u64 {
    let neg = |x: u64| match kind {
        AtomicKind::I32 | AtomicKind::U32 => u64::from((x as u32).wrapping_neg()),
        AtomicKind::I64 | AtomicKind::U64 => x.wrapping_neg(),
        AtomicKind::F32 => x ^ 0x8000_0000,
        AtomicKind::F64 => x ^ (1 << 63),
    };
    let one = match kind {
        AtomicKind::F32 => u64::from(1f32.to_bits()),
        AtomicKind::F64 => 1f64.to_bits(),
        _ => 1,
    };
    match base {
        AtomicBase::Sub => neg(a),
        AtomicBase::Inc => one,
        AtomicBase::Dec => neg(one),
        _ => a,
    }
}

fn unlink_shm_region(addr: &[u8]) -> Result<bool, std::io::Error> {
    let addr = addr.split(|&b| b == 0).next().unwrap_or_default();
    let Some(rest) = addr.strip_prefix(b"fi_shm://") else {
        return Ok(false);
    };
    if rest.is_empty() || rest.contains(&b'/') {
        return Ok(false);
    }
    let mut path = Vec::with_capacity(rest.len() + 2);
    path.push(b'/');
    path.extend_from_slice(rest);
    let path = std::ffi::CString::new(path).map_err(std::io::Error::other)?;
    // SAFETY: a NUL-terminated name; shm_unlink only removes the name (the mappings of
    // this process and its peers stay valid).
    if unsafe { libc::shm_unlink(path.as_ptr()) } == 0 {
        return Ok(true);
    }
    match std::io::Error::last_os_error() {
        e if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        e => Err(e),
    }
}

fn wireup(eps: &mut [OfiEp], total: usize, g_base: &[usize], prov: &str) -> Result<(), InitError> {
    let t0 = Instant::now();
    let mut next = vec![0usize; eps.len()];
    loop {
        let mut all_sent = true;
        let mut all_heard = true;
        for (e, ep) in eps.iter_mut().enumerate() {
            let own = g_base[ep.tx.rank as usize] + e;
            while next[e] < total {
                let g = next[e];
                if g == own {
                    // Not to itself: its own progress serves both ends of a connection
                    // to itself, so that one can be made lazily, if an AM to self ever
                    // needs it. Made here, its two sockets would join the provider's
                    // poll set for the whole job (tcp: every progress pass polls them).
                    next[e] += 1;
                    continue;
                }
                let (rank, index) = (ep.tx.rank, ep.tx.index);
                let sent = ep
                    .tx
                    .send_now(g, HEADER, |b| {
                        let mut h = [0u8; HEADER];
                        wire::encode_credit(&mut h, rank, index, true);
                        b.copy_from_slice(&h);
                    })
                    .map_err(|x| conduit_err(format!("wire-up: {x}")))?;
                if !sent {
                    break;
                }
                next[e] += 1;
            }
            all_sent &= next[e] == total;
            ep.progress(&mut NoDeliver, usize::MAX);
            all_heard &= ep.rx.hellos + 1 >= total;
        }
        if all_sent && all_heard {
            return Ok(());
        }
        if t0.elapsed() > WIREUP_TIMEOUT {
            let status: Vec<String> = eps
                .iter()
                .enumerate()
                .map(|(e, ep)| {
                    format!(
                        "EP {e} sent {}/{total}, heard from {}/{total}",
                        next[e],
                        ep.rx.hellos + 1
                    )
                })
                .collect();
            return Err(conduit_err(format!(
                "{prov}: wire-up did not complete within {WIREUP_TIMEOUT:?} ({}): a peer is unreachable over this provider",
                status.join("; ")
            )));
        }
        std::thread::yield_now();
    }
}

impl ConduitEp for OfiEp {
    fn index(&self) -> EpIndex {
        self.index
    }
    fn capabilities(&self) -> Capabilities {
        self.caps
    }
    #[inline]
    fn limits(&self, dst: EpAddr) -> Limits {
        match &self.near {
            Some(near) if self.conduit.near(dst.rank) => near.limits(dst),
            _ => self.limits,
        }
    }
    fn local_segment(&self) -> (NonNull<u8>, usize) {
        (
            NonNull::new(self.conduit.segs[self.index as usize].base()).expect("non-null"),
            self.conduit.seg_len,
        )
    }
    fn peer_segment(&self, dst: EpAddr) -> Option<(NonNull<u8>, usize)> {
        self.near.as_ref()?.peer_segment(dst)
    }

    fn aux(&self, dst: EpAddr) -> Option<NonNull<u8>> {
        self.near.as_ref()?.aux(dst)
    }

    fn wake(&self, dst: EpAddr) {
        if let Some(near) = &self.near {
            near.wake(dst);
        }
    }

    /// A request to a rank of this host (hybrid jobs) goes into its ring; any other
    /// through libfabric.
    #[inline]
    fn inject(&mut self, msg: &OutMsg<'_>, imm: bool) -> Result<Injected, ConduitError> {
        let dst = msg.dst();
        if let Some(near) = &mut self.near {
            let c = &self.conduit.counters[self.index as usize];
            if self.conduit.near(dst.rank) {
                let r = near.inject(msg, imm);
                if let Ok(Injected::Sent) = r {
                    EpCounters::bump(&c.shm_sent, 1);
                }
                return r;
            }
            // A reply (or completion) is coming: read the CQ on the next polls.
            self.net_countdown = 0;
            self.net_interval = 1;
            let r = self.inject_net(dst, msg);
            if let Ok(Injected::Sent) = r {
                let c = &self.conduit.counters[self.index as usize];
                EpCounters::bump(&c.net_sent, 1);
            }
            return r;
        }
        let r = self.inject_net(dst, msg);
        if let Ok(Injected::Sent) = r {
            let c = &self.conduit.counters[self.index as usize];
            EpCounters::bump(&c.net_sent, 1);
        }
        r
    }

    /// Drains this endpoint's completion queue: frees send buffers, delivers messages,
    /// reposts receive buffers, sends queued replies and owed credits. In a hybrid job
    /// it first drains the shared-memory rings, and reads the completion queue only
    /// every `net_interval` polls unless network operations are in flight (see
    /// `docs/ofi.md`, Hybrid jobs).
    ///
    /// # Panics
    /// On a fatal network error (an error completion, a malformed message), with a
    /// message naming the provider, rank, endpoint and operation: `poll` cannot return
    /// an error, and continuing would hang. The launcher then ends the job.
    #[inline]
    fn poll<D: Deliver>(&mut self, d: &mut D, budget: usize) -> usize {
        let Some(near) = &mut self.near else {
            let m = self.progress(d, budget);
            if m > 0 {
                let c = &self.conduit.counters[self.index as usize];
                EpCounters::bump(&c.net_recv, m as u64);
            }
            return m;
        };
        let n = near.poll(d, budget);
        let c = &self.conduit.counters[self.index as usize];
        if n > 0 {
            EpCounters::bump(&c.shm_recv, n as u64);
        }
        if self.net_countdown > 0 && !self.net_busy() {
            self.net_countdown -= 1;
            return n;
        }
        let m = self.progress(d, budget.saturating_sub(n).max(1));
        let c = &self.conduit.counters[self.index as usize];
        if m > 0 {
            EpCounters::bump(&c.net_recv, m as u64);
        }
        if self.net_seen {
            // The CQ had completions: keep reading it.
            self.net_interval = 1;
        } else {
            self.net_interval = (self.net_interval * 2).min(NET_POLL_MAX);
        }
        self.net_countdown = self.net_interval;
        n + m
    }

    /// `fi_writemsg` with `FI_DELIVERY_COMPLETE` into `dst`'s registered segment.
    /// `Unsupported` when native RMA is off, or under `FI_MR_LOCAL` for a source outside
    /// this rank's segments; `WouldBlock` when all slots are in use or the provider
    /// answers `-FI_EAGAIN`.
    #[inline]
    unsafe fn native_put(
        &mut self,
        dst: EpAddr,
        offset: usize,
        src: *const u8,
        len: usize,
    ) -> Result<Native, ConduitError> {
        // SAFETY: forwarded contract of `native_put` (`src` only read).
        unsafe { self.native_rma(dst, offset, src.cast_mut(), len, Dir::Write, true) }
    }

    /// Where the provider orders reads after writes (docs/ofi.md, "Relaxed puts"):
    /// `fi_writemsg` without `FI_DELIVERY_COMPLETE`, so the completion only frees the
    /// source and the target sends no acknowledgement; the destination is marked for
    /// the next [`native_flush`](Self::native_flush). Otherwise (or above the
    /// provider's `max_order_raw_size`) a [`native_put`](Self::native_put).
    #[inline]
    unsafe fn native_put_relaxed(
        &mut self,
        dst: EpAddr,
        offset: usize,
        src: *const u8,
        len: usize,
    ) -> Result<Native, ConduitError> {
        let delivery = len > self.rma.relaxed_max;
        // SAFETY: forwarded contract of `native_put` (`src` only read).
        unsafe { self.native_rma(dst, offset, src.cast_mut(), len, Dir::Write, delivery) }
    }

    /// Where relaxed puts to `dst` were posted since its last flush: one `fi_read` of
    /// one byte from the start of `dst`'s segment into the slot's result word. The
    /// provider orders it after those writes at the target (`FI_ORDER_RAW`), so its
    /// completion means their bytes are in place. Otherwise `Done`.
    fn native_flush(&mut self, dst: EpAddr) -> Result<Native, ConduitError> {
        if self.rma.relaxed_max == 0 {
            return Ok(Native::Done);
        }
        if let Some(f) = &self.tx.fatal {
            return Err(ConduitError::Network(f.clone()));
        }
        let g = self.tx.g(dst);
        if !self.rma.unflushed.get(g).copied().unwrap_or(false) {
            return Ok(Native::Done);
        }
        let Some(Some(r)) = self.conduit.remote.get(g) else {
            return Ok(Native::Done);
        };
        let (addr, key) = (r.base, r.key);
        let Some(slot) = self.rma.free.pop() else {
            return Ok(Native::WouldBlock);
        };
        let i = slot as usize;
        let ctx = self.rma.ctx(i);
        // SAFETY: slot i's words lie in the slot array (i < slots).
        let land = unsafe { self.rma.words(i).add(2) }.cast::<u8>();
        let peer = self.tx.addrs[g];
        // SAFETY: the landing word belongs to slot i, which nobody else uses until its
        // completion is reported (`res[i]` is null: `native_test` does not read it);
        // the context is slot i's; offset 0 of `dst`'s segment is registered and, as
        // relaxed puts went there, at least one byte long.
        let r = unsafe {
            self.tx
                .h
                .read(land, 1, self.rma.words_desc, peer, addr, key, ctx)
        };
        if r.is_ok() {
            self.rma.unflushed[g] = false;
            let c = &self.conduit.counters[self.index as usize];
            EpCounters::bump(&c.flushes, 1);
        }
        self.slot_posted(slot, r, || {
            format!(
                "fi_read (flush of puts) from rank {} EP {}",
                dst.rank, dst.ep
            )
        })
    }

    /// `fi_read` from `dst`'s registered segment (see [`native_put`](Self::native_put)
    /// for the answers).
    #[inline]
    unsafe fn native_get(
        &mut self,
        dst: EpAddr,
        offset: usize,
        out: *mut u8,
        len: usize,
    ) -> Result<Native, ConduitError> {
        // SAFETY: forwarded contract of `native_get`.
        unsafe { self.native_rma(dst, offset, out, len, Dir::Read, true) }
    }

    fn native_atomic_supported(&self, kind: AtomicKind, base: AtomicBase, fetch: bool) -> bool {
        self.rma.atomics
            && fi_atomic_of(kind, base, fetch)
                .is_some_and(|(call, dt, op)| self.tx.h.atomic_valid(call, dt, op))
    }

    /// One `fi_atomic`/`fi_fetch_atomic`/`fi_compare_atomic` on `dst`'s registered
    /// segment; operands live in the slot until completion, and the provider writes
    /// the old value into the slot's result word, which `native_test` copies to
    /// `result` (so every local word of the operation lies in memory registered at
    /// open, which `FI_MR_LOCAL` needs).
    #[inline]
    unsafe fn native_atomic(
        &mut self,
        dst: EpAddr,
        offset: usize,
        op: &NativeAtomic,
        result: *mut u64,
    ) -> Result<Native, ConduitError> {
        if !self.rma.atomics {
            return Ok(Native::Unsupported);
        }
        if let Some(f) = &self.tx.fatal {
            return Err(ConduitError::Network(f.clone()));
        }
        let g = self.tx.g(dst);
        let (Some(Some(r)), Some((call, dt, fop))) = (
            self.conduit.remote.get(g),
            fi_atomic_of(op.kind, op.base, op.fetch),
        ) else {
            return Ok(Native::Unsupported);
        };
        let (addr, key) = (r.base + offset as u64, r.key);
        let Some(slot) = self.rma.free.pop() else {
            return Ok(Native::WouldBlock);
        };
        let i = slot as usize;
        let ctx = self.rma.ctx(i);
        let w = self.rma.words(i);
        // SAFETY: slot i's three words, owned by this free slot.
        let (buf, compare, land) = unsafe { (w, w.add(1), w.add(2)) };
        let (operand, cmp) = match op.base {
            // fi_compare_atomic: `buf` is stored if the word equals `compare`.
            AtomicBase::Cswap => (op.b, op.a),
            _ => (atomic_operand(op.kind, op.base, op.a), 0),
        };
        // SAFETY: slot i's words (above), not in use by any operation.
        unsafe {
            buf.write(operand);
            compare.write(cmp);
        }
        // SAFETY: operands and the result word belong to slot i until its completion is
        // read (the result is copied out by `native_test`); the target word is aligned
        // and inside `dst`'s registered segment (checked by the caller).
        let rc = unsafe {
            self.tx.h.atomic(
                call,
                buf,
                compare,
                land,
                self.rma.words_desc,
                self.tx.addrs[g],
                addr,
                key,
                dt,
                fop,
                ctx,
            )
        };
        if rc.is_ok() {
            self.rma.res[i] = result;
            let c = &self.conduit.counters[self.index as usize];
            EpCounters::bump(&c.atomics, 1);
        }
        self.slot_posted(slot, rc, || {
            format!(
                "native atomic {:?} on {:?} to rank {} EP {}",
                op.base, op.kind, dst.rank, dst.ep
            )
        })
    }

    /// True once the completion of `ticket` has been read from the CQ (by `poll` or
    /// `block`); stores a fetching atomic's old value into its `result` and frees the
    /// slot, so a ticket reports true once.
    #[inline]
    fn native_test(&mut self, ticket: u64) -> bool {
        let i = (ticket & u64::from(u32::MAX)) as usize;
        let epoch = (ticket >> 32) as u32;
        if i >= self.rma.state.len() || self.rma.epoch[i] != epoch || self.rma.state[i] != SLOT_DONE
        {
            return false;
        }
        let res = std::mem::replace(&mut self.rma.res[i], std::ptr::null_mut());
        if !res.is_null() {
            // SAFETY: the provider wrote slot i's result word before the completion
            // that made the slot done; `res` is valid for a u64 write until this
            // operation completes, which is now (`native_atomic`'s contract).
            unsafe { res.write(self.rma.words(i).add(2).read()) };
        }
        self.rma.state[i] = SLOT_FREE;
        self.rma.epoch[i] = epoch.wrapping_add(1);
        self.rma.free.push(i as u32);
        true
    }

    fn has_incoming(&self) -> bool {
        self.near.as_ref().is_some_and(|n| n.has_incoming())
            || self.rx.stash.iter().any(|c| c.flags & flags::RECV != 0)
    }

    fn block(&mut self, timeout: Duration) {
        let credits_due = {
            let c = &self.tx.credits;
            self.tx.due.iter().any(|&g| c.due(g))
        };
        if self.near.is_some() {
            // Hybrid: the rings have a doorbell, the CQ a file descriptor, and one thread
            // cannot sleep on both. Nap on the doorbell (a neighbour's message wakes it
            // at once) for at most NET_NAP, so that network traffic is seen soon after;
            // stay awake while network operations or owed credits are pending.
            if self.net_busy() || credits_due {
                std::thread::yield_now();
            } else if let Some(near) = &mut self.near {
                near.block(timeout.min(NET_NAP));
                // Read the CQ at the next poll.
                self.net_countdown = 0;
            }
            return;
        }
        if !self.caps.contains(Capabilities::BLOCKING_WAIT)
            || self.tx.nqueued > 0
            || credits_due
            || !self.rx.repost.is_empty()
            || !self.rx.stash.is_empty()
        {
            // Work only this endpoint's progress completes, or no wait object: stay awake.
            std::thread::yield_now();
            return;
        }
        let ms = timeout.as_millis().clamp(1, i32::MAX as u128) as i32;
        let mut comps = [Completion {
            ctx: std::ptr::null_mut(),
            flags: 0,
            len: 0,
            buf: std::ptr::null_mut(),
        }; CQ_BATCH];
        // Timed out, interrupted, or an error completion (`poll` reports errors): return.
        if let Ok(k) = self.objs.cq.sread(&mut comps, ms) {
            if k == 0 {
                // A fruitless sleep weighs as much as many fruitless polls.
                self.tx.idle = self.tx.idle.saturating_add(PROBE_AFTER / 64);
            }
            for c in comps.iter().take(k) {
                // Send and RMA completions only free a bounce buffer or mark an
                // operation done: do it now. Receives wait for `poll`, which delivers
                // them.
                if let Some(i) = self.tx.pool.index_of(c.ctx) {
                    self.tx.sent(i);
                } else if let Some(i) = self.rma.index_of(c.ctx) {
                    self.rma_completed(i);
                } else {
                    self.rx.stash.push_back(*c);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hybrid_mode_follows_the_setting_and_the_layout() {
        // auto: several hosts and a host with several ranks.
        assert!(hybrid_mode(None, 2, true));
        assert!(
            !hybrid_mode(None, 1, true),
            "one host: the smp conduit's job"
        );
        assert!(
            !hybrid_mode(None, 4, false),
            "one rank per host: nothing to share"
        );
        // 1: whenever a host has several ranks.
        assert!(hybrid_mode(Some(true), 1, true));
        assert!(!hybrid_mode(Some(true), 3, false));
        // 0: never.
        assert!(!hybrid_mode(Some(false), 2, true));
    }

    #[test]
    fn relaxed_puts_need_read_after_write_ordering() {
        let attrs = |provider: &str, rma_raw: bool, max_order_raw: usize| crate::fabric::Attrs {
            provider: provider.into(),
            rma_raw,
            max_order_raw,
            ..Default::default()
        };
        // Data ordering up to a size: writes up to it are relaxed.
        assert_eq!(
            relaxed_limit(true, true, &attrs("verbs;ofi_rxm", true, 4096)),
            Ok(4096)
        );
        // tcp: message ordering suffices (one byte stream), any size.
        assert_eq!(
            relaxed_limit(true, true, &attrs("tcp;ofi_rxm", true, 0)),
            Ok(usize::MAX)
        );
        assert_eq!(
            relaxed_limit(true, true, &attrs("tcp", true, 0)),
            Ok(usize::MAX)
        );
        // Message ordering alone on another provider, or none at all: not relaxed.
        assert!(relaxed_limit(true, true, &attrs("verbs;ofi_rxm", true, 0)).is_err());
        assert!(relaxed_limit(true, true, &attrs("shm", false, 0)).is_err());
        assert!(relaxed_limit(true, true, &attrs("tcpx", true, 0)).is_err());
        // Switched off, or no native RMA.
        let off = relaxed_limit(true, false, &attrs("tcp;ofi_rxm", true, 0)).unwrap_err();
        assert!(off.contains("GEX_OFI_RELAXED_PUTS=0"), "{off}");
        assert!(relaxed_limit(false, true, &attrs("tcp;ofi_rxm", true, 0)).is_err());
    }

    #[test]
    fn loopback_offers_are_recognised() {
        let attrs = |domain: &str, fabric: &str| crate::fabric::Attrs {
            provider: "tcp;ofi_rxm".into(),
            fabric: fabric.into(),
            domain: domain.into(),
            mr_mode: 0,
            inject_size: 64,
            max_msg_size: 1 << 20,
            threading: "FI_THREAD_SAFE",
            data_progress: "FI_PROGRESS_MANUAL",
            rma_raw: true,
            max_order_raw: 0,
        };
        assert!(is_loopback(&attrs("lo", "127.0.0.1/32")));
        assert!(is_loopback(&attrs("x", "127.0.0.0/8")));
        assert!(is_loopback(&attrs("x", "::1/128")));
        assert!(!is_loopback(&attrs("eth0", "192.0.2.0/24")));
        assert!(!is_loopback(&attrs("gxv1a", "10.77.0.0/24")));
    }
}
