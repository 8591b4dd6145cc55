//! The smp conduit and its endpoints: the types and the conduit traits here; opening
//! the node (`open`), the sending side (`tx`) and the receiving side (`rx`) in
//! submodules.
//!
//! # Safety
//! Endpoints hold raw pointers into the shared regions (ring memory, doorbells, peer
//! segments). They stay valid because every endpoint holds an `Arc<Smp>`, which owns the
//! mappings. Each ring has exactly one producer (the sending endpoint, which is `!Sync`
//! and unique per global EP index) and one consumer (the receiving endpoint). Long
//! payload writes into a peer's segment are bounds-checked by gex-core before the
//! conduit sees them and checked again on receipt.
#![allow(unsafe_code)]

use crate::live::{Peers, Watch};
use crate::record::{self, Body, NP_ARGS_AREA, U_FIXED_ARGS, args_area};
use crate::region::{self, Layout, Mapping};
use gex_core::boot::Bootstrap;
use gex_core::spi::{
    Capabilities, Conduit, ConduitEp, ConduitError, Deliver, Incoming, Limits, NearConduit,
    OpenParams, OutMsg, Prepare, PrepareReq, ReplyTx,
};
use gex_core::{Category, EpAddr, EpIndex, InitError, Injected, Kind};
use gex_sync::ring::{self, Consumer, Producer};
use gex_sync::wait::{Doorbell, WaitPolicy};
use std::collections::VecDeque;
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::Duration;

mod open;
mod rx;
mod tx;

use gex_core::config::EnvVar;
use tx::{put, user_word};

/// Default bytes per ring.
pub const DEFAULT_RING_SIZE: usize = 256 << 10;
/// Default largest Medium payload.
pub const DEFAULT_MAX_MEDIUM: usize = 64 << 10;

/// A pointer that may cross threads with its endpoint (see the module's Safety section).
#[derive(Clone, Copy, Debug)]
struct Raw<T>(NonNull<T>);
// SAFETY: points into shared mappings kept alive by the endpoint's Arc<Smp>; the pointee
// types (Doorbell: atomics; segment bytes: raw memory) are designed for cross-process use.
unsafe impl<T> Send for Raw<T> {}

impl<T> Raw<T> {
    fn new(p: *mut u8) -> Self {
        Raw(NonNull::new(p.cast()).expect("non-null shared pointer"))
    }
    #[inline(always)]
    fn get(&self) -> &T {
        // SAFETY: valid for the life of the endpoint (module Safety section); only used for
        // types that are sound to share (Doorbell).
        unsafe { self.0.as_ref() }
    }
}

/// The shared-memory conduit. See the [crate documentation](crate).
#[derive(Debug)]
pub struct Smp {
    /// Region of every rank of this host, by local index.
    maps: Vec<Mapping>,
    /// Layout of every rank's region of this host, by local index.
    layouts: Vec<Layout>,
    /// Global rank of every local index (the ranks of this host, in rank order).
    ranks: Vec<u32>,
    /// Local index of every rank of the job, or `NOT_LOCAL`.
    local_of: Vec<u32>,
    /// First global EP number (among the EPs of this host) of every rank of the job;
    /// `usize::MAX` for ranks of other hosts.
    g_base: Vec<usize>,
    /// Largest Medium payload of every rank of this host, by local index.
    max_medium: Vec<usize>,
    /// The neighbours' pidfds (in-band liveness, the `live` module).
    peers: Peers,
    /// This rank's local index.
    me: usize,
    /// Endpoint slots of the host (the global slot numbering's size).
    total: usize,
    /// Whether this rank's waiters may sleep (doorbells of endpoints made at run time).
    may_block: bool,
    /// Bytes of requests each endpoint keeps per destination whose ring is full
    /// (`GEX_SMP_OVERFLOW`).
    overflow: usize,
}

/// `Smp::local_of` of a rank on another host.
const NOT_LOCAL: u32 = u32::MAX;

/// A segment mapping (base, length) of some endpoint.
#[derive(Clone, Copy, Debug)]
struct Seg {
    base: Raw<u8>,
    len: usize,
}

/// Sending side of an endpoint: one request and one reply producer per destination
/// global EP slot, plus the destinations' doorbells and segments. A producer is made
/// on first contact (`connect`) when the destination is a slot made at run time (its
/// rings exist only once its owner opened it) or when this endpoint was made at run
/// time (its first contact is announced to the destination).
#[derive(Debug)]
struct Tx {
    req: Vec<Option<Producer>>,
    rep: Vec<Option<Producer>>,
    /// Every destination slot, by global slot number.
    dst: Vec<EpAddr>,
    /// Whether the destination slot is one made at run time.
    runtime: Vec<bool>,
    /// This endpoint's global slot number.
    me_g: usize,
    /// Whether this endpoint was made at run time (it announces its first contacts).
    me_runtime: bool,
    conduit: Arc<Smp>,
    bells: Vec<Raw<Doorbell>>,
    segs: Vec<Seg>,
    /// Auxiliary areas of every global EP (all share this host).
    aux: Vec<Raw<u8>>,
    g_base: Vec<usize>,
    /// Replies that found their ring full, per destination (rare; see crate docs).
    pending: Vec<VecDeque<(u32, Vec<u8>)>>,
    npending: usize,
    /// Requests that found their ring full, per destination, encoded (`GEX_SMP_OVERFLOW`;
    /// see the crate docs): sent in order before any later request to that destination.
    ovf: Vec<VecDeque<(u32, Vec<u8>)>>,
    /// Bytes held in `ovf`, per destination.
    ovf_bytes: Vec<usize>,
    /// Requests held in `ovf`, all destinations.
    novf: usize,
    /// `GEX_SMP_OVERFLOW`.
    ovf_cap: usize,
}

/// Receiving side: one request and one reply consumer per source global EP slot, of
/// which only the `active` ones are polled: the endpoints made at init from the start,
/// an endpoint made at run time once it has announced a first contact with this one
/// (the contacts word of this slot changed).
#[derive(Debug)]
struct Rx {
    req: Vec<Consumer>,
    rep: Vec<Consumer>,
    src: Vec<EpAddr>,
    /// Global slot numbers of the senders polled, in the order they became known.
    active: Vec<usize>,
    is_active: Vec<bool>,
    /// This slot's contacts word, and its value when the senders were last looked for.
    contacts: Raw<gex_sync::atomic::AtomicU64>,
    seen_contacts: u64,
    seg: Seg,
}

#[derive(Clone, Copy, Debug)]
struct Np {
    g: usize,
    category: Category,
    body: *mut u8,
    body_len: usize,
}

/// An smp endpoint.
#[derive(Debug)]
pub struct SmpEp {
    index: EpIndex,
    tx: Tx,
    rx: Rx,
    bell: Raw<Doorbell>,
    /// The doorbell's epoch when `block` last returned: a later `wake` makes the next
    /// `block` return at once.
    seen: u32,
    limits: Limits,
    np: Option<Np>,
    /// When to look at the neighbours' pidfds next.
    watch: Watch,
    conduit: Arc<Smp>,
}

// SAFETY: `np.body` is a pointer into this endpoint's own reservation, only used by the
// thread that owns the endpoint; every other field is Send.
unsafe impl Send for SmpEp {}

impl Drop for SmpEp {
    /// An endpoint made at run time closes its slot for good: senders that try it
    /// later get `ConduitError::NoEndpoint` (on first contact, or once its ring is full).
    fn drop(&mut self) {
        let c = &self.conduit;
        let l = &c.layouts[c.me];
        let e = self.index as usize;
        if e >= l.eps && e < l.slots {
            c.maps[c.me]
                .state(l, e)
                .store(region::CLOSED, gex_sync::atomic::Ordering::Release);
        }
    }
}

/// The `GEX_*` settings of the smp conduit.
pub const ENV_VARS: &[EnvVar] = &[
    EnvVar {
        name: "GEX_SMP_RING_SIZE",
        default: "262144",
        doc: "smp conduit: bytes per AM ring (one request and one reply ring per ordered endpoint pair); power of two.",
    },
    EnvVar {
        name: "GEX_SMP_MAX_MEDIUM",
        default: "65536",
        doc: "smp conduit: largest Medium payload; must fit a ring record.",
    },
    EnvVar {
        name: "GEX_SMP_OVERFLOW",
        default: "0",
        doc: "smp conduit: bytes of requests per destination endpoint that the sender keeps when the destination's request ring is full (sent in order by later calls on the endpoint); 0 (the default) reports back-pressure at once.",
    },
];

/// Default of `GEX_SMP_OVERFLOW`: bytes of requests kept per destination endpoint when
/// its ring is full. Off: measured, a queue raised the AM storm's rate with more ranks
/// than cores but made each back-pressure wait longer and slowed 2 ranks
/// (docs/performance.md, "The AM storm with a sender-side queue").
pub const DEFAULT_OVERFLOW: usize = 0;

// SAFETY: the conduit contract holds (module `# Safety`, crate documentation): every
// endpoint's segment and auxiliary area are regions of this rank's shared-memory object
// of the layout's sizes, zero-filled, mapped as long as the `Arc<Smp>` lives; a peer's
// mapping is used only after its header was checked against the job layout
// (`region`); Medium payloads are delivered from ring records the receiver owns until
// it releases them after delivery; no native operations.
unsafe impl Conduit for Smp {
    type Ep = SmpEp;
    const NAME: &'static str = "smp";
    const ENV_VARS: &'static [EnvVar] = ENV_VARS;

    fn open(
        boot: &mut dyn Bootstrap,
        params: &OpenParams<'_>,
    ) -> Result<(Arc<Smp>, Vec<SmpEp>), InitError> {
        let jl = params.layout;
        if jl.host.iter().any(|&h| h != jl.host[0]) {
            return Err(InitError::Conduit {
                conduit: "smp",
                msg:
                    "all ranks must run on one host (this job spans several; use a network conduit)"
                        .into(),
            });
        }
        Smp::open_node(boot, params)
    }

    /// Stops watching the neighbours (they may exit as soon as the barrier lets them),
    /// then runs `barrier`.
    fn finalize(
        &self,
        barrier: &mut dyn FnMut() -> Result<(), gex_core::boot::BootError>,
    ) -> Result<(), gex_core::boot::BootError> {
        self.peers.close();
        barrier()
    }

    /// Opens slot `index` of this rank's region: initialises its doorbell and its
    /// incoming rings from every slot of the host, then publishes it (`OPEN`, with
    /// `Release`). Not collective: a peer's endpoint finds it on its first send
    /// (reading the state word with `Acquire`), and starts polling it once it sends.
    fn open_endpoint(self: &Arc<Self>, index: EpIndex) -> Result<SmpEp, ConduitError> {
        use gex_sync::atomic::Ordering;
        let me = self.me;
        let l = &self.layouts[me];
        let e = index as usize;
        if e < l.eps || e >= l.slots {
            return Err(ConduitError::Contract(format!(
                "smp: open_endpoint({index}) outside the runtime slots {}..{}",
                l.eps, l.slots
            )));
        }
        let m = &self.maps[me];
        m.state(l, e)
            .compare_exchange(
                region::UNUSED,
                region::OPENING,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .map_err(|_| {
                ConduitError::Contract(format!("smp: endpoint {index} was opened before"))
            })?;
        // SAFETY: the doorbell slot is inside this rank's mapping, 64-byte aligned, and
        // unused: no sender touches a slot before reading `OPEN`, stored below.
        unsafe { Doorbell::init_in_place(m.at(l.bell(e)).cast()) };
        // SAFETY: initialised just above, inside the mapping.
        let bell = unsafe { &*m.at(l.bell(e)).cast::<Doorbell>() };
        bell.set_may_block(self.may_block);
        for g in 0..self.total {
            for reply in [false, true] {
                // SAFETY: the ring control block is inside the mapping, aligned as in
                // `region::create`; nobody uses it before `OPEN` is published.
                unsafe { ring::RingCtl::init_in_place(m.at(l.ring(e, g, reply)).cast()) };
            }
        }
        m.state(l, e).store(region::OPEN, Ordering::Release);
        Ok(self.make_ep(me, e))
    }
}

/// The smp conduit as the near part of a hybrid conduit (gex-conduit-hybrid): in a job
/// that spans several hosts, the ranks of one host talk through exactly this conduit's
/// mechanisms (one `memfd` region per rank mapped by every rank of its host, an SPSC
/// request ring and reply ring per ordered endpoint pair, futex doorbells, auxiliary
/// areas; nothing ever named in `/dev/shm`), and each endpoint's segment, inside the
/// shared region, is also the far conduit's segment (registered with its network).
///
/// The endpoints serve the ranks of this host only; addressing a rank of another host
/// through them is a caller bug (checked in debug builds). Settings as for the smp
/// conduit: `GEX_SMP_RING_SIZE`, `GEX_SMP_MAX_MEDIUM`.
// SAFETY: `is_near`/`near_ranks` are the ranks of this host in the layout, exactly the
// ones the endpoints map (`open_near` opens the same regions as `open`).
unsafe impl NearConduit for Smp {
    /// Collective over **every** rank of the job, on every host (one bootstrap exchange
    /// and one barrier), including ranks alone on their host (they get rings to
    /// themselves). Errors as [`Conduit::open`] (`InitError::Config` naming `GEX_SMP_*`,
    /// `InitError::Os` for a failed mapping).
    fn open_near(
        boot: &mut dyn Bootstrap,
        params: &OpenParams<'_>,
    ) -> Result<(Arc<Smp>, Vec<SmpEp>), InitError> {
        Smp::open_node(boot, params)
    }

    #[inline(always)]
    fn is_near(&self, rank: u32) -> bool {
        self.is_neighbour(rank)
    }

    fn near_ranks(&self) -> &[u32] {
        self.neighbours()
    }
}

// SAFETY: as for `Smp` (see there and the module's `# Safety`); in-place buffers are ring
// reservations (Medium) or the range of the destination segment the core checked
// (Long), used by no one else until commit or cancel.
unsafe impl ConduitEp for SmpEp {
    fn index(&self) -> EpIndex {
        self.index
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities::NP_IN_PLACE
            | Capabilities::SHARED_MEMORY
            | Capabilities::BLOCKING_WAIT
            | Capabilities::RUNTIME_ENDPOINTS
    }
    /// This endpoint's limits, with Medium payloads also bounded by what `dst`'s rings
    /// hold (a neighbour may run with smaller rings: `GEX_SMP_RING_SIZE` is per rank),
    /// so the limits of two neighbours are symmetric and a Medium within them always
    /// fits the ring it goes through.
    #[inline]
    fn limits(&self, dst: EpAddr) -> Limits {
        let mut l = self.limits;
        let li = self.conduit.local_of.get(dst.rank as usize).copied();
        if let Some(&theirs) = li.and_then(|li| self.conduit.max_medium.get(li as usize)) {
            l.max_medium = l.max_medium.min(theirs);
        }
        l
    }
    fn local_segment(&self) -> (NonNull<u8>, usize) {
        (self.rx.seg.base.0, self.rx.seg.len)
    }
    fn peer_segment(&self, dst: EpAddr) -> Option<(NonNull<u8>, usize)> {
        if !self.conduit.has(dst) {
            return None;
        }
        let s = self.tx.segs[self.dst_g(dst)];
        Some((s.base.0, s.len))
    }
    /// One `Acquire` load of the slot's state word for a slot made at run time
    /// (`OPEN`, or `NoEndpoint` naming the state); `Ok` for an endpoint made at init
    /// and for an address this conduit does not serve (another host's, in a hybrid
    /// job: the far part's to say).
    #[inline]
    fn peer_open(&self, dst: EpAddr) -> Result<(), ConduitError> {
        let c = &self.conduit;
        let Some(&li) = c.local_of.get(dst.rank as usize) else {
            return Ok(());
        };
        if li == NOT_LOCAL {
            return Ok(());
        }
        let l = &c.layouts[li as usize];
        let de = dst.ep as usize;
        if de < l.eps || de >= l.slots {
            return Ok(());
        }
        c.slot_open(li as usize, dst)
    }

    // Always inlined: with the ofi feature on (the hybrid conduit calls it too) the
    // compiler kept it out of line, and the short AM flood's sender then bound the
    // flood in this VM's slow state: 0.054-0.056 µs per message against 0.046-0.049
    // inlined and 0.048-0.053 in the build before issue 12 (gex-perf am --test
    // am_short_flood, alternated runs).
    #[inline(always)]
    fn inject(&mut self, msg: &OutMsg<'_>, _imm: bool) -> Result<Injected, ConduitError> {
        let g = self.tx.g(msg.dst());
        // A slot made at run time may have closed since the first contact: one
        // `Acquire` load of its state word (a line its owner writes twice in its life).
        if self.tx.runtime[g] {
            self.tx.check_open(g)?;
        }
        let seg = self.tx.segs[g];
        // Requests kept for this destination go first (one load when there are none).
        if (self.tx.novf == 0 || self.tx.ovf[g].is_empty()) && put(self.tx.req(g)?, msg, seg) {
            self.tx.bells[g].get().ring();
            Ok(Injected::Sent)
        } else {
            // A copy for the slow path: the caller's message, built field by field
            // (`inject` is inlined into the request), stays out of memory when its
            // address does not leave this function.
            let kept = *msg;
            self.tx.inject_slow(g, &kept)
        }
    }

    /// Drains the rings (replies first).
    ///
    /// # Panics
    /// On a corrupt ring record (naming the sender), and when a neighbour has ended
    /// (the clock looked at every 4 empty polls or 4096 busy ones, a check at most every
    /// 100 ms; see the crate docs).
    #[inline]
    fn poll<D: Deliver>(&mut self, d: &mut D, budget: usize) -> usize {
        let n = self.drain_rings(d, budget);
        if self.watch.tick(n) {
            self.check_peers();
        }
        n
    }

    fn has_outgoing(&self) -> bool {
        self.tx.npending > 0 || self.tx.novf > 0
    }

    fn has_incoming(&self) -> bool {
        let rx = &self.rx;
        rx.contacted()
            || rx
                .active
                .iter()
                .any(|&g| rx.rep[g].has_data() || rx.req[g].has_data())
    }

    fn block(&mut self, timeout: Duration) {
        // About to sleep: a dead neighbour would never ring us.
        self.check_peers();
        if self.tx.npending > 0 || self.tx.novf > 0 {
            // Our deferred replies and kept requests wait for the peer, which does not
            // ring us: stay awake.
            std::thread::yield_now();
            return;
        }
        let rx = &self.rx;
        let bell = self.bell.get();
        let seen = self.seen;
        bell.wait_until_timeout(WaitPolicy::Block, timeout, || {
            bell.epoch() != seen
                || rx.contacted()
                || rx
                    .active
                    .iter()
                    .any(|&g| rx.rep[g].has_data() || rx.req[g].has_data())
        });
        self.seen = bell.epoch();
    }

    fn sleeper(&mut self) -> Option<gex_core::spi::Sleeper> {
        // From now on senders ring this doorbell for every message (they read
        // `may_block` before each ring); a sender that read `false` just before this
        // store can delay the thread by at most its safety-net timeout.
        self.bell.get().set_may_block(true);
        let keep: Arc<dyn std::any::Any + Send + Sync> = self.conduit.clone();
        // SAFETY: the doorbell lies in this rank's region, mapped by the `Smp` that
        // `keep` keeps alive.
        Some(unsafe { gex_core::spi::Sleeper::new(self.bell.0, keep) })
    }

    fn describe(&self) -> String {
        let mut lines = Vec::new();
        for (g, p) in self.tx.req.iter().enumerate() {
            let (Some(p), Some(q)) = (p, &self.tx.rep[g]) else {
                continue;
            };
            let (rq, rp) = (p.in_flight(), q.in_flight());
            let deferred = self.tx.pending[g].len();
            let kept = self.tx.ovf[g].len();
            if rq + rp > 0 || deferred > 0 || kept > 0 {
                lines.push(format!(
                    "to {}: {rq} request bytes and {rp} reply bytes not yet consumed (ring of {}), {deferred} replies deferred, {kept} requests kept ({} bytes)",
                    self.rx.src[g],
                    p.capacity(),
                    self.tx.ovf_bytes[g]
                ));
            }
        }
        let rx = &self.rx;
        let waiting = rx
            .active
            .iter()
            .map(|&g| rx.req[g].has_data() as usize + rx.rep[g].has_data() as usize)
            .sum::<usize>();
        if waiting > 0 {
            lines.push(format!("{waiting} incoming rings hold unread records"));
        }
        lines.extend(self.conduit.peers.describe());
        lines.join("\n")
    }

    fn aux(&self, dst: EpAddr) -> Option<NonNull<u8>> {
        if !self.conduit.has(dst) || self.conduit.layouts.first().is_none_or(|l| l.aux_len == 0) {
            return None;
        }
        Some(self.tx.aux[self.dst_g(dst)].0)
    }

    fn wake(&self, dst: EpAddr) {
        if self.conduit.has(dst) {
            let g = self.dst_g(dst);
            // A slot made at run time has a doorbell once it is open.
            if !self.tx.runtime[g] || self.tx.check_open(g).is_ok() {
                self.tx.bells[g].get().wake();
            }
        }
    }

    fn prepare(&mut self, req: &PrepareReq, _imm: bool) -> Result<Prepare, ConduitError> {
        let (dst, max_len) = (req.dst(), req.max_len());
        let g = self.tx.g(dst);
        if self.tx.runtime[g] {
            self.tx.check_open(g)?;
        }
        match req.category() {
            Category::Short => Ok(Prepare::Bounce),
            Category::Medium => {
                let body_len = NP_ARGS_AREA + max_len;
                if self.tx.novf != 0 && !self.tx.ovf[g].is_empty() {
                    self.tx.flush_ovf(g);
                }
                if !self.tx.ovf[g].is_empty() {
                    // Behind requests kept for this destination: built in the core's
                    // bounce buffer and injected, which keeps the order.
                    return Ok(if self.tx.ovf_room(g, body_len) {
                        Prepare::Bounce
                    } else {
                        Prepare::WouldBlock
                    });
                }
                let Some(mut r) = self.tx.req(g)?.reserve(body_len) else {
                    return Ok(if self.tx.ovf_room(g, body_len) {
                        Prepare::Bounce
                    } else {
                        Prepare::WouldBlock
                    });
                };
                let body = r.body_ptr();
                drop(r); // re-reserved identically at commit: nothing else uses this ring meanwhile
                self.np = Some(Np {
                    g,
                    category: Category::Medium,
                    body,
                    body_len,
                });
                // SAFETY: the reservation covers NP_ARGS_AREA + max_len bytes from `body`.
                let p = unsafe { body.add(NP_ARGS_AREA) };
                Ok(Prepare::InPlace(NonNull::slice_from_raw_parts(
                    NonNull::new(p).expect("non-null"),
                    max_len,
                )))
            }
            // A Long's place is the destination's segment, which other ranks (and its
            // owner) may write at any time: it is never handed out to be filled (the
            // core would make it a `&mut [u8]`). The core builds the payload in its
            // bounce buffer and injects it; say now whether the ring has room.
            Category::Long => {
                let body_len = NP_ARGS_AREA + 16;
                if self.tx.novf != 0 && !self.tx.ovf[g].is_empty() {
                    self.tx.flush_ovf(g);
                }
                let ring_room =
                    self.tx.ovf[g].is_empty() && self.tx.req(g)?.reserve(body_len).is_some();
                if ring_room || self.tx.ovf_room(g, body_len) {
                    Ok(Prepare::Bounce)
                } else {
                    Ok(Prepare::WouldBlock)
                }
            }
        }
    }

    fn commit(&mut self, msg: &OutMsg<'_>) -> Result<(), ConduitError> {
        let np = self
            .np
            .take()
            .ok_or_else(|| ConduitError::Contract("smp: commit without prepare".into()))?;
        let g = np.g;
        if g != self.tx.g(msg.dst()) || np.category != msg.category() {
            return Err(ConduitError::Contract(format!(
                "smp: commit of a {:?} to {} does not match the prepared {:?}",
                msg.category(),
                msg.dst(),
                np.category
            )));
        }
        let mut r = self.tx.req[g]
            .as_mut()
            .expect("connected at prepare")
            .reserve(np.body_len)
            .expect("space reserved at prepare");
        let body = r.body_ptr();
        assert_eq!(
            body, np.body,
            "gex smp: negotiated-payload reservation moved"
        );
        // SAFETY: the first NP_ARGS_AREA bytes of the reservation hold the args. Plain:
        // the reservation is this producer's until the commit's release.
        unsafe {
            std::ptr::copy_nonoverlapping(
                msg.args().as_ptr().cast::<u8>(),
                body,
                msg.args().len() * 4,
            )
        };
        r.commit(
            user_word(msg) | U_FIXED_ARGS,
            NP_ARGS_AREA + msg.payload().len(),
        );
        self.tx.bells[g].get().ring();
        Ok(())
    }

    fn cancel(&mut self) {
        self.np = None;
    }
}
