//! `sim`: a simulated fabric conduit for jobs whose ranks are threads of one process.
//!
//! [`Sim`] implements [`gex_core::spi::Conduit`] the way a network would, but in memory:
//! every endpoint has an inbox with one request lane and one reply lane per sending
//! endpoint, a segment (raw zero-filled memory every rank thread can address), and a
//! doorbell to sleep on. What it adds over gex-core's one-rank
//! [`Loopback`](gex_core::loopback::Loopback) is what makes protocols fail in tests:
//! seeded delays, reordering, bounded request lanes (back-pressure) and per-peer limits.
//! See [`SimConfig`] for the delivery model.
//!
//! # Wiring
//! One [`SimFabric`] is one job. Every rank thread builds its client with the same
//! fabric as conduit context; [`run_sim`] does all of it (threads, bootstrap,
//! watchdog):
//! ```
//! use gex_core::{Am, Body, ClientBuilder, EpAddr, Token};
//! use gex_testkit::sim::{run_sim, SimConfig};
//! use std::sync::{Arc, atomic::{AtomicU32, Ordering}};
//!
//! let sums = run_sim(3, SimConfig::default().reorder(true), || ClientBuilder::new().segment_size(4096), |client| {
//!     let mut ep = client.endpoint(0).unwrap();
//!     let got = Arc::new(AtomicU32::new(0));
//!     let g = got.clone();
//!     let add = ep.register(move |_t: &mut Token<'_>, am: Am<'_>| { g.fetch_add(am.args()[0], Ordering::Relaxed); }).unwrap();
//!     gex_testkit::exchange_barrier(&mut ep).unwrap(); // every rank registered its handler
//!     for r in 0..client.size() {
//!         ep.request(EpAddr::rank(r), add, Body::short(&[client.rank() + 1])).unwrap();
//!     }
//!     ep.wait_until(|| got.load(Ordering::Relaxed) == 1 + 2 + 3);
//!     gex_testkit::exchange_barrier(&mut ep).unwrap();
//!     got.load(Ordering::Relaxed)
//! });
//! assert_eq!(sums, vec![6, 6, 6]);
//! ```
//! Without a context, [`Sim`] opens a private fabric for a job of one rank (configured
//! from `GEX_SIM_*`), so `ClientBuilder::new().init::<Sim>(Box::new(Singleton::new()))`
//! works too.
//!
//! # Capabilities
//! [`NP_IN_PLACE`](Capabilities::NP_IN_PLACE) (a conduit-owned staging buffer),
//! [`SHARED_MEMORY`](Capabilities::SHARED_MEMORY) (neighbours' segments are mapped) and
//! [`BLOCKING_WAIT`](Capabilities::BLOCKING_WAIT) (a per-endpoint
//! [`Doorbell`]) are each reported exactly when switched on in
//! [`SimConfig`].
//!
//! # Failure
//! [`SimFabric::poison`] kills the job: every later `poll` and injection panics with the
//! reason, sleeping endpoints wake. [`run_sim`] poisons the fabric when a rank panics
//! or its watchdog fires, so one failing rank ends the whole job promptly.

mod config;
mod net;
mod nic;
mod run;
mod seg;

use net::{pop_one, push};

pub use config::{Delay, Fault, SimConfig};
pub use nic::NativeCounts;
pub use run::{SimRunner, run_sim};

use crate::rng::{SplitMix64, hash_words};
use gex_core::boot::Bootstrap;
use gex_core::spi::{
    AtomicBase, AtomicKind, Conduit, ConduitEp, ConduitError, Deliver, JobLayout, Native,
    NativeAtomic, NativeResult, OpenParams, OutMsg, OwnedInjected, OwnedMsg, Prepare, PrepareReq,
    QueuedMsg, ReplyTx, SegRange,
};
use gex_core::{Capabilities, Category, EpAddr, EpIndex, InitError, Injected, Kind, Limits};
use gex_sync::wait::{Doorbell, WaitPolicy};
use seg::SegMem;
use std::any::Any;
use std::cmp::{Ordering as CmpOrdering, Reverse};
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// Bytes a request costs in its lane on top of its arguments and payload (the header
/// a real conduit would write).
pub const MSG_OVERHEAD: usize = 64;

/// One queued message.
#[derive(Debug)]
struct Msg {
    /// The message; its payload a Medium's (Long payloads are already in the segment).
    q: QueuedMsg,
    src_gid: usize,
    due_poll: u64,
    due_ns: u64,
    key: u64,
    /// Tie-break: queueing order at this inbox.
    seq: u64,
    /// Bytes charged to the request lane (0 for replies).
    cost: usize,
    /// Deferred local completion: hand `q.payload` back to the sender under this ticket
    /// once delivered.
    ticket: Option<u64>,
}

/// Heap entry of the reordering inbox, ordered by (due, key, seq).
#[derive(Debug)]
struct Keyed(Msg);

#[derive(Debug)]
struct Inbox {
    /// Polls of the owning endpoint so far.
    clock: u64,
    /// FIFO mode: lane `2 * src_gid + (kind == Reply)`.
    lanes: Vec<VecDeque<Msg>>,
    /// Round-robin start among lanes.
    rr: usize,
    /// Reorder mode: every queued message.
    heap: BinaryHeap<Reverse<Keyed>>,
    /// Bytes of requests queued per sending endpoint.
    req_bytes: Vec<usize>,
    seq: u64,
}

#[derive(Debug)]
struct EpSlot {
    inbox: Mutex<Inbox>,
    queued: AtomicUsize,
    arrivals: AtomicU64,
    delivered: AtomicU64,
    bell: Doorbell,
    seg: SegMem,
    /// Auxiliary area (`aux_len` bytes), mapped by same-host endpoints when
    /// `shared_memory` is on.
    aux: SegMem,
    /// Wake-ups requested by neighbours through `ConduitEp::wake`.
    wakes: AtomicU64,
    /// Owned payloads of this endpoint's deferred injections, handed back by receivers.
    completed: Mutex<HashMap<u64, Vec<u8>>>,
    /// Requests this endpoint has sent (for fault injection).
    requests: AtomicU64,
}

/// The job's endpoints, created by the first rank that opens.
#[derive(Debug)]
struct Net {
    layout: JobLayout,
    /// Global endpoint id of `(rank, 0)`.
    first_gid: Vec<usize>,
    slots: Vec<EpSlot>,
    /// Length of every endpoint's auxiliary area (the `aux_len` of the rank that built
    /// the fabric; every other rank must ask for the same).
    aux_len: usize,
    opened: Vec<AtomicBool>,
}

#[derive(Debug)]
struct FabricInner {
    cfg: SimConfig,
    net: OnceLock<Net>,
    dead: AtomicBool,
    why: Mutex<Option<String>>,
    epoch: Instant,
    timed: bool,
}

impl FabricInner {
    fn net(&self) -> &Net {
        self.net
            .get()
            .expect("sim: fabric used before any rank opened it")
    }
    fn now_ns(&self) -> u64 {
        if self.timed {
            self.epoch.elapsed().as_nanos() as u64
        } else {
            0
        }
    }
    #[cold]
    fn die(&self) -> ! {
        let why = self
            .why
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .unwrap_or_default();
        panic!("gex-testkit sim: the job was killed: {why}");
    }
    #[inline]
    fn check_alive(&self) {
        if self.dead.load(Ordering::Relaxed) {
            self.die();
        }
    }
}

/// A simulated fabric: the state one job of [`Sim`] ranks shares. A cheap handle
/// (clone it freely); pass it to every rank's
/// [`ClientBuilder::conduit_context`](gex_core::ClientBuilder::conduit_context) via
/// [`context`](SimFabric::context). One fabric carries one job.
#[derive(Clone, Debug)]
pub struct SimFabric {
    inner: Arc<FabricInner>,
}

impl SimFabric {
    /// A fabric with this configuration.
    pub fn new(cfg: SimConfig) -> Self {
        let timed = cfg.latency.nanos > 0 || cfg.jitter.nanos > 0;
        SimFabric {
            inner: Arc::new(FabricInner {
                cfg,
                net: OnceLock::new(),
                dead: AtomicBool::new(false),
                why: Mutex::new(None),
                epoch: Instant::now(),
                timed,
            }),
        }
    }

    /// The object to hand to `ClientBuilder::conduit_context`.
    pub fn context(&self) -> Arc<dyn Any + Send + Sync> {
        Arc::new(self.clone())
    }

    /// The configuration.
    pub fn config(&self) -> &SimConfig {
        &self.inner.cfg
    }

    /// Kills the job: every later poll or injection on this fabric panics with `why`
    /// (the first reason wins) and sleeping endpoints are woken.
    pub fn poison(&self, why: &str) {
        {
            let mut w = self.inner.why.lock().unwrap_or_else(|e| e.into_inner());
            if w.is_none() {
                *w = Some(why.to_string());
            }
        }
        self.inner.dead.store(true, Ordering::SeqCst);
        if let Some(net) = self.inner.net.get() {
            for s in &net.slots {
                s.bell.ring();
            }
        }
    }

    /// True once [`poison`](Self::poison) was called.
    pub fn is_poisoned(&self) -> bool {
        self.inner.dead.load(Ordering::SeqCst)
    }

    /// One line per endpoint: messages queued, delivered, request bytes in flight and
    /// poll clock. For diagnosing a stalled job.
    pub fn describe(&self) -> String {
        let Some(net) = self.inner.net.get() else {
            return "sim: no rank opened the fabric yet\n".into();
        };
        let mut s = String::new();
        for (gid, slot) in net.slots.iter().enumerate() {
            let ib = slot.lock();
            let inflight: usize = ib.req_bytes.iter().sum();
            s.push_str(&format!(
                "sim {}: queued {}, arrived {}, delivered {}, request bytes queued {}, polls {}\n",
                net.addr(gid),
                slot.queued.load(Ordering::Relaxed),
                slot.arrivals.load(Ordering::Relaxed),
                slot.delivered.load(Ordering::Relaxed),
                inflight,
                ib.clock
            ));
        }
        s
    }
}

/// The simulated-fabric conduit. See the [module documentation](self).
#[derive(Debug)]
pub struct Sim {
    fabric: SimFabric,
    rank: u32,
}

impl Sim {
    /// The fabric this rank belongs to.
    pub fn fabric(&self) -> &SimFabric {
        &self.fabric
    }
    /// This rank.
    pub fn rank(&self) -> u32 {
        self.rank
    }
}

// SAFETY: the conduit contract holds: segments and areas are zero-filled memory the
// fabric owns (`seg`) for as long as any rank's conduit lives; neighbours' mappings
// are those segments, of the layout's lengths or less (`SimConfig::mapped_len`); every area is `aux_len` bytes, the
// `aux_len` every rank opened with (`open` refuses a rank whose `aux_len`, or
// layout, differs from those the fabric was built from); payloads are delivered from the
// message's own buffer; the staging buffer of in-place payloads is the endpoint's own;
// native operations (`nic`) access only the given ranges until they report completion.
#[allow(unsafe_code)]
unsafe impl Conduit for Sim {
    type Ep = SimEp;
    const NAME: &'static str = "sim";
    const ENV_VARS: &'static [gex_core::config::EnvVar] = crate::ENV_VARS;

    fn open(
        boot: &mut dyn Bootstrap,
        params: &OpenParams<'_>,
    ) -> Result<(Arc<Self>, Vec<SimEp>), InitError> {
        let err = |msg: String| InitError::Conduit {
            conduit: Self::NAME,
            msg,
        };
        let fabric = match params.context {
            Some(c) => c
                .downcast_ref::<SimFabric>()
                .ok_or_else(|| {
                    err("the conduit context is not a gex_testkit::sim::SimFabric".into())
                })?
                .clone(),
            None if boot.size() == 1 => {
                SimFabric::new(SimConfig::default().with_config(params.config)?)
            }
            None => {
                return Err(err(format!(
                    "a job of {} ranks needs a shared SimFabric as conduit context (see gex_testkit::sim::run_sim)",
                    boot.size()
                )));
            }
        };
        fabric.inner.cfg.validate().map_err(err)?;
        let cfg = &fabric.inner.cfg;
        let net = fabric
            .inner
            .net
            .get_or_init(|| Net::new(params.layout, cfg, params.aux_len));
        // Everything the fabric was built from (by the first rank that opened it) must
        // be this rank's too: every rank's segments, areas and endpoints are the
        // fabric's, and the conduit promises each rank areas of its `aux_len`.
        let rank = params.rank;
        let (have, want) = (&net.layout, params.layout);
        let differs = if have.eps != want.eps {
            Some(format!(
                "endpoint counts {:?}, the fabric's are {:?}",
                want.eps, have.eps
            ))
        } else if have.seg_len != want.seg_len {
            Some(format!(
                "segment lengths {:?}, the fabric's are {:?}",
                want.seg_len, have.seg_len
            ))
        } else if have != want {
            Some(format!(
                "hosts {:?}, the fabric's are {:?}",
                want.host, have.host
            ))
        } else if net.aux_len != params.aux_len {
            Some(format!(
                "auxiliary areas of {} bytes (its layers' slices), the fabric's are {} \
                 (every rank of a job must carry the same layers)",
                params.aux_len, net.aux_len
            ))
        } else {
            None
        };
        if let Some(d) = differs {
            return Err(err(format!(
                "rank {rank} does not fit the job this fabric carries: {d} (one SimFabric \
                 per job)"
            )));
        }
        let Some(opened) = net.opened.get(rank as usize) else {
            return Err(err(format!(
                "rank {rank} is outside the job of {}",
                net.layout.eps.len()
            )));
        };
        if opened.swap(true, Ordering::SeqCst) {
            return Err(err(format!(
                "rank {rank} opened this fabric twice (one SimFabric per job)"
            )));
        }
        let seed = cfg.seed;
        let eps = (0..params.layout.eps[rank as usize])
            .map(|index| {
                let me = EpAddr::new(rank, index);
                SimEp {
                    fabric: fabric.inner.clone(),
                    me,
                    gid: net.gid(me).expect("own endpoint"),
                    rng: SplitMix64::new(hash_words(&[seed, rank as u64, index as u64])),
                    staging: Vec::new(),
                    prepared: false,
                    next_ticket: 1,
                    seen_wakes: 0,
                    nic: nic::Nic::default(),
                }
            })
            .collect();
        Ok((Arc::new(Sim { fabric, rank }), eps))
    }
}

/// One endpoint of the [`Sim`] conduit.
#[derive(Debug)]
pub struct SimEp {
    fabric: Arc<FabricInner>,
    me: EpAddr,
    gid: usize,
    rng: SplitMix64,
    staging: Vec<u8>,
    prepared: bool,
    next_ticket: u64,
    /// `wakes` of this endpoint's slot when `block` last returned.
    seen_wakes: u64,
    /// The simulated NIC (native RMA and atomics).
    nic: nic::Nic,
}

fn lock_map<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn conduit_err(msg: String) -> ConduitError {
    ConduitError::Contract(format!("sim: {msg}"))
}

fn same_host(net: &Net, a: u32, b: u32) -> bool {
    net.layout.host[a as usize] == net.layout.host[b as usize]
}

fn limits_for(cfg: &SimConfig, net: &Net, me: u32, dst: EpAddr) -> Limits {
    let off_host = (dst.rank as usize) < net.layout.host.len() && !same_host(net, me, dst.rank);
    let max_medium = match cfg.max_medium_off_host {
        Some(m) if off_host => m,
        _ => cfg.max_medium,
    };
    Limits {
        max_args: cfg.max_args,
        max_medium,
        max_long: cfg.max_long,
    }
}

/// An owned payload offered to [`push`]: taken (Medium: it travels with the message
/// and comes back under `ticket` once delivered) or left in place.
struct Owned<'a> {
    buf: &'a mut Option<Vec<u8>>,
    /// `Some`: a Medium takes the buffer (deferred local completion under this ticket);
    /// `None`: the payload is copied and the buffer left in place.
    ticket: Option<u64>,
}

/// The reply path handed to the core during delivery.
struct Replier<'a> {
    fab: &'a FabricInner,
    me: EpAddr,
    gid: usize,
    rng: &'a mut SplitMix64,
}

impl SimEp {
    /// Queues `msg` from this endpoint ([`push`]); with `capacity`, as a request that
    /// respects the lane capacity.
    fn queue(
        &mut self,
        msg: &OutMsg<'_>,
        capacity: bool,
        owned: Option<Owned<'_>>,
    ) -> Result<Injected, ConduitError> {
        push(
            &self.fabric,
            self.me,
            self.gid,
            &mut self.rng,
            msg,
            capacity,
            owned,
        )
    }

    /// Native operations this endpoint's simulated NIC has performed.
    pub fn native_counts(&self) -> NativeCounts {
        self.nic.counts
    }

    /// Checks a native RMA target: `Ok(None)` when not offered for it (NIC off, same
    /// host), else the address of `off..off+len` in its segment and its global id.
    fn nic_rma_target(
        &self,
        dst: EpAddr,
        off: usize,
        len: usize,
    ) -> Result<Option<(*mut u8, usize)>, ConduitError> {
        let fab = &*self.fabric;
        fab.check_alive();
        if !fab.cfg.native_rma {
            return Ok(None);
        }
        let net = fab.net();
        let gid = net
            .gid(dst)
            .ok_or_else(|| conduit_err(format!("core passed a bad destination {dst}")))?;
        if same_host(net, self.me.rank, dst.rank) {
            return Ok(None);
        }
        nic::at(&net.slots[gid].seg, off, len)
            .map(|p| Some((p, gid)))
            .ok_or_else(|| {
                conduit_err(format!(
                    "native RMA of {len} bytes at {off} of {dst} is out of segment"
                ))
            })
    }

    /// A native put or get of `len` bytes at `off` of `dst`: `Unsupported` when not
    /// offered for it, `Done` when empty, else `work` (given the target's address in
    /// its segment and its global id) issued to the NIC.
    fn nic_rma(
        &mut self,
        r: SegRange,
        work: impl FnOnce(*mut u8, usize) -> nic::Work,
    ) -> NativeResult {
        let Some((at, gid)) = self.nic_rma_target(r.dst, r.offset, r.len)? else {
            return Ok(Native::Unsupported);
        };
        if r.len == 0 {
            return Ok(Native::Done);
        }
        Ok(self.nic_issue(work(at, gid)))
    }

    fn nic_issue(&mut self, work: nic::Work) -> Native {
        let fab = &*self.fabric;
        if fab.cfg.native_queue.is_some_and(|n| self.nic.queued() >= n) {
            return Native::WouldBlock;
        }
        let due_ns = if fab.timed {
            fab.now_ns().saturating_add(fab.cfg.latency.nanos)
        } else {
            0
        };
        Native::Pending(self.nic.issue(work, fab.cfg.latency.polls, due_ns))
    }

    fn back_off(&self) {
        if self.fabric.cfg.yield_when_idle {
            std::thread::yield_now();
        }
    }
}

// SAFETY: as for `Sim`.
#[allow(unsafe_code)]
unsafe impl ConduitEp for SimEp {
    fn index(&self) -> EpIndex {
        self.me.ep
    }

    fn capabilities(&self) -> Capabilities {
        let cfg = &self.fabric.cfg;
        let mut c = Capabilities::empty();
        c.set(Capabilities::NP_IN_PLACE, cfg.np_in_place);
        c.set(Capabilities::SHARED_MEMORY, cfg.shared_memory);
        c.set(
            Capabilities::BLOCKING_WAIT,
            cfg.blocking_wait || cfg.fault == Fault::FakeBlockingWait,
        );
        c.set(Capabilities::NATIVE_RMA, cfg.native_rma);
        c.set(Capabilities::NATIVE_ATOMICS, cfg.native_atomics);
        c
    }

    #[allow(unsafe_code)]
    unsafe fn native_put(&mut self, to: SegRange, src: *const u8) -> NativeResult {
        self.nic_rma(to, |at, _| nic::Work::Put {
            src,
            dst: at,
            len: to.len,
        })
    }

    #[allow(unsafe_code)]
    unsafe fn native_put_relaxed(&mut self, to: SegRange, src: *const u8) -> NativeResult {
        if !self.fabric.cfg.relaxed_puts {
            // SAFETY: forwarded contract.
            return unsafe { self.native_put(to, src) };
        }
        self.nic_rma(to, |at, gid| nic::Work::PutRelaxed {
            gid,
            src,
            dst: at,
            len: to.len,
        })
    }

    fn native_flush(&mut self, dst: EpAddr) -> Result<Native, ConduitError> {
        let fab = &*self.fabric;
        fab.check_alive();
        if !fab.cfg.native_rma || !fab.cfg.relaxed_puts {
            return Ok(Native::Done);
        }
        let gid = fab
            .net()
            .gid(dst)
            .ok_or_else(|| conduit_err(format!("core passed a bad destination {dst}")))?;
        Ok(self.nic_issue(nic::Work::Flush { gid }))
    }

    #[allow(unsafe_code)]
    unsafe fn native_get(&mut self, from: SegRange, out: *mut u8) -> NativeResult {
        self.nic_rma(from, |at, _| nic::Work::Get {
            src: at,
            dst: out,
            len: from.len,
        })
    }

    fn native_atomic_supported(&self, kind: AtomicKind, base: AtomicBase, fetch: bool) -> bool {
        let _ = fetch;
        let cfg = &self.fabric.cfg;
        cfg.native_atomics && nic::offers(cfg.native_atomic_bases.as_deref(), kind, base)
    }

    #[allow(unsafe_code)]
    unsafe fn native_atomic(&mut self, op: &NativeAtomic, result: *mut u64) -> NativeResult {
        let (dst, offset) = (op.dst, op.offset);
        let fab = &*self.fabric;
        fab.check_alive();
        if !self.native_atomic_supported(op.kind, op.base, op.fetch) {
            return Ok(Native::Unsupported);
        }
        if op.fetch && result.is_null() {
            // The contract: null only when the operation does not fetch (a NIC would
            // write the old value through it).
            return Err(conduit_err(format!(
                "core passed a null result word for a fetching native atomic ({:?} on {:?})",
                op.base, op.kind
            )));
        }
        let net = fab.net();
        let gid = net
            .gid(dst)
            .ok_or_else(|| conduit_err(format!("core passed a bad destination {dst}")))?;
        let size = op.kind.size();
        let word = nic::at(&net.slots[gid].seg, offset, size)
            .filter(|p| *p as usize % size == 0)
            .ok_or_else(|| {
                conduit_err(format!(
                    "native atomic at {offset} of {dst}: out of segment or misaligned"
                ))
            })?;
        Ok(self.nic_issue(nic::Work::Atomic {
            word,
            op: *op,
            result,
        }))
    }

    fn native_test(&mut self, ticket: u64) -> bool {
        self.nic.test(ticket)
    }

    fn limits(&self, dst: EpAddr) -> Limits {
        limits_for(&self.fabric.cfg, self.fabric.net(), self.me.rank, dst)
    }

    fn local_segment(&self) -> (NonNull<u8>, usize) {
        let s = &self.fabric.net().slots[self.gid].seg;
        (s.base(), s.len())
    }

    fn peer_segment(&self, dst: EpAddr) -> Option<(NonNull<u8>, usize)> {
        if !self.fabric.cfg.shared_memory {
            return None;
        }
        let net = self.fabric.net();
        let gid = net.gid(dst)?;
        if !same_host(net, self.me.rank, dst.rank) {
            return None;
        }
        let s = &net.slots[gid].seg;
        let len = match self.fabric.cfg.mapped_len {
            Some(n) if dst != self.me => s.len().min(n),
            _ => s.len(),
        };
        Some((s.base(), len))
    }

    fn aux(&self, dst: EpAddr) -> Option<NonNull<u8>> {
        if !self.fabric.cfg.shared_memory {
            return None;
        }
        let net = self.fabric.net();
        let gid = net.gid(dst)?;
        if !same_host(net, self.me.rank, dst.rank) || net.slots[gid].aux.len() == 0 {
            return None;
        }
        Some(net.slots[gid].aux.base())
    }

    fn wake(&self, dst: EpAddr) {
        if self.aux(dst).is_none() {
            return;
        }
        let net = self.fabric.net();
        if let Some(gid) = net.gid(dst) {
            let slot = &net.slots[gid];
            slot.wakes.fetch_add(1, Ordering::Release);
            slot.bell.wake();
        }
    }

    fn inject(&mut self, msg: &OutMsg<'_>, imm: bool) -> Result<Injected, ConduitError> {
        debug_assert!(!self.prepared, "inject between prepare and commit/cancel");
        if msg.kind() != Kind::Request {
            return Err(conduit_err(
                "inject is for requests; replies go through ReplyTx".into(),
            ));
        }
        let r = self.queue(msg, true, None)?;
        if r == Injected::WouldBlock && imm && self.fabric.cfg.fault == Fault::IgnoreImmediate {
            // Fault: send anyway and claim nothing was sent.
            self.queue(msg, false, None)?;
        }
        if r == Injected::WouldBlock && !imm {
            self.back_off();
        }
        Ok(r)
    }

    fn inject_owned(
        &mut self,
        msg: OwnedMsg<'_>,
        imm: bool,
    ) -> Result<OwnedInjected, ConduitError> {
        debug_assert!(!self.prepared, "inject between prepare and commit/cancel");
        let deferred = self.fabric.cfg.deferred_lc && msg.msg().category() == Category::Medium;
        let ticket = self.next_ticket;
        let (header, payload) = msg.into_parts();
        let mut buf = Some(payload);
        let o = Owned {
            buf: &mut buf,
            ticket: deferred.then_some(ticket),
        };
        let sent = self.queue(&header, true, Some(o))?;
        match (sent, buf) {
            (Injected::WouldBlock, Some(b)) => {
                if !imm {
                    self.back_off();
                }
                Ok(OwnedInjected::WouldBlock(b))
            }
            (Injected::Sent, Some(b)) => Ok(OwnedInjected::Done(b)),
            (Injected::Sent, None) => {
                self.next_ticket += 1;
                Ok(OwnedInjected::Pending(ticket))
            }
            (Injected::WouldBlock, None) => Err(conduit_err("lost an owned payload".into())),
        }
    }

    fn lc_test(&mut self, ticket: u64) -> Option<Vec<u8>> {
        lock_map(&self.fabric.net().slots[self.gid].completed).remove(&ticket)
    }

    fn poll<D: Deliver>(&mut self, d: &mut D, budget: usize) -> usize {
        let fab = &*self.fabric;
        fab.check_alive();
        let net = fab.net();
        let slot = &net.slots[self.gid];
        let (clock, now_ns) = {
            let mut ib = slot.lock();
            ib.clock += 1;
            (
                ib.clock,
                if slot.queued.load(Ordering::Acquire) > 0 {
                    fab.now_ns()
                } else {
                    0
                },
            )
        };
        let nic_done = self.nic.progress(if fab.timed { fab.now_ns() } else { 0 });
        let mut tx = Replier {
            fab,
            me: self.me,
            gid: self.gid,
            rng: &mut self.rng,
        };
        let mut n = 0;
        // One message per lock: a handler that panics loses only its own message.
        while n < budget && slot.queued.load(Ordering::Acquire) > 0 {
            let Some(m) = pop_one(&mut slot.lock(), fab.cfg.reorder, clock, now_ns) else {
                break;
            };
            slot.queued.fetch_sub(1, Ordering::Release);
            slot.delivered.fetch_add(1, Ordering::Relaxed);
            n += 1;
            let corrupted: Vec<u8>;
            let payload: &[u8] = match m.q.category {
                Category::Long => &[],
                Category::Medium
                    if fab.cfg.fault == Fault::CorruptMedium && m.q.payload.len() >= 2 =>
                {
                    corrupted =
                        m.q.payload
                            .iter()
                            .enumerate()
                            .map(|(i, &b)| if i + 1 == m.q.payload.len() { !b } else { b })
                            .collect();
                    &corrupted
                }
                _ => &m.q.payload,
            };
            let inc = m.q.incoming(payload);
            d.deliver(&inc, &mut tx);
            if let Some(t) = m.ticket {
                lock_map(&net.slots[m.src_gid].completed).insert(t, m.q.payload);
            }
        }
        if n == 0 && nic_done == 0 {
            self.back_off();
        }
        n
    }

    fn has_incoming(&self) -> bool {
        self.fabric.net().slots[self.gid]
            .queued
            .load(Ordering::Acquire)
            > 0
    }

    fn block(&mut self, timeout: Duration) {
        self.block_inner(timeout);
        self.seen_wakes = self.fabric.net().slots[self.gid]
            .wakes
            .load(Ordering::Acquire);
    }

    fn prepare(&mut self, req: &PrepareReq, imm: bool) -> Result<Prepare, ConduitError> {
        let (dst, category, max_len, offset) =
            (req.dst(), req.category(), req.max_len(), req.offset());
        let fab = &*self.fabric;
        if !fab.cfg.np_in_place {
            return Ok(Prepare::Bounce);
        }
        fab.check_alive();
        let net = fab.net();
        let dgid = net
            .gid(dst)
            .ok_or_else(|| conduit_err(format!("core passed a bad destination {dst}")))?;
        let lim = limits_for(&fab.cfg, net, self.me.rank, dst);
        let max = if category == Category::Long {
            lim.max_long
        } else {
            lim.max_medium
        };
        if max_len > max {
            return Err(conduit_err(format!(
                "core prepared {max_len} bytes, over the limit {max}"
            )));
        }
        {
            let ib = net.slots[dgid].lock();
            let used = ib.req_bytes[self.gid];
            if used > 0 && used + MSG_OVERHEAD + max_len > fab.cfg.ring_capacity {
                drop(ib);
                if !imm {
                    self.back_off();
                }
                return Ok(Prepare::WouldBlock);
            }
        }
        let _ = offset;
        self.staging.clear();
        self.staging.resize(max_len, 0);
        self.prepared = true;
        Ok(Prepare::InPlace(NonNull::from(self.staging.as_mut_slice())))
    }

    fn commit(&mut self, msg: &OutMsg<'_>) -> Result<(), ConduitError> {
        if !self.prepared {
            return Err(conduit_err("commit without prepare".into()));
        }
        self.prepared = false;
        // The lane had room at prepare time and only this endpoint sends on it.
        self.queue(msg, false, None).map(|_| ())
    }

    fn cancel(&mut self) {
        self.prepared = false;
    }
}

impl SimEp {
    fn block_inner(&mut self, timeout: Duration) {
        let fab = &*self.fabric;
        if fab.dead.load(Ordering::Relaxed) || self.nic.busy() {
            // Native operations complete in polls: do not sleep on them.
            return;
        }
        if !fab.cfg.blocking_wait || fab.cfg.fault == Fault::FakeBlockingWait {
            std::thread::yield_now();
            return;
        }
        let slot = &fab.net().slots[self.gid];
        let seen = slot.arrivals.load(Ordering::Acquire);
        let mut nap = fab.cfg.nap.unwrap_or(timeout);
        if slot.queued.load(Ordering::Acquire) > 0 {
            if !fab.timed {
                // Poll-clock delays need polls, not sleep.
                return;
            }
            // Sleep until the earliest queued message is due (or something arrives).
            let ib = slot.lock();
            let earliest = if fab.cfg.reorder {
                ib.heap.peek().map(|Reverse(Keyed(m))| m.due_ns)
            } else {
                ib.lanes
                    .iter()
                    .filter_map(|l| l.front().map(|m| m.due_ns))
                    .min()
            };
            drop(ib);
            let Some(due) = earliest else { return };
            let now = fab.now_ns();
            if due <= now {
                return;
            }
            nap = nap.min(Duration::from_nanos(due - now));
        }
        let seen_wakes = self.seen_wakes;
        slot.bell.wait_until_timeout(WaitPolicy::Block, nap, || {
            slot.arrivals.load(Ordering::Acquire) != seen
                || slot.wakes.load(Ordering::Acquire) != seen_wakes
                || fab.dead.load(Ordering::Acquire)
        });
    }
}
